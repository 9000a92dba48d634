/* Random kernels: Philox known answers, optimized vs reference, values that
 * depend only on (seed, offset, index) (a longer tensor extends a shorter one,
 * so no split of the work can change them), moments, ranges, bad arguments. */
#include <math.h>
#include <string.h>

#include "ops/elementwise/philox.h"
#include "test_util.h"

static tpurt_tensor_t vec(tpurt_dtype_t dt, void* data, int64_t n) {
  tpurt_tensor_t t = {.data = data, .dtype = dt, .ndim = 1};
  t.sizes[0] = n;
  t.strides[0] = 1;
  return t;
}

static tpurt_status_t run(const char* name, const char* overload, tpurt_arg_t* args, int nargs, tpurt_tensor_t* outs,
                          int nouts, bool reference) {
  const tpurt_op_def_t* d = tpurt_op_lookup(name);
  if (!d) return TPURT_STATUS(NOT_FOUND, "%s", name);
  tpurt_op_call_t c = {.name = name, .overload = overload, .num_args = nargs, .args = args, .num_outputs = nouts,
                       .outputs = outs};
  return tpurt_kernel_run(reference ? d->reference : d->fn, &c);
}

static tpurt_arg_t targ(const tpurt_tensor_t* t) { return (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .v.tensor = t}; }
static tpurt_arg_t darg(double v) { return (tpurt_arg_t){.kind = TPURT_ARG_DOUBLE, .v.d = v}; }
static tpurt_arg_t iarg(int64_t v) { return (tpurt_arg_t){.kind = TPURT_ARG_INT, .v.i = v}; }
static tpurt_arg_t rarg(uint64_t seed, uint64_t off) {
  tpurt_arg_t a = {.kind = TPURT_ARG_RNG};
  a.v.rng.seed = seed;
  a.v.rng.offset = off;
  return a;
}

static void test_philox_kat(void) {
  /* Random123 known answers for philox4x32_10 */
  tpurt_philox_out_t r = tpurt_philox4x32_10(0, 0, 0);
  CHECK(r.v[0] == 0x6627e8d5u && r.v[1] == 0xe169c58du && r.v[2] == 0xbc57ac4cu && r.v[3] == 0x9b00dbd8u);
  r = tpurt_philox4x32_10(~0ull, ~0ull, ~0ull);
  CHECK(r.v[0] == 0x408f276du && r.v[1] == 0x41c83b0eu && r.v[2] == 0xa20bc7c6u && r.v[3] == 0x6d5451fdu);
}

enum { N = 1 << 20 };

static void moments(const float* x, int64_t n, double* mean, double* sd) {
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < n; ++i) { s += x[i]; s2 += (double)x[i] * x[i]; }
  *mean = s / n;
  *sd = sqrt(s2 / n - *mean * *mean);
}

/* The N values `op` drew into a are what its reference (element by element) draws, and a draw of
 * N - 13 into tb is their prefix: values depend on the index only (vector loops, tails, odd starts). */
static void check_reference_and_prefix(const char* op, tpurt_arg_t* args, int nargs, const float* a,
                                       tpurt_tensor_t* tb, float* b) {
  CHECK_OK(run(op, "", args, nargs, tb, 1, true));
  CHECK(memcmp(a, b, N * 4) == 0);
  tb->sizes[0] = N - 13;
  memset(b, 0, N * 4);
  CHECK_OK(run(op, "", args, nargs, tb, 1, false));
  CHECK(memcmp(a, b, (N - 13) * 4) == 0);
  tb->sizes[0] = N;
}

static void test_distributions(void) {
  float* a = malloc(N * 4);
  float* b = malloc(N * 4);
  tpurt_tensor_t ta = vec(TPURT_DTYPE_FLOAT32, a, N), tb = vec(TPURT_DTYPE_FLOAT32, b, N);
  double m, s;
  /* uniform_(2, 5) */
  tpurt_arg_t ua[4] = {targ(&ta), darg(2), darg(5), rarg(42, 0)};
  CHECK_OK(run("uniform", "", ua, 4, &ta, 1, false));
  moments(a, N, &m, &s);
  CHECK(fabs(m - 3.5) < 0.01 && fabs(s - 3 / sqrt(12.0)) < 0.01);
  float lo = 1e9f, hi = -1e9f;
  for (int i = 0; i < N; ++i) { lo = fminf(lo, a[i]); hi = fmaxf(hi, a[i]); }
  CHECK(lo >= 2 && hi < 5);
  check_reference_and_prefix("uniform", ua, 4, a, &tb, b);
  /* another seed differs; another offset differs */
  ua[3] = rarg(43, 0);
  CHECK_OK(run("uniform", "", ua, 4, &tb, 1, false));
  CHECK(memcmp(a, b, N * 4) != 0);
  /* normal_(1, 2) */
  tpurt_arg_t na[4] = {targ(&ta), darg(1), darg(2), rarg(7, 100)};
  CHECK_OK(run("normal", "", na, 4, &ta, 1, false));
  moments(a, N, &m, &s);
  CHECK(fabs(m - 1) < 0.01 && fabs(s - 2) < 0.01);
  check_reference_and_prefix("normal", na, 4, a, &tb, b);
  /* bfloat16 and float16 outputs: the float32 values rounded, as the reference rounds them */
  {
    enum { H = 4099 };
    static uint16_t h1[H], h2[H];
    for (int dti = 0; dti < 2; ++dti) {
      const tpurt_dtype_t hdt = dti ? TPURT_DTYPE_FLOAT16 : TPURT_DTYPE_BFLOAT16;
      tpurt_tensor_t th1 = vec(hdt, h1, H), th2 = vec(hdt, h2, H);
      for (int k = 0; k < 3; ++k) {
        tpurt_arg_t ha[4] = {targ(&th1), darg(k ? 1 : -2), darg(k ? 2 : 3), rarg(11, 5)};
        tpurt_arg_t hb[4] = {targ(&th2), darg(k ? 1 : -2), darg(k ? 2 : 3), rarg(11, 5)};
        const char* op = k == 2 ? "exponential" : k ? "normal" : "uniform";
        if (k == 2) ha[2] = ha[3], hb[2] = hb[3]; /* exponential_(self, lambd, generator) */
        CHECK_OK(run(op, "", ha, k == 2 ? 3 : 4, &th1, 1, false));
        CHECK_OK(run(op, "", hb, k == 2 ? 3 : 4, &th2, 1, true));
        CHECK(memcmp(h1, h2, sizeof h1) == 0);
      }
    }
  }
  na[2] = darg(-1);
  CHECK_STATUS(run("normal", "", na, 4, &ta, 1, false), INVALID_ARGUMENT);
  /* normal.Tensor_float(mean tensor, std) */
  float mean2[2] = {-10, 10};
  tpurt_tensor_t tm = {.data = mean2, .dtype = TPURT_DTYPE_FLOAT32, .ndim = 2, .sizes = {1, 2}, .strides = {2, 1}};
  tpurt_tensor_t t2 = {.data = a, .dtype = TPURT_DTYPE_FLOAT32, .ndim = 2, .sizes = {N / 2, 2}, .strides = {2, 1}};
  tpurt_arg_t nt[3] = {targ(&tm), darg(0.5), rarg(9, 0)};
  CHECK_OK(run("normal", "Tensor_float", nt, 3, &t2, 1, false));
  double s0 = 0, s1 = 0;
  for (int i = 0; i < N; i += 2) { s0 += a[i]; s1 += a[i + 1]; }
  CHECK(fabs(s0 / (N / 2) + 10) < 0.01 && fabs(s1 / (N / 2) - 10) < 0.01);
  /* bernoulli_(0.3) */
  tpurt_arg_t ba[3] = {targ(&ta), darg(0.3), rarg(5, 0)};
  CHECK_OK(run("bernoulli", "float", ba, 3, &ta, 1, false));
  moments(a, N, &m, &s);
  CHECK(fabs(m - 0.3) < 0.005);
  ba[1] = darg(1.5);
  CHECK_STATUS(run("bernoulli", "float", ba, 3, &ta, 1, false), INVALID_ARGUMENT);
  /* exponential_(2): mean 1/2 */
  tpurt_arg_t ea[3] = {targ(&ta), darg(2), rarg(5, 0)};
  CHECK_OK(run("exponential", "", ea, 3, &ta, 1, false));
  moments(a, N, &m, &s);
  CHECK(fabs(m - 0.5) < 0.01 && fabs(s - 0.5) < 0.01);
  {
    float lo_e = 1e9f;
    for (int i = 0; i < N; ++i) lo_e = fminf(lo_e, a[i]);
    CHECK(lo_e >= 0);
  }
  check_reference_and_prefix("exponential", ea, 3, a, &tb, b);
  /* native_dropout: mask mean 1-p, kept values scaled */
  for (int i = 0; i < N; ++i) b[i] = 1.0f;
  uint8_t* mask = malloc(N);
  tpurt_tensor_t outs[2] = {ta, vec(TPURT_DTYPE_BOOL, mask, N)};
  tpurt_arg_t da[4] = {targ(&tb), darg(0.25), {.kind = TPURT_ARG_BOOL, .v.b = true}, rarg(3, 0)};
  CHECK_OK(run("native_dropout", "", da, 4, outs, 2, false));
  int64_t kept = 0, bad = 0;
  for (int i = 0; i < N; ++i) {
    kept += mask[i];
    if (a[i] != (mask[i] ? 1.0f / 0.75f : 0.0f)) ++bad;
  }
  CHECK(bad == 0 && fabs((double)kept / N - 0.75) < 0.005);
  free(mask);
  free(a);
  free(b);
}

static void test_random_ranges(void) {
  int64_t v[4096];
  tpurt_tensor_t t = vec(TPURT_DTYPE_INT64, v, 4096);
  tpurt_arg_t a[4] = {targ(&t), iarg(-3), iarg(4), rarg(1, 0)};
  CHECK_OK(run("random", "from", a, 4, &t, 1, false));
  int64_t lo = 100, hi = -100;
  for (int i = 0; i < 4096; ++i) { lo = v[i] < lo ? v[i] : lo; hi = v[i] > hi ? v[i] : hi; }
  CHECK(lo == -3 && hi == 3);
  tpurt_arg_t b[3] = {targ(&t), iarg(10), rarg(1, 0)};
  CHECK_OK(run("random", "to", b, 3, &t, 1, false));
  lo = 100; hi = -100;
  for (int i = 0; i < 4096; ++i) { lo = v[i] < lo ? v[i] : lo; hi = v[i] > hi ? v[i] : hi; }
  CHECK(lo == 0 && hi == 9);
  uint8_t u[4096];
  tpurt_tensor_t tu = vec(TPURT_DTYPE_UINT8, u, 4096);
  tpurt_arg_t c[2] = {targ(&tu), rarg(1, 0)};
  CHECK_OK(run("random", "", c, 2, &tu, 1, false));
  int seen_hi = 0;
  for (int i = 0; i < 4096; ++i) seen_hi |= u[i] >= 250;
  CHECK(seen_hi);
  a[1] = iarg(5);
  a[2] = iarg(5);
  CHECK_STATUS(run("random", "from", a, 4, &t, 1, false), INVALID_ARGUMENT);
}

int main(void) {
  test_philox_kat();
  test_distributions();
  test_random_ranges();
  return test_finish("test_random");
}
