/* DeferAndFuse's planner: fused elementwise chains over a graph, with
 * exactly Strict's results when the executor runs them.
 *
 * THE RULES (the only place they are written; tests/test_defer_fuse.py and
 * runtime/tests/test_fuse.c assert the kernel counts they give):
 *
 *  Materialize (exec/defer/defer.c): at every sync point (synchronize, host
 *  copies, events, anything else queued, is_idle polls), and at a size
 *  limit: past 16 records at the next record that cannot join a chain (so
 *  the cut falls at the same place every training step, and the device
 *  starts early), past 1024 records or 8 MiB at once.
 *
 *  Which ops fuse: elementwise kernels (op flag TPURT_OP_ELEMENTWISE: each
 *  runs through the elementwise engine exactly once) with one output of >0
 *  elements, no tensor-list argument, every tensor argument broadcastable to
 *  the output, an output whose elements never share memory (no expanded or
 *  overlapping as_strided view: an in-place pass over one depends on element
 *  order), and no partial overlap between an op's output and its own inputs.
 *
 *  A chain (one kernel) gathers, in graph order from its first op, up to
 *  TPURT_FUSE_MAX_OPS such ops over one output shape, looking at most
 *  TPURT_FUSE_WINDOW nodes ahead. The chain runs where its first op stood, so
 *  every node it passes over runs after it. A node is passed over (left for
 *  later):
 *   1. if it cannot fuse (reductions, matmuls, random ops, copies, ...);
 *   2. if its output shape differs;
 *   3. in place / aliasing: if its output overlaps any tensor the chain
 *      already reads or writes, or an input overlaps a chain output, unless
 *      the two are the very same view (data, dtype, sizes, strides); views of
 *      one buffer that are not identical never fuse. (Identical views are
 *      the in-place case x.add_(1) that a tile-by-tile pass still runs in
 *      Strict's order.) A buffer the host freed inside the chain may return
 *      as a new buffer with another layout; that is no clash when the old
 *      values lived only in tiles;
 *   4. repeated op subsequences: if it reads nothing the chain produced and
 *      repeats the chain's first op, it starts a chain of its own, so a loop
 *      over parameters (an optimizer's foreach ops) gives one identical kernel
 *      per parameter, and the same kernels every step. In a program (below)
 *      instead: if it is not in the chain's first op's component;
 *   5. size: TPURT_FUSE_MAX_OPS ops per chain;
 *   6. independence: if it shares a byte with a node already passed over
 *      (moving it ahead of that node would change what either sees).
 *  A reduction ends the chain (rule 7) instead of being passed over when its
 *  kernel reads its input only through the reduction engine (op flag
 *  TPURT_OP_REDUCE_ENGINE: sum, mean, amax/amin, max/min over a dim, prod,
 *  all/any, count_nonzero, var/std(_mean), norms, logsumexp) and its one
 *  tensor input is the very view of a member's output (contiguous), unless a
 *  member writes memory the chain reads (in place: var reads its input twice
 *  and both passes must see the same values), its outputs touch the chain's
 *  tensors, or rule 6 holds for it. The engine then reads that value tile by
 *  tile from the chain instead of from memory (ops/reduce/reduce.h:
 *  tpurt_reduce_source_t), so it is written only if live. The engine takes
 *  it only as one contiguous run per output, so only reductions over
 *  innermost dims join (a sum over dim 0 is passed over); should the engine
 *  still decline, it does so before reading and the chain reruns unfused.
 *  Several consumers: a value read by several ops of the chain stays in the
 *  tile for all of them (no recomputation, so no reason to cut); it is
 *  written to memory exactly when the liveness rule below says so.
 *
 *  Programs (torch.compile's, planned once and replayed at every launch,
 *  exec/defer/capture.c) look TPURT_FUSE_PROGRAM_WINDOW nodes ahead, not
 *  TPURT_FUSE_WINDOW, and rule 4 reads components: two fusable nodes are in
 *  one component when a chain of fusable nodes links them, each link a buffer
 *  one node writes and the next reads at full size (not broadcast) or
 *  writes. A compiled optimizer step is op-major (each foreach op over every
 *  parameter in turn), so one parameter's ops lie hundreds of nodes apart;
 *  its update (weight decay, both moments, the denominator, the step) is one
 *  component and becomes one chain, one pass over its four tensors, where the
 *  first-op rule cut it into four (its second `mul` repeats the first).
 *  Unconnected ops would share no memory pass, so nothing is lost by keeping
 *  them apart; a scalar or bias read by broadcast links nothing (an
 *  optimizer's learning rate would join every parameter).
 *  And rule 6 gives way in a program where the nodes passed over that a
 *  candidate shares bytes with can run before the chain instead (its `pre`
 *  nodes, at most TPURT_FUSE_MAX_PRE): those nodes, with every node passed
 *  over before them that any of them shares a byte with (transitively), are
 *  kernels sharing no byte with the chain's members, so running them first,
 *  in graph order, changes what no node sees. Only nodes that would run
 *  alone anyway are moved (not fusable, or fusable with fewer elements than
 *  the program fuses): moving a large one would take it from its own chain
 *  (a memory block the arena plan reuses links another parameter's update
 *  to this one's). The optimizer's per-parameter
 *  scalars (bias corrections of the step count, computed after the moments
 *  in op-major order) are what the denominator reads: they run first, and
 *  the update stays one chain.
 *  Rule 6 also gives way in a program where what a candidate shares with a
 *  node passed over is only a value that lives in the chain's tiles (the
 *  candidate's output, or an input an earlier member produced) and the bytes
 *  the passed node touches there belong to another buffer: memory the arena
 *  plan gave to both, one after the other (another parameter's temporary).
 *  That sharing is no dependency when the chain never writes the value to
 *  memory, so the chain is planned taking it as none, then checked: if a
 *  member writing those bytes must store its value (the liveness rule
 *  below), the chain is planned again without this exception.
 *
 *  Liveness: a chain's intermediate result is not written to device memory
 *  only when it is dead: looking forward in the graph, the host freed its
 *  buffer (a FREE node), or a later op of the same chain overwrites the
 *  identical view, before any node outside the chain touches those bytes.
 *  Anything still live at the end of the graph (a tensor Python still holds)
 *  is written.
 *
 *  Running a chain (exec/defer/fuse_run.c): each kernel is called as in
 *  Strict, but its elementwise engine run is intercepted, so promotion,
 *  scalars and loops are the kernel's own; the chain then runs every loop per
 *  tile with intermediates in per-thread tile buffers, or as one generated C
 *  function (compiler/codegen.c) once one is built. Values and dtypes are the
 *  ones Strict would store (a float16 intermediate is rounded to float16), so
 *  results are bit-identical for contiguous operands. Anything unexpected
 *  during capture reruns the chain unfused, before anything was written.
 */
#include "compiler/fuse_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"

#define FUSE_MAX_OPERANDS 8 /* an elementwise op's operands (ops/elementwise: TPURT_EW_MAX_OPERANDS) */

bool tpurt_fuse_trace(void) {
  static _Atomic int t = -1;
  return tpurt_env_switch(&t, "TORCH_TPU_FUSE_TRACE", false);
}

/* ------------------------------------------------------------------------ */
/* Values.                                                                   */

static const tpurt_tensor_t* desc(const tpurt_graph_t* g, int32_t v) { return g->values[v].desc; }

/* Two elements of t may share memory (an expanded or as_strided output):
 * with dims sorted by stride, each stride must pass the span of the ones
 * inside it. An in-place pass over such a view depends on element order,
 * which a fused pass would change. */
static bool self_overlapping(const tpurt_tensor_t* t) {
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

/* Node n's output 0 and argument slot a (a value id, or -1). */
static int32_t out0(const tpurt_graph_t* g, int32_t n) { return tpurt_graph_outputs(g, n)[0]; }
static int32_t arg(const tpurt_graph_t* g, int32_t n, int32_t a) { return tpurt_graph_inputs(g, n)[a]; }
static int32_t num_args(const tpurt_graph_t* g, int32_t n) { return g->nodes[n].call->num_args; }

/* Does node n read a value identical to an output of members[0..k)? */
static bool reads_group(const tpurt_graph_t* g, const int32_t* members, int k, int32_t n) {
  for (int32_t i = 0; i < num_args(g, n); ++i) {
    int32_t v = arg(g, n, i);
    if (v < 0) continue;
    for (int m = 0; m < k; ++m)
      if (tpurt_graph_values_same(g, v, out0(g, members[m]))) return true;
  }
  return false;
}

/* Is value v (an argument of member m) the output of an earlier member? */
static bool from_chain(const tpurt_graph_t* g, const int32_t* members, int m, int32_t v) {
  for (int j = 0; j < m; ++j)
    if (tpurt_graph_values_same(g, v, out0(g, members[j]))) return true;
  return false;
}

/* ------------------------------------------------------------------------ */
/* Planning.                                                                 */

/* May node n join a chain at all (on its own terms)? */
static bool eligible(const tpurt_graph_t* g, int32_t n) {
  const tpurt_graph_node_t* node = &g->nodes[n];
  if (node->kind != TPURT_GRAPH_OP || !tpurt_fuse_op_fusable(node->op)) return false;
  const tpurt_op_call_t* c = node->call;
  if (c->num_outputs != 1) return false;
  const tpurt_tensor_t* o = &c->outputs[0];
  if (tpurt_tensor_numel(o) <= 0 || self_overlapping(o) || !o->data) return false;
  int ntensors = 0;
  for (int32_t i = 0; i < c->num_args; ++i) {
    const tpurt_arg_t* a = &c->args[i];
    if (a->kind == TPURT_ARG_TENSOR_LIST) return false;
    if (a->kind != TPURT_ARG_TENSOR || !a->v.tensor) continue;
    if (++ntensors >= FUSE_MAX_OPERANDS) return false;
    int32_t v = arg(g, n, i);
    if (!tpurt_tensor_broadcasts_to(a->v.tensor, o)) return false;
    if (tpurt_graph_values_overlap(g, v, out0(g, n)) && !tpurt_graph_values_same(g, v, out0(g, n))) return false;
  }
  return true;
}

/* Same op (kernel, argument kinds and dtypes) as another node. */
static bool same_op(const tpurt_graph_t* g, int32_t a, int32_t b) {
  const tpurt_graph_node_t *x = &g->nodes[a], *y = &g->nodes[b];
  if (x->op != y->op || x->call->num_args != y->call->num_args) return false;
  if (x->call->outputs[0].dtype != y->call->outputs[0].dtype) return false;
  for (int32_t i = 0; i < x->call->num_args; ++i) {
    const tpurt_arg_t *p = &x->call->args[i], *q = &y->call->args[i];
    if (p->kind != q->kind) return false;
    if (p->kind == TPURT_ARG_TENSOR && p->v.tensor && q->v.tensor && p->v.tensor->dtype != q->v.tensor->dtype)
      return false;
  }
  return true;
}

/* Rule 3: does node n's memory clash with the chain so far? A buffer the
 * host freed inside the chain may come back as a new buffer with another
 * layout: the old values there were produced and read inside the chain (so
 * they live in tiles, never in memory) and do not clash; an old value the
 * chain read from memory still does. */
static bool conflicts(const tpurt_graph_t* g, const int32_t* members, int k, int32_t n) {
  int32_t o = out0(g, n);
  for (int m = 0; m < k; ++m) {
    int32_t mn = members[m], mo = out0(g, mn);
    bool mo_dead = tpurt_graph_freed_between(g, mo, mn, n);
    if (!mo_dead && tpurt_graph_values_overlap(g, o, mo) && !tpurt_graph_values_same(g, o, mo)) return true;
    for (int32_t i = 0; i < num_args(g, mn); ++i) {
      int32_t v = arg(g, mn, i);
      if (v < 0 || !tpurt_graph_values_overlap(g, o, v) || tpurt_graph_values_same(g, o, v)) continue;
      if (!(from_chain(g, members, m, v) && tpurt_graph_freed_between(g, v, mn, n))) return true;
    }
    if (mo_dead) continue; /* n's inputs there are the new buffer's */
    for (int32_t i = 0; i < num_args(g, n); ++i) {
      int32_t v = arg(g, n, i);
      if (v >= 0 && tpurt_graph_values_overlap(g, v, mo) && !tpurt_graph_values_same(g, v, mo)) return true;
    }
  }
  return false;
}

/* Do an eligible node a and any node b share a byte? */
static bool nodes_share(const tpurt_graph_t* g, int32_t a, int32_t b) {
  if (!tpurt_graph_ranges_overlap(g->nodes[a].hull, g->nodes[b].hull)) return false;
  const tpurt_graph_node_t* na = &g->nodes[a];
  const int32_t* o = g->operands + na->first_in;
  for (int32_t k = 0; k < na->num_in + na->num_out; ++k) {
    if (o[k] < 0) continue;
    tpurt_graph_range_t r = g->values[o[k]].bytes;
    if (r.lo != r.hi && tpurt_graph_node_touches(g, b, r)) return true;
  }
  return false;
}

/* Does reduction call c over `in` reduce only innermost dims (one contiguous
 * run per output, the only way the engine takes a chain's value)? The dim
 * argument is the first after self (after ord/p for the norms); absent,
 * None or [] mean every dim. */
static bool red_dims_innermost(const tpurt_op_call_t* c, const tpurt_tensor_t* in) {
  int di = (strcmp(c->name, "linalg_vector_norm") == 0 || strcmp(c->name, "norm") == 0) ? 2 : 1;
  bool mask[TPURT_MAX_DIMS] = {false};
  const tpurt_arg_t* a = di < c->num_args ? &c->args[di] : NULL;
  int nd = in->ndim;
  if (!a || a->kind == TPURT_ARG_NONE || (a->kind == TPURT_ARG_INT_LIST && a->count == 0)) return true;
  if (a->kind == TPURT_ARG_INT || a->kind == TPURT_ARG_INT_LIST) {
    int cnt = a->kind == TPURT_ARG_INT ? 1 : a->count;
    for (int k = 0; k < cnt; ++k) {
      int64_t d = a->kind == TPURT_ARG_INT ? a->v.i : a->v.ints[k];
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

/* May node r, a reduction, end the chain members[0..k) (reading one member's
 * value from the tiles instead of memory)? Returns that member, or -1. Its
 * one tensor input must be a member's output (contiguous), no member may
 * write memory the chain also reads (a value produced twice must not change:
 * the engine reads it once per pass and var/std make two passes), its outputs
 * must not touch the chain, and it must share no byte with a node the chain
 * passed over (rule 6). */
static int reduction_source(const tpurt_graph_t* g, const int32_t* members, int k, int32_t r,
                            const int32_t* passed, int np) {
  const tpurt_graph_node_t* node = &g->nodes[r];
  if (node->kind != TPURT_GRAPH_OP || !node->op || !(node->op->flags & TPURT_OP_REDUCE_ENGINE)) return -1;
  const tpurt_op_call_t* c = node->call;
  int32_t in = -1;
  for (int32_t i = 0; i < c->num_args; ++i) {
    const tpurt_arg_t* a = &c->args[i];
    if (a->kind == TPURT_ARG_TENSOR_LIST) return -1;
    if (a->kind != TPURT_ARG_TENSOR || !a->v.tensor) continue;
    if (in >= 0) return -1;
    in = arg(g, r, i);
  }
  if (in < 0) return -1;
  const tpurt_tensor_t* t = desc(g, in);
  if (tpurt_tensor_numel(t) <= 0 || !tpurt_tensor_is_contiguous(t) || c->num_outputs < 1 ||
      !red_dims_innermost(c, t))
    return -1;
  int src = -1;
  for (int m = k - 1; m >= 0 && src < 0; --m)
    if (tpurt_graph_values_same(g, in, out0(g, members[m]))) src = m;
  if (src < 0) return -1;
  const int32_t* routs = tpurt_graph_outputs(g, r);
  for (int m = 0; m < k; ++m) {
    int32_t mn = members[m];
    for (int32_t i = 0; i < num_args(g, mn); ++i) {
      int32_t v = arg(g, mn, i);
      if (v < 0 || from_chain(g, members, m, v)) continue;
      for (int j = 0; j < k; ++j) /* memory the chain reads and writes: in place */
        if (tpurt_graph_values_overlap(g, v, out0(g, members[j]))) return -1;
      for (int32_t o = 0; o < c->num_outputs; ++o)
        if (routs[o] >= 0 && tpurt_graph_values_overlap(g, routs[o], v)) return -1;
    }
    /* a member's buffer the host freed before the reduction may hold its
     * output: that value lived only in tiles (the liveness rule) */
    int32_t mo = out0(g, mn);
    for (int32_t o = 0; o < c->num_outputs; ++o)
      if (routs[o] >= 0 && tpurt_graph_values_overlap(g, routs[o], mo) && !tpurt_graph_freed_between(g, mo, mn, r))
        return -1;
  }
  tpurt_graph_range_t ins = g->values[in].bytes;
  for (int j = 0; j < np; ++j) {
    int32_t q = passed[j];
    if (!tpurt_graph_ranges_overlap(g->nodes[r].hull, g->nodes[q].hull)) continue;
    if (ins.lo != ins.hi && tpurt_graph_node_touches(g, q, ins)) return -1;
    for (int32_t o = 0; o < c->num_outputs; ++o) {
      if (routs[o] < 0) continue;
      tpurt_graph_range_t os = g->values[routs[o]].bytes;
      if (os.lo != os.hi && tpurt_graph_node_touches(g, q, os)) return -1;
    }
  }
  return src;
}

/* Union-find over nodes [0, N) and buffers [N, N + B): the root. */
static int32_t comp_root(int32_t* parent, int32_t x) {
  while (parent[x] != x) {
    parent[x] = parent[parent[x]];
    x = parent[x];
  }
  return x;
}

static void comp_join(int32_t* parent, int32_t a, int32_t b) {
  a = comp_root(parent, a);
  b = comp_root(parent, b);
  if (a != b) parent[a < b ? b : a] = a < b ? a : b;
}

/* Programs' rule 4: each eligible node's component, joined through the buffers of its output and of
 * its full-size tensor inputs. */
static void plan_components(tpurt_fuse_planner_t* p) {
  const tpurt_graph_t* g = p->g;
  int32_t N = g->num_nodes, *parent = p->comp;
  for (int32_t i = 0; i < N + g->num_buffers; ++i) parent[i] = i;
  for (int32_t n = 0; n < N; ++n) {
    if (!p->eligible[n]) continue;
    int32_t o = out0(g, n);
    int64_t numel = tpurt_tensor_numel(desc(g, o));
    if (g->values[o].buffer >= 0) comp_join(parent, n, N + g->values[o].buffer);
    for (int32_t i = 0; i < num_args(g, n); ++i) {
      int32_t v = arg(g, n, i);
      if (v >= 0 && g->values[v].buffer >= 0 && tpurt_tensor_numel(desc(g, v)) == numel)
        comp_join(parent, n, N + g->values[v].buffer);
    }
  }
  for (int32_t n = 0; n < N; ++n) parent[n] = comp_root(parent, n);
}

/* Does node n write a byte of r? An eligible node writes its one output; any other kernel is taken
 * to write every operand (an in-place or list op may not name what it writes as an output). */
static bool node_writes(const tpurt_fuse_planner_t* p, int32_t n, tpurt_graph_range_t r) {
  const tpurt_graph_t* g = p->g;
  if (!p->eligible[n]) return tpurt_graph_node_touches(g, n, r);
  return tpurt_graph_ranges_overlap(g->values[out0(g, n)].bytes, r);
}

/* Programs' rules 6: must nodes a and b keep their order? Only when one writes a byte the other
 * reads or writes; two reads of one tensor (a step count, a learning rate) leave them free. */
static bool nodes_conflict(const tpurt_fuse_planner_t* p, int32_t a, int32_t b) {
  const tpurt_graph_t* g = p->g;
  if (!tpurt_graph_ranges_overlap(g->nodes[a].hull, g->nodes[b].hull)) return false;
  if (g->nodes[a].kind == TPURT_GRAPH_FREE || g->nodes[b].kind == TPURT_GRAPH_FREE) return false;
  const tpurt_graph_node_t* na = &g->nodes[a];
  const int32_t* o = g->operands + na->first_in;
  for (int32_t k = 0; k < na->num_in + na->num_out; ++k) {
    if (o[k] < 0) continue;
    tpurt_graph_range_t r = g->values[o[k]].bytes;
    if (r.lo == r.hi) continue;
    bool a_writes = k >= na->num_in || !p->eligible[a];
    if (a_writes ? tpurt_graph_node_touches(g, b, r) : node_writes(p, b, r)) return true;
  }
  return false;
}

/* Values a chain planned with rule 6's exception for tile values may not store (checked at the end). */
#define FUSE_MAX_PRIVATE 64

typedef struct private_set_t {
  int32_t v[FUSE_MAX_PRIVATE];
  int n;
} private_set_t;

/* Do node b's operands that overlap value v all lie in buffers other than v's (memory the arena plan
 * reused between buffers whose lives do not overlap)? */
static bool only_other_buffers(const tpurt_graph_t* g, int32_t b, int32_t v) {
  int32_t bv = g->values[v].buffer;
  if (bv < 0) return false;
  const tpurt_graph_node_t* nb = &g->nodes[b];
  const int32_t* o = g->operands + nb->first_in;
  for (int32_t k = 0; k < nb->num_in + nb->num_out; ++k) {
    if (o[k] < 0 || !tpurt_graph_values_overlap(g, o[k], v)) continue;
    int32_t bw = g->values[o[k]].buffer;
    if (bw < 0 || bw == bv) return false;
  }
  return true;
}

/* Programs' rule 6 for candidate a (eligible) against node b passed over, with the exception for
 * tile values: 0 no conflict, 1 a conflict, 2 a conflict only through values of a that live in the
 * chain's tiles (a's output, or an input an earlier member of members[0..n) produced) over bytes
 * another buffer of b's holds; those values are appended to *tv (1 when it is full). */
static int candidate_conflict(const tpurt_fuse_planner_t* p, int32_t a, int32_t b, const int32_t* members, int n,
                              private_set_t* tv) {
  const tpurt_graph_t* g = p->g;
  if (!tpurt_graph_ranges_overlap(g->nodes[a].hull, g->nodes[b].hull)) return 0;
  if (g->nodes[a].kind == TPURT_GRAPH_FREE || g->nodes[b].kind == TPURT_GRAPH_FREE) return 0;
  const tpurt_graph_node_t* na = &g->nodes[a];
  const int32_t* o = g->operands + na->first_in;
  int res = 0;
  for (int32_t k = 0; k < na->num_in + na->num_out; ++k) {
    if (o[k] < 0) continue;
    tpurt_graph_range_t r = g->values[o[k]].bytes;
    if (r.lo == r.hi) continue;
    bool is_out = k >= na->num_in;
    if (!(is_out ? tpurt_graph_node_touches(g, b, r) : node_writes(p, b, r))) continue;
    bool tile_value = is_out || from_chain(g, members, n, o[k]);
    if (!tile_value || !only_other_buffers(g, b, o[k]) || tv->n == FUSE_MAX_PRIVATE) return 1;
    tv->v[tv->n++] = o[k];
    res = 2;
  }
  return res;
}

/* Programs' rule 6: may the nodes passed over that node i shares a byte with run before the chain
 * (members[0..n), pre nodes out->pre[0..npre))? Then they, and every node passed over before one of
 * them that shares a byte with it, move from passed to out->pre (graph order kept) and true. */
static bool hoist_for(const tpurt_fuse_planner_t* p, const int32_t* members, int n, int32_t i, int32_t* passed,
                      int* np, tpurt_fuse_chain_t* out, private_set_t* tv) {
  const tpurt_graph_t* g = p->g;
  bool take[TPURT_FUSE_PROGRAM_WINDOW + 1];
  int32_t work[TPURT_FUSE_MAX_PRE];
  int nw = 0, room = TPURT_FUSE_MAX_PRE - out->npre;
  private_set_t tiles = {.n = 0};
  if (tv) tiles = *tv;
  for (int k = 0; k < *np; ++k) {
    /* with tv, nodes that share only tile values with i stay (the exception above) */
    take[k] = tv ? candidate_conflict(p, i, passed[k], members, n, &tiles) == 1 : nodes_conflict(p, i, passed[k]);
    if (take[k]) {
      if (nw == room) return false;
      work[nw++] = k;
    }
  }
  for (int w = 0; w < nw; ++w) { /* the closure over earlier passed nodes */
    int32_t h = passed[work[w]];
    if (g->nodes[h].kind != TPURT_GRAPH_OP || !g->nodes[h].op) return false;
    if (p->eligible[h] && tpurt_tensor_numel(desc(g, out0(g, h))) >= p->small) return false;
    for (int m = 0; m < n; ++m)
      if (nodes_conflict(p, members[m], h)) return false;
    for (int k = 0; k < work[w]; ++k) {
      if (take[k] || !nodes_conflict(p, passed[k], h)) continue;
      if (nw == room) return false;
      take[k] = true;
      work[nw++] = k;
    }
  }
  /* Move them: pre stays in graph order (passed is in graph order, and so are earlier pre nodes
   * relative to each other; a merge keeps both). */
  int32_t merged[TPURT_FUSE_MAX_PRE];
  int a = 0, b = 0, m = 0, keep = 0;
  int32_t mine[TPURT_FUSE_MAX_PRE];
  int nm = 0;
  for (int k = 0; k < *np; ++k) {
    if (take[k]) mine[nm++] = passed[k];
    else passed[keep++] = passed[k];
  }
  *np = keep;
  while (a < out->npre || b < nm)
    merged[m++] = b >= nm || (a < out->npre && out->pre[a] < mine[b]) ? out->pre[a++] : mine[b++];
  memcpy(out->pre, merged, sizeof(int32_t) * (size_t)m);
  out->npre = m;
  if (tv) *tv = tiles;
  return true;
}

/* Plans the chain from start; with tv (programs), rule 6's exception for tile values applies and
 * the values it relied on are collected there. */
static int plan_chain(const tpurt_fuse_planner_t* p, int32_t start, tpurt_fuse_chain_t* out, private_set_t* tv) {
  const tpurt_graph_t* g = p->g;
  out->red = -1;
  out->red_src = -1;
  out->npre = 0;
  out->members[0] = start;
  out->n = 1;
  int n = 1;
  const tpurt_graph_node_t* first = &g->nodes[start];
  if (!p->eligible[start]) {
    if (tpurt_fuse_trace() && first->kind == TPURT_GRAPH_OP)
      fprintf(stderr, "[fuse] %s runs alone (rule 1)\n", first->call->name);
    return 1;
  }
  const tpurt_tensor_t* shape = &first->call->outputs[0];
  int32_t* passed = p->passed;
  int np = 0;
  int counts[7] = {0};
  for (int32_t i = start + 1; i < g->num_nodes && i - start <= p->window && n < TPURT_FUSE_MAX_OPS; ++i) {
    const tpurt_graph_node_t* node = &g->nodes[i];
    if (node->kind == TPURT_GRAPH_FREE || p->done[i]) continue;
    int why = 0;
    if (!p->eligible[i]) {
      int src = reduction_source(g, out->members, n, i, passed, np);
      if (src >= 0) { /* rule 7: the chain ends in this reduction, members[n] */
        out->members[n] = i;
        out->red = i;
        out->red_src = src;
        break;
      }
      why = 1;
    } else if (!tpurt_tensor_same_shape(&node->call->outputs[0], shape)) why = 2;
    else if (p->program && p->comp[i] != p->comp[start]) why = 4;
    else if (conflicts(g, out->members, n, i)) why = 3;
    else if (!p->program && same_op(g, i, start) && !reads_group(g, out->members, n, i)) why = 4;
    else if (tv) { /* a program: rule 6 with the exception for tile values */
      private_set_t mine = *tv;
      for (int k = 0; k < np && !why; ++k)
        if (candidate_conflict(p, i, passed[k], out->members, n, &mine) == 1) why = 6;
      if (!why) *tv = mine;
    } else
      for (int k = 0; k < np && !why; ++k)
        if (p->program ? nodes_conflict(p, i, passed[k]) : nodes_share(g, i, passed[k])) why = 6;
    if (why == 6 && p->program && hoist_for(p, out->members, n, i, passed, &np, out, tv)) why = 0;
    if (why) {
      counts[why]++;
      passed[np++] = i;
    } else {
      out->members[n++] = i;
    }
  }
  out->n = n;
  if (tpurt_fuse_trace())
    fprintf(stderr,
            "[fuse] chain of %d from %s%s%s; passed over: rule1 %d, rule2 %d, rule3 %d, rule4 %d, rule6 %d; "
            "run before it: %d\n",
            n, first->call->name, out->red >= 0 ? " into " : "", out->red >= 0 ? g->nodes[out->red].call->name : "",
            counts[1], counts[2], counts[3], counts[4], counts[6], out->npre);
  return n;
}

int tpurt_fuse_plan_chain(const tpurt_fuse_planner_t* p, int32_t start, tpurt_fuse_chain_t* out) {
  if (!p->program) return plan_chain(p, start, out, NULL);
  private_set_t tv = {.n = 0};
  int n = plan_chain(p, start, out, &tv);
  if (tv.n == 0) return n;
  /* The exception held only if no member writing those bytes stores its value. */
  const tpurt_graph_t* g = p->g;
  for (int m = 0; m < out->n; ++m) {
    int32_t o = out0(g, out->members[m]);
    for (int k = 0; k < tv.n; ++k)
      if (tpurt_graph_values_overlap(g, o, tv.v[k]) && tpurt_fuse_plan_member_stores(p, out, m)) {
        if (tpurt_fuse_trace())
          fprintf(stderr, "[fuse] chain from %s (%lld elements) stores a value it shared with a node passed over (%s, member %d of %d): planned again\n",
                  g->nodes[start].call->name, (long long)tpurt_tensor_numel(&g->nodes[start].call->outputs[0]), g->nodes[out->members[m]].call->name, m, out->n);
        return plan_chain(p, start, out, NULL);
      }
  }
  return n;
}

bool tpurt_fuse_plan_member_stores(const tpurt_fuse_planner_t* p, const tpurt_fuse_chain_t* c, int m) {
  const tpurt_graph_t* g = p->g;
  int nm = c->red >= 0 ? c->n + 1 : c->n; /* the reduction reads inside the chain */
  int32_t mn = c->members[m], o = out0(g, mn);
  tpurt_graph_range_t r = g->values[o].bytes;
  if (r.lo == r.hi) return true;
  int32_t freed = g->values[o].buffer >= 0 ? g->buffers[g->values[o].buffer].freed_at : INT32_MAX;
  int next = m + 1;
  for (int32_t i = mn + 1; i < g->num_nodes; ++i) {
    if (i == freed) return false; /* the host let it go */
    const tpurt_graph_node_t* node = &g->nodes[i];
    if (node->kind == TPURT_GRAPH_FREE) continue;
    if (next < nm && i == c->members[next]) {
      ++next;
      if (node->num_out > 0 && tpurt_graph_values_same(g, out0(g, i), o)) return false; /* overwritten in the same tile */
      continue;                                                                          /* reads it from the tile */
    }
    if (tpurt_graph_node_touches(g, i, r)) return true; /* used outside the chain */
  }
  return true; /* still live when the graph ends: the host may read it */
}

/* ------------------------------------------------------------------------ */
/* State.                                                                    */

void tpurt_fuse_planner_init(tpurt_fuse_planner_t* p) { memset(p, 0, sizeof(*p)); }

void tpurt_fuse_planner_deinit(tpurt_fuse_planner_t* p) {
  free(p->eligible);
  free(p->done);
  free(p->comp);
  free(p->passed);
  memset(p, 0, sizeof(*p));
}

/* Grows *a to at least n entries (doubling); false without memory. */
static bool grow(int32_t** a, int32_t* cap, int32_t n) {
  if (n <= *cap) return true;
  int32_t c = *cap ? *cap : 64;
  while (c < n) c *= 2;
  int32_t* b = realloc(*a, sizeof(int32_t) * (size_t)c);
  if (!b) return false;
  *a = b;
  *cap = c;
  return true;
}

bool tpurt_fuse_planner_begin(tpurt_fuse_planner_t* p, const tpurt_graph_t* g) {
  p->g = g;
  if (g->num_nodes > p->cap) {
    int32_t cap = p->cap ? p->cap : 64;
    while (cap < g->num_nodes) cap *= 2;
    bool* e = realloc(p->eligible, (size_t)cap);
    if (e) p->eligible = e;
    bool* d = realloc(p->done, (size_t)cap);
    if (d) p->done = d;
    if (!e || !d) return false;
    p->cap = cap;
  }
  for (int32_t i = 0; i < g->num_nodes; ++i) {
    p->eligible[i] = eligible(g, i);
    p->done[i] = false;
  }
  p->window = p->program ? TPURT_FUSE_PROGRAM_WINDOW : TPURT_FUSE_WINDOW;
  if (!grow(&p->passed, &p->cap_passed, p->window + 1)) return false;
  if (p->program) {
    if (!grow(&p->comp, &p->cap_comp, g->num_nodes + g->num_buffers)) return false;
    plan_components(p);
  }
  return true;
}

void tpurt_fuse_planner_mark_done(tpurt_fuse_planner_t* p, const tpurt_fuse_chain_t* c) {
  for (int m = 0; m < c->n; ++m) p->done[c->members[m]] = true;
  for (int k = 0; k < c->npre; ++k) p->done[c->pre[k]] = true;
  if (c->red >= 0) p->done[c->red] = true;
}
