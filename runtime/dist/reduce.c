/* The reductions of tpurt/dist.h's collectives: one loop per (dtype, op),
 * accumulating rank by rank into the output block. 16-bit floats accumulate
 * in float32 and round once (closer to the exact sum than pairwise 16-bit). */
#include <complex.h>
#include <string.h>

#include "dist/reduce.h"

tpurt_status_t tpurt_dist_redop_check(tpurt_dtype_t dt, tpurt_dist_redop_t op, const char* what) {
  if ((int)dt < 0 || (int)dt >= TPURT_DTYPE_COUNT)
    return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: %s: %d is not a dtype", what, (int)dt);
  const char* why = NULL;
  bool cx = tpurt_dtype_is_complex(dt), fl = tpurt_dtype_is_floating(dt);
  if (op < 0 || op >= TPURT_DIST_REDOP_COUNT) why = "is not a reduction";
  else if ((op == TPURT_DIST_MIN || op == TPURT_DIST_MAX) && cx) why = "is not defined for complex numbers";
  else if ((op == TPURT_DIST_BAND || op == TPURT_DIST_BOR || op == TPURT_DIST_BXOR) && (fl || cx))
    why = "needs an integer or bool tensor";
  else if (op == TPURT_DIST_AVG && !(fl || cx)) why = "needs a floating-point or complex tensor";
  if (!why) return TPURT_OK;
  return TPURT_STATUS(INVALID_ARGUMENT, "tpu_dist: %s with reduction %s on %s: the reduction %s", what,
                      tpurt_dist_redop_name(op), tpurt_dtype_name(dt), why);
}

#define MINF(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) < (b) ? (a) : (b))
#define MAXF(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) > (b) ? (a) : (b))
#define MINI(a, b) ((a) < (b) ? (a) : (b))
#define MAXI(a, b) ((a) > (b) ? (a) : (b))

/* acc[i] = acc[i] OP src[i] for every source after the first. */
#define FOLD(T, EXPR)                                           \
  do {                                                          \
    T* o = (T*)acc_;                                            \
    for (int s = 1; s < nsrc; ++s) {                            \
      const T* b_ = (const T*)srcs[s];                          \
      for (uint64_t i = 0; i < n; ++i) {                        \
        T a = o[i], b = b_[i];                                  \
        o[i] = (EXPR);                                          \
      }                                                         \
    }                                                           \
  } while (0)

#define FOLD_INT(T)                                                \
  switch (op) {                                                    \
    case TPURT_DIST_SUM: FOLD(T, (T)(a + b)); break;               \
    case TPURT_DIST_PRODUCT: FOLD(T, (T)(a * b)); break;           \
    case TPURT_DIST_MIN: FOLD(T, MINI(a, b)); break;               \
    case TPURT_DIST_MAX: FOLD(T, MAXI(a, b)); break;               \
    case TPURT_DIST_BAND: FOLD(T, (T)(a & b)); break;              \
    case TPURT_DIST_BOR: FOLD(T, (T)(a | b)); break;               \
    case TPURT_DIST_BXOR: FOLD(T, (T)(a ^ b)); break;              \
    default: break;                                                \
  }

#define FOLD_FLOAT(T)                                              \
  switch (op) {                                                    \
    case TPURT_DIST_SUM: case TPURT_DIST_AVG: FOLD(T, a + b); break; \
    case TPURT_DIST_PRODUCT: FOLD(T, a * b); break;                \
    case TPURT_DIST_MIN: FOLD(T, MINF(a, b)); break;               \
    case TPURT_DIST_MAX: FOLD(T, MAXF(a, b)); break;               \
    default: break;                                                \
  }

void tpurt_dist_reduce_block(tpurt_dtype_t dt, tpurt_dist_redop_t op, const void* const* srcs, int nsrc,
                             uint64_t n, void* out, void* acc) {
  size_t es = tpurt_dtype_size(dt);
  if (dt == TPURT_DTYPE_BFLOAT16 || dt == TPURT_DTYPE_FLOAT16) {
    float* f = acc;
    bool bf = dt == TPURT_DTYPE_BFLOAT16;
    const uint16_t* s0 = srcs[0];
    for (uint64_t i = 0; i < n; ++i) f[i] = bf ? tpurt_bf16_to_f32(s0[i]) : tpurt_f16_to_f32(s0[i]);
    for (int s = 1; s < nsrc; ++s) {
      const uint16_t* b_ = srcs[s];
      for (uint64_t i = 0; i < n; ++i) {
        float a = f[i], b = bf ? tpurt_bf16_to_f32(b_[i]) : tpurt_f16_to_f32(b_[i]);
        switch (op) {
          case TPURT_DIST_PRODUCT: f[i] = a * b; break;
          case TPURT_DIST_MIN: f[i] = MINF(a, b); break;
          case TPURT_DIST_MAX: f[i] = MAXF(a, b); break;
          default: f[i] = a + b; break;
        }
      }
    }
    uint16_t* o = out;
    for (uint64_t i = 0; i < n; ++i) {
      float v = op == TPURT_DIST_AVG ? f[i] / (float)nsrc : f[i];
      o[i] = bf ? tpurt_f32_to_bf16(v) : tpurt_f32_to_f16(v);
    }
    return;
  }
  memcpy(out, srcs[0], n * es);
  void* acc_ = out;
  switch (dt) {
    case TPURT_DTYPE_BOOL:
      switch (op) {
        case TPURT_DIST_SUM: case TPURT_DIST_MAX: case TPURT_DIST_BOR: FOLD(uint8_t, (uint8_t)((a | b) != 0)); break;
        case TPURT_DIST_PRODUCT: case TPURT_DIST_MIN: case TPURT_DIST_BAND: FOLD(uint8_t, (uint8_t)(a && b)); break;
        case TPURT_DIST_BXOR: FOLD(uint8_t, (uint8_t)((a != 0) ^ (b != 0))); break;
        default: break;
      }
      break;
    /* Integer sums and products wrap, as PyTorch's do: computed unsigned. */
    case TPURT_DTYPE_UINT8: FOLD_INT(uint8_t); break;
    case TPURT_DTYPE_INT8:
      if (op == TPURT_DIST_MIN || op == TPURT_DIST_MAX) { FOLD_INT(int8_t); } else { FOLD_INT(uint8_t); }
      break;
    case TPURT_DTYPE_INT16:
      if (op == TPURT_DIST_MIN || op == TPURT_DIST_MAX) { FOLD_INT(int16_t); } else { FOLD_INT(uint16_t); }
      break;
    case TPURT_DTYPE_INT32:
      if (op == TPURT_DIST_MIN || op == TPURT_DIST_MAX) { FOLD_INT(int32_t); } else { FOLD_INT(uint32_t); }
      break;
    case TPURT_DTYPE_INT64:
      if (op == TPURT_DIST_MIN || op == TPURT_DIST_MAX) { FOLD_INT(int64_t); } else { FOLD_INT(uint64_t); }
      break;
    case TPURT_DTYPE_FLOAT32: FOLD_FLOAT(float); break;
    case TPURT_DTYPE_FLOAT64: FOLD_FLOAT(double); break;
    case TPURT_DTYPE_COMPLEX64:
      if (op == TPURT_DIST_PRODUCT) FOLD(float complex, a * b);
      else FOLD(float complex, a + b);
      break;
    case TPURT_DTYPE_COMPLEX128:
      if (op == TPURT_DIST_PRODUCT) FOLD(double complex, a * b);
      else FOLD(double complex, a + b);
      break;
    default: break;
  }
  if (op == TPURT_DIST_AVG) {
    if (dt == TPURT_DTYPE_FLOAT32 || dt == TPURT_DTYPE_COMPLEX64) {
      float* o = out;
      uint64_t m = n * (dt == TPURT_DTYPE_COMPLEX64 ? 2 : 1);
      for (uint64_t i = 0; i < m; ++i) o[i] /= (float)nsrc;
    } else if (dt == TPURT_DTYPE_FLOAT64 || dt == TPURT_DTYPE_COMPLEX128) {
      double* o = out;
      uint64_t m = n * (dt == TPURT_DTYPE_COMPLEX128 ? 2 : 1);
      for (uint64_t i = 0; i < m; ++i) o[i] /= (double)nsrc;
    }
  }
}
