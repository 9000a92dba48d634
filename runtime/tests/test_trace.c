/* What the profiler and the memory tools read from the runtime: the device
 * activity trace (a launch and a device event per kernel and copy, linked by
 * id, with the issuer's correlation id; nothing while off), the cost rules
 * (mm and add by hand), the roofline projection, the allocator's observer
 * and snapshot, and float32 GEMMs at the MXU precisions against a double
 * reference. Runs on a 64 MiB chip. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cost.h"
#include "ops/linalg/gemm.h"
#include "test_util.h"
#include "tpurt/precision.h"
#include "tpurt/project.h"
#include "tpurt/trace.h"

#define MiB ((size_t)1 << 20)

static tpurt_device_t* g_dev;

static void* alloc(size_t bytes) {
  void* p = NULL;
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, bytes, &p));
  return p;
}

static tpurt_tensor_t vec(void* data, int64_t n) {
  return (tpurt_tensor_t){.data = data, .dtype = TPURT_DTYPE_FLOAT32, .ndim = 1, .sizes = {n}, .strides = {1}};
}

static tpurt_tensor_t mat(void* data, int64_t r, int64_t c) {
  return (tpurt_tensor_t){.data = data, .dtype = TPURT_DTYPE_FLOAT32, .ndim = 2, .sizes = {r, c}, .strides = {c, 1}};
}

/* add.out(a, b, alpha=1) -> out */
static tpurt_status_t submit_add(float* a, float* b, float* out, int64_t n) {
  tpurt_tensor_t ta = vec(a, n), tb = vec(b, n), to = vec(out, n);
  tpurt_arg_t args[3] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &ta},
                         {.kind = TPURT_ARG_TENSOR, .v.tensor = &tb},
                         {.kind = TPURT_ARG_INT, .v.i = 1}};
  tpurt_op_call_t call = {.name = "add", .overload = "out", .num_args = 3, .args = args, .num_outputs = 1, .outputs = &to};
  const tpurt_op_def_t* op = tpurt_op_resolve("add", "out", 0);
  CHECK(op != NULL);
  return tpurt_queue_submit_kernel(tpurt_device_default_queue(g_dev), op, &call);
}

static tpurt_status_t noop_fn(void* user) {
  (void)user;
  return TPURT_OK;
}

static void test_trace(void) {
  const int64_t n = 1 << 16;
  float* a = alloc(n * 4);
  float* b = alloc(n * 4);
  float* c = alloc(n * 4);
  /* Off: nothing is kept. */
  CHECK(!tpurt_trace_enabled());
  CHECK_OK(submit_add(a, b, c, n));
  CHECK_OK(tpurt_device_synchronize(g_dev));
  CHECK(tpurt_trace_count() == 0);

  tpurt_trace_enable(true);
  tpurt_trace_set_correlation(77);
  CHECK_OK(submit_add(a, b, c, n));
  tpurt_trace_set_correlation(78);
  CHECK_OK(tpurt_queue_submit_copy(tpurt_device_default_queue(g_dev), a, c, n * 4));
  CHECK_OK(tpurt_device_synchronize(g_dev));
  tpurt_trace_set_correlation(0);
  uint64_t busy = tpurt_trace_busy_ns();
  tpurt_trace_enable(false);
  tpurt_trace_event_t ev[8];
  size_t got = tpurt_trace_take(ev, 8);
  CHECK(got == 4);
  CHECK(tpurt_trace_count() == 0 && tpurt_trace_dropped() == 0);
  int launches = 0, kernels = 0, copies = 0;
  uint64_t dev_ns = 0;
  for (size_t i = 0; i < got; ++i) {
    if (ev[i].kind == TPURT_TRACE_LAUNCH) {
      ++launches;
      CHECK(ev[i].corr == 77 || ev[i].corr == 78);
      CHECK(ev[i].tid != 0 && ev[i].id != 0);
      /* its device event carries the same id */
      int found = 0;
      for (size_t j = 0; j < got; ++j)
        if (j != i && ev[j].id == ev[i].id && ev[j].kind != TPURT_TRACE_LAUNCH) {
          ++found;
          CHECK(ev[j].start_ns >= ev[i].start_ns); /* runs after it was launched */
        }
      CHECK(found == 1);
      if (ev[i].corr == 77) {
        CHECK(strcmp(ev[i].name, "add.out") == 0);
        CHECK(ev[i].flops == (double)n && ev[i].bytes == 3.0 * n * 4);
        CHECK(ev[i].dtype == TPURT_DTYPE_FLOAT32 && !(ev[i].flags & TPURT_TRACE_F_MATMUL));
      }
    } else {
      CHECK(ev[i].end_ns >= ev[i].start_ns);
      CHECK(ev[i].queue == 0 && ev[i].device == 0);
      dev_ns += ev[i].end_ns - ev[i].start_ns;
      if (ev[i].kind == TPURT_TRACE_KERNEL) ++kernels;
      if (ev[i].kind == TPURT_TRACE_COPY) {
        ++copies;
        CHECK(ev[i].bytes == 2.0 * n * 4);
      }
    }
  }
  CHECK(launches == 2 && kernels == 1 && copies == 1);
  CHECK(busy == dev_ns); /* every command's device time is one event */
  /* A host callback is a "call" event on its queue's track, under its name when it has one. */
  tpurt_trace_enable(true);
  CHECK_OK(tpurt_queue_submit_host_fn_named(tpurt_device_default_queue(g_dev), noop_fn, NULL, "tpu_dist allreduce"));
  CHECK_OK(tpurt_queue_submit_host_fn(tpurt_device_default_queue(g_dev), noop_fn, NULL));
  CHECK_OK(tpurt_device_synchronize(g_dev));
  tpurt_trace_enable(false);
  got = tpurt_trace_take(ev, 8);
  CHECK(got == 2);
  CHECK(ev[0].kind == TPURT_TRACE_CALL && strcmp(ev[0].name, "tpu_dist allreduce") == 0);
  CHECK(ev[1].kind == TPURT_TRACE_CALL && strcmp(ev[1].name, "host callback") == 0);
  CHECK(ev[0].end_ns <= ev[1].start_ns && ev[0].queue == 0);
  /* Enabling again starts afresh. */
  tpurt_trace_enable(true);
  CHECK(tpurt_trace_count() == 0 && tpurt_trace_busy_ns() == 0);
  tpurt_trace_enable(false);
  tpurt_memory_free(g_dev, a);
  tpurt_memory_free(g_dev, b);
  tpurt_memory_free(g_dev, c);
}

static void test_cost_and_projection(void) {
  float dummy[1];
  tpurt_tensor_t A = mat(dummy, 64, 32), B = mat(dummy, 32, 16), C = mat(dummy, 64, 16), bias = vec(dummy, 16);
  tpurt_arg_t mm_args[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &A}, {.kind = TPURT_ARG_TENSOR, .v.tensor = &B}};
  tpurt_op_call_t mm = {.name = "mm", .overload = "", .num_args = 2, .args = mm_args, .num_outputs = 1, .outputs = &C};
  tpurt_op_cost_t c;
  tpurt_op_cost(tpurt_op_lookup("mm"), &mm, &c);
  CHECK(c.flops == 2.0 * 64 * 16 * 32 && c.matmul);
  CHECK(c.bytes == (64 * 32 + 32 * 16 + 64 * 16) * 4.0);
  tpurt_arg_t addmm_args[3] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &bias}, mm_args[0], mm_args[1]};
  tpurt_op_call_t addmm = {.name = "addmm", .overload = "", .num_args = 3, .args = addmm_args, .num_outputs = 1, .outputs = &C};
  tpurt_op_cost(tpurt_op_lookup("addmm"), &addmm, &c);
  CHECK(c.flops == 2.0 * 64 * 16 * 32 + 64 * 16); /* K from mat1, not the bias */
  /* A broadcast operand counts its distinct elements. */
  tpurt_tensor_t bc = {.data = dummy, .dtype = TPURT_DTYPE_FLOAT32, .ndim = 2, .sizes = {64, 16}, .strides = {0, 1}};
  tpurt_arg_t add_args[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &C}, {.kind = TPURT_ARG_TENSOR, .v.tensor = &bc}};
  tpurt_op_call_t add = {.name = "add", .overload = "Tensor", .num_args = 2, .args = add_args, .num_outputs = 1, .outputs = &C};
  tpurt_op_cost(tpurt_op_lookup("add"), &add, &c);
  CHECK(c.flops == 64 * 16 && c.bytes == (64 * 16 * 2 + 16) * 4.0 && !c.matmul);

  const tpurt_project_chip_t* v6e = tpurt_project_chip_find("v6e");
  CHECK(v6e && v6e->bf16_flops == 918e12 && v6e->hbm_bytes_per_s == 1638e9);
  CHECK(tpurt_project_chip_find("ironwood") == tpurt_project_chip_find("v7"));
  CHECK(tpurt_project_chip_find("v9") == NULL && tpurt_project_chip_count() == 4);
  bool cb = true;
  /* 4096^3 bf16 GEMM: 2*4096^3 flops against 3*4096^2*2 bytes: compute-bound. */
  double f = 2.0 * 4096 * 4096 * 4096, by = 3.0 * 4096 * 4096 * 2;
  double t = tpurt_project_kernel_s(v6e, f, by, true, 1, 0, &cb);
  CHECK(cb && fabs(t - f / 918e12) < 1e-15);
  /* float32 at "high": three passes. */
  CHECK(fabs(tpurt_project_kernel_s(v6e, f, by, true, 3, 0, NULL) - 3 * f / 918e12) < 1e-15);
  /* A 64 MiB add: memory-bound, plus the launch cost. */
  double ab = 3.0 * 16 * MiB * 4;
  t = tpurt_project_kernel_s(v6e, 16.0 * MiB, ab, false, 1, 1e-6, &cb);
  CHECK(!cb && fabs(t - (ab / 1638e9 + 1e-6)) < 1e-15);
}

static uint32_t g_seen[4];
static uint64_t g_oom_size;

static void observer(void* user, tpurt_device_t* d, uint32_t event, uint64_t addr, uint64_t size, uint64_t q) {
  (void)user;
  (void)addr;
  (void)q;
  if (d == g_dev && event < 4) g_seen[event]++;
  if (event == TPURT_MEMORY_EVENT_OOM) g_oom_size = size;
}

static void test_memory_observer_and_snapshot(void) {
  CHECK_OK(tpurt_memory_empty_cache(g_dev));
  tpurt_memory_set_observer(observer, NULL);
  memset(g_seen, 0, sizeof g_seen);
  void* big = alloc(12 * MiB); /* its own segment */
  void* small = alloc(1000);
  CHECK(g_seen[TPURT_MEMORY_EVENT_SEGMENT_ALLOC] == 2);
  CHECK(tpurt_memory_block_size(g_dev, small) == 1024 && tpurt_memory_block_size(g_dev, big) >= 12 * MiB);
  size_t n = tpurt_memory_snapshot(g_dev, NULL, 0);
  tpurt_memory_block_info_t blocks[64];
  CHECK(n >= 3 && n <= 64 && tpurt_memory_snapshot(g_dev, blocks, 64) == n);
  uint64_t live = 0, total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (blocks[i].state == 1) live += blocks[i].size;
    CHECK(blocks[i].addr >= blocks[i].segment && blocks[i].addr + blocks[i].size <= blocks[i].segment + blocks[i].segment_size);
    total += blocks[i].size;
  }
  tpurt_memory_stats_t st;
  CHECK_OK(tpurt_memory_stats(g_dev, &st));
  CHECK(live == st.allocated_bytes && total == st.reserved_bytes);
  void* none = NULL;
  CHECK_STATUS(tpurt_memory_allocate(g_dev, NULL, 1u << 30, &none), RESOURCE_EXHAUSTED);
  CHECK(g_seen[TPURT_MEMORY_EVENT_OOM] == 1 && g_oom_size == 1u << 30);
  tpurt_memory_free(g_dev, big);
  tpurt_memory_free(g_dev, small);
  CHECK_OK(tpurt_memory_empty_cache(g_dev));
  CHECK(g_seen[TPURT_MEMORY_EVENT_SEGMENT_FREE] >= 2);
  tpurt_memory_set_observer(NULL, NULL);
  CHECK(tpurt_memory_block_size(g_dev, small) == 0);
}

/* float32 GEMM at each precision against a double product: the error orders
 * of one bf16 pass, bf16x3 and float32. */
static void test_precision(void) {
  enum { M = 48, K = 256, N = 40 };
  static float a[M * K], b[K * N], c[M * N];
  for (int i = 0; i < M * K; ++i) a[i] = (float)(test_rand_unit() * 2 - 1);
  for (int i = 0; i < K * N; ++i) b[i] = (float)(test_rand_unit() * 2 - 1);
  static double ref[M * N];
  double scale = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int p = 0; p < K; ++p) s += (double)a[i * K + p] * b[p * N + j];
      ref[i * N + j] = s;
      scale = fmax(scale, fabs(s));
    }
  double err[3];
  for (int prec = 0; prec < 3; ++prec) {
    tpurt_fp32_precision_override(prec);
    tpurt_gemm_t g = {.m = M, .n = N, .k = K, .ab_dtype = TPURT_DTYPE_FLOAT32, .c_dtype = TPURT_DTYPE_FLOAT32,
                      .a = a, .a_rs = K, .a_cs = 1, .b = b, .b_rs = N, .b_cs = 1, .c = c, .c_rs = N, .c_cs = 1,
                      .alpha = 1.0, .beta = 0.0};
    CHECK(tpurt_gemm_fp32_split_wanted(&g) == (prec != TPURT_FP32_HIGHEST));
    void* ws = NULL;
    CHECK(posix_memalign(&ws, 64, tpurt_gemm_workspace_bytes(NULL, &g) + 64) == 0);
    CHECK_OK(tpurt_gemm(NULL, &g, ws)); /* the split runs inside tpurt_gemm */
    free(ws);
    double e = 0;
    for (int i = 0; i < M * N; ++i) e = fmax(e, fabs(c[i] - ref[i]));
    err[prec] = e / scale;
  }
  tpurt_fp32_precision_override(-1);
  CHECK(tpurt_fp32_precision() == TPURT_FP32_HIGHEST);
  CHECK(err[TPURT_FP32_HIGHEST] < 2e-6);
  CHECK(err[TPURT_FP32_HIGH] > 3 * err[TPURT_FP32_HIGHEST] && err[TPURT_FP32_HIGH] < 5e-5);
  CHECK(err[TPURT_FP32_MEDIUM] > 5e-4 && err[TPURT_FP32_MEDIUM] < 1e-2);
  CHECK(tpurt_fp32_precision_passes(TPURT_FP32_HIGHEST) == 6 && tpurt_fp32_precision_passes(TPURT_FP32_HIGH) == 3 &&
        tpurt_fp32_precision_passes(TPURT_FP32_MEDIUM) == 1);
}

int main(void) {
  setenv("TORCH_TPU_HBM_BYTES", "64M", 1);
  CHECK_OK(tpurt_init());
  CHECK_OK(tpurt_device_get(0, &g_dev));
  if (!g_dev) return test_finish("test_trace");
  test_trace();
  test_cost_and_projection();
  test_memory_observer_and_snapshot();
  test_precision();
  return test_finish("test_trace");
}
