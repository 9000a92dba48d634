/* Internal: the reductions collectives apply, one block at a time, over the
 * inputs of every rank (in rank order, so every rank computes the same bits). */
#ifndef TPURT_DIST_REDUCE_H_
#define TPURT_DIST_REDUCE_H_

#include "tpurt/dist.h"

/* INVALID_ARGUMENT naming `what`, the op and the dtype when the reduction is
 * not defined for it (min/max on complex, bitwise ops on floats, avg on
 * integers). */
tpurt_status_t tpurt_dist_redop_check(tpurt_dtype_t dtype, tpurt_dist_redop_t op, const char* what);

/* out[i] = srcs[0][i] op srcs[1][i] op ... (n elements); 16-bit floats are
 * accumulated in float32 in `acc` (4 * n bytes) and rounded once. AVG divides
 * the sum by nsrc. */
void tpurt_dist_reduce_block(tpurt_dtype_t dtype, tpurt_dist_redop_t op, const void* const* srcs, int nsrc,
                             uint64_t n, void* out, void* acc);

#endif /* TPURT_DIST_REDUCE_H_ */
