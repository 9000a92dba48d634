/* The reduce kernel family's op table (see tpurt/kernel.h for the ABI):
 * reductions (reduce_ops.c), scans and order statistics (scan_sort.c). */
#include "ops/reduce/reduce_ops.h"

#define OP(name, fn) {name, tpurt_kernel_##fn, tpurt_kernel_##fn##_ref, 0}
/* reads its input only through tpurt_reduce_run: may end a fused chain */
#define OPE(name, fn) {name, tpurt_kernel_##fn, tpurt_kernel_##fn##_ref, TPURT_OP_REDUCE_ENGINE}

const tpurt_op_def_t tpurt_ops_reduce[] = {
    OPE("sum", sum),
    OPE("nansum", nansum),
    OPE("mean", mean),
    OPE("prod", prod),
    OPE("amax", amax),
    OPE("amin", amin),
    OPE("max", max),
    OPE("min", min),
    OP("argmax", argmax),
    OP("argmin", argmin),
    OPE("all", all),
    OPE("any", any),
    OPE("count_nonzero", count_nonzero),
    OPE("var", var),
    OPE("std", std),
    OPE("var_mean", var_mean),
    OPE("std_mean", std_mean),
    OPE("linalg_vector_norm", linalg_vector_norm),
    OPE("norm", norm),
    OPE("logsumexp", logsumexp),
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
    OP("_cummax_helper", cummax_helper),
    OP("_cummin_helper", cummin_helper),
    OP("trace", trace),
    OP("renorm", renorm),
    TPURT_OP_TABLE_END,
};
