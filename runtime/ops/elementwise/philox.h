/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"),
 * the counter-based generator behind every random kernel: a value depends only
 * on (key = seed, counter), so results never depend on how work is split. */
#ifndef TPURT_OPS_PHILOX_H_
#define TPURT_OPS_PHILOX_H_

#include <stdint.h>

typedef struct tpurt_philox_out_t {
  uint32_t v[4];
} tpurt_philox_out_t;

/* One block: 128-bit counter (ctr_lo, ctr_hi) under a 64-bit key. */
static inline tpurt_philox_out_t tpurt_philox4x32_10(uint64_t key, uint64_t ctr_lo, uint64_t ctr_hi) {
  uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32), c2 = (uint32_t)ctr_hi,
           c3 = (uint32_t)(ctr_hi >> 32);
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0;
    uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = (uint32_t)p1;
    c2 = n2;
    c3 = (uint32_t)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  tpurt_philox_out_t o = {{c0, c1, c2, c3}};
  return o;
}

/* [0, 1) with 24 / 53 random bits */
static inline float tpurt_philox_u32_to_unit_f(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }
static inline double tpurt_philox_u64_to_unit_d(uint64_t x) {
  return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

#endif /* TPURT_OPS_PHILOX_H_ */
