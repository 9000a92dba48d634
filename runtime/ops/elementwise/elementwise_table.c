/* The elementwise kernel family's op table (see tpurt/kernel.h for the ABI).
 * The list of kernels and the names they answer to is ew_list.h. Every
 * elementwise kernel writes output element i from input elements i only, so
 * all are alias-safe (in-place ops run directly on self). The dtypes of each
 * entry follow the rule written above the list. */
#include "ops/elementwise/ew_list.h"

#define EW_ENTRY(k, name, dtypes, flags) \
  {name, tpurt_ew_k_##k, tpurt_ew_r_##k, TPURT_OP_ALIAS_SAFE | TPURT_OP_ELEMENTWISE | (flags), dtypes, TPURT_LAYOUT_STRIDED},
const tpurt_op_def_t tpurt_ops_elementwise[] = {
    EW_OP_LIST(EW_ENTRY)
    TPURT_OP_TABLE_END,
};
