/* tpurt_stream_copy (base/stream_copy.h): an unaligned head and tail by
 * memcpy, the aligned middle loaded unaligned and stored as whole lines. */
#include "base/stream_copy.h"

#include <stdint.h>
#include <string.h>

#if defined(__AVX__)
#include <immintrin.h>
#endif

void tpurt_stream_copy(void* dst, const void* src, size_t n) {
  tpurt_stream_copy_unfenced(dst, src, n);
  tpurt_stream_fence();
}

void tpurt_stream_fence(void) {
#if defined(__AVX__)
  _mm_sfence();
#endif
}

void tpurt_stream_copy_unfenced(void* dst, const void* src, size_t n) {
#if defined(__AVX__)
  uint8_t* d = dst;
  const uint8_t* s = src;
  size_t head = (64 - ((uintptr_t)d & 63)) & 63;
  if (head > n) head = n;
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  size_t lines = n / 64;
  for (size_t i = 0; i < lines; ++i, d += 64, s += 64) {
#if defined(__AVX512F__)
    _mm512_stream_si512((void*)d, _mm512_loadu_si512((const void*)s));
#else
    _mm256_stream_si256((__m256i*)d, _mm256_loadu_si256((const __m256i*)s));
    _mm256_stream_si256((__m256i*)(d + 32), _mm256_loadu_si256((const __m256i*)(s + 32)));
#endif
  }
  memcpy(d, s, n % 64);
#else
  memcpy(dst, src, n);
#endif
}
