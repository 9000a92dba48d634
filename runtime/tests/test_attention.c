/* Fused attention kernels (ops/nn/attention.c) against their float64
 * references: forward (output and logsumexp) and backward, float32 and
 * bfloat16, causal and not, grouped-query heads, an additive mask, sizes that
 * are not multiples of the blocks, and a fully masked row. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/args.h"
#include "test_util.h"
#include "tpurt/tpurt.h"

/* ramp: ramp * j added to the mask at key j, so later blocks hold scores far above the earlier
 * ones' max (the kernels' running reference then moves, and the output is rescaled). */
static void attn_case_ramp(tpurt_dtype_t dt, int64_t B, int64_t H, int64_t Hk, int64_t L, int64_t S,
                           int64_t E, bool causal, bool mask, bool hole, double ramp) {
  int64_t qs[4] = {B, H, L, E}, ks[4] = {B, Hk, S, E}, ls[3] = {B, H, L}, ms[2] = {L, S};
  int64_t nq = B * H * L * E, nk = B * Hk * S * E;
  void *q = test_rand_buf(dt, nq), *k = test_rand_buf(dt, nk), *v = test_rand_buf(dt, nk), *go = test_rand_buf(dt, nq);

  float* mk = test_rand_buf(TPURT_DTYPE_FLOAT32, L * S);
  for (int64_t x = 0; x < L * S; ++x) mk[x] += (float)(ramp * (double)(x % S));
  if (hole) /* query row 1 sees nothing: its output and grads are zeros */
    for (int64_t j = 0; j < S; ++j) mk[S + j] = -INFINITY;
  void *o[2], *lse[2], *dq[2], *dk[2], *dv[2];
  for (int r = 0; r < 2; ++r) {
    o[r] = calloc(nq, tpurt_dtype_size(dt)), lse[r] = calloc(B * H * L, 4);
    dq[r] = calloc(nq, tpurt_dtype_size(dt)), dk[r] = calloc(nk, tpurt_dtype_size(dt));
    dv[r] = calloc(nk, tpurt_dtype_size(dt));
  }
  tpurt_tensor_t tq = test_tensor_dense(dt, q, 4, qs), tk = test_tensor_dense(dt, k, 4, ks),
                 tv = test_tensor_dense(dt, v, 4, ks), tgo = test_tensor_dense(dt, go, 4, qs),
                 tm = test_tensor_dense(TPURT_DTYPE_FLOAT32, mk, 2, ms);
  for (int r = 0; r < 2; ++r) {
    tpurt_tensor_t outs[2] = {test_tensor_dense(dt, o[r], 4, qs),
                              test_tensor_dense(TPURT_DTYPE_FLOAT32, lse[r], 3, ls)};
    tpurt_arg_t args[7] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &tq},
                           {.kind = TPURT_ARG_TENSOR, .v.tensor = &tk},
                           {.kind = TPURT_ARG_TENSOR, .v.tensor = &tv},
                           {.kind = TPURT_ARG_DOUBLE, .v.d = 0.0},
                           {.kind = TPURT_ARG_BOOL, .v.b = causal},
                           {.kind = mask ? TPURT_ARG_TENSOR : TPURT_ARG_NONE, .v.tensor = &tm},
                           {.kind = TPURT_ARG_NONE}};
    CHECK_OK(test_op_run("_scaled_dot_product_flash_attention_for_cpu", r == 1, args, 7, outs, 2));
  }
  /* the backward of both runs from the reference forward's output */
  tpurt_tensor_t to = test_tensor_dense(dt, o[1], 4, qs), tl = test_tensor_dense(TPURT_DTYPE_FLOAT32, lse[1], 3, ls);
  for (int r = 0; r < 2; ++r) {
    tpurt_tensor_t outs[3] = {test_tensor_dense(dt, dq[r], 4, qs), test_tensor_dense(dt, dk[r], 4, ks),
                              test_tensor_dense(dt, dv[r], 4, ks)};
    tpurt_arg_t args[10] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &tgo},
                            {.kind = TPURT_ARG_TENSOR, .v.tensor = &tq},
                            {.kind = TPURT_ARG_TENSOR, .v.tensor = &tk},
                            {.kind = TPURT_ARG_TENSOR, .v.tensor = &tv},
                            {.kind = TPURT_ARG_TENSOR, .v.tensor = &to},
                            {.kind = TPURT_ARG_TENSOR, .v.tensor = &tl},
                            {.kind = TPURT_ARG_DOUBLE, .v.d = 0.0},
                            {.kind = TPURT_ARG_BOOL, .v.b = causal},
                            {.kind = mask ? TPURT_ARG_TENSOR : TPURT_ARG_NONE, .v.tensor = &tm},
                            {.kind = TPURT_ARG_DOUBLE, .v.d = 0.3}};
    if (r == 0) args[9].kind = TPURT_ARG_NONE; /* default scale 1/sqrt(E) ... */
    else args[9].v.d = 1.0 / sqrt((double)E); /* ... spelled out for the reference */
    CHECK_OK(test_op_run("_scaled_dot_product_flash_attention_for_cpu_backward", r == 1, args, 10, outs, 3));
  }
  /* relative to 1 + |ref|; float32: accumulation order only; bfloat16: one rounding of the result */
  double tol = dt == TPURT_DTYPE_FLOAT32 ? 1e-5 : 8e-3;
  double e_o = test_max_err(dt, o[0], o[1], nq, 1.0), e_l = test_max_err(TPURT_DTYPE_FLOAT32, lse[0], lse[1], B * H * L, 1.0);
  double e_q = test_max_err(dt, dq[0], dq[1], nq, 1.0), e_k = test_max_err(dt, dk[0], dk[1], nk, 1.0),
         e_v = test_max_err(dt, dv[0], dv[1], nk, 1.0);
  bool ok = e_o <= tol && e_l <= 2e-5 && e_q <= tol && e_k <= tol && e_v <= tol;
  if (!ok)
    fprintf(stderr, "attention %s B=%lld H=%lld/%lld L=%lld S=%lld E=%lld causal=%d mask=%d: out %g lse %g dq %g dk %g dv %g\n",
            tpurt_dtype_name(dt), (long long)B, (long long)H, (long long)Hk, (long long)L, (long long)S,
            (long long)E, causal, mask, e_o, e_l, e_q, e_k, e_v);
  CHECK(ok);
  if (hole) { /* row 1 of (0, 0): zeros and lse -inf */
    CHECK(tpurt_dtype_load_f64(dt, (char*)o[0] + E * tpurt_dtype_size(dt)) == 0);
    CHECK(isinf(((float*)lse[0])[1]) && ((float*)lse[0])[1] < 0);
  }
  free(q), free(k), free(v), free(go), free(mk);
  for (int r = 0; r < 2; ++r) free(o[r]), free(lse[r]), free(dq[r]), free(dk[r]), free(dv[r]);
}

static void attn_case(tpurt_dtype_t dt, int64_t B, int64_t H, int64_t Hk, int64_t L, int64_t S,
                      int64_t E, bool causal, bool mask, bool hole) {
  attn_case_ramp(dt, B, H, Hk, L, S, E, causal, mask, hole, 0.0);
}

int main(void) {
  const tpurt_dtype_t dts[] = {TPURT_DTYPE_FLOAT32, TPURT_DTYPE_BFLOAT16};
  for (int d = 0; d < 2; ++d)
    for (int causal = 0; causal < 2; ++causal) {
      attn_case(dts[d], 1, 2, 2, 5, 7, 3, causal, false, false);
      attn_case(dts[d], 2, 4, 2, 70, 130, 40, causal, false, false); /* GQA, partial blocks */
      attn_case(dts[d], 1, 3, 1, 129, 65, 64, causal, false, false);
      attn_case(dts[d], 1, 4, 2, 100, 128, 32, causal, false, false); /* head dim and keys whole tiles */
      attn_case(dts[d], 1, 2, 2, 60, 90, 16, causal, false, false);   /* one block of 60 queries */
      attn_case(dts[d], 1, 4, 2, 1, 45, 16, causal, false, false);    /* a decode step: keys in one 48-wide block */
      attn_case(dts[d], 1, 4, 2, 1, 200, 16, causal, false, false);   /* a decode step over two key blocks */
    }
  attn_case(TPURT_DTYPE_FLOAT32, 2, 2, 2, 33, 80, 16, false, true, false);
  attn_case(TPURT_DTYPE_BFLOAT16, 1, 2, 1, 66, 66, 24, false, true, true);
  attn_case(TPURT_DTYPE_FLOAT32, 1, 2, 2, 150, 150, 32, true, true, true); /* causal and a mask */
  for (int d = 0; d < 2; ++d) /* scores growing along the keys: the running max moves block after block */
    for (int causal = 0; causal < 2; ++causal) attn_case_ramp(dts[d], 1, 2, 1, 200, 400, 64, causal, true, false, 0.1);
  /* dropout is refused with a clear status */
  {
    int64_t sz[4] = {1, 1, 2, 2}, ls[3] = {1, 1, 2};
    float x[4] = {0}, o[4], l[2];
    tpurt_tensor_t t = test_tensor_dense(TPURT_DTYPE_FLOAT32, x, 4, sz);
    tpurt_tensor_t outs[2] = {test_tensor_dense(TPURT_DTYPE_FLOAT32, o, 4, sz),
                              test_tensor_dense(TPURT_DTYPE_FLOAT32, l, 3, ls)};
    tpurt_arg_t args[4] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &t}, {.kind = TPURT_ARG_TENSOR, .v.tensor = &t},
                           {.kind = TPURT_ARG_TENSOR, .v.tensor = &t}, {.kind = TPURT_ARG_DOUBLE, .v.d = 0.5}};
    CHECK_STATUS(test_op_run("_scaled_dot_product_flash_attention_for_cpu", false, args, 4, outs, 2), UNIMPLEMENTED);
  }
  return test_finish("test_attention");
}
