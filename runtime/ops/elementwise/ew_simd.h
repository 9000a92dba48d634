/* The float32 activation and math functions of ew_expf.h / ew_vmath.h /
 * ew_math.c written once over a small vector layer: 16 lanes where the build
 * has AVX-512F, 8 where it has AVX2 and FMA (EWV_W, 0 elsewhere), with
 * double lanes (EWD_W, half as many) for the functions ew_vmath.h computes in
 * double (sin, cos, tan, sinh, cosh, erfc). Each function is its
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
#include "ops/elementwise/ew_vmath.h"
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
#define ewv_min _mm512_min_ps /* NaN: the second operand */
#define ewv_max _mm512_max_ps
static inline ewv_t ewv_rint(ewv_t x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
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
static inline ewm_t ewv_ne(ewv_t a, ewv_t b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); } /* NaN: true */
static inline ewm_t ewm_xor(ewm_t a, ewm_t b) { return a ^ b; }
/* the float whose bits are x's minus 1 (down) or plus 1 */
static inline ewv_t ewv_step(ewv_t x, ewm_t down) {
  const __m512i d = _mm512_mask_blend_epi32(down, _mm512_set1_epi32(1), _mm512_set1_epi32(-1));
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(x), d));
}
static inline ewv_t ewv_floor(ewv_t x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
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
/* !(a <= b): NaN lanes too */
static inline ewm_t ewv_nle(ewv_t a, ewv_t b) { return _mm512_cmp_ps_mask(a, b, _CMP_NLE_UQ); }
static inline unsigned ewm_bits(ewm_t m) { return (unsigned)m; }
static inline ewm_t ewm_or(ewm_t a, ewm_t b) { return a | b; }
static inline ewm_t ewm_and(ewm_t a, ewm_t b) { return a & b; }
static inline ewm_t ewv_signbit(ewv_t x) {
  return _mm512_test_epi32_mask(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
}
#define ewv_sqrt _mm512_sqrt_ps
/* y * 2^n for integral n in [-151, 129], one rounding (tpurt_ew_ldexpf) */
static inline ewv_t ewv_ldexp(ewv_t y, ewv_t n) { return _mm512_scalef_ps(y, n); }

/* double lanes: an ewv_t is two ewd_t */
#define EWD_W 8
typedef __m512d ewd_t;
#define ewd_set1 _mm512_set1_pd
#define ewd_add _mm512_add_pd
#define ewd_sub _mm512_sub_pd
#define ewd_mul _mm512_mul_pd
#define ewd_div _mm512_div_pd
#define ewd_fma _mm512_fmadd_pd
#define ewd_sqrt _mm512_sqrt_pd
#define ewd_load _mm512_loadu_pd
#define ewd_store _mm512_storeu_pd
static inline ewd_t ewd_abs(ewd_t x) { return _mm512_abs_pd(x); }
static inline ewd_t ewd_round(ewd_t x) { return _mm512_roundscale_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline ewd_t ewd_trunc(ewd_t x) { return _mm512_roundscale_pd(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
#define ewd_fnma _mm512_fnmadd_pd /* c - a b, one rounding */
/* min(x, c) with NaN giving c (the scalar code's x < c ? x : c) */
static inline ewd_t ewd_min_nan_c(ewd_t x, ewd_t c) { return _mm512_min_pd(x, c); }
typedef __mmask8 ewdm_t;
static inline unsigned ewdm_bits(ewdm_t m) { return (unsigned)m; }
static inline ewdm_t ewd_lt(ewd_t a, ewd_t b) { return _mm512_cmp_pd_mask(a, b, _CMP_LT_OQ); }
static inline ewd_t ewd_sel(ewdm_t m, ewd_t t, ewd_t f) { return _mm512_mask_blend_pd(m, f, t); }
/* lanes whose integral m (|m| < 2^51) is odd */
static inline ewdm_t ewd_odd(ewd_t m) {
  return _mm512_test_epi64_mask(_mm512_castpd_si512(_mm512_add_pd(m, _mm512_set1_pd(0x1.8p52))), _mm512_set1_epi64(1));
}
static inline ewd_t ewd_xor(ewd_t a, ewd_t b) {
  return _mm512_castsi512_pd(_mm512_xor_si512(_mm512_castpd_si512(a), _mm512_castpd_si512(b)));
}
/* a << 63 and << 52 on the bits */
static inline ewd_t ewd_shl63(ewd_t a) { return _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_castpd_si512(a), 63)); }
static inline ewd_t ewd_shl52(ewd_t a) { return _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_castpd_si512(a), 52)); }
static inline void ewd_split(ewv_t v, ewd_t* lo, ewd_t* hi) {
  *lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
  *hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
static inline ewv_t ewd_join(ewd_t lo, ewd_t hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo))),
                                             _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1));
}
/* tpurt_vm_logd's reduction: m with v = 2^k m, m in [sqrt(1/2), sqrt 2), and k, for positive normal v */
static inline ewd_t ewd_log_reduce(ewd_t v, ewd_t* k) {
  const __m512i u = _mm512_add_epi64(_mm512_castpd_si512(v), _mm512_set1_epi64(0x3ff0000000000000ll - 0x3fe6a09e667f3bcdll));
  const __m512i e = _mm512_or_si512(_mm512_srli_epi64(u, 52), _mm512_set1_epi64(0x4330000000000000ll));
  *k = _mm512_sub_pd(_mm512_castsi512_pd(e), _mm512_set1_pd(0x1p52 + 1023.0));
  return _mm512_castsi512_pd(_mm512_add_epi64(_mm512_and_si512(u, _mm512_set1_epi64(0x000fffffffffffffll)),
                                              _mm512_set1_epi64(0x3fe6a09e667f3bcdll)));
}
static inline bool ewd_any(ewdm_t m) { return m != 0; }
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
#define ewv_min _mm256_min_ps /* NaN: the second operand */
#define ewv_max _mm256_max_ps
static inline ewv_t ewv_rint(ewv_t x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
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
static inline ewm_t ewv_ne(ewv_t a, ewv_t b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }
static inline ewm_t ewm_xor(ewm_t a, ewm_t b) { return _mm256_xor_ps(a, b); }
/* the float whose bits are x's minus 1 (down: all ones) or plus 1: x + 1 - 2 (down & 1) */
static inline ewv_t ewv_step(ewv_t x, ewm_t down) {
  const __m256i m = _mm256_castps_si256(down);
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_add_epi32(_mm256_castps_si256(x), _mm256_set1_epi32(1)),
                                              _mm256_add_epi32(m, m)));
}
static inline ewv_t ewv_floor(ewv_t x) { return _mm256_floor_ps(x); }
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
static inline ewm_t ewv_nle(ewv_t a, ewv_t b) { return _mm256_cmp_ps(a, b, _CMP_NLE_UQ); }
static inline unsigned ewm_bits(ewm_t m) { return (unsigned)_mm256_movemask_ps(m); }
static inline ewm_t ewm_or(ewm_t a, ewm_t b) { return _mm256_or_ps(a, b); }
static inline ewm_t ewm_and(ewm_t a, ewm_t b) { return _mm256_and_ps(a, b); }
static inline ewm_t ewv_signbit(ewv_t x) { return x; } /* blendv and movemask read the sign bit alone */
#define ewv_sqrt _mm256_sqrt_ps
#define ewv_ldexp tpurt_ew_ldexp8 /* tpurt_ew_ldexpf: two power-of-two factors */

#define EWD_W 4
typedef __m256d ewd_t;
#define ewd_set1 _mm256_set1_pd
#define ewd_add _mm256_add_pd
#define ewd_sub _mm256_sub_pd
#define ewd_mul _mm256_mul_pd
#define ewd_div _mm256_div_pd
#define ewd_fma _mm256_fmadd_pd
#define ewd_sqrt _mm256_sqrt_pd
#define ewd_load _mm256_loadu_pd
#define ewd_store _mm256_storeu_pd
static inline ewd_t ewd_abs(ewd_t x) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), x); }
static inline ewd_t ewd_round(ewd_t x) { return _mm256_round_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline ewd_t ewd_trunc(ewd_t x) { return _mm256_round_pd(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
#define ewd_fnma _mm256_fnmadd_pd
static inline ewd_t ewd_min_nan_c(ewd_t x, ewd_t c) { return _mm256_min_pd(x, c); }
typedef __m256d ewdm_t;
static inline unsigned ewdm_bits(ewdm_t m) { return (unsigned)_mm256_movemask_pd(m); }
static inline ewdm_t ewd_lt(ewd_t a, ewd_t b) { return _mm256_cmp_pd(a, b, _CMP_LT_OQ); }
static inline ewd_t ewd_sel(ewdm_t m, ewd_t t, ewd_t f) { return _mm256_blendv_pd(f, t, m); }
static inline ewdm_t ewd_odd(ewd_t m) {
  const __m256i one = _mm256_set1_epi64x(1);
  const __m256i b = _mm256_castpd_si256(_mm256_add_pd(m, _mm256_set1_pd(0x1.8p52)));
  return _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(b, one), one));
}
static inline ewd_t ewd_xor(ewd_t a, ewd_t b) { return _mm256_xor_pd(a, b); }
static inline ewd_t ewd_shl63(ewd_t a) { return _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_castpd_si256(a), 63)); }
static inline ewd_t ewd_shl52(ewd_t a) { return _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_castpd_si256(a), 52)); }
static inline void ewd_split(ewv_t v, ewd_t* lo, ewd_t* hi) {
  *lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
  *hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}
static inline ewv_t ewd_join(ewd_t lo, ewd_t hi) {
  return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
}
static inline ewd_t ewd_log_reduce(ewd_t v, ewd_t* k) {
  const __m256i u = _mm256_add_epi64(_mm256_castpd_si256(v), _mm256_set1_epi64x(0x3ff0000000000000ll - 0x3fe6a09e667f3bcdll));
  const __m256i e = _mm256_or_si256(_mm256_srli_epi64(u, 52), _mm256_set1_epi64x(0x4330000000000000ll));
  *k = _mm256_sub_pd(_mm256_castsi256_pd(e), _mm256_set1_pd(0x1p52 + 1023.0));
  return _mm256_castsi256_pd(_mm256_add_epi64(_mm256_and_si256(u, _mm256_set1_epi64x(0x000fffffffffffffll)),
                                              _mm256_set1_epi64x(0x3fe6a09e667f3bcdll)));
}
static inline bool ewd_any(ewdm_t m) { return _mm256_movemask_pd(m) != 0; }
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
  const ewv_t ax = ewv_abs(x), z = ewv_mul(x, x), z2 = ewv_mul(z, z);
  ewv_t qe = EWV_C(8.397491183e-05f), qo = EWV_C(-8.149725035e-04f);
  qe = ewv_fma(qe, z2, EWV_C(5.201708060e-03f));
  qo = ewv_fma(qo, z2, EWV_C(-2.685969882e-02f));
  qe = ewv_fma(qe, z2, EWV_C(1.128370166e-01f));
  qo = ewv_fma(qo, z2, EWV_C(-3.761263490e-01f));
  qe = ewv_fma(qe, z2, EWV_C(1.283791661e-01f));
  const ewv_t q = ewv_fma(qo, z, qe);
  const ewv_t small = ewv_fma(x, q, x);
  const ewv_t t = ewv_sub(ax, EWV_C(2.2f)), t2 = ewv_mul(t, t);
  ewv_t re = EWV_C(1.276939656e-06f), ro = EWV_C(-4.632442597e-06f);
  re = ewv_fma(re, t2, EWV_C(-1.085159329e-05f));
  ro = ewv_fma(ro, t2, EWV_C(7.535528130e-05f));
  re = ewv_fma(re, t2, EWV_C(-7.008569082e-05f));
  ro = ewv_fma(ro, t2, EWV_C(-3.448901989e-04f));
  re = ewv_fma(re, t2, EWV_C(1.182835083e-03f));
  ro = ewv_fma(ro, t2, EWV_C(-1.113441074e-03f));
  re = ewv_fma(re, t2, EWV_C(-2.607133240e-03f));
  ro = ewv_fma(ro, t2, EWV_C(1.149170753e-02f));
  re = ewv_fma(re, t2, EWV_C(-2.185012586e-02f));
  ro = ewv_fma(ro, t2, EWV_C(2.581367083e-02f));
  re = ewv_fma(re, t2, EWV_C(-1.962910034e-02f));
  ewv_t r = ewv_fma(ro, t, re);
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

/* tpurt_vm_log_x3p */
static inline ewv_t ewv_log_x3p(ewv_t x) {
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
  return ewv_mul(ewv_mul(y, x), z);
}
/* tpurt_vm_log_reduce */
static inline ewv_t ewv_log_reduce(ewv_t u, ewv_t* fe, ewv_t* yp) {
  ewv_t e;
  const ewv_t m = ewv_frexp(u, &e);
  const ewm_t lo = ewv_lt(m, EWV_C(0.707106781186547524f));
  *fe = ewv_sel(lo, ewv_sub(e, EWV_C(1.0f)), e);
  const ewv_t x = ewv_sel(lo, ewv_sub(ewv_add(m, m), EWV_C(1.0f)), ewv_sub(m, EWV_C(1.0f)));
  *yp = ewv_log_x3p(x);
  return x;
}
/* every lane of u positive and finite (not 0, negative, inf or NaN) */
static inline bool ewv_all_pos_finite(ewv_t u) {
  return ewm_bits(ewm_and(ewv_gt(u, EWV_C(0.0f)), ewv_lt(u, EWV_C(INFINITY)))) == (1u << EWV_W) - 1;
}
/* tpurt_vm_log_special; where every lane is positive and finite (the common vector), nothing to
 * select */
static inline ewv_t ewv_log_special(ewv_t u, ewv_t r) {
  if (__builtin_expect(ewv_all_pos_finite(u), 1))
    return r;
  r = ewv_sel(ewv_eq(u, EWV_C(INFINITY)), EWV_C(INFINITY), r);
  r = ewv_sel(ewv_eq(u, EWV_C(0.0f)), EWV_C(-INFINITY), r);
  r = ewv_sel(ewv_lt(u, EWV_C(0.0f)), EWV_C(NAN), r);
  return ewv_sel(ewv_isnan(u), u, r);
}
/* tpurt_vm_logf */
static inline ewv_t ewv_log(ewv_t u) {
  ewv_t e, y;
  const ewv_t x = ewv_log_reduce(u, &e, &y);
  const ewv_t z = ewv_mul(x, x);
  y = ewv_fma(e, EWV_C(-2.12194440e-4f), y);
  y = ewv_fma(EWV_C(-0.5f), z, y);
  return ewv_log_special(u, ewv_fma(e, EWV_C(0.693359375f), ewv_add(x, y)));
}
/* tpurt_vm_log2f */
static inline ewv_t ewv_log2(ewv_t u) {
  ewv_t e, y;
  const ewv_t x = ewv_log_reduce(u, &e, &y);
  y = ewv_fma(EWV_C(-0.5f), ewv_mul(x, x), y);
  ewv_t r = ewv_mul(y, EWV_C(0.44269504088896340736f));
  r = ewv_fma(x, EWV_C(0.44269504088896340736f), r);
  r = ewv_add(ewv_add(ewv_add(r, y), x), e);
  return ewv_log_special(u, r);
}
/* tpurt_vm_log10f */
static inline ewv_t ewv_log10(ewv_t u) {
  ewv_t e, y;
  const ewv_t x = ewv_log_reduce(u, &e, &y);
  y = ewv_fma(EWV_C(-0.5f), ewv_mul(x, x), y);
  ewv_t r = ewv_mul(y, EWV_C(7.00731903251827651129e-4f));
  r = ewv_fma(x, EWV_C(7.00731903251827651129e-4f), r);
  r = ewv_fma(e, EWV_C(2.48745663981195213739e-4f), r);
  r = ewv_fma(y, EWV_C(4.3359375e-1f), r);
  r = ewv_fma(x, EWV_C(4.3359375e-1f), r);
  r = ewv_fma(e, EWV_C(3.0078125e-1f), r);
  return ewv_log_special(u, r);
}

/* tpurt_vm_log1p_mid */
static inline ewv_t ewv_log1p_mid(ewv_t x) { return ewv_add(x, ewv_fma(EWV_C(-0.5f), ewv_mul(x, x), ewv_log_x3p(x))); }
/* tpurt_vm_log1pf */
static inline ewv_t ewv_log1p(ewv_t x) {
  const ewv_t u = ewv_add(EWV_C(1.0f), x);
  const ewv_t c = ewv_div(ewv_sub(x, ewv_sub(u, EWV_C(1.0f))), u);
  ewv_t fe, y;
  const ewv_t m = ewv_log_reduce(u, &fe, &y);
  y = ewv_fma(fe, EWV_C(-2.12194440e-4f), y);
  y = ewv_add(ewv_fma(EWV_C(-0.5f), ewv_mul(m, m), y), c);
  ewv_t r = ewv_fma(fe, EWV_C(0.693359375f), ewv_add(m, y));
  const ewv_t mid = ewv_log1p_mid(x);
  const ewm_t in = ewm_and(ewv_ge(x, EWV_C(-0.29289321881345248f)), ewv_lt(x, EWV_C(0.41421356237309505f)));
  r = ewv_sel(in, mid, r);
  if (__builtin_expect(ewv_all_pos_finite(u), 1))
    return r; /* no special lane (a NaN x makes u NaN) */
  r = ewv_sel(ewv_eq(u, EWV_C(INFINITY)), EWV_C(INFINITY), r);
  r = ewv_sel(ewv_eq(u, EWV_C(0.0f)), EWV_C(-INFINITY), r);
  r = ewv_sel(ewv_lt(u, EWV_C(0.0f)), EWV_C(NAN), r);
  return ewv_sel(ewv_isnan(x), x, r);
}

/* tpurt_vm_exp2f */
static inline ewv_t ewv_exp2(ewv_t x) {
  const ewv_t xc = ewv_min(EWV_C(129.0f), ewv_max(EWV_C(-151.0f), x)); /* NaN passes */
  const ewv_t n = ewv_rint(xc), f = ewv_sub(xc, n);
  ewv_t q = EWV_C(1.5370704818e-04f);
  q = ewv_fma(q, f, EWV_C(1.3399848291e-03f));
  q = ewv_fma(q, f, EWV_C(9.6183732513e-03f));
  q = ewv_fma(q, f, EWV_C(5.5503290352e-02f));
  q = ewv_fma(q, f, EWV_C(2.4022648462e-01f));
  q = ewv_fma(q, f, EWV_C(6.9314720558e-01f));
  return ewv_ldexp(ewv_fma(f, q, EWV_C(1.0f)), n);
}

/* tpurt_vm_atan_poly */
static inline ewv_t ewv_atan_poly(ewv_t r, ewv_t lo) {
  const ewv_t z = ewv_mul(r, r);
  ewv_t p = EWV_C(-6.0658395202e-02f);
  p = ewv_fma(p, z, EWV_C(1.0588484405e-01f));
  p = ewv_fma(p, z, EWV_C(-1.4242732967e-01f));
  p = ewv_fma(p, z, EWV_C(1.9998423129e-01f));
  p = ewv_fma(p, z, EWV_C(-3.3333314240e-01f));
  return ewv_add(r, ewv_fma(ewv_mul(r, z), p, lo));
}
/* tpurt_vm_atanf */
static inline ewv_t ewv_atan(ewv_t x) {
  const ewv_t ax = ewv_abs(x);
  const ewm_t big = ewv_gt(ax, EWV_C(2.414213562373095f)), mid = ewv_gt(ax, EWV_C(0.4142135623730950f));
  const ewv_t num = ewv_sel(big, EWV_C(-1.0f), ewv_sub(ax, EWV_C(1.0f)));
  const ewv_t den = ewv_sel(big, ax, ewv_add(ax, EWV_C(1.0f)));
  const ewv_t r = ewv_sel(mid, ewv_div(num, den), ax);
  const ewv_t hi = ewv_sel(big, EWV_C(1.57079637050628662109375f),
                           ewv_sel(mid, EWV_C(0.785398185253143310546875f), EWV_C(0.0f)));
  const ewv_t lo = ewv_sel(big, EWV_C(-4.37113900018624283e-8f), ewv_sel(mid, EWV_C(-2.18556950009312141e-8f), EWV_C(0.0f)));
  return ewv_copysign(ewv_add(hi, ewv_atan_poly(r, lo)), x);
}

/* Lanes in m recomputed by the scalar f (the rare arguments a vector form leaves to glibc) */
static inline ewv_t ewv_patch(ewv_t r, ewv_t x, ewm_t m, float (*f)(float)) {
  unsigned bits = ewm_bits(m);
  if (__builtin_expect(bits == 0, 1)) return r;
  float xs[EWV_W], rs[EWV_W];
  ewv_store(xs, x);
  ewv_store(rs, r);
  for (; bits; bits &= bits - 1) {
    const int i = __builtin_ctz(bits);
    rs[i] = f(xs[i]);
  }
  return ewv_load(rs);
}

/* r with the lanes not in ok replaced by f(a, b) (the scalar cases of a binary vector form) */
static inline ewv_t ewv_patch2(ewv_t r, ewv_t a, ewv_t b, ewm_t ok, float (*f)(float, float)) {
  unsigned bad = ~ewm_bits(ok) & ((1u << EWV_W) - 1);
  if (__builtin_expect(bad == 0, 1)) return r;
  float as[EWV_W], bs[EWV_W], rs[EWV_W];
  ewv_store(as, a);
  ewv_store(bs, b);
  ewv_store(rs, r);
  for (; bad; bad &= bad - 1) {
    const int i = __builtin_ctz(bad);
    rs[i] = f(as[i], bs[i]);
  }
  return ewv_load(rs);
}

/* hypotf: glibc's sqrt((double) a * a + (double) b * b) rounded to float for finite a, b (the
 * squares are exact in double, so an fma gives the same sum); hypotf itself at infinities and NaN */
static float ewv_hypotf_(float a, float b) { return hypotf(a, b); }
static inline ewd_t ewd_hypot(ewd_t a, ewd_t b) { return ewd_sqrt(ewd_fma(a, a, ewd_mul(b, b))); }
static inline ewv_t ewv_hypot(ewv_t a, ewv_t b) {
  ewd_t alo, ahi, blo, bhi;
  ewd_split(a, &alo, &ahi);
  ewd_split(b, &blo, &bhi);
  const ewm_t ok = ewm_and(ewv_lt(ewv_abs(a), EWV_C(INFINITY)), ewv_lt(ewv_abs(b), EWV_C(INFINITY)));
  return ewv_patch2(ewd_join(ewd_hypot(alo, blo), ewd_hypot(ahi, bhi)), a, b, ok, ewv_hypotf_);
}
/* fmod(a, b) of floats exactly, so glibc's fmodf bits. In double, q = trunc(|a| / |b|) is within one
 * of the true quotient while |a| < 2^52 |b|, and |a| - q |b| is then exact (a multiple of b's ulp,
 * under 2 |b|): one correction, then a's sign (fmod(-4, 2) = -0). Other lanes (a larger quotient,
 * b zero or infinite, a infinite, NaN) take fmodf. */
static float ewv_fmodf_(float a, float b) { return fmodf(a, b); }
static inline ewd_t ewd_fmod_abs(ewd_t a, ewd_t b) {
  ewd_t r = ewd_fnma(ewd_trunc(ewd_div(a, b)), b, a);
  r = ewd_sel(ewd_lt(r, ewd_set1(0.0)), ewd_add(r, b), r);
  return ewd_sel(ewd_lt(r, b), r, ewd_sub(r, b));
}
static inline ewv_t ewv_fmod(ewv_t a, ewv_t b) {
  const ewv_t aa = ewv_abs(a), ab = ewv_abs(b);
  ewd_t alo, ahi, blo, bhi;
  ewd_split(aa, &alo, &ahi);
  ewd_split(ab, &blo, &bhi);
  const ewv_t r = ewv_copysign(ewd_join(ewd_fmod_abs(alo, blo), ewd_fmod_abs(ahi, bhi)), a);
  const ewm_t ok = ewm_and(ewm_and(ewv_gt(ab, EWV_C(0.0f)), ewv_lt(ab, EWV_C(INFINITY))),
                           ewv_lt(aa, ewv_mul(ab, EWV_C(0x1p52f))));
  return ewv_patch2(r, a, b, ok, ewv_fmodf_);
}
/* m != 0 (NaN too) with a sign other than b's: where Python's % and // correct fmod's result */
static inline ewm_t ewv_mod_fix(ewv_t m, ewv_t b) {
  return ewm_and(ewv_ne(m, EWV_C(0.0f)), ewm_xor(ewv_lt(b, EWV_C(0.0f)), ewv_lt(m, EWV_C(0.0f))));
}
/* ew_math.c's FREM (Python's %): m = fmod(a, b), plus b where ewv_mod_fix */
static inline ewv_t ewv_remainder(ewv_t a, ewv_t b) {
  const ewv_t m = ewv_fmod(a, b);
  return ewv_sel(ewv_mod_fix(m, b), ewv_add(m, b), m);
}
/* ew_math.c's FDIV_FLOOR (//): b == 0: a / b; else dv = (a - fmod(a, b)) / b, less one where the
 * remainder's sign is not b's, rounded to the nearest integer below (floor, +1 past .5); 0 takes a / b's
 * sign */
static inline ewv_t ewv_div_floor(ewv_t a, ewv_t b) {
  const ewv_t q = ewv_div(a, b), m = ewv_fmod(a, b);
  ewv_t dv = ewv_div(ewv_sub(a, m), b);
  dv = ewv_sel(ewv_mod_fix(m, b), ewv_sub(dv, EWV_C(1.0f)), dv);
  ewv_t r = ewv_floor(dv);
  r = ewv_sel(ewv_gt(ewv_sub(dv, r), EWV_C(0.5f)), ewv_add(r, EWV_C(1.0f)), r);
  r = ewv_sel(ewv_eq(dv, EWV_C(0.0f)), ewv_copysign(EWV_C(0.0f), q), r);
  return ewv_sel(ewv_eq(b, EWV_C(0.0f)), q, r);
}

/* tpurt_vm_sin_poly, tpurt_vm_pi_reduce, tpurt_vm_flip_odd, tpurt_vm_sinf / cosf's double parts,
 * the double exponential and tpurt_vm_erfcx_poly on double lanes */
static inline ewd_t ewd_sin_poly(ewd_t r) {
  const ewd_t z = ewd_mul(r, r);
  ewd_t p = ewd_set1(1.5408313947667951e-10);
  p = ewd_fma(p, z, ewd_set1(-2.5030102537067916e-08));
  p = ewd_fma(p, z, ewd_set1(2.7556950329013594e-06));
  p = ewd_fma(p, z, ewd_set1(-1.9841266691393079e-04));
  p = ewd_fma(p, z, ewd_set1(8.3333333208466184e-03));
  p = ewd_fma(p, z, ewd_set1(-1.6666666666499289e-01));
  return ewd_fma(ewd_mul(r, z), p, r);
}
static inline ewd_t ewd_pi_reduce(ewd_t x, ewd_t k) {
  const ewd_t nk = ewd_xor(k, ewd_set1(-0.0));
  ewd_t r = ewd_fma(nk, ewd_set1(0x1.921fb54442d18p+1), x);
  r = ewd_fma(nk, ewd_set1(0x1.1a62633145c07p-53), r);
  return ewd_fma(nk, ewd_set1(-0x1.f1976b7ed8fbcp-109), r);
}
static inline ewd_t ewd_flip_odd(ewd_t v, ewd_t m) {
  return ewd_xor(v, ewd_shl63(ewd_add(m, ewd_set1(0x1.8p52))));
}
static inline ewd_t ewd_sin(ewd_t x) {
  const ewd_t n = ewd_round(ewd_mul(x, ewd_set1(0x1.45f306dc9c883p-2)));
  return ewd_flip_odd(ewd_sin_poly(ewd_pi_reduce(x, n)), n);
}
static inline ewd_t ewd_cos(ewd_t x) {
  const ewd_t m = ewd_round(ewd_fma(x, ewd_set1(0x1.45f306dc9c883p-2), ewd_set1(-0.5)));
  return ewd_flip_odd(ewd_sin_poly(ewd_pi_reduce(x, ewd_add(m, ewd_set1(0.5)))), ewd_add(m, ewd_set1(1.0)));
}
static float ewv_sinf_(float x) { return sinf(x); }
static float ewv_cosf_(float x) { return cosf(x); }
static float ewv_tanf_(float x) { return tanf(x); }
/* A trigonometric function of tpurt_vm_*f's form: f on both double halves, x itself at +-0 where
 * keep_zero (sin and tan: -0 stays -0), glibc's g for the lanes past TPURT_VM_TRIG_MAX, infinities
 * and NaN. (f and g are constants at each call, which inlines them.) */
static inline __attribute__((always_inline)) ewv_t ewv_trig(ewv_t x, ewd_t (*f)(ewd_t), float (*g)(float),
                                                            bool keep_zero) {
  ewd_t lo, hi;
  ewd_split(x, &lo, &hi);
  ewv_t v = ewd_join(f(lo), f(hi));
  if (keep_zero) v = ewv_sel(ewv_eq(x, EWV_C(0.0f)), x, v);
  return ewv_patch(v, x, ewv_nle(ewv_abs(x), EWV_C(TPURT_VM_TRIG_MAX)), g);
}
/* tpurt_vm_sinf, tpurt_vm_cosf */
static inline ewv_t ewv_sin(ewv_t x) { return ewv_trig(x, ewd_sin, ewv_sinf_, true); }
static inline ewv_t ewv_cos(ewv_t x) { return ewv_trig(x, ewd_cos, ewv_cosf_, false); }
/* tpurt_vm_pow2d */
static inline ewd_t ewd_pow2(ewd_t n) { return ewd_shl52(ewd_add(n, ewd_set1(0x1.8p52 + 1023.0))); }
/* tpurt_vm_exp_eo */
static inline ewd_t ewd_exp_eo(ewd_t y, ewd_t* n_out, ewd_t* r_out, ewd_t* o_out) {
  const ewd_t n = ewd_round(ewd_mul(y, ewd_set1(0x1.71547652b82fep+0)));
  const ewd_t nn = ewd_xor(n, ewd_set1(-0.0));
  ewd_t r = ewd_fma(nn, ewd_set1(0x1.62e42fefa39efp-1), y);
  r = ewd_fma(nn, ewd_set1(0x1.abc9e3b39803fp-56), r);
  const ewd_t z = ewd_mul(r, r);
  ewd_t e = ewd_set1(1.0 / 479001600);
  e = ewd_fma(e, z, ewd_set1(1.0 / 3628800));
  e = ewd_fma(e, z, ewd_set1(1.0 / 40320));
  e = ewd_fma(e, z, ewd_set1(1.0 / 720));
  e = ewd_fma(e, z, ewd_set1(1.0 / 24));
  e = ewd_fma(e, z, ewd_set1(0.5));
  e = ewd_fma(e, z, ewd_set1(1.0));
  ewd_t o = ewd_set1(1.0 / 6227020800);
  o = ewd_fma(o, z, ewd_set1(1.0 / 39916800));
  o = ewd_fma(o, z, ewd_set1(1.0 / 362880));
  o = ewd_fma(o, z, ewd_set1(1.0 / 5040));
  o = ewd_fma(o, z, ewd_set1(1.0 / 120));
  o = ewd_fma(o, z, ewd_set1(1.0 / 6));
  o = ewd_fma(o, z, ewd_set1(1.0));
  *n_out = n;
  *r_out = r;
  *o_out = o;
  return e;
}
/* tpurt_vm_expd */
static inline ewd_t ewd_exp(ewd_t y) {
  ewd_t n, r, o;
  const ewd_t e = ewd_exp_eo(y, &n, &r, &o);
  return ewd_mul(ewd_fma(r, o, e), ewd_pow2(n));
}
static inline ewd_t ewd_erfc_pos(ewd_t x) { /* exp(-a^2) P(t) / (1 + 2a), a = min(|x|, 10.5) */
  const ewd_t a = ewd_min_nan_c(ewd_abs(x), ewd_set1(10.5));
  const ewd_t t = ewd_div(ewd_sub(a, ewd_set1(3.0)), ewd_add(a, ewd_set1(3.0)));
  ewd_t p = ewd_set1(-4.9013735806124892e-06);
  p = ewd_fma(p, t, ewd_set1(-1.9723740658171215e-05));
  p = ewd_fma(p, t, ewd_set1(8.7145596586995361e-06));
  p = ewd_fma(p, t, ewd_set1(1.266738751468325e-04));
  p = ewd_fma(p, t, ewd_set1(-1.0630450970211883e-04));
  p = ewd_fma(p, t, ewd_set1(-7.80676481973306e-04));
  p = ewd_fma(p, t, ewd_set1(1.8888114605143478e-03));
  p = ewd_fma(p, t, ewd_set1(2.529571027001359e-03));
  p = ewd_fma(p, t, ewd_set1(-2.3770511896282195e-02));
  p = ewd_fma(p, t, ewd_set1(6.8308009599561972e-02));
  p = ewd_fma(p, t, ewd_set1(-1.1927366460082477e-01));
  p = ewd_fma(p, t, ewd_set1(1.2964515945807253e-01));
  p = ewd_fma(p, t, ewd_set1(-4.7562294306268203e-02));
  p = ewd_fma(p, t, ewd_set1(-1.3562110613401113e-01));
  p = ewd_fma(p, t, ewd_set1(1.2530080582694936));
  const ewd_t e = ewd_exp(ewd_xor(ewd_mul(a, a), ewd_set1(-0.0)));
  return ewd_mul(e, ewd_div(p, ewd_fma(ewd_set1(2.0), a, ewd_set1(1.0))));
}
/* tpurt_vm_erfcf */
static inline ewv_t ewv_erfc(ewv_t x) {
  ewd_t lo, hi;
  ewd_split(x, &lo, &hi);
  lo = ewd_erfc_pos(lo);
  hi = ewd_erfc_pos(hi);
  const ewv_t v = ewd_join(lo, hi);
  /* x < 0: 2 - v, rounded from double as the scalar code does */
  const ewv_t w = ewd_join(ewd_sub(ewd_set1(2.0), lo), ewd_sub(ewd_set1(2.0), hi));
  return ewv_sel(ewv_isnan(x), x, ewv_sel(ewv_lt(x, EWV_C(0.0f)), w, v));
}

/* tpurt_vm_horner on lanes: the same table, the same steps */
static inline ewd_t ewd_horner(const double* c, int n, ewd_t z) {
  ewd_t p = ewd_set1(c[0]);
  for (int i = 1; i < n; ++i) p = ewd_fma(p, z, ewd_set1(c[i]));
  return p;
}
/* tpurt_vm_cos_poly */
static inline ewd_t ewd_cos_poly(ewd_t r) {
  return ewd_horner(tpurt_vm_cos_c, TPURT_VM_LEN(tpurt_vm_cos_c), ewd_mul(r, r));
}
static inline ewd_t ewd_tan(ewd_t x) {
  const ewd_t n = ewd_round(ewd_mul(x, ewd_set1(0x1.45f306dc9c883p-1)));
  const ewd_t r = ewd_pi_reduce(x, ewd_mul(n, ewd_set1(0.5)));
  const ewd_t sn = ewd_sin_poly(r), cs = ewd_cos_poly(r);
  const ewdm_t odd = ewd_odd(n);
  return ewd_div(ewd_sel(odd, ewd_xor(cs, ewd_set1(-0.0)), sn), ewd_sel(odd, sn, cs));
}
/* tpurt_vm_tanf */
static inline ewv_t ewv_tan(ewv_t x) { return ewv_trig(x, ewd_tan, ewv_tanf_, true); }

/* tpurt_vm_exp_pm_half, tpurt_vm_coshf and tpurt_vm_sinhf */
static inline void ewd_exp_pm_half(ewd_t a, ewd_t* ep, ewd_t* em) {
  ewd_t n, r, o;
  const ewd_t e = ewd_exp_eo(a, &n, &r, &o), one = ewd_set1(1.0);
  *ep = ewd_mul(ewd_fma(r, o, e), ewd_pow2(ewd_sub(n, one)));
  *em = ewd_mul(ewd_fma(ewd_xor(r, ewd_set1(-0.0)), o, e), ewd_pow2(ewd_sub(ewd_xor(n, ewd_set1(-0.0)), one)));
}
static inline ewd_t ewd_cosh_pos(ewd_t x) {
  ewd_t ep, em;
  ewd_exp_pm_half(ewd_min_nan_c(ewd_abs(x), ewd_set1(90.0)), &ep, &em);
  return ewd_add(ep, em);
}
static inline ewv_t ewv_cosh(ewv_t x) {
  ewd_t lo, hi;
  ewd_split(x, &lo, &hi);
  return ewv_sel(ewv_isnan(x), x, ewd_join(ewd_cosh_pos(lo), ewd_cosh_pos(hi)));
}
static inline ewd_t ewd_sinh_pos(ewd_t x) {
  const ewd_t a = ewd_min_nan_c(ewd_abs(x), ewd_set1(90.0)), z = ewd_mul(a, a);
  ewd_t ep, em;
  ewd_exp_pm_half(a, &ep, &em);
  ewd_t p = ewd_set1(1.0 / 362880);
  p = ewd_fma(p, z, ewd_set1(1.0 / 5040));
  p = ewd_fma(p, z, ewd_set1(1.0 / 120));
  p = ewd_fma(p, z, ewd_set1(1.0 / 6));
  const ewd_t sm = ewd_fma(ewd_mul(a, z), p, a);
  return ewd_sel(ewd_lt(a, ewd_set1(0.125)), sm, ewd_sub(ep, em));
}
static inline ewv_t ewv_sinh(ewv_t x) {
  ewd_t lo, hi;
  ewd_split(x, &lo, &hi);
  return ewv_sel(ewv_isnan(x), x, ewv_copysign(ewd_join(ewd_sinh_pos(lo), ewd_sinh_pos(hi)), x));
}

/* tpurt_vm_logd */
static inline ewd_t ewd_logd(ewd_t v) {
  ewd_t k;
  const ewd_t m = ewd_log_reduce(v, &k);
  const ewd_t f = ewd_sub(m, ewd_set1(1.0)), hfsq = ewd_mul(ewd_mul(ewd_set1(0.5), f), f);
  const ewd_t s = ewd_div(f, ewd_add(ewd_set1(2.0), f)), z = ewd_mul(s, s);
  const ewd_t r = ewd_mul(ewd_horner(tpurt_vm_log_c, TPURT_VM_LEN(tpurt_vm_log_c), z), z);
  const ewd_t lo = ewd_add(ewd_mul(s, ewd_add(hfsq, r)), ewd_mul(k, ewd_set1(1.90821492927058770002e-10)));
  return ewd_add(ewd_mul(k, ewd_set1(6.93147180369123816490e-01)), ewd_sub(f, ewd_sub(hfsq, lo)));
}
/* tpurt_vm_powf */
static float ewv_powf_(float x, float y) { return powf(x, y); }
static inline ewd_t ewd_pow_pos(ewd_t x, ewd_t y) {
  ewd_t t = ewd_mul(y, ewd_logd(x));
  t = ewd_sel(ewd_lt(t, ewd_set1(-110.0)), ewd_set1(-110.0), ewd_sel(ewd_lt(ewd_set1(100.0), t), ewd_set1(100.0), t));
  return ewd_exp(t);
}
static inline ewv_t ewv_pow(ewv_t a, ewv_t b) {
  const ewm_t ok = ewm_and(ewm_and(ewv_gt(a, EWV_C(0.0f)), ewv_lt(a, EWV_C(INFINITY))),
                           ewv_lt(ewv_abs(b), EWV_C(INFINITY)));
  const ewv_t as = ewv_sel(ok, a, EWV_C(1.0f)), bs = ewv_sel(ok, b, EWV_C(0.0f)); /* other lanes: powf */
  ewd_t alo, ahi, blo, bhi;
  ewd_split(as, &alo, &ahi);
  ewd_split(bs, &blo, &bhi);
  return ewv_patch2(ewd_join(ewd_pow_pos(alo, blo), ewd_pow_pos(ahi, bhi)), a, b, ok, ewv_powf_);
}
/* tpurt_vm_sin_taylor, tpurt_vm_sincospi */
static inline ewd_t ewd_sin_taylor(ewd_t r) {
  const ewd_t z = ewd_mul(r, r);
  return ewd_fma(ewd_mul(r, z), ewd_horner(tpurt_vm_sin_taylor_c, TPURT_VM_LEN(tpurt_vm_sin_taylor_c), z), r);
}
static inline void ewd_sincospi(ewd_t a, ewd_t* sn, ewd_t* cs) {
  const ewdm_t high = ewd_lt(ewd_set1(0.25), a);
  const ewd_t r = ewd_mul(ewd_set1(3.141592653589793), ewd_sel(high, ewd_sub(ewd_set1(0.5), a), a));
  const ewd_t s = ewd_sin_taylor(r), c = ewd_cos_poly(r);
  *sn = ewd_sel(high, c, s);
  *cs = ewd_sel(high, s, c);
}
/* tpurt_vm_lgamma1 / 2 */
static inline ewd_t ewd_lgamma1(ewd_t t) {
  return ewd_mul(ewd_horner(tpurt_vm_lgamma1_c, TPURT_VM_LEN(tpurt_vm_lgamma1_c), t), t);
}
static inline ewd_t ewd_lgamma2(ewd_t t) {
  return ewd_mul(ewd_horner(tpurt_vm_lgamma2_c, TPURT_VM_LEN(tpurt_vm_lgamma2_c), t), t);
}
/* tpurt_vm_lgammaf on double lanes; the reflection's sine and the Taylor series only where a lane
 * needs them (a lane's value does not depend on which others do) */
static inline ewd_t ewd_lgamma(ewd_t x) {
  const ewd_t one = ewd_set1(1.0), pi = ewd_set1(3.141592653589793), zero = ewd_set1(0.0);
  const ewdm_t neg = ewd_lt(x, zero);
  const ewd_t y = ewd_sel(neg, ewd_sub(one, x), x);
  const ewd_t p01 = ewd_mul(y, ewd_add(y, one)), p23 = ewd_mul(ewd_add(y, ewd_set1(2.0)), ewd_add(y, ewd_set1(3.0)));
  const ewd_t p45 = ewd_mul(ewd_add(y, ewd_set1(4.0)), ewd_add(y, ewd_set1(5.0)));
  const ewd_t p67 = ewd_mul(ewd_add(y, ewd_set1(6.0)), ewd_add(y, ewd_set1(7.0)));
  const ewdm_t up = ewd_lt(y, ewd_set1(8.0));
  const ewd_t p = ewd_sel(up, ewd_mul(ewd_mul(p01, p23), ewd_mul(p45, p67)), one);
  const ewd_t z = ewd_sel(up, ewd_add(y, ewd_set1(8.0)), y);
  const ewd_t w = ewd_div(one, z), w2 = ewd_mul(w, w);
  const ewd_t c = ewd_horner(tpurt_vm_stirling_c, TPURT_VM_LEN(tpurt_vm_stirling_c), w2);
  const ewd_t st = ewd_fma(ewd_sub(z, ewd_set1(0.5)), ewd_logd(z),
                           ewd_add(ewd_sub(ewd_set1(0.91893853320467274178), z), ewd_mul(w, c)));
  ewd_t arg = p, a = one;
  if (ewd_any(neg)) {
    a = ewd_sel(neg, ewd_abs(ewd_sub(x, ewd_round(x))), one);
    ewd_t sn, cs;
    ewd_sincospi(a, &sn, &cs);
    arg = ewd_sel(neg, ewd_div(ewd_mul(pi, p), sn), p);
  }
  const ewd_t la = ewd_logd(arg);
  ewd_t v = ewd_sel(neg, ewd_sub(la, st), ewd_sub(st, la));
  const ewd_t t1 = ewd_sub(x, one), t2 = ewd_sub(x, ewd_set1(2.0)), tenth = ewd_set1(0.1);
  const ewdm_t n1 = ewd_lt(tenth, ewd_abs(t1)), n2 = ewd_lt(tenth, ewd_abs(t2)); /* NaN: in neither */
  if (ewd_any(ewd_lt(ewd_abs(t1), tenth)) || ewd_any(ewd_lt(ewd_abs(t2), tenth))) { /* never exactly 0.1 */
    v = ewd_sel(n1, v, ewd_lgamma1(t1));
    v = ewd_sel(n2, v, ewd_lgamma2(t2));
  }
  const ewd_t inf = ewd_set1(INFINITY), tiny = ewd_set1(0x1p-160);
  v = ewd_sel(ewd_lt(ewd_abs(x), inf), v, inf);
  v = ewd_sel(ewd_lt(ewd_abs(x), tiny), inf, v);
  return ewd_sel(ewd_lt(a, tiny), inf, v); /* a is 1 in lanes that are not negative */
}
static inline ewv_t ewv_lgamma(ewv_t x) {
  ewd_t lo, hi;
  ewd_split(x, &lo, &hi);
  return ewv_sel(ewv_isnan(x), x, ewd_join(ewd_lgamma(lo), ewd_lgamma(hi)));
}
/* tpurt_vm_digammaf on double lanes; the reflection only where a lane needs it */
static inline ewd_t ewd_digamma(ewd_t x) {
  const ewd_t one = ewd_set1(1.0), zero = ewd_set1(0.0), inf = ewd_set1(INFINITY);
  const ewdm_t neg = ewd_lt(x, zero);
  const ewd_t y = ewd_sel(neg, ewd_sub(one, x), x);
  ewd_t a[10];
  for (int k = 0; k < 10; ++k) a[k] = ewd_add(y, ewd_set1((double)k));
  a[0] = y;
  ewd_t n[5], d[5];
  for (int k = 0; k < 5; ++k) {
    n[k] = ewd_add(a[2 * k], a[2 * k + 1]);
    d[k] = ewd_mul(a[2 * k], a[2 * k + 1]);
  }
  const ewd_t n03 = ewd_add(ewd_mul(n[0], d[1]), ewd_mul(n[1], d[0])), d03 = ewd_mul(d[0], d[1]);
  const ewd_t n47 = ewd_add(ewd_mul(n[2], d[3]), ewd_mul(n[3], d[2])), d47 = ewd_mul(d[2], d[3]);
  const ewd_t n07 = ewd_add(ewd_mul(n03, d47), ewd_mul(n47, d03)), d07 = ewd_mul(d03, d47);
  const ewdm_t up = ewd_lt(y, ewd_set1(10.0));
  const ewd_t num = ewd_sel(up, ewd_add(ewd_mul(n07, d[4]), ewd_mul(n[4], d07)), zero);
  const ewd_t den = ewd_sel(up, ewd_mul(d07, d[4]), one), z = ewd_sel(up, ewd_add(y, ewd_set1(10.0)), y);
  const ewd_t w = ewd_div(one, z), zz = ewd_mul(w, w);
  const ewd_t p = ewd_horner(tpurt_vm_digamma_c, TPURT_VM_LEN(tpurt_vm_digamma_c), zz);
  ewd_t v = ewd_sub(ewd_sub(ewd_sub(ewd_logd(z), ewd_mul(ewd_set1(0.5), w)), ewd_mul(zz, p)), ewd_div(num, den));
  if (ewd_any(neg)) {
    const ewd_t t = ewd_sub(x, ewd_round(x)), a = ewd_abs(t);
    ewd_t sn, cs;
    ewd_sincospi(a, &sn, &cs);
    const ewd_t ct = ewd_div(ewd_mul(ewd_set1(3.141592653589793), cs), sn);
    const ewd_t sct = ewd_xor(ct, ewd_xor(t, a)); /* copysign(ct, t): ct >= 0 */
    v = ewd_sel(neg, ewd_sub(v, sct), v);
    v = ewd_sel(ewd_lt(zero, a), v, ewd_sel(neg, ewd_set1(NAN), v)); /* negative integers, -inf */
  }
  v = ewd_sel(ewd_lt(x, inf), v, ewd_sel(ewd_lt(zero, x), inf, v));
  const ewdm_t iszero = ewd_lt(ewd_abs(x), ewd_set1(0x1p-160));
  return ewd_sel(iszero, ewd_xor(ewd_set1(-INFINITY), ewd_xor(x, ewd_abs(x))), v);
}
static inline ewv_t ewv_digamma(ewv_t x) {
  ewd_t lo, hi;
  ewd_split(x, &lo, &hi);
  return ewv_sel(ewv_isnan(x), x, ewd_join(ewd_digamma(lo), ewd_digamma(hi)));
}

/* tpurt_vm_asin_poly, tpurt_vm_asinf and tpurt_vm_acosf */
static inline ewv_t ewv_asin_poly(ewv_t s, ewv_t z) {
  ewv_t p = EWV_C(4.2163199048e-2f);
  p = ewv_fma(p, z, EWV_C(2.4181311049e-2f));
  p = ewv_fma(p, z, EWV_C(4.5470025998e-2f));
  p = ewv_fma(p, z, EWV_C(7.4953002686e-2f));
  p = ewv_fma(p, z, EWV_C(1.6666752422e-1f));
  return ewv_fma(ewv_mul(s, z), p, s);
}
static inline ewv_t ewv_asin(ewv_t x) {
  const ewv_t a = ewv_abs(x);
  const ewm_t big = ewv_gt(a, EWV_C(0.5f));
  const ewv_t z = ewv_sel(big, ewv_mul(EWV_C(0.5f), ewv_sub(EWV_C(1.0f), a)), ewv_mul(a, a));
  const ewv_t s = ewv_sel(big, ewv_sqrt(z), a);
  const ewv_t p = ewv_asin_poly(s, z);
  const ewv_t r = ewv_sel(big, ewv_add(ewv_sub(EWV_C(1.57079637050628662109375f), ewv_add(p, p)), EWV_C(-4.37113900018624283e-8f)), p);
  return ewv_copysign(r, x);
}
static inline ewv_t ewv_acos(ewv_t x) {
  const ewv_t a = ewv_abs(x);
  const ewm_t big = ewv_gt(a, EWV_C(0.5f));
  const ewv_t z = ewv_sel(big, ewv_mul(EWV_C(0.5f), ewv_sub(EWV_C(1.0f), a)), ewv_mul(a, a));
  const ewv_t s = ewv_sel(big, ewv_sqrt(z), a);
  const ewv_t p = ewv_asin_poly(s, z);
  const ewv_t bp = ewv_add(p, p);
  const ewv_t neg = ewv_add(ewv_sub(EWV_C(3.1415927410125732421875f), bp), EWV_C(-8.74227800037248566e-8f));
  const ewv_t mid = ewv_sub(EWV_C(1.57079637050628662109375f), ewv_add(ewv_copysign(p, x), EWV_C(4.37113900018624283e-8f)));
  return ewv_sel(big, ewv_sel(ewv_lt(x, EWV_C(0.0f)), neg, bp), mid);
}

/* tpurt_vm_atan2f */
static inline ewv_t ewv_atan2(ewv_t y, ewv_t x) {
  const ewv_t ay = ewv_abs(y), ax = ewv_abs(x);
  const ewm_t swap = ewv_gt(ay, ax), xneg = ewv_signbit(x);
  const ewv_t a = ewv_sel(swap, ax, ay), b = ewv_sel(swap, ay, ax);
  const ewm_t mid = ewv_gt(a, ewv_mul(EWV_C(0.4142135623730950f), b));
  const ewv_t h = ewv_sel(ewv_gt(b, EWV_C(1.0f)), EWV_C(0.5f), EWV_C(1.0f));
  const ewv_t r = ewv_div(ewv_sel(mid, ewv_mul(ewv_sub(a, b), h), a),
                          ewv_sel(mid, ewv_add(ewv_mul(a, h), ewv_mul(b, h)), b));
  ewv_t t = ewv_add(ewv_sel(mid, EWV_C(0.785398185253143310546875f), EWV_C(0.0f)),
                    ewv_atan_poly(r, ewv_sel(mid, EWV_C(-2.18556950009312141e-8f), EWV_C(0.0f))));
  t = ewv_sel(swap, ewv_add(ewv_sub(EWV_C(1.57079637050628662109375f), t), EWV_C(-4.37113900018624283e-8f)), t);
  t = ewv_sel(xneg, ewv_add(ewv_sub(EWV_C(3.1415927410125732421875f), t), EWV_C(-8.74227800037248566e-8f)), t);
  t = ewv_sel(ewv_eq(b, EWV_C(0.0f)), ewv_sel(xneg, EWV_C(3.1415927410125732421875f), EWV_C(0.0f)), t);
  t = ewv_sel(ewv_eq(a, EWV_C(INFINITY)),
              ewv_sel(xneg, EWV_C(2.35619449615478515625f), EWV_C(0.785398185253143310546875f)), t);
  t = ewv_copysign(t, y);
  return ewv_sel(ewm_or(ewv_isnan(x), ewv_isnan(y)), ewv_add(x, y), t);
}

/* tpurt_vm_asinhf, tpurt_vm_acoshf and tpurt_vm_atanhf */
static inline ewv_t ewv_asinh(ewv_t x) {
  const ewv_t a = ewv_abs(x), a2 = ewv_mul(a, a), one = EWV_C(1.0f);
  const ewm_t huge = ewv_gt(a, EWV_C(268435456.0f));
  const ewv_t arg = ewv_sel(huge, a, ewv_add(a, ewv_div(a2, ewv_add(one, ewv_sqrt(ewv_add(one, a2))))));
  const ewv_t r = ewv_add(ewv_log1p(arg), ewv_sel(huge, EWV_C(0.693147180559945309f), EWV_C(0.0f)));
  return ewv_copysign(ewv_sel(ewv_lt(a, EWV_C(0x1p-12f)), a, r), x);
}
static inline ewv_t ewv_acosh(ewv_t x) {
  const ewv_t one = EWV_C(1.0f), t = ewv_sub(x, one);
  const ewm_t huge = ewv_gt(x, EWV_C(268435456.0f));
  const ewv_t arg = ewv_sel(huge, x, ewv_add(t, ewv_sqrt(ewv_add(ewv_mul(EWV_C(2.0f), t), ewv_mul(t, t)))));
  const ewv_t r = ewv_add(ewv_log1p(arg), ewv_sel(huge, EWV_C(0.693147180559945309f), EWV_C(0.0f)));
  return ewv_sel(ewv_lt(x, one), EWV_C(NAN), r);
}
static inline ewv_t ewv_atanh(ewv_t x) {
  const ewv_t a = ewv_abs(x), a2 = ewv_mul(EWV_C(2.0f), a);
  const ewv_t t = ewv_div(a2, ewv_sub(EWV_C(1.0f), a));
  const ewv_t r = ewv_mul(EWV_C(0.5f), ewv_log1p(ewv_sel(ewv_lt(a, EWV_C(0.5f)), ewv_fma(a, t, a2), t)));
  return ewv_copysign(ewv_sel(ewv_lt(a, EWV_C(0x1p-12f)), a, r), x);
}

/* tpurt_vm_erfinvf. What a vector's lanes cannot select is not computed: the logf branch where no
 * lane is above 1/2, the tail polynomial (and its square root) where no w reaches 5 (uniform
 * arguments: 0.3% of lanes); NaN lanes take either, both NaN. */
static inline ewv_t ewv_erfinv(ewv_t x) {
  const ewv_t a = ewv_abs(x), one = EWV_C(1.0f);
  const ewm_t hi = ewv_gt(a, EWV_C(0.5f));
  ewv_t w = ewv_log1p_mid(ewv_neg(ewv_mul(x, x)));
  if (ewm_bits(hi)) w = ewv_sel(hi, ewv_log(ewv_mul(ewv_sub(one, a), ewv_add(one, a))), w);
  w = ewv_neg(w);
  const ewv_t t = ewv_sub(w, EWV_C(2.5f));
  ewv_t p = EWV_C(2.81022636e-08f);
  p = ewv_fma(p, t, EWV_C(3.43273939e-07f));
  p = ewv_fma(p, t, EWV_C(-3.5233877e-06f));
  p = ewv_fma(p, t, EWV_C(-4.39150654e-06f));
  p = ewv_fma(p, t, EWV_C(0.00021858087f));
  p = ewv_fma(p, t, EWV_C(-0.00125372503f));
  p = ewv_fma(p, t, EWV_C(-0.00417768164f));
  p = ewv_fma(p, t, EWV_C(0.246640727f));
  p = ewv_fma(p, t, EWV_C(1.50140941f));
  const ewm_t tail = ewv_ge(w, EWV_C(5.0f));
  if (ewm_bits(tail)) {
    const ewv_t u = ewv_sub(ewv_sqrt(w), EWV_C(3.0f));
    ewv_t q = EWV_C(-0.000200214257f);
    q = ewv_fma(q, u, EWV_C(0.000100950558f));
    q = ewv_fma(q, u, EWV_C(0.00134934322f));
    q = ewv_fma(q, u, EWV_C(-0.00367342844f));
    q = ewv_fma(q, u, EWV_C(0.00573950773f));
    q = ewv_fma(q, u, EWV_C(-0.0076224613f));
    q = ewv_fma(q, u, EWV_C(0.00943887047f));
    q = ewv_fma(q, u, EWV_C(1.00167406f));
    q = ewv_fma(q, u, EWV_C(2.83297682f));
    p = ewv_sel(tail, q, p);
  }
  ewv_t r = ewv_mul(p, x);
  r = ewv_sel(ewv_eq(a, one), ewv_copysign(EWV_C(INFINITY), x), r);
  return ewv_sel(ewv_gt(a, one), EWV_C(NAN), r);
}

/* sinc: a == 0 ? 1 : sin(pi a) / (pi a), pi a rounded to float (ew_math.c's expression) */
static inline ewv_t ewv_sinc(ewv_t a) {
  const ewv_t t = ewv_mul(EWV_C((float)M_PI), a);
  return ewv_sel(ewv_eq(a, EWV_C(0.0f)), EWV_C(1.0f), ewv_div(ewv_sin(t), t));
}

/* The log-based binary ops and entr of ew_math.c, each its float expression there: xlogy
 * (b != b) ? b : (a == 0 ? 0 : a * log(b)); xlog1py likewise with log1p; logaddexp
 * (isinf(a) && a == b) ? a : (max(a, b) + log1p(exp(-|a - b|))) with max as (a < b ? b : a);
 * logaddexp2 the same with exp2 and the sum scaled by 1/ln 2; entr
 * (a != a) ? a : (a > 0 ? -a * log(a) : (a == 0 ? 0 : -inf)). */
static inline ewv_t ewv_xlogy(ewv_t a, ewv_t b) {
  return ewv_sel(ewv_isnan(b), b, ewv_sel(ewv_eq(a, EWV_C(0.0f)), EWV_C(0.0f), ewv_mul(a, ewv_log(b))));
}
static inline ewv_t ewv_xlog1py(ewv_t a, ewv_t b) {
  return ewv_sel(ewv_isnan(b), b, ewv_sel(ewv_eq(a, EWV_C(0.0f)), EWV_C(0.0f), ewv_mul(a, ewv_log1p(b))));
}
static inline ewm_t ewv_same_inf(ewv_t a, ewv_t b) {
  return ewm_and(ewv_eq(a, b), ewv_eq(ewv_abs(a), EWV_C(INFINITY)));
}
static inline ewv_t ewv_logaddexp(ewv_t a, ewv_t b) {
  const ewv_t m = ewv_sel(ewv_lt(a, b), b, a);
  const ewv_t r = ewv_add(m, ewv_log1p(ewv_exp(ewv_neg(ewv_abs(ewv_sub(a, b))))));
  return ewv_sel(ewv_same_inf(a, b), a, r);
}
static inline ewv_t ewv_logaddexp2(ewv_t a, ewv_t b) {
  const ewv_t m = ewv_sel(ewv_lt(a, b), b, a);
  const ewv_t l = ewv_mul(ewv_log1p(ewv_exp2(ewv_neg(ewv_abs(ewv_sub(a, b))))), EWV_C((float)1.4426950408889634));
  return ewv_sel(ewv_same_inf(a, b), a, ewv_add(m, l));
}
/* ew_math.c's EW_MAXN / EW_MINN: NaN from a first, then from b, else the larger (smaller) */
static inline ewv_t ewv_maxn(ewv_t a, ewv_t b) {
  return ewv_sel(ewv_isnan(a), a, ewv_sel(ewv_isnan(b), b, ewv_sel(ewv_lt(a, b), b, a)));
}
static inline ewv_t ewv_minn(ewv_t a, ewv_t b) {
  return ewv_sel(ewv_isnan(a), a, ewv_sel(ewv_isnan(b), b, ewv_sel(ewv_lt(b, a), b, a)));
}
/* nextafterf(x, y): x's bits one step towards y; y where x == y; the smallest denormal with y's sign
 * from a zero; x + y where either is NaN */
static inline ewv_t ewv_nextafter(ewv_t x, ewv_t y) {
  ewv_t r = ewv_step(x, ewm_xor(ewv_lt(x, y), ewv_gt(x, EWV_C(0.0f))));
  r = ewv_sel(ewv_eq(x, EWV_C(0.0f)), ewv_copysign(EWV_C(0x1p-149f), y), r);
  r = ewv_sel(ewv_eq(x, y), y, r);
  return ewv_sel(ewm_or(ewv_isnan(x), ewv_isnan(y)), ewv_add(x, y), r);
}
/* lerp: |w| < 0.5 ? a + w (b - a) : b - (b - a)(1 - w) */
static inline ewv_t ewv_lerp(ewv_t a, ewv_t b, ewv_t w) {
  const ewv_t d = ewv_sub(b, a);
  const ewv_t lo = ewv_add(a, ewv_mul(w, d)), hi = ewv_sub(b, ewv_mul(d, ewv_sub(EWV_C(1.0f), w)));
  return ewv_sel(ewv_lt(ewv_abs(w), EWV_C(0.5f)), lo, hi);
}
/* hardtanh: v = a < lo ? lo : a; hi < v ? hi : v */
static inline ewv_t ewv_clamp(ewv_t a, float lo, float hi) {
  const ewv_t v = ewv_sel(ewv_lt(a, EWV_C(lo)), EWV_C(lo), a);
  return ewv_sel(ewv_lt(EWV_C(hi), v), EWV_C(hi), v);
}
/* ew_math.c's HSIG: v = a + 3 clamped to [0, 6] (v < 0, then 6 < v), over 6 */
static inline ewv_t ewv_hardsigmoid(ewv_t a) {
  ewv_t v = ewv_add(a, EWV_C(3.0f));
  v = ewv_sel(ewv_lt(v, EWV_C(0.0f)), EWV_C(0.0f), v);
  v = ewv_sel(ewv_lt(EWV_C(6.0f), v), EWV_C(6.0f), v);
  return ewv_div(v, EWV_C(6.0f));
}
/* hardsigmoid_backward: (b > -3 && b < 3) ? a / 6 : 0 */
static inline ewv_t ewv_hardsigmoid_bw(ewv_t a, ewv_t b) {
  return ewv_sel(ewm_and(ewv_gt(b, EWV_C(-3.0f)), ewv_lt(b, EWV_C(3.0f))), ewv_div(a, EWV_C(6.0f)), EWV_C(0.0f));
}
/* hardswish_backward: b <= -3 ? 0 : (b >= 3 ? a : a * (b / 3 + 0.5)), as PyTorch CPU's vector loop
 * selects (0 at -3, a at 3, NaN at a NaN b) */
static inline ewv_t ewv_hardswish_bw(ewv_t a, ewv_t b) {
  const ewv_t mid = ewv_mul(a, ewv_add(ewv_div(b, EWV_C(3.0f)), EWV_C(0.5f)));
  return ewv_sel(ewv_ge(EWV_C(-3.0f), b), EWV_C(0.0f), ewv_sel(ewv_ge(b, EWV_C(3.0f)), a, mid));
}
/* mish: a * tanh(log1p(exp(a))) */
static inline ewv_t ewv_mish(ewv_t a) { return ewv_mul(a, ewv_tanh(ewv_log1p(ewv_exp(a)))); }
/* softplus: a * beta > threshold ? a : log1p(exp(a * beta)) / beta */
static inline ewv_t ewv_softplus(ewv_t a, float beta, float threshold) {
  const ewv_t ab = ewv_mul(a, EWV_C(beta));
  return ewv_sel(ewv_gt(ab, EWV_C(threshold)), a, ewv_div(ewv_log1p(ewv_exp(ab)), EWV_C(beta)));
}
/* softplus_backward(a = grad, b = input): z = exp(b * beta); b * beta > threshold ? a : a * z / (z + 1) */
static inline ewv_t ewv_softplus_bw(ewv_t a, ewv_t b, float beta, float threshold) {
  const ewv_t bb = ewv_mul(b, EWV_C(beta)), z = ewv_exp(bb);
  return ewv_sel(ewv_gt(bb, EWV_C(threshold)), a, ewv_div(ewv_mul(a, z), ewv_add(z, EWV_C(1.0f))));
}
/* log_sigmoid_forward: (x < 0 ? x : 0) - log1p(z), z = exp(-|x|) (the buffer it returns too) */
static inline ewv_t ewv_log_sigmoid(ewv_t x, ewv_t* z) {
  *z = ewv_exp(ewv_neg(ewv_abs(x)));
  return ewv_sub(ewv_sel(ewv_lt(x, EWV_C(0.0f)), x, EWV_C(0.0f)), ewv_log1p(*z));
}
static inline ewv_t ewv_entr(ewv_t a) {
  const ewv_t neg = ewv_sel(ewv_eq(a, EWV_C(0.0f)), EWV_C(0.0f), EWV_C(-INFINITY));
  const ewv_t r = ewv_sel(ewv_gt(a, EWV_C(0.0f)), ewv_mul(ewv_neg(a), ewv_log(a)), neg);
  return ewv_sel(ewv_isnan(a), a, r);
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
/* tpurt_vm_gelu_poly: row d of the table at each lane's interval idx */
#if EWV_W == 16
typedef __m512i ewv_gidx_t;
static inline ewv_gidx_t ewv_gelu_idx(ewv_t r) { return _mm512_cvtps_epi32(r); }
static inline ewv_t ewv_gelu_coef(const float* row, ewv_gidx_t i) { return _mm512_permutexvar_ps(i, _mm512_load_ps(row)); }
#else
typedef struct { __m256i i; __m256 hi; } ewv_gidx_t; /* hi: bit 3 of the interval in the sign bit */
static inline ewv_gidx_t ewv_gelu_idx(ewv_t r) {
  const __m256i i = _mm256_cvtps_epi32(r);
  return (ewv_gidx_t){i, _mm256_castsi256_ps(_mm256_slli_epi32(i, 28))};
}
static inline ewv_t ewv_gelu_coef(const float* row, ewv_gidx_t i) {
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(_mm256_load_ps(row), i.i),
                          _mm256_permutevar8x32_ps(_mm256_load_ps(row + 8), i.i), i.hi);
}
#endif
static inline ewv_t ewv_gelu_poly(const float (*c)[16], ewv_t x) {
  const ewv_t r = ewv_rint(ewv_add(x, EWV_C(7.5f)));
  const ewv_t t = ewv_add(x, ewv_sub(EWV_C(7.5f), r));
  const ewv_gidx_t i = ewv_gelu_idx(r); /* NaN and |x| >= 8: any interval, the lane is replaced */
  const ewv_t t2 = ewv_mul(t, t);
  ewv_t e = ewv_gelu_coef(c[8], i), o = ewv_gelu_coef(c[7], i);
  for (int d = 6; d >= 0; d -= 2) e = ewv_fma(e, t2, ewv_gelu_coef(c[d], i));
  for (int d = 5; d >= 1; d -= 2) o = ewv_fma(o, t2, ewv_gelu_coef(c[d], i));
  return ewv_fma(o, t, e);
}
/* a * tpurt_vm_gelu_cdff(a) */
static inline ewv_t ewv_gelu_erf(ewv_t a) {
  const ewv_t out = ewv_sel(ewv_gt(a, EWV_C(0.0f)), EWV_C(1.0f), EWV_C(0.0f));
  return ewv_mul(a, ewv_sel(ewv_lt(ewv_abs(a), EWV_C(7.99f)), ewv_gelu_poly(tpurt_vm_gelu_cdf_c, a), out));
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
/* gelu_backward, erf form: a * tpurt_vm_gelu_gradf(b) */
static inline ewv_t ewv_gelu_bw_erf(ewv_t a, ewv_t b) {
  const ewv_t out = ewv_add(ewv_sel(ewv_gt(b, EWV_C(0.0f)), EWV_C(1.0f), EWV_C(0.0f)), ewv_mul(b, EWV_C(0.0f)));
  return ewv_mul(a, ewv_sel(ewv_lt(ewv_abs(b), EWV_C(7.99f)), ewv_gelu_poly(tpurt_vm_gelu_grad_c, b), out));
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
