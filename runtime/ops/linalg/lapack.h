/* The LAPACK routines the dense linear algebra kernels call (eigh.c, svd.c, qr.c at every size; lu.c
 * and cholesky.c from 16 x 16; zfactor.c's eigh and svd): OpenBLAS's LAPACK (Debian's libopenblas
 * carries it, and the runtime links it for fp32 GEMM already), or MKL's where the process has it
 * (below). Fortran calling convention: arguments by address, 32-bit integers, a hidden length after
 * the arguments for each character argument. Internal. */
#ifndef TPURT_OPS_LINALG_LAPACK_H_
#define TPURT_OPS_LINALG_LAPACK_H_

#include <complex.h>
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w, double* work,
             const int* lwork, int* iwork, const int* liwork, int* info, size_t jobz_len, size_t uplo_len);
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s, double* u,
             const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork, int* iwork, int* info,
             size_t jobz_len);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work, const int* lwork,
             int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau, double* work,
             const int* lwork, int* info);
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void dgetrs_(const char* trans, const int* n, const int* nrhs, const double* a, const int* lda, const int* ipiv,
             double* b, const int* ldb, int* info, size_t trans_len);
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, size_t uplo_len);
void zpotrf_(const char* uplo, const int* n, double _Complex* a, const int* lda, int* info, size_t uplo_len);
/* Q C or C Q from geqrf's reflectors (householder_product is orgqr/ungqr, declared above) */
void dormqr_(const char* side, const char* trans, const int* m, const int* n, const int* k, const double* a,
             const int* lda, const double* tau, double* c, const int* ldc, double* work, const int* lwork, int* info,
             size_t side_len, size_t trans_len);
void zunmqr_(const char* side, const char* trans, const int* m, const int* n, const int* k, const double _Complex* a,
             const int* lda, const double _Complex* tau, double _Complex* c, const int* ldc, double _Complex* work,
             const int* lwork, int* info, size_t side_len, size_t trans_len);
/* double _Complex has COMPLEX*16's layout */
void zheevd_(const char* jobz, const char* uplo, const int* n, double _Complex* a, const int* lda, double* w,
             double _Complex* work, const int* lwork, double* rwork, const int* lrwork, int* iwork, const int* liwork,
             int* info, size_t jobz_len, size_t uplo_len);
void zgesdd_(const char* jobz, const int* m, const int* n, double _Complex* a, const int* lda, double* s,
             double _Complex* u, const int* ldu, double _Complex* vt, const int* ldvt, double _Complex* work,
             const int* lwork, double* rwork, int* iwork, int* info, size_t jobz_len);
/* eigenvalues and right eigenvectors of a general matrix, in the input's precision (as PyTorch CPU
 * calls them) */
void sgeev_(const char* jobvl, const char* jobvr, const int* n, float* a, const int* lda, float* wr, float* wi,
            float* vl, const int* ldvl, float* vr, const int* ldvr, float* work, const int* lwork, int* info,
            size_t jobvl_len, size_t jobvr_len);
void dgeev_(const char* jobvl, const char* jobvr, const int* n, double* a, const int* lda, double* wr, double* wi,
            double* vl, const int* ldvl, double* vr, const int* ldvr, double* work, const int* lwork, int* info,
            size_t jobvl_len, size_t jobvr_len);
void cgeev_(const char* jobvl, const char* jobvr, const int* n, float _Complex* a, const int* lda, float _Complex* w,
            float _Complex* vl, const int* ldvl, float _Complex* vr, const int* ldvr, float _Complex* work,
            const int* lwork, float* rwork, int* info, size_t jobvl_len, size_t jobvr_len);
void zgeev_(const char* jobvl, const char* jobvr, const int* n, double _Complex* a, const int* lda, double _Complex* w,
            double _Complex* vl, const int* ldvl, double _Complex* vr, const int* ldvr, double _Complex* work,
            const int* lwork, double* rwork, int* info, size_t jobvl_len, size_t jobvr_len);
/* BLAS's triangular solve with many right-hand sides */
void dtrsm_(const char* side, const char* uplo, const char* transa, const char* diag, const int* m, const int* n,
            const double* alpha, const double* a, const int* lda, double* b, const int* ldb, size_t side_len,
            size_t uplo_len, size_t transa_len, size_t diag_len);
void cgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const float _Complex* alpha,
            const float _Complex* a, const int* lda, const float _Complex* b, const int* ldb,
            const float _Complex* beta, float _Complex* c, const int* ldc, size_t transa_len, size_t transb_len);
void zgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const double _Complex* alpha,
            const double _Complex* a, const int* lda, const double _Complex* b, const int* ldb,
            const double _Complex* beta, double _Complex* c, const int* ldc, size_t transa_len, size_t transb_len);
void zgeqrf_(const int* m, const int* n, double _Complex* a, const int* lda, double _Complex* tau,
             double _Complex* work, const int* lwork, int* info);
void zungqr_(const int* m, const int* n, const int* k, double _Complex* a, const int* lda, const double _Complex* tau,
             double _Complex* work, const int* lwork, int* info);
void ztrsm_(const char* side, const char* uplo, const char* transa, const char* diag, const int* m, const int* n,
            const double _Complex* alpha, const double _Complex* a, const int* lda, double _Complex* b, const int* ldb,
            size_t side_len, size_t uplo_len, size_t transa_len, size_t diag_len);
void dsytrf_(const char* uplo, const int* n, double* a, const int* lda, int* ipiv, double* work, const int* lwork,
             int* info, size_t uplo_len);
void zsytrf_(const char* uplo, const int* n, double _Complex* a, const int* lda, int* ipiv, double _Complex* work,
             const int* lwork, int* info, size_t uplo_len);
void zhetrf_(const char* uplo, const int* n, double _Complex* a, const int* lda, int* ipiv, double _Complex* work,
             const int* lwork, int* info, size_t uplo_len);
void dsytrs_(const char* uplo, const int* n, const int* nrhs, const double* a, const int* lda, const int* ipiv,
             double* b, const int* ldb, int* info, size_t uplo_len);
void zsytrs_(const char* uplo, const int* n, const int* nrhs, const double _Complex* a, const int* lda,
             const int* ipiv, double _Complex* b, const int* ldb, int* info, size_t uplo_len);
void zhetrs_(const char* uplo, const int* n, const int* nrhs, const double _Complex* a, const int* lda,
             const int* ipiv, double _Complex* b, const int* ldb, int* info, size_t uplo_len);
void zgetrf_(const int* m, const int* n, double _Complex* a, const int* lda, int* ipiv, int* info);
void zgetrs_(const char* trans, const int* n, const int* nrhs, const double _Complex* a, const int* lda,
             const int* ipiv, double _Complex* b, const int* ldb, int* info, size_t trans_len);
void openblas_set_num_threads(int);

/* Below these sizes (the smaller side) the kernels' own loops are faster than a LAPACK call with its
 * workspace query and allocation, per matrix of a batch (4000 matrices, float64 and complex128,
 * microseconds a matrix, loops / LAPACK, 2026-12-07): eigh n = 3 1.75 / 2.8, n = 4 6.0 / 4.1; svd
 * n = 6 5.4 / 14.8, n = 12 29 / 24; qr n = 6 1.5 / 2.5, n = 12 4.3 / 3.8; complex svd n = 6 16.7 /
 * 18.1, n = 12 89 / 31; complex eigh as eigh. LU and Cholesky from 16 (their loops are row-major
 * and vectorize, level with LAPACK at 8). eig calls geev from 2 x 2, where it is
 * about a microsecond slower than the loops (2000 matrices, float64 n = 2, with eigenvectors / eigenvalues
 * only, loops 1.1 / 0.2 against 1.9 / 0.6; n = 4 4.1 / 1.9 against 2.8 / 2.0; n = 8 22.8 / 7.2 against
 * 8.5 / 5.8), so that eigenvectors of ties in modulus come out as PyTorch CPU's (a 3 x 3 permutation
 * matrix's, every component of modulus 3^-1/2: which is made real is decided by rounding). */
enum { LAPACK_MIN_EIG = 2, LAPACK_MIN_TRSM = 16, LAPACK_MIN_LDL = 16, LAPACK_MIN_EIGH = 4, LAPACK_MIN_SVD = 10, LAPACK_MIN_QR = 10, LAPACK_MIN_ZSVD = 8, LAPACK_MIN_LU = 16 };

/* Whether count doubles are all finite: LAPACK is given no NaN or infinity (the loops keep their
 * NaN results there). A complex matrix is twice its element count of doubles. */
static inline bool lapack_finite(const double* a, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    if (!isfinite(a[i])) return false;
  return true;
}

/* One thread for the library's own parallelism, around each call: the chip's threads run these
 * kernels, and the library's threads would spin beside them. Where the process has loaded MKL (PyTorch's
 * x86 wheels: libtorch_cpu exports MKL's LAPACK, and its symbols are found before OpenBLAS's), the
 * calls above reach MKL's routines, whose thread team then contended with the pool (a 512 x 512
 * geqrf took 189 ms against PyTorch CPU's 7.5); MKL_Set_Num_Threads_Local(1) keeps them on the
 * calling thread and is undone after. OpenBLAS's thread count is set to one once per process. */
typedef int (*lapack_mkl_local_fn)(int);
static lapack_mkl_local_fn g_lapack_mkl_local;
static void lapack_once(void) {
  openblas_set_num_threads(1);
  g_lapack_mkl_local = (lapack_mkl_local_fn)dlsym(RTLD_DEFAULT, "MKL_Set_Num_Threads_Local");
}
/* Before a LAPACK call: returns what lapack_end restores. */
static inline int lapack_begin(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, lapack_once);
  return g_lapack_mkl_local ? g_lapack_mkl_local(1) : 0;
}
static inline void lapack_end(int prev) {
  if (g_lapack_mkl_local) g_lapack_mkl_local(prev);
}

/* The workspace a query (lwork = -1) asked for, as the second call's lwork: at least 1, 0 where the
 * query failed or the size does not fit a 32-bit integer (the caller then does not run). */
static inline int lapack_lwork(int info, double queried) {
  return info == 0 && queried < INT32_MAX / 2 ? (int)fmax(1.0, queried) : 0;
}

/* Whether the LAPACK path of the triangular solves (n x n, k right-hand sides) and of the QR family
 * (geqrf / qr on min(m, n), householder_product / ormqr on the reflectors' length) is taken by size:
 * callers test it before preparing what only that path reads (column-major copies, conjugates). */
static inline bool lapack_trsm_sized(int64_t n, int64_t k) {
  return k >= 1 && n >= LAPACK_MIN_TRSM && n <= 46000 && k <= INT32_MAX / n;
}
static inline bool lapack_qr_sized(int64_t side) { return side >= LAPACK_MIN_QR; }

/* LU of the row-major m x n a (in place, 1-based pivots, *info) by getrf on a column-major copy,
 * and op(A) X = B (b n x k row-major, in place; trans: A^T) by getrs from it: lapack_lu_factor_d /
 * lapack_lu_solve_d (lu.c) and the _z pair (zfactor.c). False where they do not run (small,
 * non-finite, past 32-bit sizes, no memory): the caller's loops then do, with the same pivots. */
#define LAPACK_LU(SUF, T, NREAL, GETRF, GETRS)                                                                    \
  static inline bool lapack_lu_factor_##SUF(T* a, int64_t m, int64_t n, int32_t* piv, int* info) {               \
    if ((m < n ? m : n) < LAPACK_MIN_LU || m * n > INT32_MAX / 2 || !lapack_finite((const double*)a, NREAL * m * n)) \
      return false;                                                                                               \
    T* ac = malloc(sizeof(T) * (size_t)(m * n));                                                                  \
    if (!ac) return false;                                                                                        \
    for (int64_t i = 0; i < m; ++i)                                                                               \
      for (int64_t j = 0; j < n; ++j) ac[j * m + i] = a[i * n + j];                                               \
    const int M = (int)m, N = (int)n;                                                                             \
    const int threads = lapack_begin();                                                                           \
    GETRF(&M, &N, ac, &M, piv, info);                                                                             \
    lapack_end(threads);                                                                                          \
    for (int64_t i = 0; i < m; ++i)                                                                               \
      for (int64_t j = 0; j < n; ++j) a[i * n + j] = ac[j * m + i];                                               \
    free(ac);                                                                                                     \
    if (*info < 0) *info = 0;                                                                                     \
    return true;                                                                                                  \
  }                                                                                                               \
  static inline bool lapack_lu_solve_##SUF(const T* lu, const int32_t* piv, int64_t n, T* b, int64_t k, bool trans) { \
    if (n < LAPACK_MIN_LU || k < 1 || n * (n + k) > INT32_MAX / 2) return false;                                   \
    T* c = malloc(sizeof(T) * (size_t)(n * n + n * k));                                                           \
    if (!c) return false;                                                                                         \
    T* bc = c + n * n;                                                                                            \
    for (int64_t i = 0; i < n; ++i)                                                                               \
      for (int64_t j = 0; j < n; ++j) c[j * n + i] = lu[i * n + j];                                               \
    for (int64_t i = 0; i < n; ++i)                                                                               \
      for (int64_t j = 0; j < k; ++j) bc[j * n + i] = b[i * k + j];                                               \
    const int N = (int)n, K = (int)k;                                                                             \
    int info = 0;                                                                                                 \
    const int threads = lapack_begin();                                                                           \
    GETRS(trans ? "T" : "N", &N, &K, c, &N, piv, bc, &N, &info, 1);                                               \
    lapack_end(threads);                                                                                          \
    for (int64_t i = 0; i < n; ++i)                                                                               \
      for (int64_t j = 0; j < k; ++j) b[i * k + j] = bc[j * n + i];                                               \
    free(c);                                                                                                      \
    return true;                                                                                                  \
  }
LAPACK_LU(d, double, 1, dgetrf_, dgetrs_)
LAPACK_LU(z, double _Complex, 2, zgetrf_, zgetrs_)
#undef LAPACK_LU

/* op(T) X = B in place by trsm, T n x n and b n x k row-major: b read column-major is B^T (k x n)
 * and t is T^T, so it is solved as X^T op(T)^T = B^T from the right, with op(T)^T from t as "N"
 * (op(T) = T), "T" (T^T) or "C" (T^H, complex); lower says T's triangle. lapack_trsm_d
 * (triangular.c) and lapack_trsm_z (zfactor.c). False where it does not run (small, non-finite,
 * past 32-bit sizes): the caller's loops then do. */
#define LAPACK_TRSM(SUF, T, NREAL, TRSM)                                                                         \
  static inline bool lapack_trsm_##SUF(const T* t, int64_t n, bool lower, const char* op, bool unit, T* b,      \
                                       int64_t k) {                                                             \
    if (!lapack_trsm_sized(n, k) || !lapack_finite((const double*)t, NREAL * n * n) ||                          \
        !lapack_finite((const double*)b, NREAL * n * k))                                                        \
      return false;                                                                                             \
    const int ni = (int)n, ki = (int)k;                                                                         \
    const T one = 1;                                                                                            \
    const int threads = lapack_begin();                                                                         \
    TRSM("R", lower ? "U" : "L", op, unit ? "U" : "N", &ki, &ni, &one, t, &ni, b, &ki, 1, 1, 1, 1);             \
    lapack_end(threads);                                                                                        \
    return true;                                                                                                \
  }
LAPACK_TRSM(d, double, 1, dtrsm_)
LAPACK_TRSM(z, double _Complex, 2, ztrsm_)
#undef LAPACK_TRSM

/* Lower Cholesky of the row-major n x n a in place (it reads the lower triangle): that triangle is
 * the column-major upper one of A^T (= conj(A), A Hermitian), so potrf("U") factors the buffer as it
 * lies, A^T = U^H U, and U read row-major is L with A = L L^H. The upper triangle is zeroed, also
 * where a minor is not positive (potrf's partial factor below it). *info: 0 or the 1-based order of
 * the first minor that is not positive-definite. lapack_cholesky_d (cholesky.c) and _z (zfactor.c).
 * False where it does not run (small, non-finite, past 32-bit sizes): the caller's loops then do. */
#define LAPACK_POTRF(SUF, T, NREAL, POTRF)                                                                        \
  static inline bool lapack_cholesky_##SUF(T* a, int64_t n, int* info) {                                        \
    /* the whole matrix is checked; potrf reads one triangle, so a non-finite entry in the other only */        \
    /* sends the matrix to the loops, which ignore it too */                                                     \
    if (n < LAPACK_MIN_LU || n * n > INT32_MAX / 2 || !lapack_finite((const double*)a, NREAL * n * n)) return false; \
    const int N = (int)n;                                                                                         \
    const int threads = lapack_begin();                                                                           \
    POTRF("U", &N, a, &N, info, 1);                                                                               \
    lapack_end(threads);                                                                                          \
    for (int64_t i = 0; i < n; ++i)                                                                               \
      for (int64_t j = i + 1; j < n; ++j) a[i * n + j] = 0;                                                       \
    if (*info < 0) *info = 0;                                                                                     \
    return true;                                                                                                  \
  }
LAPACK_POTRF(d, double, 1, dpotrf_)
LAPACK_POTRF(z, double _Complex, 2, zpotrf_)
#undef LAPACK_POTRF

/* geqrf on the column-major m x n ac (lda m): R and the reflectors in place, tau[min(m, n)]; with q,
 * also the first qc columns of Q, column-major m x qc (orgqr / ungqr; min(m, n) <= qc <= m):
 * lapack_qr_d (qr.c) and lapack_qr_z (zfactor.c). False where it does not run (small, non-finite,
 * past 32-bit sizes, no workspace); ac is then unchanged. */
#define LAPACK_QR(SUF, T, NREAL, GEQRF, ORGQR)                                                                    \
  static inline bool lapack_qr_run_##SUF(T* ac, int64_t m, int64_t n, T* tau, T* q, int64_t qc) {                \
    const int64_t k = m < n ? m : n;                                                                              \
    const int M = (int)m, N = (int)n, K = (int)k, QC = (int)qc, lq = -1;                                          \
    int info = 0;                                                                                                 \
    T w1 = 0, w2 = 0;                                                                                             \
    GEQRF(&M, &N, ac, &M, tau, &w1, &lq, &info);                                                                  \
    if (info == 0 && q) ORGQR(&M, &QC, &K, q, &M, tau, &w2, &lq, &info);                                          \
    /* the workspace must fit 32-bit integers */                                                                  \
    const int lwork = lapack_lwork(info, fmax(creal(w1), creal(w2)));                                             \
    T* work = lwork ? malloc(sizeof(T) * (size_t)lwork) : NULL;                                                   \
    if (!work) return false;                                                                                      \
    GEQRF(&M, &N, ac, &M, tau, work, &lwork, &info);                                                              \
    if (info == 0 && q) {                                                                                         \
      /* the reflectors into Q's first columns (the columns past n, for a complete Q, any values) */             \
      memcpy(q, ac, sizeof(T) * (size_t)(m * (qc < n ? qc : n)));                                                 \
      ORGQR(&M, &QC, &K, q, &M, tau, work, &lwork, &info);                                                        \
    }                                                                                                             \
    free(work);                                                                                                   \
    return info == 0;                                                                                             \
  }                                                                                                               \
  static inline bool lapack_qr_##SUF(T* ac, int64_t m, int64_t n, T* tau, T* q, int64_t qc) {                    \
    const int64_t k = m < n ? m : n;                                                                              \
    if (!lapack_qr_sized(k) || m * n > INT32_MAX / 2 || (q && m * qc > INT32_MAX / 2)) return false;              \
    if (!lapack_finite((const double*)ac, NREAL * m * n)) return false;                                          \
    const int threads = lapack_begin();                                                                           \
    const bool ok = lapack_qr_run_##SUF(ac, m, n, tau, q, qc);                                                    \
    lapack_end(threads);                                                                                          \
    return ok;                                                                                                    \
  }
LAPACK_QR(d, double, 1, dgeqrf_, dorgqr_)
LAPACK_QR(z, double _Complex, 2, zgeqrf_, zungqr_)
#undef LAPACK_QR

/* householder_product and ormqr from given reflectors, as PyTorch CPU computes them (orgqr / ungqr,
 * ormqr / unmqr), on column-major copies. lapack_orgqr_SUF: q, the m x n reflector matrix
 * column-major (lda m), becomes the first n columns of H_0 ... H_{k-1} in place (m >= n >= k).
 * lapack_ormqr_SUF: x (r x c column-major, ld r) becomes op(Q) x (left) or x op(Q), Q from the k
 * reflectors in v's first columns (column-major, ld vm = r or c); op(Q) is Q^T (Q^H) where trans.
 * False where they do not run (small, non-finite, past 32-bit sizes, no workspace); the arrays are
 * then unchanged and the caller's loops run. qr.c and zfactor.c. */
#define LAPACK_HOUSEHOLDER(SUF, T, NREAL, ORGQR, ORMQR, TRANS)                                                    \
  static inline bool lapack_orgqr_##SUF(T* q, int64_t m, int64_t n, int64_t k, const T* tau) {                  \
    if (!lapack_qr_sized(n) || m * n > INT32_MAX / 2 || !lapack_finite((const double*)q, NREAL * m * n) ||        \
        !lapack_finite((const double*)tau, NREAL * k))                                                            \
      return false;                                                                                               \
    const int M = (int)m, N = (int)n, K = (int)k, lq = -1;                                                        \
    int info = 0;                                                                                                 \
    T w = 0;                                                                                                      \
    const int threads = lapack_begin();                                                                           \
    ORGQR(&M, &N, &K, q, &M, tau, &w, &lq, &info);                                                                \
    const int lwork = lapack_lwork(info, creal(w));                                                               \
    T* work = lwork ? malloc(sizeof(T) * (size_t)lwork) : NULL;                                                   \
    if (work) ORGQR(&M, &N, &K, q, &M, tau, work, &lwork, &info);                                                 \
    lapack_end(threads);                                                                                          \
    free(work);                                                                                                   \
    return work && info == 0;                                                                                     \
  }                                                                                                               \
  static inline bool lapack_ormqr_##SUF(const T* v, int64_t vm, int64_t vn, int64_t k, const T* tau, T* x,      \
                                        int64_t r, int64_t c, bool left, bool trans) {                           \
    if (!lapack_qr_sized(vm) || k < 1 || k > vn || r * c > INT32_MAX / 2 || vm * vn > INT32_MAX / 2 ||              \
        !lapack_finite((const double*)v, NREAL * vm * vn) || !lapack_finite((const double*)tau, NREAL * k) ||      \
        !lapack_finite((const double*)x, NREAL * r * c))                                                          \
      return false;                                                                                               \
    const int R = (int)r, C = (int)c, K = (int)k, VM = (int)vm, lq = -1;                                          \
    const char *side = left ? "L" : "R", *op = trans ? TRANS : "N";                                               \
    int info = 0;                                                                                                 \
    T w = 0;                                                                                                      \
    const int threads = lapack_begin();                                                                           \
    ORMQR(side, op, &R, &C, &K, v, &VM, tau, x, &R, &w, &lq, &info, 1, 1);                                        \
    const int lwork = lapack_lwork(info, creal(w));                                                               \
    T* work = lwork ? malloc(sizeof(T) * (size_t)lwork) : NULL;                                                   \
    if (work) ORMQR(side, op, &R, &C, &K, v, &VM, tau, x, &R, work, &lwork, &info, 1, 1);                         \
    lapack_end(threads);                                                                                          \
    free(work);                                                                                                   \
    return work && info == 0;                                                                                     \
  }
LAPACK_HOUSEHOLDER(d, double, 1, dorgqr_, dormqr_, "T")
LAPACK_HOUSEHOLDER(z, double _Complex, 2, zungqr_, zunmqr_, "C")
#undef LAPACK_HOUSEHOLDER

#endif /* TPURT_OPS_LINALG_LAPACK_H_ */
