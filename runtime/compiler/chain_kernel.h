/* The generated kernel of a fused elementwise chain: what DeferAndFuse asks
 * for each time it runs a chain (exec/defer/fuse_run.c). A table keyed by the chain's
 * description (compiler/codegen.h; its content, not addresses) remembers each
 * chain's kernel, so a chain that has one pays a hash and a compare. A chain
 * seen for the first time has its source generated and the kernel cache asked
 * (compiler/cache.h: loaded here already, or on disk from another process);
 * one seen a second time is queued for a background build. Until then the
 * caller runs the chain its own way, so a new kernel never stalls it.
 * Internal. */
#ifndef TPURT_COMPILER_CHAIN_KERNEL_H_
#define TPURT_COMPILER_CHAIN_KERNEL_H_

#include <stdbool.h>
#include <stdint.h>

#include "compiler/codegen.h"
#include "compiler/kernel_abi.h"

/* The chain's kernel, or NULL (not built yet, building, not buildable, or
 * code generation off). Thread-safe. */
tpurt_gen_fn_t tpurt_chain_kernel_find(const tpurt_codegen_chain_t* chain);

/* Blocks until no kernel is being built. */
void tpurt_chain_kernel_wait(void);
/* Forgets every chain's kernel and the kernel cache's memory table (the
 * libraries stay loaded, the disk stays). Not while chains are being run. */
void tpurt_chain_kernel_clear(void);

/* Code generation on (TORCH_TPU_FUSE_CODEGEN=0 turns it off; so does a
 * missing compiler or runtime source tree, found at the first build, until
 * it is turned on again). */
bool tpurt_chain_kernel_enabled(void);
void tpurt_chain_kernel_set_enabled(bool on);

typedef struct tpurt_chain_kernel_stats_t {
  uint64_t lookups;        /* chains that asked for their kernel */
  uint64_t memory_hits;    /* ... answered by a kernel already loaded in this process */
  uint64_t disk_loads;     /* kernels loaded from the disk cache (verified) instead of built */
  uint64_t shared_loads;   /* ... from the shared cache for many hosts */
  uint64_t shared_stores;  /* kernels built here and published to the shared cache */
  uint64_t builds;         /* kernels compiled */
  uint64_t build_failures; /* builds that gave no kernel (the chains stay on their generic path) */
  uint64_t disk_rejects;   /* disk entries refused and discarded (content, owner, mode, symlink, ABI) */
} tpurt_chain_kernel_stats_t;
void tpurt_chain_kernel_stats(tpurt_chain_kernel_stats_t* out_stats);
void tpurt_chain_kernel_stats_reset(void);

#endif /* TPURT_COMPILER_CHAIN_KERNEL_H_ */
