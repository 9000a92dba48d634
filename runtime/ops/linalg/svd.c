/* Singular value decomposition (_linalg_svd). float32/float64 in double, by LAPACK's dgesdd (divide
 * and conquer, PyTorch CPU's default driver); a matrix with a non-finite entry, or one dgesdd does not
 * converge on, by one-sided Jacobi rotations through the double scratch of matrix.h (its NaN
 * results). Jacobi alone took 0.73 s for 256 x 256 (PyTorch CPU 11 ms) and 15.6 s for 512 x 512. */
#include "ops/linalg/lapack.h"
#include "ops/linalg/matrix.h"

/* Completes the first `have` orthonormal columns of the r x c row-major u (r >= c) to c
 * orthonormal columns by Gram-Schmidt against unit vectors. */
static void complete_basis(double* u, int64_t r, int64_t c, int64_t have, const bool* ok) {
  int64_t e = 0;
  for (int64_t j = 0; j < c; ++j) {
    if (ok ? ok[j] : j < have) continue;
    for (; e < r; ++e) {
      for (int64_t i = 0; i < r; ++i) u[i * c + j] = i == e ? 1.0 : 0.0;
      for (int pass = 0; pass < 2; ++pass)
        for (int64_t q = 0; q < c; ++q) {
          if (q == j || !(ok ? ok[q] : q < have)) continue;
          double d = 0.0;
          for (int64_t i = 0; i < r; ++i) d += u[i * c + q] * u[i * c + j];
          for (int64_t i = 0; i < r; ++i) u[i * c + j] -= d * u[i * c + q];
        }
      double nrm = 0.0;
      for (int64_t i = 0; i < r; ++i) nrm += u[i * c + j] * u[i * c + j];
      nrm = sqrt(nrm);
      if (nrm > 0.5) {
        for (int64_t i = 0; i < r; ++i) u[i * c + j] /= nrm;
        ++e;
        break;
      }
    }
    /* later columns see this one as done */
    if (ok) ((bool*)ok)[j] = true;
    else have = j + 1;
  }
}

/* One-sided Jacobi SVD of the m x n row-major a with m >= n: a becomes U (m x n, columns
 * orthonormal), s (descending), v (n x n, columns the right vectors). */
static void jacobi_svd(double* a, int64_t m, int64_t n, double* s, double* v, bool* ok) {
  for (int64_t i = 0; i < n * n; ++i) v[i] = 0.0;
  for (int64_t i = 0; i < n; ++i) v[i * n + i] = 1.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    bool rotated = false;
    for (int64_t p = 0; p < n - 1; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        double al = 0, be = 0, ga = 0;
        for (int64_t i = 0; i < m; ++i) {
          double x = a[i * n + p], y = a[i * n + q];
          al += x * x, be += y * y, ga += x * y;
        }
        if (ga == 0.0 || fabs(ga) <= 1e-15 * sqrt(al * be)) continue;
        rotated = true;
        double zeta = (be - al) / (2.0 * ga);
        double t = copysign(1.0, zeta) / (fabs(zeta) + sqrt(1.0 + zeta * zeta));
        double c = 1.0 / sqrt(1.0 + t * t), sn = c * t;
        for (int64_t i = 0; i < m; ++i) {
          double x = a[i * n + p], y = a[i * n + q];
          a[i * n + p] = c * x - sn * y;
          a[i * n + q] = sn * x + c * y;
        }
        for (int64_t i = 0; i < n; ++i) {
          double x = v[i * n + p], y = v[i * n + q];
          v[i * n + p] = c * x - sn * y;
          v[i * n + q] = sn * x + c * y;
        }
      }
    if (!rotated) break;
  }
  double smax = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    double nrm = 0.0;
    for (int64_t i = 0; i < m; ++i) nrm += a[i * n + j] * a[i * n + j];
    s[j] = sqrt(nrm);
    if (s[j] > smax) smax = s[j];
  }
  /* sort descending */
  for (int64_t i = 0; i < n; ++i) {
    int64_t mi = i;
    for (int64_t j = i + 1; j < n; ++j)
      if (s[j] > s[mi]) mi = j;
    if (mi != i) {
      double t = s[i];
      s[i] = s[mi];
      s[mi] = t;
      for (int64_t k = 0; k < m; ++k) {
        t = a[k * n + i];
        a[k * n + i] = a[k * n + mi];
        a[k * n + mi] = t;
      }
      for (int64_t k = 0; k < n; ++k) {
        t = v[k * n + i];
        v[k * n + i] = v[k * n + mi];
        v[k * n + mi] = t;
      }
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    ok[j] = s[j] > smax * 1e-300 && s[j] > 0.0;
    if (ok[j])
      for (int64_t i = 0; i < m; ++i) a[i * n + j] /= s[j];
  }
  complete_basis(a, m, n, 0, ok);
}

/* dgesdd on the row-major m x n a, taken as the column-major n x m A^T = U' S V'^T, so A = V' S U'^T:
 * LAPACK's V'^T (k x m column-major, k = min(m, n), or m x m when full) is U row-major, and its U'
 * (n x k, or n x n) is Vh row-major, with no transposes. u: m x (full ? m : k), vh: (full ? n : k) x n,
 * s: k. a is destroyed (the caller's copy; the fallback loads A again). False where it cannot run (too small
 * for it to pay, non-finite entries, no workspace, no convergence). */
static bool lapack_svd_run(double* a, int64_t m, int64_t n, bool full, bool uv, double* s, double* u, double* vh) {
  const int64_t k = m < n ? m : n;
  const char* jobz = !uv ? "N" : full ? "A" : "S";
  const int M = (int)n, N = (int)m, lda = (int)(n > 1 ? n : 1), ldu = (int)(n > 1 ? n : 1);
  const int ldvt = (int)(!uv ? 1 : full ? (m > 1 ? m : 1) : (k > 1 ? k : 1)), lq = -1;
  int info = 0;
  double wq = 0;
  dgesdd_(jobz, &M, &N, NULL, &lda, NULL, NULL, &ldu, NULL, &ldvt, &wq, &lq, NULL, &info, 1);
  if (info != 0) return false;
  if (!(wq < INT32_MAX / 2)) return false; /* the workspace's size must fit LAPACK's 32-bit integers */
  const int lwork = (int)wq > 1 ? (int)wq : 1;
  double* work = malloc(sizeof(double) * (size_t)lwork + sizeof(int) * (size_t)(8 * (k > 1 ? k : 1)));
  if (!work) return false;
  int* iwork = (int*)(work + lwork);
  double dummy = 0;
  dgesdd_(jobz, &M, &N, a, &lda, s, uv ? vh : &dummy, &ldu, uv ? u : &dummy, &ldvt, work, &lwork, iwork, &info, 1);
  free(work);
  return info == 0;
}

static bool lapack_svd(double* a_in, int64_t m, int64_t n, bool full, bool uv, double* s, double* u, double* vh) {
  const int64_t k = m < n ? m : n;
  if (k < LAPACK_MIN_SVD) return false; /* an empty matrix too: the Jacobi path's bases */
  if (m * n > INT32_MAX / 2 || (full && (m * m > INT32_MAX / 2 || n * n > INT32_MAX / 2))) return false;
  if (!lapack_finite(a_in, m * n)) return false;
  const int threads = lapack_begin();
  const bool ok = lapack_svd_run(a_in, m, n, full, uv, s, u, vh);
  lapack_end(threads);
  return ok;
}

/* _linalg_svd(A, full_matrices, compute_uv, driver) -> (U, S, Vh) */
tpurt_status_t tpurt_linalg_svd(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(mat_need_outputs(call, 3));
  TPURT_RETURN_IF_ERROR(mat_need_real(call, A));
  bool full = tpurt_arg_bool(call, 1, false), uv = tpurt_arg_bool(call, 2, true);
  MAT_BATCH_OF(A, 2);
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1];
  bool tr = m < n; /* work on A^T so rows >= cols */
  int64_t R = tr ? n : m, C = tr ? m : n;
  /* a: R x C ; v: C x C ; s: C ; uf: R x R (only for a full U of a non-square A) ; ok flags */
  int64_t UF = full && uv && R > C ? R * R : 0;
  MAT_SCRATCH_OR_FAIL(a, R * C + C * C + C + UF + R);
  double* v = a + R * C;
  double* s = v + C * C;
  double* uf = s + C;
  bool* ok = (bool*)(uf + UF);
  const tpurt_tensor_t *U = &call->outputs[0], *S = &call->outputs[1], *Vh = &call->outputs[2];
  int64_t idx[TPURT_MAX_DIMS];
  const int64_t k = C, uc = full ? m : k, vr = full ? n : k;
  double* lu = NULL; /* LAPACK's path: A row-major, then U (m x uc) and Vh (vr x n) */
  for (int64_t b = 0; b < batch; ++b) {
    mat_unravel(b, A->sizes, nb, idx);
    if (!lu) lu = malloc(sizeof(double) * (size_t)(m * n + (uv ? m * uc + vr * n : 0)));
    if (lu) {
      double *la = lu, *lu_u = lu + m * n, *lu_vh = lu_u + (uv ? m * uc : 0);
      mat_load(A, mat_boff(A, 2, idx, nb), m, n, false, la, false);
      if (lapack_svd(la, m, n, full, uv, s, lu_u, lu_vh)) {
        for (int64_t i = 0; i < k; ++i) mat_st(S, mat_boff(S, 1, idx, nb) + i * S->strides[S->ndim - 1], s[i]);
        if (uv && tpurt_tensor_numel(U)) {
          mat_store(U, mat_boff(U, 2, idx, nb), m, uc, false, lu_u, false);
          mat_store(Vh, mat_boff(Vh, 2, idx, nb), vr, n, false, lu_vh, false);
        }
        continue;
      }
    }
    mat_load(A, mat_boff(A, 2, idx, nb), m, n, false, a, tr);
    jacobi_svd(a, R, C, s, v, ok);
    for (int64_t i = 0; i < C; ++i) mat_st(S, mat_boff(S, 1, idx, nb) + i * S->strides[S->ndim - 1], s[i]);
    if (!uv || (!tpurt_tensor_numel(U) && !tpurt_tensor_numel(Vh))) continue;
    /* left vectors of the worked matrix: a (R x C), completed to R x R when full */
    double* left = a;
    int64_t lc = C;
    if (full && R > C) {
      for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < R; ++j) uf[i * R + j] = j < C ? a[i * C + j] : 0.0;
      complete_basis(uf, R, R, C, NULL);
      left = uf;
      lc = R;
    }
    /* A = left S v^T. Not transposed: U = left, Vh = v^T. Transposed (A^T = left S v^T):
     * U = v, Vh = left^T. */
    if (!tr) {
      mat_store(U, mat_boff(U, 2, idx, nb), m, lc, false, left, false);
      mat_store(Vh, mat_boff(Vh, 2, idx, nb), n, n, false, v, true);
    } else {
      mat_store(U, mat_boff(U, 2, idx, nb), m, m, false, v, false);
      mat_store(Vh, mat_boff(Vh, 2, idx, nb), lc, n, false, left, true);
    }
  }
  free(lu);
  return TPURT_OK;
}
