#!/usr/bin/env bash
# The demonstration: set up, then examples/hello_tpu.py (README's first example) on the vTPU and a
# short GPT training run on tpu with per-step progress, compared at the end with the same run on the CPU;
# then the default serving model, a small Llama trained on tpu from the standard library's sources
# (examples/train_tiny_llama.py, into build/tiny_llama: a few minutes the first time, reused after), served
# with `vllm serve` on tpu and queried with the openai client (examples/serve_openai.py; skipped without vLLM).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo
echo "== examples/hello_tpu.py"
.venv/bin/python examples/hello_tpu.py
echo
echo "== examples/train_gpt.py"
.venv/bin/python examples/train_gpt.py "$@"
echo
echo "== examples/ddp_tpu.py: DDP on 2 vTPU chips (torchrun, one process per chip)"
TORCH_TPU_TOPOLOGY=2 TORCH_TPU_NUM_THREADS=1 .venv/bin/torchrun --standalone --nproc-per-node=2 examples/ddp_tpu.py
echo
if .venv/bin/python -c "import vllm, openai" 2>/dev/null; then
  echo "== examples/train_tiny_llama.py: the default serving model, trained on tpu (kept in build/tiny_llama)"
  .venv/bin/python examples/train_tiny_llama.py build/tiny_llama --reuse --log-every 100
  echo
  echo "== examples/serve_openai.py: vllm serve on tpu, queried with the openai client"
  .venv/bin/python examples/serve_openai.py build/tiny_llama
else
  echo "== serving skipped: vLLM is not installed (scripts/setup.sh installs it unless TORCH_TPU_SKIP_VLLM=1)"
fi
