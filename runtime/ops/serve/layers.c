/* Model layers vLLM builds through its kernel registries, as one pass per row
 * instead of the generic ops of its native PyTorch versions: RMSNorm
 * (vllm.ir.ops.rms_norm), RMSNorm after a residual add, in place
 * (fused_add_rms_norm), and SiLU-and-mul (the gated MLP's activation).
 * Rows are the last dim (unit stride; any strides before it); float32,
 * bfloat16 and float16 compute in float32 and round where vLLM's native
 * versions (and its CUDA kernels) round: x * rstd through the weight's dtype
 * before the weight multiplies, silu(gate) through the input's dtype before
 * the up half multiplies. Each kernel has a plain per-element reference. */
#include <math.h>
#include <string.h>

#include "ops/elementwise/ew_expf.h"
#include "ops/half_vec.h"
#include "ops/serve/serve.h"

/* Address of row r of t (rows: every dim but the last, in order). */
static char* row_ptr(const tpurt_tensor_t* t, int64_t r) {
  int64_t off = 0;
  for (int d = t->ndim - 2; d >= 0; --d) {
    off += (r % t->sizes[d]) * t->strides[d];
    r /= t->sizes[d];
  }
  return (char*)t->data + (size_t)off * tpurt_dtype_size(t->dtype);
}

static int64_t num_rows(const tpurt_tensor_t* t) {
  int64_t m = 1;
  for (int d = 0; d < t->ndim - 1; ++d) m *= t->sizes[d];
  return m;
}

/* A row as floats: the tensor's own memory for float32, else converted into buf. */
static const float* row_in(tpurt_dtype_t dt, const char* p, int64_t n, float* buf) {
  if (dt == TPURT_DTYPE_FLOAT32) return (const float*)p;
  tpurt_hv_to_f32(dt, p, buf, n);
  return buf;
}
static void row_out(tpurt_dtype_t dt, char* p, const float* v, int64_t n) {
  if (dt == TPURT_DTYPE_FLOAT32) {
    if ((const float*)p != v) memcpy(p, v, (size_t)n * sizeof(float));
    return;
  }
  tpurt_hv_from_f32(dt, v, p, n);
}
/* v rounded through dt in place (nothing for float32); tmp holds n 16-bit values. */
static void round_through(tpurt_dtype_t dt, float* v, int64_t n, uint16_t* tmp) {
  if (dt == TPURT_DTYPE_FLOAT32) return;
  tpurt_hv_from_f32(dt, v, tmp, n);
  tpurt_hv_to_f32(dt, tmp, v, n);
}

/* Float sum of squares in 32 independent lanes (one running sum would wait on
 * the add latency at every step); vectorizes. */
static float sum_sq(const float* x, int64_t n) {
  float l[32] = {0}, s = 0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 32; ++k) l[k] += x[i + k] * x[i + k];
  for (; i < n; ++i) s += x[i] * x[i];
  for (int k = 0; k < 32; ++k) s += l[k];
  return s;
}

static bool is_float_dtype(tpurt_dtype_t dt) {
  return dt == TPURT_DTYPE_FLOAT32 || dt == TPURT_DTYPE_BFLOAT16 || dt == TPURT_DTYPE_FLOAT16;
}

/* A tensor whose last dim is the row: at least 1-D, unit stride there. */
static bool rows_ok(const tpurt_tensor_t* t) {
  return t && t->ndim >= 1 && is_float_dtype(t->dtype) && (t->strides[t->ndim - 1] == 1 || t->sizes[t->ndim - 1] <= 1);
}

static bool same_rows(const tpurt_tensor_t* a, const tpurt_tensor_t* b, int64_t b_last) {
  if (a->ndim != b->ndim || a->dtype != b->dtype) return false;
  for (int d = 0; d < a->ndim - 1; ++d)
    if (a->sizes[d] != b->sizes[d]) return false;
  return b->sizes[b->ndim - 1] == b_last;
}

/* ---- RMSNorm ---------------------------------------------------------------------------- */

typedef struct rms_job_t {
  const tpurt_tensor_t *x, *res, *out; /* res: NULL for plain rms_norm; fused: out == x */
  tpurt_dtype_t wdt;                   /* the weight's dtype (rounding of x * rstd) */
  const float* w;                      /* the weight as floats, or NULL */
  int64_t N;
  float eps;
  float* buf; /* per thread: 3N floats + N 16-bit values */
} rms_job_t;

static void rms_rows(void* user, int64_t rb, int64_t re, int tid) {
  const rms_job_t* j = user;
  const int64_t N = j->N;
  float* xb = j->buf + (size_t)tid * 4 * (size_t)N;
  float* rb_ = xb + N;
  float* yb = rb_ + N;
  uint16_t* tmp = (uint16_t*)(yb + N);
  tpurt_dtype_t dt = j->x->dtype;
  for (int64_t r = rb; r < re; ++r) {
    const float* x = row_in(dt, row_ptr(j->x, r), N, xb);
    if (j->res) {
      /* the sum, in float32, is the new residual (rounded to its dtype) and what is normalized; a
       * float32 residual row holds it exactly, and is then read as the row */
      char* rp = row_ptr(j->res, r);
      float* s = dt == TPURT_DTYPE_FLOAT32 ? (float*)rp : rb_;
      const float* res = row_in(dt, rp, N, rb_);
      for (int64_t i = 0; i < N; ++i) s[i] = x[i] + res[i];
      if (s == rb_) row_out(dt, rp, s, N);
      x = s;
    }
    const float rstd = 1.0f / sqrtf(sum_sq(x, N) / (float)N + j->eps);
    char* op = row_ptr(j->out, r);
    /* float32 without a weight, or with a float32 one: straight into the output row */
    float* y = dt == TPURT_DTYPE_FLOAT32 && (!j->w || j->wdt == TPURT_DTYPE_FLOAT32) ? (float*)op : yb;
    if (!j->w) {
      for (int64_t i = 0; i < N; ++i) y[i] = x[i] * rstd;
    } else if (j->wdt == TPURT_DTYPE_FLOAT32) {
      for (int64_t i = 0; i < N; ++i) y[i] = x[i] * rstd * j->w[i];
    } else {
      for (int64_t i = 0; i < N; ++i) y[i] = x[i] * rstd;
      round_through(j->wdt, y, N, tmp);
      for (int64_t i = 0; i < N; ++i) y[i] *= j->w[i];
    }
    if (y == yb) row_out(dt, op, yb, N);
  }
}

/* The plain reference: element by element through the dtype table, the same roundings. */
static void rms_rows_ref(const rms_job_t* j) {
  const int64_t N = j->N;
  tpurt_dtype_t dt = j->x->dtype;
  size_t es = tpurt_dtype_size(dt);
  float* s = j->buf;
  for (int64_t r = 0; r < num_rows(j->x); ++r) {
    const char* xp = row_ptr(j->x, r);
    char* rp = j->res ? row_ptr(j->res, r) : NULL;
    double ss = 0;
    for (int64_t i = 0; i < N; ++i) {
      float v = (float)tpurt_dtype_load_f64(dt, xp + i * es);
      if (rp) {
        v += (float)tpurt_dtype_load_f64(dt, rp + i * es);
        tpurt_dtype_store_f64(dt, rp + i * es, v);
      }
      s[i] = v;
      ss += (double)v * v;
    }
    float rstd = (float)(1.0 / sqrt(ss / (double)N + j->eps));
    char* op = row_ptr(j->out, r);
    for (int64_t i = 0; i < N; ++i) {
      float y = s[i] * rstd;
      if (j->w) {
        char t[8];
        tpurt_dtype_store_f64(j->wdt, t, y);
        y = (float)tpurt_dtype_load_f64(j->wdt, t) * j->w[i];
      }
      tpurt_dtype_store_f64(dt, op + i * es, y);
    }
  }
}

/* rms_norm: args out, x, weight (or None), eps. fused_add_rms_norm: args x (written: the
 * normalized sum), residual (written: x + residual), weight (or None), eps. */
static tpurt_status_t rms_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, bool fused, bool ref) {
  const char* op = fused ? "fused_add_rms_norm" : "rms_norm";
  rms_job_t j;
  memset(&j, 0, sizeof j);
  const tpurt_tensor_t* w;
  if (fused) {
    j.x = j.out = tpurt_arg_tensor(c, 0);
    j.res = tpurt_arg_tensor(c, 1);
  } else {
    j.out = tpurt_arg_tensor(c, 0);
    j.x = tpurt_arg_tensor(c, 1);
  }
  w = tpurt_arg_tensor(c, 2);
  double eps = tpurt_arg_double(c, 3, 1e-6);
  if (!rows_ok(j.x) || !rows_ok(j.out) || (fused && !rows_ok(j.res)))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expects float32/bfloat16/float16 tensors whose last dim is "
                        "contiguous", op);
  j.N = j.x->sizes[j.x->ndim - 1];
  if (!same_rows(j.x, j.out, j.N) || (fused && !same_rows(j.x, j.res, j.N)))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: %s must have the input's shape and dtype", op,
                        fused ? "residual" : "out");
  if (w && (w->ndim != 1 || w->sizes[0] != j.N || !is_float_dtype(w->dtype)))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: weight must be a float vector of the row's %lld elements", op,
                        (long long)j.N);
  if (!(eps >= 0) || !isfinite(eps))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: epsilon %g must be finite and not negative", op, eps);
  j.eps = (float)eps;
  int64_t M = num_rows(j.x);
  if (M == 0 || j.N == 0) return TPURT_STATUS_OK;
  int nt = tpurt_kernel_num_threads(ctx);
  if (nt < 1) nt = 1;
  size_t wbytes = (size_t)j.N * sizeof(float);
  float* scratch = tpurt_kernel_scratch(ctx, wbytes + (size_t)nt * 4 * (size_t)j.N * sizeof(float));
  if (!scratch) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch for %lld-element rows", op, (long long)j.N);
  if (w) {
    float* wf = scratch;
    for (int64_t i = 0; i < j.N; ++i)
      wf[i] = (float)tpurt_dtype_load_f64(w->dtype, (const char*)w->data + (size_t)(i * w->strides[0]) *
                                                        tpurt_dtype_size(w->dtype));
    j.w = wf;
    j.wdt = w->dtype;
  }
  j.buf = scratch + j.N;
  if (ref) {
    rms_rows_ref(&j);
    return TPURT_STATUS_OK;
  }
  int64_t grain = j.N >= 16384 ? 1 : 16384 / j.N;
  tpurt_parallel_for(ctx, M, grain, rms_rows, &j);
  return TPURT_STATUS_OK;
}

tpurt_status_t tpurt_serve_rms_norm(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return rms_run(ctx, call, false, false);
}
tpurt_status_t tpurt_serve_rms_norm_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return rms_run(ctx, call, false, true);
}
tpurt_status_t tpurt_serve_fused_add_rms_norm(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return rms_run(ctx, call, true, false);
}
tpurt_status_t tpurt_serve_fused_add_rms_norm_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return rms_run(ctx, call, true, true);
}

/* ---- SiLU-and-mul ----------------------------------------------------------------------- */

/* y = x / (1 + exp(-x)), the elementwise family's silu: bit-identical to F.silu on tpu (the vector
 * exps are the scalar one lane by lane; gcc does not vectorize the scalar form here). */
static void silu_row(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 one16 = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
    _mm512_storeu_ps(y + i, _mm512_div_ps(v, _mm512_add_ps(one16, tpurt_ew_expf16(_mm512_sub_ps(_mm512_setzero_ps(), v)))));
  }
#endif
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 one8 = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(y + i, _mm256_div_ps(v, _mm256_add_ps(one8, tpurt_ew_expf8(_mm256_sub_ps(_mm256_setzero_ps(), v)))));
  }
#endif
  for (; i < n; ++i) y[i] = x[i] / (1.0f + tpurt_ew_expf(-x[i]));
}

typedef struct silu_job_t {
  const tpurt_tensor_t *out, *x;
  int64_t d;
  float* buf; /* per thread: 3d floats + d 16-bit values */
} silu_job_t;

static void silu_rows(void* user, int64_t rb, int64_t re, int tid) {
  const silu_job_t* j = user;
  const int64_t d = j->d;
  float* xb = j->buf + (size_t)tid * 4 * (size_t)d;
  float* yb = xb + 2 * d;
  uint16_t* tmp = (uint16_t*)(yb + d);
  tpurt_dtype_t dt = j->x->dtype;
  for (int64_t r = rb; r < re; ++r) {
    const float* x = row_in(dt, row_ptr(j->x, r), 2 * d, xb);
    silu_row(x, yb, d);
    round_through(dt, yb, d, tmp);
    for (int64_t i = 0; i < d; ++i) yb[i] *= x[d + i];
    row_out(dt, row_ptr(j->out, r), yb, d);
  }
}

static void silu_rows_ref(const silu_job_t* j) {
  tpurt_dtype_t dt = j->x->dtype;
  size_t es = tpurt_dtype_size(dt);
  for (int64_t r = 0; r < num_rows(j->x); ++r) {
    const char* xp = row_ptr(j->x, r);
    char* op = row_ptr(j->out, r);
    for (int64_t i = 0; i < j->d; ++i) {
      float a = (float)tpurt_dtype_load_f64(dt, xp + i * es), b = (float)tpurt_dtype_load_f64(dt, xp + (j->d + i) * es);
      char t[8];
      tpurt_dtype_store_f64(dt, t, a / (1.0f + expf(-a)));
      tpurt_dtype_store_f64(dt, op + i * es, (float)tpurt_dtype_load_f64(dt, t) * b);
    }
  }
}

/* args: out [..., d], x [..., 2d]: out = silu(x[..., :d]) * x[..., d:]. */
static tpurt_status_t silu_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, bool ref) {
  silu_job_t j = {.out = tpurt_arg_tensor(c, 0), .x = tpurt_arg_tensor(c, 1)};
  if (!rows_ok(j.x) || !rows_ok(j.out) || j.x->sizes[j.x->ndim - 1] % 2 != 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "silu_and_mul: expects float32/bfloat16/float16 x [..., 2d] and out "
                        "[..., d], contiguous in the last dim");
  j.d = j.x->sizes[j.x->ndim - 1] / 2;
  if (!same_rows(j.x, j.out, j.d))
    return TPURT_STATUS(INVALID_ARGUMENT, "silu_and_mul: out must be x's shape with half its last dim (%lld), "
                        "and x's dtype", (long long)j.d);
  int64_t M = num_rows(j.x);
  if (M == 0 || j.d == 0) return TPURT_STATUS_OK;
  int nt = tpurt_kernel_num_threads(ctx);
  if (nt < 1) nt = 1;
  j.buf = tpurt_kernel_scratch(ctx, (size_t)nt * 4 * (size_t)j.d * sizeof(float));
  if (!j.buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "silu_and_mul: no scratch for %lld-element rows", (long long)j.d);
  if (ref) {
    silu_rows_ref(&j);
    return TPURT_STATUS_OK;
  }
  int64_t grain = j.d >= 8192 ? 1 : 8192 / j.d;
  tpurt_parallel_for(ctx, M, grain, silu_rows, &j);
  return TPURT_STATUS_OK;
}

tpurt_status_t tpurt_serve_silu_and_mul(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return silu_run(ctx, call, false);
}
tpurt_status_t tpurt_serve_silu_and_mul_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return silu_run(ctx, call, true);
}
