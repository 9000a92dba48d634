/* DeferAndFuse, the recording half: kernels and device copies are recorded
 * into the queue's pending graph instead of being queued. The graph counts
 * as submitted (each record holds a point of the queue's timeline) and is
 * handed to the HAL queue as one CALL command whenever anything else is
 * queued or anyone waits for the queue, and at a size limit; the queue's
 * thread then plans and runs it (fuse_run.c; the fusion rules are in
 * compiler/fuse_plan.c), so planning
 * costs the host thread nothing. The allocator tells the pending graph when
 * the host frees a block (a free marker), so a fused chain may skip writing
 * an intermediate nobody can see again. */
#include <stdlib.h>

#include "base/thread.h"
#include "compiler/fuse_plan.h"
#include "exec/defer/defer.h"
#include "exec/mode.h"
#include "hal/call_record.h"
#include "hal/trace.h"

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

/* The graph's program: plans and runs it on the queue's thread, then frees it. */
static tpurt_status_t run_program(void* user, tpurt_kernel_ctx_t* ctx) {
  tpurt_defer_list_t* list = user;
  tpurt_status_t s = tpurt_defer_list_run(list, ctx);
  tpurt_defer_list_free(list);
  return s;
}

static tpurt_status_t noop(void* user) { return TPURT_OK; }

/* The host interrupted while the queue was full: the list is dropped like
 * the queue's backlog, what it would have written poisoned with `reason`. */
static void drop_list(tpurt_queue_t* q, tpurt_defer_list_t* list, tpurt_status_t reason) {
  q->driver->queue_cancel(q->hal, reason);
  tpurt_poison_t* p = q->driver->device_poison ? q->driver->device_poison(q->device->hal) : NULL;
  for (int32_t i = 0; p && i < list->num_recs; ++i) {
    const tpurt_defer_rec_t* r = &list->recs[i];
    if (r->kind == TPURT_DEFER_KERNEL) tpurt_poison_mark_call(p, &r->call, reason);
    else if (r->kind == TPURT_DEFER_COPY) tpurt_poison_mark(p, r->dst, r->bytes, reason);
  }
  tpurt_defer_list_free(list);
}

static void flush_locked(tpurt_queue_t* q) {
  tpurt_defer_list_t* list = q->pending;
  if (!list) return;
  q->pending = NULL;
  if (list->points == 0) { /* free markers only: nothing to run */
    tpurt_defer_list_free(list);
    return;
  }
  /* The records' points were handed out as they were recorded: the program
   * completes the last of them. */
  tpurt_hal_command_t cmd = {.kind = TPURT_HAL_COMMAND_CALL, .u.call = {.fn = run_program, .user = list},
                             .value = tpurt_queue_point(q), .interruptible = true};
  tpurt_status_t s = q->driver->queue_submit(q->hal, &cmd);
  if (TPURT_UNLIKELY(s != NULL)) {
    drop_list(q, list, s);
    tpurt_status_free(s);
    /* The points are handed out: the queue must still reach them. Dropping
     * the backlog made room, and this one is taken (not interruptible). */
    tpurt_hal_command_t done = {.kind = TPURT_HAL_COMMAND_CALL, .u.call = {.host_fn = noop},
                                .value = tpurt_queue_point(q)};
    tpurt_status_free(q->driver->queue_submit(q->hal, &done));
  }
  atomic_store_explicit(&q->pending_points, 0, memory_order_release);
}

static void note_free_locked(tpurt_queue_t* q, void* ptr, size_t bytes) {
  tpurt_defer_list_t* list = q->pending;
  tpurt_defer_rec_t* r = list && list->points ? tpurt_defer_list_push(list) : NULL;
  if (r) { /* without memory for the marker the block just stays "live": safe */
    r->kind = TPURT_DEFER_FREE;
    r->dst = ptr;
    r->bytes = bytes;
  }
}

static void discard(tpurt_queue_t* q) {
  tpurt_defer_list_free(q->pending);
  q->pending = NULL;
}

static const tpurt_queue_pending_ops_t kPendingOps = {
    .flush_locked = flush_locked,
    .note_free_locked = note_free_locked,
    .discard = discard,
};

/* The list to record into (created on first use), or NULL without memory. submit_lock held. */
static tpurt_defer_list_t* pending_list(tpurt_queue_t* q) {
  if (!q->pending) {
    /* Pending work of another kind would be flushed first; there is none. */
    q->pending = tpurt_defer_list_new();
    q->pending_ops = &kPendingOps;
  }
  return q->pending;
}

/* A record now stands for one more queue point. submit_lock held. */
static void count_point(tpurt_queue_t* q, tpurt_defer_list_t* list, bool fusable) {
  list->points++;
  atomic_store_explicit(&q->submitted, atomic_load_explicit(&q->submitted, memory_order_relaxed) + 1,
                        memory_order_release);
  atomic_store_explicit(&q->pending_points, list->points, memory_order_release);
  if ((list->points >= DEFER_SOFT_POINTS && !fusable) || list->points >= DEFER_HARD_POINTS ||
      list->arena_bytes >= DEFER_MAX_BYTES)
    flush_locked(q);
}

static tpurt_status_t defer_submit_kernel(tpurt_queue_t* q, const tpurt_op_def_t* op, const tpurt_op_call_t* call) {
  uint64_t payload = tpurt_call_record_size(call);
  pthread_mutex_lock(&q->submit_lock);
  tpurt_defer_list_t* list = pending_list(q);
  uint8_t* buf = list ? tpurt_defer_list_alloc(list, payload) : NULL;
  tpurt_defer_rec_t* r = buf ? tpurt_defer_list_push(list) : NULL;
  if (!r) {
    pthread_mutex_unlock(&q->submit_lock);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "submit_kernel %s: out of host memory recording it",
                        call->name ? call->name : "?");
  }
  r->kind = TPURT_DEFER_KERNEL;
  r->op = op;
  r->issuer = tpurt_thread_issuer();
  r->trace_id = tpurt_trace_active() ? tpurt_trace_tls_launch : 0;
  tpurt_call_record_copy(call, buf, &r->call);
  list->num_kernels++;
  tpurt_fuse_note_recorded();
  count_point(q, list, tpurt_fuse_op_fusable(op));
  pthread_mutex_unlock(&q->submit_lock);
  return TPURT_OK;
}

static tpurt_status_t defer_submit_copy(tpurt_queue_t* q, void* dst, const void* src, size_t bytes) {
  pthread_mutex_lock(&q->submit_lock);
  tpurt_defer_list_t* list = pending_list(q);
  tpurt_defer_rec_t* r = list ? tpurt_defer_list_push(list) : NULL;
  if (r) {
    r->kind = TPURT_DEFER_COPY;
    r->dst = dst;
    r->src = src;
    r->bytes = bytes;
    r->trace_id = tpurt_trace_active() ? tpurt_trace_tls_launch : 0;
    count_point(q, list, false);
  }
  pthread_mutex_unlock(&q->submit_lock);
  if (r) return TPURT_OK;
  /* no host memory for a record: queue it directly (the pending graph first) */
  return tpurt_exec_strict.submit_copy(q, dst, src, bytes);
}

/* The host freed a pool block: its owner queue's pending graph learns it is
 * dead from here on (allocator.c calls this before the block can be handed
 * out again). */
static void defer_freed(tpurt_queue_t* q, void* ptr, size_t bytes) { tpurt_queue_note_free(q, ptr, bytes); }

const tpurt_exec_mode_ops_t tpurt_exec_defer = {
    .id = TPURT_EXEC_DEFER_AND_FUSE,
    .name = "defer_and_fuse",
    .submit_kernel = defer_submit_kernel,
    .submit_copy = defer_submit_copy,
    .alloc = {.freed = defer_freed},
};
