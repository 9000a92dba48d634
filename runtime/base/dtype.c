/* dtype traits, promotion and scalar conversions. */
#include <math.h>

#include "tpurt/dtype.h"

const tpurt_dtype_traits_t tpurt_dtype_traits[TPURT_DTYPE_COUNT] = {
    [TPURT_DTYPE_BOOL] = {.name = "bool", .size = 1, .is_floating = false, .is_integral = false, .is_signed = false},
    [TPURT_DTYPE_UINT8] = {.name = "uint8", .size = 1, .is_integral = true, .is_signed = false},
    [TPURT_DTYPE_INT8] = {.name = "int8", .size = 1, .is_integral = true, .is_signed = true},
    [TPURT_DTYPE_INT16] = {.name = "int16", .size = 2, .is_integral = true, .is_signed = true},
    [TPURT_DTYPE_INT32] = {.name = "int32", .size = 4, .is_integral = true, .is_signed = true},
    [TPURT_DTYPE_INT64] = {.name = "int64", .size = 8, .is_integral = true, .is_signed = true},
    [TPURT_DTYPE_FLOAT16] = {.name = "float16", .size = 2, .is_floating = true, .is_signed = true},
    [TPURT_DTYPE_BFLOAT16] = {.name = "bfloat16", .size = 2, .is_floating = true, .is_signed = true},
    [TPURT_DTYPE_FLOAT32] = {.name = "float32", .size = 4, .is_floating = true, .is_signed = true},
    [TPURT_DTYPE_FLOAT64] = {.name = "float64", .size = 8, .is_floating = true, .is_signed = true},
    [TPURT_DTYPE_COMPLEX64] = {.name = "complex64", .size = 8, .is_signed = true, .is_complex = true},
    [TPURT_DTYPE_COMPLEX128] = {.name = "complex128", .size = 16, .is_signed = true, .is_complex = true},
    [TPURT_DTYPE_UINT16] = {.name = "uint16", .size = 2, .is_integral = true, .is_signed = false},
    [TPURT_DTYPE_UINT32] = {.name = "uint32", .size = 4, .is_integral = true, .is_signed = false},
    [TPURT_DTYPE_UINT64] = {.name = "uint64", .size = 8, .is_integral = true, .is_signed = false},
};

static bool dtype_is_uint_wide(tpurt_dtype_t d) {
  return d == TPURT_DTYPE_UINT16 || d == TPURT_DTYPE_UINT32 || d == TPURT_DTYPE_UINT64;
}

tpurt_dtype_t tpurt_dtype_promote(tpurt_dtype_t a, tpurt_dtype_t b) {
  /* PyTorch's promotion lattice restricted to our dtypes. */
  enum { b1 = TPURT_DTYPE_BOOL, u1 = TPURT_DTYPE_UINT8, i1 = TPURT_DTYPE_INT8, i2 = TPURT_DTYPE_INT16,
         i4 = TPURT_DTYPE_INT32, i8 = TPURT_DTYPE_INT64, f2 = TPURT_DTYPE_FLOAT16, bf = TPURT_DTYPE_BFLOAT16,
         f4 = TPURT_DTYPE_FLOAT32, f8 = TPURT_DTYPE_FLOAT64, c8 = TPURT_DTYPE_COMPLEX64,
         c16 = TPURT_DTYPE_COMPLEX128 };
  static const signed char kTable[TPURT_DTYPE_COMPLEX128 + 1][TPURT_DTYPE_COMPLEX128 + 1] = {
      /*        b1  u1  i1  i2  i4  i8  f2  bf  f4  f8   c8   c16 */
      /* b1 */ {b1, u1, i1, i2, i4, i8, f2, bf, f4, f8,  c8,  c16},
      /* u1 */ {u1, u1, i2, i2, i4, i8, f2, bf, f4, f8,  c8,  c16},
      /* i1 */ {i1, i2, i1, i2, i4, i8, f2, bf, f4, f8,  c8,  c16},
      /* i2 */ {i2, i2, i2, i2, i4, i8, f2, bf, f4, f8,  c8,  c16},
      /* i4 */ {i4, i4, i4, i4, i4, i8, f2, bf, f4, f8,  c8,  c16},
      /* i8 */ {i8, i8, i8, i8, i8, i8, f2, bf, f4, f8,  c8,  c16},
      /* f2 */ {f2, f2, f2, f2, f2, f2, f2, f4, f4, f8,  c8,  c16},
      /* bf */ {bf, bf, bf, bf, bf, bf, f4, bf, f4, f8,  c8,  c16},
      /* f4 */ {f4, f4, f4, f4, f4, f4, f4, f4, f4, f8,  c8,  c16},
      /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, f8, f8,  c16, c16},
      /* c8 */ {c8, c8, c8, c8, c8, c8, c8, c8, c8, c16, c8,  c16},
      /* c16*/ {c16, c16, c16, c16, c16, c16, c16, c16, c16, c16, c16, c16},
  };
  if (a < 0 || a >= TPURT_DTYPE_COUNT || b < 0 || b >= TPURT_DTYPE_COUNT) return TPURT_DTYPE_INVALID;
  if (dtype_is_uint_wide(a) || dtype_is_uint_wide(b)) {
    if (a == b) return a;
    tpurt_dtype_t other = dtype_is_uint_wide(a) ? b : a;
    return tpurt_dtype_is_floating(other) || tpurt_dtype_is_complex(other) ? other : TPURT_DTYPE_INVALID;
  }
  return (tpurt_dtype_t)kTable[a][b];
}

float tpurt_f16_to_f32_slow(tpurt_f16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal: renormalize */
      exp = 127 - 15 + 1;
      while (!(man & 0x400u)) { man <<= 1; --exp; }
      man &= 0x3ffu;
      bits = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

tpurt_f16_t tpurt_f32_to_f16_slow(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t absb = bits & 0x7fffffffu;
  if (absb > 0x7f800000u) return (tpurt_f16_t)(sign | 0x7e00u);  /* NaN */
  if (absb >= 0x477ff000u) return (tpurt_f16_t)(sign | 0x7c00u); /* overflow -> inf */
  if (absb < 0x38800000u) {                                     /* subnormal or zero */
    float a;
    memcpy(&a, &absb, 4);
    /* scale so the subnormal unit is 1, then round half to even */
    float scaled = a * 16777216.0f; /* 2^24 */
    uint32_t m = (uint32_t)nearbyintf(scaled);
    return (tpurt_f16_t)(sign | m);
  }
  uint32_t exp = (absb >> 23) - 127 + 15;
  uint32_t man = absb & 0x7fffffu;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return (tpurt_f16_t)(sign | h);
}

double tpurt_dtype_load_f64(tpurt_dtype_t dtype, const void* p) {
  switch (dtype) {
    case TPURT_DTYPE_BOOL: return *(const uint8_t*)p ? 1.0 : 0.0;
    case TPURT_DTYPE_UINT8: return *(const uint8_t*)p;
    case TPURT_DTYPE_INT8: return *(const int8_t*)p;
    case TPURT_DTYPE_INT16: return *(const int16_t*)p;
    case TPURT_DTYPE_INT32: return *(const int32_t*)p;
    case TPURT_DTYPE_INT64: return (double)*(const int64_t*)p;
    case TPURT_DTYPE_FLOAT16: return tpurt_f16_to_f32(*(const uint16_t*)p);
    case TPURT_DTYPE_BFLOAT16: return tpurt_bf16_to_f32(*(const uint16_t*)p);
    case TPURT_DTYPE_FLOAT32: return *(const float*)p;
    case TPURT_DTYPE_FLOAT64: return *(const double*)p;
    case TPURT_DTYPE_COMPLEX64: return *(const float*)p;
    case TPURT_DTYPE_COMPLEX128: return *(const double*)p;
    case TPURT_DTYPE_UINT16: return *(const uint16_t*)p;
    case TPURT_DTYPE_UINT32: return *(const uint32_t*)p;
    case TPURT_DTYPE_UINT64: return (double)*(const uint64_t*)p;
    default: return 0.0;
  }
}

int64_t tpurt_dtype_load_i64(tpurt_dtype_t dtype, const void* p) {
  switch (dtype) {
    case TPURT_DTYPE_BOOL: return *(const uint8_t*)p ? 1 : 0;
    case TPURT_DTYPE_UINT8: return *(const uint8_t*)p;
    case TPURT_DTYPE_INT8: return *(const int8_t*)p;
    case TPURT_DTYPE_INT16: return *(const int16_t*)p;
    case TPURT_DTYPE_INT32: return *(const int32_t*)p;
    case TPURT_DTYPE_INT64: return *(const int64_t*)p;
    case TPURT_DTYPE_UINT16: return *(const uint16_t*)p;
    case TPURT_DTYPE_UINT32: return *(const uint32_t*)p;
    case TPURT_DTYPE_UINT64: return (int64_t)*(const uint64_t*)p; /* the same 64 bits */
    default: return (int64_t)tpurt_dtype_load_f64(dtype, p);
  }
}

void tpurt_dtype_store_f64(tpurt_dtype_t dtype, void* p, double v) {
  switch (dtype) {
    case TPURT_DTYPE_BOOL: *(uint8_t*)p = (v != 0.0); break;
    case TPURT_DTYPE_UINT8: *(uint8_t*)p = (uint8_t)(int64_t)v; break;
    case TPURT_DTYPE_INT8: *(int8_t*)p = (int8_t)(int64_t)v; break;
    case TPURT_DTYPE_INT16: *(int16_t*)p = (int16_t)(int64_t)v; break;
    case TPURT_DTYPE_INT32: *(int32_t*)p = (int32_t)(int64_t)v; break;
    case TPURT_DTYPE_INT64: *(int64_t*)p = (int64_t)v; break;
    case TPURT_DTYPE_FLOAT16: *(uint16_t*)p = tpurt_f32_to_f16((float)v); break;
    case TPURT_DTYPE_BFLOAT16: *(uint16_t*)p = tpurt_f32_to_bf16((float)v); break;
    case TPURT_DTYPE_FLOAT32: *(float*)p = (float)v; break;
    case TPURT_DTYPE_FLOAT64: *(double*)p = v; break;
    case TPURT_DTYPE_COMPLEX64: ((float*)p)[0] = (float)v; ((float*)p)[1] = 0.0f; break;
    case TPURT_DTYPE_COMPLEX128: ((double*)p)[0] = v; ((double*)p)[1] = 0.0; break;
    case TPURT_DTYPE_UINT16: *(uint16_t*)p = (uint16_t)(int64_t)v; break;
    case TPURT_DTYPE_UINT32: *(uint32_t*)p = (uint32_t)(int64_t)v; break;
    case TPURT_DTYPE_UINT64: *(uint64_t*)p = v >= 9223372036854775808.0 ? (uint64_t)v : (uint64_t)(int64_t)v; break;
    default: break;
  }
}

void tpurt_dtype_store_i64(tpurt_dtype_t dtype, void* p, int64_t v) {
  switch (dtype) {
    case TPURT_DTYPE_BOOL: *(uint8_t*)p = (v != 0); break;
    case TPURT_DTYPE_UINT8: *(uint8_t*)p = (uint8_t)v; break;
    case TPURT_DTYPE_INT8: *(int8_t*)p = (int8_t)v; break;
    case TPURT_DTYPE_INT16: *(int16_t*)p = (int16_t)v; break;
    case TPURT_DTYPE_INT32: *(int32_t*)p = (int32_t)v; break;
    case TPURT_DTYPE_INT64: *(int64_t*)p = v; break;
    case TPURT_DTYPE_UINT16: *(uint16_t*)p = (uint16_t)v; break;
    case TPURT_DTYPE_UINT32: *(uint32_t*)p = (uint32_t)v; break;
    case TPURT_DTYPE_UINT64: *(uint64_t*)p = (uint64_t)v; break;
    default: tpurt_dtype_store_f64(dtype, p, (double)v); break;
  }
}

void tpurt_dtype_convert(tpurt_dtype_t dst_dtype, void* dst, tpurt_dtype_t src_dtype, const void* src,
                         int64_t n) {
  if (src_dtype < 0 || src_dtype >= TPURT_DTYPE_COUNT || dst_dtype < 0 || dst_dtype >= TPURT_DTYPE_COUNT) return;
  size_t ds = tpurt_dtype_size(dst_dtype), ss = tpurt_dtype_size(src_dtype);
  if (dst_dtype == src_dtype) {
    memmove(dst, src, (size_t)n * ds);
    return;
  }
  if (tpurt_dtype_is_complex(src_dtype) && tpurt_dtype_is_complex(dst_dtype)) {
    for (int64_t i = 0; i < n; ++i) {
      double re, im;
      if (src_dtype == TPURT_DTYPE_COMPLEX64) {
        re = ((const float*)src)[2 * i];
        im = ((const float*)src)[2 * i + 1];
      } else {
        re = ((const double*)src)[2 * i];
        im = ((const double*)src)[2 * i + 1];
      }
      if (dst_dtype == TPURT_DTYPE_COMPLEX64) {
        ((float*)dst)[2 * i] = (float)re;
        ((float*)dst)[2 * i + 1] = (float)im;
      } else {
        ((double*)dst)[2 * i] = re;
        ((double*)dst)[2 * i + 1] = im;
      }
    }
    return;
  }
  /* Integer sources go through int64 so large values keep every bit;
   * complex -> real keeps the real part, real -> complex has a zero imaginary part. */
  bool via_int = !tpurt_dtype_is_floating(src_dtype) && !tpurt_dtype_is_floating(dst_dtype) &&
                 !tpurt_dtype_is_complex(src_dtype) && !tpurt_dtype_is_complex(dst_dtype);
  for (int64_t i = 0; i < n; ++i) {
    const char* s = (const char*)src + i * ss;
    char* d = (char*)dst + i * ds;
    if (via_int) tpurt_dtype_store_i64(dst_dtype, d, tpurt_dtype_load_i64(src_dtype, s));
    else tpurt_dtype_store_f64(dst_dtype, d, tpurt_dtype_load_f64(src_dtype, s));
  }
}
