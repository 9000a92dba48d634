/* tpurt kernel ABI: how one op call reaches a C kernel, the table each kernel
 * family registers, and the services a kernel may use while it runs.
 *
 * The PyTorch layer turns every ATen call into a tpurt_op_call_t: the schema's
 * arguments in order (out= arguments removed) and the output tensors, already
 * allocated with the shapes/strides/dtypes PyTorch's meta functions computed.
 * A kernel never allocates its outputs and never resizes them. For an in-place
 * op (add_) outputs[0] aliases args[0]; for an out= op, outputs are the out=
 * tensors. Kernels whose outputs may alias inputs without harm carry
 * TPURT_OP_ALIAS_SAFE; for the others the caller gives fresh outputs and
 * copies back.
 *
 * Lookup: the PyTorch layer asks for "name.overload" first, then "name", with
 * the trailing "_" of an in-place name removed ("add_.Tensor" -> "add.Tensor"
 * -> "add"; "add.out" -> "add"). A kernel registered under a base name handles
 * all overloads with the same meaning and tells them apart by
 * call->overload, call->num_args and the argument kinds.
 */
#ifndef TPURT_KERNEL_H_
#define TPURT_KERNEL_H_

#include "tpurt/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpurt_arg_kind_e {
  TPURT_ARG_NONE = 0,     /* an optional argument that was None */
  TPURT_ARG_TENSOR,       /* v.tensor */
  TPURT_ARG_INT,          /* v.i  (int, SymInt, also Scalar holding an int) */
  TPURT_ARG_DOUBLE,       /* v.d  (float, Scalar holding a float) */
  TPURT_ARG_BOOL,         /* v.b  (bool, Scalar holding a bool) */
  TPURT_ARG_DTYPE,        /* v.i  holds a tpurt_dtype_t (ScalarType arguments) */
  TPURT_ARG_INT_LIST,     /* v.ints[count] */
  TPURT_ARG_DOUBLE_LIST,  /* v.doubles[count] */
  TPURT_ARG_BOOL_LIST,    /* v.bools[count] */
  TPURT_ARG_TENSOR_LIST,  /* v.tensors[count]; an entry is NULL for None (Tensor?[]) */
  TPURT_ARG_STRING,       /* v.s (NUL-terminated) */
  TPURT_ARG_RNG,          /* v.rng: Philox key and counter offset reserved for this call */
  TPURT_ARG_OTHER,        /* layout/device/memory_format/...: v.i holds the raw enum value */
} tpurt_arg_kind_t;

typedef struct tpurt_rng_t {
  uint64_t seed;    /* Philox key */
  uint64_t offset;  /* first counter value reserved for this call */
} tpurt_rng_t;

/* The Philox counter values one random call reserves from its generator, for each of its
 * TPURT_ARG_RNG arguments: its largest tensor's element count (inputs and outputs) rounded up to
 * a multiple of 4, plus 4. The one definition of the rule: the C++ layer reserves by it, and a
 * program that takes sizes at launch computes its random offsets by it (exec/defer/program_sizes.c). */
static inline uint64_t tpurt_rng_reservation(int64_t max_numel) {
  return ((uint64_t)(max_numel > 0 ? max_numel : 0) + 3) / 4 * 4 + 4;
}

typedef struct tpurt_arg_t {
  tpurt_arg_kind_t kind;
  int32_t count; /* element count for list kinds */
  union {
    int64_t i;
    double d;
    bool b;
    const tpurt_tensor_t* tensor;
    const int64_t* ints;
    const double* doubles;
    const bool* bools;
    const tpurt_tensor_t* const* tensors;
    const char* s;
    tpurt_rng_t rng;
  } v;
} tpurt_arg_t;

typedef struct tpurt_op_call_t {
  const char* name;      /* "add", the base name without the in-place underscore */
  const char* overload;  /* "Tensor", "out", "" */
  int32_t num_args;
  const tpurt_arg_t* args;
  int32_t num_outputs;
  const tpurt_tensor_t* outputs;
} tpurt_op_call_t;

typedef struct tpurt_kernel_ctx_t tpurt_kernel_ctx_t;
typedef tpurt_status_t (*tpurt_kernel_fn_t)(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);

enum {
  TPURT_OP_ALIAS_SAFE = 1u << 0,  /* outputs may alias inputs element-for-element */
  /* The kernel draws random numbers. Its Generator? argument (None included)
   * arrives as TPURT_ARG_RNG; a schema without one (native_dropout) gets a
   * TPURT_ARG_RNG appended after its last argument. The PyTorch layer reserves
   * ceil(max numel of the call's tensors / 4) * 4 + 4 counter values for it.
   * Random streams must depend only on (seed, offset, element index), never
   * on the thread count. */
  TPURT_OP_RANDOM = 1u << 1,
  /* The kernel accepts complex64/complex128 operands. Kernels without it
   * never see a complex tensor: a call with a complex input or output goes to
   * the kernel registered as "complex::<name>" (same lookup order:
   * "complex::add.Tensor", then "complex::add"), or to the op's own kernel when
   * that one carries this flag (ops born complex: _fft_r2c, polar, ...); with
   * neither, the op raises NotImplementedError for the dtype. The real-dtype
   * kernels, and the fusion engine that knows them, stay complex-free. */
  TPURT_OP_COMPLEX = 1u << 2,
  /* The kernel reads its one tensor input only through the reduction engine
   * (ops/reduce: tpurt_reduce_run), so DeferAndFuse may end a chain in it and
   * feed it the chain's value tile by tile (compiler/fuse_plan.c rule 7). */
  TPURT_OP_REDUCE_ENGINE = 1u << 3,
  /* The fusion rule of an elementwise kernel: it writes its one output
   * element i from input elements i only, through the elementwise engine
   * (ops/elementwise: tpurt_ew_run), exactly once; so DeferAndFuse may run it
   * inside a chain (compiler/fuse_plan.c rule 1). */
  TPURT_OP_ELEMENTWISE = 1u << 4,
  /* In its in-place form (outputs[0] is args[0]) the kernel writes self
   * without reading it: fill_, zero_, copy_, the random fills. What self held
   * does not flow into the result (hal/poison.h: a poisoned self is simply
   * overwritten). */
  TPURT_OP_OVERWRITES_SELF = 1u << 5,
};

/* Tensor layouts a kernel reads (bit masks). Every kernel today reads strided
 * tensors only; a sparse or other layout is refused before anything is queued. */
enum { TPURT_LAYOUT_STRIDED = 1u << 0 };

typedef struct tpurt_op_def_t {
  const char* name;             /* "add" or "sum.dim_IntList" */
  tpurt_kernel_fn_t fn;         /* the optimized kernel */
  tpurt_kernel_fn_t reference;  /* a plain reference kernel; tests compare the two */
  uint32_t flags;
  /* The dtypes the kernel computes in, checked before a call is queued (ask
   * before you fail): the call's first tensor argument (for an op without
   * one, a factory, its first output) must have one of them, or the PyTorch
   * layer raises NotImplementedError at the call (runs the op on the CPU
   * under TORCH_TPU_CPU_FALLBACK=1). Finer rules (a second operand's dtype)
   * stay with the kernel, which reports them at the next sync. */
  tpurt_dtype_mask_t dtypes;
  uint32_t layouts;             /* TPURT_LAYOUT_* bits */
} tpurt_op_def_t;

/* Each kernel family exports one table, terminated by an entry whose name is
 * NULL; ops/registry.c lists the families. */
#define TPURT_OP_TABLE_END {NULL, NULL, NULL, 0, 0, 0}

/* Exact-name lookup ("add", "sum.dim_IntList"); NULL if absent. Thread-safe. */
TPURT_API const tpurt_op_def_t* tpurt_op_lookup(const char* name);
TPURT_API size_t tpurt_op_count(void);
TPURT_API const tpurt_op_def_t* tpurt_op_at(size_t index);

/* The one rule that maps an operator to its kernel (the PyTorch fallback,
 * the decompositions, the compiler and the serving engine all call it):
 * `name` is the schema name ("aten::add_", "add"), `overload` its overload
 * ("Tensor", "out" or ""). The namespace goes and an in-place name loses its
 * one trailing "_" (dunders keep theirs: "__ilshift__"); then "base.overload"
 * is looked up, then "base". With TPURT_RESOLVE_COMPLEX it finds the kernel
 * for a call with a complex operand instead: "complex::base.overload",
 * "complex::base", else the real kernel when it carries TPURT_OP_COMPLEX.
 * NULL when there is none. */
enum { TPURT_RESOLVE_COMPLEX = 1u << 0 };
TPURT_API const tpurt_op_def_t* tpurt_op_resolve(const char* name, const char* overload, uint32_t flags);
/* The base name ("aten::add_" -> "add") into buf (cap bytes); buf. */
TPURT_API const char* tpurt_op_base_name(const char* name, char* buf, size_t cap);

/* Whether the kernel computes in `dtype` / reads `layout` (see dtypes above). */
static inline bool tpurt_op_supports_dtype(const tpurt_op_def_t* op, tpurt_dtype_t dtype) {
  return dtype >= 0 && dtype < TPURT_DTYPE_COUNT && ((op->dtypes >> dtype) & 1u);
}
static inline bool tpurt_op_supports_layout(const tpurt_op_def_t* op, uint32_t layout) {
  return (op->layouts & layout) != 0;
}

/* ---- services for kernels ---- */

/* fn(user, begin, end, tid) covers [0, n) in chunks of at least `grain`
 * elements across the chip's compute threads; tid is in
 * [0, tpurt_kernel_num_threads(ctx)). Returns when every chunk is done. Runs
 * inline when n <= grain or only one thread is available. */
typedef void (*tpurt_range_fn_t)(void* user, int64_t begin, int64_t end, int tid);
TPURT_API void tpurt_parallel_for(tpurt_kernel_ctx_t* ctx, int64_t n, int64_t grain,
                                  tpurt_range_fn_t fn, void* user);
TPURT_API int tpurt_kernel_num_threads(const tpurt_kernel_ctx_t* ctx);
/* The grain a kernel splits its work at, for a kernel that decides itself
 * whether to split: `grain` as given, or smaller inside a compiled program
 * (whose host thread is idle, so the chip's cores are free). tpurt_parallel_for
 * applies it to the grain it is given. */
TPURT_API int64_t tpurt_kernel_grain(const tpurt_kernel_ctx_t* ctx, int64_t grain);

/* Host scratch memory, 64-byte aligned, valid until the kernel returns.
 * NULL when it cannot be had (return RESOURCE_EXHAUSTED then). */
TPURT_API void* tpurt_kernel_scratch(tpurt_kernel_ctx_t* ctx, size_t bytes);

/* True in Debug mode: kernels bounds-check every index they read and return
 * OUT_OF_RANGE naming the bad index. (Kernels check indices always when the
 * check is cheap; Debug adds the expensive ones.) */
TPURT_API bool tpurt_kernel_debug(const tpurt_kernel_ctx_t* ctx);

/* Runs one kernel synchronously on the calling thread plus the default
 * device's compute threads (tests, and the synchronous Debug path). */
TPURT_API tpurt_status_t tpurt_kernel_run(tpurt_kernel_fn_t fn, const tpurt_op_call_t* call);

#ifdef __cplusplus
}
#endif
#endif /* TPURT_KERNEL_H_ */
