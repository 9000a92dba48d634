/* tpurt Debug mode: the switches and counters of its checks (the checks
 * themselves are in exec/debug/; device.h's tpurt_exec_mode_set selects the
 * mode). In Debug mode every kernel runs synchronously; indices are
 * bounds-checked; device memory allocated in Debug mode is guarded (a guard
 * page on each side, freed memory quarantined with no access), so a kernel or
 * host code touching memory outside a live buffer is reported with the op's
 * name instead of corrupting data; optionally every floating output is checked
 * for NaN/Inf.
 *
 * Environment:
 *   TORCH_TPU_DEBUG_NANS=1    Debug mode: the first op producing NaN or Inf in
 *                             a floating output fails, naming the op (=nan:
 *                             NaN only)
 *   TORCH_TPU_DEBUG_GUARDS=0  Debug mode without guard pages / quarantine
 *   TORCH_TPU_DEBUG_QUARANTINE_BYTES  freed memory kept unusable (default 1/4
 *                             of HBM; the oldest is released beyond it)
 */
#ifndef TPURT_DEBUG_H_
#define TPURT_DEBUG_H_

#include "tpurt/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { TPURT_DEBUG_NANS_OFF = 0, TPURT_DEBUG_NANS_NAN_INF = 1, TPURT_DEBUG_NANS_NAN_ONLY = 2 };
/* Overrides TORCH_TPU_DEBUG_NANS (read at first use). */
TPURT_API void tpurt_debug_set_nan_check(int mode);
TPURT_API int tpurt_debug_nan_check(void);

typedef struct tpurt_debug_stats_t {
  uint64_t violations;      /* device memory violations caught */
  uint64_t patched_pages;   /* faulting pages given a scratch page so the faulting code could go on */
  uint64_t guarded_allocs;  /* allocations made with guard pages */
  uint64_t quarantined_bytes; /* freed guarded memory held unusable now */
} tpurt_debug_stats_t;
TPURT_API void tpurt_debug_stats(tpurt_debug_stats_t* out_stats);

/* Returns (and clears) a violation recorded outside any kernel (host code
 * touching a guard page or freed device memory), or OK. The next op in Debug
 * mode reports it too. */
TPURT_API tpurt_status_t tpurt_debug_take_violation(void);

/* A deliberately faulty kernel ("_debug_touch") for tests of the guards:
 * args (tensor t: 1-D uint8 over any address; bool write) reads every byte
 * of t, or with write adds 1 to each. Not in the op table. */
TPURT_API const tpurt_op_def_t* tpurt_debug_touch_op(void);

#ifdef __cplusplus
}
#endif
#endif /* TPURT_DEBUG_H_ */
