/* The index kernel family's op table (see tpurt/kernel.h for the ABI), built
 * from the list in index_kernels.h. */
#include "ops/index/index_kernels.h"

#define TPURT_INDEX_ENTRY_(name, id, flags, dtypes) \
  {name, tpurt_index_k_##id, tpurt_index_r_##id, flags, dtypes, TPURT_LAYOUT_STRIDED},
const tpurt_op_def_t tpurt_ops_index[] = {
    TPURT_INDEX_OPS(TPURT_INDEX_ENTRY_)
    TPURT_OP_TABLE_END,
};
