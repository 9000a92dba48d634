/* Vectorizable float32 tanh, erf, log and log1p for the elementwise family:
 * plain branch-free arithmetic (both sides of each range split are computed
 * and one is selected) so float loops auto-vectorize, where glibc's
 * tanhf/erff/logf/log1pf are one call per element. Accuracy is checked against libm in
 * runtime/tests/test_vmath.c. Internal; not an ABI. */
#ifndef TPURT_OPS_ELEMENTWISE_EW_VMATH_H_
#define TPURT_OPS_ELEMENTWISE_EW_VMATH_H_

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ops/elementwise/ew_expf.h"

/* tanh: Cephes' odd polynomial below |x| = 0.625 (where 1 - 2/(e+1) would
 * lose bits to cancellation), 1 - 2/(exp(2|x|) + 1) with x's sign above.
 * exp(2|x|) overflows to inf for |x| > 44, giving exactly +-1 (as it already
 * does from |x| ~ 9). NaN goes through exp and stays NaN; -0 stays -0. */
static inline float tpurt_vm_tanhf(float x) {
  float ax = fabsf(x);
  float z = x * x;
  float q = -5.70498872745e-3f;
  q = fmaf(q, z, 2.06390887954e-2f);
  q = fmaf(q, z, -5.37397155531e-2f);
  q = fmaf(q, z, 1.33314422036e-1f);
  q = fmaf(q, z, -3.33332819422e-1f);
  float small = copysignf(fmaf(q * z, x, x), x); /* keeps -0 */
  float e = tpurt_ew_expf(2.0f * ax);
  float big = copysignf(1.0f - 2.0f / (e + 1.0f), x);
  return ax < 0.625f ? small : big;
}

/* erf: two polynomials (fitted against double erf):
 *   |x| < 0.921875: x + x * Q(x^2)   (the small Q keeps rounding ~0.5 ulp)
 *   0.921875 <= |x| < 3.9192059: P(|x| - 2.2), degree 14, capped at 1 (a near-minimax
 *     fit of the relative error, 1e-8 before rounding: one polynomial with no
 *     per-lane coefficient selects, where two ranges of degree 10 cost 13 selects)
 * and 1 beyond (erf rounds to 1 in float from 3.9192059), with x's sign.
 * Max error 1.4 ulp. NaN propagates through the polynomials. */
static inline float tpurt_vm_erff(float x) {
  float ax = fabsf(x);
  float z = x * x;
  float q = 8.397491183e-05f;
  q = fmaf(q, z, -8.149725035e-04f);
  q = fmaf(q, z, 5.201708060e-03f);
  q = fmaf(q, z, -2.685969882e-02f);
  q = fmaf(q, z, 1.128370166e-01f);
  q = fmaf(q, z, -3.761263490e-01f);
  q = fmaf(q, z, 1.283791661e-01f);
  float small = fmaf(x, q, x);
  float t = ax - 2.2f;
  float r = 1.276939656e-06f;
  r = fmaf(r, t, -4.632442597e-06f);
  r = fmaf(r, t, -1.085159329e-05f);
  r = fmaf(r, t, 7.535528130e-05f);
  r = fmaf(r, t, -7.008569082e-05f);
  r = fmaf(r, t, -3.448901989e-04f);
  r = fmaf(r, t, 1.182835083e-03f);
  r = fmaf(r, t, -1.113441074e-03f);
  r = fmaf(r, t, -2.607133240e-03f);
  r = fmaf(r, t, 1.149170753e-02f);
  r = fmaf(r, t, -2.185012586e-02f);
  r = fmaf(r, t, 2.581367083e-02f);
  r = fmaf(r, t, -1.962910034e-02f);
  r = fmaf(r, t, 8.922219276e-03f);
  r = fmaf(r, t, 9.981371760e-01f);
  r = r > 1.0f ? 1.0f : r;
  r = ax >= 3.9192059f ? 1.0f : r;
  float big = copysignf(r, x);
  return ax < 0.921875f ? small : big;
}

/* expm1: x = n ln2 + r (n = round(x / ln2), ln2 in two parts as in
 * tpurt_ew_expf, |r| <= ln2/2), expm1(r) = r + r^2 Q(r) (Taylor to r^7), and
 * 2^n (1 + expm1(r)) - 1 formed as 2 * fma(2^(n-1), p, 2^(n-1) - 0.5) (one
 * rounding; 2^(n-1) stays a normal float over the clamped range [-86, 89],
 * and n = 128 still overflows to inf as it should); n = 0 is p itself.
 * expm1 is -1 in float below -17.33, inf above 88.72; +-0 and NaN pass. */
static inline float tpurt_vm_expm1f(float x) {
  float xc = x < 89.0f ? x : 89.0f;
  xc = xc > -86.0f ? xc : -86.0f;
  float n;
  const float r = tpurt_ew_exp_reduce(xc, &n);
  float q = 1.9841270e-4f;
  q = fmaf(q, r, 1.3888889e-3f);
  q = fmaf(q, r, 8.3333333e-3f);
  q = fmaf(q, r, 4.1666667e-2f);
  q = fmaf(q, r, 1.6666667e-1f);
  q = fmaf(q, r, 0.5f);
  float p = fmaf(r * r, q, r);
  int32_t ni = (int32_t)n;
  uint32_t sb = (uint32_t)(ni - 1 + 127) << 23;
  float s;
  memcpy(&s, &sb, 4);
  float v = 2.0f * fmaf(s, p, s - 0.5f);
  v = n == 0.0f ? p : v;
  v = x == 0.0f ? x : v;
  return x != x ? x : v;
}

/* log of any float: Cephes' logf (mantissa in [sqrt(1/2), sqrt(2)), degree-9
 * polynomial, ln2 split in two parts) with the exponent read from the bits;
 * denormals are scaled by 2^23 first. 0 gives -inf, a negative number NaN,
 * inf inf, NaN itself. */
static inline float tpurt_vm_logf(float u) {
  const bool den = u < FLT_MIN; /* denormal, 0 or negative (the last two are replaced below) */
  const float us = den ? u * 8388608.0f : u;
  uint32_t b;
  memcpy(&b, &us, 4);
  int32_t e = (int32_t)(b >> 23) - (den ? 149 : 126); /* us = m * 2^e, m in [0.5, 1) */
  uint32_t mb = (b & 0x007fffffu) | 0x3f000000u;
  float m;
  memcpy(&m, &mb, 4);
  bool lo = m < 0.707106781186547524f;
  e = lo ? e - 1 : e;
  float x = lo ? m + m - 1.0f : m - 1.0f;
  float z = x * x;
  float y = 7.0376836292e-2f;
  y = fmaf(y, x, -1.1514610310e-1f);
  y = fmaf(y, x, 1.1676998740e-1f);
  y = fmaf(y, x, -1.2420140846e-1f);
  y = fmaf(y, x, 1.4249322787e-1f);
  y = fmaf(y, x, -1.6668057665e-1f);
  y = fmaf(y, x, 2.0000714765e-1f);
  y = fmaf(y, x, -2.4999993993e-1f);
  y = fmaf(y, x, 3.3333331174e-1f);
  y = y * x * z;
  float fe = (float)e;
  y = fmaf(fe, -2.12194440e-4f, y);
  y = fmaf(-0.5f, z, y);
  float r = x + y;
  r = fmaf(fe, 0.693359375f, r);
  r = u == INFINITY ? INFINITY : r;
  r = u == 0.0f ? -INFINITY : r;
  r = u < 0.0f ? NAN : r;
  return u != u ? u : r;
}

/* log1p: log(u) * x / (u - 1) with u = 1 + x, which cancels u's rounding
 * error (Goldberg); x where u == 1. -1 gives -inf, below it NaN. */
static inline float tpurt_vm_log1pf(float x) {
  float u = 1.0f + x;
  float d = u - 1.0f;
  float r = tpurt_vm_logf(u) * (x / (d == 0.0f ? 1.0f : d));
  r = u == INFINITY ? INFINITY : r;
  r = u == 0.0f ? -INFINITY : r;
  r = d == 0.0f ? x : r;
  return x != x ? x : r;
}

#endif /* TPURT_OPS_ELEMENTWISE_EW_VMATH_H_ */
