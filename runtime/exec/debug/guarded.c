/* Debug mode's allocations (rules 1 and 2 of debug.c), installed as the
 * caching allocator's hooks while the process is in Debug mode: every
 * allocation gets pages of its own between two guard pages, 64-byte aligned
 * and ending within 64 bytes of the trailing guard; a guarded block freed in
 * Debug mode is quarantined (no access, not reused) up to a budget per chip
 * (TORCH_TPU_DEBUG_QUARANTINE_BYTES, default a quarter of HBM) and a number
 * of regions for the process (MAX_QUARANTINED), oldest out first; leaving
 * Debug mode releases the quarantine. A guarded block freed outside Debug
 * mode is released at once. The regions are the ones the fault handler knows
 * (debug.c's table).
 *
 * Mappings. Every range with its own protection is a mapping of its own,
 * and a process has at most vm.max_map_count of them (65530 by default):
 * past it mprotect fails. Quarantined regions are closed and merge with each
 * other, but a region given back to HBM opens a hole that later regions of
 * other sizes fill only in part, so each quarantined region could end up
 * between open slivers, one mapping or two each. Hence: a region leaving the
 * quarantine is kept closed as a spare and the next allocation of the same
 * page count takes it over in place (a training loop allocates the same
 * sizes every step, so its layout, and its mapping count, stop changing);
 * spares are bounded (MAX_SPARES per chip, and the byte budget) and the
 * oldest go back to HBM; and the quarantine holds at most MAX_QUARANTINED
 * regions, an eighth of vm.max_map_count. */
#include <stdlib.h>

#include "base/bytes.h"
#include "base/log.h"
#include "exec/debug/debug.h"

#define ROUND_UP(x, a) (((x) + (a) - 1) & ~(uint64_t)((a) - 1))
#define MAX_CHIPS TPURT_MAX_CHIPS
#define MAX_SPARES 1024

typedef struct quarantine_t {
  uintptr_t start;
  uint64_t bytes;
  tpurt_device_t* device;
  struct quarantine_t* next;
} quarantine_t;

/* One lock over the quarantine and the per-chip budgets. Order: this lock,
 * then the allocator's (through tpurt_allocator_account). */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static quarantine_t *g_head, *g_tail;
static uint64_t g_bytes[MAX_CHIPS];  /* quarantined per chip */
static uint64_t g_budget[MAX_CHIPS]; /* 0: not read yet */
static uint64_t g_count;             /* quarantined regions, every chip */
/* Spares: regions out of the quarantine, still closed, newest first. */
static quarantine_t* g_spares[MAX_CHIPS];
static uint64_t g_spare_count[MAX_CHIPS], g_spare_bytes[MAX_CHIPS];
static bool g_warned;

static int chip_slot(tpurt_device_t* d) { return d->index < MAX_CHIPS ? d->index : MAX_CHIPS - 1; }

/* At most an eighth of the mapping limit quarantined: each region costs one
 * or two mappings, and live buffers and the rest of the process need theirs. */
static uint64_t max_quarantined(void) {
  long m = tpurt_debug_max_map_count() / 8;
  return m > 16 ? (uint64_t)m : 16;
}

static uint64_t budget_locked(tpurt_device_t* d) {
  int i = d->index < MAX_CHIPS ? d->index : MAX_CHIPS - 1;
  if (!g_budget[i]) {
    uint64_t b = d->hbm_bytes / 4;
    const char* qb = getenv("TORCH_TPU_DEBUG_QUARANTINE_BYTES");
    if (qb && *qb && !tpurt_bytes_parse(qb, &b)) {
      TPURT_LOG(WARNING, "TORCH_TPU_DEBUG_QUARANTINE_BYTES=%s: not a byte count; using %llu", qb,
                (unsigned long long)(d->hbm_bytes / 4));
      b = d->hbm_bytes / 4;
    }
    g_budget[i] = b ? b : 1; /* 1: quarantine nothing (no region is that small) */
  }
  return g_budget[i] > 1 ? g_budget[i] : 0;
}

static tpurt_status_t protect(tpurt_device_t* d, uintptr_t p, uint64_t bytes, uint32_t access) {
  return d->driver->memory_protect(d->hal, (void*)p, bytes, access);
}

/* Gives a guarded region back to HBM, accessible again. */
static void release_region(tpurt_device_t* d, uintptr_t start, uint64_t bytes) {
  tpurt_debug_restore_patches(); /* none may point into it afterwards */
  tpurt_status_t s = protect(d, start, bytes, TPURT_HAL_ACCESS_READ | TPURT_HAL_ACCESS_WRITE |
                                                TPURT_HAL_ACCESS_REMAP);
  tpurt_debug_region_remove(start);
  if (s) {
    /* Unusable as ordinary memory: keep it out of HBM rather than hand out
     * pages that fault. */
    TPURT_LOG(ERROR, "Debug mode: %s; %llu bytes of HBM stay reserved", tpurt_status_message(s),
              (unsigned long long)bytes);
    tpurt_status_free(s);
    return;
  }
  d->driver->memory_free(d->hal, (void*)start, bytes);
  tpurt_allocator_account(d->allocator, -(int64_t)bytes, 0, false, false);
}

/* Takes *pp (a quarantined region) out of the quarantine. g_lock held. */
static quarantine_t* unlink_locked(quarantine_t** pp, quarantine_t* prev) {
  quarantine_t* q = *pp;
  *pp = q->next;
  if (g_tail == q) g_tail = prev;
  g_bytes[chip_slot(q->device)] -= q->bytes;
  g_count--;
  tpurt_debug_note_alloc(-(int64_t)q->bytes, false);
  q->next = NULL;
  return q;
}

/* A region out of the quarantine becomes its chip's newest spare; the oldest
 * spares over the bounds go back to HBM. g_lock held. */
static void spare_add_locked(quarantine_t* q, uint64_t budget) {
  int i = chip_slot(q->device);
  q->next = g_spares[i];
  g_spares[i] = q;
  g_spare_count[i]++;
  g_spare_bytes[i] += q->bytes;
  while (g_spare_count[i] > MAX_SPARES || (g_spare_bytes[i] > budget && g_spare_count[i] > 1)) {
    quarantine_t** pp = &g_spares[i];
    while ((*pp)->next) pp = &(*pp)->next;
    quarantine_t* old = *pp;
    *pp = NULL;
    g_spare_count[i]--;
    g_spare_bytes[i] -= old->bytes;
    release_region(old->device, old->start, old->bytes);
    free(old);
  }
}

static void spares_flush_locked(int i) {
  while (g_spares[i]) {
    quarantine_t* q = g_spares[i];
    g_spares[i] = q->next;
    release_region(q->device, q->start, q->bytes);
    free(q);
  }
  g_spare_count[i] = g_spare_bytes[i] = 0;
}

void tpurt_debug_quarantine_flush(void) {
  pthread_mutex_lock(&g_lock);
  while (g_head) {
    quarantine_t* q = unlink_locked(&g_head, NULL);
    release_region(q->device, q->start, q->bytes);
    free(q);
  }
  for (int i = 0; i < MAX_CHIPS; ++i) spares_flush_locked(i);
  pthread_mutex_unlock(&g_lock);
}

/* A spare of exactly `region` bytes on d made live again for `bytes`, or 0. */
static uintptr_t spare_take(tpurt_device_t* d, size_t bytes, uint64_t region, uint64_t span) {
  int i = chip_slot(d);
  pthread_mutex_lock(&g_lock);
  quarantine_t** pp = &g_spares[i];
  while (*pp && (*pp)->bytes != region) pp = &(*pp)->next;
  quarantine_t* q = *pp;
  if (q) {
    *pp = q->next;
    g_spare_count[i]--;
    g_spare_bytes[i] -= q->bytes;
  }
  pthread_mutex_unlock(&g_lock);
  if (!q) return 0;
  uint64_t page = tpurt_debug_page_size();
  uintptr_t ptr = q->start + page + (region - 2 * page) - span;
  tpurt_debug_region_t reg = {.start = q->start, .end = q->start + region, .ptr = ptr, .size = bytes,
                              .span = span, .device = d, .state = TPURT_DEBUG_REGION_LIVE};
  tpurt_status_t s = tpurt_debug_region_reuse(&reg);
  if (s) {
    tpurt_status_free(s);
    pthread_mutex_lock(&g_lock);
    release_region(d, q->start, q->bytes);
    pthread_mutex_unlock(&g_lock);
    free(q);
    return 0;
  }
  free(q);
  tpurt_allocator_account(d->allocator, 0, (int64_t)span, true, false);
  tpurt_debug_note_alloc(0, true);
  return ptr;
}

/* A guarded region of `bytes`; 0 (nothing changed) when HBM or the host cannot
 * give one. */
static uintptr_t region_new(tpurt_device_t* d, size_t bytes) {
  uint64_t page = tpurt_debug_page_size();
  uint64_t span = bytes ? ROUND_UP((uint64_t)bytes, TPURT_DEBUG_ALIGN) : TPURT_DEBUG_ALIGN;
  uint64_t data = ROUND_UP(span, page);
  uint64_t region = data + 2 * page;
  uintptr_t reused = spare_take(d, bytes, region, span);
  if (reused) return reused;
  uint64_t raw_bytes = region + page - 512; /* room to start at a page boundary */
  if (raw_bytes > d->hbm_bytes - tpurt_allocator_reserved(d->allocator)) return 0;
  void* raw = NULL;
  tpurt_status_t s = d->driver->memory_alloc(d->hal, raw_bytes, &raw);
  if (s) {
    tpurt_status_free(s);
    return 0;
  }
  uintptr_t r0 = (uintptr_t)raw, start = ROUND_UP(r0, page), end = start + region;
  if (start > r0) d->driver->memory_free(d->hal, raw, start - r0);
  if (r0 + raw_bytes > end) d->driver->memory_free(d->hal, (void*)end, r0 + raw_bytes - end);
  uintptr_t ptr = start + page + data - span;
  tpurt_debug_region_t reg = {.start = start, .end = end, .ptr = ptr, .size = bytes, .span = span,
                              .device = d, .state = TPURT_DEBUG_REGION_LIVE};
  s = protect(d, start, page, TPURT_HAL_ACCESS_DISCARD);
  if (!s) s = protect(d, end - page, page, TPURT_HAL_ACCESS_DISCARD);
  /* The canary goes in before region_add closes the data pages (rule 5 of
   * debug.c: a live buffer is inaccessible outside access windows). */
  if (!s) memset((void*)(ptr + bytes), TPURT_DEBUG_CANARY, span - bytes);
  if (!s) s = tpurt_debug_region_add(&reg);
  if (s) {
    pthread_mutex_lock(&g_lock);
    if (!g_warned) {
      g_warned = true;
      TPURT_LOG(WARNING, "Debug mode: allocating without guard pages from now on when they cannot be "
                "had (%s)", tpurt_status_message(s));
    }
    pthread_mutex_unlock(&g_lock);
    tpurt_status_free(s);
    tpurt_status_free(protect(d, start, region, TPURT_HAL_ACCESS_READ | TPURT_HAL_ACCESS_WRITE));
    d->driver->memory_free(d->hal, (void*)start, region);
    return 0;
  }
  tpurt_allocator_account(d->allocator, (int64_t)region, (int64_t)span, true, false);
  tpurt_debug_note_alloc(0, true);
  return ptr;
}

bool tpurt_debug_guarded_allocate(tpurt_device_t* d, size_t bytes, void** out_ptr) {
  if (bytes > d->hbm_bytes || !tpurt_debug_guards_supported(d)) return false;
  uintptr_t p = region_new(d, bytes);
  if (!p) {
    pthread_mutex_lock(&g_lock);
    bool had = g_spares[chip_slot(d)] != NULL;
    for (quarantine_t* q = g_head; q && !had; q = q->next) had = q->device == d;
    pthread_mutex_unlock(&g_lock);
    if (had) {
      tpurt_debug_quarantine_flush();
      p = region_new(d, bytes);
    }
  }
  if (!p) {
    tpurt_allocator_release_cached(d->allocator);
    p = region_new(d, bytes);
  }
  /* No guarded range to be had: an ordinary block rather than a failure. */
  if (!p) return false;
  *out_ptr = (void*)p;
  return true;
}

bool tpurt_debug_guarded_live(tpurt_device_t* d, void* ptr) {
  tpurt_debug_region_t r;
  /* Guarded blocks are freed only after the whole device is idle. */
  return tpurt_debug_region_find((uintptr_t)ptr, &r) && r.ptr == (uintptr_t)ptr &&
         r.state == TPURT_DEBUG_REGION_LIVE && r.device == d;
}

bool tpurt_debug_guarded_free(tpurt_device_t* d, void* ptr) {
  tpurt_debug_region_t r;
  if (!tpurt_debug_region_find((uintptr_t)ptr, &r) || r.ptr != (uintptr_t)ptr ||
      r.state != TPURT_DEBUG_REGION_LIVE || r.device != d)
    return false;
  tpurt_debug_canary_check(&r, "memory_free");
  tpurt_allocator_account(d->allocator, 0, (int64_t)r.span, false, true);
  /* Queued work may still read or write the block (a copy the host queued
   * just before freeing its source, as resize_ does): it runs while the block
   * is still live, so its access window opens. */
  tpurt_device_wait_idle(d);
  tpurt_debug_region_set_state(r.start, TPURT_DEBUG_REGION_FREED); /* a second free is ignored */
  uint64_t bytes = r.end - r.start;
  pthread_mutex_lock(&g_lock);
  uint64_t budget = budget_locked(d);
  quarantine_t* q = NULL;
  if (tpurt_exec_mode_get() == TPURT_EXEC_DEBUG && budget > 0 && (q = malloc(sizeof(*q)))) {
    tpurt_status_t s = protect(d, r.start, bytes, TPURT_HAL_ACCESS_DISCARD);
    if (!s) {
      int i = chip_slot(d);
      *q = (quarantine_t){.start = r.start, .bytes = bytes, .device = d};
      if (g_tail) g_tail->next = q;
      else g_head = q;
      g_tail = q;
      g_bytes[i] += bytes;
      g_count++;
      tpurt_debug_note_alloc((int64_t)bytes, false);
      /* Over this chip's budget: its oldest become spares (others stay). */
      while (g_bytes[i] > budget && g_head != q) {
        quarantine_t **pp = &g_head, *prev = NULL;
        while (*pp != q && (*pp)->device != d) {
          prev = *pp;
          pp = &(*pp)->next;
        }
        if (*pp == q) break;
        spare_add_locked(unlink_locked(pp, prev), budget);
      }
      /* Too many regions for the process's mappings: the oldest of any chip. */
      while (g_count > max_quarantined() && g_head != q) {
        quarantine_t* old = g_head;
        spare_add_locked(unlink_locked(&g_head, NULL), budget_locked(old->device));
      }
      pthread_mutex_unlock(&g_lock);
      return true;
    }
    tpurt_status_free(s);
    free(q);
  }
  pthread_mutex_unlock(&g_lock);
  release_region(d, r.start, bytes);
  return true;
}
