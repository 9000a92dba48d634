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

/* The one place the reduction engine (ops/reduce/reduce.c) knows about
 * DeferAndFuse: while fuse.c runs a reduction at the end of a chain, the
 * chain's value that the reduction reads is never in memory. The engine, on
 * finding its input's data at `data`, asks `produce` for runs of it instead
 * of loading them: elements [lin, lin + n) in row-major order (n <= max_run),
 * as n contiguous elements of the input's dtype, on pool thread `tid`. It
 * takes the source only for a contiguous input reduced over its innermost
 * dims (each output reads one contiguous run), and calls `accepted` first;
 * otherwise it returns ABORTED without reading, and the chain runs unfused. */
typedef struct tpurt_fuse_source_t {
  const void* data;
  int64_t max_run;
  const void* (*produce)(void* user, int64_t lin, int64_t n, int tid);
  void (*accepted)(void* user);
  void* user;
} tpurt_fuse_source_t;

extern _Thread_local const tpurt_fuse_source_t* tpurt_fuse_tls_source;

/* The engine's streaming-store switch (ew_ops.h): a loop on a thread with
 * tpurt_ew_stream_active set writes its contiguous output with non-temporal
 * stores; worth it for outputs of at least tpurt_ew_stream_min_bytes(). */
extern _Thread_local bool tpurt_ew_stream_active;
int64_t tpurt_ew_stream_min_bytes(void);

#endif /* TPURT_EXEC_FUSE_HOOK_H_ */
