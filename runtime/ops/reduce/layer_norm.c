/* Layer norm and RMS norm over the trailing `normalized_shape` dims, forward
 * and backward: native_layer_norm(_backward), _fused_rms_norm(_backward).
 * Rows (the leading dims) split across threads; weight/bias gradients are
 * summed into per-thread partials, then added in thread order. float32 and
 * 16-bit rows whose trailing dims walk with one stride compute in float32 (as
 * PyTorch CPU does), reading and writing contiguous float32 rows in place;
 * float64 and other layouts gather each row into a double buffer. */
#include <float.h>
#include <string.h>

#include "base/stream_copy.h"
#include "ops/reduce/reduce_ops.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

/* A tensor seen as rows x cols, split before dim k. */
typedef struct mat_t {
  const tpurt_tensor_t* t;
  int k;
  bool coal;   /* the trailing dims walk with a single stride cs */
  int64_t cs;
} mat_t;

static void mat_init(mat_t* m, const tpurt_tensor_t* t, int k) {
  m->t = t;
  m->k = k;
  m->coal = true;
  m->cs = 1;
  int64_t expect = -1;
  for (int d = t->ndim - 1; d >= k; --d) {
    if (t->sizes[d] == 1) continue;
    if (expect < 0) { m->cs = t->strides[d]; expect = t->strides[d] * t->sizes[d]; continue; }
    if (t->strides[d] != expect) { m->coal = false; break; }
    expect *= t->sizes[d];
  }
}

static int64_t mat_row_off(const mat_t* m, int64_t row) {
  int64_t off = 0;
  for (int d = m->k - 1; d >= 0; --d) {
    off += (row % m->t->sizes[d]) * m->t->strides[d];
    row /= m->t->sizes[d];
  }
  return off;
}

static int64_t mat_col_off(const mat_t* m, int64_t col) {
  if (m->coal) return col * m->cs;
  int64_t off = 0;
  for (int d = m->t->ndim - 1; d >= m->k; --d) {
    off += (col % m->t->sizes[d]) * m->t->strides[d];
    col /= m->t->sizes[d];
  }
  return off;
}

static void mat_load(const mat_t* m, int64_t row, int64_t n, double* out) {
  const char* base = tpurt_tensor_at(m->t, mat_row_off(m, row));
  if (m->coal) { tpurt_row_load_f64(m->t->dtype, base, m->cs, n, out); return; }
  size_t isz = tpurt_dtype_size(m->t->dtype);
  for (int64_t j = 0; j < n; ++j) out[j] = tpurt_dtype_load_f64(m->t->dtype, base + mat_col_off(m, j) * (int64_t)isz);
}

static void mat_store(const mat_t* m, int64_t row, int64_t n, const double* in) {
  char* base = tpurt_tensor_at(m->t, mat_row_off(m, row));
  if (m->coal) { tpurt_row_store_f64(m->t->dtype, base, m->cs, n, in); return; }
  size_t isz = tpurt_dtype_size(m->t->dtype);
  for (int64_t j = 0; j < n; ++j) tpurt_dtype_store_f64(m->t->dtype, base + mat_col_off(m, j) * (int64_t)isz, in[j]);
}

/* Loads a whole (small) tensor, flattened, into doubles; NULL tensor -> fill. */
static void load_flat(const tpurt_tensor_t* t, int64_t n, double fill, double* out) {
  for (int64_t j = 0; j < n; ++j)
    out[j] = t ? tpurt_dtype_load_f64(t->dtype, tpurt_tensor_at(t, tpurt_tensor_offset_of(t, j, -1))) : fill;
}
static void store_flat(const tpurt_tensor_t* t, int64_t n, const double* in) {
  for (int64_t j = 0; j < n; ++j)
    tpurt_dtype_store_f64(t->dtype, tpurt_tensor_at(t, tpurt_tensor_offset_of(t, j, -1)), in[j]);
}

typedef enum { LN_FWD, LN_BWD, RMS_FWD, RMS_BWD } ln_mode_t;

typedef struct ln_job_t {
  ln_mode_t mode;
  int64_t M, N;
  double eps;
  mat_t x, dy, out;           /* out = y (forward) or grad_input (backward) */
  const tpurt_tensor_t *mean, *rstd; /* forward: outputs; backward: inputs */
  const double *w, *b;        /* flattened weight/bias (NULL if absent) */
  bool want_gi;
  bool want_w, want_b;        /* backward: dw / db asked for (the partials are summed only then) */
  double* partial;            /* backward: per thread [2N] (dw, db) */
  bool* touched;
  double* buf;                /* per thread 3N */
  /* the float32 path (ln_rows_f32) */
  bool f32;
  float fstat_eps;
  const float *fw, *fb;
  float* fpartial;            /* backward: per thread [2N] (dw, db) */
  float* fbuf;                /* per thread 3N */
  bool stream;                /* a float32 result larger than the caches: streamed (ln_rows_f32) */
} ln_job_t;

/* Float sums in 32 independent lanes (four AVX2 vectors): one vector's running
 * sum would wait on the add latency at every step. The lanes restart every
 * LN_BLOCK elements and each block's float total is added into a double, so a
 * long row (LayerNorm over 256 x 256 x 144 = 9.4M elements) keeps CPU's
 * accuracy: one float running sum per lane over 295K elements lost about 3e-5
 * of the mean, 5e-5 of the normalized output. */
#define LN_BLOCK 8192
#define LN_SUM32(N, EXPR)                                                                  \
  ({                                                                                       \
    const int64_t n_ = (N);                                                                \
    double d_ = 0;                                                                         \
    int64_t i_ = 0;                                                                        \
    for (int64_t c_ = 0; c_ < n_; c_ += LN_BLOCK) {                                        \
      const int64_t ce_ = n_ - c_ < LN_BLOCK ? n_ : c_ + LN_BLOCK;                         \
      float l_[32] = {0}, s_ = 0;                                                          \
      int64_t b_ = c_;                                                                     \
      for (; b_ + 32 <= ce_; b_ += 32)                                                     \
        for (int k_ = 0; k_ < 32; ++k_) { i_ = b_ + k_; l_[k_] += (EXPR); }                \
      for (i_ = b_; i_ < ce_; ++i_) s_ += (EXPR);                                          \
      for (int k_ = 0; k_ < 32; ++k_) s_ += l_[k_];                                        \
      d_ += s_;                                                                            \
    }                                                                                      \
    (float)d_;                                                                             \
  })

/* The float32 backward's first pass over a row: with xhat = (x - mean) rstd and gw = g * w (g
 * without a weight), dw += g xhat and db += g where wanted, and s1 = sum(gw), s2 = sum(gw xhat) in
 * LN_SUM32's lanes, blocks and order: the bits of the five passes this was, which stored xhat and
 * gw for the last one (it computes them again from the rows, in L1 by then). has_w / has_dw are
 * constants at each call, so each variant vectorizes alone. */
static inline __attribute__((always_inline)) void ln_bwd_pass(const float* x, const float* g, const float* w,
                                                               float mean, float rstd, int64_t N, float* dw,
                                                               float* db, float* s1o, float* s2o, bool has_w,
                                                               bool has_dw) {
  double d1 = 0, d2 = 0;
  for (int64_t c = 0; c < N; c += LN_BLOCK) {
    const int64_t ce = N - c < LN_BLOCK ? N : c + LN_BLOCK;
    float l1[32] = {0}, l2[32] = {0}, t1 = 0, t2 = 0;
    int64_t b = c;
    for (; b + 32 <= ce; b += 32)
      /* dw and db never overlap the rows */
#pragma GCC ivdep
      for (int k = 0; k < 32; ++k) {
        const int64_t i = b + k;
        const float xv = (x[i] - mean) * rstd, gv = has_w ? g[i] * w[i] : g[i];
        if (has_dw) {
          dw[i] += g[i] * xv;
          db[i] += g[i];
        }
        l1[k] += gv;
        l2[k] += gv * xv;
      }
    for (int64_t i = b; i < ce; ++i) {
      const float xv = (x[i] - mean) * rstd, gv = has_w ? g[i] * w[i] : g[i];
      if (has_dw) {
        dw[i] += g[i] * xv;
        db[i] += g[i];
      }
      t1 += gv;
      t2 += gv * xv;
    }
    for (int k = 0; k < 32; ++k) {
      t1 += l1[k];
      t2 += l2[k];
    }
    d1 += t1;
    d2 += t2;
  }
  *s1o = (float)d1;
  *s2o = (float)d2;
}

/* A row of m in float32: m's own memory when it is a contiguous float32 row
 * (buf untouched), else converted into buf. */
static const float* ln_row_f32(const mat_t* m, int64_t r, int64_t n, float* buf) {
  const char* base = tpurt_tensor_at(m->t, mat_row_off(m, r));
  if (m->t->dtype == TPURT_DTYPE_FLOAT32 && (m->cs == 1 || n == 1)) return (const float*)base;
  tpurt_row_load_f32(m->t->dtype, base, m->cs, n, buf);
  return buf;
}
/* Where a result row goes: m's memory when it is a contiguous float32 row,
 * else buf (then ln_row_put converts it). */
static float* ln_row_out(const mat_t* m, int64_t r, int64_t n, float* buf) {
  char* base = tpurt_tensor_at(m->t, mat_row_off(m, r));
  return m->t->dtype == TPURT_DTYPE_FLOAT32 && (m->cs == 1 || n == 1) ? (float*)base : buf;
}
static void ln_row_put(const mat_t* m, int64_t r, int64_t n, float* y, const float* buf) {
  if (y != buf) return;
  tpurt_row_store_f32(m->t->dtype, tpurt_tensor_at(m->t, mat_row_off(m, r)), m->cs, n, buf);
}

/* A weight or bias for the float32 path: its own memory when it is a contiguous float32 tensor, a
 * vector conversion into buf when it is a contiguous 16-bit one, else element by element through
 * flat. (Element by element cost more than the whole forward of a decode step's 64-wide row.) */
static const float* ln_vec_f32(const tpurt_tensor_t* t, int64_t n, double fill, float* buf, double* flat) {
  if (tpurt_tensor_is_contiguous(t)) {
    if (t->dtype == TPURT_DTYPE_FLOAT32) return (const float*)t->data;
    if (t->dtype == TPURT_DTYPE_BFLOAT16 || t->dtype == TPURT_DTYPE_FLOAT16) {
      tpurt_row_load_f32(t->dtype, t->data, 1, n, buf);
      return buf;
    }
  }
  load_flat(t, n, fill, flat);
  for (int64_t i = 0; i < n; ++i) buf[i] = (float)flat[i];
  return buf;
}

/* Fetches floats [from, to) of p into L1, a line at a time. */
static inline void ln_prefetch(const float* p, int64_t from, int64_t to) {
#if defined(__SSE2__)
  for (int64_t i = from; i < to; i += 16) _mm_prefetch((const char*)(p + i), _MM_HINT_T0);
#else
  (void)p, (void)from, (void)to;
#endif
}

static void ln_rows_f32(void* user, int64_t rb, int64_t re, int tid) {
  const ln_job_t* j = user;
  int64_t N = j->N;
  float* xb = j->fbuf + (size_t)tid * 3 * (size_t)N;
  float* gb = xb + N;
  float* yb = gb + N;
  float* dw = j->fpartial ? j->fpartial + (size_t)tid * 2 * (size_t)N : NULL;
  float* db = dw ? dw + N : NULL;
  if (dw && !j->touched[tid]) {
    memset(dw, 0, sizeof(float) * 2 * (size_t)N);
    j->touched[tid] = true;
  }
  bool rms = j->mode == RMS_FWD || j->mode == RMS_BWD;
  const float *w = j->fw, *b = j->fb;
  const float inv_n = 1.0f / (float)N;
  for (int64_t r = rb; r < re; ++r) {
    const float* x = ln_row_f32(&j->x, r, N, xb);
    if (j->mode == LN_FWD || j->mode == RMS_FWD) {
      /* A large forward: the next row, where it is read in place, is fetched during this one's
       * statistics (a 4 KiB row is a page, where the hardware's prefetchers stop), and the output
       * is computed into yb and streamed out. */
      const float* nx = j->stream && x != xb && r + 1 < re
                             ? (const float*)tpurt_tensor_at(j->x.t, mat_row_off(&j->x, r + 1))
                             : NULL;
      float mean = rms ? 0.0f : LN_SUM32(N, x[i_]) * inv_n;
      if (nx) ln_prefetch(nx, 0, N / 2);
      float var = LN_SUM32(N, (x[i_] - mean) * (x[i_] - mean)) * inv_n;
      if (nx) ln_prefetch(nx, N / 2, N);
      float rstd = 1.0f / sqrtf(var + j->fstat_eps);
      float* dst = ln_row_out(&j->out, r, N, yb);
      bool stream = j->stream && dst != yb;
      float* y = stream ? yb : dst;
      if (w && b)
        for (int64_t i = 0; i < N; ++i) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
      else if (w)
        for (int64_t i = 0; i < N; ++i) y[i] = (x[i] - mean) * rstd * w[i];
      else if (b)
        for (int64_t i = 0; i < N; ++i) y[i] = (x[i] - mean) * rstd + b[i];
      else
        for (int64_t i = 0; i < N; ++i) y[i] = (x[i] - mean) * rstd;
      if (stream) tpurt_stream_copy_unfenced(dst, yb, sizeof(float) * (size_t)N);
      else ln_row_put(&j->out, r, N, y, yb);
      if (j->mean) tpurt_dtype_store_f64(j->mean->dtype, tpurt_tensor_at(j->mean, tpurt_tensor_offset_of(j->mean, r, -1)), mean);
      if (j->rstd) tpurt_dtype_store_f64(j->rstd->dtype, tpurt_tensor_at(j->rstd, tpurt_tensor_offset_of(j->rstd, r, -1)), rstd);
      continue;
    }
    const float* g = ln_row_f32(&j->dy, r, N, gb);
    /* a large backward: the next rows of x and dy fetched meanwhile, the result streamed (as above) */
    bool ahead = j->stream && x != xb && g != gb && r + 1 < re;
    float mean = rms ? 0.0f : (float)tpurt_dtype_load_f64(j->mean->dtype, tpurt_tensor_at(j->mean, tpurt_tensor_offset_of(j->mean, r, -1)));
    float rstd = (float)tpurt_dtype_load_f64(j->rstd->dtype, tpurt_tensor_at(j->rstd, tpurt_tensor_offset_of(j->rstd, r, -1)));
    /* dw / db and both sums in one pass (x and g may be the tensors' own rows) */
    float s1, s2;
    if (w && dw) ln_bwd_pass(x, g, w, mean, rstd, N, dw, db, &s1, &s2, true, true);
    else if (w) ln_bwd_pass(x, g, w, mean, rstd, N, dw, db, &s1, &s2, true, false);
    else if (dw) ln_bwd_pass(x, g, w, mean, rstd, N, dw, db, &s1, &s2, false, true);
    else ln_bwd_pass(x, g, w, mean, rstd, N, dw, db, &s1, &s2, false, false);
    if (ahead) ln_prefetch((const float*)tpurt_tensor_at(j->x.t, mat_row_off(&j->x, r + 1)), 0, N);
    if (!j->want_gi) continue;
    if (rms) s1 = 0.0f;
    float m1 = s1 * inv_n, m2 = s2 * inv_n;
    /* grad_input over gb when g was converted there (it is not read again) */
    float* dst = ln_row_out(&j->out, r, N, gb);
    bool stream = j->stream && dst != gb;
    float* y = stream ? yb : dst;
    /* xhat and g * w again, as the first pass computed them; y may be g's converted row */
    if (w) {
#pragma GCC ivdep
      for (int64_t i = 0; i < N; ++i) y[i] = rstd * (g[i] * w[i] - m1 - ((x[i] - mean) * rstd) * m2);
    } else {
#pragma GCC ivdep
      for (int64_t i = 0; i < N; ++i) y[i] = rstd * (g[i] - m1 - ((x[i] - mean) * rstd) * m2);
    }
    if (ahead) ln_prefetch((const float*)tpurt_tensor_at(j->dy.t, mat_row_off(&j->dy, r + 1)), 0, N);
    if (stream) tpurt_stream_copy_unfenced(dst, yb, sizeof(float) * (size_t)N);
    else ln_row_put(&j->out, r, N, y, gb);
  }
  if (j->stream) tpurt_stream_fence(); /* the streamed rows are visible before the job ends */
}

static void ln_rows(void* user, int64_t rb, int64_t re, int tid) {
  const ln_job_t* j = user;
  int64_t N = j->N;
  double* x = j->buf + (size_t)tid * 3 * (size_t)N;
  double* g = x + N;
  double* y = g + N;
  double* dw = j->partial ? j->partial + (size_t)tid * 2 * (size_t)N : NULL;
  double* db = dw ? dw + N : NULL;
  if (dw && !j->touched[tid]) {
    memset(dw, 0, sizeof(double) * 2 * (size_t)N);
    j->touched[tid] = true;
  }
  bool rms = j->mode == RMS_FWD || j->mode == RMS_BWD;
  for (int64_t r = rb; r < re; ++r) {
    mat_load(&j->x, r, N, x);
    if (j->mode == LN_FWD || j->mode == RMS_FWD) {
      double mean = rms ? 0 : TPURT_LANE_SUM(double, N, x[i_]) / (double)N;
      double var = TPURT_LANE_SUM(double, N, (x[i_] - mean) * (x[i_] - mean)) / (double)N;
      double rstd = 1.0 / sqrt(var + j->eps);
      for (int64_t i = 0; i < N; ++i) y[i] = (x[i] - mean) * rstd;
      if (j->w)
        for (int64_t i = 0; i < N; ++i) y[i] *= j->w[i];
      if (j->b)
        for (int64_t i = 0; i < N; ++i) y[i] += j->b[i];
      mat_store(&j->out, r, N, y);
      if (j->mean) tpurt_dtype_store_f64(j->mean->dtype, tpurt_tensor_at(j->mean, tpurt_tensor_offset_of(j->mean, r, -1)), mean);
      if (j->rstd) tpurt_dtype_store_f64(j->rstd->dtype, tpurt_tensor_at(j->rstd, tpurt_tensor_offset_of(j->rstd, r, -1)), rstd);
      continue;
    }
    mat_load(&j->dy, r, N, g);
    double mean = rms ? 0 : tpurt_dtype_load_f64(j->mean->dtype, tpurt_tensor_at(j->mean, tpurt_tensor_offset_of(j->mean, r, -1)));
    double rstd = tpurt_dtype_load_f64(j->rstd->dtype, tpurt_tensor_at(j->rstd, tpurt_tensor_offset_of(j->rstd, r, -1)));
    for (int64_t i = 0; i < N; ++i) x[i] = (x[i] - mean) * rstd; /* xhat */
    if (dw)
      for (int64_t i = 0; i < N; ++i) {
        dw[i] += g[i] * x[i];
        db[i] += g[i];
      }
    if (j->w)
      for (int64_t i = 0; i < N; ++i) g[i] *= j->w[i]; /* g * w */
    double s1 = TPURT_LANE_SUM(double, N, g[i_]), s2 = TPURT_LANE_SUM(double, N, g[i_] * x[i_]); /* sum(g*w), sum(g*w*xhat) */
    if (!j->want_gi) continue;
    double m1 = rms ? 0 : s1 / (double)N, m2 = s2 / (double)N;
    for (int64_t i = 0; i < N; ++i) y[i] = rstd * (g[i] - m1 - x[i] * m2);
    mat_store(&j->out, r, N, y);
  }
}

/* Reference: the same formulas, one row at a time, plain scalar loops with the
 * generic loaders, no threads, no partials. */
static void ln_reference(const ln_job_t* j, double* dwb) {
  int64_t N = j->N;
  bool rms = j->mode == RMS_FWD || j->mode == RMS_BWD;
  for (int64_t r = 0; r < j->M; ++r) {
    int64_t xo = mat_row_off(&j->x, r);
#define X(i) tpurt_dtype_load_f64(j->x.t->dtype, tpurt_tensor_at(j->x.t, xo + mat_col_off(&j->x, (i))))
    if (j->mode == LN_FWD || j->mode == RMS_FWD) {
      double mean = 0, var = 0;
      if (!rms) { for (int64_t i = 0; i < N; ++i) mean += X(i); mean /= (double)N; }
      for (int64_t i = 0; i < N; ++i) var += (X(i) - mean) * (X(i) - mean);
      double rstd = 1.0 / sqrt(var / (double)N + j->eps);
      int64_t oo = mat_row_off(&j->out, r);
      for (int64_t i = 0; i < N; ++i) {
        double v = (X(i) - mean) * rstd * (j->w ? j->w[i] : 1.0) + (j->b ? j->b[i] : 0.0);
        tpurt_dtype_store_f64(j->out.t->dtype, tpurt_tensor_at(j->out.t, oo + mat_col_off(&j->out, i)), v);
      }
      if (j->mean) tpurt_dtype_store_f64(j->mean->dtype, tpurt_tensor_at(j->mean, tpurt_tensor_offset_of(j->mean, r, -1)), mean);
      if (j->rstd) tpurt_dtype_store_f64(j->rstd->dtype, tpurt_tensor_at(j->rstd, tpurt_tensor_offset_of(j->rstd, r, -1)), rstd);
      continue;
    }
    int64_t go = mat_row_off(&j->dy, r);
#define G(i) tpurt_dtype_load_f64(j->dy.t->dtype, tpurt_tensor_at(j->dy.t, go + mat_col_off(&j->dy, (i))))
    double mean = rms ? 0 : tpurt_dtype_load_f64(j->mean->dtype, tpurt_tensor_at(j->mean, tpurt_tensor_offset_of(j->mean, r, -1)));
    double rstd = tpurt_dtype_load_f64(j->rstd->dtype, tpurt_tensor_at(j->rstd, tpurt_tensor_offset_of(j->rstd, r, -1)));
    double s1 = 0, s2 = 0;
    for (int64_t i = 0; i < N; ++i) {
      double xh = (X(i) - mean) * rstd, gw = G(i) * (j->w ? j->w[i] : 1.0);
      s1 += gw; s2 += gw * xh;
      if (dwb) {
        dwb[i] += G(i) * xh;
        dwb[N + i] += G(i);
      }
    }
    if (!j->want_gi) continue;
    int64_t oo = mat_row_off(&j->out, r);
    for (int64_t i = 0; i < N; ++i) {
      double xh = (X(i) - mean) * rstd, gw = G(i) * (j->w ? j->w[i] : 1.0);
      double v = rstd * (gw - (rms ? 0 : s1 / (double)N) - xh * s2 / (double)N);
      tpurt_dtype_store_f64(j->out.t->dtype, tpurt_tensor_at(j->out.t, oo + mat_col_off(&j->out, i)), v);
    }
#undef X
#undef G
  }
}

static bool out_ok(const tpurt_op_call_t* c, int i, int64_t numel) {
  return i < c->num_outputs && c->outputs[i].data != NULL && tpurt_tensor_numel(&c->outputs[i]) == numel;
}

static tpurt_status_t ln_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, ln_mode_t mode, bool ref) {
  ln_job_t j = {.mode = mode};
  bool bwd = mode == LN_BWD || mode == RMS_BWD;
  bool rms = mode == RMS_FWD || mode == RMS_BWD;
  int xi = bwd ? 1 : 0, shape_i = bwd ? 2 : 1;
  const tpurt_tensor_t* in = tpurt_arg_tensor(c, xi);
  int32_t nd;
  const int64_t* shape = tpurt_arg_ints(c, shape_i, &nd);
  if (!in || !shape)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (input, normalized_shape, ...)", c->name);
  if (!tpurt_dtype_is_floating(in->dtype)) return TPURT_REDUCE_UNSUPPORTED(c->name, in->dtype);
  int k = in->ndim - nd;
  if (k < 0) return TPURT_STATUS(INVALID_ARGUMENT, "%s: normalized_shape has %d dims, input only %d", c->name, nd, (int)in->ndim);
  for (int d = 0; d < nd; ++d)
    if (shape[d] != in->sizes[k + d])
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: normalized_shape[%d]=%lld does not match input size %lld", c->name, d,
                          (long long)shape[d], (long long)in->sizes[k + d]);
  j.M = 1;
  j.N = 1;
  for (int d = 0; d < in->ndim; ++d) *(d < k ? &j.M : &j.N) *= in->sizes[d];
  mat_init(&j.x, in, k);
  const tpurt_tensor_t *w = NULL, *b = NULL;
  if (!bwd) {
    if (c->num_outputs < (rms ? 2 : 3)) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing outputs", c->name);
    w = tpurt_arg_tensor(c, 2);
    if (rms) {
      j.eps = !tpurt_arg_present(c, 3)
                  ? (in->dtype == TPURT_DTYPE_FLOAT64 ? DBL_EPSILON : FLT_EPSILON)
                  : tpurt_arg_double(c, 3, 1e-5);
      j.rstd = &c->outputs[1];
    } else {
      b = tpurt_arg_tensor(c, 3);
      j.eps = tpurt_arg_double(c, 4, 1e-5);
      j.mean = &c->outputs[1];
      j.rstd = &c->outputs[2];
    }
    mat_init(&j.out, &c->outputs[0], k);
  } else {
    const tpurt_tensor_t* dy = tpurt_arg_tensor(c, 0);
    if (!dy) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing grad_out", c->name);
    mat_init(&j.dy, dy, k);
    int mask_i;
    if (rms) { j.rstd = tpurt_arg_tensor(c, 3); w = tpurt_arg_tensor(c, 4); mask_i = 5; }
    else { j.mean = tpurt_arg_tensor(c, 3); j.rstd = tpurt_arg_tensor(c, 4); w = tpurt_arg_tensor(c, 5); mask_i = 7; }
    if (!j.rstd || (!rms && !j.mean)) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing mean/rstd", c->name);
    bool mask[3] = {true, true, true};
    tpurt_arg_bool_mask(c, mask_i, 3, mask);
    j.want_gi = mask[0] && out_ok(c, 0, j.M * j.N);
    if (j.want_gi) mat_init(&j.out, &c->outputs[0], k);
    j.want_w = mask[1] && out_ok(c, 1, j.N);
    j.want_b = !rms && mask[2] && out_ok(c, 2, j.N);
  }
  if (j.N == 0) {
    /* empty rows: PyTorch's statistics are mean 0 and rstd NaN (0/0 variance) */
    bool put_mean = !bwd && j.mean && out_ok(c, 1, j.M), put_rstd = !bwd && out_ok(c, rms ? 1 : 2, j.M);
    for (int64_t r = 0; (put_mean || put_rstd) && r < j.M; ++r) {
      if (put_mean) tpurt_dtype_store_f64(j.mean->dtype, tpurt_tensor_at(j.mean, tpurt_tensor_offset_of(j.mean, r, -1)), 0);
      if (put_rstd) tpurt_dtype_store_f64(j.rstd->dtype, tpurt_tensor_at(j.rstd, tpurt_tensor_offset_of(j.rstd, r, -1)), NAN);
    }
    return TPURT_OK;
  }
  if (j.M == 0) {
    /* no rows: the weight/bias gradients are sums over nothing */
    for (int i = 1; bwd && i <= (rms ? 1 : 2); ++i)
      if (out_ok(c, i, j.N))
        for (int64_t k = 0; k < j.N; ++k)
          tpurt_dtype_store_f64(c->outputs[i].dtype, tpurt_tensor_at(&c->outputs[i], tpurt_tensor_offset_of(&c->outputs[i], k, -1)), 0);
    return TPURT_OK;
  }
  int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
  /* float32 and 16-bit rows along one stride: the float32 path */
  bool out_f = (bwd && !j.want_gi) || (j.out.coal && j.out.t->dtype != TPURT_DTYPE_FLOAT64);
  bool dy_f = !bwd || (j.dy.coal && j.dy.t->dtype != TPURT_DTYPE_FLOAT64);
  j.f32 = !ref && in->dtype != TPURT_DTYPE_FLOAT64 && j.x.coal && dy_f && out_f;
  if (j.f32) {
    size_t floats = 2 * (size_t)j.N + 3 * (size_t)j.N * (size_t)nt + (bwd ? 2 * (size_t)j.N * (size_t)nt : 0);
    floats = (floats + 1) & ~(size_t)1; /* the doubles after them stay aligned */
    float* s = tpurt_kernel_scratch(ctx, sizeof(float) * floats + sizeof(double) * 2 * (size_t)j.N + (size_t)nt);
    if (!s) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", c->name);
    float* wbuf = s;
    float* bbuf = s + j.N;
    double* flat = (double*)(s + floats); /* weight/bias and the gradients pass through here */
    j.fstat_eps = (float)j.eps;
    /* the forward's y, the backward's grad_input */
    j.stream = (!bwd || j.want_gi) && j.out.t->dtype == TPURT_DTYPE_FLOAT32 &&
               (size_t)j.M * (size_t)j.N * sizeof(float) >= TPURT_STREAM_BYTES;
    if (w) j.fw = ln_vec_f32(w, j.N, 1, wbuf, flat);
    if (b) j.fb = ln_vec_f32(b, j.N, 0, bbuf, flat);
    j.fbuf = s + 2 * j.N;
    if (j.want_w || j.want_b) {
      j.fpartial = j.fbuf + 3 * (size_t)j.N * (size_t)nt;
      j.touched = (bool*)(flat + 2 * (size_t)j.N);
      memset(j.touched, 0, (size_t)nt);
    }
    tpurt_parallel_for(ctx, j.M, 1 + 16384 / (j.N + 1), ln_rows_f32, &j);
    if (j.want_w || j.want_b) {
      float* acc = NULL;
      for (int t = 0; t < nt; ++t) {
        if (!j.touched[t]) continue;
        float* p = j.fpartial + (size_t)t * 2 * (size_t)j.N;
        if (!acc) { acc = p; continue; }
        for (int64_t i = 0; i < 2 * j.N; ++i) acc[i] += p[i];
      }
      for (int o = 1; acc && o <= 2; ++o) {
        if (!(o == 1 ? j.want_w : j.want_b)) continue;
        for (int64_t i = 0; i < j.N; ++i) flat[i] = acc[(o - 1) * j.N + i];
        store_flat(&c->outputs[o], j.N, flat);
      }
    }
    return TPURT_OK;
  }
  /* one scratch block: weight, bias, row buffers, partials */
  size_t doubles = 2 * (size_t)j.N + 3 * (size_t)j.N * (size_t)nt + (bwd ? 2 * (size_t)j.N * (size_t)nt : 0);
  double* s = tpurt_kernel_scratch(ctx, sizeof(double) * doubles + (size_t)nt);
  if (!s) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", c->name);
  double* wbuf = s;
  double* bbuf = s + j.N;
  if (w) { load_flat(w, j.N, 1, wbuf); j.w = wbuf; }
  if (b) { load_flat(b, j.N, 0, bbuf); j.b = bbuf; }
  j.buf = s + 2 * j.N;
  if (j.want_w || j.want_b) {
    j.partial = j.buf + 3 * (size_t)j.N * (size_t)nt;
    j.touched = (bool*)(j.partial + 2 * (size_t)j.N * (size_t)nt);
    memset(j.touched, 0, (size_t)nt);
  }
  if (ref) {
    if (j.partial) {
      memset(j.partial, 0, sizeof(double) * 2 * (size_t)j.N);
      j.touched[0] = true;
    }
    ln_reference(&j, j.partial);
  } else {
    tpurt_parallel_for(ctx, j.M, 1 + 16384 / (j.N + 1), ln_rows, &j);
  }
  if (j.partial) {
    /* add per-thread partials in thread order into the first touched one */
    double* acc = NULL;
    for (int t = 0; t < nt; ++t) {
      if (!j.touched[t]) continue;
      double* p = j.partial + (size_t)t * 2 * (size_t)j.N;
      if (!acc) { acc = p; continue; }
      for (int64_t i = 0; i < 2 * j.N; ++i) acc[i] += p[i];
    }
    if (acc && j.want_w) store_flat(&c->outputs[1], j.N, acc);
    if (acc && j.want_b) store_flat(&c->outputs[2], j.N, acc + j.N);
  }
  return TPURT_OK;
}

tpurt_status_t tpurt_kernel_native_layer_norm(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return ln_impl(x, c, LN_FWD, false); }
tpurt_status_t tpurt_kernel_native_layer_norm_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return ln_impl(x, c, LN_FWD, true); }
tpurt_status_t tpurt_kernel_native_layer_norm_backward(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return ln_impl(x, c, LN_BWD, false); }
tpurt_status_t tpurt_kernel_native_layer_norm_backward_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return ln_impl(x, c, LN_BWD, true); }
tpurt_status_t tpurt_kernel_fused_rms_norm(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return ln_impl(x, c, RMS_FWD, false); }
tpurt_status_t tpurt_kernel_fused_rms_norm_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return ln_impl(x, c, RMS_FWD, true); }
tpurt_status_t tpurt_kernel_fused_rms_norm_backward(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return ln_impl(x, c, RMS_BWD, false); }
tpurt_status_t tpurt_kernel_fused_rms_norm_backward_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return ln_impl(x, c, RMS_BWD, true); }
