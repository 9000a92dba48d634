/* The graph IR (compiler/graph.h) built from C, and DeferAndFuse's planner
 * (compiler/fuse_plan.c) as a pass over it: buffers found from addresses and
 * ended by frees, aliasing queries, symbolic sizes, and the chains the rules
 * give for hand-built graphs (no device, no kernel runs). */
#include <string.h>

#include "compiler/fuse_plan.h"
#include "test_util.h"

static tpurt_tensor_t vec(uintptr_t addr, int64_t n, int64_t stride) {
  tpurt_tensor_t t;
  memset(&t, 0, sizeof t);
  t.data = (void*)addr;
  t.dtype = TPURT_DTYPE_FLOAT32;
  t.ndim = 1;
  t.sizes[0] = n;
  t.strides[0] = stride;
  return t;
}

static int32_t value(tpurt_graph_t* g, const tpurt_tensor_t* t) {
  return tpurt_graph_add_value(g, t, tpurt_graph_buffer_at(g, tpurt_graph_tensor_bytes(t)), NULL);
}

static void test_buffers(void) {
  tpurt_graph_t g;
  tpurt_graph_init(&g);
  /* Two views of one allocation [0x1000, 0x1400) and one of another. */
  tpurt_tensor_t a = vec(0x1000, 128, 1), a_hi = vec(0x1200, 128, 1), b = vec(0x2000, 64, 1);
  tpurt_tensor_t a_odd = vec(0x1004, 128, 2); /* every other element, overlapping both halves */
  int32_t va = value(&g, &a), vb = value(&g, &b), vhi = value(&g, &a_hi);
  CHECK(g.values[va].buffer != g.values[vhi].buffer); /* not overlapping yet: two buffers */
  int32_t vodd = value(&g, &a_odd);                   /* joins them */
  CHECK(tpurt_graph_values_overlap(&g, va, vodd) && tpurt_graph_values_overlap(&g, vhi, vodd));
  CHECK(!tpurt_graph_values_overlap(&g, va, vhi) && !tpurt_graph_values_overlap(&g, va, vb));
  int32_t n0 = tpurt_graph_add_node(&g, TPURT_GRAPH_OP, NULL, NULL, &va, 1, &vb, 1);
  /* The host frees the first allocation; the same bytes then hold a new buffer. */
  int32_t nf = tpurt_graph_add_free_range(&g, (tpurt_graph_range_t){0x1000, 0x1400});
  tpurt_tensor_t again = vec(0x1000, 256, 1);
  int32_t vagain = value(&g, &again);
  int32_t n1 = tpurt_graph_add_node(&g, TPURT_GRAPH_OP, NULL, NULL, &vb, 1, &vagain, 1);
  CHECK(tpurt_graph_finish(&g));
  CHECK(g.values[va].buffer == g.values[vhi].buffer && g.values[va].buffer == g.values[vodd].buffer);
  CHECK(g.values[vagain].buffer != g.values[va].buffer);
  CHECK(tpurt_graph_values_overlap(&g, va, vagain)); /* the memory is reused, the buffer is new */
  CHECK(tpurt_graph_freed_between(&g, va, n0, n1) && !tpurt_graph_freed_between(&g, vagain, n0, n1));
  CHECK(g.buffers[g.values[va].buffer].freed_at == nf);
  CHECK(g.values[vb].producer == n0 && g.values[vagain].producer == n1 && g.values[va].producer == -1);
  CHECK(tpurt_graph_node_touches(&g, n0, g.values[vodd].bytes) && !tpurt_graph_node_touches(&g, nf, g.values[va].bytes));
  /* An empty tensor touches nothing and has no buffer. */
  tpurt_tensor_t empty = vec(0x3000, 0, 1);
  CHECK(value(&g, &empty) >= 0 && g.values[g.num_values - 1].buffer == -1);
  /* Symbolic sizes: a symbol with bounds named per dim. */
  int32_t s0 = tpurt_graph_add_sym(&g, 1, 4096);
  int32_t dims[1] = {s0};
  CHECK(s0 == 0 && g.syms[0].upper == 4096);
  int32_t vs = tpurt_graph_add_value(&g, &b, tpurt_graph_add_buffer(&g, 0, 256), dims);
  CHECK(g.values[vs].sym[0] == s0 && g.buffers[g.values[vs].buffer].freed_at == INT32_MAX);
  /* A reset graph is empty and reuses its arrays. */
  tpurt_graph_node_t* nodes = g.nodes;
  tpurt_graph_reset(&g);
  CHECK(g.num_nodes == 0 && g.num_values == 0 && g.num_buffers == 0 && g.nodes == nodes);
  tpurt_graph_deinit(&g);
}

/* ---- the planner over hand-built elementwise graphs ---- */

typedef struct op_node_t {
  tpurt_arg_t args[3];
  tpurt_tensor_t out;
  tpurt_op_call_t call;
} op_node_t;

/* out = a <op> b (b NULL: a scalar) as a node; returns its index. */
static int32_t ew(tpurt_graph_t* g, op_node_t* s, const char* op, const tpurt_tensor_t* out, const tpurt_tensor_t* a,
                  const tpurt_tensor_t* b) {
  memset(s, 0, sizeof *s);
  s->out = *out;
  s->args[0] = (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .v.tensor = a};
  s->args[1] = b ? (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .v.tensor = b} : (tpurt_arg_t){.kind = TPURT_ARG_DOUBLE, .v.d = 2};
  s->call = (tpurt_op_call_t){.name = op, .overload = "", .num_args = 2, .args = s->args, .num_outputs = 1,
                              .outputs = &s->out};
  int32_t ins[2] = {value(g, a), b ? value(g, b) : -1}, o = value(g, &s->out);
  return tpurt_graph_add_node(g, TPURT_GRAPH_OP, tpurt_op_lookup(op), &s->call, ins, 2, &o, 1);
}

static void test_planner(void) {
  tpurt_graph_t g;
  tpurt_graph_init(&g);
  tpurt_fuse_planner_t p;
  tpurt_fuse_planner_init(&p);
  op_node_t s[8];
  tpurt_tensor_t x = vec(0x10000, 64, 1), t1 = vec(0x20000, 64, 1), t2 = vec(0x30000, 64, 1), y = vec(0x40000, 64, 1);
  tpurt_tensor_t other = vec(0x50000, 32, 1), z = vec(0x60000, 32, 1), x_view = vec(0x10004, 32, 2);
  ew(&g, &s[0], "mul", &t1, &x, NULL);            /* 0: t1 = x * 2 */
  ew(&g, &s[1], "add", &t2, &t1, &x);             /* 1: t2 = t1 + x */
  ew(&g, &s[2], "add", &z, &other, NULL);         /* 2: another shape (rule 2) */
  ew(&g, &s[3], "exp", &y, &t2, NULL);            /* 3: y = exp(t2) */
  tpurt_graph_add_free_range(&g, (tpurt_graph_range_t){0x20000, 0x20100}); /* t1 dies */
  ew(&g, &s[4], "mul", &x_view, &x_view, NULL);   /* 5: an in-place view of x (rule 3 for the chain) */
  CHECK(tpurt_graph_finish(&g));
  CHECK(tpurt_fuse_planner_begin(&p, &g));
  tpurt_fuse_chain_t c;
  CHECK(tpurt_fuse_plan_chain(&p, 0, &c) == 3 && c.red == -1);
  CHECK(c.members[0] == 0 && c.members[1] == 1 && c.members[2] == 3);
  /* Liveness: t1 is freed before anything outside the chain reads it; t2
   * and y are still live at the end of the graph. */
  CHECK(!tpurt_fuse_plan_member_stores(&p, &c, 0));
  CHECK(tpurt_fuse_plan_member_stores(&p, &c, 1) && tpurt_fuse_plan_member_stores(&p, &c, 2));
  tpurt_fuse_planner_mark_done(&p, &c);
  CHECK(p.done[0] && p.done[1] && p.done[3] && !p.done[2]);
  /* The other shape's two ops (independent buffers) make a chain of their own. */
  CHECK(tpurt_fuse_plan_chain(&p, 2, &c) == 2 && c.members[1] == 5);
  /* A free never joins; the in-place view is an elementwise node of its own shape. */
  CHECK(!p.eligible[4] && p.eligible[5]);
  tpurt_fuse_planner_deinit(&p);
  tpurt_graph_deinit(&g);
}

int main(void) {
  test_buffers();
  test_planner();
  return test_finish("test_graph");
}
