/* The training kernel family's op table (see tpurt/kernel.h for the ABI):
 * fused recurrent cells, fused optimizer steps, the gradient scaler. Kernels
 * are declared in train.h. All compute in floating point: the first tensor
 * argument (a gate tensor, a gradient, a parameter list's first entry, the
 * scale) decides. */
#include "ops/train/train.h"

#define OP(NAME, FN) {NAME, tpurt_train_##FN, tpurt_train_##FN##_ref, 0, TPURT_DTYPES_FLOAT, TPURT_LAYOUT_STRIDED}

const tpurt_op_def_t tpurt_ops_train[] = {
    /* rnn_cell.c */
    OP("_thnn_fused_lstm_cell", lstm_cell),
    OP("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward),
    OP("_thnn_fused_gru_cell", gru_cell),
    OP("_thnn_fused_gru_cell_backward", gru_cell_backward),
    /* optim.c (lr as a float or, "tensor_lr", a one-element tensor) */
    OP("_fused_adam", fused_adam),
    OP("_fused_adamw", fused_adamw),
    OP("_fused_sgd", fused_sgd),
    OP("_fused_adagrad", fused_adagrad),
    /* amp.c */
    OP("_amp_foreach_non_finite_check_and_unscale", amp_unscale),
    OP("_amp_update_scale", amp_update_scale),
    TPURT_OP_TABLE_END,
};
