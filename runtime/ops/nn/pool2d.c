/* 2-D pooling kernels (max_pool2d_with_indices, avg_pool2d, adaptive avg/max
 * pool; each with backward), on 3-D [C, H, W] or 4-D [N, C, H, W] tensors of
 * any strides. Work splits over (n, c) planes; the window rules follow
 * PyTorch's CPU kernels. These ops are memory-bound scalar loops, so the
 * reference is the same loop run serially (the obviously-correct form
 * already). Backward passes accumulate a plane in double and round once. */
#include <math.h>
#include <string.h>

#include "ops/nn/plane.h"

/* ---- max pooling (windowed and adaptive): value and flat index h * W + w ---- */
typedef struct maxpool_t {
  const tpurt_tensor_t *in, *out, *ind;
  tpurt_nn_plane_t pi, po, pind;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool adaptive;
} maxpool_t;

static inline int64_t a_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
static inline int64_t a_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

static void maxpool_planes(void* u, int64_t p0, int64_t p1, int tid) {
  maxpool_t* m = (maxpool_t*)u;
  tpurt_dtype_t dt = m->in->dtype;
  size_t es = tpurt_dtype_size(dt);
  bool fl = tpurt_dtype_is_floating(dt);
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
            const char* e = tpurt_nn_plane_at(m->in, &m->pi, p, h, w);
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
        char* o = tpurt_nn_plane_at(m->out, &m->po, p, oh, ow);
        if (bp) memcpy(o, bp, es); /* exact: the chosen element itself */
        else if (fl) tpurt_dtype_store_f64(dt, o, -INFINITY);
        else tpurt_dtype_store_i64(dt, o, 0);
        if (m->ind) *(int64_t*)tpurt_nn_plane_at(m->ind, &m->pind, p, oh, ow) = best;
      }
}

/* With the -inf start value PyTorch keeps the first element when all are
 * -inf; `!bp` does the same here. */

static tpurt_status_t maxpool_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool adaptive, bool ref) {
  const tpurt_tensor_t *in = NULL, *out = NULL, *ind = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &in));
  TPURT_RETURN_IF_ERROR(tpurt_nn_output(call, 0, &out));
  if (call->num_outputs > 1) ind = &call->outputs[1];
  maxpool_t m = {in, out, ind};
  TPURT_RETURN_IF_ERROR(tpurt_nn_planes_check(call, in, out, &m.pi, &m.po));
  if (ind && (!tpurt_nn_plane_of(ind, &m.pind) || ind->dtype != TPURT_DTYPE_INT64))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: indices must be int64 shaped like the output", call->name);
  if (out->dtype != in->dtype) return TPURT_STATUS(INVALID_ARGUMENT, "%s: dtype mismatch", call->name);
  m.adaptive = adaptive;
  if (!adaptive) {
    int64_t k[2], s[2], pd[2], dl[2], zero[2] = {0, 0}, one[2] = {1, 1};
    TPURT_RETURN_IF_ERROR(tpurt_arg_int_n(call, 1, 2, NULL, k));
    TPURT_RETURN_IF_ERROR(tpurt_arg_int_n(call, 2, 2, k, s));
    TPURT_RETURN_IF_ERROR(tpurt_arg_int_n(call, 3, 2, zero, pd));
    TPURT_RETURN_IF_ERROR(tpurt_arg_int_n(call, 4, 2, one, dl));
    if (k[0] < 1 || k[1] < 1 || s[0] < 1 || s[1] < 1 || dl[0] < 1 || dl[1] < 1 || pd[0] < 0 || pd[1] < 0)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: kernel %lldx%lld, stride %lldx%lld, dilation %lldx%lld, padding %lldx%lld",
                          call->name, (long long)k[0], (long long)k[1], (long long)s[0], (long long)s[1],
                          (long long)dl[0], (long long)dl[1], (long long)pd[0], (long long)pd[1]);
    m.kh = k[0], m.kw = k[1], m.sh = s[0], m.sw = s[1], m.ph = pd[0], m.pw = pd[1], m.dh = dl[0], m.dw = dl[1];
  } else if (m.po.H > 0 && m.po.W > 0 && (m.pi.H == 0 || m.pi.W == 0)) {
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: empty input plane", call->name);
  }
  if (m.po.H == 0 || m.po.W == 0) return TPURT_OK;
  tpurt_nn_planes_run(ctx, ref, m.po.count, maxpool_planes, &m);
  return TPURT_OK;
}

/* ---- scatter of grad by indices (max pool backward) ---- */
typedef struct scatter_t {
  const tpurt_tensor_t *go, *ind, *gi;
  tpurt_nn_plane_t pgo, pind, pgi;
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
        int64_t idx = *(const int64_t*)tpurt_nn_plane_at(s->ind, &s->pind, p, oh, ow);
        if (idx < 0 || idx >= hw) {
          s->bad = idx; /* any one bad value is enough to report */
          continue;
        }
        acc[idx] += tpurt_dtype_load_f64(s->go->dtype, tpurt_nn_plane_at(s->go, &s->pgo, p, oh, ow));
      }
    for (int64_t h = 0; h < s->pgi.H; ++h)
      for (int64_t w = 0; w < s->pgi.W; ++w)
        tpurt_dtype_store_f64(s->gi->dtype, tpurt_nn_plane_at(s->gi, &s->pgi, p, h, w), acc[h * s->pgi.W + w]);
  }
}

/* max_pool2d_with_indices_backward(grad_output, self, k, s, p, d, ceil, indices) and
 * adaptive_max_pool2d_backward(grad_output, self, indices) */
static tpurt_status_t maxpool_bwd_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, int ind_arg, bool ref) {
  const tpurt_tensor_t *go = NULL, *self = NULL, *ind = NULL, *gi = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &go));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 1, -1, &self));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, ind_arg, -1, &ind));
  TPURT_RETURN_IF_ERROR(tpurt_nn_output(call, 0, &gi));
  scatter_t s = {go, ind, gi};
  s.bad = -1;
  TPURT_RETURN_IF_ERROR(tpurt_nn_planes_check(call, go, gi, &s.pgo, &s.pgi));
  if (!tpurt_nn_plane_of(ind, &s.pind) || ind->dtype != TPURT_DTYPE_INT64 || s.pind.H != s.pgo.H || s.pind.W != s.pgo.W)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: indices must be int64 shaped like grad_output", call->name);
  if (tpurt_tensor_numel(gi) == 0) return TPURT_OK;
  int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
  s.acc = tpurt_kernel_scratch(ctx, (size_t)nt * (size_t)(s.pgi.H * s.pgi.W) * sizeof(double));
  if (!s.acc) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", call->name);
  tpurt_nn_planes_run(ctx, ref, s.pgi.count, scatter_planes, &s);
  if (s.bad != -1)
    return TPURT_STATUS(OUT_OF_RANGE, "%s: index %lld out of range for a %lldx%lld plane", call->name,
                        (long long)s.bad, (long long)s.pgi.H, (long long)s.pgi.W);
  return TPURT_OK;
}

/* ---- average pooling (windowed and adaptive), forward and backward ---- */
typedef struct avgpool_t {
  const tpurt_tensor_t *src, *dst; /* fwd: input -> output; bwd: grad_output -> grad_input */
  tpurt_nn_plane_t ps, pd;
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
  bool fl = tpurt_dtype_is_floating(dd);
  double* acc = a->backward ? a->acc + (size_t)tid * (size_t)(a->H * a->W) : NULL;
  for (int64_t p = p0; p < p1; ++p) {
    if (acc) memset(acc, 0, (size_t)(a->H * a->W) * sizeof(double));
    for (int64_t oh = 0; oh < a->OH; ++oh)
      for (int64_t ow = 0; ow < a->OW; ++ow) {
        int64_t h0, h1, w0, w1, div = 1;
        bool ok = avg_window(a, oh, ow, &h0, &h1, &w0, &w1, &div);
        if (a->backward) {
          if (!ok) continue;
          double g = tpurt_dtype_load_f64(sd, tpurt_nn_plane_at(a->src, &a->ps, p, oh, ow)) / (double)div;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) acc[h * a->W + w] += g;
          continue;
        }
        char* o = tpurt_nn_plane_at(a->dst, &a->pd, p, oh, ow);
        if (!ok) {
          tpurt_dtype_store_i64(dd, o, 0);
          continue;
        }
        if (fl) {
          double s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += tpurt_dtype_load_f64(sd, tpurt_nn_plane_at(a->src, &a->ps, p, h, w));
          tpurt_dtype_store_f64(dd, o, s / (double)div);
        } else {
          int64_t s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += tpurt_dtype_load_i64(sd, tpurt_nn_plane_at(a->src, &a->ps, p, h, w));
          tpurt_dtype_store_i64(dd, o, div ? s / div : 0);
        }
      }
    if (acc)
      for (int64_t h = 0; h < a->H; ++h)
        for (int64_t w = 0; w < a->W; ++w)
          tpurt_dtype_store_f64(dd, tpurt_nn_plane_at(a->dst, &a->pd, p, h, w), acc[h * a->W + w]);
  }
}

/* avg_pool2d(self, k, stride, padding, ceil_mode, count_include_pad, divisor_override)
 * avg_pool2d_backward(grad_output, self, k, stride, padding, ceil_mode, count_include_pad, divisor_override)
 * _adaptive_avg_pool2d(self, output_size); _adaptive_avg_pool2d_backward(grad_output, self) */
static tpurt_status_t avgpool_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool adaptive,
                                   bool backward, bool ref) {
  const tpurt_tensor_t *src = NULL, *dst = NULL, *self = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &src));
  if (backward) TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 1, -1, &self));
  TPURT_RETURN_IF_ERROR(tpurt_nn_output(call, 0, &dst));
  avgpool_t a = {src, dst};
  TPURT_RETURN_IF_ERROR(tpurt_nn_planes_check(call, src, dst, &a.ps, &a.pd));
  if (!tpurt_dtype_is_floating(dst->dtype) && (adaptive || backward || dst->dtype == TPURT_DTYPE_UINT8 || dst->dtype == TPURT_DTYPE_BOOL))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for %s", call->name, tpurt_dtype_name(dst->dtype));
  a.adaptive = adaptive, a.backward = backward;
  const tpurt_nn_plane_t* in_plane = backward ? &a.pd : &a.ps;
  const tpurt_nn_plane_t* out_plane = backward ? &a.ps : &a.pd;
  a.H = in_plane->H, a.W = in_plane->W, a.OH = out_plane->H, a.OW = out_plane->W;
  int base = backward ? 2 : 1;
  if (!adaptive) {
    int64_t k[2], s[2], pd[2], zero[2] = {0, 0};
    TPURT_RETURN_IF_ERROR(tpurt_arg_int_n(call, base, 2, NULL, k));
    TPURT_RETURN_IF_ERROR(tpurt_arg_int_n(call, base + 1, 2, k, s));
    TPURT_RETURN_IF_ERROR(tpurt_arg_int_n(call, base + 2, 2, zero, pd));
    if (k[0] < 1 || k[1] < 1 || s[0] < 1 || s[1] < 1 || pd[0] < 0 || pd[1] < 0)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: kernel %lldx%lld, stride %lldx%lld, padding %lldx%lld", call->name,
                          (long long)k[0], (long long)k[1], (long long)s[0], (long long)s[1], (long long)pd[0],
                          (long long)pd[1]);
    a.kh = k[0], a.kw = k[1], a.sh = s[0], a.sw = s[1], a.ph = pd[0], a.pw = pd[1];
    a.count_include_pad = tpurt_arg_bool(call, base + 4, true);
    int di = base + 5;
    if (tpurt_arg_is(call, di, TPURT_ARG_INT)) {
      a.has_div = true;
      a.divisor = tpurt_arg_int(call, di, 0);
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
  tpurt_nn_planes_run(ctx, ref, a.pd.count, avgpool_planes, &a);
  return TPURT_OK;
}

TPURT_NN_PAIR(max_pool2d, maxpool_impl(ctx, call, false, ref))
TPURT_NN_PAIR(max_pool2d_backward, maxpool_bwd_impl(ctx, call, 7, ref))
TPURT_NN_PAIR(adaptive_max_pool2d, maxpool_impl(ctx, call, true, ref))
TPURT_NN_PAIR(adaptive_max_pool2d_backward, maxpool_bwd_impl(ctx, call, 2, ref))
TPURT_NN_PAIR(avg_pool2d, avgpool_impl(ctx, call, false, false, ref))
TPURT_NN_PAIR(avg_pool2d_backward, avgpool_impl(ctx, call, false, true, ref))
TPURT_NN_PAIR(adaptive_avg_pool2d, avgpool_impl(ctx, call, true, false, ref))
TPURT_NN_PAIR(adaptive_avg_pool2d_backward, avgpool_impl(ctx, call, true, true, ref))
