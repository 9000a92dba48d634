/* torchvision::nms as torchvision's CPU kernel computes it: boxes sorted by
 * score, descending and stable (NaN first, as torch.sort puts it), each kept
 * box suppressing the later ones whose IoU with it exceeds the threshold.
 * Arithmetic in the boxes' dtype (float32 or float64) step for step as the
 * CPU kernel's, the threshold compared as a double, so the same boxes are kept.
 *
 * args: dets [N, 4] (x1, y1, x2, y2), scores [N], iou_threshold (double).
 * outputs: keep int64 [N] (the kept indices first, in score order), count
 * int64 [1] (how many were kept); the caller narrows keep to count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/args.h"

tpurt_status_t tpurt_vision_nms(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);

/* scores[a] comes before scores[b] in a descending sort (NaN largest). */
#define NMS_BEFORE(sa, sb) ((sa) > (sb) || (isnan(sa) && !isnan(sb)))

#define NMS_IMPL(T, SUFFIX)                                                                         \
  static void nms_merge_##SUFFIX(const T* s, int64_t* v, int64_t* tmp, int64_t n) {                 \
    /* bottom-up merge sort: stable */                                                             \
    for (int64_t w = 1; w < n; w *= 2) {                                                           \
      for (int64_t lo = 0; lo < n; lo += 2 * w) {                                                  \
        int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;               \
        int64_t i = lo, j = mid, k = lo;                                                           \
        while (i < mid && j < hi) tmp[k++] = NMS_BEFORE(s[v[j]], s[v[i]]) ? v[j++] : v[i++];       \
        while (i < mid) tmp[k++] = v[i++];                                                         \
        while (j < hi) tmp[k++] = v[j++];                                                          \
      }                                                                                            \
      memcpy(v, tmp, (size_t)n * sizeof(*v));                                                      \
    }                                                                                              \
  }                                                                                                \
  static int64_t nms_run_##SUFFIX(const T* dets, const T* s, double thr_d, int64_t n, int64_t* order, \
                                  int64_t* tmp, T* areas, unsigned char* suppressed, int64_t* keep) { \
    for (int64_t i = 0; i < n; ++i) {                                                              \
      order[i] = i;                                                                                \
      areas[i] = (dets[i * 4 + 2] - dets[i * 4 + 0]) * (dets[i * 4 + 3] - dets[i * 4 + 1]);       \
      suppressed[i] = 0;                                                                           \
    }                                                                                              \
    nms_merge_##SUFFIX(s, order, tmp, n);                                                          \
    int64_t kept = 0;                                                                              \
    for (int64_t oi = 0; oi < n; ++oi) {                                                           \
      const int64_t i = order[oi];                                                                 \
      if (suppressed[i]) continue;                                                                 \
      keep[kept++] = i;                                                                            \
      const T ix1 = dets[i * 4 + 0], iy1 = dets[i * 4 + 1], ix2 = dets[i * 4 + 2], iy2 = dets[i * 4 + 3]; \
      const T iarea = areas[i];                                                                    \
      for (int64_t oj = oi + 1; oj < n; ++oj) {                                                    \
        const int64_t j = order[oj];                                                               \
        if (suppressed[j]) continue;                                                               \
        const T xx1 = ix1 > dets[j * 4 + 0] ? ix1 : dets[j * 4 + 0];                               \
        const T yy1 = iy1 > dets[j * 4 + 1] ? iy1 : dets[j * 4 + 1];                               \
        const T xx2 = ix2 < dets[j * 4 + 2] ? ix2 : dets[j * 4 + 2];                               \
        const T yy2 = iy2 < dets[j * 4 + 3] ? iy2 : dets[j * 4 + 3];                               \
        const T w = (T)0 > xx2 - xx1 ? (T)0 : xx2 - xx1;                                           \
        const T h = (T)0 > yy2 - yy1 ? (T)0 : yy2 - yy1;                                           \
        const T inter = w * h;                                                                     \
        const T ovr = inter / (iarea + areas[j] - inter);                                          \
        if ((double)ovr > thr_d) suppressed[j] = 1; /* the threshold is a double on CPU */     \
      }                                                                                            \
    }                                                                                              \
    return kept;                                                                                   \
  }

NMS_IMPL(float, f32)
NMS_IMPL(double, f64)

tpurt_status_t tpurt_vision_nms(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* dets = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* scores = tpurt_arg_tensor(call, 1);
  if (!dets || !scores || call->num_outputs != 2)
    return TPURT_STATUS(INVALID_ARGUMENT, "nms: expected dets, scores, iou_threshold and two outputs");
  const tpurt_tensor_t* keep = &call->outputs[0];
  const tpurt_tensor_t* count = &call->outputs[1];
  if (dets->ndim != 2 || dets->sizes[1] != 4 || scores->ndim != 1 || scores->sizes[0] != dets->sizes[0] ||
      !tpurt_tensor_is_contiguous(dets) || !tpurt_tensor_is_contiguous(scores))
    return TPURT_STATUS(INVALID_ARGUMENT, "nms: expected contiguous dets [N, 4] and scores [N]");
  if (dets->dtype != scores->dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "nms: dets and scores must have one dtype");
  if (keep->dtype != TPURT_DTYPE_INT64 || count->dtype != TPURT_DTYPE_INT64 ||
      tpurt_tensor_numel(keep) != dets->sizes[0] || tpurt_tensor_numel(count) != 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "nms: expected int64 outputs keep [N] and count [1]");
  const int64_t n = dets->sizes[0];
  const double thr = tpurt_arg_double(call, 2, 0.0);
  int64_t* out_count = (int64_t*)count->data;
  if (n == 0) {
    *out_count = 0;
    return TPURT_STATUS_OK;
  }
  const size_t esz = tpurt_dtype_size(dets->dtype);
  char* scratch = tpurt_kernel_scratch(ctx, (size_t)n * (2 * sizeof(int64_t) + esz + 1));
  if (!scratch) return TPURT_STATUS(RESOURCE_EXHAUSTED, "nms: no scratch memory for %lld boxes", (long long)n);
  int64_t* order = (int64_t*)scratch;
  int64_t* tmp = order + n;
  void* areas = tmp + n;
  unsigned char* suppressed = (unsigned char*)areas + (size_t)n * esz;
  if (dets->dtype == TPURT_DTYPE_FLOAT32)
    *out_count = nms_run_f32(dets->data, scores->data, thr, n, order, tmp, areas, suppressed, keep->data);
  else if (dets->dtype == TPURT_DTYPE_FLOAT64)
    *out_count = nms_run_f64(dets->data, scores->data, thr, n, order, tmp, areas, suppressed, keep->data);
  else
    return TPURT_STATUS(UNIMPLEMENTED, "nms: dtype %s is not supported", tpurt_dtype_name(dets->dtype));
  return TPURT_STATUS_OK;
}
