/* Random kernels: uniform_, normal_/normal, bernoulli_/bernoulli, random_,
 * exponential_, geometric_, cauchy_, log_normal_, native_dropout (+backward).
 * Element i (row-major index in the output) draws from Philox block
 * offset + i/4 lane i%4 (one 32-bit draw), block offset + i/2 (two draws:
 * 64-bit values, Box-Muller pairs), so the stream depends only on
 * (seed, offset, i) and never on the thread count; the PyTorch layer reserves
 * >= numel + 4 counters per call, more than any kernel here uses. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/ew_ops.h"
#include "ops/elementwise/philox.h"
#include "ops/elementwise/random_list.h"
#include "ops/elementwise/ew_simd.h"
#include "ops/elementwise/ew_vmath.h"
#include "ops/half_vec.h"

enum {
  RK_UNIFORM = 0, /* from + u * (to - from) */
  RK_NORMAL,      /* mean + std * z; mean/std may be tensors */
  RK_BERNOULLI,   /* u < p; p may be a tensor */
  RK_RANDOM,      /* integer in [from, from + range) */
  RK_EXPONENTIAL,
  RK_GEOMETRIC,
  RK_CAUCHY,
  RK_LOG_NORMAL,
  RK_DROPOUT,     /* out = keep ? x * scale : 0, mask = keep */
};

typedef struct rnd_job_t {
  int kind;
  uint64_t seed, offset;
  double prm[3];
  uint64_t range; /* RK_RANDOM */
  int64_t from;   /* RK_RANDOM */
  bool dbl;       /* draw with 53-bit precision (float64 outputs) */
  const tpurt_tensor_t* out;
  const tpurt_tensor_t* out2;       /* dropout mask */
  const tpurt_tensor_t* in[2];      /* broadcast to out (RK_NORMAL: mean, std; RK_BERNOULLI: p; dropout: x) */
  int64_t in_strides[2][TPURT_MAX_DIMS];
} rnd_job_t;

static double rnd_unit(const rnd_job_t* j, int64_t i) {
  if (j->dbl) {
    tpurt_philox_out_t r = tpurt_philox4x32_10(j->seed, j->offset + (uint64_t)i / 2, 0);
    int l = (int)(i & 1) * 2;
    return tpurt_philox_u64_to_unit_d(((uint64_t)r.v[l] << 32) | r.v[l + 1]);
  }
  tpurt_philox_out_t r = tpurt_philox4x32_10(j->seed, j->offset + (uint64_t)i / 4, 0);
  return (double)tpurt_philox_u32_to_unit_f(r.v[i & 3]);
}

/* Box-Muller: a pair from one block, rad cos(th) at even i and rad sin(th) at odd i. Float64
 * outputs draw 53-bit uniforms and compute in double; the others draw 24-bit ones and compute in
 * float with ew_vmath.h's log, sin and cos (rnd_range_dense runs the same functions on vectors). */
static inline float rnd_bm_rad(float u1) { return sqrtf(-2.0f * tpurt_vm_logf(1.0f - u1)); } /* 1 - u1 in (0, 1] */
#define RND_TWO_PI_F 6.28318530717958647692f
static double rnd_normal(const rnd_job_t* j, int64_t i) {
  tpurt_philox_out_t r = tpurt_philox4x32_10(j->seed, j->offset + (uint64_t)i / 2, 0);
  if (j->dbl) {
    double u1 = tpurt_philox_u64_to_unit_d(((uint64_t)r.v[0] << 32) | r.v[1]);
    double u2 = tpurt_philox_u64_to_unit_d(((uint64_t)r.v[2] << 32) | r.v[3]);
    double rad = sqrt(-2.0 * log(1.0 - u1)); /* 1 - u1 in (0, 1] */
    double th = 2.0 * M_PI * u2;
    return (i & 1) ? rad * sin(th) : rad * cos(th);
  }
  const float rad = rnd_bm_rad(tpurt_philox_u32_to_unit_f(r.v[0]));
  const float th = RND_TWO_PI_F * tpurt_philox_u32_to_unit_f(r.v[1]);
  return (i & 1) ? rad * tpurt_vm_sinf(th) : rad * tpurt_vm_cosf(th);
}

static uint64_t rnd_u64(const rnd_job_t* j, int64_t i) {
  tpurt_philox_out_t r = tpurt_philox4x32_10(j->seed, j->offset + (uint64_t)i / 2, 0);
  int l = (int)(i & 1) * 2;
  return ((uint64_t)r.v[l] << 32) | r.v[l + 1];
}

static uint32_t rnd_u32(const rnd_job_t* j, int64_t i) {
  tpurt_philox_out_t r = tpurt_philox4x32_10(j->seed, j->offset + (uint64_t)i / 4, 0);
  return r.v[i & 3];
}

/* One element. Returns the value as double, or sets *is_int and *out_i. */
static double rnd_value(const rnd_job_t* j, int64_t i, const double* in, int64_t* out_i, bool* is_int) {
  switch (j->kind) {
    case RK_UNIFORM: return j->prm[0] + rnd_unit(j, i) * (j->prm[1] - j->prm[0]);
    case RK_NORMAL: {
      double mean = j->in[0] ? in[0] : j->prm[0];
      double sd = j->in[1] ? in[1] : j->prm[1];
      return mean + sd * rnd_normal(j, i);
    }
    case RK_BERNOULLI: {
      double p = j->in[0] ? in[0] : j->prm[0];
      return rnd_unit(j, i) < p ? 1.0 : 0.0;
    }
    case RK_RANDOM: {
      /* PyTorch: 32-bit draws modulo the range when it fits, else 64-bit */
      uint64_t x = (j->range != 0 && j->range <= 0xffffffffull) ? (uint64_t)rnd_u32(j, i) : rnd_u64(j, i);
      *is_int = true;
      *out_i = (int64_t)((uint64_t)j->from + (j->range ? x % j->range : x));
      return 0;
    }
    case RK_EXPONENTIAL: /* float outputs: the logarithm in float (ew_vmath.h's, as rnd_range_dense's vectors) */
      return (j->dbl ? -log1p(-rnd_unit(j, i)) : (double)-tpurt_vm_log1pf(-(float)rnd_unit(j, i))) / j->prm[0];
    case RK_GEOMETRIC: return ceil(log(1.0 - rnd_unit(j, i)) / log1p(-j->prm[0]));
    case RK_CAUCHY: return j->prm[0] + j->prm[1] * tan(M_PI * (rnd_unit(j, i) - 0.5));
    case RK_LOG_NORMAL: return exp(j->prm[0] + j->prm[1] * rnd_normal(j, i));
    case RK_DROPOUT: {
      bool keep = rnd_unit(j, i) < j->prm[0]; /* prm[0] = 1 - p */
      *is_int = true;
      *out_i = keep;
      return keep ? in[0] * j->prm[1] : 0.0;
    }
    default: return 0;
  }
}

/* Elements [begin, end) in row-major order of j->out. */
static void rnd_range(void* user, int64_t begin, int64_t end, int tid) {
  (void)tid;
  const rnd_job_t* j = (const rnd_job_t*)user;
  const tpurt_tensor_t* o = j->out;
  int nd = o->ndim;
  int64_t idx[TPURT_MAX_DIMS];
  int64_t rem = begin;
  for (int d = nd - 1; d >= 0; --d) {
    idx[d] = rem % o->sizes[d];
    rem /= o->sizes[d];
  }
  size_t es = tpurt_dtype_size(o->dtype);
  for (int64_t i = begin; i < end; ++i) {
    int64_t off = 0, off2 = 0, ioff[2] = {0, 0};
    for (int d = 0; d < nd; ++d) {
      off += idx[d] * o->strides[d];
      if (j->out2) off2 += idx[d] * j->out2->strides[d];
      ioff[0] += idx[d] * j->in_strides[0][d];
      ioff[1] += idx[d] * j->in_strides[1][d];
    }
    double in[2] = {0, 0};
    for (int k = 0; k < 2; ++k)
      if (j->in[k])
        in[k] = tpurt_dtype_load_f64(j->in[k]->dtype,
                                     (const char*)j->in[k]->data + ioff[k] * (int64_t)tpurt_dtype_size(j->in[k]->dtype));
    int64_t vi = 0;
    bool is_int = false;
    double v = rnd_value(j, i, in, &vi, &is_int);
    char* p = (char*)o->data + off * (int64_t)es;
    if (j->kind == RK_DROPOUT) {
      tpurt_dtype_store_f64(o->dtype, p, v);
      if (j->out2)
        tpurt_dtype_store_i64(j->out2->dtype, (char*)j->out2->data + off2 * (int64_t)tpurt_dtype_size(j->out2->dtype), vi);
    } else if (is_int) {
      tpurt_dtype_store_i64(o->dtype, p, vi);
    } else {
      tpurt_dtype_store_f64(o->dtype, p, v);
    }
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < o->sizes[d]) break;
      idx[d] = 0;
    }
  }
}

/* uniform_, normal_ and exponential_ with scalar parameters into a contiguous float32 / bfloat16 / float16
 * output: rnd_range's values, each Philox block computed once for the four uniforms or two
 * normals it gives (rnd_range computes it again per element), the Box-Muller pairs' logarithms,
 * cosines and sines and the exponentials' logarithms on vectors, no per-element index or dtype dispatch; 16-bit outputs are
 * rounded from float32 chunks as tpurt_dtype_store_f64 rounds them. */
static bool rnd_dense_ok(const rnd_job_t* j) {
  const tpurt_dtype_t dt = j->out->dtype;
  return (j->kind == RK_UNIFORM || j->kind == RK_NORMAL || j->kind == RK_EXPONENTIAL) && !j->in[0] && !j->in[1] && !j->dbl &&
         (dt == TPURT_DTYPE_FLOAT32 || dt == TPURT_DTYPE_BFLOAT16 || dt == TPURT_DTYPE_FLOAT16) &&
         tpurt_tensor_is_contiguous(j->out);
}
static void rnd_range_dense(void* user, int64_t begin, int64_t end, int tid) {
  (void)tid;
  const rnd_job_t* j = (const rnd_job_t*)user;
  const tpurt_dtype_t dt = j->out->dtype;
  float buf[512];
  for (int64_t c0 = begin; c0 < end; c0 += 512) {
    const int64_t c1 = end - c0 < 512 ? end : c0 + 512;
    float* dst = dt == TPURT_DTYPE_FLOAT32 ? (float*)j->out->data + c0 : buf;
    int64_t i = c0;
    if (j->kind == RK_EXPONENTIAL) {
      /* -log1p(-u) / lambda: the uniforms of [i, c1), their logarithms on vectors, the division in double */
      float u[512];
      const int64_t n = c1 - i;
      for (int64_t k = 0; k < n;) {
        const int64_t e = i + k;
        const tpurt_philox_out_t r = tpurt_philox4x32_10(j->seed, j->offset + (uint64_t)e / 4, 0);
        for (int l = (int)(e & 3); l < 4 && k < n; ++l, ++k) u[k] = -tpurt_philox_u32_to_unit_f(r.v[l]);
      }
      int64_t k = 0;
#if EWV_W
      for (; k + EWV_W <= n; k += EWV_W) ewv_store(u + k, ewv_neg(ewv_log1p(ewv_load(u + k))));
#endif
      for (; k < n; ++k) u[k] = -tpurt_vm_log1pf(u[k]);
      for (k = 0; k < n; ++k) dst[k] = (float)((double)u[k] / j->prm[0]);
      i = c1;
    } else if (j->kind == RK_UNIFORM) {
      const double from = j->prm[0], span = j->prm[1] - j->prm[0];
      while (i < c1) {
        const tpurt_philox_out_t r = tpurt_philox4x32_10(j->seed, j->offset + (uint64_t)i / 4, 0);
        for (int l = (int)(i & 3); l < 4 && i < c1; ++l, ++i)
          dst[i - c0] = (float)(from + (double)tpurt_philox_u32_to_unit_f(r.v[l]) * span);
      }
    } else {
      /* the pairs of [i, c1): their uniforms, then radius, cosine and sine (vectors of them
       * where the build has them), then the outputs */
      const double mean = j->prm[0], sd = j->prm[1];
      const int64_t p0 = i / 2, np = (c1 + 1) / 2 - p0;
      float u1[258], u2[258], rc[258], rs[258]; /* a chunk of 512 from an odd start spans 257 pairs */
      for (int64_t q = 0; q < np; ++q) {
        const tpurt_philox_out_t r = tpurt_philox4x32_10(j->seed, j->offset + (uint64_t)(p0 + q), 0);
        u1[q] = tpurt_philox_u32_to_unit_f(r.v[0]);
        u2[q] = tpurt_philox_u32_to_unit_f(r.v[1]);
      }
      int64_t q = 0;
#if EWV_W
      for (; q + EWV_W <= np; q += EWV_W) {
        const ewv_t rad = ewv_sqrt(ewv_mul(ewv_set1(-2.0f), ewv_log(ewv_sub(ewv_set1(1.0f), ewv_load(u1 + q)))));
        const ewv_t th = ewv_mul(ewv_set1(RND_TWO_PI_F), ewv_load(u2 + q));
        ewv_store(rc + q, ewv_mul(rad, ewv_cos(th)));
        ewv_store(rs + q, ewv_mul(rad, ewv_sin(th)));
      }
#endif
      for (; q < np; ++q) {
        const float rad = rnd_bm_rad(u1[q]), th = RND_TWO_PI_F * u2[q];
        rc[q] = rad * tpurt_vm_cosf(th);
        rs[q] = rad * tpurt_vm_sinf(th);
      }
      for (; i < c1; ++i) {
        const int64_t k = i / 2 - p0;
        dst[i - c0] = (float)(mean + sd * (double)((i & 1) ? rs[k] : rc[k]));
      }
    }
    if (dt != TPURT_DTYPE_FLOAT32) tpurt_hv_from_f32(dt, buf, (uint16_t*)j->out->data + c0, c1 - c0);
  }
}

static tpurt_status_t rnd_bind_input(rnd_job_t* j, int k, const tpurt_tensor_t* t, const char* op) {
  const tpurt_tensor_t* o = j->out;
  if (t->ndim > o->ndim) return TPURT_STATUS(INVALID_ARGUMENT, "%s: input has more dims than the output", op);
  int off = o->ndim - t->ndim;
  for (int d = 0; d < o->ndim; ++d) {
    int di = d - off;
    if (di < 0 || t->sizes[di] == 1) j->in_strides[k][d] = 0;
    else if (t->sizes[di] == o->sizes[d]) j->in_strides[k][d] = t->strides[di];
    else
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: input of size %lld at dim %d does not match output size %lld", op,
                          (long long)t->sizes[di], di, (long long)o->sizes[d]);
  }
  j->in[k] = t;
  return TPURT_OK;
}

static tpurt_status_t rnd_run(tpurt_kernel_ctx_t* ctx, rnd_job_t* j, bool reference) {
  int64_t n = tpurt_tensor_numel(j->out);
  if (n == 0) return TPURT_OK;
  j->dbl = j->out->dtype == TPURT_DTYPE_FLOAT64;
  if (reference) rnd_range(j, 0, n, 0);
  else tpurt_parallel_for(ctx, n, 8192, rnd_dense_ok(j) ? rnd_range_dense : rnd_range, j);
  return TPURT_OK;
}

/* Common preamble: one output and the Philox key/offset. */
static tpurt_status_t rnd_begin(const tpurt_op_call_t* call, const char* op, rnd_job_t* j, int kind) {
  memset(j, 0, sizeof(*j));
  j->kind = kind;
  if (call->num_outputs < 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected an output", op);
  const tpurt_rng_t* rng = tpurt_arg_rng(call);
  if (!rng) return TPURT_STATUS(INVALID_ARGUMENT, "%s: no random generator state passed (TPURT_ARG_RNG)", op);
  j->seed = rng->seed;
  j->offset = rng->offset;
  j->out = &call->outputs[0];
  if (j->out->dtype < 0 || j->out->dtype >= TPURT_DTYPE_COUNT)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: bad output dtype", op);
  return TPURT_OK;
}

#define RND_REQUIRE_FLOAT(op)                                                                    \
  if (!tpurt_dtype_is_floating(j.out->dtype))                                                     \
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for dtype %s", op, tpurt_dtype_name(j.out->dtype));

/* uniform_(self, from=0, to=1, generator) */
static tpurt_status_t uniform_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  rnd_job_t j;
  TPURT_RETURN_IF_ERROR(rnd_begin(call, "uniform_", &j, RK_UNIFORM));
  RND_REQUIRE_FLOAT("uniform_");
  j.prm[0] = tpurt_arg_double(call, 1, 0.0);
  j.prm[1] = tpurt_arg_double(call, 2, 1.0);
  if (!(j.prm[0] <= j.prm[1]))
    return TPURT_STATUS(INVALID_ARGUMENT, "uniform_: expects from <= to, got from=%g to=%g", j.prm[0], j.prm[1]);
  return rnd_run(ctx, &j, reference);
}

/* normal_(self, mean, std) and normal.{Tensor_float, float_Tensor, Tensor_Tensor}(mean, std) */
static tpurt_status_t normal_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  rnd_job_t j;
  TPURT_RETURN_IF_ERROR(rnd_begin(call, "normal", &j, RK_NORMAL));
  RND_REQUIRE_FLOAT("normal");
  /* normal_ has self first (a tensor aliasing the output) followed by two
   * floats; the functional forms are (mean, std) with one or both tensors */
  bool inplace = tpurt_arg_is(call, 0, TPURT_ARG_TENSOR) && tpurt_arg_is(call, 1, TPURT_ARG_DOUBLE) &&
                 tpurt_arg_is(call, 2, TPURT_ARG_DOUBLE);
  if (inplace || call->num_args < 2) {
    j.prm[0] = tpurt_arg_double(call, 1, 0.0);
    j.prm[1] = tpurt_arg_double(call, 2, 1.0);
  } else {
    for (int k = 0; k < 2; ++k) {
      const tpurt_tensor_t* t = tpurt_arg_tensor(call, k);
      if (t) TPURT_RETURN_IF_ERROR(rnd_bind_input(&j, k, t, "normal"));
      else j.prm[k] = tpurt_arg_double(call, k, 0.0);
    }
  }
  if (!j.in[1] && j.prm[1] < 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "normal: expects std >= 0.0, but found std %g", j.prm[1]);
  return rnd_run(ctx, &j, reference);
}

/* bernoulli_(self, p float | Tensor p), bernoulli.out(self=p, *, out) */
static tpurt_status_t bernoulli_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  rnd_job_t j;
  TPURT_RETURN_IF_ERROR(rnd_begin(call, "bernoulli", &j, RK_BERNOULLI));
  const tpurt_tensor_t* pt = NULL;
  bool p_float = false;
  if (tpurt_arg_is(call, 1, TPURT_ARG_TENSOR) || tpurt_arg_is(call, 1, TPURT_ARG_DOUBLE)) {
    pt = tpurt_arg_tensor(call, 1); /* bernoulli_.Tensor / bernoulli_.float */
    p_float = !pt;
  } else {
    pt = tpurt_arg_tensor(call, 0); /* bernoulli(self) / bernoulli.out: self holds the probabilities */
  }
  if (pt) {
    TPURT_RETURN_IF_ERROR(rnd_bind_input(&j, 0, pt, "bernoulli"));
  } else if (!p_float) {
    j.prm[0] = 0.5;
  } else {
    j.prm[0] = tpurt_arg_double(call, 1, 0.5);
    if (!(j.prm[0] >= 0 && j.prm[0] <= 1))
      return TPURT_STATUS(INVALID_ARGUMENT, "bernoulli_: expects 0 <= p <= 1, but got p=%g", j.prm[0]);
  }
  return rnd_run(ctx, &j, reference);
}

/* random_(self), random_.to(self, to), random_.from(self, from, to?) */
static tpurt_status_t random_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  rnd_job_t j;
  TPURT_RETURN_IF_ERROR(rnd_begin(call, "random_", &j, RK_RANDOM));
  tpurt_dtype_t dt = j.out->dtype;
  /* the default upper bound: the type's max, or 2^digits for floats */
  int64_t hi;
  switch (dt) {
    case TPURT_DTYPE_BOOL: hi = 1; break;
    case TPURT_DTYPE_UINT8: hi = 255; break;
    case TPURT_DTYPE_INT8: hi = 127; break;
    case TPURT_DTYPE_INT16: hi = 32767; break;
    case TPURT_DTYPE_INT32: hi = 2147483647; break;
    case TPURT_DTYPE_INT64: hi = INT64_MAX; break;
    case TPURT_DTYPE_UINT16: hi = 65535; break;
    case TPURT_DTYPE_UINT32: hi = 4294967295ll; break;
    case TPURT_DTYPE_UINT64: hi = INT64_MAX; break; /* CPU's bound for uint64 bounds (DistributionTemplates.h) */
    case TPURT_DTYPE_FLOAT16: hi = 1 << 11; break;
    case TPURT_DTYPE_BFLOAT16: hi = 1 << 8; break;
    case TPURT_DTYPE_FLOAT32: hi = 1 << 24; break;
    default: hi = 1ll << 53; break;
  }
  int nint = 0;
  int64_t v[2] = {0, 0};
  bool to_none = false;
  for (int i = 1; i < call->num_args && nint < 2; ++i) {
    if (tpurt_arg_is(call, i, TPURT_ARG_INT)) v[nint++] = tpurt_arg_int(call, i, 0);
    else if (tpurt_arg_is(call, i, TPURT_ARG_NONE) && nint == 1) { to_none = true; break; }
  }
  int64_t from = 0;
  uint64_t range;
  if (nint == 0) {
    /* [0, hi]; int64's full range needs every value of 2^63 */
    range = (uint64_t)hi + 1;
  } else if (nint == 1 && !to_none && strcmp(call->overload, "from") != 0) {
    if (v[0] <= 0) return TPURT_STATUS(INVALID_ARGUMENT, "random_: expects 'from' < 'to', got from=0 to=%lld", (long long)v[0]);
    range = (uint64_t)v[0];
  } else {
    from = v[0];
    if (nint == 1) {
      range = (uint64_t)hi - (uint64_t)from + 1;
    } else {
      if (!(from < v[1]))
        return TPURT_STATUS(INVALID_ARGUMENT, "random_: expects 'from' < 'to', got from=%lld to=%lld",
                            (long long)from, (long long)v[1]);
      range = (uint64_t)v[1] - (uint64_t)from;
    }
  }
  j.from = from;
  j.range = range; /* 0 means the full 2^64 (from = INT64_MIN, to = None) */
  return rnd_run(ctx, &j, reference);
}

static tpurt_status_t exponential_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  rnd_job_t j;
  TPURT_RETURN_IF_ERROR(rnd_begin(call, "exponential_", &j, RK_EXPONENTIAL));
  RND_REQUIRE_FLOAT("exponential_");
  j.prm[0] = tpurt_arg_double(call, 1, 1.0);
  if (!(j.prm[0] > 0))
    return TPURT_STATUS(INVALID_ARGUMENT, "exponential_: expects lambda > 0.0, but found lambda=%g", j.prm[0]);
  return rnd_run(ctx, &j, reference);
}

static tpurt_status_t geometric_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  rnd_job_t j;
  TPURT_RETURN_IF_ERROR(rnd_begin(call, "geometric_", &j, RK_GEOMETRIC));
  j.prm[0] = tpurt_arg_double(call, 1, 0.5);
  if (!(j.prm[0] > 0 && j.prm[0] < 1))
    return TPURT_STATUS(INVALID_ARGUMENT, "geometric_: expects p in (0, 1), but got p=%g", j.prm[0]);
  return rnd_run(ctx, &j, reference);
}

static tpurt_status_t cauchy_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  rnd_job_t j;
  TPURT_RETURN_IF_ERROR(rnd_begin(call, "cauchy_", &j, RK_CAUCHY));
  RND_REQUIRE_FLOAT("cauchy_");
  j.prm[0] = tpurt_arg_double(call, 1, 0.0);
  j.prm[1] = tpurt_arg_double(call, 2, 1.0);
  if (!(j.prm[1] > 0)) return TPURT_STATUS(INVALID_ARGUMENT, "cauchy_: expects sigma > 0.0, but found sigma=%g", j.prm[1]);
  return rnd_run(ctx, &j, reference);
}

static tpurt_status_t log_normal_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  rnd_job_t j;
  TPURT_RETURN_IF_ERROR(rnd_begin(call, "log_normal_", &j, RK_LOG_NORMAL));
  RND_REQUIRE_FLOAT("log_normal_");
  j.prm[0] = tpurt_arg_double(call, 1, 1.0);
  j.prm[1] = tpurt_arg_double(call, 2, 2.0);
  if (!(j.prm[1] > 0)) return TPURT_STATUS(INVALID_ARGUMENT, "log_normal_: expects std > 0.0, but found std=%g", j.prm[1]);
  return rnd_run(ctx, &j, reference);
}

/* native_dropout(input, p, train?) -> (output, mask) */
static tpurt_status_t dropout_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  rnd_job_t j;
  TPURT_RETURN_IF_ERROR(rnd_begin(call, "native_dropout", &j, RK_DROPOUT));
  const tpurt_tensor_t* input = tpurt_arg_tensor(call, 0);
  if (call->num_outputs < 2 || call->num_args < 2 || !input)
    return TPURT_STATUS(INVALID_ARGUMENT, "native_dropout: expected (input, p, train) and two outputs");
  RND_REQUIRE_FLOAT("native_dropout");
  double p = tpurt_arg_double(call, 1, 0.0);
  if (!(p >= 0 && p <= 1))
    return TPURT_STATUS(INVALID_ARGUMENT, "native_dropout: dropout probability has to be between 0 and 1, but got %g", p);
  bool train = !(tpurt_arg_is(call, 2, TPURT_ARG_BOOL) && !tpurt_arg_bool(call, 2, true));
  if (!train) p = 0; /* eval: output = input, mask all true */
  j.out2 = &call->outputs[1];
  if (j.out2->ndim != j.out->ndim) return TPURT_STATUS(INVALID_ARGUMENT, "native_dropout: mask shape differs");
  TPURT_RETURN_IF_ERROR(rnd_bind_input(&j, 0, input, "native_dropout"));
  j.prm[0] = 1.0 - p;
  j.prm[1] = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  return rnd_run(ctx, &j, reference);
}

/* native_dropout_backward(grad, mask, scale) = grad * mask * scale */
static tpurt_status_t setup_scale2(const tpurt_op_call_t* c, ew_params_t* p) {
  ew_param_arg(p, 0, c, 2, 1.0);
  return TPURT_OK;
}
EW_OP_F(dropout_bw, 2, EW_L2, EW_P_FIRST, EW_O_COMPUTE, EW_FLOATS, setup_scale2, EW_IN(0, 1), a * b * (T)p.d[0])

#define RND_KERNELS(name, fn)                                                                    \
  tpurt_status_t tpurt_rnd_k_##name(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {     \
    return fn(ctx, call, false);                                                                 \
  }                                                                                              \
  tpurt_status_t tpurt_rnd_r_##name(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {     \
    return fn(ctx, call, true);                                                                  \
  }
RND_KERNELS(uniform, uniform_run)
RND_KERNELS(normal, normal_run)
RND_KERNELS(bernoulli, bernoulli_run)
RND_KERNELS(random, random_run)
RND_KERNELS(exponential, exponential_run)
RND_KERNELS(geometric, geometric_run)
RND_KERNELS(cauchy, cauchy_run)
RND_KERNELS(log_normal, log_normal_run)
RND_KERNELS(native_dropout, dropout_run)
tpurt_status_t tpurt_rnd_k_native_dropout_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tpurt_ew_op_run(ctx, call, &dropout_bw_desc, false);
}
tpurt_status_t tpurt_rnd_r_native_dropout_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tpurt_ew_op_run(ctx, call, &dropout_bw_desc, true);
}

/* multinomial(self, num_samples, replacement, generator): self is 1-D or 2-D
 * (rows of non-negative weights). With replacement: inverse CDF per draw;
 * without: the exponential race (smallest -log(u)/w win), which samples
 * without replacement in proportion to the weights. Row r, draw j uses
 * uniform number r * max(num_samples, ncat) + j. */
typedef struct mn_key_t {
  double key;
  int64_t idx;
} mn_key_t;

static int mn_cmp(const void* a, const void* b) {
  double x = ((const mn_key_t*)a)->key, y = ((const mn_key_t*)b)->key;
  return x < y ? -1 : (x > y ? 1 : 0);
}

typedef struct mn_job_t {
  rnd_job_t r;
  const tpurt_tensor_t* p;
  int64_t ncat, ns, per_row;
  bool replacement;
  char* scratch; /* per thread: ncat * sizeof(mn_key_t) */
  int err;       /* 1: bad weights, 2: not enough categories */
} mn_job_t;

static void mn_rows(void* user, int64_t begin, int64_t end, int tid) {
  mn_job_t* m = (mn_job_t*)user;
  const tpurt_tensor_t* p = m->p;
  const tpurt_tensor_t* o = m->r.out;
  int64_t ps = p->ndim == 2 ? p->strides[0] : 0, pc = p->strides[p->ndim - 1];
  int64_t os = o->ndim == 2 ? o->strides[0] : 0, oc = o->strides[o->ndim - 1];
  size_t pes = tpurt_dtype_size(p->dtype);
  mn_key_t* keys = (mn_key_t*)(m->scratch + (size_t)tid * m->ncat * sizeof(mn_key_t));
  for (int64_t r = begin; r < end; ++r) {
    const char* row = (const char*)p->data + r * ps * (int64_t)pes;
    double total = 0;
    int64_t nonzero = 0;
    for (int64_t c = 0; c < m->ncat; ++c) {
      double w = tpurt_dtype_load_f64(p->dtype, row + c * pc * (int64_t)pes);
      if (!(w >= 0) || isinf(w)) { m->err = 1; return; }
      total += w;
      nonzero += w > 0;
      keys[c].key = total; /* cumulative, for the replacement case */
      keys[c].idx = c;
    }
    if (!(total > 0)) { m->err = 1; return; }
    int64_t* out = (int64_t*)o->data + r * os;
    int64_t base = r * m->per_row;
    if (m->replacement) {
      for (int64_t j = 0; j < m->ns; ++j) {
        double u = rnd_unit(&m->r, base + j) * total;
        int64_t lo = 0, hi = m->ncat - 1;
        while (lo < hi) { /* first c with cum[c] > u */
          int64_t mid = (lo + hi) / 2;
          if (keys[mid].key > u) hi = mid;
          else lo = mid + 1;
        }
        while (lo > 0 && keys[lo].key == keys[lo - 1].key) --lo; /* never a zero-weight category */
        out[j * oc] = lo;
      }
    } else {
      if (nonzero < m->ns) { m->err = 2; return; }
      for (int64_t c = 0; c < m->ncat; ++c) {
        double w = tpurt_dtype_load_f64(p->dtype, row + c * pc * (int64_t)pes);
        double u = rnd_unit(&m->r, base + c);
        keys[c].key = w > 0 ? -log1p(-u) / w : INFINITY;
        keys[c].idx = c;
      }
      qsort(keys, (size_t)m->ncat, sizeof(mn_key_t), mn_cmp);
      for (int64_t j = 0; j < m->ns; ++j) out[j * oc] = keys[j].idx;
    }
  }
}

static tpurt_status_t multinomial_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  mn_job_t m;
  memset(&m, 0, sizeof(m));
  TPURT_RETURN_IF_ERROR(rnd_begin(call, "multinomial", &m.r, RK_UNIFORM));
  m.p = tpurt_arg_tensor(call, 0);
  if (!m.p || !tpurt_arg_is(call, 1, TPURT_ARG_INT))
    return TPURT_STATUS(INVALID_ARGUMENT, "multinomial: expected (self, num_samples, replacement)");
  m.ns = tpurt_arg_int(call, 1, 0);
  m.replacement = tpurt_arg_is(call, 2, TPURT_ARG_BOOL) && tpurt_arg_bool(call, 2, false);
  if (m.p->ndim < 1 || m.p->ndim > 2)
    return TPURT_STATUS(INVALID_ARGUMENT, "multinomial: prob_dist must be 1 or 2 dim, got %d", m.p->ndim);
  if (m.r.out->dtype != TPURT_DTYPE_INT64 || m.r.out->ndim != m.p->ndim)
    return TPURT_STATUS(INVALID_ARGUMENT, "multinomial: output must be int64 with the input's rank");
  m.ncat = m.p->sizes[m.p->ndim - 1];
  int64_t rows = m.p->ndim == 2 ? m.p->sizes[0] : 1;
  if (m.ns <= 0) return TPURT_STATUS(INVALID_ARGUMENT, "multinomial: cannot sample n_sample <= 0 samples");
  if (!m.replacement && m.ns > m.ncat)
    return TPURT_STATUS(INVALID_ARGUMENT, "multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  if (m.ncat == 0) return TPURT_STATUS(INVALID_ARGUMENT, "multinomial: number of categories cannot be zero");
  if (rows == 0) return TPURT_OK;
  m.per_row = m.ns > m.ncat ? m.ns : m.ncat;
  m.r.dbl = true;
  int nt = reference ? 1 : tpurt_kernel_num_threads(ctx);
  if (nt < 1) nt = 1;
  m.scratch = (char*)tpurt_kernel_scratch(ctx, (size_t)nt * m.ncat * sizeof(mn_key_t));
  if (!m.scratch) return TPURT_STATUS(RESOURCE_EXHAUSTED, "multinomial: no scratch for %lld categories", (long long)m.ncat);
  if (reference) mn_rows(&m, 0, rows, 0);
  else tpurt_parallel_for(ctx, rows, 1, mn_rows, &m);
  if (m.err == 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "multinomial: probability tensor contains either inf, nan or element < 0, or rows sum to 0");
  if (m.err == 2)
    return TPURT_STATUS(INVALID_ARGUMENT, "multinomial: invalid multinomial distribution (with replacement=False, not enough non-negative category to sample)");
  return TPURT_OK;
}
RND_KERNELS(multinomial, multinomial_run)
