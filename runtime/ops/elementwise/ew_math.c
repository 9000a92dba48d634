/* Elementwise math ops, each written once as an expression over a, b, c (the
 * inputs in the loop type T) and p (scalar params); ew_ops.h turns it into
 * typed vectorizable loops plus a double/int64 reference. Semantics follow
 * PyTorch's CPU kernels (NaN propagation, integer division, shifts, pow). */
#include <float.h>
#include <tgmath.h>

#include "ops/elementwise/ew_expf.h"
#include "ops/elementwise/ew_list.h"
#include "ops/elementwise/ew_ops.h"
#include "ops/elementwise/ew_nextafter16.h"
#include "ops/elementwise/ew_simd.h"
#include "ops/elementwise/ew_vmath.h"

/* integer helpers (T is the loop type); arithmetic wraps like PyTorch's */
#define EW_NEG(x) ((x) < (T)1 && (x) != (T)0) /* x < 0 without a type-limits warning */
#define EW_SIGNED (((T)-1) < (T)1 && ((T)-1) != (T)1)
#define EW_ABSU(x) (EW_NEG(x) ? (uint64_t)0 - (uint64_t)(x) : (uint64_t)(x))
#define WADD(x, y) ((T)((uint64_t)(x) + (uint64_t)(y)))
#define WSUB(x, y) ((T)((uint64_t)(x) - (uint64_t)(y)))
/* a function, not an expression, so bool instantiations do not warn */
static inline uint64_t ew_mulu(uint64_t x, uint64_t y) { return x * y; }
#define WMUL(x, y) ((T)ew_mulu((uint64_t)(x), (uint64_t)(y)))

/* exp in the loop type: the vectorizable one for float, libm's for double */
#define EW_EXP(x) (sizeof(T) == 4 ? (T)tpurt_ew_expf((float)(x)) : (T)exp((double)(x)))
/* EW_VM(F, x): F of ew_vmath.h (tpurt_vm_Ff: tanh, erf, log, sin, ...) likewise: float loops
 * (and float16/bfloat16, which compute in float) vectorize; double loops and the references
 * (T = double) stay on libm's F */
#define EW_VM(F, x) (sizeof(T) == 4 ? (T)tpurt_vm_##F##f((float)(x)) : (T)F((double)(x)))
#define EW_ATAN2(y, x) (sizeof(T) == 4 ? (T)tpurt_vm_atan2f((float)(y), (float)(x)) : (T)atan2((double)(y), (double)(x)))

/* ---- hand-vectorized float32 loops ----
 * The activations below give their float32 table entry a loop whose
 * contiguous case runs ew_simd.h's vector form of the op's expression (VEXPR
 * in va, vb: the inputs' vectors), which gives the expression's bits: every
 * other case, and the ends of a run, go through the generated loop. Streamed
 * outputs (ew_ops.h) are stored from the first 64-byte boundary on. */
/* The loop operand (d_[k], s_[k]; d_[0] the output) a vector loop reads as b and as c: the last input
 * again where an op has fewer (unread there) */
#define EW_YI(N) ((N) >= 2 ? 2 : 1)
#define EW_ZI(N) ((N) >= 3 ? 3 : EW_YI(N))
#if EWV_W
/* [i0, i1) of a contiguous float32 loop through the generated loop fn */
static void ewv_rest(tpurt_ew_loop_fn_t fn, char** d, const int64_t* s, int nargs, int64_t i0, int64_t i1,
                     void* u) {
  if (i1 <= i0) return;
  char* dd[4];
  for (int k = 0; k < nargs; ++k) dd[k] = d[k] + i0 * s[k]; /* 4, or 0 for a scalar input */
  fn(dd, s, i1 - i0, u);
}
/* name##_f32v and the loop table (more entries after VEXPR: an EW_OP_FI op's integer loops) */
#define EW_VLOOP_F32_X(name, N, VEXPR, ...)                                                       \
  static void name##_f32v(char** d_, const int64_t* s_, int64_t n_, void* u_) {                 \
    bool vec_ = s_[0] == 4 && n_ >= 4 * EWV_W;                                                   \
    for (int k_ = 1; k_ <= N; ++k_) vec_ = vec_ && (s_[k_] == 4 || s_[k_] == 0);                 \
    if (!vec_) {                                                                                 \
      name##_f32(d_, s_, n_, u_);                                                                \
      return;                                                                                    \
    }                                                                                            \
    float* o_ = (float*)d_[0];                                                                   \
    const float* x_ = (const float*)d_[1];                                                       \
    const float* y_ = (const float*)d_[EW_YI(N)];                                                \
    const float* z_ = (const float*)d_[EW_ZI(N)];                                                \
    /* a scalar input: read once */                                                              \
    const bool xb_ = s_[1] == 0, yb_ = s_[EW_YI(N)] == 0, zb_ = s_[EW_ZI(N)] == 0;               \
    const ewv_t xv_ = ewv_set1(*x_), yv_ = ewv_set1(*y_), zv_ = ewv_set1(*z_);                   \
    const bool st_ = EW_STREAM_ON(n_);                                                           \
    const int64_t h_ = st_ ? ew_stream_head(o_, sizeof(float), n_) : 0;                          \
    const int64_t e_ = h_ + (n_ - h_) / EWV_W * EWV_W;                                          \
    ewv_rest(name##_f32, d_, s_, N + 1, 0, h_, u_);                                              \
    for (int64_t i_ = h_; i_ < e_; i_ += EWV_W) {                                                \
      const ewv_t va = xb_ ? xv_ : ewv_load(x_ + i_), vb = yb_ ? yv_ : ewv_load(y_ + i_),        \
                  vc = zb_ ? zv_ : ewv_load(z_ + i_);                                            \
      (void)vb;                                                                                  \
      (void)vc;                                                                                  \
      const ewv_t r_ = (VEXPR);                                                                  \
      if (st_) ewv_stream(o_ + i_, r_);                                                          \
      else ewv_store(o_ + i_, r_);                                                               \
    }                                                                                            \
    ewv_rest(name##_f32, d_, s_, N + 1, e_, n_, u_);                                             \
  }                                                                                              \
  static const tpurt_ew_loop_fn_t name##_loops[TPURT_DTYPE_COUNT] = {                            \
      [TPURT_DTYPE_FLOAT32] = name##_f32v, [TPURT_DTYPE_FLOAT64] = name##_f64, __VA_ARGS__};
#define EW_VLOOP_X(name, N, VEXPR, ...) \
  EW_VLOOP_F32_X(name, N, VEXPR, __VA_ARGS__) \
  EW_VLOOP_BF16(name, N, VEXPR)
#else
#define EW_VLOOP_F32_X(name, N, VEXPR, ...) \
  static const tpurt_ew_loop_fn_t name##_loops[TPURT_DTYPE_COUNT] = {EW_TAB_F(name), __VA_ARGS__};
#define EW_VLOOP_X(name, N, VEXPR, ...) EW_VLOOP_F32_X(name, N, VEXPR, __VA_ARGS__)
#endif
#define EW_VLOOP(name, N, VEXPR) EW_VLOOP_X(name, N, VEXPR, )
/* the float32 vector loop alone */
#define EW_VLOOP_F32(name, N, VEXPR) EW_VLOOP_F32_X(name, N, VEXPR, )
/* name##_bf16v: the op on contiguous bfloat16 operands (tpurt_ew_config_t.loop_bf16): each vector
 * widened, computed as name##_f32v computes it and rounded, which is what casting every operand
 * through float32 around name##_f32 gives, without the trip through the cast buffers; the tail
 * goes through name##_f32 on a few floats. */
#if EWV_W && EWV_BF16
/* An input of stride 0 is a float32 scalar (elementwise.c converts broadcast scalars once), read
 * once: EW_BF16_IN picks it or the bf16 vector at i. */
#define EW_BF16_IN(p, bc, vbc, i) ((bc) ? (vbc) : ewv_load_bf16((p) + (i)))
/* va, vb, vc: the inputs' vectors at i (vb and vc repeat the last input where the op has fewer;
 * what VEXPR does not read is not loaded) */
#define EW_BF16_INS(i)                                                                            \
  const ewv_t va = EW_BF16_IN(x_, xb_, xv_, i), vb = EW_BF16_IN(y_, yb_, yv_, i),               \
              vc = EW_BF16_IN(z_, zb_, zv_, i);                                                  \
  (void)vb;                                                                                      \
  (void)vc;
#if (EWV_W == 16 && !defined(__AVX512BF16__)) || EWV_W == 8
/* Without vcvtne2ps2bf16 (which packs two vectors in order), 2 * EWV_W elements are computed as their
 * even and odd halves (tpurt_hv_bf16x32_even / _odd / _pack_eo and their 8-lane forms: no reordering
 * on either side). */
#if EWV_W == 16
#define EW_BF16_WIDE __m512i
#define EW_BF16_WLOAD(p) _mm512_loadu_si512((const void*)(p))
#define EW_BF16_EVEN tpurt_hv_bf16x32_even
#define EW_BF16_ODD tpurt_hv_bf16x32_odd
#define EW_BF16_STORE_EO(d, e, o) _mm512_storeu_si512((void*)(d), tpurt_hv_bf16x32_pack_eo(e, o))
#else
#define EW_BF16_WIDE __m256i
#define EW_BF16_WLOAD(p) _mm256_loadu_si256((const __m256i*)(p))
#define EW_BF16_EVEN tpurt_hv_bf16x16_even_avx2
#define EW_BF16_ODD tpurt_hv_bf16x16_odd_avx2
#define EW_BF16_STORE_EO(d, e, o) _mm256_storeu_si256((__m256i*)(d), tpurt_hv_bf16x16_pack_eo_avx2(e, o))
#endif
#define EW_BF16_EO(p, bc, vbc, i, e, o)                                                           \
  ewv_t e = (vbc), o = (vbc);                                                                    \
  if (!(bc)) {                                                                                   \
    const EW_BF16_WIDE w_ = EW_BF16_WLOAD((p) + (i));                                            \
    e = EW_BF16_EVEN(w_);                                                                        \
    o = EW_BF16_ODD(w_);                                                                         \
  }
/* R = VEXPR with va, vb, vc bound to A, B, C */
#define EW_BF16_EVAL(R, A, B, C, VEXPR)                                                           \
  {                                                                                              \
    const ewv_t va = (A), vb = (B), vc = (C);                                                    \
    (void)vb;                                                                                    \
    (void)vc;                                                                                    \
    R = (VEXPR);                                                                                 \
  }
#define EW_VLOOP_BF16_X2(VEXPR)                                                                   \
  for (; i_ + 2 * EWV_W <= n_; i_ += 2 * EWV_W) {                                                \
    EW_BF16_EO(x_, xb_, xv_, i_, xe_, xo_)                                                       \
    EW_BF16_EO(y_, yb_, yv_, i_, ye_, yo_)                                                       \
    EW_BF16_EO(z_, zb_, zv_, i_, ze_, zo_)                                                       \
    ewv_t r0_, r1_;                                                                              \
    EW_BF16_EVAL(r0_, xe_, ye_, ze_, VEXPR)                                                      \
    EW_BF16_EVAL(r1_, xo_, yo_, zo_, VEXPR)                                                      \
    EW_BF16_STORE_EO(o_ + i_, r0_, r1_);                                                         \
  }
#else
/* With AVX-512 BF16: two vectors a step, rounded and stored together, one vcvtne2ps2bf16 and one
 * denormal check for 32 lanes (tpurt_hv_bf16x32_pack, the bits of two 16-lane packs: gelu's bf16 loop
 * 0.38 -> 0.34 ns an element on one core). */
#define EWV_STORE_BF16_X2(d, r0, r1) _mm512_storeu_si512((void*)(d), tpurt_hv_bf16x32_pack(r0, r1))
#define EW_VLOOP_BF16_X2(VEXPR)                                                                   \
  for (; i_ + 2 * EWV_W <= n_; i_ += 2 * EWV_W) {                                                \
    ewv_t r0_, r1_;                                                                              \
    {                                                                                            \
      EW_BF16_INS(i_)                                                                            \
      r0_ = (VEXPR);                                                                             \
    }                                                                                            \
    {                                                                                            \
      EW_BF16_INS(i_ + EWV_W)                                                                    \
      r1_ = (VEXPR);                                                                             \
    }                                                                                            \
    EWV_STORE_BF16_X2(o_ + i_, r0_, r1_);                                                        \
  }
#endif
/* PRE: declarations VEXPR reads, made once before the loops */
#define EW_VLOOP_BF16_PRE(name, N, PRE, VEXPR)                                                    \
  static void name##_bf16v(char** d_, const int64_t* s_, int64_t n_, void* u_) {                \
    uint16_t* o_ = (uint16_t*)d_[0];                                                             \
    const uint16_t* x_ = (const uint16_t*)d_[1];                                                 \
    const uint16_t* y_ = (const uint16_t*)d_[EW_YI(N)];                                          \
    const uint16_t* z_ = (const uint16_t*)d_[EW_ZI(N)];                                          \
    const bool xb_ = s_[1] == 0, yb_ = s_[EW_YI(N)] == 0, zb_ = s_[EW_ZI(N)] == 0;               \
    const ewv_t xv_ = ewv_set1(xb_ ? *(const float*)d_[1] : 0.0f);                               \
    const ewv_t yv_ = ewv_set1(yb_ ? *(const float*)d_[EW_YI(N)] : 0.0f);                        \
    const ewv_t zv_ = ewv_set1(zb_ ? *(const float*)d_[EW_ZI(N)] : 0.0f);                        \
    int64_t i_ = 0;                                                                              \
    PRE                                                                                          \
    EW_VLOOP_BF16_X2(VEXPR)                                                                      \
    for (; i_ + EWV_W <= n_; i_ += EWV_W) {                                                      \
      EW_BF16_INS(i_)                                                                            \
      ewv_store_bf16(o_ + i_, (VEXPR));                                                          \
    }                                                                                            \
    if (i_ == n_) return;                                                                        \
    float t_[4][EWV_W];                                                                          \
    const int64_t m_ = n_ - i_;                                                                  \
    int64_t fs_[4] = {4, 4, 4, 4};                                                               \
    char* td_[4] = {(char*)t_[0], (char*)t_[1], (char*)t_[2], (char*)t_[3]};                     \
    for (int k_ = 1; k_ <= N; ++k_) {                                                            \
      if (s_[k_] == 0) fs_[k_] = 0, td_[k_] = d_[k_]; /* the float32 scalar */                   \
      else tpurt_hv_bf16_to_f32((const uint16_t*)d_[k_] + i_, t_[k_], m_);                       \
    }                                                                                            \
    name##_f32(td_, fs_, m_, u_);                                                                \
    tpurt_hv_f32_to_bf16(t_[0], o_ + i_, m_);                                                    \
  }
#define EW_VLOOP_BF16(name, N, VEXPR) EW_VLOOP_BF16_PRE(name, N, , VEXPR)
#define EW_BF16_LOOP(name) name##_bf16v
#else
#define EW_VLOOP_BF16_PRE(name, N, PRE, VEXPR)
#define EW_VLOOP_BF16(name, N, VEXPR)
#define EW_BF16_LOOP(name) NULL
#endif
/* EW_F_PARTS / EW_OP_F / EW_OP_F_AS (ew_ops.h) with the vector loop */
#define EW_F_PARTS_V(name, N, GEN, FEXPR, VEXPR) \
  EW_GEN_F(GEN, name, FEXPR)                     \
  EW_VLOOP(name, N, VEXPR)                       \
  EW_DEF_REF(name, N, FEXPR, 0)                  \
  EW_EXPR_V(name, GEN, FEXPR, VEXPR)
#define EW_OP_FV(name, N, GEN, PROMOTE, OUT, ALLOW, SETUP, IN, FEXPR, VEXPR)                     \
  EW_F_PARTS_V(name, N, GEN, FEXPR, VEXPR)                                                       \
  static const ew_op_t name##_desc = {#name, N, 1, IN, PROMOTE, OUT, ALLOW, SETUP,               \
                                      name##_loops, name##_ref, 0, &name##_expr, EW_BF16_LOOP(name)};
#define EW_OP_F_ASV(name, LABEL, N, GEN, PROMOTE, OUT, ALLOW, SETUP, IN, FEXPR, VEXPR)           \
  EW_F_PARTS_V(name, N, GEN, FEXPR, VEXPR)                                                       \
  static const ew_op_t name##_desc = {LABEL, N, 1, IN, PROMOTE, OUT, ALLOW, SETUP,               \
                                      name##_loops, name##_ref, 0, &name##_expr, EW_BF16_LOOP(name)};

/* EW_OP_FI with EW_OP_FV's float32 and bfloat16 vector loops */
#define EW_OP_FIVV(name, N, GEN, PROMOTE, OUT, ALLOW, SETUP, IN, FEXPR, IEXPR, VEXPR)                 \
  EW_GEN_F(GEN, name, FEXPR)                                                                        \
  EW_GEN_I(GEN, name, IEXPR)                                                                        \
  EW_VLOOP_X(name, N, VEXPR, EW_TAB_I(name))                                                        \
  EW_DEF_REF(name, N, FEXPR, IEXPR)                                                                 \
  EW_EXPR_V(name, GEN, FEXPR, VEXPR)                                                                \
  static const ew_op_t name##_desc = {#name, N, 1, IN, PROMOTE, OUT, ALLOW, SETUP,                  \
                                      name##_loops, name##_ref, 0, &name##_expr, EW_BF16_LOOP(name)};
/* EW_OP_FV for ops with scalar parameters: VEXPR reads them as EW_VP(k), (float)p.d[k] as the float
 * loops read them, through the loops' user pointer. Generated code has no such pointer, so the op's
 * expression for fused chains carries no vector form (EW_EXPR). */
#define EW_OP_FVP(name, N, GEN, PROMOTE, OUT, ALLOW, SETUP, IN, FEXPR, VEXPR)                    \
  EW_GEN_F(GEN, name, FEXPR)                                                                     \
  EW_VLOOP(name, N, VEXPR)                                                                       \
  EW_DEF_REF(name, N, FEXPR, 0)                                                                  \
  EW_EXPR(name, GEN, FEXPR)                                                                      \
  static const ew_op_t name##_desc = {#name, N, 1, IN, PROMOTE, OUT, ALLOW, SETUP,               \
                                      name##_loops, name##_ref, 0, &name##_expr, EW_BF16_LOOP(name)};

/* EW_OP_FI with a contiguous bfloat16 loop (EW_VLOOP_BF16): the arithmetic a training step runs in
 * bf16 (residual adds, gradient accumulation, scaling), which otherwise widens each operand into a cast
 * buffer, computes there and rounds from a third (on an AVX2 machine, bf16 add_ of 4M elements 394 us
 * against PyTorch CPU's 312). VEXPR is FEXPR on vectors operation for operation: the runtime is built
 * -std=c11, where gcc does not contract a + alpha * b into an fma, so neither does VEXPR. */
#define EW_OP_FIV(name, N, GEN, PROMOTE, OUT, ALLOW, SETUP, IN, FEXPR, IEXPR, VEXPR)                  \
  EW_GEN_F(GEN, name, FEXPR)                                                                        \
  EW_GEN_I(GEN, name, IEXPR)                                                                        \
  static const tpurt_ew_loop_fn_t name##_loops[TPURT_DTYPE_COUNT] = {EW_TAB_F(name), EW_TAB_I(name)};  \
  EW_VLOOP_BF16_PRE(name, N, EW_VALPHA_PRE, VEXPR)                                                  \
  EW_DEF_REF(name, N, FEXPR, IEXPR)                                                                 \
  EW_EXPR(name, GEN, FEXPR)                                                                         \
  static const ew_op_t name##_desc = {#name, N, 1, IN, PROMOTE, OUT, ALLOW, SETUP,                  \
                                      name##_loops, name##_ref, 0, &name##_expr, EW_BF16_LOOP(name)};
/* EW_OP_FIV for ops of floating types only */
#define EW_OP_FB(name, N, GEN, PROMOTE, OUT, ALLOW, SETUP, IN, FEXPR, VEXPR)                     \
  EW_GEN_F(GEN, name, FEXPR)                                                                     \
  static const tpurt_ew_loop_fn_t name##_loops[TPURT_DTYPE_COUNT] = {EW_TAB_F(name)};            \
  EW_VLOOP_BF16_PRE(name, N, EW_VALPHA_PRE, VEXPR)                                               \
  EW_DEF_REF(name, N, FEXPR, 0)                                                                  \
  EW_EXPR(name, GEN, FEXPR)                                                                      \
  static const ew_op_t name##_desc = {#name, N, 1, IN, PROMOTE, OUT, ALLOW, SETUP,               \
                                      name##_loops, name##_ref, 0, &name##_expr, EW_BF16_LOOP(name)};
/* EW_OP_FI whose bfloat16 result is a bit operation on its operand's bits ((x ^ XOR) & AND: neg flips
 * the sign, abs clears it), exact in bfloat16 for every number, so the contiguous bf16 loop works on
 * the 16-bit patterns, 32 a vector, where widening, computing and rounding each vector took 0.41-0.46x
 * PyTorch CPU's time at 2^17 on an AVX-512 machine without BF16 (its bf16 neg is an xor too). A NaN
 * keeps its payload, where the float path quiets it. A float32 scalar operand (broadcast) is
 * computed once in float and rounded. */
#define EW_OP_FI_BITS16(name, GEN, PROMOTE, OUT, ALLOW, FEXPR, IEXPR, XOR, AND)                          \
  EW_GEN_F(GEN, name, FEXPR)                                                                            \
  EW_GEN_I(GEN, name, IEXPR)                                                                            \
  static const tpurt_ew_loop_fn_t name##_loops[TPURT_DTYPE_COUNT] = {EW_TAB_F(name), EW_TAB_I(name)};  \
  static void name##_bf16v(char** d_, const int64_t* s_, int64_t n_, void* u_) {                       \
    uint16_t* o_ = (uint16_t*)d_[0];                                                                    \
    if (s_[1] == 0) {                                                                                   \
      float v_;                                                                                         \
      char* td_[2] = {(char*)&v_, d_[1]};                                                               \
      const int64_t ts_[2] = {4, 0};                                                                    \
      name##_f32(td_, ts_, 1, u_);                                                                      \
      const uint16_t b_ = tpurt_f32_to_bf16(v_);                                                        \
      for (int64_t i_ = 0; i_ < n_; ++i_) o_[i_] = b_;                                                  \
      return;                                                                                           \
    }                                                                                                   \
    const uint16_t* x_ = (const uint16_t*)d_[1];                                                        \
    for (int64_t i_ = 0; i_ < n_; ++i_) o_[i_] = (uint16_t)((x_[i_] ^ (XOR)) & (AND));                  \
  }                                                                                                     \
  EW_DEF_REF(name, 1, FEXPR, IEXPR)                                                                     \
  EW_EXPR(name, GEN, FEXPR)                                                                             \
  static const ew_op_t name##_desc = {#name, 1, 1, EW_IN(0), PROMOTE, OUT, ALLOW, NULL,                \
                                      name##_loops, name##_ref, 0, &name##_expr, name##_bf16v};
/* the op's alpha (setup_alpha2's p.d[0]) as the float loops read it, (T)p.d[0], read once (gcc
 * reloaded it at every step, not knowing the stores leave it alone) */
#define EW_VALPHA_PRE const ewv_t valpha_ = ewv_set1((float)((const ew_params_t*)u_)->d[0]); (void)valpha_;
#define EW_VALPHA valpha_
/* the op's scalar parameter k as the float loops read it, (T)p.d[k], in a vector loop (user pointer u_) */
#define EW_VP(k) ((float)((const ew_params_t*)u_)->d[k])

/* ---- setups: scalar args into p ---- */
static tpurt_status_t setup_alpha2(const tpurt_op_call_t* c, ew_params_t* p) {
  ew_param_arg(p, 0, c, 2, 1.0);
  return TPURT_OK;
}
static tpurt_status_t setup_value3(const tpurt_op_call_t* c, ew_params_t* p) {
  ew_param_arg(p, 0, c, 3, 1.0);
  return TPURT_OK;
}

/* ---- arithmetic ---- */
EW_OP_FIV(add, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_ALL, setup_alpha2, EW_IN(0, 1),
          a + (T)p.d[0] * b, WADD(a, WMUL(p.i[0], b)), ewv_add(va, ewv_mul(EW_VALPHA, vb)))
EW_OP_FIV(sub, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_NUM, setup_alpha2, EW_IN(0, 1),
          a - (T)p.d[0] * b, WSUB(a, WMUL(p.i[0], b)), ewv_sub(va, ewv_mul(EW_VALPHA, vb)))
EW_OP_FI(add_relu, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_NUM, setup_alpha2, EW_IN(0, 1),
         ({ T s_ = a + (T)p.d[0] * b; s_ < 0 ? (T)0 : s_; }),
         ({ T s_ = WADD(a, WMUL(p.i[0], b)); EW_NEG(s_) ? (T)0 : s_; }))
EW_OP_FIV(mul, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_ALL | EW_UWIDE, NULL, EW_IN(0, 1), a * b, WMUL(a, b),
          ewv_mul(va, vb))
/* rsub(self, other, alpha) = other - alpha * self: sub with the inputs swapped */
static const ew_op_t rsub_desc = {"rsub", 2, 1, {1, 0}, EW_P_COMMON, EW_O_COMPUTE, EW_NUM, setup_alpha2,
                                  sub_loops, sub_ref, 0};

EW_OP_FV(div_true, 2, EW_L2, EW_P_FLOAT, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0, 1), a / b, ewv_div(va, vb))
#define IDIV_TRUNC                                                  \
  ({                                                                \
    T r_;                                                           \
    if (b == 0) { *err_ = 1; r_ = 0; }                              \
    else if (EW_SIGNED && b == (T)-1) r_ = (T)((uint64_t)0 - (uint64_t)a); \
    else r_ = (T)(a / b);                                           \
    r_;                                                             \
  })
EW_OP_FI(div_trunc, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_NUM, NULL, EW_IN(0, 1), trunc(a / b), IDIV_TRUNC)
#define FDIV_FLOOR                                                  \
  ({                                                                \
    T r_;                                                           \
    if (b == 0) r_ = a / b;                                         \
    else {                                                          \
      T m_ = fmod(a, b);                                            \
      T dv_ = (a - m_) / b;                                         \
      if (m_ != 0 && ((b < 0) != (m_ < 0))) dv_ -= 1;               \
      if (dv_ != 0) {                                               \
        r_ = floor(dv_);                                            \
        if (dv_ - r_ > (T)0.5) r_ += 1;                             \
      } else r_ = copysign((T)0, a / b);                            \
    }                                                               \
    r_;                                                             \
  })
#define IDIV_FLOOR                                                  \
  ({                                                                \
    T r_;                                                           \
    if (b == 0) { *err_ = 1; r_ = 0; }                              \
    else if (EW_SIGNED && b == (T)-1) r_ = (T)((uint64_t)0 - (uint64_t)a); \
    else {                                                          \
      r_ = (T)(a / b);                                              \
      if ((T)(a % b) != 0 && (EW_NEG(a) != EW_NEG(b))) r_ = (T)(r_ - 1); \
    }                                                               \
    r_;                                                             \
  })
EW_OP_FIVV(div_floor, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_NUM, NULL, EW_IN(0, 1), FDIV_FLOOR, IDIV_FLOOR,
           ewv_div_floor(va, vb))
#define FREM                                                        \
  ({                                                                \
    T m_ = fmod(a, b);                                              \
    if (m_ != 0 && ((b < 0) != (m_ < 0))) m_ += b;                  \
    m_;                                                             \
  })
#define IREM                                                        \
  ({                                                                \
    T r_;                                                           \
    if (b == 0) { *err_ = 1; r_ = 0; }                              \
    else if (EW_SIGNED && b == (T)-1) r_ = 0;                       \
    else {                                                          \
      r_ = (T)(a % b);                                              \
      if (r_ != 0 && (EW_NEG(r_) != EW_NEG(b))) r_ = (T)(r_ + b);   \
    }                                                               \
    r_;                                                             \
  })
EW_OP_FIVV(remainder, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_NUM, NULL, EW_IN(0, 1), FREM, IREM,
           ewv_remainder(va, vb))
#define IFMOD                                                       \
  ({                                                                \
    T r_;                                                           \
    if (b == 0) { *err_ = 1; r_ = 0; }                              \
    else if (EW_SIGNED && b == (T)-1) r_ = 0;                       \
    else r_ = (T)(a % b);                                           \
    r_;                                                             \
  })
EW_OP_FIVV(fmod, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_NUM, NULL, EW_IN(0, 1), fmod(a, b), IFMOD,
           ewv_fmod(va, vb))
#define IPOW                                                        \
  ({                                                                \
    T r_;                                                           \
    if (EW_NEG(b)) {                                                \
      r_ = (a == 1) ? (T)1 : ((EW_SIGNED && a == (T)-1) ? (((uint64_t)b & 1u) ? (T)-1 : (T)1) : (T)0); \
    } else {                                                        \
      uint64_t base_ = (uint64_t)a, acc_ = 1, e_ = (uint64_t)b;     \
      while (e_) {                                                  \
        if (e_ & 1u) acc_ *= base_;                                 \
        base_ *= base_;                                             \
        e_ >>= 1;                                                   \
      }                                                             \
      r_ = (T)acc_;                                                 \
    }                                                               \
    r_;                                                             \
  })
/* pow: pow.Tensor_Scalar's exponent (a Scalar arg, broadcast as stride 0) of
 * 2, 3, 0.5, -0.5, -1 or -2 is computed as PyTorch's CPU kernel computes it
 * (a*a, a*a*a, sqrt, 1/sqrt, 1/a, 1/(a*a)): the same results, vectorized.
 * PyTorch does not do this for float16 (std::pow per element) nor for tensor
 * exponents (Tensor_Tensor, even 0-d), whose results differ at +-inf/-0
 * (pow(-inf, 0.5) = inf, sqrt(-inf) = NaN), so neither do we; those and other
 * exponents use libm's pow. The reference is libm's pow in double throughout.
 * p.i[0] = 1: the exponent is a Scalar and the specializations apply. */
static tpurt_status_t setup_pow(const tpurt_op_call_t* c, ew_params_t* p) {
  p->i[0] = p->loop_float && p->compute != TPURT_DTYPE_FLOAT16 && tpurt_arg_is(c, 0, TPURT_ARG_TENSOR) &&
            (tpurt_arg_is(c, 1, TPURT_ARG_INT) || tpurt_arg_is(c, 1, TPURT_ARG_DOUBLE));
  return TPURT_OK;
}
/* float32 (and the 16-bit floats through it): tpurt_vm_powf, exp(y log x) in double */
#define EW_POWF(x, y) (sizeof(T) == 4 ? (T)tpurt_vm_powf((float)(x), (float)(y)) : pow(x, y))
EW_L2(pow_gen_f32, float, EW_POWF(a, b))
/* float32 pow's contiguous runs (x contiguous, the exponent contiguous or one broadcast value) on
 * vectors (ewv_pow: tpurt_vm_powf's bits); returns how many it did */
static int64_t pow_f32_vec(char** d, const int64_t* s, int64_t n) {
  int64_t i = 0;
#if EWV_W
  if (s[0] == 4 && s[1] == 4 && (s[2] == 4 || s[2] == 0)) {
    float* o = (float*)d[0];
    const float *x = (const float*)d[1], *y = (const float*)d[2];
    for (; i + EWV_W <= n; i += EWV_W) ewv_store(o + i, ewv_pow(ewv_load(x + i), s[2] ? ewv_load(y + i) : ewv_set1(*y)));
  }
#else
  (void)d, (void)s, (void)n;
#endif
  return i;
}
EW_L2(pow_gen_f64, double, pow(a, b))
#define EW_POW_APPLY(EXPR)                                                                       \
  do {                                                                                           \
    T* o_ = (T*)d_[0];                                                                           \
    const T* x_ = (const T*)d_[1];                                                               \
    if (s_[0] == (int64_t)sizeof(T) && s_[1] == (int64_t)sizeof(T)) {                            \
      _Pragma("GCC ivdep") for (int64_t i_ = 0; i_ < n_; ++i_) {                                \
        const T a = x_[i_];                                                                      \
        o_[i_] = (EXPR);                                                                         \
      }                                                                                          \
    } else {                                                                                     \
      for (int64_t i_ = 0; i_ < n_; ++i_) {                                                      \
        const T a = *(const T*)(d_[1] + i_ * s_[1]);                                             \
        *(T*)(d_[0] + i_ * s_[0]) = (EXPR);                                                      \
      }                                                                                          \
    }                                                                                            \
    return;                                                                                      \
  } while (0)
#define EW_POW_LOOP(NAME, T_, GEN)                                                                 \
  static void NAME(char** d_, const int64_t* s_, int64_t n_, void* u_) {                       \
    typedef T_ T;                                                                                \
    if (s_[2] == 0 && ((const ew_params_t*)u_)->i[0]) {                                         \
      const T e_ = *(const T*)d_[2];                                                             \
      if (e_ == 2) EW_POW_APPLY(a * a);                                                          \
      if (e_ == 3) EW_POW_APPLY(a * a * a);                                                      \
      if (e_ == (T)0.5) EW_POW_APPLY(sqrt(a));                                                   \
      if (e_ == (T)-0.5) EW_POW_APPLY(1 / sqrt(a));                                              \
      if (e_ == -1) EW_POW_APPLY(1 / a);                                                         \
      if (e_ == -2) EW_POW_APPLY(1 / (a * a));                                                   \
    }                                                                                            \
    const int64_t v_ = sizeof(T) == 4 ? pow_f32_vec(d_, s_, n_) : 0;                             \
    if (v_ == n_) return;                                                                        \
    char* r_[3] = {d_[0] + v_ * s_[0], d_[1] + v_ * s_[1], d_[2] + v_ * s_[2]};                  \
    GEN(r_, s_, n_ - v_, u_);                                                                    \
  }
EW_POW_LOOP(pow_f32, float, pow_gen_f32)
EW_POW_LOOP(pow_f64, double, pow_gen_f64)
EW_GEN_I(EW_L2, pow, IPOW)
static const tpurt_ew_loop_fn_t pow_loops[TPURT_DTYPE_COUNT] = {EW_TAB_F(pow), EW_TAB_I(pow)};
EW_DEF_REF(pow, 2, pow(a, b), IPOW)
/* The float loops above as one expression, for generated fused kernels: p.i[0] is set only for a
 * Scalar exponent, which every loop sees as a broadcast (stride 0), so the branch is the loops'. */
#define EW_POW_EXPR                                                                                \
  (p.i[0] ? (b == 2 ? a * a : b == 3 ? a * a * a : b == (T)0.5 ? sqrt(a) : b == (T)-0.5 ? 1 / sqrt(a) \
             : b == -1 ? 1 / a : b == -2 ? 1 / (a * a) : EW_POWF(a, b))                              \
          : EW_POWF(a, b))
EW_EXPR(pow, EW_L2, EW_POW_EXPR)
static const ew_op_t pow_desc = {"pow", 2, 1, {0, 1}, EW_P_COMMON, EW_O_COMPUTE, EW_NUM, setup_pow, pow_loops,
                                 pow_ref, 0, &pow_expr};
EW_OP_FV(atan2, 2, EW_L2, EW_P_FLOAT, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0, 1), EW_ATAN2(a, b), ewv_atan2(va, vb))
EW_OP_FV(hypot, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0, 1), hypot(a, b), ewv_hypot(va, vb))
EW_OP_FV(copysign, 2, EW_L2, EW_P_FLOAT, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0, 1), copysign(a, b), ewv_copysign(va, vb))
/* float32 and float64 only (16-bit types step on their own bits: ew_nextafter16.c), so no bf16 loop */
EW_GEN_F(EW_L2, nextafter, nextafter(a, b))
EW_VLOOP_F32(nextafter, 2, ewv_nextafter(va, vb))
EW_DEF_REF(nextafter, 2, nextafter(a, b), 0)
EW_EXPR_V(nextafter, EW_L2, nextafter(a, b), ewv_nextafter(va, vb))
static const ew_op_t nextafter_desc = {"nextafter", 2, 1, EW_IN(0, 1), EW_P_COMMON, EW_O_COMPUTE,
                                       EW_M(FLOAT32) | EW_M(FLOAT64), NULL, nextafter_loops, nextafter_ref, 0,
                                       &nextafter_expr, NULL};
EW_OP_FV(xlogy, 2, EW_L2, EW_P_FLOAT, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0, 1),
         (b != b) ? b : (a == 0 ? (T)0 : a * EW_VM(log, b)), ewv_xlogy(va, vb))
EW_OP_FV(xlog1py, 2, EW_L2, EW_P_FLOAT, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0, 1),
         (b != b) ? b : (a == 0 ? (T)0 : a * EW_VM(log1p, b)), ewv_xlog1py(va, vb))
EW_OP_FV(logaddexp, 2, EW_L2, EW_P_FLOAT, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0, 1),
         (isinf(a) && a == b) ? a : ((a < b ? b : a) + EW_VM(log1p, EW_EXP(-fabs(a - b)))), ewv_logaddexp(va, vb))
EW_OP_FV(logaddexp2, 2, EW_L2, EW_P_FLOAT, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0, 1),
         (isinf(a) && a == b) ? a : ((a < b ? b : a) + EW_VM(log1p, EW_VM(exp2, -fabs(a - b))) * (T)1.4426950408889634),
         ewv_logaddexp2(va, vb))
EW_OP_FI(heaviside, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_ALL, NULL, EW_IN(0, 1), a == 0 ? b : (T)(a > 0),
         a == 0 ? b : (T)(a > 0))
#define EW_MAXN(x, y) (((x) != (x)) ? (x) : (((y) != (y)) ? (y) : ((x) < (y) ? (y) : (x))))
#define EW_MINN(x, y) (((x) != (x)) ? (x) : (((y) != (y)) ? (y) : ((y) < (x) ? (y) : (x))))
EW_OP_FIVV(maximum, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_ALL, NULL, EW_IN(0, 1), EW_MAXN(a, b), a < b ? b : a,
          ewv_maxn(va, vb))
EW_OP_FIVV(minimum, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_ALL, NULL, EW_IN(0, 1), EW_MINN(a, b), b < a ? b : a,
          ewv_minn(va, vb))
EW_OP_FI(fmax, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_ALL, NULL, EW_IN(0, 1), fmax(a, b), a < b ? b : a)
EW_OP_FI(fmin, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_ALL, NULL, EW_IN(0, 1), fmin(a, b), b < a ? b : a)
#define IGCD                                                        \
  ({                                                                \
    uint64_t x_ = EW_ABSU(a), y_ = EW_ABSU(b);                      \
    while (y_) { uint64_t t_ = x_ % y_; x_ = y_; y_ = t_; }        \
    (T)x_;                                                          \
  })
EW_OP_I(gcd, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_INTS, NULL, EW_IN(0, 1), IGCD)
EW_OP_I(lcm, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_INTS, NULL, EW_IN(0, 1),
        ({ T g_ = IGCD; T r_ = g_ == 0 ? (T)0 : ({ int64_t m_ = (int64_t)(a / g_ * b); (T)(m_ < 0 ? (uint64_t)0 - (uint64_t)m_ : (uint64_t)m_); }); r_; }))

/* ---- comparisons, logical, bitwise ---- */
#define EW_CMP(name, OPX, ALLOW)                                                               \
  EW_OP_FI(name, 2, EW_L2B, EW_P_COMMON, EW_O_BOOL, ALLOW, NULL, EW_IN(0, 1), a OPX b, a OPX b)
EW_CMP(eq, ==, EW_ALL | EW_UWIDE)
EW_CMP(ne, !=, EW_ALL | EW_UWIDE)
EW_CMP(lt, <, EW_ALL)
EW_CMP(le, <=, EW_ALL)
EW_CMP(gt, >, EW_ALL)
EW_CMP(ge, >=, EW_ALL)
EW_OP_I(logical_and, 2, EW_L2B, EW_P_BOOL, EW_O_BOOL, EW_M(BOOL), NULL, EW_IN(0, 1), a && b)
EW_OP_I(logical_or, 2, EW_L2B, EW_P_BOOL, EW_O_BOOL, EW_M(BOOL), NULL, EW_IN(0, 1), a || b)
EW_OP_I(logical_xor, 2, EW_L2B, EW_P_BOOL, EW_O_BOOL, EW_M(BOOL), NULL, EW_IN(0, 1), (a != 0) != (b != 0))
EW_OP_I(logical_not, 1, EW_L1B, EW_P_BOOL, EW_O_BOOL, EW_M(BOOL), NULL, EW_IN(0), !a)
EW_OP_I(bitwise_and, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_INTB | EW_UWIDE, NULL, EW_IN(0, 1), a & b)
EW_OP_I(bitwise_or, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_INTB | EW_UWIDE, NULL, EW_IN(0, 1), a | b)
EW_OP_I(bitwise_xor, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_INTB | EW_UWIDE, NULL, EW_IN(0, 1), a ^ b)
EW_OP_I(bitwise_not, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_INTB, NULL, EW_IN(0), p.compute == TPURT_DTYPE_BOOL ? (T)!a : (T)~(uint64_t)a)
/* shift counts out of [0, bits) give 0 (left) or the sign fill (right; 0 for uint8); a
 * uint8 count reads as int8, as PyTorch does */
#define SHIFT_COUNT (p.compute == TPURT_DTYPE_UINT8 ? (int64_t)(int8_t)(uint8_t)b : (int64_t)b)
EW_OP_I(lshift, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_INTS, NULL, EW_IN(0, 1),
        ({ int64_t c_ = SHIFT_COUNT; (c_ < 0 || c_ >= p.bits) ? (T)0 : (T)((uint64_t)a << c_); }))
EW_OP_I(rshift, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_INTS, NULL, EW_IN(0, 1),
        ({ int64_t c_ = SHIFT_COUNT;
           (c_ < 0 || c_ >= p.bits) ? (p.compute == TPURT_DTYPE_UINT8 ? (T)0 : (T)(a >> (p.bits - 1))) : (T)(a >> c_); }))

/* ---- unary ---- */
EW_OP_FI_BITS16(neg, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_NUM, -a, (T)((uint64_t)0 - (uint64_t)a), 0x8000u, 0xffffu)
EW_OP_FI_BITS16(abs, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_NUM, fabs(a), (T)EW_ABSU(a), 0u, 0x7fffu)
EW_OP_FI(sign, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_ALL, NULL, EW_IN(0), (T)((0 < a) - (a < 0)),
         (T)((a > 0) - EW_NEG(a)))
EW_OP_FV(reciprocal, 1, EW_L1, EW_P_FLOAT, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0), 1 / a, ewv_div(EWV_C(1.0f), va))
#define EW_UF(name, EXPR) EW_OP_F(name, 1, EW_L1, EW_P_FLOAT, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0), EXPR)
#define EW_UFV(name, EXPR, VEXPR) \
  EW_OP_FV(name, 1, EW_L1, EW_P_FLOAT, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0), EXPR, VEXPR)
EW_UFV(sqrt, sqrt(a), ewv_sqrt(va))
EW_UFV(rsqrt, 1 / sqrt(a), ewv_div(EWV_C(1.0f), ewv_sqrt(va)))
EW_UFV(exp, EW_EXP(a), ewv_exp(va))
EW_UFV(exp2, EW_VM(exp2, a), ewv_exp2(va))
EW_UFV(expm1, EW_VM(expm1, a), ewv_expm1(va))
EW_UFV(log, EW_VM(log, a), ewv_log(va))
EW_UFV(log2, EW_VM(log2, a), ewv_log2(va))
EW_UFV(log10, EW_VM(log10, a), ewv_log10(va))
EW_UFV(log1p, EW_VM(log1p, a), ewv_log1p(va))
EW_UFV(sin, EW_VM(sin, a), ewv_sin(va))
EW_UFV(cos, EW_VM(cos, a), ewv_cos(va))
EW_UFV(tan, EW_VM(tan, a), ewv_tan(va))
EW_UFV(tanh, EW_VM(tanh, a), ewv_tanh(va))
EW_UFV(sinh, EW_VM(sinh, a), ewv_sinh(va))
EW_UFV(cosh, EW_VM(cosh, a), ewv_cosh(va))
EW_UFV(asin, EW_VM(asin, a), ewv_asin(va))
EW_UFV(acos, EW_VM(acos, a), ewv_acos(va))
EW_UFV(atan, EW_VM(atan, a), ewv_atan(va))
EW_UFV(asinh, EW_VM(asinh, a), ewv_asinh(va))
EW_UFV(acosh, EW_VM(acosh, a), ewv_acosh(va))
EW_UFV(atanh, EW_VM(atanh, a), ewv_atanh(va))
EW_UFV(sigmoid, 1 / (1 + EW_EXP(-a)), ewv_sigmoid(va))
EW_UFV(erf, EW_VM(erf, a), ewv_erf(va))
EW_UFV(erfc, EW_VM(erfc, a), ewv_erfc(va))
EW_UFV(lgamma, EW_VM(lgamma, a), ewv_lgamma(va))
EW_UFV(sinc, a == 0 ? (T)1 : EW_VM(sin, (T)M_PI * a) / ((T)M_PI * a), ewv_sinc(va))
EW_UFV(special_entr, (a != a) ? a : (a > 0 ? -a * EW_VM(log, a) : (a == 0 ? (T)0 : -(T)INFINITY)), ewv_entr(va))
EW_UF(angle, (a != a) ? a : (a < 0 ? (T)M_PI : (T)0))

EW_UFV(erfinv, sizeof(T) == 4 ? (T)tpurt_vm_erfinvf((float)a) : (T)tpurt_vm_erfinvd((double)a), ewv_erfinv(va))

/* digamma (PyTorch's calc_digamma: reflection, recurrence, asymptotic series) */
static double ew_digamma(double x) {
  if (x == 0) return copysign(INFINITY, -x);
  if (x < 0) {
    if (x == trunc(x)) return NAN;
    double q, r = modf(x, &q);
    return ew_digamma(1 - x) - M_PI / tan(M_PI * r);
  }
  double result = 0;
  while (x < 10) { result -= 1 / x; x += 1; }
  if (x == 10) return result + 2.25175258906672110764;
  static const double A[] = {8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
                             -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
                             8.33333333333333333333E-2};
  double y = 0;
  if (x < 1.0e17) {
    double z = 1 / (x * x), poly = 0;
    for (int i = 0; i < 7; ++i) poly = poly * z + A[i];
    y = z * poly;
  }
  return result + log(x) - 0.5 / x - y;
}
EW_UFV(digamma, sizeof(T) == 4 ? (T)tpurt_vm_digammaf((float)a) : (T)ew_digamma((double)a), ewv_digamma(va))

EW_OP_FI(floor, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_NUM | EW_UWIDE, NULL, EW_IN(0), floor(a), a)
EW_OP_FI(ceil, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_NUM | EW_UWIDE, NULL, EW_IN(0), ceil(a), a)
EW_OP_FI(trunc, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_NUM | EW_UWIDE, NULL, EW_IN(0), trunc(a), a)
EW_OP_FI(round, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_NUM | EW_UWIDE, NULL, EW_IN(0), nearbyint(a), a)
static tpurt_status_t setup_decimals(const tpurt_op_call_t* c, ew_params_t* p) {
  int64_t dec = tpurt_arg_int(c, 1, 0);
  p->i[0] = dec;
  p->d[1] = pow(10.0, (double)(dec < 0 ? -dec : dec));
  return TPURT_OK;
}
EW_OP_F(round_decimals, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, setup_decimals, EW_IN(0),
        p.i[0] < 0 ? nearbyint(a / (T)p.d[1]) * (T)p.d[1] : nearbyint(a * (T)p.d[1]) / (T)p.d[1])
EW_OP_F(frac, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0), a - trunc(a))
EW_OP_FI(isnan, 1, EW_L1B, EW_P_COMMON, EW_O_BOOL, EW_ALL | EW_UWIDE, NULL, EW_IN(0), a != a, 0)
EW_OP_FI(isposinf, 1, EW_L1B, EW_P_COMMON, EW_O_BOOL, EW_ALL | EW_UWIDE, NULL, EW_IN(0), a == (T)INFINITY, 0)
EW_OP_FI(isneginf, 1, EW_L1B, EW_P_COMMON, EW_O_BOOL, EW_ALL | EW_UWIDE, NULL, EW_IN(0), a == -(T)INFINITY, 0)
/* uint64 computes in int64 (ew_ops.h): its values above 2^63 load negative, yet have no sign */
EW_OP_FI(signbit, 1, EW_L1B, EW_P_COMMON, EW_O_BOOL, EW_ALL | EW_UWIDE, NULL, EW_IN(0), signbit(a) != 0,
         p.compute != TPURT_DTYPE_UINT64 && EW_NEG(a))
static tpurt_status_t setup_nan_to_num(const tpurt_op_call_t* c, ew_params_t* p) {
  double mx;
  switch (p->compute) {
    case TPURT_DTYPE_FLOAT16: mx = 65504.0; break;
    case TPURT_DTYPE_BFLOAT16: mx = 3.3895313892515355e38; break;
    case TPURT_DTYPE_FLOAT32: mx = FLT_MAX; break;
    default: mx = DBL_MAX; break;
  }
  p->d[0] = tpurt_arg_double(c, 1, 0.0);
  p->d[1] = tpurt_arg_double(c, 2, mx);
  p->d[2] = tpurt_arg_double(c, 3, -mx);
  return TPURT_OK;
}
EW_OP_FI(nan_to_num, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_ALL | EW_UWIDE, setup_nan_to_num, EW_IN(0),
         a != a ? (T)p.d[0] : (a == (T)INFINITY ? (T)p.d[1] : (a == -(T)INFINITY ? (T)p.d[2] : a)), a)
static tpurt_status_t setup_eps1(const tpurt_op_call_t* c, ew_params_t* p) {
  /* eps None -> -1 (PyTorch's "no clamping" marker) */
  p->d[0] = tpurt_arg_double(c, 1, -1.0);
  return TPURT_OK;
}
EW_OP_F(logit, 1, EW_L1, EW_P_FLOAT, EW_O_COMPUTE, EW_FLOATS, setup_eps1, EW_IN(0),
        ({ T x_ = a; if (p.d[0] >= 0) { T lo_ = (T)p.d[0], hi_ = 1 - lo_; x_ = x_ < lo_ ? lo_ : (x_ > hi_ ? hi_ : x_); } EW_VM(log, x_ / (1 - x_)); }))

/* ---- activations ---- */
EW_OP_FIV(relu, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_NUM, NULL, EW_IN(0), a < 0 ? (T)0 : a, EW_NEG(a) ? (T)0 : a,
          ewv_sel(ewv_lt(va, EWV_C(0.0f)), EWV_C(0.0f), va))
static tpurt_status_t setup_gelu(const tpurt_op_call_t* c, ew_params_t* p) {
  p->i[0] = 0;
  const char* approximate = tpurt_arg_string(c, 1, NULL);
  if (approximate) {
    if (strcmp(approximate, "tanh") == 0) p->i[0] = 1;
    else if (strcmp(approximate, "none") != 0)
      return TPURT_STATUS(INVALID_ARGUMENT, "gelu: approximate must be 'none' or 'tanh', got '%s'", approximate);
  }
  return TPURT_OK;
}
#define GELU_BETA ((T)(M_SQRT2 * M_2_SQRTPI * 0.5))
#define GELU_KAPPA ((T)0.044715)
/* gelu's two formulas are two variants, picked per call by `approximate`
 * (one formula per loop: a select between them computed both per element) */
EW_OP_F_ASV(gelu_erf, "gelu", 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, setup_gelu, EW_IN(0),
            sizeof(T) == 4 ? a * (T)tpurt_vm_gelu_cdff((float)a) : a * (T)0.5 * (1 + erf((double)a * M_SQRT1_2)), ewv_gelu_erf(va))
EW_OP_F_ASV(gelu_tanh, "gelu", 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, setup_gelu, EW_IN(0),
            (T)0.5 * a * (1 + EW_VM(tanh, GELU_BETA * (a + GELU_KAPPA * a * a * a))), ewv_gelu_tanh(va))
static bool gelu_is_tanh(const tpurt_op_call_t* c, int arg) {
  const char* approximate = tpurt_arg_string(c, arg, NULL);
  return approximate && strcmp(approximate, "tanh") == 0;
}
static const ew_op_t* gelu_pick(const tpurt_op_call_t* c) {
  return gelu_is_tanh(c, 1) ? &gelu_tanh_desc : &gelu_erf_desc; /* setup_gelu rejects other strings */
}
EW_OP_FV(silu, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0), a / (1 + EW_EXP(-a)), ewv_silu(va))
EW_OP_FV(mish, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0), a * EW_VM(tanh, EW_VM(log1p, EW_EXP(a))),
         ewv_mish(va))
#define HSIG(x) ({ T v_ = (x) + 3; v_ = v_ < 0 ? (T)0 : v_; v_ = 6 < v_ ? (T)6 : v_; v_ / 6; })
EW_OP_FV(hardsigmoid, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0), HSIG(a), ewv_hardsigmoid(va))
EW_OP_FV(hardswish, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0), a * HSIG(a),
         ewv_mul(va, ewv_hardsigmoid(va)))
static tpurt_status_t setup_elu(const tpurt_op_call_t* c, ew_params_t* p) {
  ew_param_arg(p, 0, c, 1, 1.0); /* alpha */
  ew_param_arg(p, 1, c, 2, 1.0); /* scale */
  ew_param_arg(p, 2, c, 3, 1.0); /* input_scale */
  return TPURT_OK;
}
EW_OP_F(elu, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, setup_elu, EW_IN(0),
        a <= 0 ? EW_VM(expm1, a * (T)p.d[2]) * (T)(p.d[0] * p.d[1]) : a * (T)p.d[1])
static tpurt_status_t setup_slope1(const tpurt_op_call_t* c, ew_params_t* p) {
  ew_param_arg(p, 0, c, 1, 0.01);
  return TPURT_OK;
}
EW_OP_FVP(leaky_relu, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, setup_slope1, EW_IN(0),
          a > 0 ? a : a * (T)p.d[0], ewv_sel(ewv_gt(va, EWV_C(0.0f)), va, ewv_mul(va, EWV_C(EW_VP(0)))))
static tpurt_status_t setup_hardtanh(const tpurt_op_call_t* c, ew_params_t* p) {
  ew_param_arg(p, 0, c, 1, -1.0);
  ew_param_arg(p, 1, c, 2, 1.0);
  return TPURT_OK;
}
EW_OP_FIV(hardtanh, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_NUM, setup_hardtanh, EW_IN(0),
          ({ T v_ = a < (T)p.d[0] ? (T)p.d[0] : a; (T)p.d[1] < v_ ? (T)p.d[1] : v_; }),
          ({ T v_ = a < (T)p.i[0] ? (T)p.i[0] : a; (T)p.i[1] < v_ ? (T)p.i[1] : v_; }),
          ewv_clamp(va, EW_VP(0), EW_VP(1)))
static tpurt_status_t setup_softplus(const tpurt_op_call_t* c, ew_params_t* p) {
  ew_param_arg(p, 0, c, 1, 1.0);
  ew_param_arg(p, 1, c, 2, 20.0);
  return TPURT_OK;
}
EW_OP_FVP(softplus, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, setup_softplus, EW_IN(0),
          a * (T)p.d[0] > (T)p.d[1] ? a : EW_VM(log1p, EW_EXP(a * (T)p.d[0])) / (T)p.d[0],
          ewv_softplus(va, EW_VP(0), EW_VP(1)))
static tpurt_status_t setup_threshold(const tpurt_op_call_t* c, ew_params_t* p) {
  ew_param_arg(p, 0, c, 1, 0.0);
  ew_param_arg(p, 1, c, 2, 0.0);
  return TPURT_OK;
}
EW_OP_FI(threshold, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_NUM, setup_threshold, EW_IN(0),
         a <= (T)p.d[0] ? (T)p.d[1] : a, a <= (T)p.i[0] ? (T)p.i[1] : a)
static tpurt_status_t setup_lambd1(const tpurt_op_call_t* c, ew_params_t* p) {
  ew_param_arg(p, 0, c, 1, 0.5);
  return TPURT_OK;
}
EW_OP_F(hardshrink, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, setup_lambd1, EW_IN(0),
        (a >= -(T)p.d[0] && a <= (T)p.d[0]) ? (T)0 : a)
EW_OP_F(softshrink, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, setup_lambd1, EW_IN(0),
        a > (T)p.d[0] ? a - (T)p.d[0] : (a < -(T)p.d[0] ? a + (T)p.d[0] : a * 0))

/* ---- backward of activations: a = grad, b = input or result ---- */
static tpurt_status_t setup_arg2(const tpurt_op_call_t* c, ew_params_t* p) {
  ew_param_arg(p, 0, c, 2, 0.0);
  return TPURT_OK;
}
static tpurt_status_t setup_arg23(const tpurt_op_call_t* c, ew_params_t* p) {
  ew_param_arg(p, 0, c, 2, 0.0);
  ew_param_arg(p, 1, c, 3, 0.0);
  return TPURT_OK;
}
#define EW_BW(name, ALLOW, SETUP, EXPR) \
  EW_OP_F(name, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, ALLOW, SETUP, EW_IN(0, 1), EXPR)
EW_OP_FIV(threshold_backward, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_NUM, setup_arg2, EW_IN(0, 1),
          b <= (T)p.d[0] ? (T)0 : a, b <= (T)p.i[0] ? (T)0 : a, ewv_sel(ewv_ge(EWV_C(EW_VP(0)), vb), EWV_C(0.0f), va))
EW_OP_FV(sigmoid_backward, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0, 1), a * (1 - b) * b,
         ewv_mul(ewv_mul(va, ewv_sub(EWV_C(1.0f), vb)), vb))
EW_OP_FV(tanh_backward, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0, 1), a * (1 - b * b),
         ewv_mul(va, ewv_sub(EWV_C(1.0f), ewv_mul(vb, vb))))
EW_OP_FV(silu_backward, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0, 1),
         ({ T s_ = 1 / (1 + EW_EXP(-b)); a * s_ * (1 + b * (1 - s_)); }), ewv_silu_bw(va, vb))
static tpurt_status_t setup_gelu_bw(const tpurt_op_call_t* c, ew_params_t* p) {
  p->i[0] = 0;
  if (gelu_is_tanh(c, 2)) p->i[0] = 1;
  return TPURT_OK;
}
#define GELU_BW_TANH                                                                       \
  ({                                                                                       \
    T xsq_ = b * b, inner_ = GELU_BETA * (b + GELU_KAPPA * xsq_ * b), th_ = EW_VM(tanh, inner_);\
    T left_ = (T)0.5 * b, right_ = 1 + th_;                                                \
    T ld_ = (T)0.5 * right_;                                                               \
    T rd_ = left_ * (1 - th_ * th_) * GELU_BETA * (1 + 3 * GELU_KAPPA * xsq_);             \
    a * (ld_ + rd_);                                                                       \
  })
/* float: tpurt_vm_gelu_gradf (ew_vmath.h); double: cdf + b * pdf */
#define GELU_BW_ERF                                                                        \
  (sizeof(T) == 4 ? a * (T)tpurt_vm_gelu_gradf((float)b) : ({                             \
    T cdf_ = (T)0.5 * (1 + erf((double)b * M_SQRT1_2));                                   \
    T pdf_ = EW_EXP((T)-0.5 * b * b) * (T)(M_2_SQRTPI * M_SQRT1_2 * 0.5);                  \
    a * (cdf_ + b * pdf_);                                                                 \
  }))
EW_OP_F_ASV(gelu_backward_erf, "gelu_backward", 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, setup_gelu_bw,
            EW_IN(0, 1), GELU_BW_ERF, ewv_gelu_bw_erf(va, vb))
EW_OP_F_ASV(gelu_backward_tanh, "gelu_backward", 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, setup_gelu_bw,
            EW_IN(0, 1), GELU_BW_TANH, ewv_gelu_bw_tanh(va, vb))
static const ew_op_t* gelu_backward_pick(const tpurt_op_call_t* c) {
  return gelu_is_tanh(c, 2) ? &gelu_backward_tanh_desc : &gelu_backward_erf_desc;
}
EW_OP_FV(hardsigmoid_backward, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0, 1),
         (b > -3 && b < 3) ? a / 6 : (T)0, ewv_hardsigmoid_bw(va, vb))
/* PyTorch's vectorized kernel (most elements) passes grad through at x >= 3 */
EW_OP_FV(hardswish_backward, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0, 1),
         b <= -3 ? (T)0 : (b >= 3 ? a : a * (b / 3 + (T)0.5)), ewv_hardswish_bw(va, vb))
/* NaN handling follows PyTorch CPU's vectorized kernels: their masks are written as "inside the
 * open interval", so a NaN input gives a zero gradient here and in the shrink backwards, and
 * elu_backward's blend picks the negative branch (NaN). CPU's scalar tail (the elements after the
 * last whole pair of SIMD vectors, a count that depends on its ISA and thread split) answers the
 * other way; we do not reproduce that: every element gets the one rule, in every eager mode. */
EW_OP_FI(hardtanh_backward, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_NUM, setup_arg23, EW_IN(0, 1),
         (b > (T)p.d[0] && b < (T)p.d[1]) ? a : (T)0, (b > (T)p.i[0] && b < (T)p.i[1]) ? a : (T)0)
EW_OP_FVP(leaky_relu_backward, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, setup_arg2, EW_IN(0, 1),
          b > 0 ? a : a * (T)p.d[0], ewv_sel(ewv_gt(vb, EWV_C(0.0f)), va, ewv_mul(va, EWV_C(EW_VP(0)))))
static tpurt_status_t setup_elu_bw(const tpurt_op_call_t* c, ew_params_t* p) {
  ew_param_arg(p, 0, c, 1, 1.0);
  ew_param_arg(p, 1, c, 2, 1.0);
  ew_param_arg(p, 2, c, 3, 1.0);
  p->i[3] = tpurt_arg_int(c, 4, 0);
  return TPURT_OK;
}
/* elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result) */
#define ELU_NEG ((T)(p.d[0] * p.d[1]))
EW_OP_F(elu_backward, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, setup_elu_bw, EW_IN(0, 5),
        p.i[3] ? (b > 0 ? a * (T)p.d[1] : a * (T)p.d[2] * (b + ELU_NEG))
               : (b > 0 ? a * (T)p.d[1] : a * (T)p.d[2] * ELU_NEG * EW_EXP(b * (T)p.d[2])))
EW_OP_FVP(softplus_backward, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, setup_arg23, EW_IN(0, 1),
          ({ T z_ = EW_EXP(b * (T)p.d[0]); (b * (T)p.d[0]) > (T)p.d[1] ? a : a * z_ / (z_ + 1); }),
          ewv_softplus_bw(va, vb, EW_VP(0), EW_VP(1)))
static tpurt_status_t setup_eps2(const tpurt_op_call_t* c, ew_params_t* p) {
  p->d[0] = tpurt_arg_double(c, 2, -1.0);
  return TPURT_OK;
}
EW_BW(logit_backward, EW_FLOATS, setup_eps2,
      p.d[0] < 0 ? ((b < 0 || b > 1) ? (T)NAN : a / (b * (1 - b)))
                 : ((b < (T)p.d[0] || b > 1 - (T)p.d[0]) ? (T)0 : a / (b * (1 - b))))
EW_BW(hardshrink_backward, EW_FLOATS, setup_arg2, (b < -(T)p.d[0] || b > (T)p.d[0]) ? a : (T)0)
EW_BW(softshrink_backward, EW_FLOATS, setup_arg2, (b < -(T)p.d[0] || b > (T)p.d[0]) ? a : (T)0)
EW_OP_F(log_sigmoid_backward, 3, EW_L3, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0, 1, 2),
        a * ((b < 0 ? (T)1 : (T)0) - (b < 0 ? (T)1 : (T)-1) * (c / (1 + c))))

/* ---- ternary ---- */
EW_OP_FB(lerp, 3, EW_L3, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, NULL, EW_IN(0, 1, 2),
         fabs(c) < (T)0.5 ? a + c * (b - a) : b - (b - a) * (1 - c), ewv_lerp(va, vb, vc))
EW_OP_FIV(addcmul, 3, EW_L3, EW_P_COMMON, EW_O_COMPUTE, EW_NUM, setup_value3, EW_IN(0, 1, 2),
          a + (T)p.d[0] * b * c, WADD(a, WMUL(WMUL(p.i[0], b), c)),
          ewv_add(va, ewv_mul(ewv_mul(EW_VALPHA, vb), vc)))
EW_OP_FB(addcdiv, 3, EW_L3, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS, setup_value3, EW_IN(0, 1, 2),
         a + (T)p.d[0] * b / c, ewv_add(va, ewv_div(ewv_mul(EW_VALPHA, vb), vc)))

/* clamp(self, min?, max?), clamp_min(self, min), clamp_max(self, max). PyTorch: min(max(x, lo), hi)
 * where max/min propagate NaN from either side. */
#define CLAMP_LOHI_I(a, b, c) ((c) < ((a) < (b) ? (b) : (a)) ? (c) : ((a) < (b) ? (b) : (a)))
EW_OP_FIVV(clamp_lohi, 3, EW_L3, EW_P_COMMON, EW_O_COMPUTE, EW_ALL, NULL, EW_IN(0, 1, 2),
          EW_MINN(EW_MAXN(a, b), c), CLAMP_LOHI_I(a, b, c), ewv_minn(ewv_maxn(va, vb), vc))
EW_OP_FIVV(clamp_lo, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_ALL, NULL, EW_IN(0, 1), EW_MAXN(a, b),
          ((a) < (b) ? (b) : (a)), ewv_maxn(va, vb))
EW_OP_FIVV(clamp_hi, 2, EW_L2, EW_P_COMMON, EW_O_COMPUTE, EW_ALL, NULL, EW_IN(0, 1), EW_MINN(a, b),
          ((b) < (a) ? (b) : (a)), ewv_minn(va, vb))

static tpurt_status_t clamp_args(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, int which,
                                 bool reference) {
  /* which: 0 clamp(self, min?, max?), 1 clamp_min(self, min), 2 clamp_max(self, max) */
  if (call->num_args < 2) return TPURT_STATUS(INVALID_ARGUMENT, "clamp: expected (self, bound...)");
  const tpurt_arg_t* lo = NULL;
  const tpurt_arg_t* hi = NULL;
  if (which == 1) lo = tpurt_arg_at(call, 1);
  else if (which == 2) hi = tpurt_arg_at(call, 1);
  else {
    if (tpurt_arg_present(call, 1)) lo = tpurt_arg_at(call, 1);
    if (tpurt_arg_present(call, 2)) hi = tpurt_arg_at(call, 2);
  }
  if (!lo && !hi) return TPURT_STATUS(INVALID_ARGUMENT, "clamp: at least one of 'min' or 'max' must not be None");
  ew_params_t p;
  memset(&p, 0, sizeof(p));
  if (lo && hi) {
    const tpurt_arg_t* ins[3] = {tpurt_arg_at(call, 0), lo, hi};
    return tpurt_ew_op_run_inputs(ctx, call, &clamp_lohi_desc, ins, &p, reference);
  }
  const tpurt_arg_t* ins[2] = {tpurt_arg_at(call, 0), lo ? lo : hi};
  return tpurt_ew_op_run_inputs(ctx, call, lo ? &clamp_lo_desc : &clamp_hi_desc, ins, &p, reference);
}
tpurt_status_t tpurt_ew_k_clamp(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { return clamp_args(ctx, call, 0, false); }
tpurt_status_t tpurt_ew_r_clamp(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { return clamp_args(ctx, call, 0, true); }
tpurt_status_t tpurt_ew_k_clamp_min(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { return clamp_args(ctx, call, 1, false); }
tpurt_status_t tpurt_ew_r_clamp_min(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { return clamp_args(ctx, call, 1, true); }
tpurt_status_t tpurt_ew_k_clamp_max(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { return clamp_args(ctx, call, 2, false); }
tpurt_status_t tpurt_ew_r_clamp_max(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { return clamp_args(ctx, call, 2, true); }

/* ---- kernels with more than one descriptor ---- */
EW_KERNELS(add, add_desc)
EW_KERNELS(sub, sub_desc)
EW_KERNELS(rsub, rsub_desc)
EW_KERNELS(add_relu, add_relu_desc)
EW_KERNELS(mul, mul_desc)
EW_KERNELS(remainder, remainder_desc)
EW_KERNELS(fmod, fmod_desc)
EW_KERNELS(floor_divide, div_floor_desc)
EW_KERNELS(pow, pow_desc)
EW_KERNELS(atan2, atan2_desc)
EW_KERNELS(hypot, hypot_desc)
EW_KERNELS(copysign, copysign_desc)
/* 16-bit outputs step on the 16-bit pattern (ew_nextafter16.c) */
tpurt_status_t tpurt_ew_k_nextafter(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  if (call->num_outputs > 0 && (call->outputs[0].dtype == TPURT_DTYPE_BFLOAT16 ||
                                call->outputs[0].dtype == TPURT_DTYPE_FLOAT16))
    return tpurt_ew_nextafter16(ctx, call, false);
  return tpurt_ew_op_run(ctx, call, &nextafter_desc, false);
}
tpurt_status_t tpurt_ew_r_nextafter(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  if (call->num_outputs > 0 && (call->outputs[0].dtype == TPURT_DTYPE_BFLOAT16 ||
                                call->outputs[0].dtype == TPURT_DTYPE_FLOAT16))
    return tpurt_ew_nextafter16(ctx, call, true);
  return tpurt_ew_op_run(ctx, call, &nextafter_desc, true);
}
EW_KERNELS(xlogy, xlogy_desc)
EW_KERNELS(xlog1py, xlog1py_desc)
EW_KERNELS(logaddexp, logaddexp_desc)
EW_KERNELS(logaddexp2, logaddexp2_desc)
EW_KERNELS(heaviside, heaviside_desc)
EW_KERNELS(maximum, maximum_desc)
EW_KERNELS(minimum, minimum_desc)
EW_KERNELS(fmax, fmax_desc)
EW_KERNELS(fmin, fmin_desc)
EW_KERNELS(gcd, gcd_desc)
EW_KERNELS(lcm, lcm_desc)
EW_KERNELS(eq, eq_desc)
EW_KERNELS(ne, ne_desc)
EW_KERNELS(lt, lt_desc)
EW_KERNELS(le, le_desc)
EW_KERNELS(gt, gt_desc)
EW_KERNELS(ge, ge_desc)
EW_KERNELS(logical_and, logical_and_desc)
EW_KERNELS(logical_or, logical_or_desc)
EW_KERNELS(logical_xor, logical_xor_desc)
EW_KERNELS(logical_not, logical_not_desc)
EW_KERNELS(bitwise_and, bitwise_and_desc)
EW_KERNELS(bitwise_or, bitwise_or_desc)
EW_KERNELS(bitwise_xor, bitwise_xor_desc)
EW_KERNELS(bitwise_not, bitwise_not_desc)
EW_KERNELS(lshift, lshift_desc)
EW_KERNELS(rshift, rshift_desc)
EW_KERNELS(neg, neg_desc)
EW_KERNELS(abs, abs_desc)
EW_KERNELS(sign, sign_desc)
EW_KERNELS(reciprocal, reciprocal_desc)
EW_KERNELS(sqrt, sqrt_desc)
EW_KERNELS(rsqrt, rsqrt_desc)
EW_KERNELS(exp, exp_desc)
EW_KERNELS(exp2, exp2_desc)
EW_KERNELS(expm1, expm1_desc)
EW_KERNELS(log, log_desc)
EW_KERNELS(log2, log2_desc)
EW_KERNELS(log10, log10_desc)
EW_KERNELS(log1p, log1p_desc)
EW_KERNELS(sin, sin_desc)
EW_KERNELS(cos, cos_desc)
EW_KERNELS(tan, tan_desc)
EW_KERNELS(tanh, tanh_desc)
EW_KERNELS(sinh, sinh_desc)
EW_KERNELS(cosh, cosh_desc)
EW_KERNELS(asin, asin_desc)
EW_KERNELS(acos, acos_desc)
EW_KERNELS(atan, atan_desc)
EW_KERNELS(asinh, asinh_desc)
EW_KERNELS(acosh, acosh_desc)
EW_KERNELS(atanh, atanh_desc)
EW_KERNELS(sigmoid, sigmoid_desc)
EW_KERNELS(erf, erf_desc)
EW_KERNELS(erfc, erfc_desc)
EW_KERNELS(erfinv, erfinv_desc)
EW_KERNELS(lgamma, lgamma_desc)
EW_KERNELS(digamma, digamma_desc)
EW_KERNELS(sinc, sinc_desc)
EW_KERNELS(special_entr, special_entr_desc)
EW_KERNELS(angle, angle_desc)
EW_KERNELS(floor, floor_desc)
EW_KERNELS(ceil, ceil_desc)
EW_KERNELS(trunc, trunc_desc)
EW_KERNELS(frac, frac_desc)
EW_KERNELS(isnan, isnan_desc)
EW_KERNELS(isposinf, isposinf_desc)
EW_KERNELS(isneginf, isneginf_desc)
EW_KERNELS(signbit, signbit_desc)
EW_KERNELS(nan_to_num, nan_to_num_desc)
EW_KERNELS(logit, logit_desc)
EW_KERNELS(relu, relu_desc)
EW_KERNELS_PICK(gelu, gelu_pick)
EW_KERNELS(silu, silu_desc)
EW_KERNELS(mish, mish_desc)
EW_KERNELS(hardsigmoid, hardsigmoid_desc)
EW_KERNELS(hardswish, hardswish_desc)
EW_KERNELS(elu, elu_desc)
EW_KERNELS(leaky_relu, leaky_relu_desc)
EW_KERNELS(hardtanh, hardtanh_desc)
EW_KERNELS(softplus, softplus_desc)
EW_KERNELS(threshold, threshold_desc)
EW_KERNELS(hardshrink, hardshrink_desc)
EW_KERNELS(softshrink, softshrink_desc)
EW_KERNELS(threshold_backward, threshold_backward_desc)
EW_KERNELS(sigmoid_backward, sigmoid_backward_desc)
EW_KERNELS(tanh_backward, tanh_backward_desc)
EW_KERNELS(silu_backward, silu_backward_desc)
EW_KERNELS_PICK(gelu_backward, gelu_backward_pick)
EW_KERNELS(hardsigmoid_backward, hardsigmoid_backward_desc)
EW_KERNELS(hardswish_backward, hardswish_backward_desc)
EW_KERNELS(hardtanh_backward, hardtanh_backward_desc)
EW_KERNELS(leaky_relu_backward, leaky_relu_backward_desc)
EW_KERNELS(elu_backward, elu_backward_desc)
EW_KERNELS(softplus_backward, softplus_backward_desc)
EW_KERNELS(logit_backward, logit_backward_desc)
EW_KERNELS(hardshrink_backward, hardshrink_backward_desc)
EW_KERNELS(softshrink_backward, softshrink_backward_desc)
EW_KERNELS(log_sigmoid_backward, log_sigmoid_backward_desc)
EW_KERNELS(lerp, lerp_desc)
EW_KERNELS(addcmul, addcmul_desc)
EW_KERNELS(addcdiv, addcdiv_desc)

/* div(self, other, rounding_mode?) */
static tpurt_status_t div_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  const ew_op_t* d = &div_true_desc;
  const char* m = tpurt_arg_string(call, 2, NULL);
  if (m) {
    if (strcmp(m, "trunc") == 0) d = &div_trunc_desc;
    else if (strcmp(m, "floor") == 0) d = &div_floor_desc;
    else return TPURT_STATUS(INVALID_ARGUMENT, "div: rounding_mode must be None, 'trunc' or 'floor', got '%s'", m);
  }
  return tpurt_ew_op_run(ctx, call, d, reference);
}
tpurt_status_t tpurt_ew_k_div(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { return div_run(ctx, call, false); }
tpurt_status_t tpurt_ew_r_div(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { return div_run(ctx, call, true); }

/* round(self) / round.decimals(self, *, decimals) */
static tpurt_status_t round_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  bool dec = tpurt_arg_is(call, 1, TPURT_ARG_INT) && tpurt_arg_int(call, 1, 0) != 0;
  return tpurt_ew_op_run(ctx, call, dec ? &round_decimals_desc : &round_desc, reference);
}
tpurt_status_t tpurt_ew_k_round(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { return round_run(ctx, call, false); }
tpurt_status_t tpurt_ew_r_round(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { return round_run(ctx, call, true); }

/* conj_physical on real tensors: a copy */
EW_OP_FI(identity, 1, EW_L1, EW_P_COMMON, EW_O_COMPUTE, EW_ALL, NULL, EW_IN(0), a, a)
EW_KERNELS(identity, identity_desc)

/* log_sigmoid_forward(self) -> (output, buffer): output = min(x, 0) - log1p(exp(-|x|)),
 * buffer = exp(-|x|) (what PyTorch's CPU kernel saves for the backward). Contiguous float32 runs
 * go on ew_simd.h's vectors, the same operations (log_sigmoid_vec: how many it did). */
static int64_t log_sigmoid_vec(float* o, float* bz, const float* xs, int64_t n) {
  int64_t i = 0;
#if EWV_W
  for (; i + EWV_W <= n; i += EWV_W) {
    ewv_t z;
    ewv_store(o + i, ewv_log_sigmoid(ewv_load(xs + i), &z));
    ewv_store(bz + i, z);
  }
#else
  (void)o, (void)bz, (void)xs, (void)n;
#endif
  return i;
}
#define LOGSIG_LOOP(NAME, T_)                                                             \
  static void NAME(char** d, const int64_t* s, int64_t n, void* u) {                    \
    typedef T_ T;                                                                         \
    const int64_t es = (int64_t)sizeof(T);                                                \
    if (s[0] == es && s[1] == es && s[2] == es) {                                         \
      T *o = (T*)d[0], *bz = (T*)d[1];                                                    \
      const T* xs = (const T*)d[2];                                                       \
      const int64_t i0 = es == 4 ? log_sigmoid_vec((float*)o, (float*)bz, (const float*)xs, n) : 0; \
      _Pragma("GCC ivdep") for (int64_t i = i0; i < n; ++i) {                             \
        T x = xs[i], z = EW_EXP(-fabs(x));                                                \
        o[i] = (x < 0 ? x : (T)0) - EW_VM(log1p, z);                                          \
        bz[i] = z;                                                                        \
      }                                                                                   \
      return;                                                                             \
    }                                                                                     \
    for (int64_t i = 0; i < n; ++i) {                                                     \
      T x = *(const T*)(d[2] + i * s[2]);                                                 \
      T z = EW_EXP(-fabs(x));                                                             \
      *(T*)(d[0] + i * s[0]) = (x < 0 ? x : (T)0) - EW_VM(log1p, z);                          \
      *(T*)(d[1] + i * s[1]) = z;                                                         \
    }                                                                                     \
  }
LOGSIG_LOOP(log_sigmoid_f32, float)
LOGSIG_LOOP(log_sigmoid_f64, double)
static void log_sigmoid_ref(tpurt_ew_value_t* out, const tpurt_ew_value_t* in, void* u) {
  double x = in[0].d, z = exp(-fabs(x));
  out[0].d = (x < 0 ? x : 0.0) - log1p(z);
  out[1].d = z;
}
static const tpurt_ew_loop_fn_t log_sigmoid_loops[TPURT_DTYPE_COUNT] = {EW_TAB_F(log_sigmoid)};
static const ew_op_t log_sigmoid_desc = {"log_sigmoid_forward", 1, 2, {0}, EW_P_COMMON, EW_O_COMPUTE, EW_FLOATS,
                                         NULL, log_sigmoid_loops, log_sigmoid_ref, 8192};
EW_KERNELS(log_sigmoid_forward, log_sigmoid_desc)
