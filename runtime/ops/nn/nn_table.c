/* The nn kernel family's op table (see tpurt/kernel.h for the ABI):
 * convolution, pooling, upsampling, grid sampling, embedding_bag, losses and
 * pairwise distances. Kernels are declared in nn.h. */
#include "ops/nn/nn.h"

#define OP(NAME, FN) {NAME, tpurt_nn_##FN, tpurt_nn_##FN##_ref, 0}

const tpurt_op_def_t tpurt_ops_nn[] = {
    /* convolution (conv.c). Reached through an explicit PrivateUse1
     * registration (these two have a CompositeExplicitAutograd kernel that
     * throws, so the boxed fallback never sees them); aten::convolution routes
     * non-CPU/CUDA devices here. */
    OP("convolution_overrideable", conv),
    OP("convolution_backward_overrideable", conv_backward),
    /* the CPU-named forms, which reach the boxed fallback with meta shapes */
    OP("_slow_conv2d_forward", slow_conv),
    OP("_slow_conv2d_backward", slow_conv_backward),
    OP("slow_conv3d_forward", slow_conv),
    OP("slow_conv_dilated2d", slow_conv),
    OP("slow_conv_dilated3d", slow_conv),
    OP("slow_conv_transpose2d", slow_conv),
    OP("slow_conv_transpose3d", slow_conv),
    OP("im2col", im2col),
    OP("col2im", col2im),

    /* 2-D pooling (pool2d.c) */
    OP("max_pool2d_with_indices", max_pool2d),
    OP("max_pool2d_with_indices_backward", max_pool2d_backward),
    OP("adaptive_max_pool2d", adaptive_max_pool2d),
    OP("adaptive_max_pool2d_backward", adaptive_max_pool2d_backward),
    OP("avg_pool2d", avg_pool2d),
    OP("avg_pool2d_backward", avg_pool2d_backward),
    OP("adaptive_avg_pool2d", adaptive_avg_pool2d), /* adaptive_avg_pool2d.out */
    OP("_adaptive_avg_pool2d", adaptive_avg_pool2d),
    OP("_adaptive_avg_pool2d_backward", adaptive_avg_pool2d_backward),

    /* 3-D pooling (pool3d.c) */
    OP("avg_pool3d", avg_pool3d),
    OP("avg_pool3d_backward", avg_pool3d_backward),
    OP("adaptive_avg_pool3d", adaptive_avg_pool3d),
    OP("_adaptive_avg_pool3d", adaptive_avg_pool3d),
    OP("adaptive_avg_pool3d_backward", adaptive_avg_pool3d_backward),
    OP("_adaptive_avg_pool3d_backward", adaptive_avg_pool3d_backward),
    OP("max_pool3d_with_indices_backward", max_pool3d_backward),
    OP("adaptive_max_pool3d_backward", adaptive_max_pool3d_backward),
    OP("adaptive_max_pool3d", adaptive_max_pool3d),

    /* upsampling (upsample.c, upsample_taps.c) */
    OP("upsample_nearest2d", upsample_nearest2d),
    OP("upsample_nearest2d_backward", upsample_nearest2d_backward),
    OP("upsample_bilinear2d", upsample_bilinear2d),
    OP("upsample_bilinear2d_backward", upsample_bilinear2d_backward),
    OP("upsample_nearest1d", upsample_nearest1d),
    OP("upsample_nearest1d_backward", upsample_nearest1d_backward),
    OP("upsample_linear1d", upsample_linear1d),
    OP("upsample_linear1d_backward", upsample_linear1d_backward),
    OP("upsample_nearest3d_backward", upsample_nearest_bwd),
    OP("_upsample_nearest_exact1d_backward", upsample_nearest_exact_bwd),
    OP("_upsample_nearest_exact2d_backward", upsample_nearest_exact_bwd),
    OP("_upsample_nearest_exact3d_backward", upsample_nearest_exact_bwd),
    OP("upsample_trilinear3d_backward", upsample_linear_bwd),
    OP("upsample_bicubic2d_backward", upsample_bicubic_bwd),
    OP("_upsample_bilinear2d_aa", upsample_bilinear_aa),
    OP("_upsample_bilinear2d_aa_backward", upsample_bilinear_aa_bwd),

    /* grid sampling (grid_sample.c) */
    OP("grid_sampler_2d", grid_sampler_2d),
    OP("grid_sampler_2d_backward", grid_sampler_2d_backward),
    OP("grid_sampler_3d", grid_sampler_3d),
    OP("grid_sampler_3d_backward", grid_sampler_3d_backward),

    /* embedding_bag (embedding_bag.c) */
    OP("_embedding_bag", embedding_bag),
    OP("_embedding_bag_forward_only", embedding_bag),
    OP("_embedding_bag_backward", embedding_bag_backward),
    OP("_embedding_bag_dense_backward", embedding_bag_dense_backward),
    OP("_embedding_bag_per_sample_weights_backward", embedding_bag_psw_backward),

    /* losses (loss.c, ctc_loss.c) */
    OP("mse_loss", mse_loss),
    OP("mse_loss_backward", mse_loss_backward),
    OP("l1_loss", l1_loss),
    OP("huber_loss", huber_loss),
    OP("huber_loss_backward", huber_loss_backward),
    OP("smooth_l1_loss", smooth_l1_loss),
    OP("smooth_l1_loss_backward", smooth_l1_loss_backward),
    OP("binary_cross_entropy", binary_cross_entropy),
    OP("binary_cross_entropy_backward", binary_cross_entropy_backward),
    OP("nll_loss_forward", nll_loss_forward),
    OP("nll_loss_backward", nll_loss_backward),
    OP("nll_loss2d_forward", nll_loss_forward),
    OP("nll_loss2d_backward", nll_loss_backward),
    OP("_ctc_loss", ctc_loss), /* _ctc_loss and _ctc_loss.Tensor: lengths as int lists or tensors */
    OP("_ctc_loss_backward", ctc_loss_backward),

    /* pairwise distances (distance.c) */
    OP("_cdist_forward", cdist_forward),
    OP("_cdist_backward", cdist_backward),
    OP("_pdist_forward", pdist_forward),
    OP("_pdist_backward", pdist_backward),
    TPURT_OP_TABLE_END,
};
