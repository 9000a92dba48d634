/* The op table of torchvision's position-sensitive RoI ops and deformable
 * convolution (ps_roi.c, deform_conv.c). The names carry the torchvision::
 * namespace, which tpurt_op_resolve keeps (only aten:: is dropped), so the
 * boxed fallback finds them by the operator's own name. The dtypes are those
 * torchvision's CPU kernels take: ps_roi_align and deform_conv2d float16,
 * float32, float64; ps_roi_pool float32, float64. */
#include "ops/vision/ps_deform.h"

#define VS_DT_HALF (TPURT_DTYPE_BIT(FLOAT16) | TPURT_DTYPE_BIT(FLOAT32) | TPURT_DTYPE_BIT(FLOAT64))
#define VS_DT_F32_F64 (TPURT_DTYPE_BIT(FLOAT32) | TPURT_DTYPE_BIT(FLOAT64))
#define OP(NAME, FN, DT) {"torchvision::" NAME, tpurt_vision_##FN, tpurt_vision_##FN##_ref, 0, DT, TPURT_LAYOUT_STRIDED}

const tpurt_op_def_t tpurt_ops_vision_ps_deform[] = {
    OP("ps_roi_align", ps_roi_align, VS_DT_HALF),
    OP("_ps_roi_align_backward", ps_roi_align_backward, VS_DT_HALF),
    OP("ps_roi_pool", ps_roi_pool, VS_DT_F32_F64),
    OP("_ps_roi_pool_backward", ps_roi_pool_backward, VS_DT_F32_F64),
    OP("deform_conv2d", deform_conv2d, VS_DT_HALF),
    OP("_deform_conv2d_backward", deform_conv2d_backward, VS_DT_HALF),
    TPURT_OP_TABLE_END,
};
