/* Elementwise kernels on complex64/complex128 (registered "complex::<op>", or
 * flagged TPURT_OP_COMPLEX for ops born complex): copy and fill, arithmetic,
 * pow, reciprocal, log1p, logaddexp, neg/conj/sgn, abs/angle, exp, exp2, expm1, log, log2, log10, sqrt,
 * rsqrt, sigmoid, silu, sinc, masked_fill, lerp, the trigonometric and hyperbolic functions and their inverses, logical_not, where, complex(real, imag) and polar(abs, angle).
 * They run on the elementwise engine (broadcasting, strides, threads); a loop
 * reads complex operands as they are and real operands cast by the engine to
 * the compute precision's real type, so the real-dtype kernels and the fusion
 * engine never see a complex tensor. Formulas follow c10::complex, so special
 * values (inf * 0) come out as on PyTorch CPU. */
#include <complex.h>
#include <math.h>
#include <string.h>

#include "ops/args.h"
#include "ops/elementwise/cx_math.h"
#include "ops/elementwise/elementwise.h"

typedef struct cx_user_t {
  bool cplx[TPURT_EW_MAX_OPERANDS]; /* operand k is complex (else real, in the compute's real type); 0: the output */
  double alpha_re, alpha_im;         /* add/sub: other is scaled by alpha */
} cx_user_t;

/* ---- loops: each op once per precision (R = float for complex64, double for complex128) ---- */

#define CX_LD(R, k, i, re, im)                      \
  do {                                              \
    const R* p_ = (const R*)(d[k] + (i) * s[k]);    \
    re = p_[0];                                     \
    im = u->cplx[k] ? p_[1] : (R)0;                 \
  } while (0)
#define CX_ST(R, i, re, im)                         \
  do {                                              \
    R* q_ = (R*)(d[0] + (i) * s[0]);                \
    q_[0] = (re);                                   \
    q_[1] = (im);                                   \
  } while (0)

/* One loop for every op: reads inputs 1..NIN as (ar, ai), (br, bi), (cr, ci)
 * (a real operand reads with im 0), runs the body, and stores (o_r, o_i), or
 * o_r alone when OUT_CPLX is 0. NIN and OUT_CPLX are constants, so the
 * branches on them fold away. */
#define CX_LOOP(NAME, R, NIN, OUT_CPLX, ...)                                      \
  static void NAME(char** d, const int64_t* s, int64_t n, void* user) {           \
    typedef R cx_real_t __attribute__((unused)); /* the bodies' real type */      \
    const cx_user_t* u = user;                                                    \
    const R alr = (R)u->alpha_re, ali = (R)u->alpha_im;                           \
    (void)alr;                                                                    \
    (void)ali;                                                                    \
    for (int64_t i = 0; i < n; ++i) {                                             \
      R ar, ai, br = 0, bi = 0, cr = 0, ci = 0, o_r, o_i = 0;                     \
      CX_LD(R, 1, i, ar, ai);                                                     \
      if (NIN >= 2) CX_LD(R, 2, i, br, bi);                                       \
      if (NIN >= 3) CX_LD(R, 3, i, cr, ci);                                       \
      (void)ai, (void)br, (void)bi, (void)cr, (void)ci;                           \
      __VA_ARGS__;                                                                \
      if (OUT_CPLX || u->cplx[0]) CX_ST(R, i, o_r, o_i); /* a real result: 0j */  \
      else *(R*)(d[0] + i * s[0]) = o_r;                                          \
    }                                                                             \
  }
#define CX_LOOP1(NAME, R, ...) CX_LOOP(NAME, R, 1, 1, __VA_ARGS__)  /* complex <- a */
#define CX_LOOP1R(NAME, R, ...) CX_LOOP(NAME, R, 1, 0, __VA_ARGS__) /* real <- a */
#define CX_LOOP2(NAME, R, ...) CX_LOOP(NAME, R, 2, 1, __VA_ARGS__)  /* complex <- a, b */
#define CX_LOOP3(NAME, R, ...) CX_LOOP(NAME, R, 3, 1, __VA_ARGS__)  /* complex <- a, b, c */
#define CX_BOTH(MACRO, NAME, ...) MACRO(NAME##_f, float, __VA_ARGS__) MACRO(NAME##_d, double, __VA_ARGS__)

CX_BOTH(CX_LOOP1, copy, { o_r = ar; o_i = ai; })
CX_BOTH(CX_LOOP1R, real_part, { o_r = ar; })
CX_BOTH(CX_LOOP1R, nonzero, { o_r = (ar != 0 || ai != 0) ? 1 : 0; }) /* complex -> bool */
CX_BOTH(CX_LOOP1, neg, { o_r = -ar; o_i = -ai; })
CX_BOTH(CX_LOOP1, conj, { o_r = ar; o_i = -ai; })
CX_BOTH(CX_LOOP1R, abs, { o_r = hypot(ar, ai); })
CX_BOTH(CX_LOOP1R, angle, { o_r = atan2(ai, ar); })
/* sgn(z) = z / |z|, and 0 at 0 */
CX_BOTH(CX_LOOP1, sgn, {
  cx_real_t m = hypot(ar, ai);
  if (ar == 0 && ai == 0) { o_r = 0; o_i = 0; } else { o_r = ar / m; o_i = ai / m; }
})
/* exp(z) = e^re (cos im, sin im), exactly e^re when im is 0 (so exp(inf + 0j) is inf + 0j, as CPU), and C99's
 * values for an infinite re with a non-finite im */
CX_BOTH(CX_LOOP1, exp, {
  double e = exp((double)ar);
  if (ai == 0) { o_r = (cx_real_t)e; o_i = ai; }
  else if (isinf(ar) && !isfinite(ai)) { o_r = ar > 0 ? ar : 0; o_i = ar > 0 ? (cx_real_t)NAN : 0; } /* C99 cexp */
  else { o_r = (cx_real_t)(e * cos((double)ai)); o_i = (cx_real_t)(e * sin((double)ai)); }
})
/* the principal root as CPU takes it (std::sqrt of std::complex: C's csqrtf / csqrt, in the dtype's
 * precision), with C99's values for infinite and NaN parts */
#define CX_CSQRT(xr, xi, sr, si)                                        \
  do {                                                                  \
    if (sizeof(cx_real_t) == sizeof(float)) {                           \
      float complex z_ = csqrtf(CMPLXF((float)(xr), (float)(xi)));      \
      sr = (cx_real_t)crealf(z_), si = (cx_real_t)cimagf(z_);           \
    } else {                                                            \
      double complex z_ = csqrt(CMPLX((double)(xr), (double)(xi)));     \
      sr = (cx_real_t)creal(z_), si = (cx_real_t)cimag(z_);             \
    }                                                                   \
  } while (0)
CX_BOTH(CX_LOOP1, sqrt, CX_CSQRT(ar, ai, o_r, o_i))
/* log(z) = log|z| + i arg(z) */
CX_BOTH(CX_LOOP1, log, { o_r = (cx_real_t)log(hypot((double)ar, (double)ai)); o_i = (cx_real_t)atan2((double)ai, (double)ar); })
/* the trigonometric and hyperbolic functions and their inverses: the C library's, in double */
#define CX_MATH_LOOPS(NAME, CFN) \
  CX_BOTH(CX_LOOP1, NAME, { double r_, i_; tpurt_cx_math_##NAME(ar, ai, &r_, &i_); o_r = (cx_real_t)r_; o_i = (cx_real_t)i_; })
TPURT_CX_MATH_LIST(CX_MATH_LOOPS)
CX_BOTH(CX_LOOP1R, logical_not, { o_r = (ar == 0 && ai == 0) ? 1 : 0; }) /* complex -> bool */
CX_BOTH(CX_LOOP1, logical_not_c, { o_r = (ar == 0 && ai == 0) ? 1 : 0; o_i = 0; }) /* in place: 1 + 0j or 0 */
CX_BOTH(CX_LOOP2, add, { o_r = ar + (alr * br - ali * bi); o_i = ai + (alr * bi + ali * br); })
CX_BOTH(CX_LOOP2, sub, { o_r = ar - (alr * br - ali * bi); o_i = ai - (alr * bi + ali * br); })
CX_BOTH(CX_LOOP2, mul, { o_r = ar * br - ai * bi; o_i = ar * bi + ai * br; })
/* tanh_backward(grad, y) = grad * conj(1 - y*y), sigmoid_backward(grad, y) = grad * conj((1 - y) * y), as CPU */
CX_BOTH(CX_LOOP2, tanh_backward, {
  cx_real_t yr = 1 - (br * br - bi * bi), yi = br * bi + bi * br; /* conj(1 - y*y) */
  o_r = ar * yr - ai * yi;
  o_i = ar * yi + ai * yr;
})
CX_BOTH(CX_LOOP2, sigmoid_backward, {
  cx_real_t mr = 1 - br, mi = -bi;
  cx_real_t yr = mr * br - mi * bi, yi = -(mr * bi + mi * br); /* conj((1 - y) * y) */
  o_r = ar * yr - ai * yi;
  o_i = ar * yi + ai * yr;
})
/* c10::complex's division (numpy's), (xr, xi) / (yr, yi): scaled by the larger part of the divisor */
#define CX_DIV(xr, xi, yr, yi, qr, qi)                 \
  do {                                                 \
    cx_real_t ac_ = fabs(yr), ad_ = fabs(yi);          \
    if (ac_ >= ad_) {                                  \
      if (ac_ == 0 && ad_ == 0) {                      \
        qr = (xr) / ac_;                               \
        qi = (xi) / ad_;                               \
      } else {                                         \
        cx_real_t rat_ = (yi) / (yr), scl_ = 1 / ((yr) + (yi) * rat_); \
        qr = ((xr) + (xi) * rat_) * scl_;              \
        qi = ((xi) - (xr) * rat_) * scl_;              \
      }                                                \
    } else {                                           \
      cx_real_t rat_ = (yr) / (yi), scl_ = 1 / ((yi) + (yr) * rat_); \
      qr = ((xr) * rat_ + (xi)) * scl_;                \
      qi = ((xi) * rat_ - (xr)) * scl_;                \
    }                                                  \
  } while (0)
CX_BOTH(CX_LOOP2, div, CX_DIV(ar, ai, br, bi, o_r, o_i))
/* exp in double, as the exp loop: exactly e^re when im is 0, C99's values for an infinite re with a non-finite im */
static void cx_exp_d(double ar, double ai, double* o_r, double* o_i) {
  double e = exp(ar);
  if (ai == 0) { *o_r = e; *o_i = ai; }
  else if (isinf(ar) && !isfinite(ai)) { *o_r = ar > 0 ? ar : 0; *o_i = ar > 0 ? NAN : 0; }
  else { *o_r = e * cos(ai); *o_i = e * sin(ai); }
}
/* exp2(z) = exp(ln 2 * z) (CPU's exp2_impl: no std::exp2 for complex); the product rounds to the dtype first */
CX_BOTH(CX_LOOP1, exp2, {
  const cx_real_t ln2 = (cx_real_t)0.693147180559945309417232121458176;
  double r_, i_; cx_exp_d((double)(ln2 * ar), (double)(ln2 * ai), &r_, &i_); o_r = (cx_real_t)r_; o_i = (cx_real_t)i_;
})
/* c10::complex's expm1: expm1(x) cos(y) - 2 sin(y / 2)^2 + i e^x sin(y), without cancellation near 0 */
CX_BOTH(CX_LOOP1, expm1, {
  double x_ = ar, y_ = ai, a_ = sin(y_ / 2);
  o_r = (cx_real_t)(expm1(x_) * cos(y_) - 2 * a_ * a_);
  o_i = (cx_real_t)(exp(x_) * sin(y_));
})
/* log2(z), log10(z) = log(z) / log(2 or 10), as c10's complex_math: a complex over a real, part by part */
CX_BOTH(CX_LOOP1, log2, {
  const cx_real_t l_ = (cx_real_t)log(2.0);
  cx_real_t lr_ = (cx_real_t)log(hypot((double)ar, (double)ai)), li_ = (cx_real_t)atan2((double)ai, (double)ar);
  o_r = lr_ / l_;
  o_i = li_ / l_;
})
CX_BOTH(CX_LOOP1, log10, {
  const cx_real_t l_ = (cx_real_t)log(10.0);
  cx_real_t lr_ = (cx_real_t)log(hypot((double)ar, (double)ai)), li_ = (cx_real_t)atan2((double)ai, (double)ar);
  o_r = lr_ / l_;
  o_i = li_ / l_;
})
/* rsqrt(z) = 1 / sqrt(z) (CPU's rsqrt_wrapper) */
CX_BOTH(CX_LOOP1, rsqrt, {
  cx_real_t sr_, si_;
  CX_CSQRT(ar, ai, sr_, si_);
  CX_DIV((cx_real_t)1, (cx_real_t)0, sr_, si_, o_r, o_i);
})
/* sigmoid(z) = 1 / (1 + exp(-z)), silu(z) = z / (1 + exp(-z)), as CPU's complex paths */
CX_BOTH(CX_LOOP1, sigmoid, {
  double r_, i_; cx_exp_d(-(double)ar, -(double)ai, &r_, &i_);
  cx_real_t dr_ = (cx_real_t)(1 + r_), di_ = (cx_real_t)i_;
  CX_DIV((cx_real_t)1, (cx_real_t)0, dr_, di_, o_r, o_i);
})
CX_BOTH(CX_LOOP1, silu, {
  double r_, i_; cx_exp_d(-(double)ar, -(double)ai, &r_, &i_);
  cx_real_t dr_ = (cx_real_t)(1 + r_), di_ = (cx_real_t)i_;
  CX_DIV(ar, ai, dr_, di_, o_r, o_i);
})
/* sinc(z) = sin(pi z) / (pi z), and 1 at 0 */
CX_BOTH(CX_LOOP1, sinc, {
  if (ar == 0 && ai == 0) { o_r = 1; o_i = 0; } else {
    const cx_real_t pi_ = (cx_real_t)3.14159265358979323846264338327950288;
    cx_real_t pr_ = pi_ * ar, pi2_ = pi_ * ai;
    double r_, i_; tpurt_cx_math_sin(pr_, pi2_, &r_, &i_);
    CX_DIV((cx_real_t)r_, (cx_real_t)i_, pr_, pi2_, o_r, o_i);
  }
})
CX_BOTH(CX_LOOP1, log1p, { double r_, i_; tpurt_cx_math_log1p(ar, ai, &r_, &i_); o_r = (cx_real_t)r_; o_i = (cx_real_t)i_; })
CX_BOTH(CX_LOOP2, logaddexp, { double r_, i_; tpurt_cx_math_logaddexp(ar, ai, br, bi, &r_, &i_); o_r = (cx_real_t)r_; o_i = (cx_real_t)i_; })
CX_BOTH(CX_LOOP1, reciprocal, CX_DIV((cx_real_t)1, (cx_real_t)0, ar, ai, o_r, o_i))
/* pow(a, b): CPU's shortcuts for a real exponent 2, 3, 0.5, -0.5, -1, -2 (c10::complex products
 * and quotients, std::sqrt), else std::pow, which is C's cpow */
#define CX_POW(CPOW, CSQRT, CPLX)                                                      \
  do {                                                                             \
    cx_real_t sr_, si_;                                                            \
    if (bi == 0 && (br == 2 || br == -2)) {                                        \
      sr_ = ar * ar - ai * ai;                                                     \
      si_ = ar * ai + ai * ar;                                                     \
      if (br == 2) o_r = sr_, o_i = si_;                                           \
      else CX_DIV((cx_real_t)1, (cx_real_t)0, sr_, si_, o_r, o_i);                 \
    } else if (bi == 0 && br == 3) {                                               \
      sr_ = ar * ar - ai * ai;                                                     \
      si_ = ar * ai + ai * ar;                                                     \
      o_r = sr_ * ar - si_ * ai;                                                   \
      o_i = sr_ * ai + si_ * ar;                                                   \
    } else if (bi == 0 && br == -1) {                                              \
      CX_DIV((cx_real_t)1, (cx_real_t)0, ar, ai, o_r, o_i);                        \
    } else if (bi == 0 && (br == 0.5 || br == -0.5)) {                             \
      CPLX r_ = CSQRT(CMPLX(ar, ai));                                              \
      if (br > 0) o_r = creal(r_), o_i = cimag(r_);                                \
      else CX_DIV((cx_real_t)1, (cx_real_t)0, (cx_real_t)creal(r_), (cx_real_t)cimag(r_), o_r, o_i); \
    } else {                                                                       \
      CPLX r_ = CPOW(CMPLX(ar, ai), CMPLX(br, bi));                                \
      o_r = creal(r_);                                                             \
      o_i = cimag(r_);                                                             \
    }                                                                              \
  } while (0)
/* complex64 in float (cpowf), as CPU and NumPy compute it, except a zero base: cpowf gives NaN
 * where CPU's formula gives its special values (0, or inf + nanj for b.real < 0) */
#define CX_POW_F(CPLX_UNUSED)                                        \
  do {                                                               \
    if (ar == 0 && ai == 0) CX_POW(cpow, csqrt, double complex);     \
    else CX_POW(cpowf, csqrtf, float complex);                       \
  } while (0)
CX_LOOP2(pow_f, float, CX_POW_F(0))
CX_LOOP2(pow_d, double, CX_POW(cpow, csqrt, double complex))
/* addcmul / addcdiv: a + alpha * (b * c) / a + alpha * (b / c) */
CX_BOTH(CX_LOOP3, addcmul, {
  cx_real_t pr = br * cr - bi * ci, pi = br * ci + bi * cr;
  o_r = ar + (alr * pr - ali * pi);
  o_i = ai + (alr * pi + ali * pr);
})
CX_BOTH(CX_LOOP3, addcdiv, {
  cx_real_t pr, pi;
  CX_DIV(br, bi, cr, ci, pr, pi);
  o_r = ar + (alr * pr - ali * pi);
  o_i = ai + (alr * pi + ali * pr);
})
/* lerp(self, end, weight) as CPU's lerp: self + w (end - self) for |w| < 0.5, else end - (end - self)(1 - w) */
CX_BOTH(CX_LOOP3, lerp, {
  cx_real_t dr = br - ar, di = bi - ai;
  if (hypot(cr, ci) < 0.5) {
    o_r = ar + (cr * dr - ci * di);
    o_i = ai + (cr * di + ci * dr);
  } else {
    cx_real_t wr = 1 - cr, wi = -ci;
    o_r = br - (dr * wr - di * wi);
    o_i = bi - (dr * wi + di * wr);
  }
})
/* complex(real, imag) and polar(abs, angle): both inputs real */
CX_BOTH(CX_LOOP2, make, { o_r = ar; o_i = br; })
CX_BOTH(CX_LOOP2, polar, { o_r = ar * cos(br); o_i = ar * sin(br); })

/* where(cond, a, b): operand 1 is bool, 2 and 3 the values */
#define CX_WHERE(NAME, R)                                                         \
  static void NAME(char** d, const int64_t* s, int64_t n, void* user) {           \
    typedef R cx_real_t __attribute__((unused)); /* the bodies' real type */                             \
    const cx_user_t* u = user;                                                    \
    for (int64_t i = 0; i < n; ++i) {                                             \
      R re, im;                                                                   \
      if (*(const bool*)(d[1] + i * s[1])) CX_LD(R, 2, i, re, im);               \
      else CX_LD(R, 3, i, re, im);                                                \
      CX_ST(R, i, re, im);                                                        \
    }                                                                             \
  }
CX_WHERE(where_f, float)
CX_WHERE(where_d, double)

/* ---- running a loop ---- */

/* Converts a strided complex tensor into a dense one of `dtype` in `buf`. */
static void cx_densify(const tpurt_tensor_t* t, tpurt_dtype_t dtype, void* buf, tpurt_tensor_t* out) {
  int64_t n = tpurt_tensor_numel(t), idx[TPURT_MAX_DIMS] = {0};
  size_t ss = tpurt_dtype_size(t->dtype), ds = tpurt_dtype_size(dtype);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int32_t k = 0; k < t->ndim; ++k) off += idx[k] * t->strides[k];
    tpurt_dtype_convert(dtype, (char*)buf + i * ds, t->dtype, (const char*)t->data + off * ss, 1);
    for (int32_t k = t->ndim - 1; k >= 0; --k) {
      if (++idx[k] < t->sizes[k]) break;
      idx[k] = 0;
    }
  }
  *out = *t;
  out->data = buf;
  out->dtype = dtype;
  int64_t st = 1;
  for (int32_t k = t->ndim - 1; k >= 0; --k) {
    out->strides[k] = st;
    st *= t->sizes[k] > 1 ? t->sizes[k] : 1;
  }
}

/* dense src (row-major, out's shape) converted into the strided dst: cx_densify's inverse */
static void cx_scatter(const tpurt_tensor_t* src, const tpurt_tensor_t* dst) {
  int64_t n = tpurt_tensor_numel(dst), idx[TPURT_MAX_DIMS] = {0};
  size_t ss = tpurt_dtype_size(src->dtype), ds = tpurt_dtype_size(dst->dtype);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int32_t k = 0; k < dst->ndim; ++k) off += idx[k] * dst->strides[k];
    tpurt_dtype_convert(dst->dtype, (char*)dst->data + off * ds, src->dtype, (const char*)src->data + i * ss, 1);
    for (int32_t k = dst->ndim - 1; k >= 0; --k) {
      if (++idx[k] < dst->sizes[k]) break;
      idx[k] = 0;
    }
  }
}

/* Runs `f` (complex64 compute) or `dl` (complex128) over out <- ins.
 * `compute` is the complex compute dtype; a complex input of the other
 * precision is converted to it first; real inputs are cast by the engine. */
static tpurt_status_t cx_run(tpurt_kernel_ctx_t* ctx, const char* op, tpurt_dtype_t compute,
                             const tpurt_tensor_t* out, int nin, const tpurt_tensor_t* const* ins,
                             tpurt_ew_loop_fn_t f, tpurt_ew_loop_fn_t dl, cx_user_t* u) {
  if (!tpurt_dtype_is_complex(compute))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a complex compute dtype, got %s", op,
                        tpurt_dtype_name(compute));
  tpurt_dtype_t real = tpurt_dtype_to_real(compute);
  tpurt_ew_config_t cfg = {.op = op, .num_outputs = 1, .num_inputs = nin,
                           .loop = compute == TPURT_DTYPE_COMPLEX64 ? f : dl, .user = u, .grain = 16384};
  if (tpurt_tensor_numel(out) == 0) return TPURT_OK;
  tpurt_tensor_t tmp;
  const tpurt_tensor_t* final_out = NULL;
  if (tpurt_dtype_is_complex(out->dtype) && out->dtype != compute) {
    /* an out= of the other precision: compute into a dense temporary, then convert (CPU's
     * TensorIterator computes in the common dtype and casts to the output) */
    void* buf = tpurt_kernel_scratch(ctx, (size_t)tpurt_tensor_numel(out) * tpurt_dtype_size(compute) + 16);
    if (!buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch memory", op);
    tmp = *out;
    tmp.data = buf;
    tmp.dtype = compute;
    int64_t st = 1;
    for (int32_t k = out->ndim - 1; k >= 0; --k) {
      tmp.strides[k] = st;
      st *= out->sizes[k] > 1 ? out->sizes[k] : 1;
    }
    final_out = out;
    out = &tmp;
  }
  cfg.tensors[0] = out;
  u->cplx[0] = tpurt_dtype_is_complex(out->dtype);
  cfg.loop_dtypes[0] = u->cplx[0] ? compute : real;
  tpurt_tensor_t dense[TPURT_EW_MAX_OPERANDS];
  for (int k = 0; k < nin; ++k) {
    const tpurt_tensor_t* t = ins[k];
    int op_k = 1 + k;
    u->cplx[op_k] = tpurt_dtype_is_complex(t->dtype);
    if (t->dtype == TPURT_DTYPE_BOOL && f == where_f && k == 0) {
      cfg.loop_dtypes[op_k] = TPURT_DTYPE_BOOL;
    } else if (u->cplx[op_k]) {
      if (t->dtype != compute) { /* the other precision: convert once, densely */
        void* buf = tpurt_kernel_scratch(ctx, (size_t)tpurt_tensor_numel(t) * tpurt_dtype_size(compute) + 16);
        if (!buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch memory", op);
        cx_densify(t, compute, buf, &dense[k]);
        t = &dense[k];
      }
      cfg.loop_dtypes[op_k] = compute;
    } else {
      cfg.loop_dtypes[op_k] = real;
    }
    cfg.tensors[op_k] = t;
  }
  TPURT_RETURN_IF_ERROR(tpurt_ew_run(ctx, &cfg));
  if (final_out) cx_scatter(out, final_out);
  return TPURT_OK;
}

/* A Scalar or tensor argument as a tensor (a Scalar becomes a 0-d real tensor). */
static const tpurt_tensor_t* cx_arg(const tpurt_op_call_t* call, int i, tpurt_tensor_t* t, void* storage8) {
  return tpurt_arg_as_tensor(tpurt_arg_at(call, i), t, storage8);
}

static tpurt_status_t cx_need_output(const tpurt_op_call_t* call, const char* op) {
  if (call->num_outputs < 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected one output", op);
  return TPURT_OK;
}

#define CX_KERNEL(NAME) tpurt_status_t tpurt_cx_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call)

/* copy_(self, src, non_blocking): complex <- complex/real, or real <- complex (the real part, as CPU;
 * bool: either part nonzero). */
CX_KERNEL(copy) {
  TPURT_RETURN_IF_ERROR(cx_need_output(call, "copy_"));
  const tpurt_tensor_t* src = tpurt_arg_tensor(call, 1);
  if (!src) return TPURT_STATUS(INVALID_ARGUMENT, "copy_: expected (self, src)");
  const tpurt_tensor_t* dst = &call->outputs[0];
  cx_user_t u = {0};
  if (tpurt_dtype_is_complex(dst->dtype))
    return cx_run(ctx, "copy_", dst->dtype, dst, 1, &src, copy_f, copy_d, &u);
  if (dst->dtype == TPURT_DTYPE_BOOL) /* true when either part is nonzero */
    return cx_run(ctx, "copy_", src->dtype, dst, 1, &src, nonzero_f, nonzero_d, &u);
  return cx_run(ctx, "copy_", src->dtype, dst, 1, &src, real_part_f, real_part_d, &u);
}

/* fill_(self, value) / zero_(self) */
CX_KERNEL(fill) {
  TPURT_RETURN_IF_ERROR(cx_need_output(call, "fill_"));
  const tpurt_tensor_t* out = &call->outputs[0];
  tpurt_tensor_t wrapped;
  _Alignas(8) char storage[8];
  const tpurt_tensor_t* v = cx_arg(call, 1, &wrapped, storage);
  if (!v) return TPURT_STATUS(INVALID_ARGUMENT, "fill_: value must be a number or a tensor");
  if (tpurt_tensor_numel(v) != 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "fill_: value tensor must be 0-dimensional, has %d dims", v->ndim);
  tpurt_tensor_t v0 = *v;
  v0.ndim = 0;
  const tpurt_tensor_t* in = &v0;
  cx_user_t u = {0};
  return cx_run(ctx, "fill_", out->dtype, out, 1, &in, copy_f, copy_d, &u);
}
CX_KERNEL(zero) {
  TPURT_RETURN_IF_ERROR(cx_need_output(call, "zero_"));
  const tpurt_tensor_t* out = &call->outputs[0];
  double zero = 0.0;
  tpurt_tensor_t z = {.data = &zero, .dtype = TPURT_DTYPE_FLOAT64, .ndim = 0};
  const tpurt_tensor_t* in = &z;
  cx_user_t u = {0};
  return cx_run(ctx, "zero_", out->dtype, out, 1, &in, copy_f, copy_d, &u);
}

/* Binary ops (self, other[, alpha]); `swap` computes other OP self (rsub). */
static tpurt_status_t cx_binary(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const char* op,
                                tpurt_ew_loop_fn_t f, tpurt_ew_loop_fn_t dl, bool has_alpha, bool swap) {
  TPURT_RETURN_IF_ERROR(cx_need_output(call, op));
  tpurt_tensor_t wa, wb;
  _Alignas(8) char sa[8], sb[8];
  const tpurt_tensor_t* a = cx_arg(call, 0, &wa, sa);
  const tpurt_tensor_t* b = cx_arg(call, 1, &wb, sb);
  if (!a || !b) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (self, other)", op);
  cx_user_t u = {.alpha_re = 1.0};
  if (has_alpha && call->num_args > 2) {
    const tpurt_tensor_t* t = tpurt_arg_tensor(call, 2); /* a complex alpha arrives as a 0-d tensor */
    if (t) {
      u.alpha_re = tpurt_dtype_load_f64(t->dtype, t->data);
      if (t->dtype == TPURT_DTYPE_COMPLEX64) u.alpha_im = ((const float*)t->data)[1];
      if (t->dtype == TPURT_DTYPE_COMPLEX128) u.alpha_im = ((const double*)t->data)[1];
    } else {
      u.alpha_re = tpurt_arg_double(call, 2, 1.0);
    }
  } else if (!has_alpha && tpurt_arg_is(call, 2, TPURT_ARG_STRING)) {
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: rounding_mode is not supported for complex inputs", op);
  }
  const tpurt_tensor_t* ins[2] = {swap ? b : a, swap ? a : b};
  /* the compute dtype: the tensors' common complex dtype where it differs from a complex out='s
   * (pow(complex64, complex128, out=complex64) computes in complex128 and rounds, as CPU); only
   * tensors of at least one dim count, as in PyTorch's promotion over 0-d tensors and scalars */
  tpurt_dtype_t compute = call->outputs[0].dtype;
  if (tpurt_dtype_is_complex(compute) && a->ndim > 0 && b->ndim > 0) {
    tpurt_dtype_t common = tpurt_dtype_promote(a->dtype, b->dtype);
    if (tpurt_dtype_is_complex(common)) compute = common;
  }
  return cx_run(ctx, op, compute, &call->outputs[0], 2, ins, f, dl, &u);
}
CX_KERNEL(add) { return cx_binary(ctx, call, "add", add_f, add_d, true, false); }
CX_KERNEL(sub) { return cx_binary(ctx, call, "sub", sub_f, sub_d, true, false); }
CX_KERNEL(rsub) { return cx_binary(ctx, call, "rsub", sub_f, sub_d, true, true); }
CX_KERNEL(mul) { return cx_binary(ctx, call, "mul", mul_f, mul_d, false, false); }
CX_KERNEL(tanh_backward) { return cx_binary(ctx, call, "tanh_backward", tanh_backward_f, tanh_backward_d, false, false); }
CX_KERNEL(sigmoid_backward) {
  return cx_binary(ctx, call, "sigmoid_backward", sigmoid_backward_f, sigmoid_backward_d, false, false);
}
CX_KERNEL(div) { return cx_binary(ctx, call, "div", div_f, div_d, false, false); }
/* complex(real, imag), polar(abs, angle): real inputs, a complex output */
CX_KERNEL(complex) {
  /* as CPU: real and imag of one dtype (no promotion) */
  const tpurt_tensor_t *re = call->num_args > 1 ? tpurt_arg_tensor(call, 0) : NULL, *im = tpurt_arg_tensor(call, 1);
  if (re && im && re->dtype != im->dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "Expected object of scalar type %s but got scalar type %s for second argument",
                        tpurt_dtype_name(re->dtype), tpurt_dtype_name(im->dtype));
  if (re && call->num_outputs > 0 && call->outputs[0].dtype != tpurt_dtype_to_complex(re->dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "Expected object of scalar type %s but got scalar type %s for argument 'out'",
                        tpurt_dtype_name(tpurt_dtype_to_complex(re->dtype)), tpurt_dtype_name(call->outputs[0].dtype));
  return cx_binary(ctx, call, "complex", make_f, make_d, false, false);
}
CX_KERNEL(logaddexp) { return cx_binary(ctx, call, "logaddexp", logaddexp_f, logaddexp_d, false, false); }
CX_KERNEL(pow) { return cx_binary(ctx, call, "pow", pow_f, pow_d, false, false); }
CX_KERNEL(polar) { return cx_binary(ctx, call, "polar", polar_f, polar_d, false, false); }

/* addcmul / addcdiv(self, tensor1, tensor2, value) */
static tpurt_status_t cx_addc(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const char* op,
                              tpurt_ew_loop_fn_t f, tpurt_ew_loop_fn_t dl) {
  TPURT_RETURN_IF_ERROR(cx_need_output(call, op));
  tpurt_tensor_t w[3];
  _Alignas(8) char st[3][8];
  const tpurt_tensor_t* ins[3];
  for (int k = 0; k < 3; ++k) {
    ins[k] = cx_arg(call, k, &w[k], st[k]);
    if (!ins[k]) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (self, tensor1, tensor2, value)", op);
  }
  cx_user_t u = {.alpha_re = 1.0};
  const tpurt_tensor_t* v = tpurt_arg_tensor(call, 3); /* a complex value arrives as a 0-d tensor */
  if (v) {
    u.alpha_re = tpurt_dtype_load_f64(v->dtype, v->data);
    if (v->dtype == TPURT_DTYPE_COMPLEX64) u.alpha_im = ((const float*)v->data)[1];
    if (v->dtype == TPURT_DTYPE_COMPLEX128) u.alpha_im = ((const double*)v->data)[1];
  } else {
    u.alpha_re = tpurt_arg_double(call, 3, 1.0);
  }
  return cx_run(ctx, op, call->outputs[0].dtype, &call->outputs[0], 3, ins, f, dl, &u);
}
/* lerp(self, end, weight): weight a Scalar (lerp.Scalar) or a tensor (lerp.Tensor) */
CX_KERNEL(lerp) {
  TPURT_RETURN_IF_ERROR(cx_need_output(call, "lerp"));
  tpurt_tensor_t w[3];
  _Alignas(8) char st[3][8];
  const tpurt_tensor_t* ins[3];
  for (int k = 0; k < 3; ++k) {
    ins[k] = cx_arg(call, k, &w[k], st[k]);
    if (!ins[k]) return TPURT_STATUS(INVALID_ARGUMENT, "lerp: expected (self, end, weight)");
  }
  cx_user_t u = {0};
  return cx_run(ctx, "lerp", call->outputs[0].dtype, &call->outputs[0], 3, ins, lerp_f, lerp_d, &u);
}
CX_KERNEL(addcmul) { return cx_addc(ctx, call, "addcmul", addcmul_f, addcmul_d); }
CX_KERNEL(addcdiv) { return cx_addc(ctx, call, "addcdiv", addcdiv_f, addcdiv_d); }

/* Unary ops on args[0]; the compute dtype is the complex input's. */
static tpurt_status_t cx_unary(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const char* op,
                               tpurt_ew_loop_fn_t f, tpurt_ew_loop_fn_t dl) {
  TPURT_RETURN_IF_ERROR(cx_need_output(call, op));
  const tpurt_tensor_t* a = tpurt_arg_tensor(call, 0);
  if (!a) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a tensor argument", op);
  cx_user_t u = {0};
  /* a complex out= of the other precision (angle's, which CPU widens) sets the compute dtype */
  const tpurt_dtype_t od = call->outputs[0].dtype;
  tpurt_dtype_t compute = tpurt_dtype_is_complex(a->dtype) && !tpurt_dtype_is_complex(od) ? a->dtype : od;
  return cx_run(ctx, op, compute, &call->outputs[0], 1, &a, f, dl, &u);
}
CX_KERNEL(neg) { return cx_unary(ctx, call, "neg", neg_f, neg_d); }
CX_KERNEL(log1p) { return cx_unary(ctx, call, "log1p", log1p_f, log1p_d); }
CX_KERNEL(reciprocal) { return cx_unary(ctx, call, "reciprocal", reciprocal_f, reciprocal_d); }
CX_KERNEL(conj_physical) { return cx_unary(ctx, call, "conj_physical", conj_f, conj_d); }
CX_KERNEL(sgn) { return cx_unary(ctx, call, "sgn", sgn_f, sgn_d); }
CX_KERNEL(abs) { return cx_unary(ctx, call, "abs", abs_f, abs_d); }
CX_KERNEL(angle) { return cx_unary(ctx, call, "angle", angle_f, angle_d); }
CX_KERNEL(exp) { return cx_unary(ctx, call, "exp", exp_f, exp_d); }
CX_KERNEL(sqrt) { return cx_unary(ctx, call, "sqrt", sqrt_f, sqrt_d); }
CX_KERNEL(log) { return cx_unary(ctx, call, "log", log_f, log_d); }
CX_KERNEL(exp2) { return cx_unary(ctx, call, "exp2", exp2_f, exp2_d); }
CX_KERNEL(expm1) { return cx_unary(ctx, call, "expm1", expm1_f, expm1_d); }
CX_KERNEL(log2) { return cx_unary(ctx, call, "log2", log2_f, log2_d); }
CX_KERNEL(log10) { return cx_unary(ctx, call, "log10", log10_f, log10_d); }
CX_KERNEL(rsqrt) { return cx_unary(ctx, call, "rsqrt", rsqrt_f, rsqrt_d); }
CX_KERNEL(sigmoid) { return cx_unary(ctx, call, "sigmoid", sigmoid_f, sigmoid_d); }
CX_KERNEL(silu) { return cx_unary(ctx, call, "silu", silu_f, silu_d); }
CX_KERNEL(sinc) { return cx_unary(ctx, call, "sinc", sinc_f, sinc_d); }
#define CX_MATH_KERNELS(NAME, CFN) \
  CX_KERNEL(NAME) { return cx_unary(ctx, call, #NAME, NAME##_f, NAME##_d); }
TPURT_CX_MATH_LIST(CX_MATH_KERNELS)
CX_KERNEL(logical_not) {
  if (call->num_outputs >= 1 && tpurt_dtype_is_complex(call->outputs[0].dtype))
    return cx_unary(ctx, call, "logical_not", logical_not_c_f, logical_not_c_d);
  return cx_unary(ctx, call, "logical_not", logical_not_f, logical_not_d);
}

/* where(condition, self, other) */
CX_KERNEL(where) {
  TPURT_RETURN_IF_ERROR(cx_need_output(call, "where"));
  tpurt_tensor_t wc, wa, wb;
  _Alignas(8) char sc[8], sa[8], sb[8];
  const tpurt_tensor_t* c = cx_arg(call, 0, &wc, sc);
  const tpurt_tensor_t* a = cx_arg(call, 1, &wa, sa);
  const tpurt_tensor_t* b = cx_arg(call, 2, &wb, sb);
  if (!c || !a || !b || c->dtype != TPURT_DTYPE_BOOL)
    return TPURT_STATUS(INVALID_ARGUMENT, "where: expected (bool condition, self, other)");
  const tpurt_tensor_t* ins[3] = {c, a, b};
  cx_user_t u = {0};
  return cx_run(ctx, "where", call->outputs[0].dtype, &call->outputs[0], 3, ins, where_f, where_d, &u);
}

/* masked_fill_(self, mask, value): where(mask, value, self), written over self */
CX_KERNEL(masked_fill) {
  TPURT_RETURN_IF_ERROR(cx_need_output(call, "masked_fill_"));
  tpurt_tensor_t wv;
  _Alignas(8) char sv[8];
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* mask = tpurt_arg_tensor(call, 1);
  const tpurt_tensor_t* v = cx_arg(call, 2, &wv, sv);
  if (!self || !mask || !v || mask->dtype != TPURT_DTYPE_BOOL)
    return TPURT_STATUS(INVALID_ARGUMENT, "masked_fill_: expected (self, bool mask, value)");
  if (tpurt_tensor_numel(v) != 1)
    return TPURT_STATUS(INVALID_ARGUMENT,
                        "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with %d dimension(s).",
                        (int)v->ndim);
  tpurt_tensor_t v0 = *v;
  v0.ndim = 0;
  const tpurt_tensor_t* ins[3] = {mask, &v0, self};
  cx_user_t u = {0};
  return cx_run(ctx, "masked_fill_", call->outputs[0].dtype, &call->outputs[0], 3, ins, where_f, where_d, &u);
}

/* ---- linear reductions (sum, mean) through the real kernels ----
 * A complex tensor [..., n] is the real tensor [..., n, 2] (view_as_real);
 * summing it over the same dims, never the last, sums real and imaginary
 * parts apart, which is the complex sum. */

static void cx_as_real(const tpurt_tensor_t* t, tpurt_tensor_t* out) {
  *out = *t;
  out->dtype = tpurt_dtype_to_real(t->dtype);
  for (int32_t k = 0; k < t->ndim; ++k) out->strides[k] = 2 * t->strides[k];
  out->sizes[t->ndim] = 2;
  out->strides[t->ndim] = 1;
  out->ndim = t->ndim + 1;
}

/* (self, dtype?) or (self, dim?, keepdim, dtype?) */
static tpurt_status_t cx_reduce(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const char* op, bool ref) {
  TPURT_RETURN_IF_ERROR(cx_need_output(call, op));
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  if (!self) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a tensor argument", op);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (!tpurt_dtype_is_complex(self->dtype) || !tpurt_dtype_is_complex(out->dtype) || self->ndim >= TPURT_MAX_DIMS)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected complex input and output", op);
  int64_t dims[TPURT_MAX_DIMS];
  int nd = 0;
  bool keepdim = false;
  bool has_dim = call->num_args >= 3;
  int32_t count;
  const int64_t* list = has_dim ? tpurt_arg_ints(call, 1, &count) : NULL;
  if (list && count > 0) {
    for (int i = 0; i < count && nd < TPURT_MAX_DIMS; ++i) {
      int64_t d = list[i], range = self->ndim ? self->ndim : 1; /* a 0-d tensor takes dims -1 and 0 */
      if (d < -range || d >= range)
        return TPURT_STATUS(OUT_OF_RANGE, "%s: dimension %lld out of range", op, (long long)d);
      dims[nd++] = d < 0 ? d + range : d;
    }
  } else if (has_dim && tpurt_arg_is(call, 1, TPURT_ARG_INT)) {
    int64_t d = tpurt_arg_int(call, 1, 0);
    dims[nd++] = d < 0 ? d + self->ndim : d;
  } else { /* every dim, spelled out: an empty list would take the real/imaginary one too */
    for (int k = 0; k < self->ndim; ++k) dims[nd++] = k;
  }
  if (has_dim && tpurt_arg_is(call, 2, TPURT_ARG_BOOL)) keepdim = tpurt_arg_bool(call, 2, false);
  if (nd == 0 || self->ndim == 0) { /* nothing to reduce: a copy (a mean over no elements divides by 1) */
    cx_user_t u = {0};
    return cx_run(ctx, op, out->dtype, out, 1, &self, copy_f, copy_d, &u);
  }
  const tpurt_op_def_t* def = tpurt_op_lookup(op);
  if (!def) return TPURT_STATUS(UNIMPLEMENTED, "%s: no real kernel to reduce with", op);
  tpurt_tensor_t rin, rout;
  cx_as_real(self, &rin);
  cx_as_real(out, &rout);
  tpurt_arg_t args[4];
  memset(args, 0, sizeof(args));
  args[0].kind = TPURT_ARG_TENSOR;
  args[0].v.tensor = &rin;
  args[1].kind = TPURT_ARG_INT_LIST;
  args[1].count = nd;
  args[1].v.ints = dims;
  args[2].kind = TPURT_ARG_BOOL;
  args[2].v.b = keepdim;
  args[3].kind = TPURT_ARG_NONE;
  tpurt_op_call_t rc = {.name = op, .overload = "dim_IntList", .num_args = 4, .args = args, .num_outputs = 1,
                        .outputs = &rout};
  return (ref ? def->reference : def->fn)(ctx, &rc);
}
CX_KERNEL(sum) { return cx_reduce(ctx, call, "sum", false); }
CX_KERNEL(sum_ref) { return cx_reduce(ctx, call, "sum", true); }
CX_KERNEL(mean) { return cx_reduce(ctx, call, "mean", false); }
CX_KERNEL(mean_ref) { return cx_reduce(ctx, call, "mean", true); }

/* These kernels are plain loops already; each is its own reference. The
 * dtypes of the first tensor argument: a loop reads real operands cast to the
 * compute precision, so an op whose compute dtype comes from its output (the
 * arithmetic, where, copy_, the unary ops) takes a real first operand too;
 * fill_, zero_ and the reductions need a complex self; complex() and polar()
 * build complex64/complex128 from float32/float64 parts. */
#define CX_DT_ANY TPURT_DTYPES_ALL
#define CX_DT_COMPLEX TPURT_DTYPES_COMPLEX
#define CX_DT_PARTS (TPURT_DTYPE_BIT(FLOAT32) | TPURT_DTYPE_BIT(FLOAT64))
#define CX(NAME, FN, DT) {NAME, tpurt_cx_##FN, tpurt_cx_##FN, 0, DT, TPURT_LAYOUT_STRIDED}
#define CX_FILL(NAME, FN, DT) {NAME, tpurt_cx_##FN, tpurt_cx_##FN, TPURT_OP_OVERWRITES_SELF, DT, TPURT_LAYOUT_STRIDED}
#define CX_BORN(NAME, FN, DT) {NAME, tpurt_cx_##FN, tpurt_cx_##FN, TPURT_OP_COMPLEX, DT, TPURT_LAYOUT_STRIDED}

const tpurt_op_def_t tpurt_ops_complex[] = {
    CX_FILL("complex::copy", copy, CX_DT_ANY),
    CX_FILL("complex::fill", fill, CX_DT_COMPLEX),
    CX_FILL("complex::zero", zero, CX_DT_COMPLEX),
    CX("complex::add", add, CX_DT_ANY),
    CX("complex::sub", sub, CX_DT_ANY),
    CX("complex::rsub", rsub, CX_DT_ANY),
    CX("complex::mul", mul, CX_DT_ANY),
    CX("complex::tanh_backward", tanh_backward, CX_DT_COMPLEX),
    CX("complex::sigmoid_backward", sigmoid_backward, CX_DT_COMPLEX),
    CX("complex::div", div, CX_DT_ANY),
    CX("complex::pow", pow, CX_DT_ANY),
    CX("complex::reciprocal", reciprocal, CX_DT_COMPLEX),
    CX("complex::log1p", log1p, CX_DT_COMPLEX),
    CX("complex::logaddexp", logaddexp, CX_DT_ANY),
    CX("complex::neg", neg, CX_DT_ANY),
    CX("complex::conj_physical", conj_physical, CX_DT_ANY),
    CX("complex::sgn", sgn, CX_DT_ANY),
    CX("complex::abs", abs, CX_DT_ANY),
    CX("complex::angle", angle, CX_DT_ANY),
    CX("complex::where", where, CX_DT_ANY),
    CX("complex::exp", exp, CX_DT_COMPLEX),
    CX("complex::sqrt", sqrt, CX_DT_COMPLEX),
    CX("complex::log", log, CX_DT_COMPLEX),
    CX("complex::exp2", exp2, CX_DT_COMPLEX),
    CX("complex::expm1", expm1, CX_DT_COMPLEX),
    CX("complex::log2", log2, CX_DT_COMPLEX),
    CX("complex::log10", log10, CX_DT_COMPLEX),
    CX("complex::rsqrt", rsqrt, CX_DT_COMPLEX),
    CX("complex::sigmoid", sigmoid, CX_DT_COMPLEX),
    CX("complex::silu", silu, CX_DT_COMPLEX),
    CX("complex::sinc", sinc, CX_DT_COMPLEX),
    CX("complex::masked_fill", masked_fill, CX_DT_COMPLEX),
#define CX_MATH_ENTRIES(NAME, CFN) CX("complex::" #NAME, NAME, CX_DT_COMPLEX),
    TPURT_CX_MATH_LIST(CX_MATH_ENTRIES)
    CX("complex::logical_not", logical_not, CX_DT_COMPLEX),
    {"complex::sum", tpurt_cx_sum, tpurt_cx_sum_ref, 0, CX_DT_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::mean", tpurt_cx_mean, tpurt_cx_mean_ref, 0, CX_DT_COMPLEX, TPURT_LAYOUT_STRIDED},
    CX("complex::addcmul", addcmul, CX_DT_ANY),
    CX("complex::lerp", lerp, CX_DT_COMPLEX),
    CX("complex::addcdiv", addcdiv, CX_DT_ANY),
    CX_BORN("complex", complex, CX_DT_PARTS),
    CX_BORN("polar", polar, CX_DT_PARTS),
    TPURT_OP_TABLE_END,
};
