/* The serving family's layer kernels (ops/serve/layers.c): RMSNorm, RMSNorm
 * after a residual add in place, and SiLU-and-mul; and the sampler's top-k /
 * top-p filtering (ops/serve/sample.c, same masks as its reference, the
 * largest logit always kept). The fast kernels against
 * their plain references on random rows (float32 and bfloat16; row lengths
 * off the vector width; rows with a stride wider than the row); the residual
 * the fused kernel writes equals the reference's bit for bit; bad shapes are
 * reported. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/serve/serve.h"
#include "test_util.h"
#include "tpurt/tpurt.h"

static tpurt_arg_t targ(const tpurt_tensor_t* t) { return (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .v.tensor = t}; }
static tpurt_arg_t dbl(double v) { return (tpurt_arg_t){.kind = TPURT_ARG_DOUBLE, .v.d = v}; }

/* M rows of n elements, each row `pitch` elements apart (pitch >= n). */
static tpurt_tensor_t rows(tpurt_dtype_t dt, void* p, int64_t M, int64_t n, int64_t pitch) {
  tpurt_tensor_t t = test_tensor_dense(dt, p, 2, (int64_t[]){M, n});
  t.strides[0] = pitch;
  return t;
}

/* 1 ulp of float32 sums in another order, and of bfloat16 where that moves a rounding */
static double tol(tpurt_dtype_t dt) { return dt == TPURT_DTYPE_FLOAT32 ? 1e-5 : 1e-2; }

static void rms_case(tpurt_dtype_t dt, int64_t M, int64_t n, int64_t pitch, bool fused, bool weight) {
  size_t es = tpurt_dtype_size(dt);
  char* x = test_rand_buf(dt, M * pitch);
  char* res = test_rand_buf(dt, M * pitch);
  char* w = test_rand_buf(dt, n);
  char *x2 = malloc((size_t)(M * pitch) * es), *res2 = malloc((size_t)(M * pitch) * es);
  char *out = calloc((size_t)(M * pitch), es), *out2 = calloc((size_t)(M * pitch), es);
  memcpy(x2, x, (size_t)(M * pitch) * es);
  memcpy(res2, res, (size_t)(M * pitch) * es);
  tpurt_tensor_t tw = test_tensor_dense(dt, w, 1, (int64_t[]){n});
  for (int ref = 0; ref < 2; ++ref) {
    tpurt_tensor_t tx = rows(dt, ref ? x2 : x, M, n, pitch), tr = rows(dt, ref ? res2 : res, M, n, pitch),
                   to = rows(dt, ref ? out2 : out, M, n, pitch);
    tpurt_arg_t a[4] = {targ(fused ? &tx : &to), targ(fused ? &tr : &tx), weight ? targ(&tw) : (tpurt_arg_t){0},
                        dbl(1e-6)};
    CHECK_OK(test_op_run(fused ? "torch_tpu::fused_add_rms_norm" : "torch_tpu::rms_norm", ref, a, 4, NULL, 0));
  }
  const char *got = fused ? x : out, *want = fused ? x2 : out2;
  for (int64_t r = 0; r < M; ++r) {
    CHECK(test_max_err(dt, got + r * pitch * es, want + r * pitch * es, n, 1.0) <= tol(dt));
    if (fused) CHECK(memcmp(res + r * pitch * es, res2 + r * pitch * es, (size_t)n * es) == 0);
  }
  free(x), free(res), free(w), free(x2), free(res2), free(out), free(out2);
}

static void silu_case(tpurt_dtype_t dt, int64_t M, int64_t d, int64_t pitch) {
  size_t es = tpurt_dtype_size(dt);
  char* x = test_rand_buf(dt, M * pitch);
  for (int64_t i = 0; i < M * pitch; ++i)  /* [-8, 8): exp's range reduction at work */
    tpurt_dtype_store_f64(dt, x + i * es, 8 * tpurt_dtype_load_f64(dt, x + i * es));
  char *out = calloc((size_t)(M * d), es), *out2 = calloc((size_t)(M * d), es);
  tpurt_tensor_t tx = rows(dt, x, M, 2 * d, pitch);
  for (int ref = 0; ref < 2; ++ref) {
    tpurt_tensor_t to = test_tensor_dense(dt, ref ? out2 : out, 2, (int64_t[]){M, d});
    tpurt_arg_t a[2] = {targ(&to), targ(&tx)};
    CHECK_OK(test_op_run("torch_tpu::silu_and_mul", ref, a, 2, NULL, 0));
  }
  CHECK(test_max_err(dt, out, out2, M * d, 1e-3) <= (dt == TPURT_DTYPE_FLOAT32 ? 1e-6 : 1e-2));
  free(x), free(out), free(out2);
}

static void top_k_top_p_case(int64_t B, int64_t V, bool with_k, bool with_p) {
  float* x = test_rand_buf(TPURT_DTYPE_FLOAT32, B * V);
  for (int64_t i = 0; i < B * V; ++i) x[i] *= 6;
  float* x2 = malloc((size_t)(B * V) * 4);
  memcpy(x2, x, (size_t)(B * V) * 4);
  int64_t k[4] = {1, 7, V, V / 2};
  float p[4] = {0.9f, 0.0f, 0.5f, 1.0f};
  tpurt_tensor_t tk = test_tensor_dense(TPURT_DTYPE_INT64, k, 1, (int64_t[]){B}),
                 tp = test_tensor_dense(TPURT_DTYPE_FLOAT32, p, 1, (int64_t[]){B});
  for (int ref = 0; ref < 2; ++ref) {
    tpurt_tensor_t tx = test_tensor_dense(TPURT_DTYPE_FLOAT32, ref ? x2 : x, 2, (int64_t[]){B, V});
    tpurt_arg_t a[3] = {targ(&tx), with_k ? targ(&tk) : (tpurt_arg_t){0}, with_p ? targ(&tp) : (tpurt_arg_t){0}};
    CHECK_OK(test_op_run("torch_tpu::top_k_top_p", ref, a, 3, NULL, 0));
  }
  for (int64_t r = 0; r < B; ++r) {
    int64_t kept = 0, differ = 0;
    for (int64_t i = 0; i < V; ++i) {
      differ += isinf(x[r * V + i]) != isinf(x2[r * V + i]);
      kept += !isinf(x[r * V + i]);
    }
    CHECK(differ == 0 && kept >= 1);
    if (with_k && !with_p) CHECK(kept == k[r]);     /* random floats: no ties */
    if (with_p && p[r] == 0.0f) CHECK(kept == 1);  /* only the largest */
  }
  free(x), free(x2);
}

/* Penalties: the threaded kernel equals the one-thread reference, and a worked token: 3.0 seen in the
 * prompt and twice in the output with rep 2, freq 0.5, presence 0.25 gives 3 * 0.5 - 1 - 0.25. */
static void penalties_case(int64_t V) {
  enum { B = 3, P = 6, O = 5 };
  float* x = test_rand_buf(TPURT_DTYPE_FLOAT32, B * V);
  x[0] = 3.0f;
  float* x2 = malloc((size_t)(B * V) * 4);
  memcpy(x2, x, (size_t)(B * V) * 4);
  int64_t prompt[B * P], output[B * O];
  for (int i = 0; i < B * P; ++i) prompt[i] = (i * 7) % (V + 1); /* V: padding */
  for (int i = 0; i < B * O; ++i) output[i] = i % 4 == 3 ? -1 : (i * 5) % V;
  prompt[0] = 0, output[0] = 0, output[1] = 0;
  float pres[B] = {0.25f, -0.5f, 0}, freq[B] = {0.5f, 0.1f, 0}, rep[B] = {2.0f, 0.7f, 1};
  tpurt_tensor_t tp = test_tensor_dense(TPURT_DTYPE_INT64, prompt, 2, (int64_t[]){B, P}),
                 to = test_tensor_dense(TPURT_DTYPE_INT64, output, 2, (int64_t[]){B, O}),
                 t1 = test_tensor_dense(TPURT_DTYPE_FLOAT32, pres, 1, (int64_t[]){B}),
                 t2 = test_tensor_dense(TPURT_DTYPE_FLOAT32, freq, 1, (int64_t[]){B}),
                 t3 = test_tensor_dense(TPURT_DTYPE_FLOAT32, rep, 1, (int64_t[]){B});
  for (int ref = 0; ref < 2; ++ref) {
    tpurt_tensor_t tx = test_tensor_dense(TPURT_DTYPE_FLOAT32, ref ? x2 : x, 2, (int64_t[]){B, V});
    tpurt_arg_t a[6] = {targ(&tx), targ(&tp), targ(&to), targ(&t1), targ(&t2), targ(&t3)};
    CHECK_OK(test_op_run("torch_tpu::apply_penalties", ref, a, 6, NULL, 0));
  }
  CHECK(memcmp(x, x2, (size_t)(B * V) * 4) == 0);
  CHECK(x[0] == 3.0f * 0.5f - 1.0f - 0.25f);
  free(x), free(x2);
}

/* min-p in logit space against the reference's softmax in double: equal masks but within rounding of
 * the threshold; min_p 0 leaves its row. */
static void min_p_case(int64_t V) {
  enum { B = 4 };
  float* x = test_rand_buf(TPURT_DTYPE_FLOAT32, B * V);
  for (int64_t i = 0; i < B * V; ++i) x[i] *= 5;
  float* x0 = malloc((size_t)(B * V) * 4), *x2 = malloc((size_t)(B * V) * 4);
  memcpy(x0, x, (size_t)(B * V) * 4), memcpy(x2, x, (size_t)(B * V) * 4);
  float mp[B] = {0.1f, 0, 0.5f, 1e-3f};
  tpurt_tensor_t tm = test_tensor_dense(TPURT_DTYPE_FLOAT32, mp, 1, (int64_t[]){B});
  for (int ref = 0; ref < 2; ++ref) {
    tpurt_tensor_t tx = test_tensor_dense(TPURT_DTYPE_FLOAT32, ref ? x2 : x, 2, (int64_t[]){B, V});
    tpurt_arg_t a[2] = {targ(&tx), targ(&tm)};
    CHECK_OK(test_op_run("torch_tpu::min_p", ref, a, 2, NULL, 0));
  }
  for (int64_t r = 0; r < B; ++r) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < V; ++i) mx = fmaxf(mx, x0[r * V + i]);
    int64_t kept = 0;
    for (int64_t i = 0; i < V; ++i) {
      const int64_t k = r * V + i;
      kept += !isinf(x[k]);
      if (isinf(x[k]) != isinf(x2[k])) CHECK(fabs(x0[k] - mx - log(mp[r])) < 1e-5);
    }
    CHECK(kept >= 1 && (mp[r] != 0 || kept == V));
  }
  free(x), free(x0), free(x2);
}

/* The draw: argmax of probs / q, the first of equals; a NaN wins as in torch.argmax. */
static void draw_case(void) {
  float probs[3 * 4] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.5f, 0, 0, 0, 0.5f, 0, 0.5f};
  float q[3 * 4] = {1, 1, 1, 4, 1, 1, 1, 1, 1, 1, 0, 1}; /* row 0: 0.3 wins; row 1: a tie; row 2: 0/0 */
  for (int ref = 0; ref < 2; ++ref) {
    int64_t out[3] = {-1, -1, -1};
    tpurt_tensor_t to = test_tensor_dense(TPURT_DTYPE_INT64, out, 1, (int64_t[]){3}),
                   tp = test_tensor_dense(TPURT_DTYPE_FLOAT32, probs, 2, (int64_t[]){3, 4}),
                   tq = test_tensor_dense(TPURT_DTYPE_FLOAT32, q, 2, (int64_t[]){3, 4});
    tpurt_arg_t a[3] = {targ(&to), targ(&tp), targ(&tq)};
    CHECK_OK(test_op_run("torch_tpu::sample_exponential", ref, a, 3, NULL, 0));
    CHECK(out[0] == 2 && out[1] == 0 && out[2] == 2);
  }
}

static void bad_cases(void) {
  float x[4 * 8] = {0}, w[5] = {0}, o[4 * 8];
  tpurt_tensor_t tx = test_tensor_dense(TPURT_DTYPE_FLOAT32, x, 2, (int64_t[]){4, 8}),
                 to = test_tensor_dense(TPURT_DTYPE_FLOAT32, o, 2, (int64_t[]){4, 8}),
                 tw = test_tensor_dense(TPURT_DTYPE_FLOAT32, w, 1, (int64_t[]){5}),
                 th = test_tensor_dense(TPURT_DTYPE_FLOAT32, o, 2, (int64_t[]){4, 3});
  tpurt_arg_t a[4] = {targ(&to), targ(&tx), targ(&tw), dbl(1e-6)};
  CHECK_STATUS(test_op_run("torch_tpu::rms_norm", false, a, 4, NULL, 0), INVALID_ARGUMENT); /* weight of 5 */
  a[2] = (tpurt_arg_t){0};
  a[3] = dbl(-1);
  CHECK_STATUS(test_op_run("torch_tpu::rms_norm", false, a, 4, NULL, 0), INVALID_ARGUMENT); /* eps < 0 */
  tpurt_arg_t s[2] = {targ(&th), targ(&tx)};
  CHECK_STATUS(test_op_run("torch_tpu::silu_and_mul", false, s, 2, NULL, 0), INVALID_ARGUMENT); /* out 3 != 4 */
}

int main(void) {
  const tpurt_dtype_t dts[2] = {TPURT_DTYPE_FLOAT32, TPURT_DTYPE_BFLOAT16};
  for (int k = 0; k < 2; ++k) {
    for (int fused = 0; fused < 2; ++fused) {
      rms_case(dts[k], 5, 64, 64, fused, true);
      rms_case(dts[k], 3, 1000, 1003, fused, true);
      rms_case(dts[k], 4, 37, 50, fused, false);
    }
    silu_case(dts[k], 5, 64, 128);
    silu_case(dts[k], 3, 1001, 2050);
  }
  for (int m = 1; m < 4; ++m) {
    top_k_top_p_case(4, 1000, m & 1, m & 2);
    top_k_top_p_case(4, 40000, m & 1, m & 2);
  }
  penalties_case(50);
  penalties_case(32000);
  min_p_case(7);
  min_p_case(32000);
  draw_case();
  bad_cases();
  return test_finish("test_layers");
}
