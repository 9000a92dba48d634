/* vTPU queues: an in-order command ring per queue, drained by one worker
 * thread that runs kernels on the chip's compute pool. Submission copies the
 * whole command, call record included, into the ring (one reservation, no
 * malloc), so the caller's record may go away at once. The timeline value of
 * the last command done is `completed`; a host waiting for a value announces
 * it, and the worker wakes waiters only when the smallest announced value is
 * reached, so a host sleeping on the end of a step is woken once, not after
 * every command. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/futex.h"
#include "base/log.h"
#include "base/thread.h"
#include "hal/call_record.h"
#include "hal/drivers/vtpu/vtpu_internal.h"
#include "hal/trace.h"

#define RING_BYTES ((uint64_t)2 << 20)
#define CMD_ALIGN 64u
/* Bigger call records (huge tensor lists) get a malloc'd payload instead. */
#define RING_MAX_INLINE (RING_BYTES / 4)
/* Idle worker polls this long before sleeping; a waiting host this long. */
#ifndef WORKER_SPIN_NS
#define WORKER_SPIN_NS 20000u
#endif
#ifndef WAIT_SPIN_NS
#define WAIT_SPIN_NS 10000u
#endif

#define MAX_ERRORS 16
/* Interruptible waits poll the host this often. */
#define INTERRUPT_POLL_NS 50000000u

enum { CMD_PAD = 0 }; /* filler up to the ring's end; else a tpurt_hal_command_kind_t */

typedef struct cmd_t {
  uint32_t kind;
  uint32_t external; /* dispatch payload malloc'd (free after running) */
  uint64_t size;     /* ring bytes this command occupies */
  tpurt_hal_command_t c;
  tpurt_op_call_t call; /* a dispatch's record: points into the payload that follows */
  void* payload;
} cmd_t;

#define ALIGN_UP(x, a) (((x) + (a) - 1) & ~(uint64_t)((a) - 1))
#define CMD_HEADER ALIGN_UP(sizeof(cmd_t), 16)

struct tpurt_hal_queue_t {
  tpurt_hal_device_t* device;
  uint64_t id;

  /* Command ring: the submitter (one at a time, under the caller's lock)
   * appends at tail; the worker consumes at head. Positions grow
   * monotonically. Producer- and worker-written fields sit on separate
   * cache lines. */
  uint8_t* ring;
  uint64_t ring_size;
  _Alignas(64) _Atomic uint64_t tail;
  _Atomic uint64_t submitted;      /* the value of the last command submitted */
  _Atomic uint32_t work_word;      /* bumped per submit; the worker sleeps on it */
  _Alignas(64) _Atomic uint64_t head;
  _Atomic uint64_t completed;      /* the value of the last command done */
  _Atomic uint32_t done_word;      /* bumped per completion; waiters sleep on it */
  _Alignas(64) _Atomic uint32_t worker_sleeping;
  _Atomic uint32_t done_waiters;
  /* The smallest value a sleeping waiter needs (0: any completion, a
   * submitter waiting for ring space; UINT64_MAX: none). Waiters keep their
   * values in wait_points (under wait_lock); the worker only reads wake_at. */
  _Atomic uint64_t wake_at;
  pthread_mutex_t wait_lock;
  uint64_t wait_points[8];
  int num_wait_points, wait_overflow;
  _Atomic bool stop;
  _Atomic bool self_destroy; /* destroyed on the worker itself */
  void (*exit)(void* user);  /* then called on the worker before it frees the queue */
  void* exit_user;
  pthread_t thread;

  /* Command errors, the first of each issuer since its last take (a few
   * threads at most; when more have errors, the oldest one is dropped). And
   * the last cancel: commands up to cancel_upto are dropped with a copy of
   * cancel_reason. */
  _Alignas(64) pthread_mutex_t error_lock;
  struct {
    uint64_t issuer;
    tpurt_status_t status;
  } errors[MAX_ERRORS];
  int num_errors;
  _Atomic uint64_t cancel_upto;
  tpurt_status_t cancel_reason;

  tpurt_scratch_t scratch;
};

static _Thread_local tpurt_hal_queue_t* tls_queue;

/* ---- waiting ---- */

/* wake_at = the smallest registered value (0 once more waiters than slots). wait_lock held. */
static void wake_at_update(tpurt_hal_queue_t* q) {
  uint64_t m = q->wait_overflow ? 0 : UINT64_MAX;
  for (int i = 0; i < q->num_wait_points; ++i) m = q->wait_points[i] < m ? q->wait_points[i] : m;
  atomic_store(&q->wake_at, m);
}

/* A waiter announces the value it sleeps for before it checks and sleeps,
 * and withdraws it when done: the worker, which checks after completing, then
 * either sees the value or the waiter sees the completion. */
static void waiter_enter(tpurt_hal_queue_t* q, uint64_t value) {
  pthread_mutex_lock(&q->wait_lock);
  if (q->num_wait_points < (int)(sizeof q->wait_points / sizeof q->wait_points[0]))
    q->wait_points[q->num_wait_points++] = value;
  else
    q->wait_overflow++;
  wake_at_update(q);
  pthread_mutex_unlock(&q->wait_lock);
  atomic_fetch_add(&q->done_waiters, 1);
}

static void waiter_leave(tpurt_hal_queue_t* q, uint64_t value) {
  atomic_fetch_sub(&q->done_waiters, 1);
  pthread_mutex_lock(&q->wait_lock);
  int i = 0;
  while (i < q->num_wait_points && q->wait_points[i] != value) ++i;
  if (i < q->num_wait_points) q->wait_points[i] = q->wait_points[--q->num_wait_points];
  else q->wait_overflow--;
  wake_at_update(q);
  pthread_mutex_unlock(&q->wait_lock);
}

static bool reached(tpurt_hal_queue_t* q, uint64_t value) {
  return atomic_load_explicit(&q->completed, memory_order_acquire) >= value;
}

uint64_t tpurt_vtpu_queue_completed(tpurt_hal_queue_t* q) {
  return atomic_load_explicit(&q->completed, memory_order_acquire);
}

bool tpurt_vtpu_queue_is_current(tpurt_hal_queue_t* q) { return tls_queue == q; }

tpurt_status_t tpurt_vtpu_queue_wait(tpurt_hal_queue_t* q, uint64_t value, bool interruptible) {
  if (reached(q, value) || tls_queue == q) return TPURT_OK;
  uint64_t t0 = tpurt_now_ns();
  for (unsigned i = 1; i < 4096; ++i) {
    tpurt_spin_step();
    if (reached(q, value)) return TPURT_OK;
    if ((i & 7) == 0 && tpurt_now_ns() - t0 > WAIT_SPIN_NS) break;
  }
  tpurt_status_t s = TPURT_OK;
  waiter_enter(q, value);
  for (;;) {
    uint32_t w = atomic_load(&q->done_word);
    if (atomic_load(&q->completed) >= value) break;
    if (!interruptible) {
      tpurt_futex_wait(&q->done_word, w);
      continue;
    }
    tpurt_futex_wait_ns(&q->done_word, w, INTERRUPT_POLL_NS);
    if (atomic_load(&q->completed) < value && (s = tpurt_host_interrupted()) != NULL) break;
  }
  waiter_leave(q, value);
  return s;
}

/* Submitter side: blocks until the ring has `bytes` free, or the host
 * interrupts (its status). */
static tpurt_status_t wait_ring_space(tpurt_hal_queue_t* q, uint64_t tail, uint64_t bytes, bool interruptible) {
  tpurt_status_t s = TPURT_OK;
  waiter_enter(q, 0); /* any completion frees ring space */
  for (;;) {
    uint32_t w = atomic_load(&q->done_word);
    if (q->ring_size - (tail - atomic_load(&q->head)) >= bytes) break;
    if (!interruptible) {
      tpurt_futex_wait(&q->done_word, w);
      continue;
    }
    tpurt_futex_wait_ns(&q->done_word, w, INTERRUPT_POLL_NS);
    if (q->ring_size - (tail - atomic_load(&q->head)) < bytes && (s = tpurt_host_interrupted()) != NULL) break;
  }
  waiter_leave(q, 0);
  return s;
}

/* ---- the worker ---- */

static void set_error(tpurt_hal_queue_t* q, uint64_t issuer, tpurt_status_t s) {
  pthread_mutex_lock(&q->error_lock);
  int i = 0;
  while (i < q->num_errors && q->errors[i].issuer != issuer) ++i;
  if (i == q->num_errors) {
    if (q->num_errors == MAX_ERRORS) {
      tpurt_status_free(q->errors[0].status);
      memmove(&q->errors[0], &q->errors[1], (MAX_ERRORS - 1) * sizeof(q->errors[0]));
      i = --q->num_errors;
    }
    q->errors[i].issuer = issuer;
    q->errors[i].status = s;
    q->num_errors++;
    s = NULL;
  }
  pthread_mutex_unlock(&q->error_lock);
  tpurt_status_free(s); /* that issuer already has an earlier one */
}

tpurt_status_t tpurt_vtpu_queue_take_error(tpurt_hal_queue_t* q, uint64_t issuer) {
  pthread_mutex_lock(&q->error_lock);
  tpurt_status_t s = NULL;
  for (int i = 0; i < q->num_errors && !s; ++i) {
    if (q->errors[i].issuer != issuer && q->errors[i].issuer != 0) continue;
    s = q->errors[i].status;
    memmove(&q->errors[i], &q->errors[i + 1], (size_t)(q->num_errors - i - 1) * sizeof(q->errors[0]));
    q->num_errors--;
  }
  pthread_mutex_unlock(&q->error_lock);
  return s;
}

void tpurt_vtpu_queue_cancel(tpurt_hal_queue_t* q, tpurt_status_t reason) {
  tpurt_status_t copy = tpurt_status_copy(reason);
  pthread_mutex_lock(&q->error_lock);
  tpurt_status_t old = q->cancel_reason;
  q->cancel_reason = copy;
  atomic_store(&q->cancel_upto, atomic_load(&q->submitted));
  pthread_mutex_unlock(&q->error_lock);
  /* A worker still dropping under the old reason holds its own copy. */
  tpurt_status_free(old);
}

/* The reason a command of `value` is dropped (a copy), or NULL. */
static tpurt_status_t dropped(tpurt_hal_queue_t* q, uint64_t value) {
  if (TPURT_LIKELY(atomic_load_explicit(&q->cancel_upto, memory_order_acquire) < value)) return NULL;
  pthread_mutex_lock(&q->error_lock);
  tpurt_status_t s = tpurt_status_copy(q->cancel_reason);
  pthread_mutex_unlock(&q->error_lock);
  return s;
}

static void execute(tpurt_hal_queue_t* q, cmd_t* c) {
  tpurt_kernel_ctx_t ctx;
  tpurt_vtpu_kernel_ctx(q->device, &q->scratch, false, &ctx);
  ctx.issuer = c->c.issuer;
  ctx.queue_id = q->id;
  ctx.trace_id = c->c.trace_id;
  ctx.cancel = dropped(q, c->c.value);
  switch (c->kind) {
    case TPURT_HAL_COMMAND_DISPATCH: {
      tpurt_status_t s = tpurt_kernel_ctx_invoke(&ctx, c->c.u.dispatch.fn, c->c.u.dispatch.op_flags, &c->call);
      if (TPURT_UNLIKELY(s != NULL)) set_error(q, ctx.issuer, s);
      if (c->external) free(c->payload);
      break;
    }
    case TPURT_HAL_COMMAND_COPY:
      if (c->c.u.copy.from_host)
        tpurt_kernel_ctx_write(&ctx, c->c.u.copy.dst, c->c.u.copy.src, c->c.u.copy.bytes);
      else
        tpurt_kernel_ctx_copy(&ctx, c->c.u.copy.dst, c->c.u.copy.src, c->c.u.copy.bytes);
      break;
    case TPURT_HAL_COMMAND_CALL: {
      tpurt_status_t s = c->c.u.call.fn ? c->c.u.call.fn(c->c.u.call.user, &ctx) : c->c.u.call.host_fn(c->c.u.call.user);
      tpurt_scratch_reset(&q->scratch);
      if (TPURT_UNLIKELY(s != NULL)) set_error(q, ctx.issuer, s);
      break;
    }
    case TPURT_HAL_COMMAND_SIGNAL:
      c->c.u.signal.reached(c->c.u.signal.user, q, c->c.value, tpurt_now_ns());
      break;
    case TPURT_HAL_COMMAND_WAIT:
      tpurt_status_free(tpurt_vtpu_queue_wait(c->c.u.wait.queue, c->c.u.wait.value, false));
      break;
    default:
      break;
  }
  tpurt_status_free(ctx.cancel);
  if (c->c.done) c->c.done(c->c.done_user);
}

/* execute() while tracing: the command's device-side start and end, as an
 * event on this queue's track; a CALL that runs kernels itself (DeferAndFuse's
 * planned graph) records those instead, and counts only as busy time. */
static void execute_traced(tpurt_hal_queue_t* q, cmd_t* c) {
  tpurt_trace_event_t ev = {.device = tpurt_vtpu_device_index(q->device), .queue = q->id,
                            .id = c->c.trace_id, .dtype = -1};
  /* The name first: execute() frees a dispatch's malloc'd payload. */
  if (c->kind == TPURT_HAL_COMMAND_DISPATCH)
    tpurt_trace_set_name(ev.name, sizeof ev.name, c->call.name, c->call.overload);
  uint64_t t0 = tpurt_now_ns();
  execute(q, c);
  uint64_t t1 = tpurt_now_ns();
  tpurt_trace_add_busy(t1 - t0);
  ev.start_ns = t0;
  ev.end_ns = t1;
  switch (c->kind) {
    case TPURT_HAL_COMMAND_DISPATCH:
      ev.kind = TPURT_TRACE_KERNEL;
      break;
    case TPURT_HAL_COMMAND_COPY:
      ev.kind = TPURT_TRACE_COPY;
      ev.bytes = (c->c.u.copy.from_host ? 1.0 : 2.0) * (double)c->c.u.copy.bytes;
      snprintf(ev.name, sizeof ev.name, c->c.u.copy.from_host ? "copy (host to device)" : "copy (device to device)");
      break;
    case TPURT_HAL_COMMAND_CALL:
      if (c->c.u.call.fn) return;
      ev.kind = TPURT_TRACE_CALL;
      snprintf(ev.name, sizeof ev.name, "%s", c->c.u.call.name ? c->c.u.call.name : "host callback");
      break;
    default:
      return;
  }
  tpurt_trace_record(&ev);
}

/* How the worker, and a small kernel run inline, run a command. */
static void run_command(tpurt_hal_queue_t* q, cmd_t* c) {
  if (tpurt_trace_active()) execute_traced(q, c);
  else execute(q, c);
}

static void queue_free(tpurt_hal_queue_t* q);

static void* worker_main(void* arg) {
  tpurt_hal_queue_t* q = arg;
  tls_queue = q;
  uint64_t head = atomic_load(&q->head);
  for (;;) {
    uint64_t tail = atomic_load_explicit(&q->tail, memory_order_acquire);
    if (head != tail) {
      cmd_t* c = (cmd_t*)(q->ring + head % q->ring_size);
      uint64_t size = c->size;
      bool counts = c->kind != CMD_PAD;
      uint64_t value = counts ? c->c.value : 0;
      if (counts) run_command(q, c);
      head += size;
      atomic_store_explicit(&q->head, head, memory_order_release);
      if (counts) {
        atomic_store_explicit(&q->completed, value, memory_order_release);
        atomic_fetch_add(&q->done_word, 1);
        if (atomic_load(&q->done_waiters) && value >= atomic_load(&q->wake_at))
          tpurt_futex_wake_all(&q->done_word);
      }
      continue;
    }
    if (atomic_load(&q->stop)) break;
    /* Idle: poll briefly (the host often submits the next op within
     * microseconds), then sleep until a submit bumps work_word. */
    uint64_t t0 = tpurt_now_ns();
    bool got = false;
    for (unsigned i = 1;; ++i) {
      tpurt_spin_step();
      if (atomic_load_explicit(&q->tail, memory_order_relaxed) != head) { got = true; break; }
      if ((i & 7) == 0 && tpurt_now_ns() - t0 > WORKER_SPIN_NS) break;
    }
    if (got) continue;
    uint32_t w = atomic_load(&q->work_word);
    atomic_store(&q->worker_sleeping, 1);
    if (atomic_load(&q->tail) == head && !atomic_load(&q->stop)) tpurt_futex_wait(&q->work_word, w);
    atomic_store(&q->worker_sleeping, 0);
  }
  if (atomic_load(&q->self_destroy)) {
    pthread_detach(pthread_self());
    if (q->exit) q->exit(q->exit_user);
    tls_queue = NULL;
    queue_free(q);
  }
  return NULL;
}

/* ---- submission ---- */

/* Reserves `bytes` (a multiple of CMD_ALIGN) at the ring's tail; fill the
 * command, then publish(). The caller serializes submitters. */
static cmd_t* reserve(tpurt_hal_queue_t* q, uint64_t bytes, bool interruptible, uint64_t* out_pad,
                      tpurt_status_t* out_status) {
  uint64_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
  uint64_t pos = tail % q->ring_size;
  uint64_t room_to_end = q->ring_size - pos;
  uint64_t total = bytes <= room_to_end ? bytes : room_to_end + bytes;
  if (q->ring_size - (tail - atomic_load_explicit(&q->head, memory_order_acquire)) < total) {
    tpurt_status_t s = wait_ring_space(q, tail, total, interruptible);
    if (s) {
      *out_status = s;
      return NULL;
    }
  }
  if (bytes > room_to_end) {
    cmd_t* pad = (cmd_t*)(q->ring + pos);
    pad->kind = CMD_PAD;
    pad->size = room_to_end;
    pos = 0;
  }
  cmd_t* c = (cmd_t*)(q->ring + pos);
  c->size = bytes;
  c->external = 0;
  *out_pad = total - bytes; /* published together with the command */
  return c;
}

static void publish(tpurt_hal_queue_t* q, uint64_t value, uint64_t bytes, uint64_t pad) {
  /* The caller's lock makes this thread the only writer of submitted/tail,
   * so plain stores do; the tail store is seq_cst because it must be ordered
   * before the load of worker_sleeping (the worker does the mirror image:
   * store sleeping, then re-check tail), so one side always sees the other. */
  atomic_store_explicit(&q->submitted, value, memory_order_release);
  atomic_store(&q->tail, atomic_load_explicit(&q->tail, memory_order_relaxed) + bytes + pad);
  if (atomic_load(&q->worker_sleeping)) {
    atomic_fetch_add(&q->work_word, 1);
    tpurt_futex_wake(&q->work_word, 1);
  }
}

/* ---- small kernels on an idle queue ----
 * Handing a command to the worker costs a few microseconds of cross-thread
 * traffic (more when the host's cores are busy and the worker must be woken
 * or scheduled), far more than a kernel over a few thousand elements. A
 * kernel whose tensors hold at most TPURT_VTPU_INLINE_MAX elements together
 * (unset or 0: off, the runtime's default, since a kernel may wait on the
 * host; torch_tpu sets 65536: PyTorch's kernels only compute), submitted
 * while the queue has nothing
 * left to run, runs on the submitting thread as the worker would run it
 * (same context, poison check, error kept for the next sync) and completes
 * its point before the submit returns. Order is kept: nothing queued earlier
 * is still pending, and the caller's submit lock keeps others out. */

static int64_t call_elements(const tpurt_op_call_t* call) {
  int64_t n = 0;
  for (int32_t i = 0; i < call->num_args; ++i) {
    const tpurt_arg_t* a = &call->args[i];
    if (a->kind == TPURT_ARG_TENSOR && a->v.tensor) {
      n += tpurt_tensor_numel(a->v.tensor);
    } else if (a->kind == TPURT_ARG_TENSOR_LIST) {
      for (int32_t k = 0; k < a->count; ++k)
        if (a->v.tensors[k]) n += tpurt_tensor_numel(a->v.tensors[k]);
    }
  }
  for (int32_t i = 0; i < call->num_outputs; ++i) n += tpurt_tensor_numel(&call->outputs[i]);
  return n;
}

static int64_t inline_max_elements(void) {
  static _Atomic int64_t cached = -1;
  int64_t v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (TPURT_LIKELY(v >= 0)) return v;
  const char* e = getenv("TPURT_VTPU_INLINE_MAX");
  v = e && *e ? strtoll(e, NULL, 10) : 0;
  if (v < 0) v = 0;
  atomic_store_explicit(&cached, v, memory_order_relaxed);
  return v;
}

static bool run_inline(tpurt_hal_queue_t* q, const tpurt_hal_command_t* command) {
  if (command->kind != TPURT_HAL_COMMAND_DISPATCH || tls_queue != NULL) return false;
  int64_t max = inline_max_elements();
  if (max == 0) return false;
  /* Idle: the worker has finished the last command submitted (it stores
   * `completed` after running a command and its callback). */
  if (atomic_load_explicit(&q->completed, memory_order_acquire) != atomic_load_explicit(&q->submitted, memory_order_relaxed))
    return false;
  if (atomic_load_explicit(&q->cancel_upto, memory_order_acquire) >= command->value) return false;
  if (call_elements(command->u.dispatch.call) > max) return false;
  cmd_t c;
  memset(&c, 0, sizeof(c));
  c.kind = command->kind;
  c.c = *command;
  c.call = *command->u.dispatch.call; /* runs now: the caller's record stays valid */
  uint64_t value = command->value;
  atomic_store_explicit(&q->submitted, value, memory_order_release);
  tls_queue = q;
  run_command(q, &c); /* traced like the worker's, so the profiler sees it on the queue's track */
  tls_queue = NULL;
  atomic_store_explicit(&q->completed, value, memory_order_release);
  atomic_fetch_add(&q->done_word, 1);
  if (atomic_load(&q->done_waiters) && value >= atomic_load(&q->wake_at)) tpurt_futex_wake_all(&q->done_word);
  return true;
}

tpurt_status_t tpurt_vtpu_queue_submit(tpurt_hal_queue_t* q, const tpurt_hal_command_t* command) {
  if (run_inline(q, command)) return TPURT_OK;
  uint64_t payload = 0;
  bool external = false;
  uint8_t* ext = NULL;
  if (command->kind == TPURT_HAL_COMMAND_DISPATCH) {
    payload = tpurt_call_record_size(command->u.dispatch.call);
    external = payload > RING_MAX_INLINE;
    if (external && !(ext = malloc(payload)))
      return TPURT_STATUS(RESOURCE_EXHAUSTED, "submit %s: out of host memory (%llu bytes)",
                          command->u.dispatch.call->name ? command->u.dispatch.call->name : "?",
                          (unsigned long long)payload);
  }
  uint64_t bytes = ALIGN_UP(CMD_HEADER + (external ? 0 : payload), CMD_ALIGN);
  uint64_t pad;
  tpurt_status_t rs = TPURT_OK;
  cmd_t* c = reserve(q, bytes, command->interruptible, &pad, &rs);
  if (!c) {
    free(ext);
    return rs;
  }
  c->kind = command->kind;
  c->c = *command;
  if (command->kind == TPURT_HAL_COMMAND_DISPATCH) {
    uint8_t* buf = external ? ext : (uint8_t*)c + CMD_HEADER;
    tpurt_call_record_copy(command->u.dispatch.call, buf, &c->call);
    c->external = external;
    c->payload = ext;
  }
  publish(q, command->value, bytes, pad);
  return TPURT_OK;
}

/* ---- lifetime ---- */

tpurt_status_t tpurt_vtpu_queue_create(tpurt_hal_device_t* device, const tpurt_hal_queue_params_t* params,
                                       tpurt_hal_queue_t** out_queue) {
  *out_queue = NULL;
  /* Cache-line aligned: submitter and worker fields live on separate lines. */
  tpurt_hal_queue_t* q = aligned_alloc(64, (sizeof(*q) + 63) & ~(size_t)63);
  if (!q) return TPURT_STATUS(RESOURCE_EXHAUSTED, "out of host memory creating a queue");
  memset(q, 0, sizeof(*q));
  q->device = device;
  q->id = params->id;
  q->exit = params->exit;
  q->exit_user = params->exit_user;
  q->ring_size = RING_BYTES;
  /* Plain malloc: untouched ring pages cost nothing until used. */
  if (posix_memalign((void**)&q->ring, CMD_ALIGN, RING_BYTES) != 0) {
    free(q);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "out of host memory creating a queue");
  }
  pthread_mutex_init(&q->error_lock, NULL);
  pthread_mutex_init(&q->wait_lock, NULL);
  atomic_init(&q->wake_at, UINT64_MAX);
  tpurt_scratch_init(&q->scratch);
  char name[48]; /* cut to 15 characters by the thread helper */
  snprintf(name, sizeof(name), "tpu%d-q%llu", tpurt_vtpu_device_index(device), (unsigned long long)params->id);
  if (tpurt_thread_start(&q->thread, worker_main, q, name) != 0) {
    tpurt_scratch_deinit(&q->scratch);
    pthread_mutex_destroy(&q->error_lock);
    pthread_mutex_destroy(&q->wait_lock);
    free(q->ring);
    free(q);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "cannot start a queue thread");
  }
  /* The default queue's worker leads most kernels: on the chip's first CPU, apart from the pool's
   * threads. Other queues' workers (streams) keep to the chip's CPUs, so two busy queues never
   * share one CPU while another is idle. */
  int ncpu;
  const int* cpus = tpurt_vtpu_device_cpus(device, &ncpu);
  if (cpus && tpurt_thread_pin(q->thread, cpus, params->id == 0 ? 1 : ncpu) != 0)
    TPURT_LOG(WARNING, "vtpu: cannot keep %s on its chip's host CPUs; the scheduler places it", name);
  *out_queue = q;
  return TPURT_OK;
}

/* Frees a stopped queue whose worker has exited. */
static void queue_free(tpurt_hal_queue_t* q) {
  for (int i = 0; i < q->num_errors; ++i) tpurt_status_free(q->errors[i].status);
  tpurt_status_free(q->cancel_reason);
  tpurt_scratch_deinit(&q->scratch);
  pthread_mutex_destroy(&q->error_lock);
  pthread_mutex_destroy(&q->wait_lock);
  free(q->ring);
  free(q);
}

void tpurt_vtpu_queue_destroy(tpurt_hal_queue_t* q) {
  if (!q) return;
  if (tls_queue == q) {
    /* Destroyed inside one of this queue's own commands: the worker finishes
     * what is queued, then frees the queue itself on its way out. */
    atomic_store(&q->self_destroy, true);
    atomic_store(&q->stop, true);
    return;
  }
  tpurt_status_free(tpurt_vtpu_queue_wait(q, atomic_load(&q->submitted), false));
  atomic_store(&q->stop, true);
  atomic_fetch_add(&q->work_word, 1);
  tpurt_futex_wake_all(&q->work_word);
  pthread_join(q->thread, NULL);
  queue_free(q);
}
