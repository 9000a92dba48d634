/* tpurt devices: chips, their memory (a caching allocator over the chip's own
 * HBM region), queues (streams), events and the eager execution mode.
 *
 * One process drives the chips it was given (normally one: TPU_VISIBLE_CHIPS /
 * the launcher decide). Device memory is a region of its own (memfd-backed,
 * so peers in other processes can map it later), never the host heap:
 * tpurt_memory_is_device_ptr tells the two apart.
 *
 * Stream-ordered memory: a block freed by the host may be handed out again at
 * once to work on the same queue, because that queue runs in order. Copies
 * from/to host memory wait for the queue first, so a host buffer is never read
 * or written while queued work still uses it.
 *
 * Environment (read by tpurt_init):
 *   TORCH_TPU_HBM_BYTES     capacity per chip (default 16 GiB, at most 3/4 of RAM);
 *                           accepts a plain byte count or K/M/G suffixes
 *   TORCH_TPU_NUM_THREADS   compute threads per chip (default: this chip's share of cores)
 *   TORCH_TPU_NUM_CHIPS     chips visible to this process (default 1, at most TPURT_MAX_CHIPS)
 *   TORCH_TPU_TOPOLOGY      the host's chips, one process each (tpurt/dist.h): threads and
 *                           HBM are split between them
 *   TPU_LAUNCH_BLOCKING=1   start in Debug mode (synchronous)
 */
#ifndef TPURT_DEVICE_H_
#define TPURT_DEVICE_H_

#include "tpurt/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpurt_device_t tpurt_device_t;
typedef struct tpurt_queue_t tpurt_queue_t;
typedef struct tpurt_event_t tpurt_event_t;

/* ---- process-wide ---- */
/* The most chips one process drives (TORCH_TPU_NUM_CHIPS above it is refused
 * by tpurt_init, naming the variable). The one limit: the C++ layer's device
 * tables are sized by it. */
#define TPURT_MAX_CHIPS 16
TPURT_API tpurt_status_t tpurt_init(void);  /* idempotent, thread-safe */
TPURT_API int tpurt_device_count(void);
TPURT_API tpurt_status_t tpurt_device_get(int index, tpurt_device_t** out_device); /* borrowed */

typedef struct tpurt_device_info_t {
  char name[32];          /* "vtpu" */
  int index;
  uint64_t hbm_bytes;     /* capacity */
  int num_threads;        /* compute threads */
} tpurt_device_info_t;
TPURT_API tpurt_status_t tpurt_device_query(tpurt_device_t* device, tpurt_device_info_t* out_info);

/* The chip's whole device memory as a descriptor other processes can map
 * (/proc/<pid>/fd/<fd>), its base here and its size: what tpu_dist's
 * communicators share (tpurt/dist.h). UNIMPLEMENTED for a driver without it. */
TPURT_API tpurt_status_t tpurt_device_shareable_memory(tpurt_device_t* device, int* out_fd, void** out_base,
                                                       uint64_t* out_bytes);

/* ---- execution mode ---- */
typedef enum tpurt_exec_mode_e {
  TPURT_EXEC_STRICT = 0,         /* async, one op at a time (default) */
  TPURT_EXEC_DEBUG = 1,          /* synchronous, bounds-checked */
  TPURT_EXEC_DEFER_AND_FUSE = 2, /* record, fuse, run at sync points */
} tpurt_exec_mode_t;
/* Switches the process's eager mode; safe from any thread while others submit
 * work: it waits for the submits in progress and for every chip to run what
 * was queued under the old mode, then switches. FAILED_PRECONDITION from a
 * queued host function (it would wait for itself); INVALID_ARGUMENT for an
 * unknown mode. */
TPURT_API tpurt_status_t tpurt_exec_mode_set(tpurt_exec_mode_t mode);
TPURT_API tpurt_exec_mode_t tpurt_exec_mode_get(void);

/* ---- memory ---- */
typedef struct tpurt_memory_stats_t {
  uint64_t allocated_bytes;      /* held by live allocations */
  uint64_t peak_allocated_bytes;
  uint64_t reserved_bytes;       /* taken from HBM by the caching allocator */
  uint64_t peak_reserved_bytes;
  uint64_t capacity_bytes;       /* the HBM limit */
  uint64_t num_allocs;           /* allocation calls served */
  uint64_t num_frees;
  uint64_t num_ooms;             /* allocation calls that failed */
  uint64_t num_segments;         /* HBM segments held */
} tpurt_memory_stats_t;

/* Allocates `bytes` (0 allowed: returns a unique non-NULL pointer of 0 bytes)
 * for use on `queue` (NULL: the default queue). RESOURCE_EXHAUSTED names the
 * requested and free bytes; the device stays usable. */
TPURT_API tpurt_status_t tpurt_memory_allocate(tpurt_device_t* device, tpurt_queue_t* queue,
                                               size_t bytes, void** out_ptr);
/* Stream-ordered free (see above). Freeing NULL does nothing. */
TPURT_API void tpurt_memory_free(tpurt_device_t* device, void* ptr);
/* The block is also in use by `queue` (record_stream): it is not reused until
 * that queue has passed this point. */
TPURT_API tpurt_status_t tpurt_memory_record_queue(tpurt_device_t* device, void* ptr,
                                                   tpurt_queue_t* queue);
TPURT_API bool tpurt_memory_is_device_ptr(tpurt_device_t* device, const void* ptr);

/* Memory history (torch.tpu.memory._record_memory_history): the caching
 * allocator's segment events and OOMs go to one process-wide observer
 * (NULL: none; a single predictable branch each). It runs with the
 * allocator's lock held: it must not call back into the allocator. */
enum {
  TPURT_MEMORY_EVENT_SEGMENT_ALLOC = 1, /* [addr, +size) taken from HBM */
  TPURT_MEMORY_EVENT_SEGMENT_FREE,      /* [addr, +size) given back (a whole segment or a trimmed end) */
  TPURT_MEMORY_EVENT_OOM,               /* `size` bytes requested and refused; addr: bytes free then */
};
typedef void (*tpurt_memory_observer_fn)(void* user, tpurt_device_t* device, uint32_t event, uint64_t addr,
                                         uint64_t size, uint64_t queue_id);
TPURT_API void tpurt_memory_set_observer(tpurt_memory_observer_fn fn, void* user);
/* One block of the caching allocator (memory snapshots). */
typedef struct tpurt_memory_block_info_t {
  uint64_t segment;      /* its segment's base address */
  uint64_t segment_size;
  uint64_t addr;
  uint64_t size;
  uint64_t queue_id;     /* the segment's owner queue */
  uint8_t state;         /* 0 free, 1 allocated, 2 freed but still in use by another queue */
  uint8_t small;         /* a small-block segment (2 MiB; blocks <= 1 MiB) */
} tpurt_memory_block_info_t;
/* Fills up to `cap` blocks, segment by segment in address order within each,
 * and returns how many there are (call with cap 0 to size the buffer).
 * Debug mode's guarded allocations are not in the pools and not listed. */
TPURT_API size_t tpurt_memory_snapshot(tpurt_device_t* device, tpurt_memory_block_info_t* out, size_t cap);
/* The size of the live block at ptr (what an allocation really holds), 0 if none. */
TPURT_API uint64_t tpurt_memory_block_size(tpurt_device_t* device, const void* ptr);
TPURT_API tpurt_status_t tpurt_memory_stats(tpurt_device_t* device, tpurt_memory_stats_t* out_stats);
TPURT_API void tpurt_memory_reset_peak(tpurt_device_t* device);
/* Waits for the device, then returns cached free segments to HBM. */
TPURT_API tpurt_status_t tpurt_memory_empty_cache(tpurt_device_t* device);
/* Free and total HBM bytes (free = capacity - reserved + cached free). */
TPURT_API tpurt_status_t tpurt_memory_get_info(tpurt_device_t* device, uint64_t* out_free,
                                               uint64_t* out_total);

/* Host <-> device copies. They wait for `queue` (NULL: default) first, then
 * copy on the calling thread, so they are complete on return. */
TPURT_API tpurt_status_t tpurt_memcpy_h2d(tpurt_device_t* device, tpurt_queue_t* queue, void* dst,
                                          const void* src, size_t bytes);
TPURT_API tpurt_status_t tpurt_memcpy_d2h(tpurt_device_t* device, tpurt_queue_t* queue, void* dst,
                                          const void* src, size_t bytes);

/* ---- the host's threads ----
 * Errors belong to the queue and the thread that issued the failing op:
 * tpurt_queue_synchronize (and a host copy) raise the errors of the calling
 * thread's own ops, never another thread's; a tensor written by a failed
 * kernel, or computed from one, raises that error whenever it is read, on
 * any thread, until it is overwritten. Waits for a queue poll
 * `interrupted` (at least every 50 ms): when it returns a status (CANCELLED)
 * the wait gives up with it, and the queue drops the work it had not started
 * (the tensors it would have written raise that status when read). */
typedef struct tpurt_host_hooks_t {
  /* Optional: true on a thread whose errors any thread may take (asked once
   * per thread, on its first op). */
  bool (*thread_is_shared)(void);
  /* Optional: the host wants waiting threads back (a signal arrived). */
  tpurt_status_t (*interrupted)(void);
} tpurt_host_hooks_t;
TPURT_API void tpurt_set_host_hooks(const tpurt_host_hooks_t* hooks); /* NULL: none */

/* ---- queues (streams) ---- */
TPURT_API tpurt_queue_t* tpurt_device_default_queue(tpurt_device_t* device); /* borrowed */
TPURT_API tpurt_status_t tpurt_queue_create(tpurt_device_t* device, int priority,
                                            tpurt_queue_t** out_queue);
TPURT_API void tpurt_queue_retain(tpurt_queue_t* queue);
TPURT_API void tpurt_queue_release(tpurt_queue_t* queue);
TPURT_API tpurt_device_t* tpurt_queue_device(tpurt_queue_t* queue);
TPURT_API uint64_t tpurt_queue_id(tpurt_queue_t* queue); /* 0 for the default queue */

/* Queues one kernel. The call record (args, lists, strings, tensor
 * descriptors) is copied, so the caller's may go away at once. Strict mode:
 * returns at once; an error the kernel returns is kept and surfaces at the
 * next synchronize of this queue, prefixed with the op's name. Debug mode:
 * runs it before returning and returns its status. */
TPURT_API tpurt_status_t tpurt_queue_submit_kernel(tpurt_queue_t* queue, const tpurt_op_def_t* op,
                                                   const tpurt_op_call_t* call);
/* Device-to-device copy, queued. */
TPURT_API tpurt_status_t tpurt_queue_submit_copy(tpurt_queue_t* queue, void* dst, const void* src,
                                                 size_t bytes);
/* Runs fn(user) on the queue's thread in order with the kernels. An error it
 * returns is kept like a kernel's and surfaces at the next synchronize. */
TPURT_API tpurt_status_t tpurt_queue_submit_host_fn(tpurt_queue_t* queue, tpurt_status_t (*fn)(void* user),
                                                    void* user);
/* The same, named on the device trace (the profiler's device track) by
 * `name`, a string that outlives the command (a literal). */
TPURT_API tpurt_status_t tpurt_queue_submit_host_fn_named(tpurt_queue_t* queue, tpurt_status_t (*fn)(void* user),
                                                          void* user, const char* name);
/* Waits until everything queued so far has run; returns (and clears) the
 * first error of the calling thread's ops since its last synchronize. */
TPURT_API tpurt_status_t tpurt_queue_synchronize(tpurt_queue_t* queue);
TPURT_API bool tpurt_queue_is_idle(tpurt_queue_t* queue);
TPURT_API tpurt_status_t tpurt_device_synchronize(tpurt_device_t* device); /* every queue */

/* ---- events ---- */
enum { TPURT_EVENT_TIMING = 1u << 0 };
TPURT_API tpurt_status_t tpurt_event_create(tpurt_device_t* device, uint32_t flags,
                                            tpurt_event_t** out_event);
TPURT_API void tpurt_event_release(tpurt_event_t* event);
/* Marks the point in `queue` reached by everything submitted so far. */
TPURT_API tpurt_status_t tpurt_event_record(tpurt_event_t* event, tpurt_queue_t* queue);
/* Work submitted to `queue` after this waits for the event. */
TPURT_API tpurt_status_t tpurt_queue_wait_event(tpurt_queue_t* queue, tpurt_event_t* event);
TPURT_API tpurt_status_t tpurt_event_synchronize(tpurt_event_t* event);
TPURT_API bool tpurt_event_query(tpurt_event_t* event); /* true when reached (or never recorded) */
/* Milliseconds between two reached events recorded with TPURT_EVENT_TIMING. */
TPURT_API tpurt_status_t tpurt_event_elapsed_ms(tpurt_event_t* start, tpurt_event_t* end,
                                                float* out_ms);

/* ---- fp32 matrix products (ops/linalg/gemm.c) ---- */
/* The library running them: "own" (our kernel, for all but the few-row products (gemm.c: own_takes);
 * the default on AVX-512 builds on CPUs that are not Intel's, where MKL and OpenBLAS run AVX2 code),
 * "mkl" (an MKL the process already has loaded: PyTorch's x86 wheels carry one) or "openblas".
 * TORCH_TPU_GEMM_BLAS=auto|own|mkl|openblas chooses. */
TPURT_API const char* tpurt_fp32_blas(void);
/* Tests and benchmarks: 2 = our kernel (as above), 1 = MKL where loaded, 0 = OpenBLAS, -1 = as the
 * environment says. */
TPURT_API void tpurt_fp32_blas_set(int which);

/* ---- DeferAndFuse (exec/defer: recording and running; compiler/fuse_plan.c: the rules) ---- */
/* Counters since the process started (or the last reset). */
typedef struct tpurt_fuse_stats_t {
  uint64_t ops_recorded;     /* kernels deferred instead of queued */
  uint64_t flushes;          /* pending graphs materialized */
  uint64_t kernels_launched; /* kernels run at materialization: one per fused group + unfused ones */
  uint64_t fused_groups;     /* fused kernels run (each counts once in kernels_launched) */
  uint64_t fused_ops;        /* ops that ran inside fused kernels */
  uint64_t stores_skipped;   /* intermediate results never written to device memory */
  uint64_t bytes_skipped;    /* their bytes */
  uint64_t fallbacks;        /* fused groups rerun unfused (capture did not go as planned) */
  /* Generated code (runtime/compiler/): the kernel cache, and what ran it. */
  uint64_t codegen_lookups;        /* fused chains that asked for their generated kernel */
  uint64_t codegen_memory_hits;    /* ... answered by a kernel already loaded in this process */
  uint64_t codegen_disk_loads;     /* kernels loaded from the disk cache (verified) instead of built */
  uint64_t codegen_shared_loads;   /* ... from the shared cache (TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT) */
  uint64_t codegen_shared_stores;  /* kernels built here and published to the shared cache */
  uint64_t codegen_builds;         /* kernels compiled (background builds) */
  uint64_t codegen_build_failures; /* builds that gave no kernel (those chains stay on the generic path) */
  uint64_t codegen_disk_rejects;   /* disk cache entries refused and discarded (content, owner, mode, ABI) */
  uint64_t codegen_runs;           /* fused groups run by generated code */
  /* Programs (captured graphs) keep their fusion plan between launches. */
  uint64_t plans_made;     /* program runs that planned (the first, or the graph's structure changed) */
  uint64_t plans_replayed; /* program runs that followed the kept plan */
} tpurt_fuse_stats_t;
TPURT_API void tpurt_fuse_stats_get(tpurt_fuse_stats_t* out_stats);
TPURT_API void tpurt_fuse_stats_reset(void);
/* Fusion on (default; TORCH_TPU_FUSE=0 turns it off: records are still
 * deferred, then run one by one). Tests compare the two. */
TPURT_API void tpurt_fuse_set_enabled(bool enabled);
TPURT_API bool tpurt_fuse_enabled(void);
/* Forgets the generated kernels held in memory (the libraries stay loaded;
 * the disk cache stays, and is asked again). Not while chains run. */
TPURT_API void tpurt_fuse_cache_clear(void);
/* Blocks until no generated kernel is being built. */
TPURT_API void tpurt_fuse_wait_builds(void);
/* Code generation for fused chains on (default; TORCH_TPU_FUSE_CODEGEN=0
 * turns it off: chains then always run through the generic tiled path). */
TPURT_API void tpurt_fuse_set_codegen(bool enabled);
TPURT_API bool tpurt_fuse_codegen(void);


#ifdef __cplusplus
}
#endif
#endif /* TPURT_DEVICE_H_ */
