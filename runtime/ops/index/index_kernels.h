/* The index family's kernels, listed once: index_table.c builds the op table
 * from this list and each file defines tpurt_index_k_<id> (optimized) and
 * tpurt_index_r_<id> (reference). */
#ifndef TPURT_OPS_INDEX_KERNELS_H_
#define TPURT_OPS_INDEX_KERNELS_H_

#include "tpurt/kernel.h"

/* X(op name, id, flags). ALIAS_SAFE: out may be self itself (in-place);
 * other inputs that overlap out are read from private copies. */
#define TPURT_INDEX_OPS(X) \
  X("index", index, 0) \
  X("_index_put_impl", index_put, TPURT_OP_ALIAS_SAFE) \
  X("index_put", index_put, TPURT_OP_ALIAS_SAFE) \
  X("gather", gather, 0) \
  X("scatter", scatter, TPURT_OP_ALIAS_SAFE) \
  X("scatter_add", scatter_add, TPURT_OP_ALIAS_SAFE) \
  X("scatter_reduce", scatter_reduce, TPURT_OP_ALIAS_SAFE) \
  X("index_select", index_select, 0) \
  X("index_add", index_add, TPURT_OP_ALIAS_SAFE) \
  X("index_copy", index_copy, TPURT_OP_ALIAS_SAFE) \
  X("index_fill", index_fill, TPURT_OP_ALIAS_SAFE) \
  X("index_reduce", index_reduce, TPURT_OP_ALIAS_SAFE) \
  X("take", take, 0) \
  X("put", put, TPURT_OP_ALIAS_SAFE) \
  X("embedding_dense_backward", embedding_dense_backward, 0) \
  X("embedding_renorm", embedding_renorm, TPURT_OP_ALIAS_SAFE) \
  X("nonzero", nonzero, 0) \
  X("nonzero_static", nonzero, 0) \
  X("masked_select", masked_select, 0) \
  X("masked_scatter", masked_scatter, TPURT_OP_ALIAS_SAFE) \
  X("cat", cat, 0) \
  X("flip", flip, 0) \
  X("roll", roll, 0) \
  X("tril", tril, TPURT_OP_ALIAS_SAFE) \
  X("triu", triu, TPURT_OP_ALIAS_SAFE) \
  X("repeat_interleave", repeat_interleave, 0) \
  X("unfold_backward", unfold_backward, 0) \
  X("arange", arange, 0) \
  X("range", range, 0) \
  X("linspace", linspace, 0) \
  X("logspace", logspace, 0) \
  X("eye", eye, 0) \
  X("tril_indices", tril_indices, 0) \
  X("triu_indices", triu_indices, 0) \
  X("searchsorted", searchsorted, 0) \
  X("bucketize", bucketize, 0) \
  X("histc", histc, 0)

#define TPURT_INDEX_DECLARE_(name, id, flags)                                                  \
  tpurt_status_t tpurt_index_k_##id(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call); \
  tpurt_status_t tpurt_index_r_##id(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);
TPURT_INDEX_OPS(TPURT_INDEX_DECLARE_)
#undef TPURT_INDEX_DECLARE_

#endif /* TPURT_OPS_INDEX_KERNELS_H_ */
