"""The serving kernels as torch ops: schemas in the ``torch_tpu`` namespace, whose tpu calls reach the
C kernels of runtime/ops/serve (paged.c) through the one boxed fallback (the op table names them with their namespace). Importing this module defines them; torch_tpu.vllm's attention backend calls them.

Layouts are vLLM 0.32's: a layer's KV cache viewed as [num_blocks, block_size, kv_heads, 2 * head_size]
(keys in the first half of the last dim, values in the second), block tables [num_seqs, max_blocks] of
block ids, query_start_loc [num_seqs + 1] and seq_lens [num_seqs] (int32 or int64, on the device).
An FP8 cache (kv_cache_dtype "fp8" = "fp8_e4m3", or "fp8_e5m2") is a uint8 tensor of 8-bit float codes
holding key / k_scale and value / v_scale (per-tensor scales, vLLM's layer._k_scale_float/_v_scale_float).
"""
import torch

_lib = torch.library.Library("torch_tpu", "DEF")  # kept alive for the process
_lib.define(
    "paged_attention(Tensor(a!) out, Tensor query, Tensor kv_cache, Tensor query_start_loc, Tensor seq_lens, "
    "Tensor block_table, float scale, int sliding_window=0, float softcap=0.0, Tensor? alibi_slopes=None, "
    "str kv_cache_dtype='auto', float k_scale=1.0, float v_scale=1.0) -> ()")
_lib.define("reshape_and_cache(Tensor key, Tensor value, Tensor(a!) kv_cache, Tensor slot_mapping, "
            "str kv_cache_dtype='auto', float k_scale=1.0, float v_scale=1.0) -> ()")
_lib.define("rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, Tensor cos_sin_cache, "
            "int head_size, bool is_neox) -> ()")
_lib.define("compute_slot_mapping(Tensor(a!) slot_mapping, Tensor query_start_loc, Tensor positions, "
            "Tensor block_table, int block_size, int num_tokens) -> ()")


# Model layers (runtime/ops/serve/layers.c): vLLM's RMSNorm, RMSNorm after a residual add (in place, as
# vLLM's fused_add_rms_norm), SiLU-and-mul.
_lib.define("rms_norm(Tensor(a!) out, Tensor x, Tensor? weight, float epsilon) -> ()")
_lib.define("fused_add_rms_norm(Tensor(a!) x, Tensor(b!) residual, Tensor? weight, float epsilon) -> ()")
_lib.define("silu_and_mul(Tensor(a!) out, Tensor x) -> ()")
# The sampler's top-k / top-p filtering (runtime/ops/serve/sample.c), in place on float32 logits.
_lib.define("top_k_top_p(Tensor(a!) logits, Tensor? k, Tensor? p) -> ()")
# Its penalties and min-p (in place on float32 logits) and the draw (token ids of argmax probs / q).
_lib.define("apply_penalties(Tensor(a!) logits, Tensor prompt_tokens, Tensor output_tokens, Tensor presence, "
            "Tensor frequency, Tensor repetition) -> ()")
_lib.define("min_p(Tensor(a!) logits, Tensor min_p) -> ()")
_lib.define("sample_exponential(Tensor(a!) out, Tensor probs, Tensor q) -> ()")
# the same draw with the noise drawn inside the kernel from the generator (the default one when None)
_lib.define("sample_exponential_noise(Tensor(a!) out, Tensor probs, Generator? generator=None) -> ()")
for _name in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "top_k_top_p", "apply_penalties", "min_p",
              "sample_exponential", "sample_exponential_noise"):
    torch.library.register_fake(f"torch_tpu::{_name}")(lambda *args, **kwargs: None)


# Speculative decoding's rejection sampling (runtime/ops/serve/spec.c), vLLM's four Triton kernels.
_lib.define("spec_expand(Tensor(a!) output, Tensor input, Tensor cu_num_tokens, Scalar replace_from, "
            "Scalar replace_to) -> ()")
_lib.define("rejection_greedy_sample(Tensor(a!) output, Tensor cu_num_draft_tokens, Tensor draft_token_ids, "
            "Tensor target_argmax, Tensor bonus_token_ids, Tensor? is_greedy) -> ()")
_lib.define("rejection_random_sample(Tensor(a!) output, Tensor cu_num_draft_tokens, Tensor draft_token_ids, "
            "Tensor? draft_probs, Tensor target_probs, Tensor bonus_token_ids, Tensor recovered_token_ids, "
            "Tensor uniform_probs, Tensor is_greedy) -> ()")
_lib.define("sample_recovered_tokens(Tensor(a!) output, Tensor cu_num_draft_tokens, Tensor draft_token_ids, "
            "Tensor? draft_probs, Tensor target_probs, Tensor inv_q) -> ()")
for _name in ("spec_expand", "rejection_greedy_sample", "rejection_random_sample", "sample_recovered_tokens"):
    torch.library.register_fake(f"torch_tpu::{_name}")(lambda *args, **kwargs: None)


# Neither op returns anything: the fallback asks PyTorch's meta functions for the (empty) outputs.
@torch.library.register_fake("torch_tpu::paged_attention")
def _paged_attention_fake(out, query, kv_cache, query_start_loc, seq_lens, block_table, scale,
                          sliding_window=0, softcap=0.0, alibi_slopes=None, kv_cache_dtype="auto", k_scale=1.0,
                          v_scale=1.0):
    return None


@torch.library.register_fake("torch_tpu::reshape_and_cache")
def _reshape_and_cache_fake(key, value, kv_cache, slot_mapping, kv_cache_dtype="auto", k_scale=1.0, v_scale=1.0):
    return None


@torch.library.register_fake("torch_tpu::rotary_embedding")
def _rotary_embedding_fake(positions, query, key, cos_sin_cache, head_size, is_neox):
    return None


@torch.library.register_fake("torch_tpu::compute_slot_mapping")
def _compute_slot_mapping_fake(slot_mapping, query_start_loc, positions, block_table, block_size, num_tokens):
    return None


def paged_attention(out, query, kv_cache, query_start_loc, seq_lens, block_table, scale,
                    sliding_window=0, softcap=0.0, alibi_slopes=None, kv_cache_dtype="auto", k_scale=1.0,
                    v_scale=1.0):
    """Writes causal attention of `query` [tokens, heads, head_size] over the paged cache into `out`;
    alibi_slopes [heads] (float32) adds slope * (key position - query position) to each score."""
    torch.ops.torch_tpu.paged_attention(out, query, kv_cache, query_start_loc, seq_lens, block_table,
                                        float(scale), int(sliding_window or 0), float(softcap or 0.0),
                                        alibi_slopes, kv_cache_dtype, float(k_scale), float(v_scale))
    return out


def reshape_and_cache(key, value, kv_cache, slot_mapping, kv_cache_dtype="auto", k_scale=1.0, v_scale=1.0):
    """Writes key/value [tokens, kv_heads, head_size] into the cache slots slot_mapping names
    (block * block_size + offset; negative: padding, skipped); an fp8 cache gets key / k_scale and
    value / v_scale rounded to nearest even, saturated to the format's largest finite value."""
    torch.ops.torch_tpu.reshape_and_cache(key, value, kv_cache, slot_mapping, kv_cache_dtype, float(k_scale),
                                          float(v_scale))


FP8_FORMATS = {"fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def fp8_quantize_reference(x, kv_cache_dtype, scale=1.0):
    """Plain PyTorch of an fp8 cache write: x / scale, saturated to the format's finite range, as uint8
    codes (PyTorch's float8 cast rounds to nearest even)."""
    f8 = FP8_FORMATS[kv_cache_dtype]
    lim = torch.finfo(f8).max
    return (x.float() / scale).clamp(-lim, lim).to(f8).view(torch.uint8)


def dequantize_kv_reference(kv_cache, kv_cache_dtype="auto", k_scale=1.0, v_scale=1.0):
    """The cache's values in float64: an fp8 cache's codes decoded by PyTorch's float8 dtype and scaled."""
    if kv_cache_dtype not in FP8_FORMATS:
        return kv_cache.double()
    kv = kv_cache.contiguous().view(FP8_FORMATS[kv_cache_dtype]).double()
    d = kv.shape[-1] // 2
    return torch.cat((kv[..., :d] * k_scale, kv[..., d:] * v_scale), dim=-1)


def paged_attention_reference(query, kv_cache, query_start_loc, seq_lens, block_table, scale,
                              sliding_window=0, softcap=0.0, alibi_slopes=None, kv_cache_dtype="auto",
                              k_scale=1.0, v_scale=1.0):
    """Plain PyTorch (any device, float64 math) of what paged_attention computes, for the tests: each
    sequence's keys gathered from its blocks, a full causal softmax per sequence."""
    D = query.shape[-1]
    kv = dequantize_kv_reference(kv_cache, kv_cache_dtype, k_scale, v_scale)
    bs = kv.shape[1]
    out = torch.zeros(query.shape, dtype=torch.float64, device=query.device)
    qsl, sl, bt = query_start_loc.tolist(), seq_lens.tolist(), block_table.tolist()
    hq, hkv = query.shape[1], kv.shape[2]
    for s in range(len(sl)):
        q0, q1, ctx = qsl[s], qsl[s + 1], sl[s]
        if q1 == q0:
            continue
        pos = torch.arange(ctx, device=query.device)
        blocks = torch.tensor([bt[s][p // bs] for p in range(ctx)], device=query.device)
        rows = kv[blocks, pos % bs]                                  # [ctx, hkv, 2D]
        k = rows[..., :D].repeat_interleave(hq // hkv, dim=1)        # [ctx, hq, D]
        v = rows[..., D:].repeat_interleave(hq // hkv, dim=1)
        q = query[q0:q1].double()                                    # [n, hq, D]
        scores = torch.einsum("nhd,khd->hnk", q, k) * scale
        if softcap:
            scores = softcap * torch.tanh(scores / softcap)
        qpos = torch.arange(ctx - (q1 - q0), ctx, device=query.device)
        if alibi_slopes is not None:
            scores = scores + alibi_slopes.double()[:, None, None] * (pos[None, :] - qpos[:, None])[None]
        mask = pos[None, :] > qpos[:, None]
        if sliding_window:
            mask |= pos[None, :] <= qpos[:, None] - sliding_window
        scores = scores.masked_fill(mask[None], float("-inf"))
        out[q0:q1] = torch.einsum("hnk,khd->nhd", torch.softmax(scores, dim=-1), v)
    return out.to(query.dtype)


def apply_top_k_top_p(logits, k, p):
    """vLLM's apply_top_k_top_p (vllm/v1/sample/ops/topk_topp_sampler.py) on tpu: logits below the
    k-th largest, then the smallest whose ascending cumulative probability stays at or below 1 - p,
    become -inf, in place, by selection instead of a sort (sample.c; ties at a threshold all stay).
    Other devices and dtypes take vLLM's PyTorch version."""
    if k is None and p is None:
        return logits
    if logits.device.type != "tpu" or logits.dtype != torch.float32 or logits.dim() != 2 or logits.stride(-1) != 1:
        from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch
        return apply_top_k_top_p_pytorch(logits, k, p)
    torch.ops.torch_tpu.top_k_top_p(logits, k, p)
    return logits


def _sampler_logits(logits):
    """Whether our sampler kernels take these logits: float32 [batch, vocab] rows on tpu."""
    return logits.device.type == "tpu" and logits.dtype == torch.float32 and logits.dim() == 2 and \
        logits.stride(-1) == 1


def apply_all_penalties(logits, prompt_token_ids, presence_penalties, frequency_penalties, repetition_penalties,
                        output_token_ids):
    """vLLM's apply_all_penalties (vllm/v1/sample/ops/penalties.py) on tpu: repetition, frequency and
    presence penalties in place, in vLLM's arithmetic, touching only the tokens each row has seen
    (sample.c). Other devices and dtypes take vLLM's PyTorch version."""
    if not _sampler_logits(logits):
        return VLLM_ORIGINALS["apply_all_penalties"](logits, prompt_token_ids, presence_penalties, frequency_penalties,
                                             repetition_penalties, output_token_ids)
    from vllm.utils.torch_utils import make_tensor_with_pad
    vocab = logits.shape[1]
    # vLLM's padding (vocab) and its speculative placeholders (-1) are both ids outside [0, vocab): skipped
    out = make_tensor_with_pad(output_token_ids, pad=vocab, device="cpu", dtype=torch.int64).reshape(
        logits.shape[0], -1).to(logits.device)
    torch.ops.torch_tpu.apply_penalties(logits, prompt_token_ids, out, presence_penalties, frequency_penalties,
                                        repetition_penalties)
    return logits


def min_p_apply(self, logits):
    """vLLM's MinPLogitsProcessor.apply on tpu: logits whose probability is below min_p times the row's
    largest become -inf, in place, compared in logit space (sample.c)."""
    if not self.min_p_count:
        return logits
    if not _sampler_logits(logits) or self.min_p.numel() != logits.shape[0]:
        return VLLM_ORIGINALS["MinPLogitsProcessor.apply"](self, logits)
    torch.ops.torch_tpu.min_p(logits, self.min_p.reshape(-1))
    return logits


def random_sample(probs, generators, use_fp64_gumbel=False):
    """vLLM's random_sample (vllm/v1/sample/ops/topk_topp_sampler.py) on tpu: the token with the largest
    probs / q for exponential noise q, in one pass with the noise drawn inside the kernel (sample.c)
    exactly as vLLM's q.exponential_() calls draw it on tpu: the default generator for every row unless
    each row has its own, then each seeded request's row again from its own generator, each call
    reserving the counters exponential_ would. So the tokens, and the generators' states after, are
    vLLM's."""
    if use_fp64_gumbel or not _sampler_logits(probs) or probs.stride(0) != probs.shape[1]:
        return VLLM_ORIGINALS["random_sample"](probs, generators, use_fp64_gumbel)
    out = torch.empty(probs.shape[0], dtype=torch.int64, device=probs.device)
    if len(generators) != probs.shape[0]:
        torch.ops.torch_tpu.sample_exponential_noise(out, probs, None)
    for i, generator in generators.items():
        torch.ops.torch_tpu.sample_exponential_noise(out[i:i + 1], probs[i:i + 1], generator)
    return out


# vLLM's own versions of what the platform replaced with the functions above (platform.py fills it): the
# path for logits our kernels do not take.
VLLM_ORIGINALS = {}


def compute_slot_mapping(slot_mapping, query_start_loc, positions, block_table, block_size, num_tokens):
    """slot_mapping[t] = block_table[s, pos // block_size] * block_size + pos % block_size for the tokens
    of each sequence s; -1 for slot_mapping[num_tokens:] (padding)."""
    torch.ops.torch_tpu.compute_slot_mapping(slot_mapping, query_start_loc, positions, block_table,
                                             int(block_size), int(num_tokens))


def vllm_slot_mapping_kernel(num_tokens, max_num_tokens, query_start_loc_ptr, positions_ptr, block_table_ptr,
                             block_table_stride, slot_mapping_ptr, KV_CACHE_BLOCK_SIZE, TOTAL_CP_WORLD_SIZE=1,
                             TOTAL_CP_RANK=0, CP_KV_CACHE_INTERLEAVE_SIZE=1, PAD_ID=-1, BLOCK_SIZE=1024):
    """vLLM's Triton ComputeSlotMappingKernel.kernel, with its parameters, on tpu (registered through
    vLLM's kernel override registry by the platform)."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("tpu platform: context parallelism is not supported yet")
    if PAD_ID != -1:
        raise NotImplementedError(f"tpu slot mapping: padding id {PAD_ID} (the kernel pads with -1)")
    compute_slot_mapping(slot_mapping_ptr[:max_num_tokens], query_start_loc_ptr, positions_ptr, block_table_ptr,
                         KV_CACHE_BLOCK_SIZE, num_tokens)


# vLLM's rejection-sampler Triton kernels (vllm/v1/sample/rejection_sampler.py), with their parameter
# names, on tpu; the platform registers them through vLLM's kernel override registry. Synthetic
# acceptance (a benchmarking mode of vLLM's) is not implemented.
def _flat(t):
    # Triton reads these as flat pointers; vLLM passes e.g. bonus tokens as [batch, 1]
    return None if t is None else t.reshape(-1)


def _no_synthetic(synthetic):
    if synthetic:
        raise NotImplementedError("tpu platform: synthetic speculative-decoding acceptance is not supported")


def vllm_expand_kernel(output_ptr, input_ptr, cu_num_tokens_ptr, replace_from, replace_to, MAX_NUM_TOKENS=None):
    torch.ops.torch_tpu.spec_expand(output_ptr, _flat(input_ptr), _flat(cu_num_tokens_ptr), replace_from, replace_to)


def vllm_rejection_greedy_sample_kernel(output_token_ids_ptr, cu_num_draft_tokens_ptr, draft_token_ids_ptr,
                                        target_argmax_ptr, bonus_token_ids_ptr, is_greedy_ptr, max_spec_len,
                                        uniform_probs_ptr=None, synthetic_conditional_rates_ptr=None,
                                        SYNTHETIC_MODE=False):
    _no_synthetic(SYNTHETIC_MODE)
    torch.ops.torch_tpu.rejection_greedy_sample(output_token_ids_ptr, _flat(cu_num_draft_tokens_ptr),
                                                _flat(draft_token_ids_ptr), _flat(target_argmax_ptr),
                                                _flat(bonus_token_ids_ptr), _flat(is_greedy_ptr))


def vllm_rejection_random_sample_kernel(output_token_ids_ptr, cu_num_draft_tokens_ptr, draft_token_ids_ptr,
                                        draft_probs_ptr, target_probs_ptr, bonus_token_ids_ptr,
                                        recovered_token_ids_ptr, uniform_probs_ptr, is_greedy_ptr, max_spec_len,
                                        vocab_size, synthetic_conditional_rates_ptr=None, NO_DRAFT_PROBS=False,
                                        SYNTHETIC_MODE=False):
    _no_synthetic(SYNTHETIC_MODE)
    torch.ops.torch_tpu.rejection_random_sample(output_token_ids_ptr, _flat(cu_num_draft_tokens_ptr),
                                                _flat(draft_token_ids_ptr), None if NO_DRAFT_PROBS else draft_probs_ptr,
                                                target_probs_ptr, _flat(bonus_token_ids_ptr),
                                                _flat(recovered_token_ids_ptr), _flat(uniform_probs_ptr),
                                                _flat(is_greedy_ptr))


def vllm_sample_recovered_tokens_kernel(output_token_ids_ptr, cu_num_draft_tokens_ptr, draft_token_ids_ptr,
                                        draft_probs_ptr, target_probs_ptr, inv_q_ptr, vocab_size, BLOCK_SIZE=None,
                                        NO_DRAFT_PROBS=False, USE_FP64_GUMBEL=False):
    torch.ops.torch_tpu.sample_recovered_tokens(_flat(output_token_ids_ptr), _flat(cu_num_draft_tokens_ptr),
                                                _flat(draft_token_ids_ptr), None if NO_DRAFT_PROBS else draft_probs_ptr,
                                                target_probs_ptr, inv_q_ptr)


# Speculative decoding's input bookkeeping for draft models (vllm/v1/spec_decode/utils.py): vLLM's four
# Triton kernels, with their parameter names, as PyTorch ops on the device (a few small elementwise and
# gather ops per draft step over [batch] or [tokens] rows; no host round trip). The platform registers
# them through vLLM's kernel override registry. Triton's grid is not passed to an override, so the
# number of programs is read from the output each program writes (its length is the grid's by vLLM's
# own slicing at each call site).
def vllm_eagle_step_slot_mapping_metadata_kernel(positions_ptr, block_table_ptr, block_table_stride, seq_lens_ptr,
                                                 out_clamped_positions_ptr, out_slot_mapping_ptr, block_size,
                                                 max_model_len, n_blocks_per_req, PAD_ID, batch_size):
    """One draft step: position + 1 (0 past max_model_len), its slot from the block table (PAD_ID past
    max_model_len and for the padding programs batch_size.. of out_slot_mapping), seq_lens + 1 (1 past
    max_model_len, at most max_model_len) in place."""
    b = int(batch_size)
    pos = positions_ptr[:b] + 1
    exceeds = pos >= max_model_len
    clamped = torch.where(exceeds, torch.zeros_like(pos), pos)
    block_number = torch.clamp(clamped // block_size, max=n_blocks_per_req - 1)
    rows = torch.arange(b, device=pos.device)
    block_id = block_table_ptr[:b][rows, block_number].to(torch.int64)
    slot = block_id * block_size + clamped % block_size
    slot = torch.where(exceeds, torch.full_like(slot, PAD_ID), slot)
    seq = seq_lens_ptr[:b]
    new_seq = torch.clamp(torch.where(exceeds, torch.ones_like(seq), seq + 1), max=max_model_len)
    out_clamped_positions_ptr[:b] = clamped.to(out_clamped_positions_ptr.dtype)
    out_slot_mapping_ptr[:b] = slot.to(out_slot_mapping_ptr.dtype)
    out_slot_mapping_ptr[b:] = PAD_ID
    seq_lens_ptr[:b] = new_seq.to(seq_lens_ptr.dtype)


def vllm_eagle_prepare_inputs_padded_kernel(cu_num_draft_tokens_ptr, valid_sampled_tokens_count_ptr,
                                            query_start_loc_gpu_ptr, token_indices_to_sample_ptr,
                                            num_rejected_tokens_gpu_ptr, num_reqs):
    """Per request: rejected = drafts + 1 - valid sampled tokens (0 without drafts); the token to sample
    from is the request's last query token minus the rejected ones."""
    n = int(num_reqs)
    cu = cu_num_draft_tokens_ptr[:n].to(torch.int64)
    drafts = cu - torch.cat([cu.new_zeros(1), cu[:-1]])
    rejected = drafts + 1 - valid_sampled_tokens_count_ptr[:n].to(torch.int64)
    rejected = torch.where(drafts > 0, rejected, torch.zeros_like(rejected))
    last = query_start_loc_gpu_ptr[1:n + 1].to(torch.int64) - 1
    token_indices_to_sample_ptr[:n] = (last - rejected).to(token_indices_to_sample_ptr.dtype)
    num_rejected_tokens_gpu_ptr[:n] = rejected.to(num_rejected_tokens_gpu_ptr.dtype)


def vllm_eagle_prepare_next_token_padded_kernel(sampled_token_ids_ptr, discard_request_mask_ptr,
                                                backup_next_token_ids_ptr, next_token_ids_ptr,
                                                valid_sampled_tokens_count_ptr, vocab_size,
                                                num_sampled_tokens_per_req, num_reqs, stride_sampled_token_ids,
                                                BLOCK_SIZE_TOKENS=None):
    """Per request: the count of valid sampled tokens (not -1, below vocab_size) and the last valid one
    as the next token; the backup token where none is valid or the request is discarded (count 0)."""
    n, m = int(num_reqs), int(num_sampled_tokens_per_req)
    if n == 0:
        return
    tokens = sampled_token_ids_ptr.as_strided((n, m), (int(stride_sampled_token_ids), 1))
    valid = (tokens != -1) & (tokens < vocab_size)
    count = valid.sum(1)
    cols = torch.arange(m, device=tokens.device).expand(n, m)
    last_index = torch.where(valid, cols, torch.full_like(cols, -1)).amax(1).clamp(min=0)
    last = tokens.gather(1, last_index[:, None])[:, 0]
    discard = discard_request_mask_ptr[:n].to(torch.bool)
    backup = backup_next_token_ids_ptr[:n].to(last.dtype)
    next_token_ids_ptr[:n] = torch.where(discard | (count == 0), backup, last).to(next_token_ids_ptr.dtype)
    count = torch.where(discard, torch.zeros_like(count), count)
    valid_sampled_tokens_count_ptr[:n] = count.to(valid_sampled_tokens_count_ptr.dtype)


def vllm_copy_and_expand_eagle_inputs_kernel(target_token_ids_ptr, target_positions_ptr, next_token_ids_ptr,
                                             out_input_ids_ptr, out_positions_ptr, out_is_rejected_token_mask_ptr,
                                             out_is_masked_token_mask_ptr, out_new_token_indices_ptr,
                                             out_hidden_state_mapping_ptr, query_start_loc_ptr, query_end_loc_ptr,
                                             padding_token_id, parallel_drafting_token_id, total_input_tokens,
                                             num_padding_slots_per_request, shift_input_ids,
                                             BLOCK_SIZE_TOKENS=None):
    """The drafter's first-pass inputs from the target's: each request's tokens (shifted by one with
    shift_input_ids), its bonus token, parallel-drafting slots and the rejected slots after them, laid
    out request after request with their positions and masks; the indices of the new tokens (bonus and
    parallel slots) and, with shift_input_ids, where each target hidden state goes. One request per
    entry of query_end_loc (the kernel's grid)."""
    b = query_end_loc_ptr.shape[0]
    p = int(num_padding_slots_per_request)
    shift = 1 if shift_input_ids else 0
    if b == 0:
        return
    dev = target_token_ids_ptr.device
    qs = query_start_loc_ptr[:b].to(torch.int64)
    nqs = query_start_loc_ptr[1:b + 1].to(torch.int64)
    qe = query_end_loc_ptr[:b].to(torch.int64)
    valid = qe - qs + 1 - shift                      # tokens copied from the input
    lens = (nqs - qs) + p - shift                    # valid + bonus/parallel slots + rejected slots
    out_start = qs + torch.arange(b, device=dev) * (p - shift)
    total = int(total_input_tokens) + b * (p - shift)
    req = torch.repeat_interleave(torch.arange(b, device=dev), lens, output_size=total)
    j = torch.arange(total, device=dev) - out_start[req]
    v = valid[req]
    in_idx = torch.clamp(qs[req] + shift + j, max=int(total_input_tokens) - 1)
    tokens = target_token_ids_ptr[in_idx].to(torch.int64)
    tokens = torch.where(j == v, next_token_ids_ptr[:b].to(torch.int64)[req], tokens)
    parallel = (j > v) & (j < v + p)
    rejected = j >= v + p
    tokens = torch.where(parallel, torch.full_like(tokens, parallel_drafting_token_id), tokens)
    tokens = torch.where(rejected, torch.full_like(tokens, padding_token_id), tokens)
    positions = target_positions_ptr[qs].to(torch.int64)[req] + j
    positions = torch.where(rejected, torch.zeros_like(positions), positions)
    out_input_ids_ptr[:total] = tokens.to(out_input_ids_ptr.dtype)
    out_positions_ptr[:total] = positions.to(out_positions_ptr.dtype)
    out_is_rejected_token_mask_ptr[:total] = rejected
    out_is_masked_token_mask_ptr[:total] = parallel
    new = out_start[:, None] + valid[:, None] + torch.arange(p, device=dev)[None]
    out_new_token_indices_ptr[:b * p] = new.reshape(-1).to(out_new_token_indices_ptr.dtype)
    if shift:
        n_in = int(total_input_tokens)
        req_in = torch.repeat_interleave(torch.arange(b, device=dev), nqs - qs, output_size=n_in)
        dest = torch.arange(n_in, device=dev) + req_in * (p - 1)
        out_hidden_state_mapping_ptr[:n_in] = dest.to(out_hidden_state_mapping_ptr.dtype)


VLLM_KERNEL_OVERRIDES = {
    "vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel": vllm_slot_mapping_kernel,
    "vllm.v1.sample.rejection_sampler.expand_kernel": vllm_expand_kernel,
    "vllm.v1.sample.rejection_sampler.rejection_greedy_sample_kernel": vllm_rejection_greedy_sample_kernel,
    "vllm.v1.sample.rejection_sampler.rejection_random_sample_kernel": vllm_rejection_random_sample_kernel,
    "vllm.v1.sample.rejection_sampler.sample_recovered_tokens_kernel": vllm_sample_recovered_tokens_kernel,
    "vllm.v1.spec_decode.utils.eagle_step_slot_mapping_metadata_kernel":
        vllm_eagle_step_slot_mapping_metadata_kernel,
    "vllm.v1.spec_decode.utils.eagle_prepare_inputs_padded_kernel": vllm_eagle_prepare_inputs_padded_kernel,
    "vllm.v1.spec_decode.utils.eagle_prepare_next_token_padded_kernel": vllm_eagle_prepare_next_token_padded_kernel,
    "vllm.v1.spec_decode.utils.copy_and_expand_eagle_inputs_kernel": vllm_copy_and_expand_eagle_inputs_kernel,
}
