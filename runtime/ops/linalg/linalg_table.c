/* The linalg kernel family's op table (see tpurt/kernel.h for the ABI). */
#include "tpurt/kernel.h"

const tpurt_op_def_t tpurt_ops_linalg[] = {
    TPURT_OP_TABLE_END,
};
