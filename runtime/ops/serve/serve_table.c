/* The serving kernel family's op table (see tpurt/kernel.h for the ABI). The
 * ops are torch ops of the torch_tpu namespace (torch_tpu/vllm/ops.py holds
 * their schemas); only "aten::" is dropped by the lookup, so the names here
 * keep theirs. Both compute in float32 from float32/bfloat16/float16 tensors
 * (the first tensor argument, the output, decides).
 * compute_slot_mapping is integer work. */
#include "ops/serve/serve.h"

#define OP(NAME, FN) {NAME, tpurt_serve_##FN, tpurt_serve_##FN##_ref, 0, TPURT_DTYPES_FLOAT, TPURT_LAYOUT_STRIDED}

const tpurt_op_def_t tpurt_ops_serve[] = {
    OP("torch_tpu::paged_attention", paged_attention),
    OP("torch_tpu::reshape_and_cache", reshape_and_cache),
    /* rotary.c: the query (its second argument) decides; positions come first */
    {"torch_tpu::rotary_embedding", tpurt_serve_rotary_embedding, tpurt_serve_rotary_embedding_ref, 0,
     TPURT_DTYPE_BIT(INT32) | TPURT_DTYPE_BIT(INT64), TPURT_LAYOUT_STRIDED},
    /* an integer kernel: its first tensor is the int64 slot mapping */
    {"torch_tpu::compute_slot_mapping", tpurt_serve_compute_slot_mapping, tpurt_serve_compute_slot_mapping_ref, 0,
     TPURT_DTYPE_BIT(INT64), TPURT_LAYOUT_STRIDED},
    /* spec.c: integer bookkeeping; the first tensor is the output (token ids; expand: any real dtype) */
    {"torch_tpu::spec_expand", tpurt_serve_spec_expand, tpurt_serve_spec_expand_ref, 0, TPURT_DTYPES_REAL,
     TPURT_LAYOUT_STRIDED},
    {"torch_tpu::rejection_greedy_sample", tpurt_serve_rejection_greedy_sample, tpurt_serve_rejection_greedy_sample_ref,
     0, TPURT_DTYPES_INT, TPURT_LAYOUT_STRIDED},
    {"torch_tpu::rejection_random_sample", tpurt_serve_rejection_random_sample, tpurt_serve_rejection_random_sample_ref,
     0, TPURT_DTYPES_INT, TPURT_LAYOUT_STRIDED},
    {"torch_tpu::sample_recovered_tokens", tpurt_serve_sample_recovered_tokens, tpurt_serve_sample_recovered_tokens_ref,
     0, TPURT_DTYPES_INT, TPURT_LAYOUT_STRIDED},
    /* layers.c: vLLM's RMSNorm (plain, and after a residual add in place) and SiLU-and-mul */
    OP("torch_tpu::rms_norm", rms_norm),
    OP("torch_tpu::fused_add_rms_norm", fused_add_rms_norm),
    OP("torch_tpu::silu_and_mul", silu_and_mul),
    /* sample.c: the sampler's top-k / top-p filtering of float32 logits in place */
    OP("torch_tpu::top_k_top_p", top_k_top_p),
    /* its penalties and min-p (logits in place) */
    OP("torch_tpu::apply_penalties", apply_penalties),
    OP("torch_tpu::min_p", min_p),
    /* the draw: the first tensor is the int64 token ids it writes */
    {"torch_tpu::sample_exponential", tpurt_serve_sample_exponential, tpurt_serve_sample_exponential_ref, 0,
     TPURT_DTYPE_BIT(INT64), TPURT_LAYOUT_STRIDED},
    /* the same draw with its noise drawn inside from the Generator argument's reservation */
    {"torch_tpu::sample_exponential_noise", tpurt_serve_sample_exponential, tpurt_serve_sample_exponential_ref,
     TPURT_OP_RANDOM, TPURT_DTYPE_BIT(INT64), TPURT_LAYOUT_STRIDED},
    TPURT_OP_TABLE_END,
};
