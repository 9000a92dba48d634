/* What a kernel runs in: the dispatch context behind tpurt/kernel.h's kernel
 * services (tpurt_parallel_for, tpurt_kernel_scratch, tpurt_kernel_debug).
 * A driver fills one in for every kernel it runs: its compute threads (a
 * parallel_for over them) and a scratch arena reused across kernels. Part of
 * the HAL: exec/ programs that run kernels themselves (DeferAndFuse's planned
 * graph, inside a CALL command) get one from their queue. Not an ABI. */
#ifndef TPURT_HAL_KERNEL_CTX_H_
#define TPURT_HAL_KERNEL_CTX_H_

#include <pthread.h>

#include "hal/poison.h"
#include "tpurt/kernel.h"

/* Host scratch kept across kernels, grown to the high-water mark. */
typedef struct tpurt_scratch_t {
  pthread_mutex_t lock;
  uint8_t* base;
  size_t size;
  size_t used;
  size_t overflow_bytes; /* bytes handed out beyond `base` this kernel */
  void* overflow;        /* singly linked chunks malloc'd when `base` was short */
} tpurt_scratch_t;
void tpurt_scratch_init(tpurt_scratch_t* scratch);
void tpurt_scratch_reset(tpurt_scratch_t* scratch); /* after each kernel */
void tpurt_scratch_deinit(tpurt_scratch_t* scratch);

/* The driver's parallel_for: fn over [0, n) in chunks of at least `grain`
 * across its compute threads (tid in [0, num_threads)), returning when done. */
typedef void (*tpurt_pool_for_fn_t)(void* pool, int64_t n, int64_t grain, tpurt_range_fn_t fn, void* user);

struct tpurt_kernel_ctx_t {
  void* pool;                        /* NULL: serial */
  tpurt_pool_for_fn_t parallel_for;
  int num_threads;
  bool debug;
  tpurt_scratch_t* scratch;
  tpurt_poison_t* poison; /* the device's poisoned ranges, or NULL (not tracked) */
  /* Set while the queue runs commands dropped by a cancel (an interrupt):
   * nothing runs, everything they would have written is poisoned with it. */
  tpurt_status_t cancel;
  /* Who issued the command (the queue keeps its error for that thread); a
   * CALL program that runs other threads' work sets the issuer of the error
   * it returns. */
  uint64_t issuer;
  /* The queue running it and its chip, and the launch id of the command
   * (trace events; hal/trace.h): a program's kernels without their own
   * launch take the command's. */
  uint64_t queue_id;
  int32_t device_index;
  uint64_t trace_id;
  /* Grains are shifted right by this (tpurt_kernel_grain): a program sets it while it runs, since
   * its host thread is idle and the chip's other cores are free for smaller pieces of work. */
  int grain_shift;
};

/* Runs fn with ctx, resets the scratch, and prefixes an error with the op's
 * name ("aten::add.Tensor: ..."). With poison tracked: a failure poisons the
 * call's outputs; a call reading poisoned memory (or dropped by a cancel)
 * does not run, poisons its outputs with that error and returns OK (the
 * error was reported where it arose); a call that runs clears its outputs. */
tpurt_status_t tpurt_kernel_ctx_invoke(tpurt_kernel_ctx_t* ctx, tpurt_kernel_fn_t fn, uint32_t op_flags,
                                       const tpurt_op_call_t* call);
/* Copies bytes within device memory on the context's compute threads
 * (overlapping ranges: memmove, serially). */
void tpurt_kernel_copy(tpurt_kernel_ctx_t* ctx, void* dst, const void* src, size_t bytes);
/* A COPY command: tpurt_kernel_copy, with the source's poison carried to
 * the destination (or the destination cleared). */
void tpurt_kernel_ctx_copy(tpurt_kernel_ctx_t* ctx, void* dst, const void* src, size_t bytes);
/* A queued copy from host memory (a staged host-to-device write): dropped, it
 * poisons dst like any command; run, dst is good again. */
void tpurt_kernel_ctx_write(tpurt_kernel_ctx_t* ctx, void* dst, const void* src, size_t bytes);
/* The same prefix on a status a kernel returned. */
tpurt_status_t tpurt_kernel_status_annotate(tpurt_status_t status, const tpurt_op_call_t* call);

#endif /* TPURT_HAL_KERNEL_CTX_H_ */
