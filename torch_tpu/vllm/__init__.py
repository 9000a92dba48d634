"""vLLM on the tpu device: the platform plugin vLLM finds through the `vllm.platform_plugins` entry point
(pyproject.toml), so `vllm serve MODEL` and `vllm.LLM(MODEL)` run on tpu unchanged. Its pieces: the
platform (platform.py), the worker and model runner (worker.py), the attention backend (attention.py)
and the serving kernels' torch ops (ops.py; the kernels are C, runtime/ops/serve).

TORCH_TPU_VLLM=0 disables the plugin (vLLM then picks another platform); VLLM_PLUGINS selects plugins
by name as vLLM documents ("torch_tpu" is this one's name).
"""
import os


def register():
    """The entry point: the platform's qualified name when the tpu device is present, else None."""
    if os.environ.get("TORCH_TPU_VLLM", "1") == "0":
        return None
    try:
        import torch
        import torch_tpu  # noqa: F401  (autoload normally did this; a failed autoload raises here)
        if not (hasattr(torch, "tpu") and torch.tpu.is_available()):
            return None
    except Exception:
        return None
    return "torch_tpu.vllm.platform.TpuPlatform"
