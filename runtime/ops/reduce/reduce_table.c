/* The reduce kernel family's op table (see tpurt/kernel.h for the ABI):
 * reductions (reduce_ops.c), scans and order statistics (scan_sort.c). */
#include "ops/reduce/reduce_ops.h"

/* The dtypes of the input (tpurt/kernel.h): the reduction engine loads every
 * real dtype (integers and bool accumulate exactly in int64, into a floating
 * output in double), and so do the scans and sorts; the statistics that need
 * a floating input (var, std and renorm) take floating point only, and so does
 * logcumsumexp, whose output has its input's dtype. */
#define REDUCE_DT_ANY TPURT_DTYPES_REAL
/* sum, prod, cumsum (into int64, as CPU), any, all and sort also take uint16/32/64 */
#define REDUCE_DT_SUM (TPURT_DTYPES_REAL | TPURT_DTYPES_UINT_WIDE)
#define REDUCE_DT_FLOAT TPURT_DTYPES_FLOAT
#define REDUCE_DT_NUM (TPURT_DTYPES_FLOAT | TPURT_DTYPES_INT) /* no bool, as on PyTorch CPU */

#define OP(name, fn, dt) {name, tpurt_kernel_##fn, tpurt_kernel_##fn##_ref, 0, dt, TPURT_LAYOUT_STRIDED}
/* reads its input only through tpurt_reduce_run: may end a fused chain */
#define OPE(name, fn, dt) \
  {name, tpurt_kernel_##fn, tpurt_kernel_##fn##_ref, TPURT_OP_REDUCE_ENGINE, dt, TPURT_LAYOUT_STRIDED}

const tpurt_op_def_t tpurt_ops_reduce[] = {
    OPE("sum", sum, REDUCE_DT_SUM),
    OPE("nansum", nansum, REDUCE_DT_ANY),
    OPE("mean", mean, REDUCE_DT_ANY),
    OPE("prod", prod, REDUCE_DT_SUM),
    OPE("amax", amax, REDUCE_DT_ANY),
    OPE("amin", amin, REDUCE_DT_ANY),
    OPE("max", max, REDUCE_DT_ANY),
    OPE("min", min, REDUCE_DT_ANY),
    OP("argmax", argmax, REDUCE_DT_ANY),
    OP("argmin", argmin, REDUCE_DT_ANY),
    OPE("all", all, REDUCE_DT_SUM),
    OPE("any", any, REDUCE_DT_SUM),
    OPE("count_nonzero", count_nonzero, REDUCE_DT_ANY),
    OPE("var", var, REDUCE_DT_FLOAT),
    OPE("std", std, REDUCE_DT_FLOAT),
    OPE("var_mean", var_mean, REDUCE_DT_FLOAT),
    OPE("std_mean", std_mean, REDUCE_DT_FLOAT),
    OPE("linalg_vector_norm", linalg_vector_norm, REDUCE_DT_ANY),
    OPE("norm", norm, REDUCE_DT_ANY),
    OPE("logsumexp", logsumexp, REDUCE_DT_ANY),
    OP("aminmax", aminmax, REDUCE_DT_ANY),
    OP("_aminmax", aminmax, REDUCE_DT_ANY),
    OP("cumsum", cumsum, REDUCE_DT_SUM),
    OP("cumprod", cumprod, REDUCE_DT_ANY),
    OP("logcumsumexp", logcumsumexp, REDUCE_DT_FLOAT),
    OP("_logcumsumexp", logcumsumexp, REDUCE_DT_FLOAT),
    OP("sort", sort, REDUCE_DT_SUM),
    OP("topk", topk, REDUCE_DT_ANY),
    OP("kthvalue", kthvalue, REDUCE_DT_NUM),
    OP("median", median, REDUCE_DT_NUM),
    OP("nanmedian", nanmedian, REDUCE_DT_NUM),
    OP("mode", mode, REDUCE_DT_ANY),
    OP("_cummax_helper", cummax_helper, REDUCE_DT_ANY),
    OP("_cummin_helper", cummin_helper, REDUCE_DT_ANY),
    OP("trace", trace, REDUCE_DT_ANY),
    OP("renorm", renorm, REDUCE_DT_FLOAT),
    OP("hash_tensor", hash_tensor, REDUCE_DT_SUM),
    /* not an aten op: the slice order of unique_dim (unique_dim.c), called by torch.ops.tpu._unique_dim_order */
    OP("_tpu_unique_dim_order", unique_dim_order, REDUCE_DT_SUM),
    TPURT_OP_TABLE_END,
};
