/* Internal to exec/: the structs behind device.h's opaque handles and the
 * calls exec's files make into one another (device, queue, event, allocator,
 * compute pool, kernel context). Not part of any ABI. */
#ifndef TPURT_EXEC_EXEC_INTERNAL_H_
#define TPURT_EXEC_EXEC_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>

#include "hal/hal.h"
#include "tpurt/device.h"

/* ---- compute pool (thread_pool.c) ---- */
typedef struct tpurt_pool_t tpurt_pool_t;
/* num_threads counts the caller of parallel_for as thread 0, so the pool
 * starts num_threads - 1 threads of its own. */
tpurt_status_t tpurt_pool_create(int chip, int num_threads, tpurt_pool_t** out_pool);
void tpurt_pool_destroy(tpurt_pool_t* pool);
void tpurt_pool_parallel_for(tpurt_pool_t* pool, int64_t n, int64_t grain, tpurt_range_fn_t fn,
                             void* user);

/* ---- kernel scratch (kernel_ctx.c) ---- */
typedef struct tpurt_scratch_t {
  pthread_mutex_t lock;
  uint8_t* base;         /* kept across kernels, grown to the high-water mark */
  size_t size;
  size_t used;
  size_t overflow_bytes; /* bytes handed out beyond `base` this kernel */
  void* overflow;        /* singly linked chunks malloc'd when `base` was short */
} tpurt_scratch_t;
void tpurt_scratch_init(tpurt_scratch_t* scratch);
void tpurt_scratch_reset(tpurt_scratch_t* scratch); /* after each kernel */
void tpurt_scratch_deinit(tpurt_scratch_t* scratch);

struct tpurt_kernel_ctx_t {
  tpurt_pool_t* pool; /* NULL: serial */
  int num_threads;
  bool debug;
  tpurt_scratch_t* scratch;
};
/* Runs fn with ctx, resets the scratch, and prefixes an error with the op's
 * name ("aten::add.Tensor: ..."). */
tpurt_status_t tpurt_kernel_ctx_invoke(tpurt_kernel_ctx_t* ctx, tpurt_kernel_fn_t fn,
                                       const tpurt_op_call_t* call);

/* ---- queues (queue.c) ---- */
struct tpurt_queue_t {
  tpurt_device_t* device;
  uint64_t id;
  int priority;
  _Atomic int refcount;

  /* Command ring: producers (any thread, under submit_lock) append at tail;
   * the worker consumes at head. Positions grow monotonically. A point in
   * the queue is a submitted count, reached when completed >= it. Producer-
   * and worker-written fields sit on separate cache lines. */
  uint8_t* ring;
  uint64_t ring_size;
  _Alignas(64) pthread_mutex_t submit_lock;
  _Atomic uint64_t tail;
  _Atomic uint64_t submitted;
  _Atomic uint32_t work_word;       /* bumped per submit; the worker sleeps on it */
  _Alignas(64) _Atomic uint64_t head;
  _Atomic uint64_t completed;
  _Atomic uint32_t done_word;       /* bumped per completion; waiters sleep on it */
  _Alignas(64) _Atomic uint32_t worker_sleeping;
  _Atomic uint32_t done_waiters;
  /* The smallest completed count a sleeping waiter needs (0: any completion,
   * a producer waiting for ring space; UINT64_MAX: none). The worker wakes
   * waiters only when it is reached, so a host sleeping on the end of a step
   * is woken once, not after every command. Waiters keep their points in
   * wait_points (under wait_lock); the worker only reads wake_at. */
  _Atomic uint64_t wake_at;
  pthread_mutex_t wait_lock;
  uint64_t wait_points[8];
  int num_wait_points, wait_overflow;
  _Atomic bool stop;
  _Atomic bool self_destroy; /* last reference dropped on the worker itself */
  pthread_t thread;

  _Alignas(64) pthread_mutex_t error_lock;
  tpurt_status_t error; /* first kernel error since the last synchronize */

  tpurt_scratch_t scratch;
  struct tpurt_queue_t* next; /* device's queue list, under device->queues_lock */
  struct tpurt_queue_t* prev;
  void* alloc_pools; /* the caching allocator's free-block pools for this queue */
  /* DeferAndFuse (queue.c / fuse.c): the pending graph, under submit_lock,
   * and how many queue points it holds (read without the lock: 0 = none). */
  void* defer;
  _Atomic uint64_t defer_points;
};

tpurt_status_t tpurt_queue_create_internal(tpurt_device_t* device, uint64_t id, int priority,
                                           tpurt_queue_t** out_queue);
/* The point everything submitted so far has reached. */
static inline uint64_t tpurt_queue_point(tpurt_queue_t* q) {
  return atomic_load_explicit(&q->submitted, memory_order_acquire);
}
static inline bool tpurt_queue_point_reached(tpurt_queue_t* q, uint64_t point) {
  return atomic_load_explicit(&q->completed, memory_order_acquire) >= point;
}
/* Blocks until `point` is reached. Does not touch the kept error. */
void tpurt_queue_wait_point(tpurt_queue_t* q, uint64_t point);
/* Waits until every queue of the device (except the caller's own, when called
 * from a queue worker) has run all it was given. Kept errors stay kept. */
void tpurt_device_wait_idle(tpurt_device_t* d);
/* Returns (and clears) the kept kernel error. */
tpurt_status_t tpurt_queue_take_error(tpurt_queue_t* q);
/* The queue whose worker is the calling thread, or NULL. */
tpurt_queue_t* tpurt_queue_current(void);
/* DeferAndFuse: the host freed the block [ptr, ptr + bytes) owned by `q`;
 * a pending graph on q learns that it is dead from here on (allocator.c
 * calls this before the block can be handed out again). */
void tpurt_queue_defer_note_free(tpurt_queue_t* q, void* ptr, size_t bytes);
/* Queues an event-record command and points the event at it (queue, point).
 * The worker stamps the event's time (under event->lock) when it gets there. */
tpurt_status_t tpurt_queue_push_record(tpurt_queue_t* q, tpurt_event_t* event);
/* Queues a wait for `point` of `src` (retained until the wait is done). */
tpurt_status_t tpurt_queue_push_wait(tpurt_queue_t* q, tpurt_queue_t* src, uint64_t point);
/* Device memory range check (the whole [ptr, ptr+bytes) inside HBM). */
static inline bool tpurt_device_range_ok(const tpurt_device_t* d, const void* ptr, size_t bytes);

/* ---- events (event.c) ---- */
struct tpurt_event_t {
  tpurt_device_t* device;
  uint32_t flags;
  _Atomic int refcount;
  pthread_mutex_t lock;
  tpurt_queue_t* queue; /* last recorded on (retained), or NULL */
  uint64_t point;
  _Atomic uint64_t time_ns; /* written by the worker when the point is reached */
};
void tpurt_event_retain_internal(tpurt_event_t* event);
/* Runs on the queue's worker when the recorded point is reached. */
void tpurt_event_mark_reached(tpurt_event_t* event);

/* ---- allocator (allocator.c) ---- */
typedef struct tpurt_allocator_t tpurt_allocator_t;
tpurt_status_t tpurt_allocator_create(tpurt_device_t* device, tpurt_allocator_t** out_allocator);
void tpurt_allocator_destroy(tpurt_allocator_t* allocator);
tpurt_status_t tpurt_allocator_queue_attach(tpurt_allocator_t* allocator, tpurt_queue_t* queue);
/* The queue is idle and going away: its cached blocks move to the default
 * queue (whole free segments go back to HBM). */
void tpurt_allocator_queue_detach(tpurt_allocator_t* allocator, tpurt_queue_t* queue);

/* ---- devices (device.c) ---- */
struct tpurt_device_t {
  int index;
  const tpurt_hal_driver_t* driver;
  tpurt_hal_device_t* hal;
  tpurt_hal_device_props_t props;
  uint8_t* hbm_base;
  uint64_t hbm_bytes;
  int num_threads;
  tpurt_pool_t* pool;
  tpurt_allocator_t* allocator;
  tpurt_queue_t* default_queue;
  pthread_mutex_t queues_lock;
  tpurt_queue_t* queues; /* every live queue, default included */
  uint64_t next_queue_id;
};

static inline bool tpurt_device_range_ok(const tpurt_device_t* d, const void* ptr, size_t bytes) {
  uintptr_t p = (uintptr_t)ptr, b = (uintptr_t)d->hbm_base;
  return p >= b && p - b <= d->hbm_bytes && bytes <= d->hbm_bytes - (p - b);
}

/* True in a child forked after tpurt_init; entry points then return
 * tpurt_fork_check()'s FAILED_PRECONDITION. */
extern _Atomic bool tpurt_forked_child;
tpurt_status_t tpurt_fork_check(void);
#define TPURT_RETURN_IF_FORKED()                                                  \
  do {                                                                           \
    if (TPURT_UNLIKELY(atomic_load_explicit(&tpurt_forked_child, memory_order_relaxed))) \
      return tpurt_fork_check();                                                 \
  } while (0)

/* The process-wide default device (chip 0), initializing if needed; NULL if
 * initialization failed. */
tpurt_device_t* tpurt_device_default(void);

#endif /* TPURT_EXEC_EXEC_INTERNAL_H_ */
