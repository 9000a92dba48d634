/* The op table of torchvision's position-sensitive RoI ops and deformable
 * convolution (ps_roi.c, deform_conv.c), registered as "tv_<op>" so that no
 * aten:: name resolves to them; torch_tpu/csrc/vision_deform.cpp calls them
 * for tpu tensors and, where torchvision's own _C did not load, for CPU
 * tensors too (the argument order is the torchvision schema's; tensors may be
 * strided). The dtypes are those torchvision's CPU kernels take: ps_roi_align
 * and deform_conv2d float16, float32, float64; ps_roi_pool float32, float64.
 * (No shared header: a new runtime header rebuilds every runtime object, so
 * the kernels are declared here.) */
#include "ops/args.h"

#define DECL(FN)                                                                          \
  tpurt_status_t tpurt_vision_##FN(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call); \
  tpurt_status_t tpurt_vision_##FN##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);
/* ps_roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio)
 *   -> (output, channel_mapping int32)
 * _ps_roi_align_backward(grad, rois, channel_mapping, spatial_scale, pooled_height, pooled_width,
 *   sampling_ratio, batch_size, channels, height, width) -> grad_input */
DECL(ps_roi_align)
DECL(ps_roi_align_backward)
/* ps_roi_pool(input, rois, spatial_scale, pooled_height, pooled_width) -> (output, channel_mapping)
 * _ps_roi_pool_backward(grad, rois, channel_mapping, spatial_scale, pooled_height, pooled_width,
 *   batch_size, channels, height, width) -> grad_input */
DECL(ps_roi_pool)
DECL(ps_roi_pool_backward)
/* deform_conv2d(input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dilation_h,
 *   dilation_w, groups, offset_groups, use_mask) -> output
 * _deform_conv2d_backward(grad, input, weight, offset, mask, bias, <the same ints>, use_mask)
 *   -> (grad_input, grad_weight, grad_offset, grad_mask, grad_bias) */
DECL(deform_conv2d)
DECL(deform_conv2d_backward)

#define VS_DT_HALF (TPURT_DTYPE_BIT(FLOAT16) | TPURT_DTYPE_BIT(FLOAT32) | TPURT_DTYPE_BIT(FLOAT64))
#define VS_DT_F32_F64 (TPURT_DTYPE_BIT(FLOAT32) | TPURT_DTYPE_BIT(FLOAT64))
#define OP(NAME, FN, DT) {NAME, tpurt_vision_##FN, tpurt_vision_##FN##_ref, 0, DT, TPURT_LAYOUT_STRIDED}

const tpurt_op_def_t tpurt_ops_vision_ps_deform[] = {
    OP("tv_ps_roi_align", ps_roi_align, VS_DT_HALF),
    OP("tv_ps_roi_align_backward", ps_roi_align_backward, VS_DT_HALF),
    OP("tv_ps_roi_pool", ps_roi_pool, VS_DT_F32_F64),
    OP("tv_ps_roi_pool_backward", ps_roi_pool_backward, VS_DT_F32_F64),
    OP("tv_deform_conv2d", deform_conv2d, VS_DT_HALF),
    OP("tv_deform_conv2d_backward", deform_conv2d_backward, VS_DT_HALF),
    TPURT_OP_TABLE_END,
};
