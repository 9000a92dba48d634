/* Shared machinery of the index kernel family (see index_common.h): the
 * strided walker, broadcast copy, index loading with bounds checks
 * and the per-dtype accumulate functions. */
#include "ops/index/index_common.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

tpurt_status_t tpurt_index_wrap_dim(const char* op, int64_t dim, int32_t ndim, int32_t* out_dim) {
  int64_t n = ndim > 0 ? ndim : 1;
  if (dim < -n || dim >= n)
    return TPURT_STATUS(OUT_OF_RANGE, "%s: dimension out of range (expected to be in range of [%" PRId64
                        ", %" PRId64 "], but got %" PRId64 ")", op, -n, n - 1, dim);
  *out_dim = (int32_t)(dim < 0 ? dim + n : dim);
  return TPURT_OK;
}

void tpurt_index_as_1d(const tpurt_tensor_t* t, tpurt_tensor_t* out) {
  *out = *t;
  if (t->ndim == 0) {
    out->ndim = 1;
    out->sizes[0] = 1;
    out->strides[0] = 1;
  }
}

int64_t tpurt_index_offset(const tpurt_tensor_t* t, int64_t linear) {
  int64_t off = 0;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    int64_t sz = t->sizes[d];
    if (sz == 0) return 0;
    off += (linear % sz) * t->strides[d];
    linear /= sz;
  }
  return off;
}

static void byte_extent(const tpurt_tensor_t* t, uintptr_t* lo, uintptr_t* hi) {
  int64_t mn = 0, mx = 0;
  for (int32_t d = 0; d < t->ndim; ++d) {
    int64_t span = (t->sizes[d] - 1) * t->strides[d];
    if (span < 0) mn += span; else mx += span;
  }
  size_t es = tpurt_dtype_size(t->dtype);
  *lo = (uintptr_t)t->data + (intptr_t)(mn * (int64_t)es);
  *hi = (uintptr_t)t->data + (intptr_t)((mx + 1) * (int64_t)es);
}

bool tpurt_index_may_overlap(const tpurt_tensor_t* a, const tpurt_tensor_t* b) {
  if (!a || !b || tpurt_tensor_numel(a) == 0 || tpurt_tensor_numel(b) == 0) return false;
  uintptr_t alo, ahi, blo, bhi;
  byte_extent(a, &alo, &ahi);
  byte_extent(b, &blo, &bhi);
  return alo < bhi && blo < ahi;
}

void tpurt_index_make_contig(tpurt_tensor_t* t, void* data, tpurt_dtype_t dtype, int32_t ndim,
                             const int64_t* sizes) {
  memset(t, 0, sizeof(*t));
  t->data = data;
  t->dtype = dtype;
  t->ndim = ndim;
  int64_t st = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    t->sizes[d] = sizes[d];
    t->strides[d] = st;
    st *= sizes[d] > 0 ? sizes[d] : 1;
  }
}

/* ---- walker ---- */

void tpurt_index_space_init(tpurt_index_space_t* s, int nops) {
  memset(s, 0, sizeof(*s));
  s->nops = nops;
}

void tpurt_index_space_push(tpurt_index_space_t* s, int64_t size, const int64_t* strides) {
  int d = s->nd++;
  s->sizes[d] = size;
  for (int k = 0; k < s->nops; ++k) s->strides[k][d] = strides[k];
}

void tpurt_index_space_coalesce(tpurt_index_space_t* s) {
  int nd = 0;
  for (int d = 0; d < s->nd; ++d) {
    if (s->sizes[d] == 1) continue;
    if (nd > 0) {
      /* merge into the previous (outer) kept dim when every op steps through
       * both as one: stride_outer == stride_inner * size_inner */
      bool merge = true;
      for (int k = 0; k < s->nops; ++k)
        if (s->strides[k][nd - 1] != s->strides[k][d] * s->sizes[d]) merge = false;
      if (merge) {
        s->sizes[nd - 1] *= s->sizes[d];
        for (int k = 0; k < s->nops; ++k) s->strides[k][nd - 1] = s->strides[k][d];
        continue;
      }
    }
    s->sizes[nd] = s->sizes[d];
    for (int k = 0; k < s->nops; ++k) s->strides[k][nd] = s->strides[k][d];
    ++nd;
  }
  s->nd = nd;
}

int64_t tpurt_index_space_numel(const tpurt_index_space_t* s) {
  int64_t n = 1;
  for (int d = 0; d < s->nd; ++d) n *= s->sizes[d];
  return n;
}

void tpurt_index_space_walk(const tpurt_index_space_t* s, int64_t begin, int64_t end,
                            tpurt_index_row_fn_t fn, void* user) {
  int64_t offs[TPURT_INDEX_MAX_OPS] = {0};
  if (begin >= end) return;
  if (s->nd == 0) {
    fn(user, offs, 1);
    return;
  }
  int nd = s->nd;
  int64_t pos[TPURT_MAX_DIMS];
  int64_t rem = begin;
  for (int d = nd - 1; d >= 0; --d) {
    pos[d] = rem % s->sizes[d];
    rem /= s->sizes[d];
  }
  for (int k = 0; k < s->nops; ++k) {
    int64_t o = 0;
    for (int d = 0; d < nd; ++d) o += pos[d] * s->strides[k][d];
    offs[k] = o;
  }
  int64_t inner = s->sizes[nd - 1];
  int64_t cur = begin;
  while (cur < end) {
    int64_t n = inner - pos[nd - 1];
    if (n > end - cur) n = end - cur;
    fn(user, offs, n);
    cur += n;
    if (cur >= end) break;
    /* advance: finish the row, then carry into outer dims */
    pos[nd - 1] += n;
    for (int k = 0; k < s->nops; ++k) offs[k] += n * s->strides[k][nd - 1];
    for (int d = nd - 1; d > 0 && pos[d] == s->sizes[d]; --d) {
      pos[d] = 0;
      pos[d - 1]++;
      for (int k = 0; k < s->nops; ++k)
        offs[k] += s->strides[k][d - 1] - s->sizes[d] * s->strides[k][d];
    }
  }
}

typedef struct {
  const tpurt_index_space_t* s;
  tpurt_index_row_fn_t fn;
  void* user;
} walk_job_t;

static void walk_chunk(void* user, int64_t begin, int64_t end, int tid) {
  (void)tid;
  walk_job_t* j = (walk_job_t*)user;
  tpurt_index_space_walk(j->s, begin, end, j->fn, j->user);
}

void tpurt_index_space_parallel(tpurt_kernel_ctx_t* ctx, const tpurt_index_space_t* s, int64_t grain,
                                tpurt_index_row_fn_t fn, void* user) {
  int64_t n = tpurt_index_space_numel(s);
  if (n <= 0) return;
  walk_job_t j = {s, fn, user};
  tpurt_parallel_for(ctx, n, grain < 1 ? 1 : grain, walk_chunk, &j);
}

/* ---- broadcast copy ---- */

bool tpurt_index_broadcast_strides(const tpurt_tensor_t* t, int nd, const int64_t* sizes,
                                   int64_t* out_strides) {
  if (t->ndim > nd) {
    /* leading size-1 dims of t may be dropped */
    for (int d = 0; d < t->ndim - nd; ++d)
      if (t->sizes[d] != 1) return false;
  }
  for (int d = nd - 1, e = t->ndim - 1; d >= 0; --d, --e) {
    if (e < 0) {
      out_strides[d] = 0;
    } else if (t->sizes[e] == sizes[d]) {
      out_strides[d] = sizes[d] == 1 ? 0 : t->strides[e];
    } else if (t->sizes[e] == 1) {
      out_strides[d] = 0;
    } else {
      return false;
    }
  }
  return true;
}

typedef struct {
  char* dst;
  const char* src;
  tpurt_dtype_t ddt, sdt;
  size_t des, ses;
  int64_t dstride, sstride; /* bytes, inner */
} copy_job_t;

static void copy_row(void* user, const int64_t* offs, int64_t n) {
  copy_job_t* j = (copy_job_t*)user;
  char* d = j->dst + offs[0] * (int64_t)j->des;
  const char* s = j->src + offs[1] * (int64_t)j->ses;
  if (j->ddt == j->sdt && j->des == 16) { /* complex128: two words per element */
    for (int64_t i = 0; i < n; ++i) memcpy(d + i * j->dstride, s + i * j->sstride, 16);
  } else if (j->ddt == j->sdt) {
    tpurt_index_copy_elems(d, j->dstride, s, j->sstride, n, j->des);
  } else if (j->dstride == (int64_t)j->des && j->sstride == (int64_t)j->ses) {
    tpurt_dtype_convert(j->ddt, d, j->sdt, s, n);
  } else {
    for (int64_t i = 0; i < n; ++i) tpurt_dtype_convert(j->ddt, d + i * j->dstride, j->sdt, s + i * j->sstride, 1);
  }
}

tpurt_status_t tpurt_index_copy(tpurt_kernel_ctx_t* ctx, const tpurt_tensor_t* dst,
                                const tpurt_tensor_t* src) {
  int64_t n = tpurt_tensor_numel(dst);
  if (n == 0) return TPURT_OK;
  if (dst->data == src->data && dst->dtype == src->dtype && dst->ndim == src->ndim &&
      memcmp(dst->sizes, src->sizes, sizeof(int64_t) * dst->ndim) == 0) {
    bool same = true;
    for (int d = 0; d < dst->ndim; ++d)
      if (dst->sizes[d] != 1 && dst->strides[d] != src->strides[d]) same = false;
    if (same) return TPURT_OK;
  }
  int64_t sst[TPURT_MAX_DIMS];
  if (!tpurt_index_broadcast_strides(src, dst->ndim, dst->sizes, sst))
    return TPURT_STATUS(INVALID_ARGUMENT, "copy: source of %d dims does not broadcast to destination of %d dims",
                        src->ndim, dst->ndim);
  tpurt_index_space_t sp;
  tpurt_index_space_init(&sp, 2);
  for (int d = 0; d < dst->ndim; ++d) {
    int64_t st[2] = {dst->strides[d], sst[d]};
    tpurt_index_space_push(&sp, dst->sizes[d], st);
  }
  tpurt_index_space_coalesce(&sp);
  copy_job_t j = {(char*)dst->data, (const char*)src->data, dst->dtype, src->dtype,
                  tpurt_dtype_size(dst->dtype), tpurt_dtype_size(src->dtype), 0, 0};
  j.dstride = tpurt_index_inner_stride(&sp, 0) * (int64_t)j.des;
  j.sstride = tpurt_index_inner_stride(&sp, 1) * (int64_t)j.ses;
  tpurt_index_space_parallel(ctx, &sp, 1 << 15, copy_row, &j);
  return TPURT_OK;
}

typedef struct {
  char* dst;
  size_t es;
  int64_t stride;
  uint64_t pattern;
} fill_job_t;

static void fill_row(void* user, const int64_t* offs, int64_t n) {
  fill_job_t* j = (fill_job_t*)user;
  char* d = j->dst + offs[0] * (int64_t)j->es;
  int64_t st = j->stride * (int64_t)j->es;
  switch (j->es) {
    case 1: for (int64_t i = 0; i < n; ++i) d[i * st] = (char)j->pattern; break;
    case 2: for (int64_t i = 0; i < n; ++i) *(uint16_t*)(d + i * st) = (uint16_t)j->pattern; break;
    case 4: for (int64_t i = 0; i < n; ++i) *(uint32_t*)(d + i * st) = (uint32_t)j->pattern; break;
    default: for (int64_t i = 0; i < n; ++i) *(uint64_t*)(d + i * st) = j->pattern; break;
  }
}

void tpurt_index_fill(tpurt_kernel_ctx_t* ctx, const tpurt_tensor_t* dst, const void* elem) {
  if (tpurt_tensor_numel(dst) == 0) return;
  tpurt_index_space_t sp;
  tpurt_index_space_init(&sp, 1);
  for (int d = 0; d < dst->ndim; ++d) tpurt_index_space_push(&sp, dst->sizes[d], &dst->strides[d]);
  tpurt_index_space_coalesce(&sp);
  fill_job_t j = {(char*)dst->data, tpurt_dtype_size(dst->dtype), tpurt_index_inner_stride(&sp, 0), 0};
  memcpy(&j.pattern, elem, j.es);
  tpurt_index_space_parallel(ctx, &sp, 1 << 15, fill_row, &j);
}

/* ---- indices ---- */

bool tpurt_index_is_index_dtype(tpurt_dtype_t dt) {
  return dt == TPURT_DTYPE_INT64 || dt == TPURT_DTYPE_INT32;
}

tpurt_status_t tpurt_index_load(const char* op, const tpurt_tensor_t* idx, int nd, const int64_t* sizes,
                                int64_t dim, int64_t dim_size, bool wrap, int64_t* out) {
  if (!tpurt_index_is_index_dtype(idx->dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: indices must be int64 or int32, got %s", op,
                        tpurt_dtype_name(idx->dtype));
  int64_t st[TPURT_MAX_DIMS];
  if (!tpurt_index_broadcast_strides(idx, nd, sizes, st))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: index tensor shape does not broadcast", op);
  int64_t n = 1;
  for (int d = 0; d < nd; ++d) n *= sizes[d];
  if (n == 0) return TPURT_OK;
  bool i64 = idx->dtype == TPURT_DTYPE_INT64;
  int64_t lo = wrap ? -dim_size : 0;
  bool flat = true; /* strides walk the index tensor contiguously at this shape */
  for (int d = nd - 1, expect = 1; d >= 0; --d) {
    if (sizes[d] != 1 && st[d] != expect) flat = false;
    expect *= sizes[d];
  }
  if (flat) {
    int64_t bad = -1;
    if (i64) {
      const int64_t* p = (const int64_t*)idx->data;
      for (int64_t i = 0; i < n; ++i) {
        int64_t v = p[i];
        bad = (v < lo || v >= dim_size) && bad < 0 ? i : bad;
        out[i] = v < 0 ? v + dim_size : v;
      }
      if (bad >= 0) {
        int64_t v = p[bad];
        return TPURT_STATUS(OUT_OF_RANGE, "%s: index %" PRId64 " is out of bounds for dimension %" PRId64
                            " with size %" PRId64, op, v, dim, dim_size);
      }
    } else {
      const int32_t* p = (const int32_t*)idx->data;
      for (int64_t i = 0; i < n; ++i) {
        int64_t v = p[i];
        bad = (v < lo || v >= dim_size) && bad < 0 ? i : bad;
        out[i] = v < 0 ? v + dim_size : v;
      }
      if (bad >= 0) {
        int64_t v = p[bad];
        return TPURT_STATUS(OUT_OF_RANGE, "%s: index %" PRId64 " is out of bounds for dimension %" PRId64
                            " with size %" PRId64, op, v, dim, dim_size);
      }
    }
    return TPURT_OK;
  }
  int64_t pos[TPURT_MAX_DIMS] = {0};
  int64_t off = 0;

  for (int64_t i = 0; i < n; ++i) {
    int64_t v = i64 ? ((const int64_t*)idx->data)[off] : ((const int32_t*)idx->data)[off];
    if (TPURT_UNLIKELY(v < lo || v >= dim_size))
      return TPURT_STATUS(OUT_OF_RANGE, "%s: index %" PRId64 " is out of bounds for dimension %" PRId64
                          " with size %" PRId64, op, v, dim, dim_size);
    out[i] = v < 0 ? v + dim_size : v;
    for (int d = nd - 1; d >= 0; --d) {
      if (++pos[d] < sizes[d]) { off += st[d]; break; }
      off -= (sizes[d] - 1) * st[d];
      pos[d] = 0;
    }
  }
  return TPURT_OK;
}

/* ---- accumulation ---- */

int tpurt_index_red_parse(const char* s) {
  if (!s) return -1;
  if (!strcmp(s, "sum") || !strcmp(s, "add")) return TPURT_INDEX_RED_SUM;
  if (!strcmp(s, "prod") || !strcmp(s, "multiply")) return TPURT_INDEX_RED_PROD;
  if (!strcmp(s, "mean")) return TPURT_INDEX_RED_MEAN;
  if (!strcmp(s, "amax")) return TPURT_INDEX_RED_AMAX;
  if (!strcmp(s, "amin")) return TPURT_INDEX_RED_AMIN;
  return -1;
}

/* Float-like compute: NaN propagates through amax/amin as in PyTorch. */
#define FMAX_(a, b) (((a) != (a)) ? (a) : (((b) != (b) || (b) > (a)) ? (b) : (a)))
#define FMIN_(a, b) (((a) != (a)) ? (a) : (((b) != (b) || (b) < (a)) ? (b) : (a)))

#define DEF_FLOAT_ACCUM(NAME, T, C, LOAD, STORE)                                                     \
  static void NAME##_copy(char* d, const char* s, double ad, int64_t ai) { *(T*)d = *(const T*)s; } \
  static void NAME##_sum(char* d, const char* s, double ad, int64_t ai) {                          \
    C a = LOAD(*(T*)d), b = LOAD(*(const T*)s);                                                     \
    *(T*)d = STORE(ad == 1.0 ? a + b : a + (C)ad * b);                                              \
  }                                                                                                 \
  static void NAME##_prod(char* d, const char* s, double ad, int64_t ai) {                         \
    C a = LOAD(*(T*)d), b = LOAD(*(const T*)s);                                                     \
    *(T*)d = STORE(a * b);                                                                          \
  }                                                                                                 \
  static void NAME##_amax(char* d, const char* s, double ad, int64_t ai) {                         \
    C a = LOAD(*(T*)d), b = LOAD(*(const T*)s);                                                     \
    *(T*)d = STORE(FMAX_(a, b));                                                                    \
  }                                                                                                 \
  static void NAME##_amin(char* d, const char* s, double ad, int64_t ai) {                         \
    C a = LOAD(*(T*)d), b = LOAD(*(const T*)s);                                                     \
    *(T*)d = STORE(FMIN_(a, b));                                                                    \
  }

#define ID_(x) (x)
DEF_FLOAT_ACCUM(f32, float, float, ID_, ID_)
DEF_FLOAT_ACCUM(f64, double, double, ID_, ID_)
DEF_FLOAT_ACCUM(f16, uint16_t, float, tpurt_f16_to_f32, tpurt_f32_to_f16)
DEF_FLOAT_ACCUM(bf16, uint16_t, float, tpurt_bf16_to_f32, tpurt_f32_to_bf16)

/* Integers: wraparound arithmetic through uint64 (no signed-overflow UB). */
#define DEF_INT_ACCUM(NAME, T)                                                                     \
  static void NAME##_copy(char* d, const char* s, double ad, int64_t ai) { *(T*)d = *(const T*)s; } \
  static void NAME##_sum(char* d, const char* s, double ad, int64_t ai) {                          \
    uint64_t a = (uint64_t)(int64_t) * (T*)d, b = (uint64_t)(int64_t) * (const T*)s;               \
    *(T*)d = (T)(a + (uint64_t)ai * b);                                                             \
  }                                                                                                 \
  static void NAME##_prod(char* d, const char* s, double ad, int64_t ai) {                         \
    uint64_t a = (uint64_t)(int64_t) * (T*)d, b = (uint64_t)(int64_t) * (const T*)s;               \
    *(T*)d = (T)(a * b);                                                                            \
  }                                                                                                 \
  static void NAME##_amax(char* d, const char* s, double ad, int64_t ai) {                         \
    T a = *(T*)d, b = *(const T*)s;                                                                 \
    *(T*)d = b > a ? b : a;                                                                         \
  }                                                                                                 \
  static void NAME##_amin(char* d, const char* s, double ad, int64_t ai) {                         \
    T a = *(T*)d, b = *(const T*)s;                                                                 \
    *(T*)d = b < a ? b : a;                                                                         \
  }

DEF_INT_ACCUM(u8, uint8_t)
DEF_INT_ACCUM(i8, int8_t)
DEF_INT_ACCUM(i16, int16_t)
DEF_INT_ACCUM(i32, int32_t)
DEF_INT_ACCUM(i64, int64_t)

/* bool: sum is logical or, prod logical and (PyTorch's bool add/mul). */
static void b_copy(char* d, const char* s, double ad, int64_t ai) { *(uint8_t*)d = *(const uint8_t*)s; }
static void b_sum(char* d, const char* s, double ad, int64_t ai) {
  *(uint8_t*)d = (*(uint8_t*)d != 0) || (ai != 0 && *(const uint8_t*)s != 0);
}
static void b_prod(char* d, const char* s, double ad, int64_t ai) {
  *(uint8_t*)d = (*(uint8_t*)d != 0) && (*(const uint8_t*)s != 0);
}
#define b_amax b_sum
#define b_amin b_prod

/* complex: sum and product in the parts' precision (CPU's c10::complex arithmetic); no amax/amin (CPU
 * refuses them: NULL, and the ops' prechecks raise CPU's words at the call) */
#define DEF_COMPLEX_ACCUM(NAME, T)                                                                 \
  static void NAME##_copy(char* d, const char* s, double ad, int64_t ai) {                         \
    memcpy(d, s, 2 * sizeof(T));                                                                    \
  }                                                                                                 \
  static void NAME##_sum(char* d, const char* s, double ad, int64_t ai) {                          \
    T* a = (T*)d;                                                                                   \
    const T* b = (const T*)s;                                                                       \
    if (ad == 1.0) a[0] += b[0], a[1] += b[1];                                                      \
    else a[0] += (T)ad * b[0], a[1] += (T)ad * b[1];                                                \
  }                                                                                                 \
  static void NAME##_prod(char* d, const char* s, double ad, int64_t ai) {                         \
    T* a = (T*)d;                                                                                   \
    const T* b = (const T*)s;                                                                       \
    T re = a[0] * b[0] - a[1] * b[1], im = a[0] * b[1] + a[1] * b[0];                               \
    a[0] = re, a[1] = im;                                                                           \
  }
DEF_COMPLEX_ACCUM(c64, float)
DEF_COMPLEX_ACCUM(c128, double)
#define c64_amax NULL
#define c64_amin NULL
#define c128_amax NULL
#define c128_amin NULL

#define ACCUM_ROW(NAME) {NAME##_copy, NAME##_sum, NAME##_prod, NAME##_sum, NAME##_amax, NAME##_amin}
static const tpurt_index_accum_fn_t kAccum[TPURT_DTYPE_COUNT][6] = {
    [TPURT_DTYPE_BOOL] = ACCUM_ROW(b),       [TPURT_DTYPE_UINT8] = ACCUM_ROW(u8),
    [TPURT_DTYPE_INT8] = ACCUM_ROW(i8),      [TPURT_DTYPE_INT16] = ACCUM_ROW(i16),
    [TPURT_DTYPE_INT32] = ACCUM_ROW(i32),    [TPURT_DTYPE_INT64] = ACCUM_ROW(i64),
    [TPURT_DTYPE_FLOAT16] = ACCUM_ROW(f16),  [TPURT_DTYPE_BFLOAT16] = ACCUM_ROW(bf16),
    [TPURT_DTYPE_FLOAT32] = ACCUM_ROW(f32),  [TPURT_DTYPE_FLOAT64] = ACCUM_ROW(f64),
    [TPURT_DTYPE_COMPLEX64] = ACCUM_ROW(c64), [TPURT_DTYPE_COMPLEX128] = ACCUM_ROW(c128),
};

tpurt_index_accum_fn_t tpurt_index_accum_fn(tpurt_dtype_t dtype, tpurt_index_red_t red) {
  if (dtype < 0 || dtype >= TPURT_DTYPE_COUNT || (int)red < 0 || (int)red > 5) return NULL;
  return kAccum[dtype][red];
}

void tpurt_index_red_identity(tpurt_dtype_t dtype, tpurt_index_red_t red, void* out_elem) {
  if (dtype == TPURT_DTYPE_COMPLEX64 || dtype == TPURT_DTYPE_COMPLEX128) {
    bool one = red == TPURT_INDEX_RED_PROD;
    if (dtype == TPURT_DTYPE_COMPLEX64) ((float*)out_elem)[0] = one ? 1.0f : 0.0f, ((float*)out_elem)[1] = 0.0f;
    else ((double*)out_elem)[0] = one ? 1.0 : 0.0, ((double*)out_elem)[1] = 0.0;
    return;
  }
  switch (red) {
    case TPURT_INDEX_RED_PROD: tpurt_dtype_store_i64(dtype, out_elem, 1); return;
    case TPURT_INDEX_RED_AMAX:
    case TPURT_INDEX_RED_AMIN: {
      bool mx = red == TPURT_INDEX_RED_AMAX;
      if (tpurt_dtype_is_floating(dtype)) {
        tpurt_dtype_store_f64(dtype, out_elem, mx ? -INFINITY : INFINITY);
        return;
      }
      int64_t lo, hi;
      switch (dtype) {
        case TPURT_DTYPE_BOOL: lo = 0; hi = 1; break;
        case TPURT_DTYPE_UINT8: lo = 0; hi = 255; break;
        case TPURT_DTYPE_INT8: lo = INT8_MIN; hi = INT8_MAX; break;
        case TPURT_DTYPE_INT16: lo = INT16_MIN; hi = INT16_MAX; break;
        case TPURT_DTYPE_INT32: lo = INT32_MIN; hi = INT32_MAX; break;
        default: lo = INT64_MIN; hi = INT64_MAX; break;
      }
      tpurt_dtype_store_i64(dtype, out_elem, mx ? lo : hi);
      return;
    }
    default: tpurt_dtype_store_i64(dtype, out_elem, 0); return;
  }
}

void tpurt_index_div_count(tpurt_dtype_t dtype, char* elem, int64_t count) {
  if (count <= 1) return;
  if (dtype == TPURT_DTYPE_COMPLEX64) {
    ((float*)elem)[0] /= (float)count, ((float*)elem)[1] /= (float)count;
    return;
  }
  if (dtype == TPURT_DTYPE_COMPLEX128) {
    ((double*)elem)[0] /= (double)count, ((double*)elem)[1] /= (double)count;
    return;
  }
  if (tpurt_dtype_is_floating(dtype)) {
    if (dtype == TPURT_DTYPE_FLOAT64) *(double*)elem /= (double)count;
    else tpurt_dtype_store_f64(dtype, elem, (float)tpurt_dtype_load_f64(dtype, elem) / (float)count);
    return;
  }
  int64_t v = tpurt_dtype_load_i64(dtype, elem);
  int64_t q = v / count;
  if ((v % count != 0) && ((v < 0) != (count < 0))) --q; /* floor */
  tpurt_dtype_store_i64(dtype, elem, q);
}

/* ---- gather engine ---- */

typedef struct {
  char* out;
  const char* src;
  const int64_t* off;
  size_t es;
  int64_t os, ss, xs;
} gather_job_t;

static void gather_row(void* user, const int64_t* offs, int64_t n) {
  gather_job_t* j = (gather_job_t*)user;
  int64_t es = (int64_t)j->es;
  char* o = j->out + offs[0] * es;
  const char* s = j->src + offs[1] * es;
  const int64_t* x = j->off + offs[2];
  if (j->xs == 0) {
    tpurt_index_copy_elems(o, j->os * es, s + x[0] * es, j->ss * es, n, j->es);
    return;
  }
  switch (j->es) {
    case 1: for (int64_t q = 0; q < n; ++q) o[q * j->os] = s[q * j->ss + x[q * j->xs]]; break;
    case 2:
      for (int64_t q = 0; q < n; ++q)
        ((uint16_t*)o)[q * j->os] = ((const uint16_t*)s)[q * j->ss + x[q * j->xs]];
      break;
    case 4:
      for (int64_t q = 0; q < n; ++q)
        ((uint32_t*)o)[q * j->os] = ((const uint32_t*)s)[q * j->ss + x[q * j->xs]];
      break;
    default:
      for (int64_t q = 0; q < n; ++q)
        ((uint64_t*)o)[q * j->os] = ((const uint64_t*)s)[q * j->ss + x[q * j->xs]];
      break;
  }
}

void tpurt_index_gather_run(tpurt_kernel_ctx_t* ctx, const tpurt_index_space_t* sp, char* out,
                            const char* src, const int64_t* off, size_t es) {
  gather_job_t j = {out, src, off, es, tpurt_index_inner_stride(sp, 0), tpurt_index_inner_stride(sp, 1),
                    tpurt_index_inner_stride(sp, 2)};
  tpurt_index_space_parallel(ctx, sp, 1 << 14, gather_row, &j);
}

/* ---- scatter engine ---- */

void tpurt_index_scatter_init(tpurt_index_scatter_t* job, tpurt_dtype_t dtype, tpurt_index_red_t red) {
  memset(job, 0, sizeof(*job));
  job->dtype = dtype;
  job->red = red;
  job->include_self = true;
  job->alpha_d = 1.0;
  job->alpha_i = 1;
  job->J = 1;
}

static void scatter_row(void* user, const int64_t* offs, int64_t n) {
  tpurt_index_scatter_t* j = (tpurt_index_scatter_t*)user;
  int64_t es = (int64_t)tpurt_dtype_size(j->dtype);
  int64_t os = tpurt_index_inner_stride(&j->sp, 0), ss = tpurt_index_inner_stride(&j->sp, 1),
          xs = tpurt_index_inner_stride(&j->sp, 2);
  char* out = j->out + offs[0] * es;
  const char* src = j->src + offs[1] * es;
  const int64_t* off = j->off + offs[2];
  if (!j->include_self && j->red != TPURT_INDEX_RED_COPY) {
    for (int64_t jj = 0; jj < j->J; ++jj)
      for (int64_t q = 0; q < n; ++q)
        memcpy(out + (q * os + off[q * xs + jj * j->off_j]) * es, j->identity, (size_t)es);
  }
  if (j->red == TPURT_INDEX_RED_COPY && xs == 0 && os == 1 && ss == 1) {
    /* whole contiguous rows: the index_put / index_copy / embedding-shaped case */
    for (int64_t jj = 0; jj < j->J; ++jj)
      memcpy(out + off[jj * j->off_j] * es, src + jj * j->src_j * es, (size_t)(n * es));
    return;
  }
  /* Each destination lies in one fiber and sees its updates in j order
   * whichever loop is outer; walk j innermost when it is the contiguous
   * direction (scatter along the last dim), fibers innermost otherwise. */
  int64_t sj_ = j->src_j < 0 ? -j->src_j : j->src_j, ss_ = ss < 0 ? -ss : ss;
  bool j_inner = n > 1 && sj_ < ss_;
  bool f32sum = j->dtype == TPURT_DTYPE_FLOAT32 && (j->red == TPURT_INDEX_RED_SUM || j->red == TPURT_INDEX_RED_MEAN) &&
                j->alpha_d == 1.0;
  int64_t* counts = j->counts ? j->counts + offs[0] - j->count_base : NULL;
  if (f32sum && !counts && xs == 0 && os == 1 && ss == 1) {
    /* whole contiguous rows added: index_put(accumulate) / embedding backward */
    for (int64_t jj = 0; jj < j->J; ++jj) {
      float* d = (float*)(out + off[jj * j->off_j] * es);
      const float* sr = (const float*)(src + jj * j->src_j * es);
      for (int64_t q = 0; q < n; ++q) d[q] += sr[q];
    }
    return;
  }
#define SCATTER_APPLY(q, jj)                                                         \
  do {                                                                               \
    int64_t d_ = (q) * os + off[(q) * xs + (jj) * j->off_j];                         \
    const char* s_ = src + ((q) * ss + (jj) * j->src_j) * es;                        \
    if (f32sum) *(float*)(out + d_ * es) += *(const float*)s_;                       \
    else j->fn(out + d_ * es, s_, j->alpha_d, j->alpha_i);                           \
    if (counts) counts[d_]++;                                                        \
  } while (0)
  if (j_inner) {
    for (int64_t q = 0; q < n; ++q)
      for (int64_t jj = 0; jj < j->J; ++jj) SCATTER_APPLY(q, jj);
  } else {
    for (int64_t jj = 0; jj < j->J; ++jj)
      for (int64_t q = 0; q < n; ++q) SCATTER_APPLY(q, jj);
  }
#undef SCATTER_APPLY
}

typedef struct {
  tpurt_index_scatter_t* j;
  int64_t stride; /* inner stride of the out walk */
} mean_job_t;

static void mean_row(void* user, const int64_t* offs, int64_t n) {
  mean_job_t* m = (mean_job_t*)user;
  tpurt_index_scatter_t* j = m->j;
  int64_t es = (int64_t)tpurt_dtype_size(j->dtype);
  char* base = (char*)j->out_t->data;
  for (int64_t q = 0; q < n; ++q) {
    int64_t o = offs[0] + q * m->stride;
    int64_t c = j->counts[o - j->count_base];
    if (c > 0) tpurt_index_div_count(j->dtype, base + o * es, c + (j->include_self ? 1 : 0));
  }
}

tpurt_status_t tpurt_index_scatter_run(tpurt_kernel_ctx_t* ctx, tpurt_index_scatter_t* job) {
  job->fn = tpurt_index_accum_fn(job->dtype, job->red);
  if (!job->fn) return TPURT_STATUS(UNIMPLEMENTED, "scatter: dtype %s", tpurt_dtype_name(job->dtype));
  tpurt_index_red_identity(job->dtype, job->red, job->identity);
  if (tpurt_index_space_numel(&job->sp) == 0 || job->J == 0) return TPURT_OK;
  job->counts = NULL;
  const tpurt_tensor_t* t = job->out_t;
  if (job->red == TPURT_INDEX_RED_MEAN) {
    if (!t) return TPURT_STATUS(INTERNAL, "scatter mean without destination tensor");
    int64_t mn = 0, mx = 0;
    for (int d = 0; d < t->ndim; ++d) {
      int64_t span = (t->sizes[d] - 1) * t->strides[d];
      if (span < 0) mn += span; else mx += span;
    }
    job->count_base = mn;
    job->counts = tpurt_kernel_scratch(ctx, (size_t)(mx - mn + 1) * sizeof(int64_t));
    if (!job->counts) return TPURT_STATUS(RESOURCE_EXHAUSTED, "scatter mean: no scratch for counts");
    memset(job->counts, 0, (size_t)(mx - mn + 1) * sizeof(int64_t));
  }
  int64_t grain = job->J > 0 ? (1 << 14) / job->J : 1;
  tpurt_index_space_parallel(ctx, &job->sp, grain < 1 ? 1 : grain, scatter_row, job);
  if (job->counts) {
    tpurt_index_space_t sp;
    tpurt_index_space_init(&sp, 1);
    for (int d = 0; d < t->ndim; ++d) tpurt_index_space_push(&sp, t->sizes[d], &t->strides[d]);
    tpurt_index_space_coalesce(&sp);
    mean_job_t mj = {job, tpurt_index_inner_stride(&sp, 0)};
    tpurt_index_space_parallel(ctx, &sp, 1 << 14, mean_row, &mj);
  }
  return TPURT_OK;
}

/* ---- nonzero coordinates ---- */

#define NZ_CHUNK 65536

static uint64_t nz_mask(tpurt_dtype_t dt) {
  switch (dt) {
    case TPURT_DTYPE_FLOAT16: case TPURT_DTYPE_BFLOAT16: return 0x7fffu;
    case TPURT_DTYPE_FLOAT32: return 0x7fffffffu;
    case TPURT_DTYPE_FLOAT64: return 0x7fffffffffffffffull;
    default: return ~0ull;
  }
}

static inline bool elem_nz(const char* p, size_t es, uint64_t mask) {
  switch (es) {
    case 1: return (*(const uint8_t*)p & mask) != 0;
    case 2: return (*(const uint16_t*)p & mask) != 0;
    case 4: return (*(const uint32_t*)p & mask) != 0;
    default: return (*(const uint64_t*)p & mask) != 0;
  }
}

/* Walks elements [b, e) of t in row-major order with an incremental
 * position; calls body with the element pointer and pos[]. */
#define NZ_SCAN(t, b, e, BODY)                                                        \
  do {                                                                                \
    int32_t nd_ = (t)->ndim;                                                          \
    size_t es_ = tpurt_dtype_size((t)->dtype);                                        \
    int64_t pos[TPURT_MAX_DIMS], off_ = 0, rem_ = (b);                                \
    for (int32_t d_ = nd_ - 1; d_ >= 0; --d_) {                                       \
      pos[d_] = rem_ % (t)->sizes[d_];                                                \
      rem_ /= (t)->sizes[d_];                                                         \
      off_ += pos[d_] * (t)->strides[d_];                                             \
    }                                                                                 \
    for (int64_t l_ = (b); l_ < (e); ++l_) {                                          \
      const char* p = (const char*)(t)->data + off_ * (int64_t)es_;                   \
      BODY;                                                                           \
      int32_t d_ = nd_ - 1;                                                           \
      if (d_ < 0) continue;                                                           \
      ++pos[d_];                                                                      \
      off_ += (t)->strides[d_];                                                       \
      while (d_ > 0 && pos[d_] == (t)->sizes[d_]) {                                   \
        off_ -= pos[d_] * (t)->strides[d_];                                           \
        pos[d_] = 0;                                                                  \
        --d_;                                                                         \
        ++pos[d_];                                                                    \
        off_ += (t)->strides[d_];                                                     \
      }                                                                               \
    }                                                                                 \
  } while (0)

static void nz_count_chunks(void* user, int64_t begin, int64_t end, int tid) {
  tpurt_index_nz_t* j = (tpurt_index_nz_t*)user;
  size_t es = tpurt_dtype_size(j->t->dtype);
  for (int64_t c = begin; c < end; ++c) {
    int64_t b = c * NZ_CHUNK, e = b + NZ_CHUNK < j->n ? b + NZ_CHUNK : j->n, cnt = 0;
    if (tpurt_tensor_is_contiguous(j->t)) {
      const char* base = (const char*)j->t->data;
      for (int64_t l = b; l < e; ++l) cnt += elem_nz(base + l * (int64_t)es, es, j->mask);
    } else {
      NZ_SCAN(j->t, b, e, cnt += elem_nz(p, es, j->mask));
    }
    j->counts[c] = cnt;
  }
}

tpurt_status_t tpurt_index_nz_count(tpurt_kernel_ctx_t* ctx, const tpurt_tensor_t* t, tpurt_index_nz_t* job,
                                    int64_t* out_total) {
  memset(job, 0, sizeof(*job));
  job->t = t;
  job->n = tpurt_tensor_numel(t);
  job->mask = nz_mask(t->dtype);
  job->chunks = (job->n + NZ_CHUNK - 1) / NZ_CHUNK;
  job->counts = tpurt_kernel_scratch(ctx, (size_t)(job->chunks + 1) * sizeof(int64_t));
  if (!job->counts) return TPURT_STATUS(RESOURCE_EXHAUSTED, "nonzero: no scratch");
  tpurt_parallel_for(ctx, job->chunks, 1, nz_count_chunks, job);
  int64_t total = 0;
  for (int64_t c = 0; c < job->chunks; ++c) {
    int64_t k = job->counts[c];
    job->counts[c] = total;
    total += k;
  }
  *out_total = total;
  return TPURT_OK;
}

static void nz_write_chunks(void* user, int64_t begin, int64_t end, int tid) {
  tpurt_index_nz_t* j = (tpurt_index_nz_t*)user;
  const tpurt_tensor_t* t = j->t;
  size_t es = tpurt_dtype_size(t->dtype);
  int32_t nd = t->ndim;
  for (int64_t c = begin; c < end; ++c) {
    int64_t row = j->counts[c];
    if (row >= j->limit) continue;
    int64_t b = c * NZ_CHUNK, e = b + NZ_CHUNK < j->n ? b + NZ_CHUNK : j->n;
    if (nd == 1 && t->strides[0] == 1) {
      const char* base = (const char*)t->data;
      for (int64_t l = b; l < e && row < j->limit; ++l)
        if (elem_nz(base + l * (int64_t)es, es, j->mask)) j->out[row++ * j->rs] = l;
      continue;
    }
    NZ_SCAN(t, b, e, {
      if (row >= j->limit) break;
      if (elem_nz(p, es, j->mask)) {
        int64_t* o = j->out + row * j->rs;
        for (int32_t d = 0; d < nd; ++d) o[d * j->cs] = pos[d];
        ++row;
      }
    });
  }
}

void tpurt_index_nz_write(tpurt_kernel_ctx_t* ctx, tpurt_index_nz_t* job, int64_t* out, int64_t rs, int64_t cs,
                          int64_t limit) {
  job->out = out;
  job->rs = rs;
  job->cs = cs;
  job->limit = limit;
  if (limit > 0) tpurt_parallel_for(ctx, job->chunks, 1, nz_write_chunks, job);
}
