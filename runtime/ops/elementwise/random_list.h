/* Every random kernel: RND_X(kernel, "registered name", flags); functions are
 * tpurt_rnd_k_<kernel> / tpurt_rnd_r_<kernel>. Expanded in random_table.c. */
#ifndef TPURT_OPS_RANDOM_LIST_H_
#define TPURT_OPS_RANDOM_LIST_H_

#include "tpurt/kernel.h"

#define RND_OP_LIST(RND_X)                                                       \
  RND_X(uniform, "uniform", TPURT_OP_RANDOM | TPURT_OP_ALIAS_SAFE)               \
  RND_X(normal, "normal", TPURT_OP_RANDOM | TPURT_OP_ALIAS_SAFE)                 \
  RND_X(bernoulli, "bernoulli", TPURT_OP_RANDOM | TPURT_OP_ALIAS_SAFE)           \
  RND_X(random, "random", TPURT_OP_RANDOM | TPURT_OP_ALIAS_SAFE)                 \
  RND_X(exponential, "exponential", TPURT_OP_RANDOM | TPURT_OP_ALIAS_SAFE)       \
  RND_X(geometric, "geometric", TPURT_OP_RANDOM | TPURT_OP_ALIAS_SAFE)           \
  RND_X(cauchy, "cauchy", TPURT_OP_RANDOM | TPURT_OP_ALIAS_SAFE)                 \
  RND_X(log_normal, "log_normal", TPURT_OP_RANDOM | TPURT_OP_ALIAS_SAFE)         \
  RND_X(native_dropout, "native_dropout", TPURT_OP_RANDOM | TPURT_OP_ALIAS_SAFE) \
  RND_X(native_dropout_backward, "native_dropout_backward", TPURT_OP_ALIAS_SAFE) \
  RND_X(multinomial, "multinomial", TPURT_OP_RANDOM)

#define RND_DECLARE(k, name, flags)                                                          \
  tpurt_status_t tpurt_rnd_k_##k(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);      \
  tpurt_status_t tpurt_rnd_r_##k(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);
RND_OP_LIST(RND_DECLARE)
#undef RND_DECLARE

#endif /* TPURT_OPS_RANDOM_LIST_H_ */
