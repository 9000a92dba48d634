/* Batch norm over (N, C, *spatial), per channel: native_batch_norm,
 * _native_batch_norm_legit (+ no_stats), _batch_norm_with_update /
 * _batch_norm_no_update, batch_norm_update_stats, and the backward
 * (native_batch_norm_backward, batch_norm_backward). Channels split across
 * threads; a channel is walked one (n, c) row of spatial elements at a time
 * into a double buffer. Running stats are updated in place (training) with
 * the unbiased variance, as PyTorch does. */
#include <string.h>

#include "ops/reduce/reduce_ops.h"

typedef struct bn_view_t {
  const tpurt_tensor_t* t;
  int64_t sN, sC, ss; /* ss: spatial stride when the spatial dims coalesce */
  bool coal;
} bn_view_t;

static void bn_view(bn_view_t* v, const tpurt_tensor_t* t) {
  v->t = t;
  v->sN = t->ndim > 0 ? t->strides[0] : 0;
  v->sC = t->ndim > 1 ? t->strides[1] : 0;
  v->coal = true;
  v->ss = 0;
  int64_t expect = -1;
  for (int d = t->ndim - 1; d >= 2; --d) {
    if (t->sizes[d] == 1) continue;
    if (expect < 0) { v->ss = t->strides[d]; expect = t->strides[d] * t->sizes[d]; continue; }
    if (t->strides[d] != expect) { v->coal = false; break; }
    expect *= t->sizes[d];
  }
}

static int64_t bn_sp_off(const bn_view_t* v, int64_t s) {
  if (v->coal) return s * v->ss;
  int64_t off = 0;
  for (int d = v->t->ndim - 1; d >= 2; --d) {
    off += (s % v->t->sizes[d]) * v->t->strides[d];
    s /= v->t->sizes[d];
  }
  return off;
}

static void bn_load(const bn_view_t* v, int64_t n, int64_t c, int64_t S, double* buf) {
  const char* base = tpurt_tensor_at(v->t, n * v->sN + c * v->sC);
  if (v->coal) { tpurt_row_load_f64(v->t->dtype, base, v->ss, S, buf); return; }
  size_t isz = tpurt_dtype_size(v->t->dtype);
  for (int64_t s = 0; s < S; ++s) buf[s] = tpurt_dtype_load_f64(v->t->dtype, base + bn_sp_off(v, s) * (int64_t)isz);
}

static void bn_store(const bn_view_t* v, int64_t n, int64_t c, int64_t S, const double* buf) {
  char* base = tpurt_tensor_at(v->t, n * v->sN + c * v->sC);
  if (v->coal) { tpurt_row_store_f64(v->t->dtype, base, v->ss, S, buf); return; }
  size_t isz = tpurt_dtype_size(v->t->dtype);
  for (int64_t s = 0; s < S; ++s) tpurt_dtype_store_f64(v->t->dtype, base + bn_sp_off(v, s) * (int64_t)isz, buf[s]);
}

static double vec_get(const tpurt_tensor_t* t, int64_t c, double dflt) {
  if (!t) return dflt;
  return tpurt_dtype_load_f64(t->dtype, tpurt_tensor_at(t, tpurt_tensor_offset_of(t, c, -1)));
}
static void vec_set(const tpurt_tensor_t* t, int64_t c, double v) {
  if (t) tpurt_dtype_store_f64(t->dtype, tpurt_tensor_at(t, tpurt_tensor_offset_of(t, c, -1)), v);
}

typedef struct bn_job_t {
  bool backward, training, normalize;
  int64_t N, C, S;
  double eps, momentum;
  bn_view_t x, dy, out;
  const tpurt_tensor_t *w, *b, *rm, *rv;          /* inputs (rm/rv updated in training) */
  const tpurt_tensor_t *save_mean, *save_invstd;  /* forward: outputs; backward: inputs */
  const tpurt_tensor_t *out_mean, *out_var;       /* batch_norm_update_stats outputs */
  const tpurt_tensor_t *gw, *gb;                  /* backward outputs (NULL if masked) */
  bool want_gi;
  double* buf; /* per thread 2S */
} bn_job_t;

static void bn_channels(void* user, int64_t cb, int64_t ce, int tid) {
  const bn_job_t* j = user;
  double* x = j->buf + (size_t)tid * 2 * (size_t)j->S;
  double* g = x + j->S;
  double cnt = (double)j->N * (double)j->S;
  for (int64_t c = cb; c < ce; ++c) {
    double mean, invstd;
    if (!j->backward) {
      if (j->training) {
        double sum = 0, sq = 0;
        for (int64_t n = 0; n < j->N; ++n) {
          bn_load(&j->x, n, c, j->S, x);
          for (int64_t s = 0; s < j->S; ++s) sum += x[s];
        }
        mean = sum / cnt;
        for (int64_t n = 0; n < j->N; ++n) {
          bn_load(&j->x, n, c, j->S, x);
          for (int64_t s = 0; s < j->S; ++s) { double d = x[s] - mean; sq += d * d; }
        }
        double var = sq / cnt;
        invstd = 1.0 / sqrt(var + j->eps);
        if (j->rm) vec_set(j->rm, c, (1 - j->momentum) * vec_get(j->rm, c, 0) + j->momentum * mean);
        if (j->rv) {
          double unbiased = cnt > 1 ? sq / (cnt - 1) : NAN;
          vec_set(j->rv, c, (1 - j->momentum) * vec_get(j->rv, c, 1) + j->momentum * unbiased);
        }
        vec_set(j->out_mean, c, mean);
        vec_set(j->out_var, c, var);
      } else {
        mean = vec_get(j->rm, c, 0);
        invstd = 1.0 / sqrt(vec_get(j->rv, c, 1) + j->eps);
      }
      vec_set(j->save_mean, c, mean);
      vec_set(j->save_invstd, c, invstd);
      if (!j->normalize) continue;
      double w = vec_get(j->w, c, 1), b = vec_get(j->b, c, 0);
      double scale = invstd * w, shift = b - mean * scale;
      for (int64_t n = 0; n < j->N; ++n) {
        bn_load(&j->x, n, c, j->S, x);
        for (int64_t s = 0; s < j->S; ++s) x[s] = x[s] * scale + shift;
        bn_store(&j->out, n, c, j->S, x);
      }
      continue;
    }
    if (j->training) {
      mean = vec_get(j->save_mean, c, 0);
      invstd = vec_get(j->save_invstd, c, 1);
    } else {
      mean = vec_get(j->rm, c, 0);
      invstd = 1.0 / sqrt(vec_get(j->rv, c, 1) + j->eps);
    }
    double w = vec_get(j->w, c, 1);
    double sdy = 0, sdyx = 0;
    for (int64_t n = 0; n < j->N; ++n) {
      bn_load(&j->x, n, c, j->S, x);
      bn_load(&j->dy, n, c, j->S, g);
      for (int64_t s = 0; s < j->S; ++s) { sdy += g[s]; sdyx += g[s] * (x[s] - mean); }
    }
    vec_set(j->gb, c, sdy);
    vec_set(j->gw, c, sdyx * invstd);
    if (!j->want_gi) continue;
    double k1 = sdy / cnt, k2 = sdyx * invstd * invstd / cnt;
    for (int64_t n = 0; n < j->N; ++n) {
      bn_load(&j->dy, n, c, j->S, g);
      if (j->training) {
        bn_load(&j->x, n, c, j->S, x);
        for (int64_t s = 0; s < j->S; ++s) g[s] = (g[s] - k1 - (x[s] - mean) * k2) * invstd * w;
      } else {
        for (int64_t s = 0; s < j->S; ++s) g[s] = g[s] * invstd * w;
      }
      bn_store(&j->out, n, c, j->S, g);
    }
  }
}

static bool bn_out_ok(const tpurt_op_call_t* c, int i, int64_t numel) {
  return i < c->num_outputs && c->outputs[i].data && tpurt_tensor_numel(&c->outputs[i]) == numel;
}

typedef enum { BN_NATIVE, BN_LEGIT, BN_WITH_UPDATE, BN_NO_UPDATE, BN_UPDATE_STATS, BN_BACKWARD } bn_kind_t;

static tpurt_status_t bn_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, bn_kind_t kind, bool ref) {
  bn_job_t j = {.normalize = true};
  int xi = kind == BN_BACKWARD ? 1 : 0;
  const tpurt_tensor_t* in = tpurt_arg_tensor(c, xi);
  if (!in || in->ndim < 2)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected an input of at least 2 dims (N, C, ...)", c->name);
  if (!tpurt_dtype_is_floating(in->dtype)) return TPURT_REDUCE_UNSUPPORTED(c->name, in->dtype);
  j.N = in->sizes[0];
  j.C = in->sizes[1];
  j.S = 1;
  for (int d = 2; d < in->ndim; ++d) j.S *= in->sizes[d];
  bn_view(&j.x, in);
  switch (kind) {
    case BN_NATIVE: case BN_LEGIT:
      /* (input, w, b, rm, rv, training, momentum, eps) or no_stats (input, w, b, training, momentum, eps) */
      j.w = tpurt_arg_tensor(c, 1);
      j.b = tpurt_arg_tensor(c, 2);
      if (c->num_args >= 8) {
        j.rm = tpurt_arg_tensor(c, 3); j.rv = tpurt_arg_tensor(c, 4);
        j.training = tpurt_arg_bool(c, 5, true);
        j.momentum = tpurt_arg_double(c, 6, 0.1); j.eps = tpurt_arg_double(c, 7, 1e-5);
      } else {
        j.training = tpurt_arg_bool(c, 3, true);
        j.momentum = tpurt_arg_double(c, 4, 0.1); j.eps = tpurt_arg_double(c, 5, 1e-5);
      }
      break;
    case BN_WITH_UPDATE: case BN_NO_UPDATE: /* (input, w, b, rm, rv, momentum, eps) */
      j.w = tpurt_arg_tensor(c, 1); j.b = tpurt_arg_tensor(c, 2);
      j.rm = tpurt_arg_tensor(c, 3); j.rv = tpurt_arg_tensor(c, 4);
      j.momentum = tpurt_arg_double(c, 5, 0.1); j.eps = tpurt_arg_double(c, 6, 1e-5);
      j.training = kind == BN_WITH_UPDATE;
      break;
    case BN_UPDATE_STATS: /* (input, rm?, rv?, momentum) -> (mean, var) */
      j.rm = tpurt_arg_tensor(c, 1); j.rv = tpurt_arg_tensor(c, 2);
      j.momentum = tpurt_arg_double(c, 3, 0.1);
      j.training = true;
      j.normalize = false;
      if (c->num_outputs < 2) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (mean, var) outputs", c->name);
      j.out_mean = &c->outputs[0];
      j.out_var = &c->outputs[1];
      break;
    case BN_BACKWARD: {
      /* (grad_out, input, weight?, rm?, rv?, save_mean?, save_invstd?, train, eps, output_mask[, reserve]) */
      j.backward = true;
      const tpurt_tensor_t* dy = tpurt_arg_tensor(c, 0);
      if (!dy) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing grad_out", c->name);
      bn_view(&j.dy, dy);
      j.w = tpurt_arg_tensor(c, 2);
      j.rm = tpurt_arg_tensor(c, 3); j.rv = tpurt_arg_tensor(c, 4);
      j.save_mean = tpurt_arg_tensor(c, 5); j.save_invstd = tpurt_arg_tensor(c, 6);
      j.training = tpurt_arg_bool(c, 7, true);
      j.eps = tpurt_arg_double(c, 8, 1e-5);
      bool mask[3] = {true, true, true};
      tpurt_arg_bool_mask(c, 9, 3, mask);
      if (j.training && (!j.save_mean || !j.save_invstd))
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: training backward needs save_mean and save_invstd", c->name);
      if (!j.training && (!j.rm || !j.rv))
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: eval backward needs running_mean and running_var", c->name);
      j.want_gi = mask[0] && bn_out_ok(c, 0, tpurt_tensor_numel(in));
      if (j.want_gi) bn_view(&j.out, &c->outputs[0]);
      j.gw = mask[1] && bn_out_ok(c, 1, j.C) ? &c->outputs[1] : NULL;
      j.gb = mask[2] && bn_out_ok(c, 2, j.C) ? &c->outputs[2] : NULL;
      break;
    }
  }
  if (!j.backward && j.normalize) {
    if (c->num_outputs < 3) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected 3 outputs", c->name);
    bn_view(&j.out, &c->outputs[0]);
    j.save_mean = bn_out_ok(c, 1, j.C) ? &c->outputs[1] : NULL;
    j.save_invstd = bn_out_ok(c, 2, j.C) ? &c->outputs[2] : NULL;
    if (!j.training && (!j.rm || !j.rv))
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: eval mode needs running_mean and running_var", c->name);
  }
  if (j.training && !j.backward && j.N * j.S == 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: training needs more than 0 values per channel", c->name);
  if (j.C == 0) return TPURT_OK;
  int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
  j.buf = tpurt_kernel_scratch(ctx, sizeof(double) * 2 * (size_t)(j.S ? j.S : 1) * (size_t)nt);
  if (!j.buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", c->name);
  if (ref) bn_channels(&j, 0, j.C, 0);
  else tpurt_parallel_for(ctx, j.C, 1 + 16384 / (j.N * j.S + 1), bn_channels, &j);
  return TPURT_OK;
}

#define BN_PAIR(name, kind)                                                                   \
  tpurt_status_t tpurt_kernel_##name(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) {      \
    return bn_impl(x, c, kind, false);                                                        \
  }                                                                                           \
  tpurt_status_t tpurt_kernel_##name##_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { \
    return bn_impl(x, c, kind, true);                                                         \
  }
BN_PAIR(native_batch_norm, BN_NATIVE)
BN_PAIR(native_batch_norm_legit, BN_LEGIT)
BN_PAIR(batch_norm_with_update, BN_WITH_UPDATE)
BN_PAIR(batch_norm_no_update, BN_NO_UPDATE)
BN_PAIR(batch_norm_update_stats, BN_UPDATE_STATS)
BN_PAIR(native_batch_norm_backward, BN_BACKWARD)
BN_PAIR(batch_norm_backward, BN_BACKWARD)

/* ---------------- group norm ----------------
 * native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean, rstd)
 * native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask)
 * Work splits over the N*group (sample, group) blocks; each block is D = C/group
 * channels of HxW elements, walked one (n, c) row at a time like batch norm.
 * The backward keeps per-(n, c) sums of dy*x and dy in scratch so the weight
 * and bias gradients are summed over n afterwards, in order. */

typedef struct gn_job_t {
  bool backward, want_gi;
  int64_t N, C, S, G, D;
  double eps;
  bn_view_t x, dy, out;
  const tpurt_tensor_t *w, *b, *mean, *rstd; /* mean/rstd: (N, G) outputs (fwd) or inputs (bwd) */
  double* ds; /* bwd: [N*C] sum dy*x */
  double* db; /* bwd: [N*C] sum dy */
  double* buf; /* per thread 2S */
} gn_job_t;

static void gn_blocks(void* user, int64_t bb, int64_t be, int tid) {
  const gn_job_t* j = user;
  double* x = j->buf + (size_t)tid * 2 * (size_t)j->S;
  double* g = x + j->S;
  double cnt = (double)j->D * (double)j->S;
  for (int64_t blk = bb; blk < be; ++blk) {
    int64_t n = blk / j->G, grp = blk % j->G, c0 = grp * j->D;
    if (!j->backward) {
      double sum = 0, sq = 0;
      for (int64_t c = c0; c < c0 + j->D; ++c) {
        bn_load(&j->x, n, c, j->S, x);
        for (int64_t s = 0; s < j->S; ++s) sum += x[s];
      }
      double mean = cnt > 0 ? sum / cnt : 0; /* an empty group: PyTorch's mean 0, rstd NaN */
      for (int64_t c = c0; c < c0 + j->D; ++c) {
        bn_load(&j->x, n, c, j->S, x);
        for (int64_t s = 0; s < j->S; ++s) { double d = x[s] - mean; sq += d * d; }
      }
      double rstd = 1.0 / sqrt(sq / cnt + j->eps);
      vec_set(j->mean, blk, mean);
      vec_set(j->rstd, blk, rstd);
      for (int64_t c = c0; c < c0 + j->D; ++c) {
        double scale = rstd * vec_get(j->w, c, 1), shift = vec_get(j->b, c, 0) - mean * scale;
        bn_load(&j->x, n, c, j->S, x);
        for (int64_t s = 0; s < j->S; ++s) x[s] = x[s] * scale + shift;
        bn_store(&j->out, n, c, j->S, x);
      }
      continue;
    }
    double mean = vec_get(j->mean, blk, 0), rstd = vec_get(j->rstd, blk, 1);
    double s1 = 0, s2 = 0; /* sum_c ds*w, sum_c db*w */
    for (int64_t c = c0; c < c0 + j->D; ++c) {
      bn_load(&j->x, n, c, j->S, x);
      bn_load(&j->dy, n, c, j->S, g);
      double a = 0, b = 0;
      for (int64_t s = 0; s < j->S; ++s) { a += g[s] * x[s]; b += g[s]; }
      j->ds[n * j->C + c] = a;
      j->db[n * j->C + c] = b;
      double w = vec_get(j->w, c, 1);
      s1 += a * w;
      s2 += b * w;
    }
    if (!j->want_gi) continue;
    double c2 = (s2 * mean - s1) * rstd * rstd * rstd / cnt;
    double c3 = -c2 * mean - s2 * rstd / cnt;
    for (int64_t c = c0; c < c0 + j->D; ++c) {
      double c1 = rstd * vec_get(j->w, c, 1);
      bn_load(&j->x, n, c, j->S, x);
      bn_load(&j->dy, n, c, j->S, g);
      for (int64_t s = 0; s < j->S; ++s) g[s] = c1 * g[s] + c2 * x[s] + c3;
      bn_store(&j->out, n, c, j->S, g);
    }
  }
}

static tpurt_status_t gn_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, bool backward, bool ref) {
  gn_job_t j = {.backward = backward};
  const tpurt_tensor_t* in = tpurt_arg_tensor(c, backward ? 1 : 0);
  if (!in || in->ndim < 2) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected an input of at least 2 dims", c->name);
  if (!tpurt_dtype_is_floating(in->dtype)) return TPURT_REDUCE_UNSUPPORTED(c->name, in->dtype);
  int a = backward ? 5 : 3; /* index of N */
  j.N = tpurt_arg_int(c, a, in->sizes[0]);
  j.C = tpurt_arg_int(c, a + 1, in->sizes[1]);
  j.S = tpurt_arg_int(c, a + 2, 1);
  j.G = tpurt_arg_int(c, a + 3, 1);
  if (j.G <= 0 || j.C % j.G != 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: %lld channels do not split into %lld groups", c->name, (long long)j.C, (long long)j.G);
  if (j.N != in->sizes[0] || j.C != in->sizes[1] || j.N * j.C * j.S != tpurt_tensor_numel(in))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: N=%lld C=%lld HxW=%lld do not match the input", c->name, (long long)j.N,
                        (long long)j.C, (long long)j.S);
  j.D = j.C / j.G;
  bn_view(&j.x, in);
  bool mask[3] = {true, true, true};
  if (!backward) {
    j.w = tpurt_arg_tensor(c, 1);
    j.b = tpurt_arg_tensor(c, 2);
    j.eps = tpurt_arg_double(c, 7, 1e-5);
    if (c->num_outputs < 3) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected 3 outputs", c->name);
    bn_view(&j.out, &c->outputs[0]);
    j.mean = &c->outputs[1];
    j.rstd = &c->outputs[2];
  } else {
    const tpurt_tensor_t* dy = tpurt_arg_tensor(c, 0);
    j.mean = tpurt_arg_tensor(c, 2);
    j.rstd = tpurt_arg_tensor(c, 3);
    j.w = tpurt_arg_tensor(c, 4);
    if (!dy || !j.mean || !j.rstd) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing grad_out/mean/rstd", c->name);
    bn_view(&j.dy, dy);
    tpurt_arg_bool_mask(c, 9, 3, mask);
    j.want_gi = mask[0] && bn_out_ok(c, 0, tpurt_tensor_numel(in));
    if (j.want_gi) bn_view(&j.out, &c->outputs[0]);
  }
  if (j.N * j.C == 0) {
    for (int i = 1; backward && i <= 2; ++i)
      if (mask[i] && bn_out_ok(c, i, j.C))
        for (int64_t ch = 0; ch < j.C; ++ch) vec_set(&c->outputs[i], ch, 0);
    return TPURT_OK;
  }
  int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
  size_t doubles = 2 * (size_t)(j.S ? j.S : 1) * (size_t)nt + (backward ? 2 * (size_t)(j.N * j.C) : 0);
  j.buf = tpurt_kernel_scratch(ctx, sizeof(double) * doubles);
  if (!j.buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", c->name);
  if (backward) {
    j.ds = j.buf + 2 * (size_t)(j.S ? j.S : 1) * (size_t)nt;
    j.db = j.ds + j.N * j.C;
  }
  if (ref) gn_blocks(&j, 0, j.N * j.G, 0);
  else tpurt_parallel_for(ctx, j.N * j.G, 1 + 16384 / (j.D * j.S + 1), gn_blocks, &j);
  if (backward) {
    const tpurt_tensor_t* gw = mask[1] && bn_out_ok(c, 1, j.C) ? &c->outputs[1] : NULL;
    const tpurt_tensor_t* gb = mask[2] && bn_out_ok(c, 2, j.C) ? &c->outputs[2] : NULL;
    for (int64_t ch = 0; ch < j.C; ++ch) {
      double sw = 0, sb = 0;
      for (int64_t n = 0; n < j.N; ++n) {
        int64_t blk = n * j.G + ch / j.D;
        double mean = vec_get(j.mean, blk, 0), rstd = vec_get(j.rstd, blk, 1);
        sw += (j.ds[n * j.C + ch] - j.db[n * j.C + ch] * mean) * rstd;
        sb += j.db[n * j.C + ch];
      }
      vec_set(gw, ch, sw);
      vec_set(gb, ch, sb);
    }
  }
  return TPURT_OK;
}

tpurt_status_t tpurt_kernel_native_group_norm(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return gn_impl(x, c, false, false); }
tpurt_status_t tpurt_kernel_native_group_norm_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return gn_impl(x, c, false, true); }
tpurt_status_t tpurt_kernel_native_group_norm_backward(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return gn_impl(x, c, true, false); }
tpurt_status_t tpurt_kernel_native_group_norm_backward_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) { return gn_impl(x, c, true, true); }
