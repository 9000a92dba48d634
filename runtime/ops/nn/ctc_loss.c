/* CTC loss: _ctc_loss (negative log likelihood per batch entry and the
 * forward variables log_alpha [N, T, 2 * max_target + 1]) and
 * _ctc_loss_backward (gradient wrt log_probs [T, N, C]), by the forward /
 * backward recursions over the blank-extended target, in log space, as
 * PyTorch CPU's LossCTC.cpp does (including zero_infinity and the zero
 * gradient past each input length). Targets are [N, S] padded or 1-D
 * concatenated; lengths arrive as int lists or 1-D tensors. Work splits over
 * batch entries; sums run in double. */
#include <math.h>
#include <string.h>

#include "ops/nn/nn.h"


/* log(exp(a) + exp(b)) with -inf handled */
static inline double log_add(double a, double b) {
  if (a == -INFINITY) return b;
  if (b == -INFINITY) return a;
  double m = a > b ? a : b;
  return m + log1p(exp(-fabs(a - b)));
}

typedef struct ctc_t {
  const tpurt_tensor_t *lp, *tg, *nll, *alpha, *grad_out, *grad_in;
  const int64_t *in_len, *tg_len, *tg_off; /* per batch entry; tg_off: start of its targets */
  int64_t T, N, C, L2max, blank;
  bool zero_inf, two_d;
  double* beta;  /* [threads][T * L2max] (backward) */
} ctc_t;

static inline int64_t target_at(const ctc_t* c, int64_t b, int64_t k) {
  if (c->two_d) return tpurt_nn_ldi(c->tg, b * c->tg->strides[0] + k * c->tg->strides[1]);
  return tpurt_nn_ldi(c->tg, (c->tg_off[b] + k) * c->tg->strides[0]);
}
static inline int64_t prime(const ctc_t* c, int64_t b, int64_t s) {
  return (s % 2 == 0) ? c->blank : target_at(c, b, s / 2);
}
static inline double lp_at(const ctc_t* c, int64_t t, int64_t b, int64_t k) {
  return tpurt_nn_ld(c->lp, t * c->lp->strides[0] + b * c->lp->strides[1] + k * c->lp->strides[2]);
}
static inline int64_t aoff(const ctc_t* c, int64_t b, int64_t t, int64_t s) {
  return b * c->alpha->strides[0] + t * c->alpha->strides[1] + s * c->alpha->strides[2];
}

/* forward variables of batch entry b into log_alpha; returns the negative log likelihood */
static double ctc_alpha(const ctc_t* c, int64_t b) {
  int64_t Tb = c->in_len[b], L = c->tg_len[b], S = 2 * L + 1;
  for (int64_t t = 0; t < c->T; ++t)
    for (int64_t s = 0; s < c->L2max; ++s) tpurt_nn_st(c->alpha, aoff(c, b, t, s), -INFINITY);
  if (Tb == 0) return L == 0 ? 0.0 : INFINITY;
  tpurt_nn_st(c->alpha, aoff(c, b, 0, 0), lp_at(c, 0, b, c->blank));
  if (L > 0) tpurt_nn_st(c->alpha, aoff(c, b, 0, 1), lp_at(c, 0, b, target_at(c, b, 0)));
  for (int64_t t = 1; t < Tb; ++t)
    for (int64_t s = 0; s < S; ++s) {
      int64_t cur = prime(c, b, s);
      double v = tpurt_nn_ld(c->alpha, aoff(c, b, t - 1, s));
      if (s > 0) v = log_add(v, tpurt_nn_ld(c->alpha, aoff(c, b, t - 1, s - 1)));
      if (s > 1 && prime(c, b, s - 2) != cur) v = log_add(v, tpurt_nn_ld(c->alpha, aoff(c, b, t - 1, s - 2)));
      tpurt_nn_st(c->alpha, aoff(c, b, t, s), v == -INFINITY ? -INFINITY : v + lp_at(c, t, b, cur));
    }
  double end = tpurt_nn_ld(c->alpha, aoff(c, b, Tb - 1, S - 1));
  if (L > 0) end = log_add(end, tpurt_nn_ld(c->alpha, aoff(c, b, Tb - 1, S - 2)));
  return -end;
}

static void ctc_fwd_batches(void* u, int64_t b0, int64_t b1, int tid) {
  const ctc_t* c = u;
  for (int64_t b = b0; b < b1; ++b) tpurt_nn_st(c->nll, b * (c->nll->ndim ? c->nll->strides[0] : 0), ctc_alpha(c, b));
}

static void ctc_bwd_batches(void* u, int64_t b0, int64_t b1, int tid) {
  const ctc_t* c = u;
  double* beta = c->beta + (size_t)tid * (size_t)(c->T * c->L2max);
  const tpurt_tensor_t* g = c->grad_in;
  for (int64_t b = b0; b < b1; ++b) {
    int64_t Tb = c->in_len[b], L = c->tg_len[b], S = 2 * L + 1;
    double nll = tpurt_nn_ld(c->nll, b * (c->nll->ndim ? c->nll->strides[0] : 0));
    double gr = tpurt_nn_ld(c->grad_out, b * (c->grad_out->ndim ? c->grad_out->strides[0] : 0));
    int64_t go = g->strides[0], gn = g->strides[1], gc = g->strides[2];
    if ((c->zero_inf && nll == INFINITY) || Tb == 0) {
      for (int64_t t = 0; t < c->T; ++t)
        for (int64_t k = 0; k < c->C; ++k) tpurt_nn_st(g, t * go + b * gn + k * gc, 0);
      continue;
    }
    for (int64_t i = 0; i < c->T * c->L2max; ++i) beta[i] = -INFINITY;
    double* bt = beta + (Tb - 1) * c->L2max;
    bt[S - 1] = lp_at(c, Tb - 1, b, c->blank);
    if (L > 0) bt[S - 2] = lp_at(c, Tb - 1, b, target_at(c, b, L - 1));
    for (int64_t t = Tb - 2; t >= 0; --t)
      for (int64_t s = S - 1; s >= 0; --s) {
        int64_t cur = prime(c, b, s);
        const double* nx = beta + (t + 1) * c->L2max;
        double v = nx[s];
        if (s < S - 1) v = log_add(v, nx[s + 1]);
        if (s < S - 2 && prime(c, b, s + 2) != cur) v = log_add(v, nx[s + 2]);
        beta[t * c->L2max + s] = v == -INFINITY ? -INFINITY : v + lp_at(c, t, b, cur);
      }
    for (int64_t t = 0; t < c->T; ++t) {
      if (t >= Tb) {
        for (int64_t k = 0; k < c->C; ++k) tpurt_nn_st(g, t * go + b * gn + k * gc, 0);
        continue;
      }
      /* per class: log of sum over the extended positions holding it of alpha * beta */
      for (int64_t k = 0; k < c->C; ++k) tpurt_nn_st(g, t * go + b * gn + k * gc, -INFINITY);
      for (int64_t s = 0; s < S; ++s) {
        int64_t k = prime(c, b, s);
        double ab = tpurt_nn_ld(c->alpha, aoff(c, b, t, s)) + beta[t * c->L2max + s];
        tpurt_nn_st(g, t * go + b * gn + k * gc, log_add(tpurt_nn_ld(g, t * go + b * gn + k * gc), ab));
      }
      for (int64_t k = 0; k < c->C; ++k) {
        double lcab = tpurt_nn_ld(g, t * go + b * gn + k * gc), lp = lp_at(c, t, b, k);
        tpurt_nn_st(g, t * go + b * gn + k * gc, (exp(lp) - exp(lcab + nll - lp)) * gr);
      }
    }
  }
}

/* lengths from an int list or a 1-D integer tensor */
static tpurt_status_t lengths_arg(const tpurt_op_call_t* call, int i, int64_t n, int64_t* out) {
  int32_t count;
  const int64_t* list = tpurt_arg_ints(call, i, &count);
  if (list && count == n) {
    memcpy(out, list, (size_t)n * sizeof(int64_t));
    return TPURT_OK;
  }
  const tpurt_tensor_t* t = tpurt_arg_tensor(call, i);
  if (t && t->ndim == 1 && t->sizes[0] == n && !tpurt_dtype_is_floating(t->dtype)) {
    for (int64_t b = 0; b < n; ++b) out[b] = tpurt_nn_ldi(t, b * t->strides[0]);
    return TPURT_OK;
  }
  return TPURT_STATUS(INVALID_ARGUMENT, "%s: %s must have one entry per batch entry (%lld)", call->name,
                      i == 2 || i == 3 ? (i == 2 ? "input_lengths" : "target_lengths") : "lengths", (long long)n);
}

static tpurt_status_t ctc_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool backward, bool ref) {
  int sh = backward ? 1 : 0;
  ctc_t c;
  memset(&c, 0, sizeof(c));
  if (backward) TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &c.grad_out));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, sh, -1, &c.lp));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, sh + 1, -1, &c.tg));
  if (c.lp->ndim != 3)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: log_probs must be [T, N, C], got %d dims", call->name, (int)c.lp->ndim);
  if (c.lp->dtype != TPURT_DTYPE_FLOAT32 && c.lp->dtype != TPURT_DTYPE_FLOAT64)
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for %s", call->name, tpurt_dtype_name(c.lp->dtype));
  c.T = c.lp->sizes[0], c.N = c.lp->sizes[1], c.C = c.lp->sizes[2];
  int bi = backward ? 7 : 4;
  c.blank = tpurt_arg_int(call, bi, 0);
  c.zero_inf = tpurt_arg_bool(call, bi + 1, false);
  if (c.blank < 0 || c.blank >= c.C) return TPURT_STATUS(INVALID_ARGUMENT, "%s: blank must be in label range", call->name);
  int64_t* lens = tpurt_kernel_scratch(ctx, (size_t)(3 * c.N + 1) * sizeof(int64_t));
  if (!lens) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", call->name);
  int64_t *in_len = lens, *tg_len = lens + c.N, *tg_off = lens + 2 * c.N;
  TPURT_RETURN_IF_ERROR(lengths_arg(call, sh + 2, c.N, in_len));
  TPURT_RETURN_IF_ERROR(lengths_arg(call, sh + 3, c.N, tg_len));
  c.two_d = c.tg->ndim == 2;
  int64_t max_l = 0, pos = 0;
  for (int64_t b = 0; b < c.N; ++b) {
    if (in_len[b] < 0 || in_len[b] > c.T)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: Expected input_lengths to have value at most %lld, but got value %lld",
                          call->name, (long long)c.T, (long long)in_len[b]);
    if (tg_len[b] < 0) return TPURT_STATUS(INVALID_ARGUMENT, "%s: target lengths must be >= 0", call->name);
    tg_off[b] = pos;
    pos += tg_len[b];
    if (tg_len[b] > max_l) max_l = tg_len[b];
  }
  if (c.two_d ? (c.tg->sizes[0] != c.N || c.tg->sizes[1] < max_l) : (c.tg->ndim != 1 || c.tg->sizes[0] < pos))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: targets too short for the target lengths", call->name);
  for (int64_t b = 0; b < c.N; ++b)
    for (int64_t k = 0; k < tg_len[b]; ++k) {
      int64_t v = c.two_d ? tpurt_nn_ldi(c.tg, b * c.tg->strides[0] + k * c.tg->strides[1])
                          : tpurt_nn_ldi(c.tg, (tg_off[b] + k) * c.tg->strides[0]);
      if (v < 0 || v >= c.C)
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: target %lld out of range [0, %lld)", call->name, (long long)v,
                            (long long)c.C);
    }
  c.in_len = in_len, c.tg_len = tg_len, c.tg_off = tg_off;
  c.L2max = 2 * max_l + 1;
  if (!backward) {
    if (call->num_outputs < 2) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected 2 outputs", call->name);
    c.nll = &call->outputs[0];
    c.alpha = &call->outputs[1];
  } else {
    c.nll = tpurt_arg_tensor(call, 5);
    c.alpha = tpurt_arg_tensor(call, 6);
    if (!c.nll || !c.alpha || call->num_outputs < 1)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing neg_log_likelihood / log_alpha / output", call->name);
    c.grad_in = &call->outputs[0];
    if (c.grad_in->ndim != 3 || c.grad_in->sizes[0] != c.T || c.grad_in->sizes[1] != c.N || c.grad_in->sizes[2] != c.C)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: the gradient must be shaped like log_probs", call->name);
  }
  if (c.alpha->ndim != 3 || c.alpha->sizes[0] != c.N || c.alpha->sizes[1] != c.T || c.alpha->sizes[2] < c.L2max)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: log_alpha must be [N, T, 2 * max target length + 1]", call->name);
  c.L2max = c.alpha->sizes[2];
  if (c.N == 0) return TPURT_OK;
  if (!backward) {
    if (ref) ctc_fwd_batches(&c, 0, c.N, 0);
    else tpurt_parallel_for(ctx, c.N, 1, ctc_fwd_batches, &c);
    return TPURT_OK;
  }
  int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
  c.beta = tpurt_kernel_scratch(ctx, (size_t)nt * (size_t)(c.T * c.L2max + 1) * sizeof(double));
  if (!c.beta) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", call->name);
  if (ref) ctc_bwd_batches(&c, 0, c.N, 0);
  else tpurt_parallel_for(ctx, c.N, 1, ctc_bwd_batches, &c);
  return TPURT_OK;
}

TPURT_NN_PAIR(ctc_loss, ctc_run(ctx, call, false, ref))
TPURT_NN_PAIR(ctc_loss_backward, ctc_run(ctx, call, true, ref))
