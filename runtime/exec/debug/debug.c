/* Debug mode's checks: guarded device memory and the fault handler that
 * reports a touch of it, the checked kernel runner, and the NaN/Inf check.
 *
 * The rules:
 *  1. Every allocation made in Debug mode (guarded.c) gets pages of its
 *     own: [guard page | data pages | guard page]. The buffer ends at most
 *     63 bytes before the trailing guard page (allocations stay 64-byte
 *     aligned, which vectorized kernels rely on); those pad bytes hold a
 *     canary checked after every kernel that uses the buffer and at free.
 *  2. A buffer freed in Debug mode is quarantined: its pages get no access
 *     (and their contents are dropped) and are not reused, until the
 *     quarantine exceeds its budget (TORCH_TPU_DEBUG_QUARANTINE_BYTES) and the
 *     oldest is released. Allocations made in Strict mode are not guarded;
 *     a guarded buffer freed outside Debug mode is released at once.
 *  3. A touch of a guard page or of quarantined memory faults (SIGSEGV). The
 *     handler looks the address up in the region table; a fault outside any
 *     region is not ours and goes to the previous handler. For ours it
 *     records one violation (the first since it was last reported): the op
 *     whose kernel is running, or "host code" when no kernel runs, read or
 *     write, the address and where it lies ("offset 4096 of a 4096-byte
 *     buffer (0 bytes past its end)", "in a freed 4096-byte buffer (offset 8)").
 *  4. The faulting code then goes on: the handler maps a private scratch page
 *     over the faulting page (writes land there, reads see zeros) and
 *     returns. This works on any thread (compute threads, OpenBLAS's) and
 *     never unwinds a kernel holding locks, which a siglongjmp out of the
 *     kernel would; device data is never written, because the scratch page
 *     is private. After the kernel the runner maps the guard back and fails
 *     the op with INTERNAL ("aten::x: device memory violation: ..."), which
 *     PyTorch raises as RuntimeError at the line that issued the op (Debug
 *     mode is synchronous). A host-code violation is reported by the next
 *     op, which then does not run, by the next host copy or synchronize
 *     (sync points), and by tpurt_debug_take_violation. More
 *     than MAX_PATCHES pages patched before the runner restores them is a
 *     runaway: the handler prints the report and lets the fault kill the
 *     process.
 *  5. Live buffers are inaccessible too, outside access windows. While the
 *     process is in Debug mode, a live guarded buffer's data pages have no
 *     access, except while a window is open on it: the checked runner opens
 *     the buffers of the op's tensors (args and outputs) around the kernel
 *     and its checks; the runtime's copies (debug_mode.c: host copies and
 *     device copies) open the buffers they copy from/to; the canary check opens
 *     the buffer it reads. Windows are counted per buffer (they nest, and a
 *     queue's copy may overlap a kernel on another queue: mprotect is
 *     process-wide, so a buffer closes only when its last window does). So
 *     a touch of a live buffer by anything else faults: host code (Python
 *     through ctypes, C++ dereferencing a device pointer) is reported as
 *     "host code touched device memory at 0x.. (offset N of a S-byte
 *     buffer)" by the next op, host copy or synchronize; a kernel touching a
 *     live buffer that is none of its op's tensors is reported naming the
 *     op. Leaving Debug mode opens every live guarded buffer; entering it
 *     (after the chips are idle: queued Strict work may use them) closes
 *     them. One lock (g_prot_lock) orders every change of a live buffer's
 *     protection and of the region table. The unit is the buffer, not a
 *     view's bytes: a kernel touching its tensor's buffer outside the view
 *     is not caught (only past the buffer).
 *  6. Checked kernels run one at a time (a process-wide lock), so a fault
 *     during a kernel belongs to that kernel.
 *  7. NaN/Inf (TORCH_TPU_DEBUG_NANS=1, or =nan for NaN only): after a kernel
 *     succeeds, each floating output is scanned; the first NaN/Inf fails the
 *     op with ABORTED "op aten::x produced NaN in output 0". Ops that produce
 *     Inf on purpose (masked_fill(-inf), full(inf)) are reported too; use
 *     =nan for those programs.
 */
#include "exec/debug/debug.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "base/log.h"

#define MAX_PATCHES 256
#define PATCH_NONE ((uintptr_t)1) /* a reserved patch slot whose mmap failed */
#define MSG_BYTES 512

/* ---- the region table: sorted by start, guarded by a spinlock the fault
 * handler can take (no code holding it touches device memory) ---- */

static atomic_flag g_table_lock = ATOMIC_FLAG_INIT;
/* Held (outside the table lock) by every change of the table and of a live
 * region's protection (rule 5); never taken by the fault handler. Order:
 * allocator lock -> g_patch_lock -> g_prot_lock -> table lock. */
static pthread_mutex_t g_prot_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic bool g_protecting; /* live regions closed outside windows */
static tpurt_debug_region_t* g_regions;
static size_t g_num_regions, g_cap_regions;
static _Atomic size_t g_num_regions_pub; /* g_num_regions, for lock-free fast paths */
static uint64_t g_page;

static void table_lock(void) {
  while (atomic_flag_test_and_set_explicit(&g_table_lock, memory_order_acquire)) {
  }
}
static void table_unlock(void) { atomic_flag_clear_explicit(&g_table_lock, memory_order_release); }

uint64_t tpurt_debug_page_size(void) {
  if (!g_page) {
    long p = sysconf(_SC_PAGESIZE);
    g_page = p > 0 ? (uint64_t)p : 4096;
  }
  return g_page;
}

/* Index of the first region with start > addr. Call under the lock. */
static size_t upper_bound(uintptr_t addr) {
  size_t lo = 0, hi = g_num_regions;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (g_regions[mid].start <= addr) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static bool find_locked(uintptr_t addr, tpurt_debug_region_t* out) {
  size_t i = upper_bound(addr);
  if (i == 0) return false;
  const tpurt_debug_region_t* r = &g_regions[i - 1];
  if (addr >= r->end) return false;
  *out = *r;
  return true;
}

bool tpurt_debug_region_find(uintptr_t addr, tpurt_debug_region_t* out) {
  table_lock();
  bool ok = find_locked(addr, out);
  table_unlock();
  return ok;
}

static void install_handler(void);

/* The data pages of a region: everything between its guard pages. */
static tpurt_status_t data_protect(const tpurt_debug_region_t* r, bool open) {
  tpurt_device_t* d = r->device;
  uint64_t page = tpurt_debug_page_size();
  return d->driver->memory_protect(d->hal, (void*)(r->start + page), r->end - r->start - 2 * page,
                                   open ? (TPURT_HAL_ACCESS_READ | TPURT_HAL_ACCESS_WRITE) : 0);
}

tpurt_status_t tpurt_debug_region_add(const tpurt_debug_region_t* r) {
  install_handler();
  pthread_mutex_lock(&g_prot_lock);
  if (r->state == TPURT_DEBUG_REGION_LIVE && atomic_load(&g_protecting)) {
    tpurt_status_t s = data_protect(r, false);
    if (s) {
      pthread_mutex_unlock(&g_prot_lock);
      return s;
    }
  }
  table_lock();
  if (g_num_regions == g_cap_regions) {
    size_t cap = g_cap_regions ? g_cap_regions * 2 : 256;
    /* realloc under the spinlock: the handler only reads, never allocates. */
    tpurt_debug_region_t* n = realloc(g_regions, cap * sizeof(*n));
    if (!n) {
      table_unlock();
      if (r->state == TPURT_DEBUG_REGION_LIVE && atomic_load(&g_protecting))
        tpurt_status_free(data_protect(r, true));
      pthread_mutex_unlock(&g_prot_lock);
      return TPURT_STATUS(RESOURCE_EXHAUSTED, "Debug mode: out of host memory for the region table");
    }
    g_regions = n;
    g_cap_regions = cap;
  }
  size_t i = upper_bound(r->start);
  memmove(&g_regions[i + 1], &g_regions[i], (g_num_regions - i) * sizeof(*g_regions));
  g_regions[i] = *r;
  g_regions[i].opens = 0;
  ++g_num_regions;
  atomic_store(&g_num_regions_pub, g_num_regions);
  table_unlock();
  pthread_mutex_unlock(&g_prot_lock);
  return TPURT_OK;
}

static tpurt_debug_region_t* at_start_locked(uintptr_t start) {
  size_t i = upper_bound(start);
  return (i > 0 && g_regions[i - 1].start == start) ? &g_regions[i - 1] : NULL;
}

bool tpurt_debug_region_set_state(uintptr_t start, uint32_t state) {
  pthread_mutex_lock(&g_prot_lock);
  table_lock();
  tpurt_debug_region_t* r = at_start_locked(start);
  if (r) r->state = state;
  table_unlock();
  pthread_mutex_unlock(&g_prot_lock);
  return r != NULL;
}

tpurt_status_t tpurt_debug_region_reuse(const tpurt_debug_region_t* r) {
  tpurt_debug_restore_patches(); /* no scratch page may stand for its data */
  pthread_mutex_lock(&g_prot_lock);
  table_lock();
  tpurt_debug_region_t* cur = at_start_locked(r->start);
  bool ok = cur && cur->state == TPURT_DEBUG_REGION_FREED && cur->end == r->end && cur->device == r->device;
  table_unlock();
  tpurt_status_t s = ok ? data_protect(r, true) : TPURT_STATUS(INTERNAL, "Debug mode: no freed region at %p",
                                                                (void*)r->start);
  if (!s) {
    memset((void*)(r->ptr + r->size), TPURT_DEBUG_CANARY, r->span - r->size);
    if (atomic_load(&g_protecting)) s = data_protect(r, false);
  }
  if (!s) {
    table_lock();
    *cur = *r;
    cur->state = TPURT_DEBUG_REGION_LIVE;
    cur->opens = 0;
    table_unlock();
  }
  pthread_mutex_unlock(&g_prot_lock);
  return s;
}

void tpurt_debug_region_remove(uintptr_t start) {
  pthread_mutex_lock(&g_prot_lock);
  table_lock();
  tpurt_debug_region_t* r = at_start_locked(start);
  if (r) {
    size_t i = (size_t)(r - g_regions);
    memmove(&g_regions[i], &g_regions[i + 1], (g_num_regions - i - 1) * sizeof(*g_regions));
    --g_num_regions;
    atomic_store(&g_num_regions_pub, g_num_regions);
  }
  table_unlock();
  pthread_mutex_unlock(&g_prot_lock);
}

bool tpurt_debug_guards_supported(tpurt_device_t* d) {
  static int env = -1; /* TORCH_TPU_DEBUG_GUARDS, read once */
  if (env < 0) {
    const char* v = getenv("TORCH_TPU_DEBUG_GUARDS");
    env = (v && v[0] == '0' && v[1] == 0) ? 0 : 1;
  }
  return env && d && d->driver->struct_size >= sizeof(tpurt_hal_driver_t) &&
         d->driver->memory_protect && d->hbm_base && d->props.hbm_fd >= 0;
}

/* ---- counters ---- */

static _Atomic uint64_t g_violations, g_patched_total, g_guarded_allocs;
static _Atomic int64_t g_quarantined;

void tpurt_debug_note_alloc(int64_t quarantined_delta, bool new_alloc) {
  if (quarantined_delta) atomic_fetch_add(&g_quarantined, quarantined_delta);
  if (new_alloc) atomic_fetch_add(&g_guarded_allocs, 1);
}

void tpurt_debug_stats(tpurt_debug_stats_t* out) {
  if (!out) return;
  out->violations = atomic_load(&g_violations);
  out->patched_pages = atomic_load(&g_patched_total);
  out->guarded_allocs = atomic_load(&g_guarded_allocs);
  int64_t q = atomic_load(&g_quarantined);
  out->quarantined_bytes = q > 0 ? (uint64_t)q : 0;
}

/* ---- the violation slot: written by the fault handler (async-signal-safe
 * code only), taken by the runner ---- */

enum { SLOT_EMPTY = 0, SLOT_WRITING, SLOT_READY };
static _Atomic int g_slot_state;
static char g_slot_msg[MSG_BYTES];
static _Atomic bool g_slot_in_kernel; /* the violation happened inside a kernel */

/* The running checked kernel's name, for the handler. */
static char g_op_name[160];
static _Atomic bool g_in_kernel;

static _Atomic uintptr_t g_patches[MAX_PATCHES];
static _Atomic int g_num_patches;

static struct sigaction g_old_segv;
static pthread_once_t g_handler_once = PTHREAD_ONCE_INIT;

/* Minimal formatting into a fixed buffer, safe in a signal handler. */
typedef struct sbuf_t {
  char* p;
  size_t n, cap;
} sbuf_t;
static void sb_str(sbuf_t* b, const char* s) {
  while (*s && b->n + 1 < b->cap) b->p[b->n++] = *s++;
  b->p[b->n] = 0;
}
static void sb_u64(sbuf_t* b, uint64_t v) {
  char t[24];
  int i = 0;
  do t[i++] = (char)('0' + v % 10); while ((v /= 10) && i < 23);
  char o[24];
  for (int k = 0; k < i; ++k) o[k] = t[i - 1 - k];
  o[i] = 0;
  sb_str(b, o);
}
static void sb_hex(sbuf_t* b, uint64_t v) {
  char o[20] = "0x";
  int i = 2;
  bool started = false;
  for (int s = 60; s >= 0; s -= 4) {
    int d = (int)((v >> s) & 15);
    if (d || started || s == 0) {
      o[i++] = "0123456789abcdef"[d];
      started = true;
    }
  }
  o[i] = 0;
  sb_str(b, o);
}

/* "read at 0x..: offset 4096 of a 4096-byte buffer (0 bytes past its end)" */
static void describe(sbuf_t* b, const tpurt_debug_region_t* r, uintptr_t addr, int access) {
  sb_str(b, access == 1 ? "write" : access == 0 ? "read" : "access");
  sb_str(b, " at ");
  sb_hex(b, addr);
  uint64_t page = g_page;
  if (addr < r->start + page || (r->state == TPURT_DEBUG_REGION_LIVE && addr < r->ptr)) {
    sb_str(b, ": ");
    sb_u64(b, r->ptr - addr);
    sb_str(b, " bytes before the start of a ");
    sb_u64(b, r->size);
    sb_str(b, "-byte buffer");
  } else if (addr >= r->end - page || (r->state == TPURT_DEBUG_REGION_LIVE && addr >= r->ptr + r->size)) {
    sb_str(b, ": offset ");
    sb_u64(b, addr - r->ptr);
    sb_str(b, " of a ");
    sb_u64(b, r->size);
    sb_str(b, "-byte buffer (");
    sb_u64(b, addr - (r->ptr + r->size));
    sb_str(b, " bytes past its end)");
  } else if (r->state == TPURT_DEBUG_REGION_FREED) {
    sb_str(b, ": in a freed ");
    sb_u64(b, r->size);
    sb_str(b, "-byte buffer (offset ");
    if (addr >= r->ptr) sb_u64(b, addr - r->ptr);
    else {
      sb_str(b, "-");
      sb_u64(b, r->ptr - addr);
    }
    sb_str(b, ")");
  } else {
    /* A live buffer no window is open on: a kernel's stray touch of
     * another buffer (host code gets its own wording: on_segv). */
    sb_str(b, ": offset ");
    sb_u64(b, addr - r->ptr);
    sb_str(b, " of a live ");
    sb_u64(b, r->size);
    sb_str(b, "-byte buffer that is not one of the op's tensors");
  }
}

/* Host code inside a live buffer: "host code touched device memory at 0x..
 * (offset 8 of a 64-byte buffer): a read outside any kernel or runtime copy" */
static bool host_live_touch(const tpurt_debug_region_t* r, uintptr_t addr) {
  return r->state == TPURT_DEBUG_REGION_LIVE && addr >= r->ptr && addr < r->ptr + r->size;
}
static void describe_host_live(sbuf_t* b, const tpurt_debug_region_t* r, uintptr_t addr, int access) {
  sb_str(b, "host code touched device memory at ");
  sb_hex(b, addr);
  sb_str(b, " (offset ");
  sb_u64(b, addr - r->ptr);
  sb_str(b, " of a ");
  sb_u64(b, r->size);
  sb_str(b, "-byte buffer): ");
  sb_str(b, access == 1 ? "a write" : access == 0 ? "a read" : "an access");
  sb_str(b, " outside any kernel or runtime copy (Debug mode keeps live device memory inaccessible to "
            "host code; copy it with .cpu() / .to())");
}

static void chain_to_old(int sig, siginfo_t* si, void* uc) {
  if ((g_old_segv.sa_flags & SA_SIGINFO) && g_old_segv.sa_sigaction) {
    g_old_segv.sa_sigaction(sig, si, uc);
  } else if (g_old_segv.sa_handler != SIG_DFL && g_old_segv.sa_handler != SIG_IGN) {
    g_old_segv.sa_handler(sig);
  } else {
    /* Default action: put it back; the instruction faults again and the
     * process dies as it would have without us. */
    sigaction(SIGSEGV, &g_old_segv, NULL);
  }
}

static void on_segv(int sig, siginfo_t* si, void* ucv) {
  int saved_errno = errno;
  uintptr_t addr = (uintptr_t)si->si_addr;
  tpurt_debug_region_t r;
  if (si->si_code <= 0 || !tpurt_debug_region_find(addr, &r)) {
    errno = saved_errno;
    chain_to_old(sig, si, ucv);
    return;
  }
  int access = -1; /* unknown */
#if defined(__x86_64__)
  {
    ucontext_t* uc = ucv;
    access = (uc->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
  }
#endif
  bool in_kernel = atomic_load(&g_in_kernel);
  atomic_fetch_add(&g_violations, 1);
  char line[MSG_BYTES];
  sbuf_t b = {line, 0, sizeof line};
  line[0] = 0;
  int expected = SLOT_EMPTY;
  bool first = atomic_compare_exchange_strong(&g_slot_state, &expected, SLOT_WRITING);
  if (in_kernel) {
    sb_str(&b, g_op_name);
    sb_str(&b, ": device memory violation: ");
    describe(&b, &r, addr, access);
  } else if (host_live_touch(&r, addr)) {
    describe_host_live(&b, &r, addr, access);
  } else {
    sb_str(&b, "device memory violation by host code (no kernel running): ");
    describe(&b, &r, addr, access);
  }
  if (first) {
    memcpy(g_slot_msg, line, sizeof line);
    atomic_store(&g_slot_in_kernel, in_kernel);
    atomic_store(&g_slot_state, SLOT_READY);
  }
  uintptr_t pg = addr & ~(uintptr_t)(g_page - 1);
  int k = atomic_fetch_add(&g_num_patches, 1);
  void* p = MAP_FAILED;
  if (k < MAX_PATCHES)
    p = mmap((void*)pg, g_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) {
    /* Runaway (or no scratch page to be had): report and let the fault kill
     * the process rather than let the code go on touching device memory. */
    if (k < MAX_PATCHES) atomic_store(&g_patches[k], PATCH_NONE);
    sbuf_t e = {line, strlen(line), sizeof line};
    sb_str(&e, " -- too many faulting pages; aborting\n");
    ssize_t w = write(2, line, strlen(line));
    (void)w;
    sigaction(SIGSEGV, &g_old_segv, NULL);
    errno = saved_errno;
    return;
  }
  atomic_store(&g_patches[k], pg);
  atomic_fetch_add(&g_patched_total, 1);
  if (first) {
    sbuf_t e = {line, strlen(line), sizeof line};
    sb_str(&e, "\n");
    ssize_t w = write(2, "torch_tpu: ", 11);
    w = write(2, line, strlen(line));
    (void)w;
  }
  errno = saved_errno;
}

static void install_once(void) {
  tpurt_debug_page_size();
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  if (sigaction(SIGSEGV, &sa, &g_old_segv) != 0)
    TPURT_LOG(WARNING, "Debug mode: cannot install the SIGSEGV handler: guard faults will crash");
}

static void install_handler(void) { pthread_once(&g_handler_once, install_once); }

static pthread_mutex_t g_patch_lock = PTHREAD_MUTEX_INITIALIZER;

static void restore_page(uintptr_t pg) {
  tpurt_debug_region_t r;
  pthread_mutex_lock(&g_prot_lock);
  if (!tpurt_debug_region_find(pg, &r)) { /* released meanwhile: nothing to guard */
    pthread_mutex_unlock(&g_prot_lock);
    return;
  }
  tpurt_device_t* d = r.device;
  /* Guard and freed pages get no access again; their contents are not needed.
   * A live data page gets its data back, accessible only if the buffer is
   * open now (rule 5). */
  bool live_data = r.state == TPURT_DEBUG_REGION_LIVE && pg >= r.start + g_page && pg < r.end - g_page;
  uint32_t access = !live_data ? TPURT_HAL_ACCESS_DISCARD
                    : (r.opens > 0 || !atomic_load(&g_protecting)) ? (TPURT_HAL_ACCESS_READ | TPURT_HAL_ACCESS_WRITE)
                                                                    : 0;
  tpurt_status_t s = d->driver->memory_protect(d->hal, (void*)pg, g_page, access | TPURT_HAL_ACCESS_REMAP);
  pthread_mutex_unlock(&g_prot_lock);
  if (s) {
    TPURT_LOG(ERROR, "Debug mode: cannot restore the guard at %p: %s", (void*)pg, tpurt_status_message(s));
    tpurt_status_free(s);
  }
}

void tpurt_debug_restore_patches(void) {
  if (atomic_load(&g_num_patches) == 0) return;
  pthread_mutex_lock(&g_patch_lock);
  int done = 0;
  for (;;) {
    int raw = atomic_load(&g_num_patches);
    int n = raw < MAX_PATCHES ? raw : MAX_PATCHES;
    for (int i = done; i < n; ++i) {
      uintptr_t pg;
      /* Reserved by a handler that has not stored yet: it is about to. */
      while ((pg = atomic_exchange(&g_patches[i], 0)) == 0) {
      }
      if (pg != PATCH_NONE) restore_page(pg);
    }
    done = n;
    if (atomic_compare_exchange_strong(&g_num_patches, &raw, 0)) break;
  }
  pthread_mutex_unlock(&g_patch_lock);
}

static tpurt_status_t take_slot(bool* out_in_kernel) {
  if (atomic_load(&g_slot_state) != SLOT_READY) return TPURT_OK;
  char msg[MSG_BYTES];
  memcpy(msg, g_slot_msg, sizeof msg);
  msg[MSG_BYTES - 1] = 0;
  if (out_in_kernel) *out_in_kernel = atomic_load(&g_slot_in_kernel);
  atomic_store(&g_slot_state, SLOT_EMPTY);
  return TPURT_STATUS(INTERNAL, "%s", msg);
}

tpurt_status_t tpurt_debug_take_violation(void) {
  tpurt_debug_restore_patches();
  return take_slot(NULL);
}

/* Records a violation found by a check (not a fault), unless one is pending. */
static void record_violation(const char* msg, bool in_kernel) {
  int expected = SLOT_EMPTY;
  atomic_fetch_add(&g_violations, 1);
  if (!atomic_compare_exchange_strong(&g_slot_state, &expected, SLOT_WRITING)) return;
  snprintf(g_slot_msg, sizeof g_slot_msg, "%s", msg);
  atomic_store(&g_slot_in_kernel, in_kernel);
  atomic_store(&g_slot_state, SLOT_READY);
}

bool tpurt_debug_canary_check(const tpurt_debug_region_t* r, const char* who) {
  if (r->state != TPURT_DEBUG_REGION_LIVE || r->span <= r->size) return true;
  const uint8_t* pad = (const uint8_t*)(r->ptr + r->size);
  uint64_t n = r->span - r->size;
  uintptr_t w = 0;
  tpurt_status_t s = tpurt_debug_access_begin((const void*)r->ptr, &w); /* the pad is in its data pages */
  if (s) { /* cannot read it now (logged); the next check will */
    TPURT_LOG(WARNING, "%s: %s; canary not checked", who, tpurt_status_message(s));
    tpurt_status_free(s);
    return true;
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (pad[i] != TPURT_DEBUG_CANARY) {
      char msg[MSG_BYTES];
      snprintf(msg, sizeof msg,
               "%s: device memory violation: write at %p: offset %" PRIu64 " of a %" PRIu64
               "-byte buffer (%" PRIu64 " bytes past its end; found in its alignment padding)",
               who, (void*)(r->ptr + r->size + i), r->size + i, r->size, i);
      record_violation(msg, true);
      memset((void*)(r->ptr + r->size), TPURT_DEBUG_CANARY, n); /* report it once */
      tpurt_debug_access_end(w);
      return false;
    }
  }
  tpurt_debug_access_end(w);
  return true;
}

/* ---- NaN / Inf ---- */

static _Atomic int g_nan_mode = -1;

void tpurt_debug_set_nan_check(int mode) {
  atomic_store(&g_nan_mode, mode == TPURT_DEBUG_NANS_NAN_INF || mode == TPURT_DEBUG_NANS_NAN_ONLY
                                ? mode : TPURT_DEBUG_NANS_OFF);
}

int tpurt_debug_nan_check(void) {
  int m = atomic_load(&g_nan_mode);
  if (m >= 0) return m;
  const char* v = getenv("TORCH_TPU_DEBUG_NANS");
  m = TPURT_DEBUG_NANS_OFF;
  if (v && *v && strcmp(v, "0") != 0)
    m = (strcmp(v, "nan") == 0 || strcmp(v, "NaN") == 0) ? TPURT_DEBUG_NANS_NAN_ONLY : TPURT_DEBUG_NANS_NAN_INF;
  int expected = -1;
  atomic_compare_exchange_strong(&g_nan_mode, &expected, m);
  return atomic_load(&g_nan_mode);
}

/* 0: finite; 1: NaN; 2: Inf. Widening to double keeps NaN and Inf. */
static int classify(tpurt_dtype_t dt, const char* p) {
  double v = tpurt_dtype_load_f64(dt, p);
  return isnan(v) ? 1 : isinf(v) ? 2 : 0;
}

/* First non-finite element of t (strided walk); 0 if none. */
static int scan_tensor(const tpurt_tensor_t* t, int mode, int64_t* out_index) {
  if (!t->data || !tpurt_dtype_is_floating(t->dtype)) return 0;
  int64_t n = tpurt_tensor_numel(t);
  if (n <= 0) return 0;
  size_t item = tpurt_dtype_size(t->dtype);
  int64_t pos[TPURT_MAX_DIMS] = {0};
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    int c = classify(t->dtype, (const char*)t->data + off * (int64_t)item);
    if (c == 1 || (c == 2 && mode == TPURT_DEBUG_NANS_NAN_INF)) {
      *out_index = i;
      return c;
    }
    for (int d = t->ndim - 1; d >= 0; --d) {
      if (++pos[d] < t->sizes[d]) {
        off += t->strides[d];
        break;
      }
      off -= (t->sizes[d] - 1) * t->strides[d];
      pos[d] = 0;
    }
  }
  return 0;
}

static void op_name(const tpurt_op_call_t* call, char* out, size_t cap) {
  const char* name = call->name ? call->name : "?";
  if (call->overload && call->overload[0]) snprintf(out, cap, "aten::%s.%s", name, call->overload);
  else snprintf(out, cap, "aten::%s", name);
}

tpurt_status_t tpurt_debug_check_outputs(const tpurt_op_call_t* call, int mode) {
  if (mode == TPURT_DEBUG_NANS_OFF) return TPURT_OK;
  for (int32_t i = 0; i < call->num_outputs; ++i) {
    int64_t at = 0;
    int c = scan_tensor(&call->outputs[i], mode, &at);
    if (c) {
      char name[160];
      op_name(call, name, sizeof name);
      return TPURT_STATUS(ABORTED, "op %s produced %s in output %d (element %" PRId64 " of %" PRId64
                          "; TORCH_TPU_DEBUG_NANS is on)", name, c == 1 ? "NaN" : "Inf", (int)i, at,
                          tpurt_tensor_numel(&call->outputs[i]));
    }
  }
  return TPURT_OK;
}

/* ---- host access windows (rule 5) ---- */

long tpurt_debug_max_map_count(void) {
  static _Atomic long cached;
  long v = atomic_load(&cached);
  if (v > 0) return v;
  v = 65530; /* the kernel's default */
  FILE* f = fopen("/proc/sys/vm/max_map_count", "r");
  if (f) {
    long x = 0;
    if (fscanf(f, "%ld", &x) == 1 && x > 0) v = x;
    fclose(f);
  }
  atomic_store(&cached, v);
  return v;
}

bool tpurt_debug_protecting(void) { return atomic_load_explicit(&g_protecting, memory_order_relaxed); }

static void log_protect_error(tpurt_status_t s, const char* what) {
  TPURT_LOG(ERROR, "Debug mode: cannot %s a device buffer: %s", what, tpurt_status_message(s));
  tpurt_status_free(s);
}

tpurt_status_t tpurt_debug_access_begin(const void* p, uintptr_t* out_token) {
  *out_token = 0;
  /* Strict / DeferAndFuse: one load (and the mode's), nothing else. Counting
   * also while Debug mode is being entered (mode set, buffers not closed yet)
   * keeps a copy that starts then open when they close. */
  if (TPURT_LIKELY(!atomic_load_explicit(&g_protecting, memory_order_relaxed)) &&
      tpurt_exec_mode_get() != TPURT_EXEC_DEBUG)
    return TPURT_OK;
  if (!p || atomic_load_explicit(&g_num_regions_pub, memory_order_relaxed) == 0) return TPURT_OK;
  /* A page a stray touch patched must get the device's data back before the
   * buffer is used (not while a kernel runs: its own patches are its
   * runner's to restore after it). */
  if (!atomic_load(&g_in_kernel)) tpurt_debug_restore_patches();
  pthread_mutex_lock(&g_prot_lock);
  tpurt_debug_region_t* r = NULL;
  size_t i = upper_bound((uintptr_t)p); /* the table changes only under g_prot_lock */
  if (i > 0 && (uintptr_t)p < g_regions[i - 1].end && g_regions[i - 1].state == TPURT_DEBUG_REGION_LIVE)
    r = &g_regions[i - 1];
  tpurt_status_t s = TPURT_OK;
  if (r) {
    /* Opening splits the buffer's mapping out of its closed neighbours: the
     * one step here that can meet the process's mapping limit. Then the
     * buffer stays closed and the caller fails, rather than let a kernel
     * fault on it page after page. */
    if (r->opens == 0 && atomic_load(&g_protecting)) s = data_protect(r, true);
    if (!s) {
      table_lock(); /* the fault handler reads the table */
      r->opens++;
      table_unlock();
      *out_token = r->start;
    }
  }
  pthread_mutex_unlock(&g_prot_lock);
  if (s)
    return tpurt_status_annotate(s, "Debug mode: cannot open the device buffer at %p for access ("
                                 "\"Cannot allocate memory\" means the process has reached its limit "
                                 "of memory mappings, vm.max_map_count = %ld)",
                                 p, tpurt_debug_max_map_count());
  return TPURT_OK;
}

void tpurt_debug_access_end(uintptr_t token) {
  if (!token) return;
  pthread_mutex_lock(&g_prot_lock);
  table_lock();
  tpurt_debug_region_t* r = at_start_locked(token);
  bool close = false;
  tpurt_debug_region_t copy;
  if (r && r->opens > 0) {
    close = --r->opens == 0 && r->state == TPURT_DEBUG_REGION_LIVE;
    copy = *r;
  }
  table_unlock();
  if (close && atomic_load(&g_protecting)) {
    tpurt_status_t s = data_protect(&copy, false);
    if (s) log_protect_error(s, "close");
  }
  pthread_mutex_unlock(&g_prot_lock);
}

void tpurt_debug_set_protecting(bool on) {
  tpurt_debug_restore_patches(); /* a scratch page must not be opened or closed in place of data */
  pthread_mutex_lock(&g_prot_lock);
  if (atomic_load(&g_protecting) != on) {
    atomic_store(&g_protecting, on);
    for (size_t i = 0; i < g_num_regions; ++i) {
      const tpurt_debug_region_t* r = &g_regions[i];
      if (r->state != TPURT_DEBUG_REGION_LIVE || r->opens > 0) continue;
      tpurt_status_t s = data_protect(r, !on);
      if (s) log_protect_error(s, on ? "close" : "open");
    }
  }
  pthread_mutex_unlock(&g_prot_lock);
}

/* ---- the checked runner ---- */

static pthread_mutex_t g_run_lock = PTHREAD_MUTEX_INITIALIZER;

/* The windows one op's tensors open (their buffers; duplicates nest). */
typedef struct op_windows_t {
  uintptr_t local[32];
  uintptr_t* tokens;
  int n, cap;
} op_windows_t;

static tpurt_status_t windows_add(op_windows_t* w, const tpurt_tensor_t* t) {
  if (!t || !t->data) return TPURT_OK;
  uintptr_t tok = 0;
  TPURT_RETURN_IF_ERROR(tpurt_debug_access_begin(t->data, &tok));
  if (!tok) return TPURT_OK;
  if (w->n == w->cap) {
    int cap = w->cap * 2;
    uintptr_t* n = malloc((size_t)cap * sizeof(*n));
    if (!n) {
      tpurt_debug_access_end(tok);
      return TPURT_STATUS(RESOURCE_EXHAUSTED, "Debug mode: out of host memory opening an op's buffers");
    }
    memcpy(n, w->tokens, (size_t)w->n * sizeof(*n));
    if (w->tokens != w->local) free(w->tokens);
    w->tokens = n;
    w->cap = cap;
  }
  w->tokens[w->n++] = tok;
  return TPURT_OK;
}

static void windows_close(op_windows_t* w);

/* Opens every buffer of the op's tensors, or none (the first failure). */
static tpurt_status_t windows_open(op_windows_t* w, const tpurt_op_call_t* call) {
  w->tokens = w->local;
  w->n = 0;
  w->cap = 32;
  tpurt_status_t s = TPURT_OK;
  for (int32_t i = 0; i < call->num_outputs && !s; ++i) s = windows_add(w, &call->outputs[i]);
  for (int32_t i = 0; i < call->num_args && !s; ++i) {
    const tpurt_arg_t* a = &call->args[i];
    if (a->kind == TPURT_ARG_TENSOR) s = windows_add(w, a->v.tensor);
    else if (a->kind == TPURT_ARG_TENSOR_LIST)
      for (int32_t k = 0; k < a->count && !s; ++k) s = windows_add(w, a->v.tensors[k]);
  }
  if (s) windows_close(w);
  return s;
}

static void windows_close(op_windows_t* w) {
  for (int i = w->n - 1; i >= 0; --i) tpurt_debug_access_end(w->tokens[i]);
  if (w->tokens != w->local) free(w->tokens);
}

static void canary_check_tensor(const tpurt_tensor_t* t, const char* who) {
  if (!t || !t->data || g_num_regions == 0) return;
  tpurt_debug_region_t r;
  if (tpurt_debug_region_find((uintptr_t)t->data, &r)) tpurt_debug_canary_check(&r, who);
}

tpurt_status_t tpurt_debug_run_kernel(tpurt_device_t* device, const tpurt_op_def_t* op,
                                      const tpurt_op_call_t* call) {
  pthread_mutex_lock(&g_run_lock);
  char name[160];
  op_name(call, name, sizeof name);
  /* Host code touched guarded memory since the last op: report that first
   * (this op did not run). */
  tpurt_debug_restore_patches();
  tpurt_status_t s = take_slot(NULL);
  if (s) {
    pthread_mutex_unlock(&g_run_lock);
    return tpurt_status_annotate(s, "%s (not run)", name);
  }
  /* Exactly the op's buffers become accessible (rule 5); its checks below
   * read them too, so they close at the end. */
  op_windows_t win;
  s = windows_open(&win, call);
  if (s) {
    pthread_mutex_unlock(&g_run_lock);
    return tpurt_status_annotate(s, "%s (not run)", name);
  }
  memcpy(g_op_name, name, sizeof g_op_name);
  atomic_store(&g_in_kernel, true);
  s = tpurt_kernel_status_annotate(device->driver->dispatch_sync(device->hal, op->fn, op->flags, call, true), call);
  atomic_store(&g_in_kernel, false);
  tpurt_debug_restore_patches();
  for (int32_t i = 0; i < call->num_outputs; ++i) canary_check_tensor(&call->outputs[i], name);
  for (int32_t i = 0; i < call->num_args; ++i) {
    const tpurt_arg_t* a = &call->args[i];
    if (a->kind == TPURT_ARG_TENSOR) canary_check_tensor(a->v.tensor, name);
    else if (a->kind == TPURT_ARG_TENSOR_LIST)
      for (int32_t k = 0; k < a->count; ++k) canary_check_tensor(a->v.tensors[k], name);
  }
  tpurt_status_t v = take_slot(NULL);
  if (v) {
    /* The violation is the real error; a status the kernel returned after
     * reading scratch zeros is a consequence. */
    tpurt_status_free(s);
    s = v;
  }
  if (!s) s = tpurt_debug_check_outputs(call, tpurt_debug_nan_check());
  windows_close(&win);
  pthread_mutex_unlock(&g_run_lock);
  return s;
}

/* ---- the faulty kernel for tests ---- */

static tpurt_status_t touch_kernel(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  if (call->num_args < 1 || call->args[0].kind != TPURT_ARG_TENSOR || !call->args[0].v.tensor)
    return TPURT_STATUS(INVALID_ARGUMENT, "_debug_touch: expected (Tensor t, bool write)");
  const tpurt_tensor_t* t = call->args[0].v.tensor;
  bool write = call->num_args > 1 && call->args[1].kind == TPURT_ARG_BOOL && call->args[1].v.b;
  volatile uint8_t* p = t->data;
  int64_t n = tpurt_tensor_numel(t);
  int64_t st = t->ndim ? t->strides[0] : 1;
  unsigned sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (write) p[i * st] = (uint8_t)(p[i * st] + 1);
    else sum += p[i * st];
  }
  (void)sum;
  return TPURT_OK;
}

static const tpurt_op_def_t k_touch_op = {"_debug_touch", touch_kernel, touch_kernel, 0, TPURT_DTYPE_BIT(UINT8),
                                          TPURT_LAYOUT_STRIDED};

const tpurt_op_def_t* tpurt_debug_touch_op(void) { return &k_touch_op; }
