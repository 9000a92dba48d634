/* Data-dependent-size ops, split so the PyTorch layer can size their outputs:
 * nonzero / nonzero_static (coordinates into an output already sized to the
 * count, which the reduce family's count_nonzero gives), masked_select (same
 * protocol) and masked_scatter_. Chunks are fixed by element count, not
 * thread count, so the output order never depends on threading. */
#include <inttypes.h>

#include "ops/index/index_common.h"
#include "ops/index/index_kernels.h"

/* "nonzero" for any dtype: the raw bits with a float's sign bit ignored (so
 * -0.0 is zero and NaN is nonzero, as in PyTorch). */
static uint64_t nz_mask(tpurt_dtype_t dt) {
  switch (dt) {
    case TPURT_DTYPE_FLOAT16: case TPURT_DTYPE_BFLOAT16: return 0x7fffu;
    case TPURT_DTYPE_FLOAT32: return 0x7fffffffu;
    case TPURT_DTYPE_FLOAT64: return 0x7fffffffffffffffull;
    default: return ~0ull;
  }
}
static inline bool elem_nz(const char* p, size_t es, uint64_t mask) {
  uint64_t v = 0;
  memcpy(&v, p, es);
  return (v & mask) != 0;
}

#define NZ_CHUNK 65536

typedef struct {
  const tpurt_tensor_t* t;
  int64_t n;
  int64_t* counts; /* per chunk */
  uint64_t mask;
  /* write pass */
  const tpurt_tensor_t* out;
  int64_t limit; /* rows of out to fill */
} nz_job_t;

static int64_t count_range(const tpurt_tensor_t* t, int64_t b, int64_t e, uint64_t mask) {
  size_t es = tpurt_dtype_size(t->dtype);
  const char* base = (const char*)t->data;
  int64_t c = 0;
  if (tpurt_tensor_is_contiguous(t)) {
    for (int64_t l = b; l < e; ++l) c += elem_nz(base + l * (int64_t)es, es, mask);
    return c;
  }
  for (int64_t l = b; l < e; ++l) c += elem_nz(base + tpurt_index_offset(t, l) * (int64_t)es, es, mask);
  return c;
}

static void nz_count_chunks(void* user, int64_t begin, int64_t end, int tid) {
  nz_job_t* j = (nz_job_t*)user;
  for (int64_t c = begin; c < end; ++c) {
    int64_t b = c * NZ_CHUNK, e = b + NZ_CHUNK < j->n ? b + NZ_CHUNK : j->n;
    j->counts[c] = count_range(j->t, b, e, j->mask);
  }
}

static void nz_write_chunks(void* user, int64_t begin, int64_t end, int tid) {
  nz_job_t* j = (nz_job_t*)user;
  const tpurt_tensor_t* t = j->t;
  const tpurt_tensor_t* out = j->out;
  size_t es = tpurt_dtype_size(t->dtype);
  int64_t* o = (int64_t*)out->data;
  int64_t rs = out->strides[0], cs = out->ndim > 1 ? out->strides[1] : 0;
  for (int64_t c = begin; c < end; ++c) {
    int64_t row = j->counts[c]; /* exclusive prefix */
    if (row >= j->limit) continue;
    int64_t b = c * NZ_CHUNK, e = b + NZ_CHUNK < j->n ? b + NZ_CHUNK : j->n;
    for (int64_t l = b; l < e && row < j->limit; ++l) {
      if (!elem_nz((const char*)t->data + tpurt_index_offset(t, l) * (int64_t)es, es, j->mask)) continue;
      int64_t rem = l;
      for (int32_t d = t->ndim - 1; d >= 0; --d) {
        o[row * rs + d * cs] = rem % t->sizes[d];
        rem /= t->sizes[d];
      }
      ++row;
    }
  }
}

/* Counts nonzeros of t (any strides) deterministically; fills per-chunk
 * exclusive prefix sums in *out_prefix when asked. */
static tpurt_status_t nz_count(tpurt_kernel_ctx_t* ctx, const tpurt_tensor_t* t, int64_t* out_total,
                               nz_job_t* job) {
  memset(job, 0, sizeof(*job));
  job->t = t;
  job->n = tpurt_tensor_numel(t);
  job->mask = nz_mask(t->dtype);
  int64_t chunks = (job->n + NZ_CHUNK - 1) / NZ_CHUNK;
  job->counts = tpurt_kernel_scratch(ctx, (size_t)(chunks + 1) * sizeof(int64_t));
  if (!job->counts) return TPURT_STATUS(RESOURCE_EXHAUSTED, "nonzero: no scratch");
  tpurt_parallel_for(ctx, chunks, 1, nz_count_chunks, job);
  int64_t total = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t k = job->counts[c];
    job->counts[c] = total;
    total += k;
  }
  *out_total = total;
  return TPURT_OK;
}

/* count_nonzero itself lives in the reduce family (ops/reduce/reduce_ops.c). */

/* ---- nonzero(self) -> out [count, ndim] int64, out pre-sized ----
 * nonzero_static(self, size, fill_value) -> out [size, ndim]: the first
 * min(count, size) coordinates, the remaining rows fill_value. */
static tpurt_status_t nonzero_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_index_need(call, 1, 1));
  const tpurt_tensor_t* self = tpurt_index_arg_tensor(call, 0);
  const tpurt_tensor_t* out = &call->outputs[0];
  bool is_static = call->num_args >= 2 && call->args[1].kind == TPURT_ARG_INT;
  if (!self) return TPURT_STATUS(INVALID_ARGUMENT, "nonzero: self must be a tensor");
  if (out->dtype != TPURT_DTYPE_INT64 || out->ndim != 2 || out->sizes[1] != self->ndim)
    return TPURT_STATUS(INVALID_ARGUMENT, "nonzero: out must be int64 [count, %d]", self->ndim);
  nz_job_t job;
  int64_t total;
  TPURT_RETURN_IF_ERROR(nz_count(ctx, self, &total, &job));
  int64_t rows = out->sizes[0];
  if (!is_static && rows != total)
    return TPURT_STATUS(FAILED_PRECONDITION, "nonzero: out has %" PRId64 " rows but the input has %" PRId64
                        " nonzero elements", rows, total);
  job.out = out;
  job.limit = total < rows ? total : rows;
  if (self->ndim > 0 && job.limit > 0) {
    int64_t chunks = (job.n + NZ_CHUNK - 1) / NZ_CHUNK;
    if (reference) nz_write_chunks(&job, 0, chunks, 0);
    else tpurt_parallel_for(ctx, chunks, 1, nz_write_chunks, &job);
  }
  if (is_static && rows > job.limit && self->ndim > 0) {
    int64_t fill = tpurt_index_arg_int(call, 2, -1);
    int64_t* o = (int64_t*)out->data;
    for (int64_t r = job.limit; r < rows; ++r)
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
  TPURT_RETURN_IF_ERROR(tpurt_index_need(call, 2, 1));
  const tpurt_tensor_t* self = tpurt_index_arg_tensor(call, 0);
  const tpurt_tensor_t* mask = tpurt_index_arg_tensor(call, 1);
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
  nz_job_t job;
  int64_t total;
  TPURT_RETURN_IF_ERROR(nz_count(ctx, &m, &total, &job));
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
  TPURT_RETURN_IF_ERROR(tpurt_index_need(call, 3, 1));
  const tpurt_tensor_t* self = tpurt_index_arg_tensor(call, 0);
  const tpurt_tensor_t* mask = tpurt_index_arg_tensor(call, 1);
  const tpurt_tensor_t* src0 = tpurt_index_arg_tensor(call, 2);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (!self || !mask || !src0) return TPURT_STATUS(INVALID_ARGUMENT, "masked_scatter: expected tensors");
  if (mask->dtype != TPURT_DTYPE_BOOL && mask->dtype != TPURT_DTYPE_UINT8)
    return TPURT_STATUS(INVALID_ARGUMENT, "masked_scatter: expected a bool mask, got %s", tpurt_dtype_name(mask->dtype));
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
  nz_job_t job;
  int64_t total;
  TPURT_RETURN_IF_ERROR(nz_count(ctx, &m, &total, &job));
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
