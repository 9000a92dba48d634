/* Triangular solves: linalg_solve_triangular and
 * triangular_solve, and the in-place solve the Cholesky kernels share
 * (tpurt_linalg_tri_solve). float32/float64, through the double scratch of
 * matrix.h; each op's reference is the kernel itself. */
#include "ops/linalg/lapack.h"
#include "ops/linalg/matrix.h"

void tpurt_linalg_tri_solve(const double* t, int64_t n, bool lower, bool trans, bool unit, double* b, int64_t k) {
  if (lapack_trsm_d(t, n, lower, trans ? "T" : "N", unit, b, k)) return; /* from LAPACK_MIN_TRSM */
  bool eff_lower = trans ? !lower : lower; /* T^T of a lower matrix is upper */
#define TEL(i, j) (trans ? t[(j) * n + (i)] : t[(i) * n + (j)])
  if (eff_lower) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t r = 0; r < i; ++r) {
        double v = TEL(i, r);
        if (v != 0.0)
          for (int64_t j = 0; j < k; ++j) b[i * k + j] -= v * b[r * k + j];
      }
      if (!unit)
        for (int64_t j = 0; j < k; ++j) b[i * k + j] /= TEL(i, i);
    }
  } else {
    for (int64_t i = n - 1; i >= 0; --i) {
      for (int64_t r = i + 1; r < n; ++r) {
        double v = TEL(i, r);
        if (v != 0.0)
          for (int64_t j = 0; j < k; ++j) b[i * k + j] -= v * b[r * k + j];
      }
      if (!unit)
        for (int64_t j = 0; j < k; ++j) b[i * k + j] /= TEL(i, i);
    }
  }
#undef TEL
}

/* linalg_solve_triangular(A, B, upper, left, unitriangular) -> X */
tpurt_status_t tpurt_linalg_solve_triangular(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *A = NULL, *B = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 1, 2, &B));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 1));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, A));
  bool upper = tpurt_arg_bool(call, 2, false), left = tpurt_arg_bool(call, 3, true), unit = tpurt_arg_bool(call, 4, false);
  const tpurt_tensor_t* X = &call->outputs[0];
  MAT_BATCH_OF(X, 2);
  int64_t n = A->sizes[A->ndim - 1], r = X->sizes[nb], c = X->sizes[nb + 1], k = left ? c : r;
  MAT_SCRATCH_OR_FAIL(a, n * n + n * k);
  double* x = a + n * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, X->sizes, nb, idx);
    mat_load(A, mat_boff(A, 2, idx, nb), n, n, false, a, false);
    mat_load(B, mat_boff(B, 2, idx, nb), r, c, false, x, !left);
    /* right: X A = B <=> A^T X^T = B^T */
    tpurt_linalg_tri_solve(a, n, !upper, !left, unit, x, k);
    mat_store(X, mat_boff(X, 2, idx, nb), r, c, false, x, !left);
  }
  return TPURT_OK;
}

/* triangular_solve(b, A, upper, transpose, unitriangular) -> (X, copy of A) */
tpurt_status_t tpurt_linalg_triangular_solve(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *B = NULL, *A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &B));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 1, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 2));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, A));
  bool upper = tpurt_arg_bool(call, 2, true), trans = tpurt_arg_bool(call, 3, false), unit = tpurt_arg_bool(call, 4, false);
  const tpurt_tensor_t *X = &call->outputs[0], *M = &call->outputs[1];
  MAT_BATCH_OF(X, 2);
  int64_t n = A->sizes[A->ndim - 1], k = X->sizes[nb + 1];
  MAT_SCRATCH_OR_FAIL(a, n * n + n * k);
  double* x = a + n * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, X->sizes, nb, idx);
    mat_load(A, mat_boff(A, 2, idx, nb), n, n, false, a, false);
    mat_load(B, mat_boff(B, 2, idx, nb), n, k, false, x, false);
    tpurt_linalg_tri_solve(a, n, !upper, trans, unit, x, k);
    mat_store(X, mat_boff(X, 2, idx, nb), n, k, false, x, false);
    if (tpurt_tensor_numel(M)) mat_store(M, mat_boff(M, 2, idx, nb), n, n, false, a, false);
  }
  return TPURT_OK;
}
