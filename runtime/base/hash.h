/* Internal: FNV-1a, the runtime's one non-cryptographic hash (op names, cache
 * keys, content checks of cached kernels). */
#ifndef TPURT_BASE_HASH_H_
#define TPURT_BASE_HASH_H_

#include <stddef.h>
#include <stdint.h>

#define TPURT_FNV_SEED 1469598103934665603ull

/* FNV-1a over n bytes, continuing from h (TPURT_FNV_SEED to start). */
static inline uint64_t tpurt_fnv1a(const void* p, size_t n, uint64_t h) {
  const uint8_t* s = (const uint8_t*)p;
  for (size_t i = 0; i < n; ++i) h = (h ^ s[i]) * 1099511628211ull;
  return h;
}

/* ... over a NUL-terminated string. */
static inline uint64_t tpurt_fnv1a_str(const char* s, uint64_t h) {
  for (; *s; ++s) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

#endif /* TPURT_BASE_HASH_H_ */
