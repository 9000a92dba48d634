/* Symmetric indefinite factorization: linalg_ldl_factor_ex (A = L D L^T with
 * Bunch-Kaufman pivoting, LAPACK sytf2 on the lower triangle, so LD, the
 * 1-based pivots (negative for a 2x2 block) and info match PyTorch CPU) and
 * linalg_ldl_solve (LAPACK sytrs). Real float32/float64; every matrix is
 * copied into a double row-major scratch, worked there and written back
 * through the outputs' strides (matrix.h); batch dims broadcast. Plain
 * scalar loops: each op's reference is the kernel itself. */
#include <math.h>
#include <string.h>

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

#define A_(i, j) a[(i) * n + (j)] /* 0-based, row-major */

static int64_t iamax(const double* x, int64_t count, int64_t stride) {
  int64_t best = 0;
  double bv = -1;
  for (int64_t i = 0; i < count; ++i)
    if (fabs(x[i * stride]) > bv) bv = fabs(x[i * stride]), best = i;
  return best;
}

/* LAPACK dsytf2, uplo = 'L', on the n x n row-major a (lower triangle used); piv 1-based. Returns info. */
static int64_t sytf2_lower(double* a, int64_t n, int64_t* piv) {
  const double alpha = (1.0 + sqrt(17.0)) / 8.0;
  int64_t info = 0;
  for (int64_t k = 0; k < n;) {
    int64_t kstep = 1, kp = k, imax = k;
    double absakk = fabs(A_(k, k)), colmax = 0;
    if (k < n - 1) {
      imax = k + 1 + iamax(&A_(k + 1, k), n - k - 1, n);
      colmax = fabs(A_(imax, k));
    }
    if (fmax(absakk, colmax) == 0 || isnan(absakk)) {
      if (!info) info = k + 1;
      kp = k;
    } else {
      if (absakk >= alpha * colmax) {
        kp = k;
      } else {
        int64_t jmax = k + iamax(&A_(imax, k), imax - k, 1); /* row imax, columns k .. imax - 1 */
        double rowmax = fabs(A_(imax, jmax));
        if (imax < n - 1) {
          jmax = imax + 1 + iamax(&A_(imax + 1, imax), n - imax - 1, n);
          rowmax = fmax(rowmax, fabs(A_(jmax, imax)));
        }
        if (absakk >= alpha * colmax * (colmax / rowmax)) kp = k;
        else if (fabs(A_(imax, imax)) >= alpha * rowmax) kp = imax;
        else kp = imax, kstep = 2;
      }
      int64_t kk = k + kstep - 1;
      if (kp != kk) { /* swap rows and columns kk and kp of the trailing lower triangle */
        for (int64_t i = kp + 1; i < n; ++i) {
          double t = A_(i, kk);
          A_(i, kk) = A_(i, kp), A_(i, kp) = t;
        }
        for (int64_t j = kk + 1; j < kp; ++j) {
          double t = A_(j, kk);
          A_(j, kk) = A_(kp, j), A_(kp, j) = t;
        }
        double t = A_(kk, kk);
        A_(kk, kk) = A_(kp, kp), A_(kp, kp) = t;
        if (kstep == 2) {
          t = A_(k + 1, k);
          A_(k + 1, k) = A_(kp, k), A_(kp, k) = t;
        }
      }
      if (kstep == 1) {
        if (k < n - 1) {
          double d11 = 1.0 / A_(k, k);
          for (int64_t j = k + 1; j < n; ++j) /* dsyr: A -= d11 x x^T on the lower triangle */
            for (int64_t i = j; i < n; ++i) A_(i, j) -= d11 * A_(i, k) * A_(j, k);
          for (int64_t i = k + 1; i < n; ++i) A_(i, k) *= d11;
        }
      } else if (k < n - 2) {
        double d21 = A_(k + 1, k), d11 = A_(k + 1, k + 1) / d21, d22 = A_(k, k) / d21;
        double t = 1.0 / (d11 * d22 - 1.0);
        d21 = t / d21;
        for (int64_t j = k + 2; j < n; ++j) {
          double wk = d21 * (d11 * A_(j, k) - A_(j, k + 1));
          double wkp1 = d21 * (d22 * A_(j, k + 1) - A_(j, k));
          for (int64_t i = j; i < n; ++i) A_(i, j) -= A_(i, k) * wk + A_(i, k + 1) * wkp1;
          A_(j, k) = wk, A_(j, k + 1) = wkp1;
        }
      }
    }
    if (kstep == 1) piv[k] = kp + 1;
    else piv[k] = piv[k + 1] = -(kp + 1);
    k += kstep;
  }
  return info;
}

/* LAPACK dsytrs, uplo = 'L': solves with the factor in a (n x n row-major) for b (n x r row-major) */
static void sytrs_lower(const double* a, int64_t n, const int64_t* piv, double* b, int64_t r) {
#define B_(i, j) b[(i) * r + (j)]
#define SWAP_ROWS(p, q)                                                  \
  do {                                                                   \
    if ((p) != (q))                                                      \
      for (int64_t j_ = 0; j_ < r; ++j_) {                               \
        double t_ = B_(p, j_);                                           \
        B_(p, j_) = B_(q, j_), B_(q, j_) = t_;                           \
      }                                                                  \
  } while (0)
  for (int64_t k = 0; k < n;) { /* L D y = b */
    if (piv[k] > 0) {
      SWAP_ROWS(k, piv[k] - 1);
      for (int64_t i = k + 1; i < n; ++i)
        for (int64_t j = 0; j < r; ++j) B_(i, j) -= A_(i, k) * B_(k, j);
      for (int64_t j = 0; j < r; ++j) B_(k, j) /= A_(k, k);
      k += 1;
    } else {
      SWAP_ROWS(k + 1, -piv[k] - 1);
      for (int64_t i = k + 2; i < n; ++i)
        for (int64_t j = 0; j < r; ++j) B_(i, j) -= A_(i, k) * B_(k, j) + A_(i, k + 1) * B_(k + 1, j);
      double akm1k = A_(k + 1, k), akm1 = A_(k, k) / akm1k, ak = A_(k + 1, k + 1) / akm1k;
      double denom = akm1 * ak - 1.0;
      for (int64_t j = 0; j < r; ++j) {
        double bkm1 = B_(k, j) / akm1k, bk = B_(k + 1, j) / akm1k;
        B_(k, j) = (ak * bkm1 - bk) / denom;
        B_(k + 1, j) = (akm1 * bk - bkm1) / denom;
      }
      k += 2;
    }
  }
  for (int64_t k = n - 1; k >= 0;) { /* L^T x = y */
    if (piv[k] > 0) {
      for (int64_t j = 0; j < r; ++j)
        for (int64_t i = k + 1; i < n; ++i) B_(k, j) -= A_(i, k) * B_(i, j);
      SWAP_ROWS(k, piv[k] - 1);
      k -= 1;
    } else {
      for (int64_t j = 0; j < r; ++j)
        for (int64_t i = k + 1; i < n; ++i) {
          B_(k, j) -= A_(i, k) * B_(i, j);
          B_(k - 1, j) -= A_(i, k - 1) * B_(i, j);
        }
      SWAP_ROWS(k, -piv[k] - 1);
      k -= 2;
    }
  }
#undef SWAP_ROWS
#undef B_
}
#undef A_

/* linalg_ldl_factor_ex(self, *, hermitian, check_errors) -> (LD, pivots, info) */
tpurt_status_t tpurt_linalg_ldl_factor(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = tpurt_arg_tensor(call, 0);
  if (!A || call->num_outputs < 3)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (self) and 3 outputs", call->name);
  const tpurt_tensor_t *LD = &call->outputs[0], *P = &call->outputs[1], *I = &call->outputs[2];
  if (A->ndim < 2 || A->sizes[A->ndim - 1] != A->sizes[A->ndim - 2])
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: A must be batches of square matrices", call->name);
  if (!mat_is_real(A)) return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for %s", call->name, tpurt_dtype_name(A->dtype));
  int64_t n = A->sizes[A->ndim - 1];
  int nb = A->ndim - 2;
  int64_t batches = 1;
  for (int d = 0; d < nb; ++d) batches *= A->sizes[d];
  double* a = tpurt_kernel_scratch(ctx, (size_t)(n * n + 1) * sizeof(double) + (size_t)(n + 1) * sizeof(int64_t));
  if (!a) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", call->name);
  int64_t* piv = (int64_t*)(a + n * n + 1);
  int64_t ar = A->strides[nb], ac = A->strides[nb + 1], lr = LD->strides[nb], lc = LD->strides[nb + 1];
  for (int64_t b = 0; b < batches; ++b) {
    int64_t oa = boff(A, 2, b, A->sizes, nb), ol = boff(LD, 2, b, A->sizes, nb);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) a[i * n + j] = j <= i ? mat_ld(A, oa + i * ar + j * ac) : 0;
    int64_t info = sytf2_lower(a, n, piv);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) mat_st(LD, ol + i * lr + j * lc, j <= i ? a[i * n + j] : 0);
    int64_t op = boff(P, 1, b, A->sizes, nb);
    for (int64_t i = 0; i < n; ++i) mat_set_int(P, op + i * P->strides[P->ndim - 1], piv[i]);
    if (tpurt_tensor_numel(I) == batches) mat_set_int(I, boff(I, 0, b, A->sizes, nb), info);
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
  if (!mat_is_real(LD) || !mat_is_real(B))
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
  double* a = tpurt_kernel_scratch(ctx, (size_t)(n * n + n * r + 1) * sizeof(double) + (size_t)(n + 1) * sizeof(int64_t));
  if (!a) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", call->name);
  double* b = a + n * n;
  int64_t* piv = (int64_t*)(b + n * r + 1);
  int lnb = LD->ndim - 2;
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t ol = boff(LD, 2, bi, X->sizes, nb), op = boff(P, 1, bi, X->sizes, nb);
    int64_t ob = boff(B, 2, bi, X->sizes, nb), ox = boff(X, 2, bi, X->sizes, nb);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        a[i * n + j] = mat_ld(LD, ol + i * LD->strides[lnb] + j * LD->strides[lnb + 1]);
    for (int64_t i = 0; i < n; ++i) {
      int64_t p = mat_get_int(P, op + i * P->strides[P->ndim - 1]);
      if (p == 0 || p > n || p < -n)
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: pivot %lld out of range for n = %lld", call->name, (long long)p,
                            (long long)n);
      piv[i] = p;
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < r; ++j) b[i * r + j] = mat_ld(B, ob + i * B->strides[B->ndim - 2] + j * B->strides[B->ndim - 1]);
    sytrs_lower(a, n, piv, b, r);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < r; ++j) mat_st(X, ox + i * X->strides[nb] + j * X->strides[nb + 1], b[i * r + j]);
  }
  return TPURT_OK;
}
