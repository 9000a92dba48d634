/* torchvision::roi_align and _roi_align_backward, as torchvision's CPU kernels
 * compute them (same arithmetic in the input's dtype: float32, float64, and
 * float16 rounded after every operation as c10::Half is; same order of sums), so
 * results equal CPU's bit for bit: each output bin averages roi_bin_grid_h x
 * roi_bin_grid_w bilinear samples (sampling_ratio > 0, else ceil(roi size /
 * pooled size)); `aligned` shifts the box by half a pixel and drops the
 * minimum size of 1. A sample outside [-1, size] contributes 0 (times the
 * input's first element, as the CPU kernel's precomputed zero weights do).
 *
 * forward args: input [N, C, H, W], rois [K, 5], spatial_scale, pooled_height,
 * pooled_width, sampling_ratio, aligned; output [K, C, PH, PW].
 * backward args: grad [K, C, PH, PW], rois, spatial_scale, pooled_height,
 * pooled_width, batch_size, channels, height, width, sampling_ratio, aligned;
 * output grad_input [N, C, H, W] (written whole: zeros, then the sums). */
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "ops/args.h"

tpurt_status_t tpurt_vision_roi_align(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);
tpurt_status_t tpurt_vision_roi_align_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);

typedef struct ra_job_t {
  const void* data;  /* input (forward) or grad (backward) */
  const void* rois;
  void* out;
  int64_t num_rois, channels, height, width, batch;
  int64_t ph, pw;
  int64_t sampling_ratio;
  double spatial_scale;
  bool aligned;
  atomic_int bad_batch;    /* set when a roi names a batch index out of range, or its box is NaN/inf/huge */
} ra_job_t;

/* One implementation for three dtypes. T is the type computed in, S the stored one; RD(x) rounds a
 * result to the dtype, LD/ST load and store an element. float32 and float64 compute in their own
 * type (RD, LD and ST do nothing). float16 follows c10::Half, which the CPU kernel computes in:
 * every operation is done in float and its result rounded to half, so RD wraps each one. */
#define RA_IMPL(T, S, SUFFIX, RD, LD, ST)                                                             \
  typedef struct ra_box_##SUFFIX {                                                                     \
    int64_t b;                                                                                         \
    T start_h, start_w, bin_h, bin_w;                                                                  \
    int grid_h, grid_w;                                                                                \
  } ra_box_##SUFFIX;                                                                                   \
  /* The box of roi n in input pixels, the bin sizes and the sampling grid. */                        \
  static bool ra_box_get_##SUFFIX(const ra_job_t* j, int64_t n, ra_box_##SUFFIX* o) {                  \
    const S* r = (const S*)j->rois + n * 5;                                                            \
    const T scale = RD((T)j->spatial_scale);                                                           \
    const T offset = j->aligned ? (T)0.5 : (T)0.0;                                                     \
    const T r0 = LD(r[0]);                                                                             \
    if (!(r0 > -1 && r0 < (T)j->batch)) return false; /* NaN too; checked before the cast */          \
    o->b = (int64_t)(int)r0;                                                                           \
    T start_w = RD(RD(LD(r[1]) * scale) - offset), start_h = RD(RD(LD(r[2]) * scale) - offset);        \
    T end_w = RD(RD(LD(r[3]) * scale) - offset), end_h = RD(RD(LD(r[4]) * scale) - offset);            \
    T roi_w = RD(end_w - start_w), roi_h = RD(end_h - start_h);                                        \
    if (!j->aligned) {                                                                                 \
      roi_w = roi_w < (T)1. ? (T)1. : roi_w; /* std::max(roi_w, 1): NaN stays */                       \
      roi_h = roi_h < (T)1. ? (T)1. : roi_h;                                                           \
    }                                                                                                  \
    o->start_h = start_h;                                                                              \
    o->start_w = start_w;                                                                              \
    o->bin_h = RD(roi_h / RD((T)j->ph));                                                               \
    o->bin_w = RD(roi_w / RD((T)j->pw));                                                               \
    const double gh = j->sampling_ratio > 0 ? (double)j->sampling_ratio : ceil(RD(roi_h / RD((T)j->ph))); \
    const double gw = j->sampling_ratio > 0 ? (double)j->sampling_ratio : ceil(RD(roi_w / RD((T)j->pw))); \
    /* a NaN or infinite box, or one needing more samples than an int counts: refused */              \
    if (!(gh >= 0 && gh <= INT_MAX && gw >= 0 && gw <= INT_MAX && gh * gw <= INT_MAX)) return false;   \
    o->grid_h = (int)gh;                                                                               \
    o->grid_w = (int)gw;                                                                               \
    return true;                                                                                       \
  }                                                                                                    \
  /* One bilinear sample: weights and the four offsets, or false (all 0) outside. */                  \
  static bool ra_sample_##SUFFIX(int64_t height, int64_t width, T y, T x, T w[4], int64_t pos[4]) {   \
    if (!(y >= -1.0 && y <= (T)height && x >= -1.0 && x <= (T)width)) { /* NaN: outside too */        \
      w[0] = w[1] = w[2] = w[3] = 0;                                                                   \
      pos[0] = pos[1] = pos[2] = pos[3] = 0;                                                           \
      return false;                                                                                    \
    }                                                                                                  \
    if (y <= 0) y = 0;                                                                                 \
    if (x <= 0) x = 0;                                                                                 \
    int64_t y_low = (int)y, x_low = (int)x, y_high, x_high;                                            \
    if (y_low >= height - 1) {                                                                         \
      y_high = y_low = height - 1;                                                                     \
      y = RD((T)y_low);                                                                                \
    } else {                                                                                           \
      y_high = y_low + 1;                                                                              \
    }                                                                                                  \
    if (x_low >= width - 1) {                                                                          \
      x_high = x_low = width - 1;                                                                      \
      x = RD((T)x_low);                                                                                \
    } else {                                                                                           \
      x_high = x_low + 1;                                                                              \
    }                                                                                                  \
    const T ly = RD(y - RD((T)y_low)), lx = RD(x - RD((T)x_low));                                      \
    const T hy = RD((T)(1. - ly)), hx = RD((T)(1. - lx));                                              \
    w[0] = RD(hy * hx);                                                                                \
    w[1] = RD(hy * lx);                                                                                \
    w[2] = RD(ly * hx);                                                                                \
    w[3] = RD(ly * lx);                                                                                \
    pos[0] = y_low * width + x_low;                                                                    \
    pos[1] = y_low * width + x_high;                                                                   \
    pos[2] = y_high * width + x_low;                                                                   \
    pos[3] = y_high * width + x_high;                                                                  \
    return true;                                                                                       \
  }                                                                                                    \
  static inline T ra_y_##SUFFIX(const ra_box_##SUFFIX* bx, int64_t ph, int iy) {                      \
    return RD(RD(bx->start_h + RD(RD((T)ph) * bx->bin_h)) +                                            \
              RD(RD(RD((T)((float)iy + .5f)) * bx->bin_h) / RD((T)bx->grid_h)));                       \
  }                                                                                                    \
  static inline T ra_x_##SUFFIX(const ra_box_##SUFFIX* bx, int64_t pw, int ix) {                      \
    return RD(RD(bx->start_w + RD(RD((T)pw) * bx->bin_w)) +                                            \
              RD(RD(RD((T)((float)ix + .5f)) * bx->bin_w) / RD((T)bx->grid_w)));                       \
  }                                                                                                    \
  /* forward: rois [begin, end); each output bin sums its samples in the CPU kernel's order, all      \
   * channels of one sample at a time (the output holds the running sums). */                         \
  static void ra_fwd_##SUFFIX(void* user, int64_t begin, int64_t end, int tid) {                      \
    ra_job_t* j = user;                                                                                \
    const S* in = j->data;                                                                             \
    S* out = j->out;                                                                                   \
    const int64_t C = j->channels, HW = j->height * j->width, PHW = j->ph * j->pw;                     \
    for (int64_t n = begin; n < end; ++n) {                                                            \
      ra_box_##SUFFIX bx;                                                                              \
      if (!ra_box_get_##SUFFIX(j, n, &bx)) {                                                           \
        j->bad_batch = 1;                                                                              \
        continue;                                                                                      \
      }                                                                                                \
      const T count = RD((T)(bx.grid_h * bx.grid_w > 1 ? bx.grid_h * bx.grid_w : 1));                  \
      const S* in_b = in + bx.b * C * HW;                                                              \
      S* out_n = out + n * C * PHW;                                                                    \
      for (int64_t ph = 0; ph < j->ph; ++ph) {                                                         \
        for (int64_t pw = 0; pw < j->pw; ++pw) {                                                       \
          S* o = out_n + ph * j->pw + pw;                                                              \
          for (int64_t c = 0; c < C; ++c) o[c * PHW] = ST((T)0);                                       \
          for (int iy = 0; iy < bx.grid_h; ++iy) {                                                     \
            const T y = ra_y_##SUFFIX(&bx, ph, iy);                                                    \
            for (int ix = 0; ix < bx.grid_w; ++ix) {                                                   \
              T w[4];                                                                                  \
              int64_t pos[4];                                                                          \
              ra_sample_##SUFFIX(j->height, j->width, y, ra_x_##SUFFIX(&bx, pw, ix), w, pos);          \
              for (int64_t c = 0; c < C; ++c) {                                                        \
                const S* ic = in_b + c * HW;                                                           \
                const T v = RD(RD(RD(RD(w[0] * LD(ic[pos[0]])) + RD(w[1] * LD(ic[pos[1]]))) +          \
                                  RD(w[2] * LD(ic[pos[2]]))) + RD(w[3] * LD(ic[pos[3]])));             \
                o[c * PHW] = ST(RD(LD(o[c * PHW]) + v));                                               \
              }                                                                                        \
            }                                                                                          \
          }                                                                                            \
          for (int64_t c = 0; c < C; ++c) o[c * PHW] = ST(RD(LD(o[c * PHW]) / count));                 \
        }                                                                                              \
      }                                                                                                \
    }                                                                                                  \
  }                                                                                                    \
  /* backward: channels [begin, end) of grad_input, every roi in order (CPU's order of adds). */      \
  static void ra_bwd_##SUFFIX(void* user, int64_t begin, int64_t end, int tid) {                      \
    ra_job_t* j = user;                                                                                \
    const S* g = j->data;                                                                              \
    S* gi = j->out;                                                                                    \
    const int64_t C = j->channels, HW = j->height * j->width, PHW = j->ph * j->pw;                     \
    for (int64_t b = 0; b < j->batch; ++b)                                                             \
      memset(gi + (b * C + begin) * HW, 0, (size_t)((end - begin) * HW) * sizeof(S));                  \
    for (int64_t n = 0; n < j->num_rois; ++n) {                                                        \
      ra_box_##SUFFIX bx;                                                                              \
      if (!ra_box_get_##SUFFIX(j, n, &bx)) {                                                           \
        j->bad_batch = 1;                                                                              \
        continue;                                                                                      \
      }                                                                                                \
      const T count = RD((T)(bx.grid_h * bx.grid_w));                                                  \
      for (int64_t c = begin; c < end; ++c) {                                                          \
        S* gic = gi + (bx.b * C + c) * HW;                                                             \
        const S* gc = g + (n * C + c) * PHW;                                                           \
        for (int64_t ph = 0; ph < j->ph; ++ph) {                                                       \
          for (int64_t pw = 0; pw < j->pw; ++pw) {                                                     \
            const T go = LD(gc[ph * j->pw + pw]);                                                      \
            for (int iy = 0; iy < bx.grid_h; ++iy) {                                                   \
              const T y = ra_y_##SUFFIX(&bx, ph, iy);                                                  \
              for (int ix = 0; ix < bx.grid_w; ++ix) {                                                 \
                T w[4];                                                                                \
                int64_t pos[4];                                                                        \
                if (!ra_sample_##SUFFIX(j->height, j->width, y, ra_x_##SUFFIX(&bx, pw, ix), w, pos)) continue; \
                for (int k = 0; k < 4; ++k)                                                            \
                  gic[pos[k]] = ST(RD(LD(gic[pos[k]]) + RD(RD(go * w[k]) / count)));                   \
              }                                                                                        \
            }                                                                                          \
          }                                                                                            \
        }                                                                                              \
      }                                                                                                \
    }                                                                                                  \
  }

#define RA_SAME(x) (x)
static inline float ra_round_f16(float x) { return tpurt_f16_to_f32(tpurt_f32_to_f16(x)); }
RA_IMPL(float, float, f32, RA_SAME, RA_SAME, RA_SAME)
RA_IMPL(double, double, f64, RA_SAME, RA_SAME, RA_SAME)
RA_IMPL(float, tpurt_f16_t, f16, ra_round_f16, tpurt_f16_to_f32, tpurt_f32_to_f16)

static bool ra_contig(const tpurt_tensor_t* t, int ndim) {
  return t && t->ndim == ndim && tpurt_tensor_is_contiguous(t);
}

tpurt_status_t tpurt_vision_roi_align(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* in = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* rois = tpurt_arg_tensor(call, 1);
  if (!ra_contig(in, 4) || !ra_contig(rois, 2) || rois->sizes[1] != 5 || call->num_outputs != 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "roi_align: expected contiguous input [N, C, H, W] and rois [K, 5]");
  const tpurt_tensor_t* out = &call->outputs[0];
  ra_job_t j = {.data = in->data, .rois = rois->data, .out = out->data, .num_rois = rois->sizes[0],
                .channels = in->sizes[1], .height = in->sizes[2], .width = in->sizes[3], .batch = in->sizes[0],
                .ph = tpurt_arg_int(call, 3, 0), .pw = tpurt_arg_int(call, 4, 0),
                .sampling_ratio = tpurt_arg_int(call, 5, 0), .spatial_scale = tpurt_arg_double(call, 2, 1.0),
                .aligned = tpurt_arg_bool(call, 6, false)};
  if (rois->dtype != in->dtype || out->dtype != in->dtype || !ra_contig(out, 4) || out->sizes[0] != j.num_rois ||
      out->sizes[1] != j.channels || out->sizes[2] != j.ph || out->sizes[3] != j.pw)
    return TPURT_STATUS(INVALID_ARGUMENT, "roi_align: output or rois do not match the input");
  if (j.num_rois == 0 || j.channels == 0 || j.ph == 0 || j.pw == 0) return TPURT_STATUS_OK;
  if (in->dtype == TPURT_DTYPE_FLOAT32)
    tpurt_parallel_for(ctx, j.num_rois, 1, ra_fwd_f32, &j);
  else if (in->dtype == TPURT_DTYPE_FLOAT64)
    tpurt_parallel_for(ctx, j.num_rois, 1, ra_fwd_f64, &j);
  else if (in->dtype == TPURT_DTYPE_FLOAT16)
    tpurt_parallel_for(ctx, j.num_rois, 1, ra_fwd_f16, &j);
  else
    return TPURT_STATUS(UNIMPLEMENTED, "roi_align: dtype %s is not supported", tpurt_dtype_name(in->dtype));
  if (j.bad_batch)
    return TPURT_STATUS(OUT_OF_RANGE, "roi_align: a roi's batch index (rois[:, 0]) is outside [0, %lld), or its box is NaN, infinite or too large",
                        (long long)j.batch);
  return TPURT_STATUS_OK;
}

tpurt_status_t tpurt_vision_roi_align_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* g = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* rois = tpurt_arg_tensor(call, 1);
  if (!ra_contig(g, 4) || !ra_contig(rois, 2) || rois->sizes[1] != 5 || call->num_outputs != 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "_roi_align_backward: expected contiguous grad [K, C, PH, PW] and rois [K, 5]");
  const tpurt_tensor_t* out = &call->outputs[0];
  ra_job_t j = {.data = g->data, .rois = rois->data, .out = out->data, .num_rois = rois->sizes[0],
                .ph = tpurt_arg_int(call, 3, 0), .pw = tpurt_arg_int(call, 4, 0),
                .batch = tpurt_arg_int(call, 5, 0), .channels = tpurt_arg_int(call, 6, 0),
                .height = tpurt_arg_int(call, 7, 0), .width = tpurt_arg_int(call, 8, 0),
                .sampling_ratio = tpurt_arg_int(call, 9, 0), .spatial_scale = tpurt_arg_double(call, 2, 1.0),
                .aligned = tpurt_arg_bool(call, 10, false)};
  if (rois->dtype != g->dtype || out->dtype != g->dtype || !ra_contig(out, 4) || out->sizes[0] != j.batch ||
      out->sizes[1] != j.channels || out->sizes[2] != j.height || out->sizes[3] != j.width ||
      g->sizes[0] != j.num_rois || g->sizes[1] != j.channels || g->sizes[2] != j.ph || g->sizes[3] != j.pw)
    return TPURT_STATUS(INVALID_ARGUMENT, "_roi_align_backward: grad, rois and the sizes given do not match");
  if (tpurt_tensor_numel(out) == 0) return TPURT_STATUS_OK;
  if (g->dtype == TPURT_DTYPE_FLOAT32)
    tpurt_parallel_for(ctx, j.channels, 1, ra_bwd_f32, &j);
  else if (g->dtype == TPURT_DTYPE_FLOAT64)
    tpurt_parallel_for(ctx, j.channels, 1, ra_bwd_f64, &j);
  else if (g->dtype == TPURT_DTYPE_FLOAT16)
    tpurt_parallel_for(ctx, j.channels, 1, ra_bwd_f16, &j);
  else
    return TPURT_STATUS(UNIMPLEMENTED, "_roi_align_backward: dtype %s is not supported", tpurt_dtype_name(g->dtype));
  if (j.bad_batch)
    return TPURT_STATUS(OUT_OF_RANGE, "_roi_align_backward: a roi's batch index (rois[:, 0]) is outside [0, %lld), or its box is NaN, infinite or too large",
                        (long long)j.batch);
  return TPURT_STATUS_OK;
}
