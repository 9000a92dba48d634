/* The HAL and the base helpers under it: the range allocator that carves HBM,
 * the vtpu and null drivers (memory, and execution: queues, commands, timelines,
 * errors, synchronous dispatch), byte-count parsing/formatting. */
#include <string.h>

#include <stdatomic.h>

#include "base/bytes.h"
#include "base/range_alloc.h"
#include "hal/hal.h"
#include "tpurt/device.h"
#include <unistd.h>
#include "test_util.h"

static void test_range_alloc(void) {
  tpurt_range_alloc_t ra;
  CHECK_OK(tpurt_range_alloc_init(&ra, 11 * 512));
  uint64_t a, b, c, d;
  CHECK(tpurt_range_alloc_take(&ra, 1024, 512, &a) && a == 0);
  CHECK(tpurt_range_alloc_take(&ra, 2048, 512, &b) && b == 1024);
  CHECK(tpurt_range_alloc_take(&ra, 2048, 512, &c) && c == 3072);
  CHECK(!tpurt_range_alloc_take(&ra, 1024, 512, &d)); /* 512 left */
  CHECK(tpurt_range_alloc_largest(&ra) == 512);
  CHECK(tpurt_range_alloc_give(&ra, a, 1024));
  CHECK(tpurt_range_alloc_take(&ra, 512, 512, &d) && d == 0); /* first fit */
  CHECK(tpurt_range_alloc_give(&ra, d, 512));
  CHECK(tpurt_range_alloc_give(&ra, c, 2048));
  CHECK(tpurt_range_alloc_largest(&ra) == 2048 + 512); /* merged with the tail */
  CHECK(tpurt_range_alloc_give(&ra, b, 2048));
  CHECK(ra.num_free == 1 && ra.used == 0 && tpurt_range_alloc_largest(&ra) == 11 * 512);
  /* Pieces given back out of order (trimmed segment ends) merge fully. */
  CHECK(tpurt_range_alloc_take(&ra, 5120, 512, &a));
  CHECK(tpurt_range_alloc_give(&ra, 1024, 512));
  CHECK(tpurt_range_alloc_give(&ra, 4096, 1024));
  CHECK(tpurt_range_alloc_give(&ra, 0, 1024));
  CHECK(tpurt_range_alloc_give(&ra, 1536, 2560));
  CHECK(ra.num_free == 1 && ra.used == 0);
  /* Alignment larger than the granule. */
  CHECK(tpurt_range_alloc_take(&ra, 512, 512, &a) && a == 0);
  CHECK(tpurt_range_alloc_take(&ra, 512, 2048, &b) && b == 2048);
  CHECK(tpurt_range_alloc_take(&ra, 1024, 512, &c) && c == 512);
  tpurt_range_alloc_deinit(&ra);
}

static void test_bytes(void) {
  uint64_t v = 0;
  CHECK(tpurt_bytes_parse("17179869184", &v) && v == 17179869184ull);
  CHECK(tpurt_bytes_parse("16G", &v) && v == 16ull << 30);
  CHECK(tpurt_bytes_parse("512MiB", &v) && v == 512ull << 20);
  CHECK(tpurt_bytes_parse("64 mb", &v) && v == 64ull << 20);
  CHECK(tpurt_bytes_parse("1k", &v) && v == 1024);
  CHECK(!tpurt_bytes_parse("", &v));
  CHECK(!tpurt_bytes_parse("-1G", &v));
  CHECK(!tpurt_bytes_parse("12X", &v));
  CHECK(!tpurt_bytes_parse("99999999999T", &v));
  char buf[32];
  CHECK(strcmp(tpurt_bytes_format(1610612736ull, buf, sizeof buf), "1.50 GiB") == 0);
  CHECK(strcmp(tpurt_bytes_format(851443712ull, buf, sizeof buf), "812.00 MiB") == 0);
  CHECK(strcmp(tpurt_bytes_format(16ull << 30, buf, sizeof buf), "16.00 GiB") == 0);
  CHECK(strcmp(tpurt_bytes_format(100, buf, sizeof buf), "100 bytes") == 0);
}

static void test_drivers(void) {
  CHECK(tpurt_hal_driver_find("nope") == NULL);
  const tpurt_hal_driver_t* null_drv = tpurt_hal_driver_find("null");
  CHECK(null_drv != NULL);
  tpurt_hal_device_t* nd = NULL;
  tpurt_hal_device_params_t params = {.index = 0, .hbm_bytes = 4 << 20};
  if (null_drv) CHECK_STATUS(null_drv->device_create(&params, &nd), UNIMPLEMENTED);

  const tpurt_hal_driver_t* drv = tpurt_hal_driver_find(NULL); /* default: vtpu */
  CHECK(drv && strcmp(drv->name, "vtpu") == 0);
  if (!drv) return;
  tpurt_hal_device_t* d = NULL;
  CHECK_OK(drv->device_create(&params, &d));
  if (!d) return;
  tpurt_hal_device_props_t props;
  CHECK_OK(drv->device_query(d, &props));
  CHECK(props.hbm_bytes == 4 << 20 && props.hbm_base && strcmp(props.name, "vtpu") == 0);
  void *a = NULL, *b = NULL;
  CHECK_OK(drv->memory_alloc(d, 3 << 20, &a));
  CHECK(a == props.hbm_base);
  CHECK_STATUS(drv->memory_alloc(d, 2 << 20, &b), RESOURCE_EXHAUSTED);
  memset(a, 0x77, 3 << 20); /* pages commit on touch */
  /* Give back the tail piece; its pages read as zero when taken again. */
  drv->memory_free(d, (uint8_t*)a + (2 << 20), 1 << 20);
  CHECK(drv->memory_largest_free(d) == 2 << 20);
  CHECK_OK(drv->memory_alloc(d, 2 << 20, &b));
  CHECK(b == (uint8_t*)a + (2 << 20));
  CHECK(((uint8_t*)b)[0] == 0 && ((uint8_t*)b)[(1 << 20) - 1] == 0);
  drv->memory_free(d, a, 2 << 20);
  drv->memory_free(d, b, 2 << 20);
  CHECK(drv->memory_largest_free(d) == 4 << 20);
  drv->device_destroy(d);
}

/* ---- execution through the HAL, below exec/: queues, commands, timelines ---- */

static _Atomic int g_order[16];
static _Atomic int g_n;
static void note(int v) { g_order[atomic_fetch_add(&g_n, 1) & 15] = v; }

static tpurt_status_t k_note(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  note((int)call->args[0].v.i);
  return call->args[0].v.i < 0 ? TPURT_STATUS(INVALID_ARGUMENT, "negative %d", (int)call->args[0].v.i) : TPURT_OK;
}
static tpurt_status_t call_note(void* user, tpurt_kernel_ctx_t* ctx) {
  note((int)(intptr_t)user);
  return tpurt_kernel_num_threads(ctx) >= 1 ? TPURT_OK : TPURT_STATUS(INTERNAL, "no context");
}
static tpurt_status_t host_fail(void* user) {
  note((int)(intptr_t)user);
  return TPURT_STATUS(UNAVAILABLE, "host call %d failed", (int)(intptr_t)user);
}
static uint64_t g_signal_value, g_signal_time;
static void signalled(void* user, tpurt_hal_queue_t* q, uint64_t value, uint64_t time_ns) {
  g_signal_value = value;
  g_signal_time = time_ns;
}
static _Atomic int g_done;
static void done_cb(void* user) { atomic_fetch_add(&g_done, 1); }

static void test_execution(void) {
  const tpurt_hal_driver_t* drv = tpurt_hal_driver_find("vtpu");
  tpurt_hal_device_t* d = NULL;
  tpurt_hal_device_params_t params = {.index = 0, .hbm_bytes = 4 << 20, .num_threads = 2};
  CHECK_OK(drv->device_create(&params, &d));
  if (!d) return;
  tpurt_hal_queue_t *q = NULL, *q2 = NULL;
  tpurt_hal_queue_params_t qp = {.id = 1};
  CHECK_OK(drv->queue_create(d, &qp, &q));
  qp.id = 2;
  CHECK_OK(drv->queue_create(d, &qp, &q2));
  if (!q || !q2) return;
  CHECK(!drv->queue_is_current(q) && drv->queue_completed(q) == 0);
  void* mem = NULL;
  CHECK_OK(drv->memory_alloc(d, 1 << 20, &mem));
  memset(mem, 1, 1 << 19);
  atomic_store(&g_n, 0);
  /* The caller picks each command's timeline value; the call record is
   * copied, so the caller's may go away at once. */
  uint64_t v = 0;
  for (int i = 0; i < 3; ++i) {
    tpurt_arg_t arg = {.kind = TPURT_ARG_INT, .v.i = i == 1 ? -1 : i};
    tpurt_op_call_t call = {.name = "note", .overload = "", .num_args = 1, .args = &arg};
    tpurt_hal_command_t c = {.kind = TPURT_HAL_COMMAND_DISPATCH, .value = ++v, .u.dispatch = {k_note, &call},
                             .done = done_cb};
    CHECK_OK(drv->queue_submit(q, &c));
  }
  tpurt_hal_command_t copy = {.kind = TPURT_HAL_COMMAND_COPY, .value = ++v,
                              .u.copy = {(uint8_t*)mem + (1 << 19), mem, 1 << 19}};
  CHECK_OK(drv->queue_submit(q, &copy));
  tpurt_hal_command_t call = {.kind = TPURT_HAL_COMMAND_CALL, .value = ++v, .u.call = {.fn = call_note, .user = (void*)7}};
  CHECK_OK(drv->queue_submit(q, &call));
  tpurt_hal_command_t host = {.kind = TPURT_HAL_COMMAND_CALL, .value = ++v, .u.call = {.host_fn = host_fail, .user = (void*)8}};
  CHECK_OK(drv->queue_submit(q, &host));
  tpurt_hal_command_t sig = {.kind = TPURT_HAL_COMMAND_SIGNAL, .value = ++v, .u.signal = {signalled, NULL}};
  CHECK_OK(drv->queue_submit(q, &sig));
  /* q2 waits for q's last value before its own command. */
  tpurt_hal_command_t wait = {.kind = TPURT_HAL_COMMAND_WAIT, .value = 1, .u.wait = {q, v}};
  CHECK_OK(drv->queue_submit(q2, &wait));
  tpurt_hal_command_t after = {.kind = TPURT_HAL_COMMAND_CALL, .value = 2, .u.call = {.fn = call_note, .user = (void*)9}};
  CHECK_OK(drv->queue_submit(q2, &after));
  CHECK_OK(drv->queue_wait(q2, 2, false));
  CHECK(drv->queue_completed(q) == v && drv->queue_completed(q2) == 2);
  CHECK(atomic_load(&g_n) == 6 && g_order[0] == 0 && g_order[1] == -1 && g_order[2] == 2 && g_order[3] == 7 &&
        g_order[4] == 8 && g_order[5] == 9);
  CHECK(atomic_load(&g_done) == 3 && g_signal_value == v && g_signal_time > 0);
  CHECK(((uint8_t*)mem)[(1 << 19) + 5] == 1 && ((uint8_t*)mem)[(1 << 20) - 1] == 1);
  /* The first error, named after the op, is taken once; the host call's came later. */
  tpurt_status_t s = drv->queue_take_error(q, 0);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_INVALID_ARGUMENT && strstr(tpurt_status_message(s), "aten::note") &&
        strstr(tpurt_status_message(s), "negative -1"));
  tpurt_status_free(s);
  CHECK(drv->queue_take_error(q, 0) == NULL && drv->queue_take_error(q2, 0) == NULL);
  /* Synchronous dispatch runs on the calling thread. */
  tpurt_arg_t arg = {.kind = TPURT_ARG_INT, .v.i = 11};
  tpurt_op_call_t sc = {.name = "note", .overload = "", .num_args = 1, .args = &arg};
  CHECK_OK(drv->dispatch_sync(d, k_note, 0, &sc, false));
  CHECK(atomic_load(&g_n) == 7 && g_order[6] == 11);
  /* An executable loads from a descriptor only (a bad one is refused). */
  tpurt_hal_executable_t* exe = NULL;
  tpurt_hal_executable_params_t ep = {.struct_size = sizeof ep, .format = TPURT_HAL_EXECUTABLE_HOST_ELF, .fd = -1};
  CHECK_STATUS(drv->executable_load(d, &ep, &exe), INVALID_ARGUMENT);
  drv->memory_free(d, mem, 1 << 20);
  drv->queue_destroy(q2);
  drv->queue_destroy(q);
  drv->device_destroy(d);

  /* The null driver, the template: every execution slot answers UNIMPLEMENTED. */
  const tpurt_hal_driver_t* nd = tpurt_hal_driver_find("null");
  tpurt_hal_queue_t* nq = NULL;
  CHECK_STATUS(nd->queue_create(NULL, &qp, &nq), UNIMPLEMENTED);
  CHECK_STATUS(nd->queue_submit(NULL, &call), UNIMPLEMENTED);
  CHECK_STATUS(nd->dispatch_sync(NULL, k_note, 0, &sc, false), UNIMPLEMENTED);
  CHECK_STATUS(nd->executable_load(NULL, &ep, &exe), UNIMPLEMENTED);
  CHECK(nd->struct_size == sizeof(tpurt_hal_driver_t) && nd->version == TPURT_HAL_VERSION);
}

/* ---- poisoned memory, errors by issuer, cancel, interruptible waits ---- */

static void test_poison_ranges(void) {
  tpurt_poison_t p;
  tpurt_poison_init(&p);
  uint8_t* base = (uint8_t*)(uintptr_t)0x100000;
  tpurt_status_t e1 = TPURT_STATUS(OUT_OF_RANGE, "first");
  tpurt_status_t e2 = TPURT_STATUS(INVALID_ARGUMENT, "second");
  CHECK(!tpurt_poison_armed(&p) && tpurt_poison_check(&p, base, 100) == NULL);
  tpurt_poison_mark(&p, base + 100, 100, e1); /* [100, 200) */
  CHECK(tpurt_poison_armed(&p));
  CHECK(tpurt_poison_check(&p, base, 100) == NULL && tpurt_poison_check(&p, base + 200, 50) == NULL);
  tpurt_status_t s = tpurt_poison_check(&p, base + 150, 1);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_OUT_OF_RANGE && !strcmp(tpurt_status_message(s), "first"));
  tpurt_status_free(s);
  /* Clearing the middle splits it; both ends keep their error. */
  tpurt_poison_clear(&p, base + 120, 40);
  CHECK(tpurt_poison_check(&p, base + 120, 40) == NULL);
  s = tpurt_poison_check(&p, base + 110, 1);
  CHECK(s != NULL);
  tpurt_status_free(s);
  s = tpurt_poison_check(&p, base + 199, 1);
  CHECK(s != NULL);
  tpurt_status_free(s);
  /* A newer mark over part of it wins there. */
  tpurt_poison_mark(&p, base + 150, 100, e2); /* [150, 250) */
  s = tpurt_poison_check(&p, base + 190, 1);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_INVALID_ARGUMENT);
  tpurt_status_free(s);
  s = tpurt_poison_check(&p, base + 100, 5);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_OUT_OF_RANGE);
  tpurt_status_free(s);
  tpurt_poison_clear(&p, base, 1000);
  CHECK(!tpurt_poison_armed(&p) && tpurt_poison_check(&p, base + 150, 1) == NULL);
  /* A call's outputs: a dense one is cleared when written, a strided view
   * (gaps between its elements) leaves the poison. */
  tpurt_poison_mark(&p, base, 64, e1);
  tpurt_tensor_t out = {.data = base, .dtype = TPURT_DTYPE_FLOAT32, .ndim = 1, .sizes = {8}, .strides = {2}};
  tpurt_op_call_t c = {.name = "w", .overload = "", .num_outputs = 1, .outputs = &out};
  tpurt_poison_clear_call(&p, &c);
  CHECK(tpurt_poison_armed(&p));
  out.strides[0] = 1;
  out.sizes[0] = 16;
  tpurt_poison_clear_call(&p, &c);
  CHECK(!tpurt_poison_armed(&p));
  tpurt_status_free(e1);
  tpurt_status_free(e2);
  tpurt_poison_deinit(&p);
}

static tpurt_status_t k_fill(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  /* out[i] = in[i] + 1 over floats, or an error when args[1] says so */
  if (call->num_args > 1 && call->args[1].v.b) return TPURT_STATUS(OUT_OF_RANGE, "index 10 is out of bounds");
  const float* in = call->args[0].v.tensor->data;
  float* o = call->outputs[0].data;
  for (int64_t i = 0; i < call->outputs[0].sizes[0]; ++i) o[i] = in[i] + 1;
  return TPURT_OK;
}

static _Atomic int g_interrupt_after;
static tpurt_status_t test_interrupted(void) {
  if (atomic_fetch_sub(&g_interrupt_after, 1) > 1) return TPURT_OK;
  return TPURT_STATUS(CANCELLED, "interrupted by the test");
}
static tpurt_status_t slow_call(void* user, tpurt_kernel_ctx_t* ctx) {
  if (!ctx->cancel) usleep(300000);
  return TPURT_OK;
}
/* Runs until the test opens the gate: the interrupted wait below cannot race its completion, however
 * late the waiting thread is scheduled on a loaded machine. */
static _Atomic int g_gate_open;
static tpurt_status_t gated_call(void* user, tpurt_kernel_ctx_t* ctx) {
  while (!atomic_load(&g_gate_open)) usleep(1000);
  return TPURT_OK;
}

static void test_poison_queue(void) {
  const tpurt_hal_driver_t* drv = tpurt_hal_driver_find("vtpu");
  tpurt_hal_device_t* d = NULL;
  tpurt_hal_device_params_t params = {.index = 0, .hbm_bytes = 4 << 20, .num_threads = 1};
  CHECK_OK(drv->device_create(&params, &d));
  if (!d) return;
  tpurt_poison_t* poison = drv->device_poison(d);
  tpurt_hal_queue_t* q = NULL;
  tpurt_hal_queue_params_t qp = {.id = 1};
  CHECK_OK(drv->queue_create(d, &qp, &q));
  float* mem = NULL;
  CHECK_OK(drv->memory_alloc(d, 4096, (void**)&mem));
  for (int i = 0; i < 64; ++i) mem[i] = 0;
  /* x = mem[0:8], y = mem[8:16] (failed), z = mem[16:24] from y, w = mem[24:32] copied from z,
   * u = mem[32:40] from x (good). Issued by two threads (tokens 5 and 6). */
  tpurt_tensor_t t[5];
  for (int i = 0; i < 5; ++i)
    t[i] = (tpurt_tensor_t){.data = mem + 8 * i, .dtype = TPURT_DTYPE_FLOAT32, .ndim = 1, .sizes = {8}, .strides = {1}};
  uint64_t v = 0;
  struct { int in, out; bool fail; uint64_t issuer; } steps[] = {{0, 1, true, 5}, {1, 2, false, 5}, {0, 4, false, 6}};
  for (int i = 0; i < 3; ++i) {
    tpurt_arg_t args[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &t[steps[i].in]},
                           {.kind = TPURT_ARG_BOOL, .v.b = steps[i].fail}};
    tpurt_op_call_t call = {.name = "fill", .overload = "", .num_args = 2, .args = args, .num_outputs = 1,
                            .outputs = &t[steps[i].out]};
    tpurt_hal_command_t c = {.kind = TPURT_HAL_COMMAND_DISPATCH, .value = ++v, .issuer = steps[i].issuer,
                             .u.dispatch = {k_fill, &call}};
    CHECK_OK(drv->queue_submit(q, &c));
    if (i == 1) {
      tpurt_hal_command_t cp = {.kind = TPURT_HAL_COMMAND_COPY, .value = ++v, .u.copy = {mem + 24, mem + 16, 32}};
      CHECK_OK(drv->queue_submit(q, &cp));
    }
  }
  CHECK_OK(drv->queue_wait(q, v, false));
  /* The error is the issuer's: thread 6 does not get it, thread 5 does, once. */
  CHECK(drv->queue_take_error(q, 6) == NULL);
  tpurt_status_t s = drv->queue_take_error(q, 5);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_OUT_OF_RANGE && strstr(tpurt_status_message(s), "aten::fill"));
  tpurt_status_free(s);
  CHECK(drv->queue_take_error(q, 5) == NULL);
  /* y, z (computed from y) and w (copied from z) carry y's error; x and u are good data. */
  for (int i = 1; i <= 3; ++i) {
    s = tpurt_poison_check(poison, mem + 8 * i, 32);
    CHECK(tpurt_status_code(s) == TPURT_STATUS_OUT_OF_RANGE && strstr(tpurt_status_message(s), "out of bounds"));
    tpurt_status_free(s);
  }
  CHECK(tpurt_poison_check(poison, mem, 32) == NULL && tpurt_poison_check(poison, mem + 32, 32) == NULL);
  CHECK(mem[32] == 1 && mem[16] == 0);
  /* Synchronous dispatch refuses to compute from y, and overwriting z makes it good. */
  tpurt_arg_t a1[1] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &t[1]}};
  tpurt_op_call_t from_y = {.name = "fill", .overload = "", .num_args = 1, .args = a1, .num_outputs = 1, .outputs = &t[4]};
  CHECK_STATUS(drv->dispatch_sync(d, k_fill, 0, &from_y, false), OUT_OF_RANGE);
  tpurt_arg_t a0[1] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &t[0]}};
  tpurt_op_call_t into_z = {.name = "fill", .overload = "", .num_args = 1, .args = a0, .num_outputs = 1, .outputs = &t[2]};
  CHECK_OK(drv->dispatch_sync(d, k_fill, 0, &into_z, false));
  CHECK(tpurt_poison_check(poison, mem + 16, 32) == NULL && mem[16] == 1);

  /* Cancel: commands not started are dropped, what they would write is
   * poisoned with the reason; a host call still runs. */
  tpurt_hal_command_t slow = {.kind = TPURT_HAL_COMMAND_CALL, .value = ++v, .u.call = {.fn = slow_call}};
  CHECK_OK(drv->queue_submit(q, &slow));
  tpurt_arg_t a2[1] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &t[0]}};
  tpurt_op_call_t to_u = {.name = "fill", .overload = "", .num_args = 1, .args = a2, .num_outputs = 1, .outputs = &t[4]};
  tpurt_hal_command_t k = {.kind = TPURT_HAL_COMMAND_DISPATCH, .value = ++v, .u.dispatch = {k_fill, &to_u}};
  CHECK_OK(drv->queue_submit(q, &k));
  atomic_store(&g_n, 0);
  tpurt_hal_command_t host = {.kind = TPURT_HAL_COMMAND_CALL, .value = ++v, .u.call = {.host_fn = host_fail, .user = (void*)3}};
  CHECK_OK(drv->queue_submit(q, &host));
  tpurt_status_t reason = TPURT_STATUS(CANCELLED, "interrupted");
  drv->queue_cancel(q, reason);
  tpurt_status_free(reason);
  CHECK_OK(drv->queue_wait(q, v, false));
  s = tpurt_poison_check(poison, mem + 32, 32);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_CANCELLED && mem[32] == 1);
  tpurt_status_free(s);
  CHECK(atomic_load(&g_n) == 1 && g_order[0] == 3);
  tpurt_status_free(drv->queue_take_error(q, 0));
  /* Work submitted after the cancel runs. */
  mem[0] = 1;
  tpurt_hal_command_t again = {.kind = TPURT_HAL_COMMAND_DISPATCH, .value = ++v, .u.dispatch = {k_fill, &to_u}};
  CHECK_OK(drv->queue_submit(q, &again));
  CHECK_OK(drv->queue_wait(q, v, false));
  CHECK(tpurt_poison_check(poison, mem + 32, 32) == NULL && mem[32] == 2);

  /* An interruptible wait gives up when the host says so; an uninterruptible one does not. */
  tpurt_host_hooks_t hooks = {.interrupted = test_interrupted};
  tpurt_set_host_hooks(&hooks);
  atomic_store(&g_interrupt_after, 2);
  atomic_store(&g_gate_open, 0);
  tpurt_hal_command_t slow2 = {.kind = TPURT_HAL_COMMAND_CALL, .value = ++v, .u.call = {.fn = gated_call}};
  CHECK_OK(drv->queue_submit(q, &slow2));
  s = drv->queue_wait(q, v, true);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_CANCELLED && drv->queue_completed(q) < v);
  tpurt_status_free(s);
  atomic_store(&g_interrupt_after, 1);
  atomic_store(&g_gate_open, 1);
  CHECK_OK(drv->queue_wait(q, v, false));
  tpurt_set_host_hooks(NULL);
  drv->memory_free(d, mem, 4096);
  drv->queue_destroy(q);
  drv->device_destroy(d);
}

int main(void) {
  test_poison_ranges();
  test_poison_queue();
  test_range_alloc();
  test_bytes();
  test_drivers();
  test_execution();
  return test_finish("test_hal");
}
