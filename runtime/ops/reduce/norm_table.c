/* The norm kernel family's op table (see tpurt/kernel.h for the ABI):
 * softmax (softmax.c), layer/RMS norm (layer_norm.c), batch norm
 * (batch_norm.c) and losses (loss.c). */
#include "ops/reduce/reduce_ops.h"

#define OP(name, fn) {name, tpurt_kernel_##fn, tpurt_kernel_##fn##_ref, 0}

const tpurt_op_def_t tpurt_ops_norm[] = {
    OP("_softmax", softmax),
    OP("_log_softmax", log_softmax),
    OP("_softmax_backward_data", softmax_backward_data),
    OP("_log_softmax_backward_data", log_softmax_backward_data),
    OP("native_layer_norm", native_layer_norm),
    OP("native_layer_norm_backward", native_layer_norm_backward),
    OP("_fused_rms_norm", fused_rms_norm),
    OP("_fused_rms_norm_backward", fused_rms_norm_backward),
    OP("native_batch_norm", native_batch_norm),
    OP("_native_batch_norm_legit", native_batch_norm_legit),
    OP("_batch_norm_with_update", batch_norm_with_update),
    OP("_batch_norm_no_update", batch_norm_no_update),
    OP("batch_norm_update_stats", batch_norm_update_stats),
    OP("native_batch_norm_backward", native_batch_norm_backward),
    OP("batch_norm_backward", batch_norm_backward),
    OP("native_group_norm", native_group_norm),
    OP("native_group_norm_backward", native_group_norm_backward),
    OP("nll_loss_forward", nll_loss_forward),
    OP("nll_loss_backward", nll_loss_backward),
    OP("nll_loss2d_forward", nll_loss_forward),
    OP("nll_loss2d_backward", nll_loss_backward),
    OP("mse_loss", mse_loss),
    OP("mse_loss_backward", mse_loss_backward),
    OP("l1_loss", l1_loss),
    OP("huber_loss", huber_loss),
    OP("huber_loss_backward", huber_loss_backward),
    OP("smooth_l1_loss", smooth_l1_loss),
    OP("smooth_l1_loss_backward", smooth_l1_loss_backward),
    OP("binary_cross_entropy", binary_cross_entropy),
    OP("binary_cross_entropy_backward", binary_cross_entropy_backward),
    TPURT_OP_TABLE_END,
};
