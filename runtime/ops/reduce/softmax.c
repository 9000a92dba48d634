/* Softmax family along one dim: _softmax, _log_softmax and their backward
 * (_softmax_backward_data, _log_softmax_backward_data). Rows are independent
 * and split across threads. 16-bit and float32 inputs compute in float32 with
 * a vectorizable exp (ops/elementwise/ew_expf.h, shared with exp); float64 computes in double
 * with libm. A row holding a NaN gives NaN everywhere, as PyTorch's does. */
#include <string.h>

#include "base/stream_copy.h"
#include "ops/elementwise/ew_expf.h"
#include "ops/half_vec.h"
#include "ops/reduce/reduce_ops.h"

/* Lane-split reductions: 16 independent lanes so the compiler vectorizes
 * without reassociating a single accumulator. */
#define LANES 16
#if defined(__SSE2__)
#include <immintrin.h>
#endif
/* The row passes read float32 rows, or bfloat16 rows widened as they are read
 * (bf16: a constant at each call, so each use compiles to one of the two);
 * either way the same float values go through the same operations. */
#if defined(__AVX512F__) && defined(__AVX512BW__)
static inline __attribute__((always_inline)) __m512 sm_load16(const void* x, int64_t i, bool bf16) {
  return bf16 ? tpurt_hv_bf16x16_load((const uint16_t*)x + i) : _mm512_loadu_ps((const float*)x + i);
}
#elif defined(__AVX512F__)
static inline __attribute__((always_inline)) __m512 sm_load16(const void* x, int64_t i, bool bf16) {
  if (!bf16) return _mm512_loadu_ps((const float*)x + i);
  float t[16];
  for (int k = 0; k < 16; ++k) t[k] = tpurt_bf16_to_f32(((const uint16_t*)x)[i + k]);
  return _mm512_loadu_ps(t);
}
#endif
#if defined(__AVX2__)
static inline __attribute__((always_inline)) __m256 sm_load8(const void* x, int64_t i, bool bf16) {
  return bf16 ? tpurt_hv_bf16x8_load((const uint16_t*)x + i) : _mm256_loadu_ps((const float*)x + i);
}
#endif
static inline __attribute__((always_inline)) float sm_load1(const void* x, int64_t i, bool bf16) {
  return bf16 ? tpurt_bf16_to_f32(((const uint16_t*)x)[i]) : ((const float*)x)[i];
}

/* Max ignoring NaN (a plain compare-select, so it becomes vmaxps): a NaN in
 * the row still makes the row all NaN, because exp(NaN - mx) poisons the sum
 * every output is scaled by (or, for log_softmax, log(sum) is subtracted). */
static inline __attribute__((always_inline)) float row_max(const void* x, int64_t n, bool bf16) {
  float l[LANES];
  int64_t i = 0;
#if defined(__AVX512F__)
  __m512 l0 = _mm512_set1_ps(-INFINITY);
  for (; i + LANES <= n; i += LANES) l0 = _mm512_max_ps(sm_load16(x, i, bf16), l0);
  _mm512_storeu_ps(l, l0);
#elif defined(__AVX2__) && defined(__FMA__)
  /* vmaxps(v, l) is exactly `v > l ? v : l`, lane by lane as below */
  __m256 l0 = _mm256_set1_ps(-INFINITY), l1 = l0;
  for (; i + LANES <= n; i += LANES) {
    l0 = _mm256_max_ps(sm_load8(x, i, bf16), l0);
    l1 = _mm256_max_ps(sm_load8(x, i + 8, bf16), l1);
  }
  _mm256_storeu_ps(l, l0);
  _mm256_storeu_ps(l + 8, l1);
#else
  for (int k = 0; k < LANES; ++k) l[k] = -INFINITY;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; ++k) { float v = sm_load1(x, i + k, bf16); l[k] = v > l[k] ? v : l[k]; }
#endif
  float m = -INFINITY;
  for (; i < n; ++i) { float v = sm_load1(x, i, bf16); m = v > m ? v : m; }
  for (int k = 0; k < LANES; ++k) m = l[k] > m ? l[k] : m;
  return m;
}
static float ROW_MAX_float(const float* x, int64_t n) { return row_max(x, n, false); }
/* exp(x - mx) into y (NULL: only the sum) and the sum. `next`, the row after
 * (or NULL), is fetched into L1 a line per 16 elements meanwhile, so that
 * the next row's max pass finds it there: without it the rows' memory reads
 * and this pass's arithmetic take turns. */
static inline __attribute__((always_inline)) float row_expsum(const void* x, float* y, int64_t n, float mx,
                                                              const void* next, bool bf16) {
  float l[LANES] = {0};
  int64_t i = 0;
  const int64_t es = bf16 ? 2 : 4;
#if defined(__AVX512F__)
  /* the same 16 lane sums as the AVX2 path's two 8-lane accumulators */
  __m512 a0 = _mm512_setzero_ps();
  const __m512 vm = _mm512_set1_ps(mx);
  for (; i + LANES <= n; i += LANES) {
    if (next && (!bf16 || (i & 31) == 0)) _mm_prefetch((const char*)next + i * es, _MM_HINT_T0);
    __m512 v0 = tpurt_ew_expf16_softmax(_mm512_sub_ps(sm_load16(x, i, bf16), vm));
    if (y) _mm512_storeu_ps(y + i, v0);
    a0 = _mm512_add_ps(a0, v0);
  }
  _mm512_storeu_ps(l, a0);
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  const __m256 vm = _mm256_set1_ps(mx);
  for (; i + LANES <= n; i += LANES) {
    if (next && (!bf16 || (i & 31) == 0)) _mm_prefetch((const char*)next + i * es, _MM_HINT_T0);
    __m256 v0 = tpurt_ew_expf8_softmax(_mm256_sub_ps(sm_load8(x, i, bf16), vm));
    __m256 v1 = tpurt_ew_expf8_softmax(_mm256_sub_ps(sm_load8(x, i + 8, bf16), vm));
    if (y) { /* NULL: log_softmax needs only the sum */
      _mm256_storeu_ps(y + i, v0);
      _mm256_storeu_ps(y + i + 8, v1);
    }
    a0 = _mm256_add_ps(a0, v0);
    a1 = _mm256_add_ps(a1, v1);
  }
  _mm256_storeu_ps(l, a0);
  _mm256_storeu_ps(l + 8, a1);
#else
  (void)es;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; ++k) {
      float v = tpurt_ew_expf(sm_load1(x, i + k, bf16) - mx);
      if (y) y[i + k] = v;
      l[k] += v;
    }
#endif
  float s = 0;
  for (; i < n; ++i) { float v = tpurt_ew_expf(sm_load1(x, i, bf16) - mx); if (y) y[i] = v; s += v; }
  for (int k = 0; k < LANES; ++k) s += l[k];
  return s;
}
static float ROW_EXPSUM_float(const float* x, float* y, int64_t n, float mx, const float* next) {
  return row_expsum(x, y, n, mx, next, false);
}

/* softmax / log_softmax forward of one row held in bfloat16 (x, into y; ybuf:
 * n floats for softmax's exps): the float32 path's operations on the widened
 * values and one rounding to bfloat16, reading the row in place instead of
 * through a float32 copy, and writing it once. */
static void sm_fwd_bf16_row(const uint16_t* x, uint16_t* y, int64_t n, bool log, float* ybuf, const uint16_t* next) {
  const float mx = row_max(x, n, true);
  const float sum = row_expsum(x, log ? NULL : ybuf, n, mx, next, true);
  int64_t i = 0;
  if (log) {
    const float ls = logf(sum);
#if defined(__AVX512F__) && defined(__AVX512BW__)
    const __m512 vm = _mm512_set1_ps(mx), vl = _mm512_set1_ps(ls);
    for (; i + 16 <= n; i += 16)
      _mm256_storeu_si256((__m256i*)(y + i),
                          tpurt_hv_bf16x16_pack(_mm512_sub_ps(_mm512_sub_ps(tpurt_hv_bf16x16_load(x + i), vm), vl)));
#elif defined(__AVX2__)
    const __m256 vm = _mm256_set1_ps(mx), vl = _mm256_set1_ps(ls);
    for (; i + 8 <= n; i += 8)
      tpurt_hv_bf16x8_store(y + i, _mm256_sub_ps(_mm256_sub_ps(tpurt_hv_bf16x8_load(x + i), vm), vl));
#endif
    for (; i < n; ++i) y[i] = tpurt_f32_to_bf16(tpurt_bf16_to_f32(x[i]) - mx - ls);
  } else {
    const float inv = 1.0f / sum;
    for (; i < n; ++i) ybuf[i] *= inv;
    tpurt_hv_f32_to_bf16(ybuf, y, n);
  }
}

static double ROW_MAX_double(const double* x, int64_t n) {
  double m = -INFINITY;
  int nan = 0;
  for (int64_t i = 0; i < n; ++i) { nan |= x[i] != x[i]; m = x[i] > m ? x[i] : m; }
  return nan ? NAN : m;
}
static double ROW_EXPSUM_double(const double* x, double* y, int64_t n, double mx, const double* next) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) { y[i] = exp(x[i] - mx); s += y[i]; }
  return s;
}

/* log_softmax backward of one row: y = g - exp(o) * s, with the vector exp
 * (a scalar exp per element was most of the backward's time). */
static void LSM_BWD_float(const float* g, const float* o, float* y, int64_t n, float s) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 vs16 = _mm512_set1_ps(s);
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fnmadd_ps(tpurt_ew_expf16_softmax(_mm512_loadu_ps(o + i)), vs16, _mm512_loadu_ps(g + i)));
#endif
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 vs = _mm256_set1_ps(s);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fnmadd_ps(tpurt_ew_expf8_softmax(_mm256_loadu_ps(o + i)), vs, _mm256_loadu_ps(g + i)));
#endif
  for (; i < n; ++i) y[i] = g[i] - tpurt_ew_expf(o[i]) * s;
}
static void LSM_BWD_double(const double* g, const double* o, double* y, int64_t n, double s) {
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] - exp(o[i]) * s;
}

/* softmax backward of one row held in bfloat16 (grad g, output o, result y):
 * s = sum(g * o) and y = o * (g - s) in float32, reading and writing the
 * bfloat16 rows directly instead of through float32 copies of each (five
 * passes over the row become two). */
static void sm_bwd_bf16_row(const uint16_t* g, const uint16_t* o, uint16_t* y, int64_t n) {
  int64_t i = 0;
  float s = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  __m512 acc = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16)
    acc = _mm512_fmadd_ps(tpurt_hv_bf16x16_load(g + i), tpurt_hv_bf16x16_load(o + i), acc);
  s = _mm512_reduce_add_ps(acc);
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(tpurt_hv_bf16x8_load(g + i), tpurt_hv_bf16x8_load(o + i), acc);
  float l[8];
  _mm256_storeu_ps(l, acc);
  for (int k = 0; k < 8; ++k) s += l[k];
#endif
  for (; i < n; ++i) s += tpurt_bf16_to_f32(g[i]) * tpurt_bf16_to_f32(o[i]);
  i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  const __m512 vs = _mm512_set1_ps(s);
  for (; i + 16 <= n; i += 16) {
    __m512 ov = tpurt_hv_bf16x16_load(o + i);
    _mm256_storeu_si256((__m256i*)(y + i),
                        tpurt_hv_bf16x16_pack(_mm512_mul_ps(ov, _mm512_sub_ps(tpurt_hv_bf16x16_load(g + i), vs))));
  }
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 vs = _mm256_set1_ps(s);
  for (; i + 8 <= n; i += 8)
    tpurt_hv_bf16x8_store(y + i, _mm256_mul_ps(tpurt_hv_bf16x8_load(o + i),
                                               _mm256_sub_ps(tpurt_hv_bf16x8_load(g + i), vs)));
#endif
  for (; i < n; ++i) y[i] = tpurt_f32_to_bf16(tpurt_bf16_to_f32(o[i]) * (tpurt_bf16_to_f32(g[i]) - s));
}

/* log_softmax backward of one row held in bfloat16: s = sum(g) and
 * y = g - exp(o) * s in float32 from the bfloat16 rows directly, the bits of
 * the float32 path (TPURT_LANE_SUM for s, LSM_BWD_float for y, one
 * rounding to bfloat16) without its three float32 copies of the row. */
static void lsm_bwd_bf16_row(const uint16_t* g, const uint16_t* o, uint16_t* y, int64_t n) {
  const float s = TPURT_LANE_SUM(float, n, tpurt_bf16_to_f32(g[i_]));
  int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  const __m512 vs16 = _mm512_set1_ps(s);
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((__m256i*)(y + i),
                        tpurt_hv_bf16x16_pack(_mm512_fnmadd_ps(tpurt_ew_expf16_softmax(tpurt_hv_bf16x16_load(o + i)),
                                                               vs16, tpurt_hv_bf16x16_load(g + i))));
#endif
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 vs = _mm256_set1_ps(s);
  for (; i + 8 <= n; i += 8)
    tpurt_hv_bf16x8_store(y + i, _mm256_fnmadd_ps(tpurt_ew_expf8_softmax(tpurt_hv_bf16x8_load(o + i)), vs,
                                                  tpurt_hv_bf16x8_load(g + i)));
#endif
  for (; i < n; ++i)
    y[i] = tpurt_f32_to_bf16(tpurt_bf16_to_f32(g[i]) - tpurt_ew_expf(tpurt_bf16_to_f32(o[i])) * s);
}

/* dst[i] = y[i] * inv (softmax) for a 64-byte aligned dst, with streaming
 * stores where the CPU has them: an output larger than the caches is written
 * without first reading its lines (a third of a large softmax's memory
 * traffic). The values are the unstreamed path's, operation for operation. */
static void sm_scale_stream(float* dst, const float* y, int64_t n, float inv) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 v = _mm512_set1_ps(inv);
  for (; i + 16 <= n; i += 16) _mm512_stream_ps(dst + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), v));
#elif defined(__AVX2__)
  const __m256 v = _mm256_set1_ps(inv);
  for (; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), v));
#endif
  for (; i < n; ++i) dst[i] = y[i] * inv;
}

/* dst[i] = x[i] - mx - ls (log_softmax) the same way. */
static void sm_shift_stream(float* dst, const float* x, int64_t n, float mx, float ls) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 vm = _mm512_set1_ps(mx), vl = _mm512_set1_ps(ls);
  for (; i + 16 <= n; i += 16)
    _mm512_stream_ps(dst + i, _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm), vl));
#elif defined(__AVX2__)
  const __m256 vm = _mm256_set1_ps(mx), vl = _mm256_set1_ps(ls);
  for (; i + 8 <= n; i += 8)
    _mm256_stream_ps(dst + i, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vl));
#endif
  for (; i < n; ++i) dst[i] = x[i] - mx - ls;
}

typedef struct sm_job_t {
  const tpurt_tensor_t *a, *b, *out; /* forward: a = input; backward: a = grad, b = output */
  int32_t dim;
  int64_t n, rows;
  bool log, backward, ref;
  bool stream;   /* a float32 forward writing more than the caches hold: streaming stores */
  float* fbuf;   /* per thread 3n floats */
  double* dbuf;  /* per thread 3n doubles */
} sm_job_t;

static void row_ptrs(const sm_job_t* j, const tpurt_tensor_t* t, int64_t row, const char** p, int64_t* stride) {
  *p = (const char*)t->data + tpurt_tensor_offset_of(t, row, j->dim) * (int64_t)tpurt_dtype_size(t->dtype);
  *stride = j->dim >= 0 ? t->strides[j->dim] : 0;
}

/* Rows that are contiguous in the compute type are read / written in place
 * (DT = that dtype); others go through the per-thread buffers. */
#define SM_ROWS(T, DT, EXP, LOG, LOADER, STORER, BUF)                                      \
  do {                                                                                     \
    int64_t n = j->n;                                                                      \
    T* xbuf = (T*)j->BUF + (size_t)tid * 3 * (size_t)n;                                    \
    T* ybuf = xbuf + n;                                                                    \
    for (int64_t row = b; row < e; ++row) {                                                \
      const char* pa; int64_t sa;                                                          \
      row_ptrs(j, j->a, row, &pa, &sa);                                                    \
      char* po; int64_t so;                                                                \
      row_ptrs(j, j->out, row, (const char**)&po, &so);                                    \
      if (DT == TPURT_DTYPE_FLOAT32 && j->backward && j->a->dtype == TPURT_DTYPE_BFLOAT16 &&   \
          j->b->dtype == TPURT_DTYPE_BFLOAT16 && j->out->dtype == TPURT_DTYPE_BFLOAT16) {    \
        const char* pb; int64_t sb;                                                        \
        row_ptrs(j, j->b, row, &pb, &sb);                                                  \
        if ((sa == 1 && sb == 1 && so == 1) || n == 1) {                                   \
          if (j->log) lsm_bwd_bf16_row((const uint16_t*)pa, (const uint16_t*)pb, (uint16_t*)po, n); \
          else sm_bwd_bf16_row((const uint16_t*)pa, (const uint16_t*)pb, (uint16_t*)po, n);  \
          continue;                                                                        \
        }                                                                                  \
      }                                                                                    \
      if (DT == TPURT_DTYPE_FLOAT32 && !j->backward && j->a->dtype == TPURT_DTYPE_BFLOAT16 &&  \
          j->out->dtype == TPURT_DTYPE_BFLOAT16 && ((sa == 1 && so == 1) || n == 1) && po != pa) { \
        const uint16_t* nb = row + 1 < e ? (const uint16_t*)pa + (tpurt_tensor_offset_of(j->a, row + 1, j->dim) - \
                                                                   tpurt_tensor_offset_of(j->a, row, j->dim)) \
                                         : NULL;                                           \
        sm_fwd_bf16_row((const uint16_t*)pa, (uint16_t*)po, n, j->log, (float*)ybuf, nb);  \
        continue;                                                                          \
      }                                                                                    \
      const T* x = (const T*)pa;                                                           \
      /* the next row, where it is read in place: fetched during this one's exp */            \
      const T* nx = row + 1 < e && j->a->dtype == DT && (sa == 1 || n == 1)                 \
                        ? (const T*)((const char*)pa + (tpurt_tensor_offset_of(j->a, row + 1, j->dim) - \
                                                       tpurt_tensor_offset_of(j->a, row, j->dim)) *     \
                                                          (int64_t)sizeof(T))              \
                        : NULL;                                                            \
      if (!(j->a->dtype == DT && (sa == 1 || n == 1))) { LOADER(j->a->dtype, pa, sa, n, xbuf); x = xbuf; } \
      bool direct = j->out->dtype == DT && (so == 1 || n == 1) && po != pa;               \
      bool stream = DT == TPURT_DTYPE_FLOAT32 && j->stream && direct && so == 1 &&         \
                    ((uintptr_t)po & 63) == 0;                                             \
      T* y = direct && !stream ? (T*)po : ybuf;                                            \
      if (stream) {                                                                        \
        T mx = ROW_MAX_##T(x, n);                                                          \
        T sum = ROW_EXPSUM_##T(x, j->log ? NULL : y, n, mx, nx);                           \
        if (j->log) sm_shift_stream((float*)po, (const float*)x, n, (float)mx, (float)LOG(sum)); \
        else sm_scale_stream((float*)po, (const float*)y, n, (float)((T)1 / sum));         \
        continue;                                                                          \
      }                                                                                    \
      if (!j->backward) {                                                                  \
        T mx = ROW_MAX_##T(x, n);                                                          \
        T sum = ROW_EXPSUM_##T(x, j->log && DT == TPURT_DTYPE_FLOAT32 ? NULL : y, n, mx, nx); \
        if (j->log) {                                                                      \
          T ls = LOG(sum);                                                                 \
          for (int64_t i = 0; i < n; ++i) y[i] = x[i] - mx - ls;                           \
        } else {                                                                           \
          T inv = (T)1 / sum;                                                              \
          for (int64_t i = 0; i < n; ++i) y[i] *= inv;                                     \
        }                                                                                  \
      } else {                                                                             \
        const char* pb; int64_t sb;                                                        \
        row_ptrs(j, j->b, row, &pb, &sb);                                                  \
        const T* o = (const T*)pb;                                                         \
        if (!(j->b->dtype == DT && (sb == 1 || n == 1)) || (const char*)y == pb) {         \
          LOADER(j->b->dtype, pb, sb, n, xbuf + 2 * n);                                    \
          o = xbuf + 2 * n;                                                                \
        }                                                                                  \
        if (j->log) {                                                                      \
          T s = TPURT_LANE_SUM(T, n, x[i_]);                                                        \
          LSM_BWD_##T(x, o, y, n, s);                                                      \
        } else {                                                                           \
          T s = TPURT_LANE_SUM(T, n, x[i_] * o[i_]);                                                \
          for (int64_t i = 0; i < n; ++i) y[i] = o[i] * (x[i] - s);                        \
        }                                                                                  \
      }                                                                                    \
      if (!direct) STORER(j->out->dtype, po, so, n, y);                                    \
    }                                                                                      \
  } while (0)

static void sm_rows(void* user, int64_t b, int64_t e, int tid) {
  const sm_job_t* j = user;
  if (j->out->dtype == TPURT_DTYPE_FLOAT64 || j->a->dtype == TPURT_DTYPE_FLOAT64)
    SM_ROWS(double, TPURT_DTYPE_FLOAT64, exp, log, tpurt_row_load_f64, tpurt_row_store_f64, dbuf);
  else
    SM_ROWS(float, TPURT_DTYPE_FLOAT32, tpurt_ew_expf, logf, tpurt_row_load_f32, tpurt_row_store_f32, fbuf);
#if defined(__SSE2__)
  if (j->stream) _mm_sfence(); /* the streamed rows are visible before the job ends */
#endif
}

/* Reference: one element at a time in double through the scalar loaders. */
static void sm_reference(const sm_job_t* j) {
  for (int64_t row = 0; row < j->rows; ++row) {
    const char *pa, *pb = NULL; int64_t sa, sb = 0, so;
    char* po;
    row_ptrs(j, j->a, row, &pa, &sa);
    if (j->backward) row_ptrs(j, j->b, row, &pb, &sb);
    row_ptrs(j, j->out, row, (const char**)&po, &so);
    size_t asz = tpurt_dtype_size(j->a->dtype), osz = tpurt_dtype_size(j->out->dtype);
    size_t bsz = j->backward ? tpurt_dtype_size(j->b->dtype) : 0;
#define A(i) tpurt_dtype_load_f64(j->a->dtype, pa + (i) * sa * (int64_t)asz)
#define B(i) tpurt_dtype_load_f64(j->b->dtype, pb + (i) * sb * (int64_t)bsz)
#define OUT(i, v) tpurt_dtype_store_f64(j->out->dtype, po + (i) * so * (int64_t)osz, (v))
    if (!j->backward) {
      double mx = -INFINITY;
      for (int64_t i = 0; i < j->n; ++i) mx = (isnan(A(i)) || isnan(mx)) ? NAN : (A(i) > mx ? A(i) : mx);
      double sum = 0;
      for (int64_t i = 0; i < j->n; ++i) sum += exp(A(i) - mx);
      for (int64_t i = 0; i < j->n; ++i) OUT(i, j->log ? A(i) - mx - log(sum) : exp(A(i) - mx) / sum);
    } else {
      double s = 0;
      for (int64_t i = 0; i < j->n; ++i) s += j->log ? A(i) : A(i) * B(i);
      for (int64_t i = 0; i < j->n; ++i) OUT(i, j->log ? A(i) - exp(B(i)) * s : B(i) * (A(i) - s));
    }
#undef A
#undef B
#undef OUT
  }
}

/* forward: (self, dim, half_to_float) ; backward: (grad_output, output, dim, input_dtype) */
static tpurt_status_t sm_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, bool log, bool backward, bool ref) {
  sm_job_t j = {.log = log, .backward = backward, .ref = ref};
  j.a = tpurt_arg_tensor(c, 0);
  j.b = backward ? tpurt_arg_tensor(c, 1) : NULL;
  if (!j.a || (backward && !j.b) || c->num_outputs < 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected tensor inputs and one output", c->name);
  j.out = &c->outputs[0];
  for (const tpurt_tensor_t* t = j.a; t; t = (t == j.a ? j.b : NULL))
    if (!tpurt_dtype_is_floating(t->dtype)) return TPURT_REDUCE_UNSUPPORTED(c->name, t->dtype);
  if (!tpurt_dtype_is_floating(j.out->dtype)) return TPURT_REDUCE_UNSUPPORTED(c->name, j.out->dtype);
  TPURT_RETURN_IF_ERROR(tpurt_reduce_wrap_dim(c->name, tpurt_arg_int(c, backward ? 2 : 1, -1), j.a->ndim, &j.dim));
  if (j.a->ndim == 0) j.dim = -1;
  int64_t numel = tpurt_tensor_numel(j.a);
  if (numel == 0) return TPURT_OK;
  j.n = j.dim >= 0 ? j.a->sizes[j.dim] : 1;
  j.rows = numel / j.n;
  if (ref) { sm_reference(&j); return TPURT_OK; }
  j.stream = !backward && j.out->dtype == TPURT_DTYPE_FLOAT32 &&
             (size_t)numel * sizeof(float) >= TPURT_STREAM_BYTES;
  int nt = tpurt_kernel_num_threads(ctx);
  size_t bytes = sizeof(double) * 3 * (size_t)j.n * (size_t)nt;
  void* buf = tpurt_kernel_scratch(ctx, bytes);
  if (!buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch for %zu bytes", c->name, bytes);
  j.fbuf = buf;
  j.dbuf = buf;
  tpurt_parallel_for(ctx, j.rows, 1 + 16384 / (j.n + 1), sm_rows, &j);
  return TPURT_OK;
}

tpurt_status_t tpurt_kernel_softmax(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return sm_impl(x, c, false, false, false); }
tpurt_status_t tpurt_kernel_softmax_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return sm_impl(x, c, false, false, true); }
tpurt_status_t tpurt_kernel_log_softmax(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return sm_impl(x, c, true, false, false); }
tpurt_status_t tpurt_kernel_log_softmax_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return sm_impl(x, c, true, false, true); }
tpurt_status_t tpurt_kernel_softmax_backward_data(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return sm_impl(x, c, false, true, false); }
tpurt_status_t tpurt_kernel_softmax_backward_data_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return sm_impl(x, c, false, true, true); }
tpurt_status_t tpurt_kernel_log_softmax_backward_data(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return sm_impl(x, c, true, true, false); }
tpurt_status_t tpurt_kernel_log_softmax_backward_data_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return sm_impl(x, c, true, true, true); }
