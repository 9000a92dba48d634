/* The index family's kernels, listed once: index_table.c builds the op table
 * from this list and each file defines tpurt_index_k_<id> (optimized) and
 * tpurt_index_r_<id> (reference). */
#ifndef TPURT_OPS_INDEX_KERNELS_H_
#define TPURT_OPS_INDEX_KERNELS_H_

#include "tpurt/kernel.h"

/* X(op name, id, flags, dtypes). ALIAS_SAFE: out may be self itself
 * (in-place); other inputs that overlap out are read from private copies.
 * dtypes: the index kernels move or accumulate elements of every real dtype
 * (ANY: of the first tensor argument, or of a factory's output); only
 * embedding_renorm_ and histc compute in floating point. */
#define INDEX_DT_ANY TPURT_DTYPES_REAL
#define INDEX_DT_FLOAT TPURT_DTYPES_FLOAT
/* moves elements by their size: also uint16/32/64, which CPU indexes and concatenates */
#define INDEX_DT_MOVE (TPURT_DTYPES_REAL | TPURT_DTYPES_UINT_WIDE)
#define TPURT_INDEX_OPS(X) \
  X("index", index, 0, INDEX_DT_MOVE) \
  X("_index_put_impl", index_put, TPURT_OP_ALIAS_SAFE, INDEX_DT_ANY) \
  X("index_put", index_put, TPURT_OP_ALIAS_SAFE, INDEX_DT_ANY) \
  X("gather", gather, 0, INDEX_DT_ANY) \
  X("scatter", scatter, TPURT_OP_ALIAS_SAFE, INDEX_DT_ANY) \
  X("scatter_add", scatter_add, TPURT_OP_ALIAS_SAFE, INDEX_DT_ANY) \
  X("scatter_reduce", scatter_reduce, TPURT_OP_ALIAS_SAFE, INDEX_DT_ANY) \
  X("index_select", index_select, 0, INDEX_DT_ANY) \
  X("index_add", index_add, TPURT_OP_ALIAS_SAFE, INDEX_DT_ANY) \
  X("index_copy", index_copy, TPURT_OP_ALIAS_SAFE, INDEX_DT_ANY) \
  X("index_fill", index_fill, TPURT_OP_ALIAS_SAFE, INDEX_DT_ANY) \
  X("index_reduce", index_reduce, TPURT_OP_ALIAS_SAFE, INDEX_DT_ANY) \
  X("take", take, 0, INDEX_DT_ANY) \
  X("put", put, TPURT_OP_ALIAS_SAFE, INDEX_DT_ANY) \
  X("embedding_dense_backward", embedding_dense_backward, 0, INDEX_DT_ANY) \
  X("embedding_renorm", embedding_renorm, TPURT_OP_ALIAS_SAFE, INDEX_DT_FLOAT) \
  X("nonzero", nonzero, 0, INDEX_DT_ANY) \
  X("nonzero_static", nonzero, 0, INDEX_DT_ANY) \
  X("masked_select", masked_select, 0, INDEX_DT_ANY) \
  X("masked_scatter", masked_scatter, TPURT_OP_ALIAS_SAFE, INDEX_DT_ANY) \
  X("cat", cat, 0, INDEX_DT_MOVE) \
  X("flip", flip, 0, INDEX_DT_ANY) \
  X("roll", roll, 0, INDEX_DT_ANY) \
  X("tril", tril, TPURT_OP_ALIAS_SAFE, INDEX_DT_ANY) \
  X("triu", triu, TPURT_OP_ALIAS_SAFE, INDEX_DT_ANY) \
  X("repeat_interleave", repeat_interleave, 0, INDEX_DT_ANY) \
  X("unfold_backward", unfold_backward, TPURT_OP_COMPLEX, INDEX_DT_ANY | TPURT_DTYPES_COMPLEX) \
  X("arange", arange, 0, INDEX_DT_ANY) \
  X("range", range, 0, INDEX_DT_ANY) \
  X("linspace", linspace, 0, INDEX_DT_ANY) \
  X("logspace", logspace, 0, INDEX_DT_ANY) \
  X("eye", eye, 0, INDEX_DT_ANY) \
  X("tril_indices", tril_indices, 0, INDEX_DT_ANY) \
  X("triu_indices", triu_indices, 0, INDEX_DT_ANY) \
  X("searchsorted", searchsorted, 0, INDEX_DT_ANY) \
  X("bucketize", bucketize, 0, INDEX_DT_ANY) \
  X("histc", histc, 0, INDEX_DT_FLOAT)

#define TPURT_INDEX_DECLARE_(name, id, flags, dtypes)                                                  \
  tpurt_status_t tpurt_index_k_##id(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call); \
  tpurt_status_t tpurt_index_r_##id(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);
TPURT_INDEX_OPS(TPURT_INDEX_DECLARE_)
#undef TPURT_INDEX_DECLARE_

#endif /* TPURT_OPS_INDEX_KERNELS_H_ */
