/* The reduce kernel family's op table (see tpurt/kernel.h for the ABI):
 * reductions (reduce_ops.c), scans and order statistics (scan_sort.c). */
#include "ops/reduce/reduce_ops.h"

#define OP(name, fn) {name, tpurt_kernel_##fn, tpurt_kernel_##fn##_ref, 0}

const tpurt_op_def_t tpurt_ops_reduce[] = {
    OP("sum", sum),
    OP("nansum", nansum),
    OP("mean", mean),
    OP("prod", prod),
    OP("amax", amax),
    OP("amin", amin),
    OP("max", max),
    OP("min", min),
    OP("argmax", argmax),
    OP("argmin", argmin),
    OP("all", all),
    OP("any", any),
    OP("count_nonzero", count_nonzero),
    OP("var", var),
    OP("std", std),
    OP("var_mean", var_mean),
    OP("std_mean", std_mean),
    OP("linalg_vector_norm", linalg_vector_norm),
    OP("norm", norm),
    OP("logsumexp", logsumexp),
    OP("aminmax", aminmax),
    OP("_aminmax", aminmax),
    OP("cumsum", cumsum),
    OP("cumprod", cumprod),
    OP("logcumsumexp", logcumsumexp),
    OP("_logcumsumexp", logcumsumexp),
    OP("sort", sort),
    OP("topk", topk),
    OP("kthvalue", kthvalue),
    OP("median", median),
    OP("nanmedian", nanmedian),
    OP("mode", mode),
    TPURT_OP_TABLE_END,
};
