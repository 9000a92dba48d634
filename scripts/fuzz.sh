#!/usr/bin/env bash
# The differential fuzzer (tests/fuzz.py) over a range of seeds, in every eager mode by default:
#   scripts/fuzz.sh 0:2000                      # seeds [0, 2000), strict, debug and defer_and_fuse
#   scripts/fuzz.sh 0:500 --mode strict --fill  # fresh device memory filled (TORCH_TPU_ALLOC_FILL=165)
#   scripts/fuzz.sh 0:500 --asan                # the runtime built with ASan+UBSan (make runtime-asan)
# Other options go to `python -m tests.fuzz` (--stmts, --no-minimize, --max-failures).
# Exit status 1 when a program differs from PyTorch CPU; each failure prints its reproducer.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
seeds=${1:-0:200}
shift || true
args=()
asan=0
for a in "$@"; do
  case "$a" in
    --asan) asan=1 ;;
    --fill) export TORCH_TPU_ALLOC_FILL=165 ;;
    *) args+=("$a") ;;
  esac
done
if [[ $asan == 1 ]]; then
  make -j2 runtime-asan >/dev/null
  export LD_LIBRARY_PATH="$PWD/build/asan-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  # python and torch leak by design; stop at the first UB report so the seed names it
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
exec "$PY" -m tests.fuzz --seeds "$seeds" "${args[@]}"
