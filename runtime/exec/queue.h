/* Internal to exec/: the front layer of a queue (stream). A tpurt_queue_t
 * wraps a HAL queue (which runs the commands) with what exec/ adds: its
 * timeline (`submitted`: a point of the queue is a value of it, reached when
 * the HAL queue has completed that value), its place in the device's list,
 * the allocator's pools for it, and a pending-work slot an eager mode may
 * fill (DeferAndFuse's recorded graph), which holds points of the timeline
 * without having reached the HAL queue yet. Not an ABI. */
#ifndef TPURT_EXEC_QUEUE_H_
#define TPURT_EXEC_QUEUE_H_

#include "exec/device.h"

/* Work a mode keeps on a queue instead of submitting it (exec/defer). The
 * queue calls these with submit_lock held. */
typedef struct tpurt_queue_pending_ops_t {
  /* Hand everything pending to the HAL queue (its points included). */
  void (*flush_locked)(tpurt_queue_t* q);
  /* The host freed the pool block [ptr, ptr + bytes) of this queue. */
  void (*note_free_locked)(tpurt_queue_t* q, void* ptr, size_t bytes);
  /* The queue is going away (idle): free what is left. */
  void (*discard)(tpurt_queue_t* q);
} tpurt_queue_pending_ops_t;

struct tpurt_queue_t {
  tpurt_device_t* device;
  tpurt_hal_queue_t* hal;
  const tpurt_hal_driver_t* driver;
  uint64_t id;
  int priority;
  _Atomic int refcount;

  /* Submitters serialize on submit_lock; `submitted` is the value of the
   * last point handed out (read lock-free). */
  _Alignas(64) pthread_mutex_t submit_lock;
  _Atomic uint64_t submitted;
  /* Pending work (under submit_lock) and how many points it holds (read
   * without the lock: 0 = none). */
  void* pending;
  const tpurt_queue_pending_ops_t* pending_ops;
  _Atomic uint64_t pending_points;

  struct tpurt_queue_t* next; /* device's queue list, under device->queues_lock */
  struct tpurt_queue_t* prev;
  void* alloc_pools; /* the caching allocator's free-block pools for this queue */
  /* A capture in progress (exec/defer/capture.c), under submit_lock; read without
   * it on the submit path (only the capturing thread submits then). */
  struct tpurt_capture_t* capture;
};

tpurt_status_t tpurt_queue_create_internal(tpurt_device_t* device, uint64_t id, int priority,
                                           tpurt_queue_t** out_queue);
/* The point everything submitted (or recorded) so far has reached. */
static inline uint64_t tpurt_queue_point(tpurt_queue_t* q) {
  return atomic_load_explicit(&q->submitted, memory_order_acquire);
}
static inline bool tpurt_queue_point_reached(tpurt_queue_t* q, uint64_t point) {
  return q->driver->queue_completed(q->hal) >= point;
}
/* True on the thread that runs q's commands. */
static inline bool tpurt_queue_is_current(tpurt_queue_t* q) { return q->driver->queue_is_current(q->hal); }
/* Blocks until `point` is reached (pending work is flushed first). Does not
 * touch the kept error. */
void tpurt_queue_wait_point(tpurt_queue_t* q, uint64_t point);
/* The same, giving up when the host interrupts (tpurt_host_interrupted):
 * then q drops the work it has not started and the status is returned. */
tpurt_status_t tpurt_queue_wait_point_interruptible(tpurt_queue_t* q, uint64_t point);
/* q drops everything it has not started (pending work included): what it
 * would have written is poisoned with `reason` (hal.h queue_cancel). */
void tpurt_queue_cancel(tpurt_queue_t* q, tpurt_status_t reason);
/* Returns (and clears) the first error of the calling thread's commands. */
tpurt_status_t tpurt_queue_take_error(tpurt_queue_t* q);
/* Flushes pending work (any thread about to wait for q). */
void tpurt_queue_flush(tpurt_queue_t* q);
/* Flushes pending work and returns the point the next submitted command
 * will take. submit_lock held. */
uint64_t tpurt_queue_next_point_locked(tpurt_queue_t* q);
/* Submits one HAL command taking the next point; submit_lock held, pending
 * work flushed first. Returns its point in *out_point (may be NULL). */
tpurt_status_t tpurt_queue_submit_locked(tpurt_queue_t* q, tpurt_hal_command_t* cmd, uint64_t* out_point);
/* Work submitted to q after this waits until src has reached `point`. */
tpurt_status_t tpurt_queue_wait_queue_point(tpurt_queue_t* q, tpurt_queue_t* src, uint64_t point);
/* The host freed pool block [ptr, ptr + bytes) owned by q (allocator.c, before
 * the block can be handed out again): pending work learns it is dead. */
void tpurt_queue_note_free(tpurt_queue_t* q, void* ptr, size_t bytes);

#endif /* TPURT_EXEC_QUEUE_H_ */
