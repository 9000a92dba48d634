/* The float32 activation math of ew_expf.h / ew_vmath.h / ew_math.c written
 * once over a small vector layer: 16 lanes where the build has AVX-512F, 8
 * where it has AVX2 and FMA (EWV_W, 0 elsewhere). Each function is its
 * scalar definition operation for operation (the same constants, fmas,
 * roundings, selects and order), so its lanes give the scalar bits exactly
 * (runtime/tests/test_vmath.c checks every function on both widths); the
 * elementwise family's contiguous float32 loops use these (ew_math.c, EW_V),
 * where gcc's own vectorization of the scalar code spends about twice the
 * instructions on its selects and 2^n scaling. Internal; not an ABI. */
#ifndef TPURT_OPS_ELEMENTWISE_EW_SIMD_H_
#define TPURT_OPS_ELEMENTWISE_EW_SIMD_H_

#include <float.h>
#include <math.h>

#include "ops/elementwise/ew_expf.h"
#include "ops/half_vec.h"

#if defined(__AVX512F__)
#define EWV_W 16
typedef __m512 ewv_t;
typedef __mmask16 ewm_t;
#define ewv_set1 _mm512_set1_ps
#define ewv_load _mm512_loadu_ps
#define ewv_store _mm512_storeu_ps
#define ewv_stream _mm512_stream_ps /* 64-byte aligned */
#define ewv_add _mm512_add_ps
#define ewv_sub _mm512_sub_ps
#define ewv_mul _mm512_mul_ps
#define ewv_div _mm512_div_ps
#define ewv_fma _mm512_fmadd_ps
#define ewv_exp tpurt_ew_expf16
static inline ewv_t ewv_abs(ewv_t x) { return _mm512_abs_ps(x); }
static inline ewv_t ewv_neg(ewv_t x) {
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
}
/* |mag| with sgn's sign bit (copysignf): one bitwise select */
static inline ewv_t ewv_copysign(ewv_t mag, ewv_t sgn) {
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_set1_epi32(INT32_MIN), _mm512_castps_si512(mag),
                                                       _mm512_castps_si512(sgn), 0xac)); /* sign ? sgn : mag */
}
static inline ewm_t ewv_lt(ewv_t a, ewv_t b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline ewm_t ewv_gt(ewv_t a, ewv_t b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
static inline ewm_t ewv_ge(ewv_t a, ewv_t b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
static inline ewm_t ewv_eq(ewv_t a, ewv_t b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
static inline ewm_t ewv_isnan(ewv_t a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
/* 2^n for integral n in [-126, 127] */
static inline ewv_t ewv_pow2(ewv_t n) { return _mm512_scalef_ps(_mm512_set1_ps(1.0f), n); }
#define ewv_exp_reduce tpurt_ew_exp16_reduce
/* A positive normal or denormal u as m * 2^e, m in [0.5, 1) (vgetmantps / vgetexpps read denormals
 * as they are); e as a float. Other inputs: anything (callers select their results). */
static inline ewv_t ewv_frexp(ewv_t u, ewv_t* e) {
  *e = _mm512_add_ps(_mm512_getexp_ps(u), _mm512_set1_ps(1.0f));
  return _mm512_getmant_ps(u, _MM_MANT_NORM_p5_1, _MM_MANT_SIGN_zero);
}
/* m ? t : f, per lane */
static inline ewv_t ewv_sel(ewm_t m, ewv_t t, ewv_t f) { return _mm512_mask_blend_ps(m, f, t); }
#elif defined(__AVX2__) && defined(__FMA__)
#define EWV_W 8
typedef __m256 ewv_t;
typedef __m256 ewm_t;
#define ewv_set1 _mm256_set1_ps
#define ewv_load _mm256_loadu_ps
#define ewv_store _mm256_storeu_ps
#define ewv_stream _mm256_stream_ps /* 32-byte aligned */
#define ewv_add _mm256_add_ps
#define ewv_sub _mm256_sub_ps
#define ewv_mul _mm256_mul_ps
#define ewv_div _mm256_div_ps
#define ewv_fma _mm256_fmadd_ps
#define ewv_exp tpurt_ew_expf8
static inline ewv_t ewv_abs(ewv_t x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
static inline ewv_t ewv_neg(ewv_t x) { return _mm256_xor_ps(x, _mm256_set1_ps(-0.0f)); }
static inline ewv_t ewv_copysign(ewv_t mag, ewv_t sgn) {
  const __m256 s = _mm256_set1_ps(-0.0f);
  return _mm256_or_ps(_mm256_andnot_ps(s, mag), _mm256_and_ps(s, sgn));
}
static inline ewm_t ewv_lt(ewv_t a, ewv_t b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline ewm_t ewv_gt(ewv_t a, ewv_t b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
static inline ewm_t ewv_ge(ewv_t a, ewv_t b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
static inline ewm_t ewv_eq(ewv_t a, ewv_t b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
static inline ewm_t ewv_isnan(ewv_t a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
static inline ewv_t ewv_pow2(ewv_t n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23));
}
#define ewv_exp_reduce tpurt_ew_exp8_reduce
/* ewv_frexp of the AVX-512 layer from the bits, as tpurt_vm_logf reads them (denormals scaled by 2^23) */
static inline ewv_t ewv_frexp(ewv_t u, ewv_t* e) {
  const __m256 den = _mm256_cmp_ps(u, _mm256_set1_ps(FLT_MIN), _CMP_LT_OQ);
  const __m256i b = _mm256_castps_si256(_mm256_blendv_ps(u, _mm256_mul_ps(u, _mm256_set1_ps(8388608.0f)), den));
  const __m256i bias = _mm256_blendv_epi8(_mm256_set1_epi32(126), _mm256_set1_epi32(149), _mm256_castps_si256(den));
  *e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(b, 23), bias));
  return _mm256_castsi256_ps(
      _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f000000)));
}
static inline ewv_t ewv_sel(ewm_t m, ewv_t t, ewv_t f) { return _mm256_blendv_ps(f, t, m); }
#else
#define EWV_W 0
#endif

/* bfloat16 lanes in and out (ops/half_vec.h: the scalar converters' bits) */
#if EWV_W == 16 && defined(__AVX512BW__)
#define EWV_BF16 1
static inline ewv_t ewv_load_bf16(const uint16_t* s) { return tpurt_hv_bf16x16_load(s); }
static inline void ewv_store_bf16(uint16_t* d, ewv_t v) { _mm256_storeu_si256((__m256i*)d, tpurt_hv_bf16x16_pack(v)); }
#elif EWV_W == 8
#define EWV_BF16 1
static inline ewv_t ewv_load_bf16(const uint16_t* s) { return tpurt_hv_bf16x8_load(s); }
static inline void ewv_store_bf16(uint16_t* d, ewv_t v) { tpurt_hv_bf16x8_store(d, v); }
#else
#define EWV_BF16 0
#endif

#if EWV_W
#define EWV_C(c) ewv_set1(c)

/* tpurt_vm_tanhf */
static inline ewv_t ewv_tanh(ewv_t x) {
  const ewv_t ax = ewv_abs(x), z = ewv_mul(x, x);
  ewv_t q = EWV_C(-5.70498872745e-3f);
  q = ewv_fma(q, z, EWV_C(2.06390887954e-2f));
  q = ewv_fma(q, z, EWV_C(-5.37397155531e-2f));
  q = ewv_fma(q, z, EWV_C(1.33314422036e-1f));
  q = ewv_fma(q, z, EWV_C(-3.33332819422e-1f));
  const ewv_t small = ewv_copysign(ewv_fma(ewv_mul(q, z), x, x), x);
  const ewv_t e = ewv_exp(ewv_mul(EWV_C(2.0f), ax));
  const ewv_t big = ewv_copysign(ewv_sub(EWV_C(1.0f), ewv_div(EWV_C(2.0f), ewv_add(e, EWV_C(1.0f)))), x);
  return ewv_sel(ewv_lt(ax, EWV_C(0.625f)), small, big);
}

/* tpurt_vm_erff */
static inline ewv_t ewv_erf(ewv_t x) {
  const ewv_t ax = ewv_abs(x), z = ewv_mul(x, x);
  ewv_t q = EWV_C(8.397491183e-05f);
  q = ewv_fma(q, z, EWV_C(-8.149725035e-04f));
  q = ewv_fma(q, z, EWV_C(5.201708060e-03f));
  q = ewv_fma(q, z, EWV_C(-2.685969882e-02f));
  q = ewv_fma(q, z, EWV_C(1.128370166e-01f));
  q = ewv_fma(q, z, EWV_C(-3.761263490e-01f));
  q = ewv_fma(q, z, EWV_C(1.283791661e-01f));
  const ewv_t small = ewv_fma(x, q, x);
  const ewv_t t = ewv_sub(ax, EWV_C(2.2f));
  ewv_t r = EWV_C(1.276939656e-06f);
  r = ewv_fma(r, t, EWV_C(-4.632442597e-06f));
  r = ewv_fma(r, t, EWV_C(-1.085159329e-05f));
  r = ewv_fma(r, t, EWV_C(7.535528130e-05f));
  r = ewv_fma(r, t, EWV_C(-7.008569082e-05f));
  r = ewv_fma(r, t, EWV_C(-3.448901989e-04f));
  r = ewv_fma(r, t, EWV_C(1.182835083e-03f));
  r = ewv_fma(r, t, EWV_C(-1.113441074e-03f));
  r = ewv_fma(r, t, EWV_C(-2.607133240e-03f));
  r = ewv_fma(r, t, EWV_C(1.149170753e-02f));
  r = ewv_fma(r, t, EWV_C(-2.185012586e-02f));
  r = ewv_fma(r, t, EWV_C(2.581367083e-02f));
  r = ewv_fma(r, t, EWV_C(-1.962910034e-02f));
  r = ewv_fma(r, t, EWV_C(8.922219276e-03f));
  r = ewv_fma(r, t, EWV_C(9.981371760e-01f));
  r = ewv_sel(ewv_gt(r, EWV_C(1.0f)), EWV_C(1.0f), r);
  r = ewv_sel(ewv_ge(ax, EWV_C(3.9192059f)), EWV_C(1.0f), r);
  return ewv_sel(ewv_lt(ax, EWV_C(0.921875f)), small, ewv_copysign(r, x));
}

/* tpurt_vm_expm1f */
static inline ewv_t ewv_expm1(ewv_t x) {
  ewv_t xc = ewv_sel(ewv_lt(x, EWV_C(89.0f)), x, EWV_C(89.0f));
  xc = ewv_sel(ewv_gt(xc, EWV_C(-86.0f)), xc, EWV_C(-86.0f));
  ewv_t n;
  const ewv_t r = ewv_exp_reduce(xc, &n);
  ewv_t q = EWV_C(1.9841270e-4f);
  q = ewv_fma(q, r, EWV_C(1.3888889e-3f));
  q = ewv_fma(q, r, EWV_C(8.3333333e-3f));
  q = ewv_fma(q, r, EWV_C(4.1666667e-2f));
  q = ewv_fma(q, r, EWV_C(1.6666667e-1f));
  q = ewv_fma(q, r, EWV_C(0.5f));
  const ewv_t p = ewv_fma(ewv_mul(r, r), q, r);
  const ewv_t s = ewv_pow2(ewv_sub(n, EWV_C(1.0f)));
  ewv_t v = ewv_mul(EWV_C(2.0f), ewv_fma(s, p, ewv_sub(s, EWV_C(0.5f))));
  v = ewv_sel(ewv_eq(n, EWV_C(0.0f)), p, v);
  v = ewv_sel(ewv_eq(x, EWV_C(0.0f)), x, v);
  return ewv_sel(ewv_isnan(x), x, v);
}

/* tpurt_vm_logf */
static inline ewv_t ewv_log(ewv_t u) {
  ewv_t e;
  const ewv_t m = ewv_frexp(u, &e);
  const ewm_t lo = ewv_lt(m, EWV_C(0.707106781186547524f));
  e = ewv_sel(lo, ewv_sub(e, EWV_C(1.0f)), e);
  const ewv_t x = ewv_sel(lo, ewv_sub(ewv_add(m, m), EWV_C(1.0f)), ewv_sub(m, EWV_C(1.0f)));
  const ewv_t z = ewv_mul(x, x);
  ewv_t y = EWV_C(7.0376836292e-2f);
  y = ewv_fma(y, x, EWV_C(-1.1514610310e-1f));
  y = ewv_fma(y, x, EWV_C(1.1676998740e-1f));
  y = ewv_fma(y, x, EWV_C(-1.2420140846e-1f));
  y = ewv_fma(y, x, EWV_C(1.4249322787e-1f));
  y = ewv_fma(y, x, EWV_C(-1.6668057665e-1f));
  y = ewv_fma(y, x, EWV_C(2.0000714765e-1f));
  y = ewv_fma(y, x, EWV_C(-2.4999993993e-1f));
  y = ewv_fma(y, x, EWV_C(3.3333331174e-1f));
  y = ewv_mul(ewv_mul(y, x), z);
  y = ewv_fma(e, EWV_C(-2.12194440e-4f), y);
  y = ewv_fma(EWV_C(-0.5f), z, y);
  ewv_t r = ewv_fma(e, EWV_C(0.693359375f), ewv_add(x, y));
  r = ewv_sel(ewv_eq(u, EWV_C(INFINITY)), EWV_C(INFINITY), r);
  r = ewv_sel(ewv_eq(u, EWV_C(0.0f)), EWV_C(-INFINITY), r);
  r = ewv_sel(ewv_lt(u, EWV_C(0.0f)), EWV_C(NAN), r);
  return ewv_sel(ewv_isnan(u), u, r);
}

/* tpurt_vm_log1pf */
static inline ewv_t ewv_log1p(ewv_t x) {
  const ewv_t u = ewv_add(EWV_C(1.0f), x), d = ewv_sub(u, EWV_C(1.0f));
  const ewm_t d0 = ewv_eq(d, EWV_C(0.0f));
  ewv_t r = ewv_mul(ewv_log(u), ewv_div(x, ewv_sel(d0, EWV_C(1.0f), d)));
  r = ewv_sel(ewv_eq(u, EWV_C(INFINITY)), EWV_C(INFINITY), r);
  r = ewv_sel(ewv_eq(u, EWV_C(0.0f)), EWV_C(-INFINITY), r);
  r = ewv_sel(d0, x, r);
  return ewv_sel(ewv_isnan(x), x, r);
}

/* The activations of ew_math.c, each its float expression there (T = float,
 * the constants rounded to float as (T) rounds them there). */
#define EWV_GELU_BETA ((float)(M_SQRT2 * M_2_SQRTPI * 0.5))
#define EWV_GELU_KAPPA ((float)0.044715)
/* 1 / (1 + exp(-a)) */
static inline ewv_t ewv_sigmoid(ewv_t a) {
  return ewv_div(EWV_C(1.0f), ewv_add(EWV_C(1.0f), ewv_exp(ewv_neg(a))));
}
/* a / (1 + exp(-a)) */
static inline ewv_t ewv_silu(ewv_t a) { return ewv_div(a, ewv_add(EWV_C(1.0f), ewv_exp(ewv_neg(a)))); }
/* a * 0.5 * (1 + erf(a * sqrt(1/2))) */
static inline ewv_t ewv_gelu_erf(ewv_t a) {
  return ewv_mul(ewv_mul(a, EWV_C(0.5f)), ewv_add(EWV_C(1.0f), ewv_erf(ewv_mul(a, EWV_C((float)M_SQRT1_2)))));
}
/* 0.5 * a * (1 + tanh(beta * (a + kappa * a * a * a))) */
static inline ewv_t ewv_gelu_tanh(ewv_t a) {
  const ewv_t cube = ewv_mul(ewv_mul(ewv_mul(EWV_C(EWV_GELU_KAPPA), a), a), a);
  const ewv_t th = ewv_tanh(ewv_mul(EWV_C(EWV_GELU_BETA), ewv_add(a, cube)));
  return ewv_mul(ewv_mul(EWV_C(0.5f), a), ewv_add(EWV_C(1.0f), th));
}
/* silu_backward(a = grad, b = input): s = 1 / (1 + exp(-b)); a * s * (1 + b * (1 - s)) */
static inline ewv_t ewv_silu_bw(ewv_t a, ewv_t b) {
  const ewv_t s = ewv_sigmoid(b);
  return ewv_mul(ewv_mul(a, s), ewv_add(EWV_C(1.0f), ewv_mul(b, ewv_sub(EWV_C(1.0f), s))));
}
/* gelu_backward, erf form: a * (cdf + b * pdf) */
static inline ewv_t ewv_gelu_bw_erf(ewv_t a, ewv_t b) {
  const ewv_t cdf = ewv_mul(EWV_C(0.5f), ewv_add(EWV_C(1.0f), ewv_erf(ewv_mul(b, EWV_C((float)M_SQRT1_2)))));
  const ewv_t pdf = ewv_mul(ewv_exp(ewv_mul(ewv_mul(EWV_C(-0.5f), b), b)),
                            EWV_C((float)(M_2_SQRTPI * M_SQRT1_2 * 0.5)));
  return ewv_mul(a, ewv_add(cdf, ewv_mul(b, pdf)));
}
/* gelu_backward, tanh form: a * (0.5 (1 + th) + 0.5 b (1 - th^2) beta (1 + 3 kappa b^2)) */
static inline ewv_t ewv_gelu_bw_tanh(ewv_t a, ewv_t b) {
  const ewv_t xsq = ewv_mul(b, b);
  const ewv_t inner = ewv_mul(EWV_C(EWV_GELU_BETA), ewv_add(b, ewv_mul(ewv_mul(EWV_C(EWV_GELU_KAPPA), xsq), b)));
  const ewv_t th = ewv_tanh(inner);
  const ewv_t left = ewv_mul(EWV_C(0.5f), b), right = ewv_add(EWV_C(1.0f), th);
  const ewv_t ld = ewv_mul(EWV_C(0.5f), right);
  const ewv_t rd = ewv_mul(ewv_mul(ewv_mul(left, ewv_sub(EWV_C(1.0f), ewv_mul(th, th))), EWV_C(EWV_GELU_BETA)),
                           ewv_add(EWV_C(1.0f), ewv_mul(EWV_C(3.0f * EWV_GELU_KAPPA), xsq)));
  return ewv_mul(a, ewv_add(ld, rd));
}
#endif /* EWV_W */

#endif /* TPURT_OPS_ELEMENTWISE_EW_SIMD_H_ */
