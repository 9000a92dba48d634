"""Our C kernels as implementations of vLLM's IR ops (vllm.ir: an op with per-provider implementations,
dispatched by the priority the platform gives, TpuPlatform.get_default_ir_op_priority): RMSNorm and
RMSNorm after a residual add, one pass per row (runtime/ops/serve/layers.c) instead of the eight generic
ops of the native versions. Where an implementation does not take the arguments (a variance_size
override, a row that is not contiguous, a weight of another dtype), vLLM's dispatch falls through to
"native". Imported by the platform's import_ir_kernels.
"""
import torch
from torch import Tensor

from vllm import ir

from torch_tpu.vllm import ops  # noqa: F401  (the torch_tpu:: ops)

PROVIDER = "tpu"
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _rows(t: torch.Tensor) -> bool:
    return t.device.type == "tpu" and t.dtype in _FLOATS and t.dim() >= 1 and t.stride(-1) == 1


def _takes(x, weight, variance_size) -> bool:
    return (variance_size is None and _rows(x)
            and (weight is None or (weight.dim() == 1 and weight.dtype == x.dtype and weight.device == x.device)))


@ir.ops.rms_norm.register_impl(
    PROVIDER, supports_args=lambda x, weight, epsilon, variance_size=None: _takes(x, weight, variance_size))
def rms_norm(x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None) -> Tensor:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    torch.ops.torch_tpu.rms_norm(out, x, weight, float(epsilon))
    return out


@ir.ops.fused_add_rms_norm.register_impl(
    PROVIDER, inplace=True,
    supports_args=lambda x, x_residual, weight, epsilon, variance_size=None: (
        _takes(x, weight, variance_size) and _rows(x_residual) and x_residual.shape == x.shape
        and x_residual.dtype == x.dtype))
def fused_add_rms_norm(x: Tensor, x_residual: Tensor, weight: Tensor | None, epsilon: float,
                       variance_size: int | None = None) -> tuple[Tensor, Tensor]:
    torch.ops.torch_tpu.fused_add_rms_norm(x, x_residual, weight, float(epsilon))
    return x, x_residual
