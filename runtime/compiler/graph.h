/* The graph IR: the one representation of a program that the compiler's
 * passes read. DeferAndFuse lowers its pending list into one
 * (exec/defer/lower.c) and plans fused chains over it (compiler/fuse_plan.c);
 * torch.compile will lower FX graphs into the same IR.
 *
 * A graph is a sequence of nodes over values:
 *  - a value is a typed, strided tensor (its descriptor: dtype, sizes,
 *    strides, and in an eager graph its device address) that lives in a
 *    buffer. Aliasing is explicit: every value names its buffer, values of
 *    one buffer may share bytes, values of different buffers share none
 *    unless one buffer was freed before the other was made (buffers then
 *    reuse memory: tpurt_graph_buffers_share_memory). A value's footprint is
 *    the byte range it touches, relative to memory (eager) or its buffer;
 *  - a size may be symbolic: `sym[d]` names a symbol of the graph (with its
 *    bounds) instead of the fixed size, so one compiled graph serves every
 *    size in the bounds;
 *  - a node is an op of the op table (its tensor operands as values: one slot
 *    per call argument, -1 for a non-tensor argument, then the elements of
 *    tensor-list arguments; its outputs), a device copy, or a free: the host
 *    let a buffer go, nothing after it sees that buffer's values again.
 *
 * Size first, allocate once: a graph keeps its arrays between uses
 * (tpurt_graph_reset), so building the next one allocates nothing once warm.
 * Internal to the runtime; not an ABI. */
#ifndef TPURT_COMPILER_GRAPH_H_
#define TPURT_COMPILER_GRAPH_H_

#include "tpurt/kernel.h"

typedef enum tpurt_graph_node_kind_e {
  TPURT_GRAPH_OP = 0,   /* a kernel of the op table */
  TPURT_GRAPH_COPY,     /* device-to-device copy: inputs {src}, outputs {dst} (byte values) */
  TPURT_GRAPH_FREE,     /* the host freed `buffer` */
} tpurt_graph_node_kind_t;

/* A byte range [lo, hi); lo == hi: none. */
typedef struct tpurt_graph_range_t {
  uintptr_t lo, hi;
} tpurt_graph_range_t;

typedef struct tpurt_graph_value_t {
  const tpurt_tensor_t* desc; /* dtype, sizes, strides, data (borrowed) */
  int32_t buffer;
  int32_t producer;           /* the node that writes it last before its first read, or -1 */
  tpurt_graph_range_t bytes;  /* footprint */
  const int32_t* sym;         /* per dim: a symbol index, or -1 for desc's fixed size; NULL: all fixed */
} tpurt_graph_value_t;

typedef struct tpurt_graph_buffer_t {
  tpurt_graph_range_t bytes;  /* the hull of its values' footprints */
  int32_t freed_at;           /* the FREE node that ends it, or INT32_MAX */
  int32_t parent;             /* the buffer it was joined into (itself when a root) */
} tpurt_graph_buffer_t;

typedef struct tpurt_graph_node_t {
  uint32_t kind;                 /* tpurt_graph_node_kind_t */
  const tpurt_op_def_t* op;      /* OP */
  const tpurt_op_call_t* call;   /* OP: the call's scalar arguments, as the kernel takes them (borrowed) */
  int32_t first_in, num_in;      /* operand slots in graph->operands */
  int32_t first_out, num_out;
  int32_t buffer;                /* FREE of one buffer (-1: of a range, see the buffers' freed_at) */
  tpurt_graph_range_t hull;      /* every byte the node's operands touch (FREE: none) */
} tpurt_graph_node_t;

typedef struct tpurt_graph_sym_t {
  int64_t lower, upper; /* bounds of a symbolic size */
} tpurt_graph_sym_t;

typedef struct tpurt_graph_t {
  tpurt_graph_node_t* nodes;
  int32_t num_nodes, cap_nodes;
  tpurt_graph_value_t* values;
  int32_t num_values, cap_values;
  int32_t* operands; /* value ids (or -1), nodes' inputs then outputs */
  int32_t num_operands, cap_operands;
  tpurt_graph_buffer_t* buffers;
  int32_t num_buffers, cap_buffers;
  tpurt_graph_sym_t* syms;
  int32_t num_syms, cap_syms;
  int32_t* open;    /* builder: the buffers not freed yet */
  int32_t num_open, cap_open;
  bool oom;         /* a builder call could not get memory: the graph is unusable */
} tpurt_graph_t;

void tpurt_graph_init(tpurt_graph_t* g);
void tpurt_graph_deinit(tpurt_graph_t* g);
/* Empties the graph, keeping its arrays for the next one. */
void tpurt_graph_reset(tpurt_graph_t* g);

/* ---- building ---- */

/* A symbol with bounds; its index. */
int32_t tpurt_graph_add_sym(tpurt_graph_t* g, int64_t lower, int64_t upper);
/* A buffer over a byte range (a compiled graph's planned allocation); its index. */
int32_t tpurt_graph_add_buffer(tpurt_graph_t* g, uintptr_t lo, uintptr_t hi);
/* The open buffer holding the bytes `r` of device memory (an eager graph,
 * whose tensors arrive as addresses): the one whose values overlap r, made
 * if none; buffers that r joins become one. A buffer ends at the FREE of
 * its bytes (tpurt_graph_add_free_range), and later values there open a new
 * one. -1 for an empty range. */
int32_t tpurt_graph_buffer_at(tpurt_graph_t* g, tpurt_graph_range_t r);
/* A value in `buffer` (-1: none; its footprint from desc: the bytes it
 * touches); its index. */
int32_t tpurt_graph_add_value(tpurt_graph_t* g, const tpurt_tensor_t* desc, int32_t buffer, const int32_t* sym);
/* A node; its index. ins: num_in value ids or -1, outs: num_out value ids. */
int32_t tpurt_graph_add_node(tpurt_graph_t* g, tpurt_graph_node_kind_t kind, const tpurt_op_def_t* op,
                             const tpurt_op_call_t* call, const int32_t* ins, int32_t num_in, const int32_t* outs,
                             int32_t num_out);
/* The host freed `buffer`: a FREE node; its index. */
int32_t tpurt_graph_add_free(tpurt_graph_t* g, int32_t buffer);
/* The host freed the device memory r (an allocator block): a FREE node that
 * ends every open buffer overlapping r; its index. */
int32_t tpurt_graph_add_free_range(tpurt_graph_t* g, tpurt_graph_range_t r);
/* After the last node: every value names its final buffer (buffers that
 * tpurt_graph_buffer_at joined become one). False when the graph could not
 * be built (out of memory). */
bool tpurt_graph_finish(tpurt_graph_t* g);

/* A finished graph's structure, as planning sees it: nodes (kind, op, operands), values (buffer,
 * producer, footprint relative to their buffer, dtype, sizes, strides) and buffers (extent, end).
 * Not the addresses themselves: two graphs with equal fingerprints lowered from the same records
 * at other addresses plan the same (every overlap test gives the same answer). */
uint64_t tpurt_graph_fingerprint(const tpurt_graph_t* g);

/* The bytes a tensor touches (lo == hi when none: no data or an empty dim). */
tpurt_graph_range_t tpurt_graph_tensor_bytes(const tpurt_tensor_t* t);

/* ---- reading ---- */

static inline const int32_t* tpurt_graph_inputs(const tpurt_graph_t* g, int32_t node) {
  return g->operands + g->nodes[node].first_in;
}
static inline const int32_t* tpurt_graph_outputs(const tpurt_graph_t* g, int32_t node) {
  return g->operands + g->nodes[node].first_out;
}
static inline bool tpurt_graph_ranges_overlap(tpurt_graph_range_t a, tpurt_graph_range_t b) {
  return a.lo < b.hi && b.lo < a.hi;
}
/* The very same view: element i of one is element i of the other. */
static inline bool tpurt_graph_values_same(const tpurt_graph_t* g, int32_t a, int32_t b) {
  return a == b || tpurt_tensor_same_view(g->values[a].desc, g->values[b].desc);
}
/* Do two values share a byte (aliasing within a buffer, or memory a freed
 * buffer's successor reuses)? */
static inline bool tpurt_graph_values_overlap(const tpurt_graph_t* g, int32_t a, int32_t b) {
  return tpurt_graph_ranges_overlap(g->values[a].bytes, g->values[b].bytes);
}
/* Was the value's buffer freed by a node strictly between nodes a and b? */
static inline bool tpurt_graph_freed_between(const tpurt_graph_t* g, int32_t value, int32_t a, int32_t b) {
  int32_t buf = g->values[value].buffer;
  if (buf < 0) return false;
  int32_t f = g->buffers[buf].freed_at;
  return f > a && f < b;
}
/* Does node n read or write any byte of r? */
bool tpurt_graph_node_touches(const tpurt_graph_t* g, int32_t n, tpurt_graph_range_t r);

#endif /* TPURT_COMPILER_GRAPH_H_ */
