/* torchvision::roi_pool and _roi_pool_backward, as torchvision's CPU kernels
 * compute them: each roi's box is rounded to whole pixels (at least 1 x 1),
 * split into pooled_height x pooled_width bins (floor/ceil edges, clipped to
 * the image); a bin's output is its largest element (the first, scanning rows
 * then columns, strictly greater than -FLT_MAX, so NaN never wins) and argmax
 * its offset h * W + w within the channel (-1 and output 0 for an empty bin).
 * The backward adds each bin's gradient at its argmax.
 *
 * forward args: input [N, C, H, W], rois [K, 5], spatial_scale, pooled_height,
 * pooled_width; outputs: output [K, C, PH, PW], argmax int32 [K, C, PH, PW].
 * backward args: grad [K, C, PH, PW], rois, argmax, spatial_scale,
 * pooled_height, pooled_width, batch_size, channels, height, width; output
 * grad_input [N, C, H, W] (written whole). */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "ops/args.h"

tpurt_status_t tpurt_vision_roi_pool(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);
tpurt_status_t tpurt_vision_roi_pool_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);

typedef struct rp_job_t {
  const void* data; /* input (forward) or grad (backward) */
  const void* rois;
  const int32_t* argmax_in;
  void* out;
  int32_t* argmax_out;
  int64_t num_rois, channels, height, width, batch, ph, pw;
  double spatial_scale;
  atomic_int bad; /* a roi's batch index, or an argmax, out of range */
} rp_job_t;

static int64_t rp_clip(int64_t v, int64_t hi) { return v < 0 ? 0 : (v > hi ? hi : v); }

#define RP_IMPL(T, SUFFIX)                                                                            \
  static bool rp_batch_##SUFFIX(const rp_job_t* j, int64_t n, int64_t* b) {                           \
    const T r0 = ((const T*)j->rois)[n * 5];                                                           \
    if (!(r0 > -1 && r0 < (T)j->batch)) return false;                                                  \
    *b = (int64_t)(int)r0;                                                                             \
    return true;                                                                                       \
  }                                                                                                    \
  static void rp_fwd_##SUFFIX(void* user, int64_t begin, int64_t end, int tid) {                      \
    rp_job_t* j = user;                                                                                \
    const T* in = j->data;                                                                             \
    T* out = j->out;                                                                                   \
    const int64_t C = j->channels, H = j->height, W = j->width, PHW = j->ph * j->pw;                   \
    const T scale = (T)j->spatial_scale;                                                               \
    for (int64_t n = begin; n < end; ++n) {                                                            \
      const T* r = (const T*)j->rois + n * 5;                                                          \
      int64_t b;                                                                                       \
      if (!rp_batch_##SUFFIX(j, n, &b)) {                                                              \
        j->bad = 1;                                                                                    \
        continue;                                                                                      \
      }                                                                                                \
      const double rw1 = round(r[1] * scale), rh1 = round(r[2] * scale);                               \
      const double rw2 = round(r[3] * scale), rh2 = round(r[4] * scale);                               \
      if (!(fabs(rw1) <= 1 << 28 && fabs(rh1) <= 1 << 28 && fabs(rw2) <= 1 << 28 && fabs(rh2) <= 1 << 28)) { \
        j->bad = 1; /* a NaN, infinite or huge box (an int on CPU, where it is undefined) */           \
        continue;                                                                                      \
      }                                                                                                \
      const int start_w = (int)rw1, start_h = (int)rh1, end_w = (int)rw2, end_h = (int)rh2;            \
      const int roi_w = end_w - start_w + 1 > 1 ? end_w - start_w + 1 : 1;                             \
      const int roi_h = end_h - start_h + 1 > 1 ? end_h - start_h + 1 : 1;                             \
      const T bin_h = (T)roi_h / (T)j->ph, bin_w = (T)roi_w / (T)j->pw;                                \
      for (int64_t ph = 0; ph < j->ph; ++ph) {                                                         \
        for (int64_t pw = 0; pw < j->pw; ++pw) {                                                       \
          int64_t hs = (int)floor((T)ph * bin_h), ws = (int)floor((T)pw * bin_w);                      \
          int64_t he = (int)ceil((T)(ph + 1) * bin_h), we = (int)ceil((T)(pw + 1) * bin_w);            \
          hs = rp_clip(hs + start_h, H);                                                               \
          he = rp_clip(he + start_h, H);                                                               \
          ws = rp_clip(ws + start_w, W);                                                               \
          we = rp_clip(we + start_w, W);                                                               \
          const bool empty = he <= hs || we <= ws;                                                     \
          for (int64_t c = 0; c < C; ++c) {                                                            \
            const T* ic = in + (b * C + c) * H * W;                                                    \
            const int64_t o = (n * C + c) * PHW + ph * j->pw + pw;                                     \
            T best = empty ? (T)0 : (T)-FLT_MAX;                                                       \
            int32_t arg = -1;                                                                          \
            for (int64_t h = hs; h < he; ++h)                                                          \
              for (int64_t w = ws; w < we; ++w)                                                        \
                if (ic[h * W + w] > best) {                                                            \
                  best = ic[h * W + w];                                                                \
                  arg = (int32_t)(h * W + w);                                                          \
                }                                                                                      \
            out[o] = best;                                                                             \
            j->argmax_out[o] = arg;                                                                    \
          }                                                                                            \
        }                                                                                              \
      }                                                                                                \
    }                                                                                                  \
  }                                                                                                    \
  /* backward: channels [begin, end) of grad_input, every roi in order (CPU's order of adds). */      \
  static void rp_bwd_##SUFFIX(void* user, int64_t begin, int64_t end, int tid) {                      \
    rp_job_t* j = user;                                                                                \
    const T* g = j->data;                                                                              \
    T* gi = j->out;                                                                                    \
    const int64_t C = j->channels, HW = j->height * j->width, PHW = j->ph * j->pw;                     \
    for (int64_t b = 0; b < j->batch; ++b)                                                             \
      memset(gi + (b * C + begin) * HW, 0, (size_t)((end - begin) * HW) * sizeof(T));                  \
    for (int64_t n = 0; n < j->num_rois; ++n) {                                                        \
      int64_t b;                                                                                       \
      if (!rp_batch_##SUFFIX(j, n, &b)) {                                                              \
        j->bad = 1;                                                                                    \
        continue;                                                                                      \
      }                                                                                                \
      for (int64_t c = begin; c < end; ++c) {                                                          \
        T* gic = gi + (b * C + c) * HW;                                                                \
        const T* gc = g + (n * C + c) * PHW;                                                           \
        const int32_t* am = j->argmax_in + (n * C + c) * PHW;                                          \
        for (int64_t k = 0; k < PHW; ++k) {                                                            \
          if (am[k] == -1) continue;                                                                   \
          if (am[k] < 0 || am[k] >= HW) {                                                              \
            j->bad = 1;                                                                                \
            continue;                                                                                  \
          }                                                                                            \
          gic[am[k]] += gc[k];                                                                         \
        }                                                                                              \
      }                                                                                                \
    }                                                                                                  \
  }

RP_IMPL(float, f32)
RP_IMPL(double, f64)

static bool rp_contig(const tpurt_tensor_t* t, int ndim) {
  return t && t->ndim == ndim && tpurt_tensor_is_contiguous(t);
}

tpurt_status_t tpurt_vision_roi_pool(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* in = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* rois = tpurt_arg_tensor(call, 1);
  if (!rp_contig(in, 4) || !rp_contig(rois, 2) || rois->sizes[1] != 5 || call->num_outputs != 2)
    return TPURT_STATUS(INVALID_ARGUMENT, "roi_pool: expected contiguous input [N, C, H, W] and rois [K, 5]");
  const tpurt_tensor_t* out = &call->outputs[0];
  const tpurt_tensor_t* am = &call->outputs[1];
  rp_job_t j = {.data = in->data, .rois = rois->data, .out = out->data, .argmax_out = am->data,
                .num_rois = rois->sizes[0], .channels = in->sizes[1], .height = in->sizes[2],
                .width = in->sizes[3], .batch = in->sizes[0], .ph = tpurt_arg_int(call, 3, 0),
                .pw = tpurt_arg_int(call, 4, 0), .spatial_scale = tpurt_arg_double(call, 2, 1.0)};
  if (rois->dtype != in->dtype || out->dtype != in->dtype || am->dtype != TPURT_DTYPE_INT32 ||
      !rp_contig(out, 4) || !rp_contig(am, 4) || out->sizes[0] != j.num_rois || out->sizes[1] != j.channels ||
      out->sizes[2] != j.ph || out->sizes[3] != j.pw || !tpurt_tensor_same_shape(out, am))
    return TPURT_STATUS(INVALID_ARGUMENT, "roi_pool: outputs or rois do not match the input");
  if (tpurt_tensor_numel(out) == 0) return TPURT_STATUS_OK;
  if (in->dtype == TPURT_DTYPE_FLOAT32)
    tpurt_parallel_for(ctx, j.num_rois, 1, rp_fwd_f32, &j);
  else if (in->dtype == TPURT_DTYPE_FLOAT64)
    tpurt_parallel_for(ctx, j.num_rois, 1, rp_fwd_f64, &j);
  else
    return TPURT_STATUS(UNIMPLEMENTED, "roi_pool: dtype %s is not supported", tpurt_dtype_name(in->dtype));
  if (j.bad)
    return TPURT_STATUS(OUT_OF_RANGE, "roi_pool: a roi's batch index (rois[:, 0]) is outside [0, %lld), or its box is NaN, infinite or too large",
                        (long long)j.batch);
  return TPURT_STATUS_OK;
}

tpurt_status_t tpurt_vision_roi_pool_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* g = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* rois = tpurt_arg_tensor(call, 1);
  const tpurt_tensor_t* am = tpurt_arg_tensor(call, 2);
  if (!rp_contig(g, 4) || !rp_contig(rois, 2) || !rp_contig(am, 4) || rois->sizes[1] != 5 ||
      call->num_outputs != 1 || am->dtype != TPURT_DTYPE_INT32 || !tpurt_tensor_same_shape(g, am))
    return TPURT_STATUS(INVALID_ARGUMENT,
                        "_roi_pool_backward: expected contiguous grad [K, C, PH, PW], rois [K, 5] and int32 argmax");
  const tpurt_tensor_t* out = &call->outputs[0];
  rp_job_t j = {.data = g->data, .rois = rois->data, .argmax_in = am->data, .out = out->data,
                .num_rois = rois->sizes[0], .spatial_scale = tpurt_arg_double(call, 3, 1.0),
                .ph = tpurt_arg_int(call, 4, 0), .pw = tpurt_arg_int(call, 5, 0), .batch = tpurt_arg_int(call, 6, 0),
                .channels = tpurt_arg_int(call, 7, 0), .height = tpurt_arg_int(call, 8, 0),
                .width = tpurt_arg_int(call, 9, 0)};
  if (rois->dtype != g->dtype || out->dtype != g->dtype || !rp_contig(out, 4) || out->sizes[0] != j.batch ||
      out->sizes[1] != j.channels || out->sizes[2] != j.height || out->sizes[3] != j.width ||
      g->sizes[0] != j.num_rois || g->sizes[1] != j.channels || g->sizes[2] != j.ph || g->sizes[3] != j.pw)
    return TPURT_STATUS(INVALID_ARGUMENT, "_roi_pool_backward: grad, rois and the sizes given do not match");
  if (tpurt_tensor_numel(out) == 0) return TPURT_STATUS_OK;
  if (g->dtype == TPURT_DTYPE_FLOAT32)
    tpurt_parallel_for(ctx, j.channels, 1, rp_bwd_f32, &j);
  else if (g->dtype == TPURT_DTYPE_FLOAT64)
    tpurt_parallel_for(ctx, j.channels, 1, rp_bwd_f64, &j);
  else
    return TPURT_STATUS(UNIMPLEMENTED, "_roi_pool_backward: dtype %s is not supported", tpurt_dtype_name(g->dtype));
  if (j.bad)
    return TPURT_STATUS(OUT_OF_RANGE,
                        "_roi_pool_backward: a roi's batch index or an argmax is out of range for a [%lld, %lld, %lld, "
                        "%lld] input",
                        (long long)j.batch, (long long)j.channels, (long long)j.height, (long long)j.width);
  return TPURT_STATUS_OK;
}
