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

/* erf: three near-minimax polynomials (fitted against double erf):
 *   |x| < 0.921875: x + x * Q(x^2)   (the small Q keeps rounding ~0.5 ulp)
 *   0.921875 <= |x| < 2: P1(|x| - 1.4609375)
 *   2 <= |x| < 3.9192059: P2(|x| - 3), capped at 1
 * and 1 beyond (erf rounds to 1 in float from 3.9192059), with x's sign.
 * Max error about 1 ulp. NaN propagates through the polynomials. */
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
  /* one polynomial shape for both outer ranges: pick the coefficients */
  bool hi = ax >= 2.0f;
  float t = ax - (hi ? 3.0f : 1.4609375f);
  float r = hi ? 2.246895201e-05f : 7.937759074e-05f;
  r = fmaf(r, t, hi ? -1.408382923e-05f : 1.503972802e-03f);
  r = fmaf(r, t, hi ? -1.420053304e-04f : -2.986565232e-03f);
  r = fmaf(r, t, hi ? 4.177909577e-04f : -3.847538726e-03f);
  r = fmaf(r, t, hi ? -7.342242752e-04f : 2.051666006e-02f);
  r = fmaf(r, t, hi ? 1.004850026e-03f : -1.954736002e-02f);
  r = fmaf(r, t, hi ? -1.045354758e-03f : -4.124369100e-02f);
  r = fmaf(r, t, hi ? 7.911606226e-04f : 1.454707235e-01f);
  r = fmaf(r, t, hi ? -4.176678485e-04f : -1.950542033e-01f);
  r = fmaf(r, t, hi ? 1.391513651e-04f : 1.335130334e-01f);
  r = fmaf(r, t, hi ? 9.999778867e-01f : 9.611788392e-01f);
  r = r > 1.0f ? 1.0f : r;
  r = ax >= 3.9192059f ? 1.0f : r;
  float big = copysignf(r, x);
  return ax < 0.921875f ? small : big;
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
