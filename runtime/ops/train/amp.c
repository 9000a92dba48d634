/* The gradient scaler's kernels (torch.amp.GradScaler): unscale gradients in
 * place while noting any inf/NaN, and update the scale from that note. As
 * ATen's CPU kernels (native/cpu/AmpGradScalerKernels.cpp). */
#include <math.h>

#include "ops/train/train.h"

typedef struct unscale_job_t {
  tpurt_train_view_t t;
  double inv_scale;
  bool* bad; /* one flag per compute thread */
} unscale_job_t;

static void unscale_range(void* user, int64_t begin, int64_t end, int tid) {
  const unscale_job_t* j = user;
  bool bad = false;
  for (int64_t i = begin; i < end; ++i) {
    double v = tpurt_train_ld(j->t, i);
    if (!isfinite(v)) bad = true;
    tpurt_train_st(j->t, i, j->inv_scale == 1.0 ? v : v * j->inv_scale);
  }
  if (bad) j->bad[tid] = true;
}

/* _amp_foreach_non_finite_check_and_unscale_(Tensor(a!)[] self, Tensor(b!) found_inf, Tensor inv_scale) */
static tpurt_status_t unscale(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c) {
  int32_t n;
  const tpurt_tensor_t* const* l = tpurt_arg_tensors(c, 0, &n);
  const tpurt_tensor_t *found_inf = tpurt_arg_tensor(c, 1), *inv_scale = tpurt_arg_tensor(c, 2);
  if (!l || !found_inf || !inv_scale || tpurt_tensor_numel(found_inf) != 1 || tpurt_tensor_numel(inv_scale) != 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a tensor list and one-element found_inf and inv_scale", c->name);
  if (found_inf->dtype != TPURT_DTYPE_FLOAT32 || inv_scale->dtype != TPURT_DTYPE_FLOAT32)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: found_inf and inv_scale must be float tensors", c->name);
  int nt = ctx ? tpurt_kernel_num_threads(ctx) : 1;
  bool* bad = ctx ? tpurt_kernel_scratch(ctx, (size_t)nt) : NULL;
  bool one = false;
  if (!bad) {
    bad = &one;
    nt = 1;
    ctx = NULL;
  }
  for (int i = 0; i < nt; ++i) bad[i] = false;
  unscale_job_t j = {.inv_scale = *(const float*)inv_scale->data, .bad = bad};
  for (int32_t t = 0; t < n; ++t) {
    if (!tpurt_dtype_is_floating(l[t]->dtype))
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: expects floating-point tensors", c->name);
    j.t = tpurt_train_view(l[t]);
    int64_t numel = tpurt_tensor_numel(l[t]);
    if (ctx) tpurt_parallel_for(ctx, numel, 16384, unscale_range, &j);
    else unscale_range(&j, 0, numel, 0);
  }
  for (int i = 0; i < nt; ++i)
    if (bad[i]) *(float*)found_inf->data = 1.0f;
  return TPURT_OK;
}

/* _amp_update_scale_(Tensor(a!) self, Tensor(b!) growth_tracker, Tensor found_inf,
 * float growth_factor, float backoff_factor, int growth_interval) -> self */
static tpurt_status_t update_scale(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c) {
  const tpurt_tensor_t *scale = tpurt_arg_tensor(c, 0), *tracker = tpurt_arg_tensor(c, 1),
                       *found_inf = tpurt_arg_tensor(c, 2);
  if (!scale || !tracker || !found_inf || tpurt_tensor_numel(scale) != 1 || tpurt_tensor_numel(tracker) != 1 ||
      tpurt_tensor_numel(found_inf) != 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected one-element scale, growth_tracker and found_inf", c->name);
  if (scale->dtype != TPURT_DTYPE_FLOAT32 || found_inf->dtype != TPURT_DTYPE_FLOAT32 ||
      tracker->dtype != TPURT_DTYPE_INT32)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: scale and found_inf must be float, growth_tracker int32", c->name);
  float* s = scale->data;
  int32_t* g = tracker->data;
  double growth = tpurt_arg_double(c, 3, 2.0), backoff = tpurt_arg_double(c, 4, 0.5);
  int64_t interval = tpurt_arg_int(c, 5, 2000);
  if (*(const float*)found_inf->data) {
    *s = (float)(*s * backoff);
    *g = 0;
  } else {
    int32_t successful = *g + 1;
    if (successful == interval) {
      float grown = (float)(*s * growth);
      if (isfinite(grown)) *s = grown;
      *g = 0;
    } else {
      *g = successful;
    }
  }
  if (c->num_outputs > 0 && c->outputs[0].data != scale->data) *(float*)c->outputs[0].data = *s;
  return TPURT_OK;
}

tpurt_status_t tpurt_train_amp_unscale(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return unscale(x, c); }
tpurt_status_t tpurt_train_amp_unscale_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return unscale(NULL, c); }
tpurt_status_t tpurt_train_amp_update_scale(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return update_scale(x, c); }
tpurt_status_t tpurt_train_amp_update_scale_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return update_scale(NULL, c); }
