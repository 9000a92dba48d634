/* Debug, the synchronous and checked eager mode: each op runs before its call
 * returns (everything queued before it first), through the checked runner
 * (debug.c: guards armed, the op's buffers opened, canaries and NaN/Inf
 * checked), on the calling thread with the chip's compute threads, and its
 * error is the call's. Allocations are guarded (guarded.c); copies run now,
 * with their buffers' access windows open (debug.c rule 5); a stray touch of
 * device memory by host code is reported at the next sync point. */
#include <string.h>

#include "exec/debug/debug.h"
#include "exec/mode.h"

static tpurt_status_t debug_submit_kernel(tpurt_queue_t* q, const tpurt_op_def_t* op,
                                          const tpurt_op_call_t* call) {
  /* Everything queued before runs first, then this kernel on this thread. */
  tpurt_queue_wait_point(q, tpurt_queue_point(q));
  return tpurt_debug_run_kernel(q->device, op, call);
}

static tpurt_status_t debug_submit_copy(tpurt_queue_t* q, void* dst, const void* src, size_t bytes) {
  tpurt_queue_wait_point(q, tpurt_queue_point(q));
  uintptr_t w0 = 0, w1 = 0;
  tpurt_status_t s = tpurt_debug_access_begin(dst, &w0);
  if (!s) s = tpurt_debug_access_begin(src, &w1);
  if (!s) memmove(dst, src, bytes);
  tpurt_debug_access_end(w1);
  tpurt_debug_access_end(w0);
  return tpurt_status_annotate(s, "device copy (not done)");
}

static tpurt_status_t debug_host_copy(void* dst, const void* src, size_t bytes, const void* dev_ptr) {
  /* A stray touch of device memory by host code since the last op is
   * reported here (a sync point); then the copy opens its buffer for exactly
   * its memcpy. */
  tpurt_status_t v = tpurt_debug_take_violation();
  if (v) return v;
  uintptr_t w = 0;
  TPURT_RETURN_IF_ERROR(tpurt_debug_access_begin(dev_ptr, &w));
  memcpy(dst, src, bytes);
  tpurt_debug_access_end(w);
  return TPURT_OK;
}

static tpurt_status_t debug_sync_check(void) { return tpurt_debug_take_violation(); }

/* Live guarded buffers are inaccessible outside the runtime's windows (rule
 * 5). Work queued before may still use them, so the chips go idle first. */
static void debug_enter(void) {
  for (int i = 0, n = tpurt_device_count_internal(); i < n; ++i) tpurt_device_wait_idle(tpurt_device_at(i));
  tpurt_debug_set_protecting(true);
}

static void debug_leave(void) {
  tpurt_debug_set_protecting(false);
  tpurt_debug_quarantine_flush();
}

const tpurt_exec_mode_ops_t tpurt_exec_debug = {
    .id = TPURT_EXEC_DEBUG,
    .name = "debug",
    .submit_kernel = debug_submit_kernel,
    .submit_copy = debug_submit_copy,
    .host_copy = debug_host_copy,
    .sync_check = debug_sync_check,
    .enter = debug_enter,
    .leave = debug_leave,
    .foreign_free = tpurt_debug_guarded_free,
    .foreign_live = tpurt_debug_guarded_live,
    .alloc = {.allocate = tpurt_debug_guarded_allocate},
};
