/* DeferAndFuse: plans a queue's pending graph into fused elementwise chains
 * and runs it on the queue's worker, with exactly Strict's results.
 *
 * THE RULES (the only place they are written; tests/test_defer_fuse.py and
 * runtime/tests/test_fuse.c assert the kernel counts they give):
 *
 *  Materialize (queue.c): at every sync point (synchronize, host copies,
 *  events, anything else queued, is_idle polls), and at a size limit: past
 *  16 records at the next record that cannot join a chain (so the cut falls
 *  at the same place every training step, and the device starts early),
 *  past 1024 records or 8 MiB at once.
 *
 *  Which ops fuse: elementwise kernels (the tpurt_ops_elementwise table; each
 *  runs through tpurt_ew_run exactly once) with one output of >0 elements,
 *  no tensor-list argument, every tensor argument broadcastable to the
 *  output, an output whose elements never share memory (no expanded or
 *  overlapping as_strided view: an in-place pass over one depends on element
 *  order), and no partial overlap between an op's output and its own inputs.
 *
 *  A chain (one kernel) gathers, in graph order from its first op, up to
 *  FUSE_MAX_OPS such ops over one output shape, looking at most FUSE_WINDOW
 *  records ahead. The chain runs where its first op stood, so every record
 *  it passes over runs after it. A record is passed over (left for later):
 *   1. if it cannot fuse (reductions, matmuls, random ops, copies, ...);
 *   2. if its output shape differs;
 *   3. in place / aliasing: if its output overlaps any tensor the chain
 *      already reads or writes, or an input overlaps a chain output, unless
 *      the two are the very same view (data, dtype, sizes, strides); views of
 *      one storage that are not identical never fuse. (Identical views are
 *      the in-place case x.add_(1) that a tile-by-tile pass still runs in
 *      Strict's order.) A block the host freed inside the chain may return
 *      as a new buffer with another layout; that is no clash when the old
 *      values lived only in tiles;
 *   4. repeated op subsequences: if it reads nothing the chain produced and
 *      repeats the chain's first op, it starts a chain of its own, so a loop
 *      over parameters (an optimizer's foreach ops) gives one identical kernel
 *      per parameter, and the same kernels every step;
 *   5. size: FUSE_MAX_OPS ops per chain;
 *   6. independence: if it shares a byte with a record already passed over
 *      (moving it ahead of that record would change what either sees).
 *  A reduction ends the chain (rule 7) instead of being passed over when its
 *  kernel reads its input only through the reduction engine (flag
 *  TPURT_OP_REDUCE_ENGINE: sum, mean, amax/amin, max/min over a dim, prod,
 *  all/any, count_nonzero, var/std(_mean), norms, logsumexp) and its one
 *  tensor input is the very view of a member's output
 *  (contiguous), unless a member writes memory the chain reads (in place:
 *  var reads its input twice and both passes must see the same values), its
 *  outputs touch the chain's tensors, or rule 6 holds for it. The engine then
 *  reads that value tile by tile from the chain instead of from memory
 *  (ops/reduce/reduce.h: tpurt_reduce_source_t), so it is written only if live. The engine takes it
 *  only as one contiguous run per output, so only reductions over innermost
 *  dims join (a sum over dim 0 is passed over); should the engine still
 *  decline, it does so before reading and the chain reruns unfused.
 *  Several consumers: a value read by several ops of the chain stays in the
 *  tile for all of them (no recomputation, so no reason to cut); it is
 *  written to memory exactly when the liveness rule below says so.
 *
 *  Liveness: a chain's intermediate result is not written to device memory
 *  only when it is dead: looking forward in the pending graph, the host freed
 *  its block (a free marker from the allocator), or a later op of the same
 *  chain overwrites the identical view, before any record outside the chain
 *  touches those bytes. Anything still live at the end of the pending graph
 *  (a tensor Python still holds) is written.
 *
 *  Running a chain: each kernel is called as in Strict, but its tpurt_ew_run
 *  is intercepted (ops/elementwise/elementwise.h: tpurt_ew_interceptor_t) with the kernel's frame still live, so
 *  promotion, scalars and loops are the kernel's own; the innermost capture
 *  then runs every loop per tile of FUSE_TILE elements (L1/L2-sized), with
 *  intermediates kept in per-thread tile buffers. Values and dtypes are the
 *  ones Strict would store (a float16 intermediate is rounded to float16),
 *  so results are bit-identical for contiguous operands. Anything unexpected
 *  during capture reruns the chain unfused, before anything was written.
 *
 *  Generated code (compiler/): a chain of expression ops
 *  (ew_ops.h) in float32/float64 without casts, each memory input
 *  contiguous or one element along the innermost coalesced dim (a bias row,
 *  a per-row scale), is compiled to one C function computing every member
 *  per element of a run; with a reduction ending the chain, the kernel hands
 *  the reduced value to the engine run by run. The chain is described to the
 *  generator by value (compiler/codegen.h: expression names, types, input
 *  sources, stores; no sizes), so one kernel serves every size. The first
 *  sight of such a chain asks the kernel cache (compiler/cache.h: memory,
 *  then the disk, where another process may have built it); the second
 *  queues a background build. Until the kernel is loaded the chain runs
 *  through the generic path, so a new kernel never stalls a step. Results are
 *  the generic path's: the same expressions, headers and compiler flags (no
 *  FP contraction under -std=c11).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "compiler/chain_kernel.h"
#include "exec/fuse.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"

#define FUSE_MAX_OPS 16
#define FUSE_WINDOW 96                 /* records a chain may look past */
#define FUSE_TILE 2048                 /* elements per tile (8 KiB of float32 per operand) */
#define FUSE_GRAIN ((int64_t)32768)    /* elements per thread at least */
#define FUSE_SLOT_BYTES (FUSE_TILE * 8) /* a tile of the widest dtype */
#define FUSE_MAX_OPERANDS TPURT_EW_MAX_OPERANDS

extern const tpurt_op_def_t tpurt_ops_elementwise[];

/* ------------------------------------------------------------------------ */
/* Pending lists.                                                            */

#define CHUNK_BYTES ((size_t)64 << 10)

struct tpurt_defer_chunk_t {
  tpurt_defer_chunk_t* next;
  size_t size, used;
  _Alignas(16) uint8_t data[];
};

tpurt_defer_list_t* tpurt_defer_list_new(void) { return calloc(1, sizeof(tpurt_defer_list_t)); }

void tpurt_defer_list_free(tpurt_defer_list_t* list) {
  if (!list) return;
  for (tpurt_defer_chunk_t* c = list->chunks; c;) {
    tpurt_defer_chunk_t* n = c->next;
    free(c);
    c = n;
  }
  free(list->recs);
  free(list->spans);
  free(list->span_first);
  free(list);
}

void* tpurt_defer_list_alloc(tpurt_defer_list_t* list, size_t bytes) {
  bytes = (bytes + 7) & ~(size_t)7;
  if (bytes == 0) bytes = 8;
  tpurt_defer_chunk_t* c = list->chunks;
  if (!c || c->size - c->used < bytes) {
    size_t size = bytes > CHUNK_BYTES ? bytes : CHUNK_BYTES;
    tpurt_defer_chunk_t* n = malloc(sizeof(*n) + size);
    if (!n) return NULL;
    n->size = size;
    n->used = 0;
    n->next = c;
    list->chunks = c = n;
    list->arena_bytes += size;
  }
  void* p = c->data + c->used;
  c->used += bytes;
  return p;
}

tpurt_defer_rec_t* tpurt_defer_list_push(tpurt_defer_list_t* list) {
  if (list->num_recs == list->cap_recs) {
    int32_t cap = list->cap_recs ? list->cap_recs * 2 : 64;
    tpurt_defer_rec_t* r = realloc(list->recs, sizeof(*r) * (size_t)cap);
    if (!r) return NULL;
    list->recs = r;
    list->cap_recs = cap;
  }
  tpurt_defer_rec_t* r = &list->recs[list->num_recs++];
  memset(r, 0, sizeof(*r));
  return r;
}

/* ------------------------------------------------------------------------ */
/* Statistics and switches.                                                  */

static struct {
  _Atomic uint64_t ops_recorded, flushes, kernels_launched, fused_groups, fused_ops, stores_skipped,
      bytes_skipped, fallbacks, codegen_runs;
} g_stats;

#define STAT_ADD(f, v) atomic_fetch_add_explicit(&g_stats.f, (v), memory_order_relaxed)

void tpurt_fuse_stats_get(tpurt_fuse_stats_t* o) {
  o->ops_recorded = atomic_load(&g_stats.ops_recorded);
  o->flushes = atomic_load(&g_stats.flushes);
  o->kernels_launched = atomic_load(&g_stats.kernels_launched);
  o->fused_groups = atomic_load(&g_stats.fused_groups);
  o->fused_ops = atomic_load(&g_stats.fused_ops);
  o->stores_skipped = atomic_load(&g_stats.stores_skipped);
  o->bytes_skipped = atomic_load(&g_stats.bytes_skipped);
  o->fallbacks = atomic_load(&g_stats.fallbacks);
  tpurt_chain_kernel_stats_t k;
  tpurt_chain_kernel_stats(&k);
  o->codegen_lookups = k.lookups;
  o->codegen_memory_hits = k.memory_hits;
  o->codegen_disk_loads = k.disk_loads;
  o->codegen_builds = k.builds;
  o->codegen_build_failures = k.build_failures;
  o->codegen_disk_rejects = k.disk_rejects;
  o->codegen_runs = atomic_load(&g_stats.codegen_runs);
}

void tpurt_fuse_stats_reset(void) {
  atomic_store(&g_stats.ops_recorded, 0);
  atomic_store(&g_stats.flushes, 0);
  atomic_store(&g_stats.kernels_launched, 0);
  atomic_store(&g_stats.fused_groups, 0);
  atomic_store(&g_stats.fused_ops, 0);
  atomic_store(&g_stats.stores_skipped, 0);
  atomic_store(&g_stats.bytes_skipped, 0);
  atomic_store(&g_stats.fallbacks, 0);
  atomic_store(&g_stats.codegen_runs, 0);
  tpurt_chain_kernel_stats_reset();
}

void tpurt_fuse_note_recorded(void) { STAT_ADD(ops_recorded, 1); }

/* -1 unset (read TORCH_TPU_FUSE on first use), 0 off, 1 on */
static _Atomic int g_enabled = -1;

bool tpurt_fuse_enabled(void) { return tpurt_env_switch(&g_enabled, "TORCH_TPU_FUSE", true); }

void tpurt_fuse_set_enabled(bool enabled) { atomic_store(&g_enabled, enabled ? 1 : 0); }

void tpurt_fuse_wait_builds(void) { tpurt_chain_kernel_wait(); }
void tpurt_fuse_set_codegen(bool enabled) { tpurt_chain_kernel_set_enabled(enabled); }
bool tpurt_fuse_codegen(void) { return tpurt_chain_kernel_enabled(); }
void tpurt_fuse_cache_clear(void) { tpurt_chain_kernel_clear(); }

/* ------------------------------------------------------------------------ */
/* Which ops fuse.                                                           */

static const tpurt_op_def_t* g_ew_end; /* one past the elementwise table's last entry */
static pthread_once_t g_ew_once = PTHREAD_ONCE_INIT;
static void ew_table_init(void) {
  const tpurt_op_def_t* e = tpurt_ops_elementwise;
  while (e->name) ++e;
  g_ew_end = e;
}

bool tpurt_fuse_op_fusable(const tpurt_op_def_t* op) {
  pthread_once(&g_ew_once, ew_table_init);
  return op && op >= tpurt_ops_elementwise && op < g_ew_end;
}

/* ------------------------------------------------------------------------ */
/* Tensors as byte ranges.                                                   */

static int64_t t_numel(const tpurt_tensor_t* t) { return tpurt_tensor_numel(t); }

/* [lo, hi) of the bytes t touches; false when it touches none. */
static bool t_range(const tpurt_tensor_t* t, uintptr_t* lo, uintptr_t* hi) {
  if (!t || !t->data) return false;
  int64_t span = 0;
  for (int d = 0; d < t->ndim; ++d) {
    if (t->sizes[d] == 0) return false;
    span += (t->sizes[d] - 1) * (t->strides[d] < 0 ? -t->strides[d] : t->strides[d]);
  }
  size_t is = tpurt_dtype_size(t->dtype);
  *lo = (uintptr_t)t->data;
  *hi = *lo + (uintptr_t)(span + 1) * is;
  return true;
}

static bool ranges_overlap(uintptr_t a0, uintptr_t a1, uintptr_t b0, uintptr_t b1) {
  return a0 < b1 && b0 < a1;
}

static bool t_overlap(const tpurt_tensor_t* a, const tpurt_tensor_t* b) {
  uintptr_t a0, a1, b0, b1;
  return t_range(a, &a0, &a1) && t_range(b, &b0, &b1) && ranges_overlap(a0, a1, b0, b1);
}

/* The very same view: element i of one is element i of the other. */
static bool t_same(const tpurt_tensor_t* a, const tpurt_tensor_t* b) {
  if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; ++d) {
    if (a->sizes[d] != b->sizes[d]) return false;
    if (a->sizes[d] != 1 && a->strides[d] != b->strides[d]) return false;
  }
  return true;
}

static bool t_same_shape(const tpurt_tensor_t* a, const tpurt_tensor_t* b) {
  if (a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; ++d)
    if (a->sizes[d] != b->sizes[d]) return false;
  return true;
}

/* t broadcasts to shape s (right-aligned, 1 or equal). */
static bool t_broadcasts_to(const tpurt_tensor_t* t, const tpurt_tensor_t* s) {
  if (t->ndim > s->ndim) return false;
  int off = s->ndim - t->ndim;
  for (int d = 0; d < t->ndim; ++d)
    if (t->sizes[d] != 1 && t->sizes[d] != s->sizes[off + d]) return false;
  return true;
}

/* Two elements of t may share memory (an expanded or as_strided output):
 * with dims sorted by stride, each stride must pass the span of the ones
 * inside it. An in-place pass over such a view depends on element order,
 * which a fused pass would change. */
static bool t_self_overlapping(const tpurt_tensor_t* t) {
  int64_t st[TPURT_MAX_DIMS], sz[TPURT_MAX_DIMS];
  int n = 0;
  for (int d = 0; d < t->ndim; ++d) {
    if (t->sizes[d] <= 1) continue;
    int64_t s = t->strides[d] < 0 ? -t->strides[d] : t->strides[d];
    int k = n++;
    while (k > 0 && st[k - 1] > s) {
      st[k] = st[k - 1];
      sz[k] = sz[k - 1];
      --k;
    }
    st[k] = s;
    sz[k] = t->sizes[d];
  }
  int64_t span = 0; /* largest offset the inner dims reach */
  for (int k = 0; k < n; ++k) {
    if (st[k] <= span) return true;
    span += (sz[k] - 1) * st[k];
  }
  return false;
}

/* Each record's tensors as byte ranges, computed once per graph (a range is
 * asked for many times while planning): slot k < num_outputs is output k,
 * slot num_outputs + i argument i (empty unless a tensor), then the elements
 * of tensor-list arguments; a copy has its dst and src. */
static int32_t rec_num_spans(const tpurt_defer_rec_t* r) {
  if (r->kind == TPURT_DEFER_COPY) return 2;
  if (r->kind != TPURT_DEFER_KERNEL) return 0;
  int32_t n = r->call.num_outputs + r->call.num_args;
  for (int32_t i = 0; i < r->call.num_args; ++i)
    if (r->call.args[i].kind == TPURT_ARG_TENSOR_LIST) n += r->call.args[i].count;
  return n;
}

static tpurt_span_t t_span(const tpurt_tensor_t* t) {
  tpurt_span_t s = {0, 0};
  if (!t_range(t, &s.lo, &s.hi)) s.lo = s.hi = 0;
  return s;
}

static bool spans_build(tpurt_defer_list_t* l) {
  l->span_first = malloc(sizeof(int32_t) * ((size_t)l->num_recs + 1));
  if (!l->span_first) return false;
  int64_t total = 0;
  for (int32_t i = 0; i < l->num_recs; ++i) {
    l->span_first[i] = (int32_t)total;
    total += rec_num_spans(&l->recs[i]);
  }
  l->span_first[l->num_recs] = (int32_t)total;
  l->spans = calloc(total ? (size_t)total : 1, sizeof(tpurt_span_t));
  if (!l->spans) return false;
  for (int32_t i = 0; i < l->num_recs; ++i) {
    const tpurt_defer_rec_t* r = &l->recs[i];
    tpurt_span_t* sp = l->spans + l->span_first[i];
    if (r->kind == TPURT_DEFER_COPY) {
      uintptr_t d = (uintptr_t)r->dst, s = (uintptr_t)r->src;
      sp[0] = (tpurt_span_t){d, d + r->bytes};
      sp[1] = (tpurt_span_t){s, s + r->bytes};
      continue;
    }
    if (r->kind != TPURT_DEFER_KERNEL) continue;
    const tpurt_op_call_t* c = &r->call;
    int32_t k = 0, extra = c->num_outputs + c->num_args;
    for (int32_t o = 0; o < c->num_outputs; ++o) sp[k++] = t_span(&c->outputs[o]);
    for (int32_t a = 0; a < c->num_args; ++a, ++k) {
      const tpurt_arg_t* g = &c->args[a];
      if (g->kind == TPURT_ARG_TENSOR && g->v.tensor) sp[k] = t_span(g->v.tensor);
      else if (g->kind == TPURT_ARG_TENSOR_LIST)
        for (int32_t e = 0; e < g->count; ++e)
          if (g->v.tensors[e]) sp[extra + e] = t_span(g->v.tensors[e]);
      if (g->kind == TPURT_ARG_TENSOR_LIST) extra += g->count;
    }
  }
  return true;
}

/* Record i's output o / argument a as a span (spans_build's layout). */
static tpurt_span_t out_span(const tpurt_defer_list_t* l, int32_t i, int32_t o) {
  return l->spans[l->span_first[i] + o];
}
static tpurt_span_t arg_span(const tpurt_defer_list_t* l, int32_t i, int32_t a) {
  return l->spans[l->span_first[i] + l->recs[i].call.num_outputs + a];
}
static bool spans_overlap(tpurt_span_t a, tpurt_span_t b) { return a.lo < b.hi && b.lo < a.hi; }

/* Does record i read or write any byte of [lo, hi)? */
static bool rec_touches(const tpurt_defer_list_t* l, int32_t i, uintptr_t lo, uintptr_t hi) {
  const tpurt_span_t* sp = l->spans + l->span_first[i];
  int32_t n = l->span_first[i + 1] - l->span_first[i];
  for (int32_t k = 0; k < n; ++k)
    if (sp[k].lo < hi && lo < sp[k].hi) return true;
  return false;
}

/* ------------------------------------------------------------------------ */
/* Planning.                                                                 */

/* May this record join a chain at all (on its own terms)? */
static bool rec_eligible(const tpurt_defer_rec_t* r) {
  if (r->kind != TPURT_DEFER_KERNEL || !tpurt_fuse_op_fusable(r->op)) return false;
  const tpurt_op_call_t* c = &r->call;
  if (c->num_outputs != 1) return false;
  const tpurt_tensor_t* o = &c->outputs[0];
  if (t_numel(o) <= 0 || t_self_overlapping(o) || !o->data) return false;
  int ntensors = 0;
  for (int32_t i = 0; i < c->num_args; ++i) {
    const tpurt_arg_t* g = &c->args[i];
    if (g->kind == TPURT_ARG_TENSOR_LIST) return false;
    if (g->kind != TPURT_ARG_TENSOR || !g->v.tensor) continue;
    const tpurt_tensor_t* t = g->v.tensor;
    if (++ntensors >= FUSE_MAX_OPERANDS) return false;
    if (!t_broadcasts_to(t, o)) return false;
    if (t_overlap(t, o) && !t_same(t, o)) return false;
  }
  return true;
}

/* Does record r read a tensor identical to an output of members[0..n)? */
static bool rec_reads_group(const tpurt_defer_list_t* l, const int32_t* members, int n,
                            const tpurt_defer_rec_t* r) {
  const tpurt_op_call_t* c = &r->call;
  for (int32_t i = 0; i < c->num_args; ++i) {
    if (c->args[i].kind != TPURT_ARG_TENSOR || !c->args[i].v.tensor) continue;
    for (int m = 0; m < n; ++m)
      if (t_same(c->args[i].v.tensor, &l->recs[members[m]].call.outputs[0])) return true;
  }
  return false;
}

/* Same op (name, overload, argument kinds and dtypes) as another record. */
static bool rec_same_op(const tpurt_defer_rec_t* a, const tpurt_defer_rec_t* b) {
  if (a->op != b->op || a->call.num_args != b->call.num_args) return false;
  if (a->call.outputs[0].dtype != b->call.outputs[0].dtype) return false;
  for (int32_t i = 0; i < a->call.num_args; ++i) {
    const tpurt_arg_t *x = &a->call.args[i], *y = &b->call.args[i];
    if (x->kind != y->kind) return false;
    if (x->kind == TPURT_ARG_TENSOR && x->v.tensor && y->v.tensor && x->v.tensor->dtype != y->v.tensor->dtype)
      return false;
  }
  return true;
}

/* Was t's block freed by a marker between records a and b (exclusive)? */
static bool freed_between(const tpurt_defer_list_t* l, int32_t a, int32_t b, tpurt_span_t t) {
  uintptr_t lo = t.lo, hi = t.hi;
  if (lo == hi) return false;
  for (int32_t i = a + 1; i < b; ++i) {
    const tpurt_defer_rec_t* r = &l->recs[i];
    if (r->kind == TPURT_DEFER_FREE && ranges_overlap(lo, hi, (uintptr_t)r->dst, (uintptr_t)r->dst + r->bytes))
      return true;
  }
  return false;
}

/* Rule 3: does record ri's memory clash with the chain so far? A block the
 * host freed inside the chain may come back as a new buffer with another
 * layout: the old values there were produced and read inside the chain (so
 * they live in tiles, never in memory) and do not clash; an old value the
 * chain read from memory still does. */
static bool rec_conflicts(const tpurt_defer_list_t* l, const int32_t* members, int n, int32_t ri) {
  const tpurt_defer_rec_t* r = &l->recs[ri];
  const tpurt_tensor_t* o = &r->call.outputs[0];
  tpurt_span_t os = out_span(l, ri, 0);
  for (int m = 0; m < n; ++m) {
    const tpurt_op_call_t* c = &l->recs[members[m]].call;
    const tpurt_tensor_t* mo = &c->outputs[0];
    tpurt_span_t mos = out_span(l, members[m], 0);
    bool mo_dead = freed_between(l, members[m], ri, mos);
    if (!mo_dead && spans_overlap(os, mos) && !t_same(o, mo)) return true;
    for (int32_t i = 0; i < c->num_args; ++i) {
      const tpurt_arg_t* g = &c->args[i];
      if (g->kind != TPURT_ARG_TENSOR || !g->v.tensor) continue;
      tpurt_span_t gs = arg_span(l, members[m], i);
      if (!spans_overlap(os, gs) || t_same(o, g->v.tensor)) continue;
      bool from_chain = false;
      for (int j = 0; j < m && !from_chain; ++j)
        from_chain = t_same(g->v.tensor, &l->recs[members[j]].call.outputs[0]);
      if (!(from_chain && freed_between(l, members[m], ri, gs))) return true;
    }
    if (mo_dead) continue; /* r's inputs there are the new buffer's */
    for (int32_t i = 0; i < r->call.num_args; ++i) {
      const tpurt_arg_t* g = &r->call.args[i];
      if (g->kind == TPURT_ARG_TENSOR && g->v.tensor && spans_overlap(arg_span(l, ri, i), mos) &&
          !t_same(g->v.tensor, mo))
        return true;
    }
  }
  return false;
}

/* TORCH_TPU_FUSE_TRACE=1: one line per chain on stderr, with the rule that cut it. */
bool tpurt_fuse_trace(void) {
  static _Atomic int t = -1;
  return tpurt_env_switch(&t, "TORCH_TPU_FUSE_TRACE", false);
}

/* A record's bytes as one interval (the hull of its spans), so that most
 * independence checks are one comparison. */
typedef tpurt_span_t hull_t;

static hull_t rec_hull(const tpurt_defer_list_t* l, int32_t i) {
  hull_t h = {UINTPTR_MAX, 0};
  for (int32_t k = l->span_first[i]; k < l->span_first[i + 1]; ++k) {
    const tpurt_span_t* sp = &l->spans[k];
    if (sp->lo == sp->hi) continue;
    if (sp->lo < h.lo) h.lo = sp->lo;
    if (sp->hi > h.hi) h.hi = sp->hi;
  }
  return h;
}

/* Do an eligible record ri and any record si share a byte? */
static bool recs_share(const tpurt_defer_list_t* l, int32_t ri, int32_t si, const hull_t* hulls) {
  if (!ranges_overlap(hulls[ri].lo, hulls[ri].hi, hulls[si].lo, hulls[si].hi)) return false;
  const tpurt_span_t* sp = l->spans + l->span_first[ri];
  int32_t n = l->span_first[ri + 1] - l->span_first[ri];
  /* output 0 and the arguments (an eligible record has one output, no lists) */
  for (int32_t k = 0; k < n; ++k)
    if (sp[k].lo != sp[k].hi && rec_touches(l, si, sp[k].lo, sp[k].hi)) return true;
  return false;
}

/* Does reduction call c over `in` reduce only innermost dims (one contiguous
 * run per output, the only way the engine takes a chain's value)? The dim
 * argument is the first after self (after ord/p for the norms); absent,
 * None or [] mean every dim. */
static bool red_dims_innermost(const tpurt_op_call_t* c, const tpurt_tensor_t* in) {
  int di = (strcmp(c->name, "linalg_vector_norm") == 0 || strcmp(c->name, "norm") == 0) ? 2 : 1;
  bool mask[TPURT_MAX_DIMS] = {false};
  const tpurt_arg_t* g = di < c->num_args ? &c->args[di] : NULL;
  int nd = in->ndim;
  if (!g || g->kind == TPURT_ARG_NONE || (g->kind == TPURT_ARG_INT_LIST && g->count == 0)) return true;
  if (g->kind == TPURT_ARG_INT || g->kind == TPURT_ARG_INT_LIST) {
    int cnt = g->kind == TPURT_ARG_INT ? 1 : g->count;
    for (int k = 0; k < cnt; ++k) {
      int64_t d = g->kind == TPURT_ARG_INT ? g->v.i : g->v.ints[k];
      if (nd == 0) return true;
      if (d < 0) d += nd;
      if (d < 0 || d >= nd) return false; /* the kernel reports it */
      mask[d] = true;
    }
  } else {
    return true; /* a form without dims (sum(self, dtype)): every dim */
  }
  bool seen_reduced = false;
  for (int d = 0; d < nd; ++d) {
    if (in->sizes[d] == 1) continue;
    if (mask[d]) seen_reduced = true;
    else if (seen_reduced) return false; /* a kept dim inside the reduced ones */
  }
  return true;
}

/* May record ri, a reduction, end the chain members[0..n) (reading one
 * member's value from the tiles instead of memory)? Returns that member, or
 * -1. Its one tensor input must be a member's output (contiguous), no member
 * may write memory the chain also reads (a value produced twice must not
 * change: the engine reads it once per pass and var/std make two passes),
 * its outputs must not touch the chain, and it must share no byte with a
 * record the chain passed over (rule 6). */
static int reduction_source(const tpurt_defer_list_t* l, const int32_t* members, int n, int32_t ri,
                            const int32_t* passed, int np, const hull_t* hulls) {
  const tpurt_defer_rec_t* r = &l->recs[ri];
  if (r->kind != TPURT_DEFER_KERNEL || !r->op || !(r->op->flags & TPURT_OP_REDUCE_ENGINE)) return -1;
  const tpurt_op_call_t* c = &r->call;
  const tpurt_tensor_t* in = NULL;
  for (int32_t i = 0; i < c->num_args; ++i) {
    const tpurt_arg_t* g = &c->args[i];
    if (g->kind == TPURT_ARG_TENSOR_LIST) return -1;
    if (g->kind != TPURT_ARG_TENSOR || !g->v.tensor) continue;
    if (in) return -1;
    in = g->v.tensor;
  }
  if (!in || t_numel(in) <= 0 || !tpurt_tensor_is_contiguous(in) || c->num_outputs < 1 ||
      !red_dims_innermost(c, in))
    return -1;
  int src = -1;
  for (int m = n - 1; m >= 0 && src < 0; --m)
    if (t_same(in, &l->recs[members[m]].call.outputs[0])) src = m;
  if (src < 0) return -1;
  for (int m = 0; m < n; ++m) {
    const tpurt_op_call_t* mc = &l->recs[members[m]].call;
    for (int32_t i = 0; i < mc->num_args; ++i) {
      const tpurt_arg_t* g = &mc->args[i];
      if (g->kind != TPURT_ARG_TENSOR || !g->v.tensor) continue;
      bool from_chain = false;
      for (int j = 0; j < m && !from_chain; ++j)
        from_chain = t_same(g->v.tensor, &l->recs[members[j]].call.outputs[0]);
      if (from_chain) continue;
      tpurt_span_t gs = arg_span(l, members[m], i);
      for (int j = 0; j < n; ++j) /* memory the chain reads and writes: in place */
        if (spans_overlap(gs, out_span(l, members[j], 0))) return -1;
      for (int32_t o = 0; o < c->num_outputs; ++o)
        if (spans_overlap(out_span(l, ri, o), gs)) return -1;
    }
    /* a member's block the host freed before the reduction may hold its
     * output: that value lived only in tiles (the liveness rule) */
    tpurt_span_t mos = out_span(l, members[m], 0);
    for (int32_t o = 0; o < c->num_outputs; ++o)
      if (spans_overlap(out_span(l, ri, o), mos) && !freed_between(l, members[m], ri, mos)) return -1;
  }
  tpurt_span_t ins = t_span(in);
  for (int k = 0; k < np; ++k) {
    int32_t q = passed[k];
    if (!ranges_overlap(hulls[ri].lo, hulls[ri].hi, hulls[q].lo, hulls[q].hi)) continue;
    if (ins.lo != ins.hi && rec_touches(l, q, ins.lo, ins.hi)) return -1;
    for (int32_t o = 0; o < c->num_outputs; ++o) {
      tpurt_span_t os = out_span(l, ri, o);
      if (os.lo != os.hi && rec_touches(l, q, os.lo, os.hi)) return -1;
    }
  }
  return src;
}

/* The chain starting at record `start`: its record indices into members;
 * returns how many (1 = run alone); a reduction ending it (rule 7) goes to
 * members[n] and *out_red. Records it passes over (rule 6) go on
 * after it, so a member may not share a byte with any of them. */
static int plan_chain(const tpurt_defer_list_t* l, int32_t start, int32_t* members, const bool* done,
                      const bool* elig, const hull_t* hulls, int32_t* out_red, int* out_red_src) {
  *out_red = -1;
  *out_red_src = -1;
  members[0] = start;
  int n = 1;
  const tpurt_defer_rec_t* first = &l->recs[start];
  if (!elig[start]) {
    if (tpurt_fuse_trace()) fprintf(stderr, "[fuse] %s runs alone (rule 1)\n", first->call.name);
    return 1;
  }
  const tpurt_tensor_t* shape = &first->call.outputs[0];
  int32_t passed[FUSE_WINDOW];
  int np = 0;
  int counts[7] = {0};
  for (int32_t i = start + 1; i < l->num_recs && i - start <= FUSE_WINDOW && n < FUSE_MAX_OPS; ++i) {
    const tpurt_defer_rec_t* r = &l->recs[i];
    if (r->kind == TPURT_DEFER_FREE || done[i]) continue;
    int why = 0;
    if (!elig[i]) {
      int src = reduction_source(l, members, n, i, passed, np, hulls);
      if (src >= 0) { /* rule 7: the chain ends in this reduction, members[n] */
        members[n] = i;
        *out_red = i;
        *out_red_src = src;
        break;
      }
      why = 1;
    } else if (!t_same_shape(&r->call.outputs[0], shape)) why = 2;
    else if (rec_conflicts(l, members, n, i)) why = 3;
    else if (rec_same_op(r, first) && !rec_reads_group(l, members, n, r)) why = 4;
    else
      for (int k = 0; k < np && !why; ++k)
        if (recs_share(l, i, passed[k], hulls)) why = 6;
    if (why) {
      counts[why]++;
      passed[np++] = i;
    } else {
      members[n++] = i;
    }
  }
  if (tpurt_fuse_trace())
    fprintf(stderr, "[fuse] chain of %d from %s%s%s; passed over: rule1 %d, rule2 %d, rule3 %d, rule4 %d, rule6 %d\n",
            n, first->call.name, *out_red >= 0 ? " into " : "", *out_red >= 0 ? l->recs[*out_red].call.name : "",
            counts[1], counts[2], counts[3], counts[4], counts[6]);
  return n;
}

/* Liveness: must member `m`'s output be written to memory? */
static bool member_stores(const tpurt_defer_list_t* l, const int32_t* members, int n, int m,
                          const hull_t* hulls) {
  const tpurt_tensor_t* o = &l->recs[members[m]].call.outputs[0];
  uintptr_t lo, hi;
  if (!t_range(o, &lo, &hi)) return true;
  int next = m + 1;
  for (int32_t i = members[m] + 1; i < l->num_recs; ++i) {
    const tpurt_defer_rec_t* r = &l->recs[i];
    if (r->kind == TPURT_DEFER_FREE) {
      uintptr_t f = (uintptr_t)r->dst;
      if (ranges_overlap(lo, hi, f, f + r->bytes)) return false; /* the host let it go */
      continue;
    }
    if (next < n && i == members[next]) {
      ++next;
      if (t_same(&r->call.outputs[0], o)) return false; /* overwritten in the same tile */
      continue;                                         /* reads it from the tile */
    }
    if (ranges_overlap(lo, hi, hulls[i].lo, hulls[i].hi) && rec_touches(l, i, lo, hi))
      return true; /* used outside the chain */
  }
  return true; /* still live when the graph ends: the host may read it */
}

/* ------------------------------------------------------------------------ */
/* Running a chain: capture each kernel's configuration, then one pass.      */

typedef struct chain_t {
  tpurt_kernel_ctx_t* ctx;
  const tpurt_defer_list_t* list;
  const int32_t* members;
  int n;
  bool store[FUSE_MAX_OPS + 1];
  const tpurt_ew_config_t* cfg[FUSE_MAX_OPS];
  int level;      /* next kernel expected to capture */
  bool executed;  /* the fused pass ran (outputs written) */
  bool fallback;  /* capture went off plan: rerun unfused */
  int err_level;  /* deepest kernel that returned an error after the pass */
  int32_t red;    /* record of the reduction ending the chain, or -1 */
  int red_src;    /* the member whose value it reduces */
  bool red_used;  /* the reduction engine took the chain as its source */
  tpurt_status_t red_status; /* what the reduction kernel returned */

  /* the pass */
  int src[FUSE_MAX_OPS][FUSE_MAX_OPERANDS]; /* input k: producing member, or -1: memory */
  int slot[FUSE_MAX_OPS];                   /* tile buffer of each member's value, -1: none */
  bool direct[FUSE_MAX_OPS];                /* stored without a cast: loop writes memory */
  bool stream[FUSE_MAX_OPS];                /* ... with non-temporal stores (bigger than the LLC) */
  bool any_stream;
  int nd;                                   /* coalesced dims, innermost first */
  int64_t shape[TPURT_MAX_DIMS];
  int num_slots;
  size_t per_thread;
  uint8_t* scratch;
  int64_t numel;

  /* the generated kernel, when the chain has one (compiler/chain_kernel.h) */
  tpurt_gen_fn_t gen_fn;
  tpurt_gen_args_t gen_args;
  bool gen_stream; /* stored outputs streamed; all share one 64-byte phase */
  int gen_first;   /* a stored member (for the alignment of a range) */
  int64_t gen_es;  /* the stored outputs' element size */
  _Alignas(8) char gen_scalar[FUSE_MAX_OPS][FUSE_MAX_OPERANDS][8]; /* scalars cast to the loop dtype */
  bool gen_cast[FUSE_MAX_OPS][FUSE_MAX_OPERANDS];                    /* ... in gen_scalar */

  /* Last and not cleared per chain (16 KiB): chain_prepare writes every entry
   * it reads, [member][operand 0..num_inputs][dim 0..nd). */
  int64_t strides[FUSE_MAX_OPS][FUSE_MAX_OPERANDS][TPURT_MAX_DIMS]; /* bytes */
} chain_t;


static tpurt_status_t chain_level(chain_t* ch, int k);
static tpurt_status_t chain_prepare(chain_t* ch);
static void chain_pass(chain_t* ch);
static bool chain_generated(chain_t* ch);
static void chain_reduce(chain_t* ch);

static tpurt_status_t off_plan(chain_t* ch) {
  ch->fallback = true;
  return TPURT_STATUS(ABORTED, "fuse: chain capture went off plan (rerun unfused)");
}

static tpurt_status_t fuse_capture(void* user, tpurt_kernel_ctx_t* ctx, const tpurt_ew_config_t* cfg) {
  chain_t* ch = user;
  int k = ch->level;
  if (k >= ch->n || ch->cfg[k] || ctx != ch->ctx || ch->fallback) return off_plan(ch);
  const tpurt_defer_rec_t* r = &ch->list->recs[ch->members[k]];
  /* The configuration must be the planned one: this op's own output, inputs
   * broadcasting to it. */
  if (cfg->num_outputs != 1 || cfg->num_inputs < 0 || cfg->num_inputs + 1 > FUSE_MAX_OPERANDS ||
      cfg->tensors[0] != &r->call.outputs[0])
    return off_plan(ch);
  for (int i = 1; i <= cfg->num_inputs; ++i)
    if (!cfg->tensors[i] || !t_broadcasts_to(cfg->tensors[i], cfg->tensors[0])) return off_plan(ch);
  ch->cfg[k] = cfg;
  ch->level = k + 1;
  if (k + 1 < ch->n) return chain_level(ch, k + 1);
  /* Innermost: every configuration is live on the stack; run them all
   * (through the reduction kernel when one ends the chain). */
  const tpurt_ew_interceptor_t* icpt = tpurt_ew_tls_interceptor;
  tpurt_ew_tls_interceptor = NULL; /* the loops run for real now (and a reduction's kernel) */
  tpurt_status_t s = chain_prepare(ch);
  if (!s) {
    if (ch->red >= 0) chain_reduce(ch);
    else if (!chain_generated(ch)) chain_pass(ch);
  }
  tpurt_ew_tls_interceptor = icpt;
  if (s) {
    tpurt_status_free(s);
    return off_plan(ch);
  }
  if (ch->red >= 0 && !ch->red_used) return off_plan(ch); /* nothing was produced */
  ch->executed = true;
  return TPURT_OK;
}

static tpurt_status_t chain_level(chain_t* ch, int k) {
  const tpurt_defer_rec_t* r = &ch->list->recs[ch->members[k]];
  tpurt_status_t s = r->op->fn(ch->ctx, &r->call);
  if (!ch->cfg[k]) ch->fallback = true; /* returned without running its loop */
  if (s && ch->executed && ch->err_level < 0) ch->err_level = k;
  return s;
}

static void chain_range(void* user, int64_t begin, int64_t end, int tid);

/* Plans the pass over the captured configurations. */
static tpurt_status_t chain_prepare(chain_t* ch) {
  const tpurt_tensor_t* out0 = ch->cfg[0]->tensors[0];
  int snd = out0->ndim;
  /* Operand sources: an input identical to an earlier member's output reads
   * that member's value (the latest one). */
  for (int k = 0; k < ch->n; ++k) {
    const tpurt_ew_config_t* c = ch->cfg[k];
    for (int i = 1; i <= c->num_inputs; ++i) {
      ch->src[k][i] = -1;
      for (int j = k - 1; j >= 0; --j)
        if (t_same(c->tensors[i], ch->cfg[j]->tensors[0])) {
          ch->src[k][i] = j;
          break;
        }
    }
    ch->direct[k] = ch->store[k] && c->loop_dtypes[0] == c->tensors[0]->dtype;
  }
#if defined(__AVX__)
  /* A contiguous output bigger than the last-level cache is streamed, as
   * Strict's engine does: its lines would be read for ownership and evicted
   * unread. (Tiles stay in cache: only direct stores stream.) */
  ch->any_stream = false;
  for (int k = 0; k < ch->n; ++k) {
    const tpurt_tensor_t* o = ch->cfg[k]->tensors[0];
    int64_t es = (int64_t)tpurt_dtype_size(o->dtype);
    ch->stream[k] = ch->direct[k] && tpurt_tensor_is_contiguous(o) &&
                    t_numel(o) * es >= tpurt_ew_stream_min_bytes();
    ch->any_stream |= ch->stream[k];
  }
#endif
  /* Tile slots, reused once a value's last reader is past. */
  int last_use[FUSE_MAX_OPS];
  for (int k = 0; k < ch->n; ++k) last_use[k] = k;
  for (int k = 0; k < ch->n; ++k)
    for (int i = 1; i <= ch->cfg[k]->num_inputs; ++i)
      if (ch->src[k][i] >= 0) last_use[ch->src[k][i]] = k;
  if (ch->red >= 0) last_use[ch->red_src] = ch->n; /* the reduction reads it after the last member */
  int slot_owner[FUSE_MAX_OPS];
  ch->num_slots = 0;
  for (int k = 0; k < ch->n; ++k) {
    ch->slot[k] = -1;
    if (ch->direct[k]) continue;
    int s = -1;
    for (int j = 0; j < ch->num_slots && s < 0; ++j)
      if (slot_owner[j] < 0 || last_use[slot_owner[j]] < k) s = j;
    if (s < 0) s = ch->num_slots++;
    slot_owner[s] = k;
    ch->slot[k] = s;
  }
  /* Broadcast strides (bytes) over the output shape, then drop size-1 dims
   * and coalesce dims that are one run for every memory operand. */
  int64_t full[FUSE_MAX_OPS][FUSE_MAX_OPERANDS][TPURT_MAX_DIMS];
  memset(full, 0, sizeof(full));
  for (int k = 0; k < ch->n; ++k) {
    const tpurt_ew_config_t* c = ch->cfg[k];
    for (int i = 0; i <= c->num_inputs; ++i) {
      const tpurt_tensor_t* t = c->tensors[i];
      int off = snd - t->ndim;
      int64_t is = (int64_t)tpurt_dtype_size(t->dtype);
      for (int d = 0; d < t->ndim; ++d)
        full[k][i][off + d] = t->sizes[d] == 1 ? 0 : t->strides[d] * is;
    }
  }
  int nd = 0;
  for (int d = snd - 1; d >= 0; --d) {
    if (out0->sizes[d] == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; k < ch->n && merge; ++k)
      for (int i = 0; i <= ch->cfg[k]->num_inputs && merge; ++i)
        merge = ch->strides[k][i][nd - 1] * ch->shape[nd - 1] == full[k][i][d];
    if (merge) {
      ch->shape[nd - 1] *= out0->sizes[d];
    } else {
      for (int k = 0; k < ch->n; ++k)
        for (int i = 0; i <= ch->cfg[k]->num_inputs; ++i) ch->strides[k][i][nd] = full[k][i][d];
      ch->shape[nd++] = out0->sizes[d];
    }
  }
  if (nd == 0) {
    ch->shape[0] = 1;
    for (int k = 0; k < ch->n; ++k)
      for (int i = 0; i <= ch->cfg[k]->num_inputs; ++i) ch->strides[k][i][0] = 0;
    nd = 1;
  }
  ch->nd = nd;
  int64_t numel = 1;
  for (int d = 0; d < nd; ++d) numel *= ch->shape[d];
  /* Per thread: the value slots, one cast buffer per operand, and the run a
   * reduction reads (a tile of the widest dtype). */
  int nt = tpurt_kernel_num_threads(ch->ctx);
  ch->per_thread = (size_t)(ch->num_slots + FUSE_MAX_OPERANDS + 1) * FUSE_SLOT_BYTES;
  ch->scratch = tpurt_kernel_scratch(ch->ctx, ch->per_thread * (size_t)nt);
  if (!ch->scratch) return TPURT_STATUS(RESOURCE_EXHAUSTED, "fuse: no scratch for a fused chain");
  ch->numel = numel;
  return TPURT_OK;
}

/* The index (innermost dim first) of linear element `lin` of the chain's
 * coalesced shape, and its move `len` elements on along the innermost dim. */
static void chain_idx_init(const chain_t* ch, int64_t lin, int64_t* idx) {
  for (int d = 0; d < ch->nd; ++d) {
    idx[d] = lin % ch->shape[d];
    lin /= ch->shape[d];
  }
}

static void chain_idx_advance(const chain_t* ch, int64_t* idx, int64_t len) {
  idx[0] += len;
  for (int d = 0; d < ch->nd - 1 && idx[d] >= ch->shape[d]; ++d) {
    idx[d] = 0;
    ++idx[d + 1];
  }
}

/* Runs the planned pass over every element. */
static void chain_pass(chain_t* ch) { tpurt_parallel_for(ch->ctx, ch->numel, FUSE_GRAIN, chain_range, ch); }

/* The generated kernel over elements [begin, end) of one run (args point at
 * the run's first element): streamed in whole aligned blocks when the
 * outputs stream, plain stores for the head and tail. (A kernel returns
 * nonzero only for an args struct too small for it, which the cache's loader
 * has ruled out for ours.) */
static void gen_run(const chain_t* ch, const tpurt_gen_args_t* args, int64_t begin, int64_t end) {
  if (!ch->gen_stream) {
    ch->gen_fn(args, begin, end, 0);
    return;
  }
  uintptr_t a = (uintptr_t)(args->mem[ch->gen_first][0] + begin * ch->gen_es);
  int64_t s = begin + (int64_t)(((64 - (a & 63)) & 63) / (uintptr_t)ch->gen_es);
  if (s > end) s = end;
  int64_t body = (end - s) / TPURT_GEN_BLOCK * TPURT_GEN_BLOCK;
  if (s > begin) ch->gen_fn(args, begin, s, 0);
  if (body) ch->gen_fn(args, s, s + body, 1);
  if (s + body < end) ch->gen_fn(args, s + body, end, 0);
}

/* The kernel's arguments for the run starting at idx: every memory operand's
 * pointer moved there. */
static void gen_args_at(const chain_t* ch, const int64_t* idx, tpurt_gen_args_t* a) {
  for (int k = 0; k < ch->n; ++k)
    for (int i = 0; i <= ch->cfg[k]->num_inputs; ++i) {
      if (!ch->gen_args.mem[k][i] || (i > 0 && ch->src[k][i] >= 0) || ch->gen_cast[k][i]) continue;
      char* p = ch->gen_args.mem[k][i];
      for (int d = 0; d < ch->nd; ++d) p += idx[d] * ch->strides[k][i][d];
      a->mem[k][i] = p;
    }
}

/* Linear elements [begin, end) of the chain's shape: one kernel call for a
 * single coalesced dim, else one per run along the innermost dim, with every
 * memory operand's pointer moved to the run. */
static void gen_range(void* user, int64_t begin, int64_t end, int tid) {
  (void)tid;
  chain_t* ch = user;
  if (ch->nd == 1) {
    gen_run(ch, &ch->gen_args, begin, end);
  } else {
    tpurt_gen_args_t a = ch->gen_args;
    int64_t idx[TPURT_MAX_DIMS];
    chain_idx_init(ch, begin, idx);
    for (int64_t pos = begin; pos < end;) {
      int64_t len = ch->shape[0] - idx[0];
      if (len > end - pos) len = end - pos;
      gen_args_at(ch, idx, &a);
      gen_run(ch, &a, 0, len);
      pos += len;
      chain_idx_advance(ch, idx, len);
    }
  }
#if defined(__AVX__)
  if (ch->gen_stream) _mm_sfence();
#endif
}

/* Runs the chain through its generated kernel when it has one (built or
 * loaded; a chain seen again is queued for a build). The kernel takes chains
 * of expression ops (ew_ops.h) in float32/float64 without casts (but for a
 * scalar), each memory input contiguous or one element along the innermost
 * coalesced dim; outer dims are walked here, a kernel call per run. */
static bool gen_prepare(chain_t* ch);

static bool chain_generated(chain_t* ch) {
  if (!gen_prepare(ch)) return false;
  tpurt_parallel_for(ch->ctx, ch->numel, FUSE_GRAIN, gen_range, ch);
  STAT_ADD(codegen_runs, 1);
  return true;
}

/* Finds the chain's kernel and sets up its arguments; false when it has none
 * (yet). With a reduction ending the chain, the reduced member's value is an
 * output of the kernel: into memory when stored, else into the run the
 * reduction reads (gen_produce). */
static bool gen_prepare(chain_t* ch) {
  if (ch->n > TPURT_GEN_MAX_OPS || !tpurt_chain_kernel_enabled()) return false;
  tpurt_codegen_chain_t g;
  g.n = ch->n;
  ch->gen_args.struct_size = sizeof(tpurt_gen_args_t);
  for (int k = 0; k < ch->n; ++k) {
    const tpurt_ew_config_t* c = ch->cfg[k];
    tpurt_codegen_member_t* m = &g.m[k];
    if (!c->expr || c->num_outputs != 1 || c->num_inputs < 1 || c->num_inputs > TPURT_GEN_MAX_IN)
      return false;
    tpurt_dtype_t t = c->loop_dtypes[1], to = c->loop_dtypes[0];
    if ((t != TPURT_DTYPE_FLOAT32 && t != TPURT_DTYPE_FLOAT64) || c->tensors[0]->dtype != to) return false;
    m->expr = c->expr->name;
    m->type = t;
    m->out = to;
    m->num_inputs = c->num_inputs;
    m->store = ch->store[k] || (ch->red >= 0 && k == ch->red_src);
    int64_t es = (int64_t)tpurt_dtype_size(t);
    for (int i = 1; i <= c->num_inputs; ++i) {
      if (c->loop_dtypes[i] != t) return false;
      int64_t st = ch->strides[k][i][0];
      int j = ch->src[k][i];
      bool scalar = j < 0 && st == 0;
      m->in[i - 1].src = j >= 0 ? TPURT_CODEGEN_SRC_MEMBER : scalar ? TPURT_CODEGEN_SRC_SCALAR : TPURT_CODEGEN_SRC_CONTIG;
      m->in[i - 1].member = (int8_t)(j >= 0 ? j : -1);
      ch->gen_args.mem[k][i] = (char*)c->tensors[i]->data;
      ch->gen_cast[k][i] = false;
      bool one = true; /* a single element for the whole chain */
      for (int d = 0; d < ch->nd; ++d) one = one && ch->strides[k][i][d] == 0;
      if (c->tensors[i]->dtype == t) {
        if (j < 0 && st != 0 && st != es) return false;
      } else if (scalar && one) { /* a broadcast scalar of another dtype: cast once, as the tiles do */
        tpurt_ew_convert_strided(t, ch->gen_scalar[k][i], 0, c->tensors[i]->dtype, c->tensors[i]->data, 0, 1);
        ch->gen_args.mem[k][i] = ch->gen_scalar[k][i];
        ch->gen_cast[k][i] = true;
      } else {
        return false;
      }
    }
    if (m->store && ch->strides[k][0][0] != (int64_t)tpurt_dtype_size(to)) return false;
    ch->gen_args.mem[k][0] = ch->store[k] ? (char*)c->tensors[0]->data : NULL; /* else the run, per call */
    ch->gen_args.params[k] = c->user;
  }
  tpurt_gen_fn_t fn = tpurt_chain_kernel_find(&g);
  if (!fn) return false;
  ch->gen_fn = fn;
  ch->gen_stream = false;
  ch->gen_first = -1;
  bool stream = ch->any_stream && ch->red < 0;
  for (int k = 0; k < ch->n && stream; ++k) {
    if (!ch->store[k]) continue;
    int64_t es = (int64_t)tpurt_dtype_size(g.m[k].out);
    uintptr_t phase = (uintptr_t)ch->gen_args.mem[k][0] & 63;
    if (ch->gen_first < 0) {
      ch->gen_first = k;
      ch->gen_es = es;
    }
    stream = ch->stream[k] && es == ch->gen_es && phase % (uintptr_t)es == 0 &&
             phase == ((uintptr_t)ch->gen_args.mem[ch->gen_first][0] & 63);
  }
  ch->gen_stream = stream && ch->gen_first >= 0;
  return true;
}

/* One run of `len` (<= FUSE_TILE) elements along the innermost dim through
 * every member, memory operands starting at idx. */
static void chain_tile(chain_t* ch, const int64_t* idx, int64_t len, uint8_t* bufs, char** vptr,
                       int64_t* vstride) {
  uint8_t* castb = bufs + (size_t)ch->num_slots * FUSE_SLOT_BYTES;
  for (int k = 0; k < ch->n; ++k) {
    const tpurt_ew_config_t* c = ch->cfg[k];
    char* data[FUSE_MAX_OPERANDS];
    int64_t st[FUSE_MAX_OPERANDS];
    char* mem[FUSE_MAX_OPERANDS];
    for (int i = 0; i <= c->num_inputs; ++i) {
      char* p = (char*)c->tensors[i]->data;
      for (int d = 0; d < ch->nd; ++d) p += idx[d] * ch->strides[k][i][d];
      mem[i] = p;
    }
    for (int i = 1; i <= c->num_inputs; ++i) {
      tpurt_dtype_t dt = c->tensors[i]->dtype, ld = c->loop_dtypes[i];
      char* p;
      int64_t s;
      int j = ch->src[k][i];
      if (j >= 0) {
        p = vptr[j];
        s = vstride[j];
      } else {
        p = mem[i];
        s = ch->strides[k][i][0];
      }
      if (ld == dt) {
        data[i] = p;
        st[i] = s;
      } else if (s == 0) { /* a broadcast scalar: cast one element, keep stride 0 */
        data[i] = (char*)castb + (size_t)i * FUSE_SLOT_BYTES;
        st[i] = 0;
        tpurt_ew_convert_strided(ld, data[i], 0, dt, p, 0, 1);
      } else {
        data[i] = (char*)castb + (size_t)i * FUSE_SLOT_BYTES;
        st[i] = (int64_t)tpurt_dtype_size(ld);
        tpurt_ew_convert_strided(ld, data[i], st[i], dt, p, s, len);
      }
    }
    const tpurt_tensor_t* o = c->tensors[0];
    int64_t osz = (int64_t)tpurt_dtype_size(o->dtype);
    char* tile = ch->slot[k] >= 0 ? (char*)bufs + (size_t)ch->slot[k] * FUSE_SLOT_BYTES : NULL;
    bool cast = c->loop_dtypes[0] != o->dtype;
    if (ch->direct[k]) {
      data[0] = mem[0];
      st[0] = ch->strides[k][0][0];
    } else if (!cast) {
      data[0] = tile;
      st[0] = osz;
    } else {
      data[0] = (char*)castb;
      st[0] = (int64_t)tpurt_dtype_size(c->loop_dtypes[0]);
    }
    if (ch->stream[k]) {
      tpurt_ew_stream_active = true;
      c->loop(data, st, len, c->user);
      tpurt_ew_stream_active = false;
    } else {
      c->loop(data, st, len, c->user);
    }
    if (ch->direct[k]) {
      vptr[k] = mem[0];
      vstride[k] = ch->strides[k][0][0];
      continue;
    }
    if (cast) /* Strict stores in the tensor's dtype: so does the tile */
      tpurt_ew_convert_strided(o->dtype, tile, osz, c->loop_dtypes[0], data[0], st[0], len);
    vptr[k] = tile;
    vstride[k] = osz;
    if (ch->store[k]) tpurt_ew_convert_strided(o->dtype, mem[0], ch->strides[k][0][0], o->dtype, tile, osz, len);
  }
}

/* Runs the chain over linear elements [begin, end) of its shape, tile by
 * tile, on pool thread tid. With `run` (a reduction reading member red_src's
 * value), returns where those values lie as one contiguous run: in the tile
 * itself when one tile holds them all, else gathered into `run`. */
static const void* chain_walk(chain_t* ch, int64_t begin, int64_t end, int tid, uint8_t* run) {
  uint8_t* bufs = ch->scratch + ch->per_thread * (size_t)tid;
  size_t es = run ? tpurt_dtype_size(ch->cfg[ch->red_src]->tensors[0]->dtype) : 0;
  int64_t idx[TPURT_MAX_DIMS];
  chain_idx_init(ch, begin, idx);
  const void* result = run;
  int64_t pos = begin;
  while (pos < end) {
    int64_t len = ch->shape[0] - idx[0];
    if (len > end - pos) len = end - pos;
    if (len > FUSE_TILE) len = FUSE_TILE;
    char* vptr[FUSE_MAX_OPS];
    int64_t vstride[FUSE_MAX_OPS];
    chain_tile(ch, idx, len, bufs, vptr, vstride);
    if (run) {
      char* v = vptr[ch->red_src];
      tpurt_dtype_t dt = ch->cfg[ch->red_src]->tensors[0]->dtype;
      if (len == end - begin && vstride[ch->red_src] == (int64_t)es)
        result = v; /* the whole run in one tile (or in memory, stored) */
      else
        tpurt_ew_convert_strided(dt, run + (size_t)(pos - begin) * es, (int64_t)es, dt, v, vstride[ch->red_src],
                                 len);
    }
    pos += len;
    chain_idx_advance(ch, idx, len);
  }
#if defined(__AVX__)
  if (ch->any_stream) _mm_sfence(); /* weakly ordered stores visible before the range is done */
#endif
  return result;
}

static void chain_range(void* user, int64_t begin, int64_t end, int tid) {
  chain_walk(user, begin, end, tid, NULL);
}

/* The reduction's source (tpurt_reduce_source_t): elements [lin, lin + n) of
 * member red_src's value; the chain's stores happen on the way. */
static const void* chain_produce(void* user, int64_t lin, int64_t n, int tid) {
  chain_t* ch = user;
  uint8_t* run = ch->scratch + ch->per_thread * (size_t)tid +
                 (size_t)(ch->num_slots + FUSE_MAX_OPERANDS) * FUSE_SLOT_BYTES;
  if (!ch->gen_fn) return chain_walk(ch, lin, lin + n, tid, run);
  /* The generated kernel, run by run; the reduced value goes to `run` (or
   * to memory, when stored: the engine's input is contiguous). */
  int rs = ch->red_src;
  size_t es = tpurt_dtype_size(ch->cfg[rs]->tensors[0]->dtype);
  tpurt_gen_args_t a = ch->gen_args;
  int64_t idx[TPURT_MAX_DIMS];
  chain_idx_init(ch, lin, idx);
  for (int64_t pos = lin; pos < lin + n;) {
    int64_t len = ch->shape[0] - idx[0];
    if (len > lin + n - pos) len = lin + n - pos;
    gen_args_at(ch, idx, &a);
    if (!ch->store[rs]) a.mem[rs][0] = (char*)run + (size_t)(pos - lin) * es;
    ch->gen_fn(&a, 0, len, 0);
    pos += len;
    chain_idx_advance(ch, idx, len);
  }
  return ch->store[rs] ? (const void*)((const char*)ch->cfg[rs]->tensors[0]->data + (size_t)lin * es)
                       : (const void*)run;
}

static void chain_accepted(void* user) { ((chain_t*)user)->red_used = true; }

/* Runs the reduction ending the chain with the chain as its input's source. */
static void chain_reduce(chain_t* ch) {
  const tpurt_defer_rec_t* r = &ch->list->recs[ch->red];
  if (!gen_prepare(ch)) ch->gen_fn = NULL;
  tpurt_reduce_source_t src = {.data = ch->cfg[ch->red_src]->tensors[0]->data, .max_run = FUSE_TILE,
                             .produce = chain_produce, .accepted = chain_accepted, .user = ch};
  tpurt_reduce_tls_source = &src;
  ch->red_status = r->op->fn(ch->ctx, &r->call);
  tpurt_reduce_tls_source = NULL;
  if (ch->gen_fn && ch->red_used) STAT_ADD(codegen_runs, 1);
}



/* Runs members[0..n) as one kernel; false when it must be rerun unfused
 * (nothing was written then). */
/* Keeps the first error of a graph (every record still runs, as in Strict). */
static void keep_error(tpurt_status_t* first, tpurt_status_t s) {
  if (!*first) *first = s;
  else tpurt_status_free(s);
}

static bool run_chain(const tpurt_defer_list_t* l, const int32_t* members, int n,
                      int32_t red, int red_src, const hull_t* hulls, chain_t* ch,
                      tpurt_kernel_ctx_t* ctx, tpurt_status_t* first_error) {
  memset(ch, 0, offsetof(chain_t, strides));
  ch->ctx = ctx;
  ch->list = l;
  ch->members = members;
  ch->n = n;
  ch->err_level = -1;
  ch->red = red;
  ch->red_src = red_src;
  /* members[n] is the reduction, when there is one: a reader inside the chain */
  int nm = red >= 0 ? n + 1 : n;
  uint64_t skipped = 0, skipped_bytes = 0;
  for (int m = 0; m < n; ++m) {
    ch->store[m] = member_stores(l, members, nm, m, hulls);
    if (!ch->store[m]) {
      const tpurt_tensor_t* o = &l->recs[members[m]].call.outputs[0];
      ++skipped;
      skipped_bytes += (uint64_t)t_numel(o) * tpurt_dtype_size(o->dtype);
    }
  }
  const tpurt_ew_interceptor_t icpt = {.run = fuse_capture, .user = ch};
  const tpurt_ew_interceptor_t* saved = tpurt_ew_tls_interceptor;
  tpurt_ew_tls_interceptor = &icpt;
  tpurt_status_t s = chain_level(ch, 0);
  tpurt_ew_tls_interceptor = saved;
  if (ctx->scratch) tpurt_scratch_reset(ctx->scratch);
  bool ok = ch->executed;
  if (!ok) {
    tpurt_status_free(s);
    tpurt_status_free(ch->red_status);
    STAT_ADD(fallbacks, 1);
  } else {
    if (s) {
      int lvl = ch->err_level >= 0 ? ch->err_level : 0;
      keep_error(first_error, tpurt_kernel_status_annotate(s, &l->recs[members[lvl]].call));
    }
    if (ch->red_status) keep_error(first_error, tpurt_kernel_status_annotate(ch->red_status, &l->recs[red].call));
    STAT_ADD(fused_groups, 1);
    STAT_ADD(fused_ops, (uint64_t)nm);
    STAT_ADD(kernels_launched, 1);
    STAT_ADD(stores_skipped, skipped);
    STAT_ADD(bytes_skipped, skipped_bytes);
  }
  return ok;
}

static void run_one(const tpurt_defer_rec_t* r, tpurt_kernel_ctx_t* ctx, tpurt_status_t* first_error) {
  if (r->kind == TPURT_DEFER_COPY) {
    tpurt_kernel_copy(ctx, r->dst, r->src, r->bytes);
    return;
  }
  if (r->kind != TPURT_DEFER_KERNEL) return;
  STAT_ADD(kernels_launched, 1);
  tpurt_status_t s = tpurt_kernel_ctx_invoke(ctx, r->op->fn, &r->call);
  if (TPURT_UNLIKELY(s != NULL)) keep_error(first_error, s);
}

tpurt_status_t tpurt_defer_list_run(tpurt_defer_list_t* l, tpurt_kernel_ctx_t* ctx) {
  tpurt_status_t first_error = TPURT_OK;
  STAT_ADD(flushes, 1);
  bool* done = NULL;
  hull_t* hulls = NULL;
  bool planned = false;
  if (tpurt_fuse_enabled() && l->num_kernels >= 2) {
    /* per record, computed once: done, may join a chain (rule 1 etc.), its bytes' hull */
    done = calloc(2 * (size_t)l->num_recs, sizeof(bool));
    hulls = malloc(sizeof(hull_t) * (size_t)l->num_recs);
    planned = done && hulls && spans_build(l);
    if (planned)
      for (int32_t i = 0; i < l->num_recs; ++i) {
        hulls[i] = rec_hull(l, i);
        done[l->num_recs + i] = rec_eligible(&l->recs[i]);
      }
  }
  /* one chain state (18 KiB) for the whole graph, not one allocation per chain */
  chain_t* ch = planned ? malloc(sizeof(chain_t)) : NULL;
  bool fuse = ch != NULL;
  const bool* elig = fuse ? done + l->num_recs : NULL;
  int32_t members[FUSE_MAX_OPS + 1];
  for (int32_t i = 0; i < l->num_recs; ++i) {
    if (fuse && done[i]) continue;
    const tpurt_defer_rec_t* r = &l->recs[i];
    int32_t red = -1;
    int red_src = -1;
    int n = fuse && r->kind == TPURT_DEFER_KERNEL ? plan_chain(l, i, members, done, elig, hulls, &red, &red_src) : 1;
    if ((n >= 2 || red >= 0) && run_chain(l, members, n, red, red_src, hulls, ch, ctx, &first_error)) {
      for (int m = 0; m < n; ++m) done[members[m]] = true;
      if (red >= 0) done[red] = true;
      continue;
    }
    /* alone, or the chain fell back: this record now, the rest plan again */
    run_one(r, ctx, &first_error);
  }
  free(ch);
  free(done);
  free(hulls);
  return first_error;
}
