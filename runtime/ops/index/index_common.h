/* Shared machinery of the index kernel family: a strided N-d walker
 * (coalesces dims, hands out rows to a callback), index loading with wrap +
 * bounds check, and per-dtype accumulate functions for scatter-style ops.
 * Internal to runtime/ops/index; not part of the public ABI. */
#ifndef TPURT_OPS_INDEX_COMMON_H_
#define TPURT_OPS_INDEX_COMMON_H_

#include <string.h>

#include "ops/args.h"

/* Wraps a possibly negative dim; ndim 0 counts as 1 (scalars act as 1-d). */
tpurt_status_t tpurt_index_wrap_dim(const char* op, int64_t dim, int32_t ndim, int32_t* out_dim);

/* A scalar (0-d) tensor seen as 1-d of size 1; other tensors unchanged. */
void tpurt_index_as_1d(const tpurt_tensor_t* t, tpurt_tensor_t* out);

/* Element offset (in elements) of the row-major `linear` element of t. */
int64_t tpurt_index_offset(const tpurt_tensor_t* t, int64_t linear);

/* True when the byte ranges touched by a and b may overlap. */
bool tpurt_index_may_overlap(const tpurt_tensor_t* a, const tpurt_tensor_t* b);

/* Fills a descriptor for a contiguous tensor over `data`. */
void tpurt_index_make_contig(tpurt_tensor_t* t, void* data, tpurt_dtype_t dtype, int32_t ndim,
                             const int64_t* sizes);

/* ---- strided walker ---- */
#define TPURT_INDEX_MAX_OPS 4
typedef struct tpurt_index_space_t {
  int nd, nops;
  int64_t sizes[TPURT_MAX_DIMS];
  int64_t strides[TPURT_INDEX_MAX_OPS][TPURT_MAX_DIMS]; /* in elements */
} tpurt_index_space_t;

void tpurt_index_space_init(tpurt_index_space_t* s, int nops);
/* Appends an inner dim; strides[k] for op k. */
void tpurt_index_space_push(tpurt_index_space_t* s, int64_t size, const int64_t* strides);
/* Drops size-1 dims and merges dims that every op walks contiguously. */
void tpurt_index_space_coalesce(tpurt_index_space_t* s);
int64_t tpurt_index_space_numel(const tpurt_index_space_t* s);
/* fn gets the element offsets of the row start per op and the row length; the
 * row continues along the innermost dim with strides[k][nd-1]. */
typedef void (*tpurt_index_row_fn_t)(void* user, const int64_t* offs, int64_t n);
void tpurt_index_space_walk(const tpurt_index_space_t* s, int64_t begin, int64_t end,
                            tpurt_index_row_fn_t fn, void* user);
/* Walks the whole space split across the chip's threads. */
void tpurt_index_space_parallel(tpurt_kernel_ctx_t* ctx, const tpurt_index_space_t* s, int64_t grain,
                                tpurt_index_row_fn_t fn, void* user);
static inline int64_t tpurt_index_inner_stride(const tpurt_index_space_t* s, int op) {
  return s->nd ? s->strides[op][s->nd - 1] : 0;
}

/* Copies n elements of size es with byte strides. */
static inline void tpurt_index_copy_elems(char* d, int64_t ds, const char* s, int64_t ss, int64_t n,
                                          size_t es) {
  if (ds == (int64_t)es && ss == (int64_t)es) {
    memcpy(d, s, (size_t)n * es);
    return;
  }
  switch (es) {
    case 1: for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss]; break;
    case 2: for (int64_t i = 0; i < n; ++i) *(uint16_t*)(d + i * ds) = *(const uint16_t*)(s + i * ss); break;
    case 4: for (int64_t i = 0; i < n; ++i) *(uint32_t*)(d + i * ds) = *(const uint32_t*)(s + i * ss); break;
    default: for (int64_t i = 0; i < n; ++i) *(uint64_t*)(d + i * ds) = *(const uint64_t*)(s + i * ss); break;
  }
}

/* dst[...] = src[...] with src broadcast to dst's shape (right-aligned, size-1
 * dims repeat) and converted to dst's dtype. Parallel. A no-op when dst and
 * src are the same view. */
tpurt_status_t tpurt_index_copy(tpurt_kernel_ctx_t* ctx, const tpurt_tensor_t* dst,
                                const tpurt_tensor_t* src);
/* Strides of `t` broadcast to the shape (nd, sizes), right-aligned; false when
 * the shapes do not broadcast. */
bool tpurt_index_broadcast_strides(const tpurt_tensor_t* t, int nd, const int64_t* sizes,
                                   int64_t* out_strides);
/* Fills every element of dst with one element value `elem` (dst's dtype). */
void tpurt_index_fill(tpurt_kernel_ctx_t* ctx, const tpurt_tensor_t* dst, const void* elem);

/* ---- indices ---- */
/* Reads an int64/int32 index tensor broadcast to (nd, sizes) in row-major
 * order into out[] (numel of that shape). With `wrap`, negatives count from
 * the end (advanced indexing, take, put_, index_fill); without, PyTorch
 * rejects them (gather, scatter, index_select/add/copy/reduce). An index out
 * of range gives OUT_OF_RANGE naming op, the value, dim and size. */
tpurt_status_t tpurt_index_load(const char* op, const tpurt_tensor_t* idx, int nd, const int64_t* sizes,
                                int64_t dim, int64_t dim_size, bool wrap, int64_t* out);
bool tpurt_index_is_index_dtype(tpurt_dtype_t dt);

/* ---- accumulation ---- */
typedef enum tpurt_index_red_e {
  TPURT_INDEX_RED_COPY = 0,
  TPURT_INDEX_RED_SUM,
  TPURT_INDEX_RED_PROD,
  TPURT_INDEX_RED_MEAN,
  TPURT_INDEX_RED_AMAX,
  TPURT_INDEX_RED_AMIN,
} tpurt_index_red_t;

/* *dst = combine(*dst, alpha * *src) in dst's dtype (alpha only for SUM/MEAN;
 * alpha_d for floating dtypes, alpha_i for integral). 16-bit floats compute in
 * float32; integers in int64 with wraparound. MEAN accumulates a sum. */
typedef void (*tpurt_index_accum_fn_t)(char* dst, const char* src, double alpha_d, int64_t alpha_i);
tpurt_index_accum_fn_t tpurt_index_accum_fn(tpurt_dtype_t dtype, tpurt_index_red_t red);
/* Writes the reduction's identity (0, 1, lowest, highest) into one element. */
void tpurt_index_red_identity(tpurt_dtype_t dtype, tpurt_index_red_t red, void* out_elem);
/* Parses "sum"/"add", "prod"/"multiply", "mean", "amax", "amin"; -1 if unknown. */
int tpurt_index_red_parse(const char* s);
/* elem /= count (floor division for integers, as PyTorch's mean does). */
void tpurt_index_div_count(tpurt_dtype_t dtype, char* elem, int64_t count);

/* ---- nonzero coordinates (deterministic: fixed chunks of elements) ----
 * Nonzero = raw bits with a float's sign ignored (-0.0 is zero, NaN is not). */
typedef struct tpurt_index_nz_t {
  const tpurt_tensor_t* t;
  int64_t n, chunks;
  int64_t* counts; /* per chunk, exclusive prefix after count */
  uint64_t mask;
  int64_t* out;
  int64_t rs, cs, limit;
} tpurt_index_nz_t;
tpurt_status_t tpurt_index_nz_count(tpurt_kernel_ctx_t* ctx, const tpurt_tensor_t* t, tpurt_index_nz_t* job,
                                    int64_t* out_total);
/* Coordinate d of the r-th nonzero (row-major order) goes to out[r*rs + d*cs]
 * for r < limit. */
void tpurt_index_nz_write(tpurt_kernel_ctx_t* ctx, tpurt_index_nz_t* job, int64_t* out, int64_t rs, int64_t cs,
                          int64_t limit);

#endif /* TPURT_OPS_INDEX_COMMON_H_ */

/* ---- the two engines every gather/scatter-shaped op reduces to ---- */

/* out[O(p)] = src[S(p) + off[X(p)]] for every p of `sp`, whose ops are
 * 0 = out, 1 = src, 2 = the off[] array (element offsets into src, already
 * bounds-checked). Parallel; pure copies of es-byte elements. */
void tpurt_index_gather_run(tpurt_kernel_ctx_t* ctx, const tpurt_index_space_t* sp, char* out,
                            const char* src, const int64_t* off, size_t es);

/* For every fiber f of `sp` (ops 0 = out, 1 = src, 2 = off[]), for j in [0, J)
 * in order:  out[O(f) + off[X(f) + j*off_j]]  (red)=  src[S(f) + j*src_j].
 * Fibers own disjoint destinations, so threads split fibers and each
 * destination sees its updates in j order: deterministic, race-free.
 * include_self=false resets touched destinations to the identity first;
 * MEAN divides by the count (+1 with include_self) at the end. */
typedef struct tpurt_index_scatter_t {
  tpurt_index_space_t sp;
  char* out;
  const char* src;
  const int64_t* off;
  tpurt_dtype_t dtype;
  int64_t J, src_j, off_j;
  tpurt_index_red_t red;
  bool include_self;
  double alpha_d;
  int64_t alpha_i;
  const tpurt_tensor_t* out_t; /* the destination tensor (MEAN finalization) */
  /* filled by run */
  int64_t* counts;
  int64_t count_base;
  tpurt_index_accum_fn_t fn;
  unsigned char identity[16]; /* one element, complex128 included */
} tpurt_index_scatter_t;
void tpurt_index_scatter_init(tpurt_index_scatter_t* job, tpurt_dtype_t dtype, tpurt_index_red_t red);
tpurt_status_t tpurt_index_scatter_run(tpurt_kernel_ctx_t* ctx, tpurt_index_scatter_t* job);
