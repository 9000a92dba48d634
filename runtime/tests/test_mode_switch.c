/* Switching the eager mode while other threads submit work (exec/mode.c):
 * threads allocate, copy in, run a kernel that writes their buffer, copy out
 * and free, in whatever mode is current, while the main thread cycles through
 * every pair of modes; every result must be exact and no call may fail. A
 * switch from a queued host function is refused (it would wait for itself). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "test_util.h"
#include "tpurt/debug.h"

#define THREADS 3
#define SWITCHES 2000

static tpurt_device_t* g_dev;
static _Atomic bool g_stop;
static _Atomic int g_errors, g_rounds[THREADS];
static char g_first_error[512];
static pthread_mutex_t g_err_lock = PTHREAD_MUTEX_INITIALIZER;

static void note_error(const char* what, tpurt_status_t s) {
  pthread_mutex_lock(&g_err_lock);
  if (atomic_fetch_add(&g_errors, 1) == 0)
    snprintf(g_first_error, sizeof g_first_error, "%s: %s", what, s ? tpurt_status_message(s) : "wrong result");
  pthread_mutex_unlock(&g_err_lock);
  tpurt_status_free(s);
}

static void* worker(void* arg) {
  int id = (int)(intptr_t)arg;
  size_t n = ((size_t)256 << 10) * (size_t)(id + 1) + 1000; /* copies long enough to overlap switches */
  uint8_t* host = malloc(n);
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  while (!atomic_load(&g_stop)) {
    uint8_t base = (uint8_t)(id * 50 + atomic_load(&g_rounds[id]));
    for (size_t i = 0; i < n; ++i) host[i] = (uint8_t)(base + i);
    void* p = NULL;
    tpurt_status_t s = tpurt_memory_allocate(g_dev, NULL, n, &p);
    if (s) {
      note_error("allocate", s);
      break;
    }
    tpurt_tensor_t t = {.data = p, .dtype = TPURT_DTYPE_UINT8, .ndim = 1, .sizes = {(int64_t)n}, .strides = {1}};
    tpurt_arg_t args[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &t}, {.kind = TPURT_ARG_BOOL, .v.b = true}};
    tpurt_op_call_t call = {.name = "_debug_touch", .overload = "", .num_args = 2, .args = args};
    if ((s = tpurt_memcpy_h2d(g_dev, NULL, p, host, n))) note_error("memcpy_h2d", s);
    else if ((s = tpurt_queue_submit_kernel(q, tpurt_debug_touch_op(), &call))) note_error("submit", s);
    else if ((s = tpurt_memcpy_d2h(g_dev, NULL, host, p, n))) note_error("memcpy_d2h", s);
    else {
      bool ok = true;
      for (size_t i = 0; i < n && ok; ++i) ok = host[i] == (uint8_t)(base + i + 1);
      if (!ok) note_error("touch", NULL);
    }
    tpurt_memory_free(g_dev, p);
    atomic_fetch_add(&g_rounds[id], 1);
  }
  free(host);
  return NULL;
}

static void test_switch_while_submitting(void) {
  static const tpurt_exec_mode_t cycle[] = {TPURT_EXEC_STRICT, TPURT_EXEC_DEBUG, TPURT_EXEC_DEFER_AND_FUSE,
                                            TPURT_EXEC_DEBUG, TPURT_EXEC_STRICT, TPURT_EXEC_DEFER_AND_FUSE};
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; ++i) pthread_create(&th[i], NULL, worker, (void*)(intptr_t)i);
  for (int k = 0; k < SWITCHES && !atomic_load(&g_errors); ++k) {
    CHECK_OK(tpurt_exec_mode_set(cycle[k % 6]));
    /* Every 0.5 ms and back to back, as a program switching from its own thread would. */
    if (k % 2) nanosleep(&(struct timespec){0, 500 * 1000}, NULL);
  }
  atomic_store(&g_stop, true);
  for (int i = 0; i < THREADS; ++i) pthread_join(th[i], NULL);
  CHECK_OK(tpurt_exec_mode_set(TPURT_EXEC_STRICT));
  if (atomic_load(&g_errors)) fprintf(stderr, "first error: %s\n", g_first_error);
  CHECK(atomic_load(&g_errors) == 0);
  for (int i = 0; i < THREADS; ++i) CHECK(atomic_load(&g_rounds[i]) > 0);
}

static tpurt_status_t g_from_host_fn;
static tpurt_status_t switch_in_host_fn(void* user) {
  (void)user;
  g_from_host_fn = tpurt_exec_mode_set(TPURT_EXEC_DEBUG);
  return TPURT_OK;
}

static void test_switch_refused_on_queue_thread(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  CHECK_OK(tpurt_queue_submit_host_fn(q, switch_in_host_fn, NULL));
  CHECK_OK(tpurt_queue_synchronize(q));
  CHECK(tpurt_status_code(g_from_host_fn) == TPURT_STATUS_FAILED_PRECONDITION);
  CHECK(g_from_host_fn && strstr(tpurt_status_message(g_from_host_fn), "cannot switch the eager mode"));
  tpurt_status_free(g_from_host_fn);
  CHECK(tpurt_exec_mode_get() == TPURT_EXEC_STRICT);
  CHECK_STATUS(tpurt_exec_mode_set((tpurt_exec_mode_t)7), INVALID_ARGUMENT);
}

int main(void) {
  setenv("TORCH_TPU_HBM_BYTES", "256M", 1);
  setenv("TORCH_TPU_DEBUG_QUARANTINE_BYTES", "1M", 1);
  unsetenv("TORCH_TPU_DEBUG_GUARDS");
  CHECK_OK(tpurt_init());
  CHECK_OK(tpurt_device_get(0, &g_dev));
  if (!g_dev) return test_finish("test_mode_switch");
  test_switch_while_submitting();
  test_switch_refused_on_queue_thread();
  return test_finish("test_mode_switch");
}
