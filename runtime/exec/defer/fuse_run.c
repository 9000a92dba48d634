/* DeferAndFuse's executor: runs a queue's pending graph on the queue's
 * thread. The list is lowered into the graph IR (lower.c), the planner
 * (compiler/fuse_plan.c, where the rules are written) groups its nodes into
 * chains, and each chain runs as one pass over memory: every member's kernel
 * is called as in Strict, but its elementwise engine run is intercepted
 * (ops/elementwise/elementwise.h: tpurt_ew_interceptor_t) with the kernel's
 * frame still live, so promotion, scalars and loops are the kernel's own;
 * the innermost capture then runs every loop per tile of FUSE_TILE elements
 * (L1/L2-sized) with intermediates in per-thread tile buffers, or the
 * chain's generated kernel once one is built (compiler/chain_kernel.h). A
 * chain ending in a reduction feeds it tile by tile
 * (ops/reduce/reduce.h: tpurt_reduce_source_t). Anything unexpected during
 * capture reruns the chain unfused, before anything was written. */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "base/env.h"
#include "compiler/chain_kernel.h"
#include "compiler/fuse_plan.h"
#include "exec/defer/defer.h"
#include "exec/defer/program_internal.h"
#include "base/futex.h"
#include "hal/trace.h"
#include "ops/cost.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"

#define FUSE_TILE 2048                 /* elements per tile (8 KiB of float32 per operand) */
#define FUSE_GRAIN ((int64_t)32768)    /* elements per thread at least */
#define FUSE_SLOT_BYTES (FUSE_TILE * 8) /* a tile of the widest dtype */
#define FUSE_MAX_OPERANDS TPURT_EW_MAX_OPERANDS

/* ------------------------------------------------------------------------ */
/* Statistics and switches.                                                  */

static struct {
  _Atomic uint64_t ops_recorded, flushes, kernels_launched, fused_groups, fused_ops, stores_skipped,
      bytes_skipped, fallbacks, codegen_runs, plans_made, plans_replayed;
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
  o->plans_made = atomic_load(&g_stats.plans_made);
  o->plans_replayed = atomic_load(&g_stats.plans_replayed);
  tpurt_chain_kernel_stats_t k;
  tpurt_chain_kernel_stats(&k);
  o->codegen_lookups = k.lookups;
  o->codegen_memory_hits = k.memory_hits;
  o->codegen_disk_loads = k.disk_loads;
  o->codegen_shared_loads = k.shared_loads;
  o->codegen_shared_stores = k.shared_stores;
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
  atomic_store(&g_stats.plans_made, 0);
  atomic_store(&g_stats.plans_replayed, 0);
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


typedef struct chain_t {
  tpurt_kernel_ctx_t* ctx;
  const tpurt_graph_t* g;
  const int32_t* members;
  int n;
  bool store[TPURT_FUSE_MAX_OPS + 1];
  const tpurt_ew_config_t* cfg[TPURT_FUSE_MAX_OPS];
  int level;      /* next kernel expected to capture */
  bool executed;  /* the fused pass ran (outputs written) */
  bool fallback;  /* capture went off plan: rerun unfused */
  int err_level;  /* deepest kernel that returned an error after the pass */
  int32_t red;    /* record of the reduction ending the chain, or -1 */
  int red_src;    /* the member whose value it reduces */
  bool red_used;  /* the reduction engine took the chain as its source */
  tpurt_status_t red_status; /* what the reduction kernel returned */

  /* the pass */
  int src[TPURT_FUSE_MAX_OPS][FUSE_MAX_OPERANDS]; /* input k: producing member, or -1: memory */
  int slot[TPURT_FUSE_MAX_OPS];                   /* tile buffer of each member's value, -1: none */
  bool direct[TPURT_FUSE_MAX_OPS];                /* stored without a cast: loop writes memory */
  bool stream[TPURT_FUSE_MAX_OPS];                /* ... with non-temporal stores (bigger than the LLC) */
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
  _Alignas(8) char gen_scalar[TPURT_FUSE_MAX_OPS][FUSE_MAX_OPERANDS][8]; /* scalars cast to the loop dtype */
  bool gen_cast[TPURT_FUSE_MAX_OPS][FUSE_MAX_OPERANDS];                    /* ... in gen_scalar */

  /* Last and not cleared per chain (16 KiB): chain_prepare writes every entry
   * it reads, [member][operand 0..num_inputs][dim 0..nd). */
  int64_t strides[TPURT_FUSE_MAX_OPS][FUSE_MAX_OPERANDS][TPURT_MAX_DIMS]; /* bytes */
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
  const tpurt_graph_node_t* node = &ch->g->nodes[ch->members[k]];
  /* The configuration must be the planned one: this op's own output, inputs
   * broadcasting to it. */
  if (cfg->num_outputs != 1 || cfg->num_inputs < 0 || cfg->num_inputs + 1 > FUSE_MAX_OPERANDS ||
      cfg->tensors[0] != &node->call->outputs[0])
    return off_plan(ch);
  for (int i = 1; i <= cfg->num_inputs; ++i)
    if (!cfg->tensors[i] || !tpurt_tensor_broadcasts_to(cfg->tensors[i], cfg->tensors[0])) return off_plan(ch);
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
  const tpurt_graph_node_t* node = &ch->g->nodes[ch->members[k]];
  tpurt_status_t s = node->op->fn(ch->ctx, node->call);
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
        if (tpurt_tensor_same_view(c->tensors[i], ch->cfg[j]->tensors[0])) {
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
                    tpurt_tensor_numel(o) * es >= tpurt_ew_stream_min_bytes();
    ch->any_stream |= ch->stream[k];
  }
#endif
  /* Tile slots, reused once a value's last reader is past. */
  int last_use[TPURT_FUSE_MAX_OPS];
  for (int k = 0; k < ch->n; ++k) last_use[k] = k;
  for (int k = 0; k < ch->n; ++k)
    for (int i = 1; i <= ch->cfg[k]->num_inputs; ++i)
      if (ch->src[k][i] >= 0) last_use[ch->src[k][i]] = k;
  if (ch->red >= 0) last_use[ch->red_src] = ch->n; /* the reduction reads it after the last member */
  int slot_owner[TPURT_FUSE_MAX_OPS];
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
  /* Only [k][i][0, snd) of the members' operands is written and read (a
   * 16 KiB memset of the whole array was most of a small chain's setup). */
  int64_t full[TPURT_FUSE_MAX_OPS][FUSE_MAX_OPERANDS][TPURT_MAX_DIMS];
  for (int k = 0; k < ch->n; ++k) {
    const tpurt_ew_config_t* c = ch->cfg[k];
    for (int i = 0; i <= c->num_inputs; ++i) {
      const tpurt_tensor_t* t = c->tensors[i];
      int off = snd - t->ndim;
      int64_t is = (int64_t)tpurt_dtype_size(t->dtype);
      for (int d = 0; d < off; ++d) full[k][i][d] = 0; /* broadcast leading dims */
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
    char* vptr[TPURT_FUSE_MAX_OPS];
    int64_t vstride[TPURT_FUSE_MAX_OPS];
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
  const tpurt_graph_node_t* node = &ch->g->nodes[ch->red];
  if (!gen_prepare(ch)) ch->gen_fn = NULL;
  tpurt_reduce_source_t src = {.data = ch->cfg[ch->red_src]->tensors[0]->data, .max_run = FUSE_TILE,
                             .produce = chain_produce, .accepted = chain_accepted, .user = ch};
  tpurt_reduce_tls_source = &src;
  ch->red_status = node->op->fn(ch->ctx, node->call);
  tpurt_reduce_tls_source = NULL;
  if (ch->gen_fn && ch->red_used) STAT_ADD(codegen_runs, 1);
}



/* Runs members[0..n) as one kernel; false when it must be rerun unfused
 * (nothing was written then). */

/* Keeps the first error of a graph (every node still runs, as in Strict),
 * and who issued its op. */
typedef struct first_error_t {
  tpurt_status_t status;
  uint64_t issuer;
} first_error_t;

static void keep_error(first_error_t* first, tpurt_status_t s, uint64_t issuer) {
  if (!first->status) {
    first->status = s;
    first->issuer = issuer;
  } else {
    tpurt_status_free(s);
  }
}

/* Runs chain c as one kernel; false when it must be rerun unfused (nothing
 * was written then). */
static bool run_chain(const tpurt_fuse_planner_t* p, const tpurt_fuse_chain_t* c, chain_t* ch,
                      tpurt_kernel_ctx_t* ctx, const tpurt_defer_list_t* l, first_error_t* first_error) {
  const tpurt_graph_t* g = p->g;
  memset(ch, 0, offsetof(chain_t, strides));
  ch->ctx = ctx;
  ch->g = g;
  ch->members = c->members;
  ch->n = c->n;
  ch->err_level = -1;
  ch->red = c->red;
  ch->red_src = c->red_src;
  int nm = c->red >= 0 ? c->n + 1 : c->n; /* members[n] is the reduction, when there is one */
  uint64_t skipped = 0, skipped_bytes = 0;
  for (int m = 0; m < c->n; ++m) {
    ch->store[m] = tpurt_fuse_plan_member_stores(p, c, m);
    if (!ch->store[m]) {
      const tpurt_tensor_t* o = &g->nodes[c->members[m]].call->outputs[0];
      ++skipped;
      skipped_bytes += (uint64_t)tpurt_tensor_numel(o) * tpurt_dtype_size(o->dtype);
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
      keep_error(first_error, tpurt_kernel_status_annotate(s, g->nodes[c->members[lvl]].call),
                 l->recs[c->members[lvl]].issuer);
    }
    if (ch->red_status)
      keep_error(first_error, tpurt_kernel_status_annotate(ch->red_status, g->nodes[c->red].call),
                 l->recs[c->red].issuer);
    STAT_ADD(fused_groups, 1);
    STAT_ADD(fused_ops, (uint64_t)nm);
    STAT_ADD(kernels_launched, 1);
    STAT_ADD(stores_skipped, skipped);
    STAT_ADD(bytes_skipped, skipped_bytes);
  }
  return ok;
}

static void run_one(const tpurt_defer_rec_t* r, tpurt_kernel_ctx_t* ctx, first_error_t* first_error) {
  if (r->kind == TPURT_DEFER_COPY) {
    tpurt_kernel_ctx_copy(ctx, r->dst, r->src, r->bytes);
    return;
  }
  if (r->kind != TPURT_DEFER_KERNEL) return;
  STAT_ADD(kernels_launched, 1);
  tpurt_status_t s = tpurt_kernel_ctx_invoke(ctx, r->op->fn, r->op->flags, &r->call);
  if (TPURT_UNLIKELY(s != NULL)) keep_error(first_error, s, r->issuer);
}

/* ---- trace events (hal/trace.h), only while tracing ---- */

static void trace_one(const tpurt_defer_rec_t* r, const tpurt_kernel_ctx_t* ctx, uint64_t t0, uint64_t t1) {
  if (r->kind != TPURT_DEFER_KERNEL && r->kind != TPURT_DEFER_COPY) return;
  tpurt_trace_event_t ev = {.kind = r->kind == TPURT_DEFER_KERNEL ? TPURT_TRACE_KERNEL : TPURT_TRACE_COPY,
                            .device = ctx->device_index, .queue = ctx->queue_id,
                            .id = r->trace_id ? r->trace_id : ctx->trace_id,
                            .start_ns = t0, .end_ns = t1, .dtype = -1};
  if (r->kind == TPURT_DEFER_KERNEL) tpurt_trace_set_name(ev.name, sizeof ev.name, r->call.name, r->call.overload);
  else snprintf(ev.name, sizeof ev.name, "copy (device to device)");
  tpurt_trace_record(&ev);
}

/* A chain as one kernel event: named by the ops it fused, costed as fused
 * (the members' flops; bytes read from memory and stored, not the values
 * passed between members in registers). */
static void trace_chain(const tpurt_fuse_chain_t* c, const chain_t* ch, const tpurt_defer_list_t* l,
                        const tpurt_kernel_ctx_t* ctx, uint64_t t0, uint64_t t1) {
  tpurt_trace_event_t ev = {.kind = TPURT_TRACE_FUSED, .device = ctx->device_index, .queue = ctx->queue_id,
                            .id = l->recs[c->members[0]].trace_id ? l->recs[c->members[0]].trace_id : ctx->trace_id,
                            .start_ns = t0, .end_ns = t1, .dtype = -1};
  int nm = c->red >= 0 ? c->n + 1 : c->n;
  size_t w = (size_t)snprintf(ev.name, sizeof ev.name, "fused:");
  const void* made[TPURT_FUSE_MAX_OPS + 1];
  for (int m = 0; m < nm; ++m) {
    const tpurt_op_call_t* call = &l->recs[c->members[m]].call;
    if (w < sizeof ev.name)
      w += (size_t)snprintf(ev.name + w, sizeof ev.name - w, "%s%s", m ? "+" : " ", call->name ? call->name : "?");
    tpurt_op_cost_t cost;
    tpurt_op_cost(l->recs[c->members[m]].op, call, &cost);
    ev.flops += cost.flops;
    if (ev.dtype < 0) ev.dtype = cost.dtype;
    if (cost.matmul) ev.flags |= TPURT_TRACE_F_MATMUL;
    for (int i = 0; i < call->num_args; ++i) {
      if (call->args[i].kind != TPURT_ARG_TENSOR) continue;
      const void* d = call->args[i].v.tensor->data;
      bool inner = false;
      for (int k = 0; k < m && !inner; ++k) inner = made[k] == d;
      if (!inner) ev.bytes += tpurt_op_cost_tensor_bytes(call->args[i].v.tensor);
    }
    made[m] = call->num_outputs > 0 ? call->outputs[0].data : NULL;
    bool stored = m == c->n || ch->store[m];
    if (stored && call->num_outputs > 0) ev.bytes += tpurt_op_cost_tensor_bytes(&call->outputs[0]);
  }
  tpurt_trace_record(&ev);
}

/* What the executor keeps between graphs, per queue thread (size first,
 * allocate once: a warm queue plans without malloc). Freed when the thread
 * exits. */
typedef struct run_state_t {
  tpurt_graph_t graph;
  tpurt_fuse_planner_t planner;
  int32_t* scratch;
  int32_t cap;
  chain_t chain;
} run_state_t;

static pthread_key_t g_state_key;
static pthread_once_t g_state_once = PTHREAD_ONCE_INIT;

static void state_free(void* p) {
  run_state_t* st = p;
  tpurt_graph_deinit(&st->graph);
  tpurt_fuse_planner_deinit(&st->planner);
  free(st->scratch);
  free(st);
}

static void state_key_init(void) { pthread_key_create(&g_state_key, state_free); }

static run_state_t* run_state(void) {
  pthread_once(&g_state_once, state_key_init);
  run_state_t* st = pthread_getspecific(g_state_key);
  if (!st && (st = calloc(1, sizeof(*st)))) {
    tpurt_graph_init(&st->graph);
    tpurt_fuse_planner_init(&st->planner);
    if (pthread_setspecific(g_state_key, st) != 0) {
      free(st);
      st = NULL;
    }
  }
  return st;
}

/* A kept plan: for each record that started a chain or ran alone, what tpurt_fuse_plan_chain said
 * (n, and the chain when n >= 2 or it ends in a reduction), for the graph whose fingerprint is fp.
 * Valid only when the run that recorded it planned every record with chains on and no chain fell
 * back: replaying it then walks the planner through the same states (the same chains marked done,
 * so the same liveness answers) without searching for the chains again. */
typedef struct tpurt_defer_plan_t {
  uint64_t fp;
  bool valid;
  uint64_t used; /* the list's plan_clock when last used */
  int32_t num_recs;
  int32_t* n;               /* per record: plan_chain's result, -1: not planned (done, or not a kernel) */
  tpurt_fuse_chain_t* chain; /* per record */
} tpurt_defer_plan_t;

void tpurt_defer_plan_free(tpurt_defer_plan_t* pl) {
  if (!pl) return;
  free(pl->n);
  free(pl->chain);
  free(pl);
}

/* The list's kept plan for the graph whose fingerprint is fp: a valid one made for it, else the
 * least recently used slot, emptied and sized for the list (valid false: record into it); NULL
 * without memory (then it plans as a one-shot list). */
static tpurt_defer_plan_t* kept_plan(tpurt_defer_list_t* l, uint64_t fp) {
  int victim = 0;
  uint64_t best = UINT64_MAX; /* an empty slot first, then one holding no valid plan, then the LRU */
  for (int i = 0; i < TPURT_DEFER_PLANS; ++i) {
    tpurt_defer_plan_t* pl = l->plans[i];
    if (pl && pl->valid && pl->fp == fp && pl->num_recs == l->num_recs) {
      pl->used = ++l->plan_clock;
      return pl;
    }
    uint64_t score = !pl ? 0 : !pl->valid ? 1 : pl->used + 2;
    if (score < best) best = score, victim = i;
  }
  tpurt_defer_plan_t* pl = l->plans[victim];
  if (!pl || pl->num_recs != l->num_recs) {
    tpurt_defer_plan_free(pl);
    l->plans[victim] = pl = calloc(1, sizeof(*pl));
    if (pl) {
      pl->num_recs = l->num_recs;
      pl->n = malloc(sizeof(int32_t) * (size_t)(l->num_recs ? l->num_recs : 1));
      pl->chain = malloc(sizeof(tpurt_fuse_chain_t) * (size_t)(l->num_recs ? l->num_recs : 1));
      if (!pl->n || !pl->chain) {
        tpurt_defer_plan_free(pl);
        l->plans[victim] = pl = NULL;
        return NULL;
      }
    }
  }
  if (pl) {
    pl->valid = false;
    pl->fp = fp;
    pl->used = ++l->plan_clock;
  }
  return pl;
}

tpurt_status_t tpurt_defer_list_run(tpurt_defer_list_t* l, tpurt_kernel_ctx_t* ctx) {
  first_error_t first_error = {TPURT_OK, 0};
  STAT_ADD(flushes, 1);
  bool tracing = tpurt_trace_active();
  uint64_t t_plan = tracing ? tpurt_now_ns() : 0;
  /* A fused chain does not check what it reads for poison: after a failure
   * (or when dropped) each record runs alone, through the checks. */
  bool guarded = ctx->cancel != NULL || tpurt_poison_armed(ctx->poison);
  run_state_t* st = !guarded && tpurt_fuse_enabled() && l->num_kernels >= 2 ? run_state() : NULL;
  /* Without memory to plan, every record runs alone: the same results. */
  if (st) { /* a program's plan is made once: it may look further */
    st->planner.program = l->keep_plan;
    st->planner.small = l->fuse_min_numel > 1 ? l->fuse_min_numel : 2;
  }
  bool fuse = st && tpurt_defer_lower(l, &st->graph, &st->scratch, &st->cap) &&
              tpurt_fuse_planner_begin(&st->planner, &st->graph);
  bool chains = fuse;
  if (tracing && fuse) {
    /* Lowering and planning are device time too: their own event, so the
     * device track accounts for the whole program. */
    tpurt_trace_event_t ev = {.kind = TPURT_TRACE_CALL, .device = ctx->device_index, .queue = ctx->queue_id,
                              .start_ns = t_plan, .end_ns = tpurt_now_ns(), .dtype = -1};
    snprintf(ev.name, sizeof ev.name, "DeferAndFuse: lower and plan (%d ops)", (int)l->num_kernels);
    tpurt_trace_record(&ev);
  }
  /* A program's plan: replayed when this graph is one a kept plan was made for, else recorded anew. */
  tpurt_defer_plan_t* pl = fuse && l->keep_plan ? kept_plan(l, tpurt_graph_fingerprint(&st->graph)) : NULL;
  bool replay = false, record = false;
  if (pl) {
    replay = pl->valid;
    if (!replay) {
      record = true;
      for (int32_t i = 0; i < l->num_recs; ++i) pl->n[i] = -1;
    }
  }
  tpurt_fuse_chain_t c;
  int outer_shift = ctx->grain_shift;
  ctx->grain_shift = l->keep_plan ? tpurt_program_grain_shift() : 0; /* a program: kernel_ctx.h */
  for (int32_t i = 0; i < l->num_recs; ++i) {
    if (fuse && st->planner.done[i]) continue;
    const tpurt_defer_rec_t* r = &l->recs[i];
    /* A record that failed earlier in this list poisoned what it wrote. */
    if (TPURT_UNLIKELY(first_error.status != NULL) && tpurt_poison_armed(ctx->poison)) chains = false;
    c.red = -1;
    uint64_t t0 = tracing ? tpurt_now_ns() : 0; /* a kernel's event includes its planning */
    int n = 1;
    if (chains && r->kind == TPURT_DEFER_KERNEL) {
      if (replay && pl->n[i] >= 1) {
        n = pl->n[i];
        c = pl->chain[i];
      } else {
        replay = false; /* a record the plan does not hold: plan from here on */
        n = tpurt_fuse_plan_chain(&st->planner, i, &c);
        if (record) pl->n[i] = n, pl->chain[i] = c;
      }
    } else if (!chains) {
      record = replay = false; /* chains are off for the rest: no plan to keep or follow */
    }
    if ((n >= 2 || c.red >= 0) && l->fuse_min_numel && r->call.num_outputs &&
        tpurt_tensor_numel(&r->call.outputs[0]) < l->fuse_min_numel) {
      n = 1;
      c.red = -1;
    }
    if (chains && (n >= 2 || c.red >= 0)) {
      /* A program's chain may run nodes from further on first (compiler/fuse_plan.c, rule 6): they
       * share no byte with it, so they are done whether or not it falls back. */
      for (int k = 0; k < c.npre; ++k) {
        const tpurt_defer_rec_t* pr = &l->recs[c.pre[k]];
        uint64_t tp = tracing ? tpurt_now_ns() : 0;
        run_one(pr, ctx, &first_error);
        st->planner.done[c.pre[k]] = true;
        if (tracing) trace_one(pr, ctx, tp, tpurt_now_ns());
      }
      if (tracing && c.npre) t0 = tpurt_now_ns();
      if (run_chain(&st->planner, &c, &st->chain, ctx, l, &first_error)) {
        tpurt_fuse_planner_mark_done(&st->planner, &c);
        if (tracing) trace_chain(&c, &st->chain, l, ctx, t0, tpurt_now_ns());
        continue;
      }
      /* it fell back: the planner's state from here differs from the plan's */
      record = replay = false;
      if (tracing) t0 = tpurt_now_ns();
    }
    /* alone, or the chain fell back: this record now, the rest plan again */
    run_one(r, ctx, &first_error);
    if (tracing) trace_one(r, ctx, t0, tpurt_now_ns());
  }
  ctx->grain_shift = outer_shift;
  if (record && !first_error.status) pl->valid = true;
  if (pl) STAT_ADD(plans_made, replay ? 0 : 1), STAT_ADD(plans_replayed, replay ? 1 : 0);
  if (first_error.status) ctx->issuer = first_error.issuer;
  return first_error.status;
}
