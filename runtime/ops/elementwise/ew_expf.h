/* The vectorizable float exp shared by the elementwise family (exp, and the
 * ops built on it) and the row kernels in runtime/ops/reduce (softmax):
 * one definition so both give the same results. Internal; not an ABI. */
#ifndef TPURT_OPS_ELEMENTWISE_EW_EXPF_H_
#define TPURT_OPS_ELEMENTWISE_EW_EXPF_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

/* expf in plain arithmetic (Cephes' range reduction and polynomial, about
 * 1 ulp) so float loops auto-vectorize; glibc's expf is a call per element.
 * fmaf is spelled out because -std=c11 turns off FP contraction: with
 * -march=native it compiles to one vfmadd per step (faster and exact).
 * 2^n is applied as two factors so results near overflow/underflow stay right. */
/* The range reduction exp and expm1 (ew_vmath.h) share: xc = n ln2 + r with
 * n = round(xc / ln2), ln2 in two parts (Cody-Waite). */
static inline float tpurt_ew_exp_reduce(float xc, float* n_out) {
  const float n = nearbyintf(xc * 1.44269504088896341f);
  *n_out = n;
  return fmaf(n, 2.12194440e-4f, fmaf(n, -0.693359375f, xc));
}

/* y * 2^n for integral n in [-151, 129], as two power-of-two factors so that
 * results near overflow and underflow round once (y * s1 is exact): what
 * vscalefps computes in one instruction. */
static inline float tpurt_ew_ldexpf(float y, float n) {
  int32_t ni = (int32_t)n, n1 = ni >> 1, n2 = ni - n1;
  uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, 4);
  memcpy(&s2, &b2, 4);
  return y * s1 * s2;
}

static inline float tpurt_ew_expf(float x) {
  float xc = x != x ? 0.0f : (x > 89.0f ? 89.0f : (x < -104.0f ? -104.0f : x));
  float n;
  float r = tpurt_ew_exp_reduce(xc, &n);
  float q = 1.9875691500E-4f;
  q = fmaf(q, r, 1.3981999507E-3f);
  q = fmaf(q, r, 8.3334519073E-3f);
  q = fmaf(q, r, 4.1665795894E-2f);
  q = fmaf(q, r, 1.6666665459E-1f);
  q = fmaf(q, r, 5.0000001201E-1f);
  float y = fmaf(q * r, r, r) + 1.0f;
  float v = tpurt_ew_ldexpf(y, n);
  v = x > 88.72283935546875f ? INFINITY : v;
  v = x < -103.972084045410f ? 0.0f : v;
  return x != x ? x : v;
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
/* The shared core: for xc already clamped, n = round(xc / ln2) and
 * exp(xc - n ln2) from the polynomial (callers scale by 2^n). */
/* tpurt_ew_ldexpf on 8 lanes */
static inline __m256 tpurt_ew_ldexp8(__m256 y, __m256 n) {
  const __m256i ni = _mm256_cvttps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
}
/* tpurt_ew_exp_reduce on 8 lanes */
static inline __m256 tpurt_ew_exp8_reduce(__m256 xc, __m256* n_out) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  *n_out = n;
  return _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), xc));
}
static inline __m256 tpurt_ew_expf8_core(__m256 xc, __m256* n_out) {
  __m256 n;
  const __m256 r = tpurt_ew_exp8_reduce(xc, &n);
  __m256 q = _mm256_set1_ps(1.9875691500E-4f);
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.3981999507E-3f));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(8.3334519073E-3f));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(4.1665795894E-2f));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.6666665459E-1f));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(5.0000001201E-1f));
  *n_out = n;
  return _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(q, r), r, r), _mm256_set1_ps(1.0f));
}

/* tpurt_ew_expf on 8 lanes, bit-identical to the scalar definition (same
 * clamps, rounding, fmas and scaling) but at NaNs, so softmax results do not
 * depend on the path; gcc's own vectorization of that function spends about
 * twice the instructions on the selects. The scalar code's selects are left
 * out: past 88.72283935546875 the clamped argument gives n = 128 and r > 0,
 * so y >= 1 and y * 2^128 is already inf; below -103.972084045410, n = -150
 * and r < 0, so y * 2^-150 is already under half the least denormal and
 * rounds to 0; a NaN passes the clamps (vmaxps/vminps return their second
 * operand when one is NaN) and every step after them, so the result is NaN
 * (the input's, quieted; test_vmath checks the bits). */
static inline __m256 tpurt_ew_expf8(__m256 x) {
  const __m256 xc = _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));
  __m256 n;
  const __m256 y = tpurt_ew_expf8_core(xc, &n);
  return tpurt_ew_ldexp8(y, n);
}

/* exp(d) for d <= 88 or NaN, as a softmax needs it (d = x - max <= 0): the
 * same value as tpurt_ew_expf, bit for bit, where that is at least 2^-125,
 * and 0 below (d < about -86.6; -inf included). It skips what only other
 * inputs need: the overflow selects, and the two-factor scaling and the
 * subnormal results it makes, each of which costs the CPU a microcode
 * assist; such values are below what a sum holding exp(0) = 1 can see. About
 * half of tpurt_ew_expf8's instructions. */
static inline __m256 tpurt_ew_expf8_softmax(__m256 d) {
  __m256 n;
  const __m256 y = tpurt_ew_expf8_core(_mm256_max_ps(_mm256_set1_ps(-104.0f), d), &n); /* NaN passes */
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_cmp_ps(n, _mm256_set1_ps(-126.0f), _CMP_NLE_UQ), _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}
#endif

#if defined(__AVX512F__)
/* tpurt_ew_expf8_core on 16 lanes. */
/* tpurt_ew_exp_reduce on 16 lanes */
static inline __m512 tpurt_ew_exp16_reduce(__m512 xc, __m512* n_out) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  *n_out = n;
  return _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), xc));
}
static inline __m512 tpurt_ew_expf16_core(__m512 xc, __m512* n_out) {
  __m512 n;
  const __m512 r = tpurt_ew_exp16_reduce(xc, &n);
  __m512 q = _mm512_set1_ps(1.9875691500E-4f);
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.3981999507E-3f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(8.3334519073E-3f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(4.1665795894E-2f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.6666665459E-1f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(5.0000001201E-1f));
  *n_out = n;
  return _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(q, r), r, r), _mm512_set1_ps(1.0f));
}

/* tpurt_ew_expf on 16 lanes, bit-identical to the scalar definition but at
 * NaNs like tpurt_ew_expf8 (without the scalar code's selects, for the same
 * reasons). vscalefps computes y * 2^n with the one rounding the scalar
 * code's two power-of-two factors give (the first product is exact), in
 * one instruction instead of nine. */
static inline __m512 tpurt_ew_expf16(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  __m512 n;
  const __m512 y = tpurt_ew_expf16_core(xc, &n);
  return _mm512_scalef_ps(y, n);
}

/* tpurt_ew_expf8_softmax on 16 lanes (scalef is the exact y * 2^n). */
static inline __m512 tpurt_ew_expf16_softmax(__m512 d) {
  __m512 n;
  const __m512 y = tpurt_ew_expf16_core(_mm512_max_ps(_mm512_set1_ps(-104.0f), d), &n);
  return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(n, _mm512_set1_ps(-126.0f), _CMP_NLE_UQ), y, n);
}
#endif

#endif /* TPURT_OPS_ELEMENTWISE_EW_EXPF_H_ */
