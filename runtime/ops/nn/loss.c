/* Loss kernels: the pointwise losses (mse, l1, huber, smooth_l1,
 * binary_cross_entropy) forward and backward with reduction none/mean/sum, and
 * nll_loss / nll_loss2d forward and backward (weight, ignore_index). Pointwise
 * losses walk the broadcast shape with incremental offsets, split across
 * threads; mean/sum accumulate per-thread partials in double. */
#include <string.h>

#include "ops/nn/nn.h"
#include "ops/reduce/reduce.h"

enum { RED_NONE = 0, RED_MEAN = 1, RED_SUM = 2 };

typedef enum { L_MSE, L_L1, L_HUBER, L_SMOOTH_L1, L_BCE } loss_kind_t;

#define NV 5 /* views: x, t, w, g, out */
typedef struct pw_job_t {
  loss_kind_t kind;
  bool backward;
  int reduction;
  double param, norm;
  int ndim;
  int64_t sizes[TPURT_MAX_DIMS];
  const tpurt_tensor_t* t[NV];
  int64_t st[NV][TPURT_MAX_DIMS]; /* strides over `sizes` (0 where broadcast / absent) */
  double* partial;                 /* per thread */
  bool* bad;                       /* per thread: an input outside [0, 1] (BCE) */
  bool ref;
} pw_job_t;

/* Right-aligned broadcast strides of t over sizes (t == NULL -> all zero). */
static tpurt_status_t bcast(const char* op, const tpurt_tensor_t* t, int ndim, const int64_t* sizes, int64_t* st) {
  for (int d = 0; d < ndim; ++d) st[d] = 0;
  if (!t) return TPURT_OK;
  if (t->ndim > ndim) return TPURT_STATUS(INVALID_ARGUMENT, "%s: a %d-d operand does not broadcast to %d dims", op, (int)t->ndim, ndim);
  for (int i = 0; i < t->ndim; ++i) {
    int d = ndim - t->ndim + i;
    if (t->sizes[i] == sizes[d]) st[d] = t->strides[i];
    else if (t->sizes[i] == 1) st[d] = 0;
    else return TPURT_STATUS(INVALID_ARGUMENT, "%s: size %lld does not broadcast to %lld", op, (long long)t->sizes[i], (long long)sizes[d]);
  }
  return TPURT_OK;
}

static inline double ld(const tpurt_tensor_t* t, int64_t off) {
  return tpurt_dtype_load_f64(t->dtype, tpurt_tensor_at(t, off));
}

static inline double pw_forward(loss_kind_t k, double x, double t, double w, double p) {
  double d = x - t, ad = fabs(d);
  switch (k) {
    case L_MSE: return d * d;
    case L_L1: return ad;
    case L_HUBER: return ad < p ? 0.5 * d * d : p * (ad - 0.5 * p);
    case L_SMOOTH_L1: return p == 0 ? ad : (ad < p ? 0.5 * d * d / p : ad - 0.5 * p);
    case L_BCE: {
      double lx = log(x), l1x = log1p(-x);
      if (lx < -100) lx = -100;
      if (l1x < -100) l1x = -100;
      return -w * (t * lx + (1 - t) * l1x);
    }
  }
  return 0;
}

static inline double pw_backward(loss_kind_t k, double x, double t, double w, double p, double g) {
  double d = x - t;
  switch (k) {
    case L_MSE: return 2 * d * g;
    case L_L1: return (d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0) * g;
    case L_HUBER: return (d < -p ? -p : d > p ? p : d) * g;
    case L_SMOOTH_L1:
      if (p == 0) return (d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0) * g;
      return (d < -p ? -1.0 : d > p ? 1.0 : d / p) * g;
    case L_BCE: {
      double den = (1 - x) * x;
      if (den < 1e-12) den = 1e-12;
      return g * w * (x - t) / den;
    }
  }
  return 0;
}

static void pw_range(void* user, int64_t b, int64_t e, int tid) {
  const pw_job_t* j = user;
  int64_t cnt[TPURT_MAX_DIMS] = {0}, off[NV] = {0};
  int64_t rem = b;
  for (int d = j->ndim - 1; d >= 0; --d) {
    cnt[d] = rem % j->sizes[d];
    rem /= j->sizes[d];
    for (int v = 0; v < NV; ++v) off[v] += cnt[d] * j->st[v][d];
  }
  double acc = 0;
  bool bad = false;
  for (int64_t i = b; i < e; ++i) {
    double x = ld(j->t[0], off[0]), t = ld(j->t[1], off[1]);
    double w = j->t[2] ? ld(j->t[2], off[2]) : 1.0;
    if (j->kind == L_BCE && !(x >= 0 && x <= 1)) bad = true;
    if (j->backward) {
      double g = ld(j->t[3], off[3]) * j->norm;
      tpurt_dtype_store_f64(j->t[4]->dtype, tpurt_tensor_at(j->t[4], off[4]), pw_backward(j->kind, x, t, w, j->param, g));
    } else {
      double l = pw_forward(j->kind, x, t, w, j->param);
      if (j->reduction == RED_NONE) tpurt_dtype_store_f64(j->t[4]->dtype, tpurt_tensor_at(j->t[4], off[4]), l);
      else acc += l;
    }
    for (int d = j->ndim - 1; d >= 0; --d) {
      for (int v = 0; v < NV; ++v) off[v] += j->st[v][d];
      if (++cnt[d] < j->sizes[d]) break;
      for (int v = 0; v < NV; ++v) off[v] -= j->st[v][d] * j->sizes[d];
      cnt[d] = 0;
    }
  }
  j->partial[tid] += acc;
  if (bad) j->bad[tid] = true;
}

/* forward: (self, target, [weight,] reduction[, param]) ; backward: (grad, self, target, [weight,] reduction[, param]) */
static tpurt_status_t pw_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, loss_kind_t kind, bool backward, bool ref) {
  pw_job_t j = {.kind = kind, .backward = backward, .ref = ref};
  int a = backward ? 1 : 0;
  const tpurt_tensor_t* x = tpurt_arg_tensor(c, a);
  const tpurt_tensor_t* t = tpurt_arg_tensor(c, a + 1);
  if (!x || !t || c->num_outputs < 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (self, target) and an output", c->name);
  int ri = a + 2;
  const tpurt_tensor_t* w = NULL;
  if (kind == L_BCE) { w = tpurt_arg_tensor(c, a + 2); ri = a + 3; }
  j.reduction = (int)tpurt_arg_int(c, ri, RED_MEAN);
  j.param = tpurt_arg_double(c, ri + 1, 1.0);
  if (j.reduction < 0 || j.reduction > 2) return TPURT_STATUS(INVALID_ARGUMENT, "%s: reduction %d is not 0, 1 or 2", c->name, j.reduction);
  const tpurt_tensor_t* out = &c->outputs[0];
  for (const tpurt_tensor_t* u = x; u; u = (u == x ? t : NULL))
    if (!tpurt_dtype_is_floating(u->dtype)) return TPURT_REDUCE_UNSUPPORTED(c->name, u->dtype);
  /* iteration shape: broadcast of self and target (= grad_input's shape in backward) */
  int nd = x->ndim > t->ndim ? x->ndim : t->ndim;
  if (backward && out->ndim > nd) nd = out->ndim;
  j.ndim = nd;
  for (int d = 0; d < nd; ++d) {
    int64_t s = 1;
    int ix = d - (nd - x->ndim), it = d - (nd - t->ndim);
    if (ix >= 0 && x->sizes[ix] != 1) s = x->sizes[ix];
    if (it >= 0 && t->sizes[it] != 1) s = t->sizes[it];
    j.sizes[d] = s;
  }
  int64_t numel = 1;
  for (int d = 0; d < nd; ++d) numel *= j.sizes[d];
  j.t[0] = x; j.t[1] = t; j.t[2] = w;
  j.t[3] = backward ? tpurt_arg_tensor(c, 0) : NULL;
  j.t[4] = out;
  if (backward && !j.t[3]) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing grad_output", c->name);
  for (int v = 0; v < 4; ++v) TPURT_RETURN_IF_ERROR(bcast(c->name, j.t[v], nd, j.sizes, j.st[v]));
  if (backward || j.reduction == RED_NONE) TPURT_RETURN_IF_ERROR(bcast(c->name, out, nd, j.sizes, j.st[4]));
  j.norm = backward && j.reduction == RED_MEAN ? 1.0 / (double)numel : 1.0;
  int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
  j.partial = tpurt_kernel_scratch(ctx, (sizeof(double) + sizeof(bool)) * (size_t)nt);
  if (!j.partial) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", c->name);
  j.bad = (bool*)(j.partial + nt);
  memset(j.partial, 0, sizeof(double) * (size_t)nt);
  memset(j.bad, 0, (size_t)nt);
  if (numel > 0) {
    if (ref) pw_range(&j, 0, numel, 0);
    else tpurt_parallel_for(ctx, numel, 16384, pw_range, &j);
  }
  for (int i = 0; i < nt; ++i)
    if (j.bad[i]) return TPURT_STATUS(INVALID_ARGUMENT, "%s: all elements of input should be between 0 and 1", c->name);
  if (!backward && j.reduction != RED_NONE) {
    double s = 0;
    for (int i = 0; i < nt; ++i) s += j.partial[i];
    if (j.reduction == RED_MEAN) s /= (double)numel;
    tpurt_dtype_store_f64(out->dtype, out->data, s);
  }
  return TPURT_OK;
}

#define PW_PAIR(name, kind, bwd)                                                               \
  tpurt_status_t tpurt_nn_##name(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) {       \
    return pw_impl(x, c, kind, bwd, false);                                                    \
  }                                                                                            \
  tpurt_status_t tpurt_nn_##name##_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) {  \
    return pw_impl(x, c, kind, bwd, true);                                                     \
  }
PW_PAIR(mse_loss, L_MSE, false)
PW_PAIR(mse_loss_backward, L_MSE, true)
PW_PAIR(l1_loss, L_L1, false)
PW_PAIR(huber_loss, L_HUBER, false)
PW_PAIR(huber_loss_backward, L_HUBER, true)
PW_PAIR(smooth_l1_loss, L_SMOOTH_L1, false)
PW_PAIR(smooth_l1_loss_backward, L_SMOOTH_L1, true)
PW_PAIR(binary_cross_entropy, L_BCE, false)
PW_PAIR(binary_cross_entropy_backward, L_BCE, true)

/* ---------------- nll_loss / nll_loss2d ----------------
 * self: (C), (N, C) or (N, C, d1, ...); target: self's shape without dim 1
 * (or () for (C)). Element (n, s) contributes -w[t] * self[n, t, s]. */

typedef struct nll_t {
  const tpurt_tensor_t *x, *tgt, *w;
  int64_t N, C, S;
  bool batched;
} nll_t;

static int64_t nll_x_off(const nll_t* p, int64_t n, int64_t cls, int64_t s) {
  const tpurt_tensor_t* x = p->x;
  if (!p->batched) return cls * (x->ndim ? x->strides[0] : 0);
  int64_t off = n * x->strides[0] + cls * x->strides[1];
  for (int d = x->ndim - 1; d >= 2; --d) { off += (s % x->sizes[d]) * x->strides[d]; s /= x->sizes[d]; }
  return off;
}
static int64_t nll_t_off(const nll_t* p, const tpurt_tensor_t* t, int64_t n, int64_t s) {
  if (!p->batched || t->ndim == 0) return 0;
  int64_t off = n * t->strides[0];
  for (int d = t->ndim - 1; d >= 1; --d) { off += (s % t->sizes[d]) * t->strides[d]; s /= t->sizes[d]; }
  return off;
}

static tpurt_status_t nll_setup(const tpurt_op_call_t* c, int a, nll_t* p) {
  p->x = tpurt_arg_tensor(c, a);
  p->tgt = tpurt_arg_tensor(c, a + 1);
  p->w = tpurt_arg_tensor(c, a + 2);
  if (!p->x || !p->tgt) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (self, target, ...)", c->name);
  if (!tpurt_dtype_is_floating(p->x->dtype)) return TPURT_REDUCE_UNSUPPORTED(c->name, p->x->dtype);
  if (tpurt_dtype_is_floating(p->tgt->dtype) || p->tgt->dtype == TPURT_DTYPE_BOOL)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: target must be an integer tensor, got %s", c->name, tpurt_dtype_name(p->tgt->dtype));
  p->batched = p->x->ndim >= 2;
  p->N = p->batched ? p->x->sizes[0] : 1;
  p->C = p->batched ? p->x->sizes[1] : (p->x->ndim ? p->x->sizes[0] : 1);
  p->S = 1;
  for (int d = 2; d < p->x->ndim; ++d) p->S *= p->x->sizes[d];
  if (p->w && tpurt_tensor_numel(p->w) != p->C)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: weight has %lld elements, expected %lld classes", c->name,
                        (long long)tpurt_tensor_numel(p->w), (long long)p->C);
  return TPURT_OK;
}

static double nll_weight(const nll_t* p, int64_t cls) {
  return p->w ? ld(p->w, tpurt_tensor_offset_of(p->w, cls, -1)) : 1.0;
}

/* (self, target, weight?, reduction, ignore_index) -> (output, total_weight).
 * Serial: the work is N*S gathers, small next to the log_softmax before it. */
static tpurt_status_t nll_fwd_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, bool ref) {
  (void)ref;
  nll_t p;
  TPURT_RETURN_IF_ERROR(nll_setup(c, 0, &p));
  int reduction = (int)tpurt_arg_int(c, 3, RED_MEAN);
  int64_t ignore = tpurt_arg_int(c, 4, -100);
  if (c->num_outputs < 2) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (output, total_weight)", c->name);
  const tpurt_tensor_t *out = &c->outputs[0], *tw = &c->outputs[1];
  double sum = 0, wsum = 0;
  for (int64_t n = 0; n < p.N; ++n) {
    for (int64_t s = 0; s < p.S; ++s) {
      int64_t cls = tpurt_dtype_load_i64(p.tgt->dtype, tpurt_tensor_at(p.tgt, nll_t_off(&p, p.tgt, n, s)));
      double l = 0;
      if (cls != ignore) {
        if (cls < 0 || cls >= p.C)
          return TPURT_STATUS(OUT_OF_RANGE, "%s: Target %lld is out of bounds (classes: %lld)", c->name, (long long)cls, (long long)p.C);
        double w = nll_weight(&p, cls);
        l = -w * ld(p.x, nll_x_off(&p, n, cls, s));
        wsum += w;
      }
      if (reduction == RED_NONE) {
        if (!p.batched) tpurt_dtype_store_f64(out->dtype, out->data, l);
        else tpurt_dtype_store_f64(out->dtype, tpurt_tensor_at(out, nll_t_off(&p, out, n, s)), l);
      } else {
        sum += l;
      }
    }
  }
  if (reduction == RED_NONE) {
    tpurt_dtype_store_f64(tw->dtype, tw->data, 0);
    return TPURT_OK;
  }
  if (reduction == RED_MEAN) sum = sum / wsum; /* all ignored -> 0/0 = NaN, as PyTorch */
  tpurt_dtype_store_f64(out->dtype, out->data, sum);
  tpurt_dtype_store_f64(tw->dtype, tw->data, wsum);
  return TPURT_OK;
}

/* (grad_output, self, target, weight?, reduction, ignore_index, total_weight) -> grad_input */
static tpurt_status_t nll_bwd_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, bool ref) {
  (void)ref;
  nll_t p;
  TPURT_RETURN_IF_ERROR(nll_setup(c, 1, &p));
  const tpurt_tensor_t* g = tpurt_arg_tensor(c, 0);
  int reduction = (int)tpurt_arg_int(c, 4, RED_MEAN);
  int64_t ignore = tpurt_arg_int(c, 5, -100);
  const tpurt_tensor_t* tw = tpurt_arg_tensor(c, 6);
  if (!g || !tw || c->num_outputs < 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (grad_output, ..., total_weight)", c->name);
  const tpurt_tensor_t* gi = &c->outputs[0];
  if (gi->ndim != p.x->ndim) return TPURT_STATUS(INVALID_ARGUMENT, "%s: grad_input rank mismatch", c->name);
  /* zero grad_input */
  nll_t q = p;
  q.x = gi;
  int64_t total = tpurt_tensor_numel(gi);
  if (tpurt_tensor_is_contiguous(gi)) /* zero is all-zero bytes in every dtype */
    memset(tpurt_tensor_at(gi, 0), 0, (size_t)total * tpurt_dtype_size(gi->dtype));
  else
    for (int64_t i = 0; i < total; ++i) tpurt_dtype_store_f64(gi->dtype, tpurt_tensor_at(gi, tpurt_tensor_offset_of(gi, i, -1)), 0);
  double gscalar = reduction == RED_NONE ? 0 : ld(g, 0);
  if (reduction == RED_MEAN) gscalar /= ld(tw, 0);
  for (int64_t n = 0; n < p.N; ++n) {
    for (int64_t s = 0; s < p.S; ++s) {
      int64_t cls = tpurt_dtype_load_i64(p.tgt->dtype, tpurt_tensor_at(p.tgt, nll_t_off(&p, p.tgt, n, s)));
      if (cls == ignore) continue;
      if (cls < 0 || cls >= p.C)
        return TPURT_STATUS(OUT_OF_RANGE, "%s: Target %lld is out of bounds (classes: %lld)", c->name, (long long)cls, (long long)p.C);
      double gv = reduction == RED_NONE ? ld(g, p.batched ? nll_t_off(&p, g, n, s) : 0) : gscalar;
      tpurt_dtype_store_f64(gi->dtype, tpurt_tensor_at(gi, nll_x_off(&q, n, cls, s)), -nll_weight(&p, cls) * gv);
    }
  }
  return TPURT_OK;
}

tpurt_status_t tpurt_nn_nll_loss_forward(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return nll_fwd_impl(x, c, false); }
tpurt_status_t tpurt_nn_nll_loss_forward_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return nll_fwd_impl(x, c, true); }
tpurt_status_t tpurt_nn_nll_loss_backward(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return nll_bwd_impl(x, c, false); }
tpurt_status_t tpurt_nn_nll_loss_backward_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return nll_bwd_impl(x, c, true); }
