/* The C library's complex functions (C99 <complex.h>) for the complex elementwise loops
 * (ew_complex.c), which keep <complex.h> out of their own file: its `I` and `complex` macros would
 * collide with the loops' names. Each takes and returns (re, im) in double; complex64 loops round
 * the result once. */
#include <complex.h>
#include <math.h>
#include <stdbool.h>

#include "ops/elementwise/cx_math.h"

#define CX_MATH_FN(NAME, CFN)                                                  \
  void tpurt_cx_math_##NAME(double re, double im, double* out_re, double* out_im) { \
    double complex z = CFN(CMPLX(re, im));                                     \
    *out_re = creal(z);                                                        \
    *out_im = cimag(z);                                                        \
  }
TPURT_CX_MATH_LIST(CX_MATH_FN)

/* c10::complex's log1p: 0.5 * log1p(x (2 + x) + y^2) near 0 (|z| < 0.5), else log |1 + z|; the angle of 1 + z */
void tpurt_cx_math_log1p(double x, double y, double* o_r, double* o_i) {
  double theta = atan2(y, x + 1);
  if (hypot(x, y) < 0.5) {
    double r = x * (2 + x) + y * y;
    *o_r = r == 0 ? x : 0.5 * log1p(r);
  } else {
    *o_r = log(hypot(x + 1, y));
  }
  *o_i = theta;
}
/* CPU's _log_add_exp_helper on complex: NaN in the smaller (by real part) is NaN; two equal
 * infinite real parts give the smaller (-inf) or log(exp(a) + exp(b)) (+inf); else
 * log1p(exp(min - max)) + max */
void tpurt_cx_math_logaddexp(double ar, double ai, double br, double bi, double* o_r, double* o_i) {
  bool a_min = ar < br || (ar == br && ar != ar); /* mirrors std::real(x) < std::real(y) ? (x, y) : (y, x) */
  double mnr = a_min ? ar : br, mni = a_min ? ai : bi, mxr = a_min ? br : ar, mxi = a_min ? bi : ai;
  if (isnan(mnr) || isnan(mni)) {
    *o_r = *o_i = NAN;
  } else if (!isfinite(mnr) && mnr == mxr) {
    if (mnr < 0) {
      *o_r = mnr, *o_i = mni;
    } else {
      double complex e = cexp(CMPLX(mnr, mni)) + cexp(CMPLX(mxr, mxi)), l = clog(e);
      *o_r = creal(l), *o_i = cimag(l);
    }
  } else {
    double complex e = cexp(CMPLX(mnr - mxr, mni - mxi));
    double lr, li;
    tpurt_cx_math_log1p(creal(e), cimag(e), &lr, &li);
    *o_r = lr + mxr, *o_i = li + mxi;
  }
}
