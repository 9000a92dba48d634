/* The strided GEMM entry (see gemm.h): OpenBLAS for fp32, and our own
 * BLIS-style GEMM for the other dtypes: B is packed into NR-column panels, A
 * into MR-row panels (converted to the accumulation type while packing, so
 * bf16/f16 run the fp32 microkernel; bf16 is kept as pairs for vdpbf16ps where
 * the CPU has AVX-512 BF16), and a register-blocked microkernel
 * computes MR x NR tiles. One generic blocked driver is instantiated per
 * accumulation type by macro. */
#include "ops/linalg/gemm.h"
#include "tpurt/device.h"

#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/futex.h"
#include "base/log.h"
#include "ops/half_vec.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define GEMM_AVX2 1
#endif

/* Blocking: KC x NR panels of B stay in L1, an MC x KC block of A (each
 * thread its own) in L2, a KC x NC block of B in L3. */
enum { KC = 256, NC = 1024, MC = 144 };
/* The fp32 kernel (bf16/f16 widened too) walks its blocks the other way (DEFINE_CORE's A_IN_L1): a
 * row tile's A micro-panel (12 x KC_F32, 18 KiB) stays in L1 while the KC_F32 x NC_F32 block of B
 * (960 KiB, within a core's L2) streams past it, each panel fetched ahead by the tile (UKR_B_AHEAD).
 * B's 32-column panels, the wider operand, were the ones held in L1 (32 KiB of an Ice Lake's 48)
 * with A streaming beside them and evicting them. One thread of an Ice Lake Xeon, the two drivers
 * linked into one process and alternated (median of 11 pairs): 2048^3 +9-14% (fp32 and bf16),
 * 1024 x 4096 x 1024 bf16 +7%, 4096 x 1024 x 1024 fp32 +3%, 512^3 and 256 x 256 x 64 level; small
 * products (64^3 to 256 x 512 x 128, whose B fits L1 either way) level within 1% of the old order
 * (101-301 pairs), so every product with packed A takes it. */
#if defined(__AVX512F__)
enum { KC_F32 = 384, NC_F32 = 640, A_IN_L1_F32 = 1 };
#else
enum { KC_F32 = KC, NC_F32 = NC, A_IN_L1_F32 = 0 };
#endif
/* A thread's block of rows, a whole number of the microkernel's MR rows (so only the matrix's own
 * last rows make a partial tile). */
#define MC_FOR(MR) (MC / (MR) * (MR))
/* The AMX kernel's depth block is longer: its C tiles are loaded and stored once per block, and at
 * KC that traffic, not the tile multiplies, set its speed. */
#ifndef KC_AMX
#define KC_AMX 2048
#endif
/* ... and its column block wider: the whole of A is packed once per column block, and at NC A's
 * packing was done twice for a 2048-wide product. */
#ifndef NC_AMX
#define NC_AMX 2048
#endif
/* The AVX-512 BF16 kernel's blocks likewise: at KC its 12 x 32 C tiles were loaded and stored eight
 * times for a 2048-deep product, which with A's second packing cost a fifth of its time (one thread
 * of a Zen 5, 2048^3: KC 256 / NC 1024 377-431 GFLOP/s, KC 2048 / NC 2048 452-503, the kernel alone
 * in L1 570; a 2048-deep micro-panel of B, 128 KiB, streams from L2). */
#ifndef KC_BDP
#define KC_BDP 2048
#endif
#ifndef NC_BDP
#define NC_BDP 2048
#endif
/* Where C's dtype is not the accumulation type (bf16/f16/int C), C is
 * accumulated in a row-major workspace this many elements at most, so the
 * value is rounded once on store. */
enum { WS_ELEMS = 4 << 20 };

static atomic_bool g_fp32_own;
void tpurt_gemm_set_fp32_own(bool own) { atomic_store(&g_fp32_own, own); }
/* fp32 products with few rows through OpenBLAS too (tests and benchmarks compare the two) */
static atomic_bool g_small_off;
void tpurt_gemm_set_small_m(bool on) { atomic_store(&g_small_off, !on); }

static inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }
static inline size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }
/* a * b for sizes >= 0, saturating at INT64_MAX: a work estimate of sizes
 * nobody checked yet must not overflow (signed overflow is undefined). */
static inline int64_t mul_sat(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}
/* Integer products wrap modulo 2^64, as PyTorch CPU's integer matmul does;
 * computed in uint64_t, since signed overflow is undefined behaviour. */
static inline int64_t wrap_mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
static inline int64_t wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }

/* Runs inline when ctx is NULL (a serial GEMM inside a batch-parallel loop). */
static void run_range(tpurt_kernel_ctx_t* ctx, int64_t n, int64_t grain, tpurt_range_fn_t fn,
                      void* user) {
  if (n <= 0) return;
  if (!ctx) fn(user, 0, n, 0);
  else tpurt_parallel_for(ctx, n, grain, fn, user);
}

/* ---- packing: rows x depth block -> panels of `panel` rows, each [depth][panel] ---- */
typedef void (*pack_fn_t)(const void* src, int64_t rs, int64_t cs, int64_t rows, int64_t depth,
                          int panel, void* dst);

#define DEFINE_PACK(NAME, T_IN, T_ACC, CONV)                                                   \
  static void NAME(const void* src_, int64_t rs, int64_t cs, int64_t rows, int64_t depth,      \
                   int panel, void* dst_) {                                                    \
    const T_IN* src = (const T_IN*)src_;                                                       \
    T_ACC* dst = (T_ACC*)dst_;                                                                 \
    for (int64_t i0 = 0; i0 < rows; i0 += panel) {                                             \
      int pr = (int)imin(panel, rows - i0);                                                    \
      const T_IN* s0 = src + i0 * rs;                                                          \
      if (rs == 1 && pr == panel) {                                                            \
        for (int64_t p = 0; p < depth; ++p, dst += panel)                                      \
          for (int r = 0; r < panel; ++r) dst[r] = CONV(s0[p * cs + r]);                       \
      } else {                                                                                 \
        for (int64_t p = 0; p < depth; ++p, dst += panel) {                                    \
          const T_IN* s = s0 + p * cs;                                                         \
          int r = 0;                                                                           \
          for (; r < pr; ++r) dst[r] = CONV(s[r * rs]);                                        \
          for (; r < panel; ++r) dst[r] = 0;                                                   \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
  }

#define CONV_ID(x) (x)
#define CONV_BF16(x) tpurt_bf16_to_f32(x)
#define CONV_F16(x) tpurt_f16_to_f32(x)
#define CONV_I64(x) ((int64_t)(x))
DEFINE_PACK(pack_f32_scalar, float, float, CONV_ID)
DEFINE_PACK(pack_bf16_scalar, tpurt_bf16_t, float, CONV_BF16)
DEFINE_PACK(pack_f16_scalar, tpurt_f16_t, float, CONV_F16)

static bool gemm_generic(void);
#if defined(__AVX2__)
/* Columns of eight rows of eight floats: v[j] = (v[0][j], ..., v[7][j]). */
static inline void transpose8x8(__m256 v[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
  const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
  const __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
  const __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  v[0] = _mm256_permute2f128_ps(u0, u4, 0x20), v[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  v[1] = _mm256_permute2f128_ps(u1, u5, 0x20), v[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  v[2] = _mm256_permute2f128_ps(u2, u6, 0x20), v[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  v[3] = _mm256_permute2f128_ps(u3, u7, 0x20), v[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* A depth-contiguous source (A row-major, or B transposed as in x @ W^T: a linear layer's forward,
 * both operands) into fp32 panels: 8 rows x 8 depth values at a time, widened where 16-bit,
 * transposed in registers, stored (masked where a panel is not a multiple of 8 rows). Element by
 * element, the fp32 copies were 40% of the small GPT's GEMM time (perf, compiled step). */
static inline __m256 pack_load8(tpurt_dtype_t dt, const void* p) {
  if (dt == TPURT_DTYPE_BFLOAT16) return tpurt_hv_bf16x8_load((const uint16_t*)p);
#if defined(__F16C__)
  if (dt == TPURT_DTYPE_FLOAT16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));
#endif
  return _mm256_loadu_ps((const float*)p); /* float32 (f16 comes here only with F16C: pack_half) */
}
static inline float pack_load1(tpurt_dtype_t dt, const void* p) {
  if (dt == TPURT_DTYPE_BFLOAT16) return tpurt_bf16_to_f32(*(const uint16_t*)p);
  if (dt == TPURT_DTYPE_FLOAT16) return tpurt_f16_to_f32(*(const uint16_t*)p);
  return *(const float*)p;
}
static void pack_rows_t8(tpurt_dtype_t dt, const void* src_, int64_t rs, int64_t rows, int64_t depth, int panel,
                         float* dst) {
  const char* src = (const char*)src_;
  size_t es = tpurt_dtype_size(dt);
  for (int64_t i0 = 0; i0 < rows; i0 += panel, dst += (size_t)panel * depth) {
    int pr = (int)imin(panel, rows - i0);
    int64_t p = 0;
    for (; p + 8 <= depth; p += 8)
      for (int r0 = 0; r0 < panel; r0 += 8) {
        int nl = pr - r0, ns = panel - r0 < 8 ? panel - r0 : 8; /* rows to load, lanes to store */
        __m256 v[8];
        for (int i = 0; i < 8; ++i)
          v[i] = i < nl ? pack_load8(dt, src + (size_t)((i0 + r0 + i) * rs + p) * es) : _mm256_setzero_ps();
        transpose8x8(v);
        float* d = dst + p * panel + r0;
        if (ns == 8) {
          for (int j = 0; j < 8; ++j) _mm256_storeu_ps(d + j * panel, v[j]);
        } else {
          const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(ns), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
          for (int j = 0; j < 8; ++j) _mm256_maskstore_ps(d + j * panel, m, v[j]);
        }
      }
    for (; p < depth; ++p)
      for (int r = 0; r < panel; ++r)
        dst[p * panel + r] = r < pr ? pack_load1(dt, src + (size_t)((i0 + r) * rs + p) * es) : 0.0f;
  }
}
#endif

static void pack_f32(const void* src, int64_t rs, int64_t cs, int64_t rows, int64_t depth, int panel,
                     void* dst) {
#if defined(__AVX2__)
  if (cs == 1 && depth >= 8 && !gemm_generic()) {
    pack_rows_t8(TPURT_DTYPE_FLOAT32, src, rs, rows, depth, panel, (float*)dst);
    return;
  }
#endif
  pack_f32_scalar(src, rs, cs, rows, depth, panel, dst);
}

/* 16-bit operands are widened to float32 here, once per packed element, so
 * the fp32 microkernel runs on them. The two layouts that matter get vector
 * conversions: rows contiguous (B row-major, A transposed), where each depth
 * step is `panel` contiguous elements; and depth contiguous (A row-major,
 * B transposed as in x @ W^T), widened and transposed 8 x 8 in registers
 * (pack_rows_t8; without F16C each row is converted as one run and scattered
 * into the panel). */
static void pack_half(tpurt_dtype_t dt, const void* src_, int64_t rs, int64_t cs, int64_t rows,
                      int64_t depth, int panel, void* dst_, pack_fn_t scalar) {
  const uint16_t* src = (const uint16_t*)src_;
  float* dst = (float*)dst_;
  if (rs == 1 && panel % 8 == 0) {
    for (int64_t i0 = 0; i0 < rows; i0 += panel, dst += (size_t)panel * depth) {
      int pr = (int)imin(panel, rows - i0);
      if (pr < panel) {
        scalar(src + i0, rs, cs, pr, depth, panel, dst);
        continue;
      }
      for (int64_t p = 0; p < depth; ++p) tpurt_hv_to_f32(dt, src + i0 + p * cs, dst + p * panel, panel);
    }
    return;
  }
#if defined(__AVX2__) && defined(__F16C__)
  if (cs == 1 && depth >= 8) {
    pack_rows_t8(dt, src_, rs, rows, depth, panel, dst);
    return;
  }
#endif
  if (cs == 1 && depth >= 8) {
    float row[KC];
    for (int64_t i0 = 0; i0 < rows; i0 += panel, dst += (size_t)panel * depth) {
      int pr = (int)imin(panel, rows - i0);
      for (int64_t p0 = 0; p0 < depth; p0 += KC) {
        int64_t pn = imin(KC, depth - p0);
        for (int r = 0; r < pr; ++r) {
          tpurt_hv_to_f32(dt, src + (i0 + r) * rs + p0, row, pn);
          float* d = dst + p0 * panel + r;
          for (int64_t p = 0; p < pn; ++p) d[p * panel] = row[p];
        }
        for (int r = pr; r < panel; ++r)
          for (int64_t p = 0; p < pn; ++p) dst[(p0 + p) * panel + r] = 0;
      }
    }
    return;
  }
  scalar(src_, rs, cs, rows, depth, panel, dst_);
}
static void pack_bf16(const void* src, int64_t rs, int64_t cs, int64_t rows, int64_t depth,
                      int panel, void* dst) {
  if (gemm_generic()) {
    pack_bf16_scalar(src, rs, cs, rows, depth, panel, dst);
    return;
  }
  pack_half(TPURT_DTYPE_BFLOAT16, src, rs, cs, rows, depth, panel, dst, pack_bf16_scalar);
}
static void pack_f16(const void* src, int64_t rs, int64_t cs, int64_t rows, int64_t depth,
                     int panel, void* dst) {
  if (gemm_generic()) {
    pack_f16_scalar(src, rs, cs, rows, depth, panel, dst);
    return;
  }
  pack_half(TPURT_DTYPE_FLOAT16, src, rs, cs, rows, depth, panel, dst, pack_f16_scalar);
}
DEFINE_PACK(pack_f64, double, double, CONV_ID)
DEFINE_PACK(pack_u8, uint8_t, int64_t, CONV_I64)
DEFINE_PACK(pack_i8, int8_t, int64_t, CONV_I64)
DEFINE_PACK(pack_i16, int16_t, int64_t, CONV_I64)
DEFINE_PACK(pack_i32, int32_t, int64_t, CONV_I64)
DEFINE_PACK(pack_i64, int64_t, int64_t, CONV_I64)

/* ---- microkernels: C[mr x nr] = beta * C + alpha * (A panel x B panel) ---- */
/* beta == 0 writes without reading C. */
#define UKR_STORE_TAIL(T, MR, NR, tmp)                                                          \
  for (int r = 0; r < mr; ++r)                                                                 \
    for (int j = 0; j < nr; ++j) {                                                             \
      T* cp = c + r * rs + j * cs;                                                             \
      *cp = beta == 0 ? alpha * tmp[r][j] : beta * *cp + alpha * tmp[r][j];                    \
    }

/* Generic microkernel (ints, and float types without AVX2); the compiler
 * vectorizes the j loop. */
#define DEFINE_UKR_GENERIC(NAME, T, MR, NR)                                                     \
  static void NAME(int64_t kc, const T* restrict a, const T* restrict b, T* c, int64_t rs,     \
                   int64_t cs, T alpha, T beta, int mr, int nr) {                              \
    T acc[MR][NR];                                                                             \
    memset(acc, 0, sizeof(acc));                                                               \
    for (int64_t p = 0; p < kc; ++p, a += MR, b += NR)                                         \
      for (int r = 0; r < MR; ++r)                                                             \
        for (int j = 0; j < NR; ++j) acc[r][j] += a[r] * b[j];                                 \
    UKR_STORE_TAIL(T, MR, NR, acc)                                                             \
  }

/* int64: the generic form's arithmetic, wrapping (wrap_mul/wrap_add). */
enum { MR_I64 = 4, NR_I64 = 4 };
static void ukr_i64(int64_t kc, const int64_t* restrict a, const int64_t* restrict b, int64_t* c,
                    int64_t rs, int64_t cs, int64_t alpha, int64_t beta, int mr, int nr) {
  uint64_t acc[MR_I64][NR_I64];
  memset(acc, 0, sizeof(acc));
  for (int64_t p = 0; p < kc; ++p, a += MR_I64, b += NR_I64)
    for (int r = 0; r < MR_I64; ++r)
      for (int j = 0; j < NR_I64; ++j) acc[r][j] += (uint64_t)a[r] * (uint64_t)b[j];
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nr; ++j) {
      int64_t* cp = c + r * rs + j * cs;
      int64_t v = wrap_mul(alpha, (int64_t)acc[r][j]);
      *cp = beta == 0 ? v : wrap_add(wrap_mul(beta, *cp), v);
    }
}

#ifdef GEMM_AVX2
/* 6 x 16 fp32 (12 accumulators) and 6 x 8 fp64, broadcast-A / load-B form. The depth loop reads
 * A row r of step p at A_AT(r): the packed panel (a[p * 6 + r]) or, in the direct form, A where it
 * lies (UKR_A_DIRECT). */
#define UKR_AVX2_LOOP(VT, W, LOAD, BCAST, FMA, ZERO, A_AT, A_STEP)                               \
  VT c00 = ZERO(), c01 = ZERO(), c10 = ZERO(), c11 = ZERO(), c20 = ZERO(), c21 = ZERO();       \
  VT c30 = ZERO(), c31 = ZERO(), c40 = ZERO(), c41 = ZERO(), c50 = ZERO(), c51 = ZERO();       \
  for (int64_t p = 0; p < kc; ++p, A_STEP, b += 2 * W) {                                       \
    VT b0 = LOAD(b), b1 = LOAD(b + W), ar;                                                     \
    ar = BCAST(A_AT(0)); c00 = FMA(ar, b0, c00); c01 = FMA(ar, b1, c01);                        \
    ar = BCAST(A_AT(1)); c10 = FMA(ar, b0, c10); c11 = FMA(ar, b1, c11);                        \
    ar = BCAST(A_AT(2)); c20 = FMA(ar, b0, c20); c21 = FMA(ar, b1, c21);                        \
    ar = BCAST(A_AT(3)); c30 = FMA(ar, b0, c30); c31 = FMA(ar, b1, c31);                        \
    ar = BCAST(A_AT(4)); c40 = FMA(ar, b0, c40); c41 = FMA(ar, b1, c41);                        \
    ar = BCAST(A_AT(5)); c50 = FMA(ar, b0, c50); c51 = FMA(ar, b1, c51);                        \
  }
#define UKR_AVX2_STORE(T, VT, W, LOADU, STOREU, SET1, FMA, MUL)                                   \
  VT acc[6][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};     \
  VT va = SET1(alpha);                                                                         \
  if (mr == 6 && nr == 2 * W && cs == 1) {                                                     \
    if (beta == 0) {                                                                           \
      for (int r = 0; r < 6; ++r) {                                                            \
        STOREU(c + r * rs, MUL(va, acc[r][0]));                                                \
        STOREU(c + r * rs + W, MUL(va, acc[r][1]));                                            \
      }                                                                                        \
    } else {                                                                                   \
      VT vb = SET1(beta);                                                                      \
      for (int r = 0; r < 6; ++r) {                                                            \
        STOREU(c + r * rs, FMA(va, acc[r][0], MUL(vb, LOADU(c + r * rs))));                    \
        STOREU(c + r * rs + W, FMA(va, acc[r][1], MUL(vb, LOADU(c + r * rs + W))));            \
      }                                                                                        \
    }                                                                                          \
    return;                                                                                    \
  }                                                                                            \
  T tmp[6][2 * W];                                                                             \
  for (int r = 0; r < 6; ++r) {                                                                \
    STOREU(&tmp[r][0], acc[r][0]);                                                             \
    STOREU(&tmp[r][W], acc[r][1]);                                                             \
  }                                                                                            \
  UKR_STORE_TAIL(T, 6, 2 * W, tmp)
#define UKR_A_PACKED(r) (a + (r))
#define DEFINE_UKR_AVX2(NAME, T, VT, W, LOAD, LOADU, STOREU, SET1, BCAST, FMA, MUL, ZERO)       \
  static void NAME(int64_t kc, const T* restrict a, const T* restrict b, T* c, int64_t rs,     \
                   int64_t cs, T alpha, T beta, int mr, int nr) {                              \
    UKR_AVX2_LOOP(VT, W, LOAD, BCAST, FMA, ZERO, UKR_A_PACKED, a += 6)                          \
    UKR_AVX2_STORE(T, VT, W, LOADU, STOREU, SET1, FMA, MUL)                                    \
  }
/* The direct form reads A unpacked: row r of depth step p at a + r * a_rs + p * a_cs. Rows past mr
 * (the matrix's last tile) read row mr - 1 again, so nothing outside A is touched; their sums are
 * not stored. */
#define UKR_A_DIRECT(r) (a + o##r)
#define DEFINE_UKR_AVX2_DIRECT(NAME, T, VT, W, LOAD, LOADU, STOREU, SET1, BCAST, FMA, MUL, ZERO) \
  static void NAME(int64_t kc, const T* restrict a, int64_t a_rs, int64_t a_cs,                \
                   const T* restrict b, T* c, int64_t rs, int64_t cs, T alpha, T beta, int mr,  \
                   int nr) {                                                                   \
    const int64_t o0 = 0, o1 = imin(1, mr - 1) * a_rs, o2 = imin(2, mr - 1) * a_rs,            \
                  o3 = imin(3, mr - 1) * a_rs, o4 = imin(4, mr - 1) * a_rs,                     \
                  o5 = imin(5, mr - 1) * a_rs;                                                  \
    UKR_AVX2_LOOP(VT, W, LOAD, BCAST, FMA, ZERO, UKR_A_DIRECT, a += a_cs)                       \
    UKR_AVX2_STORE(T, VT, W, LOADU, STOREU, SET1, FMA, MUL)                                    \
  }
#if defined(__AVX512F__)
/* A build for AVX-512 (the runtime is built with -march=native) has 32 registers: 12 x 32, 24
 * accumulators, 12 broadcasts and 2 loads of B per 24 FMAs (the 6 x 32 form above spent 8 loads per
 * 12 and walked B's panel, which stays in L1 across a chunk's row tiles, twice as often per product).
 * One thread of an Ice Lake Xeon, our GEMM alone, the 6 x 32 and 12 x 32 objects linked into one
 * harness and alternated (best of 15 each; README has the rest): 2048^3 fp32 75-96 -> 89-115 GFLOP/s,
 * bf16 89-97 -> 103-115, 512^3 bf16 100-107 -> 124-126. bench/gemm_one.c times this GEMM alone.
 * A tile of 6 rows or fewer (a matrix's last) runs the first half only. */
enum { MR_F32 = 12, NR_F32 = 32 };
/* C's ROWS x 32 tile from the accumulators acc[ROWS][2] (both kernels below) */
#define UKR512_STORE(ROWS)                                                                       \
  const __m512 va = _mm512_set1_ps(alpha);                                                       \
  if (mr == ROWS && nr == NR_F32 && cs == 1) {                                                   \
    if (beta == 0) {                                                                             \
      for (int r = 0; r < ROWS; ++r) {                                                           \
        _mm512_storeu_ps(c + r * rs, _mm512_mul_ps(va, acc[r][0]));                              \
        _mm512_storeu_ps(c + r * rs + 16, _mm512_mul_ps(va, acc[r][1]));                         \
      }                                                                                          \
    } else {                                                                                     \
      const __m512 vb = _mm512_set1_ps(beta);                                                    \
      for (int r = 0; r < ROWS; ++r) {                                                           \
        float* cr = c + r * rs;                                                                  \
        _mm512_storeu_ps(cr, _mm512_fmadd_ps(va, acc[r][0], _mm512_mul_ps(vb, _mm512_loadu_ps(cr)))); \
        _mm512_storeu_ps(cr + 16, _mm512_fmadd_ps(va, acc[r][1], _mm512_mul_ps(vb, _mm512_loadu_ps(cr + 16)))); \
      }                                                                                          \
    }                                                                                            \
    return;                                                                                      \
  }                                                                                              \
  float tmp[ROWS][NR_F32];                                                                       \
  for (int r = 0; r < ROWS; ++r) {                                                               \
    _mm512_storeu_ps(&tmp[r][0], acc[r][0]);                                                     \
    _mm512_storeu_ps(&tmp[r][16], acc[r][1]);                                                    \
  }                                                                                              \
  UKR_STORE_TAIL(float, ROWS, NR_F32, tmp)
/* B's panel streams from L2 (the driver holds A's micro-panel in L1: A_IN_L1_F32), so each depth
 * step asks for the panel's two lines UKR_B_AHEAD steps on (a prefetch past the panel's end is
 * harmless). */
enum { UKR_B_AHEAD = 4 };
#define UKR512_LOOP(ROWS)                                                                        \
  __m512 acc[ROWS][2];                                                                           \
  for (int r = 0; r < ROWS; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();                    \
  for (int64_t p = 0; p < kc; ++p, a += MR_F32, b += NR_F32) {                                   \
    _mm_prefetch((const char*)(b + UKR_B_AHEAD * NR_F32), _MM_HINT_T0);                          \
    _mm_prefetch((const char*)(b + UKR_B_AHEAD * NR_F32 + 16), _MM_HINT_T0);                     \
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);                          \
    _Pragma("GCC unroll 12") for (int r = 0; r < ROWS; ++r) {                                    \
      const __m512 ar = _mm512_set1_ps(a[r]);                                                    \
      acc[r][0] = _mm512_fmadd_ps(ar, b0, acc[r][0]);                                            \
      acc[r][1] = _mm512_fmadd_ps(ar, b1, acc[r][1]);                                            \
    }                                                                                            \
  }
#define UKR512_BODY(ROWS) UKR512_LOOP(ROWS) UKR512_STORE(ROWS)
static void ukr_f32_6of12(int64_t kc, const float* restrict a, const float* restrict b, float* c, int64_t rs,
                          int64_t cs, float alpha, float beta, int mr, int nr) {
  UKR512_BODY(6)
}
static void ukr_f32(int64_t kc, const float* restrict a, const float* restrict b, float* c, int64_t rs,
                    int64_t cs, float alpha, float beta, int mr, int nr) {
  if (mr <= 6) {
    ukr_f32_6of12(kc, a, b, c, rs, cs, alpha, beta, mr, nr);
    return;
  }
  UKR512_BODY(12)
}
#if defined(__AVX512BW__)
#define GEMM_UKR_BF16C 1
/* A whole 12 x 32 tile of bf16 C (alpha 1, beta 0, unit column stride) rounded from the sums in
 * registers: the 16-bit C of products with one depth block (attention's scores, k 64), whose tiles
 * otherwise went through a float buffer and tpurt_hv_bf16x32_pack (the store was 11% of a 32 x
 * 256 x 64 x 256 bmm's time, one thread). Only for widened bf16 A and B, where every NaN a sum can
 * hold has zero low 16 bits (a widened input's, an FMA's quieted copy of one, or the default NaN),
 * so tpurt_hv_bf16x16_round_hi_nonan gives tpurt_f32_to_bf16's bits without the NaN test. */
static inline __m512i ukr_bf16_round(__m512 v) { return _mm512_srli_epi32(tpurt_hv_bf16x16_round_hi_nonan(v), 16); }
static void ukr_f32_bf16c(int64_t kc, const float* restrict a, const float* restrict b, uint16_t* c, int64_t rs) {
  UKR512_LOOP(12)
  for (int r = 0; r < 12; ++r)
    _mm512_storeu_si512(c + r * rs, tpurt_hv_u32x32_pack16(ukr_bf16_round(acc[r][0]), ukr_bf16_round(acc[r][1])));
}
#endif
/* The direct form (A read where it lies): a whole 12-row tile through four row pointers, each reaching
 * two more rows as pointer + index (twelve separate addresses would not fit the general registers);
 * a last tile of fewer rows as 6-row calls (DEFINE_UKR_AVX2_DIRECT, whose rows past the matrix's
 * last read its last row again). */
static inline __m512 bcast16_ps(const float* p) { return _mm512_set1_ps(*p); }
DEFINE_UKR_AVX2_DIRECT(ukr_f32_direct6, float, __m512, 16, _mm512_loadu_ps, _mm512_loadu_ps, _mm512_storeu_ps,
                       _mm512_set1_ps, bcast16_ps, _mm512_fmadd_ps, _mm512_mul_ps, _mm512_setzero_ps)
static void ukr_f32_direct12(int64_t kc, const float* restrict a, int64_t a_rs, int64_t a_cs, const float* restrict b,
                             float* c, int64_t rs, int64_t cs, float alpha, float beta, int mr, int nr) {
  const float *a0 = a, *a3 = a + 3 * a_rs, *a6 = a + 6 * a_rs, *a9 = a + 9 * a_rs;
  const int64_t s1 = a_rs, s2 = 2 * a_rs;
  __m512 acc[12][2];
  for (int r = 0; r < 12; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p, a0 += a_cs, a3 += a_cs, a6 += a_cs, a9 += a_cs, b += NR_F32) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    const float av[12] = {a0[0], a0[s1], a0[s2], a3[0], a3[s1], a3[s2], a6[0], a6[s1], a6[s2], a9[0], a9[s1], a9[s2]};
    _Pragma("GCC unroll 12") for (int r = 0; r < 12; ++r) {
      const __m512 ar = _mm512_set1_ps(av[r]);
      acc[r][0] = _mm512_fmadd_ps(ar, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(ar, b1, acc[r][1]);
    }
  }
  UKR512_STORE(12)
}
static void ukr_f32_direct(int64_t kc, const float* restrict a, int64_t a_rs, int64_t a_cs, const float* restrict b,
                           float* c, int64_t rs, int64_t cs, float alpha, float beta, int mr, int nr) {
  if (mr == 12) {
    ukr_f32_direct12(kc, a, a_rs, a_cs, b, c, rs, cs, alpha, beta, mr, nr);
    return;
  }
  ukr_f32_direct6(kc, a, a_rs, a_cs, b, c, rs, cs, alpha, beta, mr < 6 ? mr : 6, nr);
  if (mr > 6) ukr_f32_direct6(kc, a + 6 * a_rs, a_rs, a_cs, b, c + 6 * rs, rs, cs, alpha, beta, mr - 6, nr);
}
#else
DEFINE_UKR_AVX2(ukr_f32, float, __m256, 8, _mm256_load_ps, _mm256_loadu_ps, _mm256_storeu_ps,
                _mm256_set1_ps, _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_mul_ps,
                _mm256_setzero_ps)
DEFINE_UKR_AVX2_DIRECT(ukr_f32_direct, float, __m256, 8, _mm256_load_ps, _mm256_loadu_ps, _mm256_storeu_ps,
                       _mm256_set1_ps, _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_mul_ps,
                       _mm256_setzero_ps)
enum { MR_F32 = 6, NR_F32 = 16 };
#endif
#define GEMM_A_DIRECT 1
DEFINE_UKR_AVX2(ukr_f64, double, __m256d, 4, _mm256_load_pd, _mm256_loadu_pd, _mm256_storeu_pd,
                _mm256_set1_pd, _mm256_broadcast_sd, _mm256_fmadd_pd, _mm256_mul_pd,
                _mm256_setzero_pd)
enum { MR_F64 = 6, NR_F64 = 8 };
#else
DEFINE_UKR_GENERIC(ukr_f32, float, 6, 16)
DEFINE_UKR_GENERIC(ukr_f64, double, 6, 8)
enum { MR_F32 = 6, NR_F32 = 16, MR_F64 = 6, NR_F64 = 8 };
#endif
/* The portable fp32 microkernel, selectable at run time so tests cover it on
 * machines whose build uses the vector one (TORCH_TPU_GEMM_GENERIC=1, or
 * tpurt_gemm_set_generic). */
DEFINE_UKR_GENERIC(ukr_f32_generic, float, MR_F32, NR_F32)
typedef void (*ukr_f32_fn_t)(int64_t, const float* restrict, const float* restrict, float*, int64_t,
                             int64_t, float, float, int, int);
static _Atomic int g_generic = -1; /* -1: not read from the environment yet */
static bool gemm_generic(void) { return tpurt_env_switch(&g_generic, "TORCH_TPU_GEMM_GENERIC", false); }
void tpurt_gemm_set_generic(bool generic) { atomic_store(&g_generic, generic ? 1 : 0); }
static void ukr_f32_dispatch(int64_t kc, const float* restrict a, const float* restrict b, float* c,
                             int64_t rs, int64_t cs, float alpha, float beta, int mr, int nr) {
  ukr_f32_fn_t f = gemm_generic() ? ukr_f32_generic : ukr_f32;
  f(kc, a, b, c, rs, cs, alpha, beta, mr, nr);
}

/* ---- bf16 pairs: the AVX-512 BF16 path ----
 * vdpbf16ps multiplies pairs of bf16 and adds both products to one fp32
 * lane, so operands are packed as bf16 pairs along the depth instead of
 * being widened: a panel is [ceil(depth / 2)][panel][2] uint16 (an odd depth
 * ends with a zero partner). The microkernel holds MR_BDP x NR_BDP fp32 sums
 * (12 x 32: 24 zmm). Chosen at run time: the CPU must report avx512_bf16
 * (cpuid, through __builtin_cpu_supports), TORCH_TPU_GEMM_GENERIC must be
 * unset, and TORCH_TPU_GEMM_BF16DP may be 0 (off) or "emulate": the same
 * packing and driver with a portable microkernel that computes what
 * vdpbf16ps computes, so machines without the instruction test the layout. */
enum { MR_BDP = 12, NR_BDP = 32 };

static void pack_bf16_pairs(const void* src_, int64_t rs, int64_t cs, int64_t rows, int64_t depth,
                            int panel, void* dst_) {
  const uint16_t* src = (const uint16_t*)src_;
  uint16_t* dst = (uint16_t*)dst_;
  int64_t pairs = (depth + 1) / 2;
  for (int64_t i0 = 0; i0 < rows; i0 += panel, dst += (size_t)panel * 2 * pairs) {
    int pr = (int)imin(panel, rows - i0);
    const uint16_t* s0 = src + i0 * rs;
    if (pr == panel && rs == 1) {
      /* rows contiguous (B row-major): interleave two depth rows */
      int64_t p = 0;
      for (; p + 2 <= depth; p += 2) {
        const uint16_t *e = s0 + p * cs, *o = e + cs;
        uint16_t* d = dst + p * panel;
        int r = 0;
#if defined(__AVX2__)
        /* 16 columns at a time: unpack interleaves within 128-bit lanes, the permutes restore order */
        for (; r + 16 <= panel; r += 16) {
          __m256i ve = _mm256_loadu_si256((const __m256i*)(e + r)), vo = _mm256_loadu_si256((const __m256i*)(o + r));
          __m256i lo = _mm256_unpacklo_epi16(ve, vo), hi = _mm256_unpackhi_epi16(ve, vo);
          _mm256_storeu_si256((__m256i*)(d + 2 * r), _mm256_permute2x128_si256(lo, hi, 0x20));
          _mm256_storeu_si256((__m256i*)(d + 2 * r + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
        }
#endif
        for (; r < panel; ++r) { d[2 * r] = e[r]; d[2 * r + 1] = o[r]; }
      }
      if (p < depth) {
        const uint16_t* e = s0 + p * cs;
        uint16_t* d = dst + p * panel;
        for (int r = 0; r < panel; ++r) { d[2 * r] = e[r]; d[2 * r + 1] = 0; }
      }
      continue;
    }
    if (cs == 1) {
      /* depth contiguous (A row-major, B transposed): a pair is one 32-bit word */
      int64_t q0 = 0;
#if defined(__AVX2__)
      /* a transpose of 32-bit words: 4 rows x 8 pairs at a time, in 128-bit lanes (a third of the
       * instructions of word-by-word copies, which took 10% of a 2048^3 product) */
      if (pr == panel && panel % 4 == 0) {
        for (; q0 + 8 <= depth / 2; q0 += 8)
          for (int g = 0; g < panel; g += 4) {
            const uint16_t* e0 = s0 + g * rs + 2 * q0;
            const __m256i r0 = _mm256_loadu_si256((const __m256i*)e0);
            const __m256i r1 = _mm256_loadu_si256((const __m256i*)(e0 + rs));
            const __m256i r2 = _mm256_loadu_si256((const __m256i*)(e0 + 2 * rs));
            const __m256i r3 = _mm256_loadu_si256((const __m256i*)(e0 + 3 * rs));
            const __m256i t0 = _mm256_unpacklo_epi32(r0, r1), t1 = _mm256_unpackhi_epi32(r0, r1);
            const __m256i t2 = _mm256_unpacklo_epi32(r2, r3), t3 = _mm256_unpackhi_epi32(r2, r3);
            const __m256i u[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                                  _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
            uint16_t* d = dst + (q0 * panel + g) * 2; /* pair q0 + i of rows g..g+3: u[i % 4], lane i / 4 */
            for (int i = 0; i < 4; ++i) {
              _mm_storeu_si128((__m128i*)(d + i * 2 * panel), _mm256_castsi256_si128(u[i]));
              _mm_storeu_si128((__m128i*)(d + (i + 4) * 2 * panel), _mm256_extracti128_si256(u[i], 1));
            }
          }
      }
#endif
      for (int r = 0; r < panel; ++r) {
        uint16_t* d = dst + 2 * r;
        if (r >= pr) {
          for (int64_t q = 0; q < pairs; ++q) d[q * 2 * panel] = d[q * 2 * panel + 1] = 0;
          continue;
        }
        const uint16_t* e = s0 + r * rs;
        int64_t q = q0;
        for (; 2 * q + 2 <= depth; ++q) memcpy(d + q * 2 * panel, e + 2 * q, 4);
        if (q < pairs) { d[q * 2 * panel] = e[2 * q]; d[q * 2 * panel + 1] = 0; }
      }
      continue;
    }
    for (int64_t q = 0; q < pairs; ++q)
      for (int r = 0; r < panel; ++r)
        for (int e = 0; e < 2; ++e) {
          int64_t p = 2 * q + e;
          dst[(q * panel + r) * 2 + e] = (r < pr && p < depth) ? s0[r * rs + p * cs] : 0;
        }
  }
}

/* What vdpbf16ps does per lane: acc += a_hi * b_hi, then + a_lo * b_lo, each
 * product exact in fp32 (8-bit significands), each add rounded. (The
 * instruction also flushes denormal inputs and results to zero; the portable
 * kernel keeps them, a difference below bf16's resolution.) */
static void ukr_bdp_generic(int64_t kc, const uint16_t* restrict a, const uint16_t* restrict b, float* c,
                            int64_t rs, int64_t cs, float alpha, float beta, int mr, int nr) {
  float acc[MR_BDP][NR_BDP];
  memset(acc, 0, sizeof(acc));
  int64_t pairs = (kc + 1) / 2;
  for (int64_t q = 0; q < pairs; ++q, a += 2 * MR_BDP, b += 2 * NR_BDP)
    for (int r = 0; r < MR_BDP; ++r) {
      float a0 = tpurt_bf16_to_f32(a[2 * r]), a1 = tpurt_bf16_to_f32(a[2 * r + 1]);
      for (int j = 0; j < NR_BDP; ++j) {
        float v = acc[r][j] + a1 * tpurt_bf16_to_f32(b[2 * j + 1]);
        acc[r][j] = v + a0 * tpurt_bf16_to_f32(b[2 * j]);
      }
    }
  UKR_STORE_TAIL(float, MR_BDP, NR_BDP, acc)
}

#if defined(__x86_64__) && defined(__GNUC__) && (__GNUC__ >= 10 || defined(__clang__))
#define GEMM_HAVE_BDP_X86 1
/* Built for AVX-512 BF16 whatever -march says; only called after cpuid said yes. */
__attribute__((target("avx512f,avx512bf16"))) static void ukr_bdp_avx512(
    int64_t kc, const uint16_t* restrict a, const uint16_t* restrict b, float* c, int64_t rs, int64_t cs,
    float alpha, float beta, int mr, int nr) {
  __m512 acc[MR_BDP][2];
#pragma GCC unroll 12
  for (int r = 0; r < MR_BDP; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  int64_t pairs = (kc + 1) / 2;
  for (int64_t q = 0; q < pairs; ++q, a += 2 * MR_BDP, b += 2 * NR_BDP) {
    __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void*)b);
    __m512bh b1 = (__m512bh)_mm512_loadu_si512((const void*)(b + 32));
#pragma GCC unroll 12
    for (int r = 0; r < MR_BDP; ++r) {
      int32_t pair;
      memcpy(&pair, a + 2 * r, 4);
      __m512bh ar = (__m512bh)_mm512_set1_epi32(pair);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
    }
  }
  __m512 va = _mm512_set1_ps(alpha);
  if (mr == MR_BDP && nr == NR_BDP && cs == 1) {
    __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
    for (int r = 0; r < MR_BDP; ++r) {
      float* cr = c + r * rs;
      __m512 v0 = _mm512_mul_ps(va, acc[r][0]), v1 = _mm512_mul_ps(va, acc[r][1]);
      if (beta != 0) {
        v0 = _mm512_fmadd_ps(vb, _mm512_loadu_ps(cr), v0);
        v1 = _mm512_fmadd_ps(vb, _mm512_loadu_ps(cr + 16), v1);
      }
      _mm512_storeu_ps(cr, v0);
      _mm512_storeu_ps(cr + 16, v1);
    }
    return;
  }
  float tmp[MR_BDP][NR_BDP] __attribute__((aligned(64)));
  for (int r = 0; r < MR_BDP; ++r) {
    _mm512_store_ps(&tmp[r][0], acc[r][0]);
    _mm512_store_ps(&tmp[r][16], acc[r][1]);
  }
  UKR_STORE_TAIL(float, MR_BDP, NR_BDP, tmp)
}
#endif

static int bdp_mode(void);

/* X(r) for rows 0..R-1 of the few-rows dot kernels (bf16 here, fp32 further on) */
#define SMALL_ROWS4(X) X(0) X(1) X(2) X(3)
#define SMALL_ROWS2(X) X(0) X(1)

/* C[i][j] = alpha * sums[i][j] + beta * C_in[i][j] for rows i0.., columns j0.. (rows x cols), in C's
 * dtype (float32, bf16 or f16). */
static void few_store(const tpurt_gemm_t* g, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                      const float* sums) {
  const size_t cs = tpurt_dtype_size(g->c_dtype);
  if (g->beta == 0) { /* C is not read; alpha scales the float sums, as the pair kernel's store does */
    const float alpha = (float)g->alpha;
    for (int64_t r = 0; r < rows; ++r) {
      char* c = (char*)g->c + (size_t)((i0 + r) * g->c_rs + j0 * g->c_cs) * cs;
      for (int64_t q = 0; q < cols; ++q) {
        float v = alpha * sums[r * cols + q];
        if (g->c_dtype == TPURT_DTYPE_FLOAT32) ((float*)c)[q * g->c_cs] = v;
        else if (g->c_dtype == TPURT_DTYPE_BFLOAT16) ((uint16_t*)c)[q * g->c_cs] = tpurt_f32_to_bf16(v);
        else tpurt_dtype_store_f64(g->c_dtype, c + (size_t)(q * g->c_cs) * cs, v);
      }
    }
    return;
  }
  const char* cin = g->c_in ? (const char*)g->c_in : (const char*)g->c;
  int64_t in_rs = g->c_in ? g->c_in_rs : g->c_rs, in_cs = g->c_in ? g->c_in_cs : g->c_cs;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t q = 0; q < cols; ++q) {
      int64_t i = i0 + r, j = j0 + q;
      double v = g->alpha * (double)sums[r * cols + q] +
                 g->beta * tpurt_dtype_load_f64(g->c_dtype, cin + (size_t)(i * in_rs + j * in_cs) * cs);
      tpurt_dtype_store_f64(g->c_dtype, (char*)g->c + (size_t)(i * g->c_rs + j * g->c_cs) * cs, v);
    }
}

/* Row r's four sums (named accumulators c<r>0..c<r>3, 16 float lanes each) into out[4 r..] */
#define FEW4_OUT(r)                                                                                         \
  out[r * 4] = _mm512_reduce_add_ps(c##r##0), out[r * 4 + 1] = _mm512_reduce_add_ps(c##r##1),              \
  out[r * 4 + 2] = _mm512_reduce_add_ps(c##r##2), out[r * 4 + 3] = _mm512_reduce_add_ps(c##r##3);

/* 16-bit products with few rows where vdpbf16ps is not used (an AVX-512 machine without BF16, f16
 * on any): A's rows widened to float once per call, W widened as each vector is read (HALF_FEW:
 * the kernels after the fp32 few-row ones). The packed path widened all of W into panels first:
 * 1 x 4096 x 4096 bf16 at 5.3 ms against PyTorch CPU's 2.2 on a 2-core Ice Lake Xeon. */
#if (defined(__AVX512F__) && defined(__AVX512BW__)) || (!defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#define HALF_FEW 1
#endif
#ifdef HALF_FEW
#define HALF_FEW_NN 1 /* op(B) = W row-major too (wnn_*) */
#endif
/* depth blocks from 2 rows (blocking from 1 row measured level within noise, from 2 slightly ahead) */
enum { HALF_FEW_M = 16, HALF_FEW_KB = 1024, HALF_FEW_BLOCK_M = 1 };
/* 0: not for these kernels; 1: op(B) = W^T with W's rows along k (a linear layer's weight); 2: op(B) =
 * W row-major along n (`x @ W`, GPT-2's Conv1D), whose few-row kernel (HALF_FEW_NN) walks W's rows
 * whole and keeps C's rows in float. */
static int half_few_form(const tpurt_gemm_t* g) {
#ifdef HALF_FEW
  if ((g->ab_dtype != TPURT_DTYPE_BFLOAT16 && g->ab_dtype != TPURT_DTYPE_FLOAT16) || g->m < 1 ||
      g->m > HALF_FEW_M || g->k < 1 || g->a_cs != 1 ||
      (g->c_dtype != g->ab_dtype && g->c_dtype != TPURT_DTYPE_FLOAT32))
    return 0;
  if (g->b_rs == 1) return 1;
#ifdef HALF_FEW_NN
  if (g->b_cs == 1) return 2;
#endif
#else
  (void)g;
#endif
  return 0;
}
/* The bytes half_few_rows needs: A widened, and form 2's C in float */
static size_t half_few_bytes(const tpurt_gemm_t* g) {
  int f = half_few_form(g);
  if (!f) return 0;
  return align64(mul_sat(mul_sat(g->m, g->k), 4)) + (f == 2 ? align64(mul_sat(mul_sat(g->m, g->n), 4)) : 0);
}

/* NAME(g, a, lda, q0, q1): columns [4 q0, 4 q1) of C, every row, as dot products of A's rows (type AT,
 * lda apart) with op(B)'s columns, which are rows of W = B (16-bit, contiguous along k), through the
 * kernels K##_RxC(k, a, lda, w, ldw, out, pf): R rows x C columns of sums into out. Four columns at a
 * time; the first row block of each group fetches the next group's W rows (pf). */
#define DEFINE_FEW_COLS(NAME, K, AT, KB, BLOCK_M)                                                         \
  static void NAME(const tpurt_gemm_t* g, const AT* a, int64_t lda, int64_t q0, int64_t q1) {             \
    const uint16_t* w = (const uint16_t*)g->b; /* op(B)[p][j] = w[j * b_cs + p] */                        \
    const int64_t m = g->m, n = g->n, k = g->k, ldw = g->b_cs;                                            \
    float sums[16];                                                                                       \
    for (int64_t j = 4 * q0; j < n && j < 4 * q1; j += 4) {                                               \
      const uint16_t* wj = w + j * ldw;                                                                   \
      if (j + 4 <= n) {                                                                                   \
        const uint16_t* pf = j + 8 <= n ? wj + 4 * ldw : NULL;                                            \
        /* More than BLOCK_M rows of a deep product: depth blocks, so that the group's four weight     \
         * rows stay in L1 while each row block's A rows stream past (4096 deep, 16 rows: the two       \
         * outgrew L1 and the weight rows came from L2 once per row block); the blocks' sums added in   \
         * float. One block otherwise. */                                                                 \
        const int64_t kb = m > (BLOCK_M) && k > (KB) ? (KB) : k;                                          \
        float tot[16 * 4];                                                                                \
        for (int64_t p0 = 0; p0 < k; p0 += kb) {                                                          \
          const int64_t kk = imin(kb, k - p0);                                                            \
          const AT* ap = a + p0;                                                                          \
          const uint16_t *wp = wj + p0, *pfp = pf ? pf + p0 : NULL;                                       \
          int64_t i = 0;                                                                                  \
          for (; i + 4 <= m; i += 4, pfp = NULL) {                                                        \
            K##_4x4(kk, ap + i * lda, lda, wp, ldw, sums, pfp);                                           \
            for (int e = 0; e < 16; ++e) tot[i * 4 + e] = p0 ? tot[i * 4 + e] + sums[e] : sums[e];        \
          }                                                                                               \
          if (i + 2 <= m) {                                                                               \
            K##_2x4(kk, ap + i * lda, lda, wp, ldw, sums, pfp);                                           \
            for (int e = 0; e < 8; ++e) tot[i * 4 + e] = p0 ? tot[i * 4 + e] + sums[e] : sums[e];         \
            i += 2, pfp = NULL;                                                                           \
          }                                                                                               \
          if (i < m) {                                                                                    \
            K##_1x4(kk, ap + i * lda, lda, wp, ldw, sums, pfp);                                           \
            for (int e = 0; e < 4; ++e) tot[i * 4 + e] = p0 ? tot[i * 4 + e] + sums[e] : sums[e];         \
          }                                                                                               \
        }                                                                                                 \
        few_store(g, 0, m, j, 4, tot);                                                                    \
        continue;                                                                                         \
      }                                                                                                   \
      for (int64_t jj = j; jj < n; ++jj) {                                                                \
        const uint16_t* wq = w + jj * ldw;                                                                \
        int64_t i = 0;                                                                                    \
        for (; i + 4 <= m; i += 4) K##_4x1(k, a + i * lda, lda, wq, ldw, sums, NULL), few_store(g, i, 4, jj, 1, sums); \
        if (i + 2 <= m) K##_2x1(k, a + i * lda, lda, wq, ldw, sums, NULL), few_store(g, i, 2, jj, 1, sums), i += 2;    \
        if (i < m) K##_1x1(k, a + i * lda, lda, wq, ldw, sums, NULL), few_store(g, i, 1, jj, 1, sums);                 \
      }                                                                                                   \
    }                                                                                                     \
  }

/* ---- bf16 products with few rows against a transposed B: dot products, no packing ----
 * A linear layer over a decode step's few tokens (m <= BF16_FEW_M) reads its weight once per call;
 * the pair kernel above packs all of it first, which cost as much again (1 x 4096 x 4096 1.75 ms
 * against PyTorch CPU's 1.05, the weight streamed from memory). Here op(B) = W^T lies as rows of W
 * contiguous along k, where vdpbf16ps's pairs are adjacent: R rows of A x C rows of W in R x C
 * 16-lane accumulators, 32 depth values a step (the tail masked to zeros), each reduced at the end;
 * the first row block fetches the next C rows of W into L2 (as small_nt_* does for fp32). */
enum { BF16_FEW_M = 16, BF16_FEW_KB = 2048 };
#ifdef GEMM_HAVE_BDP_X86

/* One depth step of 32 (mask m: the tail's zeros). */
#define BF16_NT_STEP(R, C, m)                                                                             \
  do {                                                                                                    \
    for (int q = 0; q < C; ++q) _mm_prefetch((const char*)(pf + q * ldw + p), _MM_HINT_T1);               \
    __m512bh av[R], wv[C];                                                                                \
    for (int r = 0; r < R; ++r) av[r] = (__m512bh)_mm512_maskz_loadu_epi16(m, a + r * lda + p);          \
    for (int q = 0; q < C; ++q) wv[q] = (__m512bh)_mm512_maskz_loadu_epi16(m, w + q * ldw + p);          \
    for (int r = 0; r < R; ++r)                                                                           \
      for (int q = 0; q < C; ++q) acc[r][q] = _mm512_dpbf16_ps(acc[r][q], av[r], wv[q]);                  \
  } while (0)
/* pf NULL: the prefetches go to w's own rows (already read), so the loop has no branch. */
#define DEFINE_BF16_NT(R, C)                                                                              \
  __attribute__((target("avx512f,avx512bw,avx512bf16"))) static void bf16_nt_##R##x##C(                     \
      int64_t k, const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, float* out,              \
      const uint16_t* pf) {                                                                               \
    __m512 acc[R][C];                                                                                     \
    for (int r = 0; r < R; ++r)                                                                           \
      for (int q = 0; q < C; ++q) acc[r][q] = _mm512_setzero_ps();                                        \
    if (!pf) pf = w;                                                                                      \
    for (int64_t p = 0; p < k; p += 32)                                                                   \
      BF16_NT_STEP(R, C, k - p >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (k - p)) - 1));       \
    for (int r = 0; r < R; ++r)                                                                           \
      for (int q = 0; q < C; ++q) out[r * C + q] = _mm512_reduce_add_ps(acc[r][q]);                      \
  }
/* 4 and 2 rows x 4 columns in named accumulators (as small_nt_4x4: arrays were also kept on the stack) */
#define BNT4_DECL(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = c##r##0, c##r##2 = c##r##0, c##r##3 = c##r##0;
#define BNT4_DP(r)                                                                                          \
  {                                                                                                         \
    const __m512bh av = (__m512bh)_mm512_maskz_loadu_epi16(m, a + r * lda + p);                            \
    c##r##0 = _mm512_dpbf16_ps(c##r##0, av, b0);                                                            \
    c##r##1 = _mm512_dpbf16_ps(c##r##1, av, b1);                                                            \
    c##r##2 = _mm512_dpbf16_ps(c##r##2, av, b2);                                                            \
    c##r##3 = _mm512_dpbf16_ps(c##r##3, av, b3);                                                            \
  }
#define BNT4_STEP(R, M)                                                                                   \
  do {                                                                                                    \
    const __mmask32 m = (M);                                                                              \
    for (int q = 0; q < 4; ++q) _mm_prefetch((const char*)(pf + q * ldw + p), _MM_HINT_T1);              \
    const __m512bh b0 = (__m512bh)_mm512_maskz_loadu_epi16(m, w + p),                                     \
                   b1 = (__m512bh)_mm512_maskz_loadu_epi16(m, w + ldw + p),                               \
                   b2 = (__m512bh)_mm512_maskz_loadu_epi16(m, w + 2 * ldw + p),                           \
                   b3 = (__m512bh)_mm512_maskz_loadu_epi16(m, w + 3 * ldw + p);                           \
    SMALL_ROWS##R(BNT4_DP)                                                                                \
  } while (0)
#define DEFINE_BF16_NT4(R)                                                                                  \
  __attribute__((target("avx512f,avx512bw,avx512bf16"))) static void bf16_nt_##R##x4(                      \
      int64_t k, const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, float* out,              \
      const uint16_t* pf) {                                                                               \
    SMALL_ROWS##R(BNT4_DECL)                                                                              \
    if (!pf) pf = w;                                                                                      \
    int64_t p = 0;                                                                                        \
    for (; p + 32 <= k; p += 32) BNT4_STEP(R, (__mmask32)0xFFFFFFFFu);                                   \
    if (p < k) BNT4_STEP(R, (__mmask32)((1u << (k - p)) - 1));                                           \
    SMALL_ROWS##R(FEW4_OUT)                                                                               \
  }
DEFINE_BF16_NT4(4)
DEFINE_BF16_NT4(2)
DEFINE_BF16_NT(1, 4)
DEFINE_BF16_NT(4, 1)
DEFINE_BF16_NT(2, 1)
DEFINE_BF16_NT(1, 1)
DEFINE_FEW_COLS(bdp_few_cols, bf16_nt, uint16_t, BF16_FEW_KB, 4)

/* Columns [4 q0, 4 q1) of C, every row, through the bf16 dot kernels (few_cols_run below) */
static void bf16_few_cols(void* u, int64_t q0, int64_t q1, int tid) {
  const tpurt_gemm_t* g = u;
  bdp_few_cols(g, (const uint16_t*)g->a, g->a_rs, q0, q1);
}
#endif

/* Runs g through the dot kernels above where they apply: bf16 A and B on the vdpbf16ps machine, at
 * most BF16_FEW_M rows of a row-major A, op(B) = W^T with W's rows contiguous, one product (batch
 * 1), C bf16 or float32. False: g is not one of these (the caller packs). */
static bool bf16_few_rows(tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g) {
#ifdef GEMM_HAVE_BDP_X86
  if (g->ab_dtype != TPURT_DTYPE_BFLOAT16 || bdp_mode() != 1 || g->m < 1 || g->m > BF16_FEW_M || g->k < 1 ||
      g->a_cs != 1 || g->b_rs != 1 || (g->c_dtype != TPURT_DTYPE_BFLOAT16 && g->c_dtype != TPURT_DTYPE_FLOAT32))
    return false;
  int64_t groups = (g->n + 3) / 4;
  /* about 2^18 multiply-adds a task: a 16 x 4096 layer's 4096 columns in 32 */
  int64_t per = (int64_t)1 << 18, grain = per / (mul_sat(g->m, g->k) * 4 + 1) + 1;
  run_range(ctx, groups, grain, bf16_few_cols, (void*)g);
  return true;
#else
  (void)ctx, (void)g;
  return false;
#endif
}

static void ukr_bdp_dispatch(int64_t kc, const uint16_t* restrict a, const uint16_t* restrict b, float* c,
                             int64_t rs, int64_t cs, float alpha, float beta, int mr, int nr) {
#ifdef GEMM_HAVE_BDP_X86
  if (bdp_mode() == 1) {
    ukr_bdp_avx512(kc, a, b, c, rs, cs, alpha, beta, mr, nr);
    return;
  }
#endif
  ukr_bdp_generic(kc, a, b, c, rs, cs, alpha, beta, mr, nr);
}

/* ---- bf16 tiles: the AMX path ----
 * AMX (Sapphire Rapids and later) multiplies a 16 x 32 bf16 tile by a 32 x 16
 * one into a 16 x 16 fp32 tile (TDPBF16PS: per output, pairs along the depth,
 * as vdpbf16ps). The microkernel keeps a 32 x 32 block of C in four tiles and
 * streams 32-deep chunks of A and B through the other four. A is packed per
 * 32-row panel as [depth / 32][32 rows][32] (a tile row is 32 consecutive depth
 * values of one row of A), B as the pair panels above with 32 columns
 * ([depth / 2][32][2]: a tile row is one pair of depth rows for 16 columns),
 * both with the depth zero-padded to a multiple of 32. Chosen at run time when
 * cpuid reports AMX-TILE and AMX-BF16, the OS enables tile state and grants
 * this process its use (arch_prctl); TORCH_TPU_GEMM_BF16DP=amx-emulate runs the
 * same packing and driver through a portable microkernel. */
enum { MR_AMX = 32, NR_AMX = 32, KB_AMX = 32 };
#define KCP_AMX(kc) (((kc) + KB_AMX - 1) & ~(int64_t)(KB_AMX - 1))

static void pack_amx_a(const void* src_, int64_t rs, int64_t cs, int64_t rows, int64_t depth, int panel,
                       void* dst_) {
  const uint16_t* src = (const uint16_t*)src_;
  uint16_t* dst = (uint16_t*)dst_;
  int64_t kp = KCP_AMX(depth);
  for (int64_t i0 = 0; i0 < rows; i0 += panel, dst += (size_t)panel * kp) {
    int pr = (int)imin(panel, rows - i0);
#if defined(__AVX512F__)
    if (pr == panel && cs == 1 && depth % KB_AMX == 0) { /* whole 32-deep chunks of whole panels */
      for (int64_t c0 = 0; c0 < kp; c0 += KB_AMX) {
        const uint16_t* e = src + i0 * rs + c0;
        uint16_t* d = dst + c0 * panel;
        for (int r = 0; r < panel; ++r) _mm512_storeu_si512(d + r * KB_AMX, _mm512_loadu_si512(e + r * rs));
      }
      continue;
    }
#endif
    for (int64_t c0 = 0; c0 < kp; c0 += KB_AMX) {
      uint16_t* d = dst + c0 * panel;
      int64_t kn = imin(KB_AMX, depth - c0);
      for (int r = 0; r < panel; ++r, d += KB_AMX) {
        if (r >= pr) {
          memset(d, 0, KB_AMX * sizeof(uint16_t));
          continue;
        }
        const uint16_t* e = src + (i0 + r) * rs + c0 * cs;
        if (cs == 1 && kn == KB_AMX) memcpy(d, e, KB_AMX * sizeof(uint16_t)); /* a constant size: inlined */
        else if (cs == 1) memcpy(d, e, (size_t)kn * sizeof(uint16_t));
        else
          for (int64_t p = 0; p < kn; ++p) d[p] = e[p * cs];
        if (kn < KB_AMX) memset(d + kn, 0, (size_t)(KB_AMX - kn) * sizeof(uint16_t));
      }
    }
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
/* B row-major (its NR_AMX columns of each depth row contiguous) and an even depth: the whole
 * panels among `rows`, each pair of depth rows becoming 32 (even, odd) pairs (tpurt_hv_u16_pairs32).
 * The depth runs in blocks of PACK_ROWS rows across all the panels, so the
 * source's rows (each on its own page when B is wide) are read once each, not once per panel.
 * Returns the rows packed (whole panels; the caller packs the rest). */
enum { PACK_ROWS = 64 };
static int64_t pack_amx_b_fast(const uint16_t* src, int64_t cs, int64_t rows, int64_t depth, uint16_t* dst) {
  if (depth % 2) return 0;
  int64_t kp = KCP_AMX(depth), panels = rows / NR_AMX;
  for (int64_t p0 = 0; p0 < depth; p0 += PACK_ROWS) {
    int64_t p1 = imin(p0 + PACK_ROWS, depth);
    for (int64_t q = 0; q < panels; ++q)
      for (int64_t p = p0; p < p1; p += 2)
        tpurt_hv_u16_pairs32(src + p * cs + q * NR_AMX, src + (p + 1) * cs + q * NR_AMX,
                             dst + q * NR_AMX * kp + p * NR_AMX);
  }
  for (int64_t q = 0; q < panels; ++q) /* the zero depth that pads to whole 32-deep chunks */
    memset(dst + q * NR_AMX * kp + depth * NR_AMX, 0, (size_t)(kp - depth) * NR_AMX * sizeof(uint16_t));
  return panels * NR_AMX;
}
#endif

static void pack_amx_b(const void* src_, int64_t rs, int64_t cs, int64_t rows, int64_t depth, int panel,
                       void* dst_) {
  const uint16_t* src = (const uint16_t*)src_;
  uint16_t* dst = (uint16_t*)dst_;
  int64_t kp = KCP_AMX(depth), used = 2 * ((depth + 1) / 2);
  int64_t i0 = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if (rs == 1 && panel == NR_AMX) {
    i0 = pack_amx_b_fast(src, cs, rows, depth, dst);
    dst += (size_t)i0 * kp;
  }
#endif
  for (; i0 < rows; i0 += panel, dst += (size_t)panel * kp) {
    pack_bf16_pairs(src + i0 * rs, rs, cs, imin(panel, rows - i0), depth, panel, dst);
    memset(dst + used * panel, 0, (size_t)(kp - used) * panel * sizeof(uint16_t));
  }
}

/* What the tile kernel computes, from the same panels (pairs as in vdpbf16ps). */
static void ukr_amx_generic(int64_t kc, const uint16_t* restrict a, const uint16_t* restrict b, float* c,
                            int64_t rs, int64_t cs, float alpha, float beta, int mr, int nr) {
  float acc[MR_AMX][NR_AMX];
  memset(acc, 0, sizeof(acc));
  for (int64_t c0 = 0; c0 < KCP_AMX(kc); c0 += KB_AMX) {
    const uint16_t *ap = a + c0 * MR_AMX, *bp = b + c0 * NR_AMX;
    for (int q = 0; q < KB_AMX / 2; ++q)
      for (int r = 0; r < MR_AMX; ++r) {
        float a0 = tpurt_bf16_to_f32(ap[r * KB_AMX + 2 * q]), a1 = tpurt_bf16_to_f32(ap[r * KB_AMX + 2 * q + 1]);
        const uint16_t* bq = bp + q * 2 * NR_AMX;
        for (int j = 0; j < NR_AMX; ++j) {
          float v = acc[r][j] + a1 * tpurt_bf16_to_f32(bq[2 * j + 1]);
          acc[r][j] = v + a0 * tpurt_bf16_to_f32(bq[2 * j]);
        }
      }
  }
  UKR_STORE_TAIL(float, MR_AMX, NR_AMX, acc)
}

#if defined(__x86_64__) && defined(__GNUC__) && (__GNUC__ >= 11 || defined(__clang__))
#define GEMM_HAVE_AMX 1
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Tile configuration (palette 1): tiles 0-3 hold C, 4-5 A, 6-7 B; each 16 rows of 64 bytes. It is
 * per-thread state that other code on the thread may change or release (oneDNN, which PyTorch CPU
 * calls for bf16 matmuls, releases the tiles after each product), so it is loaded at the start of
 * every tile loop, and the tiles are released at its end (a thread with live tile state makes
 * every context switch save 8 KiB more). */
typedef struct amx_cfg_t {
  uint8_t palette_id, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_cfg_t;
/* A constant, not a local filled in place: gcc does not see ldtilecfg read its operand and, once
 * inlined, dropped the stores that fill a local one (the load then faulted on a zeroed config). */
static const amx_cfg_t kAmxCfg __attribute__((aligned(64))) = {
    .palette_id = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};
__attribute__((target("amx-tile"))) static void amx_begin(void) { _tile_loadconfig(&kAmxCfg); }
__attribute__((target("amx-tile"))) static void amx_end(void) { _tile_release(); }

/* What the AMX kernel pulls toward L2 while its tiles multiply: a share of the B panel the tile loop
 * reads next (amx_next_b). The tiles run at about 60% of their peak when the panels are in L2 and
 * at 35% when each B panel comes from L3; the hardware prefetchers do not run far enough ahead of
 * 1 KiB tile loads. */
typedef struct amx_prefetch_t {
  const char* p;
  int64_t lines;
} amx_prefetch_t;

__attribute__((target("amx-tile,amx-bf16,avx512f"))) static void ukr_amx(
    amx_prefetch_t next, int64_t kc, const uint16_t* restrict a, const uint16_t* restrict b, float* c, int64_t rs,
    int64_t cs, float alpha, float beta, int mr, int nr) {
  /* A full tile of row-major C with alpha 1 (the driver's usual call) is accumulated in place:
   * loaded as the starting sums when beta is 1, stored straight back. */
  bool direct = mr == MR_AMX && nr == NR_AMX && cs == 1 && alpha == 1 && (beta == 0 || beta == 1);
  if (direct && beta == 1) {
    _tile_loadd(0, c, rs * 4);
    _tile_loadd(1, c + 16, rs * 4);
    _tile_loadd(2, c + 16 * rs, rs * 4);
    _tile_loadd(3, c + 16 * rs + 16, rs * 4);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  const char* pf = next.p;
  int64_t steps = KCP_AMX(kc) / KB_AMX, pf_per = pf ? (next.lines + steps - 1) / steps : 0;
  for (int64_t c0 = 0; c0 < KCP_AMX(kc); c0 += KB_AMX) {
    const uint16_t *ap = a + c0 * MR_AMX, *bp = b + c0 * NR_AMX;
    _tile_loadd(4, ap, KB_AMX * 2);
    _tile_loadd(5, ap + 16 * KB_AMX, KB_AMX * 2);
    _tile_loadd(6, bp, NR_AMX * 4);
    _tile_loadd(7, bp + 32, NR_AMX * 4);
    for (int64_t q = 0; q < pf_per; ++q, pf += 64) _mm_prefetch(pf, _MM_HINT_T1);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  if (direct) {
    _tile_stored(0, c, rs * 4);
    _tile_stored(1, c + 16, rs * 4);
    _tile_stored(2, c + 16 * rs, rs * 4);
    _tile_stored(3, c + 16 * rs + 16, rs * 4);
    return;
  }
  float tmp[MR_AMX][NR_AMX] __attribute__((aligned(64)));
  _tile_stored(0, &tmp[0][0], NR_AMX * 4);
  _tile_stored(1, &tmp[0][16], NR_AMX * 4);
  _tile_stored(2, &tmp[16][0], NR_AMX * 4);
  _tile_stored(3, &tmp[16][16], NR_AMX * 4);
  if (mr == MR_AMX && nr == NR_AMX && cs == 1) {
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int r = 0; r < MR_AMX; ++r)
      for (int j = 0; j < NR_AMX; j += 16) {
        __m512 v = _mm512_mul_ps(va, _mm512_load_ps(&tmp[r][j]));
        if (beta != 0) v = _mm512_fmadd_ps(vb, _mm512_loadu_ps(c + r * rs + j), v);
        _mm512_storeu_ps(c + r * rs + j, v);
      }
    return;
  }
  UKR_STORE_TAIL(float, MR_AMX, NR_AMX, tmp)
}

/* cpuid: AMX-TILE (leaf 7 EDX bit 24) and AMX-BF16 (bit 22); the OS: tile state enabled in XCR0
 * (bits 17, 18), and this process allowed to use it (Linux: ARCH_REQ_XCOMP_PERM for
 * XFEATURE_XTILEDATA; without it the first tile instruction faults). */
static bool amx_usable(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (!((d >> 24) & 1) || !((d >> 22) & 1)) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return false; /* OSXSAVE */
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return false;
  return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
}
#endif

/* Which bf16 path runs: 0 widened fp32, 1 vdpbf16ps, 2 the portable pair
 * kernel, 3 AMX tiles, 4 the portable kernel on the AMX panels. By default the
 * fastest the CPU has (3, else 1, else 0); TORCH_TPU_GEMM_BF16DP=0, avx512bf16,
 * amx, emulate or amx-emulate picks one (a hardware one only where it exists). */
static bool bf16_mode_supported(int mode) {
  static _Atomic int hw = -1; /* bit 1: avx512bf16, bit 3: amx */
  int h = atomic_load_explicit(&hw, memory_order_relaxed);
  if (h < 0) {
    h = 0;
#ifdef GEMM_HAVE_BDP_X86
    if (__builtin_cpu_supports("avx512bf16")) h |= 1 << 1;
#endif
#ifdef GEMM_HAVE_AMX
    if (amx_usable()) h |= 1 << 3;
#endif
    atomic_store_explicit(&hw, h, memory_order_relaxed);
  }
  return mode == 0 || mode == 2 || mode == 4 || (mode >= 0 && mode < 8 && ((h >> mode) & 1));
}
static _Atomic int g_bdp = -1;
static int bdp_mode(void) {
  int v = atomic_load_explicit(&g_bdp, memory_order_relaxed);
  if (TPURT_LIKELY(v >= 0)) return v;
  const char* e = getenv("TORCH_TPU_GEMM_BF16DP");
  static const char* const names[] = {"0", "avx512bf16", "emulate", "amx", "amx-emulate"};
  v = -1;
  for (int i = 0; e && i < 5; ++i)
    if (strcmp(e, names[i]) == 0 && bf16_mode_supported(i)) v = i;
  if (v < 0) v = bf16_mode_supported(3) ? 3 : bf16_mode_supported(1) ? 1 : 0;
  atomic_store_explicit(&g_bdp, v, memory_order_relaxed);
  return v;
}
/* A path this machine cannot run is not set (asking also gets the process its tile permission). */
void tpurt_gemm_set_bf16dp(int mode) { atomic_store(&g_bdp, mode < 0 || !bf16_mode_supported(mode) ? -1 : mode); }
int tpurt_gemm_bf16dp_mode(void) { return gemm_generic() ? 0 : bdp_mode(); }
bool tpurt_gemm_bf16dp_supported(int mode) { return bf16_mode_supported(mode); }

static void ukr_amx_dispatch(amx_prefetch_t next, int64_t kc, const uint16_t* restrict a, const uint16_t* restrict b,
                             float* c, int64_t rs, int64_t cs, float alpha, float beta, int mr, int nr) {
#ifdef GEMM_HAVE_AMX
  if (bdp_mode() == 3) {
    ukr_amx(next, kc, a, b, c, rs, cs, alpha, beta, mr, nr);
    return;
  }
#endif
  ukr_amx_generic(kc, a, b, c, rs, cs, alpha, beta, mr, nr);
}
/* Around every tile loop of the AMX driver (see amx_begin). */
static void amx_tiles_begin(void) {
#ifdef GEMM_HAVE_AMX
  if (bdp_mode() == 3) amx_begin();
#endif
}
static void amx_tiles_end(void) {
#ifdef GEMM_HAVE_AMX
  if (bdp_mode() == 3) amx_end();
#endif
}
void tpurt_gemm_amx_tiles_begin(void) { amx_tiles_begin(); }
void tpurt_gemm_amx_tiles_end(void) { amx_tiles_end(); }

/* One finished mr x nr fp32 tile (rows `ld` apart, nr <= 64) into 16-bit C:
 * c = round(alpha * acc + beta * c). */
static void store_tile_c16(tpurt_dtype_t dt, const float* acc, int ld, uint16_t* c, int64_t rs, int64_t cs,
                           float alpha, float beta, int mr, int nr) {
  float row[64];
  for (int r = 0; r < mr; ++r) {
    uint16_t* cr = c + r * rs;
    const float* a = acc + r * ld;
    if (beta == 0 && alpha == 1 && cs == 1) {
      tpurt_hv_from_f32(dt, a, cr, nr);
      continue;
    }
    if (beta == 0) {
      for (int j = 0; j < nr; ++j) row[j] = alpha * a[j];
    } else {
      for (int j = 0; j < nr; ++j) {
        float old = dt == TPURT_DTYPE_BFLOAT16 ? tpurt_bf16_to_f32(cr[j * cs]) : tpurt_f16_to_f32(cr[j * cs]);
        row[j] = alpha * a[j] + beta * old;
      }
    }
    if (cs == 1) {
      tpurt_hv_from_f32(dt, row, cr, nr);
    } else {
      for (int j = 0; j < nr; ++j)
        cr[j * cs] = dt == TPURT_DTYPE_BFLOAT16 ? tpurt_f32_to_bf16(row[j]) : tpurt_f32_to_f16(row[j]);
    }
  }
}

/* store_tile_c16 for its most common call, inline: whole 32-column rows of
 * bf16 C with alpha 1 and beta 0 (the bf16 kernels' own tile width), one
 * 32-lane conversion and one 64-byte store per row. The generic version
 * costs more than the tile's multiplies when the depth is short (attention's
 * head dim of 64). */
static inline void store_tile_c16_fast(tpurt_dtype_t dt, const float* acc, int ld, uint16_t* c, int64_t rs,
                                       int64_t cs, float alpha, float beta, int mr, int nr) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if (dt == TPURT_DTYPE_BFLOAT16 && nr == 32 && cs == 1 && alpha == 1 && beta == 0) {
    for (int r = 0; r < mr; ++r)
      _mm512_storeu_si512(c + r * rs, tpurt_hv_bf16x32_pack(_mm512_loadu_ps(acc + r * ld), _mm512_loadu_ps(acc + r * ld + 16)));
    return;
  }
#endif
  store_tile_c16(dt, acc, ld, c, rs, cs, alpha, beta, mr, nr);
}

/* ---- the blocked driver, one instance per accumulation type ----
 * Per block of B (NCB columns x KCB depth), one parallel region: each thread
 * takes one box of C (a run of MR-row panels x a run of NR-column panels; rows
 * are split first, columns only where the rows are too few for the threads),
 * packs its share of its columns' B panels (the rest are packed by the boxes
 * sharing those columns, or by whoever needs one first: panel_ready), and
 * walks its box a row chunk at a time: it packs the chunk's A (MC rows x the
 * depth block) into a buffer of its own, which stays in its L2 while every B
 * panel of its box streams past (or, for fp32 with few columns, reads A where
 * it lies: a_direct_pays). */
/* The most NR-column panels in one column block of B, over every kind (int64: 1024 / 4). */
enum { PANELS_MAX = 256 };
typedef struct core_args_t core_args_t;
static amx_prefetch_t amx_next_b(const core_args_t* s, int64_t i, int64_t i0, int64_t i1, int64_t j, int64_t c0,
                                 int64_t c1, bool more);
/* The AMX kernel as the tile loops call it, given what to prefetch (from the loop's own variables). */
#define UKR_AMX(...) ukr_amx_dispatch(amx_next_b(s, i, i0, i1, j, c0, c1, i1 < r1), __VA_ARGS__)
struct core_args_t {
  int64_t m, n, k;
  const void* a;
  int64_t a_rs, a_cs; /* in elements of the A/B dtype */
  const void* b;
  int64_t b_rs, b_cs;
  void* c; /* accumulation type, or 16-bit where c16 is set */
  int64_t c_rs, c_cs;
  double alpha, beta;
  size_t in_size; /* bytes per A/B element */
  pack_fn_t pack;
  pack_fn_t pack_a; /* NULL: `pack` packs A too */
  void* pa;       /* packed A: one buffer of pa_each bytes per thread id (per box with a_once) */
  size_t pa_each; /* MC_FOR(MR) rows (at most m, rounded up to MR), or a box's rows with a_once, x the
                     depth block */
  void* pb;       /* packed B: round_up(min(n, the column block), NR) x the depth block */
  int nt;         /* threads to split the boxes over (1 without a context) */
  bool a_direct;  /* fp32 A read where it lies by the direct microkernel, not packed (a_direct_pays) */
  bool a_in_l1;   /* fp32 with A packed: row tiles outer, B streaming past A's micro-panel */
  int64_t ncb;    /* the column block, at most the core's NCB (f32_col_block) */
  bool a_once;    /* depth blocks outer: each box packs its rows of A once per depth block, in the first
                     column block's region, and reads them in the others' (a_once_bytes) */
  /* per-block state, set by the driver */
  int64_t jc, nc, pc, kc;
  int tr, tc; /* the boxes: tr row groups x tc column groups */
  double beta_eff;
  /* C's dtype where 16-bit C is written directly (k fits one depth block, so
   * each tile is finished in one pass); left zero otherwise. */
  tpurt_dtype_t c16;
  bool c16_bf16_in; /* with c16 bf16: A and B are bf16 widened to the fp32 core (ukr_f32_bf16c) */
  /* 16-bit C accumulated in the float workspace (c): each tile rounded into c_out (its columns from
   * c_out_j0) as the last depth block finishes it, while it is in L1, instead of in a pass of its
   * own over the workspace (flush_tile16); NULL otherwise. */
  void* c_out;
  int64_t c_out_rs, c_out_cs, c_out_j0;
  tpurt_dtype_t c_out_dtype;
  /* Per panel of B in the current block: 0 not packed, 1 being packed, 2 packed (SUF##_panel_ready).
   * Written while the threads read the fields above in their inner loops, so on cache lines of its
   * own. */
  _Alignas(64) _Atomic uint8_t panel_state[PANELS_MAX];
};

/* Before the AMX kernel's call for rows i of panel j (the thread's row chunk i0..i1, its columns
 * c0..c1): the panel the loop reads after this one (the next in the box, else the box's first,
 * for the next row chunk), split among the calls that read panel j, so each call prefetches its
 * share. */
static amx_prefetch_t amx_next_b(const core_args_t* s, int64_t i, int64_t i0, int64_t i1, int64_t j, int64_t c0,
                                 int64_t c1, bool more) {
  int64_t nj = -1;
  if (j + NR_AMX < c1) nj = j + NR_AMX;
  else if (more) nj = c0;
  if (nj < 0) return (amx_prefetch_t){0};
  int64_t calls = (i1 - i0 + MR_AMX - 1) / MR_AMX, share = NR_AMX * KCP_AMX(s->kc) * 2 / calls;
  return (amx_prefetch_t){(const char*)((const uint16_t*)s->pb + nj * KCP_AMX(s->kc)) + (i - i0) / MR_AMX * share,
                          (share + 63) / 64};
}

/* The split of p row panels x q column panels over nt threads: tr x tc boxes
 * (tr * tc == nt, or one box when there is one tile), the largest box as small
 * as it can be, rows split rather than columns at a tie (a column split packs
 * the same rows of A in each box). */
static void core_grid(int nt, int64_t p, int64_t q, int* tr, int* tc) {
  *tr = *tc = 1;
  if (p * q <= 1) return;
  int64_t best = INT64_MAX;
  for (int r = 1; r <= nt; ++r) {
    if (nt % r) continue;
    int c = nt / r;
    int64_t cost = ((p + r - 1) / r) * ((q + c - 1) / c);
    if (cost <= best) best = cost, *tr = r, *tc = c;
  }
}

/* Box t's rows [r0, r1) and block columns [c0, c1). */
static void core_box(const core_args_t* s, int64_t t, int mr, int nr, int64_t* r0, int64_t* r1, int64_t* c0,
                     int64_t* c1) {
  int64_t p = (s->m + mr - 1) / mr, q = (s->nc + nr - 1) / nr, rg = t / s->tc, cg = t % s->tc;
  *r0 = p * rg / s->tr * mr, *r1 = imin(s->m, p * (rg + 1) / s->tr * mr);
  *c0 = q * cg / s->tc * nr, *c1 = imin(s->nc, q * (cg + 1) / s->tc * nr);
}

/* Rows i..i+mr, columns jw..jw+nr of the float workspace C (row-major) into c_out (core_args_t.c_out). */
static void flush_tile16(const core_args_t* s, int64_t i, int64_t jw, int mr, int nr) {
  const float* w = (const float*)s->c + i * s->c_rs + jw;
  uint16_t* d = (uint16_t*)s->c_out + i * s->c_out_rs + (s->c_out_j0 + jw) * s->c_out_cs;
  for (int r = 0; r < mr; ++r, w += s->c_rs, d += s->c_out_rs) {
    if (s->c_out_cs == 1) tpurt_hv_from_f32(s->c_out_dtype, w, d, nr);
    else
      for (int j = 0; j < nr; ++j) tpurt_dtype_convert(s->c_out_dtype, d + j * s->c_out_cs, TPURT_DTYPE_FLOAT32, w + j, 1);
  }
}

/* 16-bit C: each tile computed into `tmp` (alpha 1, beta 0), then rounded once on store. */
#define TILE_C16(UKR, kc, ap, bp, tmp, NR, MR)                                                  \
  do {                                                                                          \
    UKR(kc, ap, bp, tmp, NR, 1, 1.0f, 0.0f, MR, NR);                                            \
    uint16_t* cp = (uint16_t*)s->c + i * s->c_rs + (s->jc + j) * s->c_cs;                       \
    store_tile_c16_fast(s->c16, tmp, NR, cp, s->c_rs, s->c_cs, (float)alpha, (float)beta, mr, nr); \
  } while (0)
#define TILE_NO_C16(UKR, kc, ap, bp, tmp, NR, MR) (void)tmp
/* The fp32 core's: whole bf16 tiles rounded in registers where it can (ukr_f32_bf16c) */
#ifdef GEMM_UKR_BF16C
#define TILE_C16_F32(UKR, kc, ap, bp, tmp, NR, MR)                                              \
  do {                                                                                          \
    if (s->c16_bf16_in && mr == (MR) && nr == (NR) && s->c_cs == 1 && alpha == 1 && beta == 0 &&  \
        !gemm_generic())                                                                        \
      ukr_f32_bf16c(kc, ap, bp, (uint16_t*)s->c + i * s->c_rs + (s->jc + j), s->c_rs);           \
    else                                                                                        \
      TILE_C16(UKR, kc, ap, bp, tmp, NR, MR);                                                   \
  } while (0)
#else
#define TILE_C16_F32 TILE_C16
#endif

/* A_IN_L1 (an expression of s): a row tile's A is held in L1 while the box's B panels pass (row tiles
 * outer); else a B panel is held while the chunk's row tiles pass (panels outer). */
#define DEFINE_CORE(SUF, T, TC, MR, NR, UKR, UKR_DIRECT, KCP, KCB, NCB, A_IN_L1, TILE16, BEGIN, END) \
  _Static_assert(((NCB) + (NR) - 1) / (NR) <= PANELS_MAX, #SUF ": more panels than panel_state holds"); \
  static void SUF##_pack_b(void* u, int64_t b0, int64_t b1, int tid) {                          \
    core_args_t* s = (core_args_t*)u;                                                           \
    const char* src = (const char*)s->b +                                                       \
                      (size_t)((s->pc * s->b_rs + (s->jc + b0 * NR) * s->b_cs) * (int64_t)s->in_size); \
    s->pack(src, s->b_cs, s->b_rs, imin(s->nc - b0 * NR, (b1 - b0) * NR), s->kc, NR,           \
            (T*)s->pb + b0 * NR * KCP(s->kc));                                                  \
  }                                                                                             \
  /* Panel pj of the block packed before it is read: packed by whoever claims it first (each box packs \
   * its share of its columns' panels before computing, so another box rarely finds one unclaimed; a \
   * box whose thread has not started yet is no one's wait), else waited for while its packer runs. */ \
  static void SUF##_panel_ready(core_args_t* s, int64_t pj, int tid) {                          \
    _Atomic uint8_t* st = &s->panel_state[pj];                                                  \
    uint8_t v = atomic_load_explicit(st, memory_order_acquire);                                 \
    if (v == 2) return;                                                                         \
    if (v == 0 && atomic_compare_exchange_strong_explicit(st, &v, 1, memory_order_acquire,      \
                                                          memory_order_acquire)) {              \
      SUF##_pack_b(s, pj, pj + 1, tid);                                                         \
      atomic_store_explicit(st, 2, memory_order_release);                                       \
      return;                                                                                   \
    }                                                                                           \
    for (int spins = 0; atomic_load_explicit(st, memory_order_acquire) != 2; ++spins)           \
      if (spins < 64) tpurt_cpu_relax();                                                        \
      else tpurt_spin_step();                                                                   \
  }                                                                                             \
  static void SUF##_boxes(void* u, int64_t t0, int64_t t1, int tid) {                           \
    core_args_t* s = (core_args_t*)u;                                                           \
    TC alpha = (TC)s->alpha, beta = (TC)s->beta_eff;                                            \
    TC tmp[MR * NR] __attribute__((aligned(64)));                                               \
    const bool to16 = s->c16 == TPURT_DTYPE_BFLOAT16 || s->c16 == TPURT_DTYPE_FLOAT16;          \
    BEGIN;                                                                                      \
    for (int64_t t = t0; t < t1; ++t) {                                                         \
      int64_t r0, r1, c0, c1;                                                                   \
      core_box(s, t, MR, NR, &r0, &r1, &c0, &c1);                                               \
      /* packed A: each chunk's own (a thread's buffer), or the box's rows from r0 (a_once) */   \
      T* pa = (T*)((char*)s->pa + s->pa_each * (size_t)(s->a_once ? t : tid));                  \
      /* this box's share of its columns' panels, split among the boxes of its column group */    \
      int64_t q0 = c0 / NR, q1 = (c1 + NR - 1) / NR, rg = t / s->tc;                            \
      for (int64_t pj = q0 + (q1 - q0) * rg / s->tr; pj < q0 + (q1 - q0) * (rg + 1) / s->tr; ++pj) \
        SUF##_panel_ready(s, pj, tid);                                                          \
      /* A_IN_L1 packs one row tile's micro-panel just before its walk: a chunk of MC rows (216 KiB \
       * at 384 deep) shared L2 with the 960 KiB block of B (one thread, 2048^3: +2-4%) */       \
      const int64_t mc = A_IN_L1 ? (MR) : MC_FOR(MR);                                           \
      for (int64_t i0 = r0; i0 < r1; i0 += mc) {                                                \
        int64_t i1 = imin(i0 + mc, r1);                                                         \
        const char* src = (const char*)s->a +                                                   \
                          (size_t)((i0 * s->a_rs + s->pc * s->a_cs) * (int64_t)s->in_size);     \
        T* pchunk = pa + (s->a_once ? i0 - r0 : 0) * KCP(s->kc);                                \
        if (!s->a_direct && !(s->a_once && s->jc > 0))                                          \
          (s->pack_a ? s->pack_a : s->pack)(src, s->a_rs, s->a_cs, i1 - i0, s->kc, MR, pchunk); \
        /* (outer, inner) walk (row tiles, panels) with A_IN_L1, else (panels, row tiles) */     \
        const int64_t o0 = A_IN_L1 ? i0 : c0, o1 = A_IN_L1 ? i1 : c1, os = A_IN_L1 ? MR : NR;   \
        const int64_t n0 = A_IN_L1 ? c0 : i0, n1 = A_IN_L1 ? c1 : i1, ns = A_IN_L1 ? NR : MR;   \
        for (int64_t o = o0; o < o1; o += os) {                                                 \
          for (int64_t in = n0; in < n1; in += ns) {                                            \
            const int64_t i = A_IN_L1 ? o : in, j = A_IN_L1 ? in : o;                           \
            if (i == i0) SUF##_panel_ready(s, j / NR, tid); /* its first use in the chunk */    \
            const T* bp = (const T*)s->pb + j * KCP(s->kc);                                     \
            const T* ap = pchunk + (i - i0) * KCP(s->kc);                                       \
            TC* cp = (TC*)s->c + i * s->c_rs + (s->jc + j) * s->c_cs; /* unless to16 */         \
            int mr = (int)imin(MR, i1 - i), nr = (int)imin(NR, c1 - j);                         \
            /* A_IN_L1 walks a row tile's C left to right: the next tile's rows of C, which the  \
             * epilogue reads (beta != 0), to L2 while this one computes (one thread, 2048^3:    \
             * +1-3%; the tile's epilogue was 10% of its samples, C coming from L3) */           \
            if (A_IN_L1 && !to16 && j + NR < c1 && s->c_cs == 1 && beta != 0) {                  \
              const char* cn = (const char*)(cp + NR);                                          \
              for (int r = 0; r < mr; ++r) {                                                    \
                _mm_prefetch(cn + r * s->c_rs * (int64_t)sizeof(TC), _MM_HINT_T1);              \
                _mm_prefetch(cn + r * s->c_rs * (int64_t)sizeof(TC) + 64, _MM_HINT_T1);         \
              }                                                                                 \
            }                                                                                   \
            if (s->a_direct)                                                                    \
              UKR_DIRECT(s->kc, (const T*)src + (i - i0) * s->a_rs, s->a_rs, s->a_cs, bp, cp,   \
                         s->c_rs, s->c_cs, alpha, beta, mr, nr);                                \
            else if (to16)                                                                      \
              TILE16(UKR, s->kc, ap, bp, tmp, NR, MR);                                          \
            else                                                                                \
              UKR(s->kc, ap, bp, cp, s->c_rs, s->c_cs, alpha, beta, mr, nr);                    \
            if (s->c_out && !to16 && s->pc + s->kc >= s->k) flush_tile16(s, i, s->jc + j, mr, nr); \
          }                                                                                     \
        }                                                                                       \
      }                                                                                         \
    }                                                                                           \
    END;                                                                                        \
  }                                                                                             \
  static void SUF##_region(tpurt_kernel_ctx_t* ctx, core_args_t* s) {                          \
    /* one parallel region per block: B's panels are packed inside it (SUF##_panel_ready) */      \
    for (int64_t pj = 0; pj < (s->nc + NR - 1) / NR; ++pj)                                      \
      atomic_store_explicit(&s->panel_state[pj], 0, memory_order_relaxed);                      \
    run_range(ctx, (int64_t)s->tr * s->tc, 1, SUF##_boxes, s);                                  \
  }                                                                                             \
  static void SUF##_core(tpurt_kernel_ctx_t* ctx, core_args_t* s) {                             \
    const int64_t ncb = s->ncb > 0 && s->ncb < (NCB) ? s->ncb : (NCB);                          \
    const int64_t p = (s->m + MR - 1) / MR;                                                     \
    const int tr = p < s->nt ? (int)p : s->nt; /* a_once: rows split only, the same every block */ \
    s->a_once = s->a_once && s->n > ncb &&                                                      \
                (size_t)((p + tr - 1) / tr * MR * KCP(imin(KCB, s->k))) * sizeof(T) <= s->pa_each; \
    if (s->a_once) {                                                                            \
      s->tr = tr, s->tc = 1;                                                                    \
      for (s->pc = 0; s->pc < s->k; s->pc += KCB) {                                             \
        s->kc = imin(KCB, s->k - s->pc);                                                        \
        s->beta_eff = s->pc == 0 ? s->beta : 1.0;                                               \
        for (s->jc = 0; s->jc < s->n; s->jc += ncb) {                                           \
          s->nc = imin(ncb, s->n - s->jc);                                                      \
          SUF##_region(ctx, s);                                                                 \
        }                                                                                       \
      }                                                                                         \
      return;                                                                                   \
    }                                                                                           \
    for (s->jc = 0; s->jc < s->n; s->jc += ncb) {                                               \
      s->nc = imin(ncb, s->n - s->jc);                                                          \
      core_grid(s->nt, p, (s->nc + NR - 1) / NR, &s->tr, &s->tc);                               \
      for (s->pc = 0; s->pc < s->k; s->pc += KCB) {                                             \
        s->kc = imin(KCB, s->k - s->pc);                                                        \
        s->beta_eff = s->pc == 0 ? s->beta : 1.0;                                               \
        SUF##_region(ctx, s);                                                                   \
      }                                                                                         \
    }                                                                                           \
  }

#define KCP_ID(kc) (kc)
#define KCP_PAIRS(kc) (((kc) + 1) & ~(int64_t)1)
#define NO_HOOK (void)0
/* Only fp32 has a direct-A kernel; the other cores never set a_direct. */
#define NO_DIRECT(kc, a, a_rs, a_cs, b, c, ...) ((void)(c), abort())
#ifdef GEMM_A_DIRECT
#define UKR_F32_DIRECT ukr_f32_direct
#else
#define UKR_F32_DIRECT NO_DIRECT
#endif
DEFINE_CORE(f32, float, float, MR_F32, NR_F32, ukr_f32_dispatch, UKR_F32_DIRECT, KCP_ID, KC_F32, NC_F32, s->a_in_l1,
            TILE_C16_F32, NO_HOOK, NO_HOOK)
DEFINE_CORE(f64, double, double, MR_F64, NR_F64, ukr_f64, NO_DIRECT, KCP_ID, KC, NC, 0, TILE_NO_C16, NO_HOOK,
            NO_HOOK)
DEFINE_CORE(i64, int64_t, int64_t, MR_I64, NR_I64, ukr_i64, NO_DIRECT, KCP_ID, KC, NC, 0, TILE_NO_C16, NO_HOOK,
            NO_HOOK)
DEFINE_CORE(bdp, uint16_t, float, MR_BDP, NR_BDP, ukr_bdp_dispatch, NO_DIRECT, KCP_PAIRS, KC_BDP, NC_BDP, 0, TILE_C16,
            NO_HOOK, NO_HOOK)
DEFINE_CORE(amx, uint16_t, float, MR_AMX, NR_AMX, UKR_AMX, NO_DIRECT, KCP_AMX, KC_AMX, NC_AMX, 0, TILE_C16,
            amx_tiles_begin(), amx_tiles_end())

/* ---- dtype plumbing ---- */
/* ACC_BDP: bf16 operands as pairs into fp32 sums (the vdpbf16ps path);
 * ACC_AMX: bf16 operands in AMX tile panels into fp32 sums. */
typedef enum { ACC_F32, ACC_F64, ACC_I64, ACC_BDP, ACC_AMX, ACC_NONE } acc_kind_t;

static acc_kind_t acc_kind(tpurt_dtype_t ab, tpurt_dtype_t c) {
  switch (ab) {
    case TPURT_DTYPE_FLOAT32: return c == ab ? ACC_F32 : ACC_NONE;
    case TPURT_DTYPE_BFLOAT16:
      if (c != ab && c != TPURT_DTYPE_FLOAT32) return ACC_NONE;
      switch (tpurt_gemm_bf16dp_mode()) {
        case 0: return ACC_F32;
        case 3:
        case 4: return ACC_AMX;
        default: return ACC_BDP;
      }
    case TPURT_DTYPE_FLOAT16:
      return (c == ab || c == TPURT_DTYPE_FLOAT32) ? ACC_F32 : ACC_NONE;
    case TPURT_DTYPE_FLOAT64: return c == ab ? ACC_F64 : ACC_NONE;
    case TPURT_DTYPE_BOOL:
    case TPURT_DTYPE_UINT8:
    case TPURT_DTYPE_INT8:
    case TPURT_DTYPE_INT16:
    case TPURT_DTYPE_INT32:
    case TPURT_DTYPE_INT64:
      return (c == ab || tpurt_dtype_is_integral(c)) ? ACC_I64 : ACC_NONE;
    default: return ACC_NONE;
  }
}

static pack_fn_t pack_for(tpurt_dtype_t ab) {
  switch (ab) {
    case TPURT_DTYPE_FLOAT32: return pack_f32;
    case TPURT_DTYPE_BFLOAT16: return pack_bf16;
    case TPURT_DTYPE_FLOAT16: return pack_f16;
    case TPURT_DTYPE_FLOAT64: return pack_f64;
    case TPURT_DTYPE_BOOL:
    case TPURT_DTYPE_UINT8: return pack_u8;
    case TPURT_DTYPE_INT8: return pack_i8;
    case TPURT_DTYPE_INT16: return pack_i16;
    case TPURT_DTYPE_INT32: return pack_i32;
    case TPURT_DTYPE_INT64: return pack_i64;
    default: return NULL;
  }
}

/* Bytes per accumulator (and per packed element: a bf16 pair panel,
 * 2 * round_up(kc, 2) bytes per row, fits in 4 * kc). */
static int64_t acc_nc(acc_kind_t k) { return k == ACC_AMX ? NC_AMX : k == ACC_BDP ? NC_BDP : k == ACC_F32 ? NC_F32 : NC; }
static size_t acc_size(acc_kind_t k) { return k == ACC_F32 || k == ACC_BDP || k == ACC_AMX ? 4 : 8; }
static int acc_mr(acc_kind_t k) {
  return k == ACC_F32 ? MR_F32 : k == ACC_F64 ? MR_F64 : k == ACC_BDP ? MR_BDP : k == ACC_AMX ? MR_AMX : MR_I64;
}
static int acc_nr(acc_kind_t k) {
  return k == ACC_F32 ? NR_F32 : k == ACC_F64 ? NR_F64 : k == ACC_BDP ? NR_BDP : k == ACC_AMX ? NR_AMX : NR_I64;
}
static tpurt_dtype_t acc_dtype(acc_kind_t k) {
  return k == ACC_F32 || k == ACC_BDP || k == ACC_AMX ? TPURT_DTYPE_FLOAT32
         : k == ACC_F64                               ? TPURT_DTYPE_FLOAT64
                                                      : TPURT_DTYPE_INT64;
}
/* The depth block of kind k's driver. */
static int64_t acc_kc(acc_kind_t k) {
  return k == ACC_AMX ? KC_AMX : k == ACC_BDP ? KC_BDP : k == ACC_F32 ? KC_F32 : KC;
}
/* Bytes of one packed block: `rows` rows (rounded up to the panel) of at most a depth block. AMX
 * panels pad the depth to whole tiles; the others fit in acc_size bytes per element. */
static size_t packed_bytes(acc_kind_t k, int64_t rows, int panel, int64_t depth) {
  int64_t d = imin(depth, acc_kc(k));
  if (k == ACC_AMX) return align64((size_t)mul_sat(round_up(rows, panel), KCP_AMX(d)) * 2);
  return align64((size_t)mul_sat(round_up(rows, panel), d) * acc_size(k));
}

/* A matrix (rows x cols, rs, cs) as a BLAS operand: row-major (trans=false)
 * or column-major (trans=true), with its leading dimension. A size-1 dim's
 * stride is meaningless, so it does not disqualify a layout. */
static bool rowmajor_ld(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t* ld) {
  int64_t min_ld = cols > 1 ? cols : 1;
  if (cols > 1 && cs != 1) return false;
  if (rows == 1) {
    *ld = min_ld;
    return true;
  }
  if (rs < min_ld) return false;
  *ld = rs;
  return true;
}
static bool blas_operand(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool* trans,
                         int64_t* ld) {
  if (rowmajor_ld(rows, cols, rs, cs, ld)) {
    *trans = false;
    return true;
  }
  if (rowmajor_ld(cols, rows, cs, rs, ld)) {
    *trans = true;
    return true;
  }
  return false;
}

/* Whether C is accumulated directly (its dtype is the accumulation type). */
static bool c_direct(const tpurt_gemm_t* g, acc_kind_t k) { return g->c_dtype == acc_dtype(k); }
/* 16-bit C written straight from the fp32 tiles: one depth block, so no
 * partial sums have to be kept in float32 between blocks. */
static bool c16_direct(const tpurt_gemm_t* g, acc_kind_t k) {
  return (k == ACC_F32 || k == ACC_BDP || k == ACC_AMX) && g->k <= acc_kc(k) &&
         (g->c_dtype == TPURT_DTYPE_BFLOAT16 || g->c_dtype == TPURT_DTYPE_FLOAT16);
}

static bool fp32_own_large(void);
static size_t pa_slot_bytes(const tpurt_gemm_t* g, acc_kind_t kind, int nt);
/* Where fp32_own_large() says so, fp32 products run on our kernel except those the BLAS branch's
 * own paths suit better: 16 rows or columns or fewer (a matrix-vector product, the 8-16-row
 * kernels), and 17-64 rows whose other operand is not transposed (the few-row kernel reading B
 * where it lies; with a column-major C the roles of A and B swap, as gemm_blas swaps them). 2 cores
 * of a Zen 5, GFLOP/s, the BLAS branch against ours: 64 x 768 x 768 with B 431 / 381, with B^T
 * 198 / 341; 32 x 768 x 3072 with B^T 179 / 245; 768 x 1024 x 64 203 / 368; 256 x 512 x 16 162 / 130. */
enum { OWN_FEW = 16, OWN_FEW_NN = 64 };
static bool own_takes(const tpurt_gemm_t* g) {
  if (g->m <= OWN_FEW || g->n <= OWN_FEW || !fp32_own_large()) return false;
  bool ta = false, tb = false, tc = false; /* an operand BLAS cannot take is copied row-major */
  int64_t ld;
  if (!blas_operand(g->m, g->k, g->a_rs, g->a_cs, &ta, &ld)) ta = false;
  if (!blas_operand(g->k, g->n, g->b_rs, g->b_cs, &tb, &ld)) tb = false;
  if (!blas_operand(g->m, g->n, g->c_rs, g->c_cs, &tc, &ld)) tc = false;
  bool few_nn = tc ? g->n <= OWN_FEW_NN && ta : g->m <= OWN_FEW_NN && !tb;
  return !few_nn;
}
static bool use_blas(const tpurt_gemm_t* g) {
  return g->ab_dtype == TPURT_DTYPE_FLOAT32 && g->c_dtype == TPURT_DTYPE_FLOAT32 &&
         !atomic_load(&g_fp32_own) && !own_takes(g);
}

/* Columns of C accumulated per pass in the workspace (non-direct C). */
static int64_t ws_cols(const tpurt_gemm_t* g, int nr) {
  int64_t w = WS_ELEMS / (g->m > 0 ? g->m : 1);
  w = w / nr * nr;
  if (w < nr) w = nr;
  return imin(w, round_up(g->n, nr));
}

/* Workspace of one GEMM of one matrix, serial (nt 1) or across nt threads. */
static size_t single_ws_bytes(const tpurt_gemm_t* g, int nt) {
  if (g->m <= 0 || g->n <= 0 || g->k <= 0) return 0;
  if (use_blas(g)) {
    bool t;
    int64_t ld;
    size_t bytes = 0;
    if (!blas_operand(g->m, g->k, g->a_rs, g->a_cs, &t, &ld)) bytes += align64(mul_sat(mul_sat(g->m, g->k), 4));
    if (!blas_operand(g->k, g->n, g->b_rs, g->b_cs, &t, &ld)) bytes += align64(mul_sat(mul_sat(g->k, g->n), 4));
    if (!blas_operand(g->m, g->n, g->c_rs, g->c_cs, &t, &ld)) bytes += align64(mul_sat(mul_sat(g->m, g->n), 4));
    return bytes;
  }
  acc_kind_t k = acc_kind(g->ab_dtype, g->c_dtype);
  if (k == ACC_NONE) return 0;
  int nr = acc_nr(k);
  size_t es = acc_size(k);
  size_t bytes = pa_slot_bytes(g, k, nt) * (size_t)nt + packed_bytes(k, imin(g->n, acc_nc(k)), nr, g->k);
  if (!c_direct(g, k) && !c16_direct(g, k))
    bytes += align64(mul_sat(mul_sat(g->m, ws_cols(g, nr)), (int64_t)es));
  if (k == ACC_F32 && bytes < half_few_bytes(g)) bytes = half_few_bytes(g); /* (half_few_rows) */
  return bytes;
}

static int64_t nbatch(const tpurt_gemm_t* g) { return g->batch > 0 ? g->batch : 1; }

/* Small products in a batch run one per thread instead of each across all threads. */
static bool batch_parallel(const tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g) {
  int nt = tpurt_kernel_num_threads(ctx);
  return ctx && nt > 1 && nbatch(g) > 1 &&
         (mul_sat(mul_sat(g->m, g->n), g->k) <= (int64_t)1 << 21 || nbatch(g) >= 4 * nt);
}

static size_t small_pack_bytes(const tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g);

size_t tpurt_gemm_workspace_bytes(const tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g) {
  if (batch_parallel(ctx, g)) {
    tpurt_gemm_t s = *g;
    if (use_blas(&s)) {
      /* batch-parallel fp32 uses our own kernel (OpenBLAS threads itself) */
      acc_kind_t k = ACC_F32;
      size_t bytes = pa_slot_bytes(g, k, 1) + packed_bytes(k, imin(g->n, acc_nc(k)), acc_nr(k), g->k);
      return bytes * (size_t)tpurt_kernel_num_threads(ctx);
    }
    return single_ws_bytes(&s, 1) * (size_t)tpurt_kernel_num_threads(ctx);
  }
  return single_ws_bytes(g, tpurt_kernel_num_threads(ctx)) + small_pack_bytes(ctx, g);
}

/* ---- element-wise helpers on C (O(m*n), off the hot path) ---- */
typedef struct cfill_t {
  const tpurt_gemm_t* g;
  tpurt_dtype_t dst_dtype;
  void* dst;
  int64_t d_rs, d_cs;
  tpurt_dtype_t src_dtype;
  const void* src; /* NULL: fill with zero */
  int64_t s_rs, s_cs;
  double scale; /* dst = scale * src (floats), or (int64)scale * src (ints) */
  int64_t j0, cols;
} cfill_t;

static void cfill_rows(void* u, int64_t r0, int64_t r1, int tid) {
  cfill_t* f = (cfill_t*)u;
  size_t ds = tpurt_dtype_size(f->dst_dtype), ss = f->src ? tpurt_dtype_size(f->src_dtype) : 0;
  bool integral = f->dst_dtype == TPURT_DTYPE_BOOL || tpurt_dtype_is_integral(f->dst_dtype);
  int64_t iscale = (int64_t)f->scale;
  bool zero = !f->src || f->scale == 0;
  bool rowwise = f->d_cs == 1 && (zero || f->s_cs == 1);
  for (int64_t i = r0; i < r1; ++i) {
    if (rowwise) {
      /* Dense rows (a bias broadcast over C's rows, beta * C): whole-row
       * copies and float loops; every other layout goes element by element. */
      char* d = (char*)f->dst + (size_t)(i * f->d_rs) * ds;
      const char* s = zero ? NULL : (const char*)f->src + (size_t)(i * f->s_rs + f->j0) * ss;
      if (zero) {
        memset(d, 0, (size_t)f->cols * ds);
        continue;
      }
      if (f->src_dtype == f->dst_dtype && f->scale == 1) {
        memmove(d, s, (size_t)f->cols * ds);
        continue;
      }
      if (f->src_dtype == f->dst_dtype && f->dst_dtype == TPURT_DTYPE_FLOAT32) {
        float* o = (float*)d;
        const float* x = (const float*)s;
        double sc = f->scale;
        for (int64_t j = 0; j < f->cols; ++j) o[j] = (float)(sc * (double)x[j]);
        continue;
      }
    }
    for (int64_t j = 0; j < f->cols; ++j) {
      char* d = (char*)f->dst + (size_t)(i * f->d_rs + j * f->d_cs) * ds;
      if (!f->src || f->scale == 0) {
        tpurt_dtype_store_i64(f->dst_dtype, d, 0);
        continue;
      }
      const char* s = (const char*)f->src + (size_t)(i * f->s_rs + (f->j0 + j) * f->s_cs) * ss;
      if (integral) {
        int64_t v = tpurt_dtype_load_i64(f->src_dtype, s);
        tpurt_dtype_store_i64(f->dst_dtype, d, iscale == 1 ? v : wrap_mul(v, iscale));
      } else {
        double v = tpurt_dtype_load_f64(f->src_dtype, s);
        tpurt_dtype_store_f64(f->dst_dtype, d, f->scale == 1 ? v : f->scale * v);
      }
    }
  }
}

/* Stores the accumulation workspace (rows x cols, row-major) into C[:, j0:j0+cols]. */
static void cstore_rows(void* u, int64_t r0, int64_t r1, int tid) {
  cfill_t* f = (cfill_t*)u;
  size_t ds = tpurt_dtype_size(f->dst_dtype), ss = tpurt_dtype_size(f->src_dtype);
  for (int64_t i = r0; i < r1; ++i) {
    const char* s = (const char*)f->src + (size_t)(i * f->s_rs) * ss;
    char* d = (char*)f->dst + (size_t)(i * f->d_rs + f->j0 * f->d_cs) * ds;
    if (f->d_cs == 1 && f->src_dtype == TPURT_DTYPE_FLOAT32 &&
        (f->dst_dtype == TPURT_DTYPE_BFLOAT16 || f->dst_dtype == TPURT_DTYPE_FLOAT16)) {
      tpurt_hv_from_f32(f->dst_dtype, (const float*)s, d, f->cols);
    } else if (f->d_cs == 1) {
      tpurt_dtype_convert(f->dst_dtype, d, f->src_dtype, s, f->cols);
    } else {
      for (int64_t j = 0; j < f->cols; ++j)
        tpurt_dtype_convert(f->dst_dtype, d + (size_t)(j * f->d_cs) * ds, f->src_dtype,
                            s + (size_t)j * ss, 1);
    }
  }
}

/* C = beta * C_in (alpha == 0 or k == 0). */
static void scale_c(tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g) {
  bool same = !g->c_in || (g->c_in == g->c && g->c_in_rs == g->c_rs && g->c_in_cs == g->c_cs);
  if (same && g->beta == 1) return;
  cfill_t f = {.g = g, .dst_dtype = g->c_dtype, .dst = g->c, .d_rs = g->c_rs, .d_cs = g->c_cs,
               .src_dtype = g->c_dtype, .src = g->c_in ? g->c_in : g->c,
               .s_rs = g->c_in ? g->c_in_rs : g->c_rs, .s_cs = g->c_in ? g->c_in_cs : g->c_cs,
               .scale = g->beta, .j0 = 0, .cols = g->n};
  run_range(ctx, g->m, 64, cfill_rows, &f);
}

/* Copies C_in into C when they differ (so the backend can apply beta in place). */
static void c_in_to_c(tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g) {
  if (!g->c_in || g->beta == 0) return;
  if (g->c_in == g->c && g->c_in_rs == g->c_rs && g->c_in_cs == g->c_cs) return;
  cfill_t f = {.g = g, .dst_dtype = g->c_dtype, .dst = g->c, .d_rs = g->c_rs, .d_cs = g->c_cs,
               .src_dtype = g->c_dtype, .src = g->c_in, .s_rs = g->c_in_rs, .s_cs = g->c_in_cs,
               .scale = 1.0, .j0 = 0, .cols = g->n};
  run_range(ctx, g->m, 64, cfill_rows, &f);
}

/* Dense row-major copy of a strided fp32 matrix (operands BLAS cannot take). */
typedef struct dense_t {
  const float* src;
  int64_t rs, cs, cols;
  float* dst;
} dense_t;
static void dense_rows(void* u, int64_t r0, int64_t r1, int tid) {
  dense_t* d = (dense_t*)u;
  for (int64_t i = r0; i < r1; ++i)
    for (int64_t j = 0; j < d->cols; ++j) d->dst[i * d->cols + j] = d->src[i * d->rs + j * d->cs];
}
static void dense_back(void* u, int64_t r0, int64_t r1, int tid) {
  dense_t* d = (dense_t*)u; /* dst is the strided one here */
  for (int64_t i = r0; i < r1; ++i)
    for (int64_t j = 0; j < d->cols; ++j) d->dst[i * d->rs + j * d->cs] = d->src[i * d->cols + j];
}

/* ---- fp32 products with few rows (m <= SMALL_M): no packing ----
 * OpenBLAS packs all of B for every call, and with a handful of rows that copy costs as much as
 * the product: 8 x 768 x 768 ran at 35 GFLOP/s on one core (MKL, PyTorch CPU's: 104), a decode
 * step's shape (a batch of tokens through a linear layer). Here B is read where it lies:
 *  - B row-major (op(B) = B, its rows contiguous along n): R rows of C x 32 columns in 2R
 *    accumulators, one fma chain per output along k, B's row segment loaded once per depth step
 *    and shared by the R rows (the broadcast form);
 *  - B transposed (a linear layer's weight, n x k rows contiguous along k): R x 4 outputs as dot
 *    products of 16-lane chunks along k, each reduced at the end.
 * C = alpha * A B + beta * C (beta 0: C is not read). AVX-512 builds only; others keep OpenBLAS. */
#if defined(__AVX512F__)
#define GEMM_SMALL_M 1
/* The rows where these beat OpenBLAS on one core of the AVX-512 Xeon measured (.dev-style harness
 * over tpurt_gemm, 2026-12-05): 1.0-1.9x at 8 and 16 rows (one run of 16 rows against a transposed
 * B 0.97x); at 32-64 rows its packing pays off against these (not against the copied blocks below).
 * At 1-4 rows OpenBLAS's own small-size path was level or faster there; on the AMD Zen 5 of
 * 2026-12-06 (2 cores, F.linear and x @ W, loops of 100 calls) these were 1.2-2.1x faster at 2-6
 * rows with B in cache (2 x 768 x 768 linear 58-61 -> 29 us, x @ W 48-54 -> 21-22 us) and 1.7-1.9x
 * with a weight streamed from memory (4 x 4096 x 4096 linear 2.8 -> 1.7 ms), so they start at 2
 * (one row is blas_gemv's). */
enum { SMALL_M_MIN = 2, SMALL_M = 16, SMALL_NT_KB = 1024 };
/* ... and with B row-major (op(B) = B), up to SMALL_M_NN rows through B copied in blocks (the
 * 64 x 2048 x 2048 product of an MLP's input gradient: OpenBLAS 1.2-1.3x slower than this, and
 * 1.3-1.6x PyTorch CPU's time). */
enum { SMALL_M_NN = 64, SMALL_KB = 256, SMALL_NB = 240, SMALL_PACK_FLOATS = SMALL_KB * SMALL_NB };
/* B of at least this many elements (4 MiB, twice L2) goes through the copied blocks at 2-16 rows too:
 * 16 x 2048 x 2048 2.3 ms against OpenBLAS's 3.1 and the uncopied kernels' 9.2; at 768 x 768 the
 * uncopied ones stay faster. With fewer than SMALL_NB columns the copies do not pay (OpenBLAS). */
#define SMALL_BIG_B ((int64_t)1 << 20)

static inline __mmask16 tail_mask16(int64_t left) {
  return left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
}
static inline __m512 small_out(__m512 acc, const float* c, __mmask16 m, float alpha, float beta) {
  __m512 v = _mm512_mul_ps(_mm512_set1_ps(alpha), acc);
  return beta == 0 ? v : _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(m, c), v);
}

/* R rows x 16V columns: R * V accumulators, each one fma chain along k; V is larger for fewer
 * rows so that there are always 16 chains in flight (an fma's latency is 4 cycles, and 2 issue per
 * cycle: fewer chains leave the units idle, as 2 chains for one row did). */
#define DEFINE_SMALL_NN(NAME, R, V)                                                                         \
  static void NAME(int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,          \
                           float* c, int64_t ldc, float alpha, float beta) {                                \
    for (int64_t j = 0; j < n; j += 16 * V) {                                                             \
      __mmask16 mk[V];                                                                                    \
      for (int v = 0; v < V; ++v) mk[v] = tail_mask16(n - j - 16 * v);                                    \
      __m512 acc[R][V];                                                                                   \
      for (int r = 0; r < R; ++r)                                                                         \
        for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();                                      \
      const float* bp = b + j;                                                                            \
      for (int64_t p = 0; p < k; ++p, bp += ldb) {                                                        \
        __m512 bv[V];                                                                                     \
        for (int v = 0; v < V; ++v) bv[v] = _mm512_maskz_loadu_ps(mk[v], bp + 16 * v);                    \
        for (int r = 0; r < R; ++r) {                                                                     \
          __m512 av = _mm512_set1_ps(a[r * lda + p]);                                                     \
          for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);                  \
        }                                                                                                 \
      }                                                                                                   \
      for (int r = 0; r < R; ++r)                                                                         \
        for (int v = 0; v < V; ++v) {                                                                     \
          float* cr = c + r * ldc + j + 16 * v;                                                           \
          _mm512_mask_storeu_ps(cr, mk[v], small_out(acc[r][v], cr, mk[v], alpha, beta));                 \
        }                                                                                                 \
    }                                                                                                     \
  }
DEFINE_SMALL_NN(small_nn_8, 8, 2)
DEFINE_SMALL_NN(small_nn_8x3, 8, 3)
DEFINE_SMALL_NN(small_nn_4, 4, 4)
DEFINE_SMALL_NN(small_nn_2, 2, 8)
DEFINE_SMALL_NN(small_nn_1, 1, 8)

/* R rows of A against C columns of B^T (rows of bt, ldb apart), both along k. pf (or NULL): C rows
 * ldb apart, fetched into L2 a line per row per depth step: the next columns' rows, so that a weight
 * streamed from memory (a decode step's layers, larger than the caches) is not read a 3-16 KiB row at
 * a time, each starting cold where the hardware's prefetcher stops. */
#define DEFINE_SMALL_NT(R, C)                                                                               \
  static void small_nt_##R##x##C(int64_t k, const float* a, int64_t lda, const float* bt, int64_t ldb,       \
                                 float* c, int64_t ldc, float alpha, float beta, const float* pf) {         \
    __m512 acc[R][C];                                                                                     \
    for (int r = 0; r < R; ++r)                                                                           \
      for (int q = 0; q < C; ++q) acc[r][q] = _mm512_setzero_ps();                                        \
    for (int64_t p = 0; p < k; p += 16) {                                                                 \
      __mmask16 m = tail_mask16(k - p);                                                                   \
      if (pf)                                                                                             \
        for (int q = 0; q < C; ++q) _mm_prefetch((const char*)(pf + q * ldb + p), _MM_HINT_T1);          \
      __m512 av[R], bv[C];                                                                                \
      for (int r = 0; r < R; ++r) av[r] = _mm512_maskz_loadu_ps(m, a + r * lda + p);                      \
      for (int q = 0; q < C; ++q) bv[q] = _mm512_maskz_loadu_ps(m, bt + q * ldb + p);                     \
      for (int r = 0; r < R; ++r)                                                                         \
        for (int q = 0; q < C; ++q) acc[r][q] = _mm512_fmadd_ps(av[r], bv[q], acc[r][q]);                 \
    }                                                                                                     \
    for (int r = 0; r < R; ++r)                                                                           \
      for (int q = 0; q < C; ++q) {                                                                       \
        float v = alpha * _mm512_reduce_add_ps(acc[r][q]);                                                \
        c[r * ldc + q] = beta == 0 ? v : v + beta * c[r * ldc + q];                                       \
      }                                                                                                   \
  }
/* The 4- and 2-row forms with four columns keep their accumulators in named variables: as arrays
 * (the macro above), gcc -O3 also kept a copy of all 16 (or 8) on the stack, stored at every depth
 * step, which cost the 16 x 768 x 3072 product a third of its time. */
#define NT4_DECL(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = c##r##0, c##r##2 = c##r##0, c##r##3 = c##r##0;
#define NT4_FMA(r)                                                                                          \
  {                                                                                                         \
    const __m512 av = _mm512_maskz_loadu_ps(m, a + r * lda + p);                                            \
    c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);                                                             \
    c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1);                                                             \
    c##r##2 = _mm512_fmadd_ps(av, b2, c##r##2);                                                             \
    c##r##3 = _mm512_fmadd_ps(av, b3, c##r##3);                                                             \
  }
#define NT4_OUT(r)                                                                                          \
  {                                                                                                         \
    const float s_[4] = {_mm512_reduce_add_ps(c##r##0), _mm512_reduce_add_ps(c##r##1),                      \
                         _mm512_reduce_add_ps(c##r##2), _mm512_reduce_add_ps(c##r##3)};                     \
    for (int q = 0; q < 4; ++q) {                                                                           \
      float v = alpha * s_[q];                                                                              \
      c[r * ldc + q] = beta == 0 ? v : v + beta * c[r * ldc + q];                                           \
    }                                                                                                       \
  }
#define DEFINE_SMALL_NT4(R)                                                                                 \
  static void small_nt_##R##x4(int64_t k, const float* a, int64_t lda, const float* bt, int64_t ldb,        \
                               float* c, int64_t ldc, float alpha, float beta, const float* pf) {           \
    SMALL_ROWS##R(NT4_DECL)                                                                                 \
    if (!pf) pf = bt; /* no branch in the loop: the rows being read, fetched again */                       \
    for (int64_t p = 0; p < k; p += 16) {                                                                   \
      const __mmask16 m = tail_mask16(k - p);                                                               \
      for (int q = 0; q < 4; ++q) _mm_prefetch((const char*)(pf + q * ldb + p), _MM_HINT_T1);              \
      const __m512 b0 = _mm512_maskz_loadu_ps(m, bt + p), b1 = _mm512_maskz_loadu_ps(m, bt + ldb + p),      \
                   b2 = _mm512_maskz_loadu_ps(m, bt + 2 * ldb + p),                                         \
                   b3 = _mm512_maskz_loadu_ps(m, bt + 3 * ldb + p);                                         \
      SMALL_ROWS##R(NT4_FMA)                                                                                \
    }                                                                                                       \
    SMALL_ROWS##R(NT4_OUT)                                                                                  \
  }
DEFINE_SMALL_NT4(4)
DEFINE_SMALL_NT4(2)
DEFINE_SMALL_NT(1, 4)
DEFINE_SMALL_NT(4, 1)
DEFINE_SMALL_NT(2, 1)
DEFINE_SMALL_NT(1, 1)

#ifdef HALF_FEW
/* 16 bf16 or f16 values at p (the lanes past m: 0) as floats */
static inline __m512 wide_bf16(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
static inline __m512 wide_f16(const uint16_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
/* R float rows of A x C 16-bit rows of W (widened by WIDE), 16 depth values a step, as small_nt_* */
#define DEFINE_WNT(PFX, WIDE, R, C)                                                                         \
  static void PFX##_##R##x##C(int64_t k, const float* a, int64_t lda, const uint16_t* w, int64_t ldw,      \
                              float* out, const uint16_t* pf) {                                            \
    __m512 acc[R][C];                                                                                     \
    for (int r = 0; r < R; ++r)                                                                           \
      for (int q = 0; q < C; ++q) acc[r][q] = _mm512_setzero_ps();                                        \
    if (!pf) pf = w;                                                                                      \
    for (int64_t p = 0; p < k; p += 16) {                                                                 \
      const __mmask16 m = tail_mask16(k - p);                                                             \
      for (int q = 0; q < C; ++q) _mm_prefetch((const char*)(pf + q * ldw + p), _MM_HINT_T1);             \
      __m512 av[R], wv[C];                                                                                \
      for (int r = 0; r < R; ++r) av[r] = _mm512_maskz_loadu_ps(m, a + r * lda + p);                      \
      for (int q = 0; q < C; ++q) wv[q] = WIDE(w + q * ldw + p, m);                                       \
      for (int r = 0; r < R; ++r)                                                                         \
        for (int q = 0; q < C; ++q) acc[r][q] = _mm512_fmadd_ps(av[r], wv[q], acc[r][q]);                 \
    }                                                                                                     \
    for (int r = 0; r < R; ++r)                                                                           \
      for (int q = 0; q < C; ++q) out[r * C + q] = _mm512_reduce_add_ps(acc[r][q]);                      \
  }
/* 4 and 2 rows x 4 columns in named accumulators (NT4_DECL / NT4_FMA) */
#define DEFINE_WNT4(PFX, WIDE, R)                                                                           \
  static void PFX##_##R##x4(int64_t k, const float* a, int64_t lda, const uint16_t* w, int64_t ldw,        \
                            float* out, const uint16_t* pf) {                                              \
    SMALL_ROWS##R(NT4_DECL)                                                                               \
    if (!pf) pf = w;                                                                                      \
    for (int64_t p = 0; p < k; p += 16) {                                                                 \
      const __mmask16 m = tail_mask16(k - p);                                                             \
      for (int q = 0; q < 4; ++q) _mm_prefetch((const char*)(pf + q * ldw + p), _MM_HINT_T1);             \
      const __m512 b0 = WIDE(w + p, m), b1 = WIDE(w + ldw + p, m), b2 = WIDE(w + 2 * ldw + p, m),         \
                   b3 = WIDE(w + 3 * ldw + p, m);                                                         \
      SMALL_ROWS##R(NT4_FMA)                                                                              \
    }                                                                                                     \
    SMALL_ROWS##R(FEW4_OUT)                                                                               \
  }
#define DEFINE_WNT_ALL(PFX, WIDE)                                                                           \
  DEFINE_WNT4(PFX, WIDE, 4)                                                                               \
  DEFINE_WNT4(PFX, WIDE, 2)                                                                               \
  DEFINE_WNT(PFX, WIDE, 1, 4)                                                                             \
  DEFINE_WNT(PFX, WIDE, 4, 1)                                                                             \
  DEFINE_WNT(PFX, WIDE, 2, 1)                                                                             \
  DEFINE_WNT(PFX, WIDE, 1, 1)
DEFINE_WNT_ALL(wnt_bf16, wide_bf16)
DEFINE_WNT_ALL(wnt_f16, wide_f16)

/* op(B) = W, k x n row-major: C's columns [j0, j1) (acc: m rows of j1 - j0 floats) += A's rows (a, k
 * apart) times W's rows, 4 depth rows x 64 columns a step: 16 widened W vectors, each used by every
 * row of A, and per row 4 chains of 4 fmas into C's floats, loaded and stored once a step. W is read
 * row after row (4 streams along n), as it lies in memory: a walk down 64-column strips touched a
 * page a row. */
#define DEFINE_WNN(NAME, WIDE)                                                                              \
  static void NAME(int64_t m, int64_t k, const float* a, const uint16_t* w, int64_t ldw, int64_t j0,       \
                   int64_t j1, float* acc) {                                                               \
    const int64_t cols = j1 - j0;                                                                         \
    for (int64_t p0 = 0; p0 < k; p0 += 4) {                                                               \
      const int64_t pk = imin(4, k - p0);                                                                 \
      for (int64_t j = j0; j < j1; j += 64) {                                                             \
        __mmask16 mk[4];                                                                                  \
        __m512 wv[4][4];                                                                                  \
        for (int c = 0; c < 4; ++c) {                                                                     \
          mk[c] = tail_mask16(j1 - j - 16 * c);                                                           \
          for (int t = 0; t < 4; ++t)                                                                     \
            wv[t][c] = t < pk ? WIDE(w + (p0 + t) * ldw + j + 16 * c, mk[c]) : _mm512_setzero_ps();       \
        }                                                                                                 \
        for (int64_t r = 0; r < m; ++r) {                                                                 \
          float* cr = acc + r * cols + (j - j0);                                                          \
          const float* ar = a + r * k + p0;                                                               \
          __m512 av[4];                                                                                   \
          for (int t = 0; t < 4; ++t) av[t] = _mm512_set1_ps(t < pk ? ar[t] : 0.0f);                      \
          for (int c = 0; c < 4; ++c) {                                                                   \
            __m512 v = p0 ? _mm512_maskz_loadu_ps(mk[c], cr + 16 * c) : _mm512_setzero_ps();              \
            for (int t = 0; t < 4; ++t) v = _mm512_fmadd_ps(av[t], wv[t][c], v);                          \
            _mm512_mask_storeu_ps(cr + 16 * c, mk[c], v);                                                 \
          }                                                                                               \
        }                                                                                                 \
      }                                                                                                   \
    }                                                                                                     \
  }
DEFINE_WNN(wnn_bf16, wide_bf16)
DEFINE_WNN(wnn_f16, wide_f16)
#endif

/* C (m x n) = alpha A B + beta C; !tb: B is k x n row-major (ldb), tb: B^T is n x k (ldb). With !tb
 * and `pack` (SMALL_PACK_FLOATS), B is copied in blocks; more than SMALL_M rows only so. */
static void small_m_cols(bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                         const float* b, int64_t ldb, float beta, float* c, int64_t ldc, float* pack) {
  if (!tb && pack) {
    /* 17..SMALL_M_NN rows, or fewer against a large B (the caller passes a copy buffer then; the
     * panels below, 128 columns x all of k, read a 2048 x 2048 B 8 KiB apart from L2 at 1/3 of
     * OpenBLAS's speed): depth blocks of SMALL_KB rows of B;
     * in each, SMALL_NB columns at a time are copied into SMALL_NB / 48 panels of 48 columns
     * (reading B's rows as long runs, which the prefetchers follow, where the 48-column runs 8 KiB
     * apart of a 2048-wide B missed the TLB each step), and every 8-row block of A runs against a
     * panel held in L1. A is read where it is; C takes the depth blocks' partial sums (beta on the
     * first only). */
    for (int64_t p0 = 0; p0 < k; p0 += SMALL_KB) {
      int64_t kk = imin(SMALL_KB, k - p0);
      float bt = p0 == 0 ? beta : 1.0f;
      const float* ap = a + p0;
      for (int64_t jb = 0; jb < n; jb += SMALL_NB) {
        int64_t nw = imin(SMALL_NB, n - jb);
        const float* bp = b + p0 * ldb + jb;
        for (int64_t p = 0; p < kk; ++p)
          for (int64_t q = 0; q < nw; q += 48)
            for (int v = 0; v < 3; ++v)
              _mm512_storeu_ps(pack + q * kk + 48 * p + 16 * v,
                              _mm512_maskz_loadu_ps(tail_mask16(nw - q - 16 * v), bp + p * ldb + q + 16 * v));
        for (int64_t q = 0; q < nw; q += 48) {
          int64_t nn = imin(48, nw - q);
          const float* pq = pack + q * kk;
          float* cp = c + jb + q;
          int64_t i = 0;
          for (; i + 8 <= m; i += 8) small_nn_8x3(nn, kk, ap + i * lda, lda, pq, 48, cp + i * ldc, ldc, alpha, bt);
          if (i + 4 <= m) small_nn_4(nn, kk, ap + i * lda, lda, pq, 48, cp + i * ldc, ldc, alpha, bt), i += 4;
          if (i + 2 <= m) small_nn_2(nn, kk, ap + i * lda, lda, pq, 48, cp + i * ldc, ldc, alpha, bt), i += 2;
          if (i < m) small_nn_1(nn, kk, ap + i * lda, lda, pq, 48, cp + i * ldc, ldc, alpha, bt);
        }
      }
    }
    return;
  }
  if (!tb) {
    /* panels of B of at most 256 KiB (k x a multiple of 128 columns) outside the rows, so each row
     * block reads its panel from L2, not from memory */
    int64_t w = (256 << 10) / (4 * (k > 0 ? k : 1)) / 128 * 128;
    if (w < 128) w = 128;
    for (int64_t jp = 0; jp < n; jp += w) {
      int64_t nn = imin(w, n - jp);
      const float* bp = b + jp;
      float* cp = c + jp;
      int64_t i = 0;
      for (; i + 8 <= m; i += 8) small_nn_8(nn, k, a + i * lda, lda, bp, ldb, cp + i * ldc, ldc, alpha, beta);
      if (i + 4 <= m) small_nn_4(nn, k, a + i * lda, lda, bp, ldb, cp + i * ldc, ldc, alpha, beta), i += 4;
      if (i + 2 <= m) small_nn_2(nn, k, a + i * lda, lda, bp, ldb, cp + i * ldc, ldc, alpha, beta), i += 2;
      if (i < m) small_nn_1(nn, k, a + i * lda, lda, bp, ldb, cp + i * ldc, ldc, alpha, beta);
    }
    return;
  }
  for (int64_t j = 0; j < n; j += 4) {
    const float* bt = b + j * ldb;
    float* cj = c + j;
    int64_t i = 0;
    if (j + 4 <= n) {
      /* the first row block fetches the next four columns' rows (pf) while the others reread these;
       * past SMALL_NT_KB deep with more than four rows, depth blocks keep the four rows in L1 (as
       * bf16_few_cols does), C taking each block's partial sums (beta on the first only) */
      const float* pf = j + 8 <= n ? bt + 4 * ldb : NULL;
      const int64_t kb = m > 4 && k > SMALL_NT_KB ? SMALL_NT_KB : k;
      for (int64_t p0 = 0; p0 < k; p0 += kb) {
        const int64_t kk = imin(kb, k - p0);
        const float *ap = a + p0, *bp = bt + p0, *pfp = pf ? pf + p0 : NULL;
        const float bb = p0 ? 1.0f : beta;
        for (i = 0; i + 4 <= m; i += 4, pfp = NULL)
          small_nt_4x4(kk, ap + i * lda, lda, bp, ldb, cj + i * ldc, ldc, alpha, bb, pfp);
        if (i + 2 <= m) small_nt_2x4(kk, ap + i * lda, lda, bp, ldb, cj + i * ldc, ldc, alpha, bb, pfp), i += 2, pfp = NULL;
        if (i < m) small_nt_1x4(kk, ap + i * lda, lda, bp, ldb, cj + i * ldc, ldc, alpha, bb, pfp);
      }
      continue;
    }
    for (int64_t q = j; q < n; ++q, bt += ldb, ++cj) {
      for (i = 0; i + 4 <= m; i += 4) small_nt_4x1(k, a + i * lda, lda, bt, ldb, cj + i * ldc, ldc, alpha, beta, NULL);
      if (i + 2 <= m) small_nt_2x1(k, a + i * lda, lda, bt, ldb, cj + i * ldc, ldc, alpha, beta, NULL), i += 2;
      if (i < m) small_nt_1x1(k, a + i * lda, lda, bt, ldb, cj + i * ldc, ldc, alpha, beta, NULL);
    }
  }
}
#endif

/* The widening kernels under AVX2 (no AVX-512): 8 floats a vector and 16 registers, so four rows run
 * as two pairs (K_4x4 = two K_2x4 on the same W rows, the second from L1); the depth's last k % 8
 * values in scalar code. */
#if defined(HALF_FEW) && !defined(__AVX512F__)
static inline __m256 wide8_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
static inline __m256 wide8_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }
static inline float one_bf16(uint16_t v) { return tpurt_bf16_to_f32(v); }
static inline float one_f16(uint16_t v) { return tpurt_f16_to_f32(v); }
static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
#define DEFINE_WNT8(PFX, WIDE, ONE, R, C)                                                                   \
  static void PFX##_##R##x##C(int64_t k, const float* a, int64_t lda, const uint16_t* w, int64_t ldw,      \
                              float* out, const uint16_t* pf) {                                            \
    __m256 acc[R][C];                                                                                     \
    for (int r = 0; r < R; ++r)                                                                           \
      for (int q = 0; q < C; ++q) acc[r][q] = _mm256_setzero_ps();                                        \
    if (!pf) pf = w;                                                                                      \
    int64_t p = 0;                                                                                        \
    for (; p + 8 <= k; p += 8) {                                                                          \
      if ((p & 31) == 0) /* a line of 32 values a row */                                                  \
        for (int q = 0; q < C; ++q) _mm_prefetch((const char*)(pf + q * ldw + p), _MM_HINT_T1);           \
      __m256 av[R], wv[C];                                                                                \
      for (int r = 0; r < R; ++r) av[r] = _mm256_loadu_ps(a + r * lda + p);                               \
      for (int q = 0; q < C; ++q) wv[q] = WIDE(w + q * ldw + p);                                          \
      for (int r = 0; r < R; ++r)                                                                         \
        for (int q = 0; q < C; ++q) acc[r][q] = _mm256_fmadd_ps(av[r], wv[q], acc[r][q]);                 \
    }                                                                                                     \
    for (int r = 0; r < R; ++r)                                                                           \
      for (int q = 0; q < C; ++q) {                                                                       \
        float v = hsum8(acc[r][q]);                                                                       \
        for (int64_t t = p; t < k; ++t) v += a[r * lda + t] * ONE(w[q * ldw + t]);                       \
        out[r * C + q] = v;                                                                               \
      }                                                                                                   \
  }
#define DEFINE_WNT8_ALL(PFX, WIDE, ONE)                                                                     \
  DEFINE_WNT8(PFX, WIDE, ONE, 2, 4)                                                                       \
  DEFINE_WNT8(PFX, WIDE, ONE, 1, 4)                                                                       \
  DEFINE_WNT8(PFX, WIDE, ONE, 4, 1)                                                                       \
  DEFINE_WNT8(PFX, WIDE, ONE, 2, 1)                                                                       \
  DEFINE_WNT8(PFX, WIDE, ONE, 1, 1)                                                                       \
  static void PFX##_4x4(int64_t k, const float* a, int64_t lda, const uint16_t* w, int64_t ldw, float* out, \
                        const uint16_t* pf) {                                                              \
    PFX##_2x4(k, a, lda, w, ldw, out, pf);                                                                \
    PFX##_2x4(k, a + 2 * lda, lda, w, ldw, out + 8, NULL);                                                \
  }
DEFINE_WNT8_ALL(wnt_bf16, wide8_bf16, one_bf16)
DEFINE_WNT8_ALL(wnt_f16, wide8_f16, one_f16)
/* op(B) = W row-major, as the AVX-512 wnn_*: 4 depth rows x 16 columns a step (13 of the 16 ymm
 * registers), the last j1 - j0 mod 16 columns in scalar code */
#define DEFINE_WNN8(NAME, WIDE, ONE)                                                                        \
  static void NAME(int64_t m, int64_t k, const float* a, const uint16_t* w, int64_t ldw, int64_t j0,       \
                   int64_t j1, float* acc) {                                                               \
    const int64_t cols = j1 - j0, jv = j0 + cols / 16 * 16;                                               \
    for (int64_t p0 = 0; p0 < k; p0 += 4) {                                                               \
      const int64_t pk = imin(4, k - p0);                                                                 \
      for (int64_t j = j0; j < jv; j += 16) {                                                             \
        __m256 wv[4][2];                                                                                  \
        for (int t = 0; t < 4; ++t)                                                                       \
          for (int c = 0; c < 2; ++c)                                                                     \
            wv[t][c] = t < pk ? WIDE(w + (p0 + t) * ldw + j + 8 * c) : _mm256_setzero_ps();               \
        for (int64_t r = 0; r < m; ++r) {                                                                 \
          float* cr = acc + r * cols + (j - j0);                                                          \
          const float* ar = a + r * k + p0;                                                               \
          __m256 av[4];                                                                                   \
          for (int t = 0; t < 4; ++t) av[t] = _mm256_set1_ps(t < pk ? ar[t] : 0.0f);                      \
          for (int c = 0; c < 2; ++c) {                                                                   \
            __m256 v = p0 ? _mm256_loadu_ps(cr + 8 * c) : _mm256_setzero_ps();                            \
            for (int t = 0; t < 4; ++t) v = _mm256_fmadd_ps(av[t], wv[t][c], v);                          \
            _mm256_storeu_ps(cr + 8 * c, v);                                                              \
          }                                                                                               \
        }                                                                                                 \
      }                                                                                                   \
      for (int64_t j = jv; j < j1; ++j)                                                                   \
        for (int64_t r = 0; r < m; ++r) {                                                                 \
          float v = p0 ? acc[r * cols + (j - j0)] : 0.0f;                                                 \
          for (int t = 0; t < pk; ++t) v += a[r * k + p0 + t] * ONE(w[(p0 + t) * ldw + j]);               \
          acc[r * cols + (j - j0)] = v;                                                                   \
        }                                                                                                 \
    }                                                                                                     \
  }
DEFINE_WNN8(wnn_bf16, wide8_bf16, one_bf16)
DEFINE_WNN8(wnn_f16, wide8_f16, one_f16)
#endif

#ifdef HALF_FEW
DEFINE_FEW_COLS(bf16w_few_cols, wnt_bf16, float, HALF_FEW_KB, HALF_FEW_BLOCK_M)
DEFINE_FEW_COLS(f16w_few_cols, wnt_f16, float, HALF_FEW_KB, HALF_FEW_BLOCK_M)
typedef struct half_few_t {
  const tpurt_gemm_t* g;
  const float* a; /* A's rows widened, k apart */
  float* acc;     /* form 2: C in float, each task's columns [j0, j1) as m rows of j1 - j0 at acc + m j0 */
} half_few_t;
static void half_few_cols(void* u, int64_t q0, int64_t q1, int tid) {
  const half_few_t* t = u;
  if (t->g->ab_dtype == TPURT_DTYPE_BFLOAT16) bf16w_few_cols(t->g, t->a, t->g->k, q0, q1);
  else f16w_few_cols(t->g, t->a, t->g->k, q0, q1);
}
#ifdef HALF_FEW_NN
/* Columns [64 q0, 64 q1) of C through the row-major kernel, then into C */
static void half_few_nn_cols(void* u, int64_t q0, int64_t q1, int tid) {
  const half_few_t* t = u;
  const tpurt_gemm_t* g = t->g;
  const int64_t j0 = 64 * q0, j1 = imin(64 * q1, g->n);
  float* acc = t->acc + g->m * j0;
  if (g->ab_dtype == TPURT_DTYPE_BFLOAT16) wnn_bf16(g->m, g->k, t->a, (const uint16_t*)g->b, g->b_rs, j0, j1, acc);
  else wnn_f16(g->m, g->k, t->a, (const uint16_t*)g->b, g->b_rs, j0, j1, acc);
  few_store(g, 0, g->m, j0, j1 - j0, acc);
}
#endif
#endif

/* Workspace after single_ws_bytes(g, 1) for the copies of B of the 17..SMALL_M_NN-row kernel, one
 * per thread (op(A) or, for a column-major C, op(B)^T may be the few-rows operand). Without it
 * (a serial caller with no workspace) those products go to OpenBLAS. */
static size_t small_pack_bytes(const tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g) {
#ifdef GEMM_SMALL_M
  if (use_blas(g) && !atomic_load(&g_small_off) && ((g->m >= SMALL_M_MIN && g->m <= SMALL_M_NN) ||
                                                    (g->n >= SMALL_M_MIN && g->n <= SMALL_M_NN)))
    return (size_t)SMALL_PACK_FLOATS * 4 * (size_t)(ctx ? tpurt_kernel_num_threads(ctx) : 1);
#endif
  return 0;
}

/* C = alpha op(A) op(B) + beta C with one row or one column (a decode step's linear layer, batch
 * 1): a matrix-vector product. sgemm packs the matrix operand for every call; sgemv reads it where
 * it lies. Measured on one core (thread CPU time, 2026-12-05): OpenBLAS's Haswell kernels
 * (an AVX2 machine, or OPENBLAS_CORETYPE=Haswell) 4-7x faster from 64 x 64 to 512 x 512; its
 * SkylakeX ones level (within 0.05 us) up to 64 x 256, where its small-matrix sgemm runs, and 1.1-3x
 * faster above (1 x 768 x 3072: 330 us against 900-1030). beta 0 does not read C: C is zeroed
 * first, so whatever the scaling of an uninitialized C gives (0 x NaN) never reaches the result. */
static void blas_gemv(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                      int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const CBLAS_TRANSPOSE T = CblasTrans, N = CblasNoTrans;
  if (m == 1) { /* c (1 x n, contiguous) = alpha x op(B) + beta c, x = op(A)'s row */
    int64_t incx = ta ? lda : 1; /* op(A) = A^T: A is k x 1, one element per row */
    if (beta == 0) memset(c, 0, (size_t)n * sizeof(float));
    if (tb) /* B stored n x k: c = B x */
      cblas_sgemv(CblasRowMajor, N, (int)n, (int)k, alpha, b, (int)ldb, a, (int)incx, beta, c, 1);
    else /* B stored k x n: c = B^T x */
      cblas_sgemv(CblasRowMajor, T, (int)k, (int)n, alpha, b, (int)ldb, a, (int)incx, beta, c, 1);
    return;
  }
  /* n == 1: c (m x 1, stride ldc) = alpha op(A) y + beta c, y = op(B)'s column */
  int64_t incy = tb ? 1 : ldb; /* op(B) = B^T: B is 1 x k, contiguous */
  if (beta == 0)
    for (int64_t i = 0; i < m; ++i) c[i * ldc] = 0;
  if (ta) /* A stored k x m */
    cblas_sgemv(CblasRowMajor, T, (int)k, (int)m, alpha, a, (int)lda, b, (int)incy, beta, c, (int)ldc);
  else
    cblas_sgemv(CblasRowMajor, N, (int)m, (int)k, alpha, a, (int)lda, b, (int)incy, beta, c, (int)ldc);
}

/* fp32 products through the process's MKL where one is already loaded (PyTorch's x86 wheels carry it
 * in libtorch_cpu.so and export its BLAS): on 2 cores of this project's Xeon, one thread each,
 * MKL's sgemm took 148 us for 256x128 @ 128x384 against OpenBLAS's 192 (1.2-1.3x at the small
 * GPT's shapes, 1.13x at 1024^3). Nothing is loaded for it: a process without such a library (a C
 * program on the runtime alone) uses OpenBLAS, and TORCH_TPU_GEMM_BLAS=openblas chooses it
 * anyway. MKL's threads are set to one around each call on the calling thread only
 * (MKL_Set_Num_Threads_Local, restored after), so PyTorch's own MKL calls keep their threads. */
typedef void (*f77_sgemm_fn)(const char*, const char*, const int*, const int*, const int*, const float*,
                             const float*, const int*, const float*, const int*, const float*, float*,
                             const int*);
typedef int (*mkl_threads_local_fn)(int);
static f77_sgemm_fn g_mkl_sgemm;
static mkl_threads_local_fn g_mkl_threads_local;
static pthread_once_t g_mkl_once = PTHREAD_ONCE_INIT;
/* The library for fp32 products: -1 not decided yet, else FP32_*. */
enum { FP32_OPENBLAS = 0, FP32_MKL = 1, FP32_OWN = 2 };
static _Atomic int g_fp32_lib = -1;

static void mkl_find(void) {
  static const char* const libs[] = {"libtorch_cpu.so", "libmkl_rt.so.2", "libmkl_rt.so"};
  for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); ++i) {
    void* h = dlopen(libs[i], RTLD_NOW | RTLD_NOLOAD); /* only a library the process already has */
    if (!h) continue;
    f77_sgemm_fn f = (f77_sgemm_fn)dlsym(h, "sgemm_");
    mkl_threads_local_fn t = (mkl_threads_local_fn)dlsym(h, "MKL_Set_Num_Threads_Local");
    if (f && t) { /* the handle stays open: the functions are used for the process's life */
      g_mkl_sgemm = f;
      g_mkl_threads_local = t;
      return;
    }
    dlclose(h);
  }
}

/* Whether this CPU runs our AVX-512 kernel faster than the BLAS libraries run theirs: an AVX-512
 * build on a CPU that is not Intel's. MKL picks its kernels by vendor and OpenBLAS (0.3.21) knows
 * no AMD core past Zen 3, so on AMD both run AVX2 code. 2 cores of an AMD EPYC Zen 5, loops of
 * products, GFLOP/s, MKL (PyTorch's) against ours: 1024^3 222 / 450, 256 x 128 x 384 (the small
 * GPT's shapes) 209 / 388, 1024 x 768 x 3072 222 / 440, 96 x 768 x 768 194 / 381. On Intel's
 * AVX-512 cores MKL runs AVX-512 code and keeps them. */
static bool own_beats_blas(void) {
#if defined(__AVX512F__) && defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return !__builtin_cpu_is("intel");
#else
  return false;
#endif
}

static int fp32_lib(void) {
  int v = atomic_load_explicit(&g_fp32_lib, memory_order_relaxed);
  if (v >= 0) return v;
  const char* e = tpurt_env_str("TORCH_TPU_GEMM_BLAS");
  bool auto_ = !e || strcmp(e, "auto") == 0;
  if (!auto_ && strcmp(e, "mkl") != 0 && strcmp(e, "openblas") != 0 && strcmp(e, "own") != 0) {
    TPURT_LOG(WARNING, "TORCH_TPU_GEMM_BLAS=%s: expected auto, mkl, openblas or own; using auto", e);
    auto_ = true;
  }
  if (auto_ ? own_beats_blas() : strcmp(e, "own") == 0) v = FP32_OWN;
  else if (!auto_ && strcmp(e, "openblas") == 0) v = FP32_OPENBLAS;
  else {
    pthread_once(&g_mkl_once, mkl_find);
    v = g_mkl_sgemm != NULL ? FP32_MKL : FP32_OPENBLAS;
  }
  atomic_store_explicit(&g_fp32_lib, v, memory_order_relaxed);
  return v;
}
static bool fp32_own_large(void) { return fp32_lib() == FP32_OWN; }
/* The BLAS calls: MKL where the process has it, unless OpenBLAS was asked for. With our kernel
 * chosen, the products it leaves to the BLAS branch (few rows or columns) go to MKL where loaded. */
static bool use_mkl(void) {
  int v = fp32_lib();
  if (v == FP32_OWN) pthread_once(&g_mkl_once, mkl_find);
  return v == FP32_MKL || (v == FP32_OWN && g_mkl_sgemm != NULL);
}

TPURT_API void tpurt_fp32_blas_set(int which) {
  if (which == FP32_MKL || which == FP32_OWN) pthread_once(&g_mkl_once, mkl_find);
  atomic_store(&g_fp32_lib, which < 0                                     ? -1
                            : which == FP32_OWN                           ? FP32_OWN
                            : which == FP32_MKL && g_mkl_sgemm != NULL    ? FP32_MKL
                                                                          : FP32_OPENBLAS);
}
TPURT_API const char* tpurt_fp32_blas(void) {
  int v = fp32_lib();
  return v == FP32_OWN ? "own" : v == FP32_MKL ? "mkl" : "openblas";
}

/* Row-major C (m x n) = alpha op(A) op(B) + beta C on this thread, through MKL or OpenBLAS. */
static void sgemm_rows(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                       int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (use_mkl()) {
    /* row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: B first */
    int im = (int)m, in = (int)n, ik = (int)k, ia = (int)lda, ib = (int)ldb, ic = (int)ldc;
    int prev = g_mkl_threads_local(1);
    g_mkl_sgemm(tb ? "T" : "N", ta ? "T" : "N", &in, &im, &ik, &alpha, b, &ib, a, &ia, &beta, c, &ic);
    g_mkl_threads_local(prev);
    return;
  }
  const CBLAS_TRANSPOSE T = CblasTrans, N = CblasNoTrans;
  cblas_sgemm(CblasRowMajor, ta ? T : N, tb ? T : N, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb,
              beta, c, (int)ldc);
}

/* One single-threaded sgemm over a slab of C. */
typedef struct blas_job_t {
  bool ta, tb, split_m; /* split_m: slabs of rows of C, else of columns */
  bool small;           /* the few-rows kernels instead of OpenBLAS (columns split) */
  int64_t m, n, k, lda, ldb, ldc, step;
  float alpha, beta;
  const float *a, *b;
  float* c;
  float* pack; /* SMALL_PACK_FLOATS per thread (tid), or NULL */
} blas_job_t;

static void blas_slab(void* u, int64_t s0, int64_t s1, int tid) {
  const blas_job_t* j = (const blas_job_t*)u;
  int64_t lo = s0 * j->step, hi = s1 * j->step;
  const float *a = j->a, *b = j->b;
  float* c = j->c;
  int64_t m = j->m, n = j->n;
  if (j->split_m) { /* rows lo..hi of A (op(A)) and of C */
    hi = hi < m ? hi : m;
    a += j->ta ? lo : lo * j->lda;
    c += lo * j->ldc;
    m = hi - lo;
  } else { /* columns lo..hi of op(B) and of C */
    hi = hi < n ? hi : n;
    b += j->tb ? lo * j->ldb : lo;
    c += lo;
    n = hi - lo;
  }
  if (m <= 0 || n <= 0) return;
#ifdef GEMM_SMALL_M
  if (j->small) {
    small_m_cols(j->tb, m, n, j->k, j->alpha, a, j->lda, b, j->ldb, j->beta, c, j->ldc,
                 j->pack ? j->pack + (size_t)tid * SMALL_PACK_FLOATS : NULL);
    return;
  }
#endif
  if (m == 1 || n == 1) {
    blas_gemv(j->ta, j->tb, m, n, j->k, j->alpha, a, j->lda, b, j->ldb, j->beta, c, j->ldc);
    return;
  }
  sgemm_rows(j->ta, j->tb, m, n, j->k, j->alpha, a, j->lda, b, j->ldb, j->beta, c, j->ldc);
}

static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;
static void blas_single_thread(void) { openblas_set_num_threads(1); }

/* Row-major C (m x n) = alpha op(A) op(B) + beta C, split into slabs across the
 * chip's compute threads, each an OpenBLAS call on one thread. OpenBLAS's own
 * threads split a product statically and spin (sched_yield) between calls;
 * on a machine where the host thread shares the cores, a helper that is
 * descheduled then stalls every product and the spinning takes CPU from the
 * host. The pool runs a slab whose helper has not started on the caller. */
static void blas_call(tpurt_kernel_ctx_t* ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                      float beta, float* c, int64_t ldc, float* pack) {
  pthread_once(&g_blas_once, blas_single_thread);
  blas_job_t j = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
                  .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c, .pack = pack};
  int nt = ctx ? tpurt_kernel_num_threads(ctx) : 1;
  /* at least ~2^20 multiply-adds per slab, and slabs of whole 16-row/column blocks */
  int64_t per = (int64_t)1 << 20, work = mul_sat(mul_sat(m, n), k);
  int64_t slabs = work / per < nt ? work / per : nt;
  j.split_m = m >= n;
#ifdef GEMM_SMALL_M
  /* few rows of a row-major A: our kernels, the columns split between threads */
  if (!ta && m >= SMALL_M_MIN && (m <= SMALL_M || (!tb && pack && m <= SMALL_M_NN && n >= SMALL_NB)) &&
      !g_small_off) {
    j.small = true;
    j.split_m = false;
    if (tb || (m <= SMALL_M && mul_sat(k, n) < SMALL_BIG_B)) j.pack = NULL; /* B read where it is */
  }
#endif
  int64_t extent = j.split_m ? m : n;
  if (slabs > extent / 16) slabs = extent / 16;
  if (slabs <= 1) {
    j.step = extent;
    blas_slab(&j, 0, 1, 0);
    return;
  }
  j.step = ((extent + slabs - 1) / slabs + 15) / 16 * 16;
  run_range(ctx, (extent + j.step - 1) / j.step, 1, blas_slab, &j);
}

static void gemm_blas(tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g, char* ws, float* pack) {
  const float* a = (const float*)g->a;
  const float* b = (const float*)g->b;
  bool ta, tb, tc;
  int64_t lda, ldb, ldc;
  if (!blas_operand(g->m, g->k, g->a_rs, g->a_cs, &ta, &lda)) {
    float* d = (float*)ws;
    ws += align64(g->m * g->k * 4);
    dense_t dd = {a, g->a_rs, g->a_cs, g->k, d};
    run_range(ctx, g->m, 64, dense_rows, &dd);
    a = d, ta = false, lda = g->k;
  }
  if (!blas_operand(g->k, g->n, g->b_rs, g->b_cs, &tb, &ldb)) {
    float* d = (float*)ws;
    ws += align64(g->k * g->n * 4);
    dense_t dd = {b, g->b_rs, g->b_cs, g->n, d};
    run_range(ctx, g->k, 64, dense_rows, &dd);
    b = d, tb = false, ldb = g->n;
  }
  c_in_to_c(ctx, g);
  float* c = (float*)g->c;
  float* tmp = NULL;
  if (!blas_operand(g->m, g->n, g->c_rs, g->c_cs, &tc, &ldc)) {
    tmp = (float*)ws;
    if (g->beta != 0) {
      dense_t dd = {c, g->c_rs, g->c_cs, g->n, tmp};
      run_range(ctx, g->m, 64, dense_rows, &dd);
    }
    c = tmp, tc = false, ldc = g->n;
  }
  if (!tc)
    blas_call(ctx, ta, tb, g->m, g->n, g->k, (float)g->alpha, a, lda, b, ldb, (float)g->beta, c, ldc, pack);
  else /* C^T = B^T A^T with C^T row-major */
    blas_call(ctx, !tb, !ta, g->n, g->m, g->k, (float)g->alpha, b, ldb, a, lda, (float)g->beta, c, ldc, pack);
  if (tmp) {
    dense_t dd = {tmp, g->c_rs, g->c_cs, g->n, (float*)g->c};
    run_range(ctx, g->m, 64, dense_back, &dd);
  }
}

/* Whether fp32 A is read where it lies instead of packed. A thread packs its A rows once per block
 * of B and the microkernel reads each packed element once per NR columns of its box, so where the
 * product has few columns the packing is a large part of the work (the small GPT's products, 128-512
 * columns: packing was a fifth of the GEMM's samples). Row-major A (depth contiguous) is six streams
 * the microkernel walks along, fast up to 1024 columns and level beyond; column-major A moves to a
 * new row of memory at every depth step, which pays only while those rows are close together (at
 * 4 KiB apart, one page a step, it ran at 340-360 GFLOP/s against 445-470 packed; Zen 5, 2 threads).
 * Those limits (1024 and 512 columns) were measured against the packed path of panels outer; packed
 * A in the A-in-L1 order (a row tile packed just before its walk, a_once) is faster from fewer
 * columns. One thread of an Ice Lake Xeon, direct against packed, the two builds in one process
 * (median of 15-201 pairs; M x N x K): row-major A 4096 x 32 x 256 1.49, 1024 x 64 x 1024 1.25, 512 x 256 x 512
 * 1.08, 256^3 1.09, 2048 x 128 x 512 1.03, 2048 x 256 x 2048 0.99, 768 x 320 x 768 0.95, 1024 x 384 x
 * 1024 0.95, 512^3 0.93, 1024 x 768 x 3072 0.93, 256 x 768 x 768 0.91; column-major A 256 x 16 x 256
 * 1.84, 128 x 32 x 4096 1.70, 512 x 64 x 1024 1.20, 512 x 128 x 1024 0.85, 256 x 512 x 256 0.83,
 * 512 x 512 x 1024 0.73; the small GPT's shapes: weight gradients (column-major A) 384 x 128 x 256
 * 0.93, 384 x 384 x 256 0.88, 128 x 384 x 256 0.87, row-major 256 x 128 x 384 1.10, and 256 x 512 x 128
 * 1.07 (a shallow product past the limit, now packed). (Not measured again on the Zen 5.) */
enum { A_DIRECT_MAX_N_ROWS = 256, A_DIRECT_MAX_N_COLS = 64, A_DIRECT_MAX_STEP = 512 };
static _Atomic int g_a_direct = -1; /* -1: not read from the environment yet */
void tpurt_gemm_set_a_direct(bool on) { atomic_store(&g_a_direct, on ? 1 : 0); }
static bool a_direct_pays(const tpurt_gemm_t* g, acc_kind_t kind) {
#ifdef GEMM_A_DIRECT
  if (kind != ACC_F32 || g->ab_dtype != TPURT_DTYPE_FLOAT32 || gemm_generic()) return false;
  if (!tpurt_env_switch(&g_a_direct, "TORCH_TPU_GEMM_A_DIRECT", true)) return false;
  if (g->a_cs == 1) return g->n <= A_DIRECT_MAX_N_ROWS;
  return g->a_rs == 1 && g->n <= A_DIRECT_MAX_N_COLS && g->a_cs <= A_DIRECT_MAX_STEP;
#else
  (void)g, (void)kind;
  return false;
#endif
}

/* Runs g through the widening few-row kernels where they apply (half_few_form); ws: half_few_bytes
 * floats (single_ws_bytes), for A widened. False: the caller packs. */
static bool half_few_rows(tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g, char* ws) {
#ifdef HALF_FEW
  const int form = half_few_form(g);
  if (!ws || !form) return false;
  float* a32 = (float*)ws;
  for (int64_t i = 0; i < g->m; ++i)
    tpurt_hv_to_f32(g->ab_dtype, (const uint16_t*)g->a + i * g->a_rs, a32 + i * g->k, g->k);
  half_few_t t = {g, a32, (float*)(ws + align64(mul_sat(mul_sat(g->m, g->k), 4)))};
  /* about 2^18 multiply-adds a task, as bf16_few_rows */
  const int64_t per = (int64_t)1 << 18, mk = mul_sat(g->m, g->k);
#ifdef HALF_FEW_NN
  if (form == 2) {
    run_range(ctx, (g->n + 63) / 64, per / (mk * 64 + 1) + 1, half_few_nn_cols, &t);
    return true;
  }
#endif
  run_range(ctx, (g->n + 3) / 4, per / (mk * 4 + 1) + 1, half_few_cols, &t);
  return true;
#else
  (void)ctx, (void)g, (void)ws;
  return false;
#endif
}

/* The streamed block of B must stay in one core's L2 with room to spare: NC_F32 columns (960 KiB)
 * where L2 is 1.25 MiB (Ice Lake) or more, fewer where it is smaller (three quarters of it, in whole
 * panels; 512 on a 1 MiB L2). NC_F32 where the size is not reported. */
static int64_t f32_col_block(void) {
  static _Atomic int64_t cached; /* 0: not computed yet */
  int64_t nc = atomic_load_explicit(&cached, memory_order_relaxed);
  if (nc) return nc;
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  nc = l2 > 0 ? (int64_t)l2 * 3 / 4 / (KC_F32 * 4) / NR_F32 * NR_F32 : NC_F32;
  nc = nc < 4 * NR_F32 ? 4 * NR_F32 : nc > NC_F32 ? NC_F32 : nc;
  atomic_store_explicit(&cached, nc, memory_order_relaxed);
  return nc;
}

/* With packed A and more than one column block, the fp32 core packs each box's rows of A once per
 * depth block and keeps them for every column block (its a_once order), where a box's rows take at
 * most A_ONCE_MAX bytes: they were packed again for each column block, 4 times in a 2048-wide product,
 * where packing was 9% of the time (perf, one thread, fp32 2048^3). The box's rows no longer fit L2
 * then (a thread's 1024 rows x 384 deep: 1.5 MiB), so each row tile's micro-panel comes from L3 for its
 * first tile. Returns the bytes of a box's rows, or 0 where the order does not apply. (-DA_ONCE=0 builds
 * without it, for comparisons.) */
#ifndef A_ONCE
#define A_ONCE 1
#endif
enum { A_ONCE_MAX = 4 << 20 };
static size_t a_once_bytes(const tpurt_gemm_t* g, acc_kind_t kind, int nt) {
  if (!A_ONCE || !A_IN_L1_F32 || kind != ACC_F32 || a_direct_pays(g, kind) || g->n <= f32_col_block()) return 0;
  const int64_t p = (g->m + MR_F32 - 1) / MR_F32, tr = p < nt ? p : nt;
  const size_t bytes = packed_bytes(kind, (p + tr - 1) / tr * MR_F32, MR_F32, g->k);
  return bytes <= A_ONCE_MAX ? bytes : 0;
}
/* One thread's (or, with a_once, one box's) packed A. */
static size_t pa_slot_bytes(const tpurt_gemm_t* g, acc_kind_t kind, int nt) {
  const size_t chunk = packed_bytes(kind, imin(g->m, MC_FOR(acc_mr(kind))), acc_mr(kind), g->k),
               once = a_once_bytes(g, kind, nt < 1 ? 1 : nt);
  return once > chunk ? once : chunk;
}

static void gemm_own(tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g, char* ws) {
  acc_kind_t kind = acc_kind(g->ab_dtype, g->c_dtype);
  if (kind == ACC_BDP && !gemm_generic() && bf16_few_rows(ctx, g)) return;
  if (kind == ACC_F32 && !gemm_generic() && half_few_rows(ctx, g, ws)) return;
  int nr = acc_nr(kind);
  core_args_t s = {.m = g->m, .n = g->n, .k = g->k, .a = g->a, .a_rs = g->a_rs,
                   .a_cs = g->a_cs, .b = g->b, .b_rs = g->b_rs, .b_cs = g->b_cs,
                   .alpha = g->alpha, .beta = g->beta, .in_size = tpurt_dtype_size(g->ab_dtype),
                   .pack = kind == ACC_BDP   ? pack_bf16_pairs
                           : kind == ACC_AMX ? pack_amx_b
                                             : pack_for(g->ab_dtype),
                   .pack_a = kind == ACC_AMX ? pack_amx_a : NULL,
                   .nt = tpurt_kernel_num_threads(ctx)};
  s.a_direct = a_direct_pays(g, kind);
  /* packed A only: the direct form (fp32 A read in place) keeps the order it was measured in */
  s.a_in_l1 = A_IN_L1_F32 && kind == ACC_F32 && !s.a_direct;
  s.ncb = s.a_in_l1 ? f32_col_block() : acc_nc(kind);
  s.pa = ws;
  s.pa_each = pa_slot_bytes(g, kind, s.nt);
  const bool a_once = a_once_bytes(g, kind, s.nt) > 0;
  ws += s.pa_each * (size_t)s.nt;
  s.pb = ws;
  ws += packed_bytes(kind, imin(g->n, acc_nc(kind)), nr, g->k);
  void (*core)(tpurt_kernel_ctx_t*, core_args_t*) = kind == ACC_F32   ? f32_core
                                                    : kind == ACC_F64 ? f64_core
                                                    : kind == ACC_BDP ? bdp_core
                                                    : kind == ACC_AMX ? amx_core
                                                                      : i64_core;
  if (c_direct(g, kind) || c16_direct(g, kind)) {
    if (!c_direct(g, kind)) s.c16 = g->c_dtype;
    s.c16_bf16_in = kind == ACC_F32 && g->ab_dtype == TPURT_DTYPE_BFLOAT16 && s.c16 == TPURT_DTYPE_BFLOAT16;
    c_in_to_c(ctx, g);
    s.c = g->c, s.c_rs = g->c_rs, s.c_cs = g->c_cs;
    s.a_once = a_once;
    core(ctx, &s);
    return;
  }
  /* C in another dtype: accumulate column blocks of C in the workspace, then
   * round once on store. */
  int64_t w = ws_cols(g, nr);
  tpurt_dtype_t ad = acc_dtype(kind);
  const void* c_in = g->c_in ? g->c_in : g->c;
  int64_t cin_rs = g->c_in ? g->c_in_rs : g->c_rs, cin_cs = g->c_in ? g->c_in_cs : g->c_cs;
  /* 16-bit C from float sums: each tile rounded into C as its last depth block finishes it
   * (flush_tile16); beta 0: the first depth block writes the workspace without reading it, so it is
   * not zeroed first. Two parallel regions and two passes over the workspace fewer (one thread,
   * 512^3 bf16: the zeroing and the store pass were 4.3% of the time). */
  const bool fused16 = ad == TPURT_DTYPE_FLOAT32 &&
                       (g->c_dtype == TPURT_DTYPE_BFLOAT16 || g->c_dtype == TPURT_DTYPE_FLOAT16);
  for (int64_t j0 = 0; j0 < g->n; j0 += w) {
    int64_t cols = imin(w, g->n - j0);
    if (g->beta != 0) {
      cfill_t f = {.g = g, .dst_dtype = ad, .dst = ws, .d_rs = cols, .d_cs = 1,
                   .src_dtype = g->c_dtype, .src = c_in, .s_rs = cin_rs,
                   .s_cs = cin_cs, .scale = g->beta, .j0 = j0, .cols = cols};
      run_range(ctx, g->m, 64, cfill_rows, &f);
    }
    s.n = cols;
    s.b = (const char*)g->b + (size_t)(j0 * g->b_cs) * s.in_size;
    s.c = ws, s.c_rs = cols, s.c_cs = 1, s.beta = g->beta != 0 ? 1.0 : 0.0;
    if (fused16) {
      s.c_out = g->c, s.c_out_rs = g->c_rs, s.c_out_cs = g->c_cs, s.c_out_j0 = j0;
      s.c_out_dtype = g->c_dtype;
    }
    s.a_once = a_once; /* the core clears it where this pass's columns are one block */
    core(ctx, &s);
    if (fused16) continue;
    cfill_t st = {.g = g, .dst_dtype = g->c_dtype, .dst = g->c, .d_rs = g->c_rs, .d_cs = g->c_cs,
                  .src_dtype = ad, .src = ws, .s_rs = cols, .s_cs = 1, .j0 = j0, .cols = cols};
    run_range(ctx, g->m, 64, cstore_rows, &st);
  }
}

static void gemm_single(tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g, char* ws, bool own) {
  if (g->m <= 0 || g->n <= 0) return;
  if (g->k <= 0 || g->alpha == 0) {
    scale_c(ctx, g);
    return;
  }
  if (!own && use_blas(g))
    gemm_blas(ctx, g, ws, ws && small_pack_bytes(ctx, g) ? (float*)(ws + single_ws_bytes(g, 1)) : NULL);
  else gemm_own(ctx, g, ws);
}

static tpurt_gemm_t batch_slice(const tpurt_gemm_t* g, int64_t i) {
  tpurt_gemm_t s = *g;
  size_t abs = tpurt_dtype_size(g->ab_dtype), cs = tpurt_dtype_size(g->c_dtype);
  s.a = (const char*)g->a + (size_t)(i * g->a_bs) * abs;
  s.b = (const char*)g->b + (size_t)(i * g->b_bs) * abs;
  s.c = (char*)g->c + (size_t)(i * g->c_bs) * cs;
  if (g->c_in) s.c_in = (const char*)g->c_in + (size_t)(i * g->c_in_bs) * cs;
  s.batch = 1;
  return s;
}

typedef struct batch_task_t {
  const tpurt_gemm_t* g;
  char* ws;
  size_t ws_each;
} batch_task_t;

static void batch_run(void* u, int64_t b0, int64_t b1, int tid) {
  batch_task_t* t = (batch_task_t*)u;
  for (int64_t i = b0; i < b1; ++i) {
    tpurt_gemm_t s = batch_slice(t->g, i);
    gemm_single(NULL, &s, t->ws + t->ws_each * (size_t)tid, true);
  }
}

tpurt_status_t tpurt_gemm(tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g, void* workspace) {
  if (acc_kind(g->ab_dtype, g->c_dtype) == ACC_NONE)
    return TPURT_STATUS(UNIMPLEMENTED, "gemm: A/B dtype %s with C dtype %s is not supported",
                        tpurt_dtype_name(g->ab_dtype), tpurt_dtype_name(g->c_dtype));
  if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "gemm: negative size m=%lld n=%lld k=%lld",
                        (long long)g->m, (long long)g->n, (long long)g->k);
  if (g->m == 0 || g->n == 0) return TPURT_OK;
  if (g->ab_dtype == TPURT_DTYPE_FLOAT32 && tpurt_gemm_fp32_split_wanted(g))
    return tpurt_gemm_fp32_split(ctx, g); /* the MXU's bf16 passes (gemm_precision.c) */
  if (use_blas(g) && (g->m > INT32_MAX || g->n > INT32_MAX || g->k > INT32_MAX))
    return TPURT_STATUS(INVALID_ARGUMENT, "gemm: size exceeds BLAS int range");
  size_t bytes = tpurt_gemm_workspace_bytes(ctx, g);
  if (!workspace && bytes) {
    workspace = ctx ? tpurt_kernel_scratch(ctx, bytes) : NULL;
    if (!workspace && (ctx || bytes > small_pack_bytes(ctx, g))) /* without that, OpenBLAS */
      return TPURT_STATUS(RESOURCE_EXHAUSTED, "gemm: cannot get %zu bytes of scratch", bytes);
  }
  if (batch_parallel(ctx, g)) {
    batch_task_t t = {g, (char*)workspace, bytes / (size_t)tpurt_kernel_num_threads(ctx)};
    tpurt_parallel_for(ctx, nbatch(g), 1, batch_run, &t);
    return TPURT_OK;
  }
  for (int64_t i = 0; i < nbatch(g); ++i) {
    tpurt_gemm_t s = batch_slice(g, i);
    gemm_single(ctx, &s, (char*)workspace, false);
  }
  return TPURT_OK;
}

tpurt_status_t tpurt_gemm_reference(const tpurt_gemm_t* g) {
  acc_kind_t kind = acc_kind(g->ab_dtype, g->c_dtype);
  if (kind == ACC_NONE)
    return TPURT_STATUS(UNIMPLEMENTED, "gemm: A/B dtype %s with C dtype %s is not supported",
                        tpurt_dtype_name(g->ab_dtype), tpurt_dtype_name(g->c_dtype));
  size_t abs = tpurt_dtype_size(g->ab_dtype), cs = tpurt_dtype_size(g->c_dtype);
  for (int64_t bi = 0; bi < nbatch(g); ++bi) {
    tpurt_gemm_t s = batch_slice(g, bi);
    const char* cin = s.c_in ? (const char*)s.c_in : (const char*)s.c;
    int64_t cin_rs = s.c_in ? s.c_in_rs : s.c_rs, cin_cs = s.c_in ? s.c_in_cs : s.c_cs;
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        const char* ci = cin + (size_t)(i * cin_rs + j * cin_cs) * cs;
        char* co = (char*)s.c + (size_t)(i * s.c_rs + j * s.c_cs) * cs;
        if (kind == ACC_I64) {
          int64_t acc = 0; /* alpha == 0: A and B are not read (BLAS convention) */
          for (int64_t p = 0; p < (s.alpha != 0 ? s.k : 0); ++p)
            acc = wrap_add(acc, wrap_mul(
                tpurt_dtype_load_i64(s.ab_dtype, (const char*)s.a + (size_t)(i * s.a_rs + p * s.a_cs) * abs),
                tpurt_dtype_load_i64(s.ab_dtype, (const char*)s.b + (size_t)(p * s.b_rs + j * s.b_cs) * abs)));
          int64_t v = wrap_mul((int64_t)s.alpha, acc);
          if (s.beta != 0) v = wrap_add(v, wrap_mul((int64_t)s.beta, tpurt_dtype_load_i64(s.c_dtype, ci)));
          tpurt_dtype_store_i64(s.c_dtype, co, v);
        } else {
          double acc = 0;
          for (int64_t p = 0; p < (s.alpha != 0 ? s.k : 0); ++p)
            acc += tpurt_dtype_load_f64(s.ab_dtype, (const char*)s.a + (size_t)(i * s.a_rs + p * s.a_cs) * abs) *
                   tpurt_dtype_load_f64(s.ab_dtype, (const char*)s.b + (size_t)(p * s.b_rs + j * s.b_cs) * abs);
          double v = s.alpha * acc;
          if (s.beta != 0) v += s.beta * tpurt_dtype_load_f64(s.c_dtype, ci);
          tpurt_dtype_store_f64(s.c_dtype, co, v);
        }
      }
  }
  return TPURT_OK;
}
