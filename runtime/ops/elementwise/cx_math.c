/* The C library's complex functions (C99 <complex.h>) for the complex elementwise loops
 * (ew_complex.c), which keep <complex.h> out of their own file: its `I` and `complex` macros would
 * collide with the loops' names. Each takes and returns (re, im) in double; complex64 loops round
 * the result once. */
#include <complex.h>

#include "ops/elementwise/cx_math.h"

#define CX_MATH_FN(NAME, CFN)                                                  \
  void tpurt_cx_math_##NAME(double re, double im, double* out_re, double* out_im) { \
    double complex z = CFN(CMPLX(re, im));                                     \
    *out_re = creal(z);                                                        \
    *out_im = cimag(z);                                                        \
  }
TPURT_CX_MATH_LIST(CX_MATH_FN)
