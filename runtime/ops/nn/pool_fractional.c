/* Fractional max pooling (fractional_max_pool2d / 3d and their backwards), as PyTorch's CPU
 * kernels (FractionalMaxPool2d.cpp, FractionalMaxPool3d.cpp): per (n, c) plane the window starts
 * along each spatial dim come from that plane's random sample u in [0, 1) (random_samples
 * [N, C, k]: for 2-D u[0] is W's and u[1] H's; for 3-D u[0] T's, u[1] H's, u[2] W's), as
 *   start[i] = int((i + u) * alpha) - int(u * alpha), alpha = (in - pool) / (out - 1),
 *   start[out - 1] = in - pool,
 * computed in the input's dtype as CPU does. The window's maximum (NaN wins) and its flat index
 * in the plane (t * H * W + h * W + w) are the outputs. The backward scatters grad_output to the
 * indices, accumulating a plane in double. Inputs are [C, (T,) H, W] or [N, C, (T,) H, W] of any
 * strides; a 2-D pool is a 3-D one with T = 1. Plain scalar loops: each is its own reference. */
#include <math.h>
#include <string.h>

#include "ops/nn/nn.h"

/* The volume view: planes (n, c) of T x H x W. */
typedef struct fvol_t {
  int64_t C, sn, sc, T, H, W, st, sh, sw;
} fvol_t;

/* t as planes of `sp` spatial dims (2 or 3), with or without the batch dim. */
static bool fvol_of(const tpurt_tensor_t* t, int sp, fvol_t* v, int64_t* planes) {
  int32_t nd = t->ndim;
  if (nd != sp + 1 && nd != sp + 2) return false;
  bool batched = nd == sp + 2;
  int32_t c = batched ? 1 : 0, s0 = c + 1;
  v->C = t->sizes[c], v->sc = t->strides[c];
  v->sn = batched ? t->strides[0] : 0;
  *planes = (batched ? t->sizes[0] : 1) * v->C;
  if (sp == 3) {
    v->T = t->sizes[s0], v->st = t->strides[s0];
    ++s0;
  } else {
    v->T = 1, v->st = 0;
  }
  v->H = t->sizes[s0], v->sh = t->strides[s0];
  v->W = t->sizes[s0 + 1], v->sw = t->strides[s0 + 1];
  return true;
}

static inline int64_t fvol_off(const fvol_t* v, int64_t plane, int64_t t, int64_t h, int64_t w) {
  return (v->C ? (plane / v->C) * v->sn + (plane % v->C) * v->sc : 0) + t * v->st + h * v->sh + w * v->sw;
}

/* x rounded to dt (float32, float16, bfloat16; float64 as is): CPU's arithmetic in scalar_t */
static double fround(tpurt_dtype_t dt, double x) {
  if (dt == TPURT_DTYPE_FLOAT64) return x;
  if (dt == TPURT_DTYPE_FLOAT32) return (double)(float)x;
  char b[8];
  tpurt_dtype_store_f64(dt, b, x);
  return tpurt_dtype_load_f64(dt, b);
}

/* CPU's generate_intervals<scalar_t>(sample, in, out, pool) into seq[out] */
static void fintervals(tpurt_dtype_t dt, double u, int64_t in, int64_t out, int64_t pool, int64_t* seq) {
  if (out > 1) {
    double alpha = fround(dt, fround(dt, (double)(in - pool)) / fround(dt, (double)(out - 1)));
    for (int64_t i = 0; i < out - 1; ++i) {
      double a = fround(dt, fround(dt, (double)i + u) * alpha), b = fround(dt, u * alpha);
      seq[i] = (int64_t)(int)a - (int64_t)(int)b;
    }
  }
  if (out > 0) seq[out - 1] = in - pool;
}

typedef struct fpool_t {
  const tpurt_tensor_t *in, *out, *ind, *samples;
  fvol_t vi, vo, vind;
  int sp;
  int64_t kt, kh, kw;
  int64_t* seq; /* per thread: OT + OH + OW starts */
  int64_t bad;  /* a window that leaves the input, or -1 */
} fpool_t;

static void fpool_planes(void* u, int64_t p0, int64_t p1, int tid) {
  fpool_t* f = (fpool_t*)u;
  tpurt_dtype_t dt = f->in->dtype;
  size_t es = tpurt_dtype_size(dt);
  int64_t *st = f->seq + (size_t)tid * (size_t)(f->vo.T + f->vo.H + f->vo.W), *sh = st + f->vo.T, *sw = sh + f->vo.H;
  const tpurt_tensor_t* rs = f->samples;
  for (int64_t p = p0; p < p1; ++p) {
    /* random_samples[n, c, k] */
    int64_t n = f->vi.C ? p / f->vi.C : 0, c = f->vi.C ? p % f->vi.C : 0;
    int64_t rb = n * rs->strides[0] + c * rs->strides[1];
#define SAMPLE(K) tpurt_nn_ld(rs, rb + (K) * rs->strides[2])
    if (f->sp == 3) {
      fintervals(dt, SAMPLE(0), f->vi.T, f->vo.T, f->kt, st);
      fintervals(dt, SAMPLE(1), f->vi.H, f->vo.H, f->kh, sh);
      fintervals(dt, SAMPLE(2), f->vi.W, f->vo.W, f->kw, sw);
    } else {
      st[0] = 0;
      fintervals(dt, SAMPLE(0), f->vi.W, f->vo.W, f->kw, sw);
      fintervals(dt, SAMPLE(1), f->vi.H, f->vo.H, f->kh, sh);
    }
#undef SAMPLE
    for (int64_t ot = 0; ot < f->vo.T; ++ot)
      for (int64_t oh = 0; oh < f->vo.H; ++oh)
        for (int64_t ow = 0; ow < f->vo.W; ++ow) {
          int64_t t0 = st[ot], h0 = sh[oh], w0 = sw[ow];
          if (t0 < 0 || h0 < 0 || w0 < 0 || t0 + f->kt > f->vi.T || h0 + f->kh > f->vi.H || w0 + f->kw > f->vi.W) {
            f->bad = p;
            continue;
          }
          int64_t best = (t0 * f->vi.H + h0) * f->vi.W + w0;
          double bv = -INFINITY;
          const char* bp = NULL;
          for (int64_t t = t0; t < t0 + f->kt; ++t)
            for (int64_t h = h0; h < h0 + f->kh; ++h)
              for (int64_t w = w0; w < w0 + f->kw; ++w) {
                int64_t off = fvol_off(&f->vi, p, t, h, w);
                double v = tpurt_nn_ld(f->in, off);
                if (v > bv || isnan(v)) {
                  bv = v, best = (t * f->vi.H + h) * f->vi.W + w;
                  bp = (const char*)f->in->data + off * (int64_t)es;
                }
              }
          char* o = (char*)f->out->data + fvol_off(&f->vo, p, ot, oh, ow) * (int64_t)es;
          if (bp) memcpy(o, bp, es); /* exact: the chosen element itself */
          else tpurt_dtype_store_f64(dt, o, -INFINITY);
          ((int64_t*)f->ind->data)[fvol_off(&f->vind, p, ot, oh, ow)] = best;
        }
  }
}

/* fractional_max_pool{2,3}d(self, kernel_size, output_size, random_samples) -> (output, indices) */
static tpurt_status_t fpool_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, int sp, bool ref) {
  const tpurt_tensor_t *in = NULL, *rs = NULL, *out = NULL, *ind = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &in));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 3, 3, &rs));
  TPURT_RETURN_IF_ERROR(tpurt_nn_output(call, 0, &out));
  TPURT_RETURN_IF_ERROR(tpurt_nn_output(call, 1, &ind));
  fpool_t f = {in, out, ind, rs};
  f.sp = sp, f.bad = -1;
  int64_t pi, po, pind, k[3];
  if (!fvol_of(in, sp, &f.vi, &pi) || !fvol_of(out, sp, &f.vo, &po) || !fvol_of(ind, sp, &f.vind, &pind) ||
      in->ndim != out->ndim || pi != po || pind != po || f.vind.T != f.vo.T || f.vind.H != f.vo.H ||
      f.vind.W != f.vo.W || ind->dtype != TPURT_DTYPE_INT64 || out->dtype != in->dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a %d-D or %d-D input, and an output and int64 indices of "
                        "its planes", call->name, sp + 1, sp + 2);
  if (!tpurt_dtype_is_floating(in->dtype) || rs->dtype != in->dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a floating input and random_samples of its dtype, got %s and %s",
                        call->name, tpurt_dtype_name(in->dtype), tpurt_dtype_name(rs->dtype));
  int64_t nb = in->ndim == sp + 2 ? in->sizes[0] : 1;
  if (rs->sizes[0] < nb || rs->sizes[1] < f.vi.C || rs->sizes[2] < sp)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: random_samples of shape [%lld, %lld, %lld] for %lld x %lld planes",
                        call->name, (long long)rs->sizes[0], (long long)rs->sizes[1], (long long)rs->sizes[2],
                        (long long)nb, (long long)f.vi.C);
  TPURT_RETURN_IF_ERROR(tpurt_arg_int_n(call, 1, sp, NULL, k));
  f.kt = sp == 3 ? k[0] : 1, f.kh = k[sp - 2], f.kw = k[sp - 1];
  if (f.kt < 1 || f.kh < 1 || f.kw < 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: pool sizes must be positive", call->name);
  if (tpurt_tensor_numel(out) == 0) return TPURT_OK;
  int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
  f.seq = tpurt_kernel_scratch(ctx, (size_t)nt * (size_t)(f.vo.T + f.vo.H + f.vo.W) * sizeof(int64_t));
  if (!f.seq) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", call->name);
  if (ref) fpool_planes(&f, 0, po, 0);
  else tpurt_parallel_for(ctx, po, 1, fpool_planes, &f);
  if (f.bad != -1)
    return TPURT_STATUS(OUT_OF_RANGE, "%s: a pooling window of plane %lld leaves the input (a random sample "
                        "outside [0, 1))", call->name, (long long)f.bad);
  return TPURT_OK;
}

typedef struct fscatter_t {
  const tpurt_tensor_t *go, *ind, *gi;
  fvol_t vgo, vind, vgi;
  double* acc; /* per thread: T * H * W doubles */
  int64_t bad;
} fscatter_t;

static void fscatter_planes(void* u, int64_t p0, int64_t p1, int tid) {
  fscatter_t* s = (fscatter_t*)u;
  int64_t vol = s->vgi.T * s->vgi.H * s->vgi.W;
  double* acc = s->acc + (size_t)tid * (size_t)vol;
  for (int64_t p = p0; p < p1; ++p) {
    memset(acc, 0, (size_t)vol * sizeof(double));
    for (int64_t t = 0; t < s->vgo.T; ++t)
      for (int64_t h = 0; h < s->vgo.H; ++h)
        for (int64_t w = 0; w < s->vgo.W; ++w) {
          int64_t idx = ((const int64_t*)s->ind->data)[fvol_off(&s->vind, p, t, h, w)];
          if (idx < 0 || idx >= vol) {
            s->bad = idx;
            continue;
          }
          acc[idx] += tpurt_nn_ld(s->go, fvol_off(&s->vgo, p, t, h, w));
        }
    for (int64_t t = 0; t < s->vgi.T; ++t)
      for (int64_t h = 0; h < s->vgi.H; ++h)
        for (int64_t w = 0; w < s->vgi.W; ++w)
          tpurt_nn_st(s->gi, fvol_off(&s->vgi, p, t, h, w), acc[(t * s->vgi.H + h) * s->vgi.W + w]);
  }
}

/* fractional_max_pool{2,3}d_backward(grad_output, self, kernel_size, output_size, indices) -> grad_input */
static tpurt_status_t fpool_bwd_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, int sp, bool ref) {
  const tpurt_tensor_t *go = NULL, *ind = NULL, *gi = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &go));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 4, -1, &ind));
  TPURT_RETURN_IF_ERROR(tpurt_nn_output(call, 0, &gi));
  fscatter_t s = {go, ind, gi};
  s.bad = -1;
  int64_t pgo, pind, pgi;
  if (!fvol_of(go, sp, &s.vgo, &pgo) || !fvol_of(ind, sp, &s.vind, &pind) || !fvol_of(gi, sp, &s.vgi, &pgi) ||
      pgo != pgi || pind != pgo || s.vind.T != s.vgo.T || s.vind.H != s.vgo.H || s.vind.W != s.vgo.W ||
      ind->dtype != TPURT_DTYPE_INT64 || !tpurt_dtype_is_floating(gi->dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected grad_output and int64 indices of the same planes as "
                        "grad_input", call->name);
  if (tpurt_tensor_numel(gi) == 0) return TPURT_OK;
  int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
  s.acc = tpurt_kernel_scratch(ctx, (size_t)nt * (size_t)(s.vgi.T * s.vgi.H * s.vgi.W) * sizeof(double));
  if (!s.acc) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", call->name);
  if (ref) fscatter_planes(&s, 0, pgi, 0);
  else tpurt_parallel_for(ctx, pgi, 1, fscatter_planes, &s);
  if (s.bad != -1)
    return TPURT_STATUS(OUT_OF_RANGE, "%s: index %lld out of range for a plane of %lld elements", call->name,
                        (long long)s.bad, (long long)(s.vgi.T * s.vgi.H * s.vgi.W));
  return TPURT_OK;
}

TPURT_NN_PAIR(fractional_max_pool2d, fpool_impl(ctx, call, 2, ref))
TPURT_NN_PAIR(fractional_max_pool2d_backward, fpool_bwd_impl(ctx, call, 2, ref))
TPURT_NN_PAIR(fractional_max_pool3d, fpool_impl(ctx, call, 3, ref))
TPURT_NN_PAIR(fractional_max_pool3d_backward, fpool_bwd_impl(ctx, call, 3, ref))
