/* Poisoned device memory: the byte ranges a failed (or dropped) command
 * should have written, each with the error that stopped it. A queue's
 * commands run asynchronously to the host, so a kernel's error is seen late;
 * instead of leaving its outputs with stale bytes that later work reads as
 * data, the driver marks them here when the command fails, and:
 *  - a later command that reads a poisoned range does not run; its outputs
 *    are poisoned with the same error (errors flow along the data);
 *  - a command that writes a whole range without error clears it (the data
 *    is good again);
 *  - a host read of a poisoned range (exec/: `.cpu()`, `.item()`) raises the
 *    original error; a host write clears it.
 * Nothing is poisoned in a healthy run, and then the only cost is one atomic
 * load per command (tpurt_poison_armed). Shared by the drivers, as
 * kernel_ctx.c is; one table per device. Not an ABI. */
#ifndef TPURT_HAL_POISON_H_
#define TPURT_HAL_POISON_H_

#include <pthread.h>
#include <stdatomic.h>

#include "tpurt/kernel.h"

typedef struct tpurt_poison_entry_t tpurt_poison_entry_t;

typedef struct tpurt_poison_t {
  _Atomic uint32_t count; /* ranges poisoned; 0 = none (the fast path) */
  pthread_mutex_t lock;
  tpurt_poison_entry_t* v; /* sorted by address, disjoint */
  int32_t n, cap;
} tpurt_poison_t;

void tpurt_poison_init(tpurt_poison_t* p);
void tpurt_poison_deinit(tpurt_poison_t* p);

static inline bool tpurt_poison_armed(tpurt_poison_t* p) {
  return p && atomic_load_explicit(&p->count, memory_order_acquire) != 0;
}
/* A copy of the error poisoning any byte of [ptr, ptr + bytes), or OK. */
tpurt_status_t tpurt_poison_check(tpurt_poison_t* p, const void* ptr, size_t bytes);
/* Poisons [ptr, ptr + bytes) with a copy of `error` (borrowed). */
void tpurt_poison_mark(tpurt_poison_t* p, const void* ptr, size_t bytes, tpurt_status_t error);
/* [ptr, ptr + bytes) holds good data again. */
void tpurt_poison_clear(tpurt_poison_t* p, const void* ptr, size_t bytes);

/* The same for a kernel call: the error poisoning any tensor it reads (its
 * tensor arguments and tensor-list elements, but not self of an op with
 * TPURT_OP_OVERWRITES_SELF in its in-place form), or OK; poison every output with
 * `error`; clear every output the kernel writes whole (a dense output: a view
 * with gaps leaves the bytes between its elements as they were). */
tpurt_status_t tpurt_poison_check_call(tpurt_poison_t* p, const tpurt_op_call_t* call, uint32_t op_flags);
void tpurt_poison_mark_call(tpurt_poison_t* p, const tpurt_op_call_t* call, tpurt_status_t error);
void tpurt_poison_clear_call(tpurt_poison_t* p, const tpurt_op_call_t* call);

#endif /* TPURT_HAL_POISON_H_ */
