/* DeferAndFuse's room, internal to exec/: the pending list a queue records
 * into (defer.c records, pending.c holds), its lowering into the graph IR
 * (lower.c), and the executor that runs the planned graph on the queue's
 * thread (fuse_run.c; the planner is compiler/fuse_plan.c). Not an ABI. */
#ifndef TPURT_EXEC_DEFER_DEFER_H_
#define TPURT_EXEC_DEFER_DEFER_H_

#include "compiler/graph.h"
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
  uint64_t issuer; /* a KERNEL's issuing thread (base/thread.h): its error is theirs */
  uint64_t trace_id; /* while tracing: the launch id its device event carries (hal/trace.h) */
} tpurt_defer_rec_t;

typedef struct tpurt_defer_chunk_t tpurt_defer_chunk_t;

#define TPURT_DEFER_PLANS 8

/* The pending records of one queue, in submission order. Owned by the queue
 * (under submit_lock) until a flush hands it to the queue's thread inside
 * one CALL command, which runs it and frees it. */
typedef struct tpurt_defer_list_t {
  tpurt_defer_rec_t* recs;
  int32_t num_recs;
  int32_t cap_recs;
  int32_t num_kernels;  /* KERNEL records (fusable or not) */
  /* Chains whose first output has fewer elements run unfused (0: all fuse).
   * A program sets it: its chains' tiny kernels cost less one by one than
   * the chain machinery does. */
  int64_t fuse_min_numel;
  /* A program's list runs at every launch: keep_plan keeps its fusion plans between runs
   * (fuse_run.c), one per lowered graph's fingerprint (a program that takes sizes at launch has one
   * per size; the least recently used of TPURT_DEFER_PLANS goes), replayed when the fingerprint
   * matches, so planning is done once per size, not per launch. One-shot lists (DeferAndFuse's
   * flushes) keep none. */
  bool keep_plan;
  struct tpurt_defer_plan_t* plans[8];
  uint64_t plan_clock;
  uint64_t points;      /* queue points these records stand for (KERNEL + COPY) */
  uint64_t arena_bytes; /* payload bytes held */
  tpurt_defer_chunk_t* chunks;
} tpurt_defer_list_t;

tpurt_defer_list_t* tpurt_defer_list_new(void);
void tpurt_defer_list_free(tpurt_defer_list_t* list);
/* Frees a kept plan (fuse_run.c). */
void tpurt_defer_plan_free(struct tpurt_defer_plan_t* plan);
/* Bump allocation from the list's arena (8-byte aligned); NULL when out of memory. */
void* tpurt_defer_list_alloc(tpurt_defer_list_t* list, size_t bytes);
/* Appends a record slot (zeroed); NULL when out of memory. The records may move when the list grows:
 * a pointer into one (a relocation's slot) is taken only once no more are pushed, or after
 * tpurt_defer_list_reserve made room for all of them. */
tpurt_defer_rec_t* tpurt_defer_list_push(tpurt_defer_list_t* list);
/* Room for n records in all, so pushes up to n do not move them. False without memory. */
bool tpurt_defer_list_reserve(tpurt_defer_list_t* list, int32_t n);

/* Lowers the pending list into g (reset first), node i for record i.
 * *scratch / *cap: a work array kept between calls. False without memory. */
bool tpurt_defer_lower(tpurt_defer_list_t* list, tpurt_graph_t* g, int32_t** scratch, int32_t* cap);

/* Runs a pending list on the queue's thread, with its dispatch context:
 * lowers it, plans fused chains (compiler/fuse_plan.c) and runs them and the
 * remaining records in order. Every record runs; the first kernel error is
 * returned (kept by the queue like Strict's, for the thread that issued the
 * op: ctx->issuer). While anything is poisoned, or the list was dropped
 * (ctx->cancel), records run one by one (hal/poison.h's rules apply per
 * kernel). Does not free `list`. */
tpurt_status_t tpurt_defer_list_run(tpurt_defer_list_t* list, tpurt_kernel_ctx_t* ctx);

/* A kernel was recorded (statistics). */
void tpurt_fuse_note_recorded(void);

#endif /* TPURT_EXEC_DEFER_DEFER_H_ */
