/* The graph IR (compiler/graph.h): building and the queries passes use. */
#include "compiler/graph.h"

#include <stdlib.h>
#include <string.h>

#include "base/hash.h"

/* Grows *arr (elements of `size` bytes) to hold `need`; false without memory. */
static bool grow(void** arr, int32_t* cap, int32_t need, size_t size) {
  if (need <= *cap) return true;
  int32_t n = *cap ? *cap : 64;
  while (n < need) n *= 2;
  void* p = realloc(*arr, (size_t)n * size);
  if (!p) return false;
  *arr = p;
  *cap = n;
  return true;
}
#define GROW(g, arr, num, cap, extra) \
  ((g)->oom = (g)->oom || !grow((void**)&(g)->arr, &(g)->cap, (g)->num + (extra), sizeof(*(g)->arr)), !(g)->oom)

void tpurt_graph_init(tpurt_graph_t* g) { memset(g, 0, sizeof(*g)); }

void tpurt_graph_deinit(tpurt_graph_t* g) {
  free(g->nodes);
  free(g->values);
  free(g->operands);
  free(g->buffers);
  free(g->syms);
  free(g->open);
  memset(g, 0, sizeof(*g));
}

void tpurt_graph_reset(tpurt_graph_t* g) {
  g->num_nodes = g->num_values = g->num_operands = g->num_buffers = g->num_syms = g->num_open = 0;
  g->oom = false;
}

tpurt_graph_range_t tpurt_graph_tensor_bytes(const tpurt_tensor_t* t) {
  tpurt_graph_range_t r = {0, 0};
  if (!t || !t->data) return r;
  int64_t span = 0;
  for (int d = 0; d < t->ndim; ++d) {
    if (t->sizes[d] == 0) return r;
    span += (t->sizes[d] - 1) * (t->strides[d] < 0 ? -t->strides[d] : t->strides[d]);
  }
  r.lo = (uintptr_t)t->data;
  r.hi = r.lo + (uintptr_t)(span + 1) * tpurt_dtype_size(t->dtype);
  return r;
}

int32_t tpurt_graph_add_sym(tpurt_graph_t* g, int64_t lower, int64_t upper) {
  if (!GROW(g, syms, num_syms, cap_syms, 1)) return -1;
  g->syms[g->num_syms] = (tpurt_graph_sym_t){lower, upper};
  return g->num_syms++;
}

int32_t tpurt_graph_add_buffer(tpurt_graph_t* g, uintptr_t lo, uintptr_t hi) {
  if (!GROW(g, buffers, num_buffers, cap_buffers, 1)) return -1;
  int32_t b = g->num_buffers++;
  g->buffers[b] = (tpurt_graph_buffer_t){.bytes = {lo, hi}, .freed_at = INT32_MAX, .parent = b};
  return b;
}

static int32_t root(const tpurt_graph_t* g, int32_t b) {
  while (g->buffers[b].parent != b) b = g->buffers[b].parent;
  return b;
}

/* The open buffers are pairwise disjoint and kept sorted by address, so the
 * ones a range overlaps are one run of the array, found by binary search. */
static int32_t first_open_ending_after(const tpurt_graph_t* g, uintptr_t lo) {
  int32_t a = 0, b = g->num_open;
  while (a < b) {
    int32_t m = (a + b) / 2;
    if (g->buffers[g->open[m]].bytes.hi <= lo) a = m + 1;
    else b = m;
  }
  return a;
}

/* Drops open[i, j) from the open list. */
static void open_remove(tpurt_graph_t* g, int32_t i, int32_t j) {
  if (j <= i) return;
  memmove(g->open + i, g->open + j, sizeof(int32_t) * (size_t)(g->num_open - j));
  g->num_open -= j - i;
}

int32_t tpurt_graph_buffer_at(tpurt_graph_t* g, tpurt_graph_range_t r) {
  if (r.lo == r.hi || g->oom) return -1;
  /* Tensors of one allocation overlap, tensors of two never do: joining the
   * open buffers r overlaps gives each allocation's live values one buffer.
   * The joined hull cannot reach a neighbour: the one before ends at or
   * before r.lo and before the first joined one starts, the one after
   * mirrors it. */
  int32_t i = first_open_ending_after(g, r.lo), j = i;
  while (j < g->num_open && g->buffers[g->open[j]].bytes.lo < r.hi) ++j;
  if (j == i) { /* a new allocation */
    if (!GROW(g, open, num_open, cap_open, 1)) return -1;
    int32_t b = tpurt_graph_add_buffer(g, r.lo, r.hi);
    if (b < 0) return -1;
    memmove(g->open + i + 1, g->open + i, sizeof(int32_t) * (size_t)(g->num_open - i));
    g->open[i] = b;
    g->num_open++;
    return b;
  }
  int32_t found = g->open[i];
  tpurt_graph_range_t* h = &g->buffers[found].bytes;
  if (r.lo < h->lo) h->lo = r.lo;
  for (int32_t k = i + 1; k < j; ++k) g->buffers[g->open[k]].parent = found;
  tpurt_graph_range_t last = g->buffers[g->open[j - 1]].bytes;
  h->hi = r.hi > last.hi ? r.hi : last.hi;
  open_remove(g, i + 1, j);
  return found;
}

int32_t tpurt_graph_add_value(tpurt_graph_t* g, const tpurt_tensor_t* desc, int32_t buffer, const int32_t* sym) {
  if (!GROW(g, values, num_values, cap_values, 1)) return -1;
  int32_t v = g->num_values++;
  g->values[v] = (tpurt_graph_value_t){.desc = desc, .buffer = buffer, .producer = -1,
                                       .bytes = tpurt_graph_tensor_bytes(desc), .sym = sym};
  return v;
}

int32_t tpurt_graph_add_node(tpurt_graph_t* g, tpurt_graph_node_kind_t kind, const tpurt_op_def_t* op,
                             const tpurt_op_call_t* call, const int32_t* ins, int32_t num_in, const int32_t* outs,
                             int32_t num_out) {
  if (!GROW(g, nodes, num_nodes, cap_nodes, 1) || !GROW(g, operands, num_operands, cap_operands, num_in + num_out))
    return -1;
  int32_t n = g->num_nodes++;
  tpurt_graph_node_t* node = &g->nodes[n];
  *node = (tpurt_graph_node_t){.kind = kind, .op = op, .call = call, .first_in = g->num_operands, .num_in = num_in,
                               .first_out = g->num_operands + num_in, .num_out = num_out, .buffer = -1,
                               .hull = {UINTPTR_MAX, 0}};
  int32_t* o = g->operands + g->num_operands;
  if (num_in) memcpy(o, ins, sizeof(int32_t) * (size_t)num_in);
  if (num_out) memcpy(o + num_in, outs, sizeof(int32_t) * (size_t)num_out);
  g->num_operands += num_in + num_out;
  for (int32_t k = 0; k < num_in + num_out; ++k) {
    if (o[k] < 0) continue;
    tpurt_graph_range_t b = g->values[o[k]].bytes;
    if (b.lo == b.hi) continue;
    if (b.lo < node->hull.lo) node->hull.lo = b.lo;
    if (b.hi > node->hull.hi) node->hull.hi = b.hi;
  }
  for (int32_t k = 0; k < num_out; ++k)
    if (outs[k] >= 0 && g->values[outs[k]].producer < 0) g->values[outs[k]].producer = n;
  return n;
}

int32_t tpurt_graph_add_free(tpurt_graph_t* g, int32_t buffer) {
  int32_t n = tpurt_graph_add_node(g, TPURT_GRAPH_FREE, NULL, NULL, NULL, 0, NULL, 0);
  if (n < 0 || buffer < 0) return n;
  buffer = root(g, buffer);
  g->nodes[n].buffer = buffer;
  if (g->buffers[buffer].freed_at == INT32_MAX) g->buffers[buffer].freed_at = n;
  int32_t i = first_open_ending_after(g, g->buffers[buffer].bytes.lo);
  if (i < g->num_open && g->open[i] == buffer) open_remove(g, i, i + 1);
  return n;
}

int32_t tpurt_graph_add_free_range(tpurt_graph_t* g, tpurt_graph_range_t r) {
  int32_t n = tpurt_graph_add_node(g, TPURT_GRAPH_FREE, NULL, NULL, NULL, 0, NULL, 0);
  if (n < 0) return n;
  int32_t i = first_open_ending_after(g, r.lo), j = i;
  for (; j < g->num_open && g->buffers[g->open[j]].bytes.lo < r.hi; ++j) g->buffers[g->open[j]].freed_at = n;
  open_remove(g, i, j);
  return n;
}

/* One 64-bit word into the fingerprint: xor, multiply by an odd constant, xor-shift (each step a
 * bijection of h for a given v, and of v for a given h). FNV-1a's byte loop took 2% of a compiled
 * small-GPT step's device time: a program fingerprints its lowered graph on every run. */
static inline uint64_t fp_mix(uint64_t h, int64_t v) {
  h = (h ^ (uint64_t)v) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

uint64_t tpurt_graph_fingerprint(const tpurt_graph_t* g) {
  uint64_t h = TPURT_FNV_SEED;
#define MIX(x) (h = fp_mix(h, (int64_t)(x)))
  MIX(g->num_nodes), MIX(g->num_values), MIX(g->num_buffers), MIX(g->num_operands), MIX(g->num_syms);
  for (int32_t i = 0; i < g->num_nodes; ++i) {
    const tpurt_graph_node_t* n = &g->nodes[i];
    MIX(n->kind), MIX((uintptr_t)n->op), MIX(n->first_in), MIX(n->num_in), MIX(n->first_out), MIX(n->num_out);
    MIX(n->buffer);
  }
  for (int32_t i = 0; i < g->num_operands; ++i) MIX(g->operands[i]);
  for (int32_t i = 0; i < g->num_buffers; ++i) {
    const tpurt_graph_buffer_t* b = &g->buffers[i];
    MIX(b->bytes.hi - b->bytes.lo), MIX(b->freed_at), MIX(b->parent);
  }
  for (int32_t i = 0; i < g->num_values; ++i) {
    const tpurt_graph_value_t* v = &g->values[i];
    uintptr_t base = v->buffer >= 0 ? g->buffers[v->buffer].bytes.lo : v->bytes.lo;
    MIX(v->buffer), MIX(v->producer), MIX(v->bytes.lo - base), MIX(v->bytes.hi - base), MIX(v->sym != NULL);
    const tpurt_tensor_t* t = v->desc;
    MIX(t->dtype), MIX(t->ndim);
    for (int d = 0; d < t->ndim; ++d) MIX(t->sizes[d]), MIX(t->strides[d]);
  }
#undef MIX
  return h;
}

bool tpurt_graph_finish(tpurt_graph_t* g) {
  if (g->oom) return false;
  for (int32_t v = 0; v < g->num_values; ++v)
    if (g->values[v].buffer >= 0) g->values[v].buffer = root(g, g->values[v].buffer);
  return true;
}

bool tpurt_graph_node_touches(const tpurt_graph_t* g, int32_t n, tpurt_graph_range_t r) {
  const tpurt_graph_node_t* node = &g->nodes[n];
  if (!tpurt_graph_ranges_overlap(node->hull, r)) return false;
  if (node->kind == TPURT_GRAPH_FREE) return false;
  const int32_t* o = g->operands + node->first_in;
  for (int32_t k = 0; k < node->num_in + node->num_out; ++k)
    if (o[k] >= 0 && tpurt_graph_ranges_overlap(g->values[o[k]].bytes, r)) return true;
  return false;
}
