/* The elementwise engine: broadcast inputs against the output shape, reorder
 * dimensions so the innermost one has the smallest output stride, coalesce
 * dimensions that are contiguous for every operand, cast operands whose dtype
 * differs from the loop dtype through small per-thread buffers, and hand
 * contiguous runs to the op's inner loop across threads. Also the strided
 * dtype converters (the heart of copy_) and PyTorch's result_type rules. */
#include "ops/elementwise/elementwise.h"

#include "ops/half_vec.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

/* Elements per cast chunk: small enough that every buffer stays in L1/L2. */
#define EW_CHUNK 1024
#define EW_DEFAULT_GRAIN 32768

/* ------------------------------------------------------------------------ */
/* Converters: one function per (dst, src) dtype pair, generated.             */

typedef void (*ew_convert_fn_t)(char* dst, int64_t ds, const char* src, int64_t ss, int64_t n);

/* storage type, and how a stored value becomes an arithmetic one */
#define CT_b uint8_t
#define CT_u8 uint8_t
#define CT_i8 int8_t
#define CT_i16 int16_t
#define CT_i32 int32_t
#define CT_i64 int64_t
#define CT_f16 uint16_t
#define CT_bf16 uint16_t
#define CT_f32 float
#define CT_f64 double
#define CT_u16 uint16_t
#define CT_u32 uint32_t
#define CT_u64 uint64_t
#define FROM_b(x) ((x) != 0)
#define FROM_u8(x) (x)
#define FROM_i8(x) (x)
#define FROM_i16(x) (x)
#define FROM_i32(x) (x)
#define FROM_i64(x) (x)
#define FROM_f16(x) tpurt_f16_to_f32(x)
#define FROM_bf16(x) tpurt_bf16_to_f32(x)
#define FROM_f32(x) (x)
#define FROM_f64(x) (x)
#define FROM_u16(x) (x)
#define FROM_u32(x) (x)
#define FROM_u64(x) (x)
/* Narrow integers go through int64 as PyTorch's uint8 cast does (a float
 * cast straight to a narrow type is undefined in C). */
#define TO_b(v) ((uint8_t)((v) != 0))
#define TO_u8(v) ((uint8_t)(int64_t)(v))
#define TO_i8(v) ((int8_t)(int64_t)(v))
#define TO_i16(v) ((int16_t)(int64_t)(v))
/* float -> int32 as CPU's (the x86 conversion): NaN, infinities and values out of range give
 * INT32_MIN; integers wrap */
static inline int32_t ew_float_to_i32(double x) {
  return x >= -2147483648.0 && x < 2147483648.0 ? (int32_t)x : INT32_MIN;
}
#define TO_i32(v) _Generic((v), float: ew_float_to_i32(v), double: ew_float_to_i32(v), default: (int32_t)(int64_t)(v))
#define TO_i64(v) ((int64_t)(v))
#define TO_u16(v) ((uint16_t)(int64_t)(v))
#define TO_u32(v) ((uint32_t)(int64_t)(v))
/* a float at or above 2^63 converts as unsigned; below, through int64 as the narrow types */
static inline uint64_t ew_float_to_u64(double x) {
  return x >= 9223372036854775808.0 ? (uint64_t)x : (uint64_t)(int64_t)x;
}
#define TO_u64(v) _Generic((v), float: ew_float_to_u64(v), double: ew_float_to_u64(v), default: (uint64_t)(v))
#define TO_f16(v) tpurt_f32_to_f16((float)(v))
#define TO_bf16(v) tpurt_f32_to_bf16((float)(v))
#define TO_f32(v) ((float)(v))
#define TO_f64(v) ((double)(v))

#define DEF_CONVERT(D, S)                                                                  \
  static void ew_convert_##D##_##S(char* dst, int64_t ds, const char* src, int64_t ss,    \
                                   int64_t n) {                                            \
    if (ds == (int64_t)sizeof(CT_##D) && ss == (int64_t)sizeof(CT_##S)) {                  \
      CT_##D* d = (CT_##D*)dst;                                                            \
      const CT_##S* s = (const CT_##S*)src;                                                \
      _Pragma("GCC ivdep") for (int64_t i = 0; i < n; ++i) d[i] = TO_##D(FROM_##S(s[i]));  \
    } else {                                                                               \
      for (int64_t i = 0; i < n; ++i)                                                      \
        *(CT_##D*)(dst + i * ds) = TO_##D(FROM_##S(*(const CT_##S*)(src + i * ss)));       \
    }                                                                                      \
  }
#define DEF_CONVERT_ROW(D)                                                                 \
  DEF_CONVERT(D, b) DEF_CONVERT(D, u8) DEF_CONVERT(D, i8) DEF_CONVERT(D, i16)              \
  DEF_CONVERT(D, i32) DEF_CONVERT(D, i64) DEF_CONVERT(D, f16) DEF_CONVERT(D, bf16)         \
  DEF_CONVERT(D, f32) DEF_CONVERT(D, f64) DEF_CONVERT(D, u16) DEF_CONVERT(D, u32)          \
  DEF_CONVERT(D, u64)
DEF_CONVERT_ROW(b)
DEF_CONVERT_ROW(u8)
DEF_CONVERT_ROW(i8)
DEF_CONVERT_ROW(i16)
DEF_CONVERT_ROW(i32)
DEF_CONVERT_ROW(i64)
DEF_CONVERT_ROW(f16)
DEF_CONVERT_ROW(bf16)
DEF_CONVERT_ROW(f32)
DEF_CONVERT_ROW(f64)
DEF_CONVERT_ROW(u16)
DEF_CONVERT_ROW(u32)
DEF_CONVERT_ROW(u64)

#define CONVERT_ROW(D)                                                                          \
  {[TPURT_DTYPE_BOOL] = ew_convert_##D##_b,      [TPURT_DTYPE_UINT8] = ew_convert_##D##_u8,       \
   [TPURT_DTYPE_INT8] = ew_convert_##D##_i8,     [TPURT_DTYPE_INT16] = ew_convert_##D##_i16,      \
   [TPURT_DTYPE_INT32] = ew_convert_##D##_i32,   [TPURT_DTYPE_INT64] = ew_convert_##D##_i64,      \
   [TPURT_DTYPE_FLOAT16] = ew_convert_##D##_f16, [TPURT_DTYPE_BFLOAT16] = ew_convert_##D##_bf16,  \
   [TPURT_DTYPE_FLOAT32] = ew_convert_##D##_f32, [TPURT_DTYPE_FLOAT64] = ew_convert_##D##_f64,    \
   [TPURT_DTYPE_UINT16] = ew_convert_##D##_u16,  [TPURT_DTYPE_UINT32] = ew_convert_##D##_u32,     \
   [TPURT_DTYPE_UINT64] = ew_convert_##D##_u64}
/* indexed [dst][src]; complex never reaches it (ew_complex.c) */
static const ew_convert_fn_t kConvert[TPURT_DTYPE_COUNT][TPURT_DTYPE_COUNT] = {
    [TPURT_DTYPE_BOOL] = CONVERT_ROW(b),      [TPURT_DTYPE_UINT8] = CONVERT_ROW(u8),
    [TPURT_DTYPE_INT8] = CONVERT_ROW(i8),     [TPURT_DTYPE_INT16] = CONVERT_ROW(i16),
    [TPURT_DTYPE_INT32] = CONVERT_ROW(i32),   [TPURT_DTYPE_INT64] = CONVERT_ROW(i64),
    [TPURT_DTYPE_FLOAT16] = CONVERT_ROW(f16), [TPURT_DTYPE_BFLOAT16] = CONVERT_ROW(bf16),
    [TPURT_DTYPE_FLOAT32] = CONVERT_ROW(f32), [TPURT_DTYPE_FLOAT64] = CONVERT_ROW(f64),
    [TPURT_DTYPE_UINT16] = CONVERT_ROW(u16),  [TPURT_DTYPE_UINT32] = CONVERT_ROW(u32),
    [TPURT_DTYPE_UINT64] = CONVERT_ROW(u64),
};

/* Same dtype: a byte copy by element size (bool bytes are copied as they are,
 * as PyTorch does). */
static void ew_copy_same(char* dst, int64_t ds, const char* src, int64_t ss, int64_t n, size_t size) {
  if (ds == (int64_t)size && ss == (int64_t)size) {
    memmove(dst, src, (size_t)n * size);
    return;
  }
  switch (size) {
    case 1: for (int64_t i = 0; i < n; ++i) *(uint8_t*)(dst + i * ds) = *(const uint8_t*)(src + i * ss); break;
    case 2: for (int64_t i = 0; i < n; ++i) *(uint16_t*)(dst + i * ds) = *(const uint16_t*)(src + i * ss); break;
    case 4: for (int64_t i = 0; i < n; ++i) *(uint32_t*)(dst + i * ds) = *(const uint32_t*)(src + i * ss); break;
    default: for (int64_t i = 0; i < n; ++i) *(uint64_t*)(dst + i * ds) = *(const uint64_t*)(src + i * ss); break;
  }
}

void tpurt_ew_convert_strided(tpurt_dtype_t dst_dtype, void* dst, int64_t dst_stride, tpurt_dtype_t src_dtype,
                              const void* src, int64_t src_stride, int64_t n) {
  if (n <= 0) return;
  if (dst_dtype == src_dtype && dst_dtype != TPURT_DTYPE_BOOL) {
    ew_copy_same((char*)dst, dst_stride, (const char*)src, src_stride, n, tpurt_dtype_size(dst_dtype));
    return;
  }
  /* bf16/f16 <-> float, contiguous: the bulk converters (ops/half_vec.h: 16 or 8 lanes at a time,
   * the scalar converters' bits), which the generic loop below cannot be vectorized into */
  if (dst_dtype == TPURT_DTYPE_FLOAT32 && dst_stride == 4 && src_stride == 2 &&
      (src_dtype == TPURT_DTYPE_BFLOAT16 || src_dtype == TPURT_DTYPE_FLOAT16)) {
    tpurt_hv_to_f32(src_dtype, src, (float*)dst, n);
    return;
  }
  if (src_dtype == TPURT_DTYPE_FLOAT32 && src_stride == 4 && dst_stride == 2 &&
      (dst_dtype == TPURT_DTYPE_BFLOAT16 || dst_dtype == TPURT_DTYPE_FLOAT16)) {
    tpurt_hv_from_f32(dst_dtype, (const float*)src, dst, n);
    return;
  }
  kConvert[dst_dtype][src_dtype]((char*)dst, dst_stride, (const char*)src, src_stride, n);
}

/* ------------------------------------------------------------------------ */
/* result_type                                                                */

static tpurt_dtype_t promote_skip(tpurt_dtype_t a, tpurt_dtype_t b) {
  if (a == TPURT_DTYPE_INVALID) return b;
  if (b == TPURT_DTYPE_INVALID) return a;
  return tpurt_dtype_promote(a, b);
}

static tpurt_dtype_t combine_categories(tpurt_dtype_t higher, tpurt_dtype_t lower) {
  if (higher != TPURT_DTYPE_INVALID && tpurt_dtype_is_floating(higher)) return higher;
  if (higher == TPURT_DTYPE_BOOL || (lower != TPURT_DTYPE_INVALID && tpurt_dtype_is_floating(lower)))
    return promote_skip(higher, lower);
  return higher != TPURT_DTYPE_INVALID ? higher : lower;
}

tpurt_dtype_t tpurt_ew_result_type(const tpurt_arg_t* const* operands, int n) {
  tpurt_dtype_t dim = TPURT_DTYPE_INVALID, zero = TPURT_DTYPE_INVALID, wrapped = TPURT_DTYPE_INVALID;
  for (int k = 0; k < n; ++k) {
    const tpurt_arg_t* a = operands[k];
    if (!a) continue;
    switch (a->kind) {
      case TPURT_ARG_TENSOR:
        if (!a->v.tensor) break;
        if (a->v.tensor->ndim > 0) dim = promote_skip(dim, a->v.tensor->dtype);
        else zero = promote_skip(zero, a->v.tensor->dtype);
        break;
      case TPURT_ARG_INT: wrapped = promote_skip(wrapped, TPURT_DTYPE_INT64); break;
      case TPURT_ARG_DOUBLE: wrapped = promote_skip(wrapped, TPURT_DTYPE_FLOAT32); break;
      case TPURT_ARG_BOOL: wrapped = promote_skip(wrapped, TPURT_DTYPE_BOOL); break;
      default: break;
    }
  }
  return combine_categories(dim, combine_categories(zero, wrapped));
}

/* ------------------------------------------------------------------------ */
/* The iterator                                                               */

typedef struct ew_iter_t {
  const tpurt_ew_config_t* cfg;
  int nops;
  int ndim;                                             /* >= 1 */
  int64_t shape[TPURT_MAX_DIMS];                        /* innermost first */
  int64_t strides[TPURT_EW_MAX_OPERANDS][TPURT_MAX_DIMS]; /* bytes */
  char* data[TPURT_EW_MAX_OPERANDS];
  tpurt_dtype_t dtypes[TPURT_EW_MAX_OPERANDS];          /* as stored */
  bool cast[TPURT_EW_MAX_OPERANDS];
  bool bcast[TPURT_EW_MAX_OPERANDS]; /* an input broadcast everywhere (a scalar), in its loop dtype */
  bool any_cast;
  bool bf16_direct;                                     /* cfg->loop_bf16 runs contiguous runs */
  bool stream;                                          /* output 0 written with streaming stores */
  char* scratch;                                        /* per thread: nops * EW_CHUNK * 8 */
  _Alignas(8) char scalar_buf[TPURT_EW_MAX_OPERANDS][8]; /* broadcast inputs, pre-cast */
} ew_iter_t;

/* Broadcast against outputs[0]; fills it->shape/strides in natural order
 * (outermost first) for `full_ndim` dims. */
static tpurt_status_t ew_broadcast(const tpurt_ew_config_t* cfg, int64_t* shape, int* out_ndim,
                                   int64_t strides[][TPURT_MAX_DIMS]) {
  const tpurt_tensor_t* o0 = cfg->tensors[0];
  int nd = o0->ndim;
  if (nd < 0 || nd > TPURT_MAX_DIMS) return TPURT_STATUS(INVALID_ARGUMENT, "%s: bad ndim %d", cfg->op, nd);
  for (int d = 0; d < nd; ++d) shape[d] = o0->sizes[d];
  int nops = cfg->num_outputs + cfg->num_inputs;
  for (int k = 0; k < nops; ++k) {
    const tpurt_tensor_t* t = cfg->tensors[k];
    if (!t) return TPURT_STATUS(INVALID_ARGUMENT, "%s: operand %d is missing", cfg->op, k);
    size_t es = tpurt_dtype_size(t->dtype);
    if (k < cfg->num_outputs) {
      bool same = t->ndim == nd;
      for (int d = 0; same && d < nd; ++d) same = t->sizes[d] == shape[d];
      if (!same) return TPURT_STATUS(INVALID_ARGUMENT, "%s: outputs differ in shape", cfg->op);
      for (int d = 0; d < nd; ++d) strides[k][d] = t->strides[d] * (int64_t)es;
      continue;
    }
    if (t->ndim > nd)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: input %d has %d dims, output has %d", cfg->op,
                          k - cfg->num_outputs, t->ndim, nd);
    int off = nd - t->ndim;
    for (int d = 0; d < nd; ++d) {
      int di = d - off;
      if (di < 0 || t->sizes[di] == 1) {
        strides[k][d] = 0;
      } else if (t->sizes[di] == shape[d]) {
        strides[k][d] = t->strides[di] * (int64_t)es;
      } else {
        return TPURT_STATUS(INVALID_ARGUMENT,
                            "%s: input %d of size %lld at dim %d does not broadcast to output size %lld",
                            cfg->op, k - cfg->num_outputs, (long long)t->sizes[di], di,
                            (long long)shape[d]);
      }
    }
  }
  *out_ndim = nd;
  return TPURT_OK;
}

/* PyTorch's reorder rule: dim a goes inside dim b when the first operand
 * whose strides in both are nonzero has the smaller stride there. */
static int ew_should_swap(const ew_iter_t* it, const int64_t strides[][TPURT_MAX_DIMS], const int64_t* shape,
                          int d0, int d1) {
  for (int k = 0; k < it->nops; ++k) {
    int64_t s0 = strides[k][d0], s1 = strides[k][d1];
    if (s0 == 0 || s1 == 0) continue;
    if (s0 < s1) return -1;
    if (s0 > s1) return 1;
    if (shape[d0] > shape[d1]) return 1;
  }
  return 0;
}

static tpurt_status_t ew_iter_init(ew_iter_t* it, const tpurt_ew_config_t* cfg, int64_t* out_numel) {
  memset(it, 0, sizeof(*it));
  it->cfg = cfg;
  it->nops = cfg->num_outputs + cfg->num_inputs;
  if (cfg->num_outputs < 1 || cfg->num_inputs < 0 || it->nops > TPURT_EW_MAX_OPERANDS)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: bad operand count", cfg->op);
  int64_t shape[TPURT_MAX_DIMS];
  int64_t strides[TPURT_EW_MAX_OPERANDS][TPURT_MAX_DIMS];
  int nd = 0;
  TPURT_RETURN_IF_ERROR(ew_broadcast(cfg, shape, &nd, strides));
  int64_t numel = 1;
  for (int d = 0; d < nd; ++d) numel *= shape[d];
  *out_numel = numel;
  for (int k = 0; k < it->nops; ++k) {
    const tpurt_tensor_t* t = cfg->tensors[k];
    it->data[k] = (char*)t->data;
    it->dtypes[k] = t->dtype;
    if (cfg->loop_dtypes[k] < 0 || cfg->loop_dtypes[k] >= TPURT_DTYPE_COUNT || t->dtype < 0 ||
        t->dtype >= TPURT_DTYPE_COUNT)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: bad dtype for operand %d", cfg->op, k);
    it->cast[k] = t->dtype != cfg->loop_dtypes[k];
    it->bcast[k] = false;
  }
  if (numel == 0) return TPURT_OK;
  /* Inputs broadcast everywhere (scalars): cast once, here. */
  for (int k = cfg->num_outputs; k < it->nops; ++k) {
    bool all0 = true;
    for (int d = 0; d < nd; ++d) all0 = all0 && (strides[k][d] == 0 || shape[d] == 1);
    if (all0 && it->cast[k]) {
      tpurt_ew_convert_strided(cfg->loop_dtypes[k], it->scalar_buf[k], 0, it->dtypes[k], it->data[k], 0, 1);
      it->data[k] = it->scalar_buf[k];
      it->dtypes[k] = cfg->loop_dtypes[k];
      it->cast[k] = false;
    }
    if (all0)
      for (int d = 0; d < nd; ++d) strides[k][d] = 0;
    it->bcast[k] = all0 && !it->cast[k];
  }
  for (int k = 0; k < it->nops; ++k) it->any_cast = it->any_cast || it->cast[k];
  /* the one-pass bf16 loop reads bf16 operands and float32 scalars (x * 0.5, clamp_min(x, 0)) */
  it->bf16_direct = cfg->loop_bf16 != NULL;
  for (int k = 0; k < it->nops; ++k)
    it->bf16_direct = it->bf16_direct && cfg->loop_dtypes[k] == TPURT_DTYPE_FLOAT32 &&
                      (it->dtypes[k] == TPURT_DTYPE_BFLOAT16 || (it->bcast[k] && it->dtypes[k] == TPURT_DTYPE_FLOAT32));
  /* Drop size-1 dims; order the rest innermost first. */
  int perm[TPURT_MAX_DIMS], n = 0;
  for (int d = nd - 1; d >= 0; --d)
    if (shape[d] != 1) perm[n++] = d;
  for (int i = 1; i < n; ++i) {
    int d1 = i;
    for (int d0 = i - 1; d0 >= 0; --d0) {
      int c = ew_should_swap(it, (const int64_t(*)[TPURT_MAX_DIMS])strides, shape, perm[d0], perm[d1]);
      if (c > 0) {
        int tmp = perm[d0];
        perm[d0] = perm[d1];
        perm[d1] = tmp;
        d1 = d0;
      } else if (c < 0) {
        break;
      }
    }
  }
  if (n == 0) {
    it->ndim = 1;
    it->shape[0] = 1;
    for (int k = 0; k < it->nops; ++k) it->strides[k][0] = 0;
    return TPURT_OK;
  }
  /* Coalesce neighbours that are one run for every operand. */
  int m = 0;
  it->shape[0] = shape[perm[0]];
  for (int k = 0; k < it->nops; ++k) it->strides[k][0] = strides[k][perm[0]];
  for (int i = 1; i < n; ++i) {
    int d = perm[i];
    bool can = true;
    for (int k = 0; k < it->nops && can; ++k) can = it->strides[k][m] * it->shape[m] == strides[k][d];
    if (can) {
      it->shape[m] *= shape[d];
    } else {
      ++m;
      it->shape[m] = shape[d];
      for (int k = 0; k < it->nops; ++k) it->strides[k][m] = strides[k][d];
    }
  }
  it->ndim = m + 1;
  return TPURT_OK;
}

#if defined(__AVX__)
/* Output bigger than the last-level cache: the lines a plain store writes
 * are first read from memory (read-for-ownership) and are evicted before
 * anyone reads them, so the stores cost a 4th memory stream (add: read a, b,
 * out; write out). Non-temporal stores skip that read: the engine raises
 * tpurt_ew_stream_active on the thread running such a range and the loops
 * of ew_ops.h stream their contiguous output (about 25% faster for add). */
/* The last-level cache this CPU sees, from sysfs (in a VM, sysconf reports
 * the whole host package's L3, e.g. 256 MiB where a core sees 32 MiB). */
static int64_t ew_llc_bytes(void) {
  int64_t best = 0;
  int best_level = 0;
  for (int i = 0; i < 8; ++i) {
    char path[96];
    int level = 0;
    long long kb = 0;
    char unit = 0;
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    FILE* f = fopen(path, "r");
    if (!f) break;
    int ok = fscanf(f, "%d", &level) == 1;
    fclose(f);
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    f = fopen(path, "r");
    if (!f) continue;
    ok = ok && fscanf(f, "%lld%c", &kb, &unit) >= 1;
    fclose(f);
    int64_t bytes = unit == 'M' ? (int64_t)kb << 20 : unit == 'K' ? (int64_t)kb << 10 : (int64_t)kb;
    if (ok && bytes > 0 && level >= best_level) {
      best_level = level;
      best = bytes;
    }
  }
  if (best > 0) return best;
  long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return llc > 0 ? (int64_t)llc : 0;
}

int64_t tpurt_ew_stream_min_bytes(void) {
  static _Atomic int64_t cached;
  int64_t v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v) return v;
  int64_t llc = ew_llc_bytes();
  v = llc > 0 ? llc : (int64_t)32 << 20;
  if (v < ((int64_t)4 << 20)) v = (int64_t)4 << 20;
  atomic_store_explicit(&cached, v, memory_order_relaxed);
  return v;
}

#else
int64_t tpurt_ew_stream_min_bytes(void) { return INT64_MAX; }
#endif

static void ew_segment(const ew_iter_t* it, char** ptrs, int64_t len, int tid) {
  const tpurt_ew_config_t* cfg = it->cfg;
  int64_t inner[TPURT_EW_MAX_OPERANDS];
  for (int k = 0; k < it->nops; ++k) inner[k] = it->strides[k][0];
  if (!it->any_cast) {
    cfg->loop(ptrs, inner, len, cfg->user);
    return;
  }
  if (it->bf16_direct) {
    bool contiguous = true;
    for (int k = 0; k < it->nops; ++k) contiguous = contiguous && (inner[k] == 2 || (it->bcast[k] && inner[k] == 0));
    if (contiguous) {
      cfg->loop_bf16(ptrs, inner, len, cfg->user);
      return;
    }
  }
  char* bufs = it->scratch + (size_t)tid * it->nops * EW_CHUNK * 8;
  char* lp[TPURT_EW_MAX_OPERANDS];
  int64_t ls[TPURT_EW_MAX_OPERANDS];
  for (int64_t c = 0; c < len; c += EW_CHUNK) {
    int64_t m = len - c < EW_CHUNK ? len - c : EW_CHUNK;
    for (int k = 0; k < it->nops; ++k) {
      char* p = ptrs[k] + c * inner[k];
      if (!it->cast[k]) {
        lp[k] = p;
        ls[k] = inner[k];
        continue;
      }
      lp[k] = bufs + (size_t)k * EW_CHUNK * 8;
      ls[k] = (int64_t)tpurt_dtype_size(cfg->loop_dtypes[k]);
      if (k >= cfg->num_outputs)
        tpurt_ew_convert_strided(cfg->loop_dtypes[k], lp[k], ls[k], it->dtypes[k], p, inner[k], m);
    }
    cfg->loop(lp, ls, m, cfg->user);
    for (int k = 0; k < cfg->num_outputs; ++k)
      if (it->cast[k])
        tpurt_ew_convert_strided(it->dtypes[k], ptrs[k] + c * inner[k], inner[k], cfg->loop_dtypes[k], lp[k],
                                 ls[k], m);
  }
}

_Thread_local bool tpurt_ew_stream_active;
_Thread_local const tpurt_ew_interceptor_t* tpurt_ew_tls_interceptor;

static void ew_range(void* user, int64_t begin, int64_t end, int tid) {
  const ew_iter_t* it = (const ew_iter_t*)user;
  if (it->stream) tpurt_ew_stream_active = true;
  int64_t idx[TPURT_MAX_DIMS];
  int64_t rem = begin;
  for (int d = 0; d < it->ndim; ++d) {
    idx[d] = rem % it->shape[d];
    rem /= it->shape[d];
  }
  char* ptrs[TPURT_EW_MAX_OPERANDS];
  int64_t pos = begin;
  while (pos < end) {
    int64_t len = it->shape[0] - idx[0];
    if (len > end - pos) len = end - pos;
    for (int k = 0; k < it->nops; ++k) {
      char* p = it->data[k];
      for (int d = 0; d < it->ndim; ++d) p += idx[d] * it->strides[k][d];
      ptrs[k] = p;
    }
    ew_segment(it, ptrs, len, tid);
    pos += len;
    idx[0] += len;
    for (int d = 0; d < it->ndim - 1 && idx[d] >= it->shape[d]; ++d) {
      idx[d] = 0;
      ++idx[d + 1];
    }
  }
#if defined(__AVX__)
  /* streaming stores are weakly ordered: make them visible before this
   * range is reported done */
  if (it->stream) {
    tpurt_ew_stream_active = false;
    _mm_sfence();
  }
#endif
}

/* A small call on dense operands: every output and every input either has
 * the output's sizes and is contiguous, or holds one element (a scalar,
 * broadcast with stride 0), and none needs a cast. Then the iterator's work
 * (broadcast, reorder, coalesce, thread split) would end in one segment of
 * the whole tensor on this thread, so the loop is called with it directly.
 * Most of a small op's device time was that set-up (about 1,000
 * instructions against the 16-element add's 60). False: take the iterator. */
static bool ew_run_dense(const tpurt_ew_config_t* cfg, int64_t grain) {
  const tpurt_tensor_t* o0 = cfg->tensors[0];
  int nops = cfg->num_outputs + cfg->num_inputs;
  if (!o0 || cfg->num_outputs < 1 || cfg->num_inputs < 0 || nops > TPURT_EW_MAX_OPERANDS || o0->ndim < 0 ||
      o0->ndim > TPURT_MAX_DIMS)
    return false;
  int nd = o0->ndim;
  int64_t numel = 1;
  for (int d = nd - 1; d >= 0; --d) {
    if (o0->sizes[d] != 1 && o0->strides[d] != numel) return false;
    numel *= o0->sizes[d];
  }
  if (numel <= 0 || numel > grain) return false;
  char* data[TPURT_EW_MAX_OPERANDS];
  int64_t strides[TPURT_EW_MAX_OPERANDS];
  for (int k = 0; k < nops; ++k) {
    const tpurt_tensor_t* t = cfg->tensors[k];
    if (!t || t->dtype != cfg->loop_dtypes[k] || t->ndim < 0 || t->ndim > nd) return false;
    int64_t n = 1;
    bool same = t->ndim == nd;
    for (int d = t->ndim - 1; d >= 0; --d) {
      same = same && t->sizes[d] == o0->sizes[d] && (t->sizes[d] == 1 || t->strides[d] == n);
      n *= t->sizes[d];
    }
    if (same) strides[k] = (int64_t)tpurt_dtype_size(t->dtype);
    else if (n == 1 && k >= cfg->num_outputs) strides[k] = 0;
    else return false;
    data[k] = (char*)t->data;
  }
  cfg->loop(data, strides, numel, cfg->user);
  return true;
}

tpurt_status_t tpurt_ew_run(tpurt_kernel_ctx_t* ctx, const tpurt_ew_config_t* cfg) {
  const tpurt_ew_interceptor_t* icpt = tpurt_ew_tls_interceptor;
  if (TPURT_UNLIKELY(icpt != NULL)) return icpt->run(icpt->user, ctx, cfg);
  if (ew_run_dense(cfg, tpurt_kernel_grain(ctx, cfg->grain > 0 ? cfg->grain : EW_DEFAULT_GRAIN))) return TPURT_OK;
  ew_iter_t it;
  int64_t numel = 0;
  TPURT_RETURN_IF_ERROR(ew_iter_init(&it, cfg, &numel));
  if (numel == 0) return TPURT_OK;
  if (it.any_cast) {
    int nt = tpurt_kernel_num_threads(ctx);
    if (nt < 1) nt = 1;
    it.scratch = (char*)tpurt_kernel_scratch(ctx, (size_t)nt * it.nops * EW_CHUNK * 8);
    if (!it.scratch) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch memory for casts", cfg->op);
  }
#if defined(__AVX__)
  {
    int64_t es = (int64_t)tpurt_dtype_size(it.dtypes[0]);
    it.stream = !it.cast[0] && cfg->num_outputs == 1 && it.ndim == 1 && it.strides[0][0] == es &&
                numel * es >= tpurt_ew_stream_min_bytes();
  }
#endif
  int64_t grain = cfg->grain > 0 ? cfg->grain : EW_DEFAULT_GRAIN;
  tpurt_parallel_for(ctx, numel, grain, ew_range, &it);
  return TPURT_OK;
}

/* ------------------------------------------------------------------------ */
/* Reference: one element at a time through tpurt_dtype_load/store.          */

static void ref_cast1(tpurt_dtype_t dst_dtype, void* dst, tpurt_dtype_t src_dtype, const void* src) {
  if (!tpurt_dtype_is_floating(dst_dtype) && !tpurt_dtype_is_floating(src_dtype))
    tpurt_dtype_store_i64(dst_dtype, dst, tpurt_dtype_load_i64(src_dtype, src));
  else
    tpurt_dtype_store_f64(dst_dtype, dst, tpurt_dtype_load_f64(src_dtype, src));
}

tpurt_status_t tpurt_ew_run_reference(const tpurt_ew_config_t* cfg, tpurt_ew_ref_fn_t fn, void* user) {
  int64_t shape[TPURT_MAX_DIMS];
  int64_t strides[TPURT_EW_MAX_OPERANDS][TPURT_MAX_DIMS];
  int nd = 0;
  int nops = cfg->num_outputs + cfg->num_inputs;
  if (cfg->num_outputs < 1 || nops > TPURT_EW_MAX_OPERANDS)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: bad operand count", cfg->op);
  TPURT_RETURN_IF_ERROR(ew_broadcast(cfg, shape, &nd, strides));
  int64_t numel = 1;
  for (int d = 0; d < nd; ++d) numel *= shape[d];
  int64_t idx[TPURT_MAX_DIMS] = {0};
  for (int64_t e = 0; e < numel; ++e) {
    tpurt_ew_value_t in[TPURT_EW_MAX_OPERANDS], out[TPURT_EW_MAX_OPERANDS];
    char* ptr[TPURT_EW_MAX_OPERANDS];
    for (int k = 0; k < nops; ++k) {
      ptr[k] = (char*)cfg->tensors[k]->data;
      for (int d = 0; d < nd; ++d) ptr[k] += idx[d] * strides[k][d];
    }
    for (int k = cfg->num_outputs; k < nops; ++k) {
      _Alignas(8) char tmp[8];
      tpurt_dtype_t ld = cfg->loop_dtypes[k];
      ref_cast1(ld, tmp, cfg->tensors[k]->dtype, ptr[k]);
      in[k - cfg->num_outputs].d = tpurt_dtype_load_f64(ld, tmp);
      in[k - cfg->num_outputs].i = tpurt_dtype_load_i64(ld, tmp);
    }
    memset(out, 0, sizeof(out));
    fn(out, in, user);
    for (int k = 0; k < cfg->num_outputs; ++k) {
      _Alignas(8) char tmp[8];
      tpurt_dtype_t ld = cfg->loop_dtypes[k];
      if (tpurt_dtype_is_floating(ld)) tpurt_dtype_store_f64(ld, tmp, out[k].d);
      else tpurt_dtype_store_i64(ld, tmp, out[k].i);
      ref_cast1(cfg->tensors[k]->dtype, ptr[k], ld, tmp);
    }
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return TPURT_OK;
}

/* ------------------------------------------------------------------------ */
/* The expression table: every ew_op_t expression (EW_EXPR in ew_ops.h)      */
/* registers a pointer in the "tpurt_ew_exprs" section; the linker bounds it. */

extern const tpurt_ew_expr_t* const __start_tpurt_ew_exprs[];
extern const tpurt_ew_expr_t* const __stop_tpurt_ew_exprs[];

size_t tpurt_ew_expr_count(void) { return (size_t)(__stop_tpurt_ew_exprs - __start_tpurt_ew_exprs); }

const tpurt_ew_expr_t* tpurt_ew_expr_at(size_t index) {
  return index < tpurt_ew_expr_count() ? __start_tpurt_ew_exprs[index] : NULL;
}

const tpurt_ew_expr_t* tpurt_ew_expr_find(const char* name) {
  if (!name) return NULL;
  for (const tpurt_ew_expr_t* const* e = __start_tpurt_ew_exprs; e < __stop_tpurt_ew_exprs; ++e)
    if (strcmp((*e)->name, name) == 0) return *e;
  return NULL;
}
