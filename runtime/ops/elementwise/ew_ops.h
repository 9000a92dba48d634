/* Internal to the elementwise family: the op descriptor, the generic driver
 * that turns an op call into an engine run (type promotion, dtype checks,
 * scalar params), and the macros that generate each op's typed inner loops
 * and its reference from one expression. */
#ifndef TPURT_OPS_EW_OPS_H_
#define TPURT_OPS_EW_OPS_H_

#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "ops/args.h"
#include "ops/elementwise/elementwise.h"

/* Scalar parameters an op's expressions read as `p.d[k]` / `p.i[k]`. */
typedef struct ew_params_t {
  double d[6];
  int64_t i[6];
  int bits;              /* bit width of the compute dtype (shifts) */
  tpurt_dtype_t compute; /* the compute dtype (float16 stays float16 here) */
  bool loop_float;       /* the loop computes in a floating type */
  bool out_float;        /* output 0's loop dtype is floating (references) */
  int err;               /* set by loops: 1 = integer division by zero */
} ew_params_t;

enum {
  EW_P_COMMON = 0, /* result_type of the inputs */
  EW_P_FLOAT,      /* result_type, integers/bool -> float32 (true division, sqrt, ...) */
  EW_P_FIRST,      /* dtype of the first input */
  EW_P_BOOL,       /* every input read as bool (logical ops) */
};
enum { EW_O_COMPUTE = 0, EW_O_BOOL };

#define EW_M(dt) (1u << TPURT_DTYPE_##dt)
#define EW_FLOATS (EW_M(FLOAT16) | EW_M(BFLOAT16) | EW_M(FLOAT32) | EW_M(FLOAT64))
#define EW_INTS (EW_M(UINT8) | EW_M(INT8) | EW_M(INT16) | EW_M(INT32) | EW_M(INT64))
#define EW_NUM (EW_FLOATS | EW_INTS)
#define EW_ALL (EW_NUM | EW_M(BOOL))
#define EW_INTB (EW_INTS | EW_M(BOOL))
/* uint16/32/64: only the ops CPU has for them name these (their loops are int64's) */
#define EW_UWIDE (EW_M(UINT16) | EW_M(UINT32) | EW_M(UINT64))

typedef tpurt_status_t (*ew_setup_fn_t)(const tpurt_op_call_t* call, ew_params_t* p);

typedef struct ew_op_t {
  const char* name;
  int8_t nin, nout;
  int8_t in_arg[4];   /* arg index of each input (a Tensor or a Scalar arg) */
  uint8_t promote;    /* EW_P_* */
  uint8_t out;        /* EW_O_*: loop dtype of the outputs */
  uint16_t allow;     /* compute dtypes supported */
  ew_setup_fn_t setup; /* may be NULL */
  const tpurt_ew_loop_fn_t* loops; /* by loop dtype */
  tpurt_ew_ref_fn_t ref;
  int64_t grain;
  /* The float loops' expression (elementwise.h): what the code generator
   * compiles into a fused kernel. NULL for ops whose loops are written by hand. */
  const tpurt_ew_expr_t* expr;
  /* tpurt_ew_config_t.loop_bf16 for bfloat16 compute; NULL where none. */
  tpurt_ew_loop_fn_t loop_bf16;
} ew_op_t;

/* Type promotion + checks + engine (or reference) run for a described op. */
tpurt_status_t tpurt_ew_op_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const ew_op_t* op,
                               bool reference);
/* Same with explicit inputs (already chosen tensors) and params. */
tpurt_status_t tpurt_ew_op_run_inputs(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const ew_op_t* op,
                                      const tpurt_arg_t* const* inputs, ew_params_t* params, bool reference);

/* Helpers for setup functions: an op's scalar params from its arguments (ops/args.h). */
/* p->{d,i}[k] = the Scalar a (0 when it is not a number) */
static inline void ew_param_set(ew_params_t* p, int k, const tpurt_arg_t* a) {
  p->d[k] = tpurt_arg_value_double(a, 0.0);
  p->i[k] = tpurt_arg_value_int(a, 0);
}
/* p->{d,i}[k] = arg i if present, else dflt */
static inline void ew_param_arg(ew_params_t* p, int k, const tpurt_op_call_t* call, int i, double dflt) {
  if (tpurt_arg_present(call, i)) ew_param_set(p, k, tpurt_arg_at(call, i));
  else { p->d[k] = dflt; p->i[k] = (int64_t)dflt; }
}

/* ---- streaming stores ----
 * Set by the engine (elementwise.c) on the thread running a range whose
 * output is contiguous and larger than the last-level cache; read by the
 * contiguous paths below, which then store whole 64-byte blocks with
 * non-temporal stores: no read-for-ownership of lines that would be evicted
 * unread anyway. The engine fences after the range. Values are unchanged. */
extern _Thread_local bool tpurt_ew_stream_active;
#define EW_STREAM_MIN_N 256 /* elements per loop call worth the aligned-block split */
#if defined(__AVX__)
#define EW_STREAM_ON(n) ((n) >= EW_STREAM_MIN_N && tpurt_ew_stream_active)
/* Elements before the first 64-byte boundary of o (n when o is not element-aligned). */
static inline int64_t ew_stream_head(const void* o, size_t es, int64_t n) {
  size_t h = (64 - ((uintptr_t)o & 63)) & 63;
  if (h % es) return n;
  return (int64_t)(h / es) < n ? (int64_t)(h / es) : n;
}
/* One whole line per store where the ISA has one: write-combining flushes a
 * line early when its halves are written apart (the compiler may interleave
 * the halves of many lines), and a partial line costs a read. */
static inline void ew_stream_store64(void* dst, const void* src) {
#if defined(__AVX512F__)
  _mm512_stream_ps((float*)dst, _mm512_load_ps((const float*)src));
#else
  _mm256_stream_ps((float*)dst, _mm256_load_ps((const float*)src));
  _mm256_stream_ps((float*)dst + 8, _mm256_load_ps((const float*)src + 8));
#endif
}
/* The contiguous loop over [0, n_) with output o_ of type TO, streamed; the
 * variadic part is the statement(s) computing element i_ into `r_`. */
/* Blocks of EW_STREAM_BLOCK bytes are computed into an aligned buffer by a
 * loop the compiler vectorizes as it does the plain one (a 64-byte block is
 * unrolled into scalar code instead), then streamed out 64 bytes at a time. */
#define EW_STREAM_BLOCK 1024
#define EW_CONTIG_STREAM(TO, ...)                                                                 \
  if (EW_STREAM_ON(n_)) {                                                                         \
    const int64_t h_ = ew_stream_head(o_, sizeof(TO), n_);                                        \
    const int64_t B_ = EW_STREAM_BLOCK / (int64_t)sizeof(TO);                                     \
    int64_t j_ = 0;                                                                               \
    for (; j_ < h_; ++j_) { const int64_t i_ = j_; TO r_; __VA_ARGS__; o_[i_] = r_; }             \
    _Alignas(64) TO t_[EW_STREAM_BLOCK / sizeof(TO)];                                             \
    for (; j_ + B_ <= n_; j_ += B_) {                                                             \
      _Pragma("GCC ivdep") for (int64_t k_ = 0; k_ < B_; ++k_) {                                  \
        const int64_t i_ = j_ + k_; TO r_; __VA_ARGS__; t_[k_] = r_;                              \
      }                                                                                           \
      for (int q_ = 0; q_ < EW_STREAM_BLOCK; q_ += 64)                                            \
        ew_stream_store64((char*)(o_ + j_) + q_, (const char*)t_ + q_);                           \
    }                                                                                             \
    for (; j_ < n_; ++j_) { const int64_t i_ = j_; TO r_; __VA_ARGS__; o_[i_] = r_; }             \
    return;                                                                                       \
  }
#else
#define EW_CONTIG_STREAM(TO, ...)
#endif

/* ---- loop generators: NAME, T (loop type), EXPR in a/b/c, T, p ---- */

#define EW_LOOP_PRE                                  \
  const ew_params_t p = *(const ew_params_t*)u_;     \
  int* err_ = &((ew_params_t*)u_)->err;              \
  (void)p; (void)err_;

#define EW_L1_(NAME, T_, TO, EXPR)                                                               \
  static void NAME(char** d_, const int64_t* s_, int64_t n_, void* u_) {                       \
    EW_LOOP_PRE typedef T_ T;                                                                    \
    if (s_[0] == (int64_t)sizeof(TO) && s_[1] == (int64_t)sizeof(T)) {                           \
      TO* o_ = (TO*)d_[0];                                                                       \
      const T* x_ = (const T*)d_[1];                                                             \
      EW_CONTIG_STREAM(TO, { const T a = x_[i_]; (void)a; r_ = (TO)(EXPR); })                    \
      _Pragma("GCC ivdep") for (int64_t i_ = 0; i_ < n_; ++i_) {                                \
        const T a = x_[i_];                                                                      \
        (void)a;                                                                                 \
        o_[i_] = (TO)(EXPR);                                                                     \
      }                                                                                          \
    } else {                                                                                     \
      for (int64_t i_ = 0; i_ < n_; ++i_) {                                                      \
        const T a = *(const T*)(d_[1] + i_ * s_[1]);                                             \
        (void)a;                                                                                 \
        *(TO*)(d_[0] + i_ * s_[0]) = (TO)(EXPR);                                                 \
      }                                                                                          \
    }                                                                                            \
  }
#define EW_L2_(NAME, T_, TO, EXPR)                                                               \
  static void NAME(char** d_, const int64_t* s_, int64_t n_, void* u_) {                       \
    EW_LOOP_PRE typedef T_ T;                                                                    \
    TO* o_ = (TO*)d_[0];                                                                         \
    const T* x_ = (const T*)d_[1];                                                               \
    const T* y_ = (const T*)d_[2];                                                               \
    const int64_t so_ = (int64_t)sizeof(TO), st_ = (int64_t)sizeof(T);                           \
    if (s_[0] == so_ && s_[1] == st_ && s_[2] == st_) {                                          \
      EW_CONTIG_STREAM(TO, { const T a = x_[i_], b = y_[i_]; r_ = (TO)(EXPR); })                 \
      _Pragma("GCC ivdep") for (int64_t i_ = 0; i_ < n_; ++i_) {                                \
        const T a = x_[i_], b = y_[i_];                                                          \
        o_[i_] = (TO)(EXPR);                                                                     \
      }                                                                                          \
    } else if (s_[0] == so_ && s_[1] == st_ && s_[2] == 0) {                                     \
      const T b = *y_;                                                                           \
      _Pragma("GCC ivdep") for (int64_t i_ = 0; i_ < n_; ++i_) {                                \
        const T a = x_[i_];                                                                      \
        o_[i_] = (TO)(EXPR);                                                                     \
      }                                                                                          \
    } else if (s_[0] == so_ && s_[1] == 0 && s_[2] == st_) {                                     \
      const T a = *x_;                                                                           \
      _Pragma("GCC ivdep") for (int64_t i_ = 0; i_ < n_; ++i_) {                                \
        const T b = y_[i_];                                                                      \
        o_[i_] = (TO)(EXPR);                                                                     \
      }                                                                                          \
    } else {                                                                                     \
      for (int64_t i_ = 0; i_ < n_; ++i_) {                                                      \
        const T a = *(const T*)(d_[1] + i_ * s_[1]);                                             \
        const T b = *(const T*)(d_[2] + i_ * s_[2]);                                             \
        *(TO*)(d_[0] + i_ * s_[0]) = (TO)(EXPR);                                                 \
      }                                                                                          \
    }                                                                                            \
  }
#define EW_L3_(NAME, T_, TO, EXPR)                                                               \
  static void NAME(char** d_, const int64_t* s_, int64_t n_, void* u_) {                       \
    EW_LOOP_PRE typedef T_ T;                                                                    \
    const int64_t so_ = (int64_t)sizeof(TO), st_ = (int64_t)sizeof(T);                           \
    if (s_[0] == so_ && s_[1] == st_ && s_[2] == st_ && s_[3] == st_) {                          \
      TO* o_ = (TO*)d_[0];                                                                       \
      const T *x_ = (const T*)d_[1], *y_ = (const T*)d_[2], *z_ = (const T*)d_[3];               \
      EW_CONTIG_STREAM(TO, { const T a = x_[i_], b = y_[i_], c = z_[i_]; r_ = (TO)(EXPR); })     \
      _Pragma("GCC ivdep") for (int64_t i_ = 0; i_ < n_; ++i_) {                                \
        const T a = x_[i_], b = y_[i_], c = z_[i_];                                              \
        o_[i_] = (TO)(EXPR);                                                                     \
      }                                                                                          \
    } else if (s_[0] == so_ && s_[1] == st_ && s_[3] == 0 && (s_[2] == st_ || s_[2] == 0)) {     \
      /* a trailing scalar (lerp's weight, clamp's bounds): hoisted, so the loop vectorizes */  \
      TO* o_ = (TO*)d_[0];                                                                       \
      const T *x_ = (const T*)d_[1], *y_ = (const T*)d_[2];                                      \
      const T c = *(const T*)d_[3];                                                              \
      if (s_[2] == 0) {                                                                          \
        const T b = *y_;                                                                         \
        _Pragma("GCC ivdep") for (int64_t i_ = 0; i_ < n_; ++i_) {                              \
          const T a = x_[i_];                                                                    \
          o_[i_] = (TO)(EXPR);                                                                   \
        }                                                                                        \
      } else {                                                                                   \
        _Pragma("GCC ivdep") for (int64_t i_ = 0; i_ < n_; ++i_) {                              \
          const T a = x_[i_], b = y_[i_];                                                        \
          o_[i_] = (TO)(EXPR);                                                                   \
        }                                                                                        \
      }                                                                                          \
    } else {                                                                                     \
      for (int64_t i_ = 0; i_ < n_; ++i_) {                                                      \
        const T a = *(const T*)(d_[1] + i_ * s_[1]);                                             \
        const T b = *(const T*)(d_[2] + i_ * s_[2]);                                             \
        const T c = *(const T*)(d_[3] + i_ * s_[3]);                                             \
        *(TO*)(d_[0] + i_ * s_[0]) = (TO)(EXPR);                                                 \
      }                                                                                          \
    }                                                                                            \
  }

/* Output in the loop type, or bool. */
#define EW_L1(NAME, T, EXPR) EW_L1_(NAME, T, T, EXPR)
#define EW_L1B(NAME, T, EXPR) EW_L1_(NAME, T, bool, EXPR)
#define EW_L2(NAME, T, EXPR) EW_L2_(NAME, T, T, EXPR)
#define EW_L2B(NAME, T, EXPR) EW_L2_(NAME, T, bool, EXPR)
#define EW_L3(NAME, T, EXPR) EW_L3_(NAME, T, T, EXPR)

#define EW_GEN_F(GEN, name, EXPR) GEN(name##_f32, float, EXPR) GEN(name##_f64, double, EXPR)
#define EW_GEN_I(GEN, name, EXPR)                                                               \
  GEN(name##_u8, uint8_t, EXPR) GEN(name##_i8, int8_t, EXPR) GEN(name##_i16, int16_t, EXPR)     \
  GEN(name##_i32, int32_t, EXPR) GEN(name##_i64, int64_t, EXPR) GEN(name##_b, bool, EXPR)
#define EW_TAB_F(name) [TPURT_DTYPE_FLOAT32] = name##_f32, [TPURT_DTYPE_FLOAT64] = name##_f64
#define EW_TAB_I(name)                                                                           \
  [TPURT_DTYPE_UINT8] = name##_u8, [TPURT_DTYPE_INT8] = name##_i8, [TPURT_DTYPE_INT16] = name##_i16, \
  [TPURT_DTYPE_INT32] = name##_i32, [TPURT_DTYPE_INT64] = name##_i64, [TPURT_DTYPE_BOOL] = name##_b

/* Reference of one element from the same expressions, in double / int64. */
#define EW_REF_STORE(EXPR)                          \
  if (p.out_float) out[0].d = (double)(EXPR);       \
  else out[0].i = (int64_t)(EXPR);
#define EW_DEF_REF(name, N, FEXPR, IEXPR)                                                        \
  static void name##_ref(tpurt_ew_value_t* out, const tpurt_ew_value_t* in, void* u_) {        \
    EW_LOOP_PRE                                                                                  \
    if (p.loop_float) {                                                                          \
      typedef double T;                                                                          \
      const T a = in[0].d, b = N > 1 ? in[1].d : 0, c = N > 2 ? in[2].d : 0;                     \
      (void)a; (void)b; (void)c;                                                                 \
      EW_REF_STORE(FEXPR)                                                                        \
    } else {                                                                                     \
      typedef int64_t T;                                                                         \
      const T a = in[0].i, b = N > 1 ? in[1].i : 0, c = N > 2 ? in[2].i : 0;                     \
      (void)a; (void)b; (void)c;                                                                 \
      EW_REF_STORE(IEXPR)                                                                        \
    }                                                                                            \
  }

/* Kernel entry points for a described op, as named in ew_list.h. */
#define EW_KERNELS(name, desc)                                                                   \
  tpurt_status_t tpurt_ew_k_##name(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {      \
    return tpurt_ew_op_run(ctx, call, &desc, false);                                             \
  }                                                                                              \
  tpurt_status_t tpurt_ew_r_##name(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {      \
    return tpurt_ew_op_run(ctx, call, &desc, true);                                              \
  }

/* Kernel entry points for an op with variants: PICK(call) returns the desc. */
#define EW_KERNELS_PICK(name, PICK)                                                              \
  tpurt_status_t tpurt_ew_k_##name(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {      \
    return tpurt_ew_op_run(ctx, call, PICK(call), false);                                        \
  }                                                                                              \
  tpurt_status_t tpurt_ew_r_##name(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {      \
    return tpurt_ew_op_run(ctx, call, PICK(call), true);                                         \
  }

/* An expression as text after macro expansion (so it needs no macro of this file). */
#define EW_STR_(...) #__VA_ARGS__
#define EW_STR(...) EW_STR_(__VA_ARGS__)

/* name##_expr: the op's float expression, registered in the section the
 * expression table (elementwise.c) is read from, so every described op is
 * listed without a list to keep. */
#define EW_EXPR(name, GEN, FEXPR)                                                                \
  static const tpurt_ew_expr_t name##_expr = {#name, EW_STR(FEXPR), #GEN};                      \
  static const tpurt_ew_expr_t* const name##_expr_entry                                           \
      __attribute__((used, section("tpurt_ew_exprs"), aligned(sizeof(void*)))) = &name##_expr;

/* ... with the float32 vector form VEXPR (ew_simd.h; ew_math.c's EW_F_PARTS_V). */
#define EW_EXPR_V(name, GEN, FEXPR, VEXPR)                                                       \
  static const tpurt_ew_expr_t name##_expr = {#name, EW_STR(FEXPR), #GEN, #VEXPR};              \
  static const tpurt_ew_expr_t* const name##_expr_entry                                           \
      __attribute__((used, section("tpurt_ew_exprs"), aligned(sizeof(void*)))) = &name##_expr;

/* Float-only op (N inputs; GEN is EW_L1/EW_L2/EW_L3 or a bool-out variant). */
#define EW_OP_F(name, N, GEN, PROMOTE, OUT, ALLOW, SETUP, IN, FEXPR)                            \
  EW_F_PARTS(name, N, GEN, FEXPR)                                                                \
  static const ew_op_t name##_desc = {#name, N, 1, IN, PROMOTE, OUT, ALLOW, SETUP,               \
                                      name##_loops, name##_ref, 0, &name##_expr};
/* ... under another op's name (LABEL): one of several variants of an op whose
 * string argument picks the formula (gelu's approximate), each with loops of
 * its own, so no loop tests the argument per element. EW_KERNELS_PICK picks.
 * (Not EW_OP_F forwarding to this: IN = EW_IN(a, b) would expand to commas.) */
#define EW_OP_F_AS(name, LABEL, N, GEN, PROMOTE, OUT, ALLOW, SETUP, IN, FEXPR)                  \
  EW_F_PARTS(name, N, GEN, FEXPR)                                                                \
  static const ew_op_t name##_desc = {LABEL, N, 1, IN, PROMOTE, OUT, ALLOW, SETUP,               \
                                      name##_loops, name##_ref, 0, &name##_expr};
/* The float loops, their table and the reference of a float-only op. */
#define EW_F_PARTS(name, N, GEN, FEXPR)                                                          \
  EW_GEN_F(GEN, name, FEXPR)                                                                     \
  static const tpurt_ew_loop_fn_t name##_loops[TPURT_DTYPE_COUNT] = {EW_TAB_F(name)};            \
  EW_DEF_REF(name, N, FEXPR, 0)                                                                  \
  EW_EXPR(name, GEN, FEXPR)
/* Float and integer/bool op. */
#define EW_OP_FI(name, N, GEN, PROMOTE, OUT, ALLOW, SETUP, IN, FEXPR, IEXPR)                    \
  EW_GEN_F(GEN, name, FEXPR)                                                                     \
  EW_GEN_I(GEN, name, IEXPR)                                                                     \
  static const tpurt_ew_loop_fn_t name##_loops[TPURT_DTYPE_COUNT] = {EW_TAB_F(name), EW_TAB_I(name)}; \
  EW_DEF_REF(name, N, FEXPR, IEXPR)                                                              \
  EW_EXPR(name, GEN, FEXPR)                                                                      \
  static const ew_op_t name##_desc = {#name, N, 1, IN, PROMOTE, OUT, ALLOW, SETUP,               \
                                      name##_loops, name##_ref, 0, &name##_expr};
/* Integer/bool-only op. */
#define EW_OP_I(name, N, GEN, PROMOTE, OUT, ALLOW, SETUP, IN, IEXPR)                            \
  EW_GEN_I(GEN, name, IEXPR)                                                                     \
  static const tpurt_ew_loop_fn_t name##_loops[TPURT_DTYPE_COUNT] = {EW_TAB_I(name)};            \
  EW_DEF_REF(name, N, 0, IEXPR)                                                                  \
  static const ew_op_t name##_desc = {#name, N, 1, IN, PROMOTE, OUT, ALLOW, SETUP,               \
                                      name##_loops, name##_ref, 0};

#define EW_IN(...) {__VA_ARGS__}

#endif /* TPURT_OPS_EW_OPS_H_ */
