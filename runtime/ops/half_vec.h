/* Bulk bf16/f16 <-> float32 conversion of contiguous runs, for the kernels
 * that compute 16-bit tensors in float32 (GEMM packing and epilogues, SDPA,
 * row reductions). Results are bit-identical to the scalar converters in
 * tpurt/dtype.h (round-to-nearest-even, quiet NaN); AVX2/F16C where built for. */
#ifndef TPURT_OPS_HALF_VEC_H_
#define TPURT_OPS_HALF_VEC_H_

#include <stdint.h>

#include "tpurt/dtype.h"

#if defined(__AVX2__)
#include <immintrin.h>
/* 8 bf16 -> 8 floats: the bf16 bits are the float's high half. */
static inline __m256 tpurt_hv_bf16x8_load(const uint16_t* s) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)s)), 16));
}
/* 8 floats -> 8 bf16, as tpurt_f32_to_bf16 does lane by lane. */
static inline __m128i tpurt_hv_bf16x8_pack(__m256 v) {
  __m256i b = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, qnan, nan);
  /* the values fit 16 bits: pack the two 128-bit halves without saturation effects */
  __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
  return _mm_packus_epi32(lo, hi);
}
static inline void tpurt_hv_bf16x8_store(uint16_t* d, __m256 v) {
  _mm_storeu_si128((__m128i*)d, tpurt_hv_bf16x8_pack(v));
}
/* 8 floats rounded to bf16 in the high half of each 32-bit lane (the low half: anything), the NaN
 * lanes quieted only when there are any (a test, not two operations per vector). */
static inline __m256i tpurt_hv_bf16x8_round_hi(__m256 v) {
  const __m256i b = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  if (__builtin_expect(!_mm256_testz_ps(nan, nan), 0))
    r = _mm256_blendv_epi8(r, _mm256_or_si256(b, _mm256_set1_epi32(0x400000)), _mm256_castps_si256(nan));
  return r;
}
/* the same in the low half of each lane */
static inline __m256i tpurt_hv_bf16x8_round(__m256 v) { return _mm256_srli_epi32(tpurt_hv_bf16x8_round_hi(v), 16); }
/* 16 floats -> 16 bf16 (the bits of tpurt_hv_bf16x8_pack), one 256-bit store instead of two packs
 * and 128-bit stores (with the NaN test above: bf16 add_ of 2^22 elements in an AVX2 build 382-386
 * -> 313-322 us). tpurt_hv_bf16x8_pack keeps its blend: built on the NaN test it measured slower
 * on the cast engine's chunks (bf16 a + 1.5, AVX2 build, 271-273 -> 287-288 us). */
static inline void tpurt_hv_bf16x16_store_avx2(uint16_t* d, __m256 v0, __m256 v1) {
  __m256i p = _mm256_packus_epi32(tpurt_hv_bf16x8_round(v0), tpurt_hv_bf16x8_round(v1));
  _mm256_storeu_si256((__m256i*)d, _mm256_permute4x64_epi64(p, 0xD8));
}
/* 16 bfloat16 as the float32 of their even and odd elements, and back (the 16-lane forms below,
 * tpurt_hv_bf16x32_even / _odd / _pack_eo, on 8 lanes): for elementwise loops, no reordering */
static inline __m256 tpurt_hv_bf16x16_even_avx2(__m256i w) { return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)); }
static inline __m256 tpurt_hv_bf16x16_odd_avx2(__m256i w) {
  return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)));
}
static inline __m256i tpurt_hv_bf16x16_pack_eo_avx2(__m256 even, __m256 odd) {
  return _mm256_blend_epi16(tpurt_hv_bf16x8_round(even), tpurt_hv_bf16x8_round_hi(odd), 0xAA);
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <float.h>
/* 16 lanes at once where the build has AVX-512. */
static inline __m512 tpurt_hv_bf16x16_load(const uint16_t* s) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)s)), 16));
}
/* The lanes of v holding denormal numbers (vfpclassps category 0x20 where AVX-512 DQ has it). */
static inline __mmask16 tpurt_hv_denormal16(__m512 v) {
#if defined(__AVX512DQ__)
  return _mm512_fpclass_ps_mask(v, 0x20);
#else
  return _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(FLT_MIN), _CMP_LT_OQ) &
         _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NEQ_OQ);
#endif
}
/* v's bits + 0x7fff + the lowest bit kept: v rounded to nearest even bfloat16 in the high half of each
 * 32-bit lane, except at NaNs whose low 16 bits are not all zero (the add can carry into the exponent
 * there); a caller whose NaNs all have zero low halves (sums of widened bf16) may use it alone. */
static inline __m512i tpurt_hv_bf16x16_round_hi_nonan(__m512 v) {
  const __m512i b = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
}
/* v rounded to bfloat16 in integer code (to nearest even, NaNs quieted), each result in the high half
 * of its 32-bit lane (the low half: anything); tpurt_hv_bf16x16_round: in the low half */
static inline __m512i tpurt_hv_bf16x16_round_hi(__m512 v) {
  return _mm512_mask_or_epi32(tpurt_hv_bf16x16_round_hi_nonan(v), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                              _mm512_castps_si512(v), _mm512_set1_epi32(0x400000));
}
static inline __m512i tpurt_hv_bf16x16_round(__m512 v) { return _mm512_srli_epi32(tpurt_hv_bf16x16_round_hi(v), 16); }
static inline __m256i tpurt_hv_bf16x16_pack(__m512 v) {
#if defined(__AVX512BF16__)
  /* vcvtneps2bf16 rounds to nearest even and quiets NaNs as below, but reads denormal inputs as
   * zero: a vector holding one takes the integer rounding instead, so results stay bit-identical. */
  if (!tpurt_hv_denormal16(v)) return (__m256i)_mm512_cvtneps_pbh(v);
#endif
  return _mm512_cvtepi32_epi16(tpurt_hv_bf16x16_round(v));
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__)
/* 32 bfloat16 as float32 in two vectors without reordering: the even elements (lanes 0, 2, ...) and
 * the odd ones, one shift or mask each (two vpmovzxwd and two shifts keep the order); and the
 * reverse, the even and odd results rounded and interleaved again (tpurt_hv_bf16x16_round's bits).
 * For elementwise loops, where lanes are independent: on AVX-512 without BF16, a bf16
 * sigmoid_backward took 13.9 -> 11.2 cycles per 32 elements (Ice Lake, in L1). */
static inline __m512 tpurt_hv_bf16x32_even(__m512i w) { return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)); }
static inline __m512 tpurt_hv_bf16x32_odd(__m512i w) {
  return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u)));
}
static inline __m512i tpurt_hv_bf16x32_pack_eo(__m512 even, __m512 odd) {
  /* low halves from even's rounding, high halves from odd's: a | (b & c) */
  return _mm512_ternarylogic_epi32(tpurt_hv_bf16x16_round(even), tpurt_hv_bf16x16_round_hi(odd),
                                   _mm512_set1_epi32((int)0xffff0000u), 0xf8);
}
/* 32 words in order from the low halves of lo's and hi's 32-bit lanes (each at most 0xffff): one
 * vpackusdw (each 128-bit lane: 4 words of lo, 4 of hi) and one qword permute back into order, where
 * two vpmovdw and an insert took 8.0 cycles per 32 lanes against 6.7 (Ice Lake) */
static inline __m512i tpurt_hv_u32x32_pack16(__m512i lo, __m512i hi) {
  return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), _mm512_packus_epi32(lo, hi));
}
/* tpurt_hv_bf16x16_pack of lo and hi (lanes 0-15, then 16-31), in one vcvtne2ps2bf16 where the
 * CPU has it. */
static inline __m512i tpurt_hv_bf16x32_pack(__m512 lo, __m512 hi) {
#if defined(__AVX512BF16__)
  if (!(tpurt_hv_denormal16(lo) | tpurt_hv_denormal16(hi))) return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
#endif
  return tpurt_hv_u32x32_pack16(tpurt_hv_bf16x16_round(lo), tpurt_hv_bf16x16_round(hi));
}
#endif

static inline void tpurt_hv_bf16_to_f32(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, tpurt_hv_bf16x16_load(s + i));
#endif
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, tpurt_hv_bf16x8_load(s + i));
#endif
  for (; i < n; ++i) d[i] = tpurt_bf16_to_f32(s[i]);
}
static inline void tpurt_hv_f32_to_bf16(const float* s, uint16_t* d, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  for (; i + 32 <= n; i += 32)
    _mm512_storeu_si512(d + i, tpurt_hv_bf16x32_pack(_mm512_loadu_ps(s + i), _mm512_loadu_ps(s + i + 16)));
  for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i*)(d + i), tpurt_hv_bf16x16_pack(_mm512_loadu_ps(s + i)));
#endif
#if defined(__AVX2__)
  for (; i + 16 <= n; i += 16) tpurt_hv_bf16x16_store_avx2(d + i, _mm256_loadu_ps(s + i), _mm256_loadu_ps(s + i + 8));
  for (; i + 8 <= n; i += 8) tpurt_hv_bf16x8_store(d + i, _mm256_loadu_ps(s + i));
#endif
  for (; i < n; ++i) d[i] = tpurt_f32_to_bf16(s[i]);
}
static inline void tpurt_hv_f16_to_f32(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__F16C__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(s + i))));
#endif
  for (; i < n; ++i) d[i] = tpurt_f16_to_f32(s[i]);
}
static inline void tpurt_hv_f32_to_f16(const float* s, uint16_t* d, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i*)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) d[i] = tpurt_f32_to_f16(s[i]);
}
/* dtype is BFLOAT16 or FLOAT16 (anything else: FLOAT16's path is not taken; callers check). */
static inline void tpurt_hv_to_f32(tpurt_dtype_t dt, const void* s, float* d, int64_t n) {
  if (dt == TPURT_DTYPE_BFLOAT16) tpurt_hv_bf16_to_f32((const uint16_t*)s, d, n);
  else tpurt_hv_f16_to_f32((const uint16_t*)s, d, n);
}
static inline void tpurt_hv_from_f32(tpurt_dtype_t dt, const float* s, void* d, int64_t n) {
  if (dt == TPURT_DTYPE_BFLOAT16) tpurt_hv_f32_to_bf16(s, (uint16_t*)d, n);
  else tpurt_hv_f32_to_f16(s, (uint16_t*)d, n);
}

#if defined(__x86_64__) && defined(__GNUC__) && (__GNUC__ >= 11 || defined(__clang__))
#include <immintrin.h>
/* Two rows of 32 16-bit values as 32 (even, odd) pairs, out[2 j] = e[j], out[2 j + 1] = o[j]: the
 * pair layout of AMX's B operand (bf16 pairs along the depth), two vpermt2w. Built with its own
 * target so the AMX paths can call it whatever -march says; only those (AMX implies AVX-512 BW)
 * do. */
__attribute__((target("avx512f,avx512bw"))) static inline void tpurt_hv_u16_pairs32(const uint16_t* e,
                                                                                   const uint16_t* o,
                                                                                   uint16_t* out) {
  static const uint16_t lo_idx[32] __attribute__((aligned(64))) = {
      0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39, 8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  static const uint16_t hi_idx[32] __attribute__((aligned(64))) = {
      16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
      24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i ve = _mm512_loadu_si512(e), vo = _mm512_loadu_si512(o);
  _mm512_storeu_si512(out, _mm512_permutex2var_epi16(ve, _mm512_load_si512(lo_idx), vo));
  _mm512_storeu_si512(out + 32, _mm512_permutex2var_epi16(ve, _mm512_load_si512(hi_idx), vo));
}
#endif

#endif /* TPURT_OPS_HALF_VEC_H_ */
