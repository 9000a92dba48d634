/* Queues (streams), the front layer: validation, the queue's timeline
 * (points), its pending-work slot, lifetime and sync. What a submitted call
 * becomes is the current eager mode's business (exec/mode.h): Strict hands
 * it to the HAL queue, Debug runs it now, DeferAndFuse records it in the
 * pending slot, which holds points of the timeline and is flushed to the HAL
 * queue whenever anything else is queued or anyone waits for the queue. The
 * HAL queue (hal/hal.h) runs the commands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/futex.h"
#include "base/thread.h"
#include "exec/allocator.h"
#include "exec/capture.h"
#include "exec/mode.h"
#include "hal/call_record.h"
#include "hal/trace.h"
#include "ops/cost.h"

/* ---- pending work and points ---- */

static void flush_locked(tpurt_queue_t* q) {
  if (q->pending) q->pending_ops->flush_locked(q);
}

void tpurt_queue_flush(tpurt_queue_t* q) {
  if (TPURT_LIKELY(atomic_load_explicit(&q->pending_points, memory_order_acquire) == 0)) return;
  pthread_mutex_lock(&q->submit_lock);
  flush_locked(q);
  pthread_mutex_unlock(&q->submit_lock);
}

uint64_t tpurt_queue_next_point_locked(tpurt_queue_t* q) {
  flush_locked(q);
  return atomic_load_explicit(&q->submitted, memory_order_relaxed) + 1;
}

/* Drops what q has not started (pending work included); submit_lock held. */
static void cancel_locked(tpurt_queue_t* q, tpurt_status_t reason) {
  flush_locked(q);
  q->driver->queue_cancel(q->hal, reason);
}

void tpurt_queue_cancel(tpurt_queue_t* q, tpurt_status_t reason) {
  pthread_mutex_lock(&q->submit_lock);
  cancel_locked(q, reason);
  pthread_mutex_unlock(&q->submit_lock);
}

tpurt_status_t tpurt_queue_submit_locked(tpurt_queue_t* q, tpurt_hal_command_t* cmd, uint64_t* out_point) {
  if (TPURT_UNLIKELY(q->capture != NULL))
    return tpurt_capture_refuse_locked(q, "a queue command other than a kernel or copy");
  flush_locked(q);
  uint64_t point = atomic_load_explicit(&q->submitted, memory_order_relaxed) + 1;
  cmd->value = point;
  if (!cmd->issuer) cmd->issuer = tpurt_thread_issuer();
  if (tpurt_trace_active()) cmd->trace_id = tpurt_trace_tls_launch;
  /* Kernels and copies may give up waiting for room (the host interrupted);
   * a signal, wait or call must be taken (what they release is waited for). */
  cmd->interruptible = cmd->kind == TPURT_HAL_COMMAND_DISPATCH || cmd->kind == TPURT_HAL_COMMAND_COPY;
  tpurt_status_t s = q->driver->queue_submit(q->hal, cmd);
  if (TPURT_UNLIKELY(s != NULL)) {
    /* Interrupted while the queue was full: the backlog goes too. */
    if (tpurt_status_code(s) == TPURT_STATUS_CANCELLED) cancel_locked(q, s);
    return s;
  }
  atomic_store_explicit(&q->submitted, point, memory_order_release);
  if (out_point) *out_point = point;
  return TPURT_OK;
}

void tpurt_queue_wait_point(tpurt_queue_t* q, uint64_t point) {
  if (tpurt_queue_point_reached(q, point) || tpurt_queue_is_current(q)) return;
  tpurt_queue_flush(q);
  tpurt_status_free(q->driver->queue_wait(q->hal, point, false));
}

tpurt_status_t tpurt_queue_wait_point_interruptible(tpurt_queue_t* q, uint64_t point) {
  if (tpurt_queue_point_reached(q, point) || tpurt_queue_is_current(q)) return TPURT_OK;
  tpurt_queue_flush(q);
  tpurt_status_t s = q->driver->queue_wait(q->hal, point, true);
  if (TPURT_UNLIKELY(s != NULL)) tpurt_queue_cancel(q, s);
  return s;
}

tpurt_status_t tpurt_queue_take_error(tpurt_queue_t* q) {
  return q->driver->queue_take_error(q->hal, tpurt_thread_issuer());
}

void tpurt_queue_note_free(tpurt_queue_t* q, void* ptr, size_t bytes) {
  /* Only pending work on q can care; none is the common case. */
  if (!q || atomic_load_explicit(&q->pending_points, memory_order_acquire) == 0) return;
  pthread_mutex_lock(&q->submit_lock);
  if (q->pending) q->pending_ops->note_free_locked(q, ptr, bytes);
  pthread_mutex_unlock(&q->submit_lock);
}

/* ---- submission ---- */

/* A launch while tracing (hal/trace.h): its host-side event (the issuer's
 * correlation id, thread, time, the call's cost), and the launch id the
 * mode's command or record carries to the device event. Debug runs the
 * kernel inside submit, so its device event is recorded here. */
static tpurt_status_t submit_traced(tpurt_queue_t* q, const tpurt_exec_mode_ops_t* mode, const tpurt_op_def_t* op,
                                    const tpurt_op_call_t* call, void* dst, const void* src, size_t bytes) {
  tpurt_trace_event_t ev = {.kind = TPURT_TRACE_LAUNCH, .device = q->device->index, .queue = q->id,
                            .id = tpurt_trace_next_id(), .corr = tpurt_trace_correlation(),
                            .tid = tpurt_trace_thread_id(), .dtype = -1};
  if (op) {
    tpurt_op_cost_t c;
    tpurt_op_cost(op, call, &c);
    ev.flops = c.flops;
    ev.bytes = c.bytes;
    ev.dtype = c.dtype;
    ev.flags = c.matmul ? TPURT_TRACE_F_MATMUL : 0;
    tpurt_trace_set_name(ev.name, sizeof ev.name, call->name, call->overload);
  } else {
    ev.bytes = 2.0 * (double)bytes;
    snprintf(ev.name, sizeof ev.name, "copy (device to device)");
  }
  ev.start_ns = tpurt_now_ns();
  tpurt_trace_tls_launch = ev.id;
  bool sync = mode->id == TPURT_EXEC_DEBUG;
  tpurt_status_t s = op ? mode->submit_kernel(q, op, call) : mode->submit_copy(q, dst, src, bytes);
  tpurt_trace_tls_launch = 0;
  uint64_t t1 = tpurt_now_ns();
  ev.end_ns = sync ? ev.start_ns : t1;
  tpurt_trace_record(&ev);
  if (sync) {
    /* The kernel ran on this thread between the two clock reads. */
    ev.kind = op ? TPURT_TRACE_KERNEL : TPURT_TRACE_COPY;
    ev.end_ns = t1;
    ev.corr = 0;
    ev.tid = 0;
    tpurt_trace_add_busy(t1 - ev.start_ns);
    tpurt_trace_record(&ev);
  }
  return s;
}

tpurt_status_t tpurt_queue_submit_kernel(tpurt_queue_t* q, const tpurt_op_def_t* op,
                                         const tpurt_op_call_t* call) {
  if (!q || !op || !op->fn || !call)
    return TPURT_STATUS(INVALID_ARGUMENT, "submit_kernel: NULL queue, op, kernel or call");
  TPURT_RETURN_IF_FORKED();
  TPURT_RETURN_IF_ERROR(tpurt_call_validate(call));
  if (TPURT_UNLIKELY(q->capture != NULL)) return tpurt_capture_record_kernel(q, op, call);
  const tpurt_exec_mode_ops_t* mode = tpurt_exec_mode_hold();
  tpurt_status_t s = tpurt_trace_active() ? submit_traced(q, mode, op, call, NULL, NULL, 0)
                                          : mode->submit_kernel(q, op, call);
  tpurt_exec_mode_release();
  return s;
}

tpurt_status_t tpurt_queue_submit_copy(tpurt_queue_t* q, void* dst, const void* src, size_t bytes) {
  if (!q) return TPURT_STATUS(INVALID_ARGUMENT, "submit_copy: NULL queue");
  TPURT_RETURN_IF_FORKED();
  if (bytes == 0) return TPURT_OK;
  if (!tpurt_device_range_ok(q->device, dst, bytes) || !tpurt_device_range_ok(q->device, src, bytes))
    return TPURT_STATUS(INVALID_ARGUMENT,
                        "submit_copy: [%p, +%zu) -> [%p, +%zu) is not inside device memory", src,
                        bytes, dst, bytes);
  if (TPURT_UNLIKELY(q->capture != NULL)) return tpurt_capture_record_copy(q, dst, src, bytes);
  const tpurt_exec_mode_ops_t* mode = tpurt_exec_mode_hold();
  tpurt_status_t s = tpurt_trace_active() ? submit_traced(q, mode, NULL, NULL, dst, src, bytes)
                                          : mode->submit_copy(q, dst, src, bytes);
  tpurt_exec_mode_release();
  return s;
}

tpurt_status_t tpurt_queue_submit_host_fn(tpurt_queue_t* q, tpurt_status_t (*fn)(void* user), void* user) {
  return tpurt_queue_submit_host_fn_named(q, fn, user, NULL);
}

tpurt_status_t tpurt_queue_submit_host_fn_named(tpurt_queue_t* q, tpurt_status_t (*fn)(void* user), void* user,
                                                const char* name) {
  if (!q || !fn) return TPURT_STATUS(INVALID_ARGUMENT, "submit_host_fn: NULL queue or function");
  TPURT_RETURN_IF_FORKED();
  tpurt_hal_command_t cmd = {.kind = TPURT_HAL_COMMAND_CALL, .u.call = {.host_fn = fn, .user = user, .name = name}};
  pthread_mutex_lock(&q->submit_lock);
  tpurt_status_t s = tpurt_queue_submit_locked(q, &cmd, NULL);
  pthread_mutex_unlock(&q->submit_lock);
  return s;
}

static void release_queue_cb(void* user) { tpurt_queue_release(user); }

/* Queues a wait for `point` of `src` (retained until the wait is done). */
static tpurt_status_t push_wait(tpurt_queue_t* q, tpurt_queue_t* src, uint64_t point) {
  tpurt_queue_retain(src);
  tpurt_hal_command_t cmd = {.kind = TPURT_HAL_COMMAND_WAIT, .u.wait = {src->hal, point},
                             .done = release_queue_cb, .done_user = src};
  pthread_mutex_lock(&q->submit_lock);
  tpurt_status_t s = tpurt_queue_submit_locked(q, &cmd, NULL);
  pthread_mutex_unlock(&q->submit_lock);
  if (s) tpurt_queue_release(src);
  return s;
}

tpurt_status_t tpurt_queue_wait_queue_point(tpurt_queue_t* q, tpurt_queue_t* src, uint64_t point) {
  /* Already reached, or the same in-order queue: no wait. */
  if (src == q || tpurt_queue_point_reached(src, point)) return TPURT_OK;
  tpurt_queue_flush(src); /* the waited-for work must be able to reach its point */
  return push_wait(q, src, point);
}

/* ---- lifetime ---- */

/* Frees the front part of a queue whose HAL queue has run everything. */
static void queue_free_front(tpurt_queue_t* q) {
  tpurt_device_t* d = q->device;
  pthread_mutex_lock(&d->queues_lock);
  if (q->prev) q->prev->next = q->next;
  else d->queues = q->next;
  if (q->next) q->next->prev = q->prev;
  pthread_mutex_unlock(&d->queues_lock);
  tpurt_allocator_queue_detach(d->allocator, q);
  if (q->pending) q->pending_ops->discard(q); /* free markers at most: waiting flushed the rest */
  pthread_mutex_destroy(&q->submit_lock);
  free(q);
}

static void queue_exit_cb(void* user) { queue_free_front(user); }

tpurt_status_t tpurt_queue_create_internal(tpurt_device_t* device, uint64_t id, int priority,
                                           tpurt_queue_t** out_queue) {
  *out_queue = NULL;
  tpurt_queue_t* q = aligned_alloc(64, (sizeof(*q) + 63) & ~(size_t)63);
  if (!q) return TPURT_STATUS(RESOURCE_EXHAUSTED, "out of host memory creating a queue");
  memset(q, 0, sizeof(*q));
  q->device = device;
  q->driver = device->driver;
  q->id = id;
  q->priority = priority;
  atomic_init(&q->refcount, 1);
  pthread_mutex_init(&q->submit_lock, NULL);
  tpurt_status_t s = tpurt_allocator_queue_attach(device->allocator, q);
  tpurt_hal_queue_params_t params = {.id = id, .priority = priority, .exit = queue_exit_cb, .exit_user = q};
  if (!s) {
    s = q->driver->queue_create(device->hal, &params, &q->hal);
    if (s) tpurt_allocator_queue_detach(device->allocator, q);
  }
  if (s) {
    pthread_mutex_destroy(&q->submit_lock);
    free(q);
    return s;
  }
  pthread_mutex_lock(&device->queues_lock);
  q->next = device->queues;
  if (device->queues) device->queues->prev = q;
  device->queues = q;
  pthread_mutex_unlock(&device->queues_lock);
  *out_queue = q;
  return TPURT_OK;
}

tpurt_status_t tpurt_queue_create(tpurt_device_t* device, int priority, tpurt_queue_t** out_queue) {
  if (!out_queue) return TPURT_STATUS(INVALID_ARGUMENT, "queue_create: NULL out_queue");
  *out_queue = NULL;
  if (!device) return TPURT_STATUS(INVALID_ARGUMENT, "queue_create: NULL device");
  pthread_mutex_lock(&device->queues_lock);
  uint64_t id = ++device->next_queue_id;
  pthread_mutex_unlock(&device->queues_lock);
  return tpurt_queue_create_internal(device, id, priority, out_queue);
}

void tpurt_queue_retain(tpurt_queue_t* q) {
  if (q) atomic_fetch_add(&q->refcount, 1);
}

static void queue_destroy(tpurt_queue_t* q) {
  if (tpurt_queue_is_current(q)) {
    /* The last reference went away inside one of this queue's own commands
     * (an event's record): the HAL queue finishes what it holds, then calls
     * queue_exit_cb on its way out. */
    q->driver->queue_destroy(q->hal);
    return;
  }
  tpurt_queue_wait_point(q, tpurt_queue_point(q));
  tpurt_hal_queue_t* hal = q->hal;
  const tpurt_hal_driver_t* drv = q->driver;
  queue_free_front(q);
  drv->queue_destroy(hal);
}

void tpurt_queue_release(tpurt_queue_t* q) {
  if (!q) return;
  /* The default queue belongs to its device; a stray release cannot end it. */
  if (q->id == 0) {
    int r = atomic_load(&q->refcount);
    while (r > 1 && !atomic_compare_exchange_weak(&q->refcount, &r, r - 1)) {}
    return;
  }
  if (atomic_fetch_sub(&q->refcount, 1) == 1) queue_destroy(q);
}

tpurt_device_t* tpurt_queue_device(tpurt_queue_t* q) { return q ? q->device : NULL; }
uint64_t tpurt_queue_id(tpurt_queue_t* q) { return q ? q->id : 0; }

/* ---- sync ---- */

tpurt_status_t tpurt_queue_synchronize(tpurt_queue_t* q) {
  if (!q) return TPURT_STATUS(INVALID_ARGUMENT, "queue_synchronize: NULL queue");
  TPURT_RETURN_IF_FORKED();
  if (tpurt_queue_is_current(q))
    return TPURT_STATUS(FAILED_PRECONDITION,
                        "queue_synchronize called from the queue's own thread (a host_fn)");
  if (TPURT_UNLIKELY(q->capture != NULL)) return tpurt_capture_refuse(q, "synchronize");
  TPURT_RETURN_IF_ERROR(tpurt_queue_wait_point_interruptible(q, tpurt_queue_point(q)));
  tpurt_allocator_drop_free_poison(q->device->allocator);
  tpurt_status_t s = tpurt_queue_take_error(q);
  const tpurt_exec_mode_ops_t* mode = tpurt_exec_mode_ops();
  if (!s && TPURT_UNLIKELY(mode->sync_check != NULL)) s = mode->sync_check();
  return s;
}

bool tpurt_queue_is_idle(tpurt_queue_t* q) {
  if (!q) return true;
  /* A poller must see pending work start; trylock: the allocator asks while
   * holding its own lock, and a submitter holding ours will flush anyway. */
  if (atomic_load_explicit(&q->pending_points, memory_order_acquire) && !tpurt_queue_is_current(q) &&
      pthread_mutex_trylock(&q->submit_lock) == 0) {
    flush_locked(q);
    pthread_mutex_unlock(&q->submit_lock);
  }
  return tpurt_queue_point_reached(q, tpurt_queue_point(q));
}

/* Retains every live queue of the device into *out (local storage or malloc'd);
 * returns the count, or -1 when host memory ran out. */
static int snapshot_queues(tpurt_device_t* d, tpurt_queue_t** local, int cap,
                           tpurt_queue_t*** out) {
  tpurt_queue_t** qs = local;
  int n = 0;
  pthread_mutex_lock(&d->queues_lock);
  for (tpurt_queue_t* q = d->queues; q; q = q->next) ++n;
  if (n > cap) {
    qs = malloc((size_t)n * sizeof(*qs));
    if (!qs) {
      pthread_mutex_unlock(&d->queues_lock);
      return -1;
    }
  }
  n = 0;
  for (tpurt_queue_t* q = d->queues; q; q = q->next) {
    /* Skip a queue whose last reference is being dropped right now. */
    int r = atomic_load(&q->refcount);
    while (r > 0 && !atomic_compare_exchange_weak(&q->refcount, &r, r + 1)) {}
    if (r > 0) qs[n++] = q;
  }
  pthread_mutex_unlock(&d->queues_lock);
  *out = qs;
  return n;
}

void tpurt_device_wait_idle(tpurt_device_t* d) {
  tpurt_queue_t* local[32];
  tpurt_queue_t** qs;
  int n = snapshot_queues(d, local, 32, &qs);
  if (n < 0) {
    /* No memory for a snapshot: wait for each under the lock instead. */
    pthread_mutex_lock(&d->queues_lock);
    for (tpurt_queue_t* q = d->queues; q; q = q->next) tpurt_queue_wait_point(q, tpurt_queue_point(q));
    pthread_mutex_unlock(&d->queues_lock);
    return;
  }
  for (int i = 0; i < n; ++i) tpurt_queue_wait_point(qs[i], tpurt_queue_point(qs[i]));
  for (int i = 0; i < n; ++i) tpurt_queue_release(qs[i]);
  if (qs != local) free(qs);
}

tpurt_status_t tpurt_device_synchronize(tpurt_device_t* d) {
  if (!d) return TPURT_STATUS(INVALID_ARGUMENT, "device_synchronize: NULL device");
  tpurt_queue_t* local[32];
  tpurt_queue_t** qs;
  int n = snapshot_queues(d, local, 32, &qs);
  if (n < 0) return TPURT_STATUS(RESOURCE_EXHAUSTED, "device_synchronize: out of host memory");
  tpurt_status_t first = TPURT_OK;
  for (int i = 0; i < n; ++i) {
    tpurt_status_t s = tpurt_queue_is_current(qs[i]) ? TPURT_OK : tpurt_queue_synchronize(qs[i]);
    if (s && !first) first = s;
    else tpurt_status_free(s);
  }
  for (int i = 0; i < n; ++i) tpurt_queue_release(qs[i]);
  if (qs != local) free(qs);
  return first;
}
