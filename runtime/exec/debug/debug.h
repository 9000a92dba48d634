/* Debug mode's room, internal to exec/: its checks (debug.c) — guarded device
 * memory (the regions guarded.c hands out in Debug mode, the fault handler
 * that turns a touch of a guard page or of freed memory into an error naming
 * the op), the checked kernel runner, the opt-in NaN/Inf check — and the
 * mode's hooks (debug_mode.c). Not an ABI. */
#ifndef TPURT_EXEC_DEBUG_DEBUG_H_
#define TPURT_EXEC_DEBUG_DEBUG_H_

#include "exec/allocator.h"
#include "exec/queue.h"
#include "tpurt/debug.h"

/* ---- guarded regions (guarded.c creates them; debug.c keeps the table the
 * fault handler reads) ----
 * A region is [start, end): a guard page, the data pages, a guard page. The
 * user's `size` bytes end `pad` (< 64) bytes before the trailing guard page;
 * the pad holds a canary, checked after each kernel and at free. */
typedef enum tpurt_debug_region_state_e {
  TPURT_DEBUG_REGION_LIVE = 1,
  TPURT_DEBUG_REGION_FREED = 2, /* quarantined: no access, not reused */
} tpurt_debug_region_state_t;

typedef struct tpurt_debug_region_t {
  uintptr_t start;
  uintptr_t end;
  uintptr_t ptr;      /* what the allocator returned */
  uint64_t size;      /* bytes asked for */
  uint64_t span;      /* size rounded up to 64: [ptr, ptr+span) ends at the trailing guard page */
  tpurt_device_t* device;
  uint32_t state;
  uint32_t opens;     /* access windows open on it now (rule 5 of debug.c) */
} tpurt_debug_region_t;

#define TPURT_DEBUG_ALIGN 64u
#define TPURT_DEBUG_CANARY 0xA5u

/* The host page size (guards are whole pages). */
uint64_t tpurt_debug_page_size(void);
/* True when Debug mode's guards can work on this device (its driver can
 * protect pages) and TORCH_TPU_DEBUG_GUARDS is not 0. */
bool tpurt_debug_guards_supported(tpurt_device_t* device);
/* Adds a region to the table (and installs the fault handler on first use).
 * A live region's data pages are made inaccessible when Debug mode protects
 * live buffers (write the canary first). */
tpurt_status_t tpurt_debug_region_add(const tpurt_debug_region_t* region);
/* Looks up the region containing `addr` (guard pages included). */
bool tpurt_debug_region_find(uintptr_t addr, tpurt_debug_region_t* out_region);
/* Changes the state of the region starting at `start`; false if none. */
bool tpurt_debug_region_set_state(uintptr_t start, uint32_t state);
void tpurt_debug_region_remove(uintptr_t start);
/* Makes the freed region with r's start and end live again as `r` (a new
 * ptr/size/span in the same pages): its canary written, its data pages
 * closed when Debug mode protects live buffers. */
tpurt_status_t tpurt_debug_region_reuse(const tpurt_debug_region_t* r);
/* Checks the canary in a live region's pad; on damage records a violation
 * (reported by the next checked op or tpurt_debug_take_violation) naming
 * `who` ("aten::add.Tensor", or "memory_free"). True when intact. */
bool tpurt_debug_canary_check(const tpurt_debug_region_t* region, const char* who);

/* ---- the checked runner (the mode's submit calls it) ----
 * Runs one kernel with the guards armed and the op's name known to the fault
 * handler; then turns any violation into an INTERNAL status naming the op
 * ("aten::x: device memory violation: write at 0x..: offset 68 of a 64-byte
 * buffer (4 bytes past its end)"), checks the pad canaries of the op's tensors, and
 * with the NaN check on, checks floating outputs ("op aten::x produced NaN in
 * output 0"). A violation by host code since the previous op is reported
 * first, and the kernel is not run. Kernels run one at a time here. */
tpurt_status_t tpurt_debug_run_kernel(tpurt_device_t* device, const tpurt_op_def_t* op,
                                      const tpurt_op_call_t* call);

/* The NaN/Inf check over one call's outputs (mode: TPURT_DEBUG_NANS_*). */
tpurt_status_t tpurt_debug_check_outputs(const tpurt_op_call_t* call, int mode);

/* Puts the device's pages back under every page the fault handler replaced
 * with a scratch page (each such page becomes inaccessible again). The
 * allocator calls it before releasing guarded regions; the runner after each
 * kernel. */
void tpurt_debug_restore_patches(void);
/* The allocator's bookkeeping for tpurt_debug_stats. */
void tpurt_debug_note_alloc(int64_t quarantined_delta, bool new_alloc);

/* ---- guarded allocation (guarded.c): the allocator hooks of Debug mode ---- */
bool tpurt_debug_guarded_allocate(tpurt_device_t* device, size_t bytes, void** out_ptr);
bool tpurt_debug_guarded_free(tpurt_device_t* device, void* ptr);
bool tpurt_debug_guarded_live(tpurt_device_t* device, void* ptr);
/* Releases every quarantined region (Debug mode has ended). */
void tpurt_debug_quarantine_flush(void);

/* ---- host access windows (rule 5 of debug.c) ----
 * In Debug mode a live guarded buffer is inaccessible outside the windows the
 * runtime opens around its own touches of it: the checked runner around a
 * kernel (the op's tensors), the host and device copies (debug_mode.c).
 * Any other touch faults and is reported as host code touching device memory.
 *
 * Opens access to the live guarded buffer holding `p` (Debug mode; else, and
 * for memory that is not a live guarded buffer, nothing). Gives the token
 * for tpurt_debug_access_end in *out_token (0: nothing was opened). Windows
 * nest and may be open on several threads at once (counted per buffer).
 * RESOURCE_EXHAUSTED (nothing opened) when the pages cannot be made
 * accessible: the process is at its limit of memory mappings. */
tpurt_status_t tpurt_debug_access_begin(const void* p, uintptr_t* out_token);
void tpurt_debug_access_end(uintptr_t token);
/* The kernel's limit of memory mappings per process (vm.max_map_count, read
 * once; 65530 when it cannot be read). */
long tpurt_debug_max_map_count(void);
/* True while live guarded buffers are kept inaccessible outside windows. */
bool tpurt_debug_protecting(void);
/* The mode changed (device.c, after waiting for the chips to be idle):
 * protects (on) or opens (off) every live guarded buffer with no window. */
void tpurt_debug_set_protecting(bool on);

#endif /* TPURT_EXEC_DEBUG_DEBUG_H_ */
