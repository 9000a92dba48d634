/* The random kernel family's op table (see tpurt/kernel.h for the ABI; the
 * kernels are listed in random_list.h). */
#include "ops/elementwise/random_list.h"

#define RND_ENTRY(k, name, flags, dtypes) \
  {name, tpurt_rnd_k_##k, tpurt_rnd_r_##k, flags, dtypes, TPURT_LAYOUT_STRIDED},
const tpurt_op_def_t tpurt_ops_random[] = {
    RND_OP_LIST(RND_ENTRY)
    TPURT_OP_TABLE_END,
};
