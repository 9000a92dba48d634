/* Programs as bytes and exported artifacts (tpurt/program.h serialize /
 * deserialize, tpurt/export.h): a program read back computes what the
 * captured one computes; damaged bytes, addresses outside their storage, a
 * kernel outside the op table and device memory the program does not own are
 * refused with a status naming the problem; an artifact runs from C with
 * its weights, writes an updated weight back, and keeps its manifest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/defer/program_internal.h" /* to play a crafted file's sizes (test_sized_round_trip) */
#include "test_util.h"
#include "tpurt/export.h"

static tpurt_device_t* g_dev;

#define N 1000

static tpurt_tensor_t vec(void* p, int64_t n) {
  return (tpurt_tensor_t){.data = p, .dtype = TPURT_DTYPE_FLOAT32, .ndim = 1, .sizes = {n}, .strides = {1}};
}

static void* dev_alloc(size_t bytes) {
  void* p = NULL;
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, bytes, &p));
  return p;
}

/* out = a * b (b a tensor) or a + s (b NULL), through the op table. */
static void binary(const char* op, void* out, void* a, void* b, double s) {
  tpurt_tensor_t to = vec(out, N), ta = vec(a, N), tb = vec(b, N);
  tpurt_arg_t args[3] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &ta}};
  if (b) args[1] = (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .v.tensor = &tb};
  else args[1] = (tpurt_arg_t){.kind = TPURT_ARG_DOUBLE, .v.d = s};
  args[2] = (tpurt_arg_t){.kind = TPURT_ARG_INT, .v.i = 1};
  tpurt_op_call_t call = {op, "Tensor", strcmp(op, "add") == 0 ? 3 : 2, args, 1, &to};
  CHECK_OK(tpurt_queue_submit_kernel(tpurt_device_default_queue(g_dev), tpurt_op_lookup(op), &call));
}

/* Captures out = x * w + 1 and copy = x (inputs x, w; outputs out, copy). */
static tpurt_program_t* capture_axpb(void* x, void* w) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  CHECK_OK(tpurt_capture_begin(q));
  void* t1 = dev_alloc(N * 4);
  binary("mul", t1, x, w, 0);
  void* out = dev_alloc(N * 4);
  binary("add", out, t1, NULL, 1.0);
  tpurt_memory_free(g_dev, t1);
  void* copy = dev_alloc(N * 4);
  CHECK_OK(tpurt_queue_submit_copy(q, copy, x, N * 4));
  tpurt_program_range_t ins[2] = {{x, N * 4}, {w, N * 4}}, outs[2] = {{out, N * 4}, {copy, N * 4}};
  tpurt_program_t* p = NULL;
  CHECK_OK(tpurt_capture_end(q, ins, 2, outs, 2, 0, 0, 0, &p));
  tpurt_memory_free(g_dev, out);
  tpurt_memory_free(g_dev, copy);
  return p;
}

static void run(tpurt_program_t* p, void* x, void* w, float* out_host, float* copy_host) {
  tpurt_program_info_t info;
  tpurt_program_query(p, &info);
  void* out = dev_alloc(N * 4);
  void* copy = dev_alloc(N * 4);
  void* arena = dev_alloc(info.arena_bytes);
  void *ins[2] = {x, w}, *outs[2] = {out, copy};
  CHECK_OK(tpurt_program_launch(p, tpurt_device_default_queue(g_dev), ins, 2, outs, 2, arena, (tpurt_rng_t){0, 0}));
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, out_host, out, N * 4));
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, copy_host, copy, N * 4));
  tpurt_memory_free(g_dev, out);
  tpurt_memory_free(g_dev, copy);
  tpurt_memory_free(g_dev, arena);
}

static float hx[N], hw[N];

static void test_round_trip(void) {
  void* x = dev_alloc(N * 4);
  void* w = dev_alloc(N * 4);
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, x, hx, N * 4));
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, w, hw, N * 4));
  tpurt_program_t* p = capture_axpb(x, w);
  if (!p) return;
  void* bytes = NULL;
  size_t n = 0;
  CHECK_OK(tpurt_program_serialize(p, &bytes, &n));
  tpurt_program_t* q = NULL;
  uint64_t sizes[2] = {N * 4, N * 4};
  CHECK_OK(tpurt_program_deserialize(bytes, n, sizes, 2, sizes, 2, &q));
  if (!q) return;
  tpurt_program_info_t a, b;
  tpurt_program_query(p, &a);
  tpurt_program_query(q, &b);
  CHECK(a.num_records == b.num_records && a.num_kernels == b.num_kernels && a.arena_bytes == b.arena_bytes);
  CHECK(b.num_inputs == 2 && b.num_outputs == 2);
  float o1[N], c1[N], o2[N], c2[N];
  run(p, x, w, o1, c1);
  run(q, x, w, o2, c2);
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += o1[i] != hx[i] * hw[i] + 1 || o2[i] != o1[i] || c2[i] != hx[i] || c1[i] != hx[i];
  CHECK(bad == 0);
  /* the same bytes again: a program reads back to what it was written from */
  void* again = NULL;
  size_t n2 = 0;
  CHECK_OK(tpurt_program_serialize(q, &again, &n2));
  CHECK(n2 == n && again && memcmp(again, bytes, n) == 0);
  free(again);

  /* damaged, truncated, out of bounds */
  tpurt_program_t* r = NULL;
  uint8_t* bad_bytes = malloc(n);
  memcpy(bad_bytes, bytes, n);
  bad_bytes[n / 2] ^= 0x40;
  CHECK_STATUS(tpurt_program_deserialize(bad_bytes, n, NULL, 0, NULL, 0, &r), DATA_LOSS);
  CHECK_STATUS(tpurt_program_deserialize(bytes, n - 9, NULL, 0, NULL, 0, &r), DATA_LOSS);
  CHECK_STATUS(tpurt_program_deserialize(bytes, 4, NULL, 0, NULL, 0, &r), DATA_LOSS);
  uint64_t small[2] = {N * 4, N * 2}; /* w's storage said to be half as big: mul reads past it */
  CHECK_STATUS(tpurt_program_deserialize(bytes, n, small, 2, sizes, 2, &r), DATA_LOSS);
  uint64_t small_out[2] = {N * 4, N * 2}; /* the copy writes past output 1 */
  CHECK_STATUS(tpurt_program_deserialize(bytes, n, sizes, 2, small_out, 2, &r), DATA_LOSS);
  CHECK_STATUS(tpurt_program_deserialize(bytes, n, sizes, 1, sizes, 2, &r), DATA_LOSS); /* one input described, two held */
  CHECK(r == NULL);
  free(bad_bytes);
  free(bytes);
  tpurt_program_release(p);
  tpurt_program_release(q);
  tpurt_memory_free(g_dev, x);
  tpurt_memory_free(g_dev, w);
}

/* out = in * 2 with a kernel only this test knows. */
static tpurt_status_t k_twice(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const float* x = call->args[0].v.tensor->data;
  float* y = call->outputs[0].data;
  for (int64_t i = 0; i < N; ++i) y[i] = x[i] * 2;
  return TPURT_OK;
}
static const tpurt_op_def_t op_twice = {"twice_private", k_twice, k_twice, 0};

static void test_refusals(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  void* x = dev_alloc(N * 4);
  void* keep = dev_alloc(N * 4); /* alive before the capture, not an input: "fixed" */
  CHECK_OK(tpurt_capture_begin(q));
  void* out = dev_alloc(N * 4);
  binary("mul", out, x, keep, 0);
  tpurt_program_range_t ins[1] = {{x, N * 4}}, outs[1] = {{out, N * 4}};
  tpurt_program_t* p = NULL;
  CHECK_OK(tpurt_capture_end(q, ins, 1, outs, 1, 0, 0, 0, &p));
  void* bytes = NULL;
  size_t n = 0;
  tpurt_status_t s = tpurt_program_serialize(p, &bytes, &n);
  CHECK(s && tpurt_status_code(s) == TPURT_STATUS_FAILED_PRECONDITION &&
        strstr(tpurt_status_message(s), "not an input, an output"));
  tpurt_status_free(s);
  CHECK(bytes == NULL);
  tpurt_program_release(p);
  tpurt_memory_free(g_dev, out);

  tpurt_tensor_t ti = vec(x, N), to;
  tpurt_arg_t arg = {.kind = TPURT_ARG_TENSOR, .v.tensor = &ti};
  tpurt_op_call_t call = {"twice_private", "", 1, &arg, 1, &to};
  CHECK_OK(tpurt_capture_begin(q));
  void* out2 = dev_alloc(N * 4);
  to = vec(out2, N);
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_twice, &call));
  tpurt_program_range_t outs2[1] = {{out2, N * 4}};
  p = NULL;
  CHECK_OK(tpurt_capture_end(q, ins, 1, outs2, 1, 0, 0, 0, &p));
  s = tpurt_program_serialize(p, &bytes, &n);
  CHECK(s && tpurt_status_code(s) == TPURT_STATUS_FAILED_PRECONDITION && strstr(tpurt_status_message(s), "op table"));
  tpurt_status_free(s);
  tpurt_program_release(p);
  tpurt_memory_free(g_dev, out2);
  tpurt_memory_free(g_dev, x);
  tpurt_memory_free(g_dev, keep);
}

static void test_artifact(void) {
  void* x = dev_alloc(N * 4);
  void* w = dev_alloc(N * 4);
  tpurt_program_t* p = capture_axpb(x, w);
  if (!p) return;
  char path[] = "/tmp/tpurt_test_export_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  /* w is the weight; the copy of x writes back into it after each run. */
  tpurt_export_tensor_t t[4] = {
      {.name = "x", .role = TPURT_EXPORT_INPUT, .dtype = TPURT_DTYPE_FLOAT32, .ndim = 1, .sizes = {N}, .strides = {1},
       .storage_bytes = N * 4, .program_index = 0, .writes_back = -1},
      {.name = "w", .role = TPURT_EXPORT_WEIGHT, .dtype = TPURT_DTYPE_FLOAT32, .ndim = 1, .sizes = {N}, .strides = {1},
       .storage_bytes = N * 4, .program_index = 1, .writes_back = -1, .data = hw},
      {.name = "y", .role = TPURT_EXPORT_OUTPUT, .dtype = TPURT_DTYPE_FLOAT32, .ndim = 2, .sizes = {N / 2, 2},
       .strides = {1, N / 2}, .storage_bytes = N * 4, .program_index = 0, .writes_back = -1},
      {.name = "w_new", .role = TPURT_EXPORT_OUTPUT, .dtype = TPURT_DTYPE_FLOAT32, .ndim = 1, .sizes = {N},
       .strides = {1}, .storage_bytes = N * 4, .program_index = 1, .writes_back = 1},
  };
  const char manifest[] = "{\"hello\": 1}";
  CHECK_OK(tpurt_export_save(path, p, t, 4, manifest, sizeof(manifest) - 1));
  tpurt_program_release(p);
  tpurt_memory_free(g_dev, x);
  tpurt_memory_free(g_dev, w);

  tpurt_export_t* e = NULL;
  CHECK_OK(tpurt_export_load(path, &e));
  if (!e) return;
  size_t ml = 0;
  const char* m = tpurt_export_manifest(e, &ml);
  CHECK(ml == sizeof(manifest) - 1 && memcmp(m, manifest, ml) == 0);
  CHECK(tpurt_export_num_tensors(e) == 4 && strcmp(tpurt_export_tensor(e, 1)->name, "w") == 0);
  CHECK(tpurt_export_tensor(e, 2)->sizes[1] == 2 && tpurt_export_tensor(e, 2)->strides[1] == N / 2);
  CHECK(tpurt_export_output_storage_bytes(e, 0) == N * 4 && tpurt_export_output_storage_bytes(e, 1) == N * 4);
  CHECK(tpurt_export_output_storage_bytes(e, 2) == 0);
  tpurt_export_session_t* s = NULL;
  CHECK_OK(tpurt_export_session_create(e, g_dev, NULL, &s));
  float y[N], wn[N], x2[N];
  const void* ins[1] = {hx};
  void* outs[2] = {y, wn};
  CHECK_OK(tpurt_export_session_run(s, ins, outs));
  int bad = 0;
  for (int i = 0; i < N; ++i) { /* y[i][j] = out[i + j * N/2], a transposed view */
    int r = i / 2, c = i % 2;
    bad += y[i] != hx[r + c * (N / 2)] * hw[r + c * (N / 2)] + 1 || wn[i] != hx[i];
  }
  CHECK(bad == 0);
  for (int i = 0; i < N; ++i) x2[i] = 0.5f * (float)i;
  ins[0] = x2;
  CHECK_OK(tpurt_export_session_run(s, ins, outs)); /* w is now the first run's x */
  bad = 0;
  for (int i = 0; i < N; ++i) {
    int r = i / 2, c = i % 2, k = r + c * (N / 2);
    bad += y[i] != x2[k] * hx[k] + 1;
  }
  CHECK(bad == 0);
  CHECK_STATUS(tpurt_export_session_run(s, NULL, outs), INVALID_ARGUMENT);
  tpurt_export_session_free(s);
  tpurt_export_free(e);

  /* a damaged file, a truncated one, not an artifact */
  FILE* f = fopen(path, "r+b");
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, size / 2, SEEK_SET);
  int c = fgetc(f);
  fseek(f, size / 2, SEEK_SET);
  fputc(c ^ 1, f);
  fclose(f);
  e = NULL;
  CHECK_STATUS(tpurt_export_load(path, &e), DATA_LOSS);
  CHECK(truncate(path, size - 100) == 0);
  CHECK_STATUS(tpurt_export_load(path, &e), DATA_LOSS);
  CHECK(truncate(path, 3) == 0);
  CHECK_STATUS(tpurt_export_load(path, &e), DATA_LOSS);
  unlink(path);
  CHECK_STATUS(tpurt_export_load(path, &e), NOT_FOUND);
  CHECK(e == NULL);
}

/* out = x * w + 1 over n floats (through an intermediate) and copy = x, captured at size n. */
static tpurt_program_t* capture_sized(int64_t n, void* x, void* w) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  CHECK_OK(tpurt_capture_begin(q));
  void* t1 = dev_alloc((size_t)n * 4);
  void* out = dev_alloc((size_t)n * 4);
  void* copy = dev_alloc((size_t)n * 4);
  tpurt_tensor_t tx = vec(x, n), tw = vec(w, n), tt = vec(t1, n), to = vec(out, n);
  tpurt_arg_t m[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &tx}, {.kind = TPURT_ARG_TENSOR, .v.tensor = &tw}};
  tpurt_op_call_t cm = {"mul", "Tensor", 2, m, 1, &tt};
  CHECK_OK(tpurt_queue_submit_kernel(q, tpurt_op_lookup("mul"), &cm));
  tpurt_arg_t a[3] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &tt},
                      {.kind = TPURT_ARG_DOUBLE, .v.d = 1.0},
                      {.kind = TPURT_ARG_INT, .v.i = 1}};
  tpurt_op_call_t ca = {"add", "Tensor", 3, a, 1, &to};
  CHECK_OK(tpurt_queue_submit_kernel(q, tpurt_op_lookup("add"), &ca));
  tpurt_memory_free(g_dev, t1);
  CHECK_OK(tpurt_queue_submit_copy(q, copy, x, (size_t)n * 4));
  tpurt_program_range_t ins[2] = {{x, (uint64_t)n * 4}, {w, (uint64_t)n * 4}},
                        outs[2] = {{out, (uint64_t)n * 4}, {copy, (uint64_t)n * 4}};
  tpurt_program_t* p = NULL;
  CHECK_OK(tpurt_capture_end(q, ins, 2, outs, 2, 0, 0, 0, &p));
  tpurt_memory_free(g_dev, out);
  tpurt_memory_free(g_dev, copy);
  return p;
}

/* Runs p (bound to size n) on the first n of hx / hw; checks out and copy. */
static void run_sized(tpurt_program_t* p, int64_t n) {
  int64_t values[2] = {n, 4 * n};
  tpurt_program_binding_t* b = NULL;
  uint64_t arena_bytes = 0, rng_count = 0;
  CHECK_OK(tpurt_program_bind(p, values, 2, &b, &arena_bytes, &rng_count));
  if (!b) return;
  uint64_t bytes[2] = {(uint64_t)n * 4, (uint64_t)n * 4}, half[2] = {(uint64_t)n * 4, (uint64_t)n * 2};
  CHECK_OK(tpurt_program_check_storages(p, b, bytes, 2, bytes, 2));
  if (p->untrusted) { /* too small a storage is named; a captured program's sizes came from a run */
    CHECK_STATUS(tpurt_program_check_storages(p, b, half, 2, bytes, 2), INVALID_ARGUMENT);
    CHECK_STATUS(tpurt_program_check_storages(p, b, bytes, 2, half, 2), INVALID_ARGUMENT);
  }
  void* x = dev_alloc((size_t)n * 4);
  void* w = dev_alloc((size_t)n * 4);
  void* out = dev_alloc((size_t)n * 4);
  void* copy = dev_alloc((size_t)n * 4);
  void* arena = dev_alloc(arena_bytes ? arena_bytes : 1);
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, x, hx, (size_t)n * 4));
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, w, hw, (size_t)n * 4));
  void *ins[2] = {x, w}, *outs[2] = {out, copy};
  CHECK_OK(tpurt_program_launch_bound(p, b, tpurt_device_default_queue(g_dev), ins, 2, outs, 2, arena,
                                      (tpurt_rng_t){0, 0}));
  float* o = malloc((size_t)n * 4);
  float* c = malloc((size_t)n * 4);
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, o, out, (size_t)n * 4));
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, c, copy, (size_t)n * 4));
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += o[i] != hx[i] * hw[i] + 1 || c[i] != hx[i];
  CHECK(bad == 0);
  free(o);
  free(c);
  void* bufs[5] = {x, w, out, copy, arena};
  for (int k = 0; k < 5; ++k) tpurt_memory_free(g_dev, bufs[k]);
}

/* A program that takes sizes keeps them through bytes: read back, it runs at sizes never captured,
 * and a binding whose addresses leave its arena blocks (what a crafted file could say) is refused. */
static void test_sized_round_trip(void) {
  const int64_t ns[3] = {N, 600, 800};
  tpurt_program_t* p[3];
  void *x = dev_alloc(N * 4), *w = dev_alloc(N * 4);
  for (int k = 0; k < 3; ++k) p[k] = capture_sized(ns[k], x, w);
  int64_t values[6] = {N, 4 * N, 600, 2400, 800, 3200};
  const tpurt_program_t* others[2] = {p[1], p[2]};
  CHECK_OK(tpurt_program_generalize(p[0], others, 2, values, 2));
  const int64_t* v0 = tpurt_program_values(p[0]);
  CHECK(v0 && v0[0] == N && v0[1] == 4 * N && tpurt_program_values(p[1]) == NULL);
  void* bytes = NULL;
  size_t n = 0;
  CHECK_OK(tpurt_program_serialize(p[0], &bytes, &n));
  tpurt_program_t* q = NULL;
  CHECK_OK(tpurt_program_deserialize(bytes, n, NULL, 0, NULL, 0, &q));
  if (!q) return;
  CHECK(tpurt_program_num_values(q) == 2 && tpurt_program_values(q)[0] == N);
  run_sized(p[0], 333);
  run_sized(q, 333);
  run_sized(q, 7);
  run_sized(q, N);
  void* again = NULL;
  size_t n2 = 0;
  CHECK_OK(tpurt_program_serialize(q, &again, &n2));
  CHECK(n2 == n && again && memcmp(again, bytes, n) == 0);
  free(again);
  /* A launch without a binding is refused; so is a binding whose records leave their arena block. */
  void *ins[2] = {x, w}, *outs[2] = {x, w};
  CHECK_STATUS(tpurt_program_launch(q, tpurt_device_default_queue(g_dev), ins, 2, outs, 2, x, (tpurt_rng_t){0, 0}),
               INVALID_ARGUMENT);
  tpurt_program_t* r = NULL;
  CHECK_OK(tpurt_program_deserialize(bytes, n, NULL, 0, NULL, 0, &r));
  int crafted = 0;
  for (int32_t b = 0; r && b < r->num_blocks; ++b)
    if (r->block_syms[b].value >= 0 && r->blocks[b].in_arena) r->block_syms[b].coef /= 2, crafted++;
  CHECK(crafted == 1);
  int64_t at[2] = {500, 2000};
  tpurt_program_binding_t* bb = NULL;
  CHECK_STATUS(tpurt_program_bind(r, at, 2, &bb, NULL, NULL), DATA_LOSS);
  CHECK(bb == NULL);
  tpurt_program_release(r);
  tpurt_program_release(q);
  free(bytes);
  for (int k = 0; k < 3; ++k) tpurt_program_release(p[k]);
  tpurt_memory_free(g_dev, x);
  tpurt_memory_free(g_dev, w);
}

/* A program of more records than a list first holds (64), copies among them: the records array grows
 * while the bytes are read, and each copy's relocations point into its record (they once pointed into
 * the array before it moved: a launch then wrote through freed memory). */
static void test_long_round_trip(void) {
  enum { STEPS = 100 }; /* an add and a copy each, and frees */
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  void* x = dev_alloc(N * 4);
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, x, hx, N * 4));
  CHECK_OK(tpurt_capture_begin(q));
  void* cur = x;
  for (int s = 0; s < STEPS; ++s) {
    void* t = dev_alloc(N * 4);
    binary("add", t, cur, NULL, 1.0);
    void* c = dev_alloc(N * 4);
    CHECK_OK(tpurt_queue_submit_copy(q, c, t, N * 4));
    tpurt_memory_free(g_dev, t);
    if (cur != x) tpurt_memory_free(g_dev, cur);
    cur = c;
  }
  tpurt_program_range_t ins[1] = {{x, N * 4}}, outs[1] = {{cur, N * 4}};
  tpurt_program_t* p = NULL;
  CHECK_OK(tpurt_capture_end(q, ins, 1, outs, 1, 0, 0, 0, &p));
  tpurt_memory_free(g_dev, cur);
  if (!p) return;
  void* bytes = NULL;
  size_t n = 0;
  CHECK_OK(tpurt_program_serialize(p, &bytes, &n));
  tpurt_program_t* r = NULL;
  uint64_t sizes[1] = {N * 4};
  CHECK_OK(tpurt_program_deserialize(bytes, n, sizes, 1, sizes, 1, &r));
  free(bytes);
  if (!r) {
    tpurt_program_release(p);
    return;
  }
  tpurt_program_info_t info;
  tpurt_program_query(r, &info);
  CHECK(info.num_records > 128); /* the list grew twice while read */
  for (int k = 0; k < 2; ++k) {
    tpurt_program_t* prog = k ? r : p;
    tpurt_program_query(prog, &info);
    void* out = dev_alloc(N * 4);
    void* arena = dev_alloc(info.arena_bytes);
    void *in[1] = {x}, *o[1] = {out};
    CHECK_OK(tpurt_program_launch(prog, q, in, 1, o, 1, arena, (tpurt_rng_t){0, 0}));
    float h[N];
    CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, h, out, N * 4));
    int bad = 0;
    for (int i = 0; i < N; ++i) bad += h[i] != hx[i] + STEPS;
    CHECK(bad == 0);
    tpurt_memory_free(g_dev, out);
    tpurt_memory_free(g_dev, arena);
  }
  tpurt_program_release(p);
  tpurt_program_release(r);
  tpurt_memory_free(g_dev, x);
}

int main(void) {
  CHECK_OK(tpurt_init());
  CHECK_OK(tpurt_device_get(0, &g_dev));
  if (!g_dev) return 1;
  for (int i = 0; i < N; ++i) {
    hx[i] = (float)(i % 97) - 40.0f;
    hw[i] = 0.25f * (float)(i % 13);
  }
  test_round_trip();
  test_long_round_trip();
  test_sized_round_trip();
  test_refusals();
  test_artifact();
  printf("test_export: %d passed, %d failed\n", g_test_passed, g_test_failed);
  return g_test_failed ? 1 : 0;
}
