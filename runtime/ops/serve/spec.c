/* Speculative decoding's verification step, as vLLM's rejection sampler
 * computes it with four Triton kernels (vllm/v1/sample/rejection_sampler.py),
 * which the tpu platform replaces through vLLM's kernel override registry
 * (torch_tpu/vllm/ops.py). A batch holds B requests; request r proposed the
 * draft tokens cu[r - 1] .. cu[r] (cu = cumulative draft counts, cu[-1] = 0);
 * output rows are [B, max_spec_len + 1] token ids, left as they are past what
 * a request accepted (vLLM fills them with a placeholder beforehand).
 *  - expand: each request's value repeated over its tokens (replace_from
 *    becomes replace_to);
 *  - rejection_greedy_sample: drafts accepted while they equal the target's
 *    argmax, the first mismatch replaced by the argmax; all accepted: the
 *    bonus token follows (requests flagged non-greedy are skipped);
 *  - rejection_random_sample: draft accepted when target_p / draft_p >= u
 *    (draft_p = 1 without draft probabilities, as for n-gram drafts), the
 *    first rejection replaced by the recovered token (greedy requests skipped);
 *  - sample_recovered_tokens: argmax over the vocabulary of max(target_p -
 *    draft_p, 0) * inv_q[request] (without draft probabilities: target_p with
 *    the draft token excluded), the first index on ties.
 * Small integer bookkeeping but the last, which reads the probabilities once:
 * one plain loop each, serving as kernel and reference. */
#include <math.h>
#include <string.h>

#include "ops/serve/serve.h"

static inline const char* at1(const tpurt_tensor_t* t, int64_t i) {
  return (const char*)t->data + (size_t)(i * t->strides[0]) * tpurt_dtype_size(t->dtype);
}
static inline char* at2(const tpurt_tensor_t* t, int64_t i, int64_t j) {
  return (char*)t->data + (size_t)(i * t->strides[0] + j * t->strides[1]) * tpurt_dtype_size(t->dtype);
}
static inline int64_t li(const tpurt_tensor_t* t, int64_t i) { return tpurt_dtype_load_i64(t->dtype, at1(t, i)); }
static inline double ld2(const tpurt_tensor_t* t, int64_t i, int64_t j) {
  return tpurt_dtype_load_f64(t->dtype, at2(t, i, j));
}
static bool is_vec(const tpurt_tensor_t* t) { return t && t->ndim == 1; }

/* The draft range of request r, checked against the drafts' length and the output row. */
static tpurt_status_t draft_range(const char* op, const tpurt_tensor_t* cu, int64_t r, int64_t ndraft,
                                  int64_t row_len, int64_t* out_start, int64_t* out_end) {
  int64_t a = r == 0 ? 0 : li(cu, r - 1), b = li(cu, r);
  if (a < 0 || b < a || b > ndraft || b - a + 1 > row_len)
    return TPURT_STATUS(OUT_OF_RANGE, "%s: request %lld has drafts %lld..%lld of %lld (rows of %lld)", op,
                        (long long)r, (long long)a, (long long)b, (long long)ndraft, (long long)row_len);
  *out_start = a, *out_end = b;
  return TPURT_STATUS_OK;
}

/* args: output [N], input [B], cu_num_tokens [B], replace_from, replace_to. */
static tpurt_status_t expand_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c) {
  const tpurt_tensor_t *out = tpurt_arg_tensor(c, 0), *in = tpurt_arg_tensor(c, 1), *cu = tpurt_arg_tensor(c, 2);
  if (!is_vec(out) || !is_vec(in) || !is_vec(cu) || cu->sizes[0] < in->sizes[0])
    return TPURT_STATUS(INVALID_ARGUMENT, "spec_expand: expects 1-d output, input [B] and cu_num_tokens [B]");
  int64_t from = tpurt_arg_int(c, 3, 0), to = tpurt_arg_int(c, 4, 0);
  bool fp = tpurt_dtype_is_floating(in->dtype);
  double fromf = tpurt_arg_double(c, 3, 0), tof = tpurt_arg_double(c, 4, 0);
  size_t es = tpurt_dtype_size(out->dtype);
  for (int64_t r = 0, a = 0; r < in->sizes[0]; ++r) {
    int64_t b = li(cu, r);
    if (b < a || b > out->sizes[0])
      return TPURT_STATUS(OUT_OF_RANGE, "spec_expand: cu_num_tokens[%lld] = %lld is out of order or past %lld",
                          (long long)r, (long long)b, (long long)out->sizes[0]);
    for (int64_t t = a; t < b; ++t) {
      char* d = (char*)out->data + (size_t)(t * out->strides[0]) * es;
      if (fp) {
        double v = tpurt_dtype_load_f64(in->dtype, at1(in, r));
        tpurt_dtype_store_f64(out->dtype, d, v == fromf ? tof : v);
      } else {
        int64_t v = li(in, r);
        tpurt_dtype_store_i64(out->dtype, d, v == from ? to : v);
      }
    }
    a = b;
  }
  return TPURT_STATUS_OK;
}

/* args: output [B, S + 1], cu [B], draft [N], target_argmax [N], bonus [B], is_greedy [B] or None. */
static tpurt_status_t greedy_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c) {
  const char* op = "rejection_greedy_sample";
  const tpurt_tensor_t *out = tpurt_arg_tensor(c, 0), *cu = tpurt_arg_tensor(c, 1), *draft = tpurt_arg_tensor(c, 2),
                       *target = tpurt_arg_tensor(c, 3), *bonus = tpurt_arg_tensor(c, 4),
                       *greedy = tpurt_arg_tensor(c, 5);
  if (!out || out->ndim != 2 || !is_vec(cu) || !is_vec(draft) || !is_vec(target) || !is_vec(bonus) ||
      target->sizes[0] < draft->sizes[0] || cu->sizes[0] < out->sizes[0] || bonus->sizes[0] < out->sizes[0] ||
      (greedy && (!is_vec(greedy) || greedy->sizes[0] < out->sizes[0])))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expects output [B, S + 1], cu_num_draft_tokens, bonus and is_greedy "
                        "[B], draft_token_ids and target_argmax [N]", op);
  for (int64_t r = 0; r < out->sizes[0]; ++r) {
    if (greedy && !li(greedy, r)) continue;
    int64_t a, b;
    tpurt_status_t st = draft_range(op, cu, r, draft->sizes[0], out->sizes[1], &a, &b);
    if (st) return st;
    bool rejected = false;
    for (int64_t p = 0; p < b - a && !rejected; ++p) {
      int64_t want = li(target, a + p);
      rejected = li(draft, a + p) != want;
      tpurt_dtype_store_i64(out->dtype, at2(out, r, p), want);
    }
    if (!rejected) tpurt_dtype_store_i64(out->dtype, at2(out, r, b - a), li(bonus, r));
  }
  return TPURT_STATUS_OK;
}

/* args: output [B, S + 1], cu [B], draft [N], draft_probs [N, V] or None, target_probs [N, V],
 * bonus [B], recovered [N], uniform [N], is_greedy [B]. */
static tpurt_status_t random_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c) {
  const char* op = "rejection_random_sample";
  const tpurt_tensor_t *out = tpurt_arg_tensor(c, 0), *cu = tpurt_arg_tensor(c, 1), *draft = tpurt_arg_tensor(c, 2),
                       *dp = tpurt_arg_tensor(c, 3), *tp = tpurt_arg_tensor(c, 4), *bonus = tpurt_arg_tensor(c, 5),
                       *rec = tpurt_arg_tensor(c, 6), *u = tpurt_arg_tensor(c, 7), *greedy = tpurt_arg_tensor(c, 8);
  int64_t N = draft ? draft->sizes[0] : 0;
  if (!out || out->ndim != 2 || !is_vec(cu) || !is_vec(draft) || !tp || tp->ndim != 2 || tp->sizes[0] < N ||
      (dp && (dp->ndim != 2 || dp->sizes[0] < N || dp->sizes[1] != tp->sizes[1])) || !is_vec(bonus) ||
      !is_vec(rec) || rec->sizes[0] < N || !is_vec(u) || u->sizes[0] < N || !is_vec(greedy) ||
      cu->sizes[0] < out->sizes[0] || bonus->sizes[0] < out->sizes[0] || greedy->sizes[0] < out->sizes[0])
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expects output [B, S + 1], cu_num_draft_tokens, bonus and is_greedy "
                        "[B], draft/recovered token ids and uniform samples [N], probabilities [N, V]", op);
  int64_t V = tp->sizes[1];
  for (int64_t r = 0; r < out->sizes[0]; ++r) {
    if (li(greedy, r)) continue;
    int64_t a, b;
    tpurt_status_t st = draft_range(op, cu, r, N, out->sizes[1], &a, &b);
    if (st) return st;
    bool rejected = false;
    for (int64_t p = 0; p < b - a && !rejected; ++p) {
      int64_t t = a + p, tok = li(draft, t);
      if (tok >= V) return TPURT_STATUS(OUT_OF_RANGE, "%s: draft token %lld is past the vocabulary of %lld", op,
                                        (long long)tok, (long long)V);
      bool accepted = false;
      if (tok >= 0) { /* -1 pads a request with fewer drafts: rejected */
        double dprob = dp ? ld2(dp, t, tok) : 1.0, tprob = ld2(tp, t, tok);
        accepted = dprob > 0 && tprob / dprob >= tpurt_dtype_load_f64(u->dtype, at1(u, t));
      }
      rejected = !accepted;
      tpurt_dtype_store_i64(out->dtype, at2(out, r, p), accepted ? tok : li(rec, t));
    }
    if (!rejected) tpurt_dtype_store_i64(out->dtype, at2(out, r, b - a), li(bonus, r));
  }
  return TPURT_STATUS_OK;
}

/* args: output [N], cu [B], draft [N], draft_probs [N, V] or None, target_probs [N, V], inv_q [B, V]. */
static tpurt_status_t recovered_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c) {
  const char* op = "sample_recovered_tokens";
  const tpurt_tensor_t *out = tpurt_arg_tensor(c, 0), *cu = tpurt_arg_tensor(c, 1), *draft = tpurt_arg_tensor(c, 2),
                       *dp = tpurt_arg_tensor(c, 3), *tp = tpurt_arg_tensor(c, 4), *iq = tpurt_arg_tensor(c, 5);
  int64_t N = draft ? draft->sizes[0] : 0;
  if (!is_vec(out) || out->sizes[0] < N || !is_vec(cu) || !is_vec(draft) || !tp || tp->ndim != 2 ||
      tp->sizes[0] < N || (dp && (dp->ndim != 2 || dp->sizes[0] < N || dp->sizes[1] != tp->sizes[1])) || !iq ||
      iq->ndim != 2 || iq->sizes[1] != tp->sizes[1] || iq->sizes[0] < cu->sizes[0])
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expects output, draft_token_ids [N], cu_num_draft_tokens [B], "
                        "probabilities [N, V] and inv_q [B, V]", op);
  int64_t V = tp->sizes[1];
  for (int64_t r = 0; r < cu->sizes[0]; ++r) {
    int64_t a, b;
    tpurt_status_t st = draft_range(op, cu, r, N, N + 1, &a, &b);
    if (st) return st;
    for (int64_t t = a; t < b; ++t) {
      int64_t skip = dp ? -1 : li(draft, t), best_id = 0;
      double best = -INFINITY;
      for (int64_t v = 0; v < V; ++v) {
        double p = v == skip ? 0.0 : ld2(tp, t, v);
        if (dp) p = p - ld2(dp, t, v) > 0 ? p - ld2(dp, t, v) : 0.0;
        double s = p * ld2(iq, r, v);
        if (s > best) best = s, best_id = v;
      }
      tpurt_dtype_store_i64(out->dtype, (char*)out->data + (size_t)(t * out->strides[0]) * tpurt_dtype_size(out->dtype),
                            best_id);
    }
  }
  return TPURT_STATUS_OK;
}

#define SPEC_OP(NAME, RUN)                                                                          \
  tpurt_status_t tpurt_serve_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {        \
    return RUN(ctx, call);                                                                          \
  }                                                                                                 \
  tpurt_status_t tpurt_serve_##NAME##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {   \
    return RUN(ctx, call);                                                                          \
  }
SPEC_OP(spec_expand, expand_run)
SPEC_OP(rejection_greedy_sample, greedy_run)
SPEC_OP(rejection_random_sample, random_run)
SPEC_OP(sample_recovered_tokens, recovered_run)
