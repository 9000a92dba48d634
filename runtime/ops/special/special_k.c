/* Modified Bessel K0 and K1, unscaled and scaled by e^x (special_modified_bessel_k0 / k1,
 * special_scaled_modified_bessel_k0 / k1), from
 *   e^x K_nu(x) = int_0^inf e^{-x (cosh t - 1)} cosh(nu t) dt,
 * whose integrand is entire and decays double-exponentially, so the trapezoid rule converges
 * geometrically; the step h = min(1/4, 0.4 / sqrt(x)) shrinks like 1/sqrt(x) to resolve the peak
 * at t = 0, and the sum stops at the first node where x (cosh t - 1) - nu t passes 45 (the
 * exponent is convex in t, so it stays past). cosh(i h) - 1 comes from a recurrence of positive
 * terms, d_{i+1} = d_i + s_{i+1}, s_{i+1} = s_i + 2 d_1 (1 + d_i), with d_1 = cosh h - 1 from its
 * Taylor series (no cancellation, no cosh per node), and e^-e from the runtime's double exponential.
 * The vector form (double lanes, ew_simd.h) computes the scalar's bits: each lane adds its nodes
 * until its own stop, the vector runs until every lane has stopped; lanes with x NaN, <= 0, infinite
 * or (unscaled) above 700 are finished by the scalar function. It replaced a loop calling cosh and
 * exp at every node (129 ns a float32 element on 2 threads, 0.14x PyTorch CPU). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "ops/elementwise/ew_simd.h"
#include "ops/elementwise/ew_vmath.h"
#include "ops/special/special_math.h"

#define K_STOP 45.0     /* e^-45 = 2.9e-20 of the first node's 1 */
#define K_EXP_MAX 700.0 /* tpurt_vm_expd's range: e^-x for the unscaled forms */

/* cosh h - 1 for 0 < h <= 1/4: h^2/2 (1 + z/12 + z^2/360 + ...), z = h^2, to h^12 (the next term is
 * 1.4e-18 of the value at h = 1/4); one table for the scalar (tpurt_vm_horner) and the lanes
 * (ewd_horner), which take the same steps */
static const double kD1[] = {1.0 / 239500800, 1.0 / 1814400, 1.0 / 20160, 1.0 / 360, 1.0 / 12, 1.0};
static inline double k_d1(double h) {
  const double z = h * h;
  return 0.5 * z * tpurt_vm_horner(kD1, TPURT_VM_LEN(kD1), z);
}

/* e^x K_nu(x) for finite x > 0 */
static double k_scaled(int nu, double x) {
  double h = 0.25;
  if (x > 1.0) {
    const double g = 0.4 / sqrt(x);
    h = g < 0.25 ? g : 0.25;
  }
  const double d1 = k_d1(h), two_d1 = d1 + d1;
  double d = d1, s = d1, sum = 0.5; /* node 0: weight 1/2, integrand 1 */
  for (int i = 1; i < 1000000; ++i) {
    const double e = x * d;
    if (e - nu * (i * h) > K_STOP) break;
    sum += nu ? tpurt_vm_expd(-e) * (1.0 + d) : tpurt_vm_expd(-e);
    s = fma(two_d1, 1.0 + d, s);
    d += s;
  }
  return h * sum;
}

static double k_common(int nu, double x, bool scaled) {
  if (isnan(x)) return x;
  if (x < 0) return NAN;
  if (x == 0) return INFINITY;
  if (isinf(x)) return 0.0;
  const double ke = k_scaled(nu, x);
  if (scaled) return ke;
  return ke * (x <= K_EXP_MAX ? tpurt_vm_expd(-x) : exp(-x));
}
double tpurt_sp_k0(double x) { return k_common(0, x, false); }
double tpurt_sp_k1(double x) { return k_common(1, x, false); }
double tpurt_sp_k0e(double x) { return k_common(0, x, true); }
double tpurt_sp_k1e(double x) { return k_common(1, x, true); }

/* y[i] = K_nu(x[i]) (scaled: e^x K_nu) for contiguous doubles; the scalar's bits */
static void k_run(const double* x, double* y, int64_t n, int nu, bool scaled) {
  int64_t i = 0;
#if EWV_W
  const ewd_t zero = ewd_set1(0.0), one = ewd_set1(1.0), quarter = ewd_set1(0.25);
  const ewd_t top = ewd_set1(scaled ? INFINITY : K_EXP_MAX * (1 + 0x1p-52));
  for (; i + EWD_W <= n; i += EWD_W) {
    const ewd_t v = ewd_load(x + i);
    /* 0 < x (< inf, or <= 700 unscaled); NaN compares false */
    const unsigned inside = ewdm_bits(ewd_lt(zero, v)) & ewdm_bits(ewd_lt(v, top));
    if (inside) {
      const ewd_t xs = ewd_sel(ewd_lt(zero, v), ewd_sel(ewd_lt(v, top), v, one), one);
      const ewd_t g = ewd_div(ewd_set1(0.4), ewd_sqrt(xs));
      const ewd_t h = ewd_sel(ewd_lt(one, xs), ewd_sel(ewd_lt(g, quarter), g, quarter), quarter);
      const ewd_t z = ewd_mul(h, h);
      const ewd_t d1 = ewd_mul(ewd_mul(ewd_set1(0.5), z), ewd_horner(kD1, TPURT_VM_LEN(kD1), z)), two_d1 = ewd_add(d1, d1);
      ewd_t d = d1, s = d1, sum = ewd_set1(0.5);
      unsigned live = inside;
      for (int k = 1; live && k < 1000000; ++k) {
        const ewd_t e = ewd_mul(xs, d);
        const ewd_t over = ewd_sub(e, nu ? ewd_mul(ewd_set1((double)k), h) : zero);
        const ewdm_t past = ewd_lt(ewd_set1(K_STOP), over);
        live &= ~ewdm_bits(past);
        if (!live) break;
        /* a lane past its stop stays past (the exponent is convex in t) and adds nothing more; its
         * exponent is kept in the exponential's range */
        const ewd_t ex = ewd_exp(ewd_xor(ewd_min_nan_c(e, ewd_set1(K_EXP_MAX)), ewd_set1(-0.0)));
        const ewd_t term = nu ? ewd_mul(ex, ewd_add(one, d)) : ex;
        sum = ewd_sel(past, sum, ewd_add(sum, term));
        s = ewd_fma(two_d1, ewd_add(one, d), s);
        d = ewd_add(d, s);
      }
      ewd_t r = ewd_mul(h, sum);
      if (!scaled) r = ewd_mul(r, ewd_exp(ewd_xor(xs, ewd_set1(-0.0))));
      ewd_store(y + i, r);
    }
    for (unsigned m = ~inside & ((1u << EWD_W) - 1); m; m &= m - 1) {
      const int l = __builtin_ctz(m);
      y[i + l] = k_common(nu, x[i + l], scaled);
    }
  }
#endif
  for (; i < n; ++i) y[i] = k_common(nu, x[i], scaled);
}
void tpurt_sp_k0_vec(const double* x, double* y, int64_t n) { k_run(x, y, n, 0, false); }
void tpurt_sp_k1_vec(const double* x, double* y, int64_t n) { k_run(x, y, n, 1, false); }
void tpurt_sp_k0e_vec(const double* x, double* y, int64_t n) { k_run(x, y, n, 0, true); }
void tpurt_sp_k1e_vec(const double* x, double* y, int64_t n) { k_run(x, y, n, 1, true); }
