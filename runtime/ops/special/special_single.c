/* Float-precision special functions matching PyTorch CPU's float32 kernels
 * (see special_single.h). Near trigamma's poles (negative integers) the answer
 * is dominated by the rounding of sin(pi * x) in float, so only the same float
 * computation agrees with CPU there. */
#include <math.h>

#include "ops/special/special_math.h"
#include "ops/special/special_single.h"

/* calc_trigamma<float> (ATen Math.h): reflection below 0.5, six recurrence
 * steps, then the asymptotic series. The series' constants are double
 * literals in ATen, so that part runs in double, as here. */
static float trigamma_f(float x) {
  const float pi = 3.14159265358979323846f;
  float sign = +1, result = 0;
  if (x < 0.5f) {
    sign = -1;
    float s = sinf(pi * x);
    result -= (pi * pi) / (s * s);
    x = 1 - x;
  }
  for (int i = 0; i < 6; ++i) {
    result += 1 / (x * x);
    x += 1;
  }
  float ixx = 1 / (x * x);
  double d = ixx;
  double tail = ((double)(1 + 1 / (2 * x)) + d * (1. / 6 - d * (1. / 30 - d * (1. / 42)))) / (double)x;
  result = (float)((double)result + tail);
  return sign * result;
}

double tpurt_sp_polygamma_single(double n, double x) {
  if (n == 1) return trigamma_f((float)x);
  return tpurt_sp_polygamma(n, x);
}

/* airy_ai<float> (ATen Math.h, after Cephes) for x < -2.09 evaluates
 * sin(t) P - cos(t) Q with the phase t = -2 x sqrt(-x) / 3 + pi / 4 rounded
 * to float; for large |x| that rounding is the whole error of CPU's answer.
 * Below -8 the double kernel uses the same asymptotic form (with
 * a = t - pi/2: cos a = sin t, sin a = -cos t), so the float phase drops in. */
double tpurt_sp_airy_ai_single(double xd) {
  if (!(xd < -8.0) || isinf(xd)) return tpurt_sp_airy_ai(xd);
  const float pi = 3.14159265358979323846f;
  float x = (float)xd;
  float r = sqrtf(-x);
  float t = -2.0f * x;
  t = t * r;
  t = t / 3.0f;
  t = t + 0.25f * pi;
  double z = -(double)x, even, odd;
  tpurt_sp_airy_neg_sums(2.0 / 3.0 * z * sqrt(z), &even, &odd);
  return (sin((double)t) * even - cos((double)t) * odd) / (sqrt(3.14159265358979323846) * sqrt(sqrt(z)));
}
