/* Complex-valued linear algebra: linalg_eig of a real or complex matrix (complex
 * eigenvalues and eigenvectors), the complex matrix products its backward
 * formula needs (complex::mm, complex::bmm) and the complex solve
 * (complex::_linalg_solve_ex).
 *
 * linalg_eig calls LAPACK's geev in the input's precision on a column-major
 * copy, as PyTorch CPU does, so eigenvalues come in its order and eigenvectors
 * with its normalization (unit 2-norm, the largest component real). The loops
 * below remain for matrices geev does not converge on: the path LAPACK's geev
 * takes for small matrices
 * (diagonal balancing (gebal's scaling), Householder reduction to Hessenberg
 * form (gehrd), Francis double-shift QR with Ahues-Tisseur deflation and
 * exceptional shifts at iterations 10 and 20 (lahqr); a converged 2x2 block
 * gives its eigenvalues in lanv2's order), computed in double, eigenvectors
 * from inverse iteration on the original matrix, a conjugate pair's
 * conjugate vectors; inverse iteration per vector took 7.2 s for a 256 x 256
 * matrix (CPU 82 ms). A complex matrix takes zgeev's path without balancing:
 * reduction to Hessenberg form (here by Givens rotations) and zlahqr's
 * single-shift QR iteration with Wilkinson shifts. */
#include <complex.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "ops/linalg/lapack.h"
#include "ops/linalg/matrix.h"

/* ---- one real n x n matrix, row-major, a[i * n + j] ---- */

#define EIG_R float
#define EIG_SUF f32
#define EIG_EPS FLT_EPSILON
#define EIG_SAFMIN FLT_MIN
#define EIG_M(fn) fn##f
#include "ops/linalg/eig_impl.h"
#undef EIG_R
#undef EIG_SUF
#undef EIG_EPS
#undef EIG_SAFMIN
#undef EIG_M
#define EIG_R double
#define EIG_SUF f64
#define EIG_EPS DBL_EPSILON
#define EIG_SAFMIN DBL_MIN
#define EIG_M(fn) fn
#include "ops/linalg/eig_impl.h"
#undef EIG_R
#undef EIG_SUF
#undef EIG_EPS
#undef EIG_SAFMIN
#undef EIG_M

/* ---- complex LU for linalg_eig's inverse iteration (complex::_linalg_solve_ex uses zfactor.c's) ---- */

#define LU_T zd_t
#define LU_ABS cabs
#define LU_SUF z
#include "ops/linalg/lu_impl.h"

/* The eigenvector of the original a for eigenvalue lambda by inverse
 * iteration: LU of (a - lambda I) with partial pivoting (a zero pivot becomes
 * eps * |a|), then three solves from a flat start. */
static void eig_vector(int64_t n, const zd_t* a, double anorm, zd_t lambda, zd_t* lu, int32_t* piv, zd_t* x) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) lu[i * n + j] = a[i * n + j] - (i == j ? lambda : 0);
  lu_factor_z(lu, n, n, piv, DBL_EPSILON * (anorm > 0 ? anorm : 1.0));
  for (int64_t i = 0; i < n; ++i) x[i] = 1.0 / sqrt((double)n);
  for (int it = 0; it < 3; ++it) {
    lu_solve_z(lu, piv, n, x, 1, false);
    double nrm = 0;
    for (int64_t i = 0; i < n; ++i) nrm = hypot(nrm, cabs(x[i]));
    if (!(nrm > 0) || !isfinite(nrm)) break;
    for (int64_t i = 0; i < n; ++i) x[i] /= nrm;
  }
  /* geev's normalization: unit norm, the largest component real */
  int64_t big = 0;
  for (int64_t i = 1; i < n; ++i)
    if (cabs(x[i]) > cabs(x[big])) big = i;
  double m = cabs(x[big]);
  if (m > 0) {
    zd_t ph = conj(x[big]) / m;
    for (int64_t i = 0; i < n; ++i) x[i] *= ph;
    x[big] = creal(x[big]);
  }
}

/* ---- one complex n x n matrix: eigenvalues by zlahqr's iteration ---- */

static inline double eig_cabs1(zd_t z) {
  return fabs(creal(z)) + fabs(cimag(z));
}

/* The rotation G = [c s; -conj(s) c] with G [x; y] = [r; 0], c real. */
static void eig_givens(zd_t x, zd_t y, double* c, zd_t* s, zd_t* r) {
  double ax = cabs(x);
  if (ax == 0) {
    *c = 0;
    *s = 1;
    *r = y;
    return;
  }
  double nrm = hypot(ax, cabs(y));
  *c = ax / nrm;
  *s = (x / ax) * conj(y) / nrm;
  *r = (x / ax) * nrm;
}

/* rows k, k+1 of h (columns j0..j1) from the left by G; columns k, k+1
 * (rows r0..r1) from the right by G^H: a similarity */
static void eig_rot_rows(int64_t n, zd_t* h, int64_t k, int64_t j0, int64_t j1, double c, zd_t s) {
  for (int64_t j = j0; j <= j1; ++j) {
    zd_t a = h[k * n + j], b = h[(k + 1) * n + j];
    h[k * n + j] = c * a + s * b;
    h[(k + 1) * n + j] = -conj(s) * a + c * b;
  }
}
static void eig_rot_cols(int64_t n, zd_t* h, int64_t k, int64_t r0, int64_t r1, double c, zd_t s) {
  for (int64_t r = r0; r <= r1; ++r) {
    zd_t a = h[r * n + k], b = h[r * n + k + 1];
    h[r * n + k] = c * a + conj(s) * b;
    h[r * n + k + 1] = -s * a + c * b;
  }
}

/* Upper Hessenberg form of h by Givens rotations from both sides. */
static void eig_hessenberg_z(int64_t n, zd_t* h) {
  for (int64_t k = 0; k + 2 < n; ++k)
    for (int64_t r = n - 1; r >= k + 2; --r) {
      if (h[r * n + k] == 0) continue;
      double c;
      zd_t s, rr;
      eig_givens(h[(r - 1) * n + k], h[r * n + k], &c, &s, &rr);
      eig_rot_rows(n, h, r - 1, k + 1, n - 1, c, s);
      h[(r - 1) * n + k] = rr;
      h[r * n + k] = 0;
      eig_rot_cols(n, h, r - 1, 0, n - 1, c, s);
    }
}

/* The eigenvalues of the Hessenberg h into w, from the bottom up as they
 * deflate; h is overwritten. Only the active block is transformed (its
 * eigenvalues are all that is read). False if a block does not converge. */
static bool eig_qr_z(int64_t n, zd_t* h, zd_t* w) {
  const double ulp = DBL_EPSILON;
  const int64_t itmax = 30 * (n > 10 ? n : 10);
  int64_t i = n - 1;
  while (i >= 0) {
    int64_t l = 0;
    bool deflated = false;
    for (int64_t its = 0; its <= itmax; ++its) {
      int64_t k;
      for (k = i; k > 0; --k) {
        double tst = eig_cabs1(h[(k - 1) * n + k - 1]) + eig_cabs1(h[k * n + k]);
        if (tst == 0) {
          if (k - 2 >= 0) tst += fabs(creal(h[(k - 1) * n + k - 2]));
          if (k + 1 <= i) tst += fabs(creal(h[(k + 1) * n + k]));
        }
        if (eig_cabs1(h[k * n + k - 1]) <= ulp * tst) break;
      }
      l = k;
      if (l > 0) h[l * n + l - 1] = 0;
      if (l >= i) {
        deflated = true;
        break;
      }
      zd_t t;
      if (its == 10) {
        t = 0.75 * fabs(creal(h[(l + 1) * n + l])) + h[l * n + l];
      } else if (its == 20) {
        t = 0.75 * fabs(creal(h[i * n + i - 1])) + h[i * n + i];
      } else { /* Wilkinson's shift: the eigenvalue of the trailing 2x2 nearer h[i][i] */
        t = h[i * n + i];
        zd_t u = csqrt(h[(i - 1) * n + i]) * csqrt(h[i * n + i - 1]);
        double su = eig_cabs1(u);
        if (su != 0) {
          zd_t x = 0.5 * (h[(i - 1) * n + i - 1] - t);
          double sx = eig_cabs1(x), sc = fmax(su, sx);
          zd_t y = sc * csqrt((x / sc) * (x / sc) + (u / sc) * (u / sc));
          if (sx > 0 && creal(x / sx) * creal(y) + cimag(x / sx) * cimag(y) < 0) y = -y;
          t -= u * (u / (x + y));
        }
      }
      /* one implicit single-shift sweep over rows l..i, chasing the bulge down */
      for (k = l; k < i; ++k) {
        zd_t x = k == l ? h[l * n + l] - t : h[k * n + k - 1];
        zd_t y = k == l ? h[(l + 1) * n + l] : h[(k + 1) * n + k - 1];
        double c;
        zd_t s, r;
        eig_givens(x, y, &c, &s, &r);
        if (k > l) {
          h[k * n + k - 1] = r;
          h[(k + 1) * n + k - 1] = 0;
        }
        eig_rot_rows(n, h, k, k, i, c, s);
        eig_rot_cols(n, h, k, l, k + 2 < i ? k + 2 : i, c, s);
      }
    }
    if (!deflated) return false;
    w[i] = h[i * n + i];
    --i;
  }
  return true;
}


/* The eigenvalues of a (row-major, complex double; anorm its largest |entry|) into w and, where x is
 * given, the eigenvectors into x's columns x + k n, by the loops above: zlahqr's path for a complex
 * matrix, geev's small-matrix path for a real one (in float for float32, as sgeev), then inverse
 * iteration per vector (a real matrix's conjugate pair gets conjugate vectors). For matrices geev
 * does not converge on; their scratch is allocated here. 0 when done, 1 if the iteration does not
 * converge, -1 without memory. */
static int eig_by_loops(tpurt_dtype_t dt, int64_t n, const zd_t* a, double anorm, zd_t* w, zd_t* x) {
  const bool cplx = tpurt_dtype_is_complex(dt);
  /* lu, hz (complex input: Hessenberg, then triangular) | h (real input: balanced, Hessenberg,
   * quasi-triangular), wr, wi, v | piv */
  zd_t* lu = malloc(sizeof(zd_t) * (size_t)(2 * n * n) + sizeof(double) * (size_t)(n * n + 3 * n) +
                    sizeof(int32_t) * (size_t)n);
  if (!lu) return -1;
  zd_t* hz = lu + n * n;
  double* h = (double*)(hz + n * n);
  double *wr = h + n * n, *wi = wr + n, *v = wi + n;
  int32_t* piv = (int32_t*)(v + n);
  bool converged;
  if (cplx) {
    memcpy(hz, a, sizeof(zd_t) * (size_t)(n * n));
    eig_hessenberg_z(n, hz);
    converged = eig_qr_z(n, hz, w);
  } else {
    if (dt == TPURT_DTYPE_FLOAT32) {
      float *hf = (float*)h, *wrf = (float*)v, *wif = wrf + n, *vf = (float*)wi;
      for (int64_t e = 0; e < n * n; ++e) hf[e] = (float)creal(a[e]);
      eig_balance_f32(n, hf);
      eig_hessenberg_f32(n, hf, vf);
      converged = eig_qr_f32(n, hf, wrf, wif);
      for (int64_t k = 0; k < n; ++k) {
        wr[k] = wrf[k];
        wi[k] = wif[k];
      }
    } else {
      for (int64_t e = 0; e < n * n; ++e) h[e] = creal(a[e]);
      eig_balance_f64(n, h);
      eig_hessenberg_f64(n, h, v);
      converged = eig_qr_f64(n, h, wr, wi);
    }
    for (int64_t k = 0; k < n; ++k) w[k] = CMPLX(wr[k], wi[k]);
  }
  for (int64_t k = 0; converged && x && k < n; ++k) {
    zd_t* col = x + k * n;
    if (!cplx && k > 0 && cimag(w[k]) < 0 && w[k - 1] == conj(w[k])) /* a conjugate pair's partner */
      for (int64_t r = 0; r < n; ++r) col[r] = conj(x[(k - 1) * n + r]);
    else
      eig_vector(n, a, anorm, w[k], lu, piv, col);
  }
  free(lu);
  return converged ? 0 : 1;
}

/* ---- LAPACK's geev, as PyTorch CPU calls it ---- */

/* The eigenvalues (w) and, where x is given, eigenvectors (x's columns x + k n) of the n x n a
 * (row-major, the input converted to complex double) by sgeev/dgeev/cgeev/zgeev in the input's own
 * precision, on a column-major copy: the routine, precision and layout PyTorch CPU's linalg_eig
 * uses, so the eigenvalues come in its order and the eigenvectors with its normalization. A real
 * matrix's complex pair (wr +- i wi, wi > 0 first) shares VR's columns k, k+1 as re, im. False where
 * it cannot run (no memory, no convergence). */
static bool lapack_eig_run(tpurt_dtype_t dt, int64_t n, const zd_t* a, zd_t* w, zd_t* x) {
  const bool cplx = tpurt_dtype_is_complex(dt), dbl = dt == TPURT_DTYPE_FLOAT64 || dt == TPURT_DTYPE_COMPLEX128;
  const size_t real = dbl ? sizeof(double) : sizeof(float), elt = cplx ? 2 * real : real, nn = (size_t)(n * n);
  const int ni = (int)n, one = 1, lq = -1, ldvr = x ? ni : 1;
  const char* jobvr = x ? "V" : "N";
  /* A | VR | W (wr, wi) | RWORK (2 n reals), each 64-byte aligned */
  const size_t sa = (elt * nn + 63) & ~(size_t)63, sv = x ? sa : 64, sw = (2 * real * (size_t)n + 63) & ~(size_t)63;
  char* buf = aligned_alloc(64, sa + sv + 2 * sw);
  if (!buf) return false;
  void *A = buf, *VR = buf + sa, *W = buf + sa + sv, *RW = buf + sa + sv + sw;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const zd_t e = a[r * n + c];
      const size_t k = (size_t)(c * n + r);
      if (dt == TPURT_DTYPE_FLOAT32) ((float*)A)[k] = (float)creal(e);
      else if (dt == TPURT_DTYPE_FLOAT64) ((double*)A)[k] = creal(e);
      else if (dt == TPURT_DTYPE_COMPLEX64) ((float _Complex*)A)[k] = (float _Complex)e;
      else ((double _Complex*)A)[k] = e;
    }
  int info = 0;
  double wq[2] = {0, 0}; /* the workspace query's answer (a complex one's real part first) */
  for (int pass = 0; pass < 2 && info == 0; ++pass) {
    void* work = wq;
    int lwork = lq;
    if (pass == 1) {
      if (!(wq[0] >= 1 && wq[0] < INT32_MAX / 2)) { info = -1; break; }
      lwork = (int)wq[0];
      work = malloc(elt * (size_t)lwork);
      if (!work) { info = -1; break; }
    }
    float fq[4];
    void* wk = pass == 0 && !dbl ? (void*)fq : work;
    switch (dt) {
      case TPURT_DTYPE_FLOAT32:
        sgeev_("N", jobvr, &ni, A, &ni, W, (float*)W + n, NULL, &one, VR, &ldvr, wk, &lwork, &info, 1, 1);
        break;
      case TPURT_DTYPE_FLOAT64:
        dgeev_("N", jobvr, &ni, A, &ni, W, (double*)W + n, NULL, &one, VR, &ldvr, wk, &lwork, &info, 1, 1);
        break;
      case TPURT_DTYPE_COMPLEX64:
        cgeev_("N", jobvr, &ni, A, &ni, W, NULL, &one, VR, &ldvr, wk, &lwork, RW, &info, 1, 1);
        break;
      default:
        zgeev_("N", jobvr, &ni, A, &ni, W, NULL, &one, VR, &ldvr, wk, &lwork, RW, &info, 1, 1);
        break;
    }
    if (pass == 0 && !dbl) wq[0] = fq[0];
    if (pass == 1) free(work);
  }
  if (info == 0) {
    for (int64_t k = 0; k < n; ++k) {
      if (dt == TPURT_DTYPE_FLOAT32) w[k] = CMPLX(((float*)W)[k], ((float*)W)[n + k]);
      else if (dt == TPURT_DTYPE_FLOAT64) w[k] = CMPLX(((double*)W)[k], ((double*)W)[n + k]);
      else if (dt == TPURT_DTYPE_COMPLEX64) w[k] = ((float _Complex*)W)[k];
      else w[k] = ((double _Complex*)W)[k];
    }
    for (int64_t k = 0; x && k < n; ++k) {
      const size_t c = (size_t)(k * n);
      const bool pair = !cplx && cimag(w[k]) > 0 && k + 1 < n;
      for (int64_t r = 0; r < n; ++r) {
        zd_t v;
        if (dt == TPURT_DTYPE_FLOAT32)
          v = pair ? CMPLX(((float*)VR)[c + r], ((float*)VR)[c + n + r]) : ((float*)VR)[c + r];
        else if (dt == TPURT_DTYPE_FLOAT64)
          v = pair ? CMPLX(((double*)VR)[c + r], ((double*)VR)[c + n + r]) : ((double*)VR)[c + r];
        else if (dt == TPURT_DTYPE_COMPLEX64) v = ((float _Complex*)VR)[c + r];
        else v = ((double _Complex*)VR)[c + r];
        x[c + r] = v;
        if (pair) x[c + n + r] = conj(v);
      }
      k += pair;
    }
  }
  free(buf);
  return info == 0;
}

static bool lapack_eig(tpurt_dtype_t dt, int64_t n, const zd_t* a, zd_t* w, zd_t* x) {
  if (n < LAPACK_MIN_EIG || n > 46000) return false; /* n^2 fits 32-bit integers */
  const int threads = lapack_begin();
  const bool ok = lapack_eig_run(dt, n, a, w, x);
  lapack_end(threads);
  return ok;
}

/* ---- the kernel: linalg_eig(self) -> (eigenvalues, eigenvectors) ---- */

typedef struct eig_job_t {
  const tpurt_tensor_t* self;
  const tpurt_tensor_t* vals;
  const tpurt_tensor_t* vecs; /* data NULL: eigenvalues only */
  int64_t n;
  char* work;                 /* per batch element */
  size_t work_bytes;
  int64_t failed;             /* a batch index + 1 that did not converge, else 0 */
  int64_t nomem;              /* a batch index + 1 the loops found no memory for, else 0 */
  bool nonfinite;
} eig_job_t;

/* Element offset of batch b, row i, col j in t (batch dims broadcast-free). */
static int64_t eig_offset(const tpurt_tensor_t* t, int64_t b, int nbatch_dims, int64_t i, int64_t j, int mat_dims) {
  int64_t off = 0;
  for (int k = nbatch_dims - 1; k >= 0; --k) {
    off += (b % t->sizes[k]) * t->strides[k];
    b /= t->sizes[k];
  }
  if (mat_dims == 2) off += i * t->strides[t->ndim - 2] + j * t->strides[t->ndim - 1];
  else off += i * t->strides[t->ndim - 1];
  return off;
}


static void eig_batch(void* user, int64_t begin, int64_t end, int tid) {
  (void)tid;
  eig_job_t* j = user;
  const int64_t n = j->n;
  const int nb = j->self->ndim - 2;
  for (int64_t b = begin; b < end; ++b) {
    zd_t* a = (zd_t*)(j->work + (size_t)b * j->work_bytes); /* the input, kept, as complex */
    zd_t* x = a + n * n;                                         /* the eigenvectors, as columns */
    zd_t* w = x + n * n;
    double anorm = 0;
    bool bad = false;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < n; ++c) {
        zd_t e = mat_zld(j->self, eig_offset(j->self, b, nb, r, c, 2));
        bad |= !isfinite(creal(e)) || !isfinite(cimag(e));
        a[r * n + c] = e;
        anorm = fmax(anorm, cabs(e));
      }
    if (bad) { /* several threads may say so at once: an atomic store */
      __atomic_store_n(&j->nonfinite, true, __ATOMIC_RELAXED);
      continue;
    }
    zd_t* xs = j->vecs && j->vecs->data ? x : NULL;
    const int loops = lapack_eig(j->self->dtype, n, a, w, xs) ? 0 : eig_by_loops(j->self->dtype, n, a, anorm, w, xs);
    if (loops) {
      __atomic_store_n(loops < 0 ? &j->nomem : &j->failed, b + 1, __ATOMIC_RELAXED);
      continue;
    }
    for (int64_t k = 0; k < n; ++k) mat_zst(j->vals, eig_offset(j->vals, b, nb, k, 0, 1), w[k]);
    for (int64_t k = 0; xs && k < n; ++k)
      for (int64_t r = 0; r < n; ++r) mat_zst(j->vecs, eig_offset(j->vecs, b, nb, r, k, 2), x[k * n + r]);
  }
}

static tpurt_status_t eig_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  if (!self || call->num_outputs < 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "linalg_eig: expected (self) and (eigenvalues, eigenvectors)");
  if (self->ndim < 2 || self->sizes[self->ndim - 1] != self->sizes[self->ndim - 2])
    return TPURT_STATUS(INVALID_ARGUMENT, "linalg.eig: A must be batches of square matrices");
  if (self->dtype != TPURT_DTYPE_FLOAT32 && self->dtype != TPURT_DTYPE_FLOAT64 &&
      self->dtype != TPURT_DTYPE_COMPLEX64 && self->dtype != TPURT_DTYPE_COMPLEX128)
    return TPURT_STATUS(UNIMPLEMENTED, "linalg_eig: dtype %s is not supported on the tpu device",
                        tpurt_dtype_name(self->dtype));
  eig_job_t j = {.self = self, .vals = &call->outputs[0], .vecs = call->num_outputs > 1 ? &call->outputs[1] : NULL};
  if (!tpurt_dtype_is_complex(j.vals->dtype) || (j.vecs && j.vecs->data && !tpurt_dtype_is_complex(j.vecs->dtype)))
    return TPURT_STATUS(INVALID_ARGUMENT, "linalg_eig: outputs must be complex");
  j.n = self->sizes[self->ndim - 1];
  int64_t batch = 1;
  for (int k = 0; k < self->ndim - 2; ++k) batch *= self->sizes[k];
  if (batch == 0 || j.n == 0) return TPURT_OK;
  const int64_t n = j.n;
  j.work_bytes = sizeof(zd_t) * (size_t)(2 * n * n + n); /* a, x, w per batch element */
  j.work_bytes = (j.work_bytes + 63) & ~(size_t)63;
  j.work = tpurt_kernel_scratch(ctx, j.work_bytes * (size_t)batch);
  if (!j.work) return TPURT_STATUS(RESOURCE_EXHAUSTED, "linalg_eig: no scratch memory");
  /* batch elements are independent; each writes only its own outputs */
  tpurt_parallel_for(ctx, batch, 1, eig_batch, &j);
  if (j.nonfinite) return TPURT_STATUS(INVALID_ARGUMENT, "linalg.eig: input tensor should not contain infs or NaNs.");
  if (j.nomem) return TPURT_STATUS(RESOURCE_EXHAUSTED, "linalg_eig: no memory for batch element %lld", (long long)(j.nomem - 1));
  if (j.failed)
    return TPURT_STATUS(INVALID_ARGUMENT,
                        "linalg.eig: The algorithm failed to converge because the input matrix is ill-conditioned "
                        "or has too many repeated eigenvalues (batch element %lld).", (long long)(j.failed - 1));
  return TPURT_OK;
}

/* ---- the products under both complex matmul families: BLAS's cgemm and zgemm ----
 * In the output's precision as PyTorch CPU computes them (cgemm for complex64, zgemm for
 * complex128), on the chip's threads, each a block of rows. An operand of that precision whose
 * rows or columns are contiguous is read where it lies; others (other dtypes, other strides) are
 * converted into scratch once. The scalar loops before took 24 ms for 256 x 256 x 256 complex64
 * (PyTorch CPU 0.9). */

/* One operand: a batch of matrices in the product's precision, matrix bi at element bi * sb of
 * p, row-major with row stride ld, or (t) column-major with column stride ld. */
typedef struct zmat_t {
  char* p;
  int64_t sb, ld;
  bool t;
} zmat_t;

typedef struct zprod_t {
  zmat_t a, b, c;  /* A: nbat of m x k, B: nbat of k x n, C: (sum_batch ? 1 : nbat) of m x n, row-major */
  int64_t nbat, m, k, n;
  bool sum_batch;  /* addbmm: C = the sum over the batch of A_i B_i */
  bool single;     /* cgemm on complex float, else zgemm */
} zprod_t;

static inline size_t zprod_elt(const zprod_t* p) {
  return p->single ? sizeof(float _Complex) : sizeof(zd_t);
}

/* Whether t's r x c matrices (element (i, j) at i rs + j cs) can be read in place: the product's
 * precision, one stride 1 and the other a leading dimension BLAS accepts; fills m's ld and t. */
static bool zmat_direct(const tpurt_tensor_t* t, int64_t r, int64_t c, int64_t rs, int64_t cs, bool single,
                        zmat_t* m) {
  if (t->dtype != (single ? TPURT_DTYPE_COMPLEX64 : TPURT_DTYPE_COMPLEX128)) return false;
  if (c == 1) cs = 1; /* a stride along a dimension of one is never used */
  if (r == 1) rs = cs == 1 ? c : 1;
  if (cs == 1 && rs >= c && rs >= 1 && rs <= INT32_MAX) {
    m->ld = rs, m->t = false;
    return true;
  }
  if (rs == 1 && cs >= r && cs >= 1 && cs <= INT32_MAX) {
    m->ld = cs, m->t = true;
    return true;
  }
  return false;
}

/* Operand m for t's nbat matrices of r x c at element offset off (matrix bi at off + bi sb): in
 * place where zmat_direct allows, else converted row-major into *scratch, which advances. */
static void zmat_of(const tpurt_tensor_t* t, int64_t off, int64_t sb, int64_t nbat, int64_t r, int64_t c, int64_t rs,
                    int64_t cs, bool single, zmat_t* m, char** scratch) {
  const size_t elt = single ? sizeof(float _Complex) : sizeof(zd_t);
  if (zmat_direct(t, r, c, rs, cs, single, m)) {
    m->p = (char*)t->data + elt * (size_t)off, m->sb = sb;
    return;
  }
  m->p = *scratch, m->sb = r * c, m->ld = c, m->t = false;
  *scratch += elt * (size_t)(nbat * r * c);
  for (int64_t bi = 0; bi < nbat; ++bi)
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) {
        const zd_t v = mat_zld(t, off + bi * sb + i * rs + j * cs);
        const int64_t e = (bi * r + i) * c + j;
        if (single) ((float _Complex*)m->p)[e] = (float _Complex)v;
        else ((zd_t*)m->p)[e] = v;
      }
}
/* the scratch zmat_of needs for t's operand (0 where it is read in place) */
static size_t zmat_need(const tpurt_tensor_t* t, int64_t nbat, int64_t r, int64_t c, int64_t rs, int64_t cs,
                        bool single) {
  zmat_t m;
  if (zmat_direct(t, r, c, rs, cs, single, &m)) return 0;
  return (single ? sizeof(float _Complex) : sizeof(zd_t)) * (size_t)(nbat * r * c);
}

/* element e (row-major over batch, row, column) of a packed C, as complex double */
static inline zd_t zprod_at(const zprod_t* p, int64_t e) {
  return p->single ? (zd_t)((const float _Complex*)p->c.p)[e] : ((const zd_t*)p->c.p)[e];
}

/* output rows r = batch * m + i in [begin, end). Row-major C = A B is, read column-major,
 * C^T = B^T A^T: gemm(n, rows, k) with B then A, each "N" where it is row-major (its column-major
 * reading is its transpose already) and "T" where it is column-major. */
static void zprod_rows(void* user, int64_t begin, int64_t end, int tid) {
  (void)tid;
  const zprod_t* p = user;
  const size_t elt = zprod_elt(p);
  const int ni = (int)p->n, ki = (int)p->k, lda = (int)p->a.ld, ldb = (int)p->b.ld, ldc = (int)p->c.ld;
  const char *ta = p->a.t ? "T" : "N", *tb = p->b.t ? "T" : "N";
  const zd_t one = 1, zero = 0;
  const float _Complex fone = 1, fzero = 0;
  const int threads = lapack_begin();
  for (int64_t r = begin; r < end;) {
    const int64_t ob = r / p->m, i0 = r % p->m, rows = end - r < p->m - i0 ? end - r : p->m - i0;
    const int mi = (int)rows;
    char* c = p->c.p + elt * (size_t)(ob * p->c.sb + i0 * p->c.ld);
    for (int64_t bi = p->sum_batch ? 0 : ob; bi < (p->sum_batch ? p->nbat : ob + 1); ++bi) {
      const char* a = p->a.p + elt * (size_t)(bi * p->a.sb + i0 * (p->a.t ? 1 : p->a.ld));
      const char* b = p->b.p + elt * (size_t)(bi * p->b.sb);
      const bool acc = p->sum_batch && bi > 0;
      if (p->single)
        cgemm_(tb, ta, &ni, &mi, &ki, &fone, (const float _Complex*)b, &ldb, (const float _Complex*)a, &lda,
               acc ? &fone : &fzero, (float _Complex*)c, &ldc, 1, 1);
      else
        zgemm_(tb, ta, &ni, &mi, &ki, &one, (const zd_t*)b, &ldb, (const zd_t*)a, &lda, acc ? &one : &zero,
               (zd_t*)c, &ldc, 1, 1);
    }
    r += rows;
  }
  lapack_end(threads);
}

static tpurt_status_t zprod_run(tpurt_kernel_ctx_t* ctx, const zprod_t* p, const char* op) {
  const int64_t obat = p->sum_batch ? 1 : p->nbat, rows = obat * p->m;
  if (rows == 0 || p->n == 0) return TPURT_OK;
  if (p->k == 0 || p->nbat == 0) { /* an empty sum */
    for (int64_t bi = 0; bi < obat; ++bi)
      for (int64_t i = 0; i < p->m; ++i)
        memset(p->c.p + zprod_elt(p) * (size_t)(bi * p->c.sb + i * p->c.ld), 0, zprod_elt(p) * (size_t)p->n);
    return TPURT_OK;
  }
  if (p->m > INT32_MAX || p->k > INT32_MAX || p->n > INT32_MAX)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: a dimension of %lld x %lld x %lld exceeds 2^31 - 1", op,
                        (long long)p->m, (long long)p->k, (long long)p->n);
  const int64_t grain = (1 << 16) / (p->n * p->k * (p->sum_batch ? p->nbat : 1)) + 1;
  tpurt_parallel_for(ctx, rows, grain, zprod_rows, (void*)p);
  return TPURT_OK;
}

/* ---- complex matrix products: mm(self, mat2), bmm(self, mat2) ---- */

static tpurt_status_t cmm_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool batched) {
  const char* op = batched ? "bmm" : "mm";
  int nd = batched ? 3 : 2;
  const tpurt_tensor_t *a = tpurt_arg_tensor(call, 0), *b = tpurt_arg_tensor(call, 1), *out = &call->outputs[0];
  if (!a || !b || call->num_outputs < 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (self, mat2)", op);
  if (a->ndim != nd || b->ndim != nd || out->ndim != nd || !tpurt_dtype_is_complex(out->dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected %dD tensors and a complex output", op, nd);
  const int d = batched ? 1 : 0;
  zprod_t p = {.m = a->sizes[d], .k = a->sizes[d + 1], .n = b->sizes[d + 1], .nbat = batched ? a->sizes[0] : 1,
               .single = out->dtype == TPURT_DTYPE_COMPLEX64};
  if (b->sizes[d] != p.k || out->sizes[d] != p.m || out->sizes[d + 1] != p.n ||
      (batched && (b->sizes[0] != p.nbat || out->sizes[0] != p.nbat)))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: shapes do not match", op);
  const int64_t asb = d ? a->strides[0] : 0, bsb = d ? b->strides[0] : 0, osb = d ? out->strides[0] : 0;
  /* C in place where out is row-major in the product's precision */
  const bool out_direct = zmat_direct(out, p.m, p.n, out->strides[d], out->strides[d + 1], p.single, &p.c) && !p.c.t;
  const size_t need = zmat_need(a, p.nbat, p.m, p.k, a->strides[d], a->strides[d + 1], p.single) +
                      zmat_need(b, p.nbat, p.k, p.n, b->strides[d], b->strides[d + 1], p.single) +
                      (out_direct ? 0 : zprod_elt(&p) * (size_t)(p.nbat * p.m * p.n));
  char* scratch = need ? tpurt_kernel_scratch(ctx, need) : NULL;
  if (need && !scratch) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch memory", op);
  zmat_of(a, 0, asb, p.nbat, p.m, p.k, a->strides[d], a->strides[d + 1], p.single, &p.a, &scratch);
  zmat_of(b, 0, bsb, p.nbat, p.k, p.n, b->strides[d], b->strides[d + 1], p.single, &p.b, &scratch);
  if (out_direct) p.c.p = out->data, p.c.sb = osb;
  else p.c = (zmat_t){.p = scratch, .sb = p.m * p.n, .ld = p.n};
  TPURT_RETURN_IF_ERROR(zprod_run(ctx, &p, op));
  if (!out_direct)
    for (int64_t bi = 0; bi < p.nbat; ++bi)
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = 0; j < p.n; ++j)
          mat_zst(out, bi * osb + i * out->strides[d] + j * out->strides[d + 1], zprod_at(&p, (bi * p.m + i) * p.n + j));
  return TPURT_OK;
}

/* ---- complex::_linalg_solve_ex(A, B, left, check_errors) -> (result, LU, pivots, info) ----
 * Partial-pivoting LU in complex double, LAPACK's getrf conventions (1-based
 * pivots, info = first zero pivot), as the real kernel (lu.c) stores
 * them. B may be a (batch of) vector(s). Right solves: X A = B <=> A^T X^T = B^T. */

static tpurt_status_t solve_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t *A = tpurt_arg_tensor(call, 0), *B = tpurt_arg_tensor(call, 1);
  if (!A || !B || call->num_outputs < 4)
    return TPURT_STATUS(INVALID_ARGUMENT, "_linalg_solve_ex: expected (A, B) and 4 outputs");
  bool left = tpurt_arg_bool(call, 2, true);
  bool check = tpurt_arg_bool(call, 3, false);
  const tpurt_tensor_t *X = &call->outputs[0], *LU = &call->outputs[1], *P = &call->outputs[2],
                       *Info = &call->outputs[3];
  if (A->ndim < 2 || B->ndim < 1 || !tpurt_dtype_is_complex(X->dtype) || !tpurt_dtype_is_complex(LU->dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "_linalg_solve_ex: expected matrices and complex outputs");
  int64_t n = A->sizes[A->ndim - 1];
  bool vec = X->ndim == LU->ndim - 1; /* linalg_solve_is_vector_rhs */
  int nb = X->ndim - (vec ? 1 : 2);
  int64_t batch = 1;
  for (int d = 0; d < nb; ++d) batch *= X->sizes[d];
  int64_t r = vec ? n : X->sizes[nb], c = vec ? 1 : X->sizes[nb + 1];
  int64_t k = left ? c : r;
  zd_t* a = tpurt_kernel_scratch(ctx, sizeof(zd_t) * (size_t)(n * n + n * k + 1) + sizeof(int32_t) * (size_t)(n + 1));
  if (!a) return TPURT_STATUS(RESOURCE_EXHAUSTED, "_linalg_solve_ex: no scratch memory");
  zd_t* x = a + n * n;
  int32_t* piv = (int32_t*)(x + n * k + 1);
  int64_t idx[TPURT_MAX_DIMS];
  int lu_nb = LU->ndim - 2;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t rem = b;
    for (int d = nb - 1; d >= 0; --d) {
      idx[d] = X->sizes[d] ? rem % X->sizes[d] : 0;
      rem = X->sizes[d] ? rem / X->sizes[d] : 0;
    }
    mat_zload(A, mat_boff(A, 2, idx, nb), n, n, false, a, !left, false);
    int info = tpurt_linalg_zlu_factor(a, n, n, piv);
    /* LU/pivots/info have A's batch shape: written from the batch items they own */
    const int64_t* li = idx + (nb - lu_nb);
    mat_zstore(LU, mat_boff(LU, 2, li, lu_nb), n, n, false, a, false, false);
    for (int64_t i = 0; i < n; ++i) mat_set_int(P, mat_boff(P, 1, li, lu_nb) + i * P->strides[P->ndim - 1], piv[i]);
    mat_set_int(Info, mat_boff(Info, 0, li, lu_nb), info);
    if (info && check)
      return TPURT_STATUS(INVALID_ARGUMENT,
                          "torch.linalg.solve: The solver failed because the input matrix is singular.");
    mat_zload(B, mat_boff(B, vec ? 1 : 2, idx, nb), r, c, vec, x, !left, false);
    tpurt_linalg_zlu_solve(a, piv, n, x, k, false);
    mat_zstore(X, mat_boff(X, vec ? 1 : 2, idx, nb), r, c, vec, x, !left, false);
  }
  /* an empty result batch (B's batch dims hold a 0) still has A's LU, pivots and info */
  int64_t lu_batch = 1;
  for (int d = 0; d < lu_nb; ++d) lu_batch *= LU->sizes[d];
  for (int64_t b = 0; batch == 0 && b < lu_batch; ++b) {
    int64_t rem = b;
    for (int d = lu_nb - 1; d >= 0; --d) {
      idx[d] = LU->sizes[d] ? rem % LU->sizes[d] : 0;
      rem = LU->sizes[d] ? rem / LU->sizes[d] : 0;
    }
    mat_zload(A, mat_boff(A, 2, idx, lu_nb), n, n, false, a, !left, false);
    int info = tpurt_linalg_zlu_factor(a, n, n, piv);
    mat_zstore(LU, mat_boff(LU, 2, idx, lu_nb), n, n, false, a, false, false);
    for (int64_t i = 0; i < n; ++i) mat_set_int(P, mat_boff(P, 1, idx, lu_nb) + i * P->strides[P->ndim - 1], piv[i]);
    mat_set_int(Info, mat_boff(Info, 0, idx, lu_nb), info);
  }
  return TPURT_OK;
}

tpurt_status_t tpurt_linalg_complex_solve_ex(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return solve_run(ctx, call);
}
tpurt_status_t tpurt_linalg_eig(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return eig_run(ctx, call);
}
tpurt_status_t tpurt_linalg_complex_mm(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return cmm_run(ctx, call, false);
}
tpurt_status_t tpurt_linalg_complex_bmm(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return cmm_run(ctx, call, true);
}

/* ---- the complex matmul family: addmm, addmv, mv, baddbmm, addbmm ----
 * out = beta * self + alpha * (A @ B), each operand read through its strides as a batch of
 * matrices (vectors as one-column or one-row matrices), the products by cgemm or zgemm (above),
 * alpha and beta applied in complex double; beta == 0 ignores self (its NaNs included), as CPU does. alpha and beta come as real
 * scalars or, when complex, as 0-d complex tensors. */

typedef struct zview_t {
  const tpurt_tensor_t* t;
  int64_t sb, si, sj; /* element strides of batch, row, column (0: broadcast) */
} zview_t;

static zd_t zarg_scalar(const tpurt_op_call_t* call, int i, double dflt) {
  const tpurt_tensor_t* t = tpurt_arg_tensor(call, i);
  if (t) return mat_zld(t, 0);
  return tpurt_arg_double(call, i, dflt);
}

enum { ZMM_ADDMM, ZMM_ADDMV, ZMM_MV, ZMM_BADDBMM, ZMM_ADDBMM };

static zview_t zv_mat(const tpurt_tensor_t* t, bool batched) {
  int d = t->ndim;
  return (zview_t){t, batched ? t->strides[0] : 0, t->strides[d - 2], t->strides[d - 1]};
}

static tpurt_status_t zmm_family(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, int kind) {
  static const char* names[] = {"addmm", "addmv", "mv", "baddbmm", "addbmm"};
  const char* op = names[kind];
  bool has_self = kind != ZMM_MV;
  int a0 = has_self ? 1 : 0;
  const tpurt_tensor_t *self = has_self ? tpurt_arg_tensor(call, 0) : NULL, *ta = tpurt_arg_tensor(call, a0),
                       *tb = tpurt_arg_tensor(call, a0 + 1);
  if (!ta || !tb || (has_self && !self) || call->num_outputs < 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected its tensor operands and an output", op);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (!tpurt_dtype_is_complex(out->dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a complex output", op);
  zd_t beta = has_self ? zarg_scalar(call, 3, 1.0) : 0.0, alpha = has_self ? zarg_scalar(call, 4, 1.0) : 1.0;
  zview_t A, B;
  int64_t nbat = 1, m, k, n;
  bool sum_batch = kind == ZMM_ADDBMM;
  switch (kind) {
    case ZMM_ADDMM:
      A = zv_mat(ta, false), B = zv_mat(tb, false);
      m = ta->sizes[0], k = ta->sizes[1], n = tb->sizes[1];
      break;
    case ZMM_ADDMV:
    case ZMM_MV:
      A = zv_mat(ta, false), B = (zview_t){tb, 0, tb->strides[0], 0};
      m = ta->sizes[0], k = ta->sizes[1], n = 1;
      break;
    case ZMM_BADDBMM:
    case ZMM_ADDBMM:
      A = zv_mat(ta, true), B = zv_mat(tb, true);
      nbat = ta->sizes[0], m = ta->sizes[1], k = ta->sizes[2], n = tb->sizes[2];
      break;
    default:
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: unknown matmul kind", op);
  }
  int64_t obat = sum_batch ? 1 : nbat;
  if (tpurt_tensor_numel(out) != obat * m * n)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: the output has %lld elements, expected %lld", op,
                        (long long)tpurt_tensor_numel(out), (long long)(obat * m * n));
  zprod_t prod = {.nbat = nbat, .m = m, .k = k, .n = n, .sum_batch = sum_batch,
                  .single = out->dtype == TPURT_DTYPE_COMPLEX64};
  const size_t need = zmat_need(A.t, nbat, m, k, A.si, A.sj, prod.single) +
                      zmat_need(B.t, nbat, k, n, B.si, B.sj, prod.single) + zprod_elt(&prod) * (size_t)(obat * m * n + 1);
  char* scratch = tpurt_kernel_scratch(ctx, need);
  if (!scratch) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch memory", op);
  zmat_of(A.t, 0, A.sb, nbat, m, k, A.si, A.sj, prod.single, &prod.a, &scratch);
  zmat_of(B.t, 0, B.sb, nbat, k, n, B.si, B.sj, prod.single, &prod.b, &scratch);
  prod.c = (zmat_t){.p = scratch, .sb = m * n, .ld = n};
  TPURT_RETURN_IF_ERROR(zprod_run(ctx, &prod, op));
  /* out element e (row-major over out's shape) = beta * self (broadcast) + alpha * (the product's element e) */
  int64_t idx[TPURT_MAX_DIMS];
  int od = out->ndim;
  for (int64_t e = 0; e < obat * m * n; ++e) {
    int64_t rem = e, oo = 0;
    for (int d = od - 1; d >= 0; --d) {
      idx[d] = out->sizes[d] ? rem % out->sizes[d] : 0;
      rem = out->sizes[d] ? rem / out->sizes[d] : 0;
      oo += idx[d] * out->strides[d];
    }
    zd_t v = alpha * zprod_at(&prod, e);
    if (has_self && beta != 0) {
      int64_t so = 0;
      for (int d = 0; d < self->ndim; ++d) {
        int xd = d + od - self->ndim;
        if (xd >= 0 && self->sizes[d] != 1) so += idx[xd] * self->strides[d];
      }
      v += beta * mat_zld(self, so);
    }
    mat_zst(out, oo, v);
  }
  return TPURT_OK;
}

tpurt_status_t tpurt_linalg_complex_addmm(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return zmm_family(ctx, call, ZMM_ADDMM);
}
tpurt_status_t tpurt_linalg_complex_addmv(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  /* "mv" shares the entry: (self, vec) has no matrix third argument */
  const tpurt_tensor_t* t2 = tpurt_arg_tensor(call, 2);
  return zmm_family(ctx, call, t2 ? ZMM_ADDMV : ZMM_MV);
}
tpurt_status_t tpurt_linalg_complex_baddbmm(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return zmm_family(ctx, call, ZMM_BADDBMM);
}
tpurt_status_t tpurt_linalg_complex_addbmm(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return zmm_family(ctx, call, ZMM_ADDBMM);
}
