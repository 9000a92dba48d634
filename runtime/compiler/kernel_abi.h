/* The plugin boundary of generated kernels: what a library the runtime builds
 * at run time (and may load years later, from a disk cache another build of
 * the runtime filled) exports, and what the runtime passes it. This header is
 * the only ABI between the two; it is included by the runtime and by every
 * generated kernel (compiler/gen_prelude.h), so it includes nothing of the
 * runtime.
 *
 * THE RULES (as PJRT's C API keeps them):
 *  - Every library exports `const uint32_t tpurt_kernel_abi_version`, equal to
 *    the TPURT_KERNEL_ABI_VERSION it was generated for. The loader reads it
 *    before anything else and refuses (discards, rebuilds) a library of
 *    another version.
 *  - tpurt_gen_args_t begins with `size_t struct_size`, which the caller sets
 *    to sizeof(tpurt_gen_args_t) as it knows it. Fields are only ever
 *    appended; none is removed, reordered, resized or given a new meaning.
 *    A kernel reads a field only after checking that struct_size covers it
 *    (TPURT_GEN_ARGS_HAS); when a field it needs is missing it returns
 *    TPURT_GEN_ERR_ARGS without reading or writing anything. The loader calls
 *    each kernel once on an empty range to check this before using it.
 *  - Anything that cannot be an append (a field's type or an array's bound,
 *    the function's signature, a symbol's name or meaning) bumps
 *    TPURT_KERNEL_ABI_VERSION.
 * Nothing else in compiler/ makes such a promise: the chain description, the
 * source generator and the cache are internal and change freely. */
#ifndef TPURT_COMPILER_KERNEL_ABI_H_
#define TPURT_COMPILER_KERNEL_ABI_H_

#include <stddef.h>
#include <stdint.h>

#define TPURT_KERNEL_ABI_VERSION 1u

/* The symbols a generated library exports. */
#define TPURT_KERNEL_ABI_SYMBOL "tpurt_kernel_abi_version" /* const uint32_t */
#define TPURT_KERNEL_FN_SYMBOL "tpurt_fused_kernel"        /* tpurt_gen_fn_t */

#define TPURT_GEN_MAX_OPS 16 /* members of a fused chain */
#define TPURT_GEN_MAX_IN 3   /* inputs of one member */

/* What a fused-chain kernel gets per call (version 1): for member k,
 * mem[k][0] is its output's data (when stored) and mem[k][1..3] its memory
 * inputs (at element 0 of the run); params[k] is its ew_params_t (the
 * elementwise family's scalar parameters, read as `p` by the expressions). */
typedef struct tpurt_gen_args_t {
  size_t struct_size;
  char* mem[TPURT_GEN_MAX_OPS][TPURT_GEN_MAX_IN + 1];
  void* params[TPURT_GEN_MAX_OPS];
} tpurt_gen_args_t;

/* Does an args struct of `size` bytes carry `field`? */
#define TPURT_GEN_ARGS_HAS(size, field) \
  ((size) >= offsetof(tpurt_gen_args_t, field) + sizeof(((tpurt_gen_args_t*)0)->field))

/* Elements [begin, end) of the chain. stream != 0: the stored outputs are
 * written with non-temporal stores; then end - begin is a multiple of
 * TPURT_GEN_BLOCK and every stored output is 64-byte aligned at begin.
 * Returns 0, or TPURT_GEN_ERR_ARGS (nothing read or written). */
typedef int (*tpurt_gen_fn_t)(const tpurt_gen_args_t* args, int64_t begin, int64_t end, int stream);
#define TPURT_GEN_BLOCK 256
#define TPURT_GEN_ERR_ARGS 1

#endif /* TPURT_COMPILER_KERNEL_ABI_H_ */
