/* Every random kernel: RND_X(kernel, "registered name", flags, dtypes);
 * functions are tpurt_rnd_k_<kernel> / tpurt_rnd_r_<kernel>. Expanded in
 * random_table.c. */
#ifndef TPURT_OPS_RANDOM_LIST_H_
#define TPURT_OPS_RANDOM_LIST_H_

#include "tpurt/kernel.h"

/* The dtypes of the first tensor argument (the tensor filled, or the
 * probabilities / the mean; a factory's output): the continuous distributions
 * and dropout write floating point only; bernoulli_, random_, geometric_ and
 * multinomial take every real dtype (random_ the wide unsigned ones too). */
#define RND_DT_FLOAT TPURT_DTYPES_FLOAT
#define RND_DT_ANY TPURT_DTYPES_REAL
#define RND_DT_INTS (TPURT_DTYPES_REAL | TPURT_DTYPES_UINT_WIDE) /* random_ also fills uint16/32/64, as CPU */
#define RND_DRAW (TPURT_OP_RANDOM | TPURT_OP_ALIAS_SAFE)
#define RND_FILL (RND_DRAW | TPURT_OP_OVERWRITES_SELF) /* the in-place fills: self is not read */

#define RND_OP_LIST(RND_X)                                                             \
  RND_X(uniform, "uniform", RND_FILL, RND_DT_FLOAT)                                    \
  RND_X(normal, "normal", RND_FILL, RND_DT_FLOAT)                                      \
  RND_X(bernoulli, "bernoulli", RND_FILL, RND_DT_ANY)                                  \
  RND_X(random, "random", RND_FILL, RND_DT_INTS)                                        \
  RND_X(exponential, "exponential", RND_FILL, RND_DT_FLOAT)                            \
  RND_X(geometric, "geometric", RND_FILL, RND_DT_ANY)                                  \
  RND_X(cauchy, "cauchy", RND_FILL, RND_DT_FLOAT)                                      \
  RND_X(log_normal, "log_normal", RND_FILL, RND_DT_FLOAT)                              \
  RND_X(native_dropout, "native_dropout", RND_DRAW, RND_DT_FLOAT)                      \
  RND_X(native_dropout_backward, "native_dropout_backward", TPURT_OP_ALIAS_SAFE, RND_DT_FLOAT) \
  RND_X(multinomial, "multinomial", TPURT_OP_RANDOM, RND_DT_ANY)

#define RND_DECLARE(k, name, flags, dtypes)                                                          \
  tpurt_status_t tpurt_rnd_k_##k(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);      \
  tpurt_status_t tpurt_rnd_r_##k(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);
RND_OP_LIST(RND_DECLARE)
#undef RND_DECLARE

#endif /* TPURT_OPS_RANDOM_LIST_H_ */
