/* Householder QR, LAPACK's conventions (geqrf's vectors and dlarfg's sign): geqrf, linalg_qr,
 * linalg_householder_product, ormqr. float32/float64, through the double scratch of matrix.h. All four
 * call LAPACK (dgeqrf / dorgqr / dormqr; the loops below walked columns of a row-major matrix: 0.95 s
 * for a 512 x 512 qr against PyTorch CPU's 13 ms); the loops remain for small matrices, one with a
 * non-finite entry (their NaN propagation), and as the C tests' reference. */
#include "ops/linalg/lapack.h"
#include "ops/linalg/matrix.h"

/* In-place QR of m x n row-major a: R on and above the diagonal, the vectors v
 * (v[0] = 1 implied) below it, tau[k] for k < min(m, n). */
static void geqrf(double* a, int64_t m, int64_t n, double* tau) {
  int64_t kk = m < n ? m : n;
  for (int64_t k = 0; k < kk; ++k) {
    double alpha = a[k * n + k], xn = 0.0;
    for (int64_t i = k + 1; i < m; ++i) xn = hypot(xn, a[i * n + k]);
    if (xn == 0.0) {
      tau[k] = 0.0;
      continue;
    }
    double beta = -copysign(hypot(alpha, xn), alpha);
    tau[k] = (beta - alpha) / beta;
    double scale = 1.0 / (alpha - beta);
    for (int64_t i = k + 1; i < m; ++i) a[i * n + k] *= scale;
    a[k * n + k] = beta;
    /* apply H = I - tau v v^T to columns k+1.. */
    for (int64_t j = k + 1; j < n; ++j) {
      double s = a[k * n + j];
      for (int64_t i = k + 1; i < m; ++i) s += a[i * n + k] * a[i * n + j];
      s *= tau[k];
      a[k * n + j] -= s;
      for (int64_t i = k + 1; i < m; ++i) a[i * n + j] -= s * a[i * n + k];
    }
  }
}

/* c (m x nc row-major) = H_k ... applied: Q C (trans = false) or Q^T C, with Q = H_0 H_1 ... H_{k-1}
 * from the m x nv reflector matrix v (row-major, vectors below the diagonal). */
static void apply_q_left(const double* v, int64_t m, int64_t nv, const double* tau, int64_t k,
                         double* c, int64_t nc, bool trans) {
  for (int64_t t = 0; t < k; ++t) {
    int64_t h = trans ? t : k - 1 - t; /* Q C applies H_{k-1} first */
    if (tau[h] == 0.0) continue;
    for (int64_t j = 0; j < nc; ++j) {
      double s = c[h * nc + j];
      for (int64_t i = h + 1; i < m; ++i) s += v[i * nv + h] * c[i * nc + j];
      s *= tau[h];
      c[h * nc + j] -= s;
      for (int64_t i = h + 1; i < m; ++i) c[i * nc + j] -= s * v[i * nv + h];
    }
  }
}

/* geqrf(A) -> (a, tau) */
tpurt_status_t tpurt_linalg_geqrf(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 2));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, A));
  MAT_BATCH_OF(A, 2);
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1], k = m < n ? m : n;
  MAT_SCRATCH_OR_FAIL(a, m * n + k);
  double* tau = a + m * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    const bool sized = lapack_qr_sized(k); /* LAPACK's path reads a column-major copy */
    if (sized) mat_load(A, mat_boff(A, 2, idx, nb), m, n, false, a, true);
    if (sized && lapack_qr_d(a, m, n, tau, NULL, 0)) {
      mat_store(&call->outputs[0], mat_boff(&call->outputs[0], 2, idx, nb), m, n, false, a, true);
    } else {
      mat_load(A, mat_boff(A, 2, idx, nb), m, n, false, a, false);
      geqrf(a, m, n, tau);
      mat_store(&call->outputs[0], mat_boff(&call->outputs[0], 2, idx, nb), m, n, false, a, false);
    }
    const tpurt_tensor_t* T = &call->outputs[1];
    for (int64_t i = 0; i < k; ++i) mat_st(T, mat_boff(T, 1, idx, nb) + i * T->strides[T->ndim - 1], tau[i]);
  }
  return TPURT_OK;
}

/* linalg_qr(A, mode) -> (Q, R); mode "reduced" | "complete" | "r" (Q empty) */
tpurt_status_t tpurt_linalg_qr(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 2));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, A));
  const char* mode = tpurt_arg_string(call, 1, "reduced");
  bool complete = strcmp(mode, "complete") == 0, want_q = strcmp(mode, "r") != 0;
  if (!complete && want_q && strcmp(mode, "reduced") != 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: mode must be reduced, complete or r, got %s", call->name, mode);
  MAT_BATCH_OF(A, 2);
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1], k = m < n ? m : n;
  int64_t qc = complete ? m : k, rr = complete ? m : k;
  MAT_SCRATCH_OR_FAIL(a, m * n + k + m * (m > n ? m : n) + rr * n);
  double* tau = a + m * n;
  double* q = tau + k;
  double* r = q + m * (m > n ? m : n);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    const bool sized = lapack_qr_sized(k); /* LAPACK's path reads a column-major copy */
    if (sized) mat_load(A, mat_boff(A, 2, idx, nb), m, n, false, a, true);
    if (sized && lapack_qr_d(a, m, n, tau, want_q ? q : NULL, qc)) {
      for (int64_t i = 0; i < rr; ++i)
        for (int64_t j = 0; j < n; ++j) r[i * n + j] = (j >= i && i < m) ? a[j * m + i] : 0.0;
      mat_store(&call->outputs[1], mat_boff(&call->outputs[1], 2, idx, nb), rr, n, false, r, false);
      if (want_q) mat_store(&call->outputs[0], mat_boff(&call->outputs[0], 2, idx, nb), m, qc, false, q, true);
      continue;
    }
    mat_load(A, mat_boff(A, 2, idx, nb), m, n, false, a, false);
    geqrf(a, m, n, tau);
    for (int64_t i = 0; i < rr; ++i)
      for (int64_t j = 0; j < n; ++j) r[i * n + j] = (j >= i && i < m) ? a[i * n + j] : 0.0;
    mat_store(&call->outputs[1], mat_boff(&call->outputs[1], 2, idx, nb), rr, n, false, r, false);
    if (want_q) {
      memset(q, 0, (size_t)(m * qc) * sizeof(double));
      for (int64_t i = 0; i < qc && i < m; ++i) q[i * qc + i] = 1.0;
      apply_q_left(a, m, n, tau, k, q, qc, false);
      mat_store(&call->outputs[0], mat_boff(&call->outputs[0], 2, idx, nb), m, qc, false, q, false);
    }
  }
  return TPURT_OK;
}

/* linalg_householder_product(V, tau) -> the first n columns of H_0 ... H_{k-1} */
tpurt_status_t tpurt_linalg_householder_product(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *V = NULL, *T = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &V));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 1, 1, &T));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 1));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, V));
  MAT_BATCH_OF(V, 2);
  int64_t m = V->sizes[nb], n = V->sizes[nb + 1], k = T->sizes[T->ndim - 1];
  if (k > n || n > m)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: needs m >= n >= k, got %lld, %lld, %lld", call->name,
                        (long long)m, (long long)n, (long long)k);
  MAT_SCRATCH_OR_FAIL(a, 2 * m * n + k);
  double* q = a + m * n;
  double* tau = q + m * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, V->sizes, nb, idx);
    for (int64_t i = 0; i < k; ++i) tau[i] = mat_ld(T, mat_boff(T, 1, idx, nb) + i * T->strides[T->ndim - 1]);
    const bool sized = lapack_qr_sized(n); /* LAPACK's path reads a column-major copy */
    if (sized) mat_load(V, mat_boff(V, 2, idx, nb), m, n, false, q, true);
    if (sized && lapack_orgqr_d(q, m, n, k, tau)) {
      mat_store(&call->outputs[0], mat_boff(&call->outputs[0], 2, idx, nb), m, n, false, q, true);
      continue;
    }
    mat_load(V, mat_boff(V, 2, idx, nb), m, n, false, a, false);
    memset(q, 0, (size_t)(m * n) * sizeof(double));
    for (int64_t i = 0; i < n; ++i) q[i * n + i] = 1.0;
    apply_q_left(a, m, n, tau, k, q, n, false);
    mat_store(&call->outputs[0], mat_boff(&call->outputs[0], 2, idx, nb), m, n, false, q, false);
  }
  return TPURT_OK;
}

/* ormqr(A, tau, C, left, transpose) -> op(Q) C (left) or C op(Q) */
tpurt_status_t tpurt_linalg_ormqr(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *V = NULL, *T = NULL, *C = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &V));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 1, 1, &T));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 2, 2, &C));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 1));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, V));
  bool left = tpurt_arg_bool(call, 3, true), trans = tpurt_arg_bool(call, 4, false);
  const tpurt_tensor_t* X = &call->outputs[0];
  MAT_BATCH_OF(X, 2);
  int64_t mv = V->sizes[V->ndim - 2], nv = V->sizes[V->ndim - 1], k = T->sizes[T->ndim - 1];
  int64_t r = X->sizes[nb], c = X->sizes[nb + 1];
  int64_t qm = left ? r : c; /* Q is qm x qm */
  if (mv != qm || k > qm)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: reflectors (%lld rows, %lld of them) do not fit C",
                        call->name, (long long)mv, (long long)k);
  MAT_SCRATCH_OR_FAIL(a, mv * nv + r * c + k);
  double* x = a + mv * nv;
  double* tau = x + r * c;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, X->sizes, nb, idx);
    for (int64_t i = 0; i < k; ++i) tau[i] = mat_ld(T, mat_boff(T, 1, idx, nb) + i * T->strides[T->ndim - 1]);
    const bool sized = lapack_qr_sized(mv); /* LAPACK's path reads column-major copies */
    if (sized) {
      mat_load(V, mat_boff(V, 2, idx, nb), mv, nv, false, a, true);
      mat_load(C, mat_boff(C, 2, idx, nb), r, c, false, x, true);
    }
    if (sized && lapack_ormqr_d(a, mv, nv, k, tau, x, r, c, left, trans)) {
      mat_store(X, mat_boff(X, 2, idx, nb), r, c, false, x, true);
      continue;
    }
    mat_load(V, mat_boff(V, 2, idx, nb), mv, nv, false, a, false);
    /* right: C op(Q) = (op(Q)^T C^T)^T */
    mat_load(C, mat_boff(C, 2, idx, nb), r, c, false, x, !left);
    apply_q_left(a, mv, nv, tau, k, x, left ? c : r, left ? trans : !trans);
    mat_store(X, mat_boff(X, 2, idx, nb), r, c, false, x, !left);
  }
  return TPURT_OK;
}
