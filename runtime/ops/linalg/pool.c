/* 2-D pooling and upsampling kernels (max_pool2d_with_indices, avg_pool2d,
 * adaptive avg/max pool, upsample nearest/bilinear; each with backward), on
 * 3-D [C, H, W] or 4-D [N, C, H, W] tensors of any strides. Work splits over
 * (n, c) planes; the window rules follow PyTorch's CPU kernels. These ops are
 * memory-bound scalar loops, so the reference is the same loop run serially
 * (the obviously-correct form already). Backward passes accumulate a plane in
 * double and round once. */
#include <math.h>
#include <string.h>

#include "ops/linalg/linalg.h"

typedef struct plane_t {
  int64_t count, C, sn, sc, H, W, sh, sw;
} plane_t;

static bool plane_of(const tpurt_tensor_t* t, plane_t* p) {
  if (t->ndim == 4) {
    *p = (plane_t){t->sizes[0] * t->sizes[1], t->sizes[1], t->strides[0], t->strides[1],
                   t->sizes[2], t->sizes[3], t->strides[2], t->strides[3]};
    return true;
  }
  if (t->ndim == 3) {
    *p = (plane_t){t->sizes[0], t->sizes[0], 0, t->strides[0], t->sizes[1], t->sizes[2],
                   t->strides[1], t->strides[2]};
    return true;
  }
  return false;
}
static inline int64_t plane_off(const plane_t* p, int64_t i) {
  return p->C ? (i / p->C) * p->sn + (i % p->C) * p->sc : 0;
}
static inline char* at(const tpurt_tensor_t* t, const plane_t* p, int64_t plane, int64_t h, int64_t w) {
  return (char*)t->data + (size_t)(plane_off(p, plane) + h * p->sh + w * p->sw) * tpurt_dtype_size(t->dtype);
}

static bool dt_float(tpurt_dtype_t d) { return tpurt_dtype_is_floating(d); }

/* Two ints from an int[2] argument (one value means both; empty -> dflt). */
static tpurt_status_t pair_arg(const tpurt_op_call_t* call, int i, const int64_t* dflt, int64_t* out) {
  const tpurt_arg_t* a = i < call->num_args ? &call->args[i] : NULL;
  if (!a || a->kind == TPURT_ARG_NONE || (a->kind == TPURT_ARG_INT_LIST && a->count == 0)) {
    if (!dflt) return TPURT_STATUS(INVALID_ARGUMENT, "%s: argument %d is required", call->name, i);
    out[0] = dflt[0], out[1] = dflt[1];
    return TPURT_OK;
  }
  if (a->kind == TPURT_ARG_INT) {
    out[0] = out[1] = a->v.i;
    return TPURT_OK;
  }
  if (a->kind != TPURT_ARG_INT_LIST || a->count > 2)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: argument %d must be one or two ints", call->name, i);
  out[0] = a->v.ints[0];
  out[1] = a->v.ints[a->count == 2 ? 1 : 0];
  return TPURT_OK;
}
static bool bool_arg(const tpurt_op_call_t* call, int i, bool dflt) {
  return i < call->num_args && call->args[i].kind == TPURT_ARG_BOOL ? call->args[i].v.b : dflt;
}
static bool opt_double(const tpurt_op_call_t* call, int i, double* out) {
  if (i < call->num_args && call->args[i].kind == TPURT_ARG_DOUBLE) { *out = call->args[i].v.d; return true; }
  if (i < call->num_args && call->args[i].kind == TPURT_ARG_INT) { *out = (double)call->args[i].v.i; return true; }
  return false;
}

static tpurt_status_t out0(const tpurt_op_call_t* call, int i, const tpurt_tensor_t** o) {
  if (i >= call->num_outputs) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing output %d", call->name, i);
  *o = &call->outputs[i];
  return TPURT_OK;
}

static void run_planes(tpurt_kernel_ctx_t* ctx, bool ref, int64_t n, tpurt_range_fn_t fn, void* u) {
  if (n <= 0) return;
  if (ref) fn(u, 0, n, 0);
  else tpurt_parallel_for(ctx, n, 1, fn, u);
}

static tpurt_status_t check_planes(const tpurt_op_call_t* call, const tpurt_tensor_t* a, const tpurt_tensor_t* b,
                                   plane_t* pa, plane_t* pb) {
  if (!plane_of(a, pa) || !plane_of(b, pb) || a->ndim != b->ndim)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected 3-D or 4-D tensors, got %d-D and %d-D", call->name,
                        (int)a->ndim, (int)b->ndim);
  if (pa->count != pb->count || (a->ndim == 4 && a->sizes[1] != b->sizes[1]))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: batch/channel sizes differ", call->name);
  return TPURT_OK;
}

/* ---- max pooling (windowed and adaptive): value and flat index h * W + w ---- */
typedef struct maxpool_t {
  const tpurt_tensor_t *in, *out, *ind;
  plane_t pi, po, pind;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool adaptive;
} maxpool_t;

static inline int64_t a_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
static inline int64_t a_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

static void maxpool_planes(void* u, int64_t p0, int64_t p1, int tid) {
  maxpool_t* m = (maxpool_t*)u;
  tpurt_dtype_t dt = m->in->dtype;
  size_t es = tpurt_dtype_size(dt);
  bool fl = dt_float(dt);
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t oh = 0; oh < m->po.H; ++oh)
      for (int64_t ow = 0; ow < m->po.W; ++ow) {
        int64_t h0, h1, w0, w1, dh = 1, dw = 1;
        if (m->adaptive) {
          h0 = a_start(oh, m->pi.H, m->po.H), h1 = a_end(oh, m->pi.H, m->po.H);
          w0 = a_start(ow, m->pi.W, m->po.W), w1 = a_end(ow, m->pi.W, m->po.W);
        } else {
          dh = m->dh, dw = m->dw;
          h0 = oh * m->sh - m->ph, w0 = ow * m->sw - m->pw;
          h1 = h0 + (m->kh - 1) * dh + 1, w1 = w0 + (m->kw - 1) * dw + 1;
          if (h1 > m->pi.H) h1 = m->pi.H;
          if (w1 > m->pi.W) w1 = m->pi.W;
          while (h0 < 0) h0 += dh;
          while (w0 < 0) w0 += dw;
        }
        int64_t best = h0 * m->pi.W + w0;
        const char* bp = NULL;
        double bv = -INFINITY;
        int64_t bi = INT64_MIN;
        for (int64_t h = h0; h < h1; h += dh)
          for (int64_t w = w0; w < w1; w += dw) {
            const char* e = at(m->in, &m->pi, p, h, w);
            bool take;
            if (fl) {
              double v = tpurt_dtype_load_f64(dt, e);
              take = v > bv || isnan(v) || !bp;
              if (take) bv = v;
            } else {
              int64_t v = tpurt_dtype_load_i64(dt, e);
              take = v > bi || !bp;
              if (take) bi = v;
            }
            if (take) bp = e, best = h * m->pi.W + w;
          }
        char* o = at(m->out, &m->po, p, oh, ow);
        if (bp) memcpy(o, bp, es); /* exact: the chosen element itself */
        else if (fl) tpurt_dtype_store_f64(dt, o, -INFINITY);
        else tpurt_dtype_store_i64(dt, o, 0);
        if (m->ind) *(int64_t*)at(m->ind, &m->pind, p, oh, ow) = best;
      }
}

/* With the -inf start value PyTorch keeps the first element when all are
 * -inf; `!bp` does the same here. */

static tpurt_status_t maxpool_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool adaptive, bool ref) {
  const tpurt_tensor_t *in = NULL, *out = NULL, *ind = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_linalg_tensor_arg(call, 0, -1, &in));
  TPURT_RETURN_IF_ERROR(out0(call, 0, &out));
  if (call->num_outputs > 1) ind = &call->outputs[1];
  maxpool_t m = {in, out, ind};
  TPURT_RETURN_IF_ERROR(check_planes(call, in, out, &m.pi, &m.po));
  if (ind && (!plane_of(ind, &m.pind) || ind->dtype != TPURT_DTYPE_INT64))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: indices must be int64 shaped like the output", call->name);
  if (out->dtype != in->dtype) return TPURT_STATUS(INVALID_ARGUMENT, "%s: dtype mismatch", call->name);
  m.adaptive = adaptive;
  if (!adaptive) {
    int64_t k[2], s[2], pd[2], dl[2], zero[2] = {0, 0}, one[2] = {1, 1};
    TPURT_RETURN_IF_ERROR(pair_arg(call, 1, NULL, k));
    TPURT_RETURN_IF_ERROR(pair_arg(call, 2, k, s));
    TPURT_RETURN_IF_ERROR(pair_arg(call, 3, zero, pd));
    TPURT_RETURN_IF_ERROR(pair_arg(call, 4, one, dl));
    if (k[0] < 1 || k[1] < 1 || s[0] < 1 || s[1] < 1 || dl[0] < 1 || dl[1] < 1 || pd[0] < 0 || pd[1] < 0)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: kernel %lldx%lld, stride %lldx%lld, dilation %lldx%lld, padding %lldx%lld",
                          call->name, (long long)k[0], (long long)k[1], (long long)s[0], (long long)s[1],
                          (long long)dl[0], (long long)dl[1], (long long)pd[0], (long long)pd[1]);
    m.kh = k[0], m.kw = k[1], m.sh = s[0], m.sw = s[1], m.ph = pd[0], m.pw = pd[1], m.dh = dl[0], m.dw = dl[1];
  } else if (m.po.H > 0 && m.po.W > 0 && (m.pi.H == 0 || m.pi.W == 0)) {
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: empty input plane", call->name);
  }
  if (m.po.H == 0 || m.po.W == 0) return TPURT_OK;
  run_planes(ctx, ref, m.po.count, maxpool_planes, &m);
  return TPURT_OK;
}

/* ---- scatter of grad by indices (max pool backward) ---- */
typedef struct scatter_t {
  const tpurt_tensor_t *go, *ind, *gi;
  plane_t pgo, pind, pgi;
  double* acc; /* per thread: H*W doubles */
  int64_t bad; /* first out-of-range index seen, or -1 */
} scatter_t;

static void scatter_planes(void* u, int64_t p0, int64_t p1, int tid) {
  scatter_t* s = (scatter_t*)u;
  int64_t hw = s->pgi.H * s->pgi.W;
  double* acc = s->acc + (size_t)tid * (size_t)hw;
  for (int64_t p = p0; p < p1; ++p) {
    memset(acc, 0, (size_t)hw * sizeof(double));
    for (int64_t oh = 0; oh < s->pgo.H; ++oh)
      for (int64_t ow = 0; ow < s->pgo.W; ++ow) {
        int64_t idx = *(const int64_t*)at(s->ind, &s->pind, p, oh, ow);
        if (idx < 0 || idx >= hw) {
          s->bad = idx; /* any one bad value is enough to report */
          continue;
        }
        acc[idx] += tpurt_dtype_load_f64(s->go->dtype, at(s->go, &s->pgo, p, oh, ow));
      }
    for (int64_t h = 0; h < s->pgi.H; ++h)
      for (int64_t w = 0; w < s->pgi.W; ++w)
        tpurt_dtype_store_f64(s->gi->dtype, at(s->gi, &s->pgi, p, h, w), acc[h * s->pgi.W + w]);
  }
}

/* max_pool2d_with_indices_backward(grad_output, self, k, s, p, d, ceil, indices) and
 * adaptive_max_pool2d_backward(grad_output, self, indices) */
static tpurt_status_t maxpool_bwd_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, int ind_arg, bool ref) {
  const tpurt_tensor_t *go = NULL, *self = NULL, *ind = NULL, *gi = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_linalg_tensor_arg(call, 0, -1, &go));
  TPURT_RETURN_IF_ERROR(tpurt_linalg_tensor_arg(call, 1, -1, &self));
  TPURT_RETURN_IF_ERROR(tpurt_linalg_tensor_arg(call, ind_arg, -1, &ind));
  TPURT_RETURN_IF_ERROR(out0(call, 0, &gi));
  scatter_t s = {go, ind, gi};
  s.bad = -1;
  TPURT_RETURN_IF_ERROR(check_planes(call, go, gi, &s.pgo, &s.pgi));
  if (!plane_of(ind, &s.pind) || ind->dtype != TPURT_DTYPE_INT64 || s.pind.H != s.pgo.H || s.pind.W != s.pgo.W)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: indices must be int64 shaped like grad_output", call->name);
  if (tpurt_tensor_numel(gi) == 0) return TPURT_OK;
  int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
  s.acc = tpurt_kernel_scratch(ctx, (size_t)nt * (size_t)(s.pgi.H * s.pgi.W) * sizeof(double));
  if (!s.acc) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", call->name);
  run_planes(ctx, ref, s.pgi.count, scatter_planes, &s);
  if (s.bad != -1)
    return TPURT_STATUS(OUT_OF_RANGE, "%s: index %lld out of range for a %lldx%lld plane", call->name,
                        (long long)s.bad, (long long)s.pgi.H, (long long)s.pgi.W);
  return TPURT_OK;
}

/* ---- average pooling (windowed and adaptive), forward and backward ---- */
typedef struct avgpool_t {
  const tpurt_tensor_t *src, *dst; /* fwd: input -> output; bwd: grad_output -> grad_input */
  plane_t ps, pd;
  int64_t kh, kw, sh, sw, ph, pw;
  bool count_include_pad, has_div, adaptive, backward;
  int64_t divisor;
  int64_t H, W, OH, OW; /* input plane and output plane sizes */
  double* acc;
} avgpool_t;

/* Window of output (oh, ow) clipped to the input, and its divisor. */
static bool avg_window(const avgpool_t* a, int64_t oh, int64_t ow, int64_t* h0, int64_t* h1, int64_t* w0,
                       int64_t* w1, int64_t* div) {
  if (a->adaptive) {
    *h0 = a_start(oh, a->H, a->OH), *h1 = a_end(oh, a->H, a->OH);
    *w0 = a_start(ow, a->W, a->OW), *w1 = a_end(ow, a->W, a->OW);
    *div = (*h1 - *h0) * (*w1 - *w0);
    return *div > 0;
  }
  int64_t hs = oh * a->sh - a->ph, ws = ow * a->sw - a->pw;
  int64_t he = hs + a->kh, we = ws + a->kw;
  if (he > a->H + a->ph) he = a->H + a->ph;
  if (we > a->W + a->pw) we = a->W + a->pw;
  int64_t pool = (he - hs) * (we - ws);
  if (hs < 0) hs = 0;
  if (ws < 0) ws = 0;
  if (he > a->H) he = a->H;
  if (we > a->W) we = a->W;
  *h0 = hs, *h1 = he, *w0 = ws, *w1 = we;
  if (hs >= he || ws >= we) return false;
  *div = a->has_div ? a->divisor : a->count_include_pad ? pool : (he - hs) * (we - ws);
  return true;
}

static void avgpool_planes(void* u, int64_t p0, int64_t p1, int tid) {
  avgpool_t* a = (avgpool_t*)u;
  tpurt_dtype_t sd = a->src->dtype, dd = a->dst->dtype;
  bool fl = dt_float(dd);
  double* acc = a->backward ? a->acc + (size_t)tid * (size_t)(a->H * a->W) : NULL;
  for (int64_t p = p0; p < p1; ++p) {
    if (acc) memset(acc, 0, (size_t)(a->H * a->W) * sizeof(double));
    for (int64_t oh = 0; oh < a->OH; ++oh)
      for (int64_t ow = 0; ow < a->OW; ++ow) {
        int64_t h0, h1, w0, w1, div = 1;
        bool ok = avg_window(a, oh, ow, &h0, &h1, &w0, &w1, &div);
        if (a->backward) {
          if (!ok) continue;
          double g = tpurt_dtype_load_f64(sd, at(a->src, &a->ps, p, oh, ow)) / (double)div;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) acc[h * a->W + w] += g;
          continue;
        }
        char* o = at(a->dst, &a->pd, p, oh, ow);
        if (!ok) {
          tpurt_dtype_store_i64(dd, o, 0);
          continue;
        }
        if (fl) {
          double s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += tpurt_dtype_load_f64(sd, at(a->src, &a->ps, p, h, w));
          tpurt_dtype_store_f64(dd, o, s / (double)div);
        } else {
          int64_t s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += tpurt_dtype_load_i64(sd, at(a->src, &a->ps, p, h, w));
          tpurt_dtype_store_i64(dd, o, div ? s / div : 0);
        }
      }
    if (acc)
      for (int64_t h = 0; h < a->H; ++h)
        for (int64_t w = 0; w < a->W; ++w)
          tpurt_dtype_store_f64(dd, at(a->dst, &a->pd, p, h, w), acc[h * a->W + w]);
  }
}

/* avg_pool2d(self, k, stride, padding, ceil_mode, count_include_pad, divisor_override)
 * avg_pool2d_backward(grad_output, self, k, stride, padding, ceil_mode, count_include_pad, divisor_override)
 * _adaptive_avg_pool2d(self, output_size); _adaptive_avg_pool2d_backward(grad_output, self) */
static tpurt_status_t avgpool_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool adaptive,
                                   bool backward, bool ref) {
  const tpurt_tensor_t *src = NULL, *dst = NULL, *self = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_linalg_tensor_arg(call, 0, -1, &src));
  if (backward) TPURT_RETURN_IF_ERROR(tpurt_linalg_tensor_arg(call, 1, -1, &self));
  TPURT_RETURN_IF_ERROR(out0(call, 0, &dst));
  avgpool_t a = {src, dst};
  TPURT_RETURN_IF_ERROR(check_planes(call, src, dst, &a.ps, &a.pd));
  if (!dt_float(dst->dtype) && (adaptive || backward || dst->dtype == TPURT_DTYPE_UINT8 || dst->dtype == TPURT_DTYPE_BOOL))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for %s", call->name, tpurt_dtype_name(dst->dtype));
  a.adaptive = adaptive, a.backward = backward;
  const plane_t* in_plane = backward ? &a.pd : &a.ps;
  const plane_t* out_plane = backward ? &a.ps : &a.pd;
  a.H = in_plane->H, a.W = in_plane->W, a.OH = out_plane->H, a.OW = out_plane->W;
  int base = backward ? 2 : 1;
  if (!adaptive) {
    int64_t k[2], s[2], pd[2], zero[2] = {0, 0};
    TPURT_RETURN_IF_ERROR(pair_arg(call, base, NULL, k));
    TPURT_RETURN_IF_ERROR(pair_arg(call, base + 1, k, s));
    TPURT_RETURN_IF_ERROR(pair_arg(call, base + 2, zero, pd));
    if (k[0] < 1 || k[1] < 1 || s[0] < 1 || s[1] < 1 || pd[0] < 0 || pd[1] < 0)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: kernel %lldx%lld, stride %lldx%lld, padding %lldx%lld", call->name,
                          (long long)k[0], (long long)k[1], (long long)s[0], (long long)s[1], (long long)pd[0],
                          (long long)pd[1]);
    a.kh = k[0], a.kw = k[1], a.sh = s[0], a.sw = s[1], a.ph = pd[0], a.pw = pd[1];
    a.count_include_pad = bool_arg(call, base + 4, true);
    int di = base + 5;
    if (di < call->num_args && call->args[di].kind == TPURT_ARG_INT) {
      a.has_div = true;
      a.divisor = call->args[di].v.i;
      if (a.divisor == 0) return TPURT_STATUS(INVALID_ARGUMENT, "%s: divisor must be non-zero", call->name);
    }
  } else if (a.OH > 0 && a.OW > 0 && (a.H == 0 || a.W == 0)) {
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: empty input plane", call->name);
  }
  if (tpurt_tensor_numel(dst) == 0) return TPURT_OK;
  if (backward) {
    int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
    a.acc = tpurt_kernel_scratch(ctx, (size_t)nt * (size_t)(a.H * a.W) * sizeof(double));
    if (!a.acc) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", call->name);
  }
  run_planes(ctx, ref, a.pd.count, avgpool_planes, &a);
  return TPURT_OK;
}

/* ---- upsampling: nearest and bilinear, forward and backward ---- */
typedef struct upsample_t {
  const tpurt_tensor_t *src, *dst;
  plane_t ps, pd;
  int64_t H, W, OH, OW; /* input and output plane sizes */
  bool bilinear, align_corners, backward, has_sh, has_sw;
  double scale_h, scale_w;
  double* acc;
} upsample_t;

/* PyTorch's index math runs in the op's "opmath" type: float for float and
 * the 16-bit types, double for double. REAL picks it. */
#define DEFINE_SRC_INDEX(SUF, REAL, FLOOR)                                                         \
  static REAL scales_value_##SUF(bool has, double scale, int64_t in, int64_t out) {               \
    return has && scale > 0 ? (REAL)(1.0 / scale) : (REAL)in / (REAL)out;                         \
  }                                                                                               \
  static int64_t nearest_src_##SUF(int64_t o, int64_t in, int64_t out, bool has, double scale) {  \
    if (out == in) return o;                                                                      \
    if (out == 2 * in) return o >> 1;                                                             \
    REAL s = scales_value_##SUF(has, scale, in, out);                                             \
    int64_t i = (int64_t)FLOOR((REAL)o * s);                                                      \
    return i < in - 1 ? i : in - 1;                                                               \
  }                                                                                               \
  static void linear_src_##SUF(int64_t o, int64_t in, int64_t out, bool align, bool has,          \
                               double scale, int64_t* i0, int64_t* i1, double* l0, double* l1) {  \
    if (in == out) {                                                                              \
      *i0 = *i1 = o, *l0 = 1, *l1 = 0;                                                            \
      return;                                                                                     \
    }                                                                                             \
    REAL ratio = align ? (out > 1 ? (REAL)(in - 1) / (REAL)(out - 1) : (REAL)0)                   \
                       : scales_value_##SUF(has, scale, in, out);                                 \
    REAL real = align ? ratio * (REAL)o : ratio * ((REAL)o + (REAL)0.5) - (REAL)0.5;              \
    if (!align && real < 0) real = 0;                                                             \
    *i0 = (int64_t)real;                                                                          \
    *i1 = *i0 + (*i0 < in - 1 ? 1 : 0);                                                           \
    REAL lam = real - (REAL)*i0;                                                                  \
    lam = lam < 0 ? 0 : lam > 1 ? 1 : lam;                                                        \
    *l1 = lam, *l0 = (REAL)1 - lam;                                                               \
  }
DEFINE_SRC_INDEX(f, float, floorf)
DEFINE_SRC_INDEX(d, double, floor)

/* Source pair and weights of output index o along one axis (PyTorch's
 * compute_source_index_and_lambda / nearest_idx). */
static void linear_src(bool dbl, int64_t o, int64_t in, int64_t out, bool align, bool has, double scale, int64_t* i0,
                       int64_t* i1, double* l0, double* l1) {
  if (dbl) linear_src_d(o, in, out, align, has, scale, i0, i1, l0, l1);
  else linear_src_f(o, in, out, align, has, scale, i0, i1, l0, l1);
}
static int64_t nearest_src(bool dbl, int64_t o, int64_t in, int64_t out, bool has, double scale) {
  return dbl ? nearest_src_d(o, in, out, has, scale) : nearest_src_f(o, in, out, has, scale);
}

static void upsample_planes(void* u, int64_t p0, int64_t p1, int tid) {
  upsample_t* a = (upsample_t*)u;
  tpurt_dtype_t sd = a->src->dtype, dd = a->dst->dtype;
  double* acc = a->backward ? a->acc + (size_t)tid * (size_t)(a->H * a->W) : NULL;
  bool dbl = dd == TPURT_DTYPE_FLOAT64;
  for (int64_t p = p0; p < p1; ++p) {
    if (acc) memset(acc, 0, (size_t)(a->H * a->W) * sizeof(double));
    for (int64_t oh = 0; oh < a->OH; ++oh) {
      int64_t h0, h1;
      double lh0 = 1, lh1 = 0;
      if (a->bilinear) linear_src(dbl, oh, a->H, a->OH, a->align_corners, a->has_sh, a->scale_h, &h0, &h1, &lh0, &lh1);
      else h0 = h1 = nearest_src(dbl, oh, a->H, a->OH, a->has_sh, a->scale_h);
      for (int64_t ow = 0; ow < a->OW; ++ow) {
        int64_t w0, w1;
        double lw0 = 1, lw1 = 0;
        if (a->bilinear) linear_src(dbl, ow, a->W, a->OW, a->align_corners, a->has_sw, a->scale_w, &w0, &w1, &lw0, &lw1);
        else w0 = w1 = nearest_src(dbl, ow, a->W, a->OW, a->has_sw, a->scale_w);
        if (a->backward) {
          double g = tpurt_dtype_load_f64(sd, at(a->src, &a->ps, p, oh, ow));
          if (!a->bilinear) {
            acc[h0 * a->W + w0] += g;
          } else {
            acc[h0 * a->W + w0] += lh0 * lw0 * g;
            acc[h0 * a->W + w1] += lh0 * lw1 * g;
            acc[h1 * a->W + w0] += lh1 * lw0 * g;
            acc[h1 * a->W + w1] += lh1 * lw1 * g;
          }
          continue;
        }
        char* o = at(a->dst, &a->pd, p, oh, ow);
        if (!a->bilinear) {
          memcpy(o, at(a->src, &a->ps, p, h0, w0), tpurt_dtype_size(dd));
          continue;
        }
        double v = lh0 * (lw0 * tpurt_dtype_load_f64(sd, at(a->src, &a->ps, p, h0, w0)) +
                          lw1 * tpurt_dtype_load_f64(sd, at(a->src, &a->ps, p, h0, w1))) +
                   lh1 * (lw0 * tpurt_dtype_load_f64(sd, at(a->src, &a->ps, p, h1, w0)) +
                          lw1 * tpurt_dtype_load_f64(sd, at(a->src, &a->ps, p, h1, w1)));
        tpurt_dtype_store_f64(dd, o, v);
      }
    }
    if (acc)
      for (int64_t h = 0; h < a->H; ++h)
        for (int64_t w = 0; w < a->W; ++w) tpurt_dtype_store_f64(dd, at(a->dst, &a->pd, p, h, w), acc[h * a->W + w]);
  }
}

static tpurt_status_t upsample_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const tpurt_tensor_t* src,
                                   const tpurt_tensor_t* dst, bool bilinear, bool backward, bool align,
                                   bool has_sh, double sh, bool has_sw, double sw, bool ref) {
  upsample_t a = {src, dst};
  TPURT_RETURN_IF_ERROR(check_planes(call, src, dst, &a.ps, &a.pd));
  if (src->dtype != dst->dtype || (!dt_float(dst->dtype) && (bilinear || backward)))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for %s", call->name, tpurt_dtype_name(dst->dtype));
  a.bilinear = bilinear, a.backward = backward, a.align_corners = align;
  a.has_sh = has_sh, a.scale_h = sh, a.has_sw = has_sw, a.scale_w = sw;
  const plane_t* in_plane = backward ? &a.pd : &a.ps;
  const plane_t* out_plane = backward ? &a.ps : &a.pd;
  a.H = in_plane->H, a.W = in_plane->W, a.OH = out_plane->H, a.OW = out_plane->W;
  if (tpurt_tensor_numel(dst) == 0) return TPURT_OK;
  if (a.H == 0 || a.W == 0) return TPURT_STATUS(INVALID_ARGUMENT, "%s: empty input plane", call->name);
  if (backward) {
    int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
    a.acc = tpurt_kernel_scratch(ctx, (size_t)nt * (size_t)(a.H * a.W) * sizeof(double));
    if (!a.acc) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", call->name);
  }
  run_planes(ctx, ref, a.pd.count, upsample_planes, &a);
  return TPURT_OK;
}

/* upsample_nearest2d(self, output_size, scales_h?, scales_w?)
 * upsample_nearest2d_backward(grad_output, output_size, input_size, scales_h?, scales_w?)
 * upsample_bilinear2d(self, output_size, align_corners, scales_h?, scales_w?)
 * upsample_bilinear2d_backward(grad_output, output_size, input_size, align_corners, scales_h?, scales_w?) */
static tpurt_status_t upsample_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool bilinear,
                                    bool backward, bool ref) {
  const tpurt_tensor_t *src = NULL, *dst = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_linalg_tensor_arg(call, 0, -1, &src));
  TPURT_RETURN_IF_ERROR(out0(call, 0, &dst));
  int next = backward ? 3 : 2;
  bool align = bilinear ? bool_arg(call, next++, false) : false;
  double sh = 0, sw = 0;
  bool has_sh = opt_double(call, next, &sh), has_sw = opt_double(call, next + 1, &sw);
  return upsample_run(ctx, call, src, dst, bilinear, backward, align, has_sh, sh, has_sw, sw, ref);
}

/* A 3-D [N, C, W] tensor as [N, C, 1, W]. */
static tpurt_tensor_t with_unit_h(const tpurt_tensor_t* t) {
  tpurt_tensor_t v = *t;
  v.ndim = 4;
  v.sizes[3] = t->sizes[2], v.strides[3] = t->strides[2];
  v.sizes[2] = 1, v.strides[2] = 0;
  return v;
}

/* upsample_nearest1d(self, output_size, scales?) / _backward(grad_output, output_size, input_size, scales?)
 * upsample_linear1d(self, output_size, align_corners, scales?) / _backward(..., input_size, align_corners, scales?)
 * run as the 2-D kernels on [N, C, 1, W]. */
static tpurt_status_t upsample1d_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool linear,
                                      bool backward, bool ref) {
  const tpurt_tensor_t *src = NULL, *dst = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_linalg_tensor_arg(call, 0, 3, &src));
  TPURT_RETURN_IF_ERROR(out0(call, 0, &dst));
  if (dst->ndim != 3) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a 3-D output", call->name);
  int next = backward ? 3 : 2;
  bool align = linear ? bool_arg(call, next++, false) : false;
  double sw = 0;
  bool has_sw = opt_double(call, next, &sw);
  tpurt_tensor_t s4 = with_unit_h(src), d4 = with_unit_h(dst);
  return upsample_run(ctx, call, &s4, &d4, linear, backward, align, false, 0, has_sw, sw, ref);
}

#define POOL_PAIR(NAME, EXPR)                                                                       \
  tpurt_status_t tpurt_linalg_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {         \
    const bool ref = false;                                                                         \
    return EXPR;                                                                                    \
  }                                                                                                 \
  tpurt_status_t tpurt_linalg_##NAME##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {   \
    const bool ref = true;                                                                          \
    return EXPR;                                                                                    \
  }
POOL_PAIR(max_pool2d, maxpool_impl(ctx, call, false, ref))
POOL_PAIR(max_pool2d_backward, maxpool_bwd_impl(ctx, call, 7, ref))
POOL_PAIR(adaptive_max_pool2d, maxpool_impl(ctx, call, true, ref))
POOL_PAIR(adaptive_max_pool2d_backward, maxpool_bwd_impl(ctx, call, 2, ref))
POOL_PAIR(avg_pool2d, avgpool_impl(ctx, call, false, false, ref))
POOL_PAIR(avg_pool2d_backward, avgpool_impl(ctx, call, false, true, ref))
POOL_PAIR(adaptive_avg_pool2d, avgpool_impl(ctx, call, true, false, ref))
POOL_PAIR(adaptive_avg_pool2d_backward, avgpool_impl(ctx, call, true, true, ref))
POOL_PAIR(upsample_nearest2d, upsample_impl(ctx, call, false, false, ref))
POOL_PAIR(upsample_nearest2d_backward, upsample_impl(ctx, call, false, true, ref))
POOL_PAIR(upsample_bilinear2d, upsample_impl(ctx, call, true, false, ref))
POOL_PAIR(upsample_bilinear2d_backward, upsample_impl(ctx, call, true, true, ref))
POOL_PAIR(upsample_nearest1d, upsample1d_impl(ctx, call, false, false, ref))
POOL_PAIR(upsample_nearest1d_backward, upsample1d_impl(ctx, call, false, true, ref))
POOL_PAIR(upsample_linear1d, upsample1d_impl(ctx, call, true, false, ref))
POOL_PAIR(upsample_linear1d_backward, upsample1d_impl(ctx, call, true, true, ref))
