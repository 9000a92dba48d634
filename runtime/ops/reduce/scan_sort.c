/* Row-wise kernels along one dim: scans (cumsum, cumprod, logcumsumexp) and
 * order statistics (sort, topk, kthvalue, median, nanmedian). Rows are
 * independent and split across threads; each row is gathered into a
 * contiguous scratch buffer, processed, and scattered back. Sorting is a
 * stable merge sort on (key, index) pairs with NaN ordered above +inf, as
 * PyTorch orders it. */
#include <stdlib.h>
#include <string.h>

#include "ops/reduce/reduce_ops.h"

/* A tensor that views `out` with the input's rank: `dim` gets size 1 /
 * stride 0 when `out` dropped it (keepdim=False). */
static tpurt_status_t view_as_rank(const char* op, const tpurt_tensor_t* in, int32_t dim,
                                   const tpurt_tensor_t* out, tpurt_tensor_t* v) {
  *v = *out;
  if (out->ndim == in->ndim) return TPURT_OK;
  if (out->ndim != in->ndim - 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: output rank %d does not fit input rank %d", op, (int)out->ndim,
                        (int)in->ndim);
  v->ndim = in->ndim;
  for (int32_t d = 0, j = 0; d < in->ndim; ++d) {
    if (d == dim) { v->sizes[d] = 1; v->strides[d] = 0; continue; }
    v->sizes[d] = out->sizes[j];
    v->strides[d] = out->strides[j];
    ++j;
  }
  return TPURT_OK;
}

/* Row geometry along `dim` (a 0-d tensor is one row of one element). */
typedef struct rows_t {
  int32_t dim;
  int64_t n, rows, in_stride;
} rows_t;

static tpurt_status_t rows_of(const char* op, const tpurt_tensor_t* in, int64_t dim_arg, rows_t* r) {
  TPURT_RETURN_IF_ERROR(tpurt_reduce_wrap_dim(op, dim_arg, in->ndim, &r->dim));
  if (in->ndim == 0) { r->dim = -1; r->n = 1; r->rows = 1; r->in_stride = 0; return TPURT_OK; }
  r->n = in->sizes[r->dim];
  r->in_stride = in->strides[r->dim];
  r->rows = r->n ? tpurt_tensor_numel(in) / r->n : 0;
  if (r->n == 0) {
    r->rows = 1;
    for (int d = 0; d < in->ndim; ++d) if (d != r->dim) r->rows *= in->sizes[d];
  }
  return TPURT_OK;
}

/* ---------------- scans ---------------- */

typedef enum { SCAN_SUM, SCAN_PROD, SCAN_LOGSUMEXP } scan_kind_t;

typedef struct scan_job_t {
  const tpurt_tensor_t *in, *out;
  rows_t r;
  scan_kind_t kind;
  bool use_int;
  double* fbuf;   /* per thread n doubles */
  int64_t* ibuf;  /* per thread n int64 */
} scan_job_t;

static double log_add_exp(double a, double b) {
  if (isnan(a) || isnan(b)) return NAN;
  double m = a > b ? a : b;
  if (isinf(m) && m < 0) return m;
  if (isinf(m)) return m;
  return m + log1p(exp(-fabs(a - b)));
}

static void scan_rows(void* user, int64_t b, int64_t e, int tid) {
  const scan_job_t* j = user;
  int64_t n = j->r.n;
  size_t isz = tpurt_dtype_size(j->in->dtype), osz = tpurt_dtype_size(j->out->dtype);
  int64_t ostride = j->r.dim >= 0 ? j->out->strides[j->r.dim] : 0;
  for (int64_t row = b; row < e; ++row) {
    const char* src = (const char*)j->in->data + tpurt_tensor_offset_of(j->in, row, j->r.dim) * (int64_t)isz;
    char* dst = (char*)j->out->data + tpurt_tensor_offset_of(j->out, row, j->r.dim) * (int64_t)osz;
    if (j->use_int) {
      int64_t* buf = j->ibuf + (size_t)tid * (size_t)n;
      uint64_t acc = j->kind == SCAN_PROD ? 1 : 0;
      for (int64_t i = 0; i < n; ++i) {
        uint64_t x = (uint64_t)tpurt_dtype_load_i64(j->in->dtype, src + i * j->r.in_stride * (int64_t)isz);
        acc = j->kind == SCAN_PROD ? acc * x : acc + x;
        buf[i] = (int64_t)acc;
      }
      for (int64_t i = 0; i < n; ++i) tpurt_dtype_store_i64(j->out->dtype, dst + i * ostride * (int64_t)osz, buf[i]);
      continue;
    }
    double* buf = j->fbuf + (size_t)tid * (size_t)n;
    tpurt_row_load_f64(j->in->dtype, src, j->r.in_stride, n, buf);
    if (j->kind == SCAN_SUM) {
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) { acc += buf[i]; buf[i] = acc; }
    } else if (j->kind == SCAN_PROD) {
      double acc = 1;
      for (int64_t i = 0; i < n; ++i) { acc *= buf[i]; buf[i] = acc; }
    } else {
      double acc = -INFINITY;
      for (int64_t i = 0; i < n; ++i) { acc = log_add_exp(acc, buf[i]); buf[i] = acc; }
    }
    tpurt_row_store_f64(j->out->dtype, dst, ostride, n, buf);
  }
}

/* (self, dim, dtype?) -> out */
static tpurt_status_t scan_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, scan_kind_t kind, bool ref) {
  const tpurt_tensor_t* in = tpurt_arg_tensor(c, 0);
  if (!in || c->num_outputs < 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (self, dim) and an output", c->name);
  const tpurt_tensor_t* out = &c->outputs[0];
  scan_job_t j = {.in = in, .out = out, .kind = kind};
  TPURT_RETURN_IF_ERROR(rows_of(c->name, in, tpurt_arg_int(c, 1, 0), &j.r));
  if (tpurt_tensor_numel(in) == 0) return TPURT_OK;
  if (kind == SCAN_LOGSUMEXP && !tpurt_dtype_is_floating(out->dtype))
    return TPURT_REDUCE_UNSUPPORTED(c->name, out->dtype);
  j.use_int = !tpurt_dtype_is_floating(out->dtype);
  if (ref) {
    /* reference: element by element through the scalar loaders */
    size_t isz = tpurt_dtype_size(in->dtype), osz = tpurt_dtype_size(out->dtype);
    for (int64_t row = 0; row < j.r.rows; ++row) {
      int64_t io = tpurt_tensor_offset_of(in, row, j.r.dim), oo = tpurt_tensor_offset_of(out, row, j.r.dim);
      int64_t os = j.r.dim >= 0 ? out->strides[j.r.dim] : 0;
      double acc = kind == SCAN_PROD ? 1 : kind == SCAN_SUM ? 0 : -INFINITY;
      uint64_t iacc = kind == SCAN_PROD ? 1 : 0;
      for (int64_t i = 0; i < j.r.n; ++i) {
        const char* p = (const char*)in->data + (io + i * j.r.in_stride) * (int64_t)isz;
        char* q = (char*)out->data + (oo + i * os) * (int64_t)osz;
        if (j.use_int) {
          uint64_t x = (uint64_t)tpurt_dtype_load_i64(in->dtype, p);
          iacc = kind == SCAN_PROD ? iacc * x : iacc + x;
          tpurt_dtype_store_i64(out->dtype, q, (int64_t)iacc);
        } else {
          double x = tpurt_dtype_load_f64(in->dtype, p);
          acc = kind == SCAN_SUM ? acc + x : kind == SCAN_PROD ? acc * x : log_add_exp(acc, x);
          tpurt_dtype_store_f64(out->dtype, q, acc);
        }
      }
    }
    return TPURT_OK;
  }
  int nt = tpurt_kernel_num_threads(ctx);
  size_t bytes = sizeof(double) * (size_t)j.r.n * (size_t)nt;
  void* buf = tpurt_kernel_scratch(ctx, bytes);
  if (!buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch for %zu bytes", c->name, bytes);
  j.fbuf = buf;
  j.ibuf = buf;
  tpurt_parallel_for(ctx, j.r.rows, 1 + 16384 / (j.r.n + 1), scan_rows, &j);
  return TPURT_OK;
}

tpurt_status_t tpurt_kernel_cumsum(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return scan_impl(x, c, SCAN_SUM, false); }
tpurt_status_t tpurt_kernel_cumsum_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return scan_impl(x, c, SCAN_SUM, true); }
tpurt_status_t tpurt_kernel_cumprod(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return scan_impl(x, c, SCAN_PROD, false); }
tpurt_status_t tpurt_kernel_cumprod_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return scan_impl(x, c, SCAN_PROD, true); }
tpurt_status_t tpurt_kernel_logcumsumexp(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return scan_impl(x, c, SCAN_LOGSUMEXP, false); }
tpurt_status_t tpurt_kernel_logcumsumexp_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return scan_impl(x, c, SCAN_LOGSUMEXP, true); }

/* ---------------- sorting ---------------- */

typedef struct kv_t {
  double f;   /* key for floating dtypes */
  int64_t k;  /* key for integer dtypes */
  int64_t i;  /* original position */
} kv_t;

typedef struct order_t {
  bool is_int, desc;
} order_t;

/* a strictly before b in the requested order (NaN above +inf). */
static inline bool kv_before(const order_t* o, const kv_t* a, const kv_t* b) {
  if (o->is_int) return o->desc ? a->k > b->k : a->k < b->k;
  bool an = isnan(a->f), bn = isnan(b->f);
  if (o->desc) return (an && !bn) || a->f > b->f;
  return (!an && bn) || a->f < b->f;
}

/* Stable bottom-up merge sort of v[n] using tmp[n]. */
static void kv_sort(const order_t* o, kv_t* v, kv_t* tmp, int64_t n) {
  /* insertion sort runs of 16, then merge */
  const int64_t RUN = 16;
  for (int64_t s = 0; s < n; s += RUN) {
    int64_t e = s + RUN < n ? s + RUN : n;
    for (int64_t i = s + 1; i < e; ++i) {
      kv_t x = v[i];
      int64_t j = i;
      while (j > s && kv_before(o, &x, &v[j - 1])) { v[j] = v[j - 1]; --j; }
      v[j] = x;
    }
  }
  kv_t *src = v, *dst = tmp;
  for (int64_t w = RUN; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t a = lo, b = mid, k = lo;
      while (a < mid && b < hi) dst[k++] = kv_before(o, &src[b], &src[a]) ? src[b++] : src[a++];
      while (a < mid) dst[k++] = src[a++];
      while (b < hi) dst[k++] = src[b++];
    }
    kv_t* t = src; src = dst; dst = t;
  }
  if (src != v) memcpy(v, src, sizeof(kv_t) * (size_t)n);
}

/* Reference sort: stable insertion sort (quadratic, obviously correct). */
static void kv_sort_ref(const order_t* o, kv_t* v, int64_t n) {
  for (int64_t i = 1; i < n; ++i) {
    kv_t x = v[i];
    int64_t j = i;
    while (j > 0 && kv_before(o, &x, &v[j - 1])) { v[j] = v[j - 1]; --j; }
    v[j] = x;
  }
}

typedef enum { SEL_SORT, SEL_TOPK, SEL_KTH, SEL_MEDIAN, SEL_NANMEDIAN, SEL_MODE } sel_kind_t;

typedef struct sel_job_t {
  const tpurt_tensor_t* in;
  tpurt_tensor_t vals, idxs; /* outputs viewed at the input's rank */
  rows_t r;
  sel_kind_t kind;
  order_t o;
  int64_t k;
  bool ref;
  kv_t* buf; /* per thread 2n */
} sel_job_t;

static void sel_rows(void* user, int64_t b, int64_t e, int tid) {
  const sel_job_t* j = user;
  int64_t n = j->r.n;
  kv_t* v = j->buf + (size_t)tid * 2 * (size_t)n;
  kv_t* tmp = v + n;
  size_t isz = tpurt_dtype_size(j->in->dtype), vsz = tpurt_dtype_size(j->vals.dtype);
  int64_t vs = j->r.dim >= 0 ? j->vals.strides[j->r.dim] : 0;
  int64_t xs = j->r.dim >= 0 ? j->idxs.strides[j->r.dim] : 0;
  /* uint64 keys are their 64 bits with the top one flipped, so that int64 order is unsigned order
   * (uint8/16/32 load zero-extended and order as they are) */
  const int64_t flip = j->in->dtype == TPURT_DTYPE_UINT64 ? INT64_MIN : 0;
  for (int64_t row = b; row < e; ++row) {
    const char* src = (const char*)j->in->data + tpurt_tensor_offset_of(j->in, row, j->r.dim) * (int64_t)isz;
    for (int64_t i = 0; i < n; ++i) {
      const char* p = src + i * j->r.in_stride * (int64_t)isz;
      if (j->o.is_int) v[i].k = tpurt_dtype_load_i64(j->in->dtype, p) ^ flip;
      else v[i].f = tpurt_dtype_load_f64(j->in->dtype, p);
      v[i].i = i;
    }
    int64_t m = n; /* elements taking part */
    int64_t first_nan = -1;
    if (!j->o.is_int && (j->kind == SEL_MEDIAN || j->kind == SEL_NANMEDIAN)) {
      int64_t w = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (isnan(v[i].f)) { if (first_nan < 0) first_nan = i; }
        else v[w++] = v[i];
      }
      if (j->kind == SEL_NANMEDIAN) m = w;
      else if (first_nan >= 0) m = 0; /* median with a NaN is NaN */
      else m = w;
    }
    if (j->ref) kv_sort_ref(&j->o, v, m);
    else kv_sort(&j->o, v, tmp, m);
    char* vd = (char*)j->vals.data + tpurt_tensor_offset_of(&j->vals, row, j->r.dim) * (int64_t)vsz;
    int64_t* xd = (int64_t*)j->idxs.data + tpurt_tensor_offset_of(&j->idxs, row, j->r.dim);
    int64_t count = j->kind == SEL_SORT ? n : j->kind == SEL_TOPK ? j->k : 1;
    int64_t start = 0;
    if (j->kind == SEL_MODE) {
      /* the most frequent value; ties -> the smallest value; its index is the
       * last occurrence (PyTorch CPU's choice after its sort) */
      int64_t best = 0, best_run = 0;
      for (int64_t i = 0; i < n;) {
        int64_t e2 = i + 1;
        while (e2 < n && (j->o.is_int ? v[e2].k == v[i].k
                                      : (v[e2].f == v[i].f || (isnan(v[e2].f) && isnan(v[i].f)))))
          ++e2;
        if (e2 - i > best_run) { best_run = e2 - i; best = e2 - 1; }
        i = e2;
      }
      start = best;
    }
    if (j->kind == SEL_KTH) start = j->k - 1;
    if (j->kind == SEL_MEDIAN || j->kind == SEL_NANMEDIAN) {
      if (m == 0) {
        tpurt_dtype_store_f64(j->vals.dtype, vd, NAN);
        *xd = first_nan >= 0 ? first_nan : 0;
        continue;
      }
      start = (m - 1) / 2;
    }
    for (int64_t t = 0; t < count; ++t) {
      const kv_t* x = &v[start + t];
      char* q = vd + t * vs * (int64_t)vsz;
      if (j->o.is_int) tpurt_dtype_store_i64(j->vals.dtype, q, x->k ^ flip);
      else tpurt_dtype_store_f64(j->vals.dtype, q, x->f);
      xd[t * xs] = x->i;
    }
  }
}

static tpurt_status_t sel_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, sel_kind_t kind, bool ref) {
  const tpurt_tensor_t* in = tpurt_arg_tensor(c, 0);
  if (!in) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a tensor input", c->name);
  sel_job_t j = {.in = in, .kind = kind, .ref = ref};
  j.o.is_int = !tpurt_dtype_is_floating(in->dtype);
  int64_t dim = -1;
  bool keepdim = true;
  bool full = false; /* median/nanmedian over everything -> one 0-d value */
  switch (kind) {
    case SEL_SORT:
      /* (self, dim, descending) or (self, stable?, dim, descending) */
      if (c->num_args >= 4 || (c->num_args >= 2 && (tpurt_arg_is(c, 1, TPURT_ARG_BOOL) ||
                                                      tpurt_arg_is(c, 1, TPURT_ARG_NONE)))) {
        dim = tpurt_arg_int(c, 2, -1);
        j.o.desc = tpurt_arg_bool(c, 3, false);
      } else {
        dim = tpurt_arg_int(c, 1, -1);
        j.o.desc = tpurt_arg_bool(c, 2, false);
      }
      break;
    case SEL_TOPK: /* (self, k, dim, largest, sorted) */
      j.k = tpurt_arg_int(c, 1, 1);
      dim = tpurt_arg_int(c, 2, -1);
      j.o.desc = tpurt_arg_bool(c, 3, true);
      break;
    case SEL_KTH: /* (self, k, dim, keepdim) */
      j.k = tpurt_arg_int(c, 1, 1);
      dim = tpurt_arg_int(c, 2, -1);
      keepdim = tpurt_arg_bool(c, 3, false);
      break;
    case SEL_MODE: /* (self, dim, keepdim) */
      dim = tpurt_arg_int(c, 1, -1);
      break;
    case SEL_MEDIAN: case SEL_NANMEDIAN: /* (self) or (self, dim, keepdim) */
      if (tpurt_arg_is(c, 1, TPURT_ARG_INT)) {
        dim = tpurt_arg_int(c, 1, -1);
        keepdim = tpurt_arg_bool(c, 2, false);
      } else {
        full = true;
      }
      break;
  }
  (void)keepdim;
  if (full) {
    if (c->num_outputs < 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: no output", c->name);
    if (tpurt_tensor_numel(in) == 0) {
      tpurt_dtype_store_f64(c->outputs[0].dtype, c->outputs[0].data, NAN);
      return TPURT_OK;
    }
    /* flatten: one row over all elements (copy the input's layout as a 1-d walk) */
    int64_t n = tpurt_tensor_numel(in);
    kv_t* v = tpurt_kernel_scratch(ctx, sizeof(kv_t) * (size_t)n * 2);
    if (!v) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", c->name);
    int64_t w = 0, first_nan = -1;
    for (int64_t i = 0; i < n; ++i) {
      const char* p = tpurt_tensor_at(in, tpurt_tensor_offset_of(in, i, -1));
      kv_t x = {.i = i};
      if (j.o.is_int) x.k = tpurt_dtype_load_i64(in->dtype, p);
      else {
        x.f = tpurt_dtype_load_f64(in->dtype, p);
        if (isnan(x.f)) { if (first_nan < 0) first_nan = i; continue; }
      }
      v[w++] = x;
    }
    const tpurt_tensor_t* out = &c->outputs[0];
    if ((kind == SEL_MEDIAN && first_nan >= 0) || w == 0) {
      tpurt_dtype_store_f64(out->dtype, out->data, NAN);
      return TPURT_OK;
    }
    if (ref) kv_sort_ref(&j.o, v, w);
    else kv_sort(&j.o, v, v + n, w);
    const kv_t* x = &v[(w - 1) / 2];
    if (j.o.is_int) tpurt_dtype_store_i64(out->dtype, out->data, x->k);
    else tpurt_dtype_store_f64(out->dtype, out->data, x->f);
    return TPURT_OK;
  }
  if (c->num_outputs < 2) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (values, indices) outputs", c->name);
  TPURT_RETURN_IF_ERROR(rows_of(c->name, in, dim, &j.r));
  if (c->outputs[1].dtype != TPURT_DTYPE_INT64)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: indices must be int64", c->name);
  if (kind == SEL_TOPK && (j.k < 0 || j.k > j.r.n))
    return TPURT_STATUS(OUT_OF_RANGE, "topk: k=%lld out of range for a dimension of size %lld", (long long)j.k,
                        (long long)j.r.n);
  if (kind == SEL_KTH && (j.k < 1 || j.k > j.r.n))
    return TPURT_STATUS(OUT_OF_RANGE, "kthvalue: k=%lld out of range for a dimension of size %lld",
                        (long long)j.k, (long long)j.r.n);
  if ((kind == SEL_MEDIAN || kind == SEL_NANMEDIAN || kind == SEL_MODE) && j.r.n == 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: cannot reduce over a zero-size dimension", c->name);
  /* A 0-d input's outputs are 0-d and always hold its one element, even for
   * k=0 (as PyTorch CPU copies it): never leave them unwritten. */
  if (kind == SEL_TOPK && in->ndim == 0) j.k = 1;
  if (j.r.rows == 0 || j.r.n == 0 || (kind == SEL_TOPK && j.k == 0)) return TPURT_OK;
  if (in->ndim == 0) {
    j.vals = c->outputs[0];
    j.idxs = c->outputs[1];
  } else {
    TPURT_RETURN_IF_ERROR(view_as_rank(c->name, in, j.r.dim, &c->outputs[0], &j.vals));
    TPURT_RETURN_IF_ERROR(view_as_rank(c->name, in, j.r.dim, &c->outputs[1], &j.idxs));
  }
  int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
  size_t bytes = sizeof(kv_t) * 2 * (size_t)j.r.n * (size_t)nt;
  j.buf = tpurt_kernel_scratch(ctx, bytes);
  if (!j.buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch for %zu bytes", c->name, bytes);
  if (ref) sel_rows(&j, 0, j.r.rows, 0);
  else tpurt_parallel_for(ctx, j.r.rows, 1 + 4096 / (j.r.n + 1), sel_rows, &j);
  return TPURT_OK;
}

#define SEL_PAIR(name, kind)                                                                       \
  tpurt_status_t tpurt_kernel_##name(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) {           \
    return sel_impl(x, c, kind, false);                                                            \
  }                                                                                                \
  tpurt_status_t tpurt_kernel_##name##_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) {     \
    return sel_impl(x, c, kind, true);                                                             \
  }
SEL_PAIR(sort, SEL_SORT)
SEL_PAIR(topk, SEL_TOPK)
SEL_PAIR(kthvalue, SEL_KTH)
SEL_PAIR(median, SEL_MEDIAN)
SEL_PAIR(nanmedian, SEL_NANMEDIAN)
SEL_PAIR(mode, SEL_MODE)

/* ---------------- cummax / cummin ----------------
 * _cummax_helper(self, values, indices, dim) -> (): values/indices are written
 * in place. Ties take the later index and NaN sticks (each later NaN takes its
 * index), as ATen's CPU kernel does. */
static tpurt_status_t cumext_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, bool mx) {
  (void)ctx;
  const tpurt_tensor_t *in = tpurt_arg_tensor(c, 0), *vals = tpurt_arg_tensor(c, 1), *idx = tpurt_arg_tensor(c, 2);
  if (!in || !vals || !idx) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (self, values, indices, dim)", c->name);
  if (idx->dtype != TPURT_DTYPE_INT64) return TPURT_STATUS(INVALID_ARGUMENT, "%s: indices must be int64", c->name);
  rows_t r;
  TPURT_RETURN_IF_ERROR(rows_of(c->name, in, tpurt_arg_int(c, 3, 0), &r));
  if (tpurt_tensor_numel(in) == 0) return TPURT_OK;
  bool is_int = !tpurt_dtype_is_floating(in->dtype);
  size_t isz = tpurt_dtype_size(in->dtype), vsz = tpurt_dtype_size(vals->dtype);
  int64_t vs = r.dim >= 0 ? vals->strides[r.dim] : 0, xs = r.dim >= 0 ? idx->strides[r.dim] : 0;
  for (int64_t row = 0; row < r.rows; ++row) {
    const char* src = tpurt_tensor_at(in, tpurt_tensor_offset_of(in, row, r.dim));
    char* vd = tpurt_tensor_at(vals, tpurt_tensor_offset_of(vals, row, r.dim));
    int64_t* xd = (int64_t*)idx->data + tpurt_tensor_offset_of(idx, row, r.dim);
    double best = 0;
    int64_t ibest = 0, bi = 0;
    for (int64_t i = 0; i < r.n; ++i) {
      const char* p = src + i * r.in_stride * (int64_t)isz;
      if (is_int) {
        int64_t x = tpurt_dtype_load_i64(in->dtype, p);
        if (i == 0 || (mx ? x >= ibest : x <= ibest)) { ibest = x; bi = i; }
        tpurt_dtype_store_i64(vals->dtype, vd + i * vs * (int64_t)vsz, ibest);
      } else {
        double x = tpurt_dtype_load_f64(in->dtype, p);
        if (i == 0 || isnan(x) || (!isnan(best) && (mx ? x >= best : x <= best))) { best = x; bi = i; }
        tpurt_dtype_store_f64(vals->dtype, vd + i * vs * (int64_t)vsz, best);
      }
      xd[i * xs] = bi;
    }
  }
  return TPURT_OK;
}
tpurt_status_t tpurt_kernel_cummax_helper(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cumext_impl(x, c, true); }
tpurt_status_t tpurt_kernel_cummax_helper_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cumext_impl(x, c, true); }
tpurt_status_t tpurt_kernel_cummin_helper(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cumext_impl(x, c, false); }
tpurt_status_t tpurt_kernel_cummin_helper_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return cumext_impl(x, c, false); }
