/* Paged attention over vLLM's block tables, and the paged cache write.
 * The cache of one layer is vLLM's: one tensor [num_blocks, block_size,
 * kv_heads, 2 * head_size] (any strides but a contiguous last dim), keys in
 * the first head_size entries of the last dim, values in the second;
 * sequence s's token at position p lives in block block_table[s][p /
 * block_size], row p % block_size. A batch is ragged: the query tokens of
 * sequence s are rows query_start_loc[s] .. [s+1] of the query, the last ones
 * of its seq_lens[s] tokens, so one call serves decode (one query token),
 * chunked prefill (a chunk after a cached prefix) and both mixed. Attention is
 * causal (query at position p sees keys 0..p, or the last `sliding_window` of
 * them), grouped-query (query head h reads kv head h / (Hq / Hkv)), optionally
 * soft-capped (cap * tanh(score / cap)), optionally with ALiBi (score +=
 * slope[head] * (key position - query position), after the cap, as vLLM's
 * kernels add it). Online softmax over one cache block at a time: no score
 * matrix is stored beyond one block. float32/bfloat16/float16, computed in
 * float32. The cache may instead hold 8-bit floats (vLLM's kv_cache_dtype
 * "fp8"/"fp8_e4m3"/"fp8_e5m2": a uint8 tensor, per-tensor scales k_scale and
 * v_scale): the cache write stores key / k_scale rounded to fp8, attention
 * reads fp8 * k_scale (the scales are folded into the query and the output,
 * so a row is widened by a table lookup alone). */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "base/env.h"
#include "ops/elementwise/ew_expf.h"
#include "ops/fp8.h"
#include "ops/half_vec.h"
#include "ops/serve/serve.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

/* Query tokens of one sequence handled together by one work item: their rows
 * share each key and value row the item loads. */
enum { QTILE = 8 };

/* TORCH_TPU_SERVE_GENERIC=1 runs the portable dot/axpy loops on a build with
 * the vector ones, so tests cover both. */
static _Atomic int g_generic = -1;
static bool serve_generic(void) { return tpurt_env_switch(&g_generic, "TORCH_TPU_SERVE_GENERIC", false); }
void tpurt_serve_set_generic(bool generic) { atomic_store(&g_generic, generic ? 1 : 0); }

static inline int64_t imin64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t imax64(int64_t a, int64_t b) { return a > b ? a : b; }

static float dot_generic(const float* a, const float* b, int64_t n) {
  float s[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
  float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}
/* y += p * x */
static void axpy_generic(float* y, float p, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += p * x[i];
}

#if defined(__AVX2__) && defined(__FMA__)
static float dot_vec(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  s0 = _mm256_add_ps(s0, s1);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float r = _mm_cvtss_f32(h);
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}
static void axpy_vec(float* y, float p, const float* x, int64_t n) {
  __m256 vp = _mm256_set1_ps(p);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vp, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += p * x[i];
}
#else
#define dot_vec dot_generic
#define axpy_vec axpy_generic
#endif

#if defined(__AVX2__) && defined(__FMA__)
/* The 8 sums of a0..a7's lanes, as one vector [sum(a0), ..., sum(a7)]. */
static inline __m256 hsum8x8(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5, __m256 a6,
                             __m256 a7) {
  __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

/* sc[r * ldsc + k] = q_r . key_k for R query rows (qf, D apart) and nk key rows (D % 8 == 0): eight
 * keys at a time, each key row loaded once per query row from L1, the eight dot products reduced
 * together (one horizontal reduction per eight keys instead of one per key). */
static void block_scores_vec(const float* qf, int64_t R, const float* const* keys, int64_t nk, int64_t D,
                             float* sc, int64_t ldsc) {
  for (int64_t r = 0; r < R; ++r) {
    const float* q = qf + r * D;
    int64_t k = 0;
    for (; k + 8 <= nk; k += 8) {
      __m256 a[8];
      for (int i = 0; i < 8; ++i) a[i] = _mm256_setzero_ps();
      for (int64_t d = 0; d < D; d += 8) {
        __m256 qv = _mm256_loadu_ps(q + d);
        for (int i = 0; i < 8; ++i) a[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(keys[k + i] + d), a[i]);
      }
      _mm256_storeu_ps(sc + r * ldsc + k, hsum8x8(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]));
    }
    for (; k < nk; ++k) sc[r * ldsc + k] = dot_vec(q, keys[k], D);
  }
}

/* acc_r += sum_k p[r * ldp + k] * value_k for R rows (D % 8 == 0): 64 columns of acc_r stay in
 * registers while every value row of the block streams past. */
static void block_values_vec(float* acc, int64_t R, const float* const* vals, int64_t nk, int64_t D,
                             const float* p, int64_t ldp) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t d0 = 0; d0 < D; d0 += 64) {
      int nv = (int)((D - d0) / 8 < 8 ? (D - d0) / 8 : 8);
      float* a = acc + r * D + d0;
      __m256 v[8];
      for (int i = 0; i < nv; ++i) v[i] = _mm256_loadu_ps(a + 8 * i);
      for (int64_t k = 0; k < nk; ++k) {
        float w = p[r * ldp + k];
        if (w == 0.0f) continue;
        __m256 wv = _mm256_set1_ps(w);
        const float* x = vals[k] + d0;
        if (nv == 8) {
          for (int i = 0; i < 8; ++i) v[i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + 8 * i), v[i]);
        } else {
          for (int i = 0; i < nv; ++i) v[i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + 8 * i), v[i]);
        }
      }
      for (int i = 0; i < nv; ++i) _mm256_storeu_ps(a + 8 * i, v[i]);
    }
}
#endif

/* s[k] = exp(s[k] - m), 0 where s[k] is -inf (a masked key); returns the sum. The elementwise
 * family's exp (ew_expf.h), 8 lanes at a time on AVX2. */
static float exp_row(float* s, int64_t n, float m, bool generic) {
  float z = 0;
  int64_t k = 0;
#if defined(__AVX2__) && defined(__FMA__)
  if (!generic) {
    __m256 vm = _mm256_set1_ps(m), vz = _mm256_setzero_ps(), ninf = _mm256_set1_ps(-INFINITY);
    for (; k + 8 <= n; k += 8) {
      __m256 x = _mm256_loadu_ps(s + k);
      __m256 e = tpurt_ew_expf8(_mm256_sub_ps(x, vm));
      e = _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(x, ninf, _CMP_EQ_OQ));
      _mm256_storeu_ps(s + k, e);
      vz = _mm256_add_ps(vz, e);
    }
    float t[8];
    _mm256_storeu_ps(t, vz);
    z = ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
  }
#endif
  for (; k < n; ++k) {
    s[k] = s[k] == -INFINITY ? 0.0f : tpurt_ew_expf(s[k] - m);
    z += s[k];
  }
  return z;
}

/* Row `n` elements at `src` (element stride `st`) of dtype dt into float dst;
 * returns a pointer to the floats (src itself for contiguous float32). */
static const float* row_f32(tpurt_dtype_t dt, const char* src, int64_t st, int64_t n, float* dst) {
  if (st == 1) {
    if (dt == TPURT_DTYPE_FLOAT32) return (const float*)src;
    if (dt == TPURT_DTYPE_BFLOAT16) { tpurt_hv_bf16_to_f32((const uint16_t*)src, dst, n); return dst; }
    if (dt == TPURT_DTYPE_FLOAT16) { tpurt_hv_f16_to_f32((const uint16_t*)src, dst, n); return dst; }
  }
  size_t es = tpurt_dtype_size(dt);
  for (int64_t i = 0; i < n; ++i) dst[i] = (float)tpurt_dtype_load_f64(dt, src + (size_t)(i * st) * es);
  return dst;
}
static void row_store(tpurt_dtype_t dt, char* dst, int64_t st, const float* src, int64_t n) {
  if (st == 1) {
    if (dt == TPURT_DTYPE_FLOAT32) { memcpy(dst, src, (size_t)n * 4); return; }
    if (dt == TPURT_DTYPE_BFLOAT16) { tpurt_hv_f32_to_bf16(src, (uint16_t*)dst, n); return; }
    if (dt == TPURT_DTYPE_FLOAT16) { tpurt_hv_f32_to_f16(src, (uint16_t*)dst, n); return; }
  }
  size_t es = tpurt_dtype_size(dt);
  for (int64_t i = 0; i < n; ++i) tpurt_dtype_store_f64(dt, dst + (size_t)(i * st) * es, src[i]);
}

static inline char* elem(const tpurt_tensor_t* t, int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t off = a * t->strides[0] + b * t->strides[1] + c * t->strides[2] + (t->ndim > 3 ? d * t->strides[3] : 0);
  return (char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype);
}

/* An integer metadata tensor (int32 or int64), element i along its dims. */
static inline int64_t ld_int(const tpurt_tensor_t* t, int64_t i) {
  if (t->dtype == TPURT_DTYPE_INT32) return ((const int32_t*)t->data)[i * t->strides[0]];
  return ((const int64_t*)t->data)[i * t->strides[0]];
}
static inline int64_t ld_int2(const tpurt_tensor_t* t, int64_t i, int64_t j) {
  int64_t off = i * t->strides[0] + j * t->strides[1];
  if (t->dtype == TPURT_DTYPE_INT32) return ((const int32_t*)t->data)[off];
  return ((const int64_t*)t->data)[off];
}
static bool is_index(const tpurt_tensor_t* t, int ndim) {
  return t && t->ndim == ndim && (t->dtype == TPURT_DTYPE_INT32 || t->dtype == TPURT_DTYPE_INT64);
}

/* The key and value halves of a [NB, BS, H, 2D] cache as two [NB, BS, H, D] views. */
static bool split_kv(const tpurt_tensor_t* kv, tpurt_tensor_t* k, tpurt_tensor_t* v) {
  if (!kv || kv->ndim != 4 || kv->sizes[3] % 2 != 0 || (kv->sizes[3] > 1 && kv->strides[3] != 1)) return false;
  *k = *kv;
  k->sizes[3] = kv->sizes[3] / 2;
  *v = *k;
  v->data = (char*)kv->data + (size_t)k->sizes[3] * tpurt_dtype_size(kv->dtype);
  return true;
}

/* How a cache's elements are stored: its own dtype (float), or 8-bit floats in
 * a uint8 cache with per-tensor scales. */
typedef struct kv_fmt_t {
  tpurt_fp8_format_t fp8; /* TPURT_FP8_NONE: the cache's dtype */
  float k_scale, v_scale;
  float lut[256];         /* fp8: the format's values, unscaled */
} kv_fmt_t;

/* Reads vLLM's kv_cache_dtype name and the scales; checks the cache's dtype against them. */
static tpurt_status_t kv_fmt_parse(const char* op, const char* name, double k_scale, double v_scale,
                                   const tpurt_tensor_t* kv, kv_fmt_t* out) {
  out->fp8 = TPURT_FP8_NONE, out->k_scale = 1.0f, out->v_scale = 1.0f;
  if (!name || !strcmp(name, "auto") || !strcmp(name, "float32") || !strcmp(name, "bfloat16") ||
      !strcmp(name, "float16") || !strcmp(name, "half") || !strcmp(name, "float")) {
    if (kv && !tpurt_dtype_is_floating(kv->dtype))
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: a %s cache needs kv_cache_dtype 'fp8', 'fp8_e4m3' or 'fp8_e5m2'",
                          op, tpurt_dtype_name(kv->dtype));
    return TPURT_STATUS_OK;
  }
  if (!strcmp(name, "fp8") || !strcmp(name, "fp8_e4m3")) out->fp8 = TPURT_FP8_E4M3;
  else if (!strcmp(name, "fp8_e5m2")) out->fp8 = TPURT_FP8_E5M2;
  else
    return TPURT_STATUS(INVALID_ARGUMENT,
                        "%s: kv_cache_dtype '%s' is not supported (auto, fp8, fp8_e4m3, fp8_e5m2)", op, name);
  if (kv && kv->dtype != TPURT_DTYPE_UINT8)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: kv_cache_dtype '%s' needs a uint8 cache, not %s", op, name,
                        tpurt_dtype_name(kv->dtype));
  if (!(k_scale > 0 && v_scale > 0 && isfinite(k_scale) && isfinite(v_scale)))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: k_scale %g and v_scale %g must be positive and finite", op,
                        k_scale, v_scale);
  out->k_scale = (float)k_scale, out->v_scale = (float)v_scale;
  tpurt_fp8_table(out->fp8, out->lut);
  return TPURT_STATUS_OK;
}

/* n fp8 codes at src (element stride st) widened, unscaled: the table's values. With F16C, 8 at a
 * time through binary16, which holds both formats exactly: e5m2 is a binary16's high byte; e4m3's
 * exponent and mantissa bits set below binary16's (bias 15, not 7) read 2^-8 of the value, subnormals
 * included, and 0x7f/0xff are its NaNs. (A table gather per 8 codes cost more than the float32 cache's
 * four times the bytes.) */
static void fp8_row(const kv_fmt_t* f, const uint8_t* src, int64_t st, int64_t n, float* dst, bool generic) {
  int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if (!generic && st == 1) {
    if (f->fp8 == TPURT_FP8_E5M2) {
      for (; i + 16 <= n; i += 16) {
        __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(src + i)));
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_slli_epi16(c, 8)));
      }
    } else {
      const __m256i m7f = _mm256_set1_epi16(0x7f), m80 = _mm256_set1_epi16(0x80);
      for (; i + 16 <= n; i += 16) {
        __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(src + i)));
        __m256i mag = _mm256_and_si256(c, m7f), sign = _mm256_slli_epi16(_mm256_and_si256(c, m80), 8);
        __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_or_si256(sign, _mm256_slli_epi16(mag, 7))),
                                 _mm512_set1_ps(256.0f));
        __mmask16 nan = _mm256_cmpeq_epi16_mask(mag, m7f);
        if (nan) {
          __m512i sign32 = _mm512_slli_epi32(_mm512_cvtepu16_epi32(sign), 16);
          v = _mm512_mask_blend_ps(nan, v, _mm512_castsi512_ps(_mm512_or_si512(sign32, _mm512_set1_epi32(0x7fc00000))));
        }
        _mm512_storeu_ps(dst + i, v);
      }
    }
  }
#endif
#if defined(__AVX2__) && defined(__F16C__)
  if (!generic && st == 1) {
    if (f->fp8 == TPURT_FP8_E5M2) {
      for (; i + 8 <= n; i += 8) {
        __m128i c = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i*)(src + i)));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_slli_epi16(c, 8)));
      }
    } else {
      const __m128i m7f = _mm_set1_epi16(0x7f), m80 = _mm_set1_epi16(0x80);
      for (; i + 8 <= n; i += 8) {
        __m128i c = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i*)(src + i)));
        __m128i mag = _mm_and_si128(c, m7f), sign = _mm_slli_epi16(_mm_and_si128(c, m80), 8);
        __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(_mm_or_si128(sign, _mm_slli_epi16(mag, 7))), _mm256_set1_ps(256.0f));
        __m256i sign32 = _mm256_slli_epi32(_mm256_cvtepu16_epi32(sign), 16);
        __m256 nan = _mm256_castsi256_ps(_mm256_or_si256(sign32, _mm256_set1_epi32(0x7fc00000)));
        __m256 is_nan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, m7f)));
        _mm256_storeu_ps(dst + i, _mm256_blendv_ps(v, nan, is_nan));
      }
    }
  }
#endif
  for (; i < n; ++i) dst[i] = f->lut[src[i * st]];
}

/* A cache row (one block row, one kv head, D elements along the last dim) as floats: the cache's
 * values, or fp8 codes widened but not scaled. */
static const float* kv_row(const kv_fmt_t* f, const tpurt_tensor_t* t, const char* src, int64_t n, float* dst,
                           bool generic) {
  if (f->fp8) {
    fp8_row(f, (const uint8_t*)src, t->strides[3], n, dst, generic);
    return dst;
  }
  return row_f32(t->dtype, src, t->strides[3], n, dst);
}
/* One cache element, scaled: what the reference kernels read. */
static double kv_load(const kv_fmt_t* f, const tpurt_tensor_t* t, const char* p, bool is_value) {
  if (f->fp8) return (double)f->lut[*(const uint8_t*)p] * (double)(is_value ? f->v_scale : f->k_scale);
  return tpurt_dtype_load_f64(t->dtype, p);
}

/* ================================ paged attention ================================ */

/* args: out (written), query [T, Hq, D], kv_cache [NB, BS, Hkv, 2D],
 * query_start_loc [S + 1], seq_lens [S], block_table [S, MB], scale,
 * sliding_window (<= 0: none), softcap (<= 0: none), alibi_slopes [Hq] or
 * None, kv_cache_dtype ("auto", "fp8", "fp8_e4m3", "fp8_e5m2"), k_scale,
 * v_scale. */
typedef struct pa_job_t {
  const tpurt_tensor_t *out, *q, *kc, *vc, *qsl, *sl, *bt, *alibi;
  tpurt_tensor_t kv_k, kv_v; /* kc, vc point here */
  kv_fmt_t fmt;
  int64_t T, Hq, Hkv, D, NB, BS, S, MB, G;
  double scale, softcap;
  int64_t window;
  /* work items: (sequence, kv head, first query token of the tile) */
  const int64_t* items;  /* 3 per item */
  float* scratch;        /* per thread: per_thread floats */
  int64_t per_thread;
  bool generic;
  _Atomic int bad_block; /* set when a block id is out of range */
} pa_job_t;

/* Validates the call; fills every field of j but items/scratch. */
static tpurt_status_t pa_prepare(const tpurt_op_call_t* c, pa_job_t* j) {
  memset(j, 0, sizeof *j);
  j->out = tpurt_arg_tensor(c, 0);
  j->q = tpurt_arg_tensor(c, 1);
  bool kv_ok = split_kv(tpurt_arg_tensor(c, 2), &j->kv_k, &j->kv_v);
  j->kc = &j->kv_k, j->vc = &j->kv_v;
  j->qsl = tpurt_arg_tensor(c, 3);
  j->sl = tpurt_arg_tensor(c, 4);
  j->bt = tpurt_arg_tensor(c, 5);
  j->scale = tpurt_arg_double(c, 6, 1.0);
  j->window = tpurt_arg_int(c, 7, 0);
  j->softcap = tpurt_arg_double(c, 8, 0.0);
  j->alibi = tpurt_arg_tensor(c, 9);
  tpurt_status_t st = kv_fmt_parse("paged_attention", tpurt_arg_string(c, 10, "auto"), tpurt_arg_double(c, 11, 1.0),
                                   tpurt_arg_double(c, 12, 1.0), kv_ok ? &j->kv_k : NULL, &j->fmt);
  if (st) return st;
  if (!j->out || !j->q || !kv_ok || j->q->ndim != 3 || j->out->ndim != 3)
    return TPURT_STATUS(INVALID_ARGUMENT,
                        "paged_attention: expects out and query [tokens, heads, head_size] and a cache "
                        "[blocks, block_size, kv_heads, 2 * head_size] with a contiguous last dim");
  if (!is_index(j->qsl, 1) || !is_index(j->sl, 1) || !is_index(j->bt, 2))
    return TPURT_STATUS(INVALID_ARGUMENT,
                        "paged_attention: query_start_loc, seq_lens (1-d) and block_table (2-d) must be int32 or int64");
  j->T = j->q->sizes[0], j->Hq = j->q->sizes[1], j->D = j->q->sizes[2];
  j->NB = j->kc->sizes[0], j->BS = j->kc->sizes[1], j->Hkv = j->kc->sizes[2];
  j->S = j->sl->sizes[0], j->MB = j->bt->sizes[1];
  if (!tpurt_tensor_same_shape(j->q, j->out) || j->kc->sizes[3] != j->D)
    return TPURT_STATUS(INVALID_ARGUMENT, "paged_attention: out, query and the cache disagree in shape");
  if (j->Hkv <= 0 || j->Hq % j->Hkv != 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "paged_attention: %lld query heads are not a multiple of %lld kv heads",
                        (long long)j->Hq, (long long)j->Hkv);
  if (j->qsl->sizes[0] != j->S + 1 || j->bt->sizes[0] < j->S)
    return TPURT_STATUS(INVALID_ARGUMENT,
                        "paged_attention: query_start_loc has %lld entries and block_table %lld rows for %lld sequences",
                        (long long)j->qsl->sizes[0], (long long)j->bt->sizes[0], (long long)j->S);
  j->G = j->Hq / j->Hkv;
  if (j->alibi && (j->alibi->ndim != 1 || j->alibi->sizes[0] != j->Hq || !tpurt_dtype_is_floating(j->alibi->dtype)))
    return TPURT_STATUS(INVALID_ARGUMENT, "paged_attention: alibi_slopes must be a float tensor [%lld] (one slope "
                        "per query head)", (long long)j->Hq);
  int64_t prev = ld_int(j->qsl, 0);
  if (prev != 0) return TPURT_STATUS(INVALID_ARGUMENT, "paged_attention: query_start_loc[0] is %lld, not 0", (long long)prev);
  for (int64_t s = 0; s < j->S; ++s) {
    int64_t next = ld_int(j->qsl, s + 1), len = ld_int(j->sl, s);
    if (next < prev || next > j->T)
      return TPURT_STATUS(OUT_OF_RANGE, "paged_attention: query_start_loc[%lld] = %lld is out of order or past %lld tokens",
                          (long long)(s + 1), (long long)next, (long long)j->T);
    if (len < next - prev || len > j->MB * j->BS)
      return TPURT_STATUS(OUT_OF_RANGE,
                          "paged_attention: sequence %lld has %lld tokens for %lld queries and room for %lld",
                          (long long)s, (long long)len, (long long)(next - prev), (long long)(j->MB * j->BS));
    prev = next;
  }
  return TPURT_STATUS_OK;
}

/* Asks for the cache rows of kv head h in block `phys` (keys and values) ahead of use: blocks lie
 * where the block table puts them, so the hardware prefetcher cannot follow from one to the next. */
static inline void prefetch_block(const pa_job_t* j, int64_t phys, int64_t h) {
  if (phys < 0 || phys >= j->NB) return;
  size_t es = tpurt_dtype_size(j->kc->dtype);
  for (int64_t r = 0; r < j->BS; ++r) {
    const char* k = elem(j->kc, phys, r, h, 0);
    const char* v = elem(j->vc, phys, r, h, 0);
    for (int64_t off = 0; off < j->D * (int64_t)es; off += 64) {
      __builtin_prefetch(k + off);
      __builtin_prefetch(v + off);
    }
  }
}

/* One work item: tokens [t0, t1) of sequence s (positions ctx - qlen + local
 * index), every query head of kv head h. Rows r = token * G + g. */
static void pa_item(pa_job_t* j, int64_t s, int64_t h, int64_t tile, int tid) {
  const int64_t D = j->D, G = j->G, BS = j->BS;
  int64_t q0 = ld_int(j->qsl, s), qlen = ld_int(j->qsl, s + 1) - q0, ctx = ld_int(j->sl, s);
  int64_t lt0 = tile, lt1 = imin64(tile + QTILE, qlen), R = (lt1 - lt0) * G;
  float* w = j->scratch + (int64_t)tid * j->per_thread;
  float *qf = w, *acc = qf + QTILE * G * D, *mx = acc + QTILE * G * D, *sum = mx + QTILE * G,
        *kb = sum + QTILE * G, *slope = kb + BS * D, *sc = slope + G;
  /* BS row pointers after the scores, at pointer alignment */
  const float** rows = (const float**)(((uintptr_t)(sc + QTILE * G * BS) + 7) & ~(uintptr_t)7);
  float (*dot)(const float*, const float*, int64_t) = j->generic ? dot_generic : dot_vec;
  void (*axpy)(float*, float, const float*, int64_t) = j->generic ? axpy_generic : axpy_vec;
  /* the block-at-a-time vector loops: AVX2 builds, head sizes a multiple of 8 */
  bool vec = false;
#if defined(__AVX2__) && defined(__FMA__)
  vec = !j->generic && D % 8 == 0;
#endif

  /* an fp8 cache's k_scale goes into the query, its v_scale into the output */
  const float qscale = (float)j->scale * j->fmt.k_scale;
  for (int64_t g = 0; g < G; ++g)
    slope[g] = j->alibi ? (float)tpurt_dtype_load_f64(j->alibi->dtype, (const char*)j->alibi->data +
                                                       (h * G + g) * j->alibi->strides[0] *
                                                           (int64_t)tpurt_dtype_size(j->alibi->dtype))
                        : 0.0f;
  for (int64_t lt = lt0; lt < lt1; ++lt)
    for (int64_t g = 0; g < G; ++g) {
      int64_t r = (lt - lt0) * G + g;
      const float* src = row_f32(j->q->dtype, elem(j->q, q0 + lt, h * G + g, 0, 0), j->q->strides[2], D, qf + r * D);
      for (int64_t d = 0; d < D; ++d) qf[r * D + d] = src[d] * qscale;
      mx[r] = -INFINITY, sum[r] = 0;
      memset(acc + r * D, 0, (size_t)D * sizeof(float));
    }
  int64_t pos0 = ctx - qlen + lt0, pos1 = ctx - qlen + lt1 - 1; /* first and last query position */
  int64_t klo = j->window > 0 ? imax64(0, pos0 - j->window + 1) : 0, khi = pos1 + 1;
  for (int64_t b = klo / BS; b * BS < khi; ++b) {
    int64_t phys = ld_int2(j->bt, s, b);
    if (phys < 0 || phys >= j->NB) { atomic_store(&j->bad_block, 1); return; }
    int64_t k0 = imax64(klo, b * BS), k1 = imin64(khi, (b + 1) * BS), nk = k1 - k0;
    /* the block's key rows as floats (the cache's own rows for float32) */
    for (int64_t kp = k0; kp < k1; ++kp)
      rows[kp - k0] = kv_row(&j->fmt, j->kc, elem(j->kc, phys, kp - b * BS, h, 0), D, kb + (kp - k0) * D,
                             j->generic);
    if (b * BS + BS < khi) prefetch_block(j, ld_int2(j->bt, s, b + 1), h);
#if defined(__AVX2__) && defined(__FMA__)
    if (vec) block_scores_vec(qf, R, rows, nk, D, sc, BS);
#endif
    /* every key of the block visible to every row, nothing added to the scores (a decode step's
     * blocks but the last): the scores are final */
    bool plain = vec && k1 - 1 <= pos0 && (j->window <= 0 || k0 > pos1 - j->window) && j->softcap <= 0 && !j->alibi;
    for (int64_t r = 0; r < R && !plain; ++r) {
      int64_t pos = pos0 + r / G;
      for (int64_t kp = k0; kp < k1; ++kp) {
        bool visible = kp <= pos && (j->window <= 0 || kp > pos - j->window);
        float* x = sc + r * BS + (kp - k0);
        if (!visible) { *x = -INFINITY; continue; }
        if (!vec) *x = dot(qf + r * D, rows[kp - k0], D);
        if (j->softcap > 0) *x = (float)(j->softcap * tanh(*x / j->softcap));
        if (j->alibi) *x += slope[r % G] * (float)(kp - pos);
      }
    }
    /* online softmax, once per block and row: the running max moves to the block's, what was
     * accumulated is rescaled once, the block's scores become weights exp(s - max) */
    for (int64_t r = 0; r < R; ++r) {
      float* srow = sc + r * BS;
      float bm = -INFINITY;
      for (int64_t k = 0; k < nk; ++k) bm = srow[k] > bm ? srow[k] : bm;
      if (bm == -INFINITY) { /* nothing visible to this row in the block: no weight */
        memset(srow, 0, (size_t)nk * sizeof(float));
        continue;
      }
      if (bm > mx[r]) {
        float c = expf(mx[r] - bm); /* 0 on the first visible block */
        sum[r] *= c;
        for (int64_t d = 0; d < D; ++d) acc[r * D + d] *= c;
        mx[r] = bm;
      }
      sum[r] += exp_row(srow, nk, mx[r], j->generic);
    }
    /* acc += weight * V over the block's value rows (converted into the buffer the keys used) */
    for (int64_t kp = k0; kp < k1; ++kp)
      rows[kp - k0] = kv_row(&j->fmt, j->vc, elem(j->vc, phys, kp - b * BS, h, 0), D, kb + (kp - k0) * D,
                             j->generic);
#if defined(__AVX2__) && defined(__FMA__)
    if (vec) {
      block_values_vec(acc, R, rows, nk, D, sc, BS);
      continue;
    }
#endif
    for (int64_t kp = k0; kp < k1; ++kp)
      for (int64_t r = 0; r < R; ++r) {
        float p = sc[r * BS + (kp - k0)];
        if (p != 0.0f) axpy(acc + r * D, p, rows[kp - k0], D);
      }
  }
  for (int64_t lt = lt0; lt < lt1; ++lt)
    for (int64_t g = 0; g < G; ++g) {
      int64_t r = (lt - lt0) * G + g;
      float inv = sum[r] > 0 ? j->fmt.v_scale / sum[r] : 0.0f;
      for (int64_t d = 0; d < D; ++d) acc[r * D + d] *= inv;
      row_store(j->out->dtype, elem(j->out, q0 + lt, h * G + g, 0, 0), j->out->strides[2], acc + r * D, D);
    }
}

static void pa_range(void* user, int64_t begin, int64_t end, int tid) {
  pa_job_t* j = user;
  for (int64_t i = begin; i < end; ++i) pa_item(j, j->items[3 * i], j->items[3 * i + 1], j->items[3 * i + 2], tid);
}

tpurt_status_t tpurt_serve_paged_attention(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  pa_job_t j;
  tpurt_status_t st = pa_prepare(call, &j);
  if (st) return st;
  j.generic = serve_generic();
  int64_t n = 0;
  for (int64_t s = 0; s < j.S; ++s) {
    int64_t qlen = ld_int(j.qsl, s + 1) - ld_int(j.qsl, s);
    n += j.Hkv * ((qlen + QTILE - 1) / QTILE);
  }
  if (n == 0) return TPURT_STATUS_OK;
  int nt = tpurt_kernel_num_threads(ctx);
  /* qf, acc; mx, sum; a block of converted rows; slopes; scores; BS row pointers (2 floats each,
   * after up to one float of alignment) */
  j.per_thread = 2 * QTILE * j.G * j.D + 2 * QTILE * j.G + j.BS * j.D + j.G + QTILE * j.G * j.BS + 2 * j.BS + 2;
  j.per_thread = (j.per_thread + 15) & ~(int64_t)15; /* 64-byte aligned slices */
  int64_t* items = tpurt_kernel_scratch(ctx, (size_t)n * 3 * sizeof(int64_t));
  j.scratch = tpurt_kernel_scratch(ctx, (size_t)(nt > 0 ? nt : 1) * (size_t)j.per_thread * sizeof(float));
  if (!items || !j.scratch)
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "paged_attention: no scratch for %lld work items", (long long)n);
  int64_t k = 0;
  for (int64_t s = 0; s < j.S; ++s) {
    int64_t qlen = ld_int(j.qsl, s + 1) - ld_int(j.qsl, s);
    for (int64_t t = 0; t < qlen; t += QTILE)
      for (int64_t h = 0; h < j.Hkv; ++h) items[3 * k] = s, items[3 * k + 1] = h, items[3 * k + 2] = t, ++k;
  }
  j.items = items;
  atomic_init(&j.bad_block, 0);
  tpurt_parallel_for(ctx, n, 1, pa_range, &j);
  if (atomic_load(&j.bad_block))
    return TPURT_STATUS(OUT_OF_RANGE, "paged_attention: a block_table entry is outside [0, %lld)", (long long)j.NB);
  return TPURT_STATUS_OK;
}

/* The reference: per query row, every visible key in double, a two-pass
 * softmax over the whole context (plain, for the tests to compare with). */
tpurt_status_t tpurt_serve_paged_attention_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  pa_job_t j;
  tpurt_status_t st = pa_prepare(call, &j);
  if (st) return st;
  int64_t maxctx = j.MB * j.BS;
  double* p = tpurt_kernel_scratch(ctx, (size_t)(maxctx + j.D + 1) * sizeof(double));
  if (!p) return TPURT_STATUS(RESOURCE_EXHAUSTED, "paged_attention: no scratch");
  double* o = p + maxctx + 1;
  for (int64_t s = 0; s < j.S; ++s) {
    int64_t q0 = ld_int(j.qsl, s), qlen = ld_int(j.qsl, s + 1) - q0, ctxlen = ld_int(j.sl, s);
    for (int64_t t = 0; t < qlen; ++t)
      for (int64_t hq = 0; hq < j.Hq; ++hq) {
        int64_t h = hq / j.G, pos = ctxlen - qlen + t;
        double m = -INFINITY;
        for (int64_t kp = 0; kp <= pos; ++kp) {
          p[kp] = -INFINITY;
          if (j.window > 0 && kp <= pos - j.window) continue;
          int64_t phys = ld_int2(j.bt, s, kp / j.BS);
          if (phys < 0 || phys >= j.NB)
            return TPURT_STATUS(OUT_OF_RANGE, "paged_attention: a block_table entry is outside [0, %lld)", (long long)j.NB);
          double x = 0;
          for (int64_t d = 0; d < j.D; ++d)
            x += tpurt_dtype_load_f64(j.q->dtype, elem(j.q, q0 + t, hq, d, 0)) *
                 kv_load(&j.fmt, j.kc, elem(j.kc, phys, kp % j.BS, h, d), false);
          x *= j.scale;
          if (j.softcap > 0) x = j.softcap * tanh(x / j.softcap);
          if (j.alibi)
            x += tpurt_dtype_load_f64(j.alibi->dtype, (const char*)j.alibi->data +
                                                          hq * j.alibi->strides[0] * (int64_t)tpurt_dtype_size(j.alibi->dtype)) *
                 (double)(kp - pos);
          p[kp] = x;
          if (x > m) m = x;
        }
        double z = 0;
        for (int64_t d = 0; d < j.D; ++d) o[d] = 0;
        for (int64_t kp = 0; kp <= pos; ++kp) {
          if (p[kp] == -INFINITY) continue;
          double e = exp(p[kp] - m);
          z += e;
          int64_t phys = ld_int2(j.bt, s, kp / j.BS);
          for (int64_t d = 0; d < j.D; ++d) o[d] += e * kv_load(&j.fmt, j.vc, elem(j.vc, phys, kp % j.BS, h, d), true);
        }
        for (int64_t d = 0; d < j.D; ++d)
          tpurt_dtype_store_f64(j.out->dtype, elem(j.out, q0 + t, hq, d, 0), z > 0 ? o[d] / z : 0.0);
      }
  }
  return TPURT_STATUS_OK;
}

/* ================================ reshape_and_cache ================================ */

/* args: key, value [T, Hkv, D], kv_cache (written) [NB, BS, Hkv, 2D],
 * slot_mapping [T] (int32/int64; a negative slot is a padding token and is
 * skipped, as vLLM's CUDA kernel does), kv_cache_dtype, k_scale, v_scale (an
 * fp8 cache stores key / k_scale and value / v_scale). */
typedef struct rc_job_t {
  const tpurt_tensor_t *k, *v, *kc, *vc, *slots;
  tpurt_tensor_t kv_k, kv_v; /* kc, vc point here */
  kv_fmt_t fmt;
  int64_t T, H, D, NB, BS;
  _Atomic int bad_slot;
} rc_job_t;

static tpurt_status_t rc_prepare(const tpurt_op_call_t* c, rc_job_t* j) {
  memset(j, 0, sizeof *j);
  j->k = tpurt_arg_tensor(c, 0), j->v = tpurt_arg_tensor(c, 1);
  bool kv_ok = split_kv(tpurt_arg_tensor(c, 2), &j->kv_k, &j->kv_v);
  j->kc = &j->kv_k, j->vc = &j->kv_v;
  j->slots = tpurt_arg_tensor(c, 3);
  tpurt_status_t st = kv_fmt_parse("reshape_and_cache", tpurt_arg_string(c, 4, "auto"), tpurt_arg_double(c, 5, 1.0),
                                   tpurt_arg_double(c, 6, 1.0), kv_ok ? &j->kv_k : NULL, &j->fmt);
  if (st) return st;
  if (!j->k || !j->v || !kv_ok || j->k->ndim != 3 || !is_index(j->slots, 1))
    return TPURT_STATUS(INVALID_ARGUMENT,
                        "reshape_and_cache: expects key, value [tokens, kv_heads, head_size], a cache "
                        "[blocks, block_size, kv_heads, 2 * head_size] with a contiguous last dim and an "
                        "int32/int64 slot_mapping [tokens]");
  j->T = j->k->sizes[0], j->H = j->k->sizes[1], j->D = j->k->sizes[2];
  j->NB = j->kc->sizes[0], j->BS = j->kc->sizes[1];
  if (!tpurt_tensor_same_shape(j->k, j->v) || j->kc->sizes[2] != j->H ||
      j->kc->sizes[3] != j->D || j->slots->sizes[0] < j->T)
    return TPURT_STATUS(INVALID_ARGUMENT, "reshape_and_cache: key, value, caches and slot_mapping disagree in shape");
  return TPURT_STATUS_OK;
}

/* fp8 codes of src[i] / scale (the division vLLM's CUDA cache write does) */
static void fp8_store(tpurt_fp8_format_t fmt, uint8_t* dst, int64_t st, const float* src, float scale, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i * st] = tpurt_f32_to_fp8(fmt, src[i] / scale);
}

static void rc_row(const kv_fmt_t* fmt, float scale, const tpurt_tensor_t* src, const tpurt_tensor_t* dst, int64_t t,
                   int64_t blk, int64_t off, int64_t h, int64_t D, float* tmp) {
  char* d = elem(dst, blk, off, h, 0);
  const char* s = elem(src, t, h, 0, 0);
  if (fmt->fp8) {
    fp8_store(fmt->fp8, (uint8_t*)d, dst->strides[3], row_f32(src->dtype, s, src->strides[2], D, tmp), scale, D);
    return;
  }
  if (src->dtype == dst->dtype && src->strides[2] == 1 && dst->strides[3] == 1) {
    memcpy(d, s, (size_t)D * tpurt_dtype_size(src->dtype));
    return;
  }
  const float* f = row_f32(src->dtype, s, src->strides[2], D, tmp);
  row_store(dst->dtype, d, dst->strides[3], f, D);
}

typedef struct rc_range_t {
  rc_job_t* j;
  float* tmp; /* D floats per thread */
} rc_range_t;

static void rc_range(void* user, int64_t begin, int64_t end, int tid) {
  rc_range_t* r = user;
  rc_job_t* j = r->j;
  float* tmp = r->tmp + (int64_t)tid * j->D;
  for (int64_t t = begin; t < end; ++t) {
    int64_t slot = ld_int(j->slots, t);
    if (slot < 0) continue;
    int64_t blk = slot / j->BS, off = slot % j->BS;
    if (blk >= j->NB) { atomic_store(&j->bad_slot, 1); continue; }
    for (int64_t h = 0; h < j->H; ++h) {
      rc_row(&j->fmt, j->fmt.k_scale, j->k, j->kc, t, blk, off, h, j->D, tmp);
      rc_row(&j->fmt, j->fmt.v_scale, j->v, j->vc, t, blk, off, h, j->D, tmp);
    }
  }
}

tpurt_status_t tpurt_serve_reshape_and_cache(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  rc_job_t j;
  tpurt_status_t st = rc_prepare(call, &j);
  if (st) return st;
  int nt = tpurt_kernel_num_threads(ctx);
  rc_range_t r = {&j, tpurt_kernel_scratch(ctx, (size_t)(nt > 0 ? nt : 1) * (size_t)(j.D + 1) * sizeof(float))};
  if (!r.tmp) return TPURT_STATUS(RESOURCE_EXHAUSTED, "reshape_and_cache: no scratch");
  atomic_init(&j.bad_slot, 0);
  tpurt_parallel_for(ctx, j.T, 16, rc_range, &r);
  if (atomic_load(&j.bad_slot))
    return TPURT_STATUS(OUT_OF_RANGE, "reshape_and_cache: a slot is past the cache's %lld slots",
                        (long long)(j.NB * j.BS));
  return TPURT_STATUS_OK;
}

tpurt_status_t tpurt_serve_reshape_and_cache_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  rc_job_t j;
  tpurt_status_t st = rc_prepare(call, &j);
  if (st) return st;
  for (int64_t t = 0; t < j.T; ++t) {
    int64_t slot = ld_int(j.slots, t);
    if (slot < 0) continue;
    if (slot / j.BS >= j.NB)
      return TPURT_STATUS(OUT_OF_RANGE, "reshape_and_cache: a slot is past the cache's %lld slots",
                          (long long)(j.NB * j.BS));
    for (int64_t h = 0; h < j.H; ++h)
      for (int64_t d = 0; d < j.D; ++d) {
        char *kd = elem(j.kc, slot / j.BS, slot % j.BS, h, d), *vd = elem(j.vc, slot / j.BS, slot % j.BS, h, d);
        double kx = tpurt_dtype_load_f64(j.k->dtype, elem(j.k, t, h, d, 0));
        double vx = tpurt_dtype_load_f64(j.v->dtype, elem(j.v, t, h, d, 0));
        if (j.fmt.fp8) {
          *(uint8_t*)kd = tpurt_f32_to_fp8(j.fmt.fp8, (float)kx / j.fmt.k_scale);
          *(uint8_t*)vd = tpurt_f32_to_fp8(j.fmt.fp8, (float)vx / j.fmt.v_scale);
        } else {
          tpurt_dtype_store_f64(j.kc->dtype, kd, kx);
          tpurt_dtype_store_f64(j.vc->dtype, vd, vx);
        }
      }
  }
  return TPURT_STATUS_OK;
}

/* ================================ compute_slot_mapping ================================ */

/* args: slot_mapping (written) [max_tokens] int64, query_start_loc [S + 1],
 * positions [T] int64, block_table [S', MB] (S' >= S), block_size, num_tokens.
 * The cache slot of each scheduled token: block_table[s][pos / bs] * bs +
 * pos % bs for the tokens of sequence s; PAD (-1) for rows num_tokens.. of
 * slot_mapping (vLLM's padded batches). The same computation as vLLM's Triton
 * kernel ComputeSlotMappingKernel (without context parallelism). */
static tpurt_status_t slot_mapping_run(const tpurt_op_call_t* c) {
  const tpurt_tensor_t *out = tpurt_arg_tensor(c, 0), *qsl = tpurt_arg_tensor(c, 1), *pos = tpurt_arg_tensor(c, 2),
                       *bt = tpurt_arg_tensor(c, 3);
  int64_t bs = tpurt_arg_int(c, 4, 0), T = tpurt_arg_int(c, 5, 0);
  if (!is_index(out, 1) || out->dtype != TPURT_DTYPE_INT64 || !is_index(qsl, 1) || !is_index(pos, 1) ||
      !is_index(bt, 2) || bs <= 0)
    return TPURT_STATUS(INVALID_ARGUMENT,
                        "compute_slot_mapping: expects an int64 slot_mapping, int query_start_loc, positions and "
                        "a 2-d block_table, and block_size > 0");
  int64_t S = qsl->sizes[0] - 1, n = out->sizes[0];
  if (T > n || T > pos->sizes[0] || S > bt->sizes[0])
    return TPURT_STATUS(INVALID_ARGUMENT, "compute_slot_mapping: %lld tokens for a slot_mapping of %lld",
                        (long long)T, (long long)n);
  int64_t* o = (int64_t*)out->data;
  for (int64_t s = 0; s < S; ++s) {
    int64_t a = ld_int(qsl, s), b = ld_int(qsl, s + 1);
    if (a < 0 || b < a || b > T)
      return TPURT_STATUS(OUT_OF_RANGE, "compute_slot_mapping: query_start_loc[%lld..%lld] = %lld..%lld is outside "
                          "%lld tokens", (long long)s, (long long)(s + 1), (long long)a, (long long)b, (long long)T);
    for (int64_t t = a; t < b; ++t) {
      int64_t p = ld_int(pos, t);
      if (p < 0 || p / bs >= bt->sizes[1])
        return TPURT_STATUS(OUT_OF_RANGE, "compute_slot_mapping: position %lld is past the block table", (long long)p);
      o[t * out->strides[0]] = ld_int2(bt, s, p / bs) * bs + p % bs;
    }
  }
  for (int64_t t = T; t < n; ++t) o[t * out->strides[0]] = -1;
  return TPURT_STATUS_OK;
}

/* One pass over the tokens, a few integer operations each: the plain loop is
 * both the kernel and its reference. */
tpurt_status_t tpurt_serve_compute_slot_mapping(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return slot_mapping_run(call);
}
tpurt_status_t tpurt_serve_compute_slot_mapping_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return slot_mapping_run(call);
}
