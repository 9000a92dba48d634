/* Minimal C test harness: CHECK macros and a closing "N passed, N failed" line. */
#ifndef TPURT_TEST_UTIL_H_
#define TPURT_TEST_UTIL_H_
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tpurt/tpurt.h"

static int g_test_passed, g_test_failed;

/* The tests' one random source: xorshift64, fixed seed, so every run sees the same data. */
static uint64_t g_test_rng = 88172645463325252ull;
static inline uint64_t test_rand_u64(void) {
  g_test_rng ^= g_test_rng << 13;
  g_test_rng ^= g_test_rng >> 7;
  g_test_rng ^= g_test_rng << 17;
  return g_test_rng;
}
/* Uniform in [0, 1) with 53 random bits. */
static inline double test_rand_unit(void) { return (double)(test_rand_u64() >> 11) / 9007199254740992.0; }

/* n random elements of dt (malloc'ed): floats uniform in [-1, 1), integers in (-10, 10), bools. */
static inline void* test_rand_buf(tpurt_dtype_t dt, int64_t n) {
  size_t es = tpurt_dtype_size(dt);
  char* p = (char*)malloc((size_t)(n > 0 ? n : 1) * es);
  for (int64_t i = 0; i < n; ++i) {
    double r = 2.0 * test_rand_unit() - 1.0;
    if (dt == TPURT_DTYPE_BOOL) tpurt_dtype_store_i64(dt, p + i * es, r > 0);
    else if (tpurt_dtype_is_integral(dt)) tpurt_dtype_store_i64(dt, p + i * es, (int64_t)(r * 10));
    else tpurt_dtype_store_f64(dt, p + i * es, r);
  }
  return p;
}

/* max |x - y| / (|y| + scale) over n elements of two buffers laid out alike; equal values (equal
 * infinities too) and NaN against NaN count as no error, any other NaN as the worst. */
static inline double test_max_err(tpurt_dtype_t dt, const void* x, const void* y, int64_t n, double scale) {
  double worst = 0;
  size_t es = tpurt_dtype_size(dt);
  for (int64_t i = 0; i < n; ++i) {
    double a = tpurt_dtype_load_f64(dt, (const char*)x + i * es);
    double b = tpurt_dtype_load_f64(dt, (const char*)y + i * es);
    if (a == b || (isnan(a) && isnan(b))) continue;
    double e = fabs(a - b) / (fabs(b) + scale);
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (cond) ++g_test_passed;                                               \
    else { ++g_test_failed; fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } \
  } while (0)

#define CHECK_OK(expr)                                                       \
  do {                                                                       \
    tpurt_status_t s_ = (expr);                                              \
    if (!s_) ++g_test_passed;                                                \
    else { ++g_test_failed; fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr, \
                                    tpurt_status_code_name(tpurt_status_code(s_)), tpurt_status_message(s_)); \
           tpurt_status_free(s_); } \
  } while (0)

#define CHECK_STATUS(expr, code)                                             \
  do {                                                                       \
    tpurt_status_t s_ = (expr);                                              \
    if (tpurt_status_code(s_) == TPURT_STATUS_##code) ++g_test_passed;       \
    else { ++g_test_failed; fprintf(stderr, "%s:%d: %s -> %s, expected %s\n", __FILE__, __LINE__, #expr, \
                                    tpurt_status_code_name(tpurt_status_code(s_)), #code); } \
    tpurt_status_free(s_);                                                   \
  } while (0)

/* A contiguous (row-major) tensor over data. */
static inline tpurt_tensor_t test_tensor_dense(tpurt_dtype_t dt, void* data, int ndim, const int64_t* sizes) {
  tpurt_tensor_t t = {.data = data, .dtype = dt, .ndim = ndim};
  int64_t st = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    t.sizes[d] = sizes[d];
    t.strides[d] = st;
    st *= sizes[d];
  }
  return t;
}

/* Runs op `name` from the op table: its fast kernel, or its reference one when `ref`. */
static inline tpurt_status_t test_op_run(const char* name, bool ref, tpurt_arg_t* args, int nargs,
                                         tpurt_tensor_t* outs, int nout) {
  const tpurt_op_def_t* def = tpurt_op_lookup(name);
  if (!def) return TPURT_STATUS(NOT_FOUND, "no kernel %s", name);
  tpurt_op_call_t call = {.name = name, .overload = "", .num_args = nargs, .args = args, .num_outputs = nout,
                          .outputs = outs};
  return tpurt_kernel_run(ref ? def->reference : def->fn, &call);
}

static inline int test_finish(const char* name) {
  printf("%s: %d passed, %d failed\n", name, g_test_passed, g_test_failed);
  return g_test_failed ? 1 : 0;
}
#endif
