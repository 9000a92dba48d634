/* The nn kernel family: convolution, pooling (2-D and 3-D), upsampling, grid
 * sampling, embedding_bag, losses (CTC included) and pairwise distances. Each
 * kernel has a reference twin (suffix _ref); the op table is nn_table.c. */
#ifndef TPURT_OPS_NN_NN_H_
#define TPURT_OPS_NN_NN_H_

#include "ops/args.h"

#define TPURT_NN_DECLARE(NAME)                                                              \
  tpurt_status_t tpurt_nn_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);     \
  tpurt_status_t tpurt_nn_##NAME##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);

/* A kernel and its reference twin from one expression in `ref` (which it may
 * ignore: a plain scalar kernel is its own reference). */
#define TPURT_NN_PAIR(NAME, EXPR)                                                              \
  tpurt_status_t tpurt_nn_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {       \
    const bool ref = false;                                                                    \
    (void)ref;                                                                                 \
    return EXPR;                                                                               \
  }                                                                                            \
  tpurt_status_t tpurt_nn_##NAME##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { \
    const bool ref = true;                                                                     \
    (void)ref;                                                                                 \
    return EXPR;                                                                               \
  }

/* fused attention (attention.c) */
TPURT_NN_DECLARE(sdpa_flash)
TPURT_NN_DECLARE(sdpa_flash_backward)
/* convolution (conv.c) */
TPURT_NN_DECLARE(conv)
TPURT_NN_DECLARE(conv_backward)
TPURT_NN_DECLARE(slow_conv)
TPURT_NN_DECLARE(slow_conv_backward)
TPURT_NN_DECLARE(im2col)
TPURT_NN_DECLARE(col2im)
/* 2-D pooling (pool2d.c) */
TPURT_NN_DECLARE(max_pool2d)
TPURT_NN_DECLARE(max_pool2d_backward)
TPURT_NN_DECLARE(adaptive_max_pool2d)
TPURT_NN_DECLARE(adaptive_max_pool2d_backward)
TPURT_NN_DECLARE(avg_pool2d)
TPURT_NN_DECLARE(avg_pool2d_backward)
TPURT_NN_DECLARE(adaptive_avg_pool2d)
TPURT_NN_DECLARE(adaptive_avg_pool2d_backward)
/* 3-D pooling (pool3d.c) */
TPURT_NN_DECLARE(avg_pool3d)
TPURT_NN_DECLARE(avg_pool3d_backward)
TPURT_NN_DECLARE(adaptive_avg_pool3d)
TPURT_NN_DECLARE(adaptive_avg_pool3d_backward)
TPURT_NN_DECLARE(max_pool3d_backward)
TPURT_NN_DECLARE(adaptive_max_pool3d)
TPURT_NN_DECLARE(adaptive_max_pool3d_backward)
/* fractional max pooling, 2-D and 3-D (pool_fractional.c) */
TPURT_NN_DECLARE(fractional_max_pool2d)
TPURT_NN_DECLARE(fractional_max_pool2d_backward)
TPURT_NN_DECLARE(fractional_max_pool3d)
TPURT_NN_DECLARE(fractional_max_pool3d_backward)
/* upsampling: nearest and (bi)linear 1-D/2-D (upsample.c) */
TPURT_NN_DECLARE(upsample_nearest2d)
TPURT_NN_DECLARE(upsample_nearest2d_backward)
TPURT_NN_DECLARE(upsample_bilinear2d)
TPURT_NN_DECLARE(upsample_bilinear2d_backward)
TPURT_NN_DECLARE(upsample_nearest1d)
TPURT_NN_DECLARE(upsample_nearest1d_backward)
TPURT_NN_DECLARE(upsample_linear1d)
TPURT_NN_DECLARE(upsample_linear1d_backward)
/* upsampling through per-axis tap tables (upsample_taps.c) */
TPURT_NN_DECLARE(upsample_nearest_bwd)
TPURT_NN_DECLARE(upsample_nearest_exact_bwd)
TPURT_NN_DECLARE(upsample_linear_bwd)
TPURT_NN_DECLARE(upsample_bicubic_fwd)
TPURT_NN_DECLARE(upsample_bicubic_bwd)
TPURT_NN_DECLARE(upsample_bilinear_aa)
TPURT_NN_DECLARE(upsample_bilinear_aa_bwd)
TPURT_NN_DECLARE(upsample_bicubic_aa)
TPURT_NN_DECLARE(upsample_bicubic_aa_bwd)
TPURT_NN_DECLARE(upsample_linear_fwd)
/* grid sampling (grid_sample.c) */
TPURT_NN_DECLARE(grid_sampler_2d)
TPURT_NN_DECLARE(grid_sampler_2d_backward)
TPURT_NN_DECLARE(grid_sampler_3d)
TPURT_NN_DECLARE(grid_sampler_3d_backward)
/* embedding_bag (embedding_bag.c) */
TPURT_NN_DECLARE(embedding_bag)
TPURT_NN_DECLARE(embedding_bag_backward)
TPURT_NN_DECLARE(embedding_bag_dense_backward)
TPURT_NN_DECLARE(embedding_bag_psw_backward)
/* losses (loss.c, ctc_loss.c) */
TPURT_NN_DECLARE(mse_loss)
TPURT_NN_DECLARE(mse_loss_backward)
TPURT_NN_DECLARE(l1_loss)
TPURT_NN_DECLARE(huber_loss)
TPURT_NN_DECLARE(huber_loss_backward)
TPURT_NN_DECLARE(smooth_l1_loss)
TPURT_NN_DECLARE(smooth_l1_loss_backward)
TPURT_NN_DECLARE(binary_cross_entropy)
TPURT_NN_DECLARE(binary_cross_entropy_backward)
TPURT_NN_DECLARE(nll_loss_forward)
TPURT_NN_DECLARE(nll_loss_backward)
TPURT_NN_DECLARE(ctc_loss)
TPURT_NN_DECLARE(ctc_loss_backward)
/* pairwise distances (distance.c) */
TPURT_NN_DECLARE(cdist_forward)
TPURT_NN_DECLARE(cdist_backward)
TPURT_NN_DECLARE(pdist_forward)
TPURT_NN_DECLARE(pdist_backward)

/* Output i, or INVALID_ARGUMENT when the call has fewer outputs. */
static inline tpurt_status_t tpurt_nn_output(const tpurt_op_call_t* call, int i, const tpurt_tensor_t** o) {
  if (i >= call->num_outputs) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing output %d", call->name, i);
  *o = &call->outputs[i];
  return TPURT_OK;
}

/* Element `off` (in elements) of t through double / int64: the per-element
 * access of the scalar-loop kernels. float32, float64 and int64 are read and
 * written inline (a predictable branch); other dtypes go through the dtype
 * table's out-of-line converters, which cost a call per element. */
static inline double tpurt_nn_ld(const tpurt_tensor_t* t, int64_t off) {
  if (t->dtype == TPURT_DTYPE_FLOAT32) return ((const float*)t->data)[off];
  if (t->dtype == TPURT_DTYPE_FLOAT64) return ((const double*)t->data)[off];
  return tpurt_dtype_load_f64(t->dtype, (const char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype));
}
static inline void tpurt_nn_st(const tpurt_tensor_t* t, int64_t off, double v) {
  if (t->dtype == TPURT_DTYPE_FLOAT32) ((float*)t->data)[off] = (float)v;
  else if (t->dtype == TPURT_DTYPE_FLOAT64) ((double*)t->data)[off] = v;
  else tpurt_dtype_store_f64(t->dtype, (char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype), v);
}
static inline int64_t tpurt_nn_ldi(const tpurt_tensor_t* t, int64_t off) {
  if (t->dtype == TPURT_DTYPE_INT64) return ((const int64_t*)t->data)[off];
  return tpurt_dtype_load_i64(t->dtype, (const char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype));
}
static inline void tpurt_nn_sti(const tpurt_tensor_t* t, int64_t off, int64_t v) {
  if (t->dtype == TPURT_DTYPE_INT64) ((int64_t*)t->data)[off] = v;
  else tpurt_dtype_store_i64(t->dtype, (char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype), v);
}

#endif /* TPURT_OPS_NN_NN_H_ */
