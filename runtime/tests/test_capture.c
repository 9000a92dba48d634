/* Capture and programs (tpurt/program.h): what a capture records runs only
 * when launched, on the launch's inputs, outputs, arena and random offsets;
 * the arena reuses dead intermediates' memory; host copies, syncs and other
 * commands break a capture with FAILED_PRECONDITION and leave the queue
 * usable; a block made inside and kept alive without being an output fails
 * the capture. A program generalized over captures at other sizes runs
 * sizes it never saw; numbers no size explains are refused. */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static tpurt_device_t* g_dev;

/* out = in * a + b (float32, contiguous). */
static tpurt_status_t k_axpb(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* in = call->args[0].v.tensor;
  const float* x = in->data;
  float* y = call->outputs[0].data;
  float a = (float)call->args[1].v.d, b = (float)call->args[2].v.d;
  for (int64_t i = 0; i < in->sizes[0]; ++i) y[i] = x[i] * a + b;
  return TPURT_OK;
}
static const tpurt_op_def_t op_axpb = {"axpb", k_axpb, k_axpb, 0};

/* out[0] = the Philox offset the call was given. */
static tpurt_status_t k_rng_note(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  ((int64_t*)call->outputs[0].data)[0] = (int64_t)call->args[0].v.rng.offset;
  ((int64_t*)call->outputs[0].data)[1] = (int64_t)call->args[0].v.rng.seed;
  return TPURT_OK;
}
static const tpurt_op_def_t op_rng_note = {"rng_note", k_rng_note, k_rng_note, TPURT_OP_RANDOM};

#define N 1000

static tpurt_tensor_t vec(void* p, tpurt_dtype_t dt, int64_t n) {
  return (tpurt_tensor_t){.data = p, .dtype = dt, .ndim = 1, .sizes = {n}, .strides = {1}};
}

static void* dev_alloc(size_t bytes) {
  void* p = NULL;
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, bytes, &p));
  return p;
}

static void submit_axpb(tpurt_queue_t* q, void* in, void* out, double a, double b) {
  tpurt_tensor_t ti = vec(in, TPURT_DTYPE_FLOAT32, N), to = vec(out, TPURT_DTYPE_FLOAT32, N);
  tpurt_arg_t args[3] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &ti},
                         {.kind = TPURT_ARG_DOUBLE, .v.d = a},
                         {.kind = TPURT_ARG_DOUBLE, .v.d = b}};
  tpurt_op_call_t call = {.name = "axpb", .overload = "", .num_args = 3, .args = args, .num_outputs = 1,
                          .outputs = &to};
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_axpb, &call));
}

static void put(void* dev, const float* host) { CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, dev, host, N * 4)); }

static void test_capture_then_launch(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  float hx[N], hy[N];
  for (int i = 0; i < N; ++i) hx[i] = (float)i;
  void* x = dev_alloc(N * 4);
  put(x, hx);

  CHECK_OK(tpurt_capture_begin(q));
  CHECK(tpurt_capture_active(q));
  CHECK_STATUS(tpurt_capture_begin(q), FAILED_PRECONDITION);
  void* t1 = dev_alloc(N * 4);
  submit_axpb(q, x, t1, 2.0, 1.0);
  void* out = dev_alloc(N * 4);
  submit_axpb(q, t1, out, 3.0, 0.0);
  tpurt_memory_free(g_dev, t1);
  void* note = dev_alloc(16);
  tpurt_tensor_t tn = vec(note, TPURT_DTYPE_INT64, 2);
  tpurt_arg_t ra = {.kind = TPURT_ARG_RNG, .v.rng = {.seed = 7, .offset = 104}};
  tpurt_op_call_t rc = {.name = "rng_note", .overload = "", .num_args = 1, .args = &ra, .num_outputs = 1,
                        .outputs = &tn};
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_rng_note, &rc));
  tpurt_program_range_t ins[1] = {{x, N * 4}}, outs[2] = {{out, N * 4}, {note, 16}};
  tpurt_program_t* p = NULL;
  CHECK_OK(tpurt_capture_end(q, ins, 1, outs, 2, 7, 100, 112, &p));
  CHECK(!tpurt_capture_active(q));
  if (!p) return;
  tpurt_program_info_t info;
  tpurt_program_query(p, &info);
  CHECK(info.num_kernels == 3 && info.num_records == 4); /* three kernels and t1's free */
  CHECK(info.arena_bytes >= N * 4 && info.arena_bytes < 2 * N * 4 + 1024);
  CHECK(info.rng_count == 12 && info.num_inputs == 1 && info.num_outputs == 2);

  /* Two launches on other buffers, queued back to back. */
  void* x2 = dev_alloc(N * 4);
  float hx2[N];
  for (int i = 0; i < N; ++i) hx2[i] = (float)(N - i);
  put(x2, hx2);
  void* o2 = dev_alloc(N * 4);
  void* n2 = dev_alloc(16);
  void* arena = dev_alloc(info.arena_bytes);
  void* in_a[1] = {x}, *out_a[2] = {out, note}, *in_b[1] = {x2}, *out_b[2] = {o2, n2};
  CHECK_OK(tpurt_program_launch(p, q, in_a, 1, out_a, 2, arena, (tpurt_rng_t){9, 1000}));
  CHECK_OK(tpurt_program_launch(p, q, in_b, 1, out_b, 2, arena, (tpurt_rng_t){9, 2000}));
  CHECK_STATUS(tpurt_program_launch(p, q, in_b, 0, out_b, 2, arena, (tpurt_rng_t){9, 0}), INVALID_ARGUMENT);
  CHECK_OK(tpurt_queue_synchronize(q));
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, hy, out, N * 4));
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += hy[i] != (hx[i] * 2 + 1) * 3;
  CHECK(bad == 0);
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, hy, o2, N * 4));
  bad = 0;
  for (int i = 0; i < N; ++i) bad += hy[i] != (hx2[i] * 2 + 1) * 3;
  CHECK(bad == 0);
  int64_t hn[2];
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, hn, note, 16));
  CHECK(hn[0] == 1004 && hn[1] == 9); /* launch base + (104 - 100), the launch's seed */
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, hn, n2, 16));
  CHECK(hn[0] == 2004);
  tpurt_program_query(p, &info);
  CHECK(info.launches == 2);
  tpurt_program_release(p);
  void* frees[] = {x, x2, out, o2, note, n2, arena};
  for (size_t i = 0; i < sizeof(frees) / sizeof(*frees); ++i) tpurt_memory_free(g_dev, frees[i]);
}

static void test_arena_reuses_dead_blocks(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  void* x = dev_alloc(N * 4);
  CHECK_OK(tpurt_capture_begin(q));
  void* prev = x;
  for (int k = 0; k < 8; ++k) { /* each intermediate dies once the next exists */
    void* t = dev_alloc(N * 4);
    submit_axpb(q, prev, t, 1.0, 1.0);
    if (prev != x) tpurt_memory_free(g_dev, prev);
    prev = t;
  }
  tpurt_program_range_t ins[1] = {{x, N * 4}}, outs[1] = {{prev, N * 4}};
  tpurt_program_t* p = NULL;
  CHECK_OK(tpurt_capture_end(q, ins, 1, outs, 1, 0, 0, 0, &p));
  tpurt_program_info_t info;
  tpurt_program_query(p, &info);
  CHECK(info.arena_bytes >= 2 * N * 4 && info.arena_bytes <= 2 * 4096); /* two alive at a time, not seven */
  float hx[N], hy[N];
  for (int i = 0; i < N; ++i) hx[i] = (float)i;
  put(x, hx);
  void* out = dev_alloc(N * 4);
  void* arena = dev_alloc(info.arena_bytes);
  void* in_a[1] = {x}, *out_a[1] = {out};
  CHECK_OK(tpurt_program_launch(p, q, in_a, 1, out_a, 1, arena, (tpurt_rng_t){0, 0}));
  tpurt_memory_free(g_dev, arena); /* freed while queued: ordered behind the launch */
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, hy, out, N * 4));
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += hy[i] != hx[i] + 8;
  CHECK(bad == 0);
  tpurt_program_release(p);
  tpurt_memory_free(g_dev, prev);
  tpurt_memory_free(g_dev, out);
  tpurt_memory_free(g_dev, x);
}

static void test_refusals(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  void* x = dev_alloc(N * 4);
  float h[N] = {0};
  /* A host read breaks the capture; the queue works afterwards. */
  CHECK_OK(tpurt_capture_begin(q));
  CHECK_STATUS(tpurt_memcpy_d2h(g_dev, NULL, h, x, N * 4), FAILED_PRECONDITION);
  CHECK_STATUS(tpurt_queue_synchronize(q), FAILED_PRECONDITION);
  tpurt_program_t* p = NULL;
  CHECK_STATUS(tpurt_capture_end(q, NULL, 0, NULL, 0, 0, 0, 0, &p), FAILED_PRECONDITION);
  CHECK(p == NULL && !tpurt_capture_active(q));
  submit_axpb(q, x, x, 0.0, 5.0);
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, h, x, N * 4));
  CHECK(h[0] == 5.0f && h[N - 1] == 5.0f);
  /* A block made inside, used, alive and not an output. */
  CHECK_OK(tpurt_capture_begin(q));
  void* kept = dev_alloc(N * 4);
  submit_axpb(q, x, kept, 1.0, 0.0);
  CHECK_STATUS(tpurt_capture_end(q, NULL, 0, NULL, 0, 0, 0, 0, &p), FAILED_PRECONDITION);
  /* A random op drawing from another seed than the default generator's. */
  CHECK_OK(tpurt_capture_begin(q));
  tpurt_tensor_t tn = vec(kept, TPURT_DTYPE_INT64, 2);
  tpurt_arg_t ra = {.kind = TPURT_ARG_RNG, .v.rng = {.seed = 5, .offset = 0}};
  tpurt_op_call_t rc = {.name = "rng_note", .overload = "", .num_args = 1, .args = &ra, .num_outputs = 1,
                        .outputs = &tn};
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_rng_note, &rc));
  tpurt_program_range_t outs[1] = {{kept, N * 4}};
  CHECK_STATUS(tpurt_capture_end(q, NULL, 0, outs, 1, 6, 0, 4, &p), FAILED_PRECONDITION);
  /* Aborting drops the recording: nothing runs. */
  CHECK_OK(tpurt_capture_begin(q));
  submit_axpb(q, x, x, 0.0, 9.0);
  tpurt_capture_abort(q);
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, h, x, N * 4));
  CHECK(h[0] == 5.0f);
  CHECK_OK(tpurt_queue_synchronize(q));
  tpurt_memory_free(g_dev, kept);
  tpurt_memory_free(g_dev, x);
}

/* A chain out = (x * 2 + 1) * 3 over n floats through an intermediate, captured at size n; `b2`: the
 * second kernel's added term (a size-dependent one makes a number no size explains). */
static tpurt_program_t* capture_chain(int64_t n, double b2, void** out_x, void** out_y) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  void* x = dev_alloc((size_t)n * 4);
  CHECK_OK(tpurt_capture_begin(q));
  void* t = dev_alloc((size_t)n * 4);
  void* y = dev_alloc((size_t)n * 4);
  tpurt_tensor_t tx = vec(x, TPURT_DTYPE_FLOAT32, n), tt = vec(t, TPURT_DTYPE_FLOAT32, n),
                 ty = vec(y, TPURT_DTYPE_FLOAT32, n);
  tpurt_arg_t a1[3] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &tx},
                       {.kind = TPURT_ARG_DOUBLE, .v.d = 2.0},
                       {.kind = TPURT_ARG_DOUBLE, .v.d = 1.0}};
  tpurt_arg_t a2[3] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &tt},
                       {.kind = TPURT_ARG_DOUBLE, .v.d = 3.0},
                       {.kind = TPURT_ARG_DOUBLE, .v.d = b2}};
  tpurt_op_call_t c1 = {.name = "axpb", .overload = "", .num_args = 3, .args = a1, .num_outputs = 1, .outputs = &tt};
  tpurt_op_call_t c2 = {.name = "axpb", .overload = "", .num_args = 3, .args = a2, .num_outputs = 1, .outputs = &ty};
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_axpb, &c1));
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_axpb, &c2));
  tpurt_memory_free(g_dev, t);
  tpurt_program_range_t ins[1] = {{x, (uint64_t)n * 4}}, outs[1] = {{y, (uint64_t)n * 4}};
  tpurt_program_t* p = NULL;
  CHECK_OK(tpurt_capture_end(q, ins, 1, outs, 1, 0, 0, 0, &p));
  *out_x = x;
  *out_y = y;
  return p;
}

static void run_bound(tpurt_program_t* p, int64_t n, double b2) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  int64_t values[2] = {n, 4 * n};
  tpurt_program_binding_t* b = NULL;
  uint64_t arena_bytes = 0, rng_count = 1;
  CHECK_OK(tpurt_program_bind(p, values, 2, &b, &arena_bytes, &rng_count));
  CHECK(b != NULL && arena_bytes >= (uint64_t)n * 4 && arena_bytes < (uint64_t)n * 4 + 512 && rng_count == 0);
  float* hx = malloc((size_t)n * 4);
  float* hy = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; ++i) hx[i] = (float)(i % 97);
  void* x = dev_alloc((size_t)n * 4);
  void* y = dev_alloc((size_t)n * 4);
  void* arena = dev_alloc(arena_bytes);
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, x, hx, (size_t)n * 4));
  void *in[1] = {x}, *out[1] = {y};
  CHECK_OK(tpurt_program_launch_bound(p, b, q, in, 1, out, 1, arena, (tpurt_rng_t){0, 0}));
  tpurt_memory_free(g_dev, arena);
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, hy, y, (size_t)n * 4));
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += hy[i] != (hx[i] * 2 + 1) * 3 + (float)b2;
  CHECK(bad == 0);
  tpurt_memory_free(g_dev, x);
  tpurt_memory_free(g_dev, y);
  free(hx);
  free(hy);
}

static void test_sizes_at_launch(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  void *x[3], *y[3];
  const int64_t ns[3] = {100, 160, 226};
  tpurt_program_t* p[3];
  for (int k = 0; k < 3; ++k) p[k] = capture_chain(ns[k], 0.0, &x[k], &y[k]);
  /* Expressions n and 4n (bytes) at each capture. */
  int64_t values[6] = {100, 400, 160, 640, 226, 904};
  const tpurt_program_t* others[2] = {p[1], p[2]};
  CHECK(tpurt_program_num_values(p[0]) == 0);
  CHECK_STATUS(tpurt_program_generalize(p[0], others, 0, values, 2), INVALID_ARGUMENT);
  CHECK_OK(tpurt_program_generalize(p[0], others, 2, values, 2));
  CHECK(tpurt_program_num_values(p[0]) == 2);
  CHECK_STATUS(tpurt_program_generalize(p[0], others, 2, values, 2), FAILED_PRECONDITION);
  /* Sizes never captured, larger and smaller, and one again. */
  run_bound(p[0], 333, 0.0);
  run_bound(p[0], 7, 0.0);
  run_bound(p[0], 4096, 0.0);
  run_bound(p[0], 333, 0.0);
  tpurt_program_binding_t* b = NULL;
  CHECK_STATUS(tpurt_program_bind(p[0], values, 1, &b, NULL, NULL), INVALID_ARGUMENT);
  int64_t negative[2] = {-3, -12};
  CHECK_STATUS(tpurt_program_bind(p[0], negative, 2, &b, NULL, NULL), INVALID_ARGUMENT);
  void *in[1] = {x[0]}, *out[1] = {y[0]};
  void* arena = dev_alloc(4096);
  CHECK_STATUS(tpurt_program_launch(p[0], q, in, 1, out, 1, arena, (tpurt_rng_t){0, 0}), INVALID_ARGUMENT);
  void* bytes = NULL;
  size_t nbytes = 0;
  CHECK_STATUS(tpurt_program_serialize(p[0], &bytes, &nbytes), FAILED_PRECONDITION); /* its kernels are the test's own */
  for (int k = 0; k < 3; ++k) {
    tpurt_program_release(p[k]);
    tpurt_memory_free(g_dev, x[k]);
    tpurt_memory_free(g_dev, y[k]);
  }

  /* A float argument that changes with the size but is no multiple of one: refused, and the program
   * keeps its own sizes (it still launches, unbound). */
  for (int k = 0; k < 3; ++k) p[k] = capture_chain(ns[k], 0.5 * (double)ns[k] + 0.25, &x[k], &y[k]);
  others[0] = p[1];
  others[1] = p[2];
  CHECK_STATUS(tpurt_program_generalize(p[0], others, 2, values, 2), FAILED_PRECONDITION);
  CHECK(tpurt_program_num_values(p[0]) == 0);
  float hx[100], hy[100];
  for (int i = 0; i < 100; ++i) hx[i] = (float)i;
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, x[0], hx, 400));
  in[0] = x[0];
  out[0] = y[0];
  CHECK_OK(tpurt_program_launch(p[0], q, in, 1, out, 1, arena, (tpurt_rng_t){0, 0}));
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, hy, y[0], 400));
  int bad = 0;
  for (int i = 0; i < 100; ++i) bad += hy[i] != (hx[i] * 2 + 1) * 3 + 50.25f;
  CHECK(bad == 0);
  /* Other kernels at another size: refused. */
  tpurt_program_t* one = NULL;
  {
    void* x1 = dev_alloc(400);
    CHECK_OK(tpurt_capture_begin(q));
    void* y1 = dev_alloc(400);
    submit_axpb(q, x1, y1, 1.0, 0.0);
    tpurt_program_range_t ins[1] = {{x1, 400}}, outs[1] = {{y1, 400}};
    CHECK_OK(tpurt_capture_end(q, ins, 1, outs, 1, 0, 0, 0, &one));
    others[0] = one;
    CHECK_STATUS(tpurt_program_generalize(p[1], others, 1, values, 2), FAILED_PRECONDITION);
    tpurt_program_release(one);
    tpurt_memory_free(g_dev, x1);
    tpurt_memory_free(g_dev, y1);
  }
  tpurt_memory_free(g_dev, arena);
  for (int k = 0; k < 3; ++k) {
    tpurt_program_release(p[k]);
    tpurt_memory_free(g_dev, x[k]);
    tpurt_memory_free(g_dev, y[k]);
  }
}

/* out[i] = the Philox offset the call was given + i (int64, its first dim). */
static tpurt_status_t k_rng_iota(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_rng_t* rng = NULL;
  for (int32_t a = 0; a < call->num_args; ++a)
    if (call->args[a].kind == TPURT_ARG_RNG) rng = &call->args[a].v.rng;
  if (!rng) return TPURT_STATUS(INVALID_ARGUMENT, "rng_iota: no generator state");
  int64_t* y = call->outputs[0].data;
  for (int64_t i = 0; i < call->outputs[0].sizes[0]; ++i) y[i] = (int64_t)(rng->offset + (uint64_t)i);
  return TPURT_OK;
}
static const tpurt_op_def_t op_rng_iota = {"rng_iota", k_rng_iota, k_rng_iota, TPURT_OP_RANDOM};

typedef struct rng_graph_t {
  tpurt_program_t* p;
  void *x, *a, *u; /* input (3n int64), outputs (n and 2n int64) */
  int64_t n;
} rng_graph_t;

/* Two random calls, as the C++ layer reserves them from a generator at offset 1000: a over n
 * elements, then u over 2n elements with an input x of 3n (the largest tensor counts); `gap`:
 * counter values left between them (0: the reservation rule's offsets). */
static rng_graph_t capture_rng(int64_t n, uint64_t gap) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  rng_graph_t g = {.n = n};
  g.x = dev_alloc((size_t)n * 24);
  CHECK_OK(tpurt_capture_begin(q));
  g.a = dev_alloc((size_t)n * 8);
  g.u = dev_alloc((size_t)n * 16);
  const uint64_t before = 1000, seed = 11;
  uint64_t off_u = before + tpurt_rng_reservation(n) + gap, after = off_u + tpurt_rng_reservation(3 * n);
  tpurt_tensor_t ta = vec(g.a, TPURT_DTYPE_INT64, n), tu = vec(g.u, TPURT_DTYPE_INT64, 2 * n),
                 tx = vec(g.x, TPURT_DTYPE_INT64, 3 * n);
  tpurt_arg_t r1 = {.kind = TPURT_ARG_RNG, .v.rng = {seed, before}};
  tpurt_arg_t a2[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &tx}, {.kind = TPURT_ARG_RNG, .v.rng = {seed, off_u}}};
  tpurt_op_call_t c1 = {.name = "rng_iota", .overload = "", .num_args = 1, .args = &r1, .num_outputs = 1,
                        .outputs = &ta};
  tpurt_op_call_t c2 = {.name = "rng_iota", .overload = "", .num_args = 2, .args = a2, .num_outputs = 1,
                        .outputs = &tu};
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_rng_iota, &c1));
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_rng_iota, &c2));
  tpurt_program_range_t ins[1] = {{g.x, (uint64_t)n * 24}}, outs[2] = {{g.a, (uint64_t)n * 8}, {g.u, (uint64_t)n * 16}};
  CHECK_OK(tpurt_capture_end(q, ins, 1, outs, 2, seed, before, after, &g.p));
  return g;
}

static void free_rng_graph(rng_graph_t* g) {
  tpurt_program_release(g->p);
  tpurt_memory_free(g_dev, g->x);
  tpurt_memory_free(g_dev, g->a);
  tpurt_memory_free(g_dev, g->u);
}

/* Reads a launch's outputs: a's n values then u's 2n. */
static int64_t* rng_outputs(const rng_graph_t* g) {
  int64_t* h = malloc((size_t)g->n * 24);
  CHECK_OK(tpurt_queue_synchronize(tpurt_device_default_queue(g_dev)));
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, h, g->a, (size_t)g->n * 8));
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, h + g->n, g->u, (size_t)g->n * 16));
  return h;
}

/* Random offsets are running sums of rounded reservations (tpurt_rng_reservation), no multiple of a
 * size: generalize explains them by the rule, checked at every capture, and a binding at a size
 * never captured gives each random call the offset a capture at that size gives it. Offsets that
 * follow neither the rule nor a size are refused. */
static void test_random_offsets_at_launch(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  const int64_t ns[3] = {101, 158, 227};
  rng_graph_t g[3];
  for (int k = 0; k < 3; ++k) g[k] = capture_rng(ns[k], 0);
  int64_t values[3] = {101, 158, 227};
  const tpurt_program_t* others[2] = {g[1].p, g[2].p};
  CHECK_OK(tpurt_program_generalize(g[0].p, others, 2, values, 1));
  CHECK(tpurt_program_num_values(g[0].p) == 1);
  /* A fourth size: the bound launch against a capture made there, launched from the same base. */
  const int64_t n = 333;
  rng_graph_t c = capture_rng(n, 0);
  tpurt_program_info_t info;
  tpurt_program_query(c.p, &info);
  tpurt_program_binding_t* b = NULL;
  uint64_t arena_bytes = 1, rng_count = 0;
  CHECK_OK(tpurt_program_bind(g[0].p, &n, 1, &b, &arena_bytes, &rng_count));
  CHECK(rng_count == info.rng_count && rng_count == tpurt_rng_reservation(n) + tpurt_rng_reservation(3 * n));
  void *in[1] = {c.x}, *out[2] = {c.a, c.u};
  CHECK_OK(tpurt_program_launch(c.p, q, in, 1, out, 2, NULL, (tpurt_rng_t){9, 50000}));
  int64_t* want = rng_outputs(&c);
  CHECK_OK(tpurt_program_launch_bound(g[0].p, b, q, in, 1, out, 2, NULL, (tpurt_rng_t){9, 50000}));
  int64_t* got = rng_outputs(&c);
  CHECK(memcmp(got, want, (size_t)n * 24) == 0);
  CHECK(got[0] == 50000 && got[n] == 50000 + (int64_t)tpurt_rng_reservation(n) && got[3 * n - 1] == got[n] + 2 * n - 1);
  free(want);
  free(got);
  /* The captured size again, bound: the captured offsets. */
  CHECK_OK(tpurt_program_bind(g[0].p, &ns[0], 1, &b, NULL, &rng_count));
  CHECK(rng_count == tpurt_rng_reservation(101) + tpurt_rng_reservation(303));
  void *in0[1] = {g[0].x}, *out0[2] = {g[0].a, g[0].u};
  CHECK_OK(tpurt_program_launch_bound(g[0].p, b, q, in0, 1, out0, 2, NULL, (tpurt_rng_t){9, 0}));
  got = rng_outputs(&g[0]);
  CHECK(got[0] == 0 && got[101] == (int64_t)tpurt_rng_reservation(101));
  free(got);
  free_rng_graph(&c);
  for (int k = 0; k < 3; ++k) free_rng_graph(&g[k]);

  /* Counter values left between the calls: no rule, no size: the program keeps its sizes. */
  for (int k = 0; k < 3; ++k) g[k] = capture_rng(ns[k], 4);
  others[0] = g[1].p;
  others[1] = g[2].p;
  CHECK_STATUS(tpurt_program_generalize(g[0].p, others, 2, values, 1), FAILED_PRECONDITION);
  CHECK(tpurt_program_num_values(g[0].p) == 0);
  for (int k = 0; k < 3; ++k) free_rng_graph(&g[k]);
}

int main(void) {
  CHECK_OK(tpurt_init());
  CHECK_OK(tpurt_device_get(0, &g_dev));
  if (!g_dev) return 1;
  test_capture_then_launch();
  test_arena_reuses_dead_blocks();
  test_refusals();
  test_sizes_at_launch();
  test_random_offsets_at_launch();
  printf("test_capture: %d passed, %d failed\n", g_test_passed, g_test_failed);
  return g_test_failed ? 1 : 0;
}
