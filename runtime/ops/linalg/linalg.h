/* The linalg kernel family: the matmul family on the strided GEMM (matmul.c)
 * and dense linear algebra on small matrices (LU, Cholesky, triangular
 * solves, QR, symmetric eigen, SVD, LDL, linalg_eig and the complex:: linear
 * algebra). The op table is linalg_table.c. */
#ifndef TPURT_OPS_LINALG_LINALG_H_
#define TPURT_OPS_LINALG_LINALG_H_

#include "ops/args.h"

/* A kernel with a reference twin (suffix _ref). */
#define TPURT_LINALG_DECLARE(NAME)                                                              \
  tpurt_status_t tpurt_linalg_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);     \
  tpurt_status_t tpurt_linalg_##NAME##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);
/* A kernel that is plain scalar loops already: its own reference. */
#define TPURT_LINALG_DECLARE_PLAIN(NAME) \
  tpurt_status_t tpurt_linalg_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);

/* the matmul family (matmul.c) */
TPURT_LINALG_DECLARE(mm)
TPURT_LINALG_DECLARE(bmm)
TPURT_LINALG_DECLARE(addmm)
TPURT_LINALG_DECLARE(baddbmm)
TPURT_LINALG_DECLARE(addbmm)
TPURT_LINALG_DECLARE(addmv)
TPURT_LINALG_DECLARE(addr)
TPURT_LINALG_DECLARE(dot)
TPURT_LINALG_DECLARE(int_mm)
TPURT_LINALG_DECLARE(addmm_act)
TPURT_LINALG_DECLARE(trace)

/* LU (lu.c) */
TPURT_LINALG_DECLARE_PLAIN(lu_factor_ex)
TPURT_LINALG_DECLARE_PLAIN(lu)
TPURT_LINALG_DECLARE_PLAIN(lu_unpack)
TPURT_LINALG_DECLARE_PLAIN(lu_solve)
TPURT_LINALG_DECLARE_PLAIN(solve_ex)
TPURT_LINALG_DECLARE_PLAIN(inv_ex)
TPURT_LINALG_DECLARE_PLAIN(det)
TPURT_LINALG_DECLARE_PLAIN(slogdet)
/* Cholesky (cholesky.c) */
TPURT_LINALG_DECLARE_PLAIN(cholesky_ex)
TPURT_LINALG_DECLARE_PLAIN(cholesky)
TPURT_LINALG_DECLARE_PLAIN(cholesky_inverse)
TPURT_LINALG_DECLARE_PLAIN(cholesky_solve)
/* triangular solves (triangular.c) */
TPURT_LINALG_DECLARE_PLAIN(solve_triangular)
TPURT_LINALG_DECLARE_PLAIN(triangular_solve)
/* QR (qr.c) */
TPURT_LINALG_DECLARE_PLAIN(geqrf)
TPURT_LINALG_DECLARE_PLAIN(qr)
TPURT_LINALG_DECLARE_PLAIN(householder_product)
TPURT_LINALG_DECLARE_PLAIN(ormqr)
/* symmetric eigen (eigh.c), SVD (svd.c), LDL (ldl.c) */
TPURT_LINALG_DECLARE_PLAIN(eigh)
TPURT_LINALG_DECLARE_PLAIN(svd)
TPURT_LINALG_DECLARE_PLAIN(ldl_factor)
TPURT_LINALG_DECLARE_PLAIN(ldl_solve)
/* linalg_eig and the complex:: kernels (complex.c) */
TPURT_LINALG_DECLARE_PLAIN(eig)
TPURT_LINALG_DECLARE_PLAIN(complex_mm)
TPURT_LINALG_DECLARE_PLAIN(complex_bmm)
TPURT_LINALG_DECLARE_PLAIN(complex_solve_ex)
TPURT_LINALG_DECLARE_PLAIN(complex_addmm)
TPURT_LINALG_DECLARE_PLAIN(complex_addmv)
TPURT_LINALG_DECLARE_PLAIN(complex_baddbmm)
TPURT_LINALG_DECLARE_PLAIN(complex_addbmm)
/* complex factorizations (zfactor.c): the real kernels' algorithms in complex arithmetic */
TPURT_LINALG_DECLARE_PLAIN(z_lu_factor_ex)
TPURT_LINALG_DECLARE_PLAIN(z_lu)
TPURT_LINALG_DECLARE_PLAIN(z_lu_unpack)
TPURT_LINALG_DECLARE_PLAIN(z_lu_solve)
TPURT_LINALG_DECLARE_PLAIN(z_inv_ex)
TPURT_LINALG_DECLARE_PLAIN(z_det)
TPURT_LINALG_DECLARE_PLAIN(z_slogdet)
TPURT_LINALG_DECLARE_PLAIN(z_cholesky_ex)
TPURT_LINALG_DECLARE_PLAIN(z_cholesky)
TPURT_LINALG_DECLARE_PLAIN(z_cholesky_inverse)
TPURT_LINALG_DECLARE_PLAIN(z_cholesky_solve)
TPURT_LINALG_DECLARE_PLAIN(z_solve_triangular)
TPURT_LINALG_DECLARE_PLAIN(z_triangular_solve)
TPURT_LINALG_DECLARE_PLAIN(z_geqrf)
TPURT_LINALG_DECLARE_PLAIN(z_qr)
TPURT_LINALG_DECLARE_PLAIN(z_householder_product)
TPURT_LINALG_DECLARE_PLAIN(z_ormqr)
TPURT_LINALG_DECLARE_PLAIN(z_eigh)
TPURT_LINALG_DECLARE_PLAIN(z_svd)

#endif /* TPURT_OPS_LINALG_LINALG_H_ */
