/* 3-D pooling: avg_pool3d, adaptive_avg_pool3d (forward and backward),
 * adaptive_max_pool3d, and the backward of max_pool3d / adaptive_max_pool3d (a scatter-add through the
 * saved indices), on 4-D [C, D, H, W] or 5-D [N, C, D, H, W] tensors of any
 * strides. Window rules follow PyTorch's CPU kernels; float dtypes accumulate
 * in double, integer avg_pool3d sums in int64 and divides as C does. Work
 * splits over (n, c) volumes; the reference runs the same loop serially. */
#include <math.h>
#include <string.h>

#include "ops/nn/nn.h"

typedef struct vol_t {
  int64_t count, C, sn, sc, D, H, W, sd, sh, sw;
} vol_t;

static bool vol_of(const tpurt_tensor_t* t, vol_t* v) {
  if (t->ndim == 5) {
    *v = (vol_t){t->sizes[0] * t->sizes[1], t->sizes[1], t->strides[0], t->strides[1], t->sizes[2],
                 t->sizes[3], t->sizes[4], t->strides[2], t->strides[3], t->strides[4]};
    return true;
  }
  if (t->ndim == 4) {
    *v = (vol_t){t->sizes[0], t->sizes[0], 0, t->strides[0], t->sizes[1], t->sizes[2], t->sizes[3],
                 t->strides[1], t->strides[2], t->strides[3]};
    return true;
  }
  return false;
}
static inline int64_t voff(const vol_t* v, int64_t p, int64_t d, int64_t h, int64_t w) {
  int64_t base = v->C ? (p / v->C) * v->sn + (p % v->C) * v->sc : 0;
  return base + d * v->sd + h * v->sh + w * v->sw;
}
static inline double getd(const tpurt_tensor_t* t, int64_t off) {
  return tpurt_dtype_load_f64(t->dtype, (const char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype));
}
static inline int64_t geti(const tpurt_tensor_t* t, int64_t off) {
  return tpurt_dtype_load_i64(t->dtype, (const char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype));
}
static inline void putd(const tpurt_tensor_t* t, int64_t off, double x) {
  tpurt_dtype_store_f64(t->dtype, (char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype), x);
}
static inline void puti(const tpurt_tensor_t* t, int64_t off, int64_t x) {
  tpurt_dtype_store_i64(t->dtype, (char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype), x);
}

static tpurt_status_t tin(const tpurt_op_call_t* c, int i, const tpurt_tensor_t** t, vol_t* v) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(c, i, -1, t));
  if (!vol_of(*t, v))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a 4-D or 5-D tensor, got %d-D", c->name,
                        (int)(*t)->ndim);
  return TPURT_OK;
}
static tpurt_status_t tout(const tpurt_op_call_t* c, const tpurt_tensor_t** t, vol_t* v) {
  if (c->num_outputs < 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing output", c->name);
  *t = &c->outputs[0];
  if (!vol_of(*t, v))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a 4-D or 5-D output", c->name);
  return TPURT_OK;
}

typedef struct p3_t {
  const tpurt_tensor_t *in, *out, *idx;
  vol_t vi, vo, vx;
  int64_t k[3], s[3], p[3];
  bool count_pad, has_div, adaptive, backward;
  int64_t divisor;
} p3_t;

/* the window of output (od, oh, ow) along one dim: [*b, *e) clamped, and its padded size */
static void win(const p3_t* a, int dim, int64_t o, int64_t in, int64_t out, int64_t* b, int64_t* e,
                int64_t* padded) {
  if (a->adaptive) {
    *b = (o * in) / out;
    *e = ((o + 1) * in + out - 1) / out;
    *padded = *e - *b;
    return;
  }
  int64_t st = o * a->s[dim] - a->p[dim];
  int64_t en = st + a->k[dim];
  if (en > in + a->p[dim]) en = in + a->p[dim];
  *padded = en - st;
  *b = st < 0 ? 0 : st;
  *e = en > in ? in : en;
}

static void avg3d_vols(void* u, int64_t v0, int64_t v1, int tid) {
  const p3_t* a = u;
  /* forward: in -> out; backward: in is grad_output (output-shaped), out is grad_input */
  const vol_t* vw = a->backward ? &a->vi : &a->vo; /* the pooled (output-shaped) volume */
  const vol_t* vx = a->backward ? &a->vo : &a->vi; /* the full-size volume */
  bool integral = !tpurt_dtype_is_floating(a->out->dtype);
  for (int64_t p = v0; p < v1; ++p) {
    if (a->backward)
      for (int64_t d = 0; d < vx->D; ++d)
        for (int64_t h = 0; h < vx->H; ++h)
          for (int64_t w = 0; w < vx->W; ++w) putd(a->out, voff(vx, p, d, h, w), 0.0);
    for (int64_t od = 0; od < vw->D; ++od) {
      int64_t d0, d1, pd;
      win(a, 0, od, vx->D, vw->D, &d0, &d1, &pd);
      for (int64_t oh = 0; oh < vw->H; ++oh) {
        int64_t h0, h1, ph;
        win(a, 1, oh, vx->H, vw->H, &h0, &h1, &ph);
        for (int64_t ow = 0; ow < vw->W; ++ow) {
          int64_t w0, w1, pw;
          win(a, 2, ow, vx->W, vw->W, &w0, &w1, &pw);
          int64_t n = (d1 - d0) * (h1 - h0) * (w1 - w0);
          int64_t div = a->has_div ? a->divisor : (a->count_pad && !a->adaptive) ? pd * ph * pw : n;
          if (d1 <= d0 || h1 <= h0 || w1 <= w0) {
            if (!a->backward) putd(a->out, voff(&a->vo, p, od, oh, ow), 0.0);
            continue;
          }
          if (a->backward) {
            double g = getd(a->in, voff(&a->vi, p, od, oh, ow)) / (double)div;
            for (int64_t d = d0; d < d1; ++d)
              for (int64_t h = h0; h < h1; ++h)
                for (int64_t w = w0; w < w1; ++w) {
                  int64_t off = voff(&a->vo, p, d, h, w);
                  putd(a->out, off, getd(a->out, off) + g);
                }
            continue;
          }
          if (integral) {
            int64_t s = 0;
            for (int64_t d = d0; d < d1; ++d)
              for (int64_t h = h0; h < h1; ++h)
                for (int64_t w = w0; w < w1; ++w) s += geti(a->in, voff(&a->vi, p, d, h, w));
            puti(a->out, voff(&a->vo, p, od, oh, ow), div ? s / div : 0);
          } else {
            double s = 0.0;
            for (int64_t d = d0; d < d1; ++d)
              for (int64_t h = h0; h < h1; ++h)
                for (int64_t w = w0; w < w1; ++w) s += getd(a->in, voff(&a->vi, p, d, h, w));
            putd(a->out, voff(&a->vo, p, od, oh, ow), s / (double)div);
          }
        }
      }
    }
  }
}

static void run_vols(tpurt_kernel_ctx_t* ctx, bool ref, int64_t n, tpurt_range_fn_t fn, void* u) {
  if (ref) fn(u, 0, n, 0);
  else tpurt_parallel_for(ctx, n, 1, fn, u);
}

static tpurt_status_t check_same(const tpurt_op_call_t* c, const vol_t* a, const vol_t* b) {
  if (a->count != b->count)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: input has %lld (n, c) volumes, output %lld", c->name,
                        (long long)a->count, (long long)b->count);
  return TPURT_OK;
}

/* avg_pool3d(self, k, stride, pad, ceil, count_include_pad, divisor) and
 * avg_pool3d_backward(grad_out, self, k, stride, pad, ceil, count_include_pad, divisor) */
static tpurt_status_t avg3d_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool bwd, bool ref) {
  p3_t a;
  memset(&a, 0, sizeof(a));
  a.backward = bwd;
  int o = bwd ? 1 : 0; /* argument shift for the backward's leading grad_output */
  TPURT_RETURN_IF_ERROR(tin(call, 0, &a.in, &a.vi));
  TPURT_RETURN_IF_ERROR(tout(call, &a.out, &a.vo));
  TPURT_RETURN_IF_ERROR(check_same(call, &a.vi, &a.vo));
  TPURT_RETURN_IF_ERROR(tpurt_arg_int_n(call, 1 + o, 3, NULL, a.k));
  TPURT_RETURN_IF_ERROR(tpurt_arg_int_n(call, 2 + o, 3, a.k, a.s));
  const int64_t zero[3] = {0, 0, 0};
  TPURT_RETURN_IF_ERROR(tpurt_arg_int_n(call, 3 + o, 3, zero, a.p));
  a.count_pad = tpurt_arg_bool(call, 5 + o, true);
  if (tpurt_arg_is(call, 6 + o, TPURT_ARG_INT)) {
    a.has_div = true;
    a.divisor = tpurt_arg_int(call, 6 + o, 0);
    if (a.divisor == 0) return TPURT_STATUS(INVALID_ARGUMENT, "%s: divisor must be not zero", call->name);
  }
  for (int k = 0; k < 3; ++k)
    if (a.k[k] <= 0 || a.s[k] <= 0 || a.p[k] < 0)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: kernel %lld, stride %lld, padding %lld are invalid",
                          call->name, (long long)a.k[k], (long long)a.s[k], (long long)a.p[k]);
  if (bwd ? !tpurt_dtype_is_floating(a.out->dtype) : a.in->dtype != a.out->dtype)
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for dtype %s", call->name,
                        tpurt_dtype_name(a.out->dtype));
  if (!a.vi.count || tpurt_tensor_numel(a.out) == 0) return TPURT_OK;
  run_vols(ctx, ref, a.vi.count, avg3d_vols, &a);
  return TPURT_OK;
}

/* adaptive_avg_pool3d(self, output_size) / _adaptive_avg_pool3d_backward(grad_out, self) */
static tpurt_status_t adavg3d_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool bwd, bool ref) {
  p3_t a;
  memset(&a, 0, sizeof(a));
  a.backward = bwd;
  a.adaptive = true;
  TPURT_RETURN_IF_ERROR(tin(call, 0, &a.in, &a.vi));
  TPURT_RETURN_IF_ERROR(tout(call, &a.out, &a.vo));
  TPURT_RETURN_IF_ERROR(check_same(call, &a.vi, &a.vo));
  if (!tpurt_dtype_is_floating(a.out->dtype) || a.in->dtype != a.out->dtype)
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for dtype %s", call->name,
                        tpurt_dtype_name(a.out->dtype));
  if (!a.vi.count || tpurt_tensor_numel(a.out) == 0) return TPURT_OK;
  run_vols(ctx, ref, a.vi.count, avg3d_vols, &a);
  return TPURT_OK;
}

/* adaptive_max_pool3d forward: the max of each adaptive window (NaN wins, as on
 * CPU) and its flat index in D*H*W */
static void amax3d_vols(void* u, int64_t v0, int64_t v1, int tid) {
  const p3_t* a = u;
  const vol_t *vi = &a->vi, *vo = &a->vo, *vx = &a->vx;
  for (int64_t p = v0; p < v1; ++p)
    for (int64_t od = 0; od < vo->D; ++od) {
      int64_t d0, d1, pd;
      win(a, 0, od, vi->D, vo->D, &d0, &d1, &pd);
      for (int64_t oh = 0; oh < vo->H; ++oh) {
        int64_t h0, h1, ph;
        win(a, 1, oh, vi->H, vo->H, &h0, &h1, &ph);
        for (int64_t ow = 0; ow < vo->W; ++ow) {
          int64_t w0, w1, pw;
          win(a, 2, ow, vi->W, vo->W, &w0, &w1, &pw);
          double best = -INFINITY;
          int64_t bi = (d0 * vi->H + h0) * vi->W + w0;
          for (int64_t d = d0; d < d1; ++d)
            for (int64_t h = h0; h < h1; ++h)
              for (int64_t w = w0; w < w1; ++w) {
                double v = getd(a->in, voff(vi, p, d, h, w));
                if (v > best || isnan(v)) {
                  best = v;
                  bi = (d * vi->H + h) * vi->W + w;
                  if (isnan(v)) goto done;
                }
              }
        done:
          putd(a->out, voff(vo, p, od, oh, ow), best);
          puti(a->idx, voff(vx, p, od, oh, ow), bi);
        }
      }
    }
}

/* adaptive_max_pool3d(self, output_size) -> (out, indices) */
static tpurt_status_t amax3d_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  p3_t a;
  memset(&a, 0, sizeof(a));
  a.adaptive = true;
  TPURT_RETURN_IF_ERROR(tin(call, 0, &a.in, &a.vi));
  TPURT_RETURN_IF_ERROR(tout(call, &a.out, &a.vo));
  if (call->num_outputs < 2 || !vol_of(&call->outputs[1], &a.vx))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected the indices output", call->name);
  a.idx = &call->outputs[1];
  TPURT_RETURN_IF_ERROR(check_same(call, &a.vi, &a.vo));
  if (!tpurt_dtype_is_floating(a.in->dtype) || a.in->dtype != a.out->dtype)
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for dtype %s", call->name,
                        tpurt_dtype_name(a.in->dtype));
  if (!a.vi.count || tpurt_tensor_numel(a.out) == 0) return TPURT_OK;
  run_vols(ctx, ref, a.vi.count, amax3d_vols, &a);
  return TPURT_OK;
}

/* grad_input[idx] += grad_output over each volume; idx is flat in D*H*W */
static void scatter_vols(void* u, int64_t v0, int64_t v1, int tid) {
  p3_t* a = u;
  const vol_t *vg = &a->vi, *vo = &a->vo, *vx = &a->vx;
  for (int64_t p = v0; p < v1; ++p) {
    for (int64_t d = 0; d < vo->D; ++d)
      for (int64_t h = 0; h < vo->H; ++h)
        for (int64_t w = 0; w < vo->W; ++w) putd(a->out, voff(vo, p, d, h, w), 0.0);
    int64_t hw = vo->H * vo->W, total = vo->D * hw;
    for (int64_t d = 0; d < vg->D; ++d)
      for (int64_t h = 0; h < vg->H; ++h)
        for (int64_t w = 0; w < vg->W; ++w) {
          int64_t i = geti(a->idx, voff(vx, p, d, h, w));
          if (i < 0 || i >= total) {
            a->divisor = i; /* reported by the caller */
            a->has_div = true;
            continue;
          }
          int64_t off = voff(vo, p, i / hw, (i / vo->W) % vo->H, i % vo->W);
          putd(a->out, off, getd(a->out, off) + getd(a->in, voff(vg, p, d, h, w)));
        }
  }
}

/* max_pool3d_with_indices_backward(grad_out, self, k, s, p, dil, ceil, indices) and
 * adaptive_max_pool3d_backward(grad_out, self, indices) */
static tpurt_status_t maxbwd3d_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, int ind, bool ref) {
  p3_t a;
  memset(&a, 0, sizeof(a));
  TPURT_RETURN_IF_ERROR(tin(call, 0, &a.in, &a.vi));
  TPURT_RETURN_IF_ERROR(tin(call, ind, &a.idx, &a.vx));
  TPURT_RETURN_IF_ERROR(tout(call, &a.out, &a.vo));
  TPURT_RETURN_IF_ERROR(check_same(call, &a.vi, &a.vo));
  if (!tpurt_dtype_is_floating(a.out->dtype))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for dtype %s", call->name,
                        tpurt_dtype_name(a.out->dtype));
  if (a.vx.D != a.vi.D || a.vx.H != a.vi.H || a.vx.W != a.vi.W || a.vx.count != a.vi.count)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: indices and grad_output differ in shape", call->name);
  if (!a.vi.count || tpurt_tensor_numel(a.out) == 0) return TPURT_OK;
  /* serial over volumes is safe (each volume owns its output); run threaded unless ref */
  run_vols(ctx, ref, a.vi.count, scatter_vols, &a);
  if (a.has_div)
    return TPURT_STATUS(OUT_OF_RANGE, "%s: index %lld is out of range for a volume of %lld", call->name,
                        (long long)a.divisor, (long long)(a.vo.D * a.vo.H * a.vo.W));
  return TPURT_OK;
}

TPURT_NN_PAIR(avg_pool3d, avg3d_impl(ctx, call, false, ref))
TPURT_NN_PAIR(avg_pool3d_backward, avg3d_impl(ctx, call, true, ref))
TPURT_NN_PAIR(adaptive_avg_pool3d, adavg3d_impl(ctx, call, false, ref))
TPURT_NN_PAIR(adaptive_avg_pool3d_backward, adavg3d_impl(ctx, call, true, ref))
TPURT_NN_PAIR(max_pool3d_backward, maxbwd3d_impl(ctx, call, 7, ref))
TPURT_NN_PAIR(adaptive_max_pool3d_backward, maxbwd3d_impl(ctx, call, 2, ref))
TPURT_NN_PAIR(adaptive_max_pool3d, amax3d_impl(ctx, call, ref))
