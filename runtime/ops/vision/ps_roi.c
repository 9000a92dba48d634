/* torchvision's position-sensitive RoI ops: ps_roi_align and ps_roi_pool,
 * forward and backward, as torchvision 0.28's CPU kernels compute them (the
 * per-bin bodies: ps_roi_impl.h). Output bin (roi n, c_out, ph, pw) reads
 * input channel c_in = (c_out * PH + ph) * PW + pw, recorded in the int32
 * channel_mapping the backward reads. The forward splits over output bins; the
 * backward over input channels (each task scatters only into the channels it
 * owns, so no two threads add into one element). float32 and float64, and
 * float16 for ps_roi_align (computed in float, as CPU takes Half). */
#include <math.h>
#include <string.h>

#include "ops/vision/ps_deform.h"

typedef struct ps_t {
  const tpurt_tensor_t *in, *rois, *map, *out, *gout, *gin;
  int64_t B, C, H, W, K, Cout, PH, PW;
  int64_t sampling;
  double scale;
  bool align, dbl;
  int64_t tasks;  /* backward: channel ranges */
} ps_t;

#define PS_REAL float
#define PS_FN(name) name##_f
#include "ops/vision/ps_roi_impl.h"
#undef PS_REAL
#undef PS_FN
#define PS_REAL double
#define PS_FN(name) name##_d
#include "ops/vision/ps_roi_impl.h"
#undef PS_REAL
#undef PS_FN

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
    double v;
    if (p->align) v = p->dbl ? align_bin_d(p, n, b, c_in, ph, pw, NULL) : align_bin_f(p, n, b, c_in, ph, pw, NULL);
    else v = p->dbl ? pool_bin_d(p, n, b, c_in, ph, pw, NULL) : pool_bin_f(p, n, b, c_in, ph, pw, NULL);
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
            if (p->dbl) {
              double gd = gv;
              if (p->align) align_bin_d(p, n, b, c_in, ph, pw, &gd);
              else pool_bin_d(p, n, b, c_in, ph, pw, &gd);
            } else {
              float gf = (float)gv;
              if (p->align) align_bin_f(p, n, b, c_in, ph, pw, &gf);
              else pool_bin_f(p, n, b, c_in, ph, pw, &gf);
            }
          }
    }
  }
}

static void zero_tensor(const tpurt_tensor_t* t) {
  int64_t n = tpurt_tensor_numel(t);
  if (n == 0) return;
  int64_t idx[TPURT_MAX_DIMS] = {0};
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int d = 0; d < t->ndim; ++d) off += idx[d] * t->strides[d];
    tpurt_nn_st(t, off, 0.0);
    for (int d = t->ndim - 1; d >= 0; --d) {
      if (++idx[d] < t->sizes[d]) break;
      idx[d] = 0;
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
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: rois[%lld, 0] = %g is not a batch index of the input (batch size %lld)",
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
  zero_tensor(p.gin);
  if (p.K * p.Cout * p.PH * p.PW == 0 || tpurt_tensor_numel(p.gin) == 0) return TPURT_OK;
  TPURT_RETURN_IF_ERROR(check_rois(op, &p));
  const tpurt_tensor_t* m = p.map;
  for (int64_t i = 0; i < p.K * p.Cout * p.PH * p.PW; ++i) {
    int64_t pw = i % p.PW, ph = (i / p.PW) % p.PH, co = (i / (p.PW * p.PH)) % p.Cout, n = i / (p.PW * p.PH * p.Cout);
    int64_t c = tpurt_nn_ldi(m, n * m->strides[0] + co * m->strides[1] + ph * m->strides[2] + pw * m->strides[3]);
    if (c < 0 || c >= p.C)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: channel_mapping holds %lld, not a channel of the input (%lld channels)",
                          op, (long long)c, (long long)p.C);
  }
  int nt = tpurt_kernel_num_threads(ctx);
  p.tasks = nt < 1 ? 1 : nt > p.C ? p.C : nt;
  tpurt_parallel_for(ctx, p.tasks, 1, ps_bwd, &p);
  return TPURT_OK;
}

/* one kernel serves as its own reference: a plain loop per bin */
#define PS_PAIR(NAME, EXPR)                                                                          \
  tpurt_status_t tpurt_vision_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { return EXPR; } \
  tpurt_status_t tpurt_vision_##NAME##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { return EXPR; }
PS_PAIR(ps_roi_align, ps_forward(ctx, call, true))
PS_PAIR(ps_roi_align_backward, ps_backward(ctx, call, true))
PS_PAIR(ps_roi_pool, ps_forward(ctx, call, false))
PS_PAIR(ps_roi_pool_backward, ps_backward(ctx, call, false))
