/* Scalar special functions (Bessel, incomplete gamma, zeta, orthogonal
 * polynomials, ...) in double precision, shared by the special kernel family
 * and its tests. Edge cases (poles, domain errors, +-inf) follow PyTorch CPU. */
#ifndef TPURT_OPS_SPECIAL_MATH_H_
#define TPURT_OPS_SPECIAL_MATH_H_

#include <stdint.h>

double tpurt_sp_i0(double x);
double tpurt_sp_i0e(double x);
/* i0 / i0e over n contiguous doubles (vectors where built; the scalar functions' bits) */
void tpurt_sp_i0_vec(const double* x, double* y, int64_t n);
void tpurt_sp_i0e_vec(const double* x, double* y, int64_t n);
double tpurt_sp_i1(double x);
double tpurt_sp_i1e(double x);
/* i1 / i1e likewise (special_i0.c) */
void tpurt_sp_i1_vec(const double* x, double* y, int64_t n);
void tpurt_sp_i1e_vec(const double* x, double* y, int64_t n);
double tpurt_sp_k0(double x);
double tpurt_sp_k1(double x);
double tpurt_sp_k0e(double x);
double tpurt_sp_k1e(double x);
double tpurt_sp_j0(double x);
double tpurt_sp_j1(double x);
double tpurt_sp_y0(double x);
double tpurt_sp_y1(double x);
/* special_jy.c: contiguous forms (the scalar's bits), and the parts it takes from special_math.c */
void tpurt_sp_j0_vec(const double* x, double* y, int64_t n);
void tpurt_sp_j1_vec(const double* x, double* y, int64_t n);
void tpurt_sp_y0_vec(const double* x, double* y, int64_t n);
void tpurt_sp_y1_vec(const double* x, double* y, int64_t n);
double tpurt_sp_j_asymptotic(int nu, double a);
/* special_k.c: K0, K1, e^x K0, e^x K1 over contiguous doubles */
void tpurt_sp_k0_vec(const double* x, double* y, int64_t n);
void tpurt_sp_k1_vec(const double* x, double* y, int64_t n);
void tpurt_sp_k0e_vec(const double* x, double* y, int64_t n);
void tpurt_sp_k1e_vec(const double* x, double* y, int64_t n);
double tpurt_sp_y_outside(int nu, double x);
double tpurt_sp_airy_ai(double x);
/* Ai(-z) = (cos(zeta - pi/4) even + sin(zeta - pi/4) odd) / (sqrt(pi) z^(1/4)), zeta = 2/3 z^(3/2): the
 * asymptotic sums (x < -8) */
void tpurt_sp_airy_neg_sums(double zeta, double* out_even, double* out_odd);
double tpurt_sp_spherical_j0(double x);
double tpurt_sp_erfcx(double x);
double tpurt_sp_ndtri(double p);
double tpurt_sp_zeta(double x, double q);
double tpurt_sp_digamma(double x);
double tpurt_sp_polygamma(double n, double x);
double tpurt_sp_igamma(double a, double x);
double tpurt_sp_igammac(double a, double x);
double tpurt_sp_cheb_t(double x, double n);
double tpurt_sp_cheb_u(double x, double n);
double tpurt_sp_cheb_v(double x, double n);
double tpurt_sp_cheb_w(double x, double n);
double tpurt_sp_shifted_cheb_t(double x, double n);
double tpurt_sp_shifted_cheb_u(double x, double n);
double tpurt_sp_shifted_cheb_v(double x, double n);
double tpurt_sp_shifted_cheb_w(double x, double n);
double tpurt_sp_hermite_h(double x, double n);
double tpurt_sp_hermite_he(double x, double n);
double tpurt_sp_laguerre_l(double x, double n);
double tpurt_sp_legendre_p(double x, double n);

#endif /* TPURT_OPS_SPECIAL_MATH_H_ */
