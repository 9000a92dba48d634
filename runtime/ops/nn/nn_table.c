/* The nn kernel family's op table (see tpurt/kernel.h for the ABI):
 * convolution, pooling, upsampling, grid sampling, embedding_bag, losses and
 * pairwise distances. Kernels are declared in nn.h. */
#include "ops/nn/nn.h"

/* The dtypes of the first tensor argument (the input, or the gradient for a
 * backward). Most nn kernels compute in floating point only (NN_DT_FLOAT);
 * cdist/pdist and CTC loss in float32/float64 only (NN_DT_F32_F64); a
 * non-transposed convolution forward also in integers (NN_DT_CONV); the
 * kernels that only move or compare elements (max pooling, nearest
 * upsampling forward, im2col, avg_pool3d forward) take every real dtype. */
#define NN_DT_FLOAT TPURT_DTYPES_FLOAT
#define NN_DT_F32_F64 (TPURT_DTYPE_BIT(FLOAT32) | TPURT_DTYPE_BIT(FLOAT64))
#define NN_DT_CONV (TPURT_DTYPES_FLOAT | TPURT_DTYPES_INT)
#define NN_DT_ANY TPURT_DTYPES_REAL
/* image resizing forwards also take uint8 images (rounded as CPU's uint8 path) */
#define NN_DT_IMAGE (TPURT_DTYPES_FLOAT | TPURT_DTYPE_BIT(UINT8))
/* avg_pool2d's forward also sums signed integers */
#define NN_DT_AVG_POOL2D \
  (TPURT_DTYPES_FLOAT | TPURT_DTYPE_BIT(INT8) | TPURT_DTYPE_BIT(INT16) | TPURT_DTYPE_BIT(INT32) | TPURT_DTYPE_BIT(INT64))

#define OP(NAME, FN, DT) {NAME, tpurt_nn_##FN, tpurt_nn_##FN##_ref, 0, DT, TPURT_LAYOUT_STRIDED}

const tpurt_op_def_t tpurt_ops_nn[] = {
    /* scaled_dot_product_attention's fused kernel (attention.c); SDPA picks it
     * for tpu tensors through torch_tpu/csrc/sdpa.cpp's backend choice */
    OP("_scaled_dot_product_flash_attention_for_cpu", sdpa_flash, NN_DT_FLOAT),
    OP("_scaled_dot_product_flash_attention_for_cpu_backward", sdpa_flash_backward, NN_DT_FLOAT),
    /* convolution (conv.c). Reached through an explicit PrivateUse1
     * registration (these two have a CompositeExplicitAutograd kernel that
     * throws, so the boxed fallback never sees them); aten::convolution routes
     * non-CPU/CUDA devices here. */
    OP("convolution_overrideable", conv, NN_DT_CONV),
    OP("convolution_backward_overrideable", conv_backward, NN_DT_FLOAT),
    /* the CPU-named forms, which reach the boxed fallback with meta shapes */
    OP("_slow_conv2d_forward", slow_conv, NN_DT_CONV),
    OP("_slow_conv2d_backward", slow_conv_backward, NN_DT_FLOAT),
    OP("slow_conv3d_forward", slow_conv, NN_DT_CONV),
    OP("slow_conv_dilated2d", slow_conv, NN_DT_CONV),
    OP("slow_conv_dilated3d", slow_conv, NN_DT_CONV),
    OP("slow_conv_transpose2d", slow_conv, NN_DT_FLOAT),
    OP("slow_conv_transpose3d", slow_conv, NN_DT_FLOAT),
    OP("im2col", im2col, NN_DT_ANY),
    OP("col2im", col2im, NN_DT_FLOAT),

    /* 2-D pooling (pool2d.c) */
    OP("max_pool2d_with_indices", max_pool2d, NN_DT_ANY),
    OP("max_pool2d_with_indices_backward", max_pool2d_backward, NN_DT_ANY),
    OP("adaptive_max_pool2d", adaptive_max_pool2d, NN_DT_ANY),
    OP("adaptive_max_pool2d_backward", adaptive_max_pool2d_backward, NN_DT_ANY),
    OP("avg_pool2d", avg_pool2d, NN_DT_AVG_POOL2D),
    OP("avg_pool2d_backward", avg_pool2d_backward, NN_DT_FLOAT),
    OP("adaptive_avg_pool2d", adaptive_avg_pool2d, NN_DT_FLOAT), /* adaptive_avg_pool2d.out */
    OP("_adaptive_avg_pool2d", adaptive_avg_pool2d, NN_DT_FLOAT),
    OP("_adaptive_avg_pool2d_backward", adaptive_avg_pool2d_backward, NN_DT_FLOAT),

    /* 3-D pooling (pool3d.c) */
    OP("avg_pool3d", avg_pool3d, NN_DT_ANY),
    OP("avg_pool3d_backward", avg_pool3d_backward, NN_DT_FLOAT),
    OP("adaptive_avg_pool3d", adaptive_avg_pool3d, NN_DT_FLOAT),
    OP("_adaptive_avg_pool3d", adaptive_avg_pool3d, NN_DT_FLOAT),
    OP("adaptive_avg_pool3d_backward", adaptive_avg_pool3d_backward, NN_DT_FLOAT),
    OP("_adaptive_avg_pool3d_backward", adaptive_avg_pool3d_backward, NN_DT_FLOAT),
    OP("max_pool3d_with_indices_backward", max_pool3d_backward, NN_DT_FLOAT),
    OP("adaptive_max_pool3d_backward", adaptive_max_pool3d_backward, NN_DT_FLOAT),
    OP("adaptive_max_pool3d", adaptive_max_pool3d, NN_DT_FLOAT),

    /* fractional max pooling (pool_fractional.c) */
    OP("fractional_max_pool2d", fractional_max_pool2d, NN_DT_FLOAT),
    OP("fractional_max_pool2d_backward", fractional_max_pool2d_backward, NN_DT_FLOAT),
    OP("fractional_max_pool3d", fractional_max_pool3d, NN_DT_FLOAT),
    OP("fractional_max_pool3d_backward", fractional_max_pool3d_backward, NN_DT_FLOAT),

    /* upsampling (upsample.c, upsample_taps.c) */
    OP("upsample_nearest2d", upsample_nearest2d, NN_DT_ANY),
    OP("upsample_nearest2d_backward", upsample_nearest2d_backward, NN_DT_FLOAT),
    OP("upsample_bilinear2d", upsample_bilinear2d, NN_DT_IMAGE),
    OP("upsample_bilinear2d_backward", upsample_bilinear2d_backward, NN_DT_FLOAT),
    OP("upsample_nearest1d", upsample_nearest1d, NN_DT_ANY),
    OP("upsample_nearest1d_backward", upsample_nearest1d_backward, NN_DT_FLOAT),
    OP("upsample_linear1d", upsample_linear1d, NN_DT_FLOAT),
    OP("upsample_linear1d_backward", upsample_linear1d_backward, NN_DT_FLOAT),
    OP("upsample_nearest3d_backward", upsample_nearest_bwd, NN_DT_FLOAT),
    OP("_upsample_nearest_exact1d_backward", upsample_nearest_exact_bwd, NN_DT_FLOAT),
    OP("_upsample_nearest_exact2d_backward", upsample_nearest_exact_bwd, NN_DT_FLOAT),
    OP("_upsample_nearest_exact3d_backward", upsample_nearest_exact_bwd, NN_DT_FLOAT),
    OP("upsample_trilinear3d_backward", upsample_linear_bwd, NN_DT_FLOAT),
    OP("upsample_bicubic2d", upsample_bicubic_fwd, NN_DT_IMAGE),
    OP("upsample_bicubic2d_backward", upsample_bicubic_bwd, NN_DT_FLOAT),
    OP("_upsample_bilinear2d_aa", upsample_bilinear_aa, NN_DT_IMAGE),
    OP("_upsample_bicubic2d_aa", upsample_bicubic_aa, NN_DT_IMAGE),
    OP("_upsample_bicubic2d_aa_backward", upsample_bicubic_aa_bwd, NN_DT_FLOAT),
    OP("_upsample_bilinear2d_aa_backward", upsample_bilinear_aa_bwd, NN_DT_FLOAT),

    /* grid sampling (grid_sample.c) */
    OP("grid_sampler_2d", grid_sampler_2d, NN_DT_FLOAT),
    OP("grid_sampler_2d_backward", grid_sampler_2d_backward, NN_DT_FLOAT),
    OP("grid_sampler_3d", grid_sampler_3d, NN_DT_FLOAT),
    OP("grid_sampler_3d_backward", grid_sampler_3d_backward, NN_DT_FLOAT),

    /* embedding_bag (embedding_bag.c) */
    OP("_embedding_bag", embedding_bag, NN_DT_FLOAT),
    OP("_embedding_bag_forward_only", embedding_bag, NN_DT_FLOAT),
    OP("_embedding_bag_backward", embedding_bag_backward, NN_DT_FLOAT),
    OP("_embedding_bag_dense_backward", embedding_bag_dense_backward, NN_DT_FLOAT),
    OP("_embedding_bag_per_sample_weights_backward", embedding_bag_psw_backward, NN_DT_ANY),

    /* losses (loss.c, ctc_loss.c) */
    OP("mse_loss", mse_loss, NN_DT_FLOAT),
    OP("mse_loss_backward", mse_loss_backward, NN_DT_FLOAT),
    OP("l1_loss", l1_loss, NN_DT_FLOAT),
    OP("huber_loss", huber_loss, NN_DT_FLOAT),
    OP("huber_loss_backward", huber_loss_backward, NN_DT_FLOAT),
    OP("smooth_l1_loss", smooth_l1_loss, NN_DT_FLOAT),
    OP("smooth_l1_loss_backward", smooth_l1_loss_backward, NN_DT_FLOAT),
    OP("binary_cross_entropy", binary_cross_entropy, NN_DT_FLOAT),
    OP("binary_cross_entropy_backward", binary_cross_entropy_backward, NN_DT_FLOAT),
    OP("nll_loss_forward", nll_loss_forward, NN_DT_FLOAT),
    OP("nll_loss_backward", nll_loss_backward, NN_DT_FLOAT),
    OP("nll_loss2d_forward", nll_loss_forward, NN_DT_FLOAT),
    OP("nll_loss2d_backward", nll_loss_backward, NN_DT_FLOAT),
    OP("_ctc_loss", ctc_loss, NN_DT_F32_F64), /* _ctc_loss and _ctc_loss.Tensor: lengths as int lists or tensors */
    OP("_ctc_loss_backward", ctc_loss_backward, NN_DT_F32_F64),

    /* pairwise distances (distance.c) */
    OP("_cdist_forward", cdist_forward, NN_DT_F32_F64),
    OP("_cdist_backward", cdist_backward, NN_DT_F32_F64),
    OP("_pdist_forward", pdist_forward, NN_DT_F32_F64),
    OP("_pdist_backward", pdist_backward, NN_DT_F32_F64),
    TPURT_OP_TABLE_END,
};
