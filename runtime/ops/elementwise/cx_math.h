/* Complex transcendental functions for the complex elementwise loops (cx_math.c). */
#ifndef TPURT_OPS_ELEMENTWISE_CX_MATH_H_
#define TPURT_OPS_ELEMENTWISE_CX_MATH_H_

#define TPURT_CX_MATH_LIST(X) \
  X(sin, csin) X(cos, ccos) X(tan, ctan) X(sinh, csinh) X(cosh, ccosh) X(tanh, ctanh) \
  X(asin, casin) X(acos, cacos) X(atan, catan) X(asinh, casinh) X(acosh, cacosh) X(atanh, catanh)

#define TPURT_CX_MATH_DECLARE_(NAME, CFN) \
  void tpurt_cx_math_##NAME(double re, double im, double* out_re, double* out_im);
TPURT_CX_MATH_LIST(TPURT_CX_MATH_DECLARE_)
#undef TPURT_CX_MATH_DECLARE_

/* c10::complex's log1p (careful near 0), and CPU's _log_add_exp_helper on complex (logaddexp,
 * logcumsumexp); both in double */
void tpurt_cx_math_log1p(double re, double im, double* out_re, double* out_im);
void tpurt_cx_math_logaddexp(double ar, double ai, double br, double bi, double* out_re, double* out_im);

#endif /* TPURT_OPS_ELEMENTWISE_CX_MATH_H_ */
