/* The linalg kernel family's op table (see tpurt/kernel.h for the ABI);
 * kernels are declared in linalg.h. The matmul family is registered by base
 * name: "mm" serves mm and mm.out, "addmm" addmm/addmm_/addmm.out. */
#include "ops/linalg/linalg.h"

/* The dtypes of the first tensor argument: the strided GEMM runs every real
 * dtype (LINALG_DT_GEMM); the factorizations work in float32/float64
 * (LINALG_DT_F32_F64, as does linalg_eig's real input); the complex:: kernels
 * read real operands as complex ones (LINALG_DT_COMPLEX_IN). */
#define LINALG_DT_GEMM TPURT_DTYPES_REAL
#define LINALG_DT_F32_F64 (TPURT_DTYPE_BIT(FLOAT32) | TPURT_DTYPE_BIT(FLOAT64))
#define LINALG_DT_COMPLEX_IN TPURT_DTYPES_ALL
/* float32/float64 and complex64/complex128 (linalg_eig, LDL) */
#define LINALG_DT_EIG (LINALG_DT_F32_F64 | TPURT_DTYPE_BIT(COMPLEX64) | TPURT_DTYPE_BIT(COMPLEX128))

/* a kernel with a reference twin */
#define OP(NAME, FN, DT) {NAME, tpurt_linalg_##FN, tpurt_linalg_##FN##_ref, 0, DT, TPURT_LAYOUT_STRIDED}
/* plain scalar loops already: the kernel is its own reference */
#define PLAIN(NAME, FN, FLAGS, DT) {NAME, tpurt_linalg_##FN, tpurt_linalg_##FN, FLAGS, DT, TPURT_LAYOUT_STRIDED}

const tpurt_op_def_t tpurt_ops_linalg[] = {
    /* the matmul family on the strided GEMM (matmul.c) */
    OP("mm", mm, LINALG_DT_GEMM),
    OP("bmm", bmm, LINALG_DT_GEMM),
    OP("addmm", addmm, LINALG_DT_GEMM),
    OP("baddbmm", baddbmm, LINALG_DT_GEMM),
    OP("addbmm", addbmm, LINALG_DT_GEMM),
    OP("addmv", addmv, LINALG_DT_GEMM),
    OP("mv", addmv, LINALG_DT_GEMM), /* (self, vec): told apart by num_args */
    OP("addr", addr, LINALG_DT_GEMM),
    OP("dot", dot, LINALG_DT_GEMM),
    OP("vdot", dot, LINALG_DT_GEMM), /* real dtypes only, where vdot == dot */
    OP("_int_mm", int_mm, TPURT_DTYPE_BIT(INT8)),
    OP("_addmm_activation", addmm_act, LINALG_DT_GEMM),
    OP("trace", trace, LINALG_DT_GEMM),

    /* LU (lu.c) */
    PLAIN("linalg_lu_factor_ex", lu_factor_ex, 0, LINALG_DT_F32_F64),
    PLAIN("linalg_lu", lu, 0, LINALG_DT_F32_F64),
    PLAIN("lu_unpack", lu_unpack, 0, LINALG_DT_F32_F64),
    PLAIN("linalg_lu_solve", lu_solve, 0, LINALG_DT_F32_F64),
    PLAIN("_linalg_solve_ex", solve_ex, 0, LINALG_DT_F32_F64),
    PLAIN("linalg_inv_ex", inv_ex, 0, LINALG_DT_F32_F64),
    PLAIN("_linalg_det", det, 0, LINALG_DT_F32_F64),
    PLAIN("_linalg_slogdet", slogdet, 0, LINALG_DT_F32_F64),
    /* Cholesky (cholesky.c) */
    PLAIN("linalg_cholesky_ex", cholesky_ex, 0, LINALG_DT_F32_F64),
    PLAIN("cholesky", cholesky, 0, LINALG_DT_F32_F64),
    PLAIN("cholesky_inverse", cholesky_inverse, 0, LINALG_DT_F32_F64),
    PLAIN("_cholesky_solve_helper", cholesky_solve, 0, LINALG_DT_F32_F64),
    /* triangular solves (triangular.c) */
    PLAIN("linalg_solve_triangular", solve_triangular, 0, LINALG_DT_F32_F64),
    PLAIN("triangular_solve", triangular_solve, 0, LINALG_DT_F32_F64),
    /* QR (qr.c) */
    PLAIN("geqrf", geqrf, 0, LINALG_DT_F32_F64),
    PLAIN("linalg_qr", qr, 0, LINALG_DT_F32_F64),
    PLAIN("linalg_householder_product", householder_product, 0, LINALG_DT_F32_F64),
    PLAIN("ormqr", ormqr, 0, LINALG_DT_F32_F64),
    /* symmetric eigen (eigh.c), SVD (svd.c), LDL (ldl.c) */
    PLAIN("_linalg_eigh", eigh, 0, LINALG_DT_F32_F64),
    PLAIN("_linalg_svd", svd, 0, LINALG_DT_F32_F64),
    PLAIN("linalg_ldl_factor_ex", ldl_factor, TPURT_OP_COMPLEX, LINALG_DT_EIG),
    PLAIN("linalg_ldl_solve", ldl_solve, TPURT_OP_COMPLEX, LINALG_DT_EIG),

    /* complex-valued (complex.c). linalg_eig is born complex (real in, complex out). */
    PLAIN("linalg_eig", eig, TPURT_OP_COMPLEX, LINALG_DT_EIG),
    PLAIN("_linalg_eigvals", eig, TPURT_OP_COMPLEX, LINALG_DT_EIG), /* eigenvalues only */
    PLAIN("complex::mm", complex_mm, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::bmm", complex_bmm, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::_linalg_solve_ex", complex_solve_ex, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::addmm", complex_addmm, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::addmv", complex_addmv, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::mv", complex_addmv, 0, LINALG_DT_COMPLEX_IN), /* (self, vec): told apart by its args */
    PLAIN("complex::baddbmm", complex_baddbmm, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::addbmm", complex_addbmm, 0, LINALG_DT_COMPLEX_IN),
    /* complex factorizations (zfactor.c) */
    PLAIN("complex::linalg_lu_factor_ex", z_lu_factor_ex, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::linalg_lu", z_lu, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::lu_unpack", z_lu_unpack, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::linalg_lu_solve", z_lu_solve, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::linalg_inv_ex", z_inv_ex, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::_linalg_det", z_det, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::_linalg_slogdet", z_slogdet, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::linalg_cholesky_ex", z_cholesky_ex, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::cholesky", z_cholesky, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::cholesky_inverse", z_cholesky_inverse, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::_cholesky_solve_helper", z_cholesky_solve, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::linalg_solve_triangular", z_solve_triangular, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::triangular_solve", z_triangular_solve, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::geqrf", z_geqrf, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::linalg_qr", z_qr, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::linalg_householder_product", z_householder_product, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::ormqr", z_ormqr, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::_linalg_eigh", z_eigh, 0, LINALG_DT_COMPLEX_IN),
    PLAIN("complex::_linalg_svd", z_svd, 0, LINALG_DT_COMPLEX_IN),
    TPURT_OP_TABLE_END,
};
