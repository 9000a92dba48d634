/* Capture and programs (tpurt/program.h): torch.compile's graphs recorded
 * once through the eager path, then launched as one command per call.
 *
 * Capture reuses DeferAndFuse's pending list (defer/defer.h) as the
 * recording: the same deep-copied call records, free markers where the host
 * let a block go. What capture adds is where each address came from: the
 * allocator logs every block made and freed on the capturing queue, in
 * record-index time. Ending the capture classifies every address a record
 * holds (an input's storage, an output's block, a block made and freed
 * inside: the arena, anything else: fixed, e.g. a graph constant the caller
 * keeps alive) and plans the arena: each freed block gets an offset no other
 * block alive at the same time overlaps (greedy, biggest first: the static
 * memory plan). A launch rebases the records in place on the queue's thread
 * (under the program's lock) and runs them with the fusion executor. */
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/log.h"
#include "base/thread.h"
#include "exec/capture.h"
#include "exec/defer/defer.h"
#include "exec/defer/program_internal.h"
#include "exec/queue.h"
#include "hal/call_record.h"
#include "hal/trace.h"
#include "tpurt/program.h"

#define ARENA_ALIGN 512u /* the allocator's block alignment: kernels see the same */

/* The integer setting `name` in [lo, hi], read once into *cached; a malformed value is said once
 * and `fallback` kept. */
static int setting_once(_Atomic int* cached, const char* name, int fallback, int lo, int hi) {
  int v = atomic_load_explicit(cached, memory_order_relaxed);
  if (v >= 0) return v;
  v = fallback;
  tpurt_status_t s = tpurt_env_int(name, lo, hi, &v);
  if (s) {
    TPURT_LOG(WARNING, "%s", tpurt_status_message(s));
    tpurt_status_free(s);
    v = fallback;
  }
  atomic_store_explicit(cached, v, memory_order_relaxed);
  return v;
}

/* A program's chains of fewer elements run kernel by kernel: on 4x4
 * tensors a 150-op graph ran in 0.34 ms unfused against 1.0 ms fused (the
 * chain's capture and planning cost more than the work), while chains over
 * large tensors gain the memory passes they skip.
 * TORCH_TPU_PROGRAM_FUSE_MIN_NUMEL overrides it (0: fuse everything). */
int64_t tpurt_program_fuse_min_numel(void) {
  static _Atomic int cached = -1;
  return setting_once(&cached, "TORCH_TPU_PROGRAM_FUSE_MIN_NUMEL", 16384, 0, INT32_MAX);
}

/* A program runs while its host thread is idle (one launch for the whole graph), so the chip's other
 * cores are free: its kernels split at a quarter of the grain they use in eager mode, where the host
 * thread dispatching the next op shares the cores. On the small GPT's compiled training step (2 cores,
 * most activations 256 x 128 = 32768 elements, the elementwise grain) that split the elementwise ops
 * and fused chains that ran on one thread: 7.0-7.2 ms a step became 6.2 (README, "torch.compile").
 * TORCH_TPU_PROGRAM_GRAIN_SHIFT overrides it (0: eager's grains). */
int tpurt_program_grain_shift(void) {
  static _Atomic int cached = -1;
  return setting_once(&cached, "TORCH_TPU_PROGRAM_GRAIN_SHIFT", 2, 0, 16);
}

static uint64_t round_block(uint64_t bytes) {
  return bytes == 0 ? ARENA_ALIGN : (bytes + ARENA_ALIGN - 1) & ~(uint64_t)(ARENA_ALIGN - 1);
}

typedef struct cap_block_t {
  uintptr_t lo, hi;
  uint64_t requested;
  int32_t made_at, freed_at; /* record indices; freed_at INT32_MAX: alive at the end */
  int32_t output;            /* the output whose storage it is, or -1 */
  bool used;                 /* a record touches it */
} cap_block_t;

struct tpurt_capture_t {
  tpurt_defer_list_t* list;
  cap_block_t* blocks;
  int32_t num_blocks, cap_blocks;
  tpurt_status_t broken; /* the first reason the capture cannot stand */
};

/* Any capture active anywhere: the allocator's fast path reads only this. */
_Atomic int tpurt_capture_count;

/* ---- recording (submit_lock held by the callers in queue.c / allocator.c) ---- */

static void breaks(tpurt_capture_t* c, tpurt_status_t why) {
  if (!c->broken) c->broken = why;
  else tpurt_status_free(why);
}

tpurt_status_t tpurt_capture_record_kernel(tpurt_queue_t* q, const tpurt_op_def_t* op, const tpurt_op_call_t* call) {
  pthread_mutex_lock(&q->submit_lock);
  tpurt_capture_t* c = q->capture;
  tpurt_status_t s = TPURT_OK;
  if (c) {
    uint8_t* buf = tpurt_defer_list_alloc(c->list, tpurt_call_record_size(call));
    tpurt_defer_rec_t* r = buf ? tpurt_defer_list_push(c->list) : NULL;
    if (r) {
      r->kind = TPURT_DEFER_KERNEL;
      r->op = op;
      r->issuer = tpurt_thread_issuer();
      tpurt_call_record_copy(call, buf, &r->call);
      c->list->num_kernels++;
    } else {
      s = TPURT_STATUS(RESOURCE_EXHAUSTED, "capture: out of host memory recording %s", call->name ? call->name : "?");
    }
  }
  pthread_mutex_unlock(&q->submit_lock);
  return s;
}

tpurt_status_t tpurt_capture_record_copy(tpurt_queue_t* q, void* dst, const void* src, size_t bytes) {
  pthread_mutex_lock(&q->submit_lock);
  tpurt_capture_t* c = q->capture;
  tpurt_defer_rec_t* r = c ? tpurt_defer_list_push(c->list) : NULL;
  if (r) {
    r->kind = TPURT_DEFER_COPY;
    r->dst = dst;
    r->src = src;
    r->bytes = bytes;
  }
  pthread_mutex_unlock(&q->submit_lock);
  return r || !c ? TPURT_OK : TPURT_STATUS(RESOURCE_EXHAUSTED, "capture: out of host memory recording a copy");
}

tpurt_status_t tpurt_capture_refuse_locked(tpurt_queue_t* q, const char* what) {
  tpurt_status_t s = TPURT_STATUS(FAILED_PRECONDITION,
                                  "capture: %s while a graph is being captured (the graph needs device data on "
                                  "the host, or other work on its queue)",
                                  what);
  if (q->capture) breaks(q->capture, tpurt_status_copy(s));
  return s;
}

tpurt_status_t tpurt_capture_refuse(tpurt_queue_t* q, const char* what) {
  pthread_mutex_lock(&q->submit_lock);
  tpurt_status_t s = tpurt_capture_refuse_locked(q, what);
  pthread_mutex_unlock(&q->submit_lock);
  return s;
}

static cap_block_t* push_block(tpurt_capture_t* c) {
  if (c->num_blocks == c->cap_blocks) {
    int32_t n = c->cap_blocks ? c->cap_blocks * 2 : 64;
    cap_block_t* b = realloc(c->blocks, sizeof(*b) * (size_t)n);
    if (!b) return NULL;
    c->blocks = b;
    c->cap_blocks = n;
  }
  return &c->blocks[c->num_blocks++];
}

void tpurt_capture_note_alloc(tpurt_queue_t* q, void* ptr, size_t bytes) {
  pthread_mutex_lock(&q->submit_lock);
  tpurt_capture_t* c = q->capture;
  if (c) {
    cap_block_t* b = push_block(c);
    if (b) {
      /* What was asked for (the allocator's block may be larger): a block's size is then a function of
       * the graph's sizes, which programs that take sizes at launch need (program_sizes.c). */
      *b = (cap_block_t){.lo = (uintptr_t)ptr, .hi = (uintptr_t)ptr + round_block(bytes), .requested = bytes,
                         .made_at = c->list->num_recs, .freed_at = INT32_MAX, .output = -1};
    } else {
      breaks(c, TPURT_STATUS(RESOURCE_EXHAUSTED, "capture: out of host memory logging a block"));
    }
  }
  pthread_mutex_unlock(&q->submit_lock);
}

void tpurt_capture_note_free(tpurt_queue_t* q, void* ptr) {
  pthread_mutex_lock(&q->submit_lock);
  tpurt_capture_t* c = q->capture;
  for (int32_t i = c ? c->num_blocks - 1 : -1; i >= 0; --i) {
    cap_block_t* b = &c->blocks[i];
    if (b->lo != (uintptr_t)ptr || b->freed_at != INT32_MAX) continue;
    b->freed_at = c->list->num_recs;
    tpurt_defer_rec_t* r = tpurt_defer_list_push(c->list);
    if (r) { /* the fusion planner's liveness: nothing after reads it */
      r->kind = TPURT_DEFER_FREE;
      r->dst = ptr;
      r->bytes = b->requested ? b->requested : b->hi - b->lo; /* what tensors could use: a size */
    } else {
      breaks(c, TPURT_STATUS(RESOURCE_EXHAUSTED, "capture: out of host memory recording a free"));
    }
    break;
  }
  pthread_mutex_unlock(&q->submit_lock);
}

/* ---- begin / end ---- */

bool tpurt_capture_active(tpurt_queue_t* q) { return q && q->capture != NULL; }

tpurt_status_t tpurt_capture_begin(tpurt_queue_t* q) {
  if (!q) return TPURT_STATUS(INVALID_ARGUMENT, "capture_begin: NULL queue");
  TPURT_RETURN_IF_FORKED();
  tpurt_capture_t* c = calloc(1, sizeof(*c));
  if (c) c->list = tpurt_defer_list_new();
  if (!c || !c->list) {
    free(c);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "capture_begin: out of host memory");
  }
  pthread_mutex_lock(&q->submit_lock);
  if (q->capture) {
    pthread_mutex_unlock(&q->submit_lock);
    tpurt_defer_list_free(c->list);
    free(c);
    return TPURT_STATUS(FAILED_PRECONDITION, "capture_begin: queue %llu is already capturing",
                        (unsigned long long)q->id);
  }
  /* Work recorded before belongs to the eager program, not this one. */
  tpurt_queue_next_point_locked(q);
  q->capture = c;
  atomic_fetch_add(&tpurt_capture_count, 1);
  pthread_mutex_unlock(&q->submit_lock);
  return TPURT_OK;
}

static tpurt_capture_t* take_capture(tpurt_queue_t* q) {
  pthread_mutex_lock(&q->submit_lock);
  tpurt_capture_t* c = q->capture;
  q->capture = NULL;
  if (c) atomic_fetch_sub(&tpurt_capture_count, 1);
  pthread_mutex_unlock(&q->submit_lock);
  return c;
}

static void capture_free(tpurt_capture_t* c) {
  if (!c) return;
  tpurt_defer_list_free(c->list);
  free(c->blocks);
  tpurt_status_free(c->broken);
  free(c);
}

void tpurt_capture_abort(tpurt_queue_t* q) {
  if (q) capture_free(take_capture(q));
}

tpurt_program_t* tpurt_program_alloc(void) {
  tpurt_program_t* p = calloc(1, sizeof(*p));
  if (!p) return NULL;
  atomic_init(&p->refcount, 1);
  pthread_mutex_init(&p->run_lock, NULL);
  pthread_mutex_init(&p->bind_lock, NULL);
  p->rng_sym.value = -1;
  return p;
}

void tpurt_program_retain(tpurt_program_t* p) {
  if (p) atomic_fetch_add(&p->refcount, 1);
}

void tpurt_program_release(tpurt_program_t* p) {
  if (!p || atomic_fetch_sub(&p->refcount, 1) != 1) return;
  tpurt_defer_list_free(p->list);
  free(p->relocs);
  free(p->rngs);
  free(p->blocks);
  tpurt_program_sizes_free(p);
  pthread_mutex_destroy(&p->run_lock);
  pthread_mutex_destroy(&p->bind_lock);
  free(p);
}

typedef struct builder_t {
  tpurt_capture_t* c;
  tpurt_program_t* p;
  const tpurt_program_range_t* inputs;
  int32_t num_inputs;
  int32_t cap_relocs, cap_rngs;
  tpurt_status_t error;
} builder_t;

static bool range_in(uintptr_t lo, uintptr_t hi, uintptr_t blo, uintptr_t bhi) {
  return lo >= blo && hi <= bhi && lo < bhi;
}

/* Where bytes [lo, hi) touched by record r live. */
static void classify(builder_t* bd, uintptr_t lo, uintptr_t hi, int32_t r, bool is_free, reloc_t* out) {
  for (int32_t i = 0; i < bd->num_inputs; ++i) {
    uintptr_t b = (uintptr_t)bd->inputs[i].base;
    if (range_in(lo, hi, b, b + bd->inputs[i].bytes)) {
      *out = (reloc_t){.where = WHERE_INPUT, .index = i, .off = (int64_t)(lo - b)};
      return;
    }
  }
  tpurt_capture_t* c = bd->c;
  for (int32_t i = c->num_blocks - 1; i >= 0; --i) {
    cap_block_t* b = &c->blocks[i];
    if (b->made_at > r || b->freed_at < r || (b->freed_at == r && !is_free)) continue;
    if (!range_in(lo, hi, b->lo, b->hi)) continue;
    b->used = true;
    if (b->freed_at == INT32_MAX && b->output < 0 && !bd->error)
      bd->error = TPURT_STATUS(FAILED_PRECONDITION,
                               "capture: %s (record %d) uses a block made during the capture that is neither freed "
                               "nor an output",
                               c->list->recs[r].kind == TPURT_DEFER_KERNEL ? c->list->recs[r].call.name : "a copy",
                               r);
    *out = (reloc_t){.where = b->output >= 0 ? WHERE_OUTPUT : WHERE_ARENA, .index = b->output >= 0 ? b->output : i,
                     .off = (int64_t)(lo - b->lo)};
    return;
  }
  *out = (reloc_t){.where = WHERE_FIXED, .off = (int64_t)lo};
}

bool tpurt_program_push_reloc(tpurt_program_t* p, int32_t* cap, reloc_t r) {
  if (p->num_relocs == *cap) {
    int32_t n = *cap ? *cap * 2 : 256;
    reloc_t* np = realloc(p->relocs, sizeof(*np) * (size_t)n);
    if (!np) return false;
    p->relocs = np;
    *cap = n;
  }
  p->relocs[p->num_relocs++] = r;
  return true;
}

bool tpurt_program_push_rng(tpurt_program_t* p, int32_t* cap, rng_reloc_t r) {
  if (p->num_rngs == *cap) {
    int32_t n = *cap ? *cap * 2 : 16;
    rng_reloc_t* np = realloc(p->rngs, sizeof(*np) * (size_t)n);
    if (!np) return false;
    p->rngs = np;
    *cap = n;
  }
  p->rngs[p->num_rngs++] = r;
  return true;
}

static void add_reloc(builder_t* bd, void** slot, uintptr_t lo, uintptr_t hi, int32_t r, bool is_free) {
  if (!*slot || bd->error) return;
  reloc_t rl;
  classify(bd, lo, hi, r, is_free, &rl);
  if (rl.where == WHERE_FIXED) return; /* stays where it is */
  rl.slot = slot;
  /* A tensor's data pointer may sit past its footprint's low end (negative
   * strides): keep its distance from it. */
  rl.off += (int64_t)((uintptr_t)*slot - lo);
  if (!tpurt_program_push_reloc(bd->p, &bd->cap_relocs, rl))
    bd->error = TPURT_STATUS(RESOURCE_EXHAUSTED, "capture_end: out of host memory");
}

static void reloc_tensor(builder_t* bd, const tpurt_tensor_t* t, int32_t r) {
  if (!t || !t->data) return;
  tpurt_graph_range_t fp = tpurt_graph_tensor_bytes(t);
  if (fp.lo == fp.hi) { /* touches nothing: point it at its own address's home if any */
    fp.lo = (uintptr_t)t->data;
    fp.hi = fp.lo + 1;
  }
  add_reloc(bd, (void**)&((tpurt_tensor_t*)t)->data, fp.lo, fp.hi, r, false);
}

static void reloc_rng(builder_t* bd, tpurt_rng_t* rng, uint64_t seed, uint64_t before, uint64_t after) {
  if (bd->error) return;
  if (rng->seed != seed || rng->offset < before || rng->offset >= after) {
    bd->error = TPURT_STATUS(FAILED_PRECONDITION,
                             "capture: a random op drew from another generator than the default one");
    return;
  }
  if (!tpurt_program_push_rng(bd->p, &bd->cap_rngs, (rng_reloc_t){.slot = rng, .rel = rng->offset - before}))
    bd->error = TPURT_STATUS(RESOURCE_EXHAUSTED, "capture_end: out of host memory");
}

/* Blocks under ARENA_SMALL_BYTES (a program's scalars, biases, per-row statistics) are placed in a
 * region of their own above the large blocks, and blocks of one alignment unit (scalars) above
 * that, each with bytes of its own (no reuse). Placed among the others, a scalar computed late (an
 * optimizer's bias corrections, made after every parameter's moments in op-major order) takes
 * bytes a dead temporary used, and that false dependency (write after write of the same bytes)
 * stopped the fusion plan from running the scalar before the parameter's update, which then ran
 * as two passes over the parameter instead of one (AdamW on a 2048 x 2048 weight: 9.6 ms against
 * 5.3 ms). The small region costs at most the small blocks' own peak, the scalars 512 bytes each. */
#define ARENA_SMALL_BYTES (64u << 10)

/* Places blocks order[0..n) (sorted biggest first) from offset base: each at the lowest offset
 * clear of every block of the group placed before it that is alive at an overlapping time.
 * Returns the end of the highest one (base when n is 0). */
static uint64_t place_blocks(const prog_block_t* blocks, const int32_t* order, int32_t n, const uint64_t* size,
                             uint64_t base, uint64_t* out_off) {
  uint64_t total = base;
  for (int32_t k = 0; k < n; ++k) {
    const prog_block_t* b = &blocks[order[k]];
    uint64_t sz = size[order[k]], off = base;
    for (bool moved = true; moved;) {
      moved = false;
      for (int32_t m = 0; m < k; ++m) {
        const prog_block_t* o = &blocks[order[m]];
        uint64_t osz = size[order[m]], ooff = out_off[order[m]];
        bool same_time = b->made_at < o->freed_at && o->made_at < b->freed_at;
        if (same_time && off < ooff + osz && ooff < off + sz) {
          off = (ooff + osz + ARENA_ALIGN - 1) & ~(uint64_t)(ARENA_ALIGN - 1);
          moved = true;
        }
      }
    }
    out_off[order[k]] = off;
    if (off + sz > total) total = off + sz;
  }
  return total;
}

/* The static memory plan: offsets for the blocks made and freed inside
 * (in_arena), biggest first, each at the lowest offset clear of every placed
 * block alive at an overlapping time; blocks under ARENA_SMALL_BYTES in a
 * region of their own above the others. size[i]: block i's bytes (512-aligned).
 * Returns the arena's bytes (UINT64_MAX without memory). */
uint64_t tpurt_program_plan_arena(const prog_block_t* blocks, int32_t num_blocks, const uint64_t* size,
                                  uint64_t* out_off) {
  int32_t n = 0;
  int32_t* order = malloc(sizeof(int32_t) * (size_t)(num_blocks ? num_blocks : 1));
  if (!order) return UINT64_MAX;
  for (int32_t i = 0; i < num_blocks; ++i) {
    out_off[i] = 0;
    if (blocks[i].in_arena) order[n++] = i;
  }
  for (int32_t i = 1; i < n; ++i) /* insertion sort by size, descending (n is a graph's intermediates) */
    for (int32_t j = i; j > 0; --j) {
      if (size[order[j - 1]] >= size[order[j]]) break;
      int32_t t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  int32_t nlarge = 0, nsmall = 0;
  while (nlarge < n && size[order[nlarge]] >= ARENA_SMALL_BYTES) ++nlarge;
  while (nlarge + nsmall < n && size[order[nlarge + nsmall]] > ARENA_ALIGN) ++nsmall;
  uint64_t total = place_blocks(blocks, order, nlarge, size, 0, out_off);
  uint64_t base = (total + ARENA_ALIGN - 1) & ~(uint64_t)(ARENA_ALIGN - 1);
  total = place_blocks(blocks, order + nlarge, nsmall, size, base, out_off);
  for (int32_t k = nlarge + nsmall; k < n; ++k) { /* scalars: a unit each */
    out_off[order[k]] = (total + ARENA_ALIGN - 1) & ~(uint64_t)(ARENA_ALIGN - 1);
    total = out_off[order[k]] + size[order[k]];
  }
  free(order);
  return total;
}

tpurt_status_t tpurt_capture_end(tpurt_queue_t* q, const tpurt_program_range_t* inputs, int32_t num_inputs,
                                 const tpurt_program_range_t* outputs, int32_t num_outputs, uint64_t rng_seed,
                                 uint64_t rng_before, uint64_t rng_after, tpurt_program_t** out_program) {
  if (!out_program) return TPURT_STATUS(INVALID_ARGUMENT, "capture_end: NULL out_program");
  *out_program = NULL;
  if (!q) return TPURT_STATUS(INVALID_ARGUMENT, "capture_end: NULL queue");
  if (num_inputs < 0 || num_outputs < 0 || (num_inputs && !inputs) || (num_outputs && !outputs))
    return TPURT_STATUS(INVALID_ARGUMENT, "capture_end: bad input or output ranges");
  tpurt_capture_t* c = take_capture(q);
  if (!c) return TPURT_STATUS(FAILED_PRECONDITION, "capture_end: queue %llu is not capturing", (unsigned long long)q->id);
  if (c->broken) {
    tpurt_status_t s = c->broken;
    c->broken = NULL;
    capture_free(c);
    return s;
  }
  tpurt_program_t* p = tpurt_program_alloc();
  if (!p) {
    capture_free(c);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "capture_end: out of host memory");
  }
  p->num_inputs = num_inputs;
  p->num_outputs = num_outputs;
  p->rng_count = rng_after - rng_before;
  builder_t bd = {.c = c, .p = p, .inputs = inputs, .num_inputs = num_inputs};
  /* An output's storage: a block alive at the end (or an input's, which
   * the caller rebuilds as a view: no block). */
  for (int32_t j = 0; j < num_outputs; ++j) {
    uintptr_t base = (uintptr_t)outputs[j].base;
    for (int32_t i = c->num_blocks - 1; i >= 0; --i) {
      cap_block_t* b = &c->blocks[i];
      if (b->freed_at == INT32_MAX && base >= b->lo && base < b->hi) {
        if (b->output < 0) b->output = j;
        break;
      }
    }
  }
  tpurt_defer_list_t* l = c->list;
  for (int32_t r = 0; r < l->num_recs && !bd.error; ++r) {
    tpurt_defer_rec_t* rec = &l->recs[r];
    if (rec->kind == TPURT_DEFER_COPY) {
      add_reloc(&bd, &rec->dst, (uintptr_t)rec->dst, (uintptr_t)rec->dst + rec->bytes, r, false);
      add_reloc(&bd, (void**)&rec->src, (uintptr_t)rec->src, (uintptr_t)rec->src + rec->bytes, r, false);
    } else if (rec->kind == TPURT_DEFER_FREE) {
      add_reloc(&bd, &rec->dst, (uintptr_t)rec->dst, (uintptr_t)rec->dst + rec->bytes, r, true);
    } else {
      const tpurt_op_call_t* call = &rec->call;
      for (int32_t o = 0; o < call->num_outputs; ++o) reloc_tensor(&bd, &call->outputs[o], r);
      for (int32_t a = 0; a < call->num_args; ++a) {
        tpurt_arg_t* arg = (tpurt_arg_t*)&call->args[a];
        if (arg->kind == TPURT_ARG_TENSOR) reloc_tensor(&bd, arg->v.tensor, r);
        else if (arg->kind == TPURT_ARG_TENSOR_LIST)
          for (int32_t e = 0; e < arg->count; ++e) reloc_tensor(&bd, arg->v.tensors[e], r);
        else if (arg->kind == TPURT_ARG_RNG) reloc_rng(&bd, &arg->v.rng, rng_seed, rng_before, rng_after);
      }
    }
  }
  /* The blocks, kept: a program that takes sizes at launch plans its arena again for each. */
  if (!bd.error && c->num_blocks) {
    p->blocks = malloc(sizeof(prog_block_t) * (size_t)c->num_blocks);
    if (!p->blocks) bd.error = TPURT_STATUS(RESOURCE_EXHAUSTED, "capture_end: out of host memory");
    else p->num_blocks = c->num_blocks;
  }
  uint64_t* sizes = bd.error ? NULL : malloc(sizeof(uint64_t) * (size_t)(c->num_blocks ? c->num_blocks : 1));
  uint64_t* offs = sizes ? malloc(sizeof(uint64_t) * (size_t)(c->num_blocks ? c->num_blocks : 1)) : NULL;
  if (!bd.error && !offs) bd.error = TPURT_STATUS(RESOURCE_EXHAUSTED, "capture_end: out of host memory");
  uint64_t arena = 0;
  if (!bd.error) {
    for (int32_t i = 0; i < c->num_blocks; ++i) {
      const cap_block_t* b = &c->blocks[i];
      p->blocks[i] = (prog_block_t){.made_at = b->made_at, .freed_at = b->freed_at, .bytes = b->requested,
                                    .in_arena = b->freed_at != INT32_MAX && b->used};
      sizes[i] = b->hi - b->lo;
    }
    arena = tpurt_program_plan_arena(p->blocks, p->num_blocks, sizes, offs);
    if (arena == UINT64_MAX) bd.error = TPURT_STATUS(RESOURCE_EXHAUSTED, "capture_end: out of host memory");
    else
      for (int32_t i = 0; i < c->num_blocks; ++i) p->blocks[i].arena_off = offs[i];
  }
  free(sizes);
  free(offs);
  if (bd.error) {
    capture_free(c);
    tpurt_program_release(p);
    return bd.error;
  }
  /* Arena relocations carry their block: now its planned offset. */
  for (int32_t k = 0; k < p->num_relocs; ++k)
    if (p->relocs[k].where == WHERE_ARENA) p->relocs[k].off += (int64_t)p->blocks[p->relocs[k].index].arena_off;
  p->arena_bytes = arena;
  p->list = c->list;
  p->list->fuse_min_numel = tpurt_program_fuse_min_numel();
  p->list->keep_plan = true;
  c->list = NULL;
  capture_free(c);
  *out_program = p;
  return TPURT_OK;
}

void tpurt_program_query(const tpurt_program_t* p, tpurt_program_info_t* out) {
  memset(out, 0, sizeof(*out));
  if (!p) return;
  out->arena_bytes = p->arena_bytes;
  out->rng_count = p->rng_count;
  out->num_records = p->list->num_recs;
  out->num_kernels = p->list->num_kernels;
  out->num_inputs = p->num_inputs;
  out->num_outputs = p->num_outputs;
  out->launches = atomic_load(&((tpurt_program_t*)p)->launches);
}

/* ---- launch ---- */

typedef struct launch_t {
  tpurt_program_t* p;
  const tpurt_program_binding_t* binding; /* a program that takes sizes: its values and arena plan */
  void* arena;
  tpurt_rng_t rng;
  void* bases[]; /* inputs, then outputs */
} launch_t;

static tpurt_status_t run_launch(void* user, tpurt_kernel_ctx_t* ctx) {
  launch_t* L = user;
  tpurt_program_t* p = L->p;
  pthread_mutex_lock(&p->run_lock);
  const tpurt_program_binding_t* b = L->binding;
  if (b) tpurt_program_apply_binding(p, b); /* sizes first: relocation offsets are among them */
  for (int32_t k = 0; k < p->num_relocs; ++k) {
    const reloc_t* r = &p->relocs[k];
    char* base = r->where == WHERE_INPUT    ? L->bases[r->index]
                 : r->where == WHERE_OUTPUT ? L->bases[p->num_inputs + r->index]
                 : b                        ? (char*)L->arena + b->arena_off[r->index]
                                            : L->arena;
    *r->slot = base + r->off;
  }
  for (int32_t k = 0; k < p->num_rngs; ++k) { /* a binding's offsets follow its sizes (program_sizes.c) */
    p->rngs[k].slot->seed = L->rng.seed;
    p->rngs[k].slot->offset = L->rng.offset + (b && b->rng_rel ? b->rng_rel[k] : p->rngs[k].rel);
  }
  tpurt_status_t s = tpurt_defer_list_run(p->list, ctx);
  pthread_mutex_unlock(&p->run_lock);
  tpurt_program_release(p);
  free(L);
  return s;
}

tpurt_status_t tpurt_program_launch(tpurt_program_t* p, tpurt_queue_t* q, void* const* inputs, int32_t num_inputs,
                                    void* const* outputs, int32_t num_outputs, void* arena, tpurt_rng_t rng) {
  return tpurt_program_launch_bound(p, NULL, q, inputs, num_inputs, outputs, num_outputs, arena, rng);
}

tpurt_status_t tpurt_program_launch_bound(tpurt_program_t* p, const tpurt_program_binding_t* binding,
                                          tpurt_queue_t* q, void* const* inputs, int32_t num_inputs,
                                          void* const* outputs, int32_t num_outputs, void* arena, tpurt_rng_t rng) {
  if (!p || !q) return TPURT_STATUS(INVALID_ARGUMENT, "program_launch: NULL program or queue");
  TPURT_RETURN_IF_FORKED();
  if (p->num_values > 0 && !binding)
    return TPURT_STATUS(INVALID_ARGUMENT, "program_launch: the program takes sizes at launch: bind it first");
  if (p->num_values == 0 && binding)
    return TPURT_STATUS(INVALID_ARGUMENT, "program_launch: a binding given to a program of fixed sizes");
  uint64_t arena_bytes = binding ? binding->arena_bytes : p->arena_bytes;
  if (num_inputs != p->num_inputs || num_outputs != p->num_outputs)
    return TPURT_STATUS(INVALID_ARGUMENT, "program_launch: %d inputs and %d outputs given, the program has %d and %d",
                        num_inputs, num_outputs, p->num_inputs, p->num_outputs);
  if (arena_bytes && !tpurt_device_range_ok(q->device, arena, arena_bytes))
    return TPURT_STATUS(INVALID_ARGUMENT, "program_launch: the arena [%p, +%llu) is not inside the chip's memory",
                        arena, (unsigned long long)arena_bytes);
  for (int32_t i = 0; i < num_inputs + num_outputs; ++i) {
    void* b = i < num_inputs ? inputs[i] : outputs[i - num_inputs];
    if (!b) return TPURT_STATUS(INVALID_ARGUMENT, "program_launch: %s %d is NULL", i < num_inputs ? "input" : "output",
                                i < num_inputs ? i : i - num_inputs);
  }
  launch_t* L = malloc(sizeof(*L) + sizeof(void*) * (size_t)(num_inputs + num_outputs));
  if (!L) return TPURT_STATUS(RESOURCE_EXHAUSTED, "program_launch: out of host memory");
  L->p = p;
  L->binding = binding;
  L->arena = arena;
  L->rng = rng;
  if (num_inputs) memcpy(L->bases, inputs, sizeof(void*) * (size_t)num_inputs);
  if (num_outputs) memcpy(L->bases + num_inputs, outputs, sizeof(void*) * (size_t)num_outputs);
  tpurt_program_retain(p);
  tpurt_hal_command_t cmd = {.kind = TPURT_HAL_COMMAND_CALL, .u.call = {.fn = run_launch, .user = L}};
  /* While tracing, the launch is a host event its kernels link to (hal/trace.h). */
  if (TPURT_UNLIKELY(tpurt_trace_active())) tpurt_trace_tls_launch = tpurt_trace_launch("program launch", q->device->index, q->id);
  pthread_mutex_lock(&q->submit_lock);
  tpurt_status_t s = q->capture ? TPURT_STATUS(FAILED_PRECONDITION, "program_launch: the queue is capturing")
                                : tpurt_queue_submit_locked(q, &cmd, NULL);
  pthread_mutex_unlock(&q->submit_lock);
  tpurt_trace_tls_launch = 0;
  if (s) {
    tpurt_program_release(p);
    free(L);
    return s;
  }
  atomic_fetch_add(&p->launches, 1);
  return TPURT_OK;
}
