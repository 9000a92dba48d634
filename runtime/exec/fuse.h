/* DeferAndFuse, internal to exec/: the pending graph a queue records in this
 * mode (queue.c appends, fuse.c plans and runs it) and the fusion statistics.
 * Not part of any ABI. */
#ifndef TPURT_EXEC_FUSE_H_
#define TPURT_EXEC_FUSE_H_

#include "base/env.h"
#include "base/file.h"
#include "base/hash.h"
#include "hal/kernel_ctx.h"
#include "tpurt/device.h"

typedef enum tpurt_defer_kind_e {
  TPURT_DEFER_KERNEL = 0, /* op + deep-copied call */
  TPURT_DEFER_COPY,       /* device-to-device copy dst <- src, bytes */
  TPURT_DEFER_FREE,       /* the host freed the block [dst, dst + bytes): dead from here on */
} tpurt_defer_kind_t;

typedef struct tpurt_defer_rec_t {
  uint32_t kind;
  const tpurt_op_def_t* op;
  tpurt_op_call_t call; /* points into the list's arena */
  void* dst;
  const void* src;
  size_t bytes;
} tpurt_defer_rec_t;

typedef struct tpurt_defer_chunk_t tpurt_defer_chunk_t;

/* The pending records of one queue, in submission order. Owned by the queue
 * (under submit_lock) until a flush hands it to the worker inside one ring
 * command, which runs it and frees it. */
/* Bytes [lo, hi) a tensor touches; lo == hi: none. */
typedef struct tpurt_span_t {
  uintptr_t lo, hi;
} tpurt_span_t;

typedef struct tpurt_defer_list_t {
  tpurt_defer_rec_t* recs;
  int32_t num_recs;
  int32_t cap_recs;
  int32_t num_kernels;  /* KERNEL records (fusable or not) */
  uint64_t points;      /* queue points these records stand for (KERNEL + COPY) */
  uint64_t arena_bytes; /* payload bytes held */
  tpurt_defer_chunk_t* chunks;
  /* Planning (fuse.c), filled when the list runs: record i's tensors' byte
   * ranges are spans[span_first[i] .. span_first[i + 1]). */
  tpurt_span_t* spans;
  int32_t* span_first;
} tpurt_defer_list_t;

tpurt_defer_list_t* tpurt_defer_list_new(void);
void tpurt_defer_list_free(tpurt_defer_list_t* list);
/* Bump allocation from the list's arena (8-byte aligned); NULL when out of memory. */
void* tpurt_defer_list_alloc(tpurt_defer_list_t* list, size_t bytes);
/* Appends a record slot (zeroed); NULL when out of memory. */
tpurt_defer_rec_t* tpurt_defer_list_push(tpurt_defer_list_t* list);

/* Whether `op` may join a fused chain (an elementwise kernel of one output
 * that runs through tpurt_ew_run exactly once). */
bool tpurt_fuse_op_fusable(const tpurt_op_def_t* op);


/* Runs a pending list on the queue's thread, with its dispatch context:
 * plans fused groups (rules at the top of fuse.c), runs them and the
 * remaining records in order. Every record runs; the first kernel error is
 * returned (kept by the queue like Strict's). Does not free `list`. */
tpurt_status_t tpurt_defer_list_run(tpurt_defer_list_t* list, tpurt_kernel_ctx_t* ctx);

void tpurt_fuse_note_recorded(void);

/* TORCH_TPU_FUSE_TRACE=1: DeferAndFuse explains itself on stderr. */
bool tpurt_fuse_trace(void);
/* Statistics, switches and the cache API: tpurt/device.h. */

#endif /* TPURT_EXEC_FUSE_H_ */
