/* Shape-moving copies: cat, flip, roll, tril/triu, repeat_interleave and
 * unfold_backward. The optimized kernels express each as a few strided block
 * copies (tpurt_index_copy), the references as one loop over elements. */
#include <inttypes.h>
#include <stdlib.h>

#include "ops/index/index_common.h"
#include "ops/index/index_kernels.h"

/* Decomposes row-major `l` over t's shape into a position. */
static void unravel(const tpurt_tensor_t* t, int64_t l, int64_t* pos) {
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    pos[d] = l % t->sizes[d];
    l /= t->sizes[d];
  }
}
static int64_t dot(const int64_t* pos, const int64_t* st, int32_t nd) {
  int64_t o = 0;
  for (int32_t d = 0; d < nd; ++d) o += pos[d] * st[d];
  return o;
}

/* ---- cat(tensors, dim) ---- */

static bool cat_skipped(const tpurt_tensor_t* t) {
  /* PyTorch's legacy rule: 1-d empty tensors are ignored whatever the shape */
  return t->ndim == 1 && t->sizes[0] == 0;
}

/* A small input and output both contiguous, of one dtype: the input is `outer` rows of
 * t->sizes[dim] x inner elements, each one memcpy to its place in a row of the output (a decode
 * step's key/value cache append). The strided copy's walk and thread split cost more than such a
 * copy. False: not this case (or the two overlap), for the strided copy. */
enum { CAT_ROWS_MAX_BYTES = 64 << 10 };
static bool cat_rows(const tpurt_tensor_t* out, void* dst, const tpurt_tensor_t* t, int32_t dim) {
  if (t->dtype != out->dtype || !tpurt_tensor_is_contiguous(t) || !tpurt_tensor_is_contiguous(out)) return false;
  int64_t outer = 1, inner = 1;
  for (int32_t d = 0; d < dim; ++d) outer *= out->sizes[d];
  for (int32_t d = dim + 1; d < out->ndim; ++d) inner *= out->sizes[d];
  size_t es = tpurt_dtype_size(t->dtype);
  size_t row = (size_t)(t->sizes[dim] * inner) * es, out_row = (size_t)(out->sizes[dim] * inner) * es;
  size_t in_bytes = row * (size_t)outer, out_bytes = out_row * (size_t)outer;
  if (in_bytes > CAT_ROWS_MAX_BYTES) return false;
  const char *ib = t->data, *ob = out->data;
  if (ib < ob + out_bytes && ob < ib + in_bytes) return false;
  for (int64_t r = 0; r < outer; ++r) memcpy((char*)dst + (size_t)r * out_row, ib + (size_t)r * row, row);
  return true;
}

static tpurt_status_t cat_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 1, 1));
  int32_t count;
  const tpurt_tensor_t* const* list = tpurt_arg_tensors(call, 0, &count);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (!list) return TPURT_STATUS(INVALID_ARGUMENT, "cat: expected a list of tensors");
  int32_t dim = 0;
  /* only legacy empties: nothing to write, and dim may exceed their one dim (CPU returns an empty tensor) */
  bool any = false;
  for (int32_t i = 0; i < count; ++i) any |= !list[i] || !cat_skipped(list[i]);
  if (!any && tpurt_tensor_numel(out) == 0) return TPURT_OK;
  if (out->ndim == 0) return TPURT_STATUS(INVALID_ARGUMENT, "cat: zero-dimensional tensor cannot be concatenated");
  TPURT_RETURN_IF_ERROR(tpurt_index_wrap_dim("cat", tpurt_arg_int(call, 1, 0), out->ndim, &dim));
  /* validate before writing anything */
  int64_t total = 0;
  for (int32_t i = 0; i < count; ++i) {
    const tpurt_tensor_t* t = list[i];
    if (!t) return TPURT_STATUS(INVALID_ARGUMENT, "cat: tensor %d is None", i);
    if (cat_skipped(t)) continue;
    if (t->ndim != out->ndim)
      return TPURT_STATUS(INVALID_ARGUMENT, "cat: tensors must have same number of dimensions: got %d and %d",
                          out->ndim, t->ndim);
    for (int32_t d = 0; d < out->ndim; ++d)
      if (d != dim && t->sizes[d] != out->sizes[d])
        return TPURT_STATUS(INVALID_ARGUMENT, "cat: sizes of tensors must match except in dimension %d. Expected "
                            "size %" PRId64 " but got size %" PRId64 " for tensor number %d in the list", dim,
                            out->sizes[d], t->sizes[d], i);
    total += t->sizes[dim];
  }
  if (total != out->sizes[dim])
    return TPURT_STATUS(INVALID_ARGUMENT, "cat: out has size %" PRId64 " at dim %d, inputs sum to %" PRId64,
                        out->sizes[dim], dim, total);
  int64_t at = 0;
  size_t oes = tpurt_dtype_size(out->dtype);
  for (int32_t i = 0; i < count; ++i) {
    const tpurt_tensor_t* t = list[i];
    if (cat_skipped(t)) continue;
    if (tpurt_tensor_numel(t) == 0) {
      at += t->sizes[dim];
      continue;
    }
    tpurt_tensor_t dst = *out;
    dst.data = (char*)out->data + at * out->strides[dim] * (int64_t)oes;
    dst.sizes[dim] = t->sizes[dim];
    if (reference) {
      int64_t n = tpurt_tensor_numel(t), pos[TPURT_MAX_DIMS];
      size_t ies = tpurt_dtype_size(t->dtype);
      for (int64_t l = 0; l < n; ++l) {
        unravel(t, l, pos);
        tpurt_dtype_convert(out->dtype, (char*)dst.data + dot(pos, dst.strides, dst.ndim) * (int64_t)oes, t->dtype,
                            (const char*)t->data + dot(pos, t->strides, t->ndim) * (int64_t)ies, 1);
      }
    } else if (!cat_rows(out, dst.data, t, dim)) {
      TPURT_RETURN_IF_ERROR(tpurt_index_copy(ctx, &dst, t));
    }
    at += t->sizes[dim];
  }
  return TPURT_OK;
}
tpurt_status_t tpurt_index_k_cat(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return cat_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_cat(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return cat_impl(ctx, call, true);
}

/* ---- flip(self, dims) ---- */

static tpurt_status_t flip_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 2, 1));
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (!self) return TPURT_STATUS(INVALID_ARGUMENT, "flip: self must be a tensor");
  bool flip[TPURT_MAX_DIMS] = {0};
  int64_t one;
  int32_t cnt;
  const int64_t* dims = tpurt_arg_int_list(call, 1, &one, &cnt);
  for (int32_t i = 0; i < cnt; ++i) {
    int32_t d;
    TPURT_RETURN_IF_ERROR(tpurt_index_wrap_dim("flip", dims[i], self->ndim, &d));
    if (self->ndim == 0) continue;
    if (flip[d]) return TPURT_STATUS(INVALID_ARGUMENT, "flip: dim %d appears multiple times in the list of dims", d);
    flip[d] = true;
  }
  if (out->ndim != self->ndim || tpurt_tensor_numel(out) != tpurt_tensor_numel(self) || out->dtype != self->dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "flip: out must match self");
  if (tpurt_tensor_numel(self) == 0) return TPURT_OK;
  size_t es = tpurt_dtype_size(self->dtype);
  if (reference) {
    int64_t n = tpurt_tensor_numel(self), pos[TPURT_MAX_DIMS];
    for (int64_t l = 0; l < n; ++l) {
      unravel(self, l, pos);
      int64_t oo = dot(pos, out->strides, out->ndim);
      for (int32_t d = 0; d < self->ndim; ++d)
        if (flip[d]) pos[d] = self->sizes[d] - 1 - pos[d];
      memcpy((char*)out->data + oo * (int64_t)es, (const char*)self->data + dot(pos, self->strides, self->ndim) * (int64_t)es, es);
    }
    return TPURT_OK;
  }
  /* a view of self walking the flipped dims backwards */
  tpurt_tensor_t v = *self;
  int64_t shift = 0;
  for (int32_t d = 0; d < self->ndim; ++d) {
    if (!flip[d]) continue;
    shift += (self->sizes[d] - 1) * self->strides[d];
    v.strides[d] = -self->strides[d];
  }
  v.data = (char*)self->data + shift * (int64_t)es;
  if (tpurt_index_may_overlap(out, self)) {
    void* buf = tpurt_kernel_scratch(ctx, (size_t)tpurt_tensor_numel(self) * es);
    if (!buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "flip: no scratch");
    tpurt_tensor_t tmp;
    tpurt_index_make_contig(&tmp, buf, self->dtype, self->ndim, self->sizes);
    TPURT_RETURN_IF_ERROR(tpurt_index_copy(ctx, &tmp, &v));
    return tpurt_index_copy(ctx, out, &tmp);
  }
  return tpurt_index_copy(ctx, out, &v);
}
tpurt_status_t tpurt_index_k_flip(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return flip_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_flip(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return flip_impl(ctx, call, true);
}

/* ---- roll(self, shifts, dims) ---- */

static tpurt_status_t roll_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 2, 1));
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (!self) return TPURT_STATUS(INVALID_ARGUMENT, "roll: self must be a tensor");
  int64_t one_shift, one_dim;
  int32_t ns, ndims;
  const int64_t* shifts = tpurt_arg_int_list(call, 1, &one_shift, &ns);
  const int64_t* dims = tpurt_arg_int_list(call, 2, &one_dim, &ndims);
  if (out->dtype != self->dtype || tpurt_tensor_numel(out) != tpurt_tensor_numel(self))
    return TPURT_STATUS(INVALID_ARGUMENT, "roll: out must match self");
  int64_t n = tpurt_tensor_numel(self);
  size_t es = tpurt_dtype_size(self->dtype);
  if (ndims == 0) {
    if (ns != 1) return TPURT_STATUS(INVALID_ARGUMENT, "roll: shifts must have one element when dims is empty, got %d", ns);
    if (n == 0) return TPURT_OK;
    int64_t s = shifts[0];
    s = ((s % n) + n) % n;
    /* flattened roll: out.flat[(l + s) % n] = self.flat[l] */
    for (int64_t l = 0; l < n; ++l) {
      int64_t m = l + s >= n ? l + s - n : l + s;
      memcpy((char*)out->data + tpurt_index_offset(out, m) * (int64_t)es,
             (const char*)self->data + tpurt_index_offset(self, l) * (int64_t)es, es);
    }
    return TPURT_OK;
  }
  if (ns != ndims)
    return TPURT_STATUS(INVALID_ARGUMENT, "roll: shifts and dimensions must align. shifts: %d, dims: %d", ns, ndims);
  if (out->ndim != self->ndim) return TPURT_STATUS(INVALID_ARGUMENT, "roll: out must match self");
  int64_t shift[TPURT_MAX_DIMS] = {0};
  for (int32_t i = 0; i < ndims; ++i) {
    int32_t d;
    TPURT_RETURN_IF_ERROR(tpurt_index_wrap_dim("roll", dims[i], self->ndim, &d));
    if (self->ndim == 0) continue;
    shift[d] += shifts[i];
  }
  if (n == 0) return TPURT_OK;
  for (int32_t d = 0; d < self->ndim; ++d) shift[d] = ((shift[d] % self->sizes[d]) + self->sizes[d]) % self->sizes[d];
  if (reference) {
    int64_t pos[TPURT_MAX_DIMS];
    for (int64_t l = 0; l < n; ++l) {
      unravel(self, l, pos);
      int64_t so = dot(pos, self->strides, self->ndim);
      for (int32_t d = 0; d < self->ndim; ++d) pos[d] = (pos[d] + shift[d]) % self->sizes[d];
      memcpy((char*)out->data + dot(pos, out->strides, out->ndim) * (int64_t)es, (const char*)self->data + so * (int64_t)es, es);
    }
    return TPURT_OK;
  }
  /* 2^k block copies, k = rolled dims: out[s:] <- self[:size-s], out[:s] <- self[size-s:] */
  int32_t rd[TPURT_MAX_DIMS], k = 0;
  for (int32_t d = 0; d < self->ndim; ++d)
    if (shift[d]) rd[k++] = d;
  if (tpurt_index_may_overlap(out, self) && k > 0) return TPURT_STATUS(UNIMPLEMENTED, "roll: out overlaps self");
  for (int32_t mask = 0; mask < (1 << k); ++mask) {
    tpurt_tensor_t dst = *out, src = *self;
    bool empty = false;
    for (int32_t i = 0; i < k; ++i) {
      int32_t d = rd[i];
      int64_t sz = self->sizes[d], s = shift[d];
      int64_t dst0, src0, len;
      if (mask & (1 << i)) { dst0 = 0; src0 = sz - s; len = s; }
      else { dst0 = s; src0 = 0; len = sz - s; }
      if (len == 0) empty = true;
      dst.data = (char*)dst.data + dst0 * out->strides[d] * (int64_t)es;
      src.data = (char*)src.data + src0 * self->strides[d] * (int64_t)es;
      dst.sizes[d] = src.sizes[d] = len;
    }
    if (!empty) TPURT_RETURN_IF_ERROR(tpurt_index_copy(ctx, &dst, &src));
  }
  return TPURT_OK;
}
tpurt_status_t tpurt_index_k_roll(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return roll_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_roll(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return roll_impl(ctx, call, true);
}

/* ---- tril / triu(self, diagonal) ---- */

typedef struct {
  const tpurt_tensor_t* out;
  int64_t diag;
  bool upper;
} tri_job_t;

static void tri_rows(void* user, int64_t begin, int64_t end, int tid) {
  tri_job_t* j = (tri_job_t*)user;
  const tpurt_tensor_t* o = j->out;
  int32_t nd = o->ndim;
  int64_t R = o->sizes[nd - 2], C = o->sizes[nd - 1];
  size_t es = tpurt_dtype_size(o->dtype);
  int64_t cs = o->strides[nd - 1] * (int64_t)es;
  for (int64_t r = begin; r < end; ++r) {
    int64_t i = r % R, rem = r / R, base = i * o->strides[nd - 2];
    for (int32_t d = nd - 3; d >= 0; --d) {
      base += (rem % o->sizes[d]) * o->strides[d];
      rem /= o->sizes[d];
    }
    /* zeroed columns: tril keeps j <= i + diag; triu keeps j >= i + diag */
    int64_t lo, hi;
    if (j->upper) { lo = 0; hi = i + j->diag; }
    else { lo = i + j->diag + 1; hi = C; }
    if (lo < 0) lo = 0;
    if (hi > C) hi = C;
    char* p = (char*)o->data + base * (int64_t)es;
    for (int64_t c = lo; c < hi; ++c) memset(p + c * cs, 0, es);
  }
}

static tpurt_status_t tri_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool upper, bool reference) {
  const char* op = upper ? "triu" : "tril";
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 1, 1));
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (!self) return TPURT_STATUS(INVALID_ARGUMENT, "%s: self must be a tensor", op);
  if (self->ndim < 2) return TPURT_STATUS(INVALID_ARGUMENT, "%s: input tensor must have at least 2 dimensions", op);
  if (out->ndim != self->ndim || out->dtype != self->dtype || tpurt_tensor_numel(out) != tpurt_tensor_numel(self))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: out must match self", op);
  int64_t diag = tpurt_arg_int(call, 1, 0);
  int64_t n = tpurt_tensor_numel(self);
  if (n == 0) return TPURT_OK;
  size_t es = tpurt_dtype_size(self->dtype);
  int32_t nd = self->ndim;
  if (reference) {
    int64_t pos[TPURT_MAX_DIMS];
    unsigned char zero[16] = {0}; /* complex128 elements too (cx_extra.c's complex::tril/triu) */
    /* self may alias out: read each element before writing it */
    for (int64_t l = 0; l < n; ++l) {
      unravel(self, l, pos);
      int64_t i = pos[nd - 2], c = pos[nd - 1];
      bool keep = upper ? c - i >= diag : c - i <= diag;
      unsigned char v[16];
      memcpy(v, (const char*)self->data + dot(pos, self->strides, nd) * (int64_t)es, es);
      memcpy((char*)out->data + dot(pos, out->strides, nd) * (int64_t)es, keep ? v : zero, es);
    }
    return TPURT_OK;
  }
  TPURT_RETURN_IF_ERROR(tpurt_index_copy(ctx, out, self));
  tri_job_t j = {out, diag, upper};
  int64_t rows = n / out->sizes[nd - 1];
  tpurt_parallel_for(ctx, rows, 256, tri_rows, &j);
  return TPURT_OK;
}
tpurt_status_t tpurt_index_k_tril(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tri_impl(ctx, call, false, false);
}
tpurt_status_t tpurt_index_r_tril(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tri_impl(ctx, call, false, true);
}
tpurt_status_t tpurt_index_k_triu(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tri_impl(ctx, call, true, false);
}
tpurt_status_t tpurt_index_r_triu(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tri_impl(ctx, call, true, true);
}

/* ---- repeat_interleave.Tensor(repeats, output_size=None) -> [sum(repeats)]:
 * i repeated repeats[i] times. The PyTorch layer sizes out (output_size, or
 * the sum of repeats read back). ---- */
static tpurt_status_t repeat_interleave_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 1, 1));
  const tpurt_tensor_t* rep = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (!rep || !tpurt_index_is_index_dtype(rep->dtype) || rep->ndim > 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "repeat_interleave: repeats must be a 0-d or 1-d int64/int32 tensor");
  if (out->ndim != 1) return TPURT_STATUS(INVALID_ARGUMENT, "repeat_interleave: out must be 1-d");
  int64_t n = tpurt_tensor_numel(rep), total = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = tpurt_dtype_load_i64(rep->dtype, (const char*)rep->data + tpurt_index_offset(rep, i) * (int64_t)tpurt_dtype_size(rep->dtype));
    if (r < 0) return TPURT_STATUS(INVALID_ARGUMENT, "repeat_interleave: repeats can not be negative (got %" PRId64 ")", r);
    total += r;
  }
  if (total != out->sizes[0])
    return TPURT_STATUS(INVALID_ARGUMENT, "repeat_interleave: out has %" PRId64 " elements, repeats sum to %" PRId64,
                        out->sizes[0], total);
  size_t es = tpurt_dtype_size(out->dtype);
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = tpurt_dtype_load_i64(rep->dtype, (const char*)rep->data + tpurt_index_offset(rep, i) * (int64_t)tpurt_dtype_size(rep->dtype));
    for (int64_t c = 0; c < r; ++c, ++k) tpurt_dtype_store_i64(out->dtype, (char*)out->data + k * out->strides[0] * (int64_t)es, i);
  }
  return TPURT_OK;
}
tpurt_status_t tpurt_index_k_repeat_interleave(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return repeat_interleave_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_repeat_interleave(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return repeat_interleave_impl(ctx, call, true);
}

/* ---- unfold_backward(grad_in, input_sizes, dim, size, step) ----
 * grad_in has input's shape with dim -> windows, plus a trailing dim `size`;
 * out[.., w*step + k, ..] += grad_in[.., w, .., k], summed in (w, k) order. */
typedef struct {
  const tpurt_tensor_t* g;
  const tpurt_tensor_t* out;
  int32_t dim;
  int64_t size, step, nw;
  tpurt_index_accum_fn_t fn;
  int32_t nf;            /* fiber dims (all input dims but dim) */
  int32_t fdims[TPURT_MAX_DIMS];
} unfold_job_t;

static void unfold_fibers(void* user, int64_t begin, int64_t end, int tid) {
  unfold_job_t* j = (unfold_job_t*)user;
  size_t es = tpurt_dtype_size(j->out->dtype);
  int32_t gn = j->g->ndim;
  for (int64_t f = begin; f < end; ++f) {
    int64_t rem = f, oo = 0, go = 0;
    for (int32_t i = j->nf - 1; i >= 0; --i) {
      int32_t d = j->fdims[i];
      int64_t p = rem % j->out->sizes[d];
      rem /= j->out->sizes[d];
      oo += p * j->out->strides[d];
      go += p * j->g->strides[d];
    }
    for (int64_t w = 0; w < j->nw; ++w)
      for (int64_t k = 0; k < j->size; ++k)
        j->fn((char*)j->out->data + (oo + (w * j->step + k) * j->out->strides[j->dim]) * (int64_t)es,
              (const char*)j->g->data + (go + w * j->g->strides[j->dim] + k * j->g->strides[gn - 1]) * (int64_t)es,
              1.0, 1);
  }
}

static tpurt_status_t unfold_backward_run(tpurt_kernel_ctx_t* ctx, const tpurt_tensor_t* g, const tpurt_tensor_t* out,
                                          int64_t dim_arg, int64_t size, int64_t step, bool reference);

/* A complex tensor's real (part 0) or imaginary (part 1) components as a real tensor of the same shape. */
static tpurt_tensor_t unfold_cx_part(const tpurt_tensor_t* t, int part) {
  tpurt_tensor_t v = *t;
  v.dtype = t->dtype == TPURT_DTYPE_COMPLEX64 ? TPURT_DTYPE_FLOAT32 : TPURT_DTYPE_FLOAT64;
  for (int d = 0; d < t->ndim; ++d) v.strides[d] = t->strides[d] * 2;
  v.data = (char*)t->data + (size_t)part * tpurt_dtype_size(v.dtype);
  return v;
}

static tpurt_status_t unfold_backward_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 5, 1));
  const tpurt_tensor_t* g = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (!g) return TPURT_STATUS(INVALID_ARGUMENT, "unfold_backward: grad_in must be a tensor");
  int64_t size = tpurt_arg_int(call, 3, 1), step = tpurt_arg_int(call, 4, 1), dim_arg = tpurt_arg_int(call, 2, 0);
  if (tpurt_dtype_is_complex(g->dtype) || tpurt_dtype_is_complex(out->dtype)) {
    /* a sum of windows: the real and the imaginary parts each on their own (as CPU adds them) */
    if (g->dtype != out->dtype || (g->dtype != TPURT_DTYPE_COMPLEX64 && g->dtype != TPURT_DTYPE_COMPLEX128))
      return TPURT_STATUS(UNIMPLEMENTED, "unfold_backward: dtype %s", tpurt_dtype_name(g->dtype));
    for (int part = 0; part < 2; ++part) {
      tpurt_tensor_t gp = unfold_cx_part(g, part), op = unfold_cx_part(out, part);
      TPURT_RETURN_IF_ERROR(unfold_backward_run(ctx, &gp, &op, dim_arg, size, step, reference));
    }
    return TPURT_OK;
  }
  return unfold_backward_run(ctx, g, out, dim_arg, size, step, reference);
}

static tpurt_status_t unfold_backward_run(tpurt_kernel_ctx_t* ctx, const tpurt_tensor_t* g, const tpurt_tensor_t* out,
                                          int64_t dim_arg, int64_t size, int64_t step, bool reference) {
  tpurt_tensor_t out1, g1;
  if (out->ndim == 0 && g->ndim == 1) {
    /* A 0-d input unfolds as if it were 1-d of size 1 (as CPU): grad [size] -> [1, size]. */
    out1 = *out;
    out1.ndim = 1;
    out1.sizes[0] = 1;
    out1.strides[0] = 1;
    g1 = *g;
    g1.ndim = 2;
    g1.sizes[1] = g->sizes[0];
    g1.strides[1] = g->strides[0];
    g1.sizes[0] = 1;
    g1.strides[0] = 0;
    out = &out1;
    g = &g1;
  }
  if (out->ndim == 0 || g->ndim != out->ndim + 1 || out->dtype != g->dtype || step <= 0)
    return TPURT_STATUS(UNIMPLEMENTED, "unfold_backward: %d-d input (needs >= 1-d, grad one dim more)", out->ndim);
  int32_t dim;
  TPURT_RETURN_IF_ERROR(tpurt_index_wrap_dim("unfold_backward", dim_arg, out->ndim, &dim));
  unsigned char zero[8] = {0};
  tpurt_index_fill(ctx, out, zero);
  unfold_job_t j = {g, out, dim, size, step, g->sizes[dim], tpurt_index_accum_fn(g->dtype, TPURT_INDEX_RED_SUM), 0, {0}};
  if (!j.fn) return TPURT_STATUS(UNIMPLEMENTED, "unfold_backward: dtype %s", tpurt_dtype_name(g->dtype));
  if (g->sizes[g->ndim - 1] != size || (j.nw > 0 && (j.nw - 1) * step + size > out->sizes[dim]))
    return TPURT_STATUS(INVALID_ARGUMENT, "unfold_backward: grad shape does not match size %" PRId64 " step %" PRId64,
                        size, step);
  int64_t fibers = 1;
  for (int32_t d = 0; d < out->ndim; ++d) {
    if (d == dim) continue;
    j.fdims[j.nf++] = d;
    fibers *= out->sizes[d];
  }
  if (tpurt_tensor_numel(g) == 0) return TPURT_OK;
  if (reference) unfold_fibers(&j, 0, fibers, 0);
  else tpurt_parallel_for(ctx, fibers, 16, unfold_fibers, &j);
  return TPURT_OK;
}
tpurt_status_t tpurt_index_k_unfold_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return unfold_backward_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_unfold_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return unfold_backward_impl(ctx, call, true);
}
