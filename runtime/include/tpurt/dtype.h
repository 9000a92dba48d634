/* tpurt dtypes: one traits entry per dtype, type promotion, and the packed
 * 16-bit float conversions every kernel uses. */
#ifndef TPURT_DTYPE_H_
#define TPURT_DTYPE_H_

#include <string.h>

#include "tpurt/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpurt_dtype_e {
  TPURT_DTYPE_BOOL = 0,
  TPURT_DTYPE_UINT8,
  TPURT_DTYPE_INT8,
  TPURT_DTYPE_INT16,
  TPURT_DTYPE_INT32,
  TPURT_DTYPE_INT64,
  TPURT_DTYPE_FLOAT16,
  TPURT_DTYPE_BFLOAT16,
  TPURT_DTYPE_FLOAT32,
  TPURT_DTYPE_FLOAT64,
  /* Interleaved (real, imaginary) pairs, C's float _Complex / double _Complex
   * layout. Only kernels flagged TPURT_OP_COMPLEX see them (tpurt/kernel.h). */
  TPURT_DTYPE_COMPLEX64,
  TPURT_DTYPE_COMPLEX128,
  /* PyTorch's "barebones" unsigned dtypes: CPU copies, fills, compares (eq/ne), sums and does
   * bitwise ops on them and promotes them with nothing but floats. Kernels that take them say
   * so (TPURT_DTYPES_UINT_WIDE); elementwise kernels compute them in int64 (zero-extended on
   * load, truncated on store). */
  TPURT_DTYPE_UINT16,
  TPURT_DTYPE_UINT32,
  TPURT_DTYPE_UINT64,
  TPURT_DTYPE_COUNT,
  TPURT_DTYPE_INVALID = -1,
} tpurt_dtype_t;

/* A set of dtypes, bit (1 << dtype): what a kernel supports (tpurt/kernel.h). */
typedef uint32_t tpurt_dtype_mask_t;
#define TPURT_DTYPE_BIT(NAME) ((tpurt_dtype_mask_t)1u << TPURT_DTYPE_##NAME)
#define TPURT_DTYPES_FLOAT \
  (TPURT_DTYPE_BIT(FLOAT16) | TPURT_DTYPE_BIT(BFLOAT16) | TPURT_DTYPE_BIT(FLOAT32) | TPURT_DTYPE_BIT(FLOAT64))
#define TPURT_DTYPES_INT                                                                         \
  (TPURT_DTYPE_BIT(UINT8) | TPURT_DTYPE_BIT(INT8) | TPURT_DTYPE_BIT(INT16) | TPURT_DTYPE_BIT(INT32) | \
   TPURT_DTYPE_BIT(INT64))
#define TPURT_DTYPES_COMPLEX (TPURT_DTYPE_BIT(COMPLEX64) | TPURT_DTYPE_BIT(COMPLEX128))
/* not in TPURT_DTYPES_INT/REAL/ALL: only the kernels that name them take them */
#define TPURT_DTYPES_UINT_WIDE (TPURT_DTYPE_BIT(UINT16) | TPURT_DTYPE_BIT(UINT32) | TPURT_DTYPE_BIT(UINT64))
/* every real dtype: floating, integer and bool */
#define TPURT_DTYPES_REAL (TPURT_DTYPES_FLOAT | TPURT_DTYPES_INT | TPURT_DTYPE_BIT(BOOL))
#define TPURT_DTYPES_ALL (TPURT_DTYPES_REAL | TPURT_DTYPES_COMPLEX)

typedef uint16_t tpurt_bf16_t; /* storage type: raw bits */
typedef uint16_t tpurt_f16_t;  /* storage type: raw bits (IEEE binary16) */
#ifdef __cplusplus
static_assert(sizeof(tpurt_bf16_t) == 2, "bf16 is 2 bytes");
static_assert(sizeof(tpurt_f16_t) == 2, "f16 is 2 bytes");
#else
_Static_assert(sizeof(tpurt_bf16_t) == 2, "bf16 is 2 bytes");
_Static_assert(sizeof(tpurt_f16_t) == 2, "f16 is 2 bytes");
#endif

typedef struct tpurt_dtype_traits_t {
  const char* name;  /* "float32", matching torch's dtype names */
  uint8_t size;      /* bytes per element */
  bool is_floating;  /* float16/bfloat16/float32/float64 */
  bool is_integral;  /* integer types, bool excluded */
  bool is_signed;
  bool is_complex;   /* complex64/complex128 (neither floating nor integral, as in PyTorch) */
} tpurt_dtype_traits_t;

TPURT_API extern const tpurt_dtype_traits_t tpurt_dtype_traits[TPURT_DTYPE_COUNT];

static inline size_t tpurt_dtype_size(tpurt_dtype_t dtype) {
  return tpurt_dtype_traits[dtype].size;
}
static inline bool tpurt_dtype_is_floating(tpurt_dtype_t dtype) {
  return tpurt_dtype_traits[dtype].is_floating;
}
static inline bool tpurt_dtype_is_integral(tpurt_dtype_t dtype) {  /* bool excluded */
  return tpurt_dtype_traits[dtype].is_integral;
}
static inline bool tpurt_dtype_is_complex(tpurt_dtype_t dtype) {
  return dtype >= 0 && dtype < TPURT_DTYPE_COUNT && tpurt_dtype_traits[dtype].is_complex;
}
/* to_real: complex64 -> float32, complex128 -> float64, others unchanged.
 * to_complex: float64/complex128 -> complex128, every other dtype -> complex64. */
static inline tpurt_dtype_t tpurt_dtype_to_real(tpurt_dtype_t dtype) {
  return dtype == TPURT_DTYPE_COMPLEX64 ? TPURT_DTYPE_FLOAT32
         : dtype == TPURT_DTYPE_COMPLEX128 ? TPURT_DTYPE_FLOAT64 : dtype;
}
static inline tpurt_dtype_t tpurt_dtype_to_complex(tpurt_dtype_t dtype) {
  return dtype == TPURT_DTYPE_FLOAT64 ? TPURT_DTYPE_COMPLEX128
         : dtype == TPURT_DTYPE_COMPLEX128 ? TPURT_DTYPE_COMPLEX128 : TPURT_DTYPE_COMPLEX64;
}
static inline const char* tpurt_dtype_name(tpurt_dtype_t dtype) {
  return (dtype >= 0 && dtype < TPURT_DTYPE_COUNT) ? tpurt_dtype_traits[dtype].name : "invalid";
}

/* PyTorch's promote_types for two tensor dtypes (uint8+int8 -> int16,
 * float16+bfloat16 -> float32, int+float16 -> float16, ...); uint16/32/64
 * promote only with themselves and with floating and complex dtypes
 * (TPURT_DTYPE_INVALID otherwise, where PyTorch raises). */
TPURT_API tpurt_dtype_t tpurt_dtype_promote(tpurt_dtype_t a, tpurt_dtype_t b);

/* ---- 16-bit floats. Round-to-nearest-even on narrowing, as PyTorch does. ---- */
static inline float tpurt_bf16_to_f32(tpurt_bf16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
static inline tpurt_bf16_t tpurt_f32_to_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (tpurt_bf16_t)((bits >> 16) | 0x40); /* quiet NaN */
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (tpurt_bf16_t)(bits >> 16);
}
TPURT_API float tpurt_f16_to_f32_slow(tpurt_f16_t h);
TPURT_API tpurt_f16_t tpurt_f32_to_f16_slow(float f);
#if defined(__F16C__)
#include <immintrin.h>
static inline float tpurt_f16_to_f32(tpurt_f16_t h) { return _cvtsh_ss(h); }
static inline tpurt_f16_t tpurt_f32_to_f16(float f) {
  return (tpurt_f16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
#else
static inline float tpurt_f16_to_f32(tpurt_f16_t h) { return tpurt_f16_to_f32_slow(h); }
static inline tpurt_f16_t tpurt_f32_to_f16(float f) { return tpurt_f32_to_f16_slow(f); }
#endif

/* Generic scalar load/store through double / int64 (slow paths, tests,
 * scalars). Storing a double into an integer type truncates toward zero as a C
 * cast does; into bool stores (v != 0). A complex element loads as its real
 * part and stores (v, 0). */
TPURT_API double tpurt_dtype_load_f64(tpurt_dtype_t dtype, const void* p);
TPURT_API int64_t tpurt_dtype_load_i64(tpurt_dtype_t dtype, const void* p);
TPURT_API void tpurt_dtype_store_f64(tpurt_dtype_t dtype, void* p, double v);
TPURT_API void tpurt_dtype_store_i64(tpurt_dtype_t dtype, void* p, int64_t v);

/* Bulk conversion of n contiguous elements (the cast-copy inner loop). */
TPURT_API void tpurt_dtype_convert(tpurt_dtype_t dst_dtype, void* dst, tpurt_dtype_t src_dtype,
                                   const void* src, int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* TPURT_DTYPE_H_ */
