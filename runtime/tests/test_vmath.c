/* The vectorizable float math in ops/elementwise/ew_vmath.h (tanh, erf,
 * log1p) against libm's double functions rounded to float: max ulp error over
 * a sweep of every float magnitude, random values and the special values. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ops/elementwise/ew_expf.h"
#include "ops/elementwise/ew_vmath.h"
#include "ops/half_vec.h"
#include "test_util.h"

/* error of got in units of the float ulp at the exact value ref */
static double ulp_err(float got, double ref) {
  if (isnan(ref)) return isnan(got) ? 0.0 : INFINITY;
  if (isinf(ref) || isinf(got)) return (double)got == ref ? 0.0 : INFINITY;
  float rf = (float)ref;
  double ulp = fabs((double)nextafterf(fabsf(rf), INFINITY) - (double)fabsf(rf));
  if (fabs(ref) < FLT_MIN) ulp = 0x1p-149; /* denormal results: one denormal step */
  return fabs((double)got - ref) / ulp;
}

typedef float (*vm_fn_t)(float);
typedef double (*ref_fn_t)(double);

/* Every 2039th bit pattern (all exponents, both signs), 200000 randoms in
 * [-lim, lim], and the specials; returns the max ulp error, at *worst. */
static double sweep(vm_fn_t f, ref_fn_t ref, float lim, bool nonneg, float* worst) {
  double mx = 0;
  *worst = 0;
#define TRY(X)                                      \
  do {                                              \
    float x_ = (X);                                 \
    if (nonneg && !(x_ >= 0)) break;                \
    double e_ = ulp_err(f(x_), ref((double)x_));    \
    if (e_ > mx) { mx = e_; *worst = x_; }          \
  } while (0)
  for (uint64_t b = 0; b < (1ull << 32); b += 2039) {
    uint32_t u = (uint32_t)b;
    float x;
    memcpy(&x, &u, 4);
    TRY(x);
  }
  for (int i = 0; i < 200000; ++i) TRY((float)((test_rand_unit() * 2 - 1) * lim));
  const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f, 1e-40f, FLT_MIN, -FLT_MIN,
                      FLT_MAX, -FLT_MAX, 0.625f, -0.625f, 0.921875f, 2.0f, -2.0f, 3.9192059f, 4.0f,
                      9.0f, 9.1f, 44.0f, 45.0f, 88.8f, 1e10f};
  for (size_t i = 0; i < sizeof sp / sizeof sp[0]; ++i) {
    TRY(sp[i]);
    TRY(nextafterf(sp[i], 0));
    TRY(nextafterf(sp[i], INFINITY));
  }
#undef TRY
  return mx;
}

static double ref_log1p(double x) { return log1p(x); }
static double ref_tanh(double x) { return tanh(x); }
static double ref_erf(double x) { return erf(x); }

static bool same_bits(float a, float b) { return memcmp(&a, &b, 4) == 0; }

/* The bulk bf16 converters (ops/half_vec.h: 16-, 8-lane and scalar loops, and vcvtneps2bf16 where
 * built for AVX-512 BF16) give exactly the scalar converters' bits: every 9973th float bit pattern
 * (denormals, NaN payloads, ties and overflow to infinity included) at every offset of a run. */
static void test_half_vec_bits(void) {
  enum { N = 4096 };
  static float f[N], back[N];
  static uint16_t h[N];
  uint32_t bits = 0;
  int bad = 0;
  for (uint64_t start = 0; start < ((uint64_t)1 << 32); start += (uint64_t)9973 * N) {
    for (int i = 0; i < N; ++i) {
      bits = (uint32_t)(start + (uint64_t)i * 9973);
      if (i % 61 == 7) bits = (bits & 0x807fffffu) | (i % 2 ? 0 : 0x7f800000u); /* denormal or NaN/inf */
      if (i % 67 == 3) bits = (bits & 0xffff0000u) | 0x8000u;                   /* a tie */
      memcpy(&f[i], &bits, 4);
    }
    int64_t len = N - (int64_t)(start / 9973 % 23); /* runs of odd lengths: every loop's tail */
    tpurt_hv_f32_to_bf16(f, h, len);
    for (int64_t i = 0; i < len; ++i) bad += h[i] != tpurt_f32_to_bf16(f[i]);
    tpurt_hv_bf16_to_f32(h, back, len);
    for (int64_t i = 0; i < len; ++i) bad += !same_bits(back[i], tpurt_bf16_to_f32(h[i]));
  }
  CHECK(bad == 0);
}

/* The 8- and 16-lane exps (ops/elementwise/ew_expf.h, where built) give the
 * scalar tpurt_ew_expf's bits: every 997th float bit pattern (all exponents,
 * both signs: overflow, underflow to denormals and 0, infinities and NaN). */
static void test_expf_lanes_bits(void) {
  int bad = 0, checked = 0;
  float x[16], y[16];
  for (uint64_t b = 0; b < ((uint64_t)1 << 32); b += (uint64_t)997 * 16) {
    for (int i = 0; i < 16; ++i) {
      uint32_t u = (uint32_t)(b + (uint64_t)i * 997);
      memcpy(&x[i], &u, 4);
    }
    (void)y;
#if defined(__AVX2__) && defined(__FMA__)
    _mm256_storeu_ps(y, tpurt_ew_expf8(_mm256_loadu_ps(x)));
    _mm256_storeu_ps(y + 8, tpurt_ew_expf8(_mm256_loadu_ps(x + 8)));
    for (int i = 0; i < 16; ++i) bad += !same_bits(y[i], tpurt_ew_expf(x[i])) && !(isnan(y[i]) && isnan(x[i]));
    checked += 16;
#endif
#if defined(__AVX512F__)
    _mm512_storeu_ps(y, tpurt_ew_expf16(_mm512_loadu_ps(x)));
    for (int i = 0; i < 16; ++i) bad += !same_bits(y[i], tpurt_ew_expf(x[i])) && !(isnan(y[i]) && isnan(x[i]));
    checked += 16;
#endif
  }
  printf("vector expf: %d lanes checked against the scalar bits\n", checked);
  CHECK(bad == 0);
}

int main(void) {
  test_half_vec_bits();
  test_expf_lanes_bits();
  float w;
  double e = sweep(tpurt_vm_tanhf, ref_tanh, 12.0f, false, &w);
  printf("tanhf: max %.3f ulp at %.9g\n", e, (double)w);
  CHECK(e <= 2.0);
  e = sweep(tpurt_vm_erff, ref_erf, 5.0f, false, &w);
  printf("erff: max %.3f ulp at %.9g\n", e, (double)w);
  CHECK(e <= 2.0);
  e = sweep(tpurt_vm_log1p_posf, ref_log1p, 1e9f, true, &w);
  printf("log1p_posf: max %.3f ulp at %.9g\n", e, (double)w);
  CHECK(e <= 3.0);

  /* exact specials: saturation, signed zero, NaN */
  CHECK(tpurt_vm_tanhf(INFINITY) == 1.0f && tpurt_vm_tanhf(-INFINITY) == -1.0f);
  CHECK(tpurt_vm_tanhf(10.0f) == 1.0f && tpurt_vm_tanhf(-50.0f) == -1.0f && tpurt_vm_tanhf(FLT_MAX) == 1.0f);
  CHECK(same_bits(tpurt_vm_tanhf(-0.0f), -0.0f) && same_bits(tpurt_vm_tanhf(0.0f), 0.0f));
  CHECK(tpurt_vm_tanhf(1e-40f) == 1e-40f && tpurt_vm_tanhf(-1e-45f) == -1e-45f);
  CHECK(isnan(tpurt_vm_tanhf(NAN)) && isnan(tpurt_vm_tanhf(-NAN)));
  CHECK(tpurt_vm_erff(INFINITY) == 1.0f && tpurt_vm_erff(-INFINITY) == -1.0f);
  CHECK(tpurt_vm_erff(4.0f) == 1.0f && tpurt_vm_erff(-1e30f) == -1.0f);
  CHECK(same_bits(tpurt_vm_erff(-0.0f), -0.0f) && same_bits(tpurt_vm_erff(0.0f), 0.0f));
  CHECK(isnan(tpurt_vm_erff(NAN)));
  CHECK(tpurt_vm_log1p_posf(0.0f) == 0.0f && tpurt_vm_log1p_posf(1e-30f) == 1e-30f);
  CHECK(tpurt_vm_log1p_posf(INFINITY) == INFINITY && isnan(tpurt_vm_log1p_posf(NAN)));
  CHECK(tpurt_vm_log1p_posf(FLT_MAX) == (float)log1p((double)FLT_MAX));
  return test_finish("test_vmath");
}
