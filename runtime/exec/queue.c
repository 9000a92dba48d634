/* Queues (streams): an in-order command ring per queue, drained by one worker
 * thread that runs kernels on the chip's compute pool. Submission copies the
 * whole call record into the ring (one reservation, no malloc), so the caller's
 * record may go away at once; any thread may submit.
 *
 * Strict mode: submit returns at once; the first kernel error is kept and
 * returned (and cleared) by the next synchronize / host copy. Debug mode: the
 * queue is drained, then the kernel runs on the calling thread and its status
 * is returned. DeferAndFuse: kernels (and device copies) are recorded into the
 * queue's pending graph instead (exec/fuse.h), which counts as submitted (its
 * records hold queue points) and is flushed into the ring as one command
 * whenever anything else is queued or anyone waits for the queue, and at a
 * size limit; the worker then plans and runs it (fuse.c, with fusion). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/futex.h"
#include "base/thread.h"
#include "exec/debug.h" /* run_debug's checked runner (issue 4) */
#include "exec/exec_internal.h"
#include "exec/fuse.h"

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

typedef enum cmd_kind_e {
  CMD_PAD = 0, /* filler up to the ring's end */
  CMD_KERNEL,
  CMD_COPY,
  CMD_HOST_FN,
  CMD_EVENT_RECORD,
  CMD_EVENT_WAIT,
  CMD_PROGRAM, /* a flushed DeferAndFuse pending graph */
} cmd_kind_t;

typedef struct cmd_t {
  uint32_t kind;
  uint32_t external; /* kernel payload malloc'd (free after running) */
  uint64_t size;     /* ring bytes this command occupies */
  uint64_t points;   /* queue points it completes (1; a program: its records') */
  union {
    struct {
      tpurt_kernel_fn_t fn;
      tpurt_op_call_t call; /* points into the payload that follows */
      void* payload;
    } kernel;
    struct {
      void* dst;
      const void* src;
      size_t bytes;
    } copy;
    struct {
      void (*fn)(void*);
      void* user;
    } host;
    struct {
      tpurt_event_t* event;
      uint64_t point;
    } record;
    struct {
      tpurt_queue_t* src;
      uint64_t point;
    } wait;
    struct {
      tpurt_defer_list_t* list;
    } program;
  } u;
} cmd_t;

#define ALIGN_UP(x, a) (((x) + (a) - 1) & ~(uint64_t)((a) - 1))
#define CMD_HEADER ALIGN_UP(sizeof(cmd_t), 16)

static _Thread_local tpurt_queue_t* tls_queue;

tpurt_queue_t* tpurt_queue_current(void) { return tls_queue; }

/* ---- waiting ---- */

static void defer_flush_locked(tpurt_queue_t* q);

/* Someone is about to wait for q: pending deferred work must reach the ring. */
static void defer_flush(tpurt_queue_t* q) {
  if (TPURT_LIKELY(atomic_load_explicit(&q->defer_points, memory_order_acquire) == 0)) return;
  pthread_mutex_lock(&q->submit_lock);
  defer_flush_locked(q);
  pthread_mutex_unlock(&q->submit_lock);
}

/* wake_at = the smallest registered point (0 once more waiters than slots). wait_lock held. */
static void wake_at_update(tpurt_queue_t* q) {
  uint64_t m = q->wait_overflow ? 0 : UINT64_MAX;
  for (int i = 0; i < q->num_wait_points; ++i) m = q->wait_points[i] < m ? q->wait_points[i] : m;
  atomic_store(&q->wake_at, m);
}

/* A waiter announces the point it sleeps for before it checks and sleeps,
 * and withdraws it when done: the worker, which checks after completing, then
 * either sees the point or the waiter sees the completion. */
static void waiter_enter(tpurt_queue_t* q, uint64_t point) {
  pthread_mutex_lock(&q->wait_lock);
  if (q->num_wait_points < (int)(sizeof q->wait_points / sizeof q->wait_points[0]))
    q->wait_points[q->num_wait_points++] = point;
  else
    q->wait_overflow++;
  wake_at_update(q);
  pthread_mutex_unlock(&q->wait_lock);
  atomic_fetch_add(&q->done_waiters, 1);
}

static void waiter_leave(tpurt_queue_t* q, uint64_t point) {
  atomic_fetch_sub(&q->done_waiters, 1);
  pthread_mutex_lock(&q->wait_lock);
  int i = 0;
  while (i < q->num_wait_points && q->wait_points[i] != point) ++i;
  if (i < q->num_wait_points) q->wait_points[i] = q->wait_points[--q->num_wait_points];
  else q->wait_overflow--;
  wake_at_update(q);
  pthread_mutex_unlock(&q->wait_lock);
}

void tpurt_queue_wait_point(tpurt_queue_t* q, uint64_t point) {
  if (tpurt_queue_point_reached(q, point) || tls_queue == q) return;
  defer_flush(q);
  uint64_t t0 = tpurt_now_ns();
  for (unsigned i = 1; i < 4096; ++i) {
    tpurt_spin_step();
    if (tpurt_queue_point_reached(q, point)) return;
    if ((i & 7) == 0 && tpurt_now_ns() - t0 > WAIT_SPIN_NS) break;
  }
  waiter_enter(q, point);
  for (;;) {
    uint32_t w = atomic_load(&q->done_word);
    if (atomic_load(&q->completed) >= point) break;
    tpurt_futex_wait(&q->done_word, w);
  }
  waiter_leave(q, point);
}

/* Producer side: blocks until the ring has `bytes` free. */
static void wait_ring_space(tpurt_queue_t* q, uint64_t tail, uint64_t bytes) {
  waiter_enter(q, 0); /* any completion frees ring space */
  for (;;) {
    uint32_t w = atomic_load(&q->done_word);
    if (q->ring_size - (tail - atomic_load(&q->head)) >= bytes) break;
    tpurt_futex_wait(&q->done_word, w);
  }
  waiter_leave(q, 0);
}

/* ---- the worker ---- */

static void set_error(tpurt_queue_t* q, tpurt_status_t s) {
  pthread_mutex_lock(&q->error_lock);
  if (!q->error) {
    q->error = s;
    s = NULL;
  }
  pthread_mutex_unlock(&q->error_lock);
  tpurt_status_free(s);
}

typedef struct copy_job_t {
  uint8_t* dst;
  const uint8_t* src;
} copy_job_t;

static void copy_chunk(void* user, int64_t begin, int64_t end, int tid) {
  copy_job_t* j = user;
  memcpy(j->dst + begin, j->src + begin, (size_t)(end - begin));
}

static void device_copy(tpurt_device_t* d, void* dst, const void* src, size_t bytes) {
  uint8_t* dp = dst;
  const uint8_t* sp = src;
  /* Overlapping ranges must use memmove and stay serial. */
  bool overlap = dp < sp + bytes && sp < dp + bytes;
  if (overlap || bytes < ((size_t)4 << 20) || d->num_threads <= 1) {
    memmove(dst, src, bytes);
    return;
  }
  copy_job_t job = {dp, sp};
  tpurt_pool_parallel_for(d->pool, (int64_t)bytes, (int64_t)1 << 20, copy_chunk, &job);
}

static void execute(tpurt_queue_t* q, cmd_t* c) {
  switch (c->kind) {
    case CMD_KERNEL: {
      tpurt_kernel_ctx_t ctx = {.pool = q->device->pool,
                                .num_threads = q->device->num_threads,
                                .debug = false,
                                .scratch = &q->scratch};
      tpurt_status_t s = tpurt_kernel_ctx_invoke(&ctx, c->u.kernel.fn, &c->u.kernel.call);
      if (TPURT_UNLIKELY(s != NULL)) set_error(q, s);
      if (c->external) free(c->u.kernel.payload);
      break;
    }
    case CMD_COPY: {
      /* Debug mode (issue 4, exec/debug.c rule 5): the copy opens its buffers; else a no-op. */
      uintptr_t w0 = tpurt_debug_access_begin(c->u.copy.dst), w1 = tpurt_debug_access_begin(c->u.copy.src);
      device_copy(q->device, c->u.copy.dst, c->u.copy.src, c->u.copy.bytes);
      tpurt_debug_access_end(w1);
      tpurt_debug_access_end(w0);
      break;
    }
    case CMD_HOST_FN:
      c->u.host.fn(c->u.host.user);
      break;
    case CMD_EVENT_RECORD: {
      tpurt_event_t* e = c->u.record.event;
      pthread_mutex_lock(&e->lock);
      if (e->queue == q && e->point == c->u.record.point && (e->flags & TPURT_EVENT_TIMING))
        atomic_store(&e->time_ns, tpurt_now_ns());
      pthread_mutex_unlock(&e->lock);
      tpurt_event_release(e);
      break;
    }
    case CMD_EVENT_WAIT:
      tpurt_queue_wait_point(c->u.wait.src, c->u.wait.point);
      tpurt_queue_release(c->u.wait.src);
      break;
    case CMD_PROGRAM: {
      tpurt_kernel_ctx_t ctx = {.pool = q->device->pool,
                                .num_threads = q->device->num_threads,
                                .debug = false,
                                .scratch = &q->scratch};
      tpurt_defer_list_run(q, c->u.program.list, &ctx, device_copy, set_error);
      tpurt_defer_list_free(c->u.program.list);
      break;
    }
    default:
      break;
  }
}

static void queue_free(tpurt_queue_t* q);

static void* worker_main(void* arg) {
  tpurt_queue_t* q = arg;
  tls_queue = q;
  uint64_t head = atomic_load(&q->head);
  for (;;) {
    uint64_t tail = atomic_load_explicit(&q->tail, memory_order_acquire);
    if (head != tail) {
      cmd_t* c = (cmd_t*)(q->ring + head % q->ring_size);
      uint64_t size = c->size;
      bool counts = c->kind != CMD_PAD;
      if (counts) execute(q, c);
      head += size;
      atomic_store_explicit(&q->head, head, memory_order_release);
      if (counts) {
        uint64_t done = atomic_fetch_add(&q->completed, c->points) + c->points;
        atomic_fetch_add(&q->done_word, 1);
        if (atomic_load(&q->done_waiters) && done >= atomic_load(&q->wake_at))
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
    tls_queue = NULL;
    queue_free(q);
  }
  return NULL;
}

/* ---- submission ---- */

/* Reserves `bytes` (a multiple of CMD_ALIGN) at the ring's tail; call with
 * submit_lock held, fill the command, then publish(). */
static cmd_t* reserve(tpurt_queue_t* q, uint64_t bytes, uint64_t* out_pad) {
  uint64_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
  uint64_t pos = tail % q->ring_size;
  uint64_t room_to_end = q->ring_size - pos;
  uint64_t total = bytes <= room_to_end ? bytes : room_to_end + bytes;
  if (q->ring_size - (tail - atomic_load_explicit(&q->head, memory_order_acquire)) < total)
    wait_ring_space(q, tail, total);
  if (bytes > room_to_end) {
    cmd_t* pad = (cmd_t*)(q->ring + pos);
    pad->kind = CMD_PAD;
    pad->size = room_to_end;
    pos = 0;
  }
  cmd_t* c = (cmd_t*)(q->ring + pos);
  c->size = bytes;
  c->external = 0;
  c->points = 1;
  *out_pad = total - bytes; /* published together with the command */
  return c;
}

static uint64_t publish_points(tpurt_queue_t* q, cmd_t* c, uint64_t bytes, uint64_t pad,
                               uint64_t new_points);
static uint64_t publish(tpurt_queue_t* q, cmd_t* c, uint64_t bytes, uint64_t pad) {
  return publish_points(q, c, bytes, pad, 1);
}

/* Publishes c, adding new_points to the submitted count (0 for a program
 * whose records were counted when they were deferred). */
static uint64_t publish_points(tpurt_queue_t* q, cmd_t* c, uint64_t bytes, uint64_t pad,
                               uint64_t new_points) {
  /* submit_lock makes this thread the only writer of submitted/tail, so plain
   * stores do; the tail store is seq_cst because it must be ordered before
   * the load of worker_sleeping (the worker does the mirror image: store
   * sleeping, then re-check tail), so one side always sees the other. */
  uint64_t point = atomic_load_explicit(&q->submitted, memory_order_relaxed) + new_points;
  atomic_store_explicit(&q->submitted, point, memory_order_release);
  atomic_store(&q->tail, atomic_load_explicit(&q->tail, memory_order_relaxed) + bytes + pad);
  if (atomic_load(&q->worker_sleeping)) {
    atomic_fetch_add(&q->work_word, 1);
    tpurt_futex_wake(&q->work_word, 1);
  }
  return point;
}

/* Pushes a fixed-size command; returns its point. */
static uint64_t push_simple(tpurt_queue_t* q, const cmd_t* proto) {
  uint64_t bytes = ALIGN_UP(sizeof(cmd_t), CMD_ALIGN);
  pthread_mutex_lock(&q->submit_lock);
  defer_flush_locked(q);
  uint64_t pad;
  cmd_t* c = reserve(q, bytes, &pad);
  c->kind = proto->kind;
  c->u = proto->u;
  uint64_t point = publish(q, c, bytes, pad);
  pthread_mutex_unlock(&q->submit_lock);
  return point;
}

static tpurt_status_t validate_call(const tpurt_op_call_t* call) {
  if (call->num_args < 0 || call->num_outputs < 0 || (call->num_args && !call->args) ||
      (call->num_outputs && !call->outputs))
    return TPURT_STATUS(INVALID_ARGUMENT, "op call %s: bad argument/output arrays",
                        call->name ? call->name : "?");
  for (int32_t i = 0; i < call->num_args; ++i) {
    const tpurt_arg_t* a = &call->args[i];
    switch (a->kind) {
      case TPURT_ARG_INT_LIST:
      case TPURT_ARG_DOUBLE_LIST:
      case TPURT_ARG_BOOL_LIST:
      case TPURT_ARG_TENSOR_LIST:
        if (a->count < 0 || (a->count && !a->v.ints))
          return TPURT_STATUS(INVALID_ARGUMENT, "op call %s: argument %d: bad list (count %d)",
                              call->name ? call->name : "?", (int)i, (int)a->count);
        break;
      default:
        break;
    }
  }
  return TPURT_OK;
}

#define A8(x) ALIGN_UP((uint64_t)(x), 8)

static uint64_t call_payload_size(const tpurt_op_call_t* call) {
  uint64_t n = A8(sizeof(tpurt_arg_t) * (uint64_t)call->num_args) +
               A8(sizeof(tpurt_tensor_t) * (uint64_t)call->num_outputs) +
               A8(strlen(call->name ? call->name : "") + 1) +
               A8(strlen(call->overload ? call->overload : "") + 1);
  for (int32_t i = 0; i < call->num_args; ++i) {
    const tpurt_arg_t* a = &call->args[i];
    switch (a->kind) {
      case TPURT_ARG_TENSOR:
        if (a->v.tensor) n += sizeof(tpurt_tensor_t);
        break;
      case TPURT_ARG_INT_LIST: n += A8(sizeof(int64_t) * (uint64_t)a->count); break;
      case TPURT_ARG_DOUBLE_LIST: n += A8(sizeof(double) * (uint64_t)a->count); break;
      case TPURT_ARG_BOOL_LIST: n += A8(sizeof(bool) * (uint64_t)a->count); break;
      case TPURT_ARG_TENSOR_LIST:
        n += A8(sizeof(void*) * (uint64_t)a->count);
        for (int32_t k = 0; k < a->count; ++k)
          if (a->v.tensors[k]) n += sizeof(tpurt_tensor_t);
        break;
      case TPURT_ARG_STRING:
        if (a->v.s) n += A8(strlen(a->v.s) + 1);
        break;
      default:
        break;
    }
  }
  return n;
}

/* Deep-copies `call` into `buf` (call_payload_size bytes); `out` points into it. */
static void call_copy(const tpurt_op_call_t* call, uint8_t* buf, tpurt_op_call_t* out) {
  uint8_t* p = buf;
#define TAKE(bytes) (p += A8(bytes), p - A8(bytes))
  tpurt_arg_t* args = (tpurt_arg_t*)TAKE(sizeof(tpurt_arg_t) * (uint64_t)call->num_args);
  tpurt_tensor_t* outs = (tpurt_tensor_t*)TAKE(sizeof(tpurt_tensor_t) * (uint64_t)call->num_outputs);
  const char* name = call->name ? call->name : "";
  const char* ovl = call->overload ? call->overload : "";
  size_t ln = strlen(name) + 1, lo = strlen(ovl) + 1;
  char* name_c = (char*)TAKE(ln);
  memcpy(name_c, name, ln);
  char* ovl_c = (char*)TAKE(lo);
  memcpy(ovl_c, ovl, lo);
  if (call->num_outputs) memcpy(outs, call->outputs, sizeof(tpurt_tensor_t) * call->num_outputs);
  if (call->num_args) memcpy(args, call->args, sizeof(tpurt_arg_t) * call->num_args);
  for (int32_t i = 0; i < call->num_args; ++i) {
    tpurt_arg_t* a = &args[i];
    switch (a->kind) {
      case TPURT_ARG_TENSOR:
        if (a->v.tensor) {
          tpurt_tensor_t* t = (tpurt_tensor_t*)TAKE(sizeof(tpurt_tensor_t));
          *t = *a->v.tensor;
          a->v.tensor = t;
        }
        break;
      case TPURT_ARG_INT_LIST: {
        int64_t* v = (int64_t*)TAKE(sizeof(int64_t) * (uint64_t)a->count);
        if (a->count) memcpy(v, a->v.ints, sizeof(int64_t) * a->count);
        a->v.ints = v;
        break;
      }
      case TPURT_ARG_DOUBLE_LIST: {
        double* v = (double*)TAKE(sizeof(double) * (uint64_t)a->count);
        if (a->count) memcpy(v, a->v.doubles, sizeof(double) * a->count);
        a->v.doubles = v;
        break;
      }
      case TPURT_ARG_BOOL_LIST: {
        bool* v = (bool*)TAKE(sizeof(bool) * (uint64_t)a->count);
        if (a->count) memcpy(v, a->v.bools, sizeof(bool) * a->count);
        a->v.bools = v;
        break;
      }
      case TPURT_ARG_TENSOR_LIST: {
        const tpurt_tensor_t** v = (const tpurt_tensor_t**)TAKE(sizeof(void*) * (uint64_t)a->count);
        for (int32_t k = 0; k < a->count; ++k) {
          if (!a->v.tensors[k]) {
            v[k] = NULL;
            continue;
          }
          tpurt_tensor_t* t = (tpurt_tensor_t*)TAKE(sizeof(tpurt_tensor_t));
          *t = *a->v.tensors[k];
          v[k] = t;
        }
        a->v.tensors = v;
        break;
      }
      case TPURT_ARG_STRING:
        if (a->v.s) {
          size_t l = strlen(a->v.s) + 1;
          char* s = (char*)TAKE(l);
          memcpy(s, a->v.s, l);
          a->v.s = s;
        }
        break;
      default:
        break;
    }
  }
#undef TAKE
  *out = *call;
  out->name = name_c;
  out->overload = ovl_c;
  out->args = args;
  out->outputs = outs;
}

static tpurt_status_t run_debug(tpurt_queue_t* q, const tpurt_op_def_t* op,
                                const tpurt_op_call_t* call) {
  /* Everything queued before runs first, then this kernel on this thread. */
  tpurt_queue_wait_point(q, tpurt_queue_point(q));
  tpurt_scratch_t scratch;
  tpurt_scratch_init(&scratch);
  tpurt_kernel_ctx_t ctx = {.pool = q->device->pool,
                            .num_threads = q->device->num_threads,
                            .debug = true,
                            .scratch = &scratch};
  /* Debug mode's checks (guards, NaN/Inf) around the kernel: exec/debug.c. */
  tpurt_status_t s = tpurt_debug_run_kernel(&ctx, op->fn, call);
  tpurt_scratch_deinit(&scratch);
  return s;
}

/* ---- DeferAndFuse recording ---- */

/* Size limit of a pending graph: past DEFER_SOFT_POINTS it is flushed at the
 * next record that cannot join a fused chain (so the cut falls at the same
 * place every training step and never splits a chain); past
 * DEFER_HARD_POINTS or DEFER_MAX_BYTES it is flushed at once. Small enough
 * that the device starts while the host is still recording: after a sync the
 * device idles until the first flush. Small-GPT step, device idle per step
 * (wall minus the worker's CPU time, three runs each): 2.3-3.5 ms at 64,
 * 1.4-1.7 ms at 16, with the same 67 fused chains per step. */
#define DEFER_SOFT_POINTS 16
#define DEFER_HARD_POINTS 1024
#define DEFER_MAX_BYTES ((uint64_t)8 << 20)

/* Hands the pending graph to the worker as one ring command. submit_lock held. */
static void defer_flush_locked(tpurt_queue_t* q) {
  tpurt_defer_list_t* list = q->defer;
  if (!list) return;
  q->defer = NULL;
  uint64_t points = list->points;
  if (points == 0) { /* free markers only: nothing to run */
    tpurt_defer_list_free(list);
    return;
  }
  uint64_t bytes = ALIGN_UP(sizeof(cmd_t), CMD_ALIGN);
  uint64_t pad;
  cmd_t* c = reserve(q, bytes, &pad);
  c->kind = CMD_PROGRAM;
  c->points = points;
  c->u.program.list = list;
  publish_points(q, c, bytes, pad, 0);
  atomic_store_explicit(&q->defer_points, 0, memory_order_release);
}

/* The list to record into (created on first use), or NULL without memory. submit_lock held. */
static tpurt_defer_list_t* defer_list(tpurt_queue_t* q) {
  if (!q->defer) q->defer = tpurt_defer_list_new();
  return q->defer;
}

/* A record now stands for one more queue point. submit_lock held. */
static void defer_count_point(tpurt_queue_t* q, tpurt_defer_list_t* list, bool fusable) {
  list->points++;
  atomic_store_explicit(&q->submitted, atomic_load_explicit(&q->submitted, memory_order_relaxed) + 1,
                        memory_order_release);
  atomic_store_explicit(&q->defer_points, list->points, memory_order_release);
  if ((list->points >= DEFER_SOFT_POINTS && !fusable) || list->points >= DEFER_HARD_POINTS ||
      list->arena_bytes >= DEFER_MAX_BYTES)
    defer_flush_locked(q);
}

static tpurt_status_t defer_kernel(tpurt_queue_t* q, const tpurt_op_def_t* op,
                                   const tpurt_op_call_t* call) {
  uint64_t payload = call_payload_size(call);
  pthread_mutex_lock(&q->submit_lock);
  tpurt_defer_list_t* list = defer_list(q);
  uint8_t* buf = list ? tpurt_defer_list_alloc(list, payload) : NULL;
  tpurt_defer_rec_t* r = buf ? tpurt_defer_list_push(list) : NULL;
  if (!r) {
    pthread_mutex_unlock(&q->submit_lock);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "submit_kernel %s: out of host memory recording it",
                        call->name ? call->name : "?");
  }
  r->kind = TPURT_DEFER_KERNEL;
  r->op = op;
  call_copy(call, buf, &r->call);
  list->num_kernels++;
  tpurt_fuse_note_recorded();
  defer_count_point(q, list, tpurt_fuse_op_fusable(op));
  pthread_mutex_unlock(&q->submit_lock);
  return TPURT_OK;
}

void tpurt_queue_defer_note_free(tpurt_queue_t* q, void* ptr, size_t bytes) {
  /* Only a pending graph on q can care; none is the common case. */
  if (!q || atomic_load_explicit(&q->defer_points, memory_order_acquire) == 0) return;
  pthread_mutex_lock(&q->submit_lock);
  tpurt_defer_list_t* list = q->defer;
  tpurt_defer_rec_t* r = list && list->points ? tpurt_defer_list_push(list) : NULL;
  if (r) { /* without memory for the marker the block just stays "live": safe */
    r->kind = TPURT_DEFER_FREE;
    r->dst = ptr;
    r->bytes = bytes;
  }
  pthread_mutex_unlock(&q->submit_lock);
}

tpurt_status_t tpurt_queue_submit_kernel(tpurt_queue_t* q, const tpurt_op_def_t* op,
                                         const tpurt_op_call_t* call) {
  if (!q || !op || !op->fn || !call)
    return TPURT_STATUS(INVALID_ARGUMENT, "submit_kernel: NULL queue, op, kernel or call");
  TPURT_RETURN_IF_FORKED();
  TPURT_RETURN_IF_ERROR(validate_call(call));
  tpurt_exec_mode_t mode = tpurt_exec_mode_get();
  if (mode == TPURT_EXEC_DEFER_AND_FUSE) return defer_kernel(q, op, call);
  defer_flush(q); /* work deferred before a mode switch runs first */
  if (mode == TPURT_EXEC_DEBUG) return run_debug(q, op, call);

  uint64_t payload = call_payload_size(call);
  bool external = payload > RING_MAX_INLINE;
  uint8_t* ext = NULL;
  if (external) {
    ext = malloc(payload);
    if (!ext)
      return TPURT_STATUS(RESOURCE_EXHAUSTED, "submit_kernel %s: out of host memory (%llu bytes)",
                          call->name ? call->name : "?", (unsigned long long)payload);
  }
  uint64_t bytes = ALIGN_UP(CMD_HEADER + (external ? 0 : payload), CMD_ALIGN);
  pthread_mutex_lock(&q->submit_lock);
  uint64_t pad;
  cmd_t* c = reserve(q, bytes, &pad);
  uint8_t* buf = external ? ext : (uint8_t*)c + CMD_HEADER;
  call_copy(call, buf, &c->u.kernel.call);
  c->kind = CMD_KERNEL;
  c->external = external;
  c->u.kernel.fn = op->fn;
  c->u.kernel.payload = ext;
  publish(q, c, bytes, pad);
  pthread_mutex_unlock(&q->submit_lock);
  return TPURT_OK;
}

tpurt_status_t tpurt_queue_submit_copy(tpurt_queue_t* q, void* dst, const void* src, size_t bytes) {
  if (!q) return TPURT_STATUS(INVALID_ARGUMENT, "submit_copy: NULL queue");
  TPURT_RETURN_IF_FORKED();
  if (bytes == 0) return TPURT_OK;
  if (!tpurt_device_range_ok(q->device, dst, bytes) || !tpurt_device_range_ok(q->device, src, bytes))
    return TPURT_STATUS(INVALID_ARGUMENT,
                        "submit_copy: [%p, +%zu) -> [%p, +%zu) is not inside device memory", src,
                        bytes, dst, bytes);
  if (tpurt_exec_mode_get() == TPURT_EXEC_DEFER_AND_FUSE) {
    pthread_mutex_lock(&q->submit_lock);
    tpurt_defer_list_t* list = defer_list(q);
    tpurt_defer_rec_t* r = list ? tpurt_defer_list_push(list) : NULL;
    if (r) {
      r->kind = TPURT_DEFER_COPY;
      r->dst = dst;
      r->src = src;
      r->bytes = bytes;
      defer_count_point(q, list, false);
    }
    pthread_mutex_unlock(&q->submit_lock);
    if (r) return TPURT_OK;
    /* no host memory for a record: queue it directly (push_simple flushes first) */
  }
  cmd_t proto = {.kind = CMD_COPY, .u.copy = {dst, src, bytes}};
  push_simple(q, &proto);
  return TPURT_OK;
}

tpurt_status_t tpurt_queue_submit_host_fn(tpurt_queue_t* q, void (*fn)(void* user), void* user) {
  if (!q || !fn) return TPURT_STATUS(INVALID_ARGUMENT, "submit_host_fn: NULL queue or function");
  TPURT_RETURN_IF_FORKED();
  cmd_t proto = {.kind = CMD_HOST_FN, .u.host = {fn, user}};
  push_simple(q, &proto);
  return TPURT_OK;
}

tpurt_status_t tpurt_queue_push_record(tpurt_queue_t* q, tpurt_event_t* event) {
  tpurt_event_retain_internal(event);
  tpurt_queue_retain(q);
  uint64_t bytes = ALIGN_UP(sizeof(cmd_t), CMD_ALIGN);
  pthread_mutex_lock(&q->submit_lock);
  defer_flush_locked(q);
  uint64_t pad;
  cmd_t* c = reserve(q, bytes, &pad);
  uint64_t point = atomic_load(&q->submitted) + 1; /* this command's, once published */
  c->kind = CMD_EVENT_RECORD;
  c->u.record.event = event;
  c->u.record.point = point;
  /* Set the event before publishing so the worker's stamp finds it; the
   * worker takes only event->lock, never submit_lock, so this order is safe. */
  pthread_mutex_lock(&event->lock);
  tpurt_queue_t* old = event->queue;
  event->queue = q;
  event->point = point;
  atomic_store(&event->time_ns, 0);
  pthread_mutex_unlock(&event->lock);
  publish(q, c, bytes, pad);
  pthread_mutex_unlock(&q->submit_lock);
  tpurt_queue_release(old);
  return TPURT_OK;
}

tpurt_status_t tpurt_queue_push_wait(tpurt_queue_t* q, tpurt_queue_t* src, uint64_t point) {
  tpurt_queue_retain(src);
  cmd_t proto = {.kind = CMD_EVENT_WAIT, .u.wait = {src, point}};
  push_simple(q, &proto);
  return TPURT_OK;
}

/* ---- lifetime and sync ---- */

tpurt_status_t tpurt_queue_create_internal(tpurt_device_t* device, uint64_t id, int priority,
                                           tpurt_queue_t** out_queue) {
  *out_queue = NULL;
  /* Cache-line aligned: producer and worker fields live on separate lines. */
  tpurt_queue_t* q = aligned_alloc(64, (sizeof(*q) + 63) & ~(size_t)63);
  if (q) memset(q, 0, sizeof(*q));
  if (!q) return TPURT_STATUS(RESOURCE_EXHAUSTED, "out of host memory creating a queue");
  q->device = device;
  q->id = id;
  q->priority = priority;
  atomic_init(&q->refcount, 1);
  q->ring_size = RING_BYTES;
  /* Plain malloc: untouched ring pages cost nothing until used. */
  if (posix_memalign((void**)&q->ring, CMD_ALIGN, RING_BYTES) != 0) {
    free(q);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "out of host memory creating a queue");
  }
  pthread_mutex_init(&q->submit_lock, NULL);
  pthread_mutex_init(&q->error_lock, NULL);
  pthread_mutex_init(&q->wait_lock, NULL);
  atomic_init(&q->wake_at, UINT64_MAX);
  tpurt_scratch_init(&q->scratch);
  tpurt_status_t s = tpurt_allocator_queue_attach(device->allocator, q);
  if (s) goto fail;
  char name[48]; /* cut to 15 characters by the thread helper */
  snprintf(name, sizeof(name), "tpu%d-q%llu", device->index, (unsigned long long)id);
  if (tpurt_thread_start(&q->thread, worker_main, q, name) != 0) {
    tpurt_allocator_queue_detach(device->allocator, q);
    s = TPURT_STATUS(RESOURCE_EXHAUSTED, "cannot start a queue thread");
    goto fail;
  }
  pthread_mutex_lock(&device->queues_lock);
  q->next = device->queues;
  if (device->queues) device->queues->prev = q;
  device->queues = q;
  pthread_mutex_unlock(&device->queues_lock);
  *out_queue = q;
  return TPURT_OK;
fail:
  tpurt_scratch_deinit(&q->scratch);
  pthread_mutex_destroy(&q->submit_lock);
  pthread_mutex_destroy(&q->error_lock);
  pthread_mutex_destroy(&q->wait_lock);
  free(q->ring);
  free(q);
  return s;
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

/* Frees a stopped queue whose worker has exited. */
static void queue_free(tpurt_queue_t* q) {
  tpurt_device_t* d = q->device;
  pthread_mutex_lock(&d->queues_lock);
  if (q->prev) q->prev->next = q->next;
  else d->queues = q->next;
  if (q->next) q->next->prev = q->prev;
  pthread_mutex_unlock(&d->queues_lock);
  tpurt_allocator_queue_detach(d->allocator, q);
  tpurt_defer_list_free(q->defer); /* free markers at most: waiting flushed the rest */
  tpurt_status_free(q->error);
  tpurt_scratch_deinit(&q->scratch);
  pthread_mutex_destroy(&q->submit_lock);
  pthread_mutex_destroy(&q->error_lock);
  pthread_mutex_destroy(&q->wait_lock);
  free(q->ring);
  free(q);
}

static void queue_destroy(tpurt_queue_t* q) {
  if (tls_queue == q) {
    /* The last reference went away inside one of this queue's own commands
     * (an event's record): the worker finishes what is queued, then frees
     * the queue itself on its way out. */
    atomic_store(&q->self_destroy, true);
    atomic_store(&q->stop, true);
    return;
  }
  tpurt_queue_wait_point(q, tpurt_queue_point(q));
  atomic_store(&q->stop, true);
  atomic_fetch_add(&q->work_word, 1);
  tpurt_futex_wake_all(&q->work_word);
  pthread_join(q->thread, NULL);
  queue_free(q);
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

static tpurt_status_t take_error(tpurt_queue_t* q) {
  pthread_mutex_lock(&q->error_lock);
  tpurt_status_t s = q->error;
  q->error = NULL;
  pthread_mutex_unlock(&q->error_lock);
  return s;
}

tpurt_status_t tpurt_queue_take_error(tpurt_queue_t* q) { return take_error(q); }

tpurt_status_t tpurt_queue_synchronize(tpurt_queue_t* q) {
  if (!q) return TPURT_STATUS(INVALID_ARGUMENT, "queue_synchronize: NULL queue");
  TPURT_RETURN_IF_FORKED();
  if (tls_queue == q)
    return TPURT_STATUS(FAILED_PRECONDITION,
                        "queue_synchronize called from the queue's own thread (a host_fn)");
  tpurt_queue_wait_point(q, tpurt_queue_point(q));
  tpurt_status_t s = take_error(q);
  /* Debug mode (issue 4, exec/debug.c rule 5): host code's stray touch of device memory is reported here. */
  if (!s && TPURT_UNLIKELY(tpurt_debug_protecting())) s = tpurt_debug_take_violation();
  return s;
}

bool tpurt_queue_is_idle(tpurt_queue_t* q) {
  if (!q) return true;
  /* A poller must see deferred work start; trylock: the allocator asks while
   * holding its own lock, and a submitter holding ours will flush anyway. */
  if (atomic_load_explicit(&q->defer_points, memory_order_acquire) && tls_queue != q &&
      pthread_mutex_trylock(&q->submit_lock) == 0) {
    defer_flush_locked(q);
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
    tpurt_status_t s = tls_queue == qs[i] ? TPURT_OK : tpurt_queue_synchronize(qs[i]);
    if (s && !first) first = s;
    else tpurt_status_free(s);
  }
  for (int i = 0; i < n; ++i) tpurt_queue_release(qs[i]);
  if (qs != local) free(qs);
  return first;
}
