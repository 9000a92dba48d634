/* Internal to exec/: the hooks by which the queue, the allocator and the host
 * copies feed a capture (exec/defer/capture.c; the public side is tpurt/program.h).
 * Each is behind one predictable branch on the fast path. Not an ABI. */
#ifndef TPURT_EXEC_CAPTURE_H_
#define TPURT_EXEC_CAPTURE_H_

#include "exec/device.h"

typedef struct tpurt_capture_t tpurt_capture_t;

/* Captures active on any queue (the allocator's fast path reads only this). */
extern _Atomic int tpurt_capture_count;

/* q captures (q->capture set): the call is recorded, not run. */
tpurt_status_t tpurt_capture_record_kernel(tpurt_queue_t* q, const tpurt_op_def_t* op, const tpurt_op_call_t* call);
tpurt_status_t tpurt_capture_record_copy(tpurt_queue_t* q, void* dst, const void* src, size_t bytes);
/* Something the capture cannot record (a host copy, a sync, another
 * command) was asked of q: the capture is broken, and the caller returns
 * this status (FAILED_PRECONDITION naming `what`). */
tpurt_status_t tpurt_capture_refuse(tpurt_queue_t* q, const char* what);
tpurt_status_t tpurt_capture_refuse_locked(tpurt_queue_t* q, const char* what); /* submit_lock held */
/* The allocator made (`bytes`: what was asked for) / the host freed a block of q's pools. */
void tpurt_capture_note_alloc(tpurt_queue_t* q, void* ptr, size_t bytes);
void tpurt_capture_note_free(tpurt_queue_t* q, void* ptr);

#endif /* TPURT_EXEC_CAPTURE_H_ */
