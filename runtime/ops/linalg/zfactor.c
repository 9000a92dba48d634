/* Complex-valued dense linear algebra on small matrices: the complex::
 * kernels of the LU family (linalg_lu_factor_ex, linalg_lu, lu_unpack,
 * linalg_lu_solve, linalg_inv_ex, _linalg_det, _linalg_slogdet), Cholesky
 * (linalg_cholesky_ex, cholesky, cholesky_inverse, _cholesky_solve_helper),
 * triangular solves (linalg_solve_triangular, triangular_solve), Householder
 * QR (geqrf, linalg_qr, linalg_householder_product, ormqr), the Hermitian
 * eigendecomposition (_linalg_eigh) and the SVD (_linalg_svd).
 *
 * Each is the algorithm of its real-valued kernel (lu.c, cholesky.c,
 * triangular.c, qr.c, eigh.c, svd.c) in complex double arithmetic, with
 * LAPACK's complex conventions where the result is not unique otherwise:
 * zgetrf's pivots, zpotrf's L L^H, zgeqrf/zlarfg's reflectors (real beta,
 * complex tau, H = I - tau v v^H), zheevd's real ascending eigenvalues, the
 * SVD's A = U S V^H with real descending S. Matrices are copied into a
 * complex double row-major scratch and written back through the outputs'
 * strides (complex64/complex128, or a real output such as eigh's eigenvalues).
 * The kernels are plain scalar loops: each op's reference is the kernel. */
#include <complex.h>
#include <float.h>

#include "ops/linalg/lapack.h"
#include "ops/linalg/matrix.h"


/* zgetrf picks the pivot by izamax, whose magnitude is |re| + |im| (dcabs1), not |z| */
static inline double z_cabs1(zd_t z) {
  return fabs(creal(z)) + fabs(cimag(z));
}
#define LU_T zd_t
#define LU_ABS z_cabs1
#define LU_SUF z
#include "ops/linalg/lu_impl.h"

/* LU and its solves by LAPACK (lapack.h) from LAPACK_MIN_LU, by the loops above below it or
 * where LAPACK does not run; the same pivots and info either way (matrix.h: complex.c's solve
 * shares them). */
int tpurt_linalg_zlu_factor(zd_t* a, int64_t m, int64_t n, int32_t* piv) {
  int info = 0;
  return lapack_lu_factor_z(a, m, n, piv, &info) ? info : lu_factor_z(a, m, n, piv, 0);
}
void tpurt_linalg_zlu_solve(const zd_t* lu, const int32_t* piv, int64_t n, zd_t* b, int64_t k, bool trans) {
  if (!lapack_lu_solve_z(lu, piv, n, b, k, trans)) lu_solve_z(lu, piv, n, b, k, trans);
}

static void z_conj_all(zd_t* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = conj(a[i]);
}
static zd_t* z_scratch(tpurt_kernel_ctx_t* ctx, int64_t n) {
  return tpurt_kernel_scratch(ctx, (size_t)(n > 0 ? n : 1) * sizeof(zd_t));
}
#define Z_SCRATCH_OR_FAIL(p, n)                                                                       \
  zd_t* p = z_scratch(ctx, (n));                                                                      \
  if (!p) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch for %lld complex doubles", call->name, \
                              (long long)(n))

static void z_store_pivots(const tpurt_tensor_t* t, int64_t off, const int32_t* piv, int64_t k) {
  int64_t s = t->strides[t->ndim - 1];
  for (int64_t i = 0; i < k; ++i) mat_set_int(t, off + i * s, piv[i]);
}
static void z_load_pivots(const tpurt_tensor_t* t, int64_t off, int32_t* piv, int64_t k) {
  int64_t s = t->strides[t->ndim - 1];
  for (int64_t i = 0; i < k; ++i) piv[i] = (int32_t)mat_get_int(t, off + i * s);
}
static tpurt_status_t z_check_pivots(const tpurt_op_call_t* call, const int32_t* piv, int64_t k, int64_t m) {
  for (int64_t i = 0; i < k; ++i)
    if (piv[i] < 1 || piv[i] > m)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: pivot %lld is %d, outside [1, %lld]", call->name,
                          (long long)i, (int)piv[i], (long long)m);
  return TPURT_OK;
}

/* ---- LU ---- */

/* op(A) X = B from A's LU: 'N' A, 'T' A^T, 'H' A^H, 'C' conj(A) */
static void z_lu_solve_op(const zd_t* lu, const int32_t* piv, int64_t n, zd_t* x, int64_t k, char op) {
  bool cj = op == 'H' || op == 'C';
  if (cj) z_conj_all(x, n * k); /* A^H x = b <=> A^T conj(x) = conj(b); conj(A) x = b <=> A conj(x) = conj(b) */
  tpurt_linalg_zlu_solve(lu, piv, n, x, k, op == 'T' || op == 'H');
  if (cj) z_conj_all(x, n * k);
}

tpurt_status_t tpurt_linalg_z_lu_factor_ex(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 3));
  if (!tpurt_arg_bool(call, 1, true))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: LU without pivoting is not implemented", call->name);
  bool check = tpurt_arg_bool(call, 2, false);
  const tpurt_tensor_t *LU = &call->outputs[0], *P = &call->outputs[1], *Info = &call->outputs[2];
  int nb = A->ndim - 2;
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1], k = m < n ? m : n, batch = mat_prod(A->sizes, nb);
  Z_SCRATCH_OR_FAIL(a, m * n + k);
  int32_t* piv = (int32_t*)(a + m * n);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    mat_zload(A, mat_boff(A, 2, idx, nb), m, n, false, a, false, false);
    int info = tpurt_linalg_zlu_factor(a, m, n, piv);
    mat_zstore(LU, mat_boff(LU, 2, idx, nb), m, n, false, a, false, false);
    z_store_pivots(P, mat_boff(P, 1, idx, nb), piv, k);
    mat_set_int(Info, mat_boff(Info, 0, idx, nb), info);
    if (check && info)
      return TPURT_STATUS(INVALID_ARGUMENT, "linalg.lu_factor: U[%d, %d] is zero, the factorization is singular",
                          info, info);
  }
  return TPURT_OK;
}

static void z_store_unpacked(const tpurt_tensor_t* Pt, const tpurt_tensor_t* Lt, const tpurt_tensor_t* Ut,
                             const int64_t* idx, int nb, const zd_t* a, const int32_t* piv, int64_t m, int64_t n,
                             zd_t* tmp, int64_t* perm) {
  int64_t k = m < n ? m : n;
  if (Pt && tpurt_tensor_numel(Pt)) {
    for (int64_t i = 0; i < m; ++i) perm[i] = i;
    for (int64_t i = 0; i < k; ++i) {
      int64_t p = piv[i] - 1, t = perm[i];
      perm[i] = perm[p];
      perm[p] = t;
    }
    for (int64_t i = 0; i < m * m; ++i) tmp[i] = 0;
    for (int64_t i = 0; i < m; ++i) tmp[perm[i] * m + i] = 1.0;
    mat_zstore(Pt, mat_boff(Pt, 2, idx, nb), m, m, false, tmp, false, false);
  }
  if (Lt && tpurt_tensor_numel(Lt)) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j) tmp[i * k + j] = j < i ? a[i * n + j] : (i == j ? 1.0 : 0.0);
    mat_zstore(Lt, mat_boff(Lt, 2, idx, nb), m, k, false, tmp, false, false);
  }
  if (Ut && tpurt_tensor_numel(Ut)) {
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j) tmp[i * n + j] = j >= i ? a[i * n + j] : 0.0;
    mat_zstore(Ut, mat_boff(Ut, 2, idx, nb), k, n, false, tmp, false, false);
  }
}

/* linalg_lu(A, pivot) -> (P, L, U); lu_unpack(LU, pivots, unpack_data, unpack_pivots) -> (P, L, U) */
static tpurt_status_t z_lu_common(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool unpack) {
  const tpurt_tensor_t *A = NULL, *Pv = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  if (unpack) TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 1, 1, &Pv));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 3));
  if (!unpack && !tpurt_arg_bool(call, 1, true))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: LU without pivoting is not implemented", call->name);
  bool data = unpack ? tpurt_arg_bool(call, 2, true) : true, pivots = unpack ? tpurt_arg_bool(call, 3, true) : true;
  int nb = A->ndim - 2;
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1], k = m < n ? m : n, batch = mat_prod(A->sizes, nb);
  int64_t big = m > n ? m : n;
  Z_SCRATCH_OR_FAIL(a, m * n + big * big + k + m);
  zd_t* tmp = a + m * n;
  int32_t* piv = (int32_t*)(tmp + big * big);
  int64_t* perm = (int64_t*)(tmp + big * big + k);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    mat_zload(A, mat_boff(A, 2, idx, nb), m, n, false, a, false, false);
    if (!unpack) {
      tpurt_linalg_zlu_factor(a, m, n, piv);
    } else if (pivots) {
      z_load_pivots(Pv, mat_boff(Pv, 1, idx, nb), piv, k);
      TPURT_RETURN_IF_ERROR(z_check_pivots(call, piv, k, m));
    }
    z_store_unpacked(pivots ? &call->outputs[0] : NULL, data ? &call->outputs[1] : NULL,
                     data ? &call->outputs[2] : NULL, idx, nb, a, piv, m, n, tmp, perm);
  }
  return TPURT_OK;
}
tpurt_status_t tpurt_linalg_z_lu(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return z_lu_common(ctx, call, false);
}
tpurt_status_t tpurt_linalg_z_lu_unpack(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return z_lu_common(ctx, call, true);
}

/* linalg_lu_solve(LU, pivots, B, left, adjoint) -> X */
tpurt_status_t tpurt_linalg_z_lu_solve(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *LU = NULL, *Pv = NULL, *B = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &LU));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 1, 1, &Pv));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 2, 2, &B));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 1));
  bool left = tpurt_arg_bool(call, 3, true), adjoint = tpurt_arg_bool(call, 4, false);
  const tpurt_tensor_t* X = &call->outputs[0];
  MAT_BATCH_OF(X, 2);
  int64_t n = LU->sizes[LU->ndim - 1], r = X->sizes[nb], c = X->sizes[nb + 1], k = left ? c : r;
  Z_SCRATCH_OR_FAIL(a, n * n + n * k + n);
  zd_t* x = a + n * n;
  int32_t* piv = (int32_t*)(x + n * k);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, X->sizes, nb, idx);
    mat_zload(LU, mat_boff(LU, 2, idx, nb), n, n, false, a, false, false);
    z_load_pivots(Pv, mat_boff(Pv, 1, idx, nb), piv, n);
    TPURT_RETURN_IF_ERROR(z_check_pivots(call, piv, n, n));
    /* left: op(A) X = B. right: X op(A) = B <=> op(A)^T X^T = B^T (A^T, or conj(A) for A^H) */
    mat_zload(B, mat_boff(B, 2, idx, nb), r, c, false, x, !left, false);
    z_lu_solve_op(a, piv, n, x, k, left ? (adjoint ? 'H' : 'N') : (adjoint ? 'C' : 'T'));
    mat_zstore(X, mat_boff(X, 2, idx, nb), r, c, false, x, !left, false);
  }
  return TPURT_OK;
}

/* linalg_inv_ex(A, check_errors) -> (inverse, info) */
tpurt_status_t tpurt_linalg_z_inv_ex(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 2));
  bool check = tpurt_arg_bool(call, 1, false);
  const tpurt_tensor_t *X = &call->outputs[0], *Info = &call->outputs[1];
  MAT_BATCH_OF(A, 2);
  int64_t n = A->sizes[nb];
  Z_SCRATCH_OR_FAIL(a, 2 * n * n + n);
  zd_t* x = a + n * n;
  int32_t* piv = (int32_t*)(x + n * n);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    mat_zload(A, mat_boff(A, 2, idx, nb), n, n, false, a, false, false);
    int info = tpurt_linalg_zlu_factor(a, n, n, piv);
    mat_set_int(Info, mat_boff(Info, 0, idx, nb), info);
    if (info && check)
      return TPURT_STATUS(INVALID_ARGUMENT,
                          "linalg.inv: The diagonal element %d is zero, the inversion could not be "
                          "completed because the input matrix is singular.", info);
    for (int64_t i = 0; i < n * n; ++i) x[i] = 0;
    for (int64_t i = 0; i < n; ++i) x[i * n + i] = 1.0;
    tpurt_linalg_zlu_solve(a, piv, n, x, n, false);
    mat_zstore(X, mat_boff(X, 2, idx, nb), n, n, false, x, false, false);
  }
  return TPURT_OK;
}

/* _linalg_det(A) -> (det, LU, pivots); _linalg_slogdet(A) -> (sign, logabsdet, LU, pivots) */
static tpurt_status_t z_det_common(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool slog) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, slog ? 4 : 3));
  const tpurt_tensor_t* LU = &call->outputs[slog ? 2 : 1];
  const tpurt_tensor_t* P = &call->outputs[slog ? 3 : 2];
  MAT_BATCH_OF(A, 2);
  int64_t n = A->sizes[nb];
  Z_SCRATCH_OR_FAIL(a, n * n + n);
  int32_t* piv = (int32_t*)(a + n * n);
  int64_t idx[TPURT_MAX_DIMS];
  /* as lu.c (and ATen): a row-major A is factored as A^T, whose column-major layout is A's memory */
  bool tr = tpurt_tensor_is_contiguous(A);
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    mat_zload(A, mat_boff(A, 2, idx, nb), n, n, false, a, tr, false);
    tpurt_linalg_zlu_factor(a, n, n, piv);
    zd_t det = 1.0, sign = 1.0;
    double logabs = 0.0;
    bool singular = false;
    for (int64_t i = 0; i < n; ++i) {
      zd_t d = a[i * n + i];
      det *= d;
      double ad = cabs(d);
      singular |= ad == 0.0;
      if (ad != 0.0) sign *= d / ad;
      logabs += log(ad);
      if (piv[i] != i + 1) det = -det, sign = -sign;
    }
    if (singular) sign = 0.0, logabs = -INFINITY;
    if (slog) {
      mat_zst(&call->outputs[0], mat_boff(&call->outputs[0], 0, idx, nb), sign);
      mat_zst(&call->outputs[1], mat_boff(&call->outputs[1], 0, idx, nb), logabs);
    } else {
      mat_zst(&call->outputs[0], mat_boff(&call->outputs[0], 0, idx, nb), det);
    }
    mat_zstore(LU, mat_boff(LU, 2, idx, nb), n, n, false, a, false, false);
    z_store_pivots(P, mat_boff(P, 1, idx, nb), piv, n);
  }
  return TPURT_OK;
}
tpurt_status_t tpurt_linalg_z_det(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return z_det_common(ctx, call, false);
}
tpurt_status_t tpurt_linalg_z_slogdet(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return z_det_common(ctx, call, true);
}

/* ---- triangular solves ---- */

/* op(T) X = B in place in b (n x k), T n x n row-major lower or upper; trans: T^T, cj: conj(T) */
static void z_tri_solve(const zd_t* t, int64_t n, bool lower, bool trans, bool cj, bool unit, zd_t* b, int64_t k) {
  /* from LAPACK_MIN_TRSM BLAS's ztrsm; conj(T) X = B is T conj(X) = conj(B) (the loops below
   * conjugate T's entries instead) */
  if (lapack_trsm_sized(n, k)) {
    const bool flip = cj && !trans;
    if (flip) z_conj_all(b, n * k);
    const bool done = lapack_trsm_z(t, n, lower, trans ? (cj ? "C" : "T") : "N", unit, b, k);
    if (flip) z_conj_all(b, n * k);
    if (done) return;
  }
  bool eff_lower = trans ? !lower : lower;
#define ZTEL(i, j) (cj ? conj(trans ? t[(j) * n + (i)] : t[(i) * n + (j)]) : (trans ? t[(j) * n + (i)] : t[(i) * n + (j)]))
  for (int64_t s = 0; s < n; ++s) {
    int64_t i = eff_lower ? s : n - 1 - s;
    int64_t r0 = eff_lower ? 0 : i + 1, r1 = eff_lower ? i : n;
    for (int64_t r = r0; r < r1; ++r) {
      zd_t v = ZTEL(i, r);
      if (v != 0)
        for (int64_t j = 0; j < k; ++j) b[i * k + j] -= v * b[r * k + j];
    }
    if (!unit) {
      zd_t d = ZTEL(i, i);
      for (int64_t j = 0; j < k; ++j) b[i * k + j] /= d;
    }
  }
#undef ZTEL
}

/* linalg_solve_triangular(A, B, upper, left, unitriangular) -> X */
tpurt_status_t tpurt_linalg_z_solve_triangular(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *A = NULL, *B = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 1, 2, &B));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 1));
  bool upper = tpurt_arg_bool(call, 2, false), left = tpurt_arg_bool(call, 3, true),
       unit = tpurt_arg_bool(call, 4, false);
  const tpurt_tensor_t* X = &call->outputs[0];
  MAT_BATCH_OF(X, 2);
  int64_t n = A->sizes[A->ndim - 1], r = X->sizes[nb], c = X->sizes[nb + 1], k = left ? c : r;
  Z_SCRATCH_OR_FAIL(a, n * n + n * k);
  zd_t* x = a + n * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, X->sizes, nb, idx);
    mat_zload(A, mat_boff(A, 2, idx, nb), n, n, false, a, false, false);
    mat_zload(B, mat_boff(B, 2, idx, nb), r, c, false, x, !left, false);
    z_tri_solve(a, n, !upper, !left, false, unit, x, k); /* right: X A = B <=> A^T X^T = B^T */
    mat_zstore(X, mat_boff(X, 2, idx, nb), r, c, false, x, !left, false);
  }
  return TPURT_OK;
}

/* triangular_solve(b, A, upper, transpose, unitriangular) -> (X, copy of A) */
tpurt_status_t tpurt_linalg_z_triangular_solve(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *B = NULL, *A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &B));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 1, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 2));
  bool upper = tpurt_arg_bool(call, 2, true), trans = tpurt_arg_bool(call, 3, false),
       unit = tpurt_arg_bool(call, 4, false);
  const tpurt_tensor_t *X = &call->outputs[0], *M = &call->outputs[1];
  MAT_BATCH_OF(X, 2);
  int64_t n = A->sizes[A->ndim - 1], k = X->sizes[nb + 1];
  Z_SCRATCH_OR_FAIL(a, n * n + n * k);
  zd_t* x = a + n * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, X->sizes, nb, idx);
    mat_zload(A, mat_boff(A, 2, idx, nb), n, n, false, a, false, false);
    mat_zload(B, mat_boff(B, 2, idx, nb), n, k, false, x, false, false);
    z_tri_solve(a, n, !upper, trans, false, unit, x, k);
    mat_zstore(X, mat_boff(X, 2, idx, nb), n, k, false, x, false, false);
    if (tpurt_tensor_numel(M)) mat_zstore(M, mat_boff(M, 2, idx, nb), n, n, false, a, false, false);
  }
  return TPURT_OK;
}

/* ---- Cholesky: A = L L^H ---- */

/* In-place lower Cholesky of the Hermitian n x n a (reads the lower triangle, zeroes the
 * upper). Returns 0 or the 1-based order of the first minor that is not positive-definite. */
static int z_cholesky(zd_t* a, int64_t n) {
  int info = 0;
  if (lapack_cholesky_z(a, n, &info)) return info; /* zpotrf from 16 x 16 (lapack.h) */
  for (int64_t j = 0; j < n; ++j) {
    double d = creal(a[j * n + j]);
    for (int64_t k = 0; k < j; ++k) d -= creal(a[j * n + k] * conj(a[j * n + k]));
    if (!(d > 0.0)) return (int)(j + 1);
    d = sqrt(d);
    a[j * n + j] = d;
    for (int64_t i = j + 1; i < n; ++i) {
      zd_t s = a[i * n + j];
      for (int64_t k = 0; k < j; ++k) s -= a[i * n + k] * conj(a[j * n + k]);
      a[i * n + j] = s / d;
    }
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) a[i * n + j] = 0;
  return 0;
}

/* linalg_cholesky_ex(A, upper, check_errors) -> (L, info); cholesky(A, upper) -> L.
 * upper reads the upper triangle (the lower one of A^H) and returns U = L^H. */
static tpurt_status_t z_chol_common(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ex) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, ex ? 2 : 1));
  bool upper = tpurt_arg_bool(call, 1, false), check = ex ? tpurt_arg_bool(call, 2, false) : true;
  MAT_BATCH_OF(A, 2);
  int64_t n = A->sizes[nb];
  Z_SCRATCH_OR_FAIL(a, n * n);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    mat_zload(A, mat_boff(A, 2, idx, nb), n, n, false, a, upper, upper);
    int info = z_cholesky(a, n);
    if (ex) mat_set_int(&call->outputs[1], mat_boff(&call->outputs[1], 0, idx, nb), info);
    if (info && check)
      return TPURT_STATUS(INVALID_ARGUMENT,
                          "linalg.cholesky: The factorization could not be completed because the "
                          "input is not positive-definite (the leading minor of order %d is not "
                          "positive-definite).", info);
    mat_zstore(&call->outputs[0], mat_boff(&call->outputs[0], 2, idx, nb), n, n, false, a, upper, upper);
  }
  return TPURT_OK;
}
tpurt_status_t tpurt_linalg_z_cholesky_ex(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return z_chol_common(ctx, call, true);
}
tpurt_status_t tpurt_linalg_z_cholesky(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return z_chol_common(ctx, call, false);
}

/* cholesky_inverse(L, upper) -> (L L^H)^-1 (or (U^H U)^-1) */
tpurt_status_t tpurt_linalg_z_cholesky_inverse(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 1));
  bool upper = tpurt_arg_bool(call, 1, false);
  MAT_BATCH_OF(A, 2);
  int64_t n = A->sizes[nb];
  Z_SCRATCH_OR_FAIL(a, 2 * n * n);
  zd_t* x = a + n * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    mat_zload(A, mat_boff(A, 2, idx, nb), n, n, false, a, upper, upper); /* as lower L = U^H */
    for (int64_t i = 0; i < n * n; ++i) x[i] = 0;
    for (int64_t i = 0; i < n; ++i) x[i * n + i] = 1.0;
    z_tri_solve(a, n, true, false, false, false, x, n); /* L Y = I */
    z_tri_solve(a, n, true, true, true, false, x, n);   /* L^H X = Y */
    mat_zstore(&call->outputs[0], mat_boff(&call->outputs[0], 2, idx, nb), n, n, false, x, false, false);
  }
  return TPURT_OK;
}

/* _cholesky_solve_helper(B, L, upper) -> X with L L^H X = B (U^H U X = B) */
tpurt_status_t tpurt_linalg_z_cholesky_solve(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *B = NULL, *A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &B));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 1, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 1));
  bool upper = tpurt_arg_bool(call, 2, false);
  const tpurt_tensor_t* X = &call->outputs[0];
  MAT_BATCH_OF(X, 2);
  int64_t n = A->sizes[A->ndim - 1], k = X->sizes[nb + 1];
  Z_SCRATCH_OR_FAIL(a, n * n + n * k);
  zd_t* x = a + n * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, X->sizes, nb, idx);
    mat_zload(A, mat_boff(A, 2, idx, nb), n, n, false, a, upper, upper);
    mat_zload(B, mat_boff(B, 2, idx, nb), n, k, false, x, false, false);
    z_tri_solve(a, n, true, false, false, false, x, k);
    z_tri_solve(a, n, true, true, true, false, x, k);
    mat_zstore(X, mat_boff(X, 2, idx, nb), n, k, false, x, false, false);
  }
  return TPURT_OK;
}

/* ---- Householder QR (zgeqrf / zlarfg / zung2r / zunm2r) ---- */

/* In-place QR of the m x n row-major a: R on and above the diagonal (real diagonal),
 * the vectors v (v[0] = 1 implied) below it, tau[k] for k < min(m, n); H_k = I - tau v v^H,
 * A = H_0 H_1 ... R. */
static void z_geqrf(zd_t* a, int64_t m, int64_t n, zd_t* tau) {
  int64_t kk = m < n ? m : n;
  for (int64_t k = 0; k < kk; ++k) {
    zd_t alpha = a[k * n + k];
    double xn = 0.0;
    for (int64_t i = k + 1; i < m; ++i) xn = hypot(xn, cabs(a[i * n + k]));
    if (xn == 0.0 && cimag(alpha) == 0.0) {
      tau[k] = 0;
      continue;
    }
    double ar = creal(alpha), ai = cimag(alpha);
    double beta = -copysign(hypot(hypot(ar, ai), xn), ar);
    tau[k] = CMPLX((beta - ar) / beta, -ai / beta);
    zd_t scale = 1.0 / (alpha - beta);
    for (int64_t i = k + 1; i < m; ++i) a[i * n + k] *= scale;
    a[k * n + k] = beta;
    /* apply H^H = I - conj(tau) v v^H to columns k+1.. */
    zd_t ct = conj(tau[k]);
    for (int64_t j = k + 1; j < n; ++j) {
      zd_t s = a[k * n + j];
      for (int64_t i = k + 1; i < m; ++i) s += conj(a[i * n + k]) * a[i * n + j];
      s *= ct;
      a[k * n + j] -= s;
      for (int64_t i = k + 1; i < m; ++i) a[i * n + j] -= s * a[i * n + k];
    }
  }
}

/* c (m x nc) = Q C (herm = false) or Q^H C, Q = H_0 ... H_{k-1} from the m x nv reflectors */
static void z_apply_q_left(const zd_t* v, int64_t m, int64_t nv, const zd_t* tau, int64_t k, zd_t* c, int64_t nc,
                           bool herm) {
  for (int64_t t = 0; t < k; ++t) {
    int64_t h = herm ? t : k - 1 - t;
    zd_t th = herm ? conj(tau[h]) : tau[h];
    if (th == 0) continue;
    for (int64_t j = 0; j < nc; ++j) {
      zd_t s = c[h * nc + j];
      for (int64_t i = h + 1; i < m; ++i) s += conj(v[i * nv + h]) * c[i * nc + j];
      s *= th;
      c[h * nc + j] -= s;
      for (int64_t i = h + 1; i < m; ++i) c[i * nc + j] -= s * v[i * nv + h];
    }
  }
}

static void z_load_vec(const tpurt_tensor_t* T, int64_t off, zd_t* dst, int64_t k) {
  for (int64_t i = 0; i < k; ++i) dst[i] = mat_zld(T, off + i * T->strides[T->ndim - 1]);
}

/* geqrf(A) -> (a, tau) */
tpurt_status_t tpurt_linalg_z_geqrf(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 2));
  MAT_BATCH_OF(A, 2);
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1], k = m < n ? m : n;
  Z_SCRATCH_OR_FAIL(a, m * n + k);
  zd_t* tau = a + m * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    const bool sized = lapack_qr_sized(k); /* LAPACK's path reads a column-major copy */
    if (sized) mat_zload(A, mat_boff(A, 2, idx, nb), m, n, false, a, true, false);
    const bool by_lapack = sized && lapack_qr_z(a, m, n, tau, NULL, 0);
    if (!by_lapack) {
      mat_zload(A, mat_boff(A, 2, idx, nb), m, n, false, a, false, false);
      z_geqrf(a, m, n, tau);
    }
    mat_zstore(&call->outputs[0], mat_boff(&call->outputs[0], 2, idx, nb), m, n, false, a, by_lapack, false);
    const tpurt_tensor_t* T = &call->outputs[1];
    for (int64_t i = 0; i < k; ++i) mat_zst(T, mat_boff(T, 1, idx, nb) + i * T->strides[T->ndim - 1], tau[i]);
  }
  return TPURT_OK;
}

/* linalg_qr(A, mode) -> (Q, R) */
tpurt_status_t tpurt_linalg_z_qr(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 2));
  const char* mode = tpurt_arg_string(call, 1, "reduced");
  bool complete = strcmp(mode, "complete") == 0, want_q = strcmp(mode, "r") != 0;
  if (!complete && want_q && strcmp(mode, "reduced") != 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: mode must be reduced, complete or r, got %s", call->name, mode);
  MAT_BATCH_OF(A, 2);
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1], k = m < n ? m : n;
  int64_t qc = complete ? m : k, rr = complete ? m : k;
  Z_SCRATCH_OR_FAIL(a, m * n + k + m * (m > n ? m : n) + rr * n);
  zd_t* tau = a + m * n;
  zd_t* q = tau + k;
  zd_t* r = q + m * (m > n ? m : n);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    const bool sized = lapack_qr_sized(k); /* LAPACK's path reads a column-major copy */
    if (sized) mat_zload(A, mat_boff(A, 2, idx, nb), m, n, false, a, true, false);
    if (sized && lapack_qr_z(a, m, n, tau, want_q ? q : NULL, qc)) {
      for (int64_t i = 0; i < rr; ++i)
        for (int64_t j = 0; j < n; ++j) r[i * n + j] = (j >= i && i < m) ? a[j * m + i] : 0.0;
      mat_zstore(&call->outputs[1], mat_boff(&call->outputs[1], 2, idx, nb), rr, n, false, r, false, false);
      if (want_q) mat_zstore(&call->outputs[0], mat_boff(&call->outputs[0], 2, idx, nb), m, qc, false, q, true, false);
      continue;
    }
    mat_zload(A, mat_boff(A, 2, idx, nb), m, n, false, a, false, false);
    z_geqrf(a, m, n, tau);
    for (int64_t i = 0; i < rr; ++i)
      for (int64_t j = 0; j < n; ++j) r[i * n + j] = (j >= i && i < m) ? a[i * n + j] : 0.0;
    mat_zstore(&call->outputs[1], mat_boff(&call->outputs[1], 2, idx, nb), rr, n, false, r, false, false);
    if (want_q) {
      for (int64_t i = 0; i < m * qc; ++i) q[i] = 0;
      for (int64_t i = 0; i < qc && i < m; ++i) q[i * qc + i] = 1.0;
      z_apply_q_left(a, m, n, tau, k, q, qc, false);
      mat_zstore(&call->outputs[0], mat_boff(&call->outputs[0], 2, idx, nb), m, qc, false, q, false, false);
    }
  }
  return TPURT_OK;
}

/* linalg_householder_product(V, tau) -> the first n columns of H_0 ... H_{k-1} */
tpurt_status_t tpurt_linalg_z_householder_product(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *V = NULL, *T = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &V));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 1, 1, &T));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 1));
  MAT_BATCH_OF(V, 2);
  int64_t m = V->sizes[nb], n = V->sizes[nb + 1], k = T->sizes[T->ndim - 1];
  if (k > n || n > m)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: needs m >= n >= k, got %lld, %lld, %lld", call->name,
                        (long long)m, (long long)n, (long long)k);
  Z_SCRATCH_OR_FAIL(a, 2 * m * n + k);
  zd_t* q = a + m * n;
  zd_t* tau = q + m * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, V->sizes, nb, idx);
    z_load_vec(T, mat_boff(T, 1, idx, nb), tau, k);
    const bool sized = lapack_qr_sized(n); /* LAPACK's path reads a column-major copy */
    if (sized) mat_zload(V, mat_boff(V, 2, idx, nb), m, n, false, q, true, false);
    if (sized && lapack_orgqr_z(q, m, n, k, tau)) {
      mat_zstore(&call->outputs[0], mat_boff(&call->outputs[0], 2, idx, nb), m, n, false, q, true, false);
      continue;
    }
    mat_zload(V, mat_boff(V, 2, idx, nb), m, n, false, a, false, false);
    for (int64_t i = 0; i < m * n; ++i) q[i] = 0;
    for (int64_t i = 0; i < n; ++i) q[i * n + i] = 1.0;
    z_apply_q_left(a, m, n, tau, k, q, n, false);
    mat_zstore(&call->outputs[0], mat_boff(&call->outputs[0], 2, idx, nb), m, n, false, q, false, false);
  }
  return TPURT_OK;
}

/* ormqr(A, tau, C, left, transpose) -> op(Q) C (left) or C op(Q); op(Q) = Q^H when transpose */
tpurt_status_t tpurt_linalg_z_ormqr(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *V = NULL, *T = NULL, *C = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &V));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 1, 1, &T));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 2, 2, &C));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 1));
  bool left = tpurt_arg_bool(call, 3, true), trans = tpurt_arg_bool(call, 4, false);
  const tpurt_tensor_t* X = &call->outputs[0];
  MAT_BATCH_OF(X, 2);
  int64_t mv = V->sizes[V->ndim - 2], nv = V->sizes[V->ndim - 1], k = T->sizes[T->ndim - 1];
  int64_t r = X->sizes[nb], c = X->sizes[nb + 1];
  int64_t qm = left ? r : c;
  if (mv != qm || k > qm)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: reflectors (%lld rows, %lld of them) do not fit C", call->name,
                        (long long)mv, (long long)k);
  Z_SCRATCH_OR_FAIL(a, mv * nv + r * c + k);
  zd_t* x = a + mv * nv;
  zd_t* tau = x + r * c;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, X->sizes, nb, idx);
    z_load_vec(T, mat_boff(T, 1, idx, nb), tau, k);
    const bool sized = lapack_qr_sized(mv); /* LAPACK's path reads column-major copies */
    if (sized) {
      mat_zload(V, mat_boff(V, 2, idx, nb), mv, nv, false, a, true, false);
      mat_zload(C, mat_boff(C, 2, idx, nb), r, c, false, x, true, false);
    }
    if (sized && lapack_ormqr_z(a, mv, nv, k, tau, x, r, c, left, trans)) {
      mat_zstore(X, mat_boff(X, 2, idx, nb), r, c, false, x, true, false);
      continue;
    }
    mat_zload(V, mat_boff(V, 2, idx, nb), mv, nv, false, a, false, false);
    /* right: C op(Q) = (op(Q)^H C^H)^H */
    mat_zload(C, mat_boff(C, 2, idx, nb), r, c, false, x, !left, !left);
    z_apply_q_left(a, mv, nv, tau, k, x, left ? c : r, left ? trans : !trans);
    mat_zstore(X, mat_boff(X, 2, idx, nb), r, c, false, x, !left, !left);
  }
  return TPURT_OK;
}

/* ---- Hermitian eigendecomposition: cyclic Jacobi, as eigh.c, with complex rotations ---- */

/* a (n x n Hermitian, destroyed): w ascending, v's columns the eigenvectors. Each rotation first
 * turns a_pq real with the phase of column q (D = diag(1, e^{-i phi})), then is eigh.c's real one. */
static void z_jacobi_eigh(zd_t* a, int64_t n, double* w, zd_t* v) {
  for (int64_t i = 0; i < n * n; ++i) v[i] = 0;
  for (int64_t i = 0; i < n; ++i) v[i * n + i] = 1.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0.0, diag = 0.0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double x = cabs(a[i * n + j]);
        *(i == j ? &diag : &off) += x * x;
      }
    if (off <= 1e-32 * diag || off == 0.0) break;
    for (int64_t p = 0; p < n - 1; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        zd_t apq = a[p * n + q];
        double mag = cabs(apq);
        if (mag == 0.0) continue;
        zd_t ph = apq / mag; /* e^{i phi} */
        double theta = (creal(a[q * n + q]) - creal(a[p * n + p])) / (2.0 * mag);
        double t = copysign(1.0, theta) / (fabs(theta) + sqrt(theta * theta + 1.0));
        double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
        for (int64_t k = 0; k < n; ++k) { /* A <- A V (columns p, q) */
          zd_t akp = a[k * n + p], akq = a[k * n + q] * conj(ph);
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) { /* A <- V^H A (rows p, q) */
          zd_t apk = a[p * n + k], aqk = a[q * n + k] * ph;
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
        a[p * n + q] = a[q * n + p] = 0; /* annihilated (rounding aside) */
        a[p * n + p] = creal(a[p * n + p]);
        a[q * n + q] = creal(a[q * n + q]);
        for (int64_t k = 0; k < n; ++k) {
          zd_t vkp = v[k * n + p], vkq = v[k * n + q] * conj(ph);
          v[k * n + p] = c * vkp - s * vkq;
          v[k * n + q] = s * vkp + c * vkq;
        }
      }
  }
  for (int64_t i = 0; i < n; ++i) w[i] = creal(a[i * n + i]);
  for (int64_t i = 0; i < n; ++i) {
    int64_t mi = i;
    for (int64_t j = i + 1; j < n; ++j)
      if (w[j] < w[mi]) mi = j;
    if (mi != i) {
      double t = w[i];
      w[i] = w[mi];
      w[mi] = t;
      for (int64_t k = 0; k < n; ++k) {
        zd_t tv = v[k * n + i];
        v[k * n + i] = v[k * n + mi];
        v[k * n + mi] = tv;
      }
    }
  }
}

/* zheevd on the Hermitian n x n row-major a, which LAPACK reads column-major as conj(A) (same
 * eigenvalues, conjugate eigenvectors): w ascending, and in a (column-major) the eigenvectors of
 * conj(A), so V[i][j] = conj(a[j * n + i]). False where it cannot run (non-finite entries, sizes or
 * workspace past 32-bit integers, no memory, no convergence); a is then unchanged. */
static bool z_lapack_eigh_run(zd_t* a, int64_t n, double* w, bool want_v) {
  const int N = (int)n, lq = -1;
  const char* jobz = want_v ? "V" : "N";
  int info = 0, iq = 0;
  double rq = 0;
  zd_t wq = 0;
  zheevd_(jobz, "L", &N, a, &N, w, &wq, &lq, &rq, &lq, &iq, &lq, &info, 1, 1);
  if (info != 0 || !(creal(wq) < INT32_MAX / 2) || !(rq < INT32_MAX / 2)) return false;
  const int lwork = creal(wq) > 1 ? (int)creal(wq) : 1, lrwork = rq > 1 ? (int)rq : 1, liwork = iq > 1 ? iq : 1;
  zd_t* copy = malloc(sizeof(zd_t) * (size_t)(n * n + lwork) + sizeof(double) * (size_t)lrwork + sizeof(int) * (size_t)liwork);
  if (!copy) return false;
  zd_t* work = copy + n * n;
  double* rwork = (double*)(work + lwork);
  int* iwork = (int*)(rwork + lrwork);
  memcpy(copy, a, sizeof(zd_t) * (size_t)(n * n));
  zheevd_(jobz, "L", &N, a, &N, w, work, &lwork, rwork, &lrwork, iwork, &liwork, &info, 1, 1);
  if (info != 0) memcpy(a, copy, sizeof(zd_t) * (size_t)(n * n));
  free(copy);
  return info == 0;
}
static bool z_lapack_eigh(zd_t* a, int64_t n, double* w, bool want_v) {
  if (n < LAPACK_MIN_EIGH || n > 30000 || !lapack_finite((const double*)a, 2 * n * n)) return false;
  const int threads = lapack_begin();
  const bool ok = z_lapack_eigh_run(a, n, w, want_v);
  lapack_end(threads);
  return ok;
}

/* _linalg_eigh(A, UPLO, compute_v) -> (w real, V) */
tpurt_status_t tpurt_linalg_z_eigh(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 2));
  const char* uplo = tpurt_arg_string(call, 1, "L");
  bool upper = uplo[0] == 'U' || uplo[0] == 'u';
  bool want_v = tpurt_arg_bool(call, 2, true);
  MAT_BATCH_OF(A, 2);
  int64_t n = A->sizes[nb];
  Z_SCRATCH_OR_FAIL(a, 2 * n * n + n);
  zd_t* v = a + n * n;
  double* w = (double*)(v + n * n);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    /* the lower triangle of a is the input's chosen triangle (upper: the lower one of A^H) */
    mat_zload(A, mat_boff(A, 2, idx, nb), n, n, false, a, upper, upper);
    for (int64_t i = 0; i < n; ++i) {
      a[i * n + i] = creal(a[i * n + i]); /* as zheevd: the diagonal's imaginary parts are not read */
      for (int64_t j = i + 1; j < n; ++j) a[i * n + j] = conj(a[j * n + i]);
    }
    const bool lapack = z_lapack_eigh(a, n, w, want_v);
    if (!lapack) z_jacobi_eigh(a, n, w, v);
    const tpurt_tensor_t* W = &call->outputs[0];
    for (int64_t i = 0; i < n; ++i) mat_zst(W, mat_boff(W, 1, idx, nb) + i * W->strides[W->ndim - 1], w[i]);
    if (want_v && tpurt_tensor_numel(&call->outputs[1])) {
      if (lapack) /* conj(A)'s eigenvectors, column-major: V = conj(a^T) */
        mat_zstore(&call->outputs[1], mat_boff(&call->outputs[1], 2, idx, nb), n, n, false, a, true, true);
      else
        mat_zstore(&call->outputs[1], mat_boff(&call->outputs[1], 2, idx, nb), n, n, false, v, false, false);
    }
  }
  return TPURT_OK;
}

/* ---- SVD: one-sided Jacobi, as svd.c, with complex rotations ---- */

/* completes the columns of the r x c u not marked ok (or the columns >= have) to an
 * orthonormal set by Gram-Schmidt against unit vectors */
static void z_complete_basis(zd_t* u, int64_t r, int64_t c, int64_t have, bool* ok) {
  int64_t e = 0;
  for (int64_t j = 0; j < c; ++j) {
    if (ok ? ok[j] : j < have) continue;
    for (; e < r; ++e) {
      for (int64_t i = 0; i < r; ++i) u[i * c + j] = i == e ? 1.0 : 0.0;
      for (int pass = 0; pass < 2; ++pass)
        for (int64_t q = 0; q < c; ++q) {
          if (q == j || !(ok ? ok[q] : q < have)) continue;
          zd_t d = 0;
          for (int64_t i = 0; i < r; ++i) d += conj(u[i * c + q]) * u[i * c + j];
          for (int64_t i = 0; i < r; ++i) u[i * c + j] -= d * u[i * c + q];
        }
      double nrm = 0.0;
      for (int64_t i = 0; i < r; ++i) nrm += creal(u[i * c + j] * conj(u[i * c + j]));
      nrm = sqrt(nrm);
      if (nrm > 0.5) {
        for (int64_t i = 0; i < r; ++i) u[i * c + j] /= nrm;
        ++e;
        break;
      }
    }
    if (ok) ok[j] = true;
    else have = j + 1;
  }
}

/* a (m x n, m >= n) becomes U (orthonormal columns), s descending, v (n x n) with a = U S v^H */
static void z_jacobi_svd(zd_t* a, int64_t m, int64_t n, double* s, zd_t* v, bool* ok) {
  for (int64_t i = 0; i < n * n; ++i) v[i] = 0;
  for (int64_t i = 0; i < n; ++i) v[i * n + i] = 1.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    bool rotated = false;
    for (int64_t p = 0; p < n - 1; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        double al = 0, be = 0;
        zd_t ga = 0;
        for (int64_t i = 0; i < m; ++i) {
          zd_t x = a[i * n + p], y = a[i * n + q];
          al += creal(x * conj(x)), be += creal(y * conj(y)), ga += conj(x) * y;
        }
        double g = cabs(ga);
        if (g == 0.0 || g <= 1e-15 * sqrt(al * be)) continue;
        rotated = true;
        zd_t ph = conj(ga) / g; /* column q times e^{-i phi} makes x^H y real */
        double zeta = (be - al) / (2.0 * g);
        double t = copysign(1.0, zeta) / (fabs(zeta) + sqrt(1.0 + zeta * zeta));
        double c = 1.0 / sqrt(1.0 + t * t), sn = c * t;
        for (int64_t i = 0; i < m; ++i) {
          zd_t x = a[i * n + p], y = a[i * n + q] * ph;
          a[i * n + p] = c * x - sn * y;
          a[i * n + q] = sn * x + c * y;
        }
        for (int64_t i = 0; i < n; ++i) {
          zd_t x = v[i * n + p], y = v[i * n + q] * ph;
          v[i * n + p] = c * x - sn * y;
          v[i * n + q] = sn * x + c * y;
        }
      }
    if (!rotated) break;
  }
  double smax = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    double nrm = 0.0;
    for (int64_t i = 0; i < m; ++i) nrm += creal(a[i * n + j] * conj(a[i * n + j]));
    s[j] = sqrt(nrm);
    if (s[j] > smax) smax = s[j];
  }
  for (int64_t i = 0; i < n; ++i) {
    int64_t mi = i;
    for (int64_t j = i + 1; j < n; ++j)
      if (s[j] > s[mi]) mi = j;
    if (mi != i) {
      double t = s[i];
      s[i] = s[mi];
      s[mi] = t;
      for (int64_t k = 0; k < m; ++k) {
        zd_t tv = a[k * n + i];
        a[k * n + i] = a[k * n + mi];
        a[k * n + mi] = tv;
      }
      for (int64_t k = 0; k < n; ++k) {
        zd_t tv = v[k * n + i];
        v[k * n + i] = v[k * n + mi];
        v[k * n + mi] = tv;
      }
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    ok[j] = s[j] > smax * 1e-300 && s[j] > 0.0;
    if (ok[j])
      for (int64_t i = 0; i < m; ++i) a[i * n + j] /= s[j];
  }
  z_complete_basis(a, m, n, 0, ok);
}

/* zgesdd on the row-major m x n a, read column-major as A^T = U' S V'^H, so A = conj(V') S U'^T: LAPACK's
 * V'^H (k x m column-major, or m x m when full) is U row-major, and its U' (n x k, or n x n) is Vh
 * row-major, as svd.c's real path. u: m x (full ? m : k), vh: (full ? n : k) x n; a is destroyed (the
 * caller's copy). False where it cannot run (a matrix too small for it to pay, a non-finite one, sizes or workspace past 32-bit integers, no memory, no
 * convergence). */
static bool z_lapack_svd_run(zd_t* a, int64_t m, int64_t n, bool full, bool uv, double* s, zd_t* u, zd_t* vh) {
  const int64_t k = m < n ? m : n, mx = m > n ? m : n;
  const char* jobz = !uv ? "N" : full ? "A" : "S";
  const int M = (int)n, N = (int)m, lda = (int)n, ldu = (int)n, ldvt = (int)(!uv ? 1 : full ? m : k), lq = -1;
  int info = 0;
  zd_t wq = 0;
  zgesdd_(jobz, &M, &N, NULL, &lda, NULL, NULL, &ldu, NULL, &ldvt, &wq, &lq, NULL, NULL, &info, 1);
  const int64_t lrwork = !uv ? 7 * k : k * ((5 * k + 7) > (2 * mx + 2 * k + 1) ? (5 * k + 7) : (2 * mx + 2 * k + 1));
  if (info != 0 || !(creal(wq) < INT32_MAX / 2) || lrwork > INT32_MAX / 2) return false;
  const int lwork = creal(wq) > 1 ? (int)creal(wq) : 1;
  zd_t* work = malloc(sizeof(zd_t) * (size_t)lwork + sizeof(double) * (size_t)(lrwork > 1 ? lrwork : 1) +
                      sizeof(int) * (size_t)(8 * k));
  if (!work) return false;
  double* rwork = (double*)(work + lwork);
  int* iwork = (int*)(rwork + (lrwork > 1 ? lrwork : 1));
  zd_t dummy = 0;
  zgesdd_(jobz, &M, &N, a, &lda, s, uv ? vh : &dummy, &ldu, uv ? u : &dummy, &ldvt, work, &lwork, rwork, iwork, &info, 1);
  free(work);
  return info == 0;
}
static bool z_lapack_svd(zd_t* a, int64_t m, int64_t n, bool full, bool uv, double* s, zd_t* u, zd_t* vh) {
  const int64_t k = m < n ? m : n;
  if (k < LAPACK_MIN_ZSVD || m * n > INT32_MAX / 4 || (full && (m * m > INT32_MAX / 4 || n * n > INT32_MAX / 4)))
    return false;
  if (!lapack_finite((const double*)a, 2 * m * n)) return false;
  const int threads = lapack_begin();
  const bool ok = z_lapack_svd_run(a, m, n, full, uv, s, u, vh);
  lapack_end(threads);
  return ok;
}

/* _linalg_svd(A, full_matrices, compute_uv, driver) -> (U, S real, Vh) */
tpurt_status_t tpurt_linalg_z_svd(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 3));
  bool full = tpurt_arg_bool(call, 1, false), uv = tpurt_arg_bool(call, 2, true);
  MAT_BATCH_OF(A, 2);
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1];
  bool tr = m < n; /* work on A^H so rows >= cols */
  int64_t R = tr ? n : m, C = tr ? m : n;
  int64_t UF = full && uv && R > C ? R * R : 0; /* a full U of a non-square A only */
  Z_SCRATCH_OR_FAIL(a, R * C + C * C + C + UF + R);
  zd_t* v = a + R * C;
  double* s = (double*)(v + C * C);
  zd_t* uf = v + C * C + C;
  bool* ok = (bool*)(uf + UF);
  const tpurt_tensor_t *U = &call->outputs[0], *S = &call->outputs[1], *Vh = &call->outputs[2];
  int64_t idx[TPURT_MAX_DIMS];
  const int64_t k = C, uc = full ? m : k, vr = full ? n : k;
  zd_t* lz = NULL; /* LAPACK's path: A row-major, then U (m x uc) and Vh (vr x n) */
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    if (!lz) lz = malloc(sizeof(zd_t) * (size_t)(m * n + (uv ? m * uc + vr * n : 0)));
    if (lz) {
      zd_t *la = lz, *lu = lz + m * n, *lvh = lu + (uv ? m * uc : 0);
      mat_zload(A, mat_boff(A, 2, idx, nb), m, n, false, la, false, false);
      if (z_lapack_svd(la, m, n, full, uv, s, lu, lvh)) {
        for (int64_t i = 0; i < k; ++i) mat_zst(S, mat_boff(S, 1, idx, nb) + i * S->strides[S->ndim - 1], s[i]);
        if (uv && tpurt_tensor_numel(U)) {
          mat_zstore(U, mat_boff(U, 2, idx, nb), m, uc, false, lu, false, false);
          mat_zstore(Vh, mat_boff(Vh, 2, idx, nb), vr, n, false, lvh, false, false);
        }
        continue;
      }
    }
    mat_zload(A, mat_boff(A, 2, idx, nb), m, n, false, a, tr, tr);
    z_jacobi_svd(a, R, C, s, v, ok);
    for (int64_t i = 0; i < C; ++i) mat_zst(S, mat_boff(S, 1, idx, nb) + i * S->strides[S->ndim - 1], s[i]);
    if (!uv || (!tpurt_tensor_numel(U) && !tpurt_tensor_numel(Vh))) continue;
    zd_t* lft = a;
    int64_t lc = C;
    if (full && R > C) {
      for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < R; ++j) uf[i * R + j] = j < C ? a[i * C + j] : 0.0;
      z_complete_basis(uf, R, R, C, NULL);
      lft = uf;
      lc = R;
    }
    /* A = lft S v^H: U = lft, Vh = v^H. Transposed (A^H = lft S v^H): U = v, Vh = lft^H. */
    if (!tr) {
      mat_zstore(U, mat_boff(U, 2, idx, nb), m, lc, false, lft, false, false);
      mat_zstore(Vh, mat_boff(Vh, 2, idx, nb), n, n, false, v, true, true);
    } else {
      mat_zstore(U, mat_boff(U, 2, idx, nb), m, m, false, v, false, false);
      mat_zstore(Vh, mat_boff(Vh, 2, idx, nb), lc, n, false, lft, true, true);
    }
  }
  free(lz);
  return TPURT_OK;
}
