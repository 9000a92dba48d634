/* Data-dependent-size ops, split so the PyTorch layer can size their outputs:
 * nonzero / nonzero_static (coordinates into an output already sized to the
 * count, which the reduce family's count_nonzero gives), masked_select (same
 * protocol) and masked_scatter_. Chunks are fixed by element count, not
 * thread count, so the output order never depends on threading. */
#include <inttypes.h>
#include <math.h>

#include "ops/index/index_common.h"
#include "ops/index/index_kernels.h"

/* count_nonzero itself lives in the reduce family (ops/reduce/reduce_ops.c). */

/* ---- nonzero(self) -> out [count, ndim] int64, out pre-sized ----
 * nonzero_static(self, size, fill_value) -> out [size, ndim]: the first
 * min(count, size) coordinates, the remaining rows fill_value. */
static tpurt_status_t nonzero_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 1, 1));
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* out = &call->outputs[0];
  bool is_static = tpurt_arg_is(call, 1, TPURT_ARG_INT);
  if (!self) return TPURT_STATUS(INVALID_ARGUMENT, "nonzero: self must be a tensor");
  if (out->dtype != TPURT_DTYPE_INT64 || out->ndim != 2 || out->sizes[1] != self->ndim)
    return TPURT_STATUS(INVALID_ARGUMENT, "nonzero: out must be int64 [count, %d]", self->ndim);
  tpurt_index_nz_t job;
  int64_t total;
  TPURT_RETURN_IF_ERROR(tpurt_index_nz_count(ctx, self, &job, &total));
  int64_t rows = out->sizes[0];
  if (!is_static && rows != total)
    return TPURT_STATUS(FAILED_PRECONDITION, "nonzero: out has %" PRId64 " rows but the input has %" PRId64
                        " nonzero elements", rows, total);
  int64_t limit = total < rows ? total : rows;
  if (self->ndim > 0 && limit > 0) {
    if (reference) {
      /* plain row-major scan */
      int64_t n = tpurt_tensor_numel(self), r = 0, pos[TPURT_MAX_DIMS];
      size_t es = tpurt_dtype_size(self->dtype);
      unsigned char zero[8] = {0};
      int64_t* o = (int64_t*)out->data;
      for (int64_t l = 0; l < n && r < limit; ++l) {
        const char* p = (const char*)self->data + tpurt_index_offset(self, l) * (int64_t)es;
        bool nz;
        if (tpurt_dtype_is_floating(self->dtype)) nz = tpurt_dtype_load_f64(self->dtype, p) != 0.0 || isnan(tpurt_dtype_load_f64(self->dtype, p));
        else nz = memcmp(p, zero, es) != 0;
        if (!nz) continue;
        int64_t rem = l;
        for (int32_t d = self->ndim - 1; d >= 0; --d) { pos[d] = rem % self->sizes[d]; rem /= self->sizes[d]; }
        for (int32_t d = 0; d < self->ndim; ++d) o[r * out->strides[0] + d * out->strides[1]] = pos[d];
        ++r;
      }
    } else {
      tpurt_index_nz_write(ctx, &job, (int64_t*)out->data, out->strides[0], out->strides[1], limit);
    }
  }
  if (is_static && rows > limit && self->ndim > 0) {
    int64_t fill = tpurt_arg_int(call, 2, -1);
    int64_t* o = (int64_t*)out->data;
    for (int64_t r = limit; r < rows; ++r)
      for (int32_t d = 0; d < self->ndim; ++d) o[r * out->strides[0] + d * out->strides[1]] = fill;
  }
  return TPURT_OK;
}
tpurt_status_t tpurt_index_k_nonzero(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return nonzero_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_nonzero(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return nonzero_impl(ctx, call, true);
}

/* Broadcast shape of self and mask; false when they do not broadcast. */
static bool broadcast_pair(const tpurt_tensor_t* a, const tpurt_tensor_t* b, int32_t* nd, int64_t* sizes) {
  *nd = a->ndim > b->ndim ? a->ndim : b->ndim;
  for (int32_t d = *nd - 1, i = a->ndim - 1, j = b->ndim - 1; d >= 0; --d, --i, --j) {
    int64_t x = i >= 0 ? a->sizes[i] : 1, y = j >= 0 ? b->sizes[j] : 1;
    if (x != y && x != 1 && y != 1) return false;
    sizes[d] = x == 1 ? y : x;
  }
  return true;
}

/* ---- masked_select(self, mask) -> out [count] (out pre-sized to the count of
 * the mask expanded to broadcast(self, mask)) ---- */
static tpurt_status_t masked_select_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 2, 1));
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* mask = tpurt_arg_tensor(call, 1);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (!self || !mask) return TPURT_STATUS(INVALID_ARGUMENT, "masked_select: self and mask must be tensors");
  if (mask->dtype != TPURT_DTYPE_BOOL && mask->dtype != TPURT_DTYPE_UINT8)
    return TPURT_STATUS(INVALID_ARGUMENT, "masked_select: expected a bool mask, got %s", tpurt_dtype_name(mask->dtype));
  if (out->dtype != self->dtype || out->ndim != 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "masked_select: out must be 1-d of self's dtype");
  int32_t nd;
  int64_t sizes[TPURT_MAX_DIMS];
  if (!broadcast_pair(self, mask, &nd, sizes))
    return TPURT_STATUS(INVALID_ARGUMENT, "masked_select: shapes of self and mask do not broadcast");
  tpurt_tensor_t s = *self, m = *mask;
  s.ndim = m.ndim = nd;
  memcpy(s.sizes, sizes, sizeof(int64_t) * nd);
  memcpy(m.sizes, sizes, sizeof(int64_t) * nd);
  tpurt_index_broadcast_strides(self, nd, sizes, s.strides);
  tpurt_index_broadcast_strides(mask, nd, sizes, m.strides);
  tpurt_index_nz_t job;
  int64_t total;
  TPURT_RETURN_IF_ERROR(tpurt_index_nz_count(ctx, &m, &job, &total));
  if (out->sizes[0] != total)
    return TPURT_STATUS(FAILED_PRECONDITION, "masked_select: out has %" PRId64 " elements but the mask selects %" PRId64,
                        out->sizes[0], total);
  size_t es = tpurt_dtype_size(self->dtype);
  int64_t n = tpurt_tensor_numel(&m), k = 0;
  (void)reference;
  for (int64_t l = 0; l < n; ++l) {
    if (!((const uint8_t*)m.data)[tpurt_index_offset(&m, l)]) continue;
    memcpy((char*)out->data + k * out->strides[0] * (int64_t)es,
           (const char*)s.data + tpurt_index_offset(&s, l) * (int64_t)es, es);
    ++k;
  }
  return TPURT_OK;
}
tpurt_status_t tpurt_index_k_masked_select(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return masked_select_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_masked_select(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return masked_select_impl(ctx, call, true);
}

/* ---- masked_scatter_(self, mask, source): out = self; the i-th selected
 * position (row-major over self, mask broadcast) takes source.flatten()[i] ---- */
static tpurt_status_t masked_scatter_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 3, 1));
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* mask = tpurt_arg_tensor(call, 1);
  const tpurt_tensor_t* src0 = tpurt_arg_tensor(call, 2);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (!self || !mask || !src0) return TPURT_STATUS(INVALID_ARGUMENT, "masked_scatter: expected tensors");
  if (mask->dtype != TPURT_DTYPE_BOOL) /* as CPU: uint8 masks are refused here (masked_fill still takes them) */
    return TPURT_STATUS(INVALID_ARGUMENT, "masked_scatter_ only supports boolean masks, but got mask with dtype %s",
                        tpurt_dtype_name(mask->dtype));
  if (src0->dtype != self->dtype || out->dtype != self->dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "masked_scatter: source (%s) and self (%s) must have the same dtype",
                        tpurt_dtype_name(src0->dtype), tpurt_dtype_name(self->dtype));
  tpurt_tensor_t m = *mask;
  m.ndim = out->ndim;
  memcpy(m.sizes, out->sizes, sizeof(int64_t) * out->ndim);
  if (!tpurt_index_broadcast_strides(mask, out->ndim, out->sizes, m.strides))
    return TPURT_STATUS(INVALID_ARGUMENT, "masked_scatter: mask does not broadcast to self");
  /* source may alias out: read it from a private copy then */
  tpurt_tensor_t src = *src0;
  if (tpurt_index_may_overlap(src0, out)) {
    void* buf = tpurt_kernel_scratch(ctx, (size_t)(tpurt_tensor_numel(src0) + 1) * tpurt_dtype_size(src0->dtype));
    if (!buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "masked_scatter: no scratch");
    tpurt_index_make_contig(&src, buf, src0->dtype, src0->ndim, src0->sizes);
    TPURT_RETURN_IF_ERROR(tpurt_index_copy(ctx, &src, src0));
  }
  tpurt_index_nz_t job;
  int64_t total;
  TPURT_RETURN_IF_ERROR(tpurt_index_nz_count(ctx, &m, &job, &total));
  if (total > tpurt_tensor_numel(&src))
    return TPURT_STATUS(INVALID_ARGUMENT, "masked_scatter: the mask selects %" PRId64 " elements but source has only %"
                        PRId64, total, tpurt_tensor_numel(&src));
  TPURT_RETURN_IF_ERROR(tpurt_index_copy(ctx, out, self));
  size_t es = tpurt_dtype_size(self->dtype);
  int64_t n = tpurt_tensor_numel(out), k = 0;
  bool sc = tpurt_tensor_is_contiguous(&src);
  (void)reference;
  for (int64_t l = 0; l < n; ++l) {
    if (!((const uint8_t*)m.data)[tpurt_index_offset(&m, l)]) continue;
    int64_t so = sc ? k : tpurt_index_offset(&src, k);
    memcpy((char*)out->data + tpurt_index_offset(out, l) * (int64_t)es, (const char*)src.data + so * (int64_t)es, es);
    ++k;
  }
  return TPURT_OK;
}
tpurt_status_t tpurt_index_k_masked_scatter(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return masked_scatter_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_masked_scatter(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return masked_scatter_impl(ctx, call, true);
}
