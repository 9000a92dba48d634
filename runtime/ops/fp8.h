/* 8-bit floats held in uint8 storage (the OCP formats e4m3fn and e5m2), for
 * kernels that keep data in them: the serving KV cache (vLLM's
 * kv_cache_dtype="fp8", "fp8_e4m3", "fp8_e5m2"). Widening is exact. Narrowing
 * rounds to nearest even and saturates to the largest finite value (as vLLM's
 * CUDA cache write does with __NV_SATFINITE: an out-of-range key must not
 * become NaN or inf in the cache); NaN stays NaN. PyTorch's float8 casts give
 * the same bits for inputs clamped to the finite range. Internal to runtime/ops. */
#ifndef TPURT_OPS_FP8_H_
#define TPURT_OPS_FP8_H_

#include <stdint.h>
#include <string.h>

#include "tpurt/dtype.h"

typedef uint8_t tpurt_fp8_t; /* storage type: raw bits */
_Static_assert(sizeof(tpurt_fp8_t) == 1, "fp8 is 1 byte");

typedef enum tpurt_fp8_format_e {
  TPURT_FP8_NONE = 0, /* not an fp8 tensor */
  TPURT_FP8_E4M3,     /* e4m3fn: bias 7, no inf, NaN 0x7f/0xff, max 448 */
  TPURT_FP8_E5M2,     /* e5m2: the high byte of an IEEE binary16, max 57344 */
} tpurt_fp8_format_t;

static inline float tpurt_fp8_e4m3_to_f32(tpurt_fp8_t b) {
  uint32_t sign = (uint32_t)(b & 0x80u) << 24, e = (b >> 3) & 0xfu, m = b & 7u, bits;
  if (e == 15 && m == 7) {
    bits = sign | 0x7fc00000u; /* NaN */
  } else if (e == 0) {
    float v = (float)m * 0x1p-9f; /* subnormal: m * 2^-6 / 8 */
    return sign ? -v : v;
  } else {
    bits = sign | ((e + 127 - 7) << 23) | (m << 20);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
static inline float tpurt_fp8_e5m2_to_f32(tpurt_fp8_t b) { return tpurt_f16_to_f32((tpurt_f16_t)((uint16_t)b << 8)); }

/* Round to nearest even with saturation (the technique of c10's Float8
 * converters). max_bits: the float bits of the largest finite value, whose
 * code is max_code; min_normal_bits: those of the smallest normal; below it,
 * adding the float with bits denorm_magic (2^(23 - fp8 mantissa bits -
 * (bias - 1)): 2^14 for e4m3, 2^7 for e5m2) lets the FPU round onto the fp8 subnormal grid; shift:
 * the fp8 mantissa's place in the float; bias_adj: (bias - 127) << 23. */
static inline tpurt_fp8_t tpurt_fp8_narrow(float f, uint32_t max_bits, uint8_t max_code, uint8_t nan_code,
                                           uint32_t min_normal_bits, uint32_t denorm_magic, int shift,
                                           uint32_t bias_adj) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  uint8_t sign = (uint8_t)((bits >> 24) & 0x80u);
  bits &= 0x7fffffffu;
  if (bits > 0x7f800000u) return sign | nan_code;
  if (bits >= max_bits) return sign | max_code; /* inf too */
  if (bits < min_normal_bits) {
    float a, m;
    memcpy(&a, &bits, 4);
    memcpy(&m, &denorm_magic, 4);
    a += m; /* the FPU rounds to the fp8 subnormal grid, nearest even */
    memcpy(&bits, &a, 4);
    return sign | (uint8_t)(bits - denorm_magic);
  }
  uint32_t odd = (bits >> shift) & 1u;
  bits += bias_adj + ((1u << (shift - 1)) - 1) + odd;
  uint32_t code = bits >> shift;
  return sign | (uint8_t)(code > max_code ? max_code : code);
}
static inline tpurt_fp8_t tpurt_f32_to_fp8_e4m3(float f) {
  /* 448 = 0x43e00000; min normal 2^-6 = 0x3c800000; magic 2^14 */
  return tpurt_fp8_narrow(f, 0x43e00000u, 0x7e, 0x7f, 0x3c800000u, 141u << 23, 20, (uint32_t)(7 - 127) << 23);
}
static inline tpurt_fp8_t tpurt_f32_to_fp8_e5m2(float f) {
  /* 57344 = 0x47600000; min normal 2^-14 = 0x38800000; magic 2^7 */
  return tpurt_fp8_narrow(f, 0x47600000u, 0x7b, 0x7f, 0x38800000u, 134u << 23, 21, (uint32_t)(15 - 127) << 23);
}

static inline float tpurt_fp8_to_f32(tpurt_fp8_format_t fmt, tpurt_fp8_t b) {
  return fmt == TPURT_FP8_E5M2 ? tpurt_fp8_e5m2_to_f32(b) : tpurt_fp8_e4m3_to_f32(b);
}
static inline tpurt_fp8_t tpurt_f32_to_fp8(tpurt_fp8_format_t fmt, float f) {
  return fmt == TPURT_FP8_E5M2 ? tpurt_f32_to_fp8_e5m2(f) : tpurt_f32_to_fp8_e4m3(f);
}
/* The 256 values of a format, for widening rows by table lookup. */
static inline void tpurt_fp8_table(tpurt_fp8_format_t fmt, float out[256]) {
  for (int i = 0; i < 256; ++i) out[i] = tpurt_fp8_to_f32(fmt, (tpurt_fp8_t)i);
}

#endif /* TPURT_OPS_FP8_H_ */
