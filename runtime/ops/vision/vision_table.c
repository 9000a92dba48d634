/* The vision kernel family's op table (see tpurt/kernel.h for the ABI):
 * torchvision's operators, registered as "tv_<op>" so that no aten:: name
 * resolves to them. torch_tpu/csrc/vision*.cpp call them for tpu tensors and,
 * where torchvision's own _C did not load, for CPU tensors too. Each kernel
 * takes contiguous tensors: the torchvision schema's arguments in order, the
 * outputs allocated by the caller. (No shared header: a new runtime header
 * rebuilds every runtime object, so the kernels are declared here.) */
#include "ops/args.h"

#define DECL(FN) tpurt_status_t tpurt_vision_##FN(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call)
DECL(nms);
DECL(roi_align);
DECL(roi_align_backward);
DECL(roi_pool);
DECL(roi_pool_backward);

#define VISION_DT_F32_F64 (TPURT_DTYPE_BIT(FLOAT32) | TPURT_DTYPE_BIT(FLOAT64))
/* roi_align also in float16, as torchvision's CPU kernel */
#define VISION_DT_ROI_ALIGN (VISION_DT_F32_F64 | TPURT_DTYPE_BIT(FLOAT16))

/* Each kernel is its own reference: they are the plain loops of torchvision's
 * CPU kernels, split across threads where no two threads write one element. */
#define OP(NAME, FN, DT) {NAME, tpurt_vision_##FN, tpurt_vision_##FN, 0, DT, TPURT_LAYOUT_STRIDED}

const tpurt_op_def_t tpurt_ops_vision[] = {
    OP("tv_nms", nms, VISION_DT_F32_F64),
    OP("tv_roi_align", roi_align, VISION_DT_ROI_ALIGN),
    OP("tv_roi_align_backward", roi_align_backward, VISION_DT_ROI_ALIGN),
    OP("tv_roi_pool", roi_pool, VISION_DT_F32_F64),
    OP("tv_roi_pool_backward", roi_pool_backward, VISION_DT_F32_F64),
    TPURT_OP_TABLE_END,
};
