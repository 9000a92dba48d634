/* Symmetric eigendecomposition (_linalg_eigh): eigenvalues ascending, eigenvectors as columns.
 * float32/float64, through the double scratch of matrix.h, by LAPACK's dsyevd (divide and conquer,
 * as PyTorch CPU's syevd); a matrix with a non-finite entry, or one dsyevd does not converge on, by
 * cyclic Jacobi rotations (its NaN results). Jacobi alone took 9 s for a 256 x 256 matrix (PyTorch
 * CPU 4 ms) and 128 s for 512 x 512. */
#include "ops/linalg/lapack.h"
#include "ops/linalg/matrix.h"

/* dsyevd on the symmetric n x n a (row-major = column-major): w ascending, v row-major with the
 * eigenvectors as columns (LAPACK leaves them as a's columns, column-major: v = a^T). False where
 * it cannot run (non-finite entries, no workspace, no convergence); a is then unchanged. */
static bool lapack_eigh_run(double* a, int64_t n, double* w, double* v, bool want_v) {
  const int ni = (int)n, lq = -1;
  int info = 0, iq = 0;
  double wq = 0;
  const char* jobz = want_v ? "V" : "N";
  dsyevd_(jobz, "L", &ni, a, &ni, w, &wq, &lq, &iq, &lq, &info, 1, 1);
  if (info != 0) return false;
  if (!(wq < INT32_MAX / 2)) return false; /* the workspace's size must fit LAPACK's 32-bit integers */
  const int lwork = (int)wq, liwork = iq;
  /* a's copy (kept for the fallback), then the workspaces */
  double* copy = malloc(sizeof(double) * (size_t)(n * n + (lwork > 1 ? lwork : 1)) + sizeof(int) * (size_t)(liwork > 1 ? liwork : 1));
  if (!copy) return false;
  double* work = copy + n * n;
  int* iwork = (int*)(work + (lwork > 1 ? lwork : 1));
  memcpy(copy, a, sizeof(double) * (size_t)(n * n));
  dsyevd_(jobz, "L", &ni, a, &ni, w, work, &lwork, iwork, &liwork, &info, 1, 1);
  if (info == 0 && want_v)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) v[i * n + j] = a[j * n + i];
  if (info != 0) memcpy(a, copy, sizeof(double) * (size_t)(n * n));
  free(copy);
  return info == 0;
}

static bool lapack_eigh(double* a, int64_t n, double* w, double* v, bool want_v) {
  if (n < LAPACK_MIN_EIGH || n > 46000 || !lapack_finite(a, n * n)) return false; /* n^2 fits 32-bit integers */
  const int threads = lapack_begin();
  const bool ok = lapack_eigh_run(a, n, w, v, want_v);
  lapack_end(threads);
  return ok;
}

/* Eigen-decomposition of the symmetric n x n a (destroyed): w ascending, v's
 * columns the eigenvectors (row-major n x n). */
static void jacobi_eigh(double* a, int64_t n, double* w, double* v, double* tmp) {
  for (int64_t i = 0; i < n * n; ++i) v[i] = 0.0;
  for (int64_t i = 0; i < n; ++i) v[i * n + i] = 1.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0.0, diag = 0.0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) *(i == j ? &diag : &off) += a[i * n + j] * a[i * n + j];
    if (off <= 1e-32 * diag || off == 0.0) break;
    for (int64_t p = 0; p < n - 1; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        double apq = a[p * n + q];
        if (apq == 0.0) continue;
        double theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
        double t = copysign(1.0, theta) / (fabs(theta) + sqrt(theta * theta + 1.0));
        double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
        for (int64_t k = 0; k < n; ++k) { /* A <- A J (columns p, q) */
          double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) { /* A <- J^T A (rows p, q) */
          double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
        for (int64_t k = 0; k < n; ++k) {
          double vkp = v[k * n + p], vkq = v[k * n + q];
          v[k * n + p] = c * vkp - s * vkq;
          v[k * n + q] = s * vkp + c * vkq;
        }
      }
  }
  /* sort ascending (selection sort; n is small) */
  for (int64_t i = 0; i < n; ++i) w[i] = a[i * n + i];
  for (int64_t i = 0; i < n; ++i) {
    int64_t mi = i;
    for (int64_t j = i + 1; j < n; ++j)
      if (w[j] < w[mi]) mi = j;
    if (mi != i) {
      double t = w[i];
      w[i] = w[mi];
      w[mi] = t;
      for (int64_t k = 0; k < n; ++k) {
        t = v[k * n + i];
        v[k * n + i] = v[k * n + mi];
        v[k * n + mi] = t;
      }
    }
  }
  (void)tmp;
}

/* _linalg_eigh(A, UPLO, compute_v) -> (w, V) */
tpurt_status_t tpurt_linalg_eigh(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 2));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, A));
  bool upper = tpurt_arg_string(call, 1, "L")[0] == 'U' || tpurt_arg_string(call, 1, "L")[0] == 'u';
  bool want_v = tpurt_arg_bool(call, 2, true);
  MAT_BATCH_OF(A, 2);
  int64_t n = A->sizes[nb];
  MAT_SCRATCH_OR_FAIL(a, 2 * n * n + n);
  double* v = a + n * n;
  double* w = v + n * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    mat_load(A, mat_boff(A, 2, idx, nb), n, n, false, a, upper); /* lower triangle of a is the input's */
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j) a[i * n + j] = a[j * n + i];
    if (!lapack_eigh(a, n, w, v, want_v)) jacobi_eigh(a, n, w, v, NULL);
    const tpurt_tensor_t* W = &call->outputs[0];
    for (int64_t i = 0; i < n; ++i) mat_st(W, mat_boff(W, 1, idx, nb) + i * W->strides[W->ndim - 1], w[i]);
    if (want_v && tpurt_tensor_numel(&call->outputs[1]))
      mat_store(&call->outputs[1], mat_boff(&call->outputs[1], 2, idx, nb), n, n, false, v, false);
  }
  return TPURT_OK;
}
