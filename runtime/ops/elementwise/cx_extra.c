/* More ops on complex tensors, built on the real kernels: normal_ (randn,
 * normal_ on complex64/complex128: real and imaginary parts each N(mean,
 * std^2 / 2), as CPU), uniform_ (rand: each part uniform, as CPU's
 * view_as_real), eq/ne, logical_and/or/xor, isnan (z != z), the factories linspace, logspace and
 * eye, tril/triu, trace, dot/vdot, the scans cumsum/cumprod/logcumsumexp, the reductions var/std/var_mean/std_mean/prod/all/any/count_nonzero/linalg_vector_norm, index_put_ (x[i] = v, accumulate too)
 * and index_add through the index kernels on the (real, imaginary) pairs, and nan_to_num on them. */
#include <complex.h>
#include <math.h>
#include <string.h>

#include "ops/args.h"
#include "ops/elementwise/cx_math.h"
#include "ops/reduce/reduce.h"

/* t (complex) as its real pairs: an extra trailing dim of 2 (false when t has
 * no room for one more dim). */
static bool cx_pairs(const tpurt_tensor_t* t, tpurt_tensor_t* out) {
  if (t->ndim >= TPURT_MAX_DIMS) return false;
  *out = *t;
  out->dtype = tpurt_dtype_to_real(t->dtype);
  for (int32_t k = 0; k < t->ndim; ++k) out->strides[k] = 2 * t->strides[k];
  out->sizes[t->ndim] = 2;
  out->strides[t->ndim] = 1;
  out->ndim = t->ndim + 1;
  return true;
}

/* ---- normal_(self, mean, std, generator), uniform_(self, from, to, generator) ---- */

/* The real kernel `name` on each part (real, imaginary) of a complex self, with (p1, p2). */
static tpurt_status_t cx_random_parts(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref,
                                      const char* name, double p1, double p2) {
  const tpurt_op_def_t* def = tpurt_op_lookup(name);
  const tpurt_rng_t* rng = tpurt_arg_rng(call);
  if (!def || !rng || call->num_outputs < 1 || !tpurt_dtype_is_complex(call->outputs[0].dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s_: expected a complex self and a generator state", name);
  tpurt_tensor_t pairs;
  if (!cx_pairs(&call->outputs[0], &pairs))
    return TPURT_STATUS(UNIMPLEMENTED, "%s_: complex tensors of %d dims", name, (int)call->outputs[0].ndim);
  for (int part = 0; part < 2; ++part) {
    /* one real view per part (the pair dim fixed), each from its own Philox key: the reserved
     * counter range covers the complex element count, once per key */
    tpurt_tensor_t view = pairs;
    view.ndim -= 1;
    view.data = (char*)pairs.data + part * tpurt_dtype_size(pairs.dtype);
    tpurt_arg_t args[4];
    memset(args, 0, sizeof(args));
    args[0].kind = TPURT_ARG_TENSOR;
    args[0].v.tensor = &view;
    args[1].kind = TPURT_ARG_DOUBLE;
    args[1].v.d = p1;
    args[2].kind = TPURT_ARG_DOUBLE;
    args[2].v.d = p2;
    args[3].kind = TPURT_ARG_RNG;
    args[3].v.rng = *rng;
    if (part == 1) args[3].v.rng.seed ^= 0x9E3779B97F4A7C15ull;
    tpurt_op_call_t rc = {.name = name, .overload = "", .num_args = 4, .args = args, .num_outputs = 1,
                          .outputs = &view};
    TPURT_RETURN_IF_ERROR((ref ? def->reference : def->fn)(ctx, &rc));
  }
  return TPURT_OK;
}

static tpurt_status_t cx_normal(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  double mean = tpurt_arg_double(call, 1, 0.0), std = tpurt_arg_double(call, 2, 1.0);
  if (std < 0) return TPURT_STATUS(INVALID_ARGUMENT, "normal: expects std >= 0.0, but found std %g", std);
  return cx_random_parts(ctx, call, ref, "normal", mean, std / sqrt(2.0));
}

/* CPU draws uniform_ on view_as_real(self): each part uniform in [from, to). */
static tpurt_status_t cx_uniform(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  return cx_random_parts(ctx, call, ref, "uniform", tpurt_arg_double(call, 1, 0.0), tpurt_arg_double(call, 2, 1.0));
}

/* ---- eq / ne / logical_and / or / xor: (self, other) with other a tensor or a real scalar; broadcast ---- */

typedef struct cx_val_t { double re, im; } cx_val_t;

static cx_val_t cx_load(const tpurt_tensor_t* t, int64_t off) {
  size_t es = tpurt_dtype_size(t->dtype);
  const char* p = (const char*)t->data + off * (int64_t)es;
  if (t->dtype == TPURT_DTYPE_COMPLEX64) return (cx_val_t){((const float*)p)[0], ((const float*)p)[1]};
  if (t->dtype == TPURT_DTYPE_COMPLEX128) return (cx_val_t){((const double*)p)[0], ((const double*)p)[1]};
  return (cx_val_t){tpurt_dtype_load_f64(t->dtype, p), 0.0};
}

/* Strides of t broadcast to out's shape (right-aligned; size 1 -> 0). */
static bool cx_bstrides(const tpurt_tensor_t* t, const tpurt_tensor_t* out, int64_t* st) {
  int32_t off = out->ndim - t->ndim;
  if (off < 0) return false;
  for (int32_t d = 0; d < out->ndim; ++d) {
    int32_t k = d - off;
    if (k < 0) st[d] = 0;
    else if (t->sizes[k] == out->sizes[d]) st[d] = t->strides[k];
    else if (t->sizes[k] == 1) st[d] = 0;
    else return false;
  }
  return true;
}

typedef enum { CXB_EQ, CXB_NE, CXB_AND, CXB_OR, CXB_XOR } cxb_kind_t;

/* eq/ne and logical_and/or/xor: a truth per element. The output is bool, or
 * (logical_*_ in place, an out= of another dtype) any dtype, taking 1 or 0. */
static tpurt_status_t cx_truth(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, cxb_kind_t kind) {
  const tpurt_tensor_t *a = tpurt_arg_tensor(call, 0), *b = tpurt_arg_tensor(call, 1);
  if (!a || call->num_outputs < 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a tensor and an output", call->name);
  const tpurt_tensor_t* out = &call->outputs[0];
  cx_val_t scalar = {tpurt_arg_double(call, 1, 0.0), 0.0};
  int64_t sa[TPURT_MAX_DIMS], sb[TPURT_MAX_DIMS], pos[TPURT_MAX_DIMS] = {0};
  if (!cx_bstrides(a, out, sa) || (b && !cx_bstrides(b, out, sb)))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: operands do not broadcast to the output", call->name);
  int64_t n = tpurt_tensor_numel(out), oa = 0, ob = 0, oo = 0;
  size_t oes = tpurt_dtype_size(out->dtype);
  for (int64_t i = 0; i < n; ++i) {
    cx_val_t x = cx_load(a, oa), y = b ? cx_load(b, ob) : scalar;
    bool xt = x.re != 0 || x.im != 0, yt = y.re != 0 || y.im != 0, r;
    switch (kind) {
      case CXB_EQ: r = x.re == y.re && x.im == y.im; break;
      case CXB_NE: r = !(x.re == y.re && x.im == y.im); break;
      case CXB_AND: r = xt && yt; break;
      case CXB_OR: r = xt || yt; break;
      default: r = xt != yt; break;
    }
    if (out->dtype == TPURT_DTYPE_BOOL) ((bool*)out->data)[oo] = r;
    else tpurt_dtype_store_f64(out->dtype, (char*)out->data + oo * (int64_t)oes, r ? 1.0 : 0.0);
    for (int32_t d = out->ndim - 1; d >= 0; --d) {
      if (++pos[d] < out->sizes[d]) {
        oa += sa[d], ob += b ? sb[d] : 0, oo += out->strides[d];
        break;
      }
      oa -= (out->sizes[d] - 1) * sa[d];
      if (b) ob -= (out->sizes[d] - 1) * sb[d];
      oo -= (out->sizes[d] - 1) * out->strides[d];
      pos[d] = 0;
    }
  }
  return TPURT_OK;
}

/* isnan(z): a part is NaN exactly where z != z. */
static tpurt_status_t k_isnan(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* a = tpurt_arg_tensor(call, 0);
  if (!a) return TPURT_STATUS(INVALID_ARGUMENT, "isnan: expected a tensor");
  tpurt_arg_t args[2];
  memset(args, 0, sizeof(args));
  args[0] = call->args[0];
  args[1] = call->args[0];
  tpurt_op_call_t rc = *call;
  rc.num_args = 2;
  rc.args = args;
  return cx_truth(ctx, &rc, CXB_NE);
}

/* ---- linspace / logspace(start, end, steps[, base]) and eye(n[, m]) with a complex output ----
 * As CPU: computed in the output's precision, the first half from start and the
 * second from end; logspace is base ** (that value), base taken as complex. */

/* A Scalar argument: a complex one arrives as a 0-d complex128 tensor. */
static cx_val_t cx_scalar_arg(const tpurt_op_call_t* call, int i) {
  const tpurt_tensor_t* t = tpurt_arg_tensor(call, i);
  if (t) return cx_load(t, 0);
  return (cx_val_t){tpurt_arg_is(call, i, TPURT_ARG_INT) ? (double)tpurt_arg_int(call, i, 0) : tpurt_arg_double(call, i, 0.0),
                    0.0};
}

static void cx_store(const tpurt_tensor_t* t, int64_t off, double complex v) {
  char* p = (char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype);
  if (t->dtype == TPURT_DTYPE_COMPLEX64) {
    ((float*)p)[0] = (float)creal(v);
    ((float*)p)[1] = (float)cimag(v);
  } else {
    ((double*)p)[0] = creal(v);
    ((double*)p)[1] = cimag(v);
  }
}

/* The element offset of row-major element l of t (an out= tensor may have any shape of steps elements). */
static int64_t cx_linear_offset(const tpurt_tensor_t* t, int64_t l) {
  int64_t off = 0;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    off += (l % t->sizes[d]) * t->strides[d];
    l /= t->sizes[d];
  }
  return off;
}

static tpurt_status_t cx_linspace(const tpurt_op_call_t* call, bool log) {
  const char* op = log ? "logspace" : "linspace";
  if (call->num_outputs < 1 || !tpurt_dtype_is_complex(call->outputs[0].dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a complex output", op);
  const tpurt_tensor_t* out = &call->outputs[0];
  int64_t steps = tpurt_tensor_numel(out), half = steps / 2;
  if (steps == 0) return TPURT_OK;
  cx_val_t a = cx_scalar_arg(call, 0), b = cx_scalar_arg(call, 1);
  double base = log ? tpurt_arg_double(call, 3, 10.0) : 0.0;
  if (steps == 1) { /* start itself; logspace: base ** start in double */
    double complex s = CMPLX(a.re, a.im);
    cx_store(out, cx_linear_offset(out, 0), log ? cpow(CMPLX(base, 0.0), s) : s);
    return TPURT_OK;
  }
  if (out->dtype == TPURT_DTYPE_COMPLEX64) {
    float complex fa = CMPLXF((float)a.re, (float)a.im), fb = CMPLXF((float)b.re, (float)b.im);
    float complex step = (fb - fa) / (float)(steps - 1), fbase = CMPLXF((float)base, 0.0f);
    for (int64_t i = 0; i < steps; ++i) {
      float complex v = i < half ? fa + step * (float)i : fb - step * (float)(steps - i - 1);
      cx_store(out, cx_linear_offset(out, i), log ? cpowf(fbase, v) : v);
    }
  } else {
    double complex da = CMPLX(a.re, a.im), db = CMPLX(b.re, b.im);
    double complex step = (db - da) / (double)(steps - 1), dbase = CMPLX(base, 0.0);
    for (int64_t i = 0; i < steps; ++i) {
      double complex v = i < half ? da + step * (double)i : db - step * (double)(steps - i - 1);
      cx_store(out, cx_linear_offset(out, i), log ? cpow(dbase, v) : v);
    }
  }
  return TPURT_OK;
}
static tpurt_status_t k_linspace(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_linspace(c, false); }
static tpurt_status_t k_logspace(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_linspace(c, true); }

static tpurt_status_t k_eye(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* call) {
  if (call->num_outputs < 1 || !tpurt_dtype_is_complex(call->outputs[0].dtype) || call->outputs[0].ndim != 2)
    return TPURT_STATUS(INVALID_ARGUMENT, "eye: expected a 2-d complex output");
  const tpurt_tensor_t* out = &call->outputs[0];
  for (int64_t i = 0; i < out->sizes[0]; ++i)
    for (int64_t j = 0; j < out->sizes[1]; ++j) cx_store(out, i * out->strides[0] + j * out->strides[1], i == j);
  return TPURT_OK;
}

/* ---- reductions of a complex input: var/std (of the parts), prod, all, any, count_nonzero ---- */

/* The real (part = 0) or imaginary (part = 1) part of complex t as a real view. */
static bool cx_part(const tpurt_tensor_t* t, int part, tpurt_tensor_t* out) {
  tpurt_tensor_t pairs;
  if (!cx_pairs(t, &pairs)) return false;
  *out = pairs;
  out->ndim -= 1;
  out->data = (char*)pairs.data + part * tpurt_dtype_size(pairs.dtype);
  return true;
}

/* var/std(z) over the reduced dims, as CPU: sum |z - mean|^2 / (K - correction), which is var of
 * the real part plus var of the imaginary part; both through the real var kernel, the second into
 * scratch, then added (std: the root of the sum). */
static tpurt_status_t cx_var_std(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref, bool std) {
  const tpurt_op_def_t* def = tpurt_op_lookup("var");
  const tpurt_tensor_t* in = tpurt_arg_tensor(call, 0);
  if (!def || !in || call->num_outputs < 1 || call->num_args > 8 || !tpurt_dtype_is_complex(in->dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a complex input and an output", call->name);
  const tpurt_tensor_t* out = &call->outputs[0]; /* real, or complex for an out= CPU also fills */
  int64_t m = tpurt_tensor_numel(out);
  tpurt_tensor_t parts[2], tmp[2];
  if (!cx_part(in, 0, &parts[0]) || !cx_part(in, 1, &parts[1]))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: complex tensors of %d dims", call->name, (int)in->ndim);
  size_t es = tpurt_dtype_size(parts[0].dtype);
  char* buf = tpurt_kernel_scratch(ctx, 2 * (size_t)(m > 0 ? m : 1) * es);
  if (!buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch for %lld outputs", call->name, (long long)m);
  for (int part = 0; part < 2; ++part) {
    tmp[part] = *out;
    tmp[part].dtype = parts[0].dtype;
    tmp[part].data = buf + (size_t)part * (size_t)(m > 0 ? m : 1) * es;
    for (int64_t d = out->ndim - 1, st = 1; d >= 0; --d) tmp[part].strides[d] = st, st *= out->sizes[d];
    tpurt_arg_t args[8];
    memcpy(args, call->args, (size_t)call->num_args * sizeof(tpurt_arg_t));
    args[0].v.tensor = &parts[part];
    tpurt_op_call_t rc = *call;
    rc.name = "var";
    rc.args = args;
    rc.num_outputs = 1;
    rc.outputs = &tmp[part];
    TPURT_RETURN_IF_ERROR((ref ? def->reference : def->fn)(ctx, &rc));
  }
  size_t oes = tpurt_dtype_size(out->dtype);
  for (int64_t i = 0; i < m; ++i) {
    double v = tpurt_dtype_load_f64(tmp[0].dtype, buf + i * (int64_t)es) +
               tpurt_dtype_load_f64(tmp[1].dtype, (char*)tmp[1].data + i * (int64_t)es);
    if (std) v = sqrt(v);
    int64_t off = tpurt_reduce_out_offset(out, i);
    if (tpurt_dtype_is_complex(out->dtype)) cx_store(out, off, v);
    else tpurt_dtype_store_f64(out->dtype, (char*)out->data + off * (int64_t)oes, v);
  }
  return TPURT_OK;
}

/* The scans cumsum / cumprod(self, dim, dtype?) and logcumsumexp / _logcumsumexp(self, dim) of a
 * complex input: row by row along dim, the running value in complex128 (CPU's acc_type) with
 * c10::complex's plain multiply and CPU's _log_add_exp_helper (logcumsumexp starts at -inf + 0i),
 * rounded to the output's dtype at each store. */
typedef enum { CXS_SUM, CXS_PROD, CXS_LOGSUMEXP } cxs_kind_t;

static tpurt_status_t cx_scan(const tpurt_op_call_t* call, const char* name, cxs_kind_t kind) {
  const tpurt_tensor_t* in = tpurt_arg_tensor(call, 0);
  if (!in || call->num_outputs < 1 || !tpurt_dtype_is_complex(call->outputs[0].dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (self, dim) and a complex output", name);
  const tpurt_tensor_t* out = &call->outputs[0];
  int32_t dim;
  TPURT_RETURN_IF_ERROR(tpurt_reduce_wrap_dim(name, tpurt_arg_int(call, 1, 0), in->ndim, &dim));
  if (tpurt_tensor_numel(in) == 0) return TPURT_OK;
  int64_t n = in->ndim ? in->sizes[dim] : 1, rows = tpurt_tensor_numel(in) / n;
  int64_t is = in->ndim ? in->strides[dim] : 0, os = in->ndim ? out->strides[dim] : 0;
  for (int64_t row = 0; row < rows; ++row) {
    int64_t io = in->ndim ? tpurt_tensor_offset_of(in, row, dim) : 0;
    int64_t oo = in->ndim ? tpurt_tensor_offset_of(out, row, dim) : 0;
    double ar = kind == CXS_PROD ? 1 : kind == CXS_SUM ? 0 : -INFINITY, ai = 0;
    for (int64_t i = 0; i < n; ++i) {
      cx_val_t v = cx_load(in, io + i * is);
      if (kind == CXS_SUM) {
        ar += v.re, ai += v.im;
      } else if (kind == CXS_PROD) {
        double r = ar * v.re - ai * v.im, im = ar * v.im + ai * v.re;
        ar = r, ai = im;
      } else {
        tpurt_cx_math_logaddexp(v.re, v.im, ar, ai, &ar, &ai);
      }
      cx_store(out, oo + i * os, CMPLX(ar, ai));
    }
  }
  return TPURT_OK;
}

static tpurt_status_t k_cumsum(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  (void)ctx;
  return cx_scan(call, "cumsum", CXS_SUM);
}
static tpurt_status_t k_cumprod(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  (void)ctx;
  return cx_scan(call, "cumprod", CXS_PROD);
}
static tpurt_status_t k_logcumsumexp(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  (void)ctx;
  return cx_scan(call, "logcumsumexp", CXS_LOGSUMEXP);
}

/* tril / triu(self, diagonal) of a complex input: the index family's kernels, which move whole
 * elements of any size (index_shape.c) */
tpurt_status_t tpurt_index_k_tril(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);
tpurt_status_t tpurt_index_r_tril(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);
tpurt_status_t tpurt_index_k_triu(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);
tpurt_status_t tpurt_index_r_triu(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);

/* trace(self) of a 2-d complex input: the diagonal's sum in complex128 (CPU's acc_type), rounded */
static tpurt_status_t k_trace(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  (void)ctx;
  const tpurt_tensor_t* in = tpurt_arg_tensor(call, 0);
  if (!in || in->ndim != 2 || call->num_outputs < 1 || !tpurt_dtype_is_complex(call->outputs[0].dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "trace: expected a 2-d tensor and a complex output");
  int64_t n = in->sizes[0] < in->sizes[1] ? in->sizes[0] : in->sizes[1];
  double re = 0, im = 0;
  for (int64_t i = 0; i < n; ++i) {
    cx_val_t v = cx_load(in, i * (in->strides[0] + in->strides[1]));
    re += v.re, im += v.im;
  }
  cx_store(&call->outputs[0], 0, CMPLX(re, im));
  return TPURT_OK;
}

/* dot / vdot(self, other) of 1-d complex tensors: sum(a * b), vdot conjugating a; the sum in
 * complex128, rounded to the output's dtype */
static tpurt_status_t cx_dot(const tpurt_op_call_t* call, bool conj_a) {
  const char* op = conj_a ? "vdot" : "dot";
  const tpurt_tensor_t *a = tpurt_arg_tensor(call, 0), *b = tpurt_arg_tensor(call, 1);
  if (!a || !b || a->ndim != 1 || b->ndim != 1 || a->sizes[0] != b->sizes[0] || call->num_outputs < 1 ||
      !tpurt_dtype_is_complex(call->outputs[0].dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected two 1-d tensors of one size and a complex output", op);
  double re = 0, im = 0;
  for (int64_t i = 0; i < a->sizes[0]; ++i) {
    cx_val_t x = cx_load(a, i * a->strides[0]), y = cx_load(b, i * b->strides[0]);
    if (conj_a) x.im = -x.im;
    re += x.re * y.re - x.im * y.im;
    im += x.re * y.im + x.im * y.re;
  }
  cx_store(&call->outputs[0], 0, CMPLX(re, im));
  return TPURT_OK;
}
static tpurt_status_t k_dot(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  (void)ctx;
  return cx_dot(call, false);
}
static tpurt_status_t k_vdot(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  (void)ctx;
  return cx_dot(call, true);
}

typedef enum { CXR_PROD, CXR_ALL, CXR_ANY, CXR_COUNT } cxr_kind_t;
typedef struct cxr_job_t {
  const tpurt_tensor_t* in;
  cxr_kind_t kind;
  double complex* acc;
} cxr_job_t;

static void cxr_one(void* user, int64_t in_off, int64_t out_pos) {
  cxr_job_t* j = (cxr_job_t*)user;
  cx_val_t v = cx_load(j->in, in_off);
  bool nz = v.re != 0 || v.im != 0;
  switch (j->kind) {
    case CXR_PROD: {
      /* in the input's precision, as CPU's complex<float> product */
      if (j->in->dtype == TPURT_DTYPE_COMPLEX64) {
        float complex a = (float complex)j->acc[out_pos] * CMPLXF((float)v.re, (float)v.im);
        j->acc[out_pos] = a;
      } else {
        j->acc[out_pos] *= CMPLX(v.re, v.im);
      }
      break;
    }
    case CXR_ALL: if (!nz) j->acc[out_pos] = 0; break;
    case CXR_ANY: if (nz) j->acc[out_pos] = 1; break;
    case CXR_COUNT: j->acc[out_pos] += nz; break;
  }
}

/* prod(self, dtype?) / prod.dim_int(self, dim, keepdim, dtype?); all/any(self), .dim(self, dim, keepdim),
 * .dims(self, dim?, keepdim); count_nonzero(self, dim?) / .dim_IntList(self, dims). */
static tpurt_status_t cx_reduce(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, cxr_kind_t kind) {
  const tpurt_tensor_t* in = tpurt_arg_tensor(call, 0);
  if (!in || call->num_outputs < 1 || !tpurt_dtype_is_complex(in->dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a complex input and an output", call->name);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (kind == CXR_PROD && !tpurt_dtype_is_complex(out->dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "prod: a complex input needs a complex output, got %s",
                        tpurt_dtype_name(out->dtype));
  tpurt_arg_kind_t k1 = tpurt_arg_kind(call, 1);
  bool has_dim = call->num_args >= 2 && (k1 == TPURT_ARG_INT_LIST || k1 == TPURT_ARG_INT);
  bool mask[TPURT_MAX_DIMS];
  TPURT_RETURN_IF_ERROR(tpurt_reduce_dims_from_arg(call, has_dim ? 1 : -1, in->ndim, mask));
  int64_t m = tpurt_tensor_numel(out);
  double complex* acc = tpurt_kernel_scratch(ctx, (size_t)(m > 0 ? m : 1) * sizeof(double complex));
  if (!acc) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch for %lld outputs", call->name, (long long)m);
  double complex init = kind == CXR_PROD || kind == CXR_ALL ? 1 : 0;
  for (int64_t i = 0; i < m; ++i) acc[i] = init;
  cxr_job_t j = {in, kind, acc};
  tpurt_reduce_for_each(in, mask, cxr_one, &j);
  size_t es = tpurt_dtype_size(out->dtype);
  for (int64_t i = 0; i < m; ++i) {
    int64_t off = tpurt_reduce_out_offset(out, i);
    if (kind == CXR_PROD) cx_store(out, off, acc[i]);
    else tpurt_dtype_store_i64(out->dtype, (char*)out->data + off * (int64_t)es, (int64_t)creal(acc[i]));
  }
  return TPURT_OK;
}
/* linalg_vector_norm(z, ord, dim, keepdim, dtype): the real kernel on |z|, taken densely into scratch. */
typedef struct cx_abs_job_t {
  const tpurt_tensor_t *in, *mag;
} cx_abs_job_t;

static void cx_abs_one(void* user, int64_t in_off, int64_t pos) {
  const cx_abs_job_t* j = (const cx_abs_job_t*)user;
  cx_val_t v = cx_load(j->in, in_off);
  tpurt_dtype_store_f64(j->mag->dtype, (char*)j->mag->data + pos * (int64_t)tpurt_dtype_size(j->mag->dtype),
                        hypot(v.re, v.im));
}

static tpurt_status_t cx_vector_norm(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_op_def_t* def = tpurt_op_lookup("linalg_vector_norm");
  const tpurt_tensor_t* in = tpurt_arg_tensor(call, 0);
  if (!def || !in || call->num_args > 8 || !tpurt_dtype_is_complex(in->dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "linalg_vector_norm: expected a complex input");
  tpurt_tensor_t mag = *in;
  mag.dtype = tpurt_dtype_to_real(in->dtype);
  int64_t n = tpurt_tensor_numel(in);
  for (int64_t d = in->ndim - 1, st = 1; d >= 0; --d) mag.strides[d] = st, st *= in->sizes[d];
  mag.data = tpurt_kernel_scratch(ctx, (size_t)(n > 0 ? n : 1) * tpurt_dtype_size(mag.dtype));
  if (!mag.data) return TPURT_STATUS(RESOURCE_EXHAUSTED, "linalg_vector_norm: no scratch for %lld elements", (long long)n);
  bool none[TPURT_MAX_DIMS] = {false};
  cx_abs_job_t j = {in, &mag};
  tpurt_reduce_for_each(in, none, cx_abs_one, &j);
  tpurt_arg_t args[8];
  memcpy(args, call->args, (size_t)call->num_args * sizeof(tpurt_arg_t));
  args[0].v.tensor = &mag;
  tpurt_op_call_t rc = *call;
  rc.args = args;
  return (ref ? def->reference : def->fn)(ctx, &rc);
}
static tpurt_status_t k_vector_norm(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_vector_norm(x, c, false); }
static tpurt_status_t r_vector_norm(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_vector_norm(x, c, true); }
/* var_mean / std_mean(self, dim?, correction, keepdim) -> (real var or std, complex mean): the
 * var/std above into outputs[0], then complex::mean(self, dim?, keepdim) into outputs[1] */
static tpurt_status_t cx_var_std_mean(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref, bool std) {
  const tpurt_op_def_t* mean = tpurt_op_lookup("complex::mean");
  if (!mean || call->num_outputs < 2 || call->num_args < 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (self, dim?, correction, keepdim) and 2 outputs", call->name);
  tpurt_op_call_t vc = *call;
  vc.num_outputs = 1;
  TPURT_RETURN_IF_ERROR(cx_var_std(ctx, &vc, ref, std));
  tpurt_arg_t args[4];
  memset(args, 0, sizeof(args));
  args[0] = call->args[0];
  if (call->num_args > 1) args[1] = call->args[1];
  else args[1].kind = TPURT_ARG_NONE;
  args[2].kind = TPURT_ARG_BOOL;
  args[2].v.b = tpurt_arg_bool(call, 3, false);
  args[3].kind = TPURT_ARG_NONE;
  tpurt_op_call_t mc = {.name = "mean", .overload = "dim", .num_args = 4, .args = args, .num_outputs = 1,
                        .outputs = &call->outputs[1]};
  return (ref ? mean->reference : mean->fn)(ctx, &mc);
}
static tpurt_status_t k_var_mean(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_var_std_mean(x, c, false, false); }
static tpurt_status_t r_var_mean(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_var_std_mean(x, c, true, false); }
static tpurt_status_t k_std_mean(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_var_std_mean(x, c, false, true); }
static tpurt_status_t r_std_mean(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_var_std_mean(x, c, true, true); }
static tpurt_status_t k_var(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_var_std(x, c, false, false); }
static tpurt_status_t r_var(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_var_std(x, c, true, false); }
static tpurt_status_t k_std(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_var_std(x, c, false, true); }
static tpurt_status_t r_std(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_var_std(x, c, true, true); }
static tpurt_status_t k_prod(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_reduce(x, c, CXR_PROD); }
static tpurt_status_t k_all(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_reduce(x, c, CXR_ALL); }
static tpurt_status_t k_any(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_reduce(x, c, CXR_ANY); }
static tpurt_status_t k_count_nonzero(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) {
  return cx_reduce(x, c, CXR_COUNT);
}

/* ---- _index_put_impl_(self, indices, values, accumulate, unsafe) ---- */

/* `call` with other arguments and output, run by the real kernel `def` */
static tpurt_status_t cx_call_real(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const tpurt_op_def_t* def,
                                   tpurt_arg_t* args, const tpurt_tensor_t* out, bool ref) {
  tpurt_op_call_t rc = *call;
  rc.args = args;
  rc.outputs = out;
  return (ref ? def->reference : def->fn)(ctx, &rc);
}

static tpurt_status_t cx_index_put(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_op_def_t* def = tpurt_op_lookup("_index_put_impl");
  const tpurt_tensor_t *self = tpurt_arg_tensor(call, 0), *values = tpurt_arg_tensor(call, 2);
  if (!def || !self || !values || call->num_outputs < 1 || call->num_args > 8)
    return TPURT_STATUS(INVALID_ARGUMENT, "index_put: expected (self, indices, values, accumulate)");
  if (values->dtype != self->dtype || call->outputs[0].dtype != self->dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "index_put: values (%s) must have self's dtype (%s)",
                        tpurt_dtype_name(values->dtype), tpurt_dtype_name(self->dtype));
  tpurt_tensor_t s, v, o;
  if (!cx_pairs(self, &s) || !cx_pairs(values, &v) || !cx_pairs(&call->outputs[0], &o))
    return TPURT_STATUS(UNIMPLEMENTED, "index_put: complex tensors of %d dims", (int)self->ndim);
  tpurt_arg_t args[8];
  memcpy(args, call->args, (size_t)call->num_args * sizeof(tpurt_arg_t));
  args[0].v.tensor = &s;
  args[2].v.tensor = &v;
  return cx_call_real(ctx, call, def, args, &o, ref);
}

/* index_add(self, dim, index, source, alpha) of complex tensors: the real kernel on the (real,
 * imaginary) pairs (a trailing dim of 2 rides along), for a real alpha */
static tpurt_status_t cx_index_add(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_op_def_t* def = tpurt_op_lookup("index_add");
  const tpurt_tensor_t *self = tpurt_arg_tensor(call, 0), *source = tpurt_arg_tensor(call, 3);
  if (!def || !self || !source || call->num_outputs < 1 || call->num_args > 8 || !tpurt_arg_is(call, 1, TPURT_ARG_INT))
    return TPURT_STATUS(INVALID_ARGUMENT, "index_add: expected (self, dim, index, source, alpha)");
  if (source->dtype != self->dtype || call->outputs[0].dtype != self->dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "index_add: source (%s) must have self's dtype (%s)",
                        tpurt_dtype_name(source->dtype), tpurt_dtype_name(self->dtype));
  const tpurt_tensor_t* alpha = tpurt_arg_tensor(call, 4);
  if (alpha && tpurt_dtype_is_complex(alpha->dtype) && cx_load(alpha, 0).im != 0)
    return TPURT_STATUS(UNIMPLEMENTED, "index_add: a complex alpha on complex tensors");
  tpurt_tensor_t s, v, o;
  if (self->ndim == 0 || !cx_pairs(self, &s) || !cx_pairs(source, &v) || !cx_pairs(&call->outputs[0], &o))
    return TPURT_STATUS(UNIMPLEMENTED, "index_add: complex tensors of %d dims", (int)self->ndim);
  int64_t dim = tpurt_arg_int(call, 1, 0);
  if (dim < -self->ndim || dim >= self->ndim)
    return TPURT_STATUS(INVALID_ARGUMENT, "index_add: dim %lld out of range for %d dims", (long long)dim,
                        (int)self->ndim);
  tpurt_arg_t args[8];
  memcpy(args, call->args, (size_t)call->num_args * sizeof(tpurt_arg_t));
  args[0].v.tensor = &s;
  args[1].v.i = dim < 0 ? dim + self->ndim : dim; /* the pair dim comes last: wrap against self's dims */
  args[3].v.tensor = &v;
  if (alpha) { /* a complex alpha (a 0-d tensor) with no imaginary part, as a real one */
    args[4].kind = TPURT_ARG_DOUBLE;
    args[4].v.d = cx_load(alpha, 0).re;
  }
  return cx_call_real(ctx, call, def, args, &o, ref);
}
static tpurt_status_t k_index_add(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_index_add(x, c, false); }
static tpurt_status_t r_index_add(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_index_add(x, c, true); }

/* nan_to_num(self, nan?, posinf?, neginf?) of a complex tensor: the real kernel on the (real,
 * imaginary) pairs, each part replaced on its own, as CPU */
static tpurt_status_t cx_nan_to_num(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_op_def_t* def = tpurt_op_lookup("nan_to_num");
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  if (!def || !self || call->num_outputs < 1 || call->num_args > 8 || call->outputs[0].dtype != self->dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "nan_to_num: expected a complex self and an output of its dtype");
  tpurt_tensor_t s, o;
  if (!cx_pairs(self, &s) || !cx_pairs(&call->outputs[0], &o))
    return TPURT_STATUS(UNIMPLEMENTED, "nan_to_num: complex tensors of %d dims", (int)self->ndim);
  tpurt_arg_t args[8];
  memcpy(args, call->args, (size_t)call->num_args * sizeof(tpurt_arg_t));
  args[0].v.tensor = &s;
  return cx_call_real(ctx, call, def, args, &o, ref);
}
static tpurt_status_t k_nan_to_num(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_nan_to_num(x, c, false); }
static tpurt_status_t r_nan_to_num(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_nan_to_num(x, c, true); }

static tpurt_status_t k_normal(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_normal(x, c, false); }
static tpurt_status_t r_normal(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_normal(x, c, true); }
static tpurt_status_t k_uniform(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_uniform(x, c, false); }
static tpurt_status_t r_uniform(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_uniform(x, c, true); }
static tpurt_status_t k_eq(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_truth(x, c, CXB_EQ); }
static tpurt_status_t k_ne(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_truth(x, c, CXB_NE); }
static tpurt_status_t k_and(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_truth(x, c, CXB_AND); }
static tpurt_status_t k_or(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_truth(x, c, CXB_OR); }
static tpurt_status_t k_xor(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_truth(x, c, CXB_XOR); }
static tpurt_status_t k_index_put(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_index_put(x, c, false); }
static tpurt_status_t r_index_put(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cx_index_put(x, c, true); }

/* Reached only for calls with a complex operand (tpurt_op_resolve's complex rule). */
const tpurt_op_def_t tpurt_ops_complex_extra[] = {
    {"complex::normal", k_normal, r_normal, TPURT_OP_RANDOM | TPURT_OP_OVERWRITES_SELF, TPURT_DTYPES_COMPLEX,
     TPURT_LAYOUT_STRIDED},
    {"complex::uniform", k_uniform, r_uniform, TPURT_OP_RANDOM | TPURT_OP_OVERWRITES_SELF, TPURT_DTYPES_COMPLEX,
     TPURT_LAYOUT_STRIDED},
    /* eq/ne and the logical ops are plain loops: each is its own reference */
    {"complex::eq", k_eq, k_eq, 0, TPURT_DTYPES_ALL, TPURT_LAYOUT_STRIDED},
    {"complex::ne", k_ne, k_ne, 0, TPURT_DTYPES_ALL, TPURT_LAYOUT_STRIDED},
    {"complex::logical_and", k_and, k_and, 0, TPURT_DTYPES_ALL, TPURT_LAYOUT_STRIDED},
    {"complex::logical_or", k_or, k_or, 0, TPURT_DTYPES_ALL, TPURT_LAYOUT_STRIDED},
    {"complex::logical_xor", k_xor, k_xor, 0, TPURT_DTYPES_ALL, TPURT_LAYOUT_STRIDED},
    {"complex::isnan", k_isnan, k_isnan, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    /* plain loops: each is its own reference */
    {"complex::linspace", k_linspace, k_linspace, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::logspace", k_logspace, k_logspace, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::eye", k_eye, k_eye, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::linalg_vector_norm", k_vector_norm, r_vector_norm, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::var", k_var, r_var, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::std", k_std, r_std, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::cumsum", k_cumsum, k_cumsum, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::trace", k_trace, k_trace, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::dot", k_dot, k_dot, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::vdot", k_vdot, k_vdot, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::tril", tpurt_index_k_tril, tpurt_index_r_tril, TPURT_OP_ALIAS_SAFE, TPURT_DTYPES_COMPLEX,
     TPURT_LAYOUT_STRIDED},
    {"complex::triu", tpurt_index_k_triu, tpurt_index_r_triu, TPURT_OP_ALIAS_SAFE, TPURT_DTYPES_COMPLEX,
     TPURT_LAYOUT_STRIDED},
    {"complex::cumprod", k_cumprod, k_cumprod, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::logcumsumexp", k_logcumsumexp, k_logcumsumexp, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::_logcumsumexp", k_logcumsumexp, k_logcumsumexp, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::var_mean", k_var_mean, r_var_mean, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::std_mean", k_std_mean, r_std_mean, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    /* plain loops: each is its own reference */
    {"complex::prod", k_prod, k_prod, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::all", k_all, k_all, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::any", k_any, k_any, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::count_nonzero", k_count_nonzero, k_count_nonzero, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::_index_put_impl", k_index_put, r_index_put, TPURT_OP_ALIAS_SAFE, TPURT_DTYPES_COMPLEX,
     TPURT_LAYOUT_STRIDED},
    {"complex::index_put", k_index_put, r_index_put, TPURT_OP_ALIAS_SAFE, TPURT_DTYPES_COMPLEX,
     TPURT_LAYOUT_STRIDED},
    {"complex::index_add", k_index_add, r_index_add, TPURT_OP_ALIAS_SAFE, TPURT_DTYPES_COMPLEX,
     TPURT_LAYOUT_STRIDED},
    {"complex::nan_to_num", k_nan_to_num, r_nan_to_num, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    TPURT_OP_TABLE_END,
};
