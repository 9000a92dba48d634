#!/usr/bin/env bash
# The test command (README, .ci/run): set up, C unit tests (plain and under ASan+UBSan), then pytest.
# Fast default set; `--full` or TORCH_TPU_TEST_FULL=1 adds the heavier sets. Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTEST_ARGS=()
for arg in "$@"; do
  case "$arg" in
    --full) export TORCH_TPU_TEST_FULL=1 ;;
    *) PYTEST_ARGS+=("$arg") ;;
  esac
done
export TORCH_TPU_TEST_FULL=${TORCH_TPU_TEST_FULL:-0}

scripts/setup.sh
echo "== C unit tests"
make -j2 test-c
echo "== C unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
make -j2 test-c-asan
echo "== pytest (TORCH_TPU_TEST_FULL=$TORCH_TPU_TEST_FULL)"
rc=0
.venv/bin/python -m pytest -q tests/ ${PYTEST_ARGS[@]+"${PYTEST_ARGS[@]}"} || rc=$?
if [ "$rc" -eq 5 ]; then
  echo "test.sh: pytest collected no tests; that is a failure" >&2
  exit 1
fi
exit "$rc"
