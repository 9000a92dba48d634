/* Generated fused kernels (DESIGN §6): a DeferAndFuse chain whose ops are all
 * expression ops of the elementwise family (ew_ops.h) becomes one C function
 * that computes every member per element in registers, built in the
 * background with the system compiler, cached on disk and dlopen'ed. Until it
 * is ready the chain runs through fuse.c's generic tiled path; both give
 * Strict's bits (same expressions, same headers, same compiler flags, no FP
 * contraction under -std=c11).
 *
 * Also included by the generated code itself (for tpurt_fgen_args_t), so it
 * must stay free of runtime-internal includes. Internal; not an ABI. */
#ifndef TPURT_EXEC_FUSE_CODEGEN_H_
#define TPURT_EXEC_FUSE_CODEGEN_H_

#include <stdbool.h>
#include <stdint.h>

#define TPURT_FGEN_MAX_OPS 16
#define TPURT_FGEN_MAX_IN 3

/* What a generated kernel gets per call: for member k, mem[k][0] is its
 * output's data (when stored) and mem[k][1..3] its memory inputs (element 0
 * of the run); params[k] is its ew_params_t. */
typedef struct tpurt_fgen_args_t {
  char* mem[TPURT_FGEN_MAX_OPS][TPURT_FGEN_MAX_IN + 1];
  void* params[TPURT_FGEN_MAX_OPS];
} tpurt_fgen_args_t;

/* Elements [begin, end) of the chain. stream: the stored outputs are written
 * with non-temporal stores; then end - begin is a multiple of
 * TPURT_FGEN_BLOCK and every stored output is 64-byte aligned at begin. */
typedef void (*tpurt_fgen_fn_t)(const tpurt_fgen_args_t* args, int64_t begin, int64_t end, int stream);
#define TPURT_FGEN_BLOCK 256

#ifndef TPURT_FGEN_GENERATED
#include "tpurt/dtype.h"

/* One chain as the generator sees it. An input is a member's value (src >= 0)
 * or memory: contiguous (scalar = false) or one element for all (scalar). */
typedef struct tpurt_fgen_member_t {
  const void* loop;   /* the kernel's loop function: names expr + types within this process */
  const char* expr;   /* the loop's expression over a, b, c, T, p (fully macro-expanded) */
  const char* gen;    /* its loop generator: "EW_L1", "EW_L2", "EW_L3", "EW_L1B", "EW_L2B" */
  tpurt_dtype_t type; /* T: float32 or float64 */
  tpurt_dtype_t out;  /* TO: T or bool */
  int num_inputs;
  int src[TPURT_FGEN_MAX_IN]; /* member index, or -1: memory */
  bool scalar[TPURT_FGEN_MAX_IN];
  bool store;
} tpurt_fgen_member_t;

typedef struct tpurt_fgen_chain_t {
  int n;
  tpurt_fgen_member_t m[TPURT_FGEN_MAX_OPS];
} tpurt_fgen_chain_t;

/* The built kernel for this chain, or NULL (not built yet, building, not
 * buildable, or code generation off). A chain seen for the first time is
 * looked up on disk; one seen a second time is queued for a background build. */
tpurt_fgen_fn_t tpurt_fgen_lookup(const tpurt_fgen_chain_t* chain);

/* Counters (tpurt_fuse_stats_t). */
void tpurt_fgen_stats(uint64_t* built, uint64_t* loaded, uint64_t* failed, uint64_t* runs);
void tpurt_fgen_stats_reset(void);
void tpurt_fgen_note_run(void);
/* Blocks until no build is queued or running. */
void tpurt_fgen_wait(void);
/* Forgets the in-memory table (built kernels stay loaded; the disk stays). */
void tpurt_fgen_clear(void);
/* Code generation on (TORCH_TPU_FUSE_CODEGEN=0 turns it off; so does a
 * missing compiler or runtime source tree, found at the first build). */
bool tpurt_fgen_enabled(void);
void tpurt_fgen_set_enabled(bool on);
#endif

#endif /* TPURT_EXEC_FUSE_CODEGEN_H_ */
