/* The reduction engine shared by the reduce and norm kernels (and nn's
 * losses): reduce one input over a set of dims into an output whose shape
 * PyTorch's meta already chose (keepdim or not), plus small helpers every
 * kernel of this family uses (dim normalization, row load/store through
 * float/double).
 * Internal to runtime/ops/reduce; not an ABI. */
#ifndef TPURT_OPS_REDUCE_REDUCE_H_
#define TPURT_OPS_REDUCE_REDUCE_H_

#include <math.h>

#include "ops/args.h"

/* Normalizes a possibly negative dim against ndim (a 0-d tensor accepts 0 and
 * -1, as PyTorch's maybe_wrap_dim does). */
tpurt_status_t tpurt_reduce_wrap_dim(const char* op, int64_t dim, int32_t ndim, int32_t* out_dim);

/* Fills out_mask[ndim] from the dim argument args[i]: an int, an int list,
 * or absent / None / [] (= every dim; i < 0 means absent). */
tpurt_status_t tpurt_reduce_dims_from_arg(const tpurt_op_call_t* call, int i, int32_t ndim,
                                          bool out_mask[TPURT_MAX_DIMS]);

/* ---- the reduction engine ---- */

typedef enum tpurt_reduce_op_e {
  TPURT_REDUCE_SUM = 0,
  TPURT_REDUCE_NANSUM,
  TPURT_REDUCE_PROD,
  TPURT_REDUCE_MAX,      /* NaN propagates */
  TPURT_REDUCE_MIN,
  TPURT_REDUCE_ARGMAX,   /* value and first index of the max (NaN counts as max) */
  TPURT_REDUCE_ARGMIN,
  TPURT_REDUCE_ALL,
  TPURT_REDUCE_ANY,
  TPURT_REDUCE_COUNT_NZ,
  TPURT_REDUCE_ABS_POW,  /* sum |x|^p (p = spec.p); p == 1, 2 special-cased */
  TPURT_REDUCE_ABS_MAX,  /* max |x| (ord inf), NaN propagates */
  TPURT_REDUCE_ABS_MIN,  /* min |x| (ord -inf) */
  TPURT_REDUCE_SQDEV,    /* sum (x - param[m])^2 */
  TPURT_REDUCE_EXPSUM,   /* sum exp(x - param[m]) */
} tpurt_reduce_op_t;

/* What is stored from the accumulated value. */
typedef enum tpurt_reduce_post_e {
  TPURT_REDUCE_POST_NONE = 0,
  TPURT_REDUCE_POST_MEAN,      /* v / K */
  TPURT_REDUCE_POST_VAR,       /* v / max(K - correction, 0) */
  TPURT_REDUCE_POST_STD,       /* sqrt of VAR */
  TPURT_REDUCE_POST_ROOT,      /* v^(1/p) (p-norms); sqrt for p == 2 */
  TPURT_REDUCE_POST_LOG_PARAM, /* log(v) + param[m] (logsumexp second pass) */
} tpurt_reduce_post_t;

typedef struct tpurt_reduce_spec_t {
  const char* op_name;          /* for error messages */
  const tpurt_tensor_t* in;
  bool mask[TPURT_MAX_DIMS];    /* reduced dims of `in` */
  tpurt_reduce_op_t op;
  tpurt_reduce_post_t post;
  double p;                     /* ABS_POW exponent / ROOT */
  double correction;            /* VAR/STD */
  const double* param;          /* per-output value (SQDEV/EXPSUM/LOG_PARAM), in output order */
  /* Destinations; any may be NULL. `out` keeps the input's rank (keepdim) or
   * drops the reduced dims. out_index receives int64 indices (ARG ops). */
  const tpurt_tensor_t* out;
  const tpurt_tensor_t* out_index;
  double* out_f64;              /* per-output finalized value, output order (len M) */
} tpurt_reduce_spec_t;

/* The optimized engine and the plain reference one (tests compare the two). */
tpurt_status_t tpurt_reduce_run(tpurt_kernel_ctx_t* ctx, const tpurt_reduce_spec_t* spec);
tpurt_status_t tpurt_reduce_run_reference(tpurt_kernel_ctx_t* ctx, const tpurt_reduce_spec_t* spec);

/* Number of output elements / reduced elements of a spec. */
int64_t tpurt_reduce_num_outputs(const tpurt_reduce_spec_t* spec);

/* A plain serial walk for the reductions the engine has no accumulator for (hash_tensor's xor,
 * complex prod/all/any/count_nonzero): fn(user, in_offset, out_pos) for every element of `in`,
 * in_offset in elements, out_pos the row-major position of its output among the non-reduced
 * dims (the same order whether or not the output keeps the reduced dims). */
void tpurt_reduce_for_each(const tpurt_tensor_t* in, const bool mask[TPURT_MAX_DIMS],
                           void (*fn)(void* user, int64_t in_offset, int64_t out_pos), void* user);
/* The row-major position `pos` of an output tensor as an element offset through its strides. */
int64_t tpurt_reduce_out_offset(const tpurt_tensor_t* out, int64_t pos);
int64_t tpurt_reduce_num_reduced(const tpurt_reduce_spec_t* spec);

/* ---- row helpers for the row-wise kernels (softmax, norms, losses, scans) ---- */

/* Loads n elements at p (element stride `stride`) of dtype into float/double. */
void tpurt_row_load_f32(tpurt_dtype_t dt, const void* p, int64_t stride, int64_t n, float* out);
void tpurt_row_load_f64(tpurt_dtype_t dt, const void* p, int64_t stride, int64_t n, double* out);
void tpurt_row_store_f32(tpurt_dtype_t dt, void* p, int64_t stride, int64_t n, const float* in);
void tpurt_row_store_f64(tpurt_dtype_t dt, void* p, int64_t stride, int64_t n, const double* in);

/* Offset (in elements) of the linear row-major index `lin` of t's shape,
 * skipping dim `skip` (or -1 for none): used to walk "all rows along dim". */
static inline int64_t tpurt_tensor_offset_of(const tpurt_tensor_t* t, int64_t lin, int32_t skip) {
  int64_t off = 0;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    if (d == skip) continue;
    int64_t s = t->sizes[d];
    off += (lin % s) * t->strides[d];
    lin /= s;
  }
  return off;
}

static inline char* tpurt_tensor_at(const tpurt_tensor_t* t, int64_t off_elems) {
  return (char*)t->data + off_elems * (int64_t)tpurt_dtype_size(t->dtype);
}

/* UNIMPLEMENTED naming op and dtype. */
#define TPURT_REDUCE_UNSUPPORTED(op, dt) \
  TPURT_STATUS(UNIMPLEMENTED, "%s: dtype %s is not supported", (op), tpurt_dtype_name(dt))

/* ---- reading the input from a producer instead of memory ----
 * While a source is installed on the calling thread, a reduction whose
 * input's data is at `data` asks `produce` for runs of it instead of loading
 * them: elements [lin, lin + n) in row-major order (n <= max_run), as n
 * contiguous elements of the input's dtype, on pool thread `tid`. It takes
 * the source only for a contiguous input reduced over its innermost dims
 * (each output reads one contiguous run), and calls `accepted` first;
 * otherwise it returns ABORTED without reading. DeferAndFuse installs one to
 * end a fused chain in a reduction (exec/defer): the chain's value is then
 * never written to memory. */
typedef struct tpurt_reduce_source_t {
  const void* data;
  int64_t max_run;
  const void* (*produce)(void* user, int64_t lin, int64_t n, int tid);
  void (*accepted)(void* user);
  void* user;
} tpurt_reduce_source_t;

extern _Thread_local const tpurt_reduce_source_t* tpurt_reduce_tls_source;

#endif /* TPURT_OPS_REDUCE_REDUCE_H_ */
