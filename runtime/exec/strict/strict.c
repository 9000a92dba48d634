/* Strict, the default eager mode: every op is queued to the device as it
 * comes and the host returns at once; `.cpu()`, `.item()`, printing and
 * synchronize wait, and a kernel's error surfaces at the next sync point
 * prefixed with the op's name. Nothing to check, nothing to record: each
 * call becomes one HAL command. */
#include "exec/mode.h"

static tpurt_status_t strict_submit_kernel(tpurt_queue_t* q, const tpurt_op_def_t* op,
                                           const tpurt_op_call_t* call) {
  tpurt_hal_command_t cmd = {.kind = TPURT_HAL_COMMAND_DISPATCH, .u.dispatch = {op->fn, call, op->flags}};
  pthread_mutex_lock(&q->submit_lock);
  tpurt_status_t s = tpurt_queue_submit_locked(q, &cmd, NULL);
  pthread_mutex_unlock(&q->submit_lock);
  return s;
}

static tpurt_status_t strict_submit_copy(tpurt_queue_t* q, void* dst, const void* src, size_t bytes) {
  tpurt_hal_command_t cmd = {.kind = TPURT_HAL_COMMAND_COPY, .u.copy = {dst, src, bytes}};
  pthread_mutex_lock(&q->submit_lock);
  tpurt_status_t s = tpurt_queue_submit_locked(q, &cmd, NULL);
  pthread_mutex_unlock(&q->submit_lock);
  return s;
}

const tpurt_exec_mode_ops_t tpurt_exec_strict = {
    .id = TPURT_EXEC_STRICT,
    .name = "strict",
    .submit_kernel = strict_submit_kernel,
    .submit_copy = strict_submit_copy,
};
