/* The symmetric indefinite factorization and its solve for one element type,
 * included by ldl.c twice: LDL_T = double (LAPACK dsytf2 / dsytrs) and
 * double _Complex (zsytf2 / zsytrs, or zhetf2 / zhetrs when herm). One
 * algorithm, uplo 'L', Bunch-Kaufman pivoting, so LD, the 1-based pivots
 * (negative for a 2x2 block) and info match PyTorch CPU. The includer defines
 * LDL_T, LDL_SUF, LDL_ABS1 (LAPACK's |x| for pivoting: |re| + |im| for complex),
 * LDL_ABS (the modulus), LDL_RE and LDL_CONJ (both the identity for real), and
 * LDL_LD / LDL_ST, an element of a tensor loaded as / stored from LDL_T; this
 * header undefines them at its end, ready for the next element type. */
#define LDL_CAT2(a, b) a##_##b
#define LDL_CAT(a, b) LDL_CAT2(a, b)
#define LDL_FN(name) LDL_CAT(name, LDL_SUF)

#define A_(i, j) a[(i) * n + (j)] /* 0-based, row-major */
#define CJ(x) (herm ? LDL_CONJ(x) : (x))

static int64_t LDL_FN(ldl_iamax)(const LDL_T* x, int64_t count, int64_t stride) {
  int64_t best = 0;
  double bv = -1;
  for (int64_t i = 0; i < count; ++i)
    if (LDL_ABS1(x[i * stride]) > bv) bv = LDL_ABS1(x[i * stride]), best = i;
  return best;
}

/* A = L D L^T (L D L^H when herm) on the lower triangle of the n x n row-major a; piv 1-based. Returns info. */
static int64_t LDL_FN(ldl_factor)(LDL_T* a, int64_t n, int64_t* piv, bool herm) {
  const double alpha = (1.0 + sqrt(17.0)) / 8.0;
  int64_t info = 0;
  for (int64_t k = 0; k < n;) {
    int64_t kstep = 1, kp = k, imax = k;
    double absakk = herm ? fabs(LDL_RE(A_(k, k))) : LDL_ABS1(A_(k, k)), colmax = 0;
    if (k < n - 1) {
      imax = k + 1 + LDL_FN(ldl_iamax)(&A_(k + 1, k), n - k - 1, n);
      colmax = LDL_ABS1(A_(imax, k));
    }
    if (fmax(absakk, colmax) == 0 || isnan(absakk)) {
      if (!info) info = k + 1;
      kp = k;
      if (herm) A_(k, k) = LDL_RE(A_(k, k));
    } else {
      if (absakk >= alpha * colmax) {
        kp = k;
      } else {
        int64_t jmax = k + LDL_FN(ldl_iamax)(&A_(imax, k), imax - k, 1); /* row imax, columns k .. imax - 1 */
        double rowmax = LDL_ABS1(A_(imax, jmax));
        if (imax < n - 1) {
          jmax = imax + 1 + LDL_FN(ldl_iamax)(&A_(imax + 1, imax), n - imax - 1, n);
          rowmax = fmax(rowmax, LDL_ABS1(A_(jmax, imax)));
        }
        double absamax = herm ? fabs(LDL_RE(A_(imax, imax))) : LDL_ABS1(A_(imax, imax));
        if (absakk >= alpha * colmax * (colmax / rowmax)) kp = k;
        else if (absamax >= alpha * rowmax) kp = imax;
        else kp = imax, kstep = 2;
      }
      int64_t kk = k + kstep - 1;
      if (kp != kk) { /* swap rows and columns kk and kp of the trailing lower triangle */
        for (int64_t i = kp + 1; i < n; ++i) {
          LDL_T t = A_(i, kk);
          A_(i, kk) = A_(i, kp), A_(i, kp) = t;
        }
        for (int64_t j = kk + 1; j < kp; ++j) {
          LDL_T t = CJ(A_(j, kk));
          A_(j, kk) = CJ(A_(kp, j)), A_(kp, j) = t;
        }
        if (herm) A_(kp, kk) = LDL_CONJ(A_(kp, kk));
        LDL_T t = A_(kk, kk);
        A_(kk, kk) = A_(kp, kp), A_(kp, kp) = t;
        if (herm) A_(kk, kk) = LDL_RE(A_(kk, kk)), A_(kp, kp) = LDL_RE(A_(kp, kp));
        if (kstep == 2) {
          if (herm) A_(k, k) = LDL_RE(A_(k, k));
          t = A_(k + 1, k);
          A_(k + 1, k) = A_(kp, k), A_(kp, k) = t;
        }
      } else if (herm) {
        A_(k, k) = LDL_RE(A_(k, k));
        if (kstep == 2) A_(k + 1, k + 1) = LDL_RE(A_(k + 1, k + 1));
      }
      if (kstep == 1) {
        if (k < n - 1) {
          LDL_T d11 = 1.0 / A_(k, k);
          for (int64_t j = k + 1; j < n; ++j) { /* syr / her: A -= d11 x x^T (x x^H) on the lower triangle */
            for (int64_t i = j; i < n; ++i) A_(i, j) -= d11 * A_(i, k) * CJ(A_(j, k));
            if (herm) A_(j, j) = LDL_RE(A_(j, j));
          }
          for (int64_t i = k + 1; i < n; ++i) A_(i, k) *= d11;
        }
      } else if (k < n - 2) {
        if (!herm) {
          LDL_T d21 = A_(k + 1, k), d11 = A_(k + 1, k + 1) / d21, d22 = A_(k, k) / d21;
          LDL_T t = 1.0 / (d11 * d22 - 1.0);
          d21 = t / d21;
          for (int64_t j = k + 2; j < n; ++j) {
            LDL_T wk = d21 * (d11 * A_(j, k) - A_(j, k + 1));
            LDL_T wkp1 = d21 * (d22 * A_(j, k + 1) - A_(j, k));
            for (int64_t i = j; i < n; ++i) A_(i, j) -= A_(i, k) * wk + A_(i, k + 1) * wkp1;
            A_(j, k) = wk, A_(j, k + 1) = wkp1;
          }
        } else { /* zhetf2's 2x2 step: D's off-diagonal d21 is complex, its diagonal real */
          double d = LDL_ABS(A_(k + 1, k));
          double d11 = LDL_RE(A_(k + 1, k + 1)) / d, d22 = LDL_RE(A_(k, k)) / d;
          double tt = 1.0 / (d11 * d22 - 1.0);
          LDL_T d21 = A_(k + 1, k) / d;
          d = tt / d;
          for (int64_t j = k + 2; j < n; ++j) {
            LDL_T wk = d * (d11 * A_(j, k) - d21 * A_(j, k + 1));
            LDL_T wkp1 = d * (d22 * A_(j, k + 1) - LDL_CONJ(d21) * A_(j, k));
            for (int64_t i = j; i < n; ++i) A_(i, j) -= A_(i, k) * LDL_CONJ(wk) + A_(i, k + 1) * LDL_CONJ(wkp1);
            A_(j, k) = wk, A_(j, k + 1) = wkp1;
            A_(j, j) = LDL_RE(A_(j, j));
          }
        }
      }
    }
    if (kstep == 1) piv[k] = kp + 1;
    else piv[k] = piv[k + 1] = -(kp + 1);
    k += kstep;
  }
  return info;
}

/* sytrs / hetrs, uplo 'L': solves with the factor in a (n x n row-major) for b (n x r row-major) */
static void LDL_FN(ldl_solve)(const LDL_T* a, int64_t n, const int64_t* piv, LDL_T* b, int64_t r, bool herm) {
#define B_(i, j) b[(i) * r + (j)]
#define SWAP_ROWS(p, q)                                                  \
  do {                                                                   \
    if ((p) != (q))                                                      \
      for (int64_t j_ = 0; j_ < r; ++j_) {                               \
        LDL_T t_ = B_(p, j_);                                            \
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
      LDL_T akm1k = A_(k + 1, k), akm1 = A_(k, k) / CJ(akm1k), ak = A_(k + 1, k + 1) / akm1k;
      LDL_T denom = akm1 * ak - 1.0;
      for (int64_t j = 0; j < r; ++j) {
        LDL_T bkm1 = B_(k, j) / CJ(akm1k), bk = B_(k + 1, j) / akm1k;
        B_(k, j) = (ak * bkm1 - bk) / denom;
        B_(k + 1, j) = (akm1 * bk - bkm1) / denom;
      }
      k += 2;
    }
  }
  for (int64_t k = n - 1; k >= 0;) { /* L^T x = y (L^H when herm) */
    if (piv[k] > 0) {
      for (int64_t j = 0; j < r; ++j)
        for (int64_t i = k + 1; i < n; ++i) B_(k, j) -= CJ(A_(i, k)) * B_(i, j);
      SWAP_ROWS(k, piv[k] - 1);
      k -= 1;
    } else {
      for (int64_t j = 0; j < r; ++j)
        for (int64_t i = k + 1; i < n; ++i) {
          B_(k, j) -= CJ(A_(i, k)) * B_(i, j);
          B_(k - 1, j) -= CJ(A_(i, k - 1)) * B_(i, j);
        }
      SWAP_ROWS(k, -piv[k] - 1);
      k -= 2;
    }
  }
#undef SWAP_ROWS
#undef B_
}

/* One batch element of linalg_ldl_factor_ex: the lower triangle of the tensor A at
 * element offset oa into the scratch a, factored, LD written at ol. Returns info. */
static int64_t LDL_FN(ldl_factor_at)(const tpurt_tensor_t* A, int64_t oa, const tpurt_tensor_t* LD, int64_t ol,
                                     LDL_T* a, int64_t n, int64_t* piv, bool herm) {
  const int64_t ar = A->strides[A->ndim - 2], ac = A->strides[A->ndim - 1];
  const int64_t lr = LD->strides[LD->ndim - 2], lc = LD->strides[LD->ndim - 1];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) A_(i, j) = j <= i ? LDL_LD(A, oa + i * ar + j * ac) : 0;
  int64_t info = 0;
  if (!LDL_FN(lapack_ldl_factor)(a, n, piv, herm, &info)) info = LDL_FN(ldl_factor)(a, n, piv, herm);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) LDL_ST(LD, ol + i * lr + j * lc, j <= i ? A_(i, j) : 0);
  return info;
}

/* One batch element of linalg_ldl_solve: LD at ol and B at ob into the scratches a and b
 * (n x r), solved, X written at ox. */
static void LDL_FN(ldl_solve_at)(const tpurt_tensor_t* LD, int64_t ol, const tpurt_tensor_t* B, int64_t ob,
                                 const tpurt_tensor_t* X, int64_t ox, LDL_T* a, LDL_T* b, int64_t n, int64_t r,
                                 const int64_t* piv, bool herm) {
  const int64_t lr = LD->strides[LD->ndim - 2], lc = LD->strides[LD->ndim - 1];
  const int64_t br = B->strides[B->ndim - 2], bc = B->strides[B->ndim - 1];
  const int64_t xr = X->strides[X->ndim - 2], xc = X->strides[X->ndim - 1];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) A_(i, j) = LDL_LD(LD, ol + i * lr + j * lc);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < r; ++j) b[i * r + j] = LDL_LD(B, ob + i * br + j * bc);
  if (!LDL_FN(lapack_ldl_solve)(a, n, piv, b, r, herm)) LDL_FN(ldl_solve)(a, n, piv, b, r, herm);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < r; ++j) LDL_ST(X, ox + i * xr + j * xc, b[i * r + j]);
}

#undef CJ
#undef A_
#undef LDL_FN
#undef LDL_CAT
#undef LDL_CAT2
#undef LDL_T
#undef LDL_SUF
#undef LDL_ABS1
#undef LDL_ABS
#undef LDL_RE
#undef LDL_CONJ
#undef LDL_LD
#undef LDL_ST
