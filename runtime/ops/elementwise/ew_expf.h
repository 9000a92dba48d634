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
static inline float tpurt_ew_expf(float x) {
  float xc = x != x ? 0.0f : (x > 89.0f ? 89.0f : (x < -104.0f ? -104.0f : x));
  float n = nearbyintf(xc * 1.44269504088896341f);
  float r = fmaf(n, -0.693359375f, xc);
  r = fmaf(n, 2.12194440e-4f, r);
  float q = 1.9875691500E-4f;
  q = fmaf(q, r, 1.3981999507E-3f);
  q = fmaf(q, r, 8.3334519073E-3f);
  q = fmaf(q, r, 4.1665795894E-2f);
  q = fmaf(q, r, 1.6666665459E-1f);
  q = fmaf(q, r, 5.0000001201E-1f);
  float y = fmaf(q * r, r, r) + 1.0f;
  int32_t ni = (int32_t)n, n1 = ni >> 1, n2 = ni - n1;
  uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, 4);
  memcpy(&s2, &b2, 4);
  float v = y * s1 * s2;
  v = x > 88.72283935546875f ? INFINITY : v;
  v = x < -103.972084045410f ? 0.0f : v;
  return x != x ? x : v;
}

#endif /* TPURT_OPS_ELEMENTWISE_EW_EXPF_H_ */
