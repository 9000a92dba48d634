/* Complex dtypes and the FFT: _fft_c2c/_fft_r2c/_fft_c2r (mixed radix and
 * Bluestein) against the naive DFT (the reference kernel, and a double sum
 * here), round trips, strided n-d input, bad arguments; complex elementwise
 * kernels; linalg_eig's eigenpairs. */
#include <complex.h>
#include <math.h>
#include <string.h>

#include "test_util.h"

/* (self, dim list, normalization, last) for the three fft kernels */
static void fft_args(tpurt_arg_t* a, const tpurt_tensor_t* self, const int64_t* dims, int nd, int64_t norm,
                     tpurt_arg_t last) {
  memset(a, 0, 4 * sizeof(*a));
  a[0].kind = TPURT_ARG_TENSOR;
  a[0].v.tensor = self;
  a[1].kind = TPURT_ARG_INT_LIST;
  a[1].count = nd;
  a[1].v.ints = dims;
  a[2].kind = TPURT_ARG_INT;
  a[2].v.i = norm;
  a[3] = last;
}

/* X[b][k] = sum_j x[b][j] exp(sign 2 pi i j k / n), in double */
static void naive(const double complex* x, double complex* y, int64_t batch, int64_t n, int sign) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t k = 0; k < n; ++k) {
      double complex s = 0;
      for (int64_t j = 0; j < n; ++j) s += x[b * n + j] * cexp(sign * 2.0 * M_PI * I * (double)((j * k) % n) / n);
      y[b * n + k] = s;
    }
}

static void test_c2c_sizes(void) {
  const int64_t sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 25, 30, 37, 64, 97, 100, 128, 210, 243, 256, 331};
  enum { B = 3, MAXN = 331 };
  static float complex in[B * MAXN], out[B * MAXN], ref[B * MAXN];
  static double complex xd[B * MAXN], want[B * MAXN];
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); ++s) {
    int64_t n = sizes[s], shp[2] = {B, n}, dim = 1;
    for (int64_t i = 0; i < B * n; ++i) {
      in[i] = (float)(2 * test_rand_unit() - 1) + I * (float)(2 * test_rand_unit() - 1);
      xd[i] = in[i];
    }
    for (int fwd = 0; fwd < 2; ++fwd) {
      naive(xd, want, B, n, fwd ? -1 : 1);
      for (int64_t norm = 0; norm < 3; ++norm) {
        double sc = norm == 0 ? 1.0 : norm == 1 ? 1.0 / sqrt((double)n) : 1.0 / (double)n;
        tpurt_tensor_t ti = test_tensor_dense(TPURT_DTYPE_COMPLEX64, in, 2, shp), to = test_tensor_dense(TPURT_DTYPE_COMPLEX64, out, 2, shp),
                       tr = test_tensor_dense(TPURT_DTYPE_COMPLEX64, ref, 2, shp);
        tpurt_arg_t a[4];
        fft_args(a, &ti, &dim, 1, norm, (tpurt_arg_t){.kind = TPURT_ARG_BOOL, .v.b = fwd});
        CHECK_OK(test_op_run("_fft_c2c", false, a, 4, &to, 1));
        CHECK_OK(test_op_run("_fft_c2c", true, a, 4, &tr, 1));
        double err = 0, err_ref = 0, mag = 0;
        for (int64_t i = 0; i < B * n; ++i) {
          err = fmax(err, cabs(out[i] - want[i] * sc));
          err_ref = fmax(err_ref, cabs(ref[i] - want[i] * sc));
          mag = fmax(mag, cabs(want[i] * sc));
        }
        /* float32 accuracy: a few ulps times log n of the largest output */
        if (!(err <= 1e-5 * (mag + 1) && err_ref <= 1e-5 * (mag + 1)))
          fprintf(stderr, "c2c n=%lld fwd=%d norm=%lld: err %g ref err %g (max %g)\n", (long long)n, fwd,
                  (long long)norm, err, err_ref, mag);
        CHECK(err <= 1e-5 * (mag + 1) && err_ref <= 1e-5 * (mag + 1));
      }
    }
  }
}

/* r2c onesided / full, then c2r back to the signal; in double */
static void test_r2c_c2r(void) {
  const int64_t sizes[] = {1, 2, 5, 8, 11, 15, 16, 41, 64};
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); ++s) {
    int64_t n = sizes[s], h = n / 2 + 1, dim = 0;
    double x[64], back[64];
    double complex spec[64], full[64], xd[64], want[64];
    for (int64_t i = 0; i < n; ++i) {
      x[i] = 2 * test_rand_unit() - 1;
      xd[i] = x[i];
    }
    naive(xd, want, 1, n, -1);
    tpurt_tensor_t tx = test_tensor_dense(TPURT_DTYPE_FLOAT64, x, 1, &n), ts = test_tensor_dense(TPURT_DTYPE_COMPLEX128, spec, 1, &h),
                   tf = test_tensor_dense(TPURT_DTYPE_COMPLEX128, full, 1, &n);
    tpurt_arg_t a[4];
    for (int ref = 0; ref < 2; ++ref) {
      fft_args(a, &tx, &dim, 1, 0, (tpurt_arg_t){.kind = TPURT_ARG_BOOL, .v.b = true});
      CHECK_OK(test_op_run("_fft_r2c", ref, a, 4, &ts, 1));
      a[3].v.b = false;
      CHECK_OK(test_op_run("_fft_r2c", ref, a, 4, &tf, 1));
      double err = 0;
      for (int64_t k = 0; k < n; ++k) err = fmax(err, cabs(full[k] - want[k]));
      for (int64_t k = 0; k < h; ++k) err = fmax(err, cabs(spec[k] - want[k]));
      CHECK(err < 1e-12 * (double)(n + 1));
    }
    /* back: normalization 2 (1/n) recovers x */
    tpurt_tensor_t tb = test_tensor_dense(TPURT_DTYPE_FLOAT64, back, 1, &n);
    fft_args(a, &ts, &dim, 1, 2, (tpurt_arg_t){.kind = TPURT_ARG_INT, .v.i = n});
    for (int ref = 0; ref < 2; ++ref) {
      CHECK_OK(test_op_run("_fft_c2r", ref, a, 4, &tb, 1));
      double e2 = 0;
      for (int64_t i = 0; i < n; ++i) e2 = fmax(e2, fabs(back[i] - x[i]));
      CHECK(e2 < 1e-12 * (double)(n + 1));
    }
  }
}

/* a 2-d transform over a transposed (strided) input equals two 1-d passes */
static void test_2d_strided(void) {
  enum { R = 6, C = 10 };
  static double complex base[C][R], out[R][C], want[R][C], tmp[R][C];
  for (int i = 0; i < C; ++i)
    for (int j = 0; j < R; ++j) base[i][j] = (2 * test_rand_unit() - 1) + I * (2 * test_rand_unit() - 1);
  /* want: rows then columns of the transpose */
  double complex row[C], rowf[C], col[R], colf[R];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) row[c] = base[c][r];
    naive(row, rowf, 1, C, -1);
    for (int c = 0; c < C; ++c) tmp[r][c] = rowf[c];
  }
  for (int c = 0; c < C; ++c) {
    for (int r = 0; r < R; ++r) col[r] = tmp[r][c];
    naive(col, colf, 1, R, -1);
    for (int r = 0; r < R; ++r) want[r][c] = colf[r];
  }
  int64_t shp[2] = {R, C}, dims[2] = {0, -1};
  tpurt_tensor_t ti = test_tensor_dense(TPURT_DTYPE_COMPLEX128, base, 2, shp);
  ti.strides[0] = 1; /* the transpose of base */
  ti.strides[1] = R;
  tpurt_tensor_t to = test_tensor_dense(TPURT_DTYPE_COMPLEX128, out, 2, shp);
  tpurt_arg_t a[4];
  fft_args(a, &ti, dims, 2, 0, (tpurt_arg_t){.kind = TPURT_ARG_BOOL, .v.b = true});
  CHECK_OK(test_op_run("_fft_c2c", false, a, 4, &to, 1));
  double err = 0;
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) err = fmax(err, cabs(out[r][c] - want[r][c]));
  CHECK(err < 1e-11);
}

static void test_bad_args(void) {
  int64_t n = 4, dim = 3, h = 3;
  float x[4] = {0};
  float complex y[4];
  tpurt_tensor_t tx = test_tensor_dense(TPURT_DTYPE_FLOAT32, x, 1, &n), ty = test_tensor_dense(TPURT_DTYPE_COMPLEX64, y, 1, &h);
  tpurt_arg_t a[4];
  fft_args(a, &tx, &dim, 1, 0, (tpurt_arg_t){.kind = TPURT_ARG_BOOL, .v.b = true});
  CHECK_STATUS(test_op_run("_fft_r2c", false, a, 4, &ty, 1), OUT_OF_RANGE);
  dim = 0;
  a[2].v.i = 7; /* no such normalization */
  CHECK_STATUS(test_op_run("_fft_r2c", false, a, 4, &ty, 1), INVALID_ARGUMENT);
  a[2].v.i = 0;
  CHECK_STATUS(test_op_run("_fft_c2c", false, a, 4, &ty, 1), INVALID_ARGUMENT); /* real input */
  /* kernels for real dtypes never take complex; the complex ones are flagged or prefixed */
  CHECK(tpurt_op_lookup("_fft_r2c")->flags & TPURT_OP_COMPLEX);
  CHECK(!(tpurt_op_lookup("mul")->flags & TPURT_OP_COMPLEX));
  CHECK(tpurt_op_lookup("complex::mul") != NULL);
}

/* complex * real (broadcast), complex / complex, abs */
static void test_elementwise(void) {
  int64_t n = 5, one = 1;
  float complex a[5], q[5], p[5];
  float r = 2.5f, ab[5];
  for (int i = 0; i < 5; ++i) a[i] = (float)(i - 2) + I * (float)(i * i - 3);
  tpurt_tensor_t ta = test_tensor_dense(TPURT_DTYPE_COMPLEX64, a, 1, &n), tr = test_tensor_dense(TPURT_DTYPE_FLOAT32, &r, 0, &one),
                 tp = test_tensor_dense(TPURT_DTYPE_COMPLEX64, p, 1, &n), tq = test_tensor_dense(TPURT_DTYPE_COMPLEX64, q, 1, &n),
                 tab = test_tensor_dense(TPURT_DTYPE_FLOAT32, ab, 1, &n);
  tpurt_arg_t args[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &ta}, {.kind = TPURT_ARG_TENSOR, .v.tensor = &tr}};
  CHECK_OK(test_op_run("complex::mul", false, args, 2, &tp, 1));
  args[1].v.tensor = &tp;
  CHECK_OK(test_op_run("complex::div", false, args, 2, &tq, 1));
  CHECK_OK(test_op_run("complex::abs", false, args, 1, &tab, 1));
  int ok = 1;
  for (int i = 0; i < 5; ++i) {
    ok &= cabsf(p[i] - a[i] * 2.5f) < 1e-6f;
    ok &= cabsf(q[i] - 0.4f) < 1e-6f;
    ok &= fabsf(ab[i] - cabsf(a[i])) < 1e-5f;
  }
  CHECK(ok);
}

/* eigenpairs: A v = lambda v, and the known spectrum in geev's order, {3+4i, 3-4i, 2} (PyTorch CPU's
 * eigvals of this matrix) */
static void test_eig(void) {
  int64_t shp[2] = {3, 3}, n3 = 3;
  double a[9] = {2, 0, 0, 0, 3, 4, 0, -4, 3};
  double complex w[3], v[9];
  tpurt_tensor_t ta = test_tensor_dense(TPURT_DTYPE_FLOAT64, a, 2, shp), tw = test_tensor_dense(TPURT_DTYPE_COMPLEX128, w, 1, &n3);
  tpurt_tensor_t outs[2] = {tw, test_tensor_dense(TPURT_DTYPE_COMPLEX128, v, 2, shp)};
  tpurt_arg_t arg = {.kind = TPURT_ARG_TENSOR, .v.tensor = &ta};
  CHECK_OK(test_op_run("linalg_eig", false, &arg, 1, outs, 2));
  /* as LAPACK's geev orders them (the pair, positive imaginary part first, then the real one) */
  const double complex expect[3] = {3 + 4 * I, 3 - 4 * I, 2};
  for (int k = 0; k < 3; ++k) {
    CHECK(cabs(w[k] - expect[k]) < 1e-12);
    double res = 0, nrm = 0;
    for (int i = 0; i < 3; ++i) {
      double complex s = 0;
      for (int j = 0; j < 3; ++j) s += a[i * 3 + j] * v[j * 3 + k];
      res = fmax(res, cabs(s - w[k] * v[i * 3 + k]));
      nrm += creal(v[i * 3 + k] * conj(v[i * 3 + k]));
    }
    CHECK(res < 1e-10 && fabs(nrm - 1) < 1e-12);
  }
  CHECK(w[1] == conj(w[0])); /* a pair is exactly conjugate */
  a[4] = NAN;
  CHECK_STATUS(test_op_run("linalg_eig", false, &arg, 1, outs, 2), INVALID_ARGUMENT);
}

int main(void) {
  test_c2c_sizes();
  test_r2c_c2r();
  test_2d_strided();
  test_bad_args();
  test_elementwise();
  test_eig();
  return test_finish("test_fft");
}
