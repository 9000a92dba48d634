/* Dense linear algebra for small matrices (the LAPACK-shaped ATen ops): LU with
 * partial pivoting (factor, solve, inverse, det, slogdet, unpack), Cholesky
 * (factor, inverse, solve), triangular solves, Householder QR (geqrf, qr,
 * householder_product, ormqr), symmetric eigen (cyclic Jacobi) and SVD
 * (one-sided Jacobi). float32/float64; every matrix is copied into a double
 * row-major scratch, factored there, and written back through the outputs'
 * strides (ATen's meta gives LAPACK outputs column-major strides). Batch dims
 * broadcast. Conventions follow LAPACK (1-based int32 pivots, dlarfg's
 * Householder sign) so results match PyTorch CPU where they are unique. The
 * kernels are plain scalar loops, so each op's reference is the kernel itself. */
#include <math.h>
#include <string.h>

#include "ops/linalg/linalg.h"

/* ---- tensor access ---- */

static bool is_real(const tpurt_tensor_t* t) {
  return t->dtype == TPURT_DTYPE_FLOAT32 || t->dtype == TPURT_DTYPE_FLOAT64;
}

/* offset (elements) of batch index idx[0..nb) in t, whose leading ndim - mat dims broadcast
 * against the nb batch dims (trailing alignment, size-1 dims stride 0) */
static int64_t boff(const tpurt_tensor_t* t, int mat, const int64_t* idx, int nb) {
  int tb = t->ndim - mat;
  int64_t off = 0;
  for (int d = 0; d < tb; ++d) {
    int od = d + nb - tb;
    if (od >= 0 && t->sizes[d] != 1) off += idx[od] * t->strides[d];
  }
  return off;
}

static double ld(const tpurt_tensor_t* t, int64_t off) {
  return t->dtype == TPURT_DTYPE_FLOAT32 ? (double)((const float*)t->data)[off]
                                         : ((const double*)t->data)[off];
}
static void st(const tpurt_tensor_t* t, int64_t off, double v) {
  if (t->dtype == TPURT_DTYPE_FLOAT32) ((float*)t->data)[off] = (float)v;
  else ((double*)t->data)[off] = v;
}

/* r x c matrix at t+off (last two dims, or a vector as c = 1) into dst row-major;
 * trans loads the transpose (dst is c x r) */
static void load_mat(const tpurt_tensor_t* t, int64_t off, int64_t r, int64_t c, bool vec,
                     double* dst, bool trans) {
  int64_t rs = vec ? t->strides[t->ndim - 1] : t->strides[t->ndim - 2];
  int64_t cs = vec ? 0 : t->strides[t->ndim - 1];
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) {
      double v = ld(t, off + i * rs + j * cs);
      if (trans) dst[j * r + i] = v;
      else dst[i * c + j] = v;
    }
}
static void store_mat(const tpurt_tensor_t* t, int64_t off, int64_t r, int64_t c, bool vec,
                      const double* src, bool trans) {
  int64_t rs = vec ? t->strides[t->ndim - 1] : t->strides[t->ndim - 2];
  int64_t cs = vec ? 0 : t->strides[t->ndim - 1];
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j)
      st(t, off + i * rs + j * cs, trans ? src[j * r + i] : src[i * c + j]);
}

static void unravel(int64_t b, const int64_t* sizes, int nb, int64_t* idx) {
  for (int d = nb - 1; d >= 0; --d) {
    idx[d] = sizes[d] ? b % sizes[d] : 0;
    b = sizes[d] ? b / sizes[d] : 0;
  }
}
static int64_t prod(const int64_t* s, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= s[i];
  return p;
}

static bool arg_bool(const tpurt_op_call_t* c, int i, bool dflt) {
  if (i >= c->num_args) return dflt;
  if (c->args[i].kind == TPURT_ARG_BOOL) return c->args[i].v.b;
  if (c->args[i].kind == TPURT_ARG_INT) return c->args[i].v.i != 0;
  return dflt;
}
static const char* arg_str(const tpurt_op_call_t* c, int i, const char* dflt) {
  if (i < c->num_args && c->args[i].kind == TPURT_ARG_STRING) return c->args[i].v.s;
  return dflt;
}
static tpurt_status_t tensor_in(const tpurt_op_call_t* c, int i, int min_nd, const tpurt_tensor_t** t) {
  if (i >= c->num_args || c->args[i].kind != TPURT_ARG_TENSOR)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: argument %d must be a tensor", c->name, i);
  *t = c->args[i].v.tensor;
  if ((*t)->ndim < min_nd)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: argument %d must have at least %d dims, got %d",
                        c->name, i, min_nd, (int)(*t)->ndim);
  return TPURT_OK;
}
static tpurt_status_t need_outputs(const tpurt_op_call_t* c, int n) {
  if (c->num_outputs < n)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected %d outputs, got %d", c->name, n,
                        (int)c->num_outputs);
  return TPURT_OK;
}
static tpurt_status_t need_real(const tpurt_op_call_t* c, const tpurt_tensor_t* t) {
  if (!is_real(t))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for dtype %s (float32/float64 only)",
                        c->name, tpurt_dtype_name(t->dtype));
  return TPURT_OK;
}
static double* scratch(tpurt_kernel_ctx_t* ctx, int64_t n) {
  return tpurt_kernel_scratch(ctx, (size_t)(n > 0 ? n : 1) * sizeof(double));
}
#define SCRATCH_OR_FAIL(p, n)                                                             \
  double* p = scratch(ctx, (n));                                                          \
  if (!p) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch for %lld doubles", call->name, \
                              (long long)(n))

static void set_int(const tpurt_tensor_t* t, int64_t off, int64_t v) {
  tpurt_dtype_store_i64(t->dtype, (char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype), v);
}
static int64_t get_int(const tpurt_tensor_t* t, int64_t off) {
  return tpurt_dtype_load_i64(t->dtype, (const char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype));
}

/* ---- LU ---- */

#define LU_T double
#define LU_ABS fabs
#define LU_SUF d
#include "ops/linalg/lu_impl.h"

static void store_pivots(const tpurt_tensor_t* t, int64_t off, const int32_t* piv, int64_t k) {
  int64_t s = t->strides[t->ndim - 1];
  for (int64_t i = 0; i < k; ++i) set_int(t, off + i * s, piv[i]);
}
static void load_pivots(const tpurt_tensor_t* t, int64_t off, int32_t* piv, int64_t k) {
  int64_t s = t->strides[t->ndim - 1];
  for (int64_t i = 0; i < k; ++i) piv[i] = (int32_t)get_int(t, off + i * s);
}

static tpurt_status_t check_pivots(const tpurt_op_call_t* call, const int32_t* piv, int64_t k, int64_t m) {
  for (int64_t i = 0; i < k; ++i)
    if (piv[i] < 1 || piv[i] > m)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: pivot %lld is %d, outside [1, %lld]", call->name,
                          (long long)i, (int)piv[i], (long long)m);
  return TPURT_OK;
}

/* linalg_lu_factor_ex(A, pivot, check_errors) -> (LU, pivots, info) */
static tpurt_status_t k_lu_factor_ex(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(need_outputs(call, 3));
  TPURT_RETURN_IF_ERROR(need_real(call, A));
  if (!arg_bool(call, 1, true))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: LU without pivoting is not implemented", call->name);
  bool check = arg_bool(call, 2, false);
  const tpurt_tensor_t *LU = &call->outputs[0], *P = &call->outputs[1], *I = &call->outputs[2];
  int nb = A->ndim - 2;
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1], k = m < n ? m : n, batch = prod(A->sizes, nb);
  SCRATCH_OR_FAIL(a, m * n + k);
  int32_t* piv = (int32_t*)(a + m * n);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, A->sizes, nb, idx);
    load_mat(A, boff(A, 2, idx, nb), m, n, false, a, false);
    int info = lu_factor_d(a, m, n, piv, 0);
    store_mat(LU, boff(LU, 2, idx, nb), m, n, false, a, false);
    store_pivots(P, boff(P, 1, idx, nb), piv, k);
    set_int(I, boff(I, 0, idx, nb), info);
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
    store_mat(Pt, boff(Pt, 2, idx, nb), m, m, false, tmp, false);
  }
  if (Lt && tpurt_tensor_numel(Lt)) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j) tmp[i * k + j] = j < i ? a[i * n + j] : (i == j ? 1.0 : 0.0);
    store_mat(Lt, boff(Lt, 2, idx, nb), m, k, false, tmp, false);
  }
  if (Ut && tpurt_tensor_numel(Ut)) {
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j) tmp[i * n + j] = j >= i ? a[i * n + j] : 0.0;
    store_mat(Ut, boff(Ut, 2, idx, nb), k, n, false, tmp, false);
  }
}

/* linalg_lu(A, pivot) -> (P, L, U) */
static tpurt_status_t k_lu(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(need_outputs(call, 3));
  TPURT_RETURN_IF_ERROR(need_real(call, A));
  if (!arg_bool(call, 1, true))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: LU without pivoting is not implemented", call->name);
  int nb = A->ndim - 2;
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1], k = m < n ? m : n, batch = prod(A->sizes, nb);
  int64_t big = m > n ? m : n;
  SCRATCH_OR_FAIL(a, m * n + big * big + k + m);
  double* tmp = a + m * n;
  int32_t* piv = (int32_t*)(tmp + big * big);
  int64_t* perm = (int64_t*)(tmp + big * big + k);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, A->sizes, nb, idx);
    load_mat(A, boff(A, 2, idx, nb), m, n, false, a, false);
    lu_factor_d(a, m, n, piv, 0);
    store_unpacked(&call->outputs[0], &call->outputs[1], &call->outputs[2], idx, nb, a, piv, m, n, tmp, perm);
  }
  return TPURT_OK;
}

/* lu_unpack(LU, pivots, unpack_data, unpack_pivots) -> (P, L, U) */
static tpurt_status_t k_lu_unpack(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *A = NULL, *Pv = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(tensor_in(call, 1, 1, &Pv));
  TPURT_RETURN_IF_ERROR(need_outputs(call, 3));
  TPURT_RETURN_IF_ERROR(need_real(call, A));
  bool data = arg_bool(call, 2, true), pivots = arg_bool(call, 3, true);
  int nb = A->ndim - 2;
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1], k = m < n ? m : n, batch = prod(A->sizes, nb);
  int64_t big = m > n ? m : n;
  SCRATCH_OR_FAIL(a, m * n + big * big + k + m);
  double* tmp = a + m * n;
  int32_t* piv = (int32_t*)(tmp + big * big);
  int64_t* perm = (int64_t*)(tmp + big * big + k);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, A->sizes, nb, idx);
    load_mat(A, boff(A, 2, idx, nb), m, n, false, a, false);
    if (pivots) {
      load_pivots(Pv, boff(Pv, 1, idx, nb), piv, k);
      TPURT_RETURN_IF_ERROR(check_pivots(call, piv, k, m));
    }
    store_unpacked(pivots ? &call->outputs[0] : NULL, data ? &call->outputs[1] : NULL,
                   data ? &call->outputs[2] : NULL, idx, nb, a, piv, m, n, tmp, perm);
  }
  return TPURT_OK;
}

/* The batch shape of an op with one matrix output: that output's leading dims. */
#define BATCH_OF(T, MAT) int nb = (T)->ndim - (MAT); int64_t batch = prod((T)->sizes, nb)

/* linalg_lu_solve(LU, pivots, B, left, adjoint) -> X */
static tpurt_status_t k_lu_solve(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *LU = NULL, *Pv = NULL, *B = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &LU));
  TPURT_RETURN_IF_ERROR(tensor_in(call, 1, 1, &Pv));
  TPURT_RETURN_IF_ERROR(tensor_in(call, 2, 2, &B));
  TPURT_RETURN_IF_ERROR(need_outputs(call, 1));
  TPURT_RETURN_IF_ERROR(need_real(call, LU));
  bool left = arg_bool(call, 3, true), adjoint = arg_bool(call, 4, false);
  const tpurt_tensor_t* X = &call->outputs[0];
  BATCH_OF(X, 2);
  int64_t n = LU->sizes[LU->ndim - 1];
  int64_t r = X->sizes[nb], c = X->sizes[nb + 1];
  int64_t k = left ? c : r; /* right-hand sides */
  SCRATCH_OR_FAIL(a, n * n + n * k + n);
  double* x = a + n * n;
  int32_t* piv = (int32_t*)(x + n * k);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, X->sizes, nb, idx);
    load_mat(LU, boff(LU, 2, idx, nb), n, n, false, a, false);
    load_pivots(Pv, boff(Pv, 1, idx, nb), piv, n);
    TPURT_RETURN_IF_ERROR(check_pivots(call, piv, n, n));
    /* left: op(A) X = B. right: X op(A) = B <=> op(A)^T X^T = B^T */
    load_mat(B, boff(B, 2, idx, nb), r, c, false, x, !left);
    lu_solve_d(a, piv, n, x, k, left ? adjoint : !adjoint);
    store_mat(X, boff(X, 2, idx, nb), r, c, false, x, !left);
  }
  return TPURT_OK;
}

/* _linalg_solve_ex(A, B, left, check_errors) -> (result, LU, pivots, info). B may be a
 * (batch of) vector(s): result then has A's dims minus one. LU is of A (left) or A^T. */
static tpurt_status_t k_solve_ex(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *A = NULL, *B = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(tensor_in(call, 1, 1, &B));
  TPURT_RETURN_IF_ERROR(need_outputs(call, 4));
  TPURT_RETURN_IF_ERROR(need_real(call, A));
  bool left = arg_bool(call, 2, true), check = arg_bool(call, 3, false);
  const tpurt_tensor_t *X = &call->outputs[0], *LU = &call->outputs[1], *P = &call->outputs[2],
                       *I = &call->outputs[3];
  int64_t n = A->sizes[A->ndim - 1];
  bool vec = X->ndim == LU->ndim - 1; /* linalg_solve_is_vector_rhs */
  int nb = X->ndim - (vec ? 1 : 2);
  int64_t batch = prod(X->sizes, nb);
  int64_t r = vec ? n : X->sizes[nb], c = vec ? 1 : X->sizes[nb + 1];
  int64_t k = left ? c : r;
  SCRATCH_OR_FAIL(a, n * n + n * k + n);
  double* x = a + n * n;
  int32_t* piv = (int32_t*)(x + n * k);
  int64_t idx[TPURT_MAX_DIMS];
  int lu_nb = LU->ndim - 2;
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, X->sizes, nb, idx);
    load_mat(A, boff(A, 2, idx, nb), n, n, false, a, !left);
    int info = lu_factor_d(a, n, n, piv, 0);
    /* LU/pivots/info have A's batch shape (possibly smaller than the result's): write
     * them from the batch items they own */
    const int64_t* li = idx + (nb - lu_nb);
    store_mat(LU, boff(LU, 2, li, lu_nb), n, n, false, a, false);
    store_pivots(P, boff(P, 1, li, lu_nb), piv, n);
    set_int(I, boff(I, 0, li, lu_nb), info);
    if (info) {
      if (check)
        return TPURT_STATUS(INVALID_ARGUMENT,
                            "torch.linalg.solve: The solver failed because the input matrix is "
                            "singular.");
    }
    load_mat(B, boff(B, vec ? 1 : 2, idx, nb), r, c, vec, x, !left);
    lu_solve_d(a, piv, n, x, k, false);
    store_mat(X, boff(X, vec ? 1 : 2, idx, nb), r, c, vec, x, !left);
  }
  return TPURT_OK;
}

/* linalg_inv_ex(A, check_errors) -> (inverse, info) */
static tpurt_status_t k_inv_ex(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(need_outputs(call, 2));
  TPURT_RETURN_IF_ERROR(need_real(call, A));
  bool check = arg_bool(call, 1, false);
  const tpurt_tensor_t *X = &call->outputs[0], *I = &call->outputs[1];
  BATCH_OF(A, 2);
  int64_t n = A->sizes[nb];
  SCRATCH_OR_FAIL(a, 2 * n * n + n);
  double* x = a + n * n;
  int32_t* piv = (int32_t*)(x + n * n);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, A->sizes, nb, idx);
    load_mat(A, boff(A, 2, idx, nb), n, n, false, a, false);
    int info = lu_factor_d(a, n, n, piv, 0);
    set_int(I, boff(I, 0, idx, nb), info);
    if (info && check)
      return TPURT_STATUS(INVALID_ARGUMENT,
                          "linalg.inv: The diagonal element %d is zero, the inversion could not be "
                          "completed because the input matrix is singular.", info);
    memset(x, 0, (size_t)(n * n) * sizeof(double));
    for (int64_t i = 0; i < n; ++i) x[i * n + i] = 1.0;
    lu_solve_d(a, piv, n, x, n, false);
    store_mat(X, boff(X, 2, idx, nb), n, n, false, x, false);
  }
  return TPURT_OK;
}

/* _linalg_det(A) -> (det, LU, pivots); _linalg_slogdet(A) -> (sign, logabsdet, LU, pivots) */
static tpurt_status_t det_common(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool slog) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(need_outputs(call, slog ? 4 : 3));
  TPURT_RETURN_IF_ERROR(need_real(call, A));
  const tpurt_tensor_t* LU = &call->outputs[slog ? 2 : 1];
  const tpurt_tensor_t* P = &call->outputs[slog ? 3 : 2];
  BATCH_OF(A, 2);
  int64_t n = A->sizes[nb];
  SCRATCH_OR_FAIL(a, n * n + n);
  int32_t* piv = (int32_t*)(a + n * n);
  int64_t idx[TPURT_MAX_DIMS];
  /* As ATen does (and its backward expects): a row-major A is factored as A^T, whose
   * column-major layout is A's memory; det(A^T) = det(A). */
  bool tr = tpurt_tensor_is_contiguous(A);
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, A->sizes, nb, idx);
    load_mat(A, boff(A, 2, idx, nb), n, n, false, a, tr);
    lu_factor_d(a, n, n, piv, 0);
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
      st(&call->outputs[0], boff(&call->outputs[0], 0, idx, nb), sign);
      st(&call->outputs[1], boff(&call->outputs[1], 0, idx, nb), logabs);
    } else {
      st(&call->outputs[0], boff(&call->outputs[0], 0, idx, nb), det);
    }
    store_mat(LU, boff(LU, 2, idx, nb), n, n, false, a, false);
    store_pivots(P, boff(P, 1, idx, nb), piv, n);
  }
  return TPURT_OK;
}
static tpurt_status_t k_det(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return det_common(ctx, call, false);
}
static tpurt_status_t k_slogdet(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return det_common(ctx, call, true);
}

/* ---- Cholesky ---- */

/* In-place lower Cholesky of the n x n row-major a (reads the lower triangle,
 * zeroes the upper). Returns 0 or the 1-based order of the first non-positive minor. */
static int cholesky(double* a, int64_t n) {
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

/* linalg_cholesky_ex(A, upper, check_errors) -> (L, info); cholesky(A, upper) -> L */
static tpurt_status_t chol_common(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ex) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(need_outputs(call, ex ? 2 : 1));
  TPURT_RETURN_IF_ERROR(need_real(call, A));
  bool upper = arg_bool(call, 1, false), check = ex ? arg_bool(call, 2, false) : true;
  BATCH_OF(A, 2);
  int64_t n = A->sizes[nb];
  SCRATCH_OR_FAIL(a, n * n);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, A->sizes, nb, idx);
    /* upper reads the upper triangle: the lower triangle of A^T */
    load_mat(A, boff(A, 2, idx, nb), n, n, false, a, upper);
    int info = cholesky(a, n);
    if (ex) set_int(&call->outputs[1], boff(&call->outputs[1], 0, idx, nb), info);
    if (info) {
      if (check)
        return TPURT_STATUS(INVALID_ARGUMENT,
                            "linalg.cholesky: The factorization could not be completed because the "
                            "input is not positive-definite (the leading minor of order %d is not "
                            "positive-definite).", info);
    }
    store_mat(&call->outputs[0], boff(&call->outputs[0], 2, idx, nb), n, n, false, a, upper);
  }
  return TPURT_OK;
}
static tpurt_status_t k_cholesky_ex(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return chol_common(ctx, call, true);
}
static tpurt_status_t k_cholesky(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return chol_common(ctx, call, false);
}

/* Triangular solve in place: op(T) X = B, T n x n row-major (lower or upper,
 * unit diagonal optional), B n x k. trans solves T^T X = B. */
static void tri_solve(const double* t, int64_t n, bool lower, bool trans, bool unit, double* b, int64_t k) {
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

/* cholesky_inverse(L, upper) -> (L L^T)^-1 (or (U^T U)^-1) */
static tpurt_status_t k_cholesky_inverse(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(need_outputs(call, 1));
  TPURT_RETURN_IF_ERROR(need_real(call, A));
  bool upper = arg_bool(call, 1, false);
  BATCH_OF(A, 2);
  int64_t n = A->sizes[nb];
  SCRATCH_OR_FAIL(a, 2 * n * n);
  double* x = a + n * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, A->sizes, nb, idx);
    load_mat(A, boff(A, 2, idx, nb), n, n, false, a, upper); /* as lower L */
    memset(x, 0, (size_t)(n * n) * sizeof(double));
    for (int64_t i = 0; i < n; ++i) x[i * n + i] = 1.0;
    tri_solve(a, n, true, false, false, x, n); /* L Y = I */
    tri_solve(a, n, true, true, false, x, n);  /* L^T X = Y */
    store_mat(&call->outputs[0], boff(&call->outputs[0], 2, idx, nb), n, n, false, x, false);
  }
  return TPURT_OK;
}

/* _cholesky_solve_helper(B, L, upper) -> X with L L^T X = B (U^T U X = B) */
static tpurt_status_t k_cholesky_solve(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *B = NULL, *A = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &B));
  TPURT_RETURN_IF_ERROR(tensor_in(call, 1, 2, &A));
  TPURT_RETURN_IF_ERROR(need_outputs(call, 1));
  TPURT_RETURN_IF_ERROR(need_real(call, A));
  bool upper = arg_bool(call, 2, false);
  const tpurt_tensor_t* X = &call->outputs[0];
  BATCH_OF(X, 2);
  int64_t n = A->sizes[A->ndim - 1], k = X->sizes[nb + 1];
  SCRATCH_OR_FAIL(a, n * n + n * k);
  double* x = a + n * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, X->sizes, nb, idx);
    load_mat(A, boff(A, 2, idx, nb), n, n, false, a, upper);
    load_mat(B, boff(B, 2, idx, nb), n, k, false, x, false);
    tri_solve(a, n, true, false, false, x, k);
    tri_solve(a, n, true, true, false, x, k);
    store_mat(X, boff(X, 2, idx, nb), n, k, false, x, false);
  }
  return TPURT_OK;
}

/* linalg_solve_triangular(A, B, upper, left, unitriangular) -> X */
static tpurt_status_t k_solve_triangular(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *A = NULL, *B = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(tensor_in(call, 1, 2, &B));
  TPURT_RETURN_IF_ERROR(need_outputs(call, 1));
  TPURT_RETURN_IF_ERROR(need_real(call, A));
  bool upper = arg_bool(call, 2, false), left = arg_bool(call, 3, true), unit = arg_bool(call, 4, false);
  const tpurt_tensor_t* X = &call->outputs[0];
  BATCH_OF(X, 2);
  int64_t n = A->sizes[A->ndim - 1], r = X->sizes[nb], c = X->sizes[nb + 1], k = left ? c : r;
  SCRATCH_OR_FAIL(a, n * n + n * k);
  double* x = a + n * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, X->sizes, nb, idx);
    load_mat(A, boff(A, 2, idx, nb), n, n, false, a, false);
    load_mat(B, boff(B, 2, idx, nb), r, c, false, x, !left);
    /* right: X A = B <=> A^T X^T = B^T */
    tri_solve(a, n, !upper, !left, unit, x, k);
    store_mat(X, boff(X, 2, idx, nb), r, c, false, x, !left);
  }
  return TPURT_OK;
}

/* triangular_solve(b, A, upper, transpose, unitriangular) -> (X, copy of A) */
static tpurt_status_t k_triangular_solve(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *B = NULL, *A = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &B));
  TPURT_RETURN_IF_ERROR(tensor_in(call, 1, 2, &A));
  TPURT_RETURN_IF_ERROR(need_outputs(call, 2));
  TPURT_RETURN_IF_ERROR(need_real(call, A));
  bool upper = arg_bool(call, 2, true), trans = arg_bool(call, 3, false), unit = arg_bool(call, 4, false);
  const tpurt_tensor_t *X = &call->outputs[0], *M = &call->outputs[1];
  BATCH_OF(X, 2);
  int64_t n = A->sizes[A->ndim - 1], k = X->sizes[nb + 1];
  SCRATCH_OR_FAIL(a, n * n + n * k);
  double* x = a + n * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, X->sizes, nb, idx);
    load_mat(A, boff(A, 2, idx, nb), n, n, false, a, false);
    load_mat(B, boff(B, 2, idx, nb), n, k, false, x, false);
    tri_solve(a, n, !upper, trans, unit, x, k);
    store_mat(X, boff(X, 2, idx, nb), n, k, false, x, false);
    if (tpurt_tensor_numel(M)) store_mat(M, boff(M, 2, idx, nb), n, n, false, a, false);
  }
  return TPURT_OK;
}

/* ---- Householder QR (LAPACK geqrf conventions) ---- */

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
static tpurt_status_t k_geqrf(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(need_outputs(call, 2));
  TPURT_RETURN_IF_ERROR(need_real(call, A));
  BATCH_OF(A, 2);
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1], k = m < n ? m : n;
  SCRATCH_OR_FAIL(a, m * n + k);
  double* tau = a + m * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, A->sizes, nb, idx);
    load_mat(A, boff(A, 2, idx, nb), m, n, false, a, false);
    geqrf(a, m, n, tau);
    store_mat(&call->outputs[0], boff(&call->outputs[0], 2, idx, nb), m, n, false, a, false);
    const tpurt_tensor_t* T = &call->outputs[1];
    for (int64_t i = 0; i < k; ++i) st(T, boff(T, 1, idx, nb) + i * T->strides[T->ndim - 1], tau[i]);
  }
  return TPURT_OK;
}

/* linalg_qr(A, mode) -> (Q, R); mode "reduced" | "complete" | "r" (Q empty) */
static tpurt_status_t k_qr(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(need_outputs(call, 2));
  TPURT_RETURN_IF_ERROR(need_real(call, A));
  const char* mode = arg_str(call, 1, "reduced");
  bool complete = strcmp(mode, "complete") == 0, want_q = strcmp(mode, "r") != 0;
  if (!complete && want_q && strcmp(mode, "reduced") != 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: mode must be reduced, complete or r, got %s", call->name, mode);
  BATCH_OF(A, 2);
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1], k = m < n ? m : n;
  int64_t qc = complete ? m : k, rr = complete ? m : k;
  SCRATCH_OR_FAIL(a, m * n + k + m * (m > n ? m : n) + rr * n);
  double* tau = a + m * n;
  double* q = tau + k;
  double* r = q + m * (m > n ? m : n);
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, A->sizes, nb, idx);
    load_mat(A, boff(A, 2, idx, nb), m, n, false, a, false);
    geqrf(a, m, n, tau);
    for (int64_t i = 0; i < rr; ++i)
      for (int64_t j = 0; j < n; ++j) r[i * n + j] = (j >= i && i < m) ? a[i * n + j] : 0.0;
    store_mat(&call->outputs[1], boff(&call->outputs[1], 2, idx, nb), rr, n, false, r, false);
    if (want_q) {
      memset(q, 0, (size_t)(m * qc) * sizeof(double));
      for (int64_t i = 0; i < qc && i < m; ++i) q[i * qc + i] = 1.0;
      apply_q_left(a, m, n, tau, k, q, qc, false);
      store_mat(&call->outputs[0], boff(&call->outputs[0], 2, idx, nb), m, qc, false, q, false);
    }
  }
  return TPURT_OK;
}

/* linalg_householder_product(V, tau) -> the first n columns of H_0 ... H_{k-1} */
static tpurt_status_t k_householder_product(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *V = NULL, *T = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &V));
  TPURT_RETURN_IF_ERROR(tensor_in(call, 1, 1, &T));
  TPURT_RETURN_IF_ERROR(need_outputs(call, 1));
  TPURT_RETURN_IF_ERROR(need_real(call, V));
  BATCH_OF(V, 2);
  int64_t m = V->sizes[nb], n = V->sizes[nb + 1], k = T->sizes[T->ndim - 1];
  if (k > n || n > m)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: needs m >= n >= k, got %lld, %lld, %lld", call->name,
                        (long long)m, (long long)n, (long long)k);
  SCRATCH_OR_FAIL(a, 2 * m * n + k);
  double* q = a + m * n;
  double* tau = q + m * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, V->sizes, nb, idx);
    load_mat(V, boff(V, 2, idx, nb), m, n, false, a, false);
    for (int64_t i = 0; i < k; ++i) tau[i] = ld(T, boff(T, 1, idx, nb) + i * T->strides[T->ndim - 1]);
    memset(q, 0, (size_t)(m * n) * sizeof(double));
    for (int64_t i = 0; i < n; ++i) q[i * n + i] = 1.0;
    apply_q_left(a, m, n, tau, k, q, n, false);
    store_mat(&call->outputs[0], boff(&call->outputs[0], 2, idx, nb), m, n, false, q, false);
  }
  return TPURT_OK;
}

/* ormqr(A, tau, C, left, transpose) -> op(Q) C (left) or C op(Q) */
static tpurt_status_t k_ormqr(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *V = NULL, *T = NULL, *C = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &V));
  TPURT_RETURN_IF_ERROR(tensor_in(call, 1, 1, &T));
  TPURT_RETURN_IF_ERROR(tensor_in(call, 2, 2, &C));
  TPURT_RETURN_IF_ERROR(need_outputs(call, 1));
  TPURT_RETURN_IF_ERROR(need_real(call, V));
  bool left = arg_bool(call, 3, true), trans = arg_bool(call, 4, false);
  const tpurt_tensor_t* X = &call->outputs[0];
  BATCH_OF(X, 2);
  int64_t mv = V->sizes[V->ndim - 2], nv = V->sizes[V->ndim - 1], k = T->sizes[T->ndim - 1];
  int64_t r = X->sizes[nb], c = X->sizes[nb + 1];
  int64_t qm = left ? r : c; /* Q is qm x qm */
  if (mv != qm || k > qm)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: reflectors (%lld rows, %lld of them) do not fit C",
                        call->name, (long long)mv, (long long)k);
  SCRATCH_OR_FAIL(a, mv * nv + r * c + k);
  double* x = a + mv * nv;
  double* tau = x + r * c;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, X->sizes, nb, idx);
    load_mat(V, boff(V, 2, idx, nb), mv, nv, false, a, false);
    for (int64_t i = 0; i < k; ++i) tau[i] = ld(T, boff(T, 1, idx, nb) + i * T->strides[T->ndim - 1]);
    /* right: C op(Q) = (op(Q)^T C^T)^T */
    load_mat(C, boff(C, 2, idx, nb), r, c, false, x, !left);
    apply_q_left(a, mv, nv, tau, k, x, left ? c : r, left ? trans : !trans);
    store_mat(X, boff(X, 2, idx, nb), r, c, false, x, !left);
  }
  return TPURT_OK;
}

/* ---- symmetric eigen (cyclic Jacobi) and SVD (one-sided Jacobi) ---- */

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
static tpurt_status_t k_eigh(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(need_outputs(call, 2));
  TPURT_RETURN_IF_ERROR(need_real(call, A));
  bool upper = arg_str(call, 1, "L")[0] == 'U' || arg_str(call, 1, "L")[0] == 'u';
  bool want_v = arg_bool(call, 2, true);
  BATCH_OF(A, 2);
  int64_t n = A->sizes[nb];
  SCRATCH_OR_FAIL(a, 2 * n * n + n);
  double* v = a + n * n;
  double* w = v + n * n;
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, A->sizes, nb, idx);
    load_mat(A, boff(A, 2, idx, nb), n, n, false, a, upper); /* lower triangle of a is the input's */
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j) a[i * n + j] = a[j * n + i];
    jacobi_eigh(a, n, w, v, NULL);
    const tpurt_tensor_t* W = &call->outputs[0];
    for (int64_t i = 0; i < n; ++i) st(W, boff(W, 1, idx, nb) + i * W->strides[W->ndim - 1], w[i]);
    if (want_v && tpurt_tensor_numel(&call->outputs[1]))
      store_mat(&call->outputs[1], boff(&call->outputs[1], 2, idx, nb), n, n, false, v, false);
  }
  return TPURT_OK;
}

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

/* _linalg_svd(A, full_matrices, compute_uv, driver) -> (U, S, Vh) */
static tpurt_status_t k_svd(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* A = NULL;
  TPURT_RETURN_IF_ERROR(tensor_in(call, 0, 2, &A));
  TPURT_RETURN_IF_ERROR(need_outputs(call, 3));
  TPURT_RETURN_IF_ERROR(need_real(call, A));
  bool full = arg_bool(call, 1, false), uv = arg_bool(call, 2, true);
  BATCH_OF(A, 2);
  int64_t m = A->sizes[nb], n = A->sizes[nb + 1];
  bool tr = m < n; /* work on A^T so rows >= cols */
  int64_t R = tr ? n : m, C = tr ? m : n;
  /* a: R x C ; v: C x C ; s: C ; uf: R x R (full completion) ; ok flags */
  SCRATCH_OR_FAIL(a, R * C + C * C + C + R * R + R);
  double* v = a + R * C;
  double* s = v + C * C;
  double* uf = s + C;
  bool* ok = (bool*)(uf + R * R);
  const tpurt_tensor_t *U = &call->outputs[0], *S = &call->outputs[1], *Vh = &call->outputs[2];
  int64_t idx[TPURT_MAX_DIMS];
  for (int64_t b = 0; b < batch; ++b) {
    unravel(b, A->sizes, nb, idx);
    load_mat(A, boff(A, 2, idx, nb), m, n, false, a, tr);
    jacobi_svd(a, R, C, s, v, ok);
    for (int64_t i = 0; i < C; ++i) st(S, boff(S, 1, idx, nb) + i * S->strides[S->ndim - 1], s[i]);
    if (!uv || !tpurt_tensor_numel(U)) continue;
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
      store_mat(U, boff(U, 2, idx, nb), m, lc, false, left, false);
      store_mat(Vh, boff(Vh, 2, idx, nb), n, n, false, v, true);
    } else {
      store_mat(U, boff(U, 2, idx, nb), m, m, false, v, false);
      store_mat(Vh, boff(Vh, 2, idx, nb), lc, n, false, left, true);
    }
  }
  return TPURT_OK;
}

#define D(NAME, FN) {NAME, FN, FN, 0}

const tpurt_op_def_t tpurt_ops_dense[] = {
    D("linalg_lu_factor_ex", k_lu_factor_ex),
    D("linalg_lu", k_lu),
    D("lu_unpack", k_lu_unpack),
    D("linalg_lu_solve", k_lu_solve),
    D("_linalg_solve_ex", k_solve_ex),
    D("linalg_inv_ex", k_inv_ex),
    D("_linalg_det", k_det),
    D("_linalg_slogdet", k_slogdet),
    D("linalg_cholesky_ex", k_cholesky_ex),
    D("cholesky", k_cholesky),
    D("cholesky_inverse", k_cholesky_inverse),
    D("_cholesky_solve_helper", k_cholesky_solve),
    D("linalg_solve_triangular", k_solve_triangular),
    D("triangular_solve", k_triangular_solve),
    D("geqrf", k_geqrf),
    D("linalg_qr", k_qr),
    D("linalg_householder_product", k_householder_product),
    D("ormqr", k_ormqr),
    D("_linalg_eigh", k_eigh),
    D("_linalg_svd", k_svd),
    TPURT_OP_TABLE_END,
};
