/* Internal side of the device activity trace (tpurt/trace.h): the switch
 * every recorder tests (one relaxed load, a predictable branch while off),
 * the launch ids that link a host launch to its device event, and the
 * recorders the queue workers (hal/drivers), the front layer and the modes
 * (exec/) call while it is on. Not an ABI. */
#ifndef TPURT_HAL_TRACE_H_
#define TPURT_HAL_TRACE_H_

#include <stdatomic.h>

#include "tpurt/trace.h"

extern _Atomic int tpurt_trace_on;

static inline bool tpurt_trace_active(void) {
  return TPURT_UNLIKELY(atomic_load_explicit(&tpurt_trace_on, memory_order_relaxed) != 0);
}

/* The launch id of the op the calling thread is handing to a queue now (set
 * by the front layer around a mode's submit while tracing; 0 otherwise):
 * the command or record it becomes carries it to its device event. */
extern _Thread_local uint64_t tpurt_trace_tls_launch;

/* Records a launch event of `name` by the calling thread (its correlation id,
 * now) and returns its fresh id. */
uint64_t tpurt_trace_launch(const char* name, int32_t device, uint64_t queue);
/* A fresh launch id (> 0). */
uint64_t tpurt_trace_next_id(void);
/* Keeps a copy of ev (dropped, and counted, when the buffer is full). */
void tpurt_trace_record(const tpurt_trace_event_t* ev);
/* Device time spent running commands (busy). */
void tpurt_trace_add_busy(uint64_t ns);
/* "name.overload" (or "name") into dst[cap]. */
void tpurt_trace_set_name(char* dst, size_t cap, const char* name, const char* overload);
/* The calling thread's kernel thread id. */
uint64_t tpurt_trace_thread_id(void);

#endif /* TPURT_HAL_TRACE_H_ */
