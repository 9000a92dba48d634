/* DeferAndFuse's planner: a pass over a graph (compiler/graph.h) that groups
 * its nodes into fused elementwise chains, each ending, optionally, in a
 * reduction; and decides which of a chain's values must reach memory. The
 * rules are written once, at the top of fuse_plan.c. The executor
 * (exec/defer) asks for chains node by node and runs them. */
#ifndef TPURT_COMPILER_FUSE_PLAN_H_
#define TPURT_COMPILER_FUSE_PLAN_H_

#include "compiler/graph.h"

#define TPURT_FUSE_MAX_OPS 16 /* ops per chain */
#define TPURT_FUSE_WINDOW 96  /* nodes a chain may look past */
#define TPURT_FUSE_PROGRAM_WINDOW 4096 /* ... in a program's plan (made once, replayed at every launch) */

#define TPURT_FUSE_MAX_PRE 32 /* nodes a program's chain may run ahead of itself */

typedef struct tpurt_fuse_chain_t {
  int32_t members[TPURT_FUSE_MAX_OPS + 1]; /* node ids; members[n] is the reduction when red >= 0 */
  int n;
  int32_t red;  /* the reduction node ending the chain, or -1 */
  int red_src;  /* the member whose value it reduces */
  int npre;     /* programs: nodes after the chain's first that run, in order, just before it */
  int32_t pre[TPURT_FUSE_MAX_PRE];
} tpurt_fuse_chain_t;

/* Per-graph planning state, kept between graphs so planning allocates nothing
 * once warm. */
typedef struct tpurt_fuse_planner_t {
  const tpurt_graph_t* g;
  bool program;   /* set before begin: a torch.compile program's plan (the rules' "programs") */
  int64_t small;  /* set before begin: programs' fusable nodes of fewer elements run alone (rule 6) */
  bool* eligible; /* node may join a chain on its own terms */
  bool* done;     /* node already ran (inside a chain) */
  int32_t cap;
  int32_t window;   /* nodes a chain may look past */
  int32_t* comp;    /* program: per node, its component (rule 4); [cap + buffers] while computing */
  int32_t cap_comp;
  int32_t* passed;  /* nodes a chain passed over: window entries */
  int32_t cap_passed;
} tpurt_fuse_planner_t;

void tpurt_fuse_planner_init(tpurt_fuse_planner_t* p);
void tpurt_fuse_planner_deinit(tpurt_fuse_planner_t* p);
/* Starts planning graph g (finished); false without memory (then nothing fuses). */
bool tpurt_fuse_planner_begin(tpurt_fuse_planner_t* p, const tpurt_graph_t* g);

/* The chain that starts at node `start` (not done): its size (1: the node
 * runs alone). */
int tpurt_fuse_plan_chain(const tpurt_fuse_planner_t* p, int32_t start, tpurt_fuse_chain_t* out);
/* Liveness: must member m's value be written to memory? */
bool tpurt_fuse_plan_member_stores(const tpurt_fuse_planner_t* p, const tpurt_fuse_chain_t* c, int m);
/* The chain ran: its nodes are done. */
void tpurt_fuse_planner_mark_done(tpurt_fuse_planner_t* p, const tpurt_fuse_chain_t* c);

/* Whether op may join a chain (an elementwise kernel, TPURT_OP_ELEMENTWISE). */
static inline bool tpurt_fuse_op_fusable(const tpurt_op_def_t* op) {
  return op && (op->flags & TPURT_OP_ELEMENTWISE);
}

/* TORCH_TPU_FUSE_TRACE=1: the planner explains each chain on stderr. */
bool tpurt_fuse_trace(void);

#endif /* TPURT_COMPILER_FUSE_PLAN_H_ */
