/* The serving kernel family: what vLLM's attention backend on the tpu device
 * calls (torch_tpu/vllm/attention.py): paged attention over vLLM's block
 * tables, the paged cache write and the slot mapping (paged.c), rotary
 * embedding (rotary.c), speculative decoding's rejection sampling (spec.c),
 * RMSNorm (with a residual add) and SiLU-and-mul (layers.c), the sampler's top-k /
 * top-p filtering, penalties, min-p and the draw (sample.c).
 * Each kernel has a reference twin
 * (suffix _ref); the op table is serve_table.c. Internal to runtime/ops. */
#ifndef TPURT_OPS_SERVE_SERVE_H_
#define TPURT_OPS_SERVE_SERVE_H_

#include "ops/args.h"

#define TPURT_SERVE_DECLARE(NAME)                                                              \
  tpurt_status_t tpurt_serve_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);     \
  tpurt_status_t tpurt_serve_##NAME##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);

TPURT_SERVE_DECLARE(paged_attention)
TPURT_SERVE_DECLARE(reshape_and_cache)
TPURT_SERVE_DECLARE(compute_slot_mapping)
TPURT_SERVE_DECLARE(rotary_embedding)
TPURT_SERVE_DECLARE(spec_expand)
TPURT_SERVE_DECLARE(rejection_greedy_sample)
TPURT_SERVE_DECLARE(rejection_random_sample)
TPURT_SERVE_DECLARE(sample_recovered_tokens)
TPURT_SERVE_DECLARE(rms_norm)
TPURT_SERVE_DECLARE(fused_add_rms_norm)
TPURT_SERVE_DECLARE(silu_and_mul)
TPURT_SERVE_DECLARE(top_k_top_p)
TPURT_SERVE_DECLARE(apply_penalties)
TPURT_SERVE_DECLARE(min_p)
TPURT_SERVE_DECLARE(sample_exponential)

/* The portable loops instead of the vector ones (TORCH_TPU_SERVE_GENERIC=1
 * sets it from the environment), so tests cover both on one machine. */
void tpurt_serve_set_generic(bool generic);

#endif /* TPURT_OPS_SERVE_SERVE_H_ */
