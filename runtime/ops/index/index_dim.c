/* Indexing along one dim: gather, scatter (src/value, reduce), scatter_add,
 * scatter_reduce, index_select, index_add/copy/fill/reduce, take, put_ and
 * embedding_dense_backward. Each loads and checks its indices once, then runs
 * the gather or scatter engine of index_common.c; each reference kernel is a
 * plain loop over the index elements in row-major order. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/index/index_common.h"
#include "ops/index/index_kernels.h"

/* Contiguous strides of a shape. */
static void contig_strides(int32_t nd, const int64_t* sizes, int64_t* st) {
  int64_t s = 1;
  for (int32_t d = nd - 1; d >= 0; --d) { st[d] = s; s *= sizes[d] > 0 ? sizes[d] : 1; }
}

/* Loads the whole index tensor (own shape) into scratch, checked against dim_size. */
static tpurt_status_t load_all(tpurt_kernel_ctx_t* ctx, const char* op, const tpurt_tensor_t* idx, int64_t dim,
                               int64_t dim_size, bool wrap, int64_t** out) {
  int64_t n = tpurt_tensor_numel(idx);
  *out = tpurt_kernel_scratch(ctx, (size_t)(n + 1) * sizeof(int64_t));
  if (!*out) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch for %" PRId64 " indices", op, n);
  return tpurt_index_load(op, idx, idx->ndim, idx->sizes, dim, dim_size, wrap, *out);
}

/* gather and the scatters: CPU raises RuntimeError for an index out of
 * bounds (index_select, take, put_ and the index_* ops raise IndexError), so
 * their OUT_OF_RANGE becomes INVALID_ARGUMENT (the PyTorch layer maps the
 * codes onto those exception types). */
static tpurt_status_t out_of_range_as_invalid(tpurt_status_t st) {
  if (!st || tpurt_status_code(st) != TPURT_STATUS_OUT_OF_RANGE) return st;
  tpurt_status_t r = TPURT_STATUS(INVALID_ARGUMENT, "%s", tpurt_status_message(st));
  tpurt_status_free(st);
  return r;
}

/* A source that may alias the destination is read from a private copy. */
static tpurt_status_t private_if_overlap(tpurt_kernel_ctx_t* ctx, const char* op, const tpurt_tensor_t* src,
                                         const tpurt_tensor_t* out, tpurt_tensor_t* res) {
  *res = *src;
  if (!tpurt_index_may_overlap(src, out)) return TPURT_OK;
  void* buf = tpurt_kernel_scratch(ctx, (size_t)(tpurt_tensor_numel(src) + 1) * tpurt_dtype_size(src->dtype));
  if (!buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch for source copy", op);
  tpurt_index_make_contig(res, buf, src->dtype, src->ndim, src->sizes);
  return tpurt_index_copy(ctx, res, src);
}

/* ---- gather ---- */

static tpurt_status_t gather_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 3, 1));
  const tpurt_tensor_t* s0 = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* i0 = tpurt_arg_tensor(call, 2);
  if (!s0 || !i0) return TPURT_STATUS(INVALID_ARGUMENT, "gather: self and index must be tensors");
  tpurt_tensor_t self, idx, out;
  tpurt_index_as_1d(s0, &self);
  tpurt_index_as_1d(i0, &idx);
  tpurt_index_as_1d(&call->outputs[0], &out);
  int32_t dim;
  TPURT_RETURN_IF_ERROR(tpurt_index_wrap_dim("gather", tpurt_arg_int(call, 1, 0), s0->ndim, &dim));
  if (tpurt_tensor_numel(&idx) == 0) return TPURT_OK; /* as CPU: an empty index of any rank gives an empty out */
  if (idx.ndim != self.ndim || out.ndim != idx.ndim || out.dtype != self.dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "gather: index (%d dims), self (%d dims) and out must agree", idx.ndim,
                        self.ndim);
  for (int32_t d = 0; d < idx.ndim; ++d) {
    if (out.sizes[d] != idx.sizes[d]) return TPURT_STATUS(INVALID_ARGUMENT, "gather: out shape differs from index");
    if (d != dim && idx.sizes[d] > self.sizes[d])
      return TPURT_STATUS(INVALID_ARGUMENT, "gather: size of index (%" PRId64 ") exceeds self (%" PRId64
                          ") at dimension %d", idx.sizes[d], self.sizes[d], d);
  }
  int64_t n = tpurt_tensor_numel(&idx);
  if (n == 0) return TPURT_OK;
  int64_t* off;
  TPURT_RETURN_IF_ERROR(out_of_range_as_invalid(load_all(ctx, "gather", &idx, dim, self.sizes[dim], false, &off)));
  size_t es = tpurt_dtype_size(self.dtype);
  if (reference) {
    for (int64_t l = 0; l < n; ++l) {
      int64_t rem = l, so = 0;
      for (int32_t d = idx.ndim - 1; d >= 0; --d) {
        int64_t p = rem % idx.sizes[d];
        rem /= idx.sizes[d];
        so += (d == dim ? off[l] : p) * self.strides[d];
      }
      memcpy((char*)out.data + tpurt_index_offset(&out, l) * (int64_t)es, (const char*)self.data + so * (int64_t)es, es);
    }
    return TPURT_OK;
  }
  for (int64_t l = 0; l < n; ++l) off[l] *= self.strides[dim];
  int64_t ist[TPURT_MAX_DIMS];
  contig_strides(idx.ndim, idx.sizes, ist);
  tpurt_index_space_t sp;
  tpurt_index_space_init(&sp, 3);
  for (int32_t d = 0; d < idx.ndim; ++d) {
    int64_t st[3] = {out.strides[d], d == dim ? 0 : self.strides[d], ist[d]};
    tpurt_index_space_push(&sp, idx.sizes[d], st);
  }
  tpurt_index_space_coalesce(&sp);
  tpurt_index_gather_run(ctx, &sp, (char*)out.data, (const char*)self.data, off, es);
  return TPURT_OK;
}

tpurt_status_t tpurt_index_k_gather(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return gather_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_gather(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return gather_impl(ctx, call, true);
}

/* ---- scatter family ---- */

/* out = self; then for each element p of index (row-major):
 *   out[p with dim -> index[p]] (red)= src[p]   (src may be a scalar). */
static tpurt_status_t scatter_common(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const char* op,
                                     int scalar_arg, tpurt_index_red_t red, bool include_self, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 4, 1));
  const tpurt_tensor_t* s0 = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* i0 = tpurt_arg_tensor(call, 2);
  const tpurt_tensor_t* src0 = scalar_arg < 0 ? tpurt_arg_tensor(call, 3) : NULL;
  if (!s0 || !i0 || (scalar_arg < 0 && !src0))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: self, index and src must be tensors", op);
  tpurt_tensor_t self, idx, out, src;
  tpurt_index_as_1d(s0, &self);
  tpurt_index_as_1d(i0, &idx);
  tpurt_index_as_1d(&call->outputs[0], &out);
  int32_t dim;
  TPURT_RETURN_IF_ERROR(tpurt_index_wrap_dim(op, tpurt_arg_int(call, 1, 0), s0->ndim, &dim));
  if (out.dtype != self.dtype || out.ndim != self.ndim)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: out must match self", op);
  if (idx.ndim != self.ndim && tpurt_tensor_numel(&idx) > 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: index (%d dims) and self (%d dims) must have the same number of "
                        "dimensions", op, idx.ndim, self.ndim);
  unsigned char scalar[8];
  if (scalar_arg >= 0) {
    TPURT_RETURN_IF_ERROR(tpurt_arg_scalar_store(call, scalar_arg, self.dtype, scalar));
    memset(&src, 0, sizeof(src));
    src.data = scalar;
    src.dtype = self.dtype;
    src.ndim = idx.ndim;
    for (int32_t d = 0; d < idx.ndim; ++d) src.sizes[d] = idx.sizes[d];
  } else {
    tpurt_tensor_t s1;
    tpurt_index_as_1d(src0, &s1);
    if (s1.dtype != self.dtype)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected self.dtype (%s) to equal src.dtype (%s)", op,
                          tpurt_dtype_name(self.dtype), tpurt_dtype_name(s1.dtype));
    TPURT_RETURN_IF_ERROR(private_if_overlap(ctx, op, &s1, &out, &src));
    if (src.ndim != idx.ndim && tpurt_tensor_numel(&idx) > 0)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: index and src must have the same number of dimensions", op);
  }
  int64_t n = tpurt_tensor_numel(&idx);
  for (int32_t d = 0; n > 0 && d < idx.ndim; ++d) {
    if (d != dim && idx.sizes[d] > self.sizes[d])
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: size of index (%" PRId64 ") exceeds self (%" PRId64
                          ") at dimension %d", op, idx.sizes[d], self.sizes[d], d);
    if (scalar_arg < 0 && idx.sizes[d] > src.sizes[d])
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: size of index (%" PRId64 ") exceeds src (%" PRId64
                          ") at dimension %d", op, idx.sizes[d], src.sizes[d], d);
  }
  int64_t* off = NULL;
  if (n > 0) TPURT_RETURN_IF_ERROR(out_of_range_as_invalid(load_all(ctx, op, &idx, dim, self.sizes[dim], false, &off)));
  TPURT_RETURN_IF_ERROR(tpurt_index_copy(ctx, &out, &self));
  if (n == 0) return TPURT_OK;
  size_t es = tpurt_dtype_size(self.dtype);
  tpurt_index_accum_fn_t fn = tpurt_index_accum_fn(self.dtype, red);
  if (!fn) return TPURT_STATUS(UNIMPLEMENTED, "%s: dtype %s", op, tpurt_dtype_name(self.dtype));
  if (reference) {
    int64_t dsto[2], cnt_n = tpurt_tensor_numel(&out);
    int64_t* counts = NULL;
    if (red == TPURT_INDEX_RED_MEAN) {
      if (!tpurt_tensor_is_contiguous(&out))
        return TPURT_STATUS(UNIMPLEMENTED, "%s reference: mean needs a contiguous out", op);
      counts = tpurt_kernel_scratch(ctx, (size_t)(cnt_n + 1) * sizeof(int64_t));
      if (!counts) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", op);
      memset(counts, 0, (size_t)(cnt_n + 1) * sizeof(int64_t));
    }
    unsigned char ident[16];
    tpurt_index_red_identity(self.dtype, red, ident);
    for (int pass = include_self || red == TPURT_INDEX_RED_COPY ? 1 : 0; pass < 2; ++pass) {
      for (int64_t l = 0; l < n; ++l) {
        int64_t rem = l, oo = 0, so = 0;
        for (int32_t d = idx.ndim - 1; d >= 0; --d) {
          int64_t p = rem % idx.sizes[d];
          rem /= idx.sizes[d];
          oo += (d == dim ? off[l] : p) * out.strides[d];
          so += p * src.strides[d];
        }
        char* dp = (char*)out.data + oo * (int64_t)es;
        if (pass == 0) { memcpy(dp, ident, es); continue; }
        fn(dp, (const char*)src.data + so * (int64_t)es, 1.0, 1);
        if (counts) counts[oo]++;
      }
    }
    (void)dsto;
    if (counts)
      for (int64_t o = 0; o < cnt_n; ++o)
        if (counts[o]) tpurt_index_div_count(self.dtype, (char*)out.data + o * (int64_t)es, counts[o] + include_self);
    return TPURT_OK;
  }
  for (int64_t l = 0; l < n; ++l) off[l] *= out.strides[dim];
  int64_t ist[TPURT_MAX_DIMS];
  contig_strides(idx.ndim, idx.sizes, ist);
  tpurt_index_scatter_t job;
  tpurt_index_scatter_init(&job, self.dtype, red);
  job.include_self = include_self;
  job.out = (char*)out.data;
  job.src = (const char*)src.data;
  job.off = off;
  job.J = idx.sizes[dim];
  job.src_j = src.strides[dim];
  job.off_j = ist[dim];
  job.out_t = &out;
  tpurt_index_space_init(&job.sp, 3);
  for (int32_t d = 0; d < idx.ndim; ++d) {
    if (d == dim) continue;
    int64_t st[3] = {out.strides[d], src.strides[d], ist[d]};
    tpurt_index_space_push(&job.sp, idx.sizes[d], st);
  }
  tpurt_index_space_coalesce(&job.sp);
  return tpurt_index_scatter_run(ctx, &job);
}

/* scatter(self, dim, index, src|value [, reduce]) */
static tpurt_status_t scatter_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 4, 1));
  int scalar_arg = tpurt_arg_is(call, 3, TPURT_ARG_TENSOR) ? -1 : 3;
  tpurt_index_red_t red = TPURT_INDEX_RED_COPY;
  const char* rs = tpurt_arg_string(call, 4, NULL);
  if (rs) {
    int r = tpurt_index_red_parse(rs);
    if (r != TPURT_INDEX_RED_SUM && r != TPURT_INDEX_RED_PROD)
      return TPURT_STATUS(INVALID_ARGUMENT, "scatter: reduce argument must be either add or multiply, got %s", rs);
    red = (tpurt_index_red_t)r;
  }
  return scatter_common(ctx, call, "scatter", scalar_arg, red, true, reference);
}
tpurt_status_t tpurt_index_k_scatter(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return scatter_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_scatter(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return scatter_impl(ctx, call, true);
}

tpurt_status_t tpurt_index_k_scatter_add(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return scatter_common(ctx, call, "scatter_add", -1, TPURT_INDEX_RED_SUM, true, false);
}
tpurt_status_t tpurt_index_r_scatter_add(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return scatter_common(ctx, call, "scatter_add", -1, TPURT_INDEX_RED_SUM, true, true);
}

/* scatter_reduce(self, dim, index, src, reduce, include_self=True) */
static tpurt_status_t scatter_reduce_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  const char* rs = tpurt_arg_string(call, 4, NULL);
  int r = tpurt_index_red_parse(rs);
  if (r < 0 || !strcmp(rs, "add") || !strcmp(rs, "multiply"))
    return TPURT_STATUS(INVALID_ARGUMENT, "scatter_reduce: reduce argument must be one of sum, prod, mean, amax, "
                        "amin, got %s", rs ? rs : "(none)");
  return scatter_common(ctx, call, "scatter_reduce", -1, (tpurt_index_red_t)r,
                        tpurt_arg_bool(call, 5, true), reference);
}
tpurt_status_t tpurt_index_k_scatter_reduce(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return scatter_reduce_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_scatter_reduce(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return scatter_reduce_impl(ctx, call, true);
}

/* ---- index_select ---- */

static tpurt_status_t index_select_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 3, 1));
  const tpurt_tensor_t* s0 = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* idx = tpurt_arg_tensor(call, 2);
  if (!s0 || !idx) return TPURT_STATUS(INVALID_ARGUMENT, "index_select: self and index must be tensors");
  if (idx->ndim > 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "index_select: index must be 0-d or 1-d, got %d dims", idx->ndim);
  tpurt_tensor_t self, out;
  tpurt_index_as_1d(s0, &self);
  tpurt_index_as_1d(&call->outputs[0], &out);
  int32_t dim;
  TPURT_RETURN_IF_ERROR(tpurt_index_wrap_dim("index_select", tpurt_arg_int(call, 1, 0), s0->ndim, &dim));
  int64_t n = tpurt_tensor_numel(idx);
  if (out.ndim != self.ndim || out.sizes[dim] != n || out.dtype != self.dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "index_select: out shape/dtype does not match");
  if (tpurt_tensor_numel(&out) == 0) {
    /* still check the indices: PyTorch raises on a bad index even then */
    if (n == 0) return TPURT_OK;
  }
  int64_t* off;
  tpurt_status_t st = load_all(ctx, "index_select", idx, dim, self.sizes[dim], false, &off);
  /* CPU's kernel for dim 1 (index_select_out_cpu_dim1_) raises RuntimeError, the others IndexError */
  if (st && s0->ndim > 1 && dim == 1)
    st = out_of_range_as_invalid(st);
  TPURT_RETURN_IF_ERROR(st);
  if (tpurt_tensor_numel(&out) == 0) return TPURT_OK;
  size_t es = tpurt_dtype_size(self.dtype);
  if (reference) {
    int64_t total = tpurt_tensor_numel(&out);
    for (int64_t l = 0; l < total; ++l) {
      int64_t rem = l, so = 0;
      for (int32_t d = out.ndim - 1; d >= 0; --d) {
        int64_t p = rem % out.sizes[d];
        rem /= out.sizes[d];
        so += (d == dim ? off[p] : p) * self.strides[d];
      }
      memcpy((char*)out.data + tpurt_index_offset(&out, l) * (int64_t)es, (const char*)self.data + so * (int64_t)es, es);
    }
    return TPURT_OK;
  }
  for (int64_t j = 0; j < n; ++j) off[j] *= self.strides[dim];
  tpurt_index_space_t sp;
  tpurt_index_space_init(&sp, 3);
  for (int32_t d = 0; d < out.ndim; ++d) {
    int64_t st[3] = {out.strides[d], d == dim ? 0 : self.strides[d], d == dim ? 1 : 0};
    tpurt_index_space_push(&sp, out.sizes[d], st);
  }
  tpurt_index_space_coalesce(&sp);
  tpurt_index_gather_run(ctx, &sp, (char*)out.data, (const char*)self.data, off, es);
  return TPURT_OK;
}
tpurt_status_t tpurt_index_k_index_select(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return index_select_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_index_select(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return index_select_impl(ctx, call, true);
}

/* ---- index_add / index_copy / index_fill / index_reduce ----
 * out = self; for j in order: out.select(dim, index[j]) (red)= source.select(dim, j). */
static tpurt_status_t index_along_dim(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const char* op,
                                      const tpurt_tensor_t* src0, const void* scalar, tpurt_index_red_t red,
                                      bool include_self, double alpha_d, int64_t alpha_i, bool wrap,
                                      bool reference) {
  const tpurt_tensor_t* s0 = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* idx = tpurt_arg_tensor(call, 2);
  if (!s0 || !idx) return TPURT_STATUS(INVALID_ARGUMENT, "%s: self and index must be tensors", op);
  if (idx->ndim > 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: index must be 0-d or 1-d, got %d dims", op, idx->ndim);
  tpurt_tensor_t self, out, src;
  tpurt_index_as_1d(s0, &self);
  tpurt_index_as_1d(&call->outputs[0], &out);
  int32_t dim;
  TPURT_RETURN_IF_ERROR(tpurt_index_wrap_dim(op, tpurt_arg_int(call, 1, 0), s0->ndim, &dim));
  if (out.dtype != self.dtype || out.ndim != self.ndim)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: out must match self", op);
  int64_t n = tpurt_tensor_numel(idx);
  if (src0) {
    tpurt_tensor_t s1;
    tpurt_index_as_1d(src0, &s1);
    if (s1.dtype != self.dtype)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: self (%s) and source (%s) must have the same scalar type", op,
                          tpurt_dtype_name(self.dtype), tpurt_dtype_name(s1.dtype));
    bool ok = s1.ndim == self.ndim;
    for (int32_t d = 0; ok && d < s1.ndim; ++d) ok = s1.sizes[d] == (d == dim ? n : self.sizes[d]);
    if (!ok)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: source must have self's shape with dim %d of size %" PRId64, op, dim, n);
    TPURT_RETURN_IF_ERROR(private_if_overlap(ctx, op, &s1, &out, &src));
  } else {
    memset(&src, 0, sizeof(src));
    src.data = (void*)scalar;
    src.dtype = self.dtype;
    src.ndim = self.ndim;
    for (int32_t d = 0; d < self.ndim; ++d) src.sizes[d] = d == dim ? n : self.sizes[d];
  }
  int64_t* off = NULL;
  if (n > 0) {
    tpurt_status_t st = load_all(ctx, op, idx, dim, self.sizes[dim], wrap, &off);
    /* CPU's index_add raises RuntimeError (index_copy/fill/reduce IndexError) */
    if (st && strcmp(op, "index_add") == 0) st = out_of_range_as_invalid(st);
    TPURT_RETURN_IF_ERROR(st);
  }
  TPURT_RETURN_IF_ERROR(tpurt_index_copy(ctx, &out, &self));
  int64_t fibers = 1;
  for (int32_t d = 0; d < self.ndim; ++d)
    if (d != dim) fibers *= self.sizes[d];
  if (n == 0 || fibers == 0) return TPURT_OK;
  size_t es = tpurt_dtype_size(self.dtype);
  if (reference) {
    tpurt_index_accum_fn_t fn = tpurt_index_accum_fn(self.dtype, red);
    if (!fn) return TPURT_STATUS(UNIMPLEMENTED, "%s: dtype %s", op, tpurt_dtype_name(self.dtype));
    int64_t total = n * fibers;
    int64_t* counts = NULL;
    int64_t on = tpurt_tensor_numel(&out);
    if (red == TPURT_INDEX_RED_MEAN) {
      if (!tpurt_tensor_is_contiguous(&out))
        return TPURT_STATUS(UNIMPLEMENTED, "%s reference: mean needs a contiguous out", op);
      counts = tpurt_kernel_scratch(ctx, (size_t)(on + 1) * sizeof(int64_t));
      if (!counts) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", op);
      memset(counts, 0, (size_t)(on + 1) * sizeof(int64_t));
    }
    unsigned char ident[16];
    tpurt_index_red_identity(self.dtype, red, ident);
    /* row-major over source's shape: j varies in order for each destination */
    for (int pass = include_self || red == TPURT_INDEX_RED_COPY ? 1 : 0; pass < 2; ++pass) {
      for (int64_t l = 0; l < total; ++l) {
        int64_t rem = l, oo = 0, so = 0;
        for (int32_t d = src.ndim - 1; d >= 0; --d) {
          int64_t p = rem % src.sizes[d];
          rem /= src.sizes[d];
          oo += (d == dim ? off[p] : p) * out.strides[d];
          so += p * src.strides[d];
        }
        char* dp = (char*)out.data + oo * (int64_t)es;
        if (pass == 0) { memcpy(dp, ident, es); continue; }
        fn(dp, (const char*)src.data + so * (int64_t)es, alpha_d, alpha_i);
        if (counts) counts[oo]++;
      }
    }
    if (counts)
      for (int64_t o = 0; o < on; ++o)
        if (counts[o]) tpurt_index_div_count(self.dtype, (char*)out.data + o * (int64_t)es, counts[o] + include_self);
    return TPURT_OK;
  }
  for (int64_t j = 0; j < n; ++j) off[j] *= out.strides[dim];
  tpurt_index_scatter_t job;
  tpurt_index_scatter_init(&job, self.dtype, red);
  job.include_self = include_self;
  job.alpha_d = alpha_d;
  job.alpha_i = alpha_i;
  job.out = (char*)out.data;
  job.src = (const char*)src.data;
  job.off = off;
  job.J = n;
  job.src_j = src.strides[dim];
  job.off_j = 1;
  job.out_t = &out;
  tpurt_index_space_init(&job.sp, 3);
  for (int32_t d = 0; d < self.ndim; ++d) {
    if (d == dim) continue;
    int64_t st[3] = {out.strides[d], src.strides[d], 0};
    tpurt_index_space_push(&job.sp, self.sizes[d], st);
  }
  tpurt_index_space_coalesce(&job.sp);
  return tpurt_index_scatter_run(ctx, &job);
}

/* index_add(self, dim, index, source, alpha=1) */
static tpurt_status_t index_add_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 4, 1));
  double ad = tpurt_arg_double(call, 4, 1.0);
  int64_t ai = tpurt_arg_int(call, 4, 1);
  const tpurt_tensor_t* s0 = tpurt_arg_tensor(call, 0);
  if (s0 && !tpurt_dtype_is_floating(s0->dtype) && tpurt_arg_is(call, 4, TPURT_ARG_DOUBLE) && ad != (double)ai)
    return TPURT_STATUS(INVALID_ARGUMENT, "index_add: a float alpha (%g) with integral self %s", ad,
                        tpurt_dtype_name(s0->dtype));
  return index_along_dim(ctx, call, "index_add", tpurt_arg_tensor(call, 3), NULL, TPURT_INDEX_RED_SUM, true, ad,
                         ai, false, reference);
}
tpurt_status_t tpurt_index_k_index_add(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return index_add_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_index_add(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return index_add_impl(ctx, call, true);
}

static tpurt_status_t index_copy_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 4, 1));
  const tpurt_tensor_t* src = tpurt_arg_tensor(call, 3);
  if (!src) return TPURT_STATUS(INVALID_ARGUMENT, "index_copy: source must be a tensor");
  return index_along_dim(ctx, call, "index_copy", src, NULL, TPURT_INDEX_RED_COPY, true, 1.0, 1, false, reference);
}
tpurt_status_t tpurt_index_k_index_copy(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return index_copy_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_index_copy(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return index_copy_impl(ctx, call, true);
}

/* index_fill(self, dim, index, value: Scalar or 0-d Tensor) */
static tpurt_status_t index_fill_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 4, 1));
  const tpurt_tensor_t* s0 = tpurt_arg_tensor(call, 0);
  if (!s0) return TPURT_STATUS(INVALID_ARGUMENT, "index_fill: self must be a tensor");
  const tpurt_tensor_t* vt = tpurt_arg_tensor(call, 3);
  if (vt && vt->ndim != 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "index_fill: only supports a 0-dimensional value tensor, got %d dims",
                        vt->ndim);
  uint64_t scalar = 0;
  TPURT_RETURN_IF_ERROR(tpurt_arg_scalar_store(call, 3, s0->dtype, &scalar));
  return index_along_dim(ctx, call, "index_fill", NULL, &scalar, TPURT_INDEX_RED_COPY, true, 1.0, 1, true, reference);
}
tpurt_status_t tpurt_index_k_index_fill(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return index_fill_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_index_fill(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return index_fill_impl(ctx, call, true);
}

/* index_reduce(self, dim, index, source, reduce, include_self=True) */
static tpurt_status_t index_reduce_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 5, 1));
  const char* rs = tpurt_arg_string(call, 4, NULL);
  int r = tpurt_index_red_parse(rs);
  if (r < 0 || r == TPURT_INDEX_RED_SUM)
    return TPURT_STATUS(INVALID_ARGUMENT, "index_reduce: reduce argument must be one of prod, mean, amax, amin, got %s",
                        rs ? rs : "(none)");
  const tpurt_tensor_t* src = tpurt_arg_tensor(call, 3);
  if (!src) return TPURT_STATUS(INVALID_ARGUMENT, "index_reduce: source must be a tensor");
  return index_along_dim(ctx, call, "index_reduce", src, NULL, (tpurt_index_red_t)r,
                         tpurt_arg_bool(call, 5, true), 1.0, 1, false, reference);
}
tpurt_status_t tpurt_index_k_index_reduce(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return index_reduce_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_index_reduce(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return index_reduce_impl(ctx, call, true);
}

/* ---- take / put_ (indices into the row-major flattening of self) ---- */

static tpurt_status_t take_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 2, 1));
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* idx = tpurt_arg_tensor(call, 1);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (!self || !idx) return TPURT_STATUS(INVALID_ARGUMENT, "take: self and index must be tensors");
  if (out->dtype != self->dtype || tpurt_tensor_numel(out) != tpurt_tensor_numel(idx))
    return TPURT_STATUS(INVALID_ARGUMENT, "take: out must have index's shape and self's dtype");
  int64_t n = tpurt_tensor_numel(idx);
  if (n == 0) return TPURT_OK;
  int64_t* off;
  TPURT_RETURN_IF_ERROR(load_all(ctx, "take", idx, 0, tpurt_tensor_numel(self), true, &off));
  size_t es = tpurt_dtype_size(self->dtype);
  for (int64_t l = 0; l < n; ++l) off[l] = tpurt_index_offset(self, off[l]);
  if (reference) {
    for (int64_t l = 0; l < n; ++l)
      memcpy((char*)out->data + tpurt_index_offset(out, l) * (int64_t)es, (const char*)self->data + off[l] * (int64_t)es,
             es);
    return TPURT_OK;
  }
  int64_t ist[TPURT_MAX_DIMS];
  contig_strides(out->ndim, out->sizes, ist);
  tpurt_index_space_t sp;
  tpurt_index_space_init(&sp, 3);
  for (int32_t d = 0; d < out->ndim; ++d) {
    int64_t st[3] = {out->strides[d], 0, ist[d]};
    tpurt_index_space_push(&sp, out->sizes[d], st);
  }
  tpurt_index_space_coalesce(&sp);
  tpurt_index_gather_run(ctx, &sp, (char*)out->data, (const char*)self->data, off, es);
  return TPURT_OK;
}
tpurt_status_t tpurt_index_k_take(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return take_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_take(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return take_impl(ctx, call, true);
}

/* put_(self, index, source, accumulate=False) */
static tpurt_status_t put_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 3, 1));
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* idx = tpurt_arg_tensor(call, 1);
  const tpurt_tensor_t* s0 = tpurt_arg_tensor(call, 2);
  const tpurt_tensor_t* out = &call->outputs[0];
  bool acc = tpurt_arg_bool(call, 3, false);
  if (!self || !idx || !s0) return TPURT_STATUS(INVALID_ARGUMENT, "put_: self, index and source must be tensors");
  if (s0->dtype != self->dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "put_: self (%s) and source (%s) must have the same scalar type",
                        tpurt_dtype_name(self->dtype), tpurt_dtype_name(s0->dtype));
  int64_t n = tpurt_tensor_numel(idx);
  if (tpurt_tensor_numel(s0) != n)
    return TPURT_STATUS(INVALID_ARGUMENT, "put_: expected source to have %" PRId64 " elements, got %" PRId64, n,
                        tpurt_tensor_numel(s0));
  int64_t* off = NULL;
  if (n > 0) TPURT_RETURN_IF_ERROR(load_all(ctx, "put_", idx, 0, tpurt_tensor_numel(self), true, &off));
  /* source read in row-major order: keep a contiguous private copy unless it already is one */
  tpurt_tensor_t src = *s0;
  if (!tpurt_tensor_is_contiguous(s0) || tpurt_index_may_overlap(s0, out)) {
    void* buf = tpurt_kernel_scratch(ctx, (size_t)(n + 1) * tpurt_dtype_size(s0->dtype));
    if (!buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "put_: no scratch");
    tpurt_index_make_contig(&src, buf, s0->dtype, s0->ndim, s0->sizes);
    TPURT_RETURN_IF_ERROR(tpurt_index_copy(ctx, &src, s0));
  }
  TPURT_RETURN_IF_ERROR(tpurt_index_copy(ctx, out, self));
  if (n == 0) return TPURT_OK;
  for (int64_t l = 0; l < n; ++l) off[l] = tpurt_index_offset(out, off[l]);
  tpurt_index_red_t red = acc ? TPURT_INDEX_RED_SUM : TPURT_INDEX_RED_COPY;
  size_t es = tpurt_dtype_size(self->dtype);
  if (reference) {
    tpurt_index_accum_fn_t fn = tpurt_index_accum_fn(self->dtype, red);
    for (int64_t l = 0; l < n; ++l)
      fn((char*)out->data + off[l] * (int64_t)es, (const char*)src.data + l * (int64_t)es, 1.0, 1);
    return TPURT_OK;
  }
  tpurt_index_scatter_t job;
  tpurt_index_scatter_init(&job, self->dtype, red);
  job.out = (char*)out->data;
  job.src = (const char*)src.data;
  job.off = off;
  job.J = n;
  job.src_j = 1;
  job.off_j = 1;
  job.out_t = out;
  tpurt_index_space_init(&job.sp, 3); /* one fiber: the whole tensor */
  return tpurt_index_scatter_run(ctx, &job);
}
tpurt_status_t tpurt_index_k_put(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return put_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_put(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return put_impl(ctx, call, true);
}

/* ---- embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq) ----
 * grad_weight[indices[i], :] += grad_output[i, :] (grad_output viewed as [numel(indices), D]);
 * the padding_idx row stays zero; with scale_grad_by_freq each row is divided
 * by how often its index occurs. */
static tpurt_status_t embedding_bwd_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 5, 1));
  const tpurt_tensor_t* g0 = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* idx = tpurt_arg_tensor(call, 1);
  const tpurt_tensor_t* out = &call->outputs[0];
  int64_t num_weights = tpurt_arg_int(call, 2, 0);
  int64_t padding_idx = tpurt_arg_int(call, 3, -1);
  bool scale = tpurt_arg_bool(call, 4, false);
  const char* op = "embedding_dense_backward";
  if (!g0 || !idx) return TPURT_STATUS(INVALID_ARGUMENT, "%s: grad_output and indices must be tensors", op);
  int64_t N = tpurt_tensor_numel(idx);
  int64_t D = g0->ndim > 0 ? g0->sizes[g0->ndim - 1] : 1;
  if (out->ndim != 2 || out->sizes[0] != num_weights || out->sizes[1] != D || out->dtype != g0->dtype ||
      tpurt_tensor_numel(g0) != N * D)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected out [%" PRId64 ", %" PRId64 "] of grad's dtype", op, num_weights, D);
  unsigned char zero[8] = {0};
  tpurt_index_fill(ctx, out, zero);
  if (N == 0 || D == 0) return TPURT_OK;
  int64_t* off;
  TPURT_RETURN_IF_ERROR(load_all(ctx, op, idx, 0, num_weights, false, &off));
  /* grad rows: [N, D] row-major; a non-contiguous grad is read from a contiguous copy */
  tpurt_tensor_t g = *g0;
  if (!tpurt_tensor_is_contiguous(g0)) {
    void* buf = tpurt_kernel_scratch(ctx, (size_t)(N * D) * tpurt_dtype_size(g0->dtype));
    if (!buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", op);
    tpurt_index_make_contig(&g, buf, g0->dtype, g0->ndim, g0->sizes);
    TPURT_RETURN_IF_ERROR(tpurt_index_copy(ctx, &g, g0));
  }
  int64_t row_stride = D, col_stride = 1;
  size_t es = tpurt_dtype_size(g.dtype);
  tpurt_index_accum_fn_t fn = tpurt_index_accum_fn(g.dtype, TPURT_INDEX_RED_SUM);
  if (!fn) return TPURT_STATUS(UNIMPLEMENTED, "%s: dtype %s", op, tpurt_dtype_name(g.dtype));
  if (reference) {
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < D; ++c)
        fn((char*)out->data + (off[i] * out->strides[0] + c * out->strides[1]) * (int64_t)es,
           (const char*)g.data + (i * row_stride + c * col_stride) * (int64_t)es, 1.0, 1);
  } else {
    int64_t* rows = tpurt_kernel_scratch(ctx, (size_t)N * sizeof(int64_t));
    if (!rows) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", op);
    for (int64_t i = 0; i < N; ++i) rows[i] = off[i] * out->strides[0];
    tpurt_index_scatter_t job;
    tpurt_index_scatter_init(&job, g.dtype, TPURT_INDEX_RED_SUM);
    job.out = (char*)out->data;
    job.src = (const char*)g.data;
    job.off = rows;
    job.J = N;
    job.src_j = row_stride;
    job.off_j = 1;
    job.out_t = out;
    tpurt_index_space_init(&job.sp, 3);
    int64_t st[3] = {out->strides[1], col_stride, 0};
    tpurt_index_space_push(&job.sp, D, st);
    TPURT_RETURN_IF_ERROR(tpurt_index_scatter_run(ctx, &job));
  }
  if (scale) {
    int64_t* counts = tpurt_kernel_scratch(ctx, (size_t)(num_weights + 1) * sizeof(int64_t));
    if (!counts) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", op);
    memset(counts, 0, (size_t)(num_weights + 1) * sizeof(int64_t));
    for (int64_t i = 0; i < N; ++i) counts[off[i]]++;
    for (int64_t r = 0; r < num_weights; ++r) {
      if (counts[r] <= 1) continue;
      for (int64_t c = 0; c < D; ++c) {
        char* p = (char*)out->data + (r * out->strides[0] + c * out->strides[1]) * (int64_t)es;
        tpurt_dtype_store_f64(g.dtype, p, tpurt_dtype_load_f64(g.dtype, p) / (double)counts[r]);
      }
    }
  }
  if (padding_idx >= 0 && padding_idx < num_weights) {
    tpurt_tensor_t row = *out;
    row.ndim = 1;
    row.data = (char*)out->data + padding_idx * out->strides[0] * (int64_t)es;
    row.sizes[0] = D;
    row.strides[0] = out->strides[1];
    tpurt_index_fill(ctx, &row, zero);
  }
  return TPURT_OK;
}
tpurt_status_t tpurt_index_k_embedding_dense_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return embedding_bwd_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_embedding_dense_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return embedding_bwd_impl(ctx, call, true);
}

/* ---- embedding_renorm_(self, indices, max_norm, norm_type) ----
 * Each distinct row self[indices[i]] whose p-norm exceeds max_norm is scaled by
 * max_norm / (norm + 1e-7), as PyTorch CPU does: the norm is rounded to self's
 * dtype first (CPU takes row.norm(p).item()), the scale multiplies in float for
 * float32 and 16-bit rows (opmath of row *= scale) and in double for float64.
 * Rows are independent, so the optimized kernel runs them in parallel. */
typedef struct renorm_t {
  const tpurt_tensor_t* out;
  const int64_t* rows; /* distinct row numbers */
  double max_norm, p;
} renorm_t;

static void renorm_rows(void* u, int64_t r0, int64_t r1, int tid) {
  const renorm_t* t = u;
  const tpurt_tensor_t* o = t->out;
  tpurt_dtype_t dt = o->dtype;
  size_t es = tpurt_dtype_size(dt);
  int64_t D = o->sizes[1];
  for (int64_t r = r0; r < r1; ++r) {
    char* base = (char*)o->data + t->rows[r] * o->strides[0] * (int64_t)es;
    double acc = 0;
    for (int64_t c = 0; c < D; ++c) {
      double a = fabs(tpurt_dtype_load_f64(dt, base + c * o->strides[1] * (int64_t)es));
      if (isinf(t->p)) acc = t->p > 0 ? (c == 0 || a > acc ? a : acc) : (c == 0 || a < acc ? a : acc);
      else if (t->p == 0) acc += a != 0;
      else if (t->p == 1) acc += a;
      else if (t->p == 2) acc += a * a;
      else acc += pow(a, t->p);
    }
    double norm = isinf(t->p) || t->p == 0 || t->p == 1 ? acc : t->p == 2 ? sqrt(acc) : pow(acc, 1.0 / t->p);
    unsigned char tmp[8];
    tpurt_dtype_store_f64(dt, tmp, norm); /* rounded to self's dtype */
    norm = tpurt_dtype_load_f64(dt, tmp);
    if (!(norm > t->max_norm)) continue;
    double scale = t->max_norm / (norm + 1e-7);
    for (int64_t c = 0; c < D; ++c) {
      char* e = base + c * o->strides[1] * (int64_t)es;
      double v = tpurt_dtype_load_f64(dt, e);
      tpurt_dtype_store_f64(dt, e, dt == TPURT_DTYPE_FLOAT64 ? v * scale : (double)((float)v * (float)scale));
    }
  }
}

static tpurt_status_t embedding_renorm_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  const char* op = "embedding_renorm_";
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 4, 1));
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* idx = tpurt_arg_tensor(call, 1);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (!self || !idx) return TPURT_STATUS(INVALID_ARGUMENT, "%s: self and indices must be tensors", op);
  double max_norm = tpurt_arg_double(call, 2, NAN), p = tpurt_arg_double(call, 3, NAN);
  if (isnan(max_norm) || isnan(p)) return TPURT_STATUS(INVALID_ARGUMENT, "%s: max_norm and norm_type must be numbers", op);
  if (!tpurt_dtype_is_floating(self->dtype))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: dtype %s (floating point supported)", op, tpurt_dtype_name(self->dtype));
  if (self->ndim != 2 || out->ndim != 2 || out->dtype != self->dtype || out->sizes[0] != self->sizes[0] ||
      out->sizes[1] != self->sizes[1])
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: self must be a 2-D matrix (got %d-D) and out must match it", op,
                        (int)self->ndim);
  if (idx->dtype != TPURT_DTYPE_INT64 && idx->dtype != TPURT_DTYPE_INT32)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: indices must be int64 or int32, got %s", op,
                        tpurt_dtype_name(idx->dtype));
  TPURT_RETURN_IF_ERROR(tpurt_index_copy(ctx, out, self));
  int64_t n = tpurt_tensor_numel(idx), R = self->sizes[0];
  if (n == 0 || tpurt_tensor_numel(self) == 0) return TPURT_OK;
  int64_t* off;
  TPURT_RETURN_IF_ERROR(load_all(ctx, op, idx, 0, R, false, &off));
  /* distinct rows, first occurrence order (each row is renormed once) */
  unsigned char* seen = tpurt_kernel_scratch(ctx, (size_t)R);
  int64_t* rows = tpurt_kernel_scratch(ctx, (size_t)n * sizeof(int64_t));
  if (!seen || !rows) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", op);
  memset(seen, 0, (size_t)R);
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i)
    if (!seen[off[i]]) seen[off[i]] = 1, rows[m++] = off[i];
  renorm_t t = {out, rows, max_norm, p};
  if (reference) renorm_rows(&t, 0, m, 0);
  else tpurt_parallel_for(ctx, m, 16, renorm_rows, &t);
  return TPURT_OK;
}
tpurt_status_t tpurt_index_k_embedding_renorm(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return embedding_renorm_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_embedding_renorm(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return embedding_renorm_impl(ctx, call, true);
}
