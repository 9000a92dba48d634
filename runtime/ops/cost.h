/* The cost model of one op call: floating-point (or integer) operations and
 * device memory bytes read + written, one rule per op-table family
 * (cost.c), so every kernel has a cost and the projection (exec/project.c)
 * and the profiler can cost any program. An estimate of the work, not of
 * this machine's time: see the rules at the top of cost.c. Internal. */
#ifndef TPURT_OPS_COST_H_
#define TPURT_OPS_COST_H_

#include "tpurt/kernel.h"

typedef struct tpurt_op_cost_t {
  double flops;
  double bytes;
  int32_t dtype; /* the dtype it computes in: its first tensor operand's (-1: none) */
  bool matmul;   /* matrix products (the matmul family, convolutions): MXU work on a TPU */
} tpurt_op_cost_t;

/* Family of an op's table entry (registry.c order), -1 if not in a table. */
int tpurt_op_family_of(const tpurt_op_def_t* op);
/* Cost of `call` to `op` (op may be NULL: the generic rule). */
void tpurt_op_cost(const tpurt_op_def_t* op, const tpurt_op_call_t* call, tpurt_op_cost_t* out_cost);
/* Bytes of a tensor's elements (its view, not its storage). */
double tpurt_op_cost_tensor_bytes(const tpurt_tensor_t* t);

#endif /* TPURT_OPS_COST_H_ */
