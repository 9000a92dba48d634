/* LU with partial pivoting for small matrices (the LAPACK-shaped ATen ops):
 * factor (linalg_lu_factor_ex, linalg_lu, lu_unpack), solve (linalg_lu_solve,
 * _linalg_solve_ex), inverse (linalg_inv_ex), determinant (_linalg_det,
 * _linalg_slogdet). float32/float64, through the double scratch of matrix.h.
 * Conventions follow LAPACK (getrf's 1-based int32 pivots, info = first zero
 * pivot) so results match PyTorch CPU where they are unique. The kernels are
 * plain scalar loops, so each op's reference is the kernel itself. */
#include "ops/linalg/lapack.h"
#include "ops/linalg/matrix.h"

#define LU_T double
#define LU_ABS fabs
#define LU_SUF d
#include "ops/linalg/lu_impl.h"

/* LU through LAPACK where the matrix is large enough for its blocked dgetrf / dgetrs (level-3 BLAS) to
 * matter and every entry is finite: the same partial pivoting (first largest |a|), 1-based pivots and
 * info, on a column-major copy. The loops above (lu_impl.h, shared with the complex kernels) took 49 ms
 * for a 512 x 512 inverse against PyTorch CPU's 4.4. */
static int lu_factor_fast(double* a, int64_t m, int64_t n, int32_t* piv) {
  int info = 0;
  return lapack_lu_factor_d(a, m, n, piv, &info) ? info : lu_factor_d(a, m, n, piv, 0);
}
/* op(A) X = B in place in b (n x k row-major) from lu_factor_fast's (or lu_factor_d's) LU and pivots */
static void lu_solve_fast(const double* lu, const int32_t* piv, int64_t n, double* b, int64_t k, bool trans) {
  if (!lapack_lu_solve_d(lu, piv, n, b, k, trans)) lu_solve_d(lu, piv, n, b, k, trans);
}

static void store_pivots(const tpurt_tensor_t* t, int64_t off, const int32_t* piv, int64_t k) {
  int64_t s = t->strides[t->ndim - 1];
  for (int64_t i = 0; i < k; ++i) mat_set_int(t, off + i * s, piv[i]);
}
static void load_pivots(const tpurt_tensor_t* t, int64_t off, int32_t* piv, int64_t k) {
  int64_t s = t->strides[t->ndim - 1];
  for (int64_t i = 0; i < k; ++i) piv[i] = (int32_t)mat_get_int(t, off + i * s);
}

static tpurt_status_t check_pivots(const tpurt_op_call_t* call, const int32_t* piv, int64_t k, int64_t m) {
  for (int64_t i = 0; i < k; ++i)
    if (piv[i] < 1 || piv[i] > m)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: pivot %lld is %d, outside [1, %lld]", call->name,
                          (long long)i, (int)piv[i], (long long)m);
  return TPURT_OK;
}

/* linalg_lu_factor_ex(A, pivot, check_errors) -> (LU, pivots, info) */
tpurt_status_t tpurt_linalg_lu_factor_ex(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 3));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, A));
  if (!tpurt_arg_bool(call, 1, true))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: LU without pivoting is not implemented", call->name);
  bool check = tpurt_arg_bool(call, 2, false);
  const tpurt_tensor_t *LU = &call->outputs[0], *P = &call->outputs[1], *I = &call->outputs[2];
  int nb = A->ndim - 2;
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1], k = m < n ? m : n, batch = mat_prod(A->sizes, nb);
  MAT_SCRATCH_OR_FAIL(a, m * n + k);
  int32_t* piv = (int32_t*)(a + m * n);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    mat_load(A, mat_boff(A, 2, idx, nb), m, n, false, a, false);
    int info = lu_factor_fast(a, m, n, piv);
    mat_store(LU, mat_boff(LU, 2, idx, nb), m, n, false, a, false);
    store_pivots(P, mat_boff(P, 1, idx, nb), piv, k);
    mat_set_int(I, mat_boff(I, 0, idx, nb), info);
    if (check && info)
      return TPURT_STATUS(INVALID_ARGUMENT,
                          "linalg.lu_factor: U[%d, %d] is zero, the factorization is singular",
                          info, info);
  }
  return TPURT_OK;
}

/* P (m x m) from 1-based pivots: A = P L U */
static void pivots_to_perm(const int32_t* piv, int64_t k, int64_t m, int64_t* perm) {
  for (int64_t i = 0; i < m; ++i) perm[i] = i;
  for (int64_t i = 0; i < k; ++i) {
    int64_t p = piv[i] - 1, t = perm[i];
    perm[i] = perm[p];
    perm[p] = t;
  }
}

static void store_unpacked(const tpurt_tensor_t* Pt, const tpurt_tensor_t* Lt, const tpurt_tensor_t* Ut,
                           const int64_t* idx, int nb, const double* a, const int32_t* piv, int64_t m,
                           int64_t n, double* tmp, int64_t* perm) {
  int64_t k = m < n ? m : n;
  if (Pt && tpurt_tensor_numel(Pt)) {
    pivots_to_perm(piv, k, m, perm);
    memset(tmp, 0, (size_t)(m * m) * sizeof(double));
    for (int64_t i = 0; i < m; ++i) tmp[perm[i] * m + i] = 1.0;
    mat_store(Pt, mat_boff(Pt, 2, idx, nb), m, m, false, tmp, false);
  }
  if (Lt && tpurt_tensor_numel(Lt)) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j) tmp[i * k + j] = j < i ? a[i * n + j] : (i == j ? 1.0 : 0.0);
    mat_store(Lt, mat_boff(Lt, 2, idx, nb), m, k, false, tmp, false);
  }
  if (Ut && tpurt_tensor_numel(Ut)) {
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j) tmp[i * n + j] = j >= i ? a[i * n + j] : 0.0;
    mat_store(Ut, mat_boff(Ut, 2, idx, nb), k, n, false, tmp, false);
  }
}

/* linalg_lu(A, pivot) -> (P, L, U) */
tpurt_status_t tpurt_linalg_lu(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 3));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, A));
  if (!tpurt_arg_bool(call, 1, true))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: LU without pivoting is not implemented", call->name);
  int nb = A->ndim - 2;
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1], k = m < n ? m : n, batch = mat_prod(A->sizes, nb);
  int64_t big = m > n ? m : n;
  MAT_SCRATCH_OR_FAIL(a, m * n + big * big + k + m);
  double* tmp = a + m * n;
  int32_t* piv = (int32_t*)(tmp + big * big);
  int64_t* perm = (int64_t*)(tmp + big * big + k);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    mat_load(A, mat_boff(A, 2, idx, nb), m, n, false, a, false);
    lu_factor_fast(a, m, n, piv);
    store_unpacked(&call->outputs[0], &call->outputs[1], &call->outputs[2], idx, nb, a, piv, m, n, tmp, perm);
  }
  return TPURT_OK;
}

/* lu_unpack(LU, pivots, unpack_data, unpack_pivots) -> (P, L, U) */
tpurt_status_t tpurt_linalg_lu_unpack(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *A = NULL, *Pv = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 1, 1, &Pv));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 3));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, A));
  bool data = tpurt_arg_bool(call, 2, true), pivots = tpurt_arg_bool(call, 3, true);
  int nb = A->ndim - 2;
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1], k = m < n ? m : n, batch = mat_prod(A->sizes, nb);
  int64_t big = m > n ? m : n;
  MAT_SCRATCH_OR_FAIL(a, m * n + big * big + k + m);
  double* tmp = a + m * n;
  int32_t* piv = (int32_t*)(tmp + big * big);
  int64_t* perm = (int64_t*)(tmp + big * big + k);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    mat_load(A, mat_boff(A, 2, idx, nb), m, n, false, a, false);
    if (pivots) {
      load_pivots(Pv, mat_boff(Pv, 1, idx, nb), piv, k);
      TPURT_RETURN_IF_ERROR(check_pivots(call, piv, k, m));
    }
    store_unpacked(pivots ? &call->outputs[0] : NULL, data ? &call->outputs[1] : NULL,
                   data ? &call->outputs[2] : NULL, idx, nb, a, piv, m, n, tmp, perm);
  }
  return TPURT_OK;
}


/* linalg_lu_solve(LU, pivots, B, left, adjoint) -> X */
tpurt_status_t tpurt_linalg_lu_solve(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *LU = NULL, *Pv = NULL, *B = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &LU));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 1, 1, &Pv));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 2, 2, &B));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 1));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, LU));
  bool left = tpurt_arg_bool(call, 3, true), adjoint = tpurt_arg_bool(call, 4, false);
  const tpurt_tensor_t* X = &call->outputs[0];
  MAT_BATCH_OF(X, 2);
  int64_t n = LU->sizes[LU->ndim - 1];
  int64_t r = X->sizes[nb], c = X->sizes[nb + 1];
  int64_t k = left ? c : r; /* right-hand sides */
  MAT_SCRATCH_OR_FAIL(a, n * n + n * k + n);
  double* x = a + n * n;
  int32_t* piv = (int32_t*)(x + n * k);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, X->sizes, nb, idx);
    mat_load(LU, mat_boff(LU, 2, idx, nb), n, n, false, a, false);
    load_pivots(Pv, mat_boff(Pv, 1, idx, nb), piv, n);
    TPURT_RETURN_IF_ERROR(check_pivots(call, piv, n, n));
    /* left: op(A) X = B. right: X op(A) = B <=> op(A)^T X^T = B^T */
    mat_load(B, mat_boff(B, 2, idx, nb), r, c, false, x, !left);
    lu_solve_fast(a, piv, n, x, k, left ? adjoint : !adjoint);
    mat_store(X, mat_boff(X, 2, idx, nb), r, c, false, x, !left);
  }
  return TPURT_OK;
}

/* _linalg_solve_ex(A, B, left, check_errors) -> (result, LU, pivots, info). B may be a
 * (batch of) vector(s): result then has A's dims minus one. LU is of A (left) or A^T. */
tpurt_status_t tpurt_linalg_solve_ex(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *A = NULL, *B = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 1, 1, &B));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 4));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, A));
  bool left = tpurt_arg_bool(call, 2, true), check = tpurt_arg_bool(call, 3, false);
  const tpurt_tensor_t *X = &call->outputs[0], *LU = &call->outputs[1], *P = &call->outputs[2],
                       *I = &call->outputs[3];
  int64_t n = A->sizes[A->ndim - 1];
  bool vec = X->ndim == LU->ndim - 1; /* linalg_solve_is_vector_rhs */
  int nb = X->ndim - (vec ? 1 : 2);
  int64_t batch = mat_prod(X->sizes, nb);
  int64_t r = vec ? n : X->sizes[nb], c = vec ? 1 : X->sizes[nb + 1];
  int64_t k = left ? c : r;
  MAT_SCRATCH_OR_FAIL(a, n * n + n * k + n);
  double* x = a + n * n;
  int32_t* piv = (int32_t*)(x + n * k);
  int64_t idx[TPURT_MAX_DIMS];
  int lu_nb = LU->ndim - 2;
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, X->sizes, nb, idx);
    mat_load(A, mat_boff(A, 2, idx, nb), n, n, false, a, !left);
    int info = lu_factor_fast(a, n, n, piv);
    /* LU/pivots/info have A's batch shape (possibly smaller than the result's): write
     * them from the batch items they own */
    const int64_t* li = idx + (nb - lu_nb);
    mat_store(LU, mat_boff(LU, 2, li, lu_nb), n, n, false, a, false);
    store_pivots(P, mat_boff(P, 1, li, lu_nb), piv, n);
    mat_set_int(I, mat_boff(I, 0, li, lu_nb), info);
    if (info) {
      if (check)
        return TPURT_STATUS(INVALID_ARGUMENT,
                            "torch.linalg.solve: The solver failed because the input matrix is "
                            "singular.");
    }
    mat_load(B, mat_boff(B, vec ? 1 : 2, idx, nb), r, c, vec, x, !left);
    lu_solve_fast(a, piv, n, x, k, false);
    mat_store(X, mat_boff(X, vec ? 1 : 2, idx, nb), r, c, vec, x, !left);
  }
  /* an empty result batch (B's batch dims hold a 0) still has A's LU, pivots and info */
  int64_t lu_batch = mat_prod(LU->sizes, lu_nb);
  for (int64_t b = 0; batch == 0 && b < lu_batch; ++b) {
    mat_unravel(b, LU->sizes, lu_nb, idx);
    mat_load(A, mat_boff(A, 2, idx, lu_nb), n, n, false, a, !left);
    int info = lu_factor_fast(a, n, n, piv);
    mat_store(LU, mat_boff(LU, 2, idx, lu_nb), n, n, false, a, false);
    store_pivots(P, mat_boff(P, 1, idx, lu_nb), piv, n);
    mat_set_int(I, mat_boff(I, 0, idx, lu_nb), info);
  }
  return TPURT_OK;
}

/* linalg_inv_ex(A, check_errors) -> (inverse, info) */
tpurt_status_t tpurt_linalg_inv_ex(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 2));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, A));
  bool check = tpurt_arg_bool(call, 1, false);
  const tpurt_tensor_t *X = &call->outputs[0], *I = &call->outputs[1];
  MAT_BATCH_OF(A, 2);
  int64_t n = A->sizes[nb];
  MAT_SCRATCH_OR_FAIL(a, 2 * n * n + n);
  double* x = a + n * n;
  int32_t* piv = (int32_t*)(x + n * n);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    mat_load(A, mat_boff(A, 2, idx, nb), n, n, false, a, false);
    int info = lu_factor_fast(a, n, n, piv);
    mat_set_int(I, mat_boff(I, 0, idx, nb), info);
    if (info && check)
      return TPURT_STATUS(INVALID_ARGUMENT,
                          "linalg.inv: The diagonal element %d is zero, the inversion could not be "
                          "completed because the input matrix is singular.", info);
    memset(x, 0, (size_t)(n * n) * sizeof(double));
    for (int64_t i = 0; i < n; ++i) x[i * n + i] = 1.0;
    lu_solve_fast(a, piv, n, x, n, false);
    mat_store(X, mat_boff(X, 2, idx, nb), n, n, false, x, false);
  }
  return TPURT_OK;
}

/* _linalg_det(A) -> (det, LU, pivots); _linalg_slogdet(A) -> (sign, logabsdet, LU, pivots) */
static tpurt_status_t det_common(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool slog) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, slog ? 4 : 3));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, A));
  const tpurt_tensor_t* LU = &call->outputs[slog ? 2 : 1];
  const tpurt_tensor_t* P = &call->outputs[slog ? 3 : 2];
  MAT_BATCH_OF(A, 2);
  int64_t n = A->sizes[nb];
  MAT_SCRATCH_OR_FAIL(a, n * n + n);
  int32_t* piv = (int32_t*)(a + n * n);
  int64_t idx[TPURT_MAX_DIMS];
  /* As ATen does (and its backward expects): a row-major A is factored as A^T, whose
   * column-major layout is A's memory; det(A^T) = det(A). */
  bool tr = tpurt_tensor_is_contiguous(A);
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    mat_load(A, mat_boff(A, 2, idx, nb), n, n, false, a, tr);
    lu_factor_fast(a, n, n, piv);
    double sign = 1.0, logabs = 0.0, det = 1.0;
    for (int64_t i = 0; i < n; ++i) {
      double d = a[i * n + i];
      if (piv[i] != i + 1) sign = -sign;
      det *= d;
      if (d < 0) sign = -sign;
      logabs += log(fabs(d));
    }
    bool singular = false;
    for (int64_t i = 0; i < n; ++i) singular |= a[i * n + i] == 0.0;
    if (singular) sign = 0.0, logabs = -INFINITY;
    for (int64_t i = 0; i < n; ++i)
      if (piv[i] != i + 1) det = -det;
    if (slog) {
      mat_st(&call->outputs[0], mat_boff(&call->outputs[0], 0, idx, nb), sign);
      mat_st(&call->outputs[1], mat_boff(&call->outputs[1], 0, idx, nb), logabs);
    } else {
      mat_st(&call->outputs[0], mat_boff(&call->outputs[0], 0, idx, nb), det);
    }
    mat_store(LU, mat_boff(LU, 2, idx, nb), n, n, false, a, false);
    store_pivots(P, mat_boff(P, 1, idx, nb), piv, n);
  }
  return TPURT_OK;
}
tpurt_status_t tpurt_linalg_det(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return det_common(ctx, call, false);
}
tpurt_status_t tpurt_linalg_slogdet(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return det_common(ctx, call, true);
}
