/* Index-shaped factories and searches: arange, range, linspace, logspace,
 * eye, tril_indices, triu_indices, bucketize, searchsorted and histc. Outputs
 * arrive sized by PyTorch's meta functions; these kernels only fill them. */
#include <inttypes.h>
#include <math.h>

#include "ops/index/index_common.h"
#include "ops/index/index_kernels.h"

static inline char* elem_at(const tpurt_tensor_t* t, int64_t l) {
  return (char*)t->data + tpurt_index_offset(t, l) * (int64_t)tpurt_dtype_size(t->dtype);
}

static bool arg_is_integral(const tpurt_op_call_t* call, int i) {
  return tpurt_arg_is(call, i, TPURT_ARG_INT) || tpurt_arg_is(call, i, TPURT_ARG_BOOL);
}

/* ---- arange(start, end, step) / range(start, end, step): out[i] = start + i*step.
 * Computed in double (float for 16-bit outputs, int64 for integral outputs),
 * rounded once on store, as PyTorch's CPU kernel. */
static tpurt_status_t arange_fill(const tpurt_op_call_t* call, const char* op) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 2, 1));
  const tpurt_tensor_t* out = &call->outputs[0];
  int64_t n = tpurt_tensor_numel(out);
  double step = call->num_args > 2 ? tpurt_arg_double(call, 2, 1.0) : 1.0;
  if (step == 0) return TPURT_STATUS(INVALID_ARGUMENT, "%s: step must be nonzero", op);
  if (!tpurt_dtype_is_floating(out->dtype)) {
    /* As CPU: an integral output computes in int64 from start and step each
     * cast (truncated) to int64 first: arange(2.1, -2.9, -1.0) -> 2, 1, 0, -1. */
    int64_t s = arg_is_integral(call, 0) ? tpurt_arg_int(call, 0, 0)
                                         : (int64_t)tpurt_arg_double(call, 0, 0.0);
    int64_t st = call->num_args < 3        ? 1
                 : arg_is_integral(call, 2) ? tpurt_arg_int(call, 2, 1)
                                            : (int64_t)step;
    if (st == 0 && n > 0) return TPURT_STATUS(INVALID_ARGUMENT, "%s: step must be nonzero (%g truncates to 0 for an integral dtype)", op, step);
    for (int64_t i = 0; i < n; ++i) tpurt_dtype_store_i64(out->dtype, elem_at(out, i), s + i * st);
    return TPURT_OK;
  }
  double s = tpurt_arg_double(call, 0, 0.0);
  bool f16 = out->dtype == TPURT_DTYPE_FLOAT16 || out->dtype == TPURT_DTYPE_BFLOAT16;
  for (int64_t i = 0; i < n; ++i) {
    double v = f16 ? (double)((float)s + (float)step * (float)i) : s + step * (double)i;
    tpurt_dtype_store_f64(out->dtype, elem_at(out, i), v);
  }
  return TPURT_OK;
}
tpurt_status_t tpurt_index_k_arange(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  /* arange.out(end) has a single Scalar: start 0, step 1 */
  if (call->num_args == 1) {
    tpurt_arg_t a[3] = {{.kind = TPURT_ARG_INT, .v.i = 0}, call->args[0], {.kind = TPURT_ARG_INT, .v.i = 1}};
    tpurt_op_call_t c = *call;
    c.args = a;
    c.num_args = 3;
    return arange_fill(&c, "arange");
  }
  return arange_fill(call, "arange");
}
tpurt_status_t tpurt_index_r_arange(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tpurt_index_k_arange(ctx, call);
}
tpurt_status_t tpurt_index_k_range(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return arange_fill(call, "range");
}
tpurt_status_t tpurt_index_r_range(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return arange_fill(call, "range");
}

/* ---- linspace(start, end, steps) / logspace(start, end, steps, base) ----
 * PyTorch fills the first half from start and the second half from end so
 * both ends are exact. Floats compute in the output's precision (float for
 * 16-bit), integers in double. */
static tpurt_status_t linspace_impl(const tpurt_op_call_t* call, bool log) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 3, 1));
  const tpurt_tensor_t* out = &call->outputs[0];
  int64_t steps = tpurt_tensor_numel(out);
  double a = tpurt_arg_double(call, 0, 0), b = tpurt_arg_double(call, 1, 0);
  double base = log ? tpurt_arg_double(call, 3, 10.0) : 0;
  if (steps == 0) return TPURT_OK;
  bool use_f32 = out->dtype == TPURT_DTYPE_FLOAT32;
  if (steps == 1) {
    double v = log ? pow(base, a) : a;
    if (tpurt_dtype_is_floating(out->dtype)) tpurt_dtype_store_f64(out->dtype, elem_at(out, 0), v);
    else tpurt_dtype_store_i64(out->dtype, elem_at(out, 0), (int64_t)v);
    return TPURT_OK;
  }
  int64_t half = steps / 2;
  bool h16 = out->dtype == TPURT_DTYPE_FLOAT16 || out->dtype == TPURT_DTYPE_BFLOAT16;
  bool integral = !tpurt_dtype_is_floating(out->dtype);
  unsigned char tmp[8];
#define R16(x) (tpurt_dtype_store_f64(out->dtype, tmp, (x)), (float)tpurt_dtype_load_f64(out->dtype, tmp))
  /* start/end first become the output type, as Scalar::to<scalar_t> does */
  if (integral) { a = trunc(a); b = trunc(b); }
  if (log) {
    /* PyTorch's logspace_out: a double step, pow(base, start + step * i) with
     * i counted in the output type; no fma (built for the baseline ISA) */
    double sa = h16 ? R16(a) : use_f32 ? (double)(float)a : a;
    double sb = h16 ? R16(b) : use_f32 ? (double)(float)b : b;
    /* scalar_end - scalar_start is taken in the output type */
    volatile double step = (h16 ? (double)R16(sb - sa) : use_f32 ? (double)(float)(sb - sa) : sb - sa) / (double)(steps - 1);
    float is16 = 0;
    for (int64_t i = 0; i < steps; ++i) {
      double is = h16 ? (double)is16 : (double)i;
      volatile double prod;
      double x;
      if (i < half) {
        prod = step * is;
        x = sa + prod;
      } else {
        double c = (double)(steps - i - 1);
        if (h16) c = R16(c);
        prod = step * c;
        x = sb - prod;
      }
      double v = pow(base, x);
      if (tpurt_dtype_is_floating(out->dtype)) tpurt_dtype_store_f64(out->dtype, elem_at(out, i), v);
      else tpurt_dtype_store_i64(out->dtype, elem_at(out, i), (int64_t)v);
      if (h16) is16 = R16(is16 + 1.0f);
    }
    return TPURT_OK;
  }
  for (int64_t i = 0; i < steps; ++i) {
    double v;
    /* PyTorch's CPU linspace kernel is built with FMA: start + step*i is an
     * fma; 16-bit floats round after every operation (c10 Half/BFloat16) */
    if (h16) {
      float fa = R16(a), fb = R16(b);
      float step = R16(R16(fb - fa) / (float)(steps - 1));
      v = i < half ? R16(fa + R16(step * R16((float)i))) : R16(fb - R16(step * R16((float)(steps - i - 1))));
    } else if (use_f32) {
      float fa = (float)a, fb = (float)b;
      float step = (fb - fa) / (float)(steps - 1);
      v = i < half ? fmaf(step, (float)i, fa) : fmaf(-step, (float)(steps - i - 1), fb);
    } else {
      double step = (b - a) / (double)(steps - 1);
      v = i < half ? fma(step, (double)i, a) : fma(-step, (double)(steps - i - 1), b);
    }
    if (!integral) tpurt_dtype_store_f64(out->dtype, elem_at(out, i), v);
    else tpurt_dtype_store_i64(out->dtype, elem_at(out, i), (int64_t)v);
  }
#undef R16
  return TPURT_OK;
}
tpurt_status_t tpurt_index_k_linspace(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return linspace_impl(call, false);
}
tpurt_status_t tpurt_index_r_linspace(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return linspace_impl(call, false);
}
tpurt_status_t tpurt_index_k_logspace(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return linspace_impl(call, true);
}
tpurt_status_t tpurt_index_r_logspace(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return linspace_impl(call, true);
}

/* ---- eye(n[, m]) ---- */
tpurt_status_t tpurt_index_k_eye(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 0, 1));
  const tpurt_tensor_t* out = &call->outputs[0];
  if (out->ndim != 2) return TPURT_STATUS(INVALID_ARGUMENT, "eye: out must be 2-d, got %d dims", out->ndim);
  unsigned char zero[8] = {0}, one[8];
  tpurt_dtype_store_i64(out->dtype, one, 1);
  tpurt_index_fill(ctx, out, zero);
  int64_t k = out->sizes[0] < out->sizes[1] ? out->sizes[0] : out->sizes[1];
  size_t es = tpurt_dtype_size(out->dtype);
  for (int64_t i = 0; i < k; ++i)
    memcpy((char*)out->data + i * (out->strides[0] + out->strides[1]) * (int64_t)es, one, es);
  return TPURT_OK;
}
tpurt_status_t tpurt_index_r_eye(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tpurt_index_k_eye(ctx, call);
}

/* ---- tril_indices / triu_indices(row, col, offset) -> [2, count] row-major ---- */
static tpurt_status_t tri_indices(const tpurt_op_call_t* call, bool upper) {
  const char* op = upper ? "triu_indices" : "tril_indices";
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 2, 1));
  const tpurt_tensor_t* out = &call->outputs[0];
  int64_t R = tpurt_arg_int(call, 0, 0), C = tpurt_arg_int(call, 1, 0), off = tpurt_arg_int(call, 2, 0);
  if (R < 0 || C < 0) return TPURT_STATUS(INVALID_ARGUMENT, "%s: row and col must be non-negative", op);
  if (out->ndim != 2 || out->sizes[0] != 2) return TPURT_STATUS(INVALID_ARGUMENT, "%s: out must be [2, N]", op);
  size_t es = tpurt_dtype_size(out->dtype);
  int64_t k = 0, n = out->sizes[1];
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) {
      bool in = upper ? j - i >= off : j - i <= off;
      if (!in) continue;
      if (k >= n) return TPURT_STATUS(INVALID_ARGUMENT, "%s: out has only %" PRId64 " columns", op, n);
      tpurt_dtype_store_i64(out->dtype, (char*)out->data + k * out->strides[1] * (int64_t)es, i);
      tpurt_dtype_store_i64(out->dtype, (char*)out->data + (out->strides[0] + k * out->strides[1]) * (int64_t)es, j);
      ++k;
    }
  if (k != n) return TPURT_STATUS(INVALID_ARGUMENT, "%s: out has %" PRId64 " columns, expected %" PRId64, op, n, k);
  return TPURT_OK;
}
tpurt_status_t tpurt_index_k_tril_indices(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tri_indices(call, false);
}
tpurt_status_t tpurt_index_r_tril_indices(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tri_indices(call, false);
}
tpurt_status_t tpurt_index_k_triu_indices(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tri_indices(call, true);
}
tpurt_status_t tpurt_index_r_triu_indices(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tri_indices(call, true);
}

/* ---- searchsorted / bucketize ----
 * lower bound (right=False): first i with !(seq[i] < v); upper bound: first
 * i with seq[i] > v. Written as PyTorch's loop (start = mid+1 while
 * !(seq[mid] >= v)) so NaNs land where PyTorch puts them. */
typedef struct {
  const tpurt_tensor_t* seq;
  const tpurt_tensor_t* sorter;
  bool ints;
} seq_view_t;

static int64_t search_row(const seq_view_t* s, int64_t row_off, int64_t sorter_off, int64_t m, int64_t st,
                          int64_t sst, double v, int64_t vi, bool right) {
  size_t es = tpurt_dtype_size(s->seq->dtype);
  int64_t lo = 0, hi = m;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    int64_t k = mid;
    if (s->sorter) k = tpurt_dtype_load_i64(s->sorter->dtype, (const char*)s->sorter->data +
                                              (sorter_off + mid * sst) * (int64_t)tpurt_dtype_size(s->sorter->dtype));
    const char* p = (const char*)s->seq->data + (row_off + k * st) * (int64_t)es;
    bool go_right;
    if (s->ints) {
      int64_t x = tpurt_dtype_load_i64(s->seq->dtype, p);
      go_right = right ? !(x > vi) : !(x >= vi);
    } else {
      double x = tpurt_dtype_load_f64(s->seq->dtype, p);
      go_right = right ? !(x > v) : !(x >= v);
    }
    if (go_right) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* values: tensor (or scalar in val_elem); seq [..., M] with leading dims
 * matching values' leading dims, or 1-d shared by all values. */
static tpurt_status_t search_common(const char* op, const tpurt_tensor_t* seq, const tpurt_tensor_t* vals,
                                    const tpurt_tensor_t* sorter, bool right, const tpurt_tensor_t* out) {
  if (seq->ndim == 0) return TPURT_STATUS(INVALID_ARGUMENT, "%s: boundaries must have at least 1 dimension", op);
  if (seq->ndim > 1 && (vals->ndim != seq->ndim))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: boundaries (%d dims) and input (%d dims) must have the same number of "
                        "dims when boundaries is not 1-d", op, seq->ndim, vals->ndim);
  for (int32_t d = 0; seq->ndim > 1 && d < seq->ndim - 1; ++d)
    if (seq->sizes[d] != vals->sizes[d])
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: leading dims of boundaries and input must match", op);
  if (out->dtype != TPURT_DTYPE_INT64 && out->dtype != TPURT_DTYPE_INT32)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: out must be int64 or int32", op);
  if (sorter && (sorter->ndim != seq->ndim || !tpurt_index_is_index_dtype(sorter->dtype)))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: sorter must be an int64 tensor of boundaries' shape", op);
  int64_t M = seq->sizes[seq->ndim - 1];
  int64_t st = seq->strides[seq->ndim - 1], sst = sorter ? sorter->strides[sorter->ndim - 1] : 0;
  if (sorter) {
    int64_t n = tpurt_tensor_numel(sorter);
    for (int64_t l = 0; l < n; ++l) {
      int64_t k = tpurt_dtype_load_i64(sorter->dtype, elem_at(sorter, l));
      if (k < 0 || k >= M)
        return TPURT_STATUS(OUT_OF_RANGE, "%s: sorter index %" PRId64 " is out of range for boundaries of size %" PRId64,
                            op, k, M);
    }
  }
  bool fl = tpurt_dtype_is_floating(seq->dtype) || tpurt_dtype_is_floating(vals->dtype);
  seq_view_t sv = {seq, sorter, !fl};
  int64_t n = tpurt_tensor_numel(vals);
  int64_t K = vals->ndim ? vals->sizes[vals->ndim - 1] : 1;
  size_t ves = tpurt_dtype_size(vals->dtype);
  for (int64_t l = 0; l < n; ++l) {
    const char* vp = (const char*)vals->data + tpurt_index_offset(vals, l) * (int64_t)ves;
    int64_t row_off = 0, sorter_off = 0;
    if (seq->ndim > 1) {
      int64_t r = l / K, rem = r;
      for (int32_t d = seq->ndim - 2; d >= 0; --d) {
        int64_t p = rem % seq->sizes[d];
        rem /= seq->sizes[d];
        row_off += p * seq->strides[d];
        if (sorter) sorter_off += p * sorter->strides[d];
      }
    }
    int64_t pos = search_row(&sv, row_off, sorter_off, M, st, sst, tpurt_dtype_load_f64(vals->dtype, vp),
                             tpurt_dtype_load_i64(vals->dtype, vp), right);
    tpurt_dtype_store_i64(out->dtype, elem_at(out, l), pos);
  }
  return TPURT_OK;
}

/* searchsorted(sorted_sequence, self: Tensor|Scalar, out_int32, right, side, sorter) */
tpurt_status_t tpurt_index_k_searchsorted(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 2, 1));
  const tpurt_tensor_t* seq = tpurt_arg_tensor(call, 0);
  if (!seq) return TPURT_STATUS(INVALID_ARGUMENT, "searchsorted: sorted_sequence must be a tensor");
  bool right = tpurt_arg_bool(call, 3, false);
  const char* side = tpurt_arg_string(call, 4, NULL);
  if (side) {
    if (!strcmp(side, "right")) right = true;
    else if (!strcmp(side, "left")) {
      if (right) return TPURT_STATUS(INVALID_ARGUMENT, "searchsorted: side and right can't be set to opposites");
    } else return TPURT_STATUS(INVALID_ARGUMENT, "searchsorted: side can only be 'left' or 'right' but got %s", side);
  }
  const tpurt_tensor_t* sorter = tpurt_arg_tensor(call, 5);
  const tpurt_tensor_t* vals = tpurt_arg_tensor(call, 1);
  tpurt_tensor_t sv;
  double scalar_buf = 0;
  if (!vals) {
    /* a Scalar value: a 0-d tensor of the sequence's dtype (or float64 for a float scalar) */
    memset(&sv, 0, sizeof(sv));
    sv.data = &scalar_buf;
    if (tpurt_arg_is(call, 1, TPURT_ARG_DOUBLE)) { sv.dtype = TPURT_DTYPE_FLOAT64; scalar_buf = tpurt_arg_double(call, 1, 0); }
    else { sv.dtype = TPURT_DTYPE_INT64; int64_t v = tpurt_arg_int(call, 1, 0); memcpy(&scalar_buf, &v, 8); }
    if (seq->ndim != 1) return TPURT_STATUS(INVALID_ARGUMENT, "searchsorted: a scalar input needs 1-d boundaries");
    vals = &sv;
  }
  return search_common("searchsorted", seq, vals, sorter, right, &call->outputs[0]);
}
tpurt_status_t tpurt_index_r_searchsorted(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tpurt_index_k_searchsorted(ctx, call);
}

/* bucketize(self: Tensor|Scalar, boundaries (1-d), out_int32, right) */
tpurt_status_t tpurt_index_k_bucketize(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 2, 1));
  const tpurt_tensor_t* bnd = tpurt_arg_tensor(call, 1);
  if (!bnd || bnd->ndim != 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "bucketize: boundaries tensor must be 1 dimension");
  bool right = tpurt_arg_bool(call, 3, false);
  const tpurt_tensor_t* vals = tpurt_arg_tensor(call, 0);
  tpurt_tensor_t sv;
  double scalar_buf = 0;
  if (!vals) {
    memset(&sv, 0, sizeof(sv));
    sv.data = &scalar_buf;
    if (tpurt_arg_is(call, 0, TPURT_ARG_DOUBLE)) { sv.dtype = TPURT_DTYPE_FLOAT64; scalar_buf = tpurt_arg_double(call, 0, 0); }
    else { sv.dtype = TPURT_DTYPE_INT64; int64_t v = tpurt_arg_int(call, 0, 0); memcpy(&scalar_buf, &v, 8); }
    vals = &sv;
  }
  return search_common("bucketize", bnd, vals, NULL, right, &call->outputs[0]);
}
tpurt_status_t tpurt_index_r_bucketize(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tpurt_index_k_bucketize(ctx, call);
}

/* ---- histc(self, bins, min, max) -> out [bins] of self's dtype ----
 * min == max: the data's range (widened by 1 each way when flat). Elements
 * outside [min, max] (and NaN) are ignored; max lands in the last bin. */
tpurt_status_t tpurt_index_k_histc(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 1, 1));
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (!self) return TPURT_STATUS(INVALID_ARGUMENT, "histc: self must be a tensor");
  if (!tpurt_dtype_is_floating(self->dtype))
    return TPURT_STATUS(UNIMPLEMENTED, "histc: not implemented for '%s'", tpurt_dtype_name(self->dtype));
  int64_t bins = tpurt_arg_int(call, 1, 100);
  if (bins <= 0) return TPURT_STATUS(INVALID_ARGUMENT, "histc: bins must be > 0, but got %" PRId64, bins);
  if (out->ndim != 1 || out->sizes[0] != bins || !tpurt_dtype_is_floating(out->dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "histc: out must be a float tensor of [%" PRId64 "]", bins);
  double lo = tpurt_arg_double(call, 2, 0), hi = tpurt_arg_double(call, 3, 0);
  int64_t n = tpurt_tensor_numel(self);
  size_t es = tpurt_dtype_size(self->dtype);
  if (lo > hi) return TPURT_STATUS(INVALID_ARGUMENT, "histc: max must be larger than min");
  if (lo == hi && n > 0) {
    lo = INFINITY;
    hi = -INFINITY;
    for (int64_t l = 0; l < n; ++l) {
      double v = tpurt_dtype_load_f64(self->dtype, (const char*)self->data + tpurt_index_offset(self, l) * (int64_t)es);
      if (v != v) { lo = hi = v; break; }
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  if (lo == hi) { lo -= 1; hi += 1; }
  if (!isfinite(lo) || !isfinite(hi))
    return TPURT_STATUS(INVALID_ARGUMENT, "histc: range of [%g, %g] is not finite", lo, hi);
  unsigned char zero[8] = {0};
  tpurt_index_fill(ctx, out, zero);
  bool f64 = self->dtype == TPURT_DTYPE_FLOAT64;
  size_t oes = tpurt_dtype_size(out->dtype);
  /* counts in int64 first: adding 1 repeatedly in a 16-bit float would stall */
  int64_t* counts = tpurt_kernel_scratch(ctx, (size_t)bins * sizeof(int64_t));
  if (!counts) return TPURT_STATUS(RESOURCE_EXHAUSTED, "histc: no scratch");
  memset(counts, 0, (size_t)bins * sizeof(int64_t));
  float flo = (float)lo, fhi = (float)hi;
  for (int64_t l = 0; l < n; ++l) {
    double v = tpurt_dtype_load_f64(self->dtype, (const char*)self->data + tpurt_index_offset(self, l) * (int64_t)es);
    int64_t pos;
    if (f64) {
      if (!(v >= lo && v <= hi)) continue;
      pos = (int64_t)((v - lo) * (double)bins / (hi - lo));
    } else {
      float fv = (float)v;
      if (!(fv >= flo && fv <= fhi)) continue;
      pos = (int64_t)((fv - flo) * (float)bins / (fhi - flo));
    }
    if (pos >= bins) pos = bins - 1;
    if (pos < 0) pos = 0;
    counts[pos]++;
  }
  for (int64_t b = 0; b < bins; ++b)
    tpurt_dtype_store_f64(out->dtype, (char*)out->data + b * out->strides[0] * (int64_t)oes, (double)counts[b]);
  return TPURT_OK;
}
tpurt_status_t tpurt_index_r_histc(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tpurt_index_k_histc(ctx, call);
}
