/* The serving kernels (ops/serve/paged.c) against their float64 references
 * and a hand-worked case: paged attention on random block tables for ragged
 * batches (decode, prefill, a chunk after a cached prefix), grouped-query
 * heads, sliding window, soft-capping, float32 and bfloat16, with the vector
 * and the portable loops; reshape_and_cache with padding slots; bad block ids
 * and slots report OUT_OF_RANGE. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/serve/serve.h"
#include "test_util.h"
#include "tpurt/tpurt.h"

static tpurt_arg_t targ(const tpurt_tensor_t* t) { return (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .v.tensor = t}; }

/* Runs paged_attention (fast when !ref) into out. */
static tpurt_status_t run_pa(bool ref, tpurt_tensor_t* out, tpurt_tensor_t* q, tpurt_tensor_t* kv,
                             tpurt_tensor_t* qsl, tpurt_tensor_t* sl, tpurt_tensor_t* bt, double scale, int64_t window,
                             double softcap) {
  tpurt_arg_t args[9] = {targ(out), targ(q), targ(kv), targ(qsl), targ(sl), targ(bt),
                         {.kind = TPURT_ARG_DOUBLE, .v.d = scale},
                         {.kind = TPURT_ARG_INT, .v.i = window},
                         {.kind = TPURT_ARG_DOUBLE, .v.d = softcap}};
  return test_op_run("torch_tpu::paged_attention", ref, args, 9, NULL, 0);
}

/* A [NB, BS, H, 2D] cache view; head-major storage [NB, H, BS, 2D] when `head_major`
 * (the strides vLLM's other layouts give). */
static tpurt_tensor_t kv_view(tpurt_dtype_t dt, void* data, int64_t NB, int64_t BS, int64_t H, int64_t D2, bool head_major) {
  int64_t cs[4] = {NB, BS, H, D2};
  tpurt_tensor_t t = test_tensor_dense(dt, data, 4, cs);
  if (head_major) t.strides[1] = D2, t.strides[2] = BS * D2;
  return t;
}

/* S sequences with query lengths qlens[] and context lengths ctx[]. */
static void pa_case(tpurt_dtype_t dt, int S, const int64_t* qlens, const int64_t* ctx, int64_t Hq, int64_t Hkv,
                    int64_t D, int64_t BS, int64_t window, double softcap, bool generic, bool head_major) {
  int64_t T = 0, MB = 0;
  int32_t qsl[17], sl[16];
  qsl[0] = 0;
  for (int s = 0; s < S; ++s) {
    T += qlens[s], qsl[s + 1] = (int32_t)T, sl[s] = (int32_t)ctx[s];
    int64_t nb = (ctx[s] + BS - 1) / BS;
    if (nb > MB) MB = nb;
  }
  int64_t NB = MB * S + 3;
  /* a random permutation of the blocks, handed out to the sequences */
  int64_t* perm = malloc(NB * sizeof(int64_t));
  for (int64_t i = 0; i < NB; ++i) perm[i] = i;
  for (int64_t i = NB - 1; i > 0; --i) {
    int64_t r = (int64_t)(test_rand_u64() % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[r], perm[r] = t;
  }
  int32_t* btd = malloc(S * MB * sizeof(int32_t));
  for (int64_t i = 0; i < S * MB; ++i) btd[i] = (int32_t)perm[i];
  int64_t qs[3] = {T, Hq, D}, s1[1] = {S + 1}, s0[1] = {S}, bs[2] = {S, MB};
  void *q = test_rand_buf(dt, T * Hq * D), *kv = test_rand_buf(dt, NB * BS * Hkv * 2 * D);
  void *o0 = calloc(T * Hq * D, tpurt_dtype_size(dt)), *o1 = calloc(T * Hq * D, tpurt_dtype_size(dt));
  tpurt_tensor_t tq = test_tensor_dense(dt, q, 3, qs), tkv = kv_view(dt, kv, NB, BS, Hkv, 2 * D, head_major), tqsl = test_tensor_dense(TPURT_DTYPE_INT32, qsl, 1, s1),
                 tsl = test_tensor_dense(TPURT_DTYPE_INT32, sl, 1, s0), tbt = test_tensor_dense(TPURT_DTYPE_INT32, btd, 2, bs),
                 to0 = test_tensor_dense(dt, o0, 3, qs), to1 = test_tensor_dense(dt, o1, 3, qs);
  double scale = 1.0 / sqrt((double)D);
  tpurt_serve_set_generic(generic);
  CHECK_OK(run_pa(false, &to0, &tq, &tkv, &tqsl, &tsl, &tbt, scale, window, softcap));
  CHECK_OK(run_pa(true, &to1, &tq, &tkv, &tqsl, &tsl, &tbt, scale, window, softcap));
  double tol = dt == TPURT_DTYPE_FLOAT32 ? 2e-5 : 1e-2;
  double d = test_max_err(dt, o0, o1, T * Hq * D, 1.0);
  if (!(d <= tol)) fprintf(stderr, "paged_attention dt=%d Hq=%lld Hkv=%lld window=%lld: diff %g\n", dt,
                           (long long)Hq, (long long)Hkv, (long long)window, d);
  CHECK(d <= tol);
  free(perm), free(btd), free(q), free(kv), free(o0), free(o1);
}

/* Hand-worked: one sequence, two tokens, D = 1, one head; keys 0 and 1, values 2 and 4.
 * Token 0 sees key 0 only -> 2. Token 1: scores 0 * 1 = 0 and 1 * 1 = 1 -> weights
 * 1/(1+e), e/(1+e) -> (2 + 4e)/(1 + e). The cache lives in block 1 of two; each
 * row is (key, value). */
static void pa_hand(void) {
  float q[2] = {0.5f, 1.0f}, kv[8] = {9, 9, 9, 9, 0, 2, 1, 4}, out[2] = {0};
  int32_t qsl[2] = {0, 2}, sl[1] = {2}, bt[1] = {1};
  int64_t qs[3] = {2, 1, 1}, cs[4] = {2, 2, 1, 2}, s1[1] = {2}, s0[1] = {1}, bs[2] = {1, 1};
  tpurt_tensor_t tq = test_tensor_dense(TPURT_DTYPE_FLOAT32, q, 3, qs), tkv = test_tensor_dense(TPURT_DTYPE_FLOAT32, kv, 4, cs),
                 to = test_tensor_dense(TPURT_DTYPE_FLOAT32, out, 3, qs),
                 tqsl = test_tensor_dense(TPURT_DTYPE_INT32, qsl, 1, s1), tsl = test_tensor_dense(TPURT_DTYPE_INT32, sl, 1, s0),
                 tbt = test_tensor_dense(TPURT_DTYPE_INT32, bt, 2, bs);
  for (int ref = 0; ref < 2; ++ref) {
    out[0] = out[1] = 0;
    CHECK_OK(run_pa(ref, &to, &tq, &tkv, &tqsl, &tsl, &tbt, 1.0, 0, 0.0));
    double e = exp(1.0);
    CHECK(fabs(out[0] - 2.0) < 1e-6);
    CHECK(fabs(out[1] - (2 + 4 * e) / (1 + e)) < 1e-6);
  }
  /* a block id past the cache */
  bt[0] = 2;
  CHECK_STATUS(run_pa(false, &to, &tq, &tkv, &tqsl, &tsl, &tbt, 1.0, 0, 0.0), OUT_OF_RANGE);
  CHECK_STATUS(run_pa(true, &to, &tq, &tkv, &tqsl, &tsl, &tbt, 1.0, 0, 0.0), OUT_OF_RANGE);
  /* more tokens than the context holds */
  bt[0] = 1, sl[0] = 1;
  CHECK_STATUS(run_pa(false, &to, &tq, &tkv, &tqsl, &tsl, &tbt, 1.0, 0, 0.0), OUT_OF_RANGE);
}

static void rc_case(tpurt_dtype_t dt, tpurt_dtype_t cdt, bool head_major) {
  enum { T = 7, H = 2, D = 5, NB = 4, BS = 3 };
  int64_t ks[3] = {T, H, D}, ss[1] = {T};
  void *k = test_rand_buf(dt, T * H * D), *v = test_rand_buf(dt, T * H * D);
  void* c[2];
  for (int r = 0; r < 2; ++r) c[r] = calloc(NB * BS * H * 2 * D, tpurt_dtype_size(cdt));
  int64_t slots[T] = {5, 0, -1, 11, 7, -1, 3};
  tpurt_tensor_t tk = test_tensor_dense(dt, k, 3, ks), tv = test_tensor_dense(dt, v, 3, ks),
                 tsl = test_tensor_dense(TPURT_DTYPE_INT64, slots, 1, ss);
  for (int r = 0; r < 2; ++r) {
    tpurt_tensor_t tkv = kv_view(cdt, c[r], NB, BS, H, 2 * D, head_major);
    tpurt_arg_t args[4] = {targ(&tk), targ(&tv), targ(&tkv), targ(&tsl)};
    CHECK_OK(test_op_run("torch_tpu::reshape_and_cache", r == 1, args, 4, NULL, 0));
  }
  CHECK(memcmp(c[0], c[1], NB * BS * H * 2 * D * tpurt_dtype_size(cdt)) == 0);
  /* by hand: token 3 (slot 11 = block 3, row 2), head 1, value element 4 */
  tpurt_tensor_t tkv = kv_view(cdt, c[0], NB, BS, H, 2 * D, head_major);
  double want = tpurt_dtype_load_f64(dt, (char*)v + ((3 * H + 1) * D + 4) * tpurt_dtype_size(dt));
  int64_t at = 3 * tkv.strides[0] + 2 * tkv.strides[1] + 1 * tkv.strides[2] + D + 4;
  double got = tpurt_dtype_load_f64(cdt, (char*)c[0] + at * tpurt_dtype_size(cdt));
  CHECK(fabs(want - got) <= (cdt == TPURT_DTYPE_FLOAT32 ? 0 : 1e-2));
  /* padding slots wrote nothing: slot 1 (block 0, row 1) stays zero */
  CHECK(tpurt_dtype_load_f64(cdt, (char*)c[0] + tkv.strides[1] * tpurt_dtype_size(cdt)) == 0);
  /* a slot past the cache */
  slots[0] = NB * BS;
  tpurt_arg_t args[4] = {targ(&tk), targ(&tv), targ(&tkv), targ(&tsl)};
  CHECK_STATUS(test_op_run("torch_tpu::reshape_and_cache", false, args, 4, NULL, 0), OUT_OF_RANGE);
  CHECK_STATUS(test_op_run("torch_tpu::reshape_and_cache", true, args, 4, NULL, 0), OUT_OF_RANGE);
  free(k), free(v), free(c[0]), free(c[1]);
}

int main(void) {
  pa_hand();
  /* decode batch, prefill, chunk after a cached prefix, and a sequence with no query */
  int64_t qa[4] = {1, 1, 1, 1}, ca[4] = {1, 17, 40, 64};
  int64_t qb[3] = {13, 1, 9}, cb[3] = {13, 30, 37};
  int64_t qc[3] = {0, 20, 3}, cc[3] = {5, 20, 3};
  for (int generic = 0; generic < 2; ++generic) {
    pa_case(TPURT_DTYPE_FLOAT32, 4, qa, ca, 4, 4, 16, 16, 0, 0.0, generic, false);
    pa_case(TPURT_DTYPE_FLOAT32, 3, qb, cb, 8, 2, 64, 16, 0, 0.0, generic, true);
    pa_case(TPURT_DTYPE_FLOAT32, 3, qb, cb, 6, 1, 24, 8, 5, 0.0, generic, false); /* multi-query, sliding window */
    pa_case(TPURT_DTYPE_FLOAT32, 3, qc, cc, 4, 2, 32, 4, 0, 30.0, generic, false); /* soft-capping */
    pa_case(TPURT_DTYPE_BFLOAT16, 3, qb, cb, 8, 2, 64, 16, 0, 0.0, generic, false);
    pa_case(TPURT_DTYPE_FLOAT16, 4, qa, ca, 4, 2, 16, 16, 0, 0.0, generic, true);
  }
  tpurt_serve_set_generic(false);
  rc_case(TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT32, false);
  rc_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_BFLOAT16, true);
  rc_case(TPURT_DTYPE_FLOAT32, TPURT_DTYPE_BFLOAT16, false);
  return test_finish("test_paged");
}
