/* Internal to exec/: a chip as exec/ sees it (its HAL device and driver, its
 * caching allocator, its queues), the process-wide default chip and the
 * fork guard. Not an ABI. */
#ifndef TPURT_EXEC_DEVICE_H_
#define TPURT_EXEC_DEVICE_H_

#include <pthread.h>
#include <stdatomic.h>

#include "hal/hal.h"
#include "tpurt/device.h"

typedef struct tpurt_allocator_t tpurt_allocator_t;

struct tpurt_device_t {
  int index;
  const tpurt_hal_driver_t* driver;
  tpurt_hal_device_t* hal;
  tpurt_hal_device_props_t props;
  uint8_t* hbm_base;
  uint64_t hbm_bytes;
  int num_threads;
  tpurt_allocator_t* allocator;
  tpurt_queue_t* default_queue;
  pthread_mutex_t queues_lock;
  tpurt_queue_t* queues; /* every live queue, default included */
  uint64_t next_queue_id;
};

/* Device memory range check (the whole [ptr, ptr+bytes) inside HBM). */
static inline bool tpurt_device_range_ok(const tpurt_device_t* d, const void* ptr, size_t bytes) {
  uintptr_t p = (uintptr_t)ptr, b = (uintptr_t)d->hbm_base;
  return p >= b && p - b <= d->hbm_bytes && bytes <= d->hbm_bytes - (p - b);
}

/* The process-wide default device (chip 0), initializing if needed; NULL if
 * initialization failed. */
tpurt_device_t* tpurt_device_default(void);
/* Every chip of this process: their count, and chip i. */
int tpurt_device_count_internal(void);
tpurt_device_t* tpurt_device_at(int index);

/* Installs the device's executable loader into the compiler's kernel cache
 * (loader.c; tpurt_init does, for chip 0). */
void tpurt_exec_loader_install(tpurt_device_t* device);

/* Waits until every queue of the device (except the caller's own, when called
 * from a queue's thread) has run all it was given. Kept errors stay kept. */
void tpurt_device_wait_idle(tpurt_device_t* d);

/* True in a child forked after tpurt_init; entry points then return
 * tpurt_fork_check()'s FAILED_PRECONDITION. */
extern _Atomic bool tpurt_forked_child;
tpurt_status_t tpurt_fork_check(void);
#define TPURT_RETURN_IF_FORKED()                                                            \
  do {                                                                                     \
    if (TPURT_UNLIKELY(atomic_load_explicit(&tpurt_forked_child, memory_order_relaxed)))   \
      return tpurt_fork_check();                                                           \
  } while (0)

#endif /* TPURT_EXEC_DEVICE_H_ */
