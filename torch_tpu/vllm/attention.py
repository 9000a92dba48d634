"""vLLM's attention backend on the tpu device: decoder attention over vLLM's paged KV cache through the
C kernels of runtime/ops/serve (torch_tpu.vllm.ops), and encoder-only attention (embedding models)
through scaled_dot_product_attention, which on tpu is one fused C kernel.

The cache of a layer is vLLM 0.32's logical [num_blocks, kv_heads, block_size, 2 * head_size] (keys,
then values, along the last dim), laid out head-major inside a block (KVCacheLayout.LBHNC): for one
block and kv head, the block's rows are contiguous, which is what the decode kernel streams. With
kv_cache_dtype "fp8"/"fp8_e4m3"/"fp8_e5m2" the cache is vLLM's uint8 tensor of 8-bit float codes with the
layer's per-tensor k/v scales; the C kernels quantize on write and dequantize as they read.
"""
from dataclasses import dataclass
from typing import ClassVar

import torch

from vllm.v1.attention.backend import (AttentionBackend, AttentionImpl, AttentionMetadataBuilder,
                                       AttentionType, CommonAttentionMetadata, MultipleOf)
from vllm.v1.kv_cache_layout import KVCacheLayout
from vllm.utils.torch_utils import is_quantized_kv_cache

from torch_tpu.vllm import ops


class TpuAttentionBackend(AttentionBackend):
    forward_includes_kv_cache_update: bool = False
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16, torch.float32]
    supported_kv_cache_dtypes: ClassVar[list] = ["auto", "float16", "bfloat16", "float32", "fp8", "fp8_e4m3",
                                                 "fp8_e5m2"]

    @staticmethod
    def get_name() -> str:
        # vLLM's registry has no entry for an out-of-tree backend; the selector accepts "CUSTOM".
        return "CUSTOM"

    @staticmethod
    def get_impl_cls():
        return TpuAttentionImpl

    @staticmethod
    def get_builder_cls():
        return TpuAttentionMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        return [MultipleOf(1)]

    @classmethod
    def supported_kv_cache_layouts(cls):
        return (KVCacheLayout.LBHNC,)

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_non_causal(cls) -> bool:
        return False

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type in (AttentionType.DECODER, AttentionType.ENCODER_ONLY)


@dataclass
class TpuAttentionMetadata:
    num_actual_tokens: int
    max_query_len: int
    query_start_loc: torch.Tensor      # [num_reqs + 1] int32, on tpu
    query_start_loc_cpu: torch.Tensor  # the same on the host (encoder-only attention splits by it)
    seq_lens: torch.Tensor             # [num_reqs] int32, on tpu
    block_table: torch.Tensor          # [num_reqs, max_blocks] int32, on tpu
    slot_mapping: torch.Tensor         # [num_tokens] int64, on tpu
    causal: bool = True


class TpuAttentionMetadataBuilder(AttentionMetadataBuilder[TpuAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> TpuAttentionMetadata:
        m = common_attn_metadata
        if isinstance(m.causal, torch.Tensor):
            raise NotImplementedError("tpu attention: per-request causality (a tensor `causal`) is not "
                                      "supported yet")
        n = m.num_reqs
        return TpuAttentionMetadata(
            num_actual_tokens=m.num_actual_tokens, max_query_len=m.max_query_len,
            query_start_loc=m.query_start_loc[:n + 1], query_start_loc_cpu=m.query_start_loc_cpu[:n + 1],
            seq_lens=m.seq_lens[:n], block_table=m.block_table_tensor[:n],
            slot_mapping=m.slot_mapping, causal=bool(m.causal))


class TpuAttentionImpl(AttentionImpl[TpuAttentionMetadata]):
    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int | None = None,
                 alibi_slopes: list[float] | None = None, sliding_window: int | None = None,
                 kv_cache_dtype: str = "auto", logits_soft_cap: float | None = None,
                 attn_type: str = AttentionType.DECODER, kv_sharing_target_layer_name: str | None = None,
                 **kwargs) -> None:
        if is_quantized_kv_cache(kv_cache_dtype) and kv_cache_dtype not in ops.FP8_FORMATS:
            raise NotImplementedError(f"tpu attention: kv_cache_dtype={kv_cache_dtype!r} is not supported yet "
                                      f"(auto, fp8, fp8_e4m3, fp8_e5m2)")
        if attn_type not in (AttentionType.DECODER, AttentionType.ENCODER_ONLY):
            raise NotImplementedError(f"tpu attention: attention type {attn_type!r} is not supported yet")
        if attn_type == AttentionType.ENCODER_ONLY and alibi_slopes is not None:
            raise NotImplementedError("tpu attention: ALiBi in encoder-only attention is not supported yet")
        if kv_sharing_target_layer_name is not None:
            raise NotImplementedError("tpu attention: KV sharing between layers is not supported yet")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.sliding_window = int(sliding_window) if sliding_window else 0
        self.logits_soft_cap = float(logits_soft_cap) if logits_soft_cap else 0.0
        self.kv_cache_dtype = kv_cache_dtype
        # float32 slopes, one per query head; moved to the query's device on first use
        self.alibi_slopes = None if alibi_slopes is None else torch.tensor(alibi_slopes, dtype=torch.float32)
        if self.alibi_slopes is not None and self.alibi_slopes.shape != (num_heads,):
            raise ValueError(f"tpu attention: {self.alibi_slopes.numel()} ALiBi slopes for {num_heads} heads")
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name

    @staticmethod
    def _cache_view(kv_cache: torch.Tensor) -> torch.Tensor:
        # logical [blocks, kv_heads, block_size, 2D] -> the kernels' [blocks, block_size, kv_heads, 2D]
        return kv_cache.transpose(1, 2)

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping) -> None:
        if self.attn_type == AttentionType.ENCODER_ONLY:
            return
        n = slot_mapping.shape[0]
        ops.reshape_and_cache(key[:n], value[:n], self._cache_view(kv_cache), slot_mapping, self.kv_cache_dtype,
                              layer._k_scale_float, layer._v_scale_float)

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output,
                output_scale=None, output_block_scale=None):
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("tpu attention: fused output quantization is not supported yet")
        if attn_metadata is None:  # the profiling run
            return output.fill_(0)
        n = attn_metadata.num_actual_tokens
        if self.attn_type == AttentionType.ENCODER_ONLY:
            return self._forward_encoder(query, key, value, attn_metadata, output)
        if self.alibi_slopes is not None and self.alibi_slopes.device != query.device:
            self.alibi_slopes = self.alibi_slopes.to(query.device)
        ops.paged_attention(output[:n], query[:n], self._cache_view(kv_cache), attn_metadata.query_start_loc,
                            attn_metadata.seq_lens, attn_metadata.block_table, self.scale,
                            self.sliding_window, self.logits_soft_cap, self.alibi_slopes, self.kv_cache_dtype,
                            layer._k_scale_float, layer._v_scale_float)
        return output

    def _forward_encoder(self, query, key, value, m, output):
        # Bidirectional attention within each sequence, no cache: one SDPA call per sequence.
        starts = m.query_start_loc_cpu.tolist()
        g = self.num_heads // self.num_kv_heads
        for s in range(len(starts) - 1):
            a, b = starts[s], starts[s + 1]
            if a == b:
                continue
            q = query[a:b].transpose(0, 1)
            k = key[a:b].transpose(0, 1)
            v = value[a:b].transpose(0, 1)
            if g > 1:
                k = k.repeat_interleave(g, dim=0)
                v = v.repeat_interleave(g, dim=0)
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=self.scale)
            output[a:b].copy_(o.transpose(0, 1))
        return output
