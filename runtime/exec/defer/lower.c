/* DeferAndFuse lowers its pending list into the graph IR (compiler/graph.h),
 * node for record: a kernel becomes an OP node over its calls' tensors, a
 * device copy a COPY node over two byte values, a free marker a FREE node.
 * This is where an eager graph's buffers are found: tensors arrive as device
 * addresses, and each allocation's tensors overlap each other and no other
 * allocation's, so the open buffer a tensor's bytes overlap is its buffer
 * (tpurt_graph_buffer_at); a free marker ends it. Past this point aliasing
 * is explicit. */
#include "exec/defer/defer.h"

#include <stdlib.h>
#include <string.h>

/* A value for tensor t (NULL or no data: -1). */
static int32_t value_of(tpurt_graph_t* g, const tpurt_tensor_t* t) {
  if (!t) return -1;
  int32_t b = tpurt_graph_buffer_at(g, tpurt_graph_tensor_bytes(t));
  return tpurt_graph_add_value(g, t, b, NULL);
}

/* A 1-D byte tensor over [p, p + bytes) (a copy's operand), in the list's arena. */
static const tpurt_tensor_t* bytes_desc(tpurt_defer_list_t* l, const void* p, size_t bytes) {
  tpurt_tensor_t* t = tpurt_defer_list_alloc(l, sizeof(tpurt_tensor_t));
  if (!t) return NULL;
  memset(t, 0, offsetof(tpurt_tensor_t, sizes));
  t->data = (void*)p;
  t->dtype = TPURT_DTYPE_UINT8;
  t->ndim = 1;
  t->sizes[0] = (int64_t)bytes;
  t->strides[0] = 1;
  return t;
}

bool tpurt_defer_lower(tpurt_defer_list_t* l, tpurt_graph_t* g, int32_t** scratch, int32_t* cap) {
  tpurt_graph_reset(g);
  for (int32_t i = 0; i < l->num_recs; ++i) {
    const tpurt_defer_rec_t* r = &l->recs[i];
    if (r->kind == TPURT_DEFER_FREE) {
      uintptr_t p = (uintptr_t)r->dst;
      tpurt_graph_add_free_range(g, (tpurt_graph_range_t){p, p + r->bytes});
      continue;
    }
    if (r->kind == TPURT_DEFER_COPY) {
      int32_t dst = value_of(g, bytes_desc(l, r->dst, r->bytes)), src = value_of(g, bytes_desc(l, r->src, r->bytes));
      tpurt_graph_add_node(g, TPURT_GRAPH_COPY, NULL, NULL, &src, 1, &dst, 1);
      continue;
    }
    /* A kernel: outputs, then one slot per argument, then list elements. */
    const tpurt_op_call_t* c = &r->call;
    int32_t need = c->num_outputs + c->num_args;
    for (int32_t a = 0; a < c->num_args; ++a)
      if (c->args[a].kind == TPURT_ARG_TENSOR_LIST) need += c->args[a].count;
    if (need > *cap) {
      int32_t n = *cap ? *cap : 64;
      while (n < need) n *= 2;
      int32_t* s = realloc(*scratch, sizeof(int32_t) * (size_t)n);
      if (!s) return false;
      *scratch = s;
      *cap = n;
    }
    int32_t* outs = *scratch;
    int32_t* ins = outs + c->num_outputs;
    for (int32_t o = 0; o < c->num_outputs; ++o) outs[o] = value_of(g, &c->outputs[o]);
    int32_t extra = c->num_args;
    for (int32_t a = 0; a < c->num_args; ++a) {
      const tpurt_arg_t* arg = &c->args[a];
      ins[a] = arg->kind == TPURT_ARG_TENSOR ? value_of(g, arg->v.tensor) : -1;
      if (arg->kind == TPURT_ARG_TENSOR_LIST)
        for (int32_t e = 0; e < arg->count; ++e) ins[extra++] = value_of(g, arg->v.tensors[e]);
    }
    tpurt_graph_add_node(g, TPURT_GRAPH_OP, r->op, c, ins, extra, outs, c->num_outputs);
  }
  return tpurt_graph_finish(g) && g->num_nodes == l->num_recs;
}
