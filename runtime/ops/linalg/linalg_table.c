/* The linalg kernel family's op table (see tpurt/kernel.h for the ABI);
 * kernels are declared in linalg.h. The matmul family is registered by base
 * name: "mm" serves mm and mm.out, "addmm" addmm/addmm_/addmm.out. */
#include "ops/linalg/linalg.h"

/* a kernel with a reference twin */
#define OP(NAME, FN) {NAME, tpurt_linalg_##FN, tpurt_linalg_##FN##_ref, 0}
/* plain scalar loops already: the kernel is its own reference */
#define PLAIN(NAME, FN, FLAGS) {NAME, tpurt_linalg_##FN, tpurt_linalg_##FN, FLAGS}

const tpurt_op_def_t tpurt_ops_linalg[] = {
    /* the matmul family on the strided GEMM (matmul.c) */
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

    /* LU (lu.c) */
    PLAIN("linalg_lu_factor_ex", lu_factor_ex, 0),
    PLAIN("linalg_lu", lu, 0),
    PLAIN("lu_unpack", lu_unpack, 0),
    PLAIN("linalg_lu_solve", lu_solve, 0),
    PLAIN("_linalg_solve_ex", solve_ex, 0),
    PLAIN("linalg_inv_ex", inv_ex, 0),
    PLAIN("_linalg_det", det, 0),
    PLAIN("_linalg_slogdet", slogdet, 0),
    /* Cholesky (cholesky.c) */
    PLAIN("linalg_cholesky_ex", cholesky_ex, 0),
    PLAIN("cholesky", cholesky, 0),
    PLAIN("cholesky_inverse", cholesky_inverse, 0),
    PLAIN("_cholesky_solve_helper", cholesky_solve, 0),
    /* triangular solves (triangular.c) */
    PLAIN("linalg_solve_triangular", solve_triangular, 0),
    PLAIN("triangular_solve", triangular_solve, 0),
    /* QR (qr.c) */
    PLAIN("geqrf", geqrf, 0),
    PLAIN("linalg_qr", qr, 0),
    PLAIN("linalg_householder_product", householder_product, 0),
    PLAIN("ormqr", ormqr, 0),
    /* symmetric eigen (eigh.c), SVD (svd.c), LDL (ldl.c) */
    PLAIN("_linalg_eigh", eigh, 0),
    PLAIN("_linalg_svd", svd, 0),
    PLAIN("linalg_ldl_factor_ex", ldl_factor, 0),
    PLAIN("linalg_ldl_solve", ldl_solve, 0),

    /* complex-valued (complex.c). linalg_eig is born complex (real in, complex out). */
    PLAIN("linalg_eig", eig, TPURT_OP_COMPLEX),
    PLAIN("_linalg_eigvals", eig, TPURT_OP_COMPLEX), /* eigenvalues only */
    PLAIN("complex::mm", complex_mm, 0),
    PLAIN("complex::bmm", complex_bmm, 0),
    PLAIN("complex::_linalg_solve_ex", complex_solve_ex, 0),
    TPURT_OP_TABLE_END,
};
