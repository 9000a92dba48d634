/* Cholesky: linalg_cholesky_ex / cholesky (factor, through LAPACK for n >= 16),
 * cholesky_inverse and _cholesky_solve_helper. float32/float64, through the
 * double scratch of matrix.h; each op's reference is the kernel itself. */
#include "ops/linalg/lapack.h"
#include "ops/linalg/matrix.h"

/* In-place lower Cholesky of the n x n row-major a (reads the lower triangle,
 * zeroes the upper). Returns 0 or the 1-based order of the first non-positive minor. */
static int cholesky_loops(double* a, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (int64_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    if (!(d > 0.0)) return (int)(j + 1);
    d = sqrt(d);
    a[j * n + j] = d;
    for (int64_t i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (int64_t k = 0; k < j; ++k) s -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = s / d;
    }
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) a[i * n + j] = 0.0;
  return 0;
}

/* The same through LAPACK's blocked dpotrf where n >= 16 and every entry is finite (lapack.h's
 * lapack_cholesky_d; the loops took 27 ms for 512 x 512 against PyTorch CPU's 2). */
static int cholesky(double* a, int64_t n) {
  int info = 0;
  return lapack_cholesky_d(a, n, &info) ? info : cholesky_loops(a, n);
}

/* linalg_cholesky_ex(A, upper, check_errors) -> (L, info); cholesky(A, upper) -> L */
static tpurt_status_t chol_common(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ex) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, ex ? 2 : 1));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, A));
  bool upper = tpurt_arg_bool(call, 1, false), check = ex ? tpurt_arg_bool(call, 2, false) : true;
  MAT_BATCH_OF(A, 2);
  int64_t n = A->sizes[nb];
  MAT_SCRATCH_OR_FAIL(a, n * n);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    /* upper reads the upper triangle: the lower triangle of A^T */
    mat_load(A, mat_boff(A, 2, idx, nb), n, n, false, a, upper);
    int info = cholesky(a, n);
    if (ex) mat_set_int(&call->outputs[1], mat_boff(&call->outputs[1], 0, idx, nb), info);
    if (info) {
      if (check)
        return TPURT_STATUS(INVALID_ARGUMENT,
                            "linalg.cholesky: The factorization could not be completed because the "
                            "input is not positive-definite (the leading minor of order %d is not "
                            "positive-definite).", info);
    }
    mat_store(&call->outputs[0], mat_boff(&call->outputs[0], 2, idx, nb), n, n, false, a, upper);
  }
  return TPURT_OK;
}
tpurt_status_t tpurt_linalg_cholesky_ex(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return chol_common(ctx, call, true);
}
tpurt_status_t tpurt_linalg_cholesky(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return chol_common(ctx, call, false);
}

/* cholesky_inverse(L, upper) -> (L L^T)^-1 (or (U^T U)^-1) */
tpurt_status_t tpurt_linalg_cholesky_inverse(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 1));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, A));
  bool upper = tpurt_arg_bool(call, 1, false);
  MAT_BATCH_OF(A, 2);
  int64_t n = A->sizes[nb];
  MAT_SCRATCH_OR_FAIL(a, 2 * n * n);
  double* x = a + n * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    mat_load(A, mat_boff(A, 2, idx, nb), n, n, false, a, upper); /* as lower L */
    memset(x, 0, (size_t)(n * n) * sizeof(double));
    for (int64_t i = 0; i < n; ++i) x[i * n + i] = 1.0;
    tpurt_linalg_tri_solve(a, n, true, false, false, x, n); /* L Y = I */
    tpurt_linalg_tri_solve(a, n, true, true, false, x, n);  /* L^T X = Y */
    mat_store(&call->outputs[0], mat_boff(&call->outputs[0], 2, idx, nb), n, n, false, x, false);
  }
  return TPURT_OK;
}

/* _cholesky_solve_helper(B, L, upper) -> X with L L^T X = B (U^T U X = B) */
tpurt_status_t tpurt_linalg_cholesky_solve(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *B = NULL, *A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &B));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 1, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 1));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, A));
  bool upper = tpurt_arg_bool(call, 2, false);
  const tpurt_tensor_t* X = &call->outputs[0];
  MAT_BATCH_OF(X, 2);
  int64_t n = A->sizes[A->ndim - 1], k = X->sizes[nb + 1];
  MAT_SCRATCH_OR_FAIL(a, n * n + n * k);
  double* x = a + n * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, X->sizes, nb, idx);
    mat_load(A, mat_boff(A, 2, idx, nb), n, n, false, a, upper);
    mat_load(B, mat_boff(B, 2, idx, nb), n, k, false, x, false);
    tpurt_linalg_tri_solve(a, n, true, false, false, x, k);
    tpurt_linalg_tri_solve(a, n, true, true, false, x, k);
    mat_store(X, mat_boff(X, 2, idx, nb), n, k, false, x, false);
  }
  return TPURT_OK;
}
