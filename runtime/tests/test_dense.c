/* Dense linalg kernels (ops/linalg: lu.c, cholesky.c, triangular.c, qr.c,
 * eigh.c, svd.c) through the op table: each factorization is checked by
 * what defines it (P L U = A, A A^-1 = I,
 * L L^T = A, Q R = A with Q orthonormal, A V = V diag(w), U S Vh = A), on
 * float64 and float32, row- and column-major layouts and a batch; plus bad
 * pivots and unsupported dtypes returning a status; and past lapack.h's sizes, the real and
 * complex kernels that call LAPACK. */
#include <math.h>
#include <string.h>

#include "test_util.h"

static tpurt_tensor_t mat(tpurt_dtype_t dt, void* data, int nd, const int64_t* sizes, bool colmajor) {
  tpurt_tensor_t t;
  memset(&t, 0, sizeof(t));
  t.data = data;
  t.dtype = dt;
  t.ndim = nd;
  int64_t s = 1;
  for (int d = nd - 1; d >= 0; --d) t.sizes[d] = sizes[d];
  if (colmajor && nd >= 2) {
    t.strides[nd - 2] = 1;
    t.strides[nd - 1] = sizes[nd - 2];
    s = sizes[nd - 2] * sizes[nd - 1];
    for (int d = nd - 3; d >= 0; --d) t.strides[d] = s, s *= sizes[d];
  } else {
    for (int d = nd - 1; d >= 0; --d) t.strides[d] = s, s *= sizes[d];
  }
  return t;
}
static double at(const tpurt_tensor_t* t, int64_t b, int64_t i, int64_t j) {
  int nd = t->ndim;
  int64_t off = (nd > 2 ? b * t->strides[0] : 0) + i * t->strides[nd - 2] + j * t->strides[nd - 1];
  return tpurt_dtype_load_f64(t->dtype, (const char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype));
}
static double at1(const tpurt_tensor_t* t, int64_t b, int64_t i) {
  int nd = t->ndim;
  int64_t off = (nd > 1 ? b * t->strides[0] : 0) + i * t->strides[nd - 1];
  return tpurt_dtype_load_f64(t->dtype, (const char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype));
}

static tpurt_status_t call_op(const char* name, tpurt_arg_t* args, int nargs, tpurt_tensor_t* outs, int nout) {
  const tpurt_op_def_t* def = tpurt_op_lookup(name);
  if (!def) return TPURT_STATUS(NOT_FOUND, "no op %s", name);
  tpurt_op_call_t call = {.name = name, .overload = "", .num_args = nargs, .args = args,
                          .num_outputs = nout, .outputs = outs};
  return tpurt_kernel_run(def->fn, &call);
}
static tpurt_arg_t targ(const tpurt_tensor_t* t) { return (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .v.tensor = t}; }
static tpurt_arg_t barg(bool b) { return (tpurt_arg_t){.kind = TPURT_ARG_BOOL, .v.b = b}; }

enum { B = 2, N = 5 };

static void fill(tpurt_tensor_t* t, int64_t b, int64_t r, int64_t c, bool spd) {
  double tmp[N][N];
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) tmp[i][j] = 2.0 * test_rand_unit() - 1.0;
  int nd = t->ndim;
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) {
      double v = tmp[i][j];
      if (spd) { /* A^T A + n I */
        v = i == j ? (double)r : 0.0;
        for (int64_t k = 0; k < r; ++k) v += tmp[k][i] * tmp[k][j];
      }
      int64_t off = b * t->strides[0] + i * t->strides[nd - 2] + j * t->strides[nd - 1];
      tpurt_dtype_store_f64(t->dtype, (char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype), v);
    }
}

static void test_lu_inv_det(tpurt_dtype_t dt, bool colmajor) {
  double tol = dt == TPURT_DTYPE_FLOAT64 ? 1e-12 : 1e-4;
  size_t es = tpurt_dtype_size(dt);
  const int64_t s3[3] = {B, N, N}, s2[2] = {B, N}, s1[1] = {B};
  char *ma = malloc(B * N * N * es), *mlu = malloc(B * N * N * es), *minv = malloc(B * N * N * es);
  char *mp = malloc(B * N * N * es), *ml = malloc(B * N * N * es), *mu = malloc(B * N * N * es);
  int32_t piv[B * N], info[B], info2[B];
  char* mdet = malloc(B * es);
  tpurt_tensor_t A = mat(dt, ma, 3, s3, colmajor), LU = mat(dt, mlu, 3, s3, true);
  tpurt_tensor_t PV = mat(TPURT_DTYPE_INT32, piv, 2, s2, false), I = mat(TPURT_DTYPE_INT32, info, 1, s1, false);
  for (int b = 0; b < B; ++b) fill(&A, b, N, N, false);
  tpurt_arg_t args[3] = {targ(&A), barg(true), barg(false)};
  tpurt_tensor_t outs[3] = {LU, PV, I};
  CHECK_OK(call_op("linalg_lu_factor_ex", args, 3, outs, 3));
  CHECK(info[0] == 0 && info[1] == 0);
  /* P L U = A via linalg_lu */
  tpurt_tensor_t P = mat(dt, mp, 3, s3, false), L = mat(dt, ml, 3, s3, false), U = mat(dt, mu, 3, s3, false);
  tpurt_tensor_t plu[3] = {P, L, U};
  CHECK_OK(call_op("linalg_lu", args, 2, plu, 3));
  double worst = 0;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int k = 0; k < N; ++k)
          for (int q = 0; q < N; ++q) s += at(&P, b, i, k) * at(&L, b, k, q) * at(&U, b, q, j);
        worst = fmax(worst, fabs(s - at(&A, b, i, j)));
      }
  CHECK(worst < tol);
  /* A A^-1 = I */
  tpurt_tensor_t X = mat(dt, minv, 3, s3, true), I2 = mat(TPURT_DTYPE_INT32, info2, 1, s1, false);
  tpurt_tensor_t io[2] = {X, I2};
  CHECK_OK(call_op("linalg_inv_ex", args, 2, io, 2));
  worst = 0;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int k = 0; k < N; ++k) s += at(&A, b, i, k) * at(&X, b, k, j);
        worst = fmax(worst, fabs(s - (i == j)));
      }
  CHECK(worst < tol * 10);
  /* det = prod(diag U) * sign(P) */
  tpurt_tensor_t D = mat(dt, mdet, 1, s1, false);
  tpurt_tensor_t dout[3] = {D, LU, PV};
  CHECK_OK(call_op("_linalg_det", args, 1, dout, 3));
  for (int b = 0; b < B; ++b) {
    double d = 1;
    for (int i = 0; i < N; ++i) d *= at(&U, b, i, i);
    double sgn = 1; /* det(P) by counting the permutation's inversions */
    int perm[N];
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < N; ++j)
        if (at(&P, b, i, j) == 1.0) perm[i] = j;
    for (int i = 0; i < N; ++i)
      for (int j = i + 1; j < N; ++j)
        if (perm[i] > perm[j]) sgn = -sgn;
    CHECK(fabs(at1(&D, 0, b) - sgn * d) < tol * (1 + fabs(d)));
  }
  /* a pivot out of range is refused */
  piv[0] = 99;
  tpurt_arg_t sargs[3] = {targ(&LU), targ(&PV), targ(&A)};
  tpurt_tensor_t sout = mat(dt, minv, 3, s3, false);
  CHECK_STATUS(call_op("linalg_lu_solve", sargs, 3, &sout, 1), INVALID_ARGUMENT);
  free(ma), free(mlu), free(minv), free(mp), free(ml), free(mu), free(mdet);
}

static void test_chol_qr_eigh_svd(tpurt_dtype_t dt) {
  double tol = dt == TPURT_DTYPE_FLOAT64 ? 1e-11 : 1e-4;
  size_t es = tpurt_dtype_size(dt);
  const int64_t s3[3] = {B, N, N}, s2[2] = {B, N}, s1[1] = {B};
  char *ma = malloc(B * N * N * es), *m1 = malloc(B * N * N * es), *m2 = malloc(B * N * N * es);
  char* mv = malloc(B * N * es);
  int32_t info[B];
  tpurt_tensor_t A = mat(dt, ma, 3, s3, false);
  for (int b = 0; b < B; ++b) fill(&A, b, N, N, true);
  /* Cholesky: L L^T = A, L lower */
  tpurt_tensor_t L = mat(dt, m1, 3, s3, true), I = mat(TPURT_DTYPE_INT32, info, 1, s1, false);
  tpurt_arg_t args[3] = {targ(&A), barg(false), barg(false)};
  tpurt_tensor_t co[2] = {L, I};
  CHECK_OK(call_op("linalg_cholesky_ex", args, 3, co, 2));
  double worst = 0;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int k = 0; k < N; ++k) s += at(&L, b, i, k) * at(&L, b, j, k);
        worst = fmax(worst, fabs(s - at(&A, b, i, j)));
        if (j > i) worst = fmax(worst, fabs(at(&L, b, i, j)));
      }
  CHECK(worst < tol * N);
  /* QR: Q^T Q = I, Q R = A, R upper */
  tpurt_tensor_t Q = mat(dt, m1, 3, s3, true), R = mat(dt, m2, 3, s3, false);
  tpurt_arg_t qargs[2] = {targ(&A), {.kind = TPURT_ARG_STRING, .v.s = "reduced"}};
  tpurt_tensor_t qo[2] = {Q, R};
  CHECK_OK(call_op("linalg_qr", qargs, 2, qo, 2));
  worst = 0;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < N; ++j) {
        double s = 0, o = 0;
        for (int k = 0; k < N; ++k) s += at(&Q, b, i, k) * at(&R, b, k, j), o += at(&Q, b, k, i) * at(&Q, b, k, j);
        worst = fmax(worst, fmax(fabs(s - at(&A, b, i, j)), fabs(o - (i == j))));
        if (i > j) worst = fmax(worst, fabs(at(&R, b, i, j)));
      }
  CHECK(worst < tol * N);
  /* eigh: A v_k = w_k v_k, w ascending */
  tpurt_tensor_t W = mat(dt, mv, 2, s2, false), V = mat(dt, m1, 3, s3, true);
  tpurt_arg_t eargs[3] = {targ(&A), {.kind = TPURT_ARG_STRING, .v.s = "L"}, barg(true)};
  tpurt_tensor_t eo[2] = {W, V};
  CHECK_OK(call_op("_linalg_eigh", eargs, 3, eo, 2));
  worst = 0;
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < N; ++k) {
      if (k) CHECK(at1(&W, b, k - 1) <= at1(&W, b, k));
      for (int i = 0; i < N; ++i) {
        double s = 0;
        for (int j = 0; j < N; ++j) s += at(&A, b, i, j) * at(&V, b, j, k);
        worst = fmax(worst, fabs(s - at1(&W, b, k) * at(&V, b, i, k)));
      }
    }
  CHECK(worst < tol * N * N);
  /* SVD of a wide 3 x 5 slice: U S Vh = A, S descending */
  const int64_t w3[3] = {B, 3, N}, u3[3] = {B, 3, 3}, sv[2] = {B, 3};
  tpurt_tensor_t Aw = mat(dt, ma, 3, w3, false);
  for (int b = 0; b < B; ++b) fill(&Aw, b, 3, N, false);
  tpurt_tensor_t U = mat(dt, m1, 3, u3, true), S = mat(dt, mv, 2, sv, false), Vh = mat(dt, m2, 3, w3, true);
  tpurt_arg_t sargs[3] = {targ(&Aw), barg(false), barg(true)};
  tpurt_tensor_t so[3] = {U, S, Vh};
  CHECK_OK(call_op("_linalg_svd", sargs, 3, so, 3));
  worst = 0;
  for (int b = 0; b < B; ++b) {
    for (int k = 1; k < 3; ++k) CHECK(at1(&S, b, k - 1) >= at1(&S, b, k));
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int k = 0; k < 3; ++k) s += at(&U, b, i, k) * at1(&S, b, k) * at(&Vh, b, k, j);
        worst = fmax(worst, fabs(s - at(&Aw, b, i, j)));
      }
  }
  CHECK(worst < tol * N);
  /* a non-finite entry: LAPACK is not called (eigh.c, svd.c, qr.c); the loops answer NaN for that
   * matrix, and the batch's other matrices are still factored */
  for (int b = 0; b < B; ++b) fill(&A, b, N, N, true);
  double w1[N];
  CHECK_OK(call_op("_linalg_eigh", eargs, 3, eo, 2));
  for (int k = 0; k < N; ++k) w1[k] = at1(&W, 1, k);
  if (dt == TPURT_DTYPE_FLOAT64) ((double*)ma)[0] = NAN;
  else ((float*)ma)[0] = NAN;
  CHECK_OK(call_op("_linalg_eigh", eargs, 3, eo, 2));
  bool nan0 = false;
  for (int k = 0; k < N; ++k) {
    nan0 |= isnan(at1(&W, 0, k));
    CHECK(at1(&W, 1, k) == w1[k]);
  }
  CHECK(nan0);
  CHECK_OK(call_op("linalg_qr", qargs, 2, qo, 2));
  CHECK(isnan(at(&R, 0, 0, 0)) && !isnan(at(&R, 1, 0, 0)));
  const int64_t s3sq[3] = {B, N, N}, svq[2] = {B, N};
  tpurt_tensor_t Usq = mat(dt, m1, 3, s3sq, true), Ssq = mat(dt, mv, 2, svq, false), Vsq = mat(dt, m2, 3, s3sq, true);
  tpurt_tensor_t sqo[3] = {Usq, Ssq, Vsq};
  tpurt_arg_t sqargs[3] = {targ(&A), barg(false), barg(true)};
  CHECK_OK(call_op("_linalg_svd", sqargs, 3, sqo, 3));
  bool snan = false;
  for (int k = 0; k < N; ++k) {
    snan |= isnan(at1(&Ssq, 0, k));
    CHECK(!isnan(at1(&Ssq, 1, k)));
  }
  CHECK(snan);
  /* integer input: a status, not garbage */
  int64_t ia[N * N] = {0};
  const int64_t s2d[2] = {N, N};
  tpurt_tensor_t IA = mat(TPURT_DTYPE_INT64, ia, 2, s2d, false);
  tpurt_arg_t iargs[3] = {targ(&IA), barg(false), barg(false)};
  CHECK_STATUS(call_op("linalg_cholesky_ex", iargs, 3, co, 2), UNIMPLEMENTED);
  free(ma), free(m1), free(m2), free(mv);
}

/* Matrices past lapack.h's sizes, where the kernels call LAPACK (the tests above are 5 x 5 and take the
 * loops for svd, qr, LU and Cholesky): a 40 x 24 QR and SVD and a 24 x 24 inverse and Cholesky in
 * float64, each checked by what defines it. */
static void test_lapack_sizes(void) {
  enum { R = 40, C = 24 };
  static double ma[R * C], mq[R * C], mr[C * C], mu[R * C], ms[C], mv[C * C], sq[C * C], mx[C * C];
  const int64_t sa[2] = {R, C}, sr[2] = {C, C}, ss[1] = {C};
  tpurt_tensor_t A = mat(TPURT_DTYPE_FLOAT64, ma, 2, sa, false);
  for (int i = 0; i < R * C; ++i) ma[i] = 2.0 * test_rand_unit() - 1.0;
  tpurt_tensor_t Q = mat(TPURT_DTYPE_FLOAT64, mq, 2, sa, true), Rt = mat(TPURT_DTYPE_FLOAT64, mr, 2, sr, false);
  tpurt_arg_t qargs[2] = {targ(&A), {.kind = TPURT_ARG_STRING, .v.s = "reduced"}};
  tpurt_tensor_t qo[2] = {Q, Rt};
  CHECK_OK(call_op("linalg_qr", qargs, 2, qo, 2));
  tpurt_tensor_t U = mat(TPURT_DTYPE_FLOAT64, mu, 2, sa, true), S = mat(TPURT_DTYPE_FLOAT64, ms, 1, ss, false);
  tpurt_tensor_t Vh = mat(TPURT_DTYPE_FLOAT64, mv, 2, sr, true);
  tpurt_arg_t sargs[3] = {targ(&A), barg(false), barg(true)};
  tpurt_tensor_t so[3] = {U, S, Vh};
  CHECK_OK(call_op("_linalg_svd", sargs, 3, so, 3));
  double worst = 0;
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) {
      double qr = 0, usv = 0;
      for (int k = 0; k < C; ++k) qr += at(&Q, 0, i, k) * at(&Rt, 0, k, j), usv += at(&U, 0, i, k) * ms[k] * at(&Vh, 0, k, j);
      worst = fmax(worst, fmax(fabs(qr - ma[i * C + j]), fabs(usv - ma[i * C + j])));
    }
  for (int k = 1; k < C; ++k) CHECK(ms[k - 1] >= ms[k]);
  /* A^T A (SPD): L L^T = it */
  for (int i = 0; i < C; ++i)
    for (int j = 0; j < C; ++j) {
      double t = 0;
      for (int k = 0; k < R; ++k) t += ma[k * C + i] * ma[k * C + j];
      sq[i * C + j] = t;
    }
  tpurt_tensor_t SQ = mat(TPURT_DTYPE_FLOAT64, sq, 2, sr, false), L = mat(TPURT_DTYPE_FLOAT64, mr, 2, sr, true);
  int32_t info = 0;
  const int64_t s0[1] = {1};
  tpurt_tensor_t I = mat(TPURT_DTYPE_INT32, &info, 0, s0, false);
  tpurt_arg_t cargs[3] = {targ(&SQ), barg(false), barg(false)};
  tpurt_tensor_t co[2] = {L, I};
  CHECK_OK(call_op("linalg_cholesky_ex", cargs, 3, co, 2));
  /* the inverse of A's first 24 rows (not symmetric, so a transposed solve would show) */
  tpurt_tensor_t A24 = mat(TPURT_DTYPE_FLOAT64, ma, 2, sr, false), X = mat(TPURT_DTYPE_FLOAT64, mx, 2, sr, true);
  tpurt_arg_t iargs[2] = {targ(&A24), barg(false)};
  tpurt_tensor_t io[2] = {X, I};
  CHECK_OK(call_op("linalg_inv_ex", iargs, 2, io, 2));
  for (int i = 0; i < C; ++i)
    for (int j = 0; j < C; ++j) {
      double ll = 0, ax = 0;
      for (int k = 0; k < C; ++k) ll += at(&L, 0, i, k) * at(&L, 0, j, k), ax += ma[i * C + k] * at(&X, 0, k, j);
      worst = fmax(worst, fmax(fabs(ll - sq[i * C + j]) / R, fabs(ax - (i == j))));
    }
  printf("lapack sizes: worst residual %.3g\n", worst);
  CHECK(info == 0 && worst < 1e-11);
}

/* The complex kernels past lapack.h's sizes (zgetrf/zgetrs, zgeqrf/zungqr, ztrsm) and real eig (dgeev),
 * and LDL (sytrf/sytrs), 24 x 24 complex128 and float64, each checked by what defines it: A A^-1 = I,
 * Q R = A with Q^H Q = I, T X = B (upper, and lower with a right-hand side from the right),
 * A v = w v, A X = B through L D L^T. */
#include <complex.h>
#undef I
static double _Complex zat(const tpurt_tensor_t* t, int64_t i, int64_t j) {
  return ((const double _Complex*)t->data)[i * t->strides[t->ndim - 2] + j * t->strides[t->ndim - 1]];
}
/* max |(A B)(i, j) - C(i, j)| over the r x c product of the complex128 matrices A (r x k) and B
 * (k x c), read through their strides; C NULL: the identity */
static double zresid(const tpurt_tensor_t* A, const tpurt_tensor_t* B, const tpurt_tensor_t* C, int r, int k, int c) {
  double worst = 0;
  for (int i = 0; i < r; ++i)
    for (int j = 0; j < c; ++j) {
      double _Complex s = 0;
      for (int q = 0; q < k; ++q) s += zat(A, i, q) * zat(B, q, j);
      worst = fmax(worst, cabs(s - (C ? zat(C, i, j) : (double _Complex)(i == j))));
    }
  return worst;
}
static void test_complex_lapack_sizes(void) {
  enum { R = 30, C = 24, K = 3 };
  static double _Complex ma[R * C], mx[C * C], mq[R * C], mr[C * C], mt[C * C], mb[C * K], ms[C * K], vv[C * C], w[C];
  static double re[C * C];
  for (int i = 0; i < R * C; ++i) ma[i] = CMPLX(2.0 * test_rand_unit() - 1.0, 2.0 * test_rand_unit() - 1.0);
  const int64_t sa[2] = {R, C}, sq[2] = {C, C}, sb[2] = {C, K}, s1[1] = {C}, s0[1] = {1};
  int32_t info = 0;
  double worst = 0;
  /* inverse of the first 24 rows */
  tpurt_tensor_t A = mat(TPURT_DTYPE_COMPLEX128, ma, 2, sq, false), X = mat(TPURT_DTYPE_COMPLEX128, mx, 2, sq, true);
  tpurt_tensor_t Info = mat(TPURT_DTYPE_INT32, &info, 0, s0, false);
  tpurt_arg_t iargs[2] = {targ(&A), barg(false)};
  tpurt_tensor_t io[2] = {X, Info};
  CHECK_OK(call_op("complex::linalg_inv_ex", iargs, 2, io, 2));
  worst = fmax(worst, zresid(&A, &X, NULL, C, C, C));
  /* reduced QR of all 30 rows */
  tpurt_tensor_t A30 = mat(TPURT_DTYPE_COMPLEX128, ma, 2, sa, false), Q = mat(TPURT_DTYPE_COMPLEX128, mq, 2, sa, false);
  tpurt_tensor_t Rt = mat(TPURT_DTYPE_COMPLEX128, mr, 2, sq, false);
  tpurt_arg_t qargs[2] = {targ(&A30), {.kind = TPURT_ARG_STRING, .v.s = "reduced"}};
  tpurt_tensor_t qo[2] = {Q, Rt};
  CHECK_OK(call_op("complex::linalg_qr", qargs, 2, qo, 2));
  worst = fmax(worst, zresid(&Q, &Rt, &A30, R, C, C));
  for (int i = 0; i < C; ++i)
    for (int j = 0; j < C; ++j) {
      double _Complex qq = 0;
      for (int k = 0; k < R; ++k) qq += conj(mq[k * C + i]) * mq[k * C + j];
      worst = fmax(worst, cabs(qq - (i == j)));
    }
  /* T X = B with T = R + 8 I (upper); X T' = B^T with T' = its transpose (lower), from the right */
  for (int i = 0; i < C; ++i)
    for (int j = 0; j < C; ++j) mt[i * C + j] = j >= i ? mr[i * C + j] + (i == j ? 8.0 : 0.0) : 0;
  for (int i = 0; i < C * K; ++i) mb[i] = CMPLX(test_rand_unit(), test_rand_unit());
  tpurt_tensor_t T = mat(TPURT_DTYPE_COMPLEX128, mt, 2, sq, false), Bt = mat(TPURT_DTYPE_COMPLEX128, mb, 2, sb, false);
  tpurt_tensor_t S = mat(TPURT_DTYPE_COMPLEX128, ms, 2, sb, false);
  tpurt_arg_t targs[5] = {targ(&T), targ(&Bt), barg(true), barg(true), barg(false)};
  CHECK_OK(call_op("complex::linalg_solve_triangular", targs, 5, &S, 1));
  worst = fmax(worst, zresid(&T, &S, &Bt, C, C, K));
  const int64_t sbt[2] = {K, C};
  tpurt_tensor_t TL = mat(TPURT_DTYPE_COMPLEX128, mt, 2, sq, true); /* the transpose: lower */
  tpurt_tensor_t BT = mat(TPURT_DTYPE_COMPLEX128, mb, 2, sbt, true), ST = mat(TPURT_DTYPE_COMPLEX128, ms, 2, sbt, true);
  tpurt_arg_t rargs[5] = {targ(&TL), targ(&BT), barg(false), barg(false), barg(false)};
  CHECK_OK(call_op("complex::linalg_solve_triangular", rargs, 5, &ST, 1));
  worst = fmax(worst, zresid(&ST, &TL, &BT, K, C, C));
  /* real eig: A v = w v */
  for (int i = 0; i < C * C; ++i) re[i] = 2.0 * test_rand_unit() - 1.0;
  tpurt_tensor_t RA = mat(TPURT_DTYPE_FLOAT64, re, 2, sq, false), W = mat(TPURT_DTYPE_COMPLEX128, w, 1, s1, false);
  tpurt_tensor_t V = mat(TPURT_DTYPE_COMPLEX128, vv, 2, sq, false);
  tpurt_arg_t eargs[1] = {targ(&RA)};
  tpurt_tensor_t eo[2] = {W, V};
  CHECK_OK(call_op("linalg_eig", eargs, 1, eo, 2));
  for (int k = 0; k < C; ++k)
    for (int i = 0; i < C; ++i) {
      double _Complex av = 0;
      for (int j = 0; j < C; ++j) av += re[i * C + j] * vv[j * C + k];
      worst = fmax(worst, cabs(av - w[k] * vv[i * C + k]));
    }
  /* LDL of a symmetric indefinite 24 x 24 (sytrf) and its solve (sytrs): A X = B */
  static double sy[C * C], sld[C * C], sbv[C * K], sx[C * K];
  static int64_t spiv[C];
  int64_t sinfo = -1;
  for (int i = 0; i < C; ++i)
    for (int j = 0; j <= i; ++j) sy[i * C + j] = sy[j * C + i] = 2.0 * test_rand_unit() - 1.0;
  for (int i = 0; i < C * K; ++i) sbv[i] = 2.0 * test_rand_unit() - 1.0;
  tpurt_tensor_t SY = mat(TPURT_DTYPE_FLOAT64, sy, 2, sq, false), SLD = mat(TPURT_DTYPE_FLOAT64, sld, 2, sq, false);
  tpurt_tensor_t SP = mat(TPURT_DTYPE_INT64, spiv, 1, s1, false), SI = mat(TPURT_DTYPE_INT64, &sinfo, 0, s0, false);
  tpurt_arg_t largs[3] = {targ(&SY), barg(false), barg(false)};
  tpurt_tensor_t lo[3] = {SLD, SP, SI};
  CHECK_OK(call_op("linalg_ldl_factor_ex", largs, 3, lo, 3));
  tpurt_tensor_t SB = mat(TPURT_DTYPE_FLOAT64, sbv, 2, sb, false), SX = mat(TPURT_DTYPE_FLOAT64, sx, 2, sb, false);
  tpurt_arg_t sargs[4] = {targ(&SLD), targ(&SP), targ(&SB), barg(false)};
  CHECK_OK(call_op("linalg_ldl_solve", sargs, 4, &SX, 1));
  for (int i = 0; i < C; ++i)
    for (int j = 0; j < K; ++j) {
      double ax = 0;
      for (int k = 0; k < C; ++k) ax += sy[i * C + k] * sx[k * K + j];
      worst = fmax(worst, fabs(ax - sbv[i * K + j]));
    }
  CHECK(sinfo == 0);
  printf("complex lapack sizes: worst residual %.3g\n", worst);
  CHECK(info == 0 && worst < 1e-11);
}

int main(void) {
  test_lapack_sizes();
  test_complex_lapack_sizes();
  test_lu_inv_det(TPURT_DTYPE_FLOAT64, false);
  test_lu_inv_det(TPURT_DTYPE_FLOAT64, true);
  test_lu_inv_det(TPURT_DTYPE_FLOAT32, false);
  test_chol_qr_eigh_svd(TPURT_DTYPE_FLOAT64);
  test_chol_qr_eigh_svd(TPURT_DTYPE_FLOAT32);
  return test_finish("test_dense");
}
