/* The elementwise engine (a small TensorIterator): broadcasting, dimension
 * reordering and coalescing, dtype casts in chunks, thread splitting, and the
 * inner-loop contract every elementwise kernel (and the reductions, if they
 * like) is written against. Also PyTorch's result_type rules and the strided
 * dtype converters that copy_ is built on. */
#ifndef TPURT_OPS_ELEMENTWISE_H_
#define TPURT_OPS_ELEMENTWISE_H_

#include "tpurt/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPURT_EW_MAX_OPERANDS 8

/* The inner loop: n elements; data[k] and strides[k] (bytes, may be 0) for
 * operand k, outputs first. Every operand is already in the loop dtype the
 * caller asked for. Loops check for the contiguous case themselves (strides
 * equal to the element size) and vectorize it. */
typedef void (*tpurt_ew_loop_fn_t)(char** data, const int64_t* strides, int64_t n, void* user);

/* Scalar (double / int64) used by reference kernels: `d` for floating loop
 * dtypes, `i` for integer and bool ones. */
typedef struct tpurt_ew_value_t {
  double d;
  int64_t i;
} tpurt_ew_value_t;
/* A reference computation of one element: in[k] are the inputs in their loop
 * dtypes, out[k] the outputs (write `d` when that output's loop dtype is
 * floating, else `i`). */
typedef void (*tpurt_ew_ref_fn_t)(tpurt_ew_value_t* out, const tpurt_ew_value_t* in, void* user);

/* One elementwise expression, as the op's float loops compute it (ew_ops.h
 * writes each op once as a C expression over inputs a, b, c, the loop type T
 * and the op's scalar parameters p). The code generator pastes `text` into a
 * fused kernel, so a generated kernel computes exactly what the library's
 * loops compute. `name` is the op descriptor's own, unique and the same in
 * every process ("add", "gelu_tanh"): it is how the compiler asks for one. */
typedef struct tpurt_ew_expr_t {
  const char* name;
  const char* text; /* fully macro-expanded */
  const char* gen;  /* the loop generator: "EW_L1", "EW_L2", "EW_L3", "EW_L1B", "EW_L2B" */
  /* The float32 form of `text` on ew_simd.h's vectors (inputs va, vb), which gives the same
   * bits; NULL where the op has none. */
  const char* vtext;
} tpurt_ew_expr_t;

/* The expression named `name`, or NULL. Thread-safe. */
const tpurt_ew_expr_t* tpurt_ew_expr_find(const char* name);
size_t tpurt_ew_expr_count(void);
const tpurt_ew_expr_t* tpurt_ew_expr_at(size_t index);

typedef struct tpurt_ew_config_t {
  const char* op;   /* op name for error messages */
  int num_outputs;
  int num_inputs;
  /* outputs first, then inputs; inputs are broadcast against outputs[0]'s shape */
  const tpurt_tensor_t* tensors[TPURT_EW_MAX_OPERANDS];
  /* the dtype the loop sees each operand in; the engine casts the rest.
   * (float16/bfloat16 loop dtypes are allowed but slow; use float32.) */
  tpurt_dtype_t loop_dtypes[TPURT_EW_MAX_OPERANDS];
  tpurt_ew_loop_fn_t loop;
  void* user;
  /* Smallest number of elements worth a thread: about 32K for cheap ops,
   * less for expensive ones (0 = default). */
  int64_t grain;
  /* The loop's expression, when a float32/float64 loop is generated from one
   * (ew_ops.h); NULL for loops written by hand. */
  const tpurt_ew_expr_t* expr;
  /* Optional: `loop` on bfloat16 operands as they are stored (float32 loop
   * dtypes everywhere, the bits `loop` gives with each operand cast through
   * float32), run instead of the casts for contiguous runs whose operands are
   * all bfloat16. NULL: none. */
  tpurt_ew_loop_fn_t loop_bf16;
} tpurt_ew_config_t;

/* Runs `cfg.loop` over every output element. Returns INVALID_ARGUMENT when an
 * input does not broadcast to the output shape or outputs disagree in shape. */
TPURT_API tpurt_status_t tpurt_ew_run(tpurt_kernel_ctx_t* ctx, const tpurt_ew_config_t* cfg);

/* An interceptor of tpurt_ew_run on the calling thread (NULL: none). While
 * one is installed, tpurt_ew_run hands it the kernel's configuration instead
 * of running the loop, with the kernel's frame still live (promotion,
 * scalars and loop are the kernel's own). DeferAndFuse installs one to run a
 * chain of elementwise kernels as one pass (exec/defer). */
typedef struct tpurt_ew_interceptor_t {
  tpurt_status_t (*run)(void* user, tpurt_kernel_ctx_t* ctx, const tpurt_ew_config_t* cfg);
  void* user;
} tpurt_ew_interceptor_t;
extern _Thread_local const tpurt_ew_interceptor_t* tpurt_ew_tls_interceptor;

/* Streaming stores (ew_ops.h): a loop on a thread with tpurt_ew_stream_active
 * set writes its contiguous output with non-temporal stores; worth it for
 * outputs of at least tpurt_ew_stream_min_bytes() (bigger than the last-level
 * cache). The engine sets it per range and fences after. */
extern _Thread_local bool tpurt_ew_stream_active;
int64_t tpurt_ew_stream_min_bytes(void);

/* The plain reference of tpurt_ew_run: one element at a time, no threads, no
 * coalescing, values through double/int64 (rounded to each loop dtype). */
TPURT_API tpurt_status_t tpurt_ew_run_reference(const tpurt_ew_config_t* cfg, tpurt_ew_ref_fn_t fn,
                                                void* user);

/* ---- dtype helpers ---- */

/* The dtype loops compute in for a compute dtype: float16/bfloat16 -> float32
 * (rounded once on store), uint16/32/64 -> int64, the rest unchanged. */
static inline tpurt_dtype_t tpurt_ew_loop_dtype(tpurt_dtype_t compute) {
  if (compute == TPURT_DTYPE_UINT16 || compute == TPURT_DTYPE_UINT32 || compute == TPURT_DTYPE_UINT64)
    return TPURT_DTYPE_INT64; /* zero-extended on load, truncated on store: the same low bits */
  return (compute == TPURT_DTYPE_FLOAT16 || compute == TPURT_DTYPE_BFLOAT16) ? TPURT_DTYPE_FLOAT32
                                                                             : compute;
}

/* Converts n elements between any two dtypes with byte strides (0 allowed for
 * the source). PyTorch's cast rules: float -> bool is (v != 0) (NaN is true),
 * float -> uint8 goes through int64, narrowing floats round to nearest even. */
TPURT_API void tpurt_ew_convert_strided(tpurt_dtype_t dst_dtype, void* dst, int64_t dst_stride,
                                        tpurt_dtype_t src_dtype, const void* src, int64_t src_stride,
                                        int64_t n);

/* PyTorch's result_type over operands: tensors with ndim > 0 outrank 0-d
 * tensors, which outrank Python scalars, but a lower class can raise the
 * category (bool < integer < floating): int32 tensor + 2.5 -> float32,
 * bool tensor + 3 -> int64, float16 tensor + 0-d float64 tensor -> float16.
 * An operand is a tensor (ndim decides its class) or a scalar arg
 * (TPURT_ARG_INT -> int64, _DOUBLE -> float32 default, _BOOL -> bool).
 * Args of other kinds (NONE) are skipped. */
TPURT_API tpurt_dtype_t tpurt_ew_result_type(const tpurt_arg_t* const* operands, int n);

#ifdef __cplusplus
}
#endif
#endif /* TPURT_OPS_ELEMENTWISE_H_ */
