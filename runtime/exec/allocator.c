/* The caching allocator over a chip's HBM, in the spirit of PyTorch's CUDA
 * one. Segments are taken from HBM through the HAL (a first-fit coalescing
 * range allocator in the vtpu driver); blocks are split from segments and
 * merged back on free. Each queue has its own small (<= 1 MiB) and large
 * pools, searched best-fit through size-class bins, so a block freed by the
 * host is reused at once only by work on the queue it was allocated for
 * (stream-ordered: that queue runs in order). A block also used by another
 * queue (record_queue) waits until that queue has passed the free point.
 *
 * Rules that decide sizes:
 *  - every block is a multiple of 512 bytes and 512-aligned (0 bytes -> 512);
 *  - small requests take 2 MiB segments and split down to 512; large ones take
 *    20 MiB segments below 10 MiB, else their size rounded to 2 MiB, and split
 *    only when more than 1 MiB would remain;
 *  - when HBM cannot give a rounded segment, the exact size is tried; then all
 *    queues are waited for, whole free segments are released and free segment
 *    ends trimmed, and the request retried once; only then out of memory.
 *    So the limit is exactly the capacity, less what live blocks fragment.
 * One mutex guards everything; nothing here runs on the submit path.
 *
 * The eager mode may change allocation through its hooks (exec/allocator.h):
 * Debug mode serves every request itself with guarded pages
 * (exec/debug/guarded.c), DeferAndFuse learns of every free. Blocks the pools
 * do not know are offered to the modes (a guarded block outlives Debug mode). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/env.h"
#include "base/log.h"
#include "exec/allocator.h"
#include "exec/capture.h"
#include "exec/mode.h"
#include "exec/queue.h"

#define ALIGN 512u
#define SMALL_SIZE ((uint64_t)1 << 20)     /* largest "small" block */
#define SMALL_SEGMENT ((uint64_t)2 << 20)
#define LARGE_SEGMENT ((uint64_t)20 << 20)
#define MIN_LARGE_ALLOC ((uint64_t)10 << 20)
#define ROUND_LARGE ((uint64_t)2 << 20)
#define MAX_USES 8 /* other queues per block before record_queue falls back to a device wait */

/* Size classes: 8 bins per power of two from 512 up. */
#define NUM_BINS 448
#define BITMAP_WORDS (NUM_BINS / 64)

enum { BLOCK_FREE = 0, BLOCK_ALLOCATED, BLOCK_PENDING };

typedef struct segment_t segment_t;

typedef struct block_t {
  uintptr_t addr;
  uint64_t size;
  segment_t* seg;
  struct block_t* prev;     /* address neighbours within the segment */
  struct block_t* next;
  struct block_t* bin_prev; /* free: its bin; allocated: hash chain (bin_next) */
  struct block_t* bin_next;
  struct block_t* pending_next;
  uint8_t state;
  uint8_t num_uses;
  bool uses_overflow;
  tpurt_queue_t* uses[MAX_USES]; /* other queues that used it (record_queue) */
  uint64_t use_points[MAX_USES]; /* their points at free time */
} block_t;

struct segment_t {
  uintptr_t base;
  uint64_t size;
  bool small;
  tpurt_queue_t* queue; /* owner: its blocks are reused in this queue's order */
  block_t* first;
  segment_t* prev; /* allocator's segment list */
  segment_t* next;
};

typedef struct bin_pool_t {
  block_t* bins[NUM_BINS];
  uint64_t bitmap[BITMAP_WORDS];
} bin_pool_t;

typedef struct queue_pools_t {
  bin_pool_t pool[2]; /* [0] small, [1] large */
} queue_pools_t;

typedef struct block_slab_t {
  struct block_slab_t* next;
  block_t blocks[256];
} block_slab_t;

struct tpurt_allocator_t {
  tpurt_device_t* device;
  pthread_mutex_t lock;
  tpurt_memory_stats_t stats;
  segment_t* segments;
  block_t* pending;     /* freed, waiting for other queues */
  block_t** buckets;    /* allocated blocks by address */
  size_t num_buckets;
  size_t num_live;
  block_t* spare;       /* unused block structs */
  block_slab_t* slabs;
};

/* ---- the memory-history observer (tpurt/device.h) ---- */

static _Atomic(tpurt_memory_observer_fn) g_observer;
static void* _Atomic g_observer_user;

void tpurt_memory_set_observer(tpurt_memory_observer_fn fn, void* user) {
  atomic_store(&g_observer_user, user);
  atomic_store(&g_observer, fn);
}

static inline void observe(tpurt_allocator_t* a, uint32_t event, uint64_t addr, uint64_t size, tpurt_queue_t* q) {
  tpurt_memory_observer_fn fn = atomic_load_explicit(&g_observer, memory_order_acquire);
  if (TPURT_UNLIKELY(fn != NULL)) fn(atomic_load(&g_observer_user), a->device, event, addr, size, q ? q->id : 0);
}

/* ---- block structs, address hash ---- */

static block_t* block_new(tpurt_allocator_t* a) {
  if (!a->spare) {
    block_slab_t* s = malloc(sizeof(*s));
    if (!s) return NULL;
    s->next = a->slabs;
    a->slabs = s;
    for (int i = 0; i < 256; ++i) {
      s->blocks[i].bin_next = a->spare;
      a->spare = &s->blocks[i];
    }
  }
  block_t* b = a->spare;
  a->spare = b->bin_next;
  memset(b, 0, sizeof(*b));
  return b;
}

static void block_delete(tpurt_allocator_t* a, block_t* b) {
  b->bin_next = a->spare;
  a->spare = b;
}

static size_t hash_addr(uintptr_t addr, size_t nb) {
  return (size_t)(((uint64_t)(addr >> 9) * 0x9E3779B97F4A7C15ull) >> 32) & (nb - 1);
}

static void hash_grow(tpurt_allocator_t* a) {
  size_t nb = a->num_buckets * 2;
  block_t** nbk = calloc(nb, sizeof(*nbk));
  if (!nbk) return; /* keep the longer chains */
  for (size_t i = 0; i < a->num_buckets; ++i) {
    for (block_t* b = a->buckets[i]; b;) {
      block_t* n = b->bin_next;
      size_t h = hash_addr(b->addr, nb);
      b->bin_next = nbk[h];
      nbk[h] = b;
      b = n;
    }
  }
  free(a->buckets);
  a->buckets = nbk;
  a->num_buckets = nb;
}

static void hash_insert(tpurt_allocator_t* a, block_t* b) {
  if (a->num_live >= a->num_buckets) hash_grow(a);
  size_t h = hash_addr(b->addr, a->num_buckets);
  b->bin_next = a->buckets[h];
  a->buckets[h] = b;
  ++a->num_live;
}

static block_t* hash_find(tpurt_allocator_t* a, uintptr_t addr) {
  for (block_t* b = a->buckets[hash_addr(addr, a->num_buckets)]; b; b = b->bin_next)
    if (b->addr == addr) return b;
  return NULL;
}

static void hash_remove(tpurt_allocator_t* a, block_t* b) {
  block_t** pp = &a->buckets[hash_addr(b->addr, a->num_buckets)];
  while (*pp != b) pp = &(*pp)->bin_next;
  *pp = b->bin_next;
  b->bin_next = NULL;
  --a->num_live;
}

/* ---- bins ---- */

static int bin_index(uint64_t size) {
  int fl = 63 - __builtin_clzll(size);
  int sl = (int)((size >> (fl - 3)) & 7);
  int i = (fl - 9) * 8 + sl;
  return i < NUM_BINS ? i : NUM_BINS - 1;
}

static bin_pool_t* pool_of(segment_t* seg) {
  queue_pools_t* qp = seg->queue->alloc_pools;
  return &qp->pool[seg->small ? 0 : 1];
}

static void bin_insert(bin_pool_t* p, block_t* b) {
  int i = bin_index(b->size);
  b->bin_prev = NULL;
  b->bin_next = p->bins[i];
  if (p->bins[i]) p->bins[i]->bin_prev = b;
  p->bins[i] = b;
  p->bitmap[i >> 6] |= 1ull << (i & 63);
}

static void bin_remove(bin_pool_t* p, block_t* b) {
  int i = bin_index(b->size);
  if (b->bin_prev) b->bin_prev->bin_next = b->bin_next;
  else p->bins[i] = b->bin_next;
  if (b->bin_next) b->bin_next->bin_prev = b->bin_prev;
  if (!p->bins[i]) p->bitmap[i >> 6] &= ~(1ull << (i & 63));
  b->bin_prev = b->bin_next = NULL;
}

/* Smallest free block >= size in `list`; an exact fit ends the scan (bins
 * of many same-size blocks are common: a model's activations). */
static block_t* best_in(block_t* list, uint64_t size) {
  block_t* best = NULL;
  for (block_t* b = list; b; b = b->bin_next) {
    if (b->size < size || (best && b->size >= best->size)) continue;
    best = b;
    if (b->size == size) break;
  }
  return best;
}

static block_t* bin_best_fit(bin_pool_t* p, uint64_t size) {
  int i = bin_index(size);
  block_t* b = best_in(p->bins[i], size);
  if (b) return b;
  /* Every block in a higher bin fits; the first nonempty one holds the best. */
  int start = i + 1;
  for (int w = start >> 6; w < BITMAP_WORDS; ++w) {
    uint64_t bits = p->bitmap[w];
    if (w == (start >> 6)) bits &= ~0ull << (start & 63);
    if (bits) return best_in(p->bins[(w << 6) + __builtin_ctzll(bits)], size);
  }
  return NULL;
}

/* ---- segments ---- */

static void stats_reserve(tpurt_allocator_t* a, int64_t delta) {
  a->stats.reserved_bytes += (uint64_t)delta;
  if (a->stats.reserved_bytes > a->stats.peak_reserved_bytes)
    a->stats.peak_reserved_bytes = a->stats.reserved_bytes;
}

static segment_t* segment_new(tpurt_allocator_t* a, tpurt_queue_t* q, uint64_t size, bool small) {
  tpurt_device_t* d = a->device;
  if (size > d->hbm_bytes - a->stats.reserved_bytes) return NULL;
  void* ptr = NULL;
  tpurt_status_t s = d->driver->memory_alloc(d->hal, size, &ptr);
  if (s) {
    tpurt_status_free(s);
    return NULL;
  }
  segment_t* seg = calloc(1, sizeof(*seg));
  block_t* b = seg ? block_new(a) : NULL;
  if (!b) {
    free(seg);
    d->driver->memory_free(d->hal, ptr, size);
    return NULL;
  }
  seg->base = (uintptr_t)ptr;
  seg->size = size;
  seg->small = small;
  seg->queue = q;
  seg->first = b;
  seg->next = a->segments;
  if (a->segments) a->segments->prev = seg;
  a->segments = seg;
  b->addr = seg->base;
  b->size = size;
  b->seg = seg;
  b->state = BLOCK_FREE;
  bin_insert(pool_of(seg), b);
  stats_reserve(a, (int64_t)size);
  a->stats.num_segments++;
  observe(a, TPURT_MEMORY_EVENT_SEGMENT_ALLOC, seg->base, size, q);
  return seg;
}

static tpurt_poison_t* device_poison(tpurt_device_t* d) {
  return d->driver->device_poison ? d->driver->device_poison(d->hal) : NULL;
}

static void segment_release(tpurt_allocator_t* a, segment_t* seg) {
  tpurt_device_t* d = a->device;
  block_t* b = seg->first; /* the only block, free */
  bin_remove(pool_of(seg), b);
  block_delete(a, b);
  tpurt_poison_clear(device_poison(d), (void*)seg->base, seg->size); /* nobody's bytes now */
  observe(a, TPURT_MEMORY_EVENT_SEGMENT_FREE, seg->base, seg->size, seg->queue);
  d->driver->memory_free(d->hal, (void*)seg->base, seg->size);
  stats_reserve(a, -(int64_t)seg->size);
  a->stats.num_segments--;
  if (seg->prev) seg->prev->next = seg->next;
  else a->segments = seg->next;
  if (seg->next) seg->next->prev = seg->prev;
  free(seg);
}

static bool segment_is_free(const segment_t* seg) {
  return seg->first->state == BLOCK_FREE && seg->first->size == seg->size;
}

/* Gives a free first/last block of a partly used segment back to HBM, so the
 * range allocator can merge it with its neighbours. */
static void segment_trim(tpurt_allocator_t* a, segment_t* seg) {
  tpurt_device_t* d = a->device;
  block_t* f = seg->first;
  if (f->state == BLOCK_FREE && f->next) {
    bin_remove(pool_of(seg), f);
    observe(a, TPURT_MEMORY_EVENT_SEGMENT_FREE, f->addr, f->size, seg->queue);
    d->driver->memory_free(d->hal, (void*)f->addr, f->size);
    stats_reserve(a, -(int64_t)f->size);
    seg->base += f->size;
    seg->size -= f->size;
    seg->first = f->next;
    f->next->prev = NULL;
    block_delete(a, f);
  }
  block_t* l = seg->first;
  while (l->next) l = l->next;
  if (l->state == BLOCK_FREE && l->prev) {
    bin_remove(pool_of(seg), l);
    observe(a, TPURT_MEMORY_EVENT_SEGMENT_FREE, l->addr, l->size, seg->queue);
    d->driver->memory_free(d->hal, (void*)l->addr, l->size);
    stats_reserve(a, -(int64_t)l->size);
    seg->size -= l->size;
    l->prev->next = NULL;
    block_delete(a, l);
  }
}

/* ---- free / pending ---- */

/* Returns a block to its segment owner's pool, merged with free neighbours. */
static void free_block(tpurt_allocator_t* a, block_t* b) {
  bin_pool_t* p = pool_of(b->seg);
  b->state = BLOCK_FREE;
  b->num_uses = 0;
  b->uses_overflow = false;
  block_t* pr = b->prev;
  if (pr && pr->state == BLOCK_FREE) {
    bin_remove(p, pr);
    pr->size += b->size;
    pr->next = b->next;
    if (b->next) b->next->prev = pr;
    block_delete(a, b);
    b = pr;
  }
  block_t* nx = b->next;
  if (nx && nx->state == BLOCK_FREE) {
    bin_remove(p, nx);
    b->size += nx->size;
    b->next = nx->next;
    if (nx->next) nx->next->prev = b;
    block_delete(a, nx);
  }
  bin_insert(p, b);
}

static bool uses_reached(const block_t* b) {
  for (int i = 0; i < b->num_uses; ++i)
    if (!tpurt_queue_point_reached(b->uses[i], b->use_points[i])) return false;
  return true;
}

static void process_pending(tpurt_allocator_t* a) {
  block_t** pp = &a->pending;
  while (*pp) {
    block_t* b = *pp;
    if (uses_reached(b)) {
      *pp = b->pending_next;
      b->pending_next = NULL;
      free_block(a, b);
    } else {
      pp = &b->pending_next;
    }
  }
}

/* Releases whole free segments (and, with `trim`, free segment ends). Call
 * after waiting for the queues; a segment whose queue has taken new work
 * since (another thread) is skipped, as its free blocks may be in use. */
static void release_cached(tpurt_allocator_t* a, bool trim) {
  process_pending(a);
  for (segment_t* seg = a->segments; seg;) {
    segment_t* next = seg->next;
    if (tpurt_queue_is_idle(seg->queue)) {
      if (segment_is_free(seg)) segment_release(a, seg);
      else if (trim) segment_trim(a, seg);
    }
    seg = next;
  }
}

/* ---- for allocation hooks (exec/allocator.h) ---- */

void tpurt_allocator_account(tpurt_allocator_t* a, int64_t reserved_delta, int64_t allocated, bool is_alloc,
                             bool is_free) {
  pthread_mutex_lock(&a->lock);
  if (reserved_delta) stats_reserve(a, reserved_delta);
  tpurt_memory_stats_t* st = &a->stats;
  if (is_alloc) {
    st->allocated_bytes += (uint64_t)allocated;
    if (st->allocated_bytes > st->peak_allocated_bytes) st->peak_allocated_bytes = st->allocated_bytes;
    st->num_allocs++;
  }
  if (is_free) {
    st->allocated_bytes -= (uint64_t)allocated;
    st->num_frees++;
  }
  pthread_mutex_unlock(&a->lock);
}

uint64_t tpurt_allocator_reserved(tpurt_allocator_t* a) {
  pthread_mutex_lock(&a->lock);
  uint64_t r = a->stats.reserved_bytes;
  pthread_mutex_unlock(&a->lock);
  return r;
}

void tpurt_allocator_release_cached(tpurt_allocator_t* a) {
  tpurt_device_wait_idle(a->device);
  pthread_mutex_lock(&a->lock);
  release_cached(a, true);
  pthread_mutex_unlock(&a->lock);
}

/* ---- allocate ---- */

static uint64_t segment_size_for(uint64_t size) {
  if (size <= SMALL_SIZE) return SMALL_SEGMENT;
  if (size < MIN_LARGE_ALLOC) return LARGE_SEGMENT;
  return (size + ROUND_LARGE - 1) & ~(ROUND_LARGE - 1);
}

/* Best fit from q's pools, else a new segment; NULL if neither. */
static block_t* try_allocate(tpurt_allocator_t* a, tpurt_queue_t* q, uint64_t size) {
  bool small = size <= SMALL_SIZE;
  queue_pools_t* qp = q->alloc_pools;
  bin_pool_t* p = &qp->pool[small ? 0 : 1];
  block_t* b = bin_best_fit(p, size);
  if (!b) {
    uint64_t seg_size = segment_size_for(size);
    segment_t* seg = segment_new(a, q, seg_size, small);
    if (!seg && seg_size != size) seg = segment_new(a, q, size, small);
    if (!seg) return NULL;
    b = seg->first;
  }
  bin_remove(p, b);
  uint64_t rest = b->size - size;
  if (rest >= ALIGN && (small || rest > SMALL_SIZE)) {
    block_t* r = block_new(a);
    if (r) {
      r->addr = b->addr + size;
      r->size = rest;
      r->seg = b->seg;
      r->prev = b;
      r->next = b->next;
      if (b->next) b->next->prev = r;
      b->next = r;
      b->size = size;
      r->state = BLOCK_FREE;
      bin_insert(p, r);
    }
  }
  b->state = BLOCK_ALLOCATED;
  return b;
}

static tpurt_status_t oom_status(tpurt_allocator_t* a, size_t bytes) {
  uint64_t cap = a->stats.capacity_bytes, free_b = cap - a->stats.allocated_bytes;
  char b1[32], b2[32], b3[32];
  return TPURT_STATUS(RESOURCE_EXHAUSTED,
                      "vTPU out of memory: tried to allocate %s (%llu bytes); %s (%llu bytes) free "
                      "of %s capacity",
                      tpurt_bytes_format(bytes, b1, sizeof b1), (unsigned long long)bytes,
                      tpurt_bytes_format(free_b, b2, sizeof b2), (unsigned long long)free_b,
                      tpurt_bytes_format(cap, b3, sizeof b3));
}

/* TORCH_TPU_ALLOC_FILL=<byte>: every block the pools hand out is first filled
 * with that byte, so an output a kernel forgot to write shows a recognisable
 * pattern instead of whatever a freed tensor left (a test switch; off by
 * default, and then one relaxed load per allocation). The block may still be
 * read by work queued before its free (stream-ordered reuse), so the fill
 * waits for the queue first. Debug mode's guarded allocations are fresh,
 * zeroed pages and are not filled. -2: not read yet; -1: off. */
static _Atomic int g_fill_byte = -2;

static int fill_byte(void) {
  int f = atomic_load_explicit(&g_fill_byte, memory_order_relaxed);
  if (TPURT_LIKELY(f != -2)) return f;
  int v = -1;
  tpurt_status_t s = tpurt_env_int("TORCH_TPU_ALLOC_FILL", 0, 255, &v);
  if (s) {
    TPURT_LOG(WARNING, "%s; allocations are not filled", tpurt_status_message(s));
    tpurt_status_free(s);
    v = -1;
  }
  atomic_store_explicit(&g_fill_byte, v, memory_order_relaxed);
  return v;
}

static void fill_block(tpurt_queue_t* q, void* ptr, size_t bytes, int byte) {
  if (!tpurt_queue_is_current(q)) tpurt_queue_wait_point(q, tpurt_queue_point(q));
  memset(ptr, byte, bytes);
}

static void queue_clean(tpurt_queue_t* q, void* ptr, size_t size);

tpurt_status_t tpurt_memory_allocate(tpurt_device_t* d, tpurt_queue_t* q, size_t bytes,
                                     void** out_ptr) {
  if (!out_ptr) return TPURT_STATUS(INVALID_ARGUMENT, "memory_allocate: NULL out_ptr");
  *out_ptr = NULL;
  if (!d) return TPURT_STATUS(INVALID_ARGUMENT, "memory_allocate: NULL device");
  TPURT_RETURN_IF_FORKED();
  if (!q) q = d->default_queue;
  if (q->device != d)
    return TPURT_STATUS(INVALID_ARGUMENT, "memory_allocate: queue %llu is on another chip",
                        (unsigned long long)q->id);
  tpurt_allocator_t* a = d->allocator;
  uint64_t size = bytes == 0 ? ALIGN : ((uint64_t)bytes + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
  bool fits = bytes <= d->hbm_bytes;
  /* Held around the hook: a switch out of Debug mode must not release the
   * guards of a block being made. */
  const tpurt_allocator_hooks_t* hooks = &tpurt_exec_mode_hold()->alloc;
  bool served = TPURT_UNLIKELY(hooks->allocate != NULL) && hooks->allocate(d, bytes, out_ptr);
  tpurt_exec_mode_release();
  if (served) return TPURT_OK;
  pthread_mutex_lock(&a->lock);
  block_t* b = NULL;
  if (fits) {
    process_pending(a);
    b = try_allocate(a, q, size);
    /* Waiting cannot help a request larger than all unallocated memory. */
    if (!b && size <= a->stats.capacity_bytes - a->stats.allocated_bytes) {
      /* Cached memory may be in use by queued work: wait for the device
       * (without the lock: workers free memory too), then give it back. */
      pthread_mutex_unlock(&a->lock);
      tpurt_device_wait_idle(d);
      pthread_mutex_lock(&a->lock);
      release_cached(a, true);
      b = try_allocate(a, q, size);
    }
  }
  if (!b) {
    a->stats.num_ooms++;
    observe(a, TPURT_MEMORY_EVENT_OOM, a->stats.capacity_bytes - a->stats.allocated_bytes, bytes, q);
    tpurt_status_t s = oom_status(a, bytes);
    pthread_mutex_unlock(&a->lock);
    return s;
  }
  hash_insert(a, b);
  tpurt_memory_stats_t* st = &a->stats;
  st->allocated_bytes += b->size;
  if (st->allocated_bytes > st->peak_allocated_bytes) st->peak_allocated_bytes = st->allocated_bytes;
  st->num_allocs++;
  pthread_mutex_unlock(&a->lock);
  /* While anything is poisoned, a new block starts clean in queue order: a
   * failed command queued before may mark bytes of a block freed before it
   * ran. */
  if (TPURT_UNLIKELY(tpurt_poison_armed(device_poison(d)))) {
    /* Nothing in flight on q can mark it any more: clear it now. */
    if (tpurt_queue_point_reached(q, tpurt_queue_point(q))) tpurt_poison_clear(device_poison(d), (void*)b->addr, b->size);
    else queue_clean(q, (void*)b->addr, b->size);
  }
  int fill = fill_byte();
  if (TPURT_UNLIKELY(fill >= 0)) fill_block(q, (void*)b->addr, b->size, fill);
  if (TPURT_UNLIKELY(q->capture != NULL)) tpurt_capture_note_alloc(q, (void*)b->addr, bytes);
  *out_ptr = (void*)b->addr;
  return TPURT_OK;
}

/* The mode's `freed` hook (DeferAndFuse): the owner queue learns the block
 * is dead before it can be handed out again. A block other queues also used
 * (record_queue) is not reported: it may still be read there. */
static void report_free(tpurt_allocator_t* a, void* ptr, void (*freed)(tpurt_queue_t*, void*, size_t)) {
  pthread_mutex_lock(&a->lock);
  block_t* b = hash_find(a, (uintptr_t)ptr);
  tpurt_queue_t* q = b && !b->num_uses && !b->uses_overflow ? b->seg->queue : NULL;
  uint64_t size = b ? b->size : 0;
  pthread_mutex_unlock(&a->lock);
  if (q) freed(q, ptr, size);
}

typedef struct retire_t {
  void* ptr;
  size_t bytes;
} retire_t;

static tpurt_status_t retire_run(void* user, tpurt_kernel_ctx_t* ctx) {
  retire_t* r = user;
  tpurt_poison_clear(ctx->poison, r->ptr, r->bytes);
  free(r);
  return TPURT_OK;
}

/* Queues, on q, the clearing of [ptr, ptr + size): it happens after every
 * command queued before (a failing one may still mark these bytes). */
static void queue_clean(tpurt_queue_t* q, void* ptr, size_t size) {
  retire_t* r = malloc(sizeof(*r));
  if (!r) return;
  *r = (retire_t){ptr, size};
  tpurt_hal_command_t cmd = {.kind = TPURT_HAL_COMMAND_CALL, .u.call = {.fn = retire_run, .user = r}};
  pthread_mutex_lock(&q->submit_lock);
  tpurt_status_t s = tpurt_queue_submit_locked(q, &cmd, NULL);
  pthread_mutex_unlock(&q->submit_lock);
  if (s) free(r); /* a CALL is always taken; kept for form */
  tpurt_status_free(s);
}

/* A freed block stops being poisoned once its queue has run everything
 * queued before the free (which may still read it). */
static void retire_poison(tpurt_device_t* d, tpurt_allocator_t* a, void* ptr) {
  tpurt_poison_t* p = device_poison(d);
  if (TPURT_LIKELY(!tpurt_poison_armed(p))) return;
  pthread_mutex_lock(&a->lock);
  block_t* b = hash_find(a, (uintptr_t)ptr);
  tpurt_queue_t* q = b ? b->seg->queue : NULL;
  size_t size = b ? b->size : 0;
  if (q) tpurt_queue_retain(q);
  pthread_mutex_unlock(&a->lock);
  if (!q) return;
  tpurt_status_t hit = tpurt_poison_check(p, ptr, size);
  if (hit) queue_clean(q, ptr, size);
  tpurt_status_free(hit);
  tpurt_queue_release(q);
}

void tpurt_allocator_drop_free_poison(tpurt_allocator_t* a) {
  tpurt_poison_t* p = device_poison(a->device);
  if (TPURT_LIKELY(!tpurt_poison_armed(p))) return;
  pthread_mutex_lock(&a->lock);
  for (segment_t* seg = a->segments; seg; seg = seg->next)
    for (block_t* b = seg->first; b; b = b->next)
      if (b->state == BLOCK_FREE) tpurt_poison_clear(p, (void*)b->addr, b->size);
  pthread_mutex_unlock(&a->lock);
}

void tpurt_memory_free(tpurt_device_t* d, void* ptr) {
  if (!d || !ptr || atomic_load_explicit(&tpurt_forked_child, memory_order_relaxed)) return;
  tpurt_allocator_t* a = d->allocator;
  if (TPURT_UNLIKELY(atomic_load_explicit(&tpurt_capture_count, memory_order_relaxed) != 0)) {
    pthread_mutex_lock(&a->lock);
    block_t* cb = hash_find(a, (uintptr_t)ptr);
    tpurt_queue_t* owner = cb ? cb->seg->queue : NULL;
    pthread_mutex_unlock(&a->lock);
    if (owner && owner->capture) tpurt_capture_note_free(owner, ptr);
  }
  retire_poison(d, a, ptr);
  /* The free hook and a guarded block's quarantine see one mode. */
  void (*freed)(tpurt_queue_t*, void*, size_t) = tpurt_exec_mode_hold()->alloc.freed;
  if (freed) report_free(a, ptr, freed);
  tpurt_exec_mode_release();
  pthread_mutex_lock(&a->lock);
  block_t* b = hash_find(a, (uintptr_t)ptr);
  if (!b) {
    pthread_mutex_unlock(&a->lock);
    bool foreign = tpurt_exec_mode_hold() && tpurt_exec_foreign_free(d, ptr);
    tpurt_exec_mode_release();
    if (foreign) return;
    TPURT_LOG(WARNING, "memory_free: %p is not a live allocation of chip %d; ignored", ptr, d->index);
    return;
  }
  hash_remove(a, b);
  a->stats.allocated_bytes -= b->size;
  a->stats.num_frees++;
  if (TPURT_UNLIKELY(b->uses_overflow)) {
    /* Used by more queues than we track: wait for the whole device. */
    b->state = BLOCK_PENDING;
    pthread_mutex_unlock(&a->lock);
    tpurt_device_wait_idle(d);
    pthread_mutex_lock(&a->lock);
    free_block(a, b);
  } else if (b->num_uses) {
    for (int i = 0; i < b->num_uses; ++i) b->use_points[i] = tpurt_queue_point(b->uses[i]);
    if (uses_reached(b)) {
      free_block(a, b);
    } else {
      b->state = BLOCK_PENDING;
      b->pending_next = a->pending;
      a->pending = b;
    }
  } else {
    free_block(a, b);
  }
  pthread_mutex_unlock(&a->lock);
}

tpurt_status_t tpurt_memory_record_queue(tpurt_device_t* d, void* ptr, tpurt_queue_t* q) {
  if (!d || !q) return TPURT_STATUS(INVALID_ARGUMENT, "memory_record_queue: NULL device or queue");
  if (q->device != d)
    return TPURT_STATUS(INVALID_ARGUMENT, "memory_record_queue: queue is on another chip");
  tpurt_allocator_t* a = d->allocator;
  pthread_mutex_lock(&a->lock);
  block_t* b = hash_find(a, (uintptr_t)ptr);
  if (!b) {
    pthread_mutex_unlock(&a->lock);
    /* A mode's own block (Debug's guarded ones are freed only once the whole
     * device is idle): nothing to record. */
    if (tpurt_exec_foreign_live(d, ptr)) return TPURT_OK;
    return TPURT_STATUS(INVALID_ARGUMENT,
                        "memory_record_queue: %p is not the start of a live allocation", ptr);
  }
  if (q != b->seg->queue && !b->uses_overflow) {
    int i = 0;
    while (i < b->num_uses && b->uses[i] != q) ++i;
    if (i == b->num_uses) {
      if (b->num_uses < MAX_USES) b->uses[b->num_uses++] = q;
      else b->uses_overflow = true;
    }
  }
  pthread_mutex_unlock(&a->lock);
  return TPURT_OK;
}

/* ---- queues coming and going ---- */

tpurt_status_t tpurt_allocator_queue_attach(tpurt_allocator_t* a, tpurt_queue_t* q) {
  q->alloc_pools = calloc(1, sizeof(queue_pools_t));
  return q->alloc_pools ? TPURT_OK : TPURT_STATUS(RESOURCE_EXHAUSTED, "out of host memory");
}

static void drop_use(block_t* b, tpurt_queue_t* q) {
  for (int i = 0; i < b->num_uses; ++i) {
    if (b->uses[i] == q) {
      b->uses[i] = b->uses[b->num_uses - 1];
      b->use_points[i] = b->use_points[b->num_uses - 1];
      --b->num_uses;
      return;
    }
  }
}

void tpurt_allocator_queue_detach(tpurt_allocator_t* a, tpurt_queue_t* q) {
  if (!q->alloc_pools) return;
  tpurt_queue_t* dq = a->device->default_queue;
  pthread_mutex_lock(&a->lock);
  /* q is idle: every use of it has passed. Forget it everywhere. */
  for (size_t i = 0; i < a->num_buckets; ++i)
    for (block_t* b = a->buckets[i]; b; b = b->bin_next) drop_use(b, q);
  for (block_t* b = a->pending; b; b = b->pending_next) drop_use(b, q);
  process_pending(a);
  for (segment_t* seg = a->segments; seg;) {
    segment_t* next = seg->next;
    if (seg->queue == q) {
      if (segment_is_free(seg) || !dq || dq == q) {
        if (segment_is_free(seg)) segment_release(a, seg);
      } else {
        /* Still holds live blocks: hand the segment to the default queue. */
        bin_pool_t* from = pool_of(seg);
        seg->queue = dq;
        bin_pool_t* to = pool_of(seg);
        for (block_t* b = seg->first; b; b = b->next) {
          if (b->state != BLOCK_FREE) continue;
          bin_remove(from, b);
          bin_insert(to, b);
        }
      }
    }
    seg = next;
  }
  pthread_mutex_unlock(&a->lock);
  free(q->alloc_pools);
  q->alloc_pools = NULL;
}

/* ---- lifetime, stats, info ---- */

tpurt_status_t tpurt_allocator_create(tpurt_device_t* device, tpurt_allocator_t** out) {
  *out = NULL;
  tpurt_allocator_t* a = calloc(1, sizeof(*a));
  if (!a) return TPURT_STATUS(RESOURCE_EXHAUSTED, "out of host memory");
  a->device = device;
  a->num_buckets = 1024;
  a->buckets = calloc(a->num_buckets, sizeof(*a->buckets));
  if (!a->buckets) {
    free(a);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "out of host memory");
  }
  pthread_mutex_init(&a->lock, NULL);
  a->stats.capacity_bytes = device->hbm_bytes;
  *out = a;
  return TPURT_OK;
}

void tpurt_allocator_destroy(tpurt_allocator_t* a) {
  if (!a) return;
  while (a->segments) {
    segment_t* s = a->segments;
    a->segments = s->next;
    a->device->driver->memory_free(a->device->hal, (void*)s->base, s->size);
    free(s);
  }
  while (a->slabs) {
    block_slab_t* s = a->slabs;
    a->slabs = s->next;
    free(s);
  }
  free(a->buckets);
  pthread_mutex_destroy(&a->lock);
  free(a);
}

bool tpurt_memory_is_device_ptr(tpurt_device_t* d, const void* ptr) {
  if (!d) {
    for (int i = 0, n = tpurt_device_count(); i < n; ++i) {
      tpurt_device_t* di = NULL;
      tpurt_status_free(tpurt_device_get(i, &di));
      if (di && tpurt_memory_is_device_ptr(di, ptr)) return true;
    }
    return false;
  }
  uintptr_t p = (uintptr_t)ptr, base = (uintptr_t)d->hbm_base;
  return p >= base && p - base < d->hbm_bytes;
}

tpurt_status_t tpurt_memory_stats(tpurt_device_t* d, tpurt_memory_stats_t* out) {
  if (!d || !out) return TPURT_STATUS(INVALID_ARGUMENT, "memory_stats: NULL argument");
  pthread_mutex_lock(&d->allocator->lock);
  *out = d->allocator->stats;
  pthread_mutex_unlock(&d->allocator->lock);
  return TPURT_OK;
}

void tpurt_memory_reset_peak(tpurt_device_t* d) {
  if (!d) return;
  tpurt_allocator_t* a = d->allocator;
  pthread_mutex_lock(&a->lock);
  a->stats.peak_allocated_bytes = a->stats.allocated_bytes;
  a->stats.peak_reserved_bytes = a->stats.reserved_bytes;
  pthread_mutex_unlock(&a->lock);
}

tpurt_status_t tpurt_memory_empty_cache(tpurt_device_t* d) {
  if (!d) return TPURT_STATUS(INVALID_ARGUMENT, "memory_empty_cache: NULL device");
  tpurt_device_wait_idle(d);
  pthread_mutex_lock(&d->allocator->lock);
  release_cached(d->allocator, false);
  pthread_mutex_unlock(&d->allocator->lock);
  return TPURT_OK;
}

tpurt_status_t tpurt_memory_get_info(tpurt_device_t* d, uint64_t* out_free, uint64_t* out_total) {
  if (!d) return TPURT_STATUS(INVALID_ARGUMENT, "memory_get_info: NULL device");
  pthread_mutex_lock(&d->allocator->lock);
  tpurt_memory_stats_t st = d->allocator->stats;
  pthread_mutex_unlock(&d->allocator->lock);
  /* capacity - reserved + cached free == capacity - allocated */
  if (out_free) *out_free = st.capacity_bytes - st.allocated_bytes;
  if (out_total) *out_total = st.capacity_bytes;
  return TPURT_OK;
}

/* ---- snapshots (tpurt/device.h) ---- */

size_t tpurt_memory_snapshot(tpurt_device_t* d, tpurt_memory_block_info_t* out, size_t cap) {
  if (!d) return 0;
  tpurt_allocator_t* a = d->allocator;
  size_t n = 0;
  pthread_mutex_lock(&a->lock);
  for (segment_t* seg = a->segments; seg; seg = seg->next) {
    for (block_t* b = seg->first; b; b = b->next, ++n) {
      if (n >= cap) continue;
      out[n] = (tpurt_memory_block_info_t){.segment = seg->base, .segment_size = seg->size, .addr = b->addr,
                                           .size = b->size, .queue_id = seg->queue ? seg->queue->id : 0,
                                           .state = b->state == BLOCK_FREE ? 0 : b->state == BLOCK_ALLOCATED ? 1 : 2,
                                           .small = seg->small};
    }
  }
  pthread_mutex_unlock(&a->lock);
  return n;
}

uint64_t tpurt_memory_block_size(tpurt_device_t* d, const void* ptr) {
  if (!d || !ptr) return 0;
  tpurt_allocator_t* a = d->allocator;
  pthread_mutex_lock(&a->lock);
  block_t* b = hash_find(a, (uintptr_t)ptr);
  uint64_t size = b ? b->size : 0;
  pthread_mutex_unlock(&a->lock);
  return size;
}
