/* The one place the elementwise engine knows about DeferAndFuse: while fuse.c
 * drives a chain of elementwise kernels on this thread, tpurt_ew_run hands
 * each kernel's loop configuration to it instead of running it, and the
 * chain then runs as one pass over memory (see fuse.c). */
#ifndef TPURT_EXEC_FUSE_HOOK_H_
#define TPURT_EXEC_FUSE_HOOK_H_

#include "ops/elementwise/elementwise.h"

/* Non-NULL on a thread that is capturing a chain right now. */
extern _Thread_local void* tpurt_fuse_tls_capture;

static inline bool tpurt_fuse_capturing(void) { return tpurt_fuse_tls_capture != NULL; }
tpurt_status_t tpurt_fuse_capture(tpurt_kernel_ctx_t* ctx, const tpurt_ew_config_t* cfg);

#endif /* TPURT_EXEC_FUSE_HOOK_H_ */
