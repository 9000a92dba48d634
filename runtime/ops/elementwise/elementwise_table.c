/* The elementwise kernel family's op table (see tpurt/kernel.h for the ABI). */
#include "tpurt/kernel.h"

const tpurt_op_def_t tpurt_ops_elementwise[] = {
    TPURT_OP_TABLE_END,
};
