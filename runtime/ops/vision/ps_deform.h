/* torchvision's position-sensitive RoI ops (ps_roi.c) and deformable
 * convolution (deform_conv.c): kernels for the torchvision:: operators of
 * torchvision 0.28, computed as torchvision's CPU kernels compute them. The
 * op table is ps_deform_table.c; each kernel has a reference twin (_ref). */
#ifndef TPURT_OPS_VISION_PS_DEFORM_H_
#define TPURT_OPS_VISION_PS_DEFORM_H_

#include "ops/nn/nn.h"

#define TPURT_VISION_DECLARE(NAME)                                                              \
  tpurt_status_t tpurt_vision_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);     \
  tpurt_status_t tpurt_vision_##NAME##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);

/* ps_roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio)
 *   -> (output, channel_mapping int32)
 * _ps_roi_align_backward(grad, rois, channel_mapping, spatial_scale, pooled_height, pooled_width,
 *   sampling_ratio, batch_size, channels, height, width) -> grad_input */
TPURT_VISION_DECLARE(ps_roi_align)
TPURT_VISION_DECLARE(ps_roi_align_backward)
/* ps_roi_pool(input, rois, spatial_scale, pooled_height, pooled_width) -> (output, channel_mapping)
 * _ps_roi_pool_backward(grad, rois, channel_mapping, spatial_scale, pooled_height, pooled_width,
 *   batch_size, channels, height, width) -> grad_input */
TPURT_VISION_DECLARE(ps_roi_pool)
TPURT_VISION_DECLARE(ps_roi_pool_backward)
/* deform_conv2d(input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dilation_h,
 *   dilation_w, groups, offset_groups, use_mask) -> output
 * _deform_conv2d_backward(grad, input, weight, offset, mask, bias, <the same ints>, use_mask)
 *   -> (grad_input, grad_weight, grad_offset, grad_mask, grad_bias) */
TPURT_VISION_DECLARE(deform_conv2d)
TPURT_VISION_DECLARE(deform_conv2d_backward)

#endif /* TPURT_OPS_VISION_PS_DEFORM_H_ */
