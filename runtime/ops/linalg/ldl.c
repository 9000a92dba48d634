/* Symmetric indefinite factorization: linalg_ldl_factor_ex (A = L D L^T with
 * Bunch-Kaufman pivoting, LAPACK sytf2 on the lower triangle, so LD, the
 * 1-based pivots (negative for a 2x2 block) and info match PyTorch CPU) and
 * linalg_ldl_solve (LAPACK sytrs); complex inputs as zsytf2 / zsytrs, or
 * zhetf2 / zhetrs (A = L D L^H) with hermitian=True (ldl_impl.h holds the one
 * algorithm for both element types). Every matrix is copied into a double (or
 * complex double) row-major scratch, worked there and written back through
 * the outputs' strides (matrix.h); batch dims broadcast. From 16 x 16 LAPACK's
 * sytrf / hetrf and sytrs / hetrs do the work (below). Each op's reference is
 * the kernel itself. */
#include <math.h>
#include <string.h>

#include "ops/linalg/lapack.h"
#include "ops/linalg/matrix.h"

/* offset of batch b (row-major over shape[0..nb)) in t, whose leading ndim - mat dims broadcast */
static int64_t boff(const tpurt_tensor_t* t, int mat, int64_t b, const int64_t* shape, int nb) {
  int tb = t->ndim - mat;
  int64_t off = 0;
  for (int d = nb - 1; d >= 0; --d) {
    int64_t i = shape[d] ? b % shape[d] : 0;
    b = shape[d] ? b / shape[d] : 0;
    int td = d - (nb - tb);
    if (td >= 0 && t->sizes[td] != 1) off += i * t->strides[td];
  }
  return off;
}

/* LAPACK's sytrf / hetrf (what PyTorch CPU calls: the blocked form of sytf2, the same pivoting) and
 * sytrs / hetrs from LAPACK_MIN_LDL, on column-major copies of the lower triangle (row-major a's
 * lower triangle is column-major's upper, so it is transposed in and out). False where they do
 * not run (small, non-finite, past 32-bit sizes, no memory): the loops below then do. The loops
 * took 5.8 ms for a 256 x 256 float64 ldl_factor against CPU's 0.9. */
#define LDL_LAPACK(SUF, T, NREAL, SYTRF, HETRF, SYTRS, HETRS)                                                  \
  static bool lapack_ldl_factor_##SUF(T* a, int64_t n, int64_t* piv, bool herm, int64_t* info_out) {           \
    if (n < LAPACK_MIN_LDL || n > 46000 || !lapack_finite((const double*)a, NREAL * n * n)) return false;      \
    const int ni = (int)n, lq = -1;                                                                            \
    int info = 0;                                                                                              \
    T wq = 0;                                                                                                  \
    T* ac = malloc(sizeof(T) * (size_t)(n * n) + sizeof(int) * (size_t)n);                                     \
    if (!ac) return false;                                                                                     \
    int* ip = (int*)(ac + n * n);                                                                              \
    for (int64_t i = 0; i < n; ++i)                                                                            \
      for (int64_t j = 0; j < n; ++j) ac[j * n + i] = j <= i ? a[i * n + j] : 0;                               \
    const int threads = lapack_begin();                                                                        \
    (herm ? HETRF : SYTRF)("L", &ni, ac, &ni, ip, &wq, &lq, &info, 1);                                         \
    const int lwork = lapack_lwork(info, creal(wq));                                                           \
    T* work = lwork ? malloc(sizeof(T) * (size_t)lwork) : NULL;                                                \
    if (work) (herm ? HETRF : SYTRF)("L", &ni, ac, &ni, ip, work, &lwork, &info, 1);                           \
    lapack_end(threads);                                                                                       \
    const bool ok = work && info >= 0;                                                                         \
    if (ok) {                                                                                                  \
      for (int64_t i = 0; i < n; ++i)                                                                          \
        for (int64_t j = 0; j < n; ++j) a[i * n + j] = j <= i ? ac[j * n + i] : 0;                             \
      for (int64_t i = 0; i < n; ++i) piv[i] = ip[i];                                                          \
      *info_out = info;                                                                                        \
    }                                                                                                          \
    free(work);                                                                                                \
    free(ac);                                                                                                  \
    return ok;                                                                                                 \
  }                                                                                                            \
  static bool lapack_ldl_solve_##SUF(const T* a, int64_t n, const int64_t* piv, T* b, int64_t r, bool herm) {  \
    if (n < LAPACK_MIN_LDL || r < 1 || n * (n + r) > INT32_MAX / 2) return false;                              \
    T* ac = malloc(sizeof(T) * (size_t)(n * n + n * r) + sizeof(int) * (size_t)n);                             \
    if (!ac) return false;                                                                                     \
    T* bc = ac + n * n;                                                                                        \
    int* ip = (int*)(bc + n * r);                                                                              \
    for (int64_t i = 0; i < n; ++i)                                                                            \
      for (int64_t j = 0; j < n; ++j) ac[j * n + i] = a[i * n + j];                                            \
    for (int64_t i = 0; i < n; ++i)                                                                            \
      for (int64_t j = 0; j < r; ++j) bc[j * n + i] = b[i * r + j];                                            \
    for (int64_t i = 0; i < n; ++i) ip[i] = (int)piv[i];                                                       \
    const int ni = (int)n, ri = (int)r;                                                                        \
    int info = 0;                                                                                              \
    const int threads = lapack_begin();                                                                        \
    (herm ? HETRS : SYTRS)("L", &ni, &ri, ac, &ni, ip, bc, &ni, &info, 1);                                     \
    lapack_end(threads);                                                                                       \
    for (int64_t i = 0; i < n && info == 0; ++i)                                                               \
      for (int64_t j = 0; j < r; ++j) b[i * r + j] = bc[j * n + i];                                            \
    free(ac);                                                                                                  \
    return info == 0;                                                                                          \
  }
LDL_LAPACK(d, double, 1, dsytrf_, dsytrf_, dsytrs_, dsytrs_)
LDL_LAPACK(z, zd_t, 2, zsytrf_, zhetrf_, zsytrs_, zhetrs_)
#undef LDL_LAPACK

#define LDL_T double
#define LDL_SUF d
#define LDL_ABS1 fabs
#define LDL_ABS fabs
#define LDL_RE(x) (x)
#define LDL_CONJ(x) (x)
#define LDL_LD mat_ld
#define LDL_ST mat_st
#include "ops/linalg/ldl_impl.h"

static inline double ldl_cabs1(zd_t z) {
  return fabs(creal(z)) + fabs(cimag(z));
}
#define LDL_T zd_t
#define LDL_SUF z
#define LDL_ABS1 ldl_cabs1
#define LDL_ABS cabs
#define LDL_RE creal
#define LDL_CONJ conj
#define LDL_LD mat_zld
#define LDL_ST mat_zst
#include "ops/linalg/ldl_impl.h"

static bool ldl_dtype_ok(const tpurt_tensor_t* t) {
  return mat_is_real(t) || mat_is_complex(t);
}

/* linalg_ldl_factor_ex(self, *, hermitian, check_errors) -> (LD, pivots, info) */
tpurt_status_t tpurt_linalg_ldl_factor(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = tpurt_arg_tensor(call, 0);
  if (!A || call->num_outputs < 3)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (self) and 3 outputs", call->name);
  const tpurt_tensor_t *LD = &call->outputs[0], *P = &call->outputs[1], *Info = &call->outputs[2];
  if (A->ndim < 2 || A->sizes[A->ndim - 1] != A->sizes[A->ndim - 2])
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: A must be batches of square matrices", call->name);
  if (!ldl_dtype_ok(A) || !ldl_dtype_ok(LD))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for %s", call->name, tpurt_dtype_name(A->dtype));
  const bool cplx = mat_is_complex(A), herm = cplx && tpurt_arg_bool(call, 1, false);
  int64_t n = A->sizes[A->ndim - 1];
  int nb = A->ndim - 2;
  int64_t batches = 1;
  for (int d = 0; d < nb; ++d) batches *= A->sizes[d];
  zd_t* az = tpurt_kernel_scratch(ctx, (size_t)(n * n + 1) * sizeof(zd_t) + (size_t)(n + 1) * sizeof(int64_t));
  if (!az) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", call->name);
  double* a = (double*)az; /* the real case uses the first half */
  int64_t* piv = (int64_t*)(az + n * n + 1);
  for (int64_t b = 0; b < batches; ++b) {
    int64_t oa = boff(A, 2, b, A->sizes, nb), ol = boff(LD, 2, b, A->sizes, nb);
    int64_t info = cplx ? ldl_factor_at_z(A, oa, LD, ol, az, n, piv, herm) : ldl_factor_at_d(A, oa, LD, ol, a, n, piv, false);
    int64_t op = boff(P, 1, b, A->sizes, nb);
    for (int64_t i = 0; i < n; ++i) mat_set_int(P, op + i * P->strides[P->ndim - 1], piv[i]);
    if (tpurt_tensor_numel(Info) == batches) mat_set_int(Info, boff(Info, 0, b, A->sizes, nb), info);
  }
  return TPURT_OK;
}

/* linalg_ldl_solve(LD, pivots, B, *, hermitian) -> X */
tpurt_status_t tpurt_linalg_ldl_solve(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *LD = NULL, *P = NULL, *B = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &LD));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 1, -1, &P));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 2, -1, &B));
  if (call->num_outputs < 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing output", call->name);
  const tpurt_tensor_t* X = &call->outputs[0];
  if (LD->ndim < 2 || B->ndim < 2 || P->ndim < 1 || X->ndim < 2)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: LD and B need >= 2 dims, pivots >= 1", call->name);
  if (!ldl_dtype_ok(LD) || !ldl_dtype_ok(B) || !ldl_dtype_ok(X))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for %s", call->name, tpurt_dtype_name(B->dtype));
  if (P->dtype != TPURT_DTYPE_INT32 && P->dtype != TPURT_DTYPE_INT64)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: pivots must be int32", call->name);
  int64_t n = LD->sizes[LD->ndim - 1], r = X->sizes[X->ndim - 1];
  if (LD->sizes[LD->ndim - 2] != n || B->sizes[B->ndim - 2] != n || P->sizes[P->ndim - 1] != n ||
      X->sizes[X->ndim - 2] != n || B->sizes[B->ndim - 1] != r)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: LD must be n x n, pivots n and B n x k", call->name);
  int nb = X->ndim - 2;
  int64_t batches = 1;
  for (int d = 0; d < nb; ++d) batches *= X->sizes[d];
  const bool cplx = mat_is_complex(X), herm = cplx && tpurt_arg_bool(call, 3, false);
  zd_t* az = tpurt_kernel_scratch(ctx, (size_t)(n * n + n * r + 1) * sizeof(zd_t) + (size_t)(n + 1) * sizeof(int64_t));
  if (!az) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", call->name);
  zd_t* bz = az + n * n;
  double *a = (double*)az, *b = a + n * n; /* the real case */
  int64_t* piv = (int64_t*)(bz + n * r + 1);
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t ol = boff(LD, 2, bi, X->sizes, nb), op = boff(P, 1, bi, X->sizes, nb);
    int64_t ob = boff(B, 2, bi, X->sizes, nb), ox = boff(X, 2, bi, X->sizes, nb);
    for (int64_t i = 0; i < n; ++i) {
      int64_t p = mat_get_int(P, op + i * P->strides[P->ndim - 1]);
      if (p == 0 || p > n || p < -n)
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: pivot %lld out of range for n = %lld", call->name, (long long)p,
                            (long long)n);
      piv[i] = p;
    }
    if (cplx) ldl_solve_at_z(LD, ol, B, ob, X, ox, az, bz, n, r, piv, herm);
    else ldl_solve_at_d(LD, ol, B, ob, X, ox, a, b, n, r, piv, false);
  }
  return TPURT_OK;
}
