"""vLLM layers whose tpu forward is one of our C kernels, registered with vLLM's out-of-tree custom-op
registry (CustomOp.register_oot): vLLM builds these classes in place of its own on the tpu platform.
Imported by the platform's import_kernels, before any model is built.
"""
import torch

from vllm.model_executor.custom_op import CustomOp
from vllm.model_executor.layers.activation import SiluAndMul
from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

from torch_tpu.vllm import ops  # noqa: F401  (the torch_tpu:: ops)


@CustomOp.register_oot(name="RotaryEmbedding")
class TpuRotaryEmbedding(RotaryEmbedding):
    """Rotary embedding in place through torch_tpu::rotary_embedding (runtime/ops/serve/rotary.c): one
    pass per token instead of the dozen generic ops of vLLM's native version (a decode profile's largest
    model-side cost)."""

    def forward_oot(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None):
        if query.device.type != "tpu":
            return self.forward_native(positions, query, key)
        cache = self._match_cos_sin_cache_dtype(query)
        n = positions.numel()
        q = query.view(query.shape[0], -1)
        k = key.view(key.shape[0], -1) if key is not None else None
        torch.ops.torch_tpu.rotary_embedding(positions.flatten(), q[:n], k[:n] if k is not None else None, cache,
                                             self.head_size, self.is_neox_style)
        return query, key


@CustomOp.register_oot(name="SiluAndMul")
class TpuSiluAndMul(SiluAndMul):
    """silu(x[..., :d]) * x[..., d:] through torch_tpu::silu_and_mul (runtime/ops/serve/layers.c): one
    pass instead of the native version's silu, then multiply (and their intermediate)."""

    def forward_oot(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "tpu" or x.stride(-1) != 1 or x.dtype not in (torch.float32, torch.bfloat16,
                                                                           torch.float16):
            return self.forward_native(x)
        out = torch.empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=x.dtype, device=x.device)
        torch.ops.torch_tpu.silu_and_mul(out, x)
        return out
