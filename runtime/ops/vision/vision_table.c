/* The vision kernel family's op table (see tpurt/kernel.h for the ABI):
 * torchvision's operators, registered as "tv_<op>" so that no aten:: name
 * resolves to them. torch_tpu/csrc/vision*.cpp call them for tpu tensors and,
 * where torchvision's own _C did not load, for CPU tensors too. Each kernel
 * takes the torchvision schema's arguments in order, the outputs allocated by
 * the caller (nms, roi_align, roi_pool: contiguous tensors; ps_roi.c and
 * deform_conv.c: strided ones). The dtypes are those torchvision's CPU
 * kernels take. (No shared header: a new runtime header rebuilds every
 * runtime object, so the kernels are declared here.) */
#include "ops/args.h"

#define DECL(FN) tpurt_status_t tpurt_vision_##FN(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call)
DECL(nms);
DECL(roi_align);
DECL(roi_align_backward);
DECL(roi_pool);
DECL(roi_pool_backward);

/* ps_roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio)
 *   -> (output, channel_mapping int32)
 * _ps_roi_align_backward(grad, rois, channel_mapping, spatial_scale, pooled_height, pooled_width,
 *   sampling_ratio, batch_size, channels, height, width) -> grad_input
 * ps_roi_pool(input, rois, spatial_scale, pooled_height, pooled_width) -> (output, channel_mapping)
 * _ps_roi_pool_backward(grad, rois, channel_mapping, spatial_scale, pooled_height, pooled_width,
 *   batch_size, channels, height, width) -> grad_input
 * deform_conv2d(input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dilation_h,
 *   dilation_w, groups, offset_groups, use_mask) -> output
 * _deform_conv2d_backward(grad, input, weight, offset, mask, bias, <the same ints>, use_mask)
 *   -> (grad_input, grad_weight, grad_offset, grad_mask, grad_bias)
 * (deform_conv2d's with a direct-loop reference twin, <name>_ref) */
#define DECL_REF(FN) DECL(FN); DECL(FN##_ref)
DECL(ps_roi_align);
DECL(ps_roi_align_backward);
DECL(ps_roi_pool);
DECL(ps_roi_pool_backward);
DECL_REF(deform_conv2d);
DECL_REF(deform_conv2d_backward);

#define VISION_DT_F32_F64 (TPURT_DTYPE_BIT(FLOAT32) | TPURT_DTYPE_BIT(FLOAT64))
/* roi_align, ps_roi_align and deform_conv2d also in float16, as torchvision's CPU kernels */
#define VISION_DT_ROI_ALIGN (VISION_DT_F32_F64 | TPURT_DTYPE_BIT(FLOAT16))

/* All but deform_conv2d are their own references: they are the plain loops of torchvision's
 * CPU kernels, split across threads where no two threads write one element. */
#define OP(NAME, FN, DT) {NAME, tpurt_vision_##FN, tpurt_vision_##FN, 0, DT, TPURT_LAYOUT_STRIDED}
#define OP_REF(NAME, FN, DT) {NAME, tpurt_vision_##FN, tpurt_vision_##FN##_ref, 0, DT, TPURT_LAYOUT_STRIDED}

const tpurt_op_def_t tpurt_ops_vision[] = {
    OP("tv_nms", nms, VISION_DT_F32_F64),
    OP("tv_roi_align", roi_align, VISION_DT_ROI_ALIGN),
    OP("tv_roi_align_backward", roi_align_backward, VISION_DT_ROI_ALIGN),
    OP("tv_roi_pool", roi_pool, VISION_DT_F32_F64),
    OP("tv_roi_pool_backward", roi_pool_backward, VISION_DT_F32_F64),
    OP("tv_ps_roi_align", ps_roi_align, VISION_DT_ROI_ALIGN),
    OP("tv_ps_roi_align_backward", ps_roi_align_backward, VISION_DT_ROI_ALIGN),
    OP("tv_ps_roi_pool", ps_roi_pool, VISION_DT_F32_F64),
    OP("tv_ps_roi_pool_backward", ps_roi_pool_backward, VISION_DT_F32_F64),
    OP_REF("tv_deform_conv2d", deform_conv2d, VISION_DT_ROI_ALIGN),
    OP_REF("tv_deform_conv2d_backward", deform_conv2d_backward, VISION_DT_ROI_ALIGN),
    TPURT_OP_TABLE_END,
};
