/* The serving kernels (ops/serve/paged.c) against their float64 references
 * and a hand-worked case: paged attention on random block tables for ragged
 * batches (decode, prefill, a chunk after a cached prefix), grouped-query
 * heads, sliding window, soft-capping, ALiBi, float32 and bfloat16, an FP8
 * cache (e4m3 and e5m2 codes, per-tensor scales), with the vector and the
 * portable loops; the fp8 conversions on hand-worked values; reshape_and_cache
 * with padding slots, into an fp8 cache too; bad block ids and slots report
 * OUT_OF_RANGE. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/fp8.h"
#include "ops/serve/serve.h"
#include "test_util.h"
#include "tpurt/tpurt.h"

static tpurt_arg_t targ(const tpurt_tensor_t* t) { return (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .v.tensor = t}; }

/* The optional arguments: ALiBi slopes, an fp8 cache's format name and scales. */
typedef struct pa_opts_t {
  const tpurt_tensor_t* alibi;
  const char* fmt; /* NULL: "auto" */
  double k_scale, v_scale;
} pa_opts_t;

/* Runs paged_attention (fast when !ref) into out. */
static tpurt_status_t run_pa_opts(bool ref, tpurt_tensor_t* out, tpurt_tensor_t* q, tpurt_tensor_t* kv,
                                  tpurt_tensor_t* qsl, tpurt_tensor_t* sl, tpurt_tensor_t* bt, double scale,
                                  int64_t window, double softcap, const pa_opts_t* o) {
  tpurt_arg_t args[13] = {targ(out), targ(q), targ(kv), targ(qsl), targ(sl), targ(bt),
                          {.kind = TPURT_ARG_DOUBLE, .v.d = scale},
                          {.kind = TPURT_ARG_INT, .v.i = window},
                          {.kind = TPURT_ARG_DOUBLE, .v.d = softcap},
                          {.kind = TPURT_ARG_NONE},
                          {.kind = TPURT_ARG_STRING, .v.s = "auto"},
                          {.kind = TPURT_ARG_DOUBLE, .v.d = 1.0},
                          {.kind = TPURT_ARG_DOUBLE, .v.d = 1.0}};
  if (o && o->alibi) args[9] = targ(o->alibi);
  if (o && o->fmt) args[10].v.s = o->fmt, args[11].v.d = o->k_scale, args[12].v.d = o->v_scale;
  return test_op_run("torch_tpu::paged_attention", ref, args, 13, NULL, 0);
}
static tpurt_status_t run_pa(bool ref, tpurt_tensor_t* out, tpurt_tensor_t* q, tpurt_tensor_t* kv,
                             tpurt_tensor_t* qsl, tpurt_tensor_t* sl, tpurt_tensor_t* bt, double scale, int64_t window,
                             double softcap) {
  return run_pa_opts(ref, out, q, kv, qsl, sl, bt, scale, window, softcap, NULL);
}

/* A [NB, BS, H, 2D] cache view; head-major storage [NB, H, BS, 2D] when `head_major`
 * (the strides vLLM's other layouts give). */
static tpurt_tensor_t kv_view(tpurt_dtype_t dt, void* data, int64_t NB, int64_t BS, int64_t H, int64_t D2, bool head_major) {
  int64_t cs[4] = {NB, BS, H, D2};
  tpurt_tensor_t t = test_tensor_dense(dt, data, 4, cs);
  if (head_major) t.strides[1] = D2, t.strides[2] = BS * D2;
  return t;
}

/* S sequences with query lengths qlens[] and context lengths ctx[]; with ALiBi slopes when `alibi`,
 * over a cache of fp8 codes of format `fmt` when not NULL. */
static void pa_case_opts(tpurt_dtype_t dt, int S, const int64_t* qlens, const int64_t* ctx, int64_t Hq, int64_t Hkv,
                         int64_t D, int64_t BS, int64_t window, double softcap, bool generic, bool head_major,
                         bool alibi, const char* fmt) {
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
  tpurt_dtype_t cdt = fmt ? TPURT_DTYPE_UINT8 : dt;
  void *q = test_rand_buf(dt, T * Hq * D), *kv = fmt ? malloc(NB * BS * Hkv * 2 * D) : test_rand_buf(dt, NB * BS * Hkv * 2 * D);
  /* random codes without bit 6: exponents in the lower half, so no NaN or inf (magnitudes below 2) */
  if (fmt)
    for (int64_t i = 0; i < NB * BS * Hkv * 2 * D; ++i) ((uint8_t*)kv)[i] = (uint8_t)(test_rand_u64() & 0xbf);
  float slopes[16];
  for (int64_t h = 0; h < Hq; ++h) slopes[h] = (float)pow(2.0, -8.0 * (double)(h + 1) / (double)Hq);
  int64_t ss[1] = {Hq};
  tpurt_tensor_t tslopes = test_tensor_dense(TPURT_DTYPE_FLOAT32, slopes, 1, ss);
  pa_opts_t opts = {alibi ? &tslopes : NULL, fmt, 0.7, 1.3};
  void *o0 = calloc(T * Hq * D, tpurt_dtype_size(dt)), *o1 = calloc(T * Hq * D, tpurt_dtype_size(dt));
  tpurt_tensor_t tq = test_tensor_dense(dt, q, 3, qs), tkv = kv_view(cdt, kv, NB, BS, Hkv, 2 * D, head_major), tqsl = test_tensor_dense(TPURT_DTYPE_INT32, qsl, 1, s1),
                 tsl = test_tensor_dense(TPURT_DTYPE_INT32, sl, 1, s0), tbt = test_tensor_dense(TPURT_DTYPE_INT32, btd, 2, bs),
                 to0 = test_tensor_dense(dt, o0, 3, qs), to1 = test_tensor_dense(dt, o1, 3, qs);
  double scale = 1.0 / sqrt((double)D);
  tpurt_serve_set_generic(generic);
  CHECK_OK(run_pa_opts(false, &to0, &tq, &tkv, &tqsl, &tsl, &tbt, scale, window, softcap, &opts));
  CHECK_OK(run_pa_opts(true, &to1, &tq, &tkv, &tqsl, &tsl, &tbt, scale, window, softcap, &opts));
  double tol = dt == TPURT_DTYPE_FLOAT32 ? 2e-5 : 1e-2;
  double d = test_max_err(dt, o0, o1, T * Hq * D, 1.0);
  if (!(d <= tol)) fprintf(stderr, "paged_attention dt=%d Hq=%lld Hkv=%lld window=%lld alibi=%d fmt=%s: diff %g\n",
                           dt, (long long)Hq, (long long)Hkv, (long long)window, alibi, fmt ? fmt : "auto", d);
  CHECK(d <= tol);
  free(perm), free(btd), free(q), free(kv), free(o0), free(o1);
}
static void pa_case(tpurt_dtype_t dt, int S, const int64_t* qlens, const int64_t* ctx, int64_t Hq, int64_t Hkv,
                    int64_t D, int64_t BS, int64_t window, double softcap, bool generic, bool head_major) {
  pa_case_opts(dt, S, qlens, ctx, Hq, Hkv, D, BS, window, softcap, generic, head_major, false, NULL);
}

/* The fp8 conversions on values worked by hand: rounding to nearest even at the normal and
 * subnormal grids, saturation, NaN, signed zero; every finite code widens and narrows back to
 * itself. */
static void fp8_hand(void) {
  CHECK(tpurt_f32_to_fp8_e4m3(1.0f) == 0x38 && tpurt_fp8_e4m3_to_f32(0x38) == 1.0f);
  CHECK(tpurt_f32_to_fp8_e4m3(1.0625f) == 0x38);  /* halfway between 1 and 1.125: even (1) */
  CHECK(tpurt_f32_to_fp8_e4m3(1.1875f) == 0x3a);  /* halfway between 1.125 and 1.25: even (1.25) */
  CHECK(tpurt_f32_to_fp8_e4m3(448.0f) == 0x7e && tpurt_f32_to_fp8_e4m3(470.0f) == 0x7e);
  CHECK(tpurt_f32_to_fp8_e4m3(1e9f) == 0x7e && tpurt_f32_to_fp8_e4m3(-INFINITY) == 0xfe);
  CHECK((tpurt_f32_to_fp8_e4m3(NAN) & 0x7f) == 0x7f && isnan(tpurt_fp8_e4m3_to_f32(0x7f)));
  CHECK(tpurt_f32_to_fp8_e4m3(-0.0f) == 0x80 && tpurt_f32_to_fp8_e4m3(0x1p-9f) == 0x01);
  CHECK(tpurt_f32_to_fp8_e4m3(0x1p-10f) == 0x00 && tpurt_f32_to_fp8_e4m3(0x3p-10f) == 0x02);
  CHECK(tpurt_fp8_e4m3_to_f32(0x07) == 7 * 0x1p-9f && tpurt_fp8_e4m3_to_f32(0xfe) == -448.0f);
  CHECK(tpurt_f32_to_fp8_e5m2(1.0f) == 0x3c && tpurt_fp8_e5m2_to_f32(0x3c) == 1.0f);
  CHECK(tpurt_f32_to_fp8_e5m2(57344.0f) == 0x7b && tpurt_f32_to_fp8_e5m2(65536.0f) == 0x7b);
  CHECK(tpurt_f32_to_fp8_e5m2(INFINITY) == 0x7b && tpurt_f32_to_fp8_e5m2(0x1p-16f) == 0x01);
  CHECK(tpurt_f32_to_fp8_e5m2(1.125f) == 0x3c);   /* halfway between 1 and 1.25: even (1) */
  for (int fmt = TPURT_FP8_E4M3; fmt <= TPURT_FP8_E5M2; ++fmt)
    for (int c = 0; c < 256; ++c) {
      float f = tpurt_fp8_to_f32((tpurt_fp8_format_t)fmt, (tpurt_fp8_t)c);
      if (isfinite(f)) CHECK(tpurt_f32_to_fp8((tpurt_fp8_format_t)fmt, f) == c);
    }
}

/* reshape_and_cache into an fp8 cache, the kernel against its reference, and one element by hand. */
static void rc_fp8_case(const char* fmt) {
  enum { T = 5, H = 2, D = 19, NB = 3, BS = 2 };
  int64_t ks[3] = {T, H, D}, ss[1] = {T};
  float k[T * H * D], v[T * H * D];
  for (int i = 0; i < T * H * D; ++i) k[i] = (float)(i % 23) * 0.37f - 3.0f, v[i] = (float)(i % 7) * 100.0f - 250.0f;
  uint8_t c[2][NB * BS * H * 2 * D];
  memset(c, 0, sizeof c);
  int64_t slots[T] = {4, -1, 0, 5, 2};
  tpurt_tensor_t tk = test_tensor_dense(TPURT_DTYPE_FLOAT32, k, 3, ks), tv = test_tensor_dense(TPURT_DTYPE_FLOAT32, v, 3, ks),
                 tsl = test_tensor_dense(TPURT_DTYPE_INT64, slots, 1, ss);
  for (int r = 0; r < 2; ++r) {
    tpurt_tensor_t tkv = kv_view(TPURT_DTYPE_UINT8, c[r], NB, BS, H, 2 * D, true);
    tpurt_arg_t args[7] = {targ(&tk), targ(&tv), targ(&tkv), targ(&tsl), {.kind = TPURT_ARG_STRING, .v.s = fmt},
                           {.kind = TPURT_ARG_DOUBLE, .v.d = 0.5}, {.kind = TPURT_ARG_DOUBLE, .v.d = 4.0}};
    CHECK_OK(test_op_run("torch_tpu::reshape_and_cache", r == 1, args, 7, NULL, 0));
  }
  CHECK(memcmp(c[0], c[1], sizeof c[0]) == 0);
  /* token 3 (slot 5 = block 2, row 1), head 1, key element 4: k / 0.5 */
  tpurt_tensor_t tkv = kv_view(TPURT_DTYPE_UINT8, c[0], NB, BS, H, 2 * D, true);
  tpurt_fp8_format_t f = strcmp(fmt, "fp8_e5m2") ? TPURT_FP8_E4M3 : TPURT_FP8_E5M2;
  CHECK(c[0][2 * tkv.strides[0] + 1 * tkv.strides[1] + 1 * tkv.strides[2] + 4] ==
        tpurt_f32_to_fp8(f, k[(3 * H + 1) * D + 4] / 0.5f));
  /* a float cache named fp8, and an unknown format */
  float fc[NB * BS * H * 2 * D];
  tpurt_tensor_t tfc = kv_view(TPURT_DTYPE_FLOAT32, fc, NB, BS, H, 2 * D, true);
  tpurt_arg_t bad[5] = {targ(&tk), targ(&tv), targ(&tfc), targ(&tsl), {.kind = TPURT_ARG_STRING, .v.s = fmt}};
  CHECK_STATUS(test_op_run("torch_tpu::reshape_and_cache", false, bad, 5, NULL, 0), INVALID_ARGUMENT);
  bad[2] = targ(&tkv), bad[4].v.s = "fp4";
  CHECK_STATUS(test_op_run("torch_tpu::reshape_and_cache", false, bad, 5, NULL, 0), INVALID_ARGUMENT);
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
    pa_case_opts(TPURT_DTYPE_FLOAT32, 3, qb, cb, 8, 2, 64, 16, 0, 0.0, generic, true, true, NULL); /* ALiBi */
    pa_case_opts(TPURT_DTYPE_FLOAT32, 3, qb, cb, 6, 1, 24, 8, 5, 0.0, generic, false, true, NULL);
    pa_case_opts(TPURT_DTYPE_FLOAT32, 3, qb, cb, 8, 2, 64, 16, 0, 0.0, generic, true, false, "fp8");
    pa_case_opts(TPURT_DTYPE_BFLOAT16, 3, qc, cc, 4, 2, 32, 4, 0, 30.0, generic, false, true, "fp8_e5m2");
  }
  fp8_hand();
  rc_fp8_case("fp8_e4m3");
  rc_fp8_case("fp8_e5m2");
  tpurt_serve_set_generic(false);
  rc_case(TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT32, false);
  rc_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_BFLOAT16, true);
  rc_case(TPURT_DTYPE_FLOAT32, TPURT_DTYPE_BFLOAT16, false);
  return test_finish("test_paged");
}
