/* The conv kernel family's op table (see tpurt/kernel.h for the ABI):
 * convolution (im2col + GEMM), pooling and upsampling. */
#include "ops/linalg/linalg.h"

#define OP(NAME, FN) {NAME, tpurt_linalg_##FN, tpurt_linalg_##FN##_ref, 0}

const tpurt_op_def_t tpurt_ops_conv[] = {
    /* Reached through an explicit PrivateUse1 registration (these two have a
     * CompositeExplicitAutograd kernel that throws, so the boxed fallback never
     * sees them); aten::convolution routes non-CPU/CUDA devices here. */
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
    OP("max_pool2d_with_indices", max_pool2d),
    OP("max_pool2d_with_indices_backward", max_pool2d_backward),
    OP("adaptive_max_pool2d", adaptive_max_pool2d),
    OP("adaptive_max_pool2d_backward", adaptive_max_pool2d_backward),
    OP("avg_pool2d", avg_pool2d),
    OP("avg_pool2d_backward", avg_pool2d_backward),
    OP("adaptive_avg_pool2d", adaptive_avg_pool2d), /* adaptive_avg_pool2d.out */
    OP("_adaptive_avg_pool2d", adaptive_avg_pool2d),
    OP("_adaptive_avg_pool2d_backward", adaptive_avg_pool2d_backward),
    OP("upsample_nearest2d", upsample_nearest2d),
    OP("upsample_nearest2d_backward", upsample_nearest2d_backward),
    OP("upsample_bilinear2d", upsample_bilinear2d),
    OP("upsample_bilinear2d_backward", upsample_bilinear2d_backward),
    OP("upsample_nearest1d", upsample_nearest1d),
    OP("upsample_nearest1d_backward", upsample_nearest1d_backward),
    OP("upsample_linear1d", upsample_linear1d),
    OP("upsample_linear1d_backward", upsample_linear1d_backward),
    TPURT_OP_TABLE_END,
};
