/* Process-wide runtime state: tpurt_init reads the environment and creates
 * the chips this process drives (each: a HAL device with its compute
 * threads, its caching allocator and default queue); host<->device copies;
 * synchronous kernel runs. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/env.h"
#include "base/log.h"
#include "exec/allocator.h"
#include "exec/capture.h"
#include "exec/mode.h"
#include "tpurt/dist.h"

#define DEFAULT_HBM_BYTES ((uint64_t)16 << 30)
#define MAX_CHIPS TPURT_MAX_CHIPS
/* TORCH_TPU_NUM_THREADS's bound */
enum { MAX_THREADS = 1024 };

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static tpurt_status_t g_init_status; /* kept; callers get copies */
static tpurt_device_t* g_devices[MAX_CHIPS];
static int g_num_devices;
/* Set in a child forked after init: it has no queue threads and shares the
 * parent's HBM mapping, so it must not touch the device (as with CUDA). */
_Atomic bool tpurt_forked_child;

static void on_fork_child(void) { atomic_store(&tpurt_forked_child, true); }

tpurt_status_t tpurt_fork_check(void) {
  return TPURT_STATUS(FAILED_PRECONDITION,
                      "cannot use the tpu device in a forked subprocess: the vTPU runtime was initialized "
                      "before fork(). To use the tpu device with multiprocessing, use the 'spawn' start "
                      "method");
}

static int host_cores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static uint64_t host_ram(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return (pages > 0 && page > 0) ? (uint64_t)pages * (uint64_t)page : DEFAULT_HBM_BYTES;
}

/* The host CPUs chip slot `slot` of this host keeps its compute threads on: the slot's own run of
 * `threads` CPUs among those this process may use, in cpus[0..threads). False (the scheduler places
 * the threads) when the chip has one thread (nothing of its own to keep apart) or when the host's
 * chips have more threads than the process has CPUs. Why: on a
 * virtual machine whose scheduler packs woken threads onto busy vCPUs, a chip's pool thread woken
 * after an idle moment often lands on the vCPU its queue worker runs on, and the first kernels of
 * a burst then run at one core's speed (README, "Compute threads on their own cores"). */
static bool chip_cpus(int slot, int threads, int sharing, int* cpus) {
  cpu_set_t set;
  if (threads < 2 || sched_getaffinity(0, sizeof(set), &set) != 0) return false;
  if ((int64_t)threads * sharing > CPU_COUNT(&set)) return false;
  int first = slot * threads, n = 0, k = 0;
  for (int c = 0; c < CPU_SETSIZE && n < threads; ++c)
    if (CPU_ISSET(c, &set) && k++ >= first) cpus[n++] = c;
  return n == threads;
}

static tpurt_status_t device_create(int index, uint64_t hbm_bytes, int num_threads, const int* cpus,
                                    tpurt_device_t** out) {
  const char* drv_name = getenv("TORCH_TPU_DRIVER");
  const tpurt_hal_driver_t* drv = tpurt_hal_driver_find(drv_name);
  if (!drv) return TPURT_STATUS(NOT_FOUND, "TORCH_TPU_DRIVER=%s: no such device driver", drv_name);
  tpurt_device_t* d = calloc(1, sizeof(*d));
  if (!d) return TPURT_STATUS(RESOURCE_EXHAUSTED, "out of host memory");
  d->index = index;
  d->driver = drv;
  pthread_mutex_init(&d->queues_lock, NULL);
  tpurt_hal_device_params_t params = {.index = index, .hbm_bytes = hbm_bytes, .num_threads = num_threads, .cpus = cpus};
  tpurt_status_t s = drv->device_create(&params, &d->hal);
  if (!s) s = drv->device_query(d->hal, &d->props);
  if (s) goto fail;
  d->hbm_base = d->props.hbm_base;
  d->hbm_bytes = d->props.hbm_bytes;
  d->num_threads = d->props.num_threads;
  s = tpurt_allocator_create(d, &d->allocator);
  if (s) goto fail;
  s = tpurt_queue_create_internal(d, 0, 0, &d->default_queue);
  if (s) goto fail;
  *out = d;
  return TPURT_OK;
fail:
  /* Only reached before the default queue exists. */
  tpurt_allocator_destroy(d->allocator);
  if (d->hal) drv->device_destroy(d->hal);
  pthread_mutex_destroy(&d->queues_lock);
  free(d);
  return tpurt_status_annotate(s, "creating vTPU chip %d", index);
}

static void init_once(void) {
  tpurt_status_t s = TPURT_OK;
  pthread_atfork(NULL, NULL, on_fork_child);
  tpurt_exec_mode_init(); /* TPU_LAUNCH_BLOCKING: no chip yet, so entering Debug mode only sets its flags */

  int num_chips = 1;
  s = tpurt_env_int("TORCH_TPU_NUM_CHIPS", 1, MAX_CHIPS, &num_chips);
  if (s) {
    tpurt_status_free(s);
    s = TPURT_STATUS(INVALID_ARGUMENT, "TORCH_TPU_NUM_CHIPS=%s: expected a number of chips from 1 to %d (the "
                     "most one process drives)", getenv("TORCH_TPU_NUM_CHIPS"), MAX_CHIPS);
    goto done;
  }
  /* A host's chips (TORCH_TPU_TOPOLOGY, one process each) share its cores and
   * RAM evenly unless TORCH_TPU_NUM_THREADS / TORCH_TPU_HBM_BYTES say otherwise. */
  tpurt_dist_host_config_t host;
  s = tpurt_dist_host_config(&host);
  if (s) goto done;
  int sharing = num_chips * host.chips_on_host;
  int cores = host_cores();
  int threads = cores / sharing > 0 ? cores / sharing : 1;
  s = tpurt_env_int("TORCH_TPU_NUM_THREADS", 1, MAX_THREADS, &threads);
  if (s) goto done;
  int pin = 1;
  s = tpurt_env_int("TORCH_TPU_PIN_THREADS", 0, 1, &pin);
  if (s) {
    tpurt_status_free(s);
    s = TPURT_STATUS(INVALID_ARGUMENT, "TORCH_TPU_PIN_THREADS=%s: expected 0 (the host's scheduler places the "
                     "chip's threads) or 1 (each compute thread keeps to a CPU of its own)",
                     getenv("TORCH_TPU_PIN_THREADS"));
    goto done;
  }

  /* Capacity is a limit, not a commitment (pages are committed on touch), but
   * keep it within 3/4 of RAM across the chips so a full chip cannot take the
   * host down. */
  uint64_t ram_cap = host_ram() / 4 * 3 / (uint64_t)sharing;
  uint64_t hbm = DEFAULT_HBM_BYTES < ram_cap ? DEFAULT_HBM_BYTES : ram_cap;
  const char* hv = getenv("TORCH_TPU_HBM_BYTES");
  if (hv && *hv) {
    if (!tpurt_bytes_parse(hv, &hbm) || hbm == 0) {
      s = TPURT_STATUS(INVALID_ARGUMENT,
                       "TORCH_TPU_HBM_BYTES=%s: expected a byte count such as 17179869184 or 16G", hv);
      goto done;
    }
    if (hbm > ram_cap) {
      TPURT_LOG(WARNING, "TORCH_TPU_HBM_BYTES=%s exceeds 3/4 of host RAM per chip; using %llu bytes",
                hv, (unsigned long long)ram_cap);
      hbm = ram_cap;
    }
  }
  hbm &= ~(uint64_t)511;
  int cpus[MAX_THREADS];
  for (int i = 0; i < num_chips; ++i) {
    bool pinned = pin && chip_cpus(host.chip * num_chips + i, threads, sharing, cpus);
    s = device_create(i, hbm, threads, pinned ? cpus : NULL, &g_devices[i]);
    if (s) goto done;
    g_num_devices = i + 1;
  }
  tpurt_exec_loader_install(g_devices[0]);
done:
  g_init_status = s;
}

tpurt_status_t tpurt_init(void) {
  pthread_once(&g_once, init_once);
  if (TPURT_UNLIKELY(atomic_load_explicit(&tpurt_forked_child, memory_order_relaxed)))
    return tpurt_fork_check();
  if (!g_init_status) return TPURT_OK;
  return tpurt_status_make(tpurt_status_code(g_init_status), NULL, 0, "tpurt_init: %s",
                           tpurt_status_message(g_init_status));
}

tpurt_device_t* tpurt_device_default(void) {
  pthread_once(&g_once, init_once);
  return g_num_devices > 0 ? g_devices[0] : NULL;
}

int tpurt_device_count(void) {
  pthread_once(&g_once, init_once);
  return g_num_devices;
}

tpurt_status_t tpurt_device_get(int index, tpurt_device_t** out_device) {
  if (!out_device) return TPURT_STATUS(INVALID_ARGUMENT, "device_get: NULL out_device");
  *out_device = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_init());
  TPURT_RETURN_IF_FORKED();
  if (index < 0 || index >= g_num_devices)
    return TPURT_STATUS(INVALID_ARGUMENT, "device_get: chip %d out of range (this process has %d)",
                        index, g_num_devices);
  *out_device = g_devices[index];
  return TPURT_OK;
}

tpurt_status_t tpurt_device_query(tpurt_device_t* d, tpurt_device_info_t* out) {
  if (!d || !out) return TPURT_STATUS(INVALID_ARGUMENT, "device_query: NULL argument");
  memset(out, 0, sizeof(*out));
  snprintf(out->name, sizeof(out->name), "%s", d->props.name);
  out->index = d->index;
  out->hbm_bytes = d->hbm_bytes;
  out->num_threads = d->num_threads;
  return TPURT_OK;
}

tpurt_status_t tpurt_device_shareable_memory(tpurt_device_t* d, int* out_fd, void** out_base,
                                             uint64_t* out_bytes) {
  if (!d || !out_fd || !out_base || !out_bytes)
    return TPURT_STATUS(INVALID_ARGUMENT, "device_shareable_memory: NULL argument");
  if (d->props.hbm_fd < 0 || !d->props.hbm_base)
    return TPURT_STATUS(UNIMPLEMENTED, "chip %d's device memory cannot be shared with other processes "
                        "(driver %s)", d->index, d->driver->name);
  *out_fd = d->props.hbm_fd;
  *out_base = d->props.hbm_base;
  *out_bytes = d->props.hbm_bytes;
  return TPURT_OK;
}

tpurt_queue_t* tpurt_device_default_queue(tpurt_device_t* d) { return d ? d->default_queue : NULL; }

int tpurt_device_count_internal(void) { return g_num_devices; }

tpurt_device_t* tpurt_device_at(int index) {
  return index >= 0 && index < g_num_devices ? g_devices[index] : NULL;
}

/* ---- host <-> device copies ---- */

/* A small host-to-device copy behind queued work does not wait for that
 * work: the source is staged in host memory at the call and the write is
 * queued in order with the kernels (CUDA stages pageable copies the same
 * way). A token index copied to the chip per decode step then costs a
 * malloc and a memcpy, not the wait for the step's queued matmuls. Taken
 * only where the plain path would not do more: not in Debug mode (its
 * guarded copy), not with poison armed (a failed command's bytes: the plain
 * path clears them at once), and not on an idle queue (nothing to wait for,
 * and the direct copy is cheaper). The queue's kept errors surface at its
 * next sync, as for any queued command. TORCH_TPU_STAGED_H2D=0 turns it off. */
enum { TPURT_STAGED_H2D_MAX = 64 << 10 };

static _Atomic int g_staged_h2d = -1;
static bool staged_h2d_enabled(void) { return tpurt_env_switch(&g_staged_h2d, "TORCH_TPU_STAGED_H2D", true); }

static tpurt_status_t staged_h2d(tpurt_device_t* d, tpurt_queue_t* q, void* dst, const void* src, size_t bytes,
                                 bool* queued) {
  if (!staged_h2d_enabled() || tpurt_exec_mode_get() == TPURT_EXEC_DEBUG || tpurt_queue_is_idle(q)) return TPURT_OK;
  tpurt_poison_t* poison = d->driver->device_poison ? d->driver->device_poison(d->hal) : NULL;
  if (TPURT_UNLIKELY(tpurt_poison_armed(poison))) return TPURT_OK;
  void* stage = malloc(bytes);
  if (!stage) return TPURT_OK; /* the plain path needs no memory */
  memcpy(stage, src, bytes);
  tpurt_hal_command_t cmd = {.kind = TPURT_HAL_COMMAND_COPY, .u.copy = {dst, stage, bytes, true},
                             .done = free, .done_user = stage};
  pthread_mutex_lock(&q->submit_lock);
  tpurt_status_t s = tpurt_queue_submit_locked(q, &cmd, NULL);
  pthread_mutex_unlock(&q->submit_lock);
  if (TPURT_UNLIKELY(s != NULL)) {
    free(stage);
    return tpurt_status_annotate(s, "memcpy_h2d");
  }
  *queued = true;
  return TPURT_OK;
}

static tpurt_status_t host_copy(tpurt_device_t* d, tpurt_queue_t* q, void* dst, const void* src,
                                size_t bytes, bool to_device) {
  const char* what = to_device ? "memcpy_h2d" : "memcpy_d2h";
  if (!d) return TPURT_STATUS(INVALID_ARGUMENT, "%s: NULL device", what);
  if (!q) q = d->default_queue;
  if (q->device != d) return TPURT_STATUS(INVALID_ARGUMENT, "%s: queue is on another chip", what);
  TPURT_RETURN_IF_FORKED();
  if (bytes == 0) return TPURT_OK;
  if (!dst || !src) return TPURT_STATUS(INVALID_ARGUMENT, "%s: NULL pointer", what);
  const void* dev_ptr = to_device ? dst : src;
  if (!tpurt_device_range_ok(d, dev_ptr, bytes))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: [%p, +%zu bytes) is not inside chip %d's memory", what,
                        dev_ptr, bytes, d->index);
  if (tpurt_queue_is_current(q))
    return TPURT_STATUS(FAILED_PRECONDITION, "%s from the queue's own thread", what);
  if (TPURT_UNLIKELY(q->capture != NULL)) return tpurt_capture_refuse(q, to_device ? "a copy to the device" : "a copy to the host");
  if (to_device && bytes <= TPURT_STAGED_H2D_MAX) {
    bool queued = false;
    TPURT_RETURN_IF_ERROR(staged_h2d(d, q, dst, src, bytes, &queued));
    if (queued) return TPURT_OK;
  }
  /* Queued work may still read/write these bytes: wait for it. A kernel error
   * kept by the queue surfaces here, as at any sync point. */
  TPURT_RETURN_IF_ERROR(tpurt_queue_wait_point_interruptible(q, tpurt_queue_point(q)));
  TPURT_RETURN_IF_ERROR(tpurt_queue_take_error(q));
  tpurt_allocator_drop_free_poison(d->allocator);
  /* Bytes a failed or dropped command should have written raise its error
   * when read; bytes the host writes are good again. */
  tpurt_poison_t* poison = d->driver->device_poison ? d->driver->device_poison(d->hal) : NULL;
  if (TPURT_UNLIKELY(tpurt_poison_armed(poison))) {
    if (to_device) tpurt_poison_clear(poison, dst, bytes);
    else TPURT_RETURN_IF_ERROR(tpurt_poison_check(poison, src, bytes));
  }
  const tpurt_exec_mode_ops_t* mode = tpurt_exec_mode_hold();
  tpurt_status_t s = TPURT_OK;
  if (TPURT_UNLIKELY(mode->host_copy != NULL))
    s = tpurt_status_annotate(mode->host_copy(dst, src, bytes, dev_ptr), "%s", what);
  else
    memcpy(dst, src, bytes);
  tpurt_exec_mode_release();
  return s;
}

tpurt_status_t tpurt_memcpy_h2d(tpurt_device_t* d, tpurt_queue_t* q, void* dst, const void* src,
                                size_t bytes) {
  return host_copy(d, q, dst, src, bytes, true);
}

tpurt_status_t tpurt_memcpy_d2h(tpurt_device_t* d, tpurt_queue_t* q, void* dst, const void* src,
                                size_t bytes) {
  return host_copy(d, q, dst, src, bytes, false);
}

tpurt_status_t tpurt_kernel_run(tpurt_kernel_fn_t fn, const tpurt_op_call_t* call) {
  if (!fn || !call) return TPURT_STATUS(INVALID_ARGUMENT, "tpurt_kernel_run: NULL kernel or call");
  tpurt_device_t* d = tpurt_device_default();
  if (!d) return TPURT_STATUS(FAILED_PRECONDITION, "tpurt_kernel_run: no device");
  /* Unannotated: callers (tests, ops) see the kernel's own message. */
  return d->driver->dispatch_sync(d->hal, fn, 0, call, tpurt_exec_mode_get() == TPURT_EXEC_DEBUG);
}
