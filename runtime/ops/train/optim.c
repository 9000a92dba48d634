/* The fused optimizer steps of torch.optim (fused=True): Adam, AdamW, SGD and
 * Adagrad over lists of parameters, each element updated in one pass. The
 * arithmetic follows ATen's CPU kernels (native/cpu/Fused*Kernel.cpp), in
 * double; a grad_scale divides the gradients first and a found_inf of 1
 * skips the step, as the gradient scaler expects. */
#include <math.h>

#include "ops/train/train.h"

enum { OPT_ADAM, OPT_ADAMW, OPT_SGD, OPT_ADAGRAD };

/* The per-tensor state one range function reads: up to five lists' element
 * tensors (param, grad, and the optimizer's buffers) and the scalars. */
typedef struct opt_job_t {
  tpurt_train_view_t p, g, m, v, vmax;
  double lr, beta1, beta2, wd, eps, momentum, dampening, lr_decay;
  double inv_scale, step, bc1, bc2_sqrt;
  bool amsgrad, maximize, nesterov, first_step, has_buf;
  int kind;
} opt_job_t;

static void opt_range(void* user, int64_t begin, int64_t end, int tid) {
  const opt_job_t* j = user;
  for (int64_t i = begin; i < end; ++i) {
    double p = tpurt_train_ld(j->p, i);
    double g = tpurt_train_ld(j->g, i) * j->inv_scale;
    if (j->maximize) g = -g;
    switch (j->kind) {
      case OPT_ADAM:
      case OPT_ADAMW: {
        if (j->wd != 0) {
          if (j->kind == OPT_ADAM) g += p * j->wd;
          else p -= j->lr * j->wd * p;
        }
        double m = tpurt_train_ld(j->m, i), v = tpurt_train_ld(j->v, i);
        m += (1 - j->beta1) * (g - m); /* lerp(m, g, 1 - beta1) */
        v = v * j->beta2 + (1 - j->beta2) * g * g;
        double vd = v;
        if (j->amsgrad) {
          double vm = tpurt_train_ld(j->vmax, i);
          vd = vm > v ? vm : v;
          tpurt_train_st(j->vmax, i, vd);
        }
        double denom = sqrt(vd) / j->bc2_sqrt + j->eps;
        p -= (j->lr / j->bc1) * m / denom;
        tpurt_train_st(j->m, i, m);
        tpurt_train_st(j->v, i, v);
        break;
      }
      case OPT_SGD: {
        if (j->wd != 0) g += j->wd * p;
        if (j->has_buf) {
          double b = j->first_step ? g : j->momentum * tpurt_train_ld(j->m, i) + (1 - j->dampening) * g;
          tpurt_train_st(j->m, i, b);
          g = j->nesterov ? g + j->momentum * b : b;
        }
        p -= j->lr * g;
        break;
      }
      case OPT_ADAGRAD: {
        if (j->wd != 0) g += j->wd * p;
        double s = tpurt_train_ld(j->m, i) + g * g;
        tpurt_train_st(j->m, i, s);
        double clr = j->lr / (1 + (j->step - 1) * j->lr_decay);
        p -= clr * g / (sqrt(s) + j->eps);
        break;
      }
    }
    tpurt_train_st(j->p, i, p);
  }
}

/* The list at args[i] with `n` entries (n < 0: any count, returned in *n). */
static tpurt_status_t opt_list(const tpurt_op_call_t* c, int i, int32_t* n, const tpurt_tensor_t* const** out) {
  int32_t count;
  const tpurt_tensor_t* const* l = tpurt_arg_tensors(c, i, &count);
  if (!l) return TPURT_STATUS(INVALID_ARGUMENT, "%s: argument %d is not a tensor list", c->name, i);
  if (*n >= 0 && count != *n)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: tensor list %d has %d tensors, expected %d", c->name, i, count, *n);
  *n = count;
  *out = l;
  return TPURT_OK;
}

static tpurt_status_t opt_step(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, int kind) {
  /* argument positions: lists first, then the keyword scalars, grad_scale, found_inf */
  int nlists = kind == OPT_SGD ? 3 : kind == OPT_ADAGRAD ? 4 : 6;
  const tpurt_tensor_t* const* lists[6] = {0};
  int32_t n = -1;
  tpurt_status_t st = opt_list(c, 0, &n, &lists[0]);
  for (int l = 1; !st && l < nlists; ++l) {
    int32_t want = n;
    /* optional buffers: SGD's momentum buffers without momentum, Adam's
     * max_exp_avg_sqs without amsgrad, may be empty lists */
    if ((kind == OPT_SGD && l == 2) || ((kind == OPT_ADAM || kind == OPT_ADAMW) && l == 4)) want = -1;
    st = opt_list(c, l, &want, &lists[l]);
    if (!st && want != n && want != 0)
      st = TPURT_STATUS(INVALID_ARGUMENT, "%s: tensor list %d has %d tensors, expected %d", c->name, l, want, n);
    if (!st && want == 0 && n != 0) lists[l] = NULL;
  }
  if (st) return st;
  const int s0 = nlists;
  opt_job_t j = {.kind = kind, .inv_scale = 1.0};
  int gs_at, fi_at;
  if (kind == OPT_SGD) {
    j.wd = tpurt_arg_double(c, s0, 0);
    j.momentum = tpurt_arg_double(c, s0 + 1, 0);
    j.lr = tpurt_arg_double(c, s0 + 2, 0);
    j.dampening = tpurt_arg_double(c, s0 + 3, 0);
    j.nesterov = tpurt_arg_bool(c, s0 + 4, false);
    j.maximize = tpurt_arg_bool(c, s0 + 5, false);
    j.first_step = tpurt_arg_bool(c, s0 + 6, false);
    gs_at = s0 + 7;
  } else if (kind == OPT_ADAGRAD) {
    j.lr = tpurt_arg_double(c, s0, 0);
    j.lr_decay = tpurt_arg_double(c, s0 + 1, 0);
    j.wd = tpurt_arg_double(c, s0 + 2, 0);
    j.eps = tpurt_arg_double(c, s0 + 3, 0);
    j.maximize = tpurt_arg_bool(c, s0 + 4, false);
    gs_at = s0 + 5;
  } else {
    j.lr = tpurt_arg_double(c, s0, 0);
    j.beta1 = tpurt_arg_double(c, s0 + 1, 0);
    j.beta2 = tpurt_arg_double(c, s0 + 2, 0);
    j.wd = tpurt_arg_double(c, s0 + 3, 0);
    j.eps = tpurt_arg_double(c, s0 + 4, 0);
    j.amsgrad = tpurt_arg_bool(c, s0 + 5, false);
    j.maximize = tpurt_arg_bool(c, s0 + 6, false);
    gs_at = s0 + 7;
  }
  fi_at = gs_at + 1;
  const tpurt_tensor_t* found_inf = tpurt_arg_tensor(c, fi_at);
  if (found_inf && tpurt_dtype_load_f64(found_inf->dtype, found_inf->data) == 1.0) return TPURT_OK;
  const tpurt_tensor_t* grad_scale = tpurt_arg_tensor(c, gs_at);
  if (grad_scale) j.inv_scale = 1.0 / tpurt_dtype_load_f64(grad_scale->dtype, grad_scale->data);
  if (kind == OPT_SGD) j.has_buf = lists[2] != NULL && j.momentum != 0;
  if ((kind == OPT_ADAM || kind == OPT_ADAMW) && j.amsgrad && !lists[4])
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: amsgrad needs max_exp_avg_sqs", c->name);
  for (int32_t t = 0; t < n; ++t) {
    const tpurt_tensor_t* p = lists[0][t];
    int64_t numel = tpurt_tensor_numel(p);
    for (int l = 1; l < nlists; ++l) {
      const tpurt_tensor_t* x = lists[l] ? lists[l][t] : NULL;
      bool is_step = (kind == OPT_ADAGRAD && l == 3) || ((kind == OPT_ADAM || kind == OPT_ADAMW) && l == 5);
      if (x && !is_step && tpurt_tensor_numel(x) != numel)
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: tensor %d of list %d has %lld elements, its parameter %lld",
                            c->name, t, l, (long long)tpurt_tensor_numel(x), (long long)numel);
    }
    j.p = tpurt_train_view(p);
    j.g = tpurt_train_view(lists[1][t]);
    j.m = tpurt_train_view(lists[2] ? lists[2][t] : NULL);
    if (kind == OPT_ADAGRAD) {
      j.step = tpurt_dtype_load_f64(lists[3][t]->dtype, lists[3][t]->data);
    } else if (kind != OPT_SGD) {
      j.v = tpurt_train_view(lists[3][t]);
      j.vmax = tpurt_train_view(lists[4] ? lists[4][t] : NULL);
      j.step = tpurt_dtype_load_f64(lists[5][t]->dtype, lists[5][t]->data);
      j.bc1 = 1 - pow(j.beta1, j.step);
      j.bc2_sqrt = sqrt(1 - pow(j.beta2, j.step));
    }
    if (ctx) tpurt_parallel_for(ctx, numel, 16384, opt_range, &j);
    else opt_range(&j, 0, numel, 0);
  }
  return TPURT_OK;
}

tpurt_status_t tpurt_train_fused_adam(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return opt_step(x, c, OPT_ADAM); }
tpurt_status_t tpurt_train_fused_adam_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return opt_step(NULL, c, OPT_ADAM); }
tpurt_status_t tpurt_train_fused_adamw(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return opt_step(x, c, OPT_ADAMW); }
tpurt_status_t tpurt_train_fused_adamw_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return opt_step(NULL, c, OPT_ADAMW); }
tpurt_status_t tpurt_train_fused_sgd(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return opt_step(x, c, OPT_SGD); }
tpurt_status_t tpurt_train_fused_sgd_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return opt_step(NULL, c, OPT_SGD); }
tpurt_status_t tpurt_train_fused_adagrad(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return opt_step(x, c, OPT_ADAGRAD); }
tpurt_status_t tpurt_train_fused_adagrad_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return opt_step(NULL, c, OPT_ADAGRAD); }
