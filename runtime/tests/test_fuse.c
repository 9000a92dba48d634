/* DeferAndFuse (exec/defer, compiler/fuse_plan.c): a fused chain gives exactly the unfused (Strict)
 * results; dead intermediates are skipped and live ones written; views that
 * alias without being identical cut the chain; errors surface at sync. */
#include <math.h>
#include <string.h>

#include "test_util.h"

static tpurt_device_t* g_dev;

static tpurt_tensor_t vec(void* data, int64_t n, tpurt_dtype_t dt) {
  tpurt_tensor_t t;
  memset(&t, 0, sizeof(t));
  t.data = data;
  t.dtype = dt;
  t.ndim = 1;
  t.sizes[0] = n;
  t.strides[0] = 1;
  return t;
}

static void* dalloc(size_t bytes) {
  void* p = NULL;
  tpurt_status_t s = tpurt_memory_allocate(g_dev, NULL, bytes, &p);
  CHECK(s == NULL);
  tpurt_status_free(s);
  return p;
}

/* out = a <op> b (b a tensor, or a double scalar when bt is NULL) */
static void binary(const char* op, const tpurt_tensor_t* out, const tpurt_tensor_t* a,
                   const tpurt_tensor_t* bt, double b) {
  tpurt_arg_t args[3];
  memset(args, 0, sizeof(args));
  args[0].kind = TPURT_ARG_TENSOR;
  args[0].v.tensor = a;
  if (bt) {
    args[1].kind = TPURT_ARG_TENSOR;
    args[1].v.tensor = bt;
  } else {
    args[1].kind = TPURT_ARG_DOUBLE;
    args[1].v.d = b;
  }
  args[2].kind = TPURT_ARG_INT;
  args[2].v.i = 1; /* alpha (add/sub) */
  int nargs = (strcmp(op, "add") == 0 || strcmp(op, "sub") == 0) ? 3 : 2;
  tpurt_op_call_t call = {op, "Tensor", nargs, args, 1, out};
  CHECK_OK(tpurt_queue_submit_kernel(tpurt_device_default_queue(g_dev), tpurt_op_lookup(op), &call));
}

static void unary(const char* op, const tpurt_tensor_t* out, const tpurt_tensor_t* a) {
  tpurt_arg_t arg;
  memset(&arg, 0, sizeof(arg));
  arg.kind = TPURT_ARG_TENSOR;
  arg.v.tensor = a;
  tpurt_op_call_t call = {op, "", 1, &arg, 1, out};
  CHECK_OK(tpurt_queue_submit_kernel(tpurt_device_default_queue(g_dev), tpurt_op_lookup(op), &call));
}

/* A 10-op chain over x into a fresh output; intermediates freed as Python
 * would free temporaries (right after their consumer is queued). Returns the
 * output's device pointer. */
static void* chain10(void* x, void* b, int64_t n, bool keep_third, void** out_third) {
  size_t bytes = (size_t)n * 4;
  tpurt_tensor_t tx = vec(x, n, TPURT_DTYPE_FLOAT32), tb = vec(b, n, TPURT_DTYPE_FLOAT32);
  void* prev = NULL;
  tpurt_tensor_t cur = tx;
  for (int k = 0; k < 10; ++k) {
    void* o = dalloc(bytes);
    tpurt_tensor_t to = vec(o, n, TPURT_DTYPE_FLOAT32);
    switch (k) {
      case 0: binary("mul", &to, &cur, NULL, 2.0); break;
      case 1: binary("add", &to, &cur, &tb, 0); break;
      case 2: unary("exp", &to, &cur); break;
      case 3: binary("sub", &to, &cur, NULL, 1.0); break;
      case 4: binary("div", &to, &cur, NULL, 3.0); break;
      case 5: unary("sigmoid", &to, &cur); break;
      case 6: binary("mul", &to, &cur, &tx, 0); break;
      case 7: unary("tanh", &to, &cur); break;
      case 8: binary("add", &to, &cur, NULL, 0.5); break;
      default: unary("relu", &to, &cur); break;
    }
    if (prev && !(keep_third && k == 3)) tpurt_memory_free(g_dev, prev);
    if (keep_third && k == 2) *out_third = o;
    prev = o;
    cur = to;
  }
  return prev;
}

static void test_chain(int64_t n) {
  size_t bytes = (size_t)n * 4;
  float* hx = malloc(bytes);
  float* hb = malloc(bytes);
  float* r_strict = malloc(bytes);
  float* r_fused = malloc(bytes);
  float* r_plain = malloc(bytes);
  float* third = malloc(bytes);
  float* third_s = malloc(bytes);
  for (int64_t i = 0; i < n; ++i) {
    hx[i] = (float)(test_rand_unit() * 4 - 2);
    hb[i] = (float)(test_rand_unit() - 0.5);
  }
  void* x = dalloc(bytes);
  void* b = dalloc(bytes);
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, x, hx, bytes));
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, b, hb, bytes));

  tpurt_exec_mode_set(TPURT_EXEC_STRICT);
  void* t3 = NULL;
  void* o = chain10(x, b, n, true, &t3);
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, r_strict, o, bytes));
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, third_s, t3, bytes));
  tpurt_memory_free(g_dev, o);
  tpurt_memory_free(g_dev, t3);

  /* Fused, every intermediate dead: one kernel, nine stores skipped. */
  tpurt_exec_mode_set(TPURT_EXEC_DEFER_AND_FUSE);
  tpurt_fuse_stats_reset();
  o = chain10(x, b, n, false, NULL);
  CHECK_OK(tpurt_device_synchronize(g_dev));
  tpurt_fuse_stats_t st;
  tpurt_fuse_stats_get(&st);
  CHECK(st.ops_recorded == 10);
  CHECK(st.kernels_launched == 1);
  CHECK(st.fused_groups == 1 && st.fused_ops == 10);
  CHECK(st.stores_skipped == 9);
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, r_fused, o, bytes));
  CHECK(memcmp(r_fused, r_strict, bytes) == 0);
  tpurt_memory_free(g_dev, o);

  /* Liveness: the third result stays referenced -> written, and exact. */
  tpurt_fuse_stats_reset();
  t3 = NULL;
  o = chain10(x, b, n, true, &t3);
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, r_fused, o, bytes));
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, third, t3, bytes));
  tpurt_fuse_stats_get(&st);
  CHECK(st.kernels_launched == 1 && st.stores_skipped == 8);
  CHECK(memcmp(r_fused, r_strict, bytes) == 0);
  CHECK(memcmp(third, third_s, bytes) == 0);
  tpurt_memory_free(g_dev, o);
  tpurt_memory_free(g_dev, t3);

  /* Fusion off: still deferred, ten kernels, same bytes. */
  tpurt_fuse_set_enabled(false);
  tpurt_fuse_stats_reset();
  o = chain10(x, b, n, false, NULL);
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, r_plain, o, bytes));
  tpurt_fuse_stats_get(&st);
  CHECK(st.kernels_launched == 10 && st.fused_groups == 0);
  CHECK(memcmp(r_plain, r_strict, bytes) == 0);
  tpurt_memory_free(g_dev, o);
  tpurt_fuse_set_enabled(true);

  tpurt_exec_mode_set(TPURT_EXEC_STRICT);
  tpurt_memory_free(g_dev, x);
  tpurt_memory_free(g_dev, b);
  free(hx);
  free(hb);
  free(r_strict);
  free(r_fused);
  free(r_plain);
  free(third);
  free(third_s);
}

/* x[0:n-1] and x[1:n] alias without being the same view: the in-place op on
 * one after reading the other must not be fused (tiles would reorder it). */
static void run_alias(tpurt_exec_mode_t mode, float* result, int64_t n, uint64_t* out_kernels) {
  size_t bytes = (size_t)n * 4;
  float* h = malloc(bytes);
  for (int64_t i = 0; i < n; ++i) h[i] = (float)i * 0.25f;
  void* x = dalloc(bytes);
  void* y = dalloc(bytes);
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, x, h, bytes));
  tpurt_exec_mode_set(mode);
  tpurt_fuse_stats_reset();
  tpurt_tensor_t lo = vec(x, n - 1, TPURT_DTYPE_FLOAT32);
  tpurt_tensor_t hi = vec((float*)x + 1, n - 1, TPURT_DTYPE_FLOAT32);
  tpurt_tensor_t ty = vec(y, n - 1, TPURT_DTYPE_FLOAT32);
  binary("mul", &ty, &lo, NULL, 3.0);  /* y = x[:-1] * 3 */
  binary("add", &hi, &hi, &ty, 0);     /* x[1:] += y   (overlaps x[:-1]) */
  binary("mul", &lo, &lo, &hi, 0);     /* x[:-1] *= x[1:] */
  unary("exp", &ty, &ty);              /* y = exp(y) in place */
  CHECK_OK(tpurt_device_synchronize(g_dev));
  tpurt_fuse_stats_t st;
  tpurt_fuse_stats_get(&st);
  *out_kernels = st.kernels_launched;
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, result, x, bytes));
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, h, y, bytes - 4));
  for (int64_t i = 0; i < n - 1; ++i) result[n + i] = h[i];
  tpurt_exec_mode_set(TPURT_EXEC_STRICT);
  tpurt_memory_free(g_dev, x);
  tpurt_memory_free(g_dev, y);
  free(h);
}

static void test_aliasing(void) {
  int64_t n = 10000;
  float* a = malloc((size_t)n * 8);
  float* b = malloc((size_t)n * 8);
  uint64_t k_strict = 0, k_fused = 0;
  run_alias(TPURT_EXEC_STRICT, a, n, &k_strict);
  run_alias(TPURT_EXEC_DEFER_AND_FUSE, b, n, &k_fused);
  CHECK(memcmp(a, b, (size_t)(2 * n - 1) * 4) == 0);
  /* the overlapping views cut: nothing may fuse across them, except that
   * exp(y) in place joins no one either (its input y was read by a cut op) */
  CHECK(k_fused >= 3);
  free(a);
  free(b);
}

/* Identical views are in-place chains: x.mul_(2); x.add_(1); x.exp_() fuse. */
static void test_in_place_identical(void) {
  int64_t n = 5000;
  size_t bytes = (size_t)n * 4;
  float* h = malloc(bytes);
  float* r0 = malloc(bytes);
  float* r1 = malloc(bytes);
  for (int m = 0; m < 2; ++m) {
    for (int64_t i = 0; i < n; ++i) h[i] = (float)((i % 97) * 0.01);
    void* x = dalloc(bytes);
    CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, x, h, bytes));
    tpurt_exec_mode_set(m ? TPURT_EXEC_DEFER_AND_FUSE : TPURT_EXEC_STRICT);
    tpurt_fuse_stats_reset();
    tpurt_tensor_t t = vec(x, n, TPURT_DTYPE_FLOAT32);
    binary("mul", &t, &t, NULL, 2.0);
    binary("add", &t, &t, NULL, 1.0);
    unary("exp", &t, &t);
    CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, m ? r1 : r0, x, bytes));
    if (m) {
      tpurt_fuse_stats_t st;
      tpurt_fuse_stats_get(&st);
      CHECK(st.kernels_launched == 1 && st.fused_ops == 3);
    }
    tpurt_exec_mode_set(TPURT_EXEC_STRICT);
    tpurt_memory_free(g_dev, x);
  }
  CHECK(memcmp(r0, r1, bytes) == 0);
  free(h);
  free(r0);
  free(r1);
}

/* An integer division by zero inside a fused chain surfaces at the sync. */
static void test_error_at_sync(void) {
  int64_t n = 64;
  size_t bytes = (size_t)n * 8;
  int64_t* h = calloc((size_t)n, 8);
  void* a = dalloc(bytes);
  void* z = dalloc(bytes);
  void* o1 = dalloc(bytes);
  void* o2 = dalloc(bytes);
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, z, h, bytes));
  for (int64_t i = 0; i < n; ++i) h[i] = i;
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, a, h, bytes));
  tpurt_exec_mode_set(TPURT_EXEC_DEFER_AND_FUSE);
  tpurt_tensor_t ta = vec(a, n, TPURT_DTYPE_INT64), tz = vec(z, n, TPURT_DTYPE_INT64);
  tpurt_tensor_t t1 = vec(o1, n, TPURT_DTYPE_INT64), t2 = vec(o2, n, TPURT_DTYPE_INT64);
  binary("add", &t1, &ta, NULL, 1);
  tpurt_arg_t args[2];
  memset(args, 0, sizeof(args));
  args[0].kind = TPURT_ARG_TENSOR;
  args[0].v.tensor = &t1;
  args[1].kind = TPURT_ARG_TENSOR;
  args[1].v.tensor = &tz;
  tpurt_op_call_t call = {"remainder", "Tensor", 2, args, 1, &t2};
  CHECK_OK(tpurt_queue_submit_kernel(tpurt_device_default_queue(g_dev), tpurt_op_lookup("remainder"), &call));
  tpurt_status_t s = tpurt_device_synchronize(g_dev);
  CHECK(s != NULL);
  if (s) CHECK(strstr(tpurt_status_message(s), "remainder") != NULL);
  tpurt_status_free(s);
  tpurt_exec_mode_set(TPURT_EXEC_STRICT);
  tpurt_memory_free(g_dev, a);
  tpurt_memory_free(g_dev, z);
  tpurt_memory_free(g_dev, o1);
  tpurt_memory_free(g_dev, o2);
  free(h);
}

/* Device copies and events are recorded/flushed in order with the kernels. */
static void test_copy_and_event_order(void) {
  int64_t n = 3000;
  size_t bytes = (size_t)n * 4;
  float* h = malloc(bytes);
  for (int64_t i = 0; i < n; ++i) h[i] = (float)i;
  void* x = dalloc(bytes);
  void* y = dalloc(bytes);
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, x, h, bytes));
  tpurt_exec_mode_set(TPURT_EXEC_DEFER_AND_FUSE);
  tpurt_tensor_t tx = vec(x, n, TPURT_DTYPE_FLOAT32), ty = vec(y, n, TPURT_DTYPE_FLOAT32);
  binary("mul", &tx, &tx, NULL, 2.0);
  CHECK_OK(tpurt_queue_submit_copy(tpurt_device_default_queue(g_dev), y, x, bytes));
  binary("add", &ty, &ty, NULL, 1.0);
  tpurt_event_t* e = NULL;
  CHECK_OK(tpurt_event_create(g_dev, 0, &e));
  CHECK_OK(tpurt_event_record(e, tpurt_device_default_queue(g_dev)));
  CHECK_OK(tpurt_event_synchronize(e));
  CHECK(tpurt_event_query(e));
  tpurt_event_release(e);
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, h, y, bytes));
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok = ok && h[i] == (float)i * 2 + 1;
  CHECK(ok);
  CHECK(tpurt_queue_is_idle(tpurt_device_default_queue(g_dev)));
  tpurt_exec_mode_set(TPURT_EXEC_STRICT);
  tpurt_memory_free(g_dev, x);
  tpurt_memory_free(g_dev, y);
  free(h);
}

/* out = sum(a, dims, keepdim=false) */
static void sum_dims(const tpurt_tensor_t* out, const tpurt_tensor_t* a, const int64_t* dims, int ndims) {
  tpurt_arg_t args[4];
  memset(args, 0, sizeof(args));
  args[0].kind = TPURT_ARG_TENSOR;
  args[0].v.tensor = a;
  args[1].kind = TPURT_ARG_INT_LIST;
  args[1].count = ndims;
  args[1].v.ints = dims;
  args[2].kind = TPURT_ARG_BOOL;
  args[2].v.b = false;
  args[3].kind = TPURT_ARG_NONE;
  tpurt_op_call_t call = {"sum", "dim_IntList", 4, args, 1, out};
  CHECK_OK(tpurt_queue_submit_kernel(tpurt_device_default_queue(g_dev), tpurt_op_lookup("sum"), &call));
}

/* Rule 7: mul -> exp -> sum over the rows of a (rows, cols) matrix is one
 * kernel whose intermediates never reach memory, equal to Strict; a sum over
 * dim 0 (not one contiguous run per output) is left out of the chain. */
static void test_chain_into_reduction(int64_t rows, int64_t cols, int64_t dim) {
  int64_t n = rows * cols, nout = dim == 1 ? rows : cols;
  float* h = malloc((size_t)n * 4);
  float* r[2] = {malloc((size_t)nout * 4), malloc((size_t)nout * 4)};
  for (int64_t i = 0; i < n; ++i) h[i] = (float)((i % 89) * 0.01 - 0.4);
  tpurt_fuse_stats_t st = {0};
  for (int m = 0; m < 2; ++m) {
    void* x = dalloc((size_t)n * 4);
    void* o = dalloc((size_t)nout * 4);
    CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, x, h, (size_t)n * 4));
    tpurt_exec_mode_set(m ? TPURT_EXEC_DEFER_AND_FUSE : TPURT_EXEC_STRICT);
    tpurt_fuse_stats_reset();
    tpurt_tensor_t tx = vec(x, n, TPURT_DTYPE_FLOAT32);
    tx.ndim = 2;
    tx.sizes[0] = rows, tx.sizes[1] = cols, tx.strides[0] = cols, tx.strides[1] = 1;
    void* t1 = dalloc((size_t)n * 4);
    void* t2 = dalloc((size_t)n * 4);
    tpurt_tensor_t a = tx, b = tx, to = vec(o, nout, TPURT_DTYPE_FLOAT32);
    a.data = t1, b.data = t2;
    binary("mul", &a, &tx, NULL, 0.5);
    unary("exp", &b, &a);
    tpurt_memory_free(g_dev, t1);
    int64_t d = dim;
    sum_dims(&to, &b, &d, 1);
    tpurt_memory_free(g_dev, t2);
    CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, r[m], o, (size_t)nout * 4));
    if (m) tpurt_fuse_stats_get(&st);
    tpurt_exec_mode_set(TPURT_EXEC_STRICT);
    tpurt_memory_free(g_dev, x);
    tpurt_memory_free(g_dev, o);
  }
  bool close = true;
  for (int64_t i = 0; i < nout; ++i) close = close && fabsf(r[0][i] - r[1][i]) <= 1e-6f * fabsf(r[0][i]);
  CHECK(close);
  if (dim == 1) {
    CHECK(st.kernels_launched == 1 && st.fused_ops == 3 && st.stores_skipped == 2 && st.fallbacks == 0);
  } else {
    CHECK(st.kernels_launched == 2 && st.fused_ops == 2 && st.fallbacks == 0); /* mul+exp, then sum */
  }
  free(h);
  free(r[0]);
  free(r[1]);
}

/* A program keeps its fusion plan between launches: planned at the first, replayed after, planned
 * again when a launch's buffers make another graph (its two inputs the same memory). Every launch
 * matches chain10 run eagerly on the same buffers. */
static void test_program_keeps_plan(void) {
  const int64_t n = 100003;
  size_t bytes = (size_t)n * 4;
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  float* hx = malloc(bytes);
  float* hb = malloc(bytes);
  float* got = malloc(bytes);
  float* want = malloc(bytes);
  for (int64_t i = 0; i < n; ++i) hx[i] = (float)((i % 97) - 48) / 50.0f, hb[i] = (float)(i % 13) / 7.0f;
  void* x = dalloc(bytes);
  void* b = dalloc(bytes);
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, x, hx, bytes));
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, b, hb, bytes));
  CHECK_OK(tpurt_capture_begin(q));
  void* out = chain10(x, b, n, false, NULL);
  tpurt_program_range_t ins[2] = {{x, bytes}, {b, bytes}}, outs[1] = {{out, bytes}};
  tpurt_program_t* p = NULL;
  CHECK_OK(tpurt_capture_end(q, ins, 2, outs, 1, 0, 0, 0, &p));
  if (!p) return;
  tpurt_program_info_t info;
  tpurt_program_query(p, &info);
  void* arena = dalloc(info.arena_bytes ? info.arena_bytes : 64);
  tpurt_fuse_stats_reset();
  for (int launch = 0; launch < 4; ++launch) {
    bool same = launch == 3; /* both inputs one buffer: x */
    void* in[2] = {x, same ? x : b};
    void* o[1] = {out};
    CHECK_OK(tpurt_program_launch(p, q, in, 2, o, 1, arena, (tpurt_rng_t){0, 0}));
    CHECK_OK(tpurt_queue_synchronize(q));
    CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, got, out, bytes));
    void* e = chain10(x, same ? x : b, n, false, NULL); /* eager, Strict */
    CHECK_OK(tpurt_queue_synchronize(q));
    CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, want, e, bytes));
    tpurt_memory_free(g_dev, e);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += fabsf(got[i] - want[i]) > 1e-6f * (1 + fabsf(want[i]));
    CHECK(bad == 0);
    tpurt_fuse_stats_t st;
    tpurt_fuse_stats_get(&st);
    CHECK(st.fused_groups >= 1);
    if (launch < 3) CHECK(st.plans_made == 1 && st.plans_replayed == (uint64_t)launch);
    else CHECK(st.plans_made == 2 && st.plans_replayed == 2);
  }
  tpurt_program_release(p);
  void* frees[] = {x, b, out, arena};
  for (size_t i = 0; i < sizeof(frees) / sizeof(*frees); ++i) tpurt_memory_free(g_dev, frees[i]);
  free(hx), free(hb), free(got), free(want);
}

/* A program's plan (compiler/fuse_plan.c, "Programs"): an op-major update of two same-shaped
 * tensors, each reading a scalar computed between its two ops, becomes one chain per tensor (the
 * first-op rule and the scalars cut every op into a kernel of its own), the scalar's kernel run
 * before its chain; results equal Strict's, bit for bit, at every launch. */
static void test_program_chain_per_parameter(void) {
  const int64_t n = 20000; /* above the program's smallest fused size (16384) */
  size_t bytes = (size_t)n * 4;
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  float* h[2];
  float hs = 0.25f, *got = malloc(bytes), *want = malloc(bytes);
  void *p[2], *e[2], *s = dalloc(4), *es = dalloc(4);
  for (int k = 0; k < 2; ++k) {
    h[k] = malloc(bytes);
    for (int64_t i = 0; i < n; ++i) h[k][i] = (float)((i * (k + 3)) % 101) / 37.0f - 1.0f;
    p[k] = dalloc(bytes);
    e[k] = dalloc(bytes);
    CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, p[k], h[k], bytes));
    CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, e[k], h[k], bytes));
  }
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, s, &hs, 4));
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, es, &hs, 4));
  /* for each tensor: t *= 0.9 (op-major), then c_k = s + (k + 1), then t += c_k (op-major) */
#define UPDATE(T, S)                                                                                \
  do {                                                                                              \
    tpurt_tensor_t tt[2] = {vec((T)[0], n, TPURT_DTYPE_FLOAT32), vec((T)[1], n, TPURT_DTYPE_FLOAT32)}; \
    tpurt_tensor_t ts = vec((S), 1, TPURT_DTYPE_FLOAT32);                                           \
    ts.ndim = 0;                                                                                    \
    for (int k = 0; k < 2; ++k) binary("mul", &tt[k], &tt[k], NULL, 0.9);                           \
    void* c[2];                                                                                     \
    tpurt_tensor_t tc[2];                                                                           \
    for (int k = 0; k < 2; ++k) {                                                                   \
      c[k] = dalloc(4);                                                                             \
      tc[k] = vec(c[k], 1, TPURT_DTYPE_FLOAT32);                                                    \
      tc[k].ndim = 0;                                                                               \
      binary("add", &tc[k], &ts, NULL, (double)(k + 1));                                            \
    }                                                                                               \
    for (int k = 0; k < 2; ++k) binary("add", &tt[k], &tt[k], &tc[k], 0);                           \
    for (int k = 0; k < 2; ++k) tpurt_memory_free(g_dev, c[k]);                                     \
  } while (0)
  CHECK_OK(tpurt_capture_begin(q));
  UPDATE(p, s);
  tpurt_program_range_t ins[3] = {{p[0], bytes}, {p[1], bytes}, {s, 4}};
  tpurt_program_t* prog = NULL;
  CHECK_OK(tpurt_capture_end(q, ins, 3, NULL, 0, 0, 0, 0, &prog));
  if (!prog) return;
  tpurt_program_info_t info;
  tpurt_program_query(prog, &info);
  CHECK(info.num_kernels == 6);
  void* arena = dalloc(info.arena_bytes ? info.arena_bytes : 64);
  for (int launch = 0; launch < 3; ++launch) {
    tpurt_fuse_stats_reset();
    void* in[3] = {p[0], p[1], s};
    CHECK_OK(tpurt_program_launch(prog, q, in, 3, NULL, 0, arena, (tpurt_rng_t){0, 0}));
    CHECK_OK(tpurt_queue_synchronize(q));
    tpurt_fuse_stats_t st;
    tpurt_fuse_stats_get(&st);
    CHECK(st.fused_groups == 2 && st.fused_ops == 4 && st.kernels_launched == 4);
    UPDATE(e, es); /* Strict */
    CHECK_OK(tpurt_queue_synchronize(q));
    for (int k = 0; k < 2; ++k) {
      CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, got, p[k], bytes));
      CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, want, e[k], bytes));
      CHECK(memcmp(got, want, bytes) == 0);
    }
  }
#undef UPDATE
  tpurt_program_release(prog);
  void* frees[] = {p[0], p[1], e[0], e[1], s, es, arena};
  for (size_t i = 0; i < sizeof(frees) / sizeof(*frees); ++i) tpurt_memory_free(g_dev, frees[i]);
  free(h[0]), free(h[1]), free(got), free(want);
}

/* A program whose arena plan gives one tensor's temporary the bytes another's dead temporary used
 * (compiler/fuse_plan.c, "Programs", rule 6's exception for tile values). Op-major: tB = pB * 2,
 * tA = pA * 2, pB += tB, pA += tA (tA, tB freed), then uB = pB * 0.5 (placed over tA's bytes),
 * pB += uB. B's update is one chain of four ops (uB lives in its tiles, so sharing tA's bytes
 * orders nothing), A's one of two. With `reader`, a node of another shape reads uB before it is
 * freed: uB must reach memory, and the chain that relied on the exception is planned again
 * without it. Results equal Strict's, bit for bit, at every launch. */
static void test_program_reused_arena_bytes(bool reader) {
  const int64_t na = 40000, nb = 20000; /* both above 16384 elements and 64 KiB */
  size_t ba = (size_t)na * 4, bb = (size_t)nb * 4;
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  float *ha = malloc(ba), *hb = malloc(bb), *got = malloc(2 * bb), *want = malloc(2 * bb);
  for (int64_t i = 0; i < na; ++i) ha[i] = (float)(i % 89) / 31.0f - 1.0f;
  for (int64_t i = 0; i < nb; ++i) hb[i] = (float)(i % 71) / 23.0f - 1.5f;
  void *pa = dalloc(ba), *pb = dalloc(bb), *ea = dalloc(ba), *eb = dalloc(bb);
  void *ro = dalloc(2 * bb), *ero = dalloc(2 * bb); /* the reader's output, (2, nb) */
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, pa, ha, ba));
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, pb, hb, bb));
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, ea, ha, ba));
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, eb, hb, bb));
#define STEP(PA, PB, RO)                                                                     \
  do {                                                                                       \
    tpurt_tensor_t tpa = vec((PA), na, TPURT_DTYPE_FLOAT32), tpb = vec((PB), nb, TPURT_DTYPE_FLOAT32); \
    void *ta = dalloc(ba), *tb = dalloc(bb);                                                 \
    tpurt_tensor_t tta = vec(ta, na, TPURT_DTYPE_FLOAT32), ttb = vec(tb, nb, TPURT_DTYPE_FLOAT32); \
    binary("mul", &ttb, &tpb, NULL, 2.0);                                                    \
    binary("mul", &tta, &tpa, NULL, 2.0);                                                    \
    binary("add", &tpb, &tpb, &ttb, 0);                                                      \
    binary("add", &tpa, &tpa, &tta, 0);                                                      \
    tpurt_memory_free(g_dev, ta);                                                            \
    tpurt_memory_free(g_dev, tb);                                                            \
    void* ub = dalloc(bb);                                                                   \
    tpurt_tensor_t tub = vec(ub, nb, TPURT_DTYPE_FLOAT32);                                   \
    binary("mul", &tub, &tpb, NULL, 0.5);                                                    \
    binary("add", &tpb, &tpb, &tub, 0);                                                      \
    if (reader) {                                                                            \
      tpurt_tensor_t tro = vec((RO), nb, TPURT_DTYPE_FLOAT32);                               \
      tro.ndim = 2, tro.sizes[0] = 2, tro.sizes[1] = nb, tro.strides[0] = nb, tro.strides[1] = 1; \
      binary("add", &tro, &tub, NULL, 1.0);                                                  \
    }                                                                                        \
    tpurt_memory_free(g_dev, ub);                                                            \
  } while (0)
  CHECK_OK(tpurt_capture_begin(q));
  STEP(pa, pb, ro);
  tpurt_program_range_t ins[2] = {{pa, ba}, {pb, bb}}, outs[1] = {{ro, 2 * bb}};
  tpurt_program_t* prog = NULL;
  CHECK_OK(tpurt_capture_end(q, ins, 2, outs, reader ? 1 : 0, 0, 0, 0, &prog));
  if (!prog) return;
  tpurt_program_info_t info;
  tpurt_program_query(prog, &info);
  CHECK(info.arena_bytes < ba + bb + 2048); /* uB reuses tA's bytes */
  void* arena = dalloc(info.arena_bytes);
  for (int launch = 0; launch < 3; ++launch) {
    tpurt_fuse_stats_reset();
    void* in[2] = {pa, pb};
    void* out[1] = {ro};
    CHECK_OK(tpurt_program_launch(prog, q, in, 2, out, reader ? 1 : 0, arena, (tpurt_rng_t){0, 0}));
    CHECK_OK(tpurt_queue_synchronize(q));
    tpurt_fuse_stats_t st;
    tpurt_fuse_stats_get(&st);
    if (reader) CHECK(st.fused_groups == 3 && st.fused_ops == 6); /* B's update cut where uB is read */
    else CHECK(st.fused_groups == 2 && st.fused_ops == 6 && st.kernels_launched == 2);
    STEP(ea, eb, ero); /* Strict */
    CHECK_OK(tpurt_queue_synchronize(q));
    CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, got, pa, ba));
    CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, want, ea, ba));
    CHECK(memcmp(got, want, ba) == 0);
    CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, got, pb, bb));
    CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, want, eb, bb));
    CHECK(memcmp(got, want, bb) == 0);
    if (reader) {
      CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, got, ro, 2 * bb));
      CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, want, ero, 2 * bb));
      CHECK(memcmp(got, want, 2 * bb) == 0);
    }
  }
#undef STEP
  tpurt_program_release(prog);
  void* frees[] = {pa, pb, ea, eb, ro, ero, arena};
  for (size_t i = 0; i < sizeof(frees) / sizeof(*frees); ++i) tpurt_memory_free(g_dev, frees[i]);
  free(ha), free(hb), free(got), free(want);
}

int main(void) {
  CHECK_OK(tpurt_init());
  CHECK_OK(tpurt_device_get(0, &g_dev));
  setenv("TORCH_TPU_FUSE_CACHE_DIR", "", 1); /* no disk cache from unit tests */
  test_chain(1);
  test_chain(1000);
  test_chain(100003);
  test_aliasing();
  test_in_place_identical();
  test_error_at_sync();
  test_copy_and_event_order();
  test_chain_into_reduction(7, 5003, 1);
  test_chain_into_reduction(300, 4096, 1);
  test_chain_into_reduction(2, 1 << 20, 1); /* few outputs: the reduced range splits over threads */
  test_chain_into_reduction(300, 70, 0);
  test_program_keeps_plan();
  test_program_chain_per_parameter();
  test_program_reused_arena_bytes(false);
  test_program_reused_arena_bytes(true);
  return test_finish("test_fuse");
}
