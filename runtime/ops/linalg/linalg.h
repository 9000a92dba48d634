/* Kernels of the linalg (matmul family) and conv (convolution, pooling,
 * upsampling) tables; each has a reference twin (suffix _ref). */
#ifndef TPURT_OPS_LINALG_LINALG_H_
#define TPURT_OPS_LINALG_LINALG_H_

#include "tpurt/kernel.h"

/* args[i] as a tensor with `ndim` dims (-1: any), or INVALID_ARGUMENT naming the op. */
tpurt_status_t tpurt_linalg_tensor_arg(const tpurt_op_call_t* call, int i, int ndim,
                                       const tpurt_tensor_t** out);

#define TPURT_LINALG_DECLARE(NAME)                                                              \
  tpurt_status_t tpurt_linalg_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);     \
  tpurt_status_t tpurt_linalg_##NAME##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);

TPURT_LINALG_DECLARE(mm)
TPURT_LINALG_DECLARE(bmm)
TPURT_LINALG_DECLARE(addmm)
TPURT_LINALG_DECLARE(baddbmm)
TPURT_LINALG_DECLARE(addbmm)
TPURT_LINALG_DECLARE(addmv)
TPURT_LINALG_DECLARE(addr)
TPURT_LINALG_DECLARE(dot)
TPURT_LINALG_DECLARE(int_mm)
TPURT_LINALG_DECLARE(addmm_act)
TPURT_LINALG_DECLARE(trace)
TPURT_LINALG_DECLARE(conv)
TPURT_LINALG_DECLARE(conv_backward)
TPURT_LINALG_DECLARE(slow_conv)
TPURT_LINALG_DECLARE(slow_conv_backward)
TPURT_LINALG_DECLARE(im2col)
TPURT_LINALG_DECLARE(col2im)
TPURT_LINALG_DECLARE(max_pool2d)
TPURT_LINALG_DECLARE(max_pool2d_backward)
TPURT_LINALG_DECLARE(adaptive_max_pool2d)
TPURT_LINALG_DECLARE(adaptive_max_pool2d_backward)
TPURT_LINALG_DECLARE(avg_pool2d)
TPURT_LINALG_DECLARE(avg_pool2d_backward)
TPURT_LINALG_DECLARE(adaptive_avg_pool2d)
TPURT_LINALG_DECLARE(adaptive_avg_pool2d_backward)
TPURT_LINALG_DECLARE(upsample_nearest2d)
TPURT_LINALG_DECLARE(upsample_nearest2d_backward)
TPURT_LINALG_DECLARE(upsample_bilinear2d)
TPURT_LINALG_DECLARE(upsample_bilinear2d_backward)
TPURT_LINALG_DECLARE(upsample_nearest1d)
TPURT_LINALG_DECLARE(upsample_nearest1d_backward)
TPURT_LINALG_DECLARE(upsample_linear1d)
TPURT_LINALG_DECLARE(upsample_linear1d_backward)

#endif /* TPURT_OPS_LINALG_LINALG_H_ */
