/* torchvision's position-sensitive RoI ops: ps_roi_align and ps_roi_pool,
 * forward and backward, as torchvision 0.28's CPU kernels compute them (the
 * per-bin bodies: ps_align_bin, ps_pool_bin). Output bin (roi n, c_out, ph, pw) reads
 * input channel c_in = (c_out * PH + ph) * PW + pw, recorded in the int32
 * channel_mapping the backward reads. The forward splits over output bins; the
 * backward over input channels (each task scatters only into the channels it
 * owns, so no two threads add into one element). float32 and float64, and
 * float16 for ps_roi_align (computed in float, as CPU takes Half). */
#include <math.h>
#include <string.h>

#include "ops/index/index_common.h"
#include "ops/nn/nn.h"

typedef struct ps_t {
  const tpurt_tensor_t *in, *rois, *map, *out, *gout, *gin;
  int64_t B, C, H, W, K, Cout, PH, PW;
  int64_t sampling;
  double scale;
  bool align, dbl;
  int64_t tasks;  /* backward: channel ranges */
} ps_t;

/* Every step is taken in the precision torchvision's CPU kernel takes it in (bin edges by
 * floor/ceil of products must land where CPU's land): in double, each result rounded to float
 * by R() unless the dtype is float64. (double has more than 2 * 24 + 2 bits, so a float +, -,
 * *, / done in double and rounded once equals the float operation.) */
#define R(v) (p->dbl ? (double)(v) : (double)(float)(v))

static inline double ps_roi(const ps_t* p, int64_t n, int j) {
  return R(tpurt_nn_ld(p->rois, n * p->rois->strides[0] + j * p->rois->strides[1]));
}

/* torchvision's bilinear_interpolate of ps_roi_align: the four taps and weights of point (y, x),
 * or false when it lies outside [-1, H] x [-1, W] (NaN included). */
static inline bool ps_taps(const ps_t* p, double y, double x, int64_t* yl, int64_t* yh, int64_t* xl, int64_t* xh,
                           double w[4]) {
  int64_t H = p->H, W = p->W;
  if (!(y >= -1.0 && y <= (double)H && x >= -1.0 && x <= (double)W)) return false;
  if (y <= 0) y = 0;
  if (x <= 0) x = 0;
  *yl = (int64_t)y, *xl = (int64_t)x;
  if (*yl >= H - 1) *yh = *yl = H - 1, y = (double)*yl;
  else *yh = *yl + 1;
  if (*xl >= W - 1) *xh = *xl = W - 1, x = (double)*xl;
  else *xh = *xl + 1;
  double ly = R(y - (double)*yl), lx = R(x - (double)*xl), hy = R(1 - ly), hx = R(1 - lx);
  w[0] = R(hy * hx), w[1] = R(hy * lx), w[2] = R(ly * hx), w[3] = R(ly * lx);
  return true;
}

/* One ps_roi_align bin: (roi n, output channel c_out, ph, pw). grad != NULL: the backward, which
 * adds grad * weight / count to grad_input's plane (b, c_in) instead of reading input. */
static double ps_align_bin(const ps_t* p, int64_t n, int64_t b, int64_t c_in, int64_t ph, int64_t pw,
                           const double* grad) {
  double scale = R(p->scale);
  double sw = R(R(ps_roi(p, n, 1) * scale) - 0.5), sh = R(R(ps_roi(p, n, 2) * scale) - 0.5);
  double ew = R(R(ps_roi(p, n, 3) * scale) - 0.5), eh = R(R(ps_roi(p, n, 4) * scale) - 0.5);
  double rw = R(ew - sw), rh = R(eh - sh);
  double bh = R(rh / (double)p->PH), bw = R(rw / (double)p->PW);
  double hstart = R(R((double)ph * bh) + sh), wstart = R(R((double)pw * bw) + sw);
  int64_t gh = p->sampling > 0 ? p->sampling : (int64_t)ceil(R(rh / (double)p->PH));
  int64_t gw = p->sampling > 0 ? p->sampling : (int64_t)ceil(R(rw / (double)p->PW));
  double count = R((double)(gh * gw));
  const tpurt_tensor_t* t = grad ? p->gin : p->in;
  int64_t base = b * t->strides[0] + c_in * t->strides[1], s2 = t->strides[2], s3 = t->strides[3];
  double sum = 0;
  for (int64_t iy = 0; iy < gh; ++iy) {
    double y = R(hstart + R(R(R((double)iy + .5) * bh) / (double)gh));
    for (int64_t ix = 0; ix < gw; ++ix) {
      double x = R(wstart + R(R(R((double)ix + .5) * bw) / (double)gw));
      int64_t yl, yh, xl, xh;
      double w[4];
      if (!ps_taps(p, y, x, &yl, &yh, &xl, &xh, w)) continue;
      int64_t o[4] = {base + yl * s2 + xl * s3, base + yl * s2 + xh * s3, base + yh * s2 + xl * s3,
                      base + yh * s2 + xh * s3};
      if (grad) {
        for (int q = 0; q < 4; ++q) tpurt_nn_st(t, o[q], R(tpurt_nn_ld(t, o[q]) + R(R(*grad * w[q]) / count)));
      } else {
        double v[4];
        for (int q = 0; q < 4; ++q) v[q] = R(tpurt_nn_ld(t, o[q]));
        sum = R(sum + R(R(R(R(w[0] * v[0]) + R(w[1] * v[1])) + R(w[2] * v[2])) + R(w[3] * v[3])));
      }
    }
  }
  return R(sum / count);
}

/* One ps_roi_pool bin: the average over its integer window (0 when empty). The forward clips the
 * window to [0, H-1] x [0, W-1] and rounds the roi with round(); the backward clips to [0, H] x
 * [0, W] and rounds in float (roundf), as torchvision's CPU kernels do. */
static double ps_pool_bin(const ps_t* p, int64_t n, int64_t b, int64_t c_in, int64_t ph, int64_t pw,
                          const double* grad) {
  double scale = R(p->scale);
  int64_t s[4];
  for (int j = 0; j < 4; ++j) {
    double v = R(ps_roi(p, n, j + 1) * scale);
    s[j] = grad ? (int64_t)roundf((float)v) : (int64_t)round(v);
  }
  int64_t rw = s[2] - s[0] > 1 ? s[2] - s[0] : 1, rh = s[3] - s[1] > 1 ? s[3] - s[1] : 1;
  double bh = R((double)rh / (double)p->PH), bw = R((double)rw / (double)p->PW);
  int64_t hs = (int64_t)floor(R((double)ph * bh)), ws = (int64_t)floor(R((double)pw * bw));
  int64_t he = (int64_t)ceil(R((double)(ph + 1) * bh)), we = (int64_t)ceil(R((double)(pw + 1) * bw));
  int64_t hmax = grad ? p->H : p->H - 1, wmax = grad ? p->W : p->W - 1;
#define PS_CLIP(v, hi) ((v) < 0 ? 0 : (v) > (hi) ? (hi) : (v))
  hs = PS_CLIP(hs + s[1], hmax), he = PS_CLIP(he + s[1], hmax);
  ws = PS_CLIP(ws + s[0], wmax), we = PS_CLIP(we + s[0], wmax);
#undef PS_CLIP
  if (he <= hs || we <= ws) return 0;
  double area = R((double)((he - hs) * (we - ws)));
  const tpurt_tensor_t* t = grad ? p->gin : p->in;
  int64_t base = b * t->strides[0] + c_in * t->strides[1];
  double sum = 0, g = grad ? R(*grad / area) : 0;
  for (int64_t h = hs; h < he; ++h)
    for (int64_t w = ws; w < we; ++w) {
      int64_t o = base + h * t->strides[2] + w * t->strides[3];
      if (grad) tpurt_nn_st(t, o, R(tpurt_nn_ld(t, o) + g));
      else sum = R(sum + R(tpurt_nn_ld(t, o)));
    }
  return R(sum / area);
}
#undef R

static inline int64_t ps_batch(const ps_t* p, int64_t n) {
  double v = tpurt_nn_ld(p->rois, n * p->rois->strides[0]);
  return p->dbl ? (int64_t)(int)v : (int64_t)(int)(float)v;
}

/* forward: output bins [i0, i1) in (n, c_out, ph, pw) order */
static void ps_fwd(void* u, int64_t i0, int64_t i1, int tid) {
  const ps_t* p = u;
  for (int64_t i = i0; i < i1; ++i) {
    int64_t pw = i % p->PW, ph = (i / p->PW) % p->PH, co = (i / (p->PW * p->PH)) % p->Cout;
    int64_t n = i / (p->PW * p->PH * p->Cout);
    int64_t c_in = (co * p->PH + ph) * p->PW + pw, b = ps_batch(p, n);
    double v = p->align ? ps_align_bin(p, n, b, c_in, ph, pw, NULL) : ps_pool_bin(p, n, b, c_in, ph, pw, NULL);
    const tpurt_tensor_t* o = p->out;
    int64_t oo = n * o->strides[0] + co * o->strides[1] + ph * o->strides[2] + pw * o->strides[3];
    tpurt_nn_st(o, oo, v);
    const tpurt_tensor_t* m = p->map;
    tpurt_nn_sti(m, n * m->strides[0] + co * m->strides[1] + ph * m->strides[2] + pw * m->strides[3], c_in);
  }
}

/* backward: task t owns input channels [t*C/tasks, (t+1)*C/tasks) and adds the grads of every
 * bin that maps into them */
static void ps_bwd(void* u, int64_t t0, int64_t t1, int tid) {
  const ps_t* p = u;
  for (int64_t t = t0; t < t1; ++t) {
    int64_t c0 = t * p->C / p->tasks, c1 = (t + 1) * p->C / p->tasks;
    if (c0 == c1) continue;
    const tpurt_tensor_t *g = p->gout, *m = p->map;
    for (int64_t n = 0; n < p->K; ++n) {
      int64_t b = ps_batch(p, n);
      for (int64_t co = 0; co < p->Cout; ++co)
        for (int64_t ph = 0; ph < p->PH; ++ph)
          for (int64_t pw = 0; pw < p->PW; ++pw) {
            int64_t c_in = tpurt_nn_ldi(m, n * m->strides[0] + co * m->strides[1] + ph * m->strides[2] +
                                               pw * m->strides[3]);
            if (c_in < c0 || c_in >= c1) continue;
            double gv = tpurt_nn_ld(g, n * g->strides[0] + co * g->strides[1] + ph * g->strides[2] +
                                           pw * g->strides[3]);
            if (!p->dbl) gv = (double)(float)gv;
            if (p->align) ps_align_bin(p, n, b, c_in, ph, pw, &gv);
            else ps_pool_bin(p, n, b, c_in, ph, pw, &gv);
          }
    }
  }
}

/* rois: [K, 5] of the input's dtype, each batch index a batch entry of the input */
static tpurt_status_t check_rois(const char* op, const ps_t* p) {
  const tpurt_tensor_t* r = p->rois;
  if (r->ndim != 2 || r->sizes[1] != 5)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: rois must have shape as Tensor[K, 5], got %d dims", op, r->ndim);
  for (int64_t n = 0; n < p->K; ++n) {
    double v = tpurt_nn_ld(r, n * r->strides[0]);
    if (!(v > -1.0 && v < (double)p->B))
      return TPURT_STATUS(OUT_OF_RANGE, "%s: rois[%lld, 0] = %g is not a batch index of the input (batch size %lld)",
                          op, (long long)n, v, (long long)p->B);
  }
  return TPURT_OK;
}

static tpurt_status_t ps_forward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool align) {
  const char* op = align ? "ps_roi_align" : "ps_roi_pool";
  ps_t p;
  memset(&p, 0, sizeof p);
  p.align = align;
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, align ? 6 : 5, 2));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, 4, &p.in));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 1, -1, &p.rois));
  p.scale = tpurt_arg_double(call, 2, 1.0);
  p.PH = tpurt_arg_int(call, 3, 0), p.PW = tpurt_arg_int(call, 4, 0);
  p.sampling = align ? tpurt_arg_int(call, 5, -1) : 0;
  p.out = &call->outputs[0], p.map = &call->outputs[1];
  p.B = p.in->sizes[0], p.C = p.in->sizes[1], p.H = p.in->sizes[2], p.W = p.in->sizes[3];
  p.K = p.rois->sizes[0];
  p.dbl = p.in->dtype == TPURT_DTYPE_FLOAT64;
  if (p.rois->dtype != p.in->dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: input and rois must have the same dtype", op);
  if (p.PH <= 0 || p.PW <= 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: pooled_height and pooled_width must be positive, got %lld and %lld", op,
                        (long long)p.PH, (long long)p.PW);
  if (p.C % (p.PH * p.PW) != 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: input channels must be a multiple of pooling height * pooling width", op);
  p.Cout = p.C / (p.PH * p.PW);
  TPURT_RETURN_IF_ERROR(check_rois(op, &p));
  int64_t want[4] = {p.K, p.Cout, p.PH, p.PW};
  for (int i = 0; i < 2; ++i) {
    const tpurt_tensor_t* o = &call->outputs[i];
    if (o->ndim != 4 || memcmp(o->sizes, want, sizeof want) != 0)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: output %d is not [%lld, %lld, %lld, %lld]", op, i, (long long)p.K,
                          (long long)p.Cout, (long long)p.PH, (long long)p.PW);
  }
  if (p.map->dtype != TPURT_DTYPE_INT32 && p.map->dtype != TPURT_DTYPE_INT64)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: channel_mapping must be an integer tensor", op);
  int64_t total = p.K * p.Cout * p.PH * p.PW;
  if (total == 0) return TPURT_OK;
  if (p.H == 0 || p.W == 0) return TPURT_STATUS(INVALID_ARGUMENT, "%s: input has an empty plane", op);
  tpurt_parallel_for(ctx, total, 16, ps_fwd, &p);
  return TPURT_OK;
}

static tpurt_status_t ps_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool align) {
  const char* op = align ? "_ps_roi_align_backward" : "_ps_roi_pool_backward";
  ps_t p;
  memset(&p, 0, sizeof p);
  p.align = align;
  int a = align ? 7 : 6; /* first of batch_size, channels, height, width */
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, a + 4, 1));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, 4, &p.gout));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 1, -1, &p.rois));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 2, 4, &p.map));
  p.scale = tpurt_arg_double(call, 3, 1.0);
  p.PH = tpurt_arg_int(call, 4, 0), p.PW = tpurt_arg_int(call, 5, 0);
  p.sampling = align ? tpurt_arg_int(call, 6, -1) : 0;
  p.B = tpurt_arg_int(call, a, 0), p.C = tpurt_arg_int(call, a + 1, 0);
  p.H = tpurt_arg_int(call, a + 2, 0), p.W = tpurt_arg_int(call, a + 3, 0);
  p.gin = &call->outputs[0];
  p.K = p.rois->sizes[0];
  p.dbl = p.gout->dtype == TPURT_DTYPE_FLOAT64;
  if (p.rois->dtype != p.gout->dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: grad and rois must have the same dtype", op);
  int64_t want[4] = {p.B, p.C, p.H, p.W};
  if (p.gin->ndim != 4 || memcmp(p.gin->sizes, want, sizeof want) != 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: grad_input is not [batch_size, channels, height, width]", op);
  if (p.PH <= 0 || p.PW <= 0 || p.C % (p.PH * p.PW) != 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: channels must be a multiple of pooling height * pooling width", op);
  p.Cout = p.C / (p.PH * p.PW);
  int64_t gw[4] = {p.K, p.Cout, p.PH, p.PW};
  if (memcmp(p.gout->sizes, gw, sizeof gw) != 0 || memcmp(p.map->sizes, gw, sizeof gw) != 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: grad and channel_mapping must be [%lld, %lld, %lld, %lld]", op,
                        (long long)p.K, (long long)p.Cout, (long long)p.PH, (long long)p.PW);
  static const unsigned char zero[16];
  tpurt_index_fill(ctx, p.gin, zero); /* the index engine's parallel fill */
  if (p.K * p.Cout * p.PH * p.PW == 0 || tpurt_tensor_numel(p.gin) == 0) return TPURT_OK;
  TPURT_RETURN_IF_ERROR(check_rois(op, &p));
  const tpurt_tensor_t* m = p.map;
  for (int64_t i = 0; i < p.K * p.Cout * p.PH * p.PW; ++i) {
    int64_t pw = i % p.PW, ph = (i / p.PW) % p.PH, co = (i / (p.PW * p.PH)) % p.Cout, n = i / (p.PW * p.PH * p.Cout);
    int64_t c = tpurt_nn_ldi(m, n * m->strides[0] + co * m->strides[1] + ph * m->strides[2] + pw * m->strides[3]);
    if (c < 0 || c >= p.C)
      return TPURT_STATUS(OUT_OF_RANGE, "%s: channel_mapping holds %lld, not a channel of the input (%lld channels)",
                          op, (long long)c, (long long)p.C);
  }
  int nt = tpurt_kernel_num_threads(ctx);
  p.tasks = nt < 1 ? 1 : nt > p.C ? p.C : nt;
  tpurt_parallel_for(ctx, p.tasks, 1, ps_bwd, &p);
  return TPURT_OK;
}

/* each kernel is its own reference (vision_table.c): a plain loop per bin */
tpurt_status_t tpurt_vision_ps_roi_align(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return ps_forward(ctx, call, true);
}
tpurt_status_t tpurt_vision_ps_roi_align_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return ps_backward(ctx, call, true);
}
tpurt_status_t tpurt_vision_ps_roi_pool(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return ps_forward(ctx, call, false);
}
tpurt_status_t tpurt_vision_ps_roi_pool_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return ps_backward(ctx, call, false);
}
