/* The linalg kernel family's op table (see tpurt/kernel.h for the ABI).
 * Registered by base name: "mm" serves mm and mm.out, "addmm" addmm/addmm_/addmm.out. */
#include "ops/linalg/linalg.h"

#define OP(NAME, FN) {NAME, tpurt_linalg_##FN, tpurt_linalg_##FN##_ref, 0}

const tpurt_op_def_t tpurt_ops_linalg[] = {
    OP("mm", mm),
    OP("bmm", bmm),
    OP("addmm", addmm),
    OP("baddbmm", baddbmm),
    OP("addbmm", addbmm),
    OP("addmv", addmv),
    OP("mv", addmv), /* (self, vec): told apart by num_args */
    OP("addr", addr),
    OP("dot", dot),
    OP("vdot", dot), /* real dtypes only, where vdot == dot */
    OP("_int_mm", int_mm),
    OP("_addmm_activation", addmm_act),
    OP("trace", trace),
    TPURT_OP_TABLE_END,
};
