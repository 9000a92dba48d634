/* Fused scaled-dot-product attention (the ops PyTorch's CPU flash backend
 * dispatches to: _scaled_dot_product_flash_attention_for_cpu and its
 * backward), FlashAttention-2 style: queries in blocks of BQ rows against
 * keys/values in blocks of BK, an online softmax, so no seq x seq matrix is
 * ever stored; causal masks skip whole blocks above the diagonal. float32,
 * bfloat16 and float16 compute in float32; grouped-query attention (fewer
 * key/value heads than query heads) maps query head h to kv head
 * h / (Hq / Hkv). An additive float mask (SDPA turns a bool mask into one)
 * broadcasts over batch and heads. Dropout is not supported (SDPA picks
 * another backend for it). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/elementwise/ew_expf.h"
#include "ops/half_vec.h"
#include "ops/linalg/gemm.h"
#include "ops/nn/nn.h"

/* BKT: the float32 forward's key block (its causal blocks stop at the last key
 * their queries see, so a larger one costs no masked work). */
enum { BQ = 64, BK = 64, BKT = 128 };

static inline int64_t imin64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t pad8(int64_t x) { return (x + 7) & ~(int64_t)7; }

/* ---- small dense products on float32 buffers ----
 * C[m x n] (+)= A[m x k] B[k x n], all row-major; n is a multiple of 8 (the
 * callers pad their buffers with zeros). */
#if defined(__AVX2__) && defined(__FMA__)
/* R rows: 4W (where W4: the 32 registers of AVX-512 hold 6 x 4 sums, a
 * broadcast of A then feeds four fmas), 2W, then W columns at a time on W-lane
 * registers VT, then TAIL for what is left. Each output is one chain of fmas
 * over p whatever the width, so the 8- and 16-lane forms give identical
 * results. */
#define MMROWS(NAME, R, VT, W, LOADU, STOREU, SET1, FMA, ZERO, TAIL, AT, W4)                \
  static void NAME(int64_t n, int64_t k, const float* a, int64_t lda, const float* b,       \
                   int64_t ldb, float* c, int64_t ldc, bool acc) {                          \
    int64_t j = 0;                                                                         \
    for (; W4 && j + 4 * W <= n; j += 4 * W) {                                             \
      VT c0[R], c1[R], c2[R], c3[R];                                                       \
      for (int r = 0; r < R; ++r) {                                                        \
        c0[r] = acc ? LOADU(c + r * ldc + j) : ZERO();                                     \
        c1[r] = acc ? LOADU(c + r * ldc + j + W) : ZERO();                                 \
        c2[r] = acc ? LOADU(c + r * ldc + j + 2 * W) : ZERO();                             \
        c3[r] = acc ? LOADU(c + r * ldc + j + 3 * W) : ZERO();                             \
      }                                                                                    \
      for (int64_t p = 0; p < k; ++p) {                                                    \
        const float* bp = b + p * ldb + j;                                                 \
        VT b0 = LOADU(bp), b1 = LOADU(bp + W), b2 = LOADU(bp + 2 * W), b3 = LOADU(bp + 3 * W); \
        for (int r = 0; r < R; ++r) {                                                      \
          VT av = SET1(a[AT(r, p)]);                                                       \
          c0[r] = FMA(av, b0, c0[r]);                                                      \
          c1[r] = FMA(av, b1, c1[r]);                                                      \
          c2[r] = FMA(av, b2, c2[r]);                                                      \
          c3[r] = FMA(av, b3, c3[r]);                                                      \
        }                                                                                  \
      }                                                                                    \
      for (int r = 0; r < R; ++r) {                                                        \
        STOREU(c + r * ldc + j, c0[r]);                                                    \
        STOREU(c + r * ldc + j + W, c1[r]);                                                \
        STOREU(c + r * ldc + j + 2 * W, c2[r]);                                            \
        STOREU(c + r * ldc + j + 3 * W, c3[r]);                                            \
      }                                                                                    \
    }                                                                                      \
    for (; j + 2 * W <= n; j += 2 * W) {                                                   \
      VT c0[R], c1[R];                                                                     \
      for (int r = 0; r < R; ++r) {                                                        \
        c0[r] = acc ? LOADU(c + r * ldc + j) : ZERO();                                     \
        c1[r] = acc ? LOADU(c + r * ldc + j + W) : ZERO();                                 \
      }                                                                                    \
      for (int64_t p = 0; p < k; ++p) {                                                    \
        VT b0 = LOADU(b + p * ldb + j), b1 = LOADU(b + p * ldb + j + W);                   \
        for (int r = 0; r < R; ++r) {                                                      \
          VT av = SET1(a[AT(r, p)]);                                                       \
          c0[r] = FMA(av, b0, c0[r]);                                                      \
          c1[r] = FMA(av, b1, c1[r]);                                                      \
        }                                                                                  \
      }                                                                                    \
      for (int r = 0; r < R; ++r) {                                                        \
        STOREU(c + r * ldc + j, c0[r]);                                                    \
        STOREU(c + r * ldc + j + W, c1[r]);                                                \
      }                                                                                    \
    }                                                                                      \
    for (; j + W <= n; j += W) {                                                           \
      VT c0[R];                                                                            \
      for (int r = 0; r < R; ++r) c0[r] = acc ? LOADU(c + r * ldc + j) : ZERO();           \
      for (int64_t p = 0; p < k; ++p) {                                                    \
        VT b0 = LOADU(b + p * ldb + j);                                                    \
        for (int r = 0; r < R; ++r) c0[r] = FMA(SET1(a[AT(r, p)]), b0, c0[r]);             \
      }                                                                                    \
      for (int r = 0; r < R; ++r) STOREU(c + r * ldc + j, c0[r]);                          \
    }                                                                                      \
    TAIL;                                                                                  \
  }
/* A's element (r, p): A row-major (mm), or A stored transposed, k x m (mm_at). */
#define A_RM(r, p) (r) * lda + (p)
#define A_TR(r, p) (p) * lda + (r)
#define MMROWS8(R, SUF, AT) \
  MMROWS(mm_rows##R##SUF, R, __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps, _mm256_fmadd_ps, \
         _mm256_setzero_ps, (void)0, AT, 0)
#define MMROWS8_BOTH(R) MMROWS8(R, , A_RM) MMROWS8(R, _at, A_TR)
MMROWS8_BOTH(6)
MMROWS8_BOTH(4)
MMROWS8_BOTH(2)
MMROWS8_BOTH(1)
#if defined(__AVX512F__)
/* A build for AVX-512: 32 then 16 columns at a time, the 8-lane form for the last 8. */
#define MMROWS16(R, SUF, AT)                                                                             \
  MMROWS(mm512_rows##R##SUF, R, __m512, 16, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps, _mm512_fmadd_ps, \
         _mm512_setzero_ps, if (j < n) mm_rows##R##SUF(n - j, k, a, lda, b + j, ldb, c + j, ldc, acc), AT, 1)
#define MMROWS16_BOTH(R) MMROWS16(R, , A_RM) MMROWS16(R, _at, A_TR)
MMROWS16_BOTH(6)
MMROWS16_BOTH(4)
MMROWS16_BOTH(2)
MMROWS16_BOTH(1)
#define MM_ROWS(R, SUF) mm512_rows##R##SUF
#else
#define MM_ROWS(R, SUF) mm_rows##R##SUF
#endif
static void mm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, float* c, int64_t ldc, bool acc) {
  int64_t i = 0;
  for (; i + 6 <= m; i += 6) MM_ROWS(6, )(n, k, a + i * lda, lda, b, ldb, c + i * ldc, ldc, acc);
  if (i + 4 <= m) MM_ROWS(4, )(n, k, a + i * lda, lda, b, ldb, c + i * ldc, ldc, acc), i += 4;
  if (i + 2 <= m) MM_ROWS(2, )(n, k, a + i * lda, lda, b, ldb, c + i * ldc, ldc, acc), i += 2;
  if (i < m) MM_ROWS(1, )(n, k, a + i * lda, lda, b, ldb, c + i * ldc, ldc, acc);
}
/* C[m x n] (+)= A^T B for A stored k x m (row stride lda): the backward's
 * P^T dO and dS^T Q without transposing P or dS first. The same chains of
 * fmas as mm on the transposed copy, so the same results. */
static void mm_at(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                  int64_t ldb, float* c, int64_t ldc, bool acc) {
  int64_t i = 0;
  for (; i + 6 <= m; i += 6) MM_ROWS(6, _at)(n, k, a + i, lda, b, ldb, c + i * ldc, ldc, acc);
  if (i + 4 <= m) MM_ROWS(4, _at)(n, k, a + i, lda, b, ldb, c + i * ldc, ldc, acc), i += 4;
  if (i + 2 <= m) MM_ROWS(2, _at)(n, k, a + i, lda, b, ldb, c + i * ldc, ldc, acc), i += 2;
  if (i < m) MM_ROWS(1, _at)(n, k, a + i, lda, b, ldb, c + i * ldc, ldc, acc);
}
/* max(m, x[0..n)), n a multiple of 8; NaN in x is ignored here (it reaches the output through exp
 * and the sum, as in softmax). */
static float row_max(const float* x, int64_t n, float m) {
  int64_t j = 0;
#if defined(__AVX512F__)
  __m512 w = _mm512_set1_ps(m);
  for (; j + 16 <= n; j += 16) w = _mm512_max_ps(_mm512_loadu_ps(x + j), w);
  m = _mm512_reduce_max_ps(w);
#endif
  __m256 v = _mm256_set1_ps(m);
  for (; j < n; j += 8) v = _mm256_max_ps(_mm256_loadu_ps(x + j), v);
  float l[8];
  _mm256_storeu_ps(l, v);
  for (int q = 0; q < 8; ++q) m = l[q] > m ? l[q] : m;
  return m;
}
#else
/* A's element (i, p) at a[i * ai + p * ap]: mm (ai = lda, ap = 1) and mm_at (ai = 1, ap = lda). */
static void mm_strided(int64_t m, int64_t n, int64_t k, const float* a, int64_t ai, int64_t ap, const float* b,
                       int64_t ldb, float* c, int64_t ldc, bool acc) {
  for (int64_t i = 0; i < m; ++i) {
    float* cr = c + i * ldc;
    if (!acc) memset(cr, 0, (size_t)n * sizeof(float));
    for (int64_t p = 0; p < k; ++p) {
      float av = a[i * ai + p * ap];
      const float* br = b + p * ldb;
      for (int64_t j = 0; j < n; ++j) cr[j] += av * br[j];
    }
  }
}
static void mm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, float* c, int64_t ldc, bool acc) {
  mm_strided(m, n, k, a, lda, 1, b, ldb, c, ldc, acc);
}
static void mm_at(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                  int64_t ldb, float* c, int64_t ldc, bool acc) {
  mm_strided(m, n, k, a, 1, lda, b, ldb, c, ldc, acc);
}
static float row_max(const float* x, int64_t n, float m) {
  for (int64_t j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}
#endif

/* exp(x - sub) for the softmax of a block: d = x - sub (<= 0 but for rounding where sub is at least
 * the row's max; up to TAU, 8, in the transposed forwards, whose reference can trail the max; 2^n
 * is then at most 2^12, far inside float32), t = d log2(e) = n + f with n = round(t), |f| <= 1/2, and 2^f by a degree-5
 * polynomial fitted on [-1/2, 1/2] (relative error 2e-7), times 2^n; with t's own rounding the
 * result was within 1e-6 of exp over d in [-10.5, 0] (measured), and the kernels stay within
 * runtime/tests/test_attention.c's 1e-5 of a float64 reference. That is half
 * the instructions of the exp op's (tpurt_ew_expf: Cody-Waite reduction and overflow handling a
 * softmax never needs); PyTorch's CPU flash attention makes the same trade with its exp_u20.
 * Where t <= -126 the result is 0 (-inf, a masked score, included): those values are below what a
 * sum with exp(0) = 1 in it can see, and computing them would make subnormal numbers, which cost
 * the CPU a microcode assist each (a causal block's masked half made the whole kernel slower).
 * Above -126 every product is normal (n = -126 only with 2^f >= 1); NaN passes through. */
#define EXP2_POLY(FMA, SET1, f)                                                                            \
  FMA(FMA(FMA(FMA(FMA(SET1(1.3266970636323094e-3f), f, SET1(9.675459936261177e-3f)), f,                 \
                  SET1(5.550742521882057e-2f)), f, SET1(2.4022121727466583e-1f)), f,                    \
          SET1(6.931469440460205e-1f)), f, SET1(1.0000001192092896f))
#if defined(__AVX2__) && defined(__FMA__)
static inline __m256 exp_nonpos8(__m256 d) {
  const __m256 t = _mm256_mul_ps(d, _mm256_set1_ps(1.44269504088896341f));
  const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 p = EXP2_POLY(_mm256_fmadd_ps, _mm256_set1_ps, _mm256_sub_ps(t, n));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_cmp_ps(t, _mm256_set1_ps(-126.0f), _CMP_NLE_UQ), _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}
#endif
#if defined(__AVX512F__)
static inline __m512 exp_nonpos16(__m512 d) {
  const __m512 t = _mm512_mul_ps(d, _mm512_set1_ps(1.44269504088896341f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 p = EXP2_POLY(_mm512_fmadd_ps, _mm512_set1_ps, _mm512_sub_ps(t, n));
  return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(t, _mm512_set1_ps(-126.0f), _CMP_NLE_UQ), p, n);
}
#endif

/* x[i] = exp(x[i] - sub) over n (a multiple of 8), returning the sum; every
 * x[i] - sub is <= 0 (sub is at least the row's max) or NaN. */
static float exp_sub_sum(float* x, int64_t n, float sub) {
  int64_t i = 0;
  float s = 0;
#if defined(__AVX512F__)
  __m512 acc16 = _mm512_setzero_ps(), vs16 = _mm512_set1_ps(sub);
  for (; i + 16 <= n; i += 16) {
    __m512 v = exp_nonpos16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vs16));
    _mm512_storeu_ps(x + i, v);
    acc16 = _mm512_add_ps(acc16, v);
  }
  s = _mm512_reduce_add_ps(acc16);
#endif
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc = _mm256_setzero_ps(), vs = _mm256_set1_ps(sub);
  for (; i + 8 <= n; i += 8) {
    __m256 v = exp_nonpos8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
    _mm256_storeu_ps(x + i, v);
    acc = _mm256_add_ps(acc, v);
  }
  float l[8];
  _mm256_storeu_ps(l, acc);
  for (int q = 0; q < 8; ++q) s += l[q];
#else
  for (; i < n; ++i) {
    x[i] = tpurt_ew_expf(x[i] - sub);
    s += x[i];
  }
#endif
  return s;
}

/* ---- strided access ---- */
typedef struct view4_t {
  const char* p;
  tpurt_dtype_t dt;
  int64_t s[4]; /* strides in elements: batch, head, row, col */
} view4_t;

static view4_t view4(const tpurt_tensor_t* t) {
  view4_t v = {(const char*)t->data, t->dtype, {0, 0, 0, 0}};
  for (int d = 0; d < 4; ++d) v.s[d] = t->strides[d];
  return v;
}

/* rows [r0, r0+n) x cols [0, e) of (b, h) into dst (row stride ld, float32),
 * columns e..ld and rows n..rows_pad zero; scaled by `scale`. */
static void load_rows(const view4_t* v, int64_t b, int64_t h, int64_t r0, int64_t n, int64_t e,
                      float* dst, int64_t ld, int64_t rows_pad, float scale) {
  size_t es = tpurt_dtype_size(v->dt);
  for (int64_t r = 0; r < rows_pad; ++r) {
    float* d = dst + r * ld;
    if (r >= n) {
      memset(d, 0, (size_t)ld * sizeof(float));
      continue;
    }
    const char* s = v->p + (size_t)(b * v->s[0] + h * v->s[1] + (r0 + r) * v->s[2]) * es;
    if (v->s[3] == 1 && v->dt == TPURT_DTYPE_FLOAT32) memcpy(d, s, (size_t)e * sizeof(float));
    else if (v->s[3] == 1 && v->dt != TPURT_DTYPE_FLOAT64) tpurt_hv_to_f32(v->dt, s, d, e);
    else
      for (int64_t c = 0; c < e; ++c) d[c] = (float)tpurt_dtype_load_f64(v->dt, s + (size_t)(c * v->s[3]) * es);
    if (scale != 1.0f)
      for (int64_t c = 0; c < e; ++c) d[c] *= scale;
    for (int64_t c = e; c < ld; ++c) d[c] = 0;
  }
}

static void store_row(const tpurt_tensor_t* t, int64_t b, int64_t h, int64_t r, int64_t e,
                      const float* src) {
  size_t es = tpurt_dtype_size(t->dtype);
  char* d = (char*)t->data + (size_t)(b * t->strides[0] + h * t->strides[1] + r * t->strides[2]) * es;
  int64_t cs = t->strides[3];
  if (cs == 1 && t->dtype == TPURT_DTYPE_FLOAT32) memcpy(d, src, (size_t)e * sizeof(float));
  else if (cs == 1 && (t->dtype == TPURT_DTYPE_BFLOAT16 || t->dtype == TPURT_DTYPE_FLOAT16))
    tpurt_hv_from_f32(t->dtype, src, d, e);
  else
    for (int64_t c = 0; c < e; ++c) tpurt_dtype_store_f64(t->dtype, d + (size_t)(c * cs) * es, src[c]);
}

/* Transposes rows x cols 4-byte elements (ld_src apart) into cols x rows (ld_dst apart): floats, or
 * bf16 pairs taken as one unit. Bits are moved, never converted. 16 x 16 blocks in registers where
 * the build has AVX-512 (four rounds of shuffles), the edges one element at a time. */
#if defined(__AVX512F__)
static inline void tr16x16(const float* s, int64_t ls, float* d, int64_t ld) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(s + i * ls);
  for (int i = 0; i < 16; i += 2) t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44), r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44), r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88), t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88), t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 8; ++i)
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88), r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(d + i * ld, r[i]);
}
#endif
typedef uint32_t u32_alias_t __attribute__((may_alias));
static void transpose32_scalar(const u32_alias_t* s, int64_t rows, int64_t cols, int64_t ld_src, u32_alias_t* d,
                               int64_t ld_dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) d[c * ld_dst + r] = s[r * ld_src + c];
}
static void transpose32(const void* src, int64_t rows, int64_t cols, int64_t ld_src, void* dst, int64_t ld_dst) {
  const u32_alias_t* s = (const u32_alias_t*)src;
  u32_alias_t* d = (u32_alias_t*)dst;
  int64_t r0 = 0;
#if defined(__AVX512F__)
  for (; r0 + 16 <= rows; r0 += 16) {
    int64_t c0 = 0;
    for (; c0 + 16 <= cols; c0 += 16)
      tr16x16((const float*)(s + r0 * ld_src + c0), ld_src, (float*)(d + c0 * ld_dst + r0), ld_dst);
    if (c0 < cols) transpose32_scalar(s + r0 * ld_src + c0, 16, cols - c0, ld_src, d + c0 * ld_dst + r0, ld_dst);
  }
#endif
  if (r0 < rows) transpose32_scalar(s + r0 * ld_src, rows - r0, cols, ld_src, d + r0, ld_dst);
}

/* Transposes rows x cols (ld_src) into cols x rows (ld_dst). */
static void transpose(const float* src, int64_t rows, int64_t cols, int64_t ld_src, float* dst,
                      int64_t ld_dst) {
  transpose32(src, rows, cols, ld_src, dst, ld_dst);
}

/* ---- the problem, parsed once ---- */
typedef struct attn_t {
  int64_t B, Hq, Hkv, L, S, E, Ev, group;
  float scale;
  bool causal;
  view4_t q, k, v, mask, dout, o;
  bool has_mask;
  const tpurt_tensor_t *out, *lse, *dq, *dk, *dv;
  /* lse: (B, Hq, L) float32 */
  float* ws;
  size_t ws_floats; /* per thread */
} attn_t;

static float mask_at(const attn_t* a, int64_t b, int64_t h, int64_t i, int64_t j) {
  const view4_t* m = &a->mask;
  return (float)tpurt_dtype_load_f64(m->dt, m->p + (size_t)(b * m->s[0] + h * m->s[1] + i * m->s[2] +
                                                             j * m->s[3]) * tpurt_dtype_size(m->dt));
}

/* Scores of one block: s[i][j] (already q * scale . k) plus the mask; masked
 * entries (causal, or past S) become -inf. */
static void block_mask(const attn_t* a, int64_t b, int64_t h, int64_t i0, int64_t ni, int64_t j0,
                       int64_t nj, float* s, int64_t ld) {
  const view4_t* m = &a->mask;
  size_t mes = a->has_mask ? tpurt_dtype_size(m->dt) : 0;
  float mrow[BKT > BK ? BKT : BK];
  for (int64_t i = 0; i < ni; ++i) {
    float* row = s + i * ld;
    if (a->has_mask) {
      const char* mp = m->p + (size_t)(b * m->s[0] + h * m->s[1] + (i0 + i) * m->s[2] + j0 * m->s[3]) * mes;
      if (m->s[3] == 1 && m->dt == TPURT_DTYPE_FLOAT32) {
        for (int64_t j = 0; j < nj; ++j) row[j] += ((const float*)mp)[j];
      } else if (m->s[3] == 1 && (m->dt == TPURT_DTYPE_BFLOAT16 || m->dt == TPURT_DTYPE_FLOAT16)) {
        tpurt_hv_to_f32(m->dt, mp, mrow, nj);
        for (int64_t j = 0; j < nj; ++j) row[j] += mrow[j];
      } else {
        for (int64_t j = 0; j < nj; ++j) row[j] += mask_at(a, b, h, i0 + i, j0 + j);
      }
    }
    if (a->causal)
      for (int64_t j = 0; j < nj; ++j)
        if (j0 + j > i0 + i) row[j] = -INFINITY;
    for (int64_t j = nj; j < ld; ++j) row[j] = -INFINITY;
  }
}

/* Columns of kv blocks a query block [i0, i0+ni) sees. */
static int64_t kv_end(const attn_t* a, int64_t i0, int64_t ni) {
  return a->causal ? imin64(a->S, i0 + ni) : a->S;
}

static float* lse_ptr(const attn_t* a, int64_t b, int64_t h, int64_t i) {
  const tpurt_tensor_t* t = a->lse;
  return (float*)t->data + b * t->strides[0] + h * t->strides[1] + i * t->strides[2];
}

/* ---- forward: one task per (b, h, query block), on transposed scores ----
 * A block's scores are computed as S^T = K Q^T (one row per key, the BQ queries
 * across the lanes), so each query row's softmax state (running max, sum,
 * correction) is a vector over lanes: the max over a block is an elementwise
 * max down its rows, the sums elementwise adds, the corrections one vector exp
 * for the whole block, and no row needs a horizontal reduction. The output is
 * kept transposed too, O^T += V^T P^T, so its rescale by the corrections is
 * elementwise; it is transposed back once per query block. Each thread keeps the
 * float32 K and V rows of the last (batch, kv head) it saw, so consecutive
 * query blocks and the query heads of a group convert them once. A causal
 * block computes only the keys its queries can see (a 128-key block on the
 * diagonal of a 64-query block, half of it). */
#if defined(__AVX512F__)
typedef __m512 cvec_t;
#define CV_W 16
#define CV_LD _mm512_loadu_ps
#define CV_ST _mm512_storeu_ps
#define CV_SET1 _mm512_set1_ps
#define CV_MAX _mm512_max_ps
#define CV_ADD _mm512_add_ps
#define CV_SUB _mm512_sub_ps
#define CV_MUL _mm512_mul_ps
#define CV_EXP exp_nonpos16
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 cvec_t;
#define CV_W 8
#define CV_LD _mm256_loadu_ps
#define CV_ST _mm256_storeu_ps
#define CV_SET1 _mm256_set1_ps
#define CV_MAX _mm256_max_ps
#define CV_ADD _mm256_add_ps
#define CV_SUB _mm256_sub_ps
#define CV_MUL _mm256_mul_ps
#define CV_EXP exp_nonpos8
#endif

/* m[i] = max(m[i], scale * max over rows j < rows of st[j][i]) (st rows BQ floats apart; scale > 0,
 * so the max of the scaled scores is the scaled max); NaN is ignored here (it reaches the output
 * through exp and the sum). */
static void cols_max(const float* st, int64_t rows, float scale, float* m) {
#ifdef CV_W
  for (int64_t c = 0; c < BQ; c += CV_W) {
    cvec_t w = CV_SET1(-INFINITY);
    for (int64_t j = 0; j < rows; ++j) w = CV_MAX(CV_LD(st + j * BQ + c), w);
    CV_ST(m + c, CV_MAX(CV_MUL(w, CV_SET1(scale)), CV_LD(m + c)));
  }
#else
  for (int64_t i = 0; i < BQ; ++i) {
    float w = -INFINITY;
    for (int64_t j = 0; j < rows; ++j) w = st[j * BQ + i] > w ? st[j * BQ + i] : w;
    m[i] = w * scale > m[i] ? w * scale : m[i];
  }
#endif
}

/* TAU: a query row's reference for its exps (its running max in the textbook online softmax) is
 * raised only when a block's max passes it by more than TAU (natural log units). The exps then stay
 * below e^TAU (about 3e3: far from float32's range, and bf16 rounds relatively either way), and the
 * rescale of O^T, a pass over it per block, is skipped for every block where no row's max moved that
 * far: nearly all but the first. Any reference gives the same softmax; the first visible score
 * always sets it (-inf + TAU is -inf). */
#define TAU 8.0f
static void cols_exp_sum(float* st, int64_t rows, const float* sub, float* l);

/* One block's update of the rows' softmax state: mnew holds max(mx, the block's max). Raises mx
 * where mnew passes it by TAU, scales l by exp(old - new) there (corr: the factors, 1 elsewhere),
 * sets msub to the reference to subtract (0 for a row that has seen nothing: its exps are
 * exp(-inf) = 0). Returns whether any row's reference moved (O^T then needs corr). */
static bool softmax_step(float* mx, const float* mnew, float* l, float* corr, float* msub) {
  bool any = false;
  for (int64_t i = 0; i < BQ; ++i) {
    bool up = mnew[i] > mx[i] + TAU;
    corr[i] = up ? mx[i] - mnew[i] : 0.0f; /* old - new: < 0, -inf where nothing was seen before */
    if (up) mx[i] = mnew[i], any = true;
    msub[i] = mx[i] == -INFINITY ? 0.0f : mx[i];
  }
  if (any) {
    float zero[BQ], sums[BQ];
    memset(zero, 0, sizeof(zero));
    memset(sums, 0, sizeof(sums));
    cols_exp_sum(corr, 1, zero, sums);
    for (int64_t i = 0; i < BQ; ++i) l[i] *= corr[i];
  }
  return any;
}
/* out[j][i] = exp(st[j][i] - sub[i]) over rows j < rows (out may be st), adding each column's sum
 * to l[i]; every st[j][i] - sub[i] is <= TAU or NaN. bmax (where not NULL): each column's max of
 * st, from the same pass. */
static void cols_exp_to(const float* st, int64_t rows, const float* sub, float* l, float* bmax, float* out) {
#ifdef CV_W
  for (int64_t c = 0; c < BQ; c += CV_W) {
    cvec_t vs = CV_LD(sub + c), acc = CV_LD(l + c), w = CV_SET1(-INFINITY);
    for (int64_t j = 0; j < rows; ++j) {
      cvec_t s = CV_LD(st + j * BQ + c);
      w = CV_MAX(s, w);
      cvec_t v = CV_EXP(CV_SUB(s, vs));
      CV_ST(out + j * BQ + c, v);
      acc = CV_ADD(acc, v);
    }
    CV_ST(l + c, acc);
    if (bmax) CV_ST(bmax + c, w);
  }
#else
  if (bmax)
    for (int64_t i = 0; i < BQ; ++i) bmax[i] = -INFINITY;
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t i = 0; i < BQ; ++i) {
      float s = st[j * BQ + i];
      if (bmax) bmax[i] = s > bmax[i] ? s : bmax[i];
      out[j * BQ + i] = tpurt_ew_expf(s - sub[i]);
      l[i] += out[j * BQ + i];
    }
#endif
}
static void cols_exp_sum(float* st, int64_t rows, const float* sub, float* l) {
  cols_exp_to(st, rows, sub, l, NULL, st);
}

/* x[r][i] *= f[i] for rows r < rows (rows BQ floats apart). */
static void cols_scale(float* x, int64_t rows, const float* f) {
#ifdef CV_W
  for (int64_t c = 0; c < BQ; c += CV_W) {
    cvec_t vf = CV_LD(f + c);
    for (int64_t r = 0; r < rows; ++r) CV_ST(x + r * BQ + c, CV_MUL(CV_LD(x + r * BQ + c), vf));
  }
#else
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < BQ; ++i) x[r * BQ + i] *= f[i];
#endif
}

/* Transposed scores of keys [j0, j0 + rows) against queries [i0, i0 + ni): the mask added and the
 * causally hidden entries set to -inf. tmp: BKT x BQ floats, for the mask's block transposed
 * (16 of its rows at a time, so the adds run along the lanes). */
static void block_mask_t(const attn_t* a, int64_t b, int64_t h, int64_t i0, int64_t ni, int64_t j0,
                         int64_t rows, float* st, float* tmp) {
  if (a->has_mask) {
    const view4_t* m = &a->mask;
    size_t mes = tpurt_dtype_size(m->dt);
    float mrows[16 * BKT];
    for (int64_t ic = 0; ic < ni; ic += 16) {
      int64_t nr = imin64(16, ni - ic);
      for (int64_t r = 0; r < nr; ++r) {
        int64_t i = ic + r;
        const char* mp = m->p + (size_t)(b * m->s[0] + h * m->s[1] + (i0 + i) * m->s[2] + j0 * m->s[3]) * mes;
        float* mrow = mrows + r * BKT;
        if (m->s[3] == 1 && m->dt == TPURT_DTYPE_FLOAT32) memcpy(mrow, mp, (size_t)rows * sizeof(float));
        else if (m->s[3] == 1 && (m->dt == TPURT_DTYPE_BFLOAT16 || m->dt == TPURT_DTYPE_FLOAT16))
          tpurt_hv_to_f32(m->dt, mp, mrow, rows);
        else
          for (int64_t j = 0; j < rows; ++j) mrow[j] = mask_at(a, b, h, i0 + i, j0 + j);
      }
      transpose32(mrows, nr, rows, BKT, tmp + ic, BQ);
    }
    for (int64_t j = 0; j < rows; ++j)
      for (int64_t i = 0; i < ni; ++i) st[j * BQ + i] += tmp[j * BQ + i];
  }
  if (a->causal) /* query i0 + i sees key j0 + j where j0 + j <= i0 + i */
    for (int64_t j = 0; j < rows; ++j)
      for (int64_t i = 0; i < imin64(j0 + j - i0, BQ); ++i) st[j * BQ + i] = -INFINITY;
}

/* The rows of (b, h) in v where they can be read in place: float32, columns contiguous, cols a
 * multiple of 8 (the products' padded width); *ld their stride. NULL otherwise. */
static const float* rows_in_place(const view4_t* v, int64_t b, int64_t h, int64_t cols, int64_t* ld) {
  if (v->dt != TPURT_DTYPE_FLOAT32 || v->s[3] != 1 || cols % 8 != 0) return NULL;
  *ld = v->s[2];
  return (const float*)v->p + b * v->s[0] + h * v->s[1];
}

/* Q^T of rows [i0, i0 + ni) of float32 (b, h) with contiguous columns, scaled: qt[e][i], E8 x BQ,
 * zeros past ni and e; false (nothing written) for other layouts. */
static bool load_qt(const view4_t* v, int64_t b, int64_t h, int64_t i0, int64_t ni, int64_t e, int64_t E8,
                    float scale, float* qt) {
  if (v->dt != TPURT_DTYPE_FLOAT32 || v->s[3] != 1) return false;
  if (ni < BQ || e < E8) memset(qt, 0, (size_t)(E8 * BQ) * sizeof(float));
  transpose32((const float*)v->p + b * v->s[0] + h * v->s[1] + i0 * v->s[2], ni, e, v->s[2], qt, BQ);
  for (int64_t x = 0; x < e * BQ; ++x) qt[x] *= scale;
  return true;
}

/* ROWS_MAX: query blocks of at most this many rows (a decode step, a sequence's last rows) take
 * fwd_rows: the transposed form computes all BQ query lanes whatever ni is (measured with 1 x 8 heads x
 * 1024 keys x 64: 16 queries 0.39 ms in rows against 1.0 transposed, 56 queries 1.01 against 1.04). */
enum { ROWS_MAX = 48 };

/* One block of ni <= ROWS_MAX queries in row layout, the textbook online softmax: S = Q K^T with
 * a query per row (kt: K transposed, one E8 x BKT panel per key block), a row's max and exps along
 * it, O += P V. q: ni x E8, s: ni x BKT, o: ni x Ev8, mx and l: ni floats. */
/* The row path's key block: BKT, or for fewer keys their count rounded up to 8, so that a decode
 * step over 48 keys scores and exponentiates 48 columns, not 128 (and K^T's panel is that wide). */
static int64_t rows_block(const attn_t* a) { return a->S < BKT ? pad8(a->S) : BKT; }

static void fwd_rows(const attn_t* a, int64_t b, int64_t h, int64_t i0, int64_t ni, const float* kt,
                     const float* vp, int64_t ldv, float* q, float* s, float* o, float* mx, float* l) {
  int64_t E8 = pad8(a->E), Ev8 = pad8(a->Ev), bw = rows_block(a);
  load_rows(&a->q, b, h, i0, ni, a->E, q, E8, ni, a->scale);
  memset(o, 0, (size_t)(ni * Ev8) * sizeof(float));
  for (int64_t i = 0; i < ni; ++i) mx[i] = -INFINITY, l[i] = 0;
  int64_t jend = kv_end(a, i0, ni);
  for (int64_t j0 = 0; j0 < jend; j0 += bw) {
    int64_t nj = imin64(bw, a->S - j0);
    mm(ni, bw, E8, q, E8, kt + j0 * E8, bw, s, bw, false);
    if (a->has_mask || nj < bw || (a->causal && j0 + bw - 1 > i0)) block_mask(a, b, h, i0, ni, j0, nj, s, bw);
    for (int64_t i = 0; i < ni; ++i) {
      float* row = s + i * bw;
      float m = row_max(row, bw, mx[i]);
      if (m == -INFINITY) { /* nothing visible yet in this row */
        memset(row, 0, bw * sizeof(float));
        continue;
      }
      float corr = mx[i] == -INFINITY ? 0.0f : tpurt_ew_expf(mx[i] - m);
      l[i] = l[i] * corr + exp_sub_sum(row, bw, m);
      if (corr != 1.0f)
        for (int64_t c = 0; c < Ev8; ++c) o[i * Ev8 + c] *= corr;
      mx[i] = m;
    }
    mm(ni, Ev8, nj, s, bw, vp + j0 * ldv, ldv, o, Ev8, true);
  }
  for (int64_t i = 0; i < ni; ++i) {
    /* a row that sees nothing (fully masked) gives zeros, as SDPA's math path does */
    float inv = l[i] > 0 ? 1.0f / l[i] : 0.0f;
    for (int64_t c = 0; c < a->Ev; ++c) o[i * Ev8 + c] *= inv;
    store_row(a->out, b, h, i0 + i, a->Ev, o + i * Ev8);
    *lse_ptr(a, b, h, i0 + i) = l[i] > 0 ? mx[i] + logf(l[i]) : -INFINITY;
  }
}

static void fwd_tasks(void* u, int64_t t0, int64_t t1, int tid) {
  const attn_t* a = (const attn_t*)u;
  int64_t E8 = pad8(a->E), Ev8 = pad8(a->Ev), nqb = (a->L + BQ - 1) / BQ;
  float* w = a->ws + (size_t)tid * a->ws_floats;
  float* qt = w;                /* Q^T, scaled: E8 x BQ */
  float* kr = qt + E8 * BQ;     /* K rows: S x E8 */
  float* vr = kr + a->S * E8;   /* V rows: S x Ev8 */
  float* st = vr + a->S * Ev8;  /* S^T: BKT x BQ */
  float* pt = st + BKT * BQ;    /* P^T: BKT x BQ */
  float* ot = pt + BKT * BQ;    /* O^T: Ev8 x BQ */
  float* ob = ot + Ev8 * BQ;    /* Q, then O, as rows: BQ x max(E8, Ev8) */
  float* mx = ob + BQ * (E8 > Ev8 ? E8 : Ev8); /* BQ each: running max, sum, correction, max to subtract */
  float* l = mx + BQ;
  float* corr = l + BQ;
  float* msub = corr + BQ;
  float* kt = msub + BQ;        /* for fwd_rows: K^T, one E8 x BKT panel per key block */
  int64_t cached = -1, kt_cached = -1, ldk = E8, ldv = Ev8;
  const float *kp = kr, *vp = vr;
  for (int64_t t = t0; t < t1; ++t) {
    /* a head's query blocks alternate from both ends (0, last, 1, last - 1, ...): causal blocks
     * cost in proportion to their index, and a thread given a contiguous run of tasks (one head
     * split over two threads, say) then gets an even share of the work */
    int64_t r = t % nqb, qb = (r & 1) ? nqb - 1 - r / 2 : r / 2;
    int64_t b = t / (a->Hq * nqb), h = (t / nqb) % a->Hq, i0 = qb * BQ;
    int64_t hk = h / a->group, ni = imin64(BQ, a->L - i0);
    if (cached != b * a->Hkv + hk) {
      cached = b * a->Hkv + hk;
      /* float32 rows that are already contiguous and a multiple of 8 long are used in place */
      kp = rows_in_place(&a->k, b, hk, a->E, &ldk);
      if (!kp) load_rows(&a->k, b, hk, 0, a->S, a->E, kr, E8, a->S, 1.0f), kp = kr, ldk = E8;
      vp = rows_in_place(&a->v, b, hk, a->Ev, &ldv);
      if (!vp) load_rows(&a->v, b, hk, 0, a->S, a->Ev, vr, Ev8, a->S, 1.0f), vp = vr, ldv = Ev8;
    }
    if (ni <= ROWS_MAX) {
      if (kt_cached != cached) {
        kt_cached = cached;
        int64_t bw = rows_block(a);
        for (int64_t j0 = 0; j0 < a->S; j0 += bw) {
          int64_t nj = imin64(bw, a->S - j0);
          if (nj < bw) memset(kt + j0 * E8, 0, (size_t)(E8 * bw) * sizeof(float));
          transpose32(kp + j0 * ldk, nj, E8, ldk, kt + j0 * E8, bw);
        }
      }
      fwd_rows(a, b, h, i0, ni, kt, vp, ldv, ob, st, ot, mx, l);
      continue;
    }
    if (!load_qt(&a->q, b, h, i0, ni, a->E, E8, a->scale, qt)) {
      load_rows(&a->q, b, h, i0, ni, a->E, ob, E8, BQ, a->scale);
      transpose(ob, BQ, E8, E8, qt, BQ);
    }
    memset(ot, 0, (size_t)(Ev8 * BQ) * sizeof(float));
    for (int64_t i = 0; i < BQ; ++i) mx[i] = -INFINITY, l[i] = 0;
    int64_t jend = kv_end(a, i0, ni);
    float mnew[BQ];
    for (int64_t j0 = 0; j0 < jend; j0 += BKT) {
      int64_t rows = imin64(BKT, jend - j0); /* keys past jend: hidden from every query of the block */
      /* causal: keys up to i0 are seen by every query of the block; past it, a group of 16 keys is
       * hidden from the queries before its first key, and the products skip those 16-query chunks
       * (what they leave in st is masked below) */
      int64_t rfull = a->causal ? imin64(rows, i0 - j0 + 1 > 0 ? i0 - j0 + 1 : 0) : rows;
      if (rfull > 0) mm(rfull, BQ, E8, kp + j0 * ldk, ldk, qt, BQ, st, BQ, false);
      for (int64_t j = rfull; j < rows; j += 16) {
        int64_t c0 = (j0 + j - i0) / 16 * 16;
        mm(imin64(16, rows - j), BQ - c0, E8, kp + (j0 + j) * ldk, ldk, qt + c0, BQ, st + j * BQ + c0, BQ, false);
      }
      /* a whole block at or below the diagonal, with no mask, needs no masking */
      if (a->has_mask || (a->causal && j0 + rows - 1 > i0)) block_mask_t(a, b, h, i0, ni, j0, rows, st, pt);
      /* once every row has a reference: the exps against it, the block's max from the same pass,
       * and a second pass only where that max passes a reference by TAU (rarely after the first
       * block); P^T goes to pt, so st survives for it */
      bool spec = true, done = false;
      for (int64_t i = 0; i < BQ; ++i) spec = spec && mx[i] != -INFINITY;
      memcpy(mnew, mx, sizeof(mnew));
      if (spec) {
        float lsave[BQ], bmax[BQ];
        memcpy(lsave, l, sizeof(lsave));
        cols_exp_to(st, rows, msub, l, bmax, pt);
        done = true;
        for (int64_t i = 0; i < BQ; ++i) {
          done = done && !(bmax[i] > mx[i] + TAU);
          mnew[i] = bmax[i] > mnew[i] ? bmax[i] : mnew[i];
        }
        if (!done) memcpy(l, lsave, sizeof(lsave));
      } else {
        cols_max(st, rows, 1.0f, mnew);
      }
      if (!done) {
        if (softmax_step(mx, mnew, l, corr, msub)) cols_scale(ot, Ev8, corr);
        cols_exp_to(st, rows, msub, l, NULL, pt);
      }
      if (rfull > 0) mm_at(Ev8, BQ, rfull, vp + j0 * ldv, ldv, pt, BQ, ot, BQ, true);
      for (int64_t j = rfull; j < rows; j += 16) {
        int64_t c0 = (j0 + j - i0) / 16 * 16;
        mm_at(Ev8, BQ - c0, imin64(16, rows - j), vp + (j0 + j) * ldv, ldv, pt + j * BQ + c0, BQ, ot + c0, BQ, true);
      }
    }
    /* a row that sees nothing (fully masked) gives zeros, as SDPA's math path does */
    for (int64_t i = 0; i < BQ; ++i) corr[i] = l[i] > 0 ? 1.0f / l[i] : 0.0f;
    cols_scale(ot, Ev8, corr);
    const tpurt_tensor_t* out = a->out;
    if (out->dtype == TPURT_DTYPE_FLOAT32 && out->strides[3] == 1) { /* straight into the output's rows */
      transpose32(ot, a->Ev, ni, BQ,
                  (float*)out->data + b * out->strides[0] + h * out->strides[1] + i0 * out->strides[2], out->strides[2]);
    } else {
      transpose(ot, Ev8, BQ, BQ, ob, Ev8);
      for (int64_t i = 0; i < ni; ++i) store_row(out, b, h, i0 + i, a->Ev, ob + i * Ev8);
    }
    for (int64_t i = 0; i < ni; ++i) *lse_ptr(a, b, h, i0 + i) = l[i] > 0 ? mx[i] + logf(l[i]) : -INFINITY;
  }
}

/* ---- forward on AMX tiles (bf16 q, k, v where the GEMM's bf16 path is AMX) ----
 * The same blocks and online softmax as fwd_tasks, with both block products
 * on tiles: S = Q K^T from bf16 Q rows and K packed as bf16 pairs along the
 * head dim, then O += P V with P rounded to bf16 (as PyTorch CPU's flash
 * kernel does) and V packed as pairs along the keys; the softmax, its sums
 * and O stay float32. A tile product covers 32 x 32 outputs in four 16 x 16
 * tiles (two of A, two of B), so the head dims are padded to 32 with zeros. */
#if defined(__x86_64__) && defined(__GNUC__) && (__GNUC__ >= 11 || defined(__clang__))
#define ATTN_HAVE_AMX 1
#include <immintrin.h>
#endif

static inline int64_t pad32(int64_t x) { return (x + 31) & ~(int64_t)31; }

static bool use_amx(const attn_t* a) {
#ifdef ATTN_HAVE_AMX
  return a->q.dt == TPURT_DTYPE_BFLOAT16 && a->k.dt == TPURT_DTYPE_BFLOAT16 && a->v.dt == TPURT_DTYPE_BFLOAT16 &&
         tpurt_gemm_bf16dp_mode() == 3;
#else
  (void)a;
  return false;
#endif
}

#ifdef ATTN_HAVE_AMX
static inline uint16_t at16(const view4_t* v, int64_t b, int64_t h, int64_t r, int64_t c) {
  return ((const uint16_t*)v->p)[b * v->s[0] + h * v->s[1] + r * v->s[2] + c * v->s[3]];
}

/* Rows [0, rows) x cols [0, cols) of (b, h) in view v as pairs along the
 * columns, per block of BK rows: [CP / 2][BK][2] (pair row q holds columns
 * 2q, 2q + 1 of each row), zeros past rows and cols. Keys this way are the B
 * operand of Q K^T; values, of dO V^T. */
static void pack_col_pairs(const view4_t* v, int64_t b, int64_t h, int64_t rows, int64_t cols, int64_t CP,
                           uint16_t* out) {
  for (int64_t r0 = 0; r0 < rows; r0 += BK) {
    uint16_t* blk = out + (r0 / BK) * CP * BK;
    for (int64_t j = 0; j < BK; ++j) {
      int64_t r = r0 + j;
      if (r < rows && v->s[3] == 1 && (cols & 1) == 0) {
        const uint16_t* row = (const uint16_t*)v->p + b * v->s[0] + h * v->s[1] + r * v->s[2];
        for (int64_t q = 0; q < cols / 2; ++q) memcpy(blk + (q * BK + j) * 2, row + 2 * q, 4);
        for (int64_t q = cols / 2; q < CP / 2; ++q) memset(blk + (q * BK + j) * 2, 0, 4);
        continue;
      }
      for (int64_t e = 0; e < CP; ++e)
        blk[((e / 2) * BK + j) * 2 + (e & 1)] = r < rows && e < cols ? at16(v, b, h, r, e) : 0;
    }
  }
}

/* The same rows as pairs along the rows: [RP / 2][CP][2], zeros past rows and
 * cols. Values this way are the B operand of P V; keys, of dS K; queries, of
 * dS^T Q; dO, of P^T dO. */
static void pack_row_pairs(const view4_t* v, int64_t b, int64_t h, int64_t rows, int64_t RP, int64_t cols,
                           int64_t CP, uint16_t* out) {
  int64_t r0 = 0;
  if (v->s[3] == 1 && cols % 32 == 0) /* two whole rows at a time, 32 pairs per step */
    for (; r0 + 2 <= rows; r0 += 2) {
      const uint16_t* e = (const uint16_t*)v->p + b * v->s[0] + h * v->s[1] + r0 * v->s[2];
      for (int64_t c = 0; c < cols; c += 32) tpurt_hv_u16_pairs32(e + c, e + v->s[2] + c, out + r0 * CP + 2 * c);
      memset(out + r0 * CP + 2 * cols, 0, (size_t)(CP - cols) * 4);
    }
  for (int64_t r = r0; r < RP; ++r) {
    uint16_t* d = out + (r / 2) * CP * 2 + (r & 1);
    int64_t c = 0;
    if (r < rows) {
      const uint16_t* row = (const uint16_t*)v->p + b * v->s[0] + h * v->s[1] + r * v->s[2];
      if (v->s[3] == 1)
        for (; c < cols; ++c) d[2 * c] = row[c];
      for (; c < cols; ++c) d[2 * c] = at16(v, b, h, r, c);
    }
    for (; c < CP; ++c) d[2 * c] = 0;
  }
}

/* Rows [r0, r0 + n) of (b, h) as bf16 rows of CP columns, rows n..nrows and
 * columns past cols zero: the A operand of a product. */
static void pack_rows(const view4_t* v, int64_t b, int64_t h, int64_t r0, int64_t n, int64_t cols, int64_t CP,
                      int64_t nrows, uint16_t* out) {
  for (int64_t i = 0; i < nrows; ++i) {
    uint16_t* d = out + i * CP;
    int64_t e = 0;
    if (i < n && v->s[3] == 1) {
      memcpy(d, (const uint16_t*)v->p + b * v->s[0] + h * v->s[1] + (r0 + i) * v->s[2], (size_t)cols * 2);
      e = cols;
    }
    for (; i < n && e < cols; ++e) d[e] = at16(v, b, h, r0 + i, e);
    for (; e < CP; ++e) d[e] = 0;
  }
}

/* C[M x N] (acc: +)= A[M x K] . B: A bf16 rows (lda elements apart), B bf16
 * pairs along K ([K / 2][N][2], pair rows ldb elements apart), C float32 (ldc
 * apart); M, N and K multiples of 32. Four 16 x 16 C tiles at a time. */
__attribute__((target("amx-tile,amx-bf16"))) static void amx_mm(int64_t M, int64_t N, int64_t K, const uint16_t* A,
                                                                int64_t lda, const uint16_t* B, int64_t ldb,
                                                                float* C, int64_t ldc, bool acc) {
  for (int64_t ii = 0; ii < M; ii += 32)
    for (int64_t jj = 0; jj < N; jj += 32) {
      float* c0 = C + ii * ldc + jj;
      float* c1 = C + (ii + 16) * ldc + jj;
      if (acc) {
        _tile_loadd(0, c0, ldc * 4);
        _tile_loadd(1, c0 + 16, ldc * 4);
        _tile_loadd(2, c1, ldc * 4);
        _tile_loadd(3, c1 + 16, ldc * 4);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int64_t k0 = 0; k0 < K; k0 += 32) {
        _tile_loadd(4, A + ii * lda + k0, lda * 2);
        _tile_loadd(5, A + (ii + 16) * lda + k0, lda * 2);
        const uint16_t* bp = B + (k0 / 2) * ldb + jj * 2;
        _tile_loadd(6, bp, ldb * 2);
        _tile_loadd(7, bp + 32, ldb * 2);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, c0, ldc * 4);
      _tile_stored(1, c0 + 16, ldc * 4);
      _tile_stored(2, c1, ldc * 4);
      _tile_stored(3, c1 + 16, ldc * 4);
    }
}

/* Floats of one thread's workspace for fwd_tasks_amx. */
static size_t amx_ws_floats(const attn_t* a) {
  int64_t EP = pad32(a->E), EvP = pad32(a->Ev), Sp = (a->S + BKT - 1) / BKT * BKT;
  return (size_t)(2 * BKT * BQ + 2 * EvP * BQ + 4 * BQ + (EP * BQ + BKT * BQ + 2 * BQ + Sp * EP + 2 * EvP * Sp) / 2 + 64);
}

/* Rows [i0, i0 + ni) x cols [0, cols) of (b, h) in view v as pairs along the columns, [CP / 2][BQ][2],
 * zeros past ni and cols: queries as the B operand of S^T = K Q^T. */
static void pack_q_pairs(const view4_t* v, int64_t b, int64_t h, int64_t i0, int64_t ni, int64_t cols, int64_t CP,
                         uint16_t* out) {
  if (ni < BQ || cols < CP) memset(out, 0, (size_t)(CP * BQ) * 2);
  if (v->s[3] == 1 && (cols & 1) == 0 && (v->s[2] & 1) == 0) { /* the rows' pairs as 4-byte units, transposed */
    transpose32((const uint16_t*)v->p + b * v->s[0] + h * v->s[1] + i0 * v->s[2], ni, cols / 2, v->s[2] / 2, out, BQ);
    return;
  }
  for (int64_t i = 0; i < ni; ++i) {
    if (v->s[3] == 1 && (cols & 1) == 0) {
      const uint16_t* row = (const uint16_t*)v->p + b * v->s[0] + h * v->s[1] + (i0 + i) * v->s[2];
      for (int64_t q = 0; q < cols / 2; ++q) memcpy(out + (q * BQ + i) * 2, row + 2 * q, 4);
      continue;
    }
    for (int64_t e = 0; e < cols; ++e) out[((e / 2) * BQ + i) * 2 + (e & 1)] = at16(v, b, h, i0 + i, e);
  }
}

/* The rows [0, rows) x cols [0, cols) of (b, h) transposed: out[c][r], CP x RP (RP even), zeros
 * past rows and cols; values as the A operand of O^T += V^T P^T. The rows as pairs along the rows
 * (tmp, RP x CP) are, taken as 4-byte units, the transpose's pairs along its rows. */
static void pack_transposed(const view4_t* v, int64_t b, int64_t h, int64_t rows, int64_t RP, int64_t cols,
                            int64_t CP, uint16_t* tmp, uint16_t* out) {
  pack_row_pairs(v, b, h, rows, RP, cols, CP, tmp);
  transpose32(tmp, RP / 2, CP, CP, out, RP / 2);
}

/* cols_exp_sum over rows j < rows (even), P^T then written as bf16 pairs along the rows,
 * out[j / 2][i][2]: the B operand of O^T += V^T P^T (tmp: 2 x BQ bf16 where the build lacks
 * AVX-512 BW). The sums are of the float32 exps. */
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define EXP_PAIRS_MAX 1 /* cols_exp_pairs leaves st as it was and can give the block's max */
#endif
static void cols_exp_pairs(float* st, int64_t rows, float scale, const float* sub, float* l, float* bmax,
                           uint16_t* out, uint16_t* tmp) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  const __m512 vsc = _mm512_set1_ps(scale);
  static const uint16_t zip[32] __attribute__((aligned(64))) = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                                                 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i vz = _mm512_load_si512(zip);
  (void)tmp;
  for (int64_t c = 0; c < BQ; c += 16) {
    __m512 vs = _mm512_loadu_ps(sub + c), acc = _mm512_loadu_ps(l + c), w = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < rows; j += 2) {
      __m512 s0 = _mm512_loadu_ps(st + j * BQ + c), s1 = _mm512_loadu_ps(st + (j + 1) * BQ + c);
      w = _mm512_max_ps(s1, _mm512_max_ps(s0, w));
      __m512 v0 = exp_nonpos16(_mm512_fmsub_ps(s0, vsc, vs));
      __m512 v1 = exp_nonpos16(_mm512_fmsub_ps(s1, vsc, vs));
      acc = _mm512_add_ps(_mm512_add_ps(acc, v0), v1);
#if defined(__AVX512BF16__)
      /* the exps are 0 or normal (exp_nonpos16 flushes what would be subnormal), so vcvtne2ps2bf16
       * rounds them as tpurt_hv_bf16x32_pack would, without its subnormal check */
      __m512i pk = (__m512i)_mm512_cvtne2ps_pbh(v1, v0);
#else
      __m512i pk = tpurt_hv_bf16x32_pack(v0, v1);
#endif
      _mm512_storeu_si512(out + j * BQ + 2 * c, _mm512_permutexvar_epi16(vz, pk));
    }
    _mm512_storeu_ps(l + c, acc);
    if (bmax) _mm512_storeu_ps(bmax + c, _mm512_mul_ps(w, vsc));
  }
#else
  (void)bmax;
  if (scale != 1.0f)
    for (int64_t x = 0; x < rows * BQ; ++x) st[x] *= scale;
  cols_exp_sum(st, rows, sub, l);
  for (int64_t j = 0; j < rows; j += 2) {
    tpurt_hv_f32_to_bf16(st + j * BQ, tmp, 2 * BQ);
    for (int64_t c = 0; c < BQ; c += 32) tpurt_hv_u16_pairs32(tmp + c, tmp + BQ + c, out + j * BQ + 2 * c);
  }
#endif
}

/* The transposed forward (fwd_tasks) with both block products on tiles: S^T = K Q^T from bf16 K
 * rows and Q packed as pairs along the head dim, then O^T += V^T P^T with P rounded to bf16 (as
 * PyTorch CPU's flash kernel does) and packed as pairs along the keys; the softmax, its sums and
 * O stay float32. A tile product covers 32 x 32 outputs in four 16 x 16 tiles, so the head dims
 * and the keys of a block are padded to 32 (keys past the last visible one are masked). */
static void fwd_tasks_amx(void* u, int64_t t0, int64_t t1, int tid) {
  const attn_t* a = (const attn_t*)u;
  int64_t EP = pad32(a->E), EvP = pad32(a->Ev), nqb = (a->L + BQ - 1) / BQ;
  int64_t Sp = (a->S + BKT - 1) / BKT * BKT;
  float* st = a->ws + (size_t)tid * a->ws_floats; /* S^T: BKT x BQ */
  float* mt = st + BKT * BQ;                      /* a mask block, transposed: BKT x BQ */
  float* ot = mt + BKT * BQ;                      /* O^T: EvP x BQ */
  float* ob = ot + EvP * BQ;                      /* O rows: BQ x EvP */
  float* mx = ob + BQ * EvP;                      /* BQ each: running max, sum, correction, max to subtract */
  float* l = mx + BQ;
  float* corr = l + BQ;
  float* msub = corr + BQ;
  uint16_t* qp = (uint16_t*)(msub + BQ);          /* Q as pairs along the head dim: [EP/2][BQ][2] */
  uint16_t* pp = qp + EP * BQ;                    /* P^T as pairs along the keys: [BKT/2][BQ][2] */
  uint16_t* p16 = pp + BKT * BQ;                  /* two rows of P^T in bf16 */
  uint16_t* kr = p16 + 2 * BQ;                    /* K rows: Sp x EP */
  uint16_t* vt = kr + Sp * EP;                    /* V^T: EvP x Sp, then Sp x EvP to build it */
  int64_t cached = -1, ldk = EP;
  const uint16_t* kp = kr;
  tpurt_gemm_amx_tiles_begin();
  for (int64_t t = t0; t < t1; ++t) {
    int64_t r = t % nqb, qbi = (r & 1) ? nqb - 1 - r / 2 : r / 2; /* from both ends, as fwd_tasks */
    int64_t b = t / (a->Hq * nqb), h = (t / nqb) % a->Hq, i0 = qbi * BQ;
    int64_t hk = h / a->group, ni = imin64(BQ, a->L - i0);
    if (cached != b * a->Hkv + hk) {
      cached = b * a->Hkv + hk;
      /* bf16 K rows with contiguous columns, E and S multiples of 32, are read in place */
      if (a->k.s[3] == 1 && a->E == EP && a->S % 32 == 0) kp = (const uint16_t*)a->k.p + b * a->k.s[0] + hk * a->k.s[1], ldk = a->k.s[2];
      else pack_rows(&a->k, b, hk, 0, a->S, a->E, EP, Sp, kr), kp = kr, ldk = EP;
      pack_transposed(&a->v, b, hk, a->S, Sp, a->Ev, EvP, vt + EvP * Sp, vt);
    }
    pack_q_pairs(&a->q, b, h, i0, ni, a->E, EP, qp);
    memset(ot, 0, (size_t)(EvP * BQ) * sizeof(float));
    for (int64_t i = 0; i < BQ; ++i) mx[i] = -INFINITY, l[i] = 0;
    int64_t jend = kv_end(a, i0, ni);
    float mnew[BQ];
    for (int64_t j0 = 0; j0 < jend; j0 += BKT) {
      int64_t rows = imin64(BKT, jend - j0), rows32 = pad32(rows);
      amx_mm(rows32, BQ, EP, kp + j0 * ldk, ldk, qp, BQ * 2, st, BQ, false);
      float sc = a->scale; /* applied by the max and exp passes, but the mask adds to scaled scores */
      if (a->has_mask || (a->causal && j0 + rows - 1 > i0) || !(sc > 0.0f)) {
        for (int64_t x = 0; x < rows * BQ; ++x) st[x] *= sc;
        block_mask_t(a, b, h, i0, ni, j0, rows, st, mt);
        sc = 1.0f;
      }
      for (int64_t x = rows * BQ; x < rows32 * BQ; ++x) st[x] = -INFINITY; /* keys no query here sees */
      bool done = false;
      memcpy(mnew, mx, sizeof(mnew));
#ifdef EXP_PAIRS_MAX
      /* every row has a reference: the exps against it, the block's max from the same pass, and a
       * second pass only where that max passes a reference by TAU (rarely after the first block) */
      bool spec = true;
      for (int64_t i = 0; i < BQ; ++i) spec = spec && mx[i] != -INFINITY;
      if (spec) {
        float lsave[BQ], bmax[BQ];
        memcpy(lsave, l, sizeof(lsave));
        cols_exp_pairs(st, rows32, sc, msub, l, bmax, pp, p16);
        done = true;
        for (int64_t i = 0; i < BQ; ++i) {
          done = done && !(bmax[i] > mx[i] + TAU);
          mnew[i] = bmax[i] > mnew[i] ? bmax[i] : mnew[i];
        }
        if (!done) memcpy(l, lsave, sizeof(lsave));
      }
      if (!spec)
#endif
        cols_max(st, rows, sc, mnew);
      if (!done) {
        if (softmax_step(mx, mnew, l, corr, msub)) cols_scale(ot, EvP, corr);
        cols_exp_pairs(st, rows32, sc, msub, l, NULL, pp, p16);
      }
      amx_mm(EvP, BQ, rows32, vt + j0, Sp, pp, BQ * 2, ot, BQ, true);
    }
    for (int64_t i = 0; i < BQ; ++i) corr[i] = l[i] > 0 ? 1.0f / l[i] : 0.0f;
    cols_scale(ot, EvP, corr);
    transpose(ot, EvP, BQ, BQ, ob, EvP);
    for (int64_t i = 0; i < ni; ++i) {
      store_row(a->out, b, h, i0 + i, a->Ev, ob + i * EvP);
      *lse_ptr(a, b, h, i0 + i) = l[i] > 0 ? mx[i] + logf(l[i]) : -INFINITY;
    }
  }
  tpurt_gemm_amx_tiles_end();
}
#endif

/* ---- backward: one task per (b, kv head); it owns dK, dV of that head and
 * loops over the query heads of its group and every block pair. ---- */
static void bwd_tasks(void* u, int64_t t0, int64_t t1, int tid) {
  const attn_t* a = (const attn_t*)u;
  int64_t E8 = pad8(a->E), Ev8 = pad8(a->Ev), L = a->L, S = a->S;
  int64_t Lp = (L + BQ - 1) / BQ * BQ, Sp = (S + BK - 1) / BK * BK;
  float* w = a->ws + (size_t)tid * a->ws_floats;
  float* qf = w;                  /* Lp x E8, unscaled */
  float* dof = qf + Lp * E8;      /* Lp x Ev8 */
  float* dqa = dof + Lp * Ev8;    /* Lp x E8 */
  float* dka = dqa + Lp * E8;     /* Sp x E8 */
  float* dva = dka + Sp * E8;     /* Sp x Ev8 */
  float* dd = dva + Sp * Ev8;     /* Lp: rowsum(dO * O) */
  float* kb = dd + Lp;            /* BK x E8 */
  float* kt = kb + BK * E8;       /* E8 x BK */
  float* vt = kt + E8 * BK;       /* Ev8 x BK */
  float* vb = vt + Ev8 * BK;      /* BK x Ev8 */
  float* p = vb + BK * Ev8;       /* BQ x BK */
  float* dp = p + BQ * BK;        /* BQ x BK */
  float* ob = dp + BQ * BK;       /* BQ x Ev8 */
  /* Key blocks of BK, or of the keys padded to 8 where there are fewer: a 32-key head computed
   * 64-wide blocks, half of them padding, in all four products and the exponentials. */
  const int64_t bk = S < BK ? pad8(S) : BK;
  for (int64_t t = t0; t < t1; ++t) {
    int64_t b = t / a->Hkv, hk = t % a->Hkv;
    memset(dka, 0, (size_t)(Sp * E8) * sizeof(float));
    memset(dva, 0, (size_t)(Sp * Ev8) * sizeof(float));
    for (int64_t h = hk * a->group; h < (hk + 1) * a->group; ++h) {
      load_rows(&a->q, b, h, 0, L, a->E, qf, E8, Lp, 1.0f);
      load_rows(&a->dout, b, h, 0, L, a->Ev, dof, Ev8, Lp, 1.0f);
      memset(dqa, 0, (size_t)(Lp * E8) * sizeof(float));
      for (int64_t i0 = 0; i0 < L; i0 += BQ) {
        int64_t ni = imin64(BQ, L - i0);
        load_rows(&a->o, b, h, i0, ni, a->Ev, ob, Ev8, ni, 1.0f);
        for (int64_t i = 0; i < ni; ++i) {
          float s = 0;
          for (int64_t c = 0; c < a->Ev; ++c) s += dof[(i0 + i) * Ev8 + c] * ob[i * Ev8 + c];
          dd[i0 + i] = s;
        }
      }
      for (int64_t j0 = 0; j0 < S; j0 += bk) {
        int64_t nj = imin64(bk, S - j0);
        load_rows(&a->k, b, hk, j0, nj, a->E, kb, E8, bk, 1.0f);
        transpose(kb, bk, E8, E8, kt, bk);
        for (int64_t x = 0; x < E8 * bk; ++x) kt[x] *= a->scale; /* P's scale, once per block of keys */
        load_rows(&a->v, b, hk, j0, nj, a->Ev, vb, Ev8, bk, 1.0f);
        transpose(vb, bk, Ev8, Ev8, vt, bk);
        /* causal: query rows before j0 see none of this block */
        int64_t istart = a->causal ? j0 / BQ * BQ : 0;
        for (int64_t i0 = istart; i0 < L; i0 += BQ) {
          int64_t ni = imin64(BQ, L - i0);
          const float* q = qf + i0 * E8;
          /* P = exp(scale * Q K^T + mask - lse) */
          mm(ni, bk, E8, q, E8, kt, bk, p, bk, false);
          /* a whole block at or below the diagonal, with no mask and no padding, needs no masking */
          if (a->has_mask || nj < bk || (a->causal && j0 + bk - 1 > i0)) block_mask(a, b, h, i0, ni, j0, nj, p, bk);
          for (int64_t i = 0; i < ni; ++i) {
            float lse = *lse_ptr(a, b, h, i0 + i);
            if (lse == -INFINITY) {
              memset(p + i * bk, 0, bk * sizeof(float));
              continue;
            }
            exp_sub_sum(p + i * bk, bk, lse);
          }
          /* dV += P^T dO */
          mm_at(bk, Ev8, ni, p, bk, dof + i0 * Ev8, Ev8, dva + j0 * Ev8, Ev8, true);
          /* dP = dO V^T; dS = P * (dP - D) * scale (stored in dp) */
          mm(ni, bk, Ev8, dof + i0 * Ev8, Ev8, vt, bk, dp, bk, false);
          for (int64_t i = 0; i < ni; ++i) {
            float di = dd[i0 + i];
            for (int64_t j = 0; j < bk; ++j) dp[i * bk + j] = p[i * bk + j] * (dp[i * bk + j] - di) * a->scale;
          }
          /* dQ += dS K ; dK += dS^T Q */
          mm(ni, E8, bk, dp, bk, kb, E8, dqa + i0 * E8, E8, true);
          mm_at(bk, E8, ni, dp, bk, q, E8, dka + j0 * E8, E8, true);
        }
      }
      for (int64_t i = 0; i < L; ++i) store_row(a->dq, b, h, i, a->E, dqa + i * E8);
    }
    for (int64_t j = 0; j < S; ++j) {
      store_row(a->dk, b, hk, j, a->E, dka + j * E8);
      store_row(a->dv, b, hk, j, a->Ev, dva + j * Ev8);
    }
  }
}

#ifdef ATTN_HAVE_AMX
/* ---- backward on AMX tiles (bf16 q, k, v, dO where the bf16 path is AMX) ----
 * bwd_tasks' loops and float32 softmax arithmetic, with the five block
 * products on tiles: P = Q K^T, dV += P^T dO, dP = dO V^T, dQ += dS K and
 * dK += dS^T Q, P and dS rounded to bf16 as their operands (PyTorch CPU's
 * flash backward does the same), every sum in float32. */
static size_t amx_bwd_ws_floats(const attn_t* a) {
  int64_t EP = pad32(a->E), EvP = pad32(a->Ev), E8 = pad8(a->E), Ev8 = pad8(a->Ev);
  int64_t Lp = (a->L + BQ - 1) / BQ * BQ, Sp = (a->S + BK - 1) / BK * BK;
  (void)E8;
  size_t f = (size_t)(Sp * EP + Sp * EvP + Lp * EP + Lp + 2 * BQ * BK + 2 * BQ * Ev8);
  size_t h = (size_t)(2 * Lp * EP + 2 * Lp * EvP + 2 * Sp * EP + Sp * EvP + 3 * BQ * BK);
  return f + h / 2 + 64;
}

/* Two consecutive rows of a rows x cols bf16 block (cols a multiple of 32) as pairs along the rows:
 * out[r / 2][c][r & 1], the B operand of a tile product whose depth runs over those rows. */
static void interleave_rows(const uint16_t* in, int64_t rows, int64_t cols, uint16_t* out) {
  for (int64_t r = 0; r < rows; r += 2)
    for (int64_t c = 0; c < cols; c += 32) tpurt_hv_u16_pairs32(in + r * cols + c, in + (r + 1) * cols + c, out + r * cols + 2 * c);
}

/* dst[c][r] = src[r][c] for a rows x cols bf16 matrix (src rows ls apart, dst rows ld apart), in
 * 16 x 16 blocks so both sides stay in a few cache lines. */
static void transpose16(const uint16_t* src, int64_t rows, int64_t cols, int64_t ls, uint16_t* dst, int64_t ld) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16)
    for (int64_t c0 = 0; c0 < cols; c0 += 16)
      for (int64_t c = c0; c < imin64(c0 + 16, cols); ++c)
        for (int64_t r = r0; r < imin64(r0 + 16, rows); ++r) dst[c * ld + r] = src[r * ls + c];
}

/* The backward on tiles. The products whose depth runs over the queries (dV += P^T dO and
 * dK += dS^T Q) are computed transposed, dV^T += dO^T P and dK^T += Q^T dS: Q^T and dO^T are
 * transposed once per head, and P and dS only need their row pairs interleaved, where the direct
 * form transposed two 64 x 64 blocks element by element for every block pair (two thirds of the
 * backward's time). dK^T and dV^T are transposed back once per kv head. */
static void bwd_tasks_amx(void* u, int64_t t0, int64_t t1, int tid) {
  const attn_t* a = (const attn_t*)u;
  int64_t EP = pad32(a->E), EvP = pad32(a->Ev), Ev8 = pad8(a->Ev), L = a->L, S = a->S;
  int64_t Lp = (L + BQ - 1) / BQ * BQ, Sp = (S + BK - 1) / BK * BK;
  float* dkt = a->ws + (size_t)tid * a->ws_floats; /* dK^T: EP x Sp */
  float* dvt = dkt + Sp * EP;                      /* dV^T: EvP x Sp */
  float* dqa = dvt + Sp * EvP;                     /* Lp x EP */
  float* dd = dqa + Lp * EP;                       /* Lp: rowsum(dO * O) */
  float* p = dd + Lp;                              /* BQ x BK */
  float* dp = p + BQ * BK;                         /* BQ x BK */
  float* ob = dp + BQ * BK;                        /* BQ x Ev8 */
  float* db = ob + BQ * Ev8;                       /* BQ x Ev8 */
  uint16_t* qrows = (uint16_t*)(db + BQ * Ev8);    /* Lp x EP */
  uint16_t* qt = qrows + Lp * EP;                  /* Q^T: EP x Lp */
  uint16_t* drows = qt + Lp * EP;                  /* dO: Lp x EvP */
  uint16_t* dot = drows + Lp * EvP;                /* dO^T: EvP x Lp */
  uint16_t* kcp = dot + Lp * EvP;                  /* K, pairs along the head dim, per key block */
  uint16_t* vcp = kcp + Sp * EP;                   /* V, the same */
  uint16_t* krp = vcp + Sp * EvP;                  /* K, pairs along the keys: [Sp/2][EP][2] */
  uint16_t* p16 = krp + Sp * EP;                   /* P, then dS: BQ x BK */
  uint16_t* pp = p16 + BQ * BK;                    /* P as pairs along the queries: [BQ/2][BK][2] */
  uint16_t* dsp = pp + BQ * BK;                    /* dS, the same */
  tpurt_gemm_amx_tiles_begin();
  for (int64_t t = t0; t < t1; ++t) {
    int64_t b = t / a->Hkv, hk = t % a->Hkv;
    memset(dkt, 0, (size_t)(Sp * EP) * sizeof(float));
    memset(dvt, 0, (size_t)(Sp * EvP) * sizeof(float));
    pack_col_pairs(&a->k, b, hk, S, a->E, EP, kcp);
    pack_col_pairs(&a->v, b, hk, S, a->Ev, EvP, vcp);
    pack_row_pairs(&a->k, b, hk, S, Sp, a->E, EP, krp);
    for (int64_t h = hk * a->group; h < (hk + 1) * a->group; ++h) {
      pack_rows(&a->q, b, h, 0, L, a->E, EP, Lp, qrows);
      transpose16(qrows, Lp, EP, EP, qt, Lp);
      pack_rows(&a->dout, b, h, 0, L, a->Ev, EvP, Lp, drows);
      transpose16(drows, Lp, EvP, EvP, dot, Lp);
      memset(dqa, 0, (size_t)(Lp * EP) * sizeof(float));
      for (int64_t i0 = 0; i0 < L; i0 += BQ) {
        int64_t ni = imin64(BQ, L - i0);
        load_rows(&a->o, b, h, i0, ni, a->Ev, ob, Ev8, ni, 1.0f);
        load_rows(&a->dout, b, h, i0, ni, a->Ev, db, Ev8, ni, 1.0f);
        for (int64_t i = 0; i < ni; ++i) {
          float sum = 0;
          for (int64_t c = 0; c < a->Ev; ++c) sum += db[i * Ev8 + c] * ob[i * Ev8 + c];
          dd[i0 + i] = sum;
        }
      }
      for (int64_t j0 = 0; j0 < S; j0 += BK) {
        int64_t nj = imin64(BK, S - j0);
        int64_t istart = a->causal ? j0 / BQ * BQ : 0;
        for (int64_t i0 = istart; i0 < L; i0 += BQ) {
          int64_t ni = imin64(BQ, L - i0);
          /* P = exp(scale * Q K^T + mask - lse); rows past L are zero */
          amx_mm(BQ, BK, EP, qrows + i0 * EP, EP, kcp + (j0 / BK) * EP * BK, BK * 2, p, BK, false);
          for (int64_t x = 0; x < ni * BK; ++x) p[x] *= a->scale;
          block_mask(a, b, h, i0, ni, j0, nj, p, BK);
          for (int64_t i = 0; i < ni; ++i) {
            float lse = *lse_ptr(a, b, h, i0 + i);
            if (lse == -INFINITY) memset(p + i * BK, 0, BK * sizeof(float));
            else exp_sub_sum(p + i * BK, BK, lse);
          }
          memset(p + ni * BK, 0, (size_t)(BQ - ni) * BK * sizeof(float));
          /* dV^T += dO^T P */
          for (int64_t i = 0; i < BQ; ++i) tpurt_hv_f32_to_bf16(p + i * BK, p16 + i * BK, BK);
          interleave_rows(p16, BQ, BK, pp);
          amx_mm(EvP, BK, BQ, dot + i0, Lp, pp, BK * 2, dvt + j0, Sp, true);
          /* dP = dO V^T; dS = P * (dP - D) * scale */
          amx_mm(BQ, BK, EvP, drows + i0 * EvP, EvP, vcp + (j0 / BK) * EvP * BK, BK * 2, dp, BK, false);
          for (int64_t i = 0; i < BQ; ++i) {
            float di = i < ni ? dd[i0 + i] : 0.0f;
            for (int64_t j = 0; j < BK; ++j) dp[i * BK + j] = p[i * BK + j] * (dp[i * BK + j] - di) * a->scale;
            tpurt_hv_f32_to_bf16(dp + i * BK, p16 + i * BK, BK);
          }
          interleave_rows(p16, BQ, BK, dsp);
          /* dQ += dS K ; dK^T += Q^T dS */
          amx_mm(BQ, EP, BK, p16, BK, krp + (j0 / 2) * EP * 2, EP * 2, dqa + i0 * EP, EP, true);
          amx_mm(EP, BK, BQ, qt + i0, Lp, dsp, BK * 2, dkt + j0, Sp, true);
        }
      }
      for (int64_t i = 0; i < L; ++i) store_row(a->dq, b, h, i, a->E, dqa + i * EP);
    }
    for (int64_t j = 0; j < S; ++j) { /* back from the transposed sums, through the dP buffer */
      for (int64_t e = 0; e < a->E; ++e) dp[e] = dkt[e * Sp + j];
      store_row(a->dk, b, hk, j, a->E, dp);
      for (int64_t e = 0; e < a->Ev; ++e) dp[e] = dvt[e * Sp + j];
      store_row(a->dv, b, hk, j, a->Ev, dp);
    }
  }
  tpurt_gemm_amx_tiles_end();
}
#endif

/* ---- argument parsing shared by both directions and the references ---- */
static tpurt_status_t parse(const tpurt_op_call_t* c, bool bwd, attn_t* a) {
  memset(a, 0, sizeof(*a));
  int base = bwd ? 1 : 0; /* backward: grad_out first */
  const tpurt_tensor_t *q = tpurt_arg_tensor(c, base), *k = tpurt_arg_tensor(c, base + 1),
                       *v = tpurt_arg_tensor(c, base + 2);
  if (!q || !k || !v || q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: query, key and value must be 4-D (batch, heads, seq, dim)",
                        c->name);
  if (q->dtype != k->dtype || q->dtype != v->dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: query, key and value must have one dtype, got %s, %s, %s",
                        c->name, tpurt_dtype_name(q->dtype), tpurt_dtype_name(k->dtype),
                        tpurt_dtype_name(v->dtype));
  if (q->dtype != TPURT_DTYPE_FLOAT32 && q->dtype != TPURT_DTYPE_BFLOAT16 && q->dtype != TPURT_DTYPE_FLOAT16)
    return TPURT_STATUS(UNIMPLEMENTED, "%s: dtype %s (float32, bfloat16 and float16 only)", c->name,
                        tpurt_dtype_name(q->dtype));
  a->B = q->sizes[0], a->Hq = q->sizes[1], a->L = q->sizes[2], a->E = q->sizes[3];
  a->Hkv = k->sizes[1], a->S = k->sizes[2], a->Ev = v->sizes[3];
  if (k->sizes[0] != a->B || v->sizes[0] != a->B || v->sizes[1] != a->Hkv || v->sizes[2] != a->S ||
      k->sizes[3] != a->E || a->Hkv <= 0 || a->Hq % a->Hkv != 0)
    return TPURT_STATUS(INVALID_ARGUMENT,
                        "%s: shapes do not match: query [%lld, %lld, %lld, %lld], key [%lld, %lld, %lld, %lld], "
                        "value [%lld, %lld, %lld, %lld]", c->name,
                        (long long)q->sizes[0], (long long)q->sizes[1], (long long)q->sizes[2], (long long)q->sizes[3],
                        (long long)k->sizes[0], (long long)k->sizes[1], (long long)k->sizes[2], (long long)k->sizes[3],
                        (long long)v->sizes[0], (long long)v->sizes[1], (long long)v->sizes[2], (long long)v->sizes[3]);
  a->group = a->Hq / a->Hkv;
  int ai = base + 3 + (bwd ? 2 : 0); /* dropout_p */
  double dropout = tpurt_arg_double(c, ai, 0.0);
  if (dropout != 0.0)
    return TPURT_STATUS(UNIMPLEMENTED, "%s: dropout_p=%g (the fused kernel has no dropout)", c->name, dropout);
  a->causal = tpurt_arg_bool(c, ai + 1, false);
  const tpurt_tensor_t* mask = tpurt_arg_tensor(c, ai + 2);
  double scale = 0;
  bool has_scale = tpurt_arg_opt_double(c, ai + 3, &scale);
  a->scale = has_scale ? (float)scale : (float)(1.0 / sqrt((double)a->E));
  a->q = view4(q), a->k = view4(k), a->v = view4(v);
  if (mask) {
    if (!tpurt_dtype_is_floating(mask->dtype) || mask->ndim > 4)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: attn_mask must be a floating tensor of at most 4 dims, got %s %d-D",
                          c->name, tpurt_dtype_name(mask->dtype), (int)mask->ndim);
    const int64_t want[4] = {a->B, a->Hq, a->L, a->S};
    a->mask.p = (const char*)mask->data, a->mask.dt = mask->dtype;
    for (int d = 0; d < 4; ++d) {
      int md = d - (4 - mask->ndim);
      int64_t sz = md >= 0 ? mask->sizes[md] : 1;
      if (sz != 1 && sz != want[d])
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: attn_mask size %lld at dim %d does not broadcast to %lld",
                            c->name, (long long)sz, d, (long long)want[d]);
      a->mask.s[d] = (md >= 0 && sz != 1) ? mask->strides[md] : 0;
    }
    a->has_mask = true;
  }
  if (!bwd) {
    if (c->num_outputs < 2)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected two outputs (output, logsumexp)", c->name);
    a->out = &c->outputs[0], a->lse = &c->outputs[1];
  } else {
    const tpurt_tensor_t *go = tpurt_arg_tensor(c, 0), *o = tpurt_arg_tensor(c, 4), *lse = tpurt_arg_tensor(c, 5);
    if (!go || !o || !lse || go->ndim != 4 || o->ndim != 4 || lse->ndim != 3 || c->num_outputs < 3)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected grad_out, out (4-D), logsumexp (3-D) and three outputs",
                          c->name);
    a->dout = view4(go), a->o = view4(o);
    a->lse = lse;
    a->dq = &c->outputs[0], a->dk = &c->outputs[1], a->dv = &c->outputs[2];
  }
  const tpurt_tensor_t* lt = a->lse;
  if (lt->dtype != TPURT_DTYPE_FLOAT32 || lt->ndim != 3)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: logsumexp must be 3-D float32", c->name);
  return TPURT_OK;
}

/* ---- references: one row at a time in double, scores materialized per row ---- */
static double ld4(const view4_t* v, int64_t b, int64_t h, int64_t r, int64_t c) {
  return tpurt_dtype_load_f64(v->dt, v->p + (size_t)(b * v->s[0] + h * v->s[1] + r * v->s[2] + c * v->s[3]) *
                                                tpurt_dtype_size(v->dt));
}
static void st4(const tpurt_tensor_t* t, int64_t b, int64_t h, int64_t r, int64_t c, double x) {
  tpurt_dtype_store_f64(t->dtype, (char*)t->data + (size_t)(b * t->strides[0] + h * t->strides[1] +
                                                            r * t->strides[2] + c * t->strides[3]) *
                                                       tpurt_dtype_size(t->dtype), x);
}
static double ref_score(const attn_t* a, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (a->causal && j > i) return -INFINITY;
  double s = 0;
  for (int64_t e = 0; e < a->E; ++e) s += ld4(&a->q, b, h, i, e) * ld4(&a->k, b, h / a->group, j, e);
  s *= a->scale;
  if (a->has_mask) s += mask_at(a, b, h, i, j);
  return s;
}
/* Softmax row of (b, h, i) into p[S]; returns log-sum-exp (-inf: nothing visible). */
static double ref_row(const attn_t* a, int64_t b, int64_t h, int64_t i, double* p) {
  double m = -INFINITY, l = 0;
  for (int64_t j = 0; j < a->S; ++j) {
    p[j] = ref_score(a, b, h, i, j);
    m = p[j] > m ? p[j] : m;
  }
  for (int64_t j = 0; j < a->S; ++j) {
    p[j] = m == -INFINITY ? 0 : exp(p[j] - m);
    l += p[j];
  }
  for (int64_t j = 0; j < a->S; ++j) p[j] = l > 0 ? p[j] / l : 0;
  return l > 0 ? m + log(l) : -INFINITY;
}

static tpurt_status_t fwd_ref(const attn_t* a) {
  double* p = malloc(sizeof(double) * (size_t)(a->S + 1));
  if (!p) return TPURT_STATUS(RESOURCE_EXHAUSTED, "sdpa reference: out of host memory");
  for (int64_t b = 0; b < a->B; ++b)
    for (int64_t h = 0; h < a->Hq; ++h)
      for (int64_t i = 0; i < a->L; ++i) {
        *lse_ptr(a, b, h, i) = (float)ref_row(a, b, h, i, p);
        for (int64_t c = 0; c < a->Ev; ++c) {
          double o = 0;
          for (int64_t j = 0; j < a->S; ++j) o += p[j] * ld4(&a->v, b, h / a->group, j, c);
          st4(a->out, b, h, i, c, o);
        }
      }
  free(p);
  return TPURT_OK;
}

static tpurt_status_t bwd_ref(const attn_t* a) {
  size_t nk = (size_t)(a->S * a->E), nv = (size_t)(a->S * a->Ev);
  double* p = malloc(sizeof(double) * (size_t)(a->S + 1));
  double* dk = calloc(nk + 1, sizeof(double));
  double* dv = calloc(nv + 1, sizeof(double));
  double* dq = malloc(sizeof(double) * (size_t)(a->E + 1));
  double* dp = malloc(sizeof(double) * (size_t)(a->S + 1));
  tpurt_status_t st = TPURT_OK;
  if (!p || !dk || !dv || !dq || !dp) {
    st = TPURT_STATUS(RESOURCE_EXHAUSTED, "sdpa reference: out of host memory");
    goto done;
  }
  for (int64_t b = 0; b < a->B; ++b)
    for (int64_t hk = 0; hk < a->Hkv; ++hk) {
      memset(dk, 0, nk * sizeof(double));
      memset(dv, 0, nv * sizeof(double));
      for (int64_t h = hk * a->group; h < (hk + 1) * a->group; ++h)
        for (int64_t i = 0; i < a->L; ++i) {
          ref_row(a, b, h, i, p);
          double d = 0;
          for (int64_t j = 0; j < a->S; ++j) {
            double s = 0;
            for (int64_t c = 0; c < a->Ev; ++c) s += ld4(&a->dout, b, h, i, c) * ld4(&a->v, b, hk, j, c);
            dp[j] = s;
            d += p[j] * s;
          }
          for (int64_t e = 0; e < a->E; ++e) dq[e] = 0;
          for (int64_t j = 0; j < a->S; ++j) {
            double ds = p[j] * (dp[j] - d) * a->scale;
            for (int64_t c = 0; c < a->Ev; ++c) dv[j * a->Ev + c] += p[j] * ld4(&a->dout, b, h, i, c);
            for (int64_t e = 0; e < a->E; ++e) {
              dq[e] += ds * ld4(&a->k, b, hk, j, e);
              dk[j * a->E + e] += ds * ld4(&a->q, b, h, i, e);
            }
          }
          for (int64_t e = 0; e < a->E; ++e) st4(a->dq, b, h, i, e, dq[e]);
        }
      for (int64_t j = 0; j < a->S; ++j) {
        for (int64_t e = 0; e < a->E; ++e) st4(a->dk, b, hk, j, e, dk[j * a->E + e]);
        for (int64_t c = 0; c < a->Ev; ++c) st4(a->dv, b, hk, j, c, dv[j * a->Ev + c]);
      }
    }
done:
  free(p), free(dk), free(dv), free(dq), free(dp);
  return st;
}

/* Tasks per chunk when a kernel's `tasks` units each take about `flops`: enough that a chunk is
 * ATTN_SPLIT_FLOPS of work, so a small product (a decode step's query over a few dozen keys) runs
 * on one thread instead of waking the chip's other threads for microseconds of work each. */
#define ATTN_SPLIT_FLOPS ((int64_t)1 << 18)
static int64_t attn_grain(int64_t flops) { return flops >= ATTN_SPLIT_FLOPS ? 1 : ATTN_SPLIT_FLOPS / (flops > 0 ? flops : 1); }

/* forward: (query, key, value, dropout_p, is_causal, attn_mask, scale) -> (output, logsumexp) */
static tpurt_status_t sdpa_fwd(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, bool ref) {
  attn_t a;
  TPURT_RETURN_IF_ERROR(parse(c, false, &a));
  if (a.B == 0 || a.Hq == 0 || a.L == 0) return TPURT_OK;
  if (ref) return fwd_ref(&a);
  if (a.S == 0 || a.Ev == 0) { /* nothing to attend to: zeros, as the math path gives */
    for (int64_t b = 0; b < a.B; ++b)
      for (int64_t h = 0; h < a.Hq; ++h)
        for (int64_t i = 0; i < a.L; ++i) {
          for (int64_t e = 0; e < a.Ev; ++e) st4(a.out, b, h, i, e, 0.0);
          *lse_ptr(&a, b, h, i) = -INFINITY;
        }
    return TPURT_OK;
  }
  int64_t E8 = pad8(a.E), Ev8 = pad8(a.Ev);
  bool amx = use_amx(&a);
  a.ws_floats = (size_t)((a.S + BKT - 1) / BKT * BKT * E8 + E8 * BQ + a.S * (E8 + Ev8) + 2 * BKT * BQ + Ev8 * BQ + BQ * (E8 > Ev8 ? E8 : Ev8) + 4 * BQ + 16);
#ifdef ATTN_HAVE_AMX
  if (amx) a.ws_floats = amx_ws_floats(&a);
#endif
  int nt = tpurt_kernel_num_threads(ctx);
  a.ws = tpurt_kernel_scratch(ctx, a.ws_floats * sizeof(float) * (size_t)nt);
  if (!a.ws) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", c->name);
  int64_t tasks = a.B * a.Hq * ((a.L + BQ - 1) / BQ);
  const int64_t grain = attn_grain(2 * (a.L < BQ ? a.L : BQ) * a.S * (a.E + a.Ev)); /* a query block's products */
#ifdef ATTN_HAVE_AMX
  if (amx) {
    tpurt_parallel_for(ctx, tasks, grain, fwd_tasks_amx, &a);
    return TPURT_OK;
  }
#endif
  tpurt_parallel_for(ctx, tasks, grain, fwd_tasks, &a);
  return TPURT_OK;
}

/* backward: (grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, attn_mask, scale)
 *   -> (grad_query, grad_key, grad_value) */
static tpurt_status_t sdpa_bwd(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, bool ref) {
  attn_t a;
  TPURT_RETURN_IF_ERROR(parse(c, true, &a));
  if (a.B == 0 || a.Hkv == 0) return TPURT_OK;
  if (ref || a.L == 0 || a.S == 0) return bwd_ref(&a);
  int64_t E8 = pad8(a.E), Ev8 = pad8(a.Ev);
  int64_t Lp = (a.L + BQ - 1) / BQ * BQ, Sp = (a.S + BK - 1) / BK * BK;
  a.ws_floats = (size_t)(Lp * E8 + Lp * Ev8 + Lp * E8 + Sp * E8 + Sp * Ev8 + Lp + BK * E8 + E8 * BK +
                         Ev8 * BK + BK * Ev8 + BQ * BK + BQ * BK + BQ * Ev8 + 16);
  bool amx = use_amx(&a) && a.dout.dt == TPURT_DTYPE_BFLOAT16;
#ifdef ATTN_HAVE_AMX
  if (amx) a.ws_floats = amx_bwd_ws_floats(&a);
#endif
  int nt = tpurt_kernel_num_threads(ctx);
  a.ws = tpurt_kernel_scratch(ctx, a.ws_floats * sizeof(float) * (size_t)nt);
  if (!a.ws) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", c->name);
  /* a (batch, kv head)'s five block products over its query heads */
  const int64_t grain = attn_grain(5 * (a.Hq / a.Hkv) * a.L * a.S * (a.E + a.Ev));
#ifdef ATTN_HAVE_AMX
  if (amx) {
    tpurt_parallel_for(ctx, a.B * a.Hkv, grain, bwd_tasks_amx, &a);
    return TPURT_OK;
  }
#endif
  tpurt_parallel_for(ctx, a.B * a.Hkv, grain, bwd_tasks, &a);
  return TPURT_OK;
}

TPURT_NN_PAIR(sdpa_flash, sdpa_fwd(ctx, call, ref))
TPURT_NN_PAIR(sdpa_flash_backward, sdpa_bwd(ctx, call, ref))
