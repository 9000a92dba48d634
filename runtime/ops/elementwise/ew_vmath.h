/* Vectorizable float32 math for the elementwise family: tanh, erf, expm1,
 * log, log1p, exp2, atan, and (computing in double) sin, cos and erfc:
 * plain branch-free arithmetic (both sides of each range split are computed
 * and one is selected) so float loops auto-vectorize, where glibc's
 * functions are one call per element; ew_simd.h has the explicit vector
 * forms, with the same bits. Accuracy is checked against libm in
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
  float z = x * x, z2 = z * z;
  /* Each polynomial runs as two Horner chains, one in its even and one in its odd coefficients,
   * which halves the dependent FMAs: the vector loops (gelu's above all) were bound by the chains'
   * latency, 13% faster so. The polynomial in t keeps its last two terms in plain Horner steps,
   * where splitting them too cost accuracy (1.3 -> 1.6 ulp). */
  float qe = 8.397491183e-05f, qo = -8.149725035e-04f;
  qe = fmaf(qe, z2, 5.201708060e-03f);
  qo = fmaf(qo, z2, -2.685969882e-02f);
  qe = fmaf(qe, z2, 1.128370166e-01f);
  qo = fmaf(qo, z2, -3.761263490e-01f);
  qe = fmaf(qe, z2, 1.283791661e-01f);
  float q = fmaf(qo, z, qe);
  float small = fmaf(x, q, x);
  float t = ax - 2.2f, t2 = t * t;
  float re = 1.276939656e-06f, ro = -4.632442597e-06f;
  re = fmaf(re, t2, -1.085159329e-05f);
  ro = fmaf(ro, t2, 7.535528130e-05f);
  re = fmaf(re, t2, -7.008569082e-05f);
  ro = fmaf(ro, t2, -3.448901989e-04f);
  re = fmaf(re, t2, 1.182835083e-03f);
  ro = fmaf(ro, t2, -1.113441074e-03f);
  re = fmaf(re, t2, -2.607133240e-03f);
  ro = fmaf(ro, t2, 1.149170753e-02f);
  re = fmaf(re, t2, -2.185012586e-02f);
  ro = fmaf(ro, t2, 2.581367083e-02f);
  re = fmaf(re, t2, -1.962910034e-02f);
  float r = fmaf(ro, t, re);
  r = fmaf(r, t, 8.922219276e-03f);
  r = fmaf(r, t, 9.981371760e-01f);
  r = r > 1.0f ? 1.0f : r;
  r = ax >= 3.9192059f ? 1.0f : r;
  float big = copysignf(r, x);
  return ax < 0.921875f ? small : big;
}

/* gelu (erf form) as x * Phi(x), and its derivative Phi(x) + x phi(x), Phi the normal CDF and phi its
 * density: each from a table of 16 polynomials of degree 8, one per unit interval of x on [-8, 8)
 * (interval i = rint(x + 7.5), t = x - its center in [-0.5, 0.5]; the vector forms in ew_simd.h
 * fetch a lane's coefficients with one 16-entry permute, two 8-entry ones and a blend under AVX2).
 * Fitted in double to the relative error (weighted least squares at 3000 Chebyshev nodes an
 * interval) and rounded to float. Out of |x| < 7.99 (and NaN): Phi is 0 or 1, which it rounds to in
 * float there, so gelu(-inf) and the derivative at +-inf are NaN, as 0.5 x (1 + erf(x / sqrt 2))
 * and its derivative give them. Against double (runtime/tests/test_vmath.c: every 2039th float and
 * 4e6 values in [-9, 9]; once over every float of [-8, 8]): gelu within 9.4 ulps where |gelu| > 1e-3
 * (relative 3e-5 in the left tail down to 1e-7), the derivative within 1.7e-7 absolute. The polynomial runs as two
 * chains, its even and odd coefficients in t^2, the vector loops being bound by its latency (5%
 * faster than one Horner chain, which kept gelu within 5 ulps). It replaced 0.5 x (1 + erf(x / sqrt 2))
 * with tpurt_vm_erff, two polynomials of degree 9 and 14 in every lane: twice the operations, and
 * 1 + erf cancelled where x is negative (gelu at x = -4 off by 7e-4 relative, 15000 ulps; 5e-7 now). */
static const float tpurt_vm_gelu_cdf_c[9][16] __attribute__((aligned(64))) = {
    {3.19192948e-14f, 4.01603577e-11f, 1.89893772e-08f, 3.39766984e-06f, 0.000232629114f, 0.00620966498f, 0.066807203f, 0.308537543f, 0.691462457f, 0.93319279f, 0.993790329f, 0.999767363f, 0.999996603f, 1.0f, 1.0f, 1.0f},
    {2.43842408e-13f, 2.67072947e-10f, 1.07704452e-07f, 1.59837819e-05f, 0.000872682664f, 0.0175282992f, 0.1295176f, 0.352065325f, 0.352065325f, 0.1295176f, 0.0175282974f, 0.000872683479f, 1.59836654e-05f, 1.07687214e-07f, 2.66791617e-10f, 2.42606635e-13f},
    {9.14036208e-13f, 8.68309868e-10f, 2.96238483e-07f, 3.59641454e-05f, 0.00152718765f, 0.0219103936f, 0.0971381813f, 0.0880163237f, -0.0880163163f, -0.0971382037f, -0.0219103731f, -0.0015271951f, -3.5963425e-05f, -2.96158817e-07f, -8.67384053e-10f, -9.1265526e-13f},
    {2.22307155e-12f, 1.83145732e-09f, 5.24879397e-07f, 5.12808474e-05f, 0.00163626624f, 0.0153373443f, 0.0269826781f, -0.0440080762f, -0.0440080725f, 0.0269826464f, 0.0153373955f, 0.00163623691f, 5.12852603e-05f, 5.25578059e-07f, 1.84400506e-09f, 2.28166639e-12f},
    {3.96115692e-12f, 2.80864043e-09f, 6.70381326e-07f, 5.16780128e-05f, 0.00117737334f, 0.00593371317f, -0.00607094076f, -0.0201701503f, 0.0201699659f, 0.00607140083f, -0.00593414437f, -0.00117719884f, -5.16971886e-05f, -6.7285481e-07f, -2.84484281e-09f, -4.06347178e-12f},
    {5.80719283e-12f, 3.41239281e-09f, 6.59561863e-07f, 3.8814982e-05f, 0.000578981766f, 0.000664952036f, -0.00586634781f, 0.00458289264f, 0.00458286563f, -0.00586608844f, 0.000664535328f, 0.000579229556f, 3.87762302e-05f, 6.53139978e-07f, 3.29033178e-09f, 5.20809914e-12f},
    {7.54711744e-12f, 3.573007e-09f, 5.33239017e-07f, 2.23817351e-05f, 0.00017948306f, -0.000511558785f, -0.000657915894f, 0.00306795072f, -0.00306677772f, 0.000654925185f, 0.000514455896f, -0.000180714298f, -2.22359722e-05f, -5.12874408e-07f, -3.24191118e-09f, -6.43132249e-12f},
    {7.39895298e-12f, 3.00240677e-09f, 3.5264236e-07f, 9.895517e-06f, 1.86545531e-05f, -0.000253554696f, 0.000544099777f, -0.000319403713f, -0.000319342624f, 0.000543504313f, -0.000252586236f, 1.80679635e-05f, 9.98961605e-06f, 3.68693691e-07f, 3.31841798e-09f, 9.00204824e-12f},
    {3.52827663e-12f, 1.34044575e-09f, 1.3706196e-07f, 2.72117381e-06f, -8.07173001e-06f, -2.88375832e-05f, 0.000168885352f, -0.00033168582f, 0.000329340284f, -0.000162835233f, 2.28459176e-05f, 1.07034894e-05f, -3.04796777e-06f, -1.8499162e-07f, -2.16781504e-09f, -6.57166249e-12f},
};
static const float tpurt_vm_gelu_grad_c[9][16] __attribute__((aligned(64))) = {
    {-1.79413786e-12f, -1.69503922e-09f, -5.73344948e-07f, -6.85292034e-05f, -0.00282176025f, -0.0376110859f, -0.127469197f, 0.13250488f, 0.86749512f, 1.12746918f, 1.03761113f, 1.0028218f, 1.00006855f, 1.0000006f, 1.0f, 1.0f},
    {-1.32217917e-11f, -1.07475273e-08f, -3.04251284e-06f, -0.000291703123f, -0.00894499663f, -0.0744952783f, -0.0323794037f, 0.616114318f, 0.616114318f, -0.0323794f, -0.0744952783f, -0.00894499477f, -0.000291704171f, -3.0423721e-06f, -1.07414291e-08f, -1.31830684e-11f},
    {-4.77545399e-11f, -3.32040706e-08f, -7.7750974e-06f, -0.000584398455f, -0.0125993714f, -0.0492983647f, 0.169991925f, 0.330061078f, -0.330061108f, -0.169991925f, 0.0492983721f, 0.01259935f, 0.000584406429f, 7.77438072e-06f, 3.31817773e-08f, 4.76615553e-11f},
    {-1.11910578e-10f, -6.63654589e-08f, -1.26949863e-05f, -0.000725419319f, -0.00993594062f, 0.0020085643f, 0.144358322f, -0.135691509f, -0.13569203f, 0.144358307f, 0.00200856989f, -0.00993600022f, -0.000725381833f, -1.27005178e-05f, -6.66288997e-08f, -1.13778119e-10f},
    {-1.91505201e-10f, -9.60868078e-08f, -1.47964529e-05f, -0.000615478144f, -0.00423929421f, 0.0213405117f, 0.0136574749f, -0.1123074f, 0.112308428f, -0.0136576677f, -0.0213406496f, 0.00423976127f, 0.000615282333f, 1.48174249e-05f, 9.68928404e-08f, 1.96135511e-10f},
    {-2.65950317e-10f, -1.08833909e-07f, -1.30556982e-05f, -0.000367646891f, -0.000318532781f, 0.0116999419f, -0.0292957928f, 0.0182894878f, 0.018293649f, -0.0292957444f, 0.0116998982f, -0.000318039354f, -0.000367968605f, -1.30057888e-05f, -1.06319924e-07f, -2.46905413e-10f},
    {-3.24767879e-10f, -1.04187286e-07f, -9.12672294e-06f, -0.00014787064f, 0.000738815579f, 0.000994466594f, -0.0104320422f, 0.0225888658f, -0.0225964431f, 0.010433251f, -0.000993572758f, -0.000741982716f, 0.000149290892f, 8.95930498e-06f, 9.70657297e-08f, 2.78294943e-10f},
    {-3.05193898e-10f, -8.07358802e-08f, -5.06739798e-06f, -2.99001458e-05f, 0.00044116893f, -0.00155279587f, 0.0023769103f, -0.00121929613f, -0.00122880645f, 0.00237679947f, -0.00155269541f, 0.000440018164f, -2.91305805e-05f, -5.19068544e-06f, -8.71677415e-08f, -3.55944552e-10f},
    {-1.42965195e-10f, -3.44357325e-08f, -1.70898113e-06f, 2.09917334e-06f, 9.39153688e-05f, -0.000606162066f, 0.00178773596f, -0.002974428f, 0.00299098366f, -0.00179011654f, 0.000604371598f, -8.73232493e-05f, -5.19126752e-06f, 2.09572272e-06f, 5.1889451e-08f, 2.64972627e-10f},
};
static inline float tpurt_vm_gelu_poly(const float (*c)[16], float x) {
  const float r = rintf(x + 7.5f);
  const float t = x + (7.5f - r); /* exact but for one rounding near |t| <= 0.5 */
  const int i = (int)r;
  const float t2 = t * t; /* two chains, even and odd coefficients: the vector loops wait on them */
  float e = c[8][i], o = c[7][i];
  for (int d = 6; d >= 0; d -= 2) e = fmaf(e, t2, c[d][i]);
  for (int d = 5; d >= 1; d -= 2) o = fmaf(o, t2, c[d][i]);
  return fmaf(o, t, e);
}
/* Phi(x), the factor gelu multiplies x by */
static inline float tpurt_vm_gelu_cdff(float x) {
  if (!(fabsf(x) < 7.99f)) return x > 0 ? 1.0f : 0.0f;
  return tpurt_vm_gelu_poly(tpurt_vm_gelu_cdf_c, x);
}
/* d gelu / dx = Phi(x) + x phi(x) */
static inline float tpurt_vm_gelu_gradf(float x) {
  if (!(fabsf(x) < 7.99f)) return (x > 0 ? 1.0f : 0.0f) + x * 0.0f; /* NaN at +-inf */
  return tpurt_vm_gelu_poly(tpurt_vm_gelu_grad_c, x);
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

/* x^3 P(x) with Cephes' degree-9 P: log(1 + x) - x + x^2 / 2 for 1 + x in [sqrt(1/2), sqrt(2)) */
static inline float tpurt_vm_log_x3p(float x) {
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
  return y * x * z;
}

/* logf's reduction (Cephes): u = 2^e (1 + x) with 1 + x in [sqrt(1/2), sqrt(2))
 * for a positive u (denormals scaled by 2^23 first); returns x, with e in *fe
 * and x^3 P(x) (the degree-9 polynomial's part of log(1 + x) - x + x^2/2) in *yp.
 * Other inputs: anything (callers select their results). */
static inline float tpurt_vm_log_reduce(float u, float* fe, float* yp) {
  const bool den = u < FLT_MIN; /* denormal, 0 or negative (the last two are replaced by callers) */
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
  *yp = tpurt_vm_log_x3p(x);
  *fe = (float)e;
  return x;
}
/* The results of log, log2 and log10 at 0, negatives, inf and NaN. */
static inline float tpurt_vm_log_special(float u, float r) {
  r = u == INFINITY ? INFINITY : r;
  r = u == 0.0f ? -INFINITY : r;
  r = u < 0.0f ? NAN : r;
  return u != u ? u : r;
}

/* log of any float: Cephes' logf (tpurt_vm_log_reduce, ln2 in two parts).
 * 0 gives -inf, a negative number NaN, inf inf, NaN itself. */
static inline float tpurt_vm_logf(float u) {
  float fe, y;
  const float x = tpurt_vm_log_reduce(u, &fe, &y);
  const float z = x * x;
  y = fmaf(fe, -2.12194440e-4f, y);
  y = fmaf(-0.5f, z, y);
  float r = x + y;
  r = fmaf(fe, 0.693359375f, r);
  return tpurt_vm_log_special(u, r);
}

/* log2 (Cephes' log2f): log2(1 + x) = (x + y) log2(e) with log2(e) - 1 in
 * one constant and the x + y added whole, then e; exact at powers of two. */
static inline float tpurt_vm_log2f(float u) {
  float fe, y;
  const float x = tpurt_vm_log_reduce(u, &fe, &y);
  y = fmaf(-0.5f, x * x, y);
  float r = y * 0.44269504088896340736f;
  r = fmaf(x, 0.44269504088896340736f, r);
  r = r + y;
  r = r + x;
  r = r + fe;
  return tpurt_vm_log_special(u, r);
}

/* log10 (Cephes' log10f): log10(e) and log10(2) each in two parts, the small
 * products first */
static inline float tpurt_vm_log10f(float u) {
  float fe, y;
  const float x = tpurt_vm_log_reduce(u, &fe, &y);
  y = fmaf(-0.5f, x * x, y);
  float r = y * 7.00731903251827651129e-4f;
  r = fmaf(x, 7.00731903251827651129e-4f, r);
  r = fmaf(fe, 2.48745663981195213739e-4f, r);
  r = fmaf(y, 4.3359375e-1f, r);
  r = fmaf(x, 4.3359375e-1f, r);
  r = fmaf(fe, 3.0078125e-1f, r);
  return tpurt_vm_log_special(u, r);
}

/* log1p: where 1 + x is in logf's reduced range [sqrt(1/2), sqrt(2)), logf's
 * polynomial on x itself, exact (its steps with e = 0); elsewhere logf of
 * u = 1 + x with u's rounding error, c = (x - (u - 1)) / u (x - (u - 1) is
 * exact), added among logf's small terms. 0.8 ulp over the sweep, where
 * log(u) x / (u - 1) (Goldberg) took 2.3. -1 gives -inf, below it NaN. */
/* log1p where 1 + x is in logf's reduced range [sqrt(1/2), sqrt(2)) (x in [-0.2929, 0.4142)):
 * logf's polynomial on x itself */
static inline float tpurt_vm_log1p_mid(float x) { return x + fmaf(-0.5f, x * x, tpurt_vm_log_x3p(x)); }
static inline float tpurt_vm_log1pf(float x) {
  const float u = 1.0f + x;
  const float c = (x - (u - 1.0f)) / u;
  float fe, y;
  const float m = tpurt_vm_log_reduce(u, &fe, &y);
  y = fmaf(fe, -2.12194440e-4f, y);
  y = fmaf(-0.5f, m * m, y) + c;
  float r = fmaf(fe, 0.693359375f, m + y);
  const float mid = tpurt_vm_log1p_mid(x);
  r = x >= -0.29289321881345248f && x < 0.41421356237309505f ? mid : r;
  r = u == INFINITY ? INFINITY : r;
  r = u == 0.0f ? -INFINITY : r;
  r = u < 0.0f ? NAN : r;
  return x != x ? x : r;
}

/* exp2: n = round(x), f = x - n (exact, |f| <= 1/2), 2^f = 1 + f Q(f) (a
 * near-minimax degree-6 fit, 2.2e-9 relative before rounding) and 2^n
 * applied by tpurt_ew_ldexpf. The clamps [-151, 129] already give 0 and inf
 * beyond the float range; integers give exact powers of two. */
static inline float tpurt_vm_exp2f(float x) {
  const float xc = x != x ? 0.0f : (x > 129.0f ? 129.0f : (x < -151.0f ? -151.0f : x));
  const float n = nearbyintf(xc), f = xc - n;
  float q = 1.5370704818e-04f;
  q = fmaf(q, f, 1.3399848291e-03f);
  q = fmaf(q, f, 9.6183732513e-03f);
  q = fmaf(q, f, 5.5503290352e-02f);
  q = fmaf(q, f, 2.4022648462e-01f);
  q = fmaf(q, f, 6.9314720558e-01f);
  const float v = tpurt_ew_ldexpf(fmaf(f, q, 1.0f), n);
  return x != x ? x : v;
}

/* atan: |x| reduced to [-tan(pi/8), tan(pi/8)] as Cephes' atanf does (-1/|x|
 * plus pi/2 above tan(3pi/8), (|x|-1)/(|x|+1) plus pi/4 above tan(pi/8),
 * with one division for both), atan(r) = r + r^3 P(r^2) (degree 4,
 * 7e-10 relative), and the pi/2 or pi/4 added in two parts so its own
 * rounding does not count; x's sign. -0, infinities and NaN come out right
 * through the same arithmetic. */
/* r + r^3 P(r^2) + lo: atan(r) for |r| <= tan(pi/8) (degree 4, 7e-10 relative) plus the low
 * part of the constant the caller adds */
static inline float tpurt_vm_atan_poly(float r, float lo) {
  const float z = r * r;
  float p = -6.0658395202e-02f;
  p = fmaf(p, z, 1.0588484405e-01f);
  p = fmaf(p, z, -1.4242732967e-01f);
  p = fmaf(p, z, 1.9998423129e-01f);
  p = fmaf(p, z, -3.3333314240e-01f);
  return r + fmaf(r * z, p, lo);
}
static inline float tpurt_vm_atanf(float x) {
  const float ax = fabsf(x);
  const bool big = ax > 2.414213562373095f, mid = ax > 0.4142135623730950f;
  const float num = big ? -1.0f : ax - 1.0f, den = big ? ax : ax + 1.0f;
  const float r = mid ? num / den : ax;
  const float hi = big ? 1.57079637050628662109375f : (mid ? 0.785398185253143310546875f : 0.0f);
  const float lo = big ? -4.37113900018624283e-8f : (mid ? -2.18556950009312141e-8f : 0.0f);
  return copysignf(hi + tpurt_vm_atan_poly(r, lo), x);
}

/* ---- computed in double ----
 * sin, cos and erfc take the float argument to double, work there with
 * errors near 1e-13, and round once to float: so nearly every result is the
 * correctly rounded one, with no float-float arithmetic. The vector forms
 * (ew_simd.h) run the same double operations on 8- or 4-lane halves. */

/* sin(r) for |r| <= pi/2 (and a little beyond): r + r^3 P(r^2), a
 * near-minimax degree-5 P, 7e-14 relative */
static inline double tpurt_vm_sin_poly(double r) {
  const double z = r * r;
  double p = 1.5408313947667951e-10;
  p = fma(p, z, -2.5030102537067916e-08);
  p = fma(p, z, 2.7556950329013594e-06);
  p = fma(p, z, -1.9841266691393079e-04);
  p = fma(p, z, 8.3333333208466184e-03);
  p = fma(p, z, -1.6666666666499289e-01);
  return fma(r * z, p, r);
}
/* x - k pi for an integral or half-integral k, pi in three double parts (each
 * product exact inside its fma; 159 bits of pi cover |x| <= 2^28 with room) */
static inline double tpurt_vm_pi_reduce(double x, double k) {
  double r = fma(-k, 0x1.921fb54442d18p+1, x);
  r = fma(-k, 0x1.1a62633145c07p-53, r);
  return fma(-k, -0x1.f1976b7ed8fbcp-109, r);
}
/* (-1)^m v for an integral |m| < 2^51: m + 1.5 * 2^52 holds m in its low
 * mantissa bits, whose last one moves to the sign */
static inline double tpurt_vm_flip_odd(double v, double m) {
  const double t = m + 0x1.8p52;
  uint64_t tb, vb;
  memcpy(&tb, &t, 8);
  memcpy(&vb, &v, 8);
  vb ^= tb << 63;
  memcpy(&v, &vb, 8);
  return v;
}
/* Above this |x| (and at infinities and NaN) sin and cos call glibc, whose
 * reduction (Payne-Hanek) serves any argument; the vector forms do so for
 * those lanes only. */
#define TPURT_VM_TRIG_MAX 268435456.0f /* 2^28 */

/* sin(x) = (-1)^n sin(x - n pi), n = round(x / pi) */
static inline float tpurt_vm_sinf(float x) {
  const double xd = x, n = nearbyint(xd * 0x1.45f306dc9c883p-2);
  const float v = (float)tpurt_vm_flip_odd(tpurt_vm_sin_poly(tpurt_vm_pi_reduce(xd, n)), n);
  const float s = x == 0.0f ? x : v; /* -0 */
  return fabsf(x) <= TPURT_VM_TRIG_MAX ? s : sinf(x);
}
/* cos(x) = (-1)^(m+1) sin(x - (m + 1/2) pi), m = round(x / pi - 1/2) */
static inline float tpurt_vm_cosf(float x) {
  const double xd = x, m = nearbyint(fma(xd, 0x1.45f306dc9c883p-2, -0.5));
  const float v = (float)tpurt_vm_flip_odd(tpurt_vm_sin_poly(tpurt_vm_pi_reduce(xd, m + 0.5)), m + 1.0);
  return fabsf(x) <= TPURT_VM_TRIG_MAX ? v : cosf(x);
}

/* 2^n for an integral n in [-1022, 1023]: its bits built from n + 1.5 * 2^52 + 1023 */
static inline double tpurt_vm_pow2d(double n) {
  const double t = n + (0x1.8p52 + 1023.0);
  uint64_t b;
  memcpy(&b, &t, 8);
  b <<= 52;
  double s;
  memcpy(&s, &b, 8);
  return s;
}
/* The double exponential's core, for |y| <= 700: y = n ln2 + r (ln2 in two parts, |r| <= ln2/2)
 * and exp(+-r) = E(r^2) +- r O(r^2) (Taylor to r^13, 5e-18 relative: to r^11, 6e-15, was enough for
 * float results, not for i0's float64 ones); returns E, with n, r and O. */
static inline double tpurt_vm_exp_eo(double y, double* n_out, double* r_out, double* o_out) {
  const double n = nearbyint(y * 0x1.71547652b82fep+0);
  double r = fma(-n, 0x1.62e42fefa39efp-1, y);
  r = fma(-n, 0x1.abc9e3b39803fp-56, r);
  const double z = r * r;
  double e = 1.0 / 479001600;
  e = fma(e, z, 1.0 / 3628800);
  e = fma(e, z, 1.0 / 40320);
  e = fma(e, z, 1.0 / 720);
  e = fma(e, z, 1.0 / 24);
  e = fma(e, z, 0.5);
  e = fma(e, z, 1.0);
  double o = 1.0 / 6227020800;
  o = fma(o, z, 1.0 / 39916800);
  o = fma(o, z, 1.0 / 362880);
  o = fma(o, z, 1.0 / 5040);
  o = fma(o, z, 1.0 / 120);
  o = fma(o, z, 1.0 / 6);
  o = fma(o, z, 1.0);
  *n_out = n;
  *r_out = r;
  *o_out = o;
  return e;
}
/* exp(y) for |y| <= 700: (E + r O) 2^n (2^n a normal double here) */
static inline double tpurt_vm_expd(double y) {
  double n, r, o;
  const double e = tpurt_vm_exp_eo(y, &n, &r, &o);
  return fma(r, o, e) * tpurt_vm_pow2d(n);
}
/* (1 + 2a) exp(a^2) erfc(a) for a in [0, 10.5] as a polynomial in
 * t = (a - 3) / (a + 3) (degree 14, 1.1e-12 relative; the map in the style
 * of Juffa's erfcf lets one polynomial span the whole range) */
static inline double tpurt_vm_erfcx_poly(double a) {
  const double t = (a - 3.0) / (a + 3.0);
  double p = -4.9013735806124892e-06;
  p = fma(p, t, -1.9723740658171215e-05);
  p = fma(p, t, 8.7145596586995361e-06);
  p = fma(p, t, 1.266738751468325e-04);
  p = fma(p, t, -1.0630450970211883e-04);
  p = fma(p, t, -7.80676481973306e-04);
  p = fma(p, t, 1.8888114605143478e-03);
  p = fma(p, t, 2.529571027001359e-03);
  p = fma(p, t, -2.3770511896282195e-02);
  p = fma(p, t, 6.8308009599561972e-02);
  p = fma(p, t, -1.1927366460082477e-01);
  p = fma(p, t, 1.2964515945807253e-01);
  p = fma(p, t, -4.7562294306268203e-02);
  p = fma(p, t, -1.3562110613401113e-01);
  return fma(p, t, 1.2530080582694936);
}
/* erfc(x) = exp(-a^2) P(t) / (1 + 2a) for a = |x| clamped to 10.5 (erfc
 * rounds to 0 in float from 10.06), and 2 - that for x < 0 */
static inline float tpurt_vm_erfcf(float x) {
  double a = fabs((double)x);
  a = a < 10.5 ? a : 10.5; /* NaN too; selected below */
  const double v = tpurt_vm_expd(-(a * a)) * (tpurt_vm_erfcx_poly(a) / fma(2.0, a, 1.0));
  const float r = (float)(x < 0.0f ? 2.0 - v : v);
  return x != x ? x : r;
}

/* c[0] z^(n-1) + c[1] z^(n-2) + ... + c[n-1] by Horner's rule, one fma a step. The double-lane
 * functions below keep their coefficients in such tables, which ew_simd.h's ewd_horner evaluates
 * with the same steps on lanes: one copy of each polynomial for both forms. */
static inline double tpurt_vm_horner(const double* c, int n, double z) {
  double p = c[0];
  for (int i = 1; i < n; ++i) p = fma(p, z, c[i]);
  return p;
}
#define TPURT_VM_LEN(c) ((int)(sizeof(c) / sizeof((c)[0])))

/* cos(r) for |r| <= pi/4 (and a little beyond): Taylor to r^16, 1e-17 (to r^12, 4e-13, was enough for
 * tan; lgamma's and digamma's reflections need the rest, tpurt_vm_sincospi) */
static const double tpurt_vm_cos_c[] = {1.0 / 20922789888000, -1.0 / 87178291200, 1.0 / 479001600,
                                        -1.0 / 3628800,       1.0 / 40320,        -1.0 / 720,
                                        1.0 / 24,             -0.5,               1.0};
static inline double tpurt_vm_cos_poly(double r) {
  return tpurt_vm_horner(tpurt_vm_cos_c, TPURT_VM_LEN(tpurt_vm_cos_c), r * r);
}
/* tan(x) = sin(r) / cos(r), or -cos(r) / sin(r) for odd n, r = x - n pi/2,
 * n = round(2x / pi); glibc past 2^28 as sin and cos */
static inline float tpurt_vm_tanf(float x) {
  const double xd = x, n = nearbyint(xd * 0x1.45f306dc9c883p-1);
  const double r = tpurt_vm_pi_reduce(xd, n * 0.5);
  const double sn = tpurt_vm_sin_poly(r), cs = tpurt_vm_cos_poly(r);
  const double t = n + 0x1.8p52;
  uint64_t tb;
  memcpy(&tb, &t, 8);
  const bool odd = tb & 1;
  const float v = (float)((odd ? -cs : sn) / (odd ? sn : cs));
  const float s = x == 0.0f ? x : v; /* -0 */
  return fabsf(x) <= TPURT_VM_TRIG_MAX ? s : tanf(x);
}

/* exp(a) / 2 and exp(-a) / 2 for a in [0, 90] from one core, without a division:
 * (E +- r O) 2^(+-n - 1) */
static inline void tpurt_vm_exp_pm_half(double a, double* ep, double* em) {
  double n, r, o;
  const double e = tpurt_vm_exp_eo(a, &n, &r, &o);
  *ep = fma(r, o, e) * tpurt_vm_pow2d(n - 1.0);
  *em = fma(-r, o, e) * tpurt_vm_pow2d(-n - 1.0);
}
/* cosh and sinh from those, |x| clamped to 90 (both overflow in float from
 * 89.42); sinh below |x| = 1/8 by its Taylor series to x^9, where the
 * difference would cancel */
static inline float tpurt_vm_coshf(float x) {
  double a = fabs((double)x);
  a = a < 90.0 ? a : 90.0; /* NaN too; selected below */
  double ep, em;
  tpurt_vm_exp_pm_half(a, &ep, &em);
  const float r = (float)(ep + em);
  return x != x ? x : r;
}
static inline float tpurt_vm_sinhf(float x) {
  double a = fabs((double)x);
  a = a < 90.0 ? a : 90.0;
  double ep, em;
  tpurt_vm_exp_pm_half(a, &ep, &em);
  const double z = a * a;
  double p = 1.0 / 362880;
  p = fma(p, z, 1.0 / 5040);
  p = fma(p, z, 1.0 / 120);
  p = fma(p, z, 1.0 / 6);
  const double sm = fma(a * z, p, a);
  const float r = (float)(a < 0.125 ? sm : ep - em);
  return x != x ? x : copysignf(r, x);
}

/* log(v) in double for positive, finite, normal v: v = 2^k (1 + f) with 1 + f in [sqrt(1/2),
 * sqrt 2) (musl's reduction), log(1 + f) = f - (f^2/2 - s (f^2/2 + R(s^2))), s = f / (2 + f), with
 * fdlibm's R (Lg1..Lg7): under 1 ulp */
static const double tpurt_vm_log_c[] = {1.479819860511658591e-01, 1.531383769920937332e-01,
                                        1.818357216161805012e-01, 2.222219843214978396e-01,
                                        2.857142874366239149e-01, 3.999999999940941908e-01,
                                        6.666666666666735130e-01};
static inline double tpurt_vm_logd(double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  u += 0x3ff0000000000000ull - 0x3fe6a09e667f3bcdull;
  const double k = (double)(u >> 52) - 1023.0;
  const uint64_t mb = (u & 0x000fffffffffffffull) + 0x3fe6a09e667f3bcdull;
  double m;
  memcpy(&m, &mb, 8);
  const double f = m - 1.0, hfsq = 0.5 * f * f, s = f / (2.0 + f), z = s * s;
  const double r = tpurt_vm_horner(tpurt_vm_log_c, TPURT_VM_LEN(tpurt_vm_log_c), z) * z;
  return k * 6.93147180369123816490e-01 + (f - (hfsq - (s * (hfsq + r) + k * 1.90821492927058770002e-10)));
}

/* powf where x > 0 is finite and y finite: exp(y log x) in double (tpurt_vm_logd, tpurt_vm_expd, the
 * product clamped to [-110, 100], past float's range both ways), rounded once to float: off the
 * correctly rounded float only where exp's 1e-14 relative error straddles a rounding boundary;
 * glibc's powf everywhere else (x <= 0, infinities, NaN: its special cases). The vector form
 * (ew_simd.h, ewv_pow) computes the same bits. */
static inline float tpurt_vm_powf(float x, float y) {
  if (!(x > 0.0f && x < INFINITY && fabsf(y) < INFINITY)) return powf(x, y);
  double t = (double)y * tpurt_vm_logd((double)x);
  t = t < -110.0 ? -110.0 : (t > 100.0 ? 100.0 : t);
  return (float)tpurt_vm_expd(t);
}

/* sin(r) by Taylor to r^17 for |r| <= pi/4 (5e-17, where tpurt_vm_sin_poly, the trigonometric
 * functions' minimax fit, stops at 7e-14: the reflections of lgamma and digamma subtract nearly equal
 * values near their negative zeros), and sin(pi a), cos(pi a) for a in [0, 1/2] from it and
 * tpurt_vm_cos_poly */
static const double tpurt_vm_sin_taylor_c[] = {1.0 / 355687428096000, -1.0 / 1307674368000, 1.0 / 6227020800,
                                               -1.0 / 39916800,        1.0 / 362880,          -1.0 / 5040,
                                               1.0 / 120,              -1.0 / 6};
static inline double tpurt_vm_sin_taylor(double r) {
  const double z = r * r;
  return fma(r * z, tpurt_vm_horner(tpurt_vm_sin_taylor_c, TPURT_VM_LEN(tpurt_vm_sin_taylor_c), z), r);
}
static inline void tpurt_vm_sincospi(double a, double* sn, double* cs) {
  const bool low = a <= 0.25;
  const double r = 3.141592653589793 * (low ? a : 0.5 - a);
  const double s = tpurt_vm_sin_taylor(r), c = tpurt_vm_cos_poly(r);
  *sn = low ? s : c;
  *cs = low ? c : s;
}

/* lgamma(1 + t) and lgamma(2 + t) for |t| <= 0.1 by their Taylor series (-gamma t + sum (-1)^k zeta(k)
 * t^k / k, and (1 - gamma) t + sum (-1)^k (zeta(k) - 1) t^k / k), to t^14 and t^11: 1e-14 relative,
 * and no cancellation at the zeros 1 and 2 */
static const double tpurt_vm_lgamma1_c[] = {
    -0.066668705882420468, 0.071432946295361336, -0.076932516411352191, 0.083353840546109004,
    -0.090954017145829042, 0.10009945751278181,  -0.11133426586956469,  0.12550966952474304,
    -0.14404989676884612,  0.16955717699740819,  -0.20738555102867399,  0.27058080842778455,
    -0.40068563438653143,  0.82246703342411322,  -0.57721566490153286};
static const double tpurt_vm_lgamma2_c[] = {
    2.0507212775670692e-5,  -4.4926236738133142e-5, 9.9457512781808534e-5, -0.00022315475845357938,
    0.00050966952474304242, -0.001192753911703261,  0.0028905103307415233, -0.0073855510286739853,
    0.020580808427784548,   -0.067352301053198095,  0.32246703342411322,   0.42278433509846714};
static inline double tpurt_vm_lgamma1(double t) {
  return tpurt_vm_horner(tpurt_vm_lgamma1_c, TPURT_VM_LEN(tpurt_vm_lgamma1_c), t) * t;
}
static inline double tpurt_vm_lgamma2(double t) {
  return tpurt_vm_horner(tpurt_vm_lgamma2_c, TPURT_VM_LEN(tpurt_vm_lgamma2_c), t) * t;
}
/* Stirling's series after its first terms: 1/12 - w^2/360 + ... - 691 w^10/360360 (w = 1/z), in w^2 */
static const double tpurt_vm_stirling_c[] = {-0.0019175269175269175269, 0.00084175084175084175084,
                                             -0.0005952380952380952381, 0.00079365079365079365079,
                                             -0.0027777777777777777778, 0.083333333333333333333};
/* lgamma in double, one rounding to float. x > 0: below 8, z = x + 8 and p = x (x + 1) ... (x + 7)
 * (a tree of products: a chain of eight dependent steps was half the vector form's time), Stirling's series to z^-11 (1e-14 from 8), minus log p. x < 0 by reflection,
 * log(pi / |sin(pi x)|) - lgamma(1 - x): one logarithm of pi p / |sin(pi x)| (tpurt_vm_sincospi of
 * |x - round(x)|). Within 0.1 of 1 and 2, where that difference would
 * cancel, tpurt_vm_lgamma1 / 2. +inf at 0, the negative integers (every float below -2^23) and
 * +-inf, as glibc's lgammaf. */
static inline float tpurt_vm_lgammaf(float x) {
  const double xd = x;
  const bool neg = xd < 0.0;
  const double y = neg ? 1.0 - xd : xd;
  /* below 8: z = y + 8 and p = y (y + 1) ... (y + 7), multiplied as a tree */
  const double p01 = y * (y + 1.0), p23 = (y + 2.0) * (y + 3.0), p45 = (y + 4.0) * (y + 5.0);
  const double p67 = (y + 6.0) * (y + 7.0);
  const bool up = y < 8.0;
  const double p = up ? (p01 * p23) * (p45 * p67) : 1.0, z = up ? y + 8.0 : y;
  const double w = 1.0 / z;
  const double c = tpurt_vm_horner(tpurt_vm_stirling_c, TPURT_VM_LEN(tpurt_vm_stirling_c), w * w);
  const double st = fma(z - 0.5, tpurt_vm_logd(z), (0.91893853320467274178 - z) + w * c);
  const double a = fabs(xd - nearbyint(xd));
  double sn, cs;
  tpurt_vm_sincospi(a, &sn, &cs);
  const double la = tpurt_vm_logd(neg ? 3.141592653589793 * p / sn : p);
  double v = neg ? la - st : st - la;
  v = fabs(xd - 1.0) <= 0.1 ? tpurt_vm_lgamma1(xd - 1.0) : v;
  v = fabs(xd - 2.0) <= 0.1 ? tpurt_vm_lgamma2(xd - 2.0) : v;
  const bool pole = !(fabs(xd) < INFINITY) || fabs(xd) < 0x1p-160 || (neg && a < 0x1p-160);
  v = pole ? INFINITY : v;
  return x != x ? x : (float)v;
}

/* digamma in double, one rounding to float (PyTorch's calc_digamma's steps): x > 0 below 10
 * shifted to z = x + 10 with the sum of 1 / (x + k) kept as one fraction (a division at the end, not
 * one per step), then log z - 1 / (2z) - the asymptotic series in 1 / z^2; x < 0 by reflection,
 * digamma(1 - x) - pi cot(pi x) (tpurt_vm_sincospi). 0 gives -inf (-0: +inf),
 * the negative integers (every float below -2^23) and -inf NaN, +inf +inf, as PyTorch's. */
/* PyTorch's calc_digamma's asymptotic coefficients, highest power of 1/z^2 first */
static const double tpurt_vm_digamma_c[] = {8.33333333333333333333E-2,  -2.10927960927960927961E-2,
                                            7.57575757575757575758E-3,  -4.16666666666666666667E-3,
                                            3.96825396825396825397E-3,  -8.33333333333333333333E-3,
                                            8.33333333333333333333E-2};
static inline float tpurt_vm_digammaf(float x) {
  const double xd = x;
  const bool neg = xd < 0.0;
  const double y = neg ? 1.0 - xd : xd;
  /* below 10: z = y + 10, and the sum of 1 / (y + k), k < 10, as num / den, added as a tree of
   * fractions (1/a + 1/b = (a + b) / (a b)) */
  const double a0 = y, a1 = y + 1.0, a2 = y + 2.0, a3 = y + 3.0, a4 = y + 4.0, a5 = y + 5.0, a6 = y + 6.0;
  const double a7 = y + 7.0, a8 = y + 8.0, a9 = y + 9.0;
  const double n01 = a0 + a1, d01 = a0 * a1, n23 = a2 + a3, d23 = a2 * a3, n45 = a4 + a5, d45 = a4 * a5;
  const double n67 = a6 + a7, d67 = a6 * a7, n89 = a8 + a9, d89 = a8 * a9;
  const double n03 = n01 * d23 + n23 * d01, d03 = d01 * d23, n47 = n45 * d67 + n67 * d45, d47 = d45 * d67;
  const double n07 = n03 * d47 + n47 * d03, d07 = d03 * d47;
  const bool up = y < 10.0;
  const double num = up ? n07 * d89 + n89 * d07 : 0.0, den = up ? d07 * d89 : 1.0, z = up ? y + 10.0 : y;
  const double w = 1.0 / z, zz = w * w;
  const double p = tpurt_vm_horner(tpurt_vm_digamma_c, TPURT_VM_LEN(tpurt_vm_digamma_c), zz);
  double v = ((tpurt_vm_logd(z) - 0.5 * w) - zz * p) - num / den;
  const double t = xd - nearbyint(xd), a = fabs(t);
  double sn, cs;
  tpurt_vm_sincospi(a, &sn, &cs);
  const double ct = 3.141592653589793 * cs / sn;
  v = neg ? v - copysign(ct, t) : v;
  v = xd == INFINITY ? INFINITY : v;
  v = neg && !(a > 0.0) ? NAN : v; /* the negative integers, -inf */
  v = xd == 0.0 ? copysign(INFINITY, -xd) : v;
  return x != x ? x : (float)v;
}

/* asin's core (Cephes' asinf): for a = |x| <= 1/2, a + a z P(z) with z = a^2; above, with
 * z = (1 - a) / 2 and s = sqrt(z), pi/2 - 2 (s + s z P(z)) (pi/2 in two parts) */
static inline float tpurt_vm_asin_poly(float s, float z) {
  float p = 4.2163199048e-2f;
  p = fmaf(p, z, 2.4181311049e-2f);
  p = fmaf(p, z, 4.5470025998e-2f);
  p = fmaf(p, z, 7.4953002686e-2f);
  p = fmaf(p, z, 1.6666752422e-1f);
  return fmaf(s * z, p, s);
}
static inline float tpurt_vm_asinf(float x) {
  const float a = fabsf(x);
  const bool big = a > 0.5f;
  const float z = big ? 0.5f * (1.0f - a) : a * a;
  const float s = big ? sqrtf(z) : a; /* NaN above 1 */
  const float p = tpurt_vm_asin_poly(s, z);
  const float r = big ? (1.57079637050628662109375f - (p + p)) + -4.37113900018624283e-8f : p;
  return copysignf(r, x);
}
/* acos (Cephes' acosf): 2 asin(sqrt((1 - x) / 2)) above 1/2, pi - that below
 * -1/2, pi/2 - asin(x) between (pi and pi/2 in two parts) */
static inline float tpurt_vm_acosf(float x) {
  const float a = fabsf(x);
  const bool big = a > 0.5f;
  const float z = big ? 0.5f * (1.0f - a) : a * a;
  const float s = big ? sqrtf(z) : a;
  const float p = tpurt_vm_asin_poly(s, z);
  const float bp = p + p;
  const float neg = (3.1415927410125732421875f - bp) + -8.74227800037248566e-8f;
  const float mid = 1.57079637050628662109375f - (copysignf(p, x) + 4.37113900018624283e-8f);
  return big ? (x < 0.0f ? neg : bp) : mid;
}

/* atan2: t = atan(min(|x|,|y|) / max(|x|,|y|)) in [0, pi/4] with atan's
 * reduction and polynomial (the ratio reduced at tan(pi/8) as (a - b) / (a + b),
 * one division either way, halved above 1 so a + b cannot overflow), then pi/2 - t where |y| > |x| and pi - t where x
 * is negative (-0 too), with y's sign; both zero: 0 or pi, both infinite:
 * pi/4 or 3pi/4, as C's atan2 */
static inline float tpurt_vm_atan2f(float y, float x) {
  const float ay = fabsf(y), ax = fabsf(x);
  const bool swap = ay > ax, xneg = signbit(x);
  const float a = swap ? ax : ay, b = swap ? ay : ax;
  const bool mid = a > 0.4142135623730950f * b;
  const float h = b > 1.0f ? 0.5f : 1.0f; /* a + b would overflow near FLT_MAX; exact either way */
  const float r = (mid ? (a - b) * h : a) / (mid ? a * h + b * h : b);
  float t = (mid ? 0.785398185253143310546875f : 0.0f) + tpurt_vm_atan_poly(r, mid ? -2.18556950009312141e-8f : 0.0f);
  t = swap ? (1.57079637050628662109375f - t) + -4.37113900018624283e-8f : t;
  t = xneg ? (3.1415927410125732421875f - t) + -8.74227800037248566e-8f : t;
  t = b == 0.0f ? (xneg ? 3.1415927410125732421875f : 0.0f) : t;
  t = a == INFINITY ? (xneg ? 2.35619449615478515625f : 0.785398185253143310546875f) : t;
  t = copysignf(t, y);
  return (x != x || y != y) ? x + y : t;
}

/* asinh, acosh and atanh, each one log1p (fdlibm's formulas, the ranges joined
 * so that no lane computes two logarithms):
 *   asinh: a = |x|: a below 2^-12; log1p(a + a^2 / (1 + sqrt(1 + a^2))) to 2^28;
 *     log1p(a) + ln2 beyond (log(2a) without 2a overflowing); x's sign
 *   acosh: NaN below 1; log1p(t + sqrt(2t + t^2)), t = x - 1, to 2^28; log1p(x) + ln2 beyond
 *   atanh: a below 2^-12; log1p(2a + a t) / 2 below 1/2, log1p(t) / 2 above, t = 2a / (1 - a)
 *     (inf at 1, NaN above); x's sign */
static inline float tpurt_vm_asinhf(float x) {
  const float a = fabsf(x), a2 = a * a;
  const bool huge = a > 268435456.0f;
  const float r = tpurt_vm_log1pf(huge ? a : a + a2 / (1.0f + sqrtf(1.0f + a2))) + (huge ? 0.693147180559945309f : 0.0f);
  return copysignf(a < 0x1p-12f ? a : r, x);
}
static inline float tpurt_vm_acoshf(float x) {
  const float t = x - 1.0f;
  const bool huge = x > 268435456.0f;
  const float r = tpurt_vm_log1pf(huge ? x : t + sqrtf(2.0f * t + t * t)) + (huge ? 0.693147180559945309f : 0.0f);
  return x < 1.0f ? NAN : r;
}
static inline float tpurt_vm_atanhf(float x) {
  const float a = fabsf(x), t = 2.0f * a / (1.0f - a);
  const float r = 0.5f * tpurt_vm_log1pf(a < 0.5f ? fmaf(a, t, 2.0f * a) : t);
  return copysignf(a < 0x1p-12f ? a : r, x);
}

/* erfinv in double (float64): Giles' double-precision polynomials refined by
 * two Newton steps (PyTorch's calc_erfinv does the same refinement); float32
 * takes the single-precision form below. Here rather than in ew_math.c so that
 * generated kernels, which paste erfinv's expression, compile it. */
static inline double tpurt_vm_erfinvd(double y) {
  if (y != y || y < -1 || y > 1) return NAN;
  if (y == 1) return INFINITY;
  if (y == -1) return -INFINITY;
  double w = -log((1.0 - y) * (1.0 + y)), x;
  if (w < 6.25) {
    w -= 3.125;
    x = -3.6444120640178196996e-21;
    x = -1.685059138182016589e-19 + x * w;
    x = 1.2858480715256400167e-18 + x * w;
    x = 1.115787767802518096e-17 + x * w;
    x = -1.333171662854620906e-16 + x * w;
    x = 2.0972767875968561637e-17 + x * w;
    x = 6.6376381343583238325e-15 + x * w;
    x = -4.0545662729752068639e-14 + x * w;
    x = -8.1519341976054721522e-14 + x * w;
    x = 2.6335093153082322977e-12 + x * w;
    x = -1.2975133253453532498e-11 + x * w;
    x = -5.4154120542946279317e-11 + x * w;
    x = 1.051212273321532285e-09 + x * w;
    x = -4.1126339803469836976e-09 + x * w;
    x = -2.9070369957882005086e-08 + x * w;
    x = 4.2347877827932403518e-07 + x * w;
    x = -1.3654692000834678645e-06 + x * w;
    x = -1.3882523362786468719e-05 + x * w;
    x = 0.0001867342080340571352 + x * w;
    x = -0.00074070253416626697512 + x * w;
    x = -0.0060336708714301490533 + x * w;
    x = 0.24015818242558961693 + x * w;
    x = 1.6536545626831027356 + x * w;
  } else if (w < 16.0) {
    w = sqrt(w) - 3.25;
    x = 2.2137376921775787049e-09;
    x = 9.0756561938885390979e-08 + x * w;
    x = -2.7517406297064545428e-07 + x * w;
    x = 1.8239629214389227755e-08 + x * w;
    x = 1.5027403968909827627e-06 + x * w;
    x = -4.013867526981545969e-06 + x * w;
    x = 2.9234449089955446044e-06 + x * w;
    x = 1.2475304481671778723e-05 + x * w;
    x = -4.7318229009055733981e-05 + x * w;
    x = 6.8284851459573175448e-05 + x * w;
    x = 2.4031110387097893999e-05 + x * w;
    x = -0.0003550375203628474796 + x * w;
    x = 0.00095328937973738049703 + x * w;
    x = -0.0016882755560235047313 + x * w;
    x = 0.0024914420961078508066 + x * w;
    x = -0.0037512085075692412107 + x * w;
    x = 0.005370914553590063617 + x * w;
    x = 1.0052589676941592334 + x * w;
    x = 3.0838856104922207635 + x * w;
  } else {
    w = sqrt(w) - 5.0;
    x = -2.7109920616438573243e-11;
    x = -2.5556418169965252055e-10 + x * w;
    x = 1.5076572693500548083e-09 + x * w;
    x = -3.7894654401267369937e-09 + x * w;
    x = 7.6157012080783393804e-09 + x * w;
    x = -1.4960026627149240478e-08 + x * w;
    x = 2.9147953450901080826e-08 + x * w;
    x = -6.7711997758452339498e-08 + x * w;
    x = 2.2900482228026654717e-07 + x * w;
    x = -9.9298272942317002539e-07 + x * w;
    x = 4.5260625972231537039e-06 + x * w;
    x = -1.9681778105531670567e-05 + x * w;
    x = 7.5995277030017761139e-05 + x * w;
    x = -0.00021503011930044477347 + x * w;
    x = -0.00013871931833623122026 + x * w;
    x = 1.0103004648645343977 + x * w;
    x = 4.8499064014085844221 + x * w;
  }
  x *= y;
  /* Newton on erf(x) - y */
  for (int i = 0; i < 2; ++i) x -= (erf(x) - y) / (M_2_SQRTPI * exp(-x * x));
  return x;
}
/* erfinv (Giles, "Approximating the erfinv function", single precision):
 * w = -log(1 - x^2), then a degree-8 polynomial in w - 2.5 below w = 5 and in
 * sqrt(w) - 3 above, times x. 1 - x^2 is formed as log1p(-x^2) up to |x| = 1/2
 * and as log((1 - x)(1 + x)) above (1 - x exact there), so neither loses the
 * small end (-x^2 is then in [-1/4, 0], where log1p is its middle polynomial alone,
 * tpurt_vm_log1p_mid). 1 and -1 give +-inf, beyond them NaN. */
static inline float tpurt_vm_erfinvf(float x) {
  const float a = fabsf(x);
  const float w = -(a <= 0.5f ? tpurt_vm_log1p_mid(-(x * x)) : tpurt_vm_logf((1.0f - a) * (1.0f + a)));
  const float t = w - 2.5f, u = sqrtf(w) - 3.0f;
  float p = 2.81022636e-08f;
  p = fmaf(p, t, 3.43273939e-07f);
  p = fmaf(p, t, -3.5233877e-06f);
  p = fmaf(p, t, -4.39150654e-06f);
  p = fmaf(p, t, 0.00021858087f);
  p = fmaf(p, t, -0.00125372503f);
  p = fmaf(p, t, -0.00417768164f);
  p = fmaf(p, t, 0.246640727f);
  p = fmaf(p, t, 1.50140941f);
  float q = -0.000200214257f;
  q = fmaf(q, u, 0.000100950558f);
  q = fmaf(q, u, 0.00134934322f);
  q = fmaf(q, u, -0.00367342844f);
  q = fmaf(q, u, 0.00573950773f);
  q = fmaf(q, u, -0.0076224613f);
  q = fmaf(q, u, 0.00943887047f);
  q = fmaf(q, u, 1.00167406f);
  q = fmaf(q, u, 2.83297682f);
  float r = (w < 5.0f ? p : q) * x;
  r = a == 1.0f ? copysignf(INFINITY, x) : r;
  return a > 1.0f ? NAN : r;
}

#endif /* TPURT_OPS_ELEMENTWISE_EW_VMATH_H_ */
