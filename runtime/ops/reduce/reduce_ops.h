/* Kernel entry points of the reduce and norm families (optimized + reference
 * pairs), shared by reduce_table.c, norm_table.c and the C tests. */
#ifndef TPURT_OPS_REDUCE_REDUCE_OPS_H_
#define TPURT_OPS_REDUCE_REDUCE_OPS_H_

#include "ops/reduce/reduce.h"

/* Sum over i_ in [0, N) of EXPR (in i_), in 8 independent lanes so the loop
 * vectorizes (one running sum is a dependent add per element). */
#define TPURT_LANE_SUM(T, N, EXPR)                                                         \
  ({                                                                                       \
    const int64_t n_ = (N);                                                                \
    T l_[8] = {0}, s_ = 0;                                                                 \
    int64_t i_ = 0;                                                                        \
    for (int64_t b_ = 0; b_ + 8 <= n_; b_ += 8)                                            \
      for (int k_ = 0; k_ < 8; ++k_) { i_ = b_ + k_; l_[k_] += (EXPR); }                   \
    for (i_ = n_ & ~(int64_t)7; i_ < n_; ++i_) s_ += (EXPR);                               \
    for (int k_ = 0; k_ < 8; ++k_) s_ += l_[k_];                                           \
    s_;                                                                                    \
  })

#define TPURT_DECLARE_KERNEL_PAIR(name)                                                  \
  tpurt_status_t tpurt_kernel_##name(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c); \
  tpurt_status_t tpurt_kernel_##name##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c);

#define TPURT_REDUCE_KERNELS(X) \
  X(sum) X(nansum) X(mean) X(prod) X(amax) X(amin) X(max) X(min) X(argmax) X(argmin) X(all) X(any) \
  X(count_nonzero) X(var) X(std) X(var_mean) X(std_mean) X(linalg_vector_norm) X(norm) X(logsumexp) \
  X(aminmax) X(cumsum) X(cumprod) X(logcumsumexp) X(sort) X(topk) X(kthvalue) X(median) X(nanmedian) X(mode) X(cummax_helper) X(cummin_helper) X(trace) X(renorm) X(hash_tensor) \
  X(unique_dim_order)

#define TPURT_NORM_KERNELS(X) \
  X(softmax) X(log_softmax) X(softmax_backward_data) X(log_softmax_backward_data) \
  X(native_layer_norm) X(native_layer_norm_backward) X(fused_rms_norm) X(fused_rms_norm_backward) \
  X(native_batch_norm) X(native_batch_norm_legit) X(batch_norm_with_update) X(batch_norm_no_update) X(native_batch_norm_backward) \
  X(batch_norm_backward) X(batch_norm_update_stats) X(native_group_norm) X(native_group_norm_backward)

TPURT_REDUCE_KERNELS(TPURT_DECLARE_KERNEL_PAIR)
TPURT_NORM_KERNELS(TPURT_DECLARE_KERNEL_PAIR)

/* Test hook (reduce.c): the reduced size above which a reduction with few
 * outputs splits the reduced range over threads (default 65536). */
void tpurt_reduce_set_split_min(int64_t k);

#endif
