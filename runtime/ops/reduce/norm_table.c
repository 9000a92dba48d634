/* The norm kernel family's op table (see tpurt/kernel.h for the ABI):
 * softmax (softmax.c), layer and RMS norm (layer_norm.c), batch and group
 * norm (batch_norm.c). */
#include "ops/reduce/reduce_ops.h"

/* Every kernel here computes on floating point inputs only (its first tensor
 * argument: the input, or the gradient for a backward). */
#define OP(name, fn) {name, tpurt_kernel_##fn, tpurt_kernel_##fn##_ref, 0, TPURT_DTYPES_FLOAT, TPURT_LAYOUT_STRIDED}

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
    TPURT_OP_TABLE_END,
};
