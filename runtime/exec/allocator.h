/* Internal to exec/: the caching allocator over a chip's HBM (allocator.c),
 * and the hooks an eager mode installs into it: Debug mode serves
 * allocations itself (guarded pages, exec/debug/), DeferAndFuse learns of
 * every free (exec/defer/). Not an ABI. */
#ifndef TPURT_EXEC_ALLOCATOR_H_
#define TPURT_EXEC_ALLOCATOR_H_

#include "exec/device.h"

tpurt_status_t tpurt_allocator_create(tpurt_device_t* device, tpurt_allocator_t** out_allocator);
void tpurt_allocator_destroy(tpurt_allocator_t* allocator);
tpurt_status_t tpurt_allocator_queue_attach(tpurt_allocator_t* allocator, tpurt_queue_t* queue);
/* The queue is idle and going away: its cached blocks move to the default
 * queue (whole free segments go back to HBM). */
void tpurt_allocator_queue_detach(tpurt_allocator_t* allocator, tpurt_queue_t* queue);

/* What a mode changes about allocation (exec/mode.h gives each mode's). No
 * allocator lock is held when a hook runs. */
typedef struct tpurt_allocator_hooks_t {
  /* Optional: serves a request before the pools do. True when it did
   * (*out_ptr set); false to let the pools serve it. */
  bool (*allocate)(tpurt_device_t* device, size_t bytes, void** out_ptr);
  /* Optional: the host freed pool block [ptr, ptr + bytes) of queue q (not
   * used by other queues); called before the block can be handed out again. */
  void (*freed)(tpurt_queue_t* q, void* ptr, size_t bytes);
} tpurt_allocator_hooks_t;

/* Blocks the pools do not know: every mode's (exec/mode.c asks them all,
 * because a block may outlive the mode that made it). */
bool tpurt_exec_foreign_free(tpurt_device_t* device, void* ptr);
bool tpurt_exec_foreign_live(tpurt_device_t* device, void* ptr);

/* For allocation hooks that take HBM themselves: book `reserved_delta`
 * bytes taken from (or given back to) HBM and a served allocation (or free)
 * of `allocated` bytes in the allocator's statistics. */
void tpurt_allocator_account(tpurt_allocator_t* allocator, int64_t reserved_delta, int64_t allocated,
                             bool is_alloc, bool is_free);
/* HBM bytes the allocator holds (reserved), for a hook's capacity check. */
uint64_t tpurt_allocator_reserved(tpurt_allocator_t* allocator);
/* Waits for the device, then returns cached free segments to HBM (and trims
 * free segment ends): what a hook tries before giving up. */
void tpurt_allocator_release_cached(tpurt_allocator_t* allocator);
/* While anything is poisoned (hal/poison.h), after a sync: the bytes of free
 * blocks are nobody's data, so poison a failed command marked there after
 * the block was freed (it ran after the free) goes, and with it the slow
 * checked paths once no live tensor is poisoned. */
void tpurt_allocator_drop_free_poison(tpurt_allocator_t* allocator);

#endif /* TPURT_EXEC_ALLOCATOR_H_ */
