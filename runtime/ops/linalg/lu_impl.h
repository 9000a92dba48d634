/* LU with partial pivoting and its solves for one element type, included by
 * lu.c (LU_T = double, LU_SUF = d) and complex.c (double _Complex, z): one
 * algorithm, so the real and complex solvers agree. The includer defines
 * LU_T, LU_ABS (|x| as a double) and LU_SUF. */
#define LU_CAT2(a, b) a##_##b
#define LU_CAT(a, b) LU_CAT2(a, b)
#define LU_FN(name) LU_CAT(name, LU_SUF)

/* Swaps rows i and p (of width w) of the row-major a. */
static void LU_FN(lu_swap_rows)(LU_T* a, int64_t w, int64_t i, int64_t p) {
  for (int64_t j = 0; j < w; ++j) {
    LU_T t = a[i * w + j];
    a[i * w + j] = a[p * w + j];
    a[p * w + j] = t;
  }
}

/* In-place LU of the m x n row-major a with row pivoting (LAPACK getrf: first
 * largest |a|); piv[k] is the 1-based row swapped with k. Returns info (0 or the
 * 1-based index of the first zero pivot). A pivot below `tiny` becomes `tiny`
 * (inverse iteration factors a singular a - lambda I); tiny 0 is getrf's. */
static int LU_FN(lu_factor)(LU_T* a, int64_t m, int64_t n, int32_t* piv, double tiny) {
  int64_t k_end = m < n ? m : n;
  int info = 0;
  for (int64_t k = 0; k < k_end; ++k) {
    int64_t p = k;
    double best = LU_ABS(a[k * n + k]);
    for (int64_t i = k + 1; i < m; ++i)
      if (LU_ABS(a[i * n + k]) > best) best = LU_ABS(a[i * n + k]), p = i;
    piv[k] = (int32_t)(p + 1);
    if (p != k) LU_FN(lu_swap_rows)(a, n, k, p);
    if (LU_ABS(a[k * n + k]) < tiny) a[k * n + k] = tiny;
    LU_T d = a[k * n + k];
    if (d == 0) {
      if (!info) info = (int)(k + 1);
      continue;
    }
    for (int64_t i = k + 1; i < m; ++i) {
      LU_T l = a[i * n + k] / d;
      a[i * n + k] = l;
      if (l != 0)
        for (int64_t j = k + 1; j < n; ++j) a[i * n + j] -= l * a[k * n + j];
    }
  }
  return info;
}

/* Solves op(A) X = B in place in b (n x k row-major) from A's LU (n x n) and
 * pivots; trans: A^T X = B. */
static void LU_FN(lu_solve)(const LU_T* lu, const int32_t* piv, int64_t n, LU_T* b, int64_t k, bool trans) {
  if (!trans) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t p = piv[i] - 1;
      if (p != i) LU_FN(lu_swap_rows)(b, k, i, p);
    }
    for (int64_t i = 0; i < n; ++i) /* L y = b (unit diagonal) */
      for (int64_t r = 0; r < i; ++r) {
        LU_T l = lu[i * n + r];
        if (l != 0)
          for (int64_t j = 0; j < k; ++j) b[i * k + j] -= l * b[r * k + j];
      }
    for (int64_t i = n - 1; i >= 0; --i) { /* U x = y */
      for (int64_t r = i + 1; r < n; ++r) {
        LU_T u = lu[i * n + r];
        if (u != 0)
          for (int64_t j = 0; j < k; ++j) b[i * k + j] -= u * b[r * k + j];
      }
      for (int64_t j = 0; j < k; ++j) b[i * k + j] /= lu[i * n + i];
    }
    return;
  }
  /* A^T = U^T L^T P^T: U^T z = b, L^T w = z, x = P w */
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < i; ++r) {
      LU_T u = lu[r * n + i];
      if (u != 0)
        for (int64_t j = 0; j < k; ++j) b[i * k + j] -= u * b[r * k + j];
    }
    for (int64_t j = 0; j < k; ++j) b[i * k + j] /= lu[i * n + i];
  }
  for (int64_t i = n - 1; i >= 0; --i)
    for (int64_t r = i + 1; r < n; ++r) {
      LU_T l = lu[r * n + i];
      if (l != 0)
        for (int64_t j = 0; j < k; ++j) b[i * k + j] -= l * b[r * k + j];
    }
  for (int64_t i = n - 1; i >= 0; --i) {
    int64_t p = piv[i] - 1;
    if (p != i) LU_FN(lu_swap_rows)(b, k, i, p);
  }
}
