/* _tpu_unique_dim_order (ops/reduce/unique_dim.c): the slice order of unique_dim, as PyTorch CPU's
 * std::sort makes it. Known answers (from PyTorch CPU: rows with NaN come out where its sort leaves
 * them), sortedness and permutation checks on random rows past the insertion-sort threshold, and
 * the errors for bad input. tests/test_pytorch_suites_findings_sort_and_select.py compares the
 * whole of unique_dim with PyTorch CPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/reduce/reduce_ops.h"
#include "test_util.h"


static tpurt_status_t order(bool ref, tpurt_tensor_t* rows, int64_t* perm, int64_t n) {
  tpurt_tensor_t out = test_tensor_dense(TPURT_DTYPE_INT64, perm, 1, (int64_t[]){n});
  tpurt_arg_t a = {.kind = TPURT_ARG_TENSOR, .v.tensor = rows};
  return test_op_run("_tpu_unique_dim_order", ref, &a, 1, &out, 1);
}

static void known_1d(const double* x, int64_t n, const int64_t* want) {
  tpurt_tensor_t rows = test_tensor_dense(TPURT_DTYPE_FLOAT64, (void*)x, 2, (int64_t[]){n, 1});
  int64_t perm[16];
  CHECK_OK(order(false, &rows, perm, n));
  CHECK(memcmp(perm, want, sizeof(int64_t) * (size_t)n) == 0);
}

int main(void) {
  /* PyTorch CPU: unique([nan, 0, 0, nan, nan, 1], dim=0) keeps this order; [1, nan, 0] gives [0, 1, nan] */
  known_1d((double[]){NAN, 0, 0, NAN, NAN, 1}, 6, (int64_t[]){0, 1, 2, 3, 4, 5});
  known_1d((double[]){1, NAN, 0}, 3, (int64_t[]){2, 0, 1});
  known_1d((double[]){3, 1, 2}, 3, (int64_t[]){1, 2, 0});

  /* random int32 rows: a permutation, rows in lexicographic order */
  for (int trial = 0; trial < 20; ++trial) {
    int64_t n = 1 + (int64_t)(test_rand_u64() % 3000), m = 1 + (int64_t)(test_rand_u64() % 3);
    int32_t* x = malloc(sizeof(int32_t) * (size_t)(n * m));
    int64_t* perm = malloc(sizeof(int64_t) * (size_t)n);
    char* seen = calloc((size_t)n, 1);
    for (int64_t i = 0; i < n * m; ++i) x[i] = (int32_t)(test_rand_u64() % 4);
    tpurt_tensor_t rows = test_tensor_dense(TPURT_DTYPE_INT32, x, 2, (int64_t[]){n, m});
    CHECK_OK(order(trial & 1, &rows, perm, n));
    bool perm_ok = true, sorted_ok = true;
    for (int64_t i = 0; i < n; ++i) {
      if (perm[i] < 0 || perm[i] >= n || seen[perm[i]]) { perm_ok = false; break; }
      seen[perm[i]] = 1;
      if (i) {
        const int32_t *a = x + perm[i - 1] * m, *b = x + perm[i] * m;
        int c = 0;
        for (int64_t k = 0; k < m && !c; ++k) c = (a[k] > b[k]) - (a[k] < b[k]);
        if (c > 0) sorted_ok = false;
      }
    }
    CHECK(perm_ok);
    CHECK(sorted_ok);
    free(x);
    free(perm);
    free(seen);
  }

  /* NaN-heavy rows past the threshold: still a permutation (the sort's loops stay in bounds) */
  {
    enum { N = 5000 };
    double* x = malloc(sizeof(double) * N);
    int64_t* perm = malloc(sizeof(int64_t) * N);
    char* seen = calloc(N, 1);
    for (int i = 0; i < N; ++i) x[i] = (test_rand_u64() % 3) ? NAN : (double)(test_rand_u64() % 5);
    tpurt_tensor_t rows = test_tensor_dense(TPURT_DTYPE_FLOAT64, x, 2, (int64_t[]){N, 1});
    CHECK_OK(order(false, &rows, perm, N));
    bool perm_ok = true;
    for (int i = 0; i < N && perm_ok; ++i) {
      if (perm[i] < 0 || perm[i] >= N || seen[perm[i]]) perm_ok = false;
      else seen[perm[i]] = 1;
    }
    CHECK(perm_ok);
    free(x);
    free(perm);
    free(seen);
  }

  /* bad input */
  {
    double x[4] = {0};
    int64_t perm[4];
    tpurt_tensor_t one_d = test_tensor_dense(TPURT_DTYPE_FLOAT64, x, 1, (int64_t[]){4});
    CHECK_STATUS(order(false, &one_d, perm, 4), INVALID_ARGUMENT);
    tpurt_tensor_t rows = test_tensor_dense(TPURT_DTYPE_FLOAT64, x, 2, (int64_t[]){2, 2});
    CHECK_STATUS(order(false, &rows, perm, 3), INVALID_ARGUMENT); /* perm of the wrong length */
    tpurt_tensor_t cx = test_tensor_dense(TPURT_DTYPE_COMPLEX64, x, 2, (int64_t[]){2, 1});
    CHECK_STATUS(order(false, &cx, perm, 2), INVALID_ARGUMENT);
  }
  return test_finish("test_unique_dim");
}
