/* The reduction engine: plans a reduction (kept dims x reduced dims, reduced
 * dims coalesced), then runs it one of three ways: per output over a reduced
 * row (inner reduction, contiguous fast path for float32 and, converted to
 * float, bf16/f16), per tile of outputs along a contiguous kept dim
 * ("vertical", e.g. sum over dim 0 of an (N, C) matrix: rows stream through
 * the tile's double accumulators), or, when there are fewer outputs than
 * threads, per output with the reduced range split across threads into
 * per-thread partials. Float sums accumulate in double per chunk (float32
 * lanes inside a chunk for contiguous 16/32-bit rows; plain double, in row
 * order, on the vertical path), at least as accurate as PyTorch's cascade sum. */
#include "ops/reduce/reduce.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "ops/half_vec.h"

#define CHUNK 512 /* elements converted per step on the generic row path */

tpurt_status_t tpurt_reduce_wrap_dim(const char* op, int64_t dim, int32_t ndim, int32_t* out_dim) {
  int64_t n = ndim > 0 ? ndim : 1;
  if (dim < -n || dim >= n)
    return TPURT_STATUS(OUT_OF_RANGE, "%s: dim %lld out of range for a %d-d tensor", op,
                        (long long)dim, (int)ndim);
  *out_dim = (int32_t)(dim < 0 ? dim + n : dim);
  return TPURT_OK;
}

tpurt_status_t tpurt_reduce_dims_from_arg(const tpurt_op_call_t* call, int i, int32_t ndim,
                                          bool out_mask[TPURT_MAX_DIMS]) {
  const char* op = call->name;
  memset(out_mask, 0, sizeof(bool) * TPURT_MAX_DIMS);
  int64_t one;
  int32_t count;
  const int64_t* dims = tpurt_arg_int_list(call, i, &one, &count);
  if (!tpurt_arg_present(call, i) || (dims && count == 0)) {
    for (int32_t d = 0; d < ndim; ++d) out_mask[d] = true;
    return TPURT_OK;
  }
  if (!dims)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: dim argument has unexpected kind %d", op, (int)tpurt_arg_kind(call, i));
  for (int32_t k = 0; k < count; ++k) {
    int64_t dim = dims[k];
    int32_t d = 0;
    TPURT_RETURN_IF_ERROR(tpurt_reduce_wrap_dim(op, dim, ndim, &d));
    if (ndim > 0) {
      if (out_mask[d])
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: dim %d appears multiple times in the list", op, (int)d);
      out_mask[d] = true;
    }
  }
  return TPURT_OK;
}

/* ---- row load/store helpers ---- */

#define LOAD_ROW(T, OUT_T, CONV)                                           \
  do {                                                                     \
    const T* s = (const T*)p;                                              \
    if (stride == 1) for (int64_t i = 0; i < n; ++i) out[i] = (OUT_T)CONV(s[i]); \
    else for (int64_t i = 0; i < n; ++i) out[i] = (OUT_T)CONV(s[i * stride]);     \
  } while (0)
#define ID(x) (x)
#define BOOLV(x) ((x) ? 1 : 0)

void tpurt_row_load_f32(tpurt_dtype_t dt, const void* p, int64_t stride, int64_t n, float* out) {
  switch (dt) {
    case TPURT_DTYPE_FLOAT32: LOAD_ROW(float, float, ID); break;
    case TPURT_DTYPE_BFLOAT16:
      if (stride == 1) tpurt_hv_bf16_to_f32((const uint16_t*)p, out, n);
      else LOAD_ROW(uint16_t, float, tpurt_bf16_to_f32);
      break;
    case TPURT_DTYPE_FLOAT16:
      if (stride == 1) tpurt_hv_f16_to_f32((const uint16_t*)p, out, n);
      else LOAD_ROW(uint16_t, float, tpurt_f16_to_f32);
      break;
    case TPURT_DTYPE_FLOAT64: LOAD_ROW(double, float, ID); break;
    case TPURT_DTYPE_INT64: LOAD_ROW(int64_t, float, ID); break;
    case TPURT_DTYPE_INT32: LOAD_ROW(int32_t, float, ID); break;
    case TPURT_DTYPE_INT16: LOAD_ROW(int16_t, float, ID); break;
    case TPURT_DTYPE_INT8: LOAD_ROW(int8_t, float, ID); break;
    case TPURT_DTYPE_UINT8: LOAD_ROW(uint8_t, float, ID); break;
    case TPURT_DTYPE_UINT16: LOAD_ROW(uint16_t, float, ID); break;
    case TPURT_DTYPE_UINT32: LOAD_ROW(uint32_t, float, ID); break;
    case TPURT_DTYPE_UINT64: LOAD_ROW(uint64_t, float, ID); break;
    case TPURT_DTYPE_BOOL: LOAD_ROW(uint8_t, float, BOOLV); break;
    default: for (int64_t i = 0; i < n; ++i) out[i] = 0; break;
  }
}

void tpurt_row_load_f64(tpurt_dtype_t dt, const void* p, int64_t stride, int64_t n, double* out) {
  if (stride == 1 && (dt == TPURT_DTYPE_BFLOAT16 || dt == TPURT_DTYPE_FLOAT16)) {
    /* contiguous 16-bit: the vector converters to float, then widened (exact) */
    float f[256];
    for (int64_t b = 0; b < n; b += 256) {
      int64_t m = n - b < 256 ? n - b : 256;
      tpurt_hv_to_f32(dt, (const uint16_t*)p + b, f, m);
      for (int64_t i = 0; i < m; ++i) out[b + i] = (double)f[i];
    }
    return;
  }
  switch (dt) {
    case TPURT_DTYPE_FLOAT32: LOAD_ROW(float, double, ID); break;
    case TPURT_DTYPE_BFLOAT16: LOAD_ROW(uint16_t, double, tpurt_bf16_to_f32); break;
    case TPURT_DTYPE_FLOAT16: LOAD_ROW(uint16_t, double, tpurt_f16_to_f32); break;
    case TPURT_DTYPE_FLOAT64: LOAD_ROW(double, double, ID); break;
    case TPURT_DTYPE_INT64: LOAD_ROW(int64_t, double, ID); break;
    case TPURT_DTYPE_INT32: LOAD_ROW(int32_t, double, ID); break;
    case TPURT_DTYPE_INT16: LOAD_ROW(int16_t, double, ID); break;
    case TPURT_DTYPE_INT8: LOAD_ROW(int8_t, double, ID); break;
    case TPURT_DTYPE_UINT8: LOAD_ROW(uint8_t, double, ID); break;
    case TPURT_DTYPE_UINT16: LOAD_ROW(uint16_t, double, ID); break;
    case TPURT_DTYPE_UINT32: LOAD_ROW(uint32_t, double, ID); break;
    case TPURT_DTYPE_UINT64: LOAD_ROW(uint64_t, double, ID); break;
    case TPURT_DTYPE_BOOL: LOAD_ROW(uint8_t, double, BOOLV); break;
    default: for (int64_t i = 0; i < n; ++i) out[i] = 0; break;
  }
}

static void row_load_i64(tpurt_dtype_t dt, const void* p, int64_t stride, int64_t n, int64_t* out) {
  switch (dt) {
    case TPURT_DTYPE_INT64: LOAD_ROW(int64_t, int64_t, ID); break;
    case TPURT_DTYPE_INT32: LOAD_ROW(int32_t, int64_t, ID); break;
    case TPURT_DTYPE_INT16: LOAD_ROW(int16_t, int64_t, ID); break;
    case TPURT_DTYPE_INT8: LOAD_ROW(int8_t, int64_t, ID); break;
    case TPURT_DTYPE_UINT8: LOAD_ROW(uint8_t, int64_t, ID); break;
    case TPURT_DTYPE_UINT16: LOAD_ROW(uint16_t, int64_t, ID); break;
    case TPURT_DTYPE_UINT32: LOAD_ROW(uint32_t, int64_t, ID); break;
    case TPURT_DTYPE_UINT64: LOAD_ROW(uint64_t, int64_t, ID); break; /* the same 64 bits: sums wrap alike */
    case TPURT_DTYPE_BOOL: LOAD_ROW(uint8_t, int64_t, BOOLV); break;
    default: for (int64_t i = 0; i < n; ++i) out[i] = 0; break;
  }
}

#define STORE_ROW(T, CONV)                                                 \
  do {                                                                     \
    T* d = (T*)p;                                                          \
    if (stride == 1) for (int64_t i = 0; i < n; ++i) d[i] = (T)CONV(in[i]); \
    else for (int64_t i = 0; i < n; ++i) d[i * stride] = (T)CONV(in[i]);   \
  } while (0)

void tpurt_row_store_f32(tpurt_dtype_t dt, void* p, int64_t stride, int64_t n, const float* in) {
  switch (dt) {
    case TPURT_DTYPE_FLOAT32: STORE_ROW(float, ID); break;
    case TPURT_DTYPE_BFLOAT16:
      if (stride == 1) tpurt_hv_f32_to_bf16(in, (uint16_t*)p, n);
      else STORE_ROW(uint16_t, tpurt_f32_to_bf16);
      break;
    case TPURT_DTYPE_FLOAT16:
      if (stride == 1) tpurt_hv_f32_to_f16(in, (uint16_t*)p, n);
      else STORE_ROW(uint16_t, tpurt_f32_to_f16);
      break;
    case TPURT_DTYPE_FLOAT64: STORE_ROW(double, ID); break;
    default:
      for (int64_t i = 0; i < n; ++i)
        tpurt_dtype_store_f64(dt, (char*)p + i * stride * (int64_t)tpurt_dtype_size(dt), in[i]);
      break;
  }
}

/* double -> 16-bit through float, as tpurt_dtype_store_f64 rounds */
#define D2BF16(x) tpurt_f32_to_bf16((float)(x))
#define D2F16(x) tpurt_f32_to_f16((float)(x))
void tpurt_row_store_f64(tpurt_dtype_t dt, void* p, int64_t stride, int64_t n, const double* in) {
  switch (dt) {
    case TPURT_DTYPE_FLOAT32: STORE_ROW(float, ID); break;
    case TPURT_DTYPE_FLOAT64: STORE_ROW(double, ID); break;
    case TPURT_DTYPE_BFLOAT16: STORE_ROW(uint16_t, D2BF16); break;
    case TPURT_DTYPE_FLOAT16: STORE_ROW(uint16_t, D2F16); break;
    default:
      for (int64_t i = 0; i < n; ++i)
        tpurt_dtype_store_f64(dt, (char*)p + i * stride * (int64_t)tpurt_dtype_size(dt), in[i]);
      break;
  }
}

/* ---- plan ---- */

typedef struct plan_t {
  int64_t M, K;
  int nk; /* kept dims of size > 1, original order */
  int64_t ksize[TPURT_MAX_DIMS], kin[TPURT_MAX_DIMS], kout[TPURT_MAX_DIMS], kidx[TPURT_MAX_DIMS];
  int nr; /* reduced dims, size-1 dropped, adjacent ones coalesced; >= 1 */
  int64_t rsize[TPURT_MAX_DIMS], rin[TPURT_MAX_DIMS], rmul[TPURT_MAX_DIMS];
  bool int_load;    /* load elements as int64 (integer / bool input) */
  bool int_result;  /* the accumulated value lives in acc.i */
  size_t isz;
  tpurt_dtype_t dt;
} plan_t;

typedef struct acc_t {
  double v;
  int64_t i;
  int64_t idx;
} acc_t;

static bool op_is_logical(tpurt_reduce_op_t op) {
  return op == TPURT_REDUCE_ALL || op == TPURT_REDUCE_ANY || op == TPURT_REDUCE_COUNT_NZ;
}

/* Maps the output tensor's dims onto the input's kept dims. */
static tpurt_status_t map_out(const char* name, const tpurt_tensor_t* in, const bool* mask,
                              const tpurt_tensor_t* out, int64_t* out_strides /* per in dim */) {
  int nred = 0;
  for (int d = 0; d < in->ndim; ++d) nred += mask[d];
  if (out->ndim == in->ndim && in->ndim > 0) {
    for (int d = 0; d < in->ndim; ++d) {
      int64_t want = mask[d] ? 1 : in->sizes[d];
      if (out->sizes[d] != want)
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: output size %lld at dim %d, expected %lld", name,
                            (long long)out->sizes[d], d, (long long)want);
      out_strides[d] = mask[d] ? 0 : out->strides[d];
    }
    return TPURT_OK;
  }
  if (out->ndim == in->ndim - nred) {
    int j = 0;
    for (int d = 0; d < in->ndim; ++d) {
      if (mask[d]) { out_strides[d] = 0; continue; }
      if (out->sizes[j] != in->sizes[d])
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: output size %lld at dim %d, expected %lld", name,
                            (long long)out->sizes[j], j, (long long)in->sizes[d]);
      out_strides[d] = out->strides[j++];
    }
    return TPURT_OK;
  }
  return TPURT_STATUS(INVALID_ARGUMENT, "%s: output rank %d does not match input rank %d with %d reduced dims",
                      name, (int)out->ndim, (int)in->ndim, nred);
}

static tpurt_status_t plan_build(const tpurt_reduce_spec_t* s, plan_t* p) {
  const tpurt_tensor_t* in = s->in;
  memset(p, 0, sizeof(*p));
  int64_t ostr[TPURT_MAX_DIMS] = {0}, istr[TPURT_MAX_DIMS] = {0};
  if (s->out) TPURT_RETURN_IF_ERROR(map_out(s->op_name, in, s->mask, s->out, ostr));
  if (s->out_index) TPURT_RETURN_IF_ERROR(map_out(s->op_name, in, s->mask, s->out_index, istr));
  p->M = 1;
  p->K = 1;
  for (int d = 0; d < in->ndim; ++d) {
    if (s->mask[d]) { p->K *= in->sizes[d]; continue; }
    p->M *= in->sizes[d];
    if (in->sizes[d] == 1) continue;
    p->ksize[p->nk] = in->sizes[d];
    p->kin[p->nk] = in->strides[d];
    p->kout[p->nk] = ostr[d];
    p->kidx[p->nk] = istr[d];
    ++p->nk;
  }
  /* Reduced dims with row-major multipliers, then coalesce neighbours. */
  int64_t mul = 1;
  int64_t rs[TPURT_MAX_DIMS], ri[TPURT_MAX_DIMS], rm[TPURT_MAX_DIMS];
  int nr = 0;
  for (int d = in->ndim - 1; d >= 0; --d) {
    if (!s->mask[d]) continue;
    if (in->sizes[d] != 1) { rs[nr] = in->sizes[d]; ri[nr] = in->strides[d]; rm[nr] = mul; ++nr; }
    mul *= in->sizes[d];
  }
  /* rs[] is innermost-first; reverse into p while merging. */
  for (int k = nr - 1; k >= 0; --k) {
    if (p->nr > 0 && p->rin[p->nr - 1] == ri[k] * rs[k] && p->rmul[p->nr - 1] == rm[k] * rs[k]) {
      p->rsize[p->nr - 1] *= rs[k];
      p->rin[p->nr - 1] = ri[k];
      p->rmul[p->nr - 1] = rm[k];
    } else {
      p->rsize[p->nr] = rs[k]; p->rin[p->nr] = ri[k]; p->rmul[p->nr] = rm[k]; ++p->nr;
    }
  }
  if (p->nr == 0) { p->rsize[0] = 1; p->rin[0] = 0; p->rmul[0] = 1; p->nr = 1; }
  if (p->K == 0) p->rsize[p->nr - 1] = 0;
  p->dt = in->dtype;
  p->isz = tpurt_dtype_size(in->dtype);
  bool in_float = tpurt_dtype_is_floating(in->dtype);
  bool out_float = s->out && tpurt_dtype_is_floating(s->out->dtype);
  /* Integer results stay exact in int64 (sum/prod/max/min/arg of ints and
   * bools into an integer output); everything else accumulates in double. */
  bool int_compute = !in_float && s->op <= TPURT_REDUCE_ARGMIN && s->post == TPURT_REDUCE_POST_NONE &&
                     !out_float;
  p->int_load = !in_float && (int_compute || op_is_logical(s->op));
  p->int_result = int_compute || op_is_logical(s->op);
  return TPURT_OK;
}

static void acc_init(const tpurt_reduce_spec_t* s, acc_t* a) {
  a->v = 0; a->i = 0; a->idx = -1;
  switch (s->op) {
    case TPURT_REDUCE_PROD: a->v = 1; a->i = 1; break;
    case TPURT_REDUCE_MAX: case TPURT_REDUCE_ARGMAX: a->v = -INFINITY; a->i = INT64_MIN; break;
    case TPURT_REDUCE_MIN: case TPURT_REDUCE_ARGMIN: a->v = INFINITY; a->i = INT64_MAX; break;
    case TPURT_REDUCE_ALL: a->i = 1; break;
    case TPURT_REDUCE_ABS_MIN: a->v = INFINITY; break;
    default: break;
  }
}

/* a := a (+) b, where b covers later-or-disjoint elements; ties on ARG ops
 * pick the lower index. */
static void acc_merge(const tpurt_reduce_spec_t* s, const plan_t* p, acc_t* a, const acc_t* b) {
  switch (s->op) {
    case TPURT_REDUCE_SUM: case TPURT_REDUCE_NANSUM: case TPURT_REDUCE_ABS_POW:
    case TPURT_REDUCE_SQDEV: case TPURT_REDUCE_EXPSUM:
      a->v += b->v; a->i = (int64_t)((uint64_t)a->i + (uint64_t)b->i); break;
    case TPURT_REDUCE_COUNT_NZ: a->i += b->i; break;
    case TPURT_REDUCE_PROD: a->v *= b->v; a->i = (int64_t)((uint64_t)a->i * (uint64_t)b->i); break;
    case TPURT_REDUCE_ALL: a->i = a->i && b->i; break;
    case TPURT_REDUCE_ANY: a->i = a->i || b->i; break;
    case TPURT_REDUCE_MAX: case TPURT_REDUCE_ABS_MAX:
      if (p->int_result) { if (b->i > a->i) a->i = b->i; }
      else if (isnan(b->v) || b->v > a->v) a->v = isnan(a->v) ? a->v : b->v;
      break;
    case TPURT_REDUCE_MIN: case TPURT_REDUCE_ABS_MIN:
      if (p->int_result) { if (b->i < a->i) a->i = b->i; }
      else if (isnan(b->v) || b->v < a->v) a->v = isnan(a->v) ? a->v : b->v;
      break;
    case TPURT_REDUCE_ARGMAX: case TPURT_REDUCE_ARGMIN: {
      if (b->idx < 0) break;
      if (a->idx < 0) { *a = *b; break; }
      bool take, tie;
      bool mx = s->op == TPURT_REDUCE_ARGMAX;
      if (p->int_result) {
        take = mx ? b->i > a->i : b->i < a->i;
        tie = b->i == a->i;
      } else {
        bool an = isnan(a->v), bn = isnan(b->v);
        if (an || bn) { take = bn && !an; tie = an && bn; }
        else { take = mx ? b->v > a->v : b->v < a->v; tie = b->v == a->v; }
      }
      if (take || (tie && b->idx < a->idx)) *a = *b;
      break;
    }
  }
}

/* Updates `a` with n values from a double buffer; idx0 = index of buf[0]. */
static void acc_update_f64(const tpurt_reduce_spec_t* s, acc_t* a, const double* buf, int64_t n,
                           int64_t idx0, double param) {
  switch (s->op) {
    case TPURT_REDUCE_SUM: {
      /* 16 lanes (four 4-wide or two 8-wide vectors): enough independent
       * chains to hide the add latency */
      double l[16] = {0};
      int64_t i = 0;
      for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; ++j) l[j] += buf[i + j];
      double t = 0;
      for (; i < n; ++i) t += buf[i];
      for (int j = 0; j < 8; ++j) l[j] += l[j + 8];
      for (int j = 0; j < 4; ++j) l[j] += l[j + 4];
      a->v += ((l[0] + l[1]) + (l[2] + l[3])) + t;
      break;
    }
    case TPURT_REDUCE_NANSUM: {
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += isnan(buf[i]) ? 0.0 : buf[i];
      a->v += acc;
      break;
    }
    case TPURT_REDUCE_PROD: for (int64_t i = 0; i < n; ++i) a->v *= buf[i]; break;
    case TPURT_REDUCE_MAX: case TPURT_REDUCE_ABS_MAX: {
      bool ab = s->op == TPURT_REDUCE_ABS_MAX;
      double m = a->v;
      int nan = 0;
      for (int64_t i = 0; i < n; ++i) {
        double x = ab ? fabs(buf[i]) : buf[i];
        nan |= x != x;
        m = x > m ? x : m;
      }
      if (!isnan(a->v)) a->v = nan ? NAN : m;
      break;
    }
    case TPURT_REDUCE_MIN: case TPURT_REDUCE_ABS_MIN: {
      bool ab = s->op == TPURT_REDUCE_ABS_MIN;
      double m = a->v;
      int nan = 0;
      for (int64_t i = 0; i < n; ++i) {
        double x = ab ? fabs(buf[i]) : buf[i];
        nan |= x != x;
        m = x < m ? x : m;
      }
      if (!isnan(a->v)) a->v = nan ? NAN : m;
      break;
    }
    case TPURT_REDUCE_ARGMAX:
      for (int64_t i = 0; i < n; ++i) {
        double x = buf[i];
        if (a->idx < 0 || x > a->v || (x != x && a->v == a->v)) { a->v = x; a->idx = idx0 + i; }
      }
      break;
    case TPURT_REDUCE_ARGMIN:
      for (int64_t i = 0; i < n; ++i) {
        double x = buf[i];
        if (a->idx < 0 || x < a->v || (x != x && a->v == a->v)) { a->v = x; a->idx = idx0 + i; }
      }
      break;
    case TPURT_REDUCE_ALL: for (int64_t i = 0; i < n; ++i) a->i &= buf[i] != 0; break;
    case TPURT_REDUCE_ANY: for (int64_t i = 0; i < n; ++i) a->i |= buf[i] != 0; break;
    case TPURT_REDUCE_COUNT_NZ: for (int64_t i = 0; i < n; ++i) a->i += buf[i] != 0; break;
    case TPURT_REDUCE_ABS_POW: {
      double acc = 0, p = s->p;
      if (p == 2) for (int64_t i = 0; i < n; ++i) acc += buf[i] * buf[i];
      else if (p == 1) for (int64_t i = 0; i < n; ++i) acc += fabs(buf[i]);
      else if (p == 0) for (int64_t i = 0; i < n; ++i) acc += buf[i] != 0;
      else for (int64_t i = 0; i < n; ++i) acc += pow(fabs(buf[i]), p);
      a->v += acc;
      break;
    }
    case TPURT_REDUCE_SQDEV: {
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) { double d = buf[i] - param; acc += d * d; }
      a->v += acc;
      break;
    }
    case TPURT_REDUCE_EXPSUM: {
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += exp(buf[i] - param);
      a->v += acc;
      break;
    }
  }
}

static void acc_update_i64(const tpurt_reduce_spec_t* s, acc_t* a, const int64_t* buf, int64_t n,
                           int64_t idx0) {
  switch (s->op) {
    case TPURT_REDUCE_SUM: case TPURT_REDUCE_NANSUM: {
      uint64_t acc = (uint64_t)a->i;
      for (int64_t i = 0; i < n; ++i) acc += (uint64_t)buf[i];
      a->i = (int64_t)acc;
      break;
    }
    case TPURT_REDUCE_PROD: {
      uint64_t acc = (uint64_t)a->i;
      for (int64_t i = 0; i < n; ++i) acc *= (uint64_t)buf[i];
      a->i = (int64_t)acc;
      break;
    }
    case TPURT_REDUCE_MAX: for (int64_t i = 0; i < n; ++i) a->i = buf[i] > a->i ? buf[i] : a->i; break;
    case TPURT_REDUCE_MIN: for (int64_t i = 0; i < n; ++i) a->i = buf[i] < a->i ? buf[i] : a->i; break;
    case TPURT_REDUCE_ARGMAX:
      for (int64_t i = 0; i < n; ++i)
        if (a->idx < 0 || buf[i] > a->i) { a->i = buf[i]; a->idx = idx0 + i; }
      break;
    case TPURT_REDUCE_ARGMIN:
      for (int64_t i = 0; i < n; ++i)
        if (a->idx < 0 || buf[i] < a->i) { a->i = buf[i]; a->idx = idx0 + i; }
      break;
    case TPURT_REDUCE_ALL: for (int64_t i = 0; i < n; ++i) a->i &= buf[i] != 0; break;
    case TPURT_REDUCE_ANY: for (int64_t i = 0; i < n; ++i) a->i |= buf[i] != 0; break;
    case TPURT_REDUCE_COUNT_NZ: for (int64_t i = 0; i < n; ++i) a->i += buf[i] != 0; break;
    default: break;
  }
}

/* The sum of a contiguous row in float32 blocks of 1024 (each block's float sum added in double):
 * 64 lanes, so the compiler keeps four independent vector sums where one 16-lane sum was one chain
 * of dependent adds; 16 lanes for short rows and block ends. X_AT(i) is element i as a float: a
 * float32 row, or bf16 widened as it is read (one pass; converting 1024 into a buffer first took two:
 * rows of 8192 bf16 in L3 summed at 72-77 GB/s against 133-137 now, 2 cores; float32 level). */
#define ROW_SUM_BLOCKS(X_AT)                                                                       \
  double total = 0;                                                                                \
  for (int64_t b = 0; b < n; b += 1024) {                                                          \
    int64_t e = b + 1024 < n ? b + 1024 : n;                                                       \
    float l[64] = {0};                                                                             \
    int64_t i = b;                                                                                 \
    for (; i + 64 <= e; i += 64)                                                                   \
      for (int j = 0; j < 64; ++j) l[j] += X_AT(i + j);                                            \
    for (; i + 16 <= e; i += 16) /* short rows and block ends: 16 lanes, as before the 64 */      \
      for (int j = 0; j < 16; ++j) l[j] += X_AT(i + j);                                            \
    float t = 0;                                                                                   \
    for (; i < e; ++i) t += X_AT(i);                                                               \
    for (int w = 32; w >= 4; w /= 2)                                                               \
      for (int j = 0; j < w; ++j) l[j] += l[j + w];                                                \
    total += (double)((l[0] + l[1]) + (l[2] + l[3])) + t;                                          \
  }
#define F32_AT(i) x[i]
static double row_sum_f32(const float* x, int64_t n) {
  ROW_SUM_BLOCKS(F32_AT)
  return total;
}
#define BF16_AT(i) tpurt_bf16_to_f32(x[i])
static double row_sum_bf16(const uint16_t* x, int64_t n) {
  ROW_SUM_BLOCKS(BF16_AT)
  return total;
}

/* float32 contiguous fast path for SUM/MAX/MIN: float lanes within blocks of
 * 1024, blocks added in double. Returns false when it does not apply. */
static bool row_fast_f32(const tpurt_reduce_spec_t* s, acc_t* a, const float* x, int64_t n) {
  if (s->op == TPURT_REDUCE_SUM) {
    a->v += row_sum_f32(x, n);
    return true;
  }
  if (s->op == TPURT_REDUCE_MAX || s->op == TPURT_REDUCE_MIN) {
    bool mx = s->op == TPURT_REDUCE_MAX;
    float l[16];
    int nanl[16] = {0};
    for (int j = 0; j < 16; ++j) l[j] = mx ? -INFINITY : INFINITY;
    int64_t i = 0;
    if (mx)
      for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; ++j) { float v = x[i + j]; nanl[j] |= v != v; l[j] = v > l[j] ? v : l[j]; }
    else
      for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; ++j) { float v = x[i + j]; nanl[j] |= v != v; l[j] = v < l[j] ? v : l[j]; }
    double m = a->v;
    int nan = isnan(m);
    for (int j = 0; j < 16; ++j) {
      nan |= nanl[j];
      m = mx ? (l[j] > m ? l[j] : m) : (l[j] < m ? l[j] : m);
    }
    for (; i < n; ++i) {
      double v = x[i];
      nan |= v != v;
      m = mx ? (v > m ? v : m) : (v < m ? v : m);
    }
    a->v = nan ? NAN : m;
    return true;
  }
  return false;
}

/* Reduces one strided row of n elements at base. */
static void row_update_at(const tpurt_reduce_spec_t* s, const plan_t* p, acc_t* a, const char* base,
                          int64_t stride, int64_t n, int64_t idx0, double param) {
  if (p->dt == TPURT_DTYPE_FLOAT32 && stride == 1 && !p->int_load &&
      row_fast_f32(s, a, (const float*)base, n))
    return;
  if (p->dt == TPURT_DTYPE_BFLOAT16 && stride == 1 && s->op == TPURT_REDUCE_SUM) {
    a->v += row_sum_bf16((const uint16_t*)base, n); /* widened as read: one pass */
    return;
  }
  if ((p->dt == TPURT_DTYPE_BFLOAT16 || p->dt == TPURT_DTYPE_FLOAT16) && stride == 1 &&
      (s->op == TPURT_REDUCE_SUM || s->op == TPURT_REDUCE_MAX || s->op == TPURT_REDUCE_MIN)) {
    /* contiguous 16-bit: converted to float by the vector converters, 1024 at
     * a time (the float32 path's blocks), then that path */
    float f[1024];
    for (int64_t b = 0; b < n; b += 1024) {
      int64_t m = n - b < 1024 ? n - b : 1024;
      tpurt_hv_to_f32(p->dt, (const uint16_t*)base + b, f, m);
      row_fast_f32(s, a, f, m);
    }
    return;
  }
  if (p->int_load) {
    int64_t buf[CHUNK];
    for (int64_t b = 0; b < n; b += CHUNK) {
      int64_t m = n - b < CHUNK ? n - b : CHUNK;
      row_load_i64(p->dt, base + b * stride * (int64_t)p->isz, stride, m, buf);
      acc_update_i64(s, a, buf, m, idx0 + b);
    }
  } else {
    double buf[CHUNK];
    for (int64_t b = 0; b < n; b += CHUNK) {
      int64_t m = n - b < CHUNK ? n - b : CHUNK;
      if (p->dt == TPURT_DTYPE_FLOAT64 && stride == 1) {
        acc_update_f64(s, a, (const double*)base + b, m, idx0 + b, param);
        continue;
      }
      tpurt_row_load_f64(p->dt, base + b * stride * (int64_t)p->isz, stride, m, buf);
      acc_update_f64(s, a, buf, m, idx0 + b, param);
    }
  }
}

/* Reduces one strided row of n elements starting at element offset `off`;
 * from a fused chain's source (reduce.h) when there is one. */
static void row_update(const tpurt_reduce_spec_t* s, const plan_t* p, acc_t* a, int64_t off,
                       int64_t stride, int64_t n, int64_t idx0, double param,
                       const tpurt_reduce_source_t* src, int tid) {
  if (TPURT_UNLIKELY(src != NULL)) {
    for (int64_t b = 0; b < n; b += src->max_run) {
      int64_t m = n - b < src->max_run ? n - b : src->max_run;
      const char* q = src->produce(src->user, off + b, m, tid);
      row_update_at(s, p, a, q, 1, m, idx0 + b, param);
    }
    return;
  }
  row_update_at(s, p, a, (const char*)s->in->data + off * (int64_t)p->isz, stride, n, idx0, param);
}

/* Offsets of output m: input base, value-output and index-output offsets. */
static void out_offsets(const plan_t* p, int64_t m, int64_t* in_off, int64_t* out_off, int64_t* idx_off) {
  int64_t a = 0, b = 0, c = 0;
  for (int k = p->nk - 1; k >= 0; --k) {
    int64_t r = m % p->ksize[k];
    m /= p->ksize[k];
    a += r * p->kin[k]; b += r * p->kout[k]; c += r * p->kidx[k];
  }
  *in_off = a; *out_off = b; *idx_off = c;
}

/* Reduces linear reduced indices [rb, re) of the output whose input base is in_off. */
static void reduce_range(const tpurt_reduce_spec_t* s, const plan_t* p, acc_t* a, int64_t in_off,
                         int64_t rb, int64_t re, double param, const tpurt_reduce_source_t* src, int tid) {
  int last = p->nr - 1;
  int64_t n0 = p->rsize[last], s0 = p->rin[last];
  if (n0 == 0) return;
  int64_t r = rb;
  while (r < re) {
    int64_t outer = r / n0, i0 = r % n0;
    int64_t len = n0 - i0 < re - r ? n0 - i0 : re - r;
    int64_t off = in_off + i0 * s0, idx = i0;
    for (int k = last - 1; k >= 0; --k) {
      int64_t q = outer % p->rsize[k];
      outer /= p->rsize[k];
      off += q * p->rin[k];
      idx += q * p->rmul[k];
    }
    row_update(s, p, a, off, s0, len, idx, param, src, tid);
    r += len;
  }
}

static void finalize(const tpurt_reduce_spec_t* s, const plan_t* p, int64_t m, int64_t out_off,
                     int64_t idx_off, const acc_t* a) {
  if (s->out_index)
    *((int64_t*)s->out_index->data + idx_off) = a->idx < 0 ? 0 : a->idx;
  if (p->int_result) {
    if (s->out) tpurt_dtype_store_i64(s->out->dtype, tpurt_tensor_at(s->out, out_off), a->i);
    if (s->out_f64) s->out_f64[m] = (double)a->i;
    return;
  }
  double v = a->v;
  double K = (double)p->K;
  switch (s->post) {
    case TPURT_REDUCE_POST_NONE: break;
    case TPURT_REDUCE_POST_MEAN: v = v / K; break;
    case TPURT_REDUCE_POST_VAR: case TPURT_REDUCE_POST_STD: {
      double dof = K - s->correction;
      v = v / (dof > 0 ? dof : 0);
      if (s->post == TPURT_REDUCE_POST_STD) v = sqrt(v);
      break;
    }
    case TPURT_REDUCE_POST_ROOT:
      if (s->p == 2) v = sqrt(v);
      else if (s->p != 1 && s->p != 0) v = pow(v, 1.0 / s->p);
      break;
    case TPURT_REDUCE_POST_LOG_PARAM: v = log(v) + (s->param ? s->param[m] : 0); break;
  }
  if (s->out) tpurt_dtype_store_f64(s->out->dtype, tpurt_tensor_at(s->out, out_off), v);
  if (s->out_f64) s->out_f64[m] = v;
}

/* ---- strategies ---- */

typedef struct job_t {
  const tpurt_reduce_spec_t* s;
  const plan_t* p;
  /* split strategy */
  int64_t m, in_off;
  acc_t* partials;
  bool* touched;
  const tpurt_reduce_source_t* src; /* the input comes from a fused chain */
  /* vertical strategy */
  int64_t vblocks_per_row, vC, vtile;
} job_t;

static void per_output_fn(void* user, int64_t b, int64_t e, int tid) {
  const job_t* j = user;
  for (int64_t m = b; m < e; ++m) {
    int64_t io, oo, xo;
    out_offsets(j->p, m, &io, &oo, &xo);
    acc_t a;
    acc_init(j->s, &a);
    reduce_range(j->s, j->p, &a, io, 0, j->p->K, j->s->param ? j->s->param[m] : 0, j->src, tid);
    finalize(j->s, j->p, m, oo, xo, &a);
  }
}

static void split_fn(void* user, int64_t b, int64_t e, int tid) {
  const job_t* j = user;
  acc_t a;
  acc_init(j->s, &a);
  reduce_range(j->s, j->p, &a, j->in_off, b, e, j->s->param ? j->s->param[j->m] : 0, j->src, tid);
  if (!j->touched[tid]) { j->partials[tid] = a; j->touched[tid] = true; }
  else acc_merge(j->s, j->p, &j->partials[tid], &a);
}

/* Vertical: the last kept dim is contiguous in the input (e.g. sum over dim 0
 * of an (N, C) matrix, the bias gradient of a linear layer). A unit is one
 * outer kept index and a tile of up to VW columns: its double accumulators
 * stay in L1 while every reduced row streams through them, each row one
 * contiguous run converted and added lane-wise (the loops vectorize at
 * whatever width the build targets: AVX-512, AVX2 or SSE2). Each output is
 * accumulated in double over the reduced rows in order, whatever the tile
 * width or thread count, so results are bit-stable across thread counts. */
#define VW 2048
static bool vertical_ok(const tpurt_reduce_spec_t* s, const plan_t* p) {
  if (p->nk == 0 || p->kin[p->nk - 1] != 1 || p->ksize[p->nk - 1] < 8) return false;
  if (p->rin[p->nr - 1] == 1 || p->K < 2 || p->int_load) return false;
  switch (s->op) {
    case TPURT_REDUCE_SUM: case TPURT_REDUCE_MAX: case TPURT_REDUCE_MIN: case TPURT_REDUCE_SQDEV:
      return true;
    case TPURT_REDUCE_ABS_POW: return s->p == 1 || s->p == 2;
    default: return false;
  }
}

/* acc[c] += x_0[c] + ... + x_{n-1}[c] for n <= VR rows of w elements of dtype
 * dt (SUM, the common case), added in row order (((acc + x_0) + x_1) + ...),
 * so grouping rows changes no result; it keeps acc in registers across the
 * group. The conversion is fused into the adds. */
#define VR 8
#define BF(x) tpurt_bf16_to_f32(x)
#define DEF_VSUM(NAME, T, CONV)                                                           \
  static void NAME##8(double* restrict acc, const T* restrict x0, const T* restrict x1,   \
                      const T* restrict x2, const T* restrict x3, const T* restrict x4,   \
                      const T* restrict x5, const T* restrict x6, const T* restrict x7,   \
                      int64_t w) {                                                        \
    for (int64_t c = 0; c < w; ++c)                                                       \
      acc[c] = acc[c] + (double)CONV(x0[c]) + (double)CONV(x1[c]) + (double)CONV(x2[c]) + \
               (double)CONV(x3[c]) + (double)CONV(x4[c]) + (double)CONV(x5[c]) +          \
               (double)CONV(x6[c]) + (double)CONV(x7[c]);                                 \
  }                                                                                       \
  static void NAME##1(double* restrict acc, const T* restrict x, int64_t w) {             \
    for (int64_t c = 0; c < w; ++c) acc[c] += (double)CONV(x[c]);                         \
  }
DEF_VSUM(vsum_f32_, float, ID)
DEF_VSUM(vsum_f64_, double, ID)
DEF_VSUM(vsum_bf16_, uint16_t, BF)

#define VSUM_ROWS(NAME, T)                                                               \
  do {                                                                                   \
    const T* const* x = (const T* const*)rows;                                           \
    if (n == VR) NAME##8(acc, x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], w);        \
    else for (int r = 0; r < n; ++r) NAME##1(acc, x[r], w);                              \
  } while (0)

static void vsum_rows(tpurt_dtype_t dt, const char* const* rows, int n, int64_t w,
                      double* restrict acc, float* restrict fbuf, double* restrict dbuf) {
  switch (dt) {
    case TPURT_DTYPE_FLOAT32: VSUM_ROWS(vsum_f32_, float); return;
    case TPURT_DTYPE_FLOAT64: VSUM_ROWS(vsum_f64_, double); return;
    case TPURT_DTYPE_BFLOAT16: VSUM_ROWS(vsum_bf16_, uint16_t); return;
    case TPURT_DTYPE_FLOAT16:
      for (int r = 0; r < n; ++r) {
        tpurt_hv_f16_to_f32((const uint16_t*)rows[r], fbuf, w);
        for (int64_t c = 0; c < w; ++c) acc[c] += (double)fbuf[c];
      }
      return;
    default:
      for (int r = 0; r < n; ++r) {
        tpurt_row_load_f64(dt, rows[r], 1, w, dbuf);
        for (int64_t c = 0; c < w; ++c) acc[c] += dbuf[c];
      }
      return;
  }
}

static void vertical_fn(void* user, int64_t b, int64_t e, int tid) {
  (void)tid;
  const job_t* j = user;
  const tpurt_reduce_spec_t* s = j->s;
  const plan_t* p = j->p;
  double acc[VW], buf[VW], par[VW];
  float fbuf[VW];
  int nanf[VW];
  for (int64_t blk = b; blk < e; ++blk) {
    int64_t row = blk / j->vblocks_per_row;
    int64_t c0 = (blk % j->vblocks_per_row) * j->vtile;
    int64_t w = j->vC - c0 < j->vtile ? j->vC - c0 : j->vtile;
    int64_t m0 = row * j->vC + c0;
    int64_t io, oo, xo;
    out_offsets(p, m0, &io, &oo, &xo);
    acc_t init;
    acc_init(s, &init);
    for (int64_t c = 0; c < w; ++c) {
      acc[c] = init.v; nanf[c] = 0;
      par[c] = s->param ? s->param[m0 + c] : 0;
    }
    int64_t cnt[TPURT_MAX_DIMS] = {0};
    int64_t off = io;
    const char* rows[VR];
    int nrow = 0;
    for (int64_t r = 0; r < p->K; ++r) {
      const char* src = (const char*)s->in->data + off * (int64_t)p->isz;
      /* advance the reduced counters (innermost last) */
      for (int k = p->nr - 1; k >= 0; --k) {
        off += p->rin[k];
        if (++cnt[k] < p->rsize[k]) break;
        off -= p->rin[k] * p->rsize[k];
        cnt[k] = 0;
      }
      if (s->op == TPURT_REDUCE_SUM) {
        rows[nrow++] = src;
        if (nrow == VR || r == p->K - 1) {
          vsum_rows(p->dt, rows, nrow, w, acc, fbuf, buf);
          nrow = 0;
        }
        continue;
      }
      const double* x = buf;
      if (p->dt == TPURT_DTYPE_FLOAT64) x = (const double*)src;
      else tpurt_row_load_f64(p->dt, src, 1, w, buf);
      switch (s->op) {
        case TPURT_REDUCE_MAX:
          for (int64_t c = 0; c < w; ++c) { nanf[c] |= x[c] != x[c]; acc[c] = x[c] > acc[c] ? x[c] : acc[c]; }
          break;
        case TPURT_REDUCE_MIN:
          for (int64_t c = 0; c < w; ++c) { nanf[c] |= x[c] != x[c]; acc[c] = x[c] < acc[c] ? x[c] : acc[c]; }
          break;
        case TPURT_REDUCE_SQDEV:
          for (int64_t c = 0; c < w; ++c) { double d = x[c] - par[c]; acc[c] += d * d; }
          break;
        case TPURT_REDUCE_ABS_POW:
          if (s->p == 2) for (int64_t c = 0; c < w; ++c) acc[c] += x[c] * x[c];
          else for (int64_t c = 0; c < w; ++c) acc[c] += fabs(x[c]);
          break;
        default: break;
      }
    }
    int64_t ostride = p->kout[p->nk - 1], xstride = p->kidx[p->nk - 1];
    if (s->op == TPURT_REDUCE_SUM && !s->out_index && !p->int_result &&
        (s->post == TPURT_REDUCE_POST_NONE || s->post == TPURT_REDUCE_POST_MEAN)) {
      /* finalize's values for the whole tile, stored as a row */
      if (s->post == TPURT_REDUCE_POST_MEAN) {
        double K = (double)p->K;
        for (int64_t c = 0; c < w; ++c) acc[c] = acc[c] / K;
      }
      if (s->out) tpurt_row_store_f64(s->out->dtype, tpurt_tensor_at(s->out, oo), ostride, w, acc);
      if (s->out_f64) memcpy(s->out_f64 + m0, acc, sizeof(double) * (size_t)w);
      continue;
    }
    for (int64_t c = 0; c < w; ++c) {
      acc_t a = init;
      a.v = nanf[c] ? NAN : acc[c];
      finalize(s, p, m0 + c, oo + c * ostride, xo + c * xstride, &a);
    }
  }
}

static int64_t g_split_min_k = 65536;
/* Test hook: the K above which a small-output reduction splits over threads. */
void tpurt_reduce_set_split_min(int64_t k) { g_split_min_k = k; }

int64_t tpurt_reduce_num_outputs(const tpurt_reduce_spec_t* spec) {
  int64_t m = 1;
  for (int d = 0; d < spec->in->ndim; ++d) if (!spec->mask[d]) m *= spec->in->sizes[d];
  return m;
}
int64_t tpurt_reduce_num_reduced(const tpurt_reduce_spec_t* spec) {
  int64_t k = 1;
  for (int d = 0; d < spec->in->ndim; ++d) if (spec->mask[d]) k *= spec->in->sizes[d];
  return k;
}

void tpurt_reduce_for_each(const tpurt_tensor_t* in, const bool mask[TPURT_MAX_DIMS],
                           void (*fn)(void* user, int64_t in_offset, int64_t out_pos), void* user) {
  int32_t nd = in->ndim;
  int64_t n = tpurt_tensor_numel(in), idx[TPURT_MAX_DIMS] = {0}, ostride[TPURT_MAX_DIMS] = {0};
  if (n == 0) return;
  for (int64_t d = nd - 1, st = 1; d >= 0; --d) /* row-major strides among the kept dims */
    if (!mask[d]) ostride[d] = st, st *= in->sizes[d];
  int64_t off = 0, pos = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(user, off, pos);
    for (int32_t d = nd - 1; d >= 0; --d) {
      if (++idx[d] < in->sizes[d]) {
        off += in->strides[d], pos += ostride[d];
        break;
      }
      off -= (in->sizes[d] - 1) * in->strides[d], pos -= (in->sizes[d] - 1) * ostride[d];
      idx[d] = 0;
    }
  }
}

int64_t tpurt_reduce_out_offset(const tpurt_tensor_t* out, int64_t pos) {
  int64_t off = 0;
  for (int32_t d = out->ndim - 1; d >= 0; --d) {
    off += (pos % out->sizes[d]) * out->strides[d];
    pos /= out->sizes[d];
  }
  return off;
}

_Thread_local const tpurt_reduce_source_t* tpurt_reduce_tls_source;

tpurt_status_t tpurt_reduce_run(tpurt_kernel_ctx_t* ctx, const tpurt_reduce_spec_t* s) {
  plan_t p;
  TPURT_RETURN_IF_ERROR(plan_build(s, &p));
  if (p.M == 0) return TPURT_OK;
  job_t j = {.s = s, .p = &p};
  const tpurt_reduce_source_t* src = tpurt_reduce_tls_source;
  if (TPURT_UNLIKELY(src != NULL) && src->data == s->in->data) {
    /* A fused chain's value (reduce.h): only as contiguous runs, one
     * per output (the reduced dims innermost), so never the vertical path. */
    if (!tpurt_tensor_is_contiguous(s->in) || p.nr != 1 || p.rin[0] != 1 || p.K == 0)
      return TPURT_STATUS(ABORTED, "%s: a fused chain's value is reduced only over its innermost dims",
                          s->op_name);
    src->accepted(src->user);
    j.src = src;
  }
  int nt = tpurt_kernel_num_threads(ctx);
  if (p.M < 2 * (int64_t)nt && p.K >= g_split_min_k && (nt > 1 || g_split_min_k < 65536)) {
    acc_t* partials = tpurt_kernel_scratch(ctx, sizeof(acc_t) * (size_t)nt);
    bool* touched = tpurt_kernel_scratch(ctx, sizeof(bool) * (size_t)nt);
    if (!partials || !touched) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch memory", s->op_name);
    j.partials = partials;
    j.touched = touched;
    int64_t grain = g_split_min_k / 4 > 1024 ? g_split_min_k / 4 : 1024;
    for (int64_t m = 0; m < p.M; ++m) {
      int64_t io, oo, xo;
      out_offsets(&p, m, &io, &oo, &xo);
      memset(touched, 0, sizeof(bool) * (size_t)nt);
      j.m = m;
      j.in_off = io;
      tpurt_parallel_for(ctx, p.K, grain, split_fn, &j);
      acc_t a;
      acc_init(s, &a);
      for (int t = 0; t < nt; ++t) if (touched[t]) acc_merge(s, &p, &a, &partials[t]);
      finalize(s, &p, m, oo, xo, &a);
    }
    return TPURT_OK;
  }
  if (vertical_ok(s, &p)) { /* never with a source: it needs rin != 1 */
    j.vC = p.ksize[p.nk - 1];
    /* Tiles of up to VW columns; narrower (down to 64) when that is what
     * gives every thread a unit. The tile width never changes a result. */
    int64_t outer = p.M / j.vC, ntile = (j.vC + VW - 1) / VW;
    if (outer * ntile < nt) {
      int64_t want = (nt + outer - 1) / outer, most = (j.vC + 63) / 64;
      ntile = want < most ? want : most;
    }
    j.vtile = ((j.vC + ntile - 1) / ntile + 15) / 16 * 16;
    if (j.vtile > VW) j.vtile = VW;
    j.vblocks_per_row = (j.vC + j.vtile - 1) / j.vtile;
    int64_t nblk = outer * j.vblocks_per_row;
    int64_t grain = (65536 / (p.K * j.vtile)) + 1;
    tpurt_parallel_for(ctx, nblk, grain, vertical_fn, &j);
    return TPURT_OK;
  }
  int64_t grain = p.K >= 32768 ? 1 : 32768 / (p.K + 1) + 1;
  tpurt_parallel_for(ctx, p.M, grain, per_output_fn, &j);
  return TPURT_OK;
}

/* ---- reference: one output at a time, every element through the generic
 * scalar loaders, the reduced dims walked in row-major order. ---- */

tpurt_status_t tpurt_reduce_run_reference(tpurt_kernel_ctx_t* ctx, const tpurt_reduce_spec_t* s) {
  (void)ctx;
  plan_t p;
  TPURT_RETURN_IF_ERROR(plan_build(s, &p));
  const tpurt_tensor_t* in = s->in;
  int kd[TPURT_MAX_DIMS], rd[TPURT_MAX_DIMS], nk = 0, nr = 0;
  for (int d = 0; d < in->ndim; ++d) { if (s->mask[d]) rd[nr++] = d; else kd[nk++] = d; }
  for (int64_t m = 0; m < p.M; ++m) {
    int64_t base = 0, rem = m;
    for (int k = nk - 1; k >= 0; --k) {
      base += (rem % in->sizes[kd[k]]) * in->strides[kd[k]];
      rem /= in->sizes[kd[k]];
    }
    double param = s->param ? s->param[m] : 0;
    acc_t a;
    acc_init(s, &a);
    for (int64_t r = 0; r < p.K; ++r) {
      int64_t off = base, rr = r;
      for (int k = nr - 1; k >= 0; --k) {
        off += (rr % in->sizes[rd[k]]) * in->strides[rd[k]];
        rr /= in->sizes[rd[k]];
      }
      const void* ptr = tpurt_tensor_at(in, off);
      if (p.int_load) {
        int64_t x = tpurt_dtype_load_i64(in->dtype, ptr);
        switch (s->op) {
          case TPURT_REDUCE_SUM: case TPURT_REDUCE_NANSUM: a.i = (int64_t)((uint64_t)a.i + (uint64_t)x); break;
          case TPURT_REDUCE_PROD: a.i = (int64_t)((uint64_t)a.i * (uint64_t)x); break;
          case TPURT_REDUCE_MAX: if (x > a.i) a.i = x; break;
          case TPURT_REDUCE_MIN: if (x < a.i) a.i = x; break;
          case TPURT_REDUCE_ARGMAX: if (a.idx < 0 || x > a.i) { a.i = x; a.idx = r; } break;
          case TPURT_REDUCE_ARGMIN: if (a.idx < 0 || x < a.i) { a.i = x; a.idx = r; } break;
          case TPURT_REDUCE_ALL: a.i = a.i && x != 0; break;
          case TPURT_REDUCE_ANY: a.i = a.i || x != 0; break;
          case TPURT_REDUCE_COUNT_NZ: a.i += x != 0; break;
          default: break;
        }
      } else {
        double x = tpurt_dtype_load_f64(in->dtype, ptr);
        switch (s->op) {
          case TPURT_REDUCE_SUM: a.v += x; break;
          case TPURT_REDUCE_NANSUM: if (!isnan(x)) a.v += x; break;
          case TPURT_REDUCE_PROD: a.v *= x; break;
          case TPURT_REDUCE_MAX: if (isnan(a.v) || isnan(x)) a.v = NAN; else if (x > a.v) a.v = x; break;
          case TPURT_REDUCE_MIN: if (isnan(a.v) || isnan(x)) a.v = NAN; else if (x < a.v) a.v = x; break;
          case TPURT_REDUCE_ABS_MAX:
            if (isnan(a.v) || isnan(x)) a.v = NAN; else if (fabs(x) > a.v) a.v = fabs(x); break;
          case TPURT_REDUCE_ABS_MIN:
            if (isnan(a.v) || isnan(x)) a.v = NAN; else if (fabs(x) < a.v) a.v = fabs(x); break;
          case TPURT_REDUCE_ARGMAX:
            if (a.idx < 0) { a.v = x; a.idx = r; }
            else if (!isnan(a.v) && (isnan(x) || x > a.v)) { a.v = x; a.idx = r; }
            break;
          case TPURT_REDUCE_ARGMIN:
            if (a.idx < 0) { a.v = x; a.idx = r; }
            else if (!isnan(a.v) && (isnan(x) || x < a.v)) { a.v = x; a.idx = r; }
            break;
          case TPURT_REDUCE_ALL: a.i = a.i && x != 0; break;
          case TPURT_REDUCE_ANY: a.i = a.i || x != 0; break;
          case TPURT_REDUCE_COUNT_NZ: a.i += x != 0; break;
          case TPURT_REDUCE_ABS_POW:
            a.v += s->p == 0 ? (double)(x != 0) : pow(fabs(x), s->p);
            break;
          case TPURT_REDUCE_SQDEV: a.v += (x - param) * (x - param); break;
          case TPURT_REDUCE_EXPSUM: a.v += exp(x - param); break;
        }
      }
    }
    int64_t io, oo, xo;
    out_offsets(&p, m, &io, &oo, &xo);
    finalize(s, &p, m, oo, xo, &a);
  }
  return TPURT_OK;
}
