/* Debug mode's checks (exec/debug/): guarded allocations, a kernel writing
 * past its buffer / reading freed memory / writing into the alignment pad,
 * host code reading freed device memory, the quarantine and its budget, and
 * the NaN/Inf check. Each violation must come back as a status naming the op,
 * with the neighbouring data intact. */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tpurt/debug.h"

static tpurt_device_t* g_dev;

static bool has(tpurt_status_t s, const char* text) {
  return s && strstr(tpurt_status_message(s), text) != NULL;
}

/* Runs the "_debug_touch" kernel over [p, p+n); returns its status. */
static tpurt_status_t touch(void* p, int64_t n, bool write) {
  tpurt_tensor_t t = {.data = p, .dtype = TPURT_DTYPE_UINT8, .ndim = 1, .sizes = {n}, .strides = {1}};
  tpurt_arg_t args[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &t}, {.kind = TPURT_ARG_BOOL, .v.b = write}};
  tpurt_op_call_t call = {.name = "_debug_touch", .overload = "", .num_args = 2, .args = args};
  return tpurt_queue_submit_kernel(tpurt_device_default_queue(g_dev), tpurt_debug_touch_op(), &call);
}

static void* alloc(size_t n) {
  void* p = NULL;
  tpurt_status_t s = tpurt_memory_allocate(g_dev, NULL, n, &p);
  CHECK(s == NULL);
  tpurt_status_free(s);
  return p;
}

static void fill(void* p, uint8_t v, size_t n) {
  uint8_t* buf = malloc(n);
  memset(buf, v, n);
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, p, buf, n));
  free(buf);
}

static bool all_equal(const void* p, uint8_t v, size_t n) {
  uint8_t* buf = malloc(n);
  tpurt_status_t s = tpurt_memcpy_d2h(g_dev, NULL, buf, p, n);
  bool ok = !s;
  tpurt_status_free(s);
  for (size_t i = 0; ok && i < n; ++i) ok = buf[i] == v;
  free(buf);
  return ok;
}

static void test_guarded_allocations(void) {
  tpurt_debug_stats_t st0, st1;
  tpurt_debug_stats(&st0);
  void* a = alloc(1000);
  void* z = alloc(0);
  tpurt_debug_stats(&st1);
  CHECK(st1.guarded_allocs == st0.guarded_allocs + 2);
  CHECK(((uintptr_t)a & 63) == 0 && ((uintptr_t)z & 63) == 0 && a != z);
  CHECK(tpurt_memory_is_device_ptr(g_dev, a));
  fill(a, 7, 1000);
  CHECK(all_equal(a, 7, 1000));
  CHECK_OK(touch(a, 1000, true)); /* in bounds: fine */
  CHECK(all_equal(a, 8, 1000));
  CHECK_OK(tpurt_memory_record_queue(g_dev, a, tpurt_device_default_queue(g_dev)));
  tpurt_memory_free(g_dev, a);
  tpurt_memory_free(g_dev, z);
}

static void test_kernel_write_past_end(void) {
  uint8_t* a = alloc(4096);
  uint8_t* b = alloc(4096);
  fill(a, 1, 4096);
  fill(b, 2, 4096);
  tpurt_debug_stats_t st0, st1;
  tpurt_debug_stats(&st0);
  tpurt_status_t s = touch(a, 4096 + 100, true);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_INTERNAL);
  CHECK(has(s, "aten::_debug_touch: device memory violation"));
  CHECK(has(s, "of a 4096-byte buffer (0 bytes past its end)"));
  tpurt_status_free(s);
  tpurt_debug_stats(&st1);
  CHECK(st1.violations == st0.violations + 1 && st1.patched_pages > st0.patched_pages);
  CHECK(all_equal(b, 2, 4096)); /* the neighbour is intact */
  CHECK(all_equal(a, 2, 4096)); /* the in-bounds part ran (1 + 1) */
  /* The guard is back: the same bug is caught again. */
  s = touch(a + 4000, 200, false);
  CHECK(has(s, "read at") && has(s, "of a 4096-byte buffer"));
  tpurt_status_free(s);
  /* Before the start. */
  s = touch(a - 16, 16, false);
  CHECK(has(s, "16 bytes before the start of a 4096-byte buffer"));
  tpurt_status_free(s);
  CHECK_OK(touch(a, 4096, false)); /* the device keeps working */
  tpurt_memory_free(g_dev, a);
  tpurt_memory_free(g_dev, b);
}

static void test_kernel_write_into_pad(void) {
  uint8_t* a = alloc(100); /* 28 pad bytes before the guard page */
  tpurt_status_t s = touch(a, 104, true);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_INTERNAL);
  CHECK(has(s, "_debug_touch: device memory violation: write") && has(s, "offset 100 of a 100-byte buffer") &&
        has(s, "alignment padding"));
  tpurt_status_free(s);
  CHECK_OK(touch(a, 100, true));
  tpurt_memory_free(g_dev, a);
}

static void test_kernel_reads_freed_memory(void) {
  uint8_t* a = alloc(8192);
  tpurt_memory_free(g_dev, a);
  tpurt_debug_stats_t st;
  tpurt_debug_stats(&st);
  CHECK(st.quarantined_bytes >= 8192);
  tpurt_status_t s = touch(a + 8, 4, false);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_INTERNAL);
  CHECK(has(s, "_debug_touch: device memory violation: read") && has(s, "in a freed 8192-byte buffer (offset 8)"));
  tpurt_status_free(s);
  /* Freed memory is not handed out again while quarantined. */
  void* b = alloc(8192);
  CHECK(b != a);
  tpurt_memory_free(g_dev, b);
}

static void test_host_reads_freed_memory(void) {
  volatile uint8_t* a = alloc(256);
  tpurt_memory_free(g_dev, (void*)a);
  uint8_t v = a[3]; /* a stray host read: faults, gets a scratch page */
  CHECK(v == 0);
  void* c = alloc(64);
  tpurt_status_t s = touch(c, 64, false); /* the next op reports it and does not run */
  CHECK(tpurt_status_code(s) == TPURT_STATUS_INTERNAL);
  CHECK(has(s, "_debug_touch (not run): device memory violation by host code") && has(s, "freed 256-byte buffer (offset 3)"));
  tpurt_status_free(s);
  CHECK_OK(tpurt_debug_take_violation());
  CHECK_OK(touch(c, 64, false));
  /* tpurt_debug_take_violation reports it too (for a sync point). */
  v = a[5];
  s = tpurt_debug_take_violation();
  CHECK(has(s, "by host code") && has(s, "(offset 5)"));
  tpurt_status_free(s);
  tpurt_memory_free(g_dev, c);
}

/* Live buffers are inaccessible to host code in Debug mode (rule 5 of
 * debug.c): a stray read or write is reported as host code touching device
 * memory, by the next op, host copy or synchronize; the device data is not
 * changed by a stray write. The runtime's own copies and kernels go on. */
static void test_host_touches_live_memory(void) {
  volatile uint8_t* a = alloc(64);
  fill((void*)a, 9, 64);
  uint8_t v = a[8]; /* stray host read of a live buffer */
  CHECK(v == 0);    /* a scratch page, not the data */
  void* c = alloc(64);
  tpurt_status_t s = touch(c, 64, false);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_INTERNAL);
  CHECK(has(s, "_debug_touch (not run): host code touched device memory at 0x") &&
        has(s, "(offset 8 of a 64-byte buffer): a read"));
  tpurt_status_free(s);
  CHECK(all_equal((const void*)a, 9, 64)); /* the runtime's copy still reads the data */
  /* A stray write: reported by the next host copy; the data is unchanged. */
  a[3] = 77;
  uint8_t buf[64];
  s = tpurt_memcpy_d2h(g_dev, NULL, buf, (const void*)a, 64);
  CHECK(has(s, "memcpy_d2h") && has(s, "host code touched device memory") && has(s, "(offset 3 of a 64-byte buffer): a write"));
  tpurt_status_free(s);
  CHECK(all_equal((const void*)a, 9, 64));
  /* ... and by synchronize. */
  v = a[63];
  s = tpurt_device_synchronize(g_dev);
  CHECK(has(s, "host code touched device memory") && has(s, "(offset 63 of a 64-byte buffer)"));
  tpurt_status_free(s);
  CHECK_OK(tpurt_device_synchronize(g_dev));
  /* Kernels still reach their own tensors; queued device copies work. */
  CHECK_OK(touch((void*)a, 64, true));
  CHECK(all_equal((const void*)a, 10, 64));
  CHECK_OK(tpurt_queue_submit_copy(tpurt_device_default_queue(g_dev), c, (const void*)a, 64));
  CHECK(all_equal(c, 10, 64));
  /* Out of Debug mode live buffers are plain memory again; back in, closed. */
  tpurt_exec_mode_set(TPURT_EXEC_STRICT);
  CHECK(a[5] == 10);
  a[5] = 11;
  CHECK_OK(tpurt_debug_take_violation());
  tpurt_exec_mode_set(TPURT_EXEC_DEBUG);
  v = a[5];
  CHECK(v == 0);
  s = tpurt_debug_take_violation();
  CHECK(has(s, "host code touched device memory") && has(s, "(offset 5 of a 64-byte buffer)"));
  tpurt_status_free(s);
  CHECK(all_equal((const void*)a, 10, 5) && all_equal((const void*)(a + 5), 11, 1));
  tpurt_memory_free(g_dev, (void*)a);
  tpurt_memory_free(g_dev, c);
}

/* A kernel touching a live buffer that is none of its op's tensors. */
static tpurt_status_t touch_other(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  volatile uint8_t* other = (volatile uint8_t*)(uintptr_t)call->args[1].v.i;
  const tpurt_tensor_t* t = call->args[0].v.tensor;
  ((uint8_t*)t->data)[0] = other[16]; /* its own tensor: fine; the other buffer: not */
  return TPURT_OK;
}
static const tpurt_op_def_t k_touch_other = {"touch_other", touch_other, touch_other, 0};

static void test_kernel_touches_other_buffer(void) {
  uint8_t* mine = alloc(32);
  uint8_t* other = alloc(128);
  fill(other, 5, 128);
  fill(mine, 1, 32);
  tpurt_tensor_t t = {.data = mine, .dtype = TPURT_DTYPE_UINT8, .ndim = 1, .sizes = {32}, .strides = {1}};
  tpurt_arg_t args[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &t}, {.kind = TPURT_ARG_INT, .v.i = (int64_t)(uintptr_t)other}};
  tpurt_op_call_t call = {.name = "touch_other", .overload = "", .num_args = 2, .args = args};
  tpurt_status_t s = tpurt_queue_submit_kernel(tpurt_device_default_queue(g_dev), &k_touch_other, &call);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_INTERNAL);
  CHECK(has(s, "aten::touch_other: device memory violation: read at") &&
        has(s, "offset 16 of a live 128-byte buffer that is not one of the op's tensors"));
  tpurt_status_free(s);
  CHECK(all_equal(other, 5, 128));
  CHECK_OK(tpurt_debug_take_violation());
  /* Given both, the same kernel is fine. */
  tpurt_tensor_t o = {.data = other, .dtype = TPURT_DTYPE_UINT8, .ndim = 1, .sizes = {128}, .strides = {1}};
  tpurt_arg_t args2[3] = {args[0], args[1], {.kind = TPURT_ARG_TENSOR, .v.tensor = &o}};
  call.num_args = 3;
  call.args = args2;
  CHECK_OK(tpurt_queue_submit_kernel(tpurt_device_default_queue(g_dev), &k_touch_other, &call));
  CHECK(all_equal(mine, 5, 1));
  tpurt_memory_free(g_dev, mine);
  tpurt_memory_free(g_dev, other);
}

/* ---- NaN / Inf ---- */

static double g_value;
static tpurt_status_t write_value(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* o = &call->outputs[call->num_outputs - 1];
  int64_t n = tpurt_tensor_numel(o);
  for (int64_t i = 0; i < n; ++i) {
    double v = i == n - 1 ? g_value : 1.0;
    char* p = (char*)o->data + i * o->strides[0] * (int64_t)tpurt_dtype_size(o->dtype);
    switch (o->dtype) {
      case TPURT_DTYPE_FLOAT32: *(float*)p = (float)v; break;
      case TPURT_DTYPE_FLOAT64: *(double*)p = v; break;
      case TPURT_DTYPE_BFLOAT16: *(uint16_t*)p = tpurt_f32_to_bf16((float)v); break;
      case TPURT_DTYPE_FLOAT16: *(uint16_t*)p = tpurt_f32_to_f16_slow((float)v); break;
      default: *(int32_t*)p = 1; break;
    }
  }
  return TPURT_OK;
}
static const tpurt_op_def_t k_write_value = {"write_value", write_value, write_value, 0};

static tpurt_status_t run_write(tpurt_dtype_t dt, double v, int stride) {
  size_t item = tpurt_dtype_size(dt);
  void* p = alloc(16 * item * (size_t)stride);
  tpurt_tensor_t outs[2] = {
      {.data = p, .dtype = dt, .ndim = 1, .sizes = {1}, .strides = {1}},
      {.data = p, .dtype = dt, .ndim = 1, .sizes = {16}, .strides = {stride}}};
  g_value = v;
  tpurt_op_call_t call = {.name = "write_value", .overload = "out", .num_outputs = 2, .outputs = outs};
  tpurt_status_t s = tpurt_queue_submit_kernel(tpurt_device_default_queue(g_dev), &k_write_value, &call);
  tpurt_memory_free(g_dev, p);
  return s;
}

static void test_nan_check(void) {
  double nan = strtod("nan", NULL), inf = strtod("inf", NULL);
  tpurt_debug_set_nan_check(TPURT_DEBUG_NANS_OFF);
  CHECK_OK(run_write(TPURT_DTYPE_FLOAT32, nan, 1));
  tpurt_debug_set_nan_check(TPURT_DEBUG_NANS_NAN_INF);
  CHECK(tpurt_debug_nan_check() == TPURT_DEBUG_NANS_NAN_INF);
  const tpurt_dtype_t dts[] = {TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT64, TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_FLOAT16};
  for (int i = 0; i < 4; ++i) {
    tpurt_status_t s = run_write(dts[i], nan, 2);
    CHECK(tpurt_status_code(s) == TPURT_STATUS_ABORTED);
    CHECK(has(s, "op aten::write_value.out produced NaN in output 1"));
    CHECK(has(s, "element 15 of 16"));
    tpurt_status_free(s);
    s = run_write(dts[i], -inf, 1);
    CHECK(has(s, "produced Inf in output 1"));
    tpurt_status_free(s);
    CHECK_OK(run_write(dts[i], 1e30 * (dts[i] == TPURT_DTYPE_FLOAT64), 1)); /* large but finite */
  }
  CHECK_OK(run_write(TPURT_DTYPE_INT32, 0, 1)); /* integers are never checked */
  tpurt_debug_set_nan_check(TPURT_DEBUG_NANS_NAN_ONLY);
  CHECK_OK(run_write(TPURT_DTYPE_FLOAT32, inf, 1));
  tpurt_status_t s = run_write(TPURT_DTYPE_FLOAT32, nan, 1);
  CHECK(has(s, "produced NaN"));
  tpurt_status_free(s);
  /* Strict mode never checks. */
  tpurt_exec_mode_set(TPURT_EXEC_STRICT);
  CHECK_OK(run_write(TPURT_DTYPE_FLOAT32, nan, 1));
  CHECK_OK(tpurt_device_synchronize(g_dev));
  tpurt_exec_mode_set(TPURT_EXEC_DEBUG);
  tpurt_debug_set_nan_check(TPURT_DEBUG_NANS_OFF);
}

/* The quarantine: budget (64 KiB here) and out-of-memory relief (HBM is
 * 64 MiB here); leaving Debug mode releases it. */
static void test_quarantine(void) {
  tpurt_debug_stats_t st;
  for (int i = 0; i < 40; ++i) tpurt_memory_free(g_dev, alloc(8192));
  tpurt_debug_stats(&st);
  CHECK(st.quarantined_bytes <= 64 * 1024 + 16384);
  void* big = alloc(40u << 20);
  CHECK(big != NULL);
  tpurt_memory_free(g_dev, big);
  tpurt_debug_stats(&st);
  CHECK(st.quarantined_bytes >= (40u << 20)); /* the newest stays, over budget */
  void* big2 = alloc(40u << 20);                /* only fits once the quarantine is released */
  CHECK(big2 != NULL && big2 != big);
  tpurt_memory_free(g_dev, big2);
  tpurt_debug_stats(&st);
  tpurt_exec_mode_set(TPURT_EXEC_STRICT);
  void* p = alloc(100);
  tpurt_debug_stats_t st2;
  tpurt_debug_stats(&st2);
  CHECK(st2.quarantined_bytes == 0);
  CHECK(st2.guarded_allocs == st.guarded_allocs); /* Strict allocations are not guarded */
  tpurt_memory_free(g_dev, p);
  tpurt_memory_stats_t ms;
  CHECK_OK(tpurt_memory_stats(g_dev, &ms));
  CHECK(ms.allocated_bytes == 0);
  tpurt_exec_mode_set(TPURT_EXEC_DEBUG);
}

int main(void) {
  setenv("TORCH_TPU_HBM_BYTES", "64M", 1);
  setenv("TORCH_TPU_DEBUG_QUARANTINE_BYTES", "64K", 1);
  unsetenv("TORCH_TPU_DEBUG_GUARDS");
  unsetenv("TORCH_TPU_DEBUG_NANS");
  CHECK_OK(tpurt_init());
  CHECK_OK(tpurt_device_get(0, &g_dev));
  if (!g_dev) return test_finish("test_debug");
  tpurt_exec_mode_set(TPURT_EXEC_DEBUG);
  test_guarded_allocations();
  test_kernel_write_past_end();
  test_kernel_write_into_pad();
  test_kernel_reads_freed_memory();
  test_host_reads_freed_memory();
  test_host_touches_live_memory();
  test_kernel_touches_other_buffer();
  test_nan_check();
  test_quarantine();
  tpurt_exec_mode_set(TPURT_EXEC_STRICT);
  return test_finish("test_debug");
}
