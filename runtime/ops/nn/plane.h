/* A 2-D plane view of a 3-D [C, H, W] or 4-D [N, C, H, W] tensor of any
 * strides: the unit of work of the 2-D pooling and upsampling kernels
 * (pool2d.c, upsample.c), which split over (n, c) planes. */
#ifndef TPURT_OPS_NN_PLANE_H_
#define TPURT_OPS_NN_PLANE_H_

#include "ops/nn/nn.h"

/* count planes of H x W; plane i is (n, c) = (i / C, i % C), at n * sn + c * sc */
typedef struct tpurt_nn_plane_t {
  int64_t count, C, sn, sc, H, W, sh, sw;
} tpurt_nn_plane_t;

/* false unless t is 3-D or 4-D */
static inline bool tpurt_nn_plane_of(const tpurt_tensor_t* t, tpurt_nn_plane_t* p) {
  if (t->ndim == 4) {
    *p = (tpurt_nn_plane_t){t->sizes[0] * t->sizes[1], t->sizes[1], t->strides[0], t->strides[1],
                            t->sizes[2], t->sizes[3], t->strides[2], t->strides[3]};
    return true;
  }
  if (t->ndim == 3) {
    *p = (tpurt_nn_plane_t){t->sizes[0], t->sizes[0], 0, t->strides[0], t->sizes[1], t->sizes[2],
                            t->strides[1], t->strides[2]};
    return true;
  }
  return false;
}
static inline int64_t tpurt_nn_plane_off(const tpurt_nn_plane_t* p, int64_t i) {
  return p->C ? (i / p->C) * p->sn + (i % p->C) * p->sc : 0;
}
/* Element (h, w) of plane `plane` of t. */
static inline char* tpurt_nn_plane_at(const tpurt_tensor_t* t, const tpurt_nn_plane_t* p, int64_t plane, int64_t h,
                                      int64_t w) {
  return (char*)t->data +
         (size_t)(tpurt_nn_plane_off(p, plane) + h * p->sh + w * p->sw) * tpurt_dtype_size(t->dtype);
}

/* fn over planes [0, n): serially for the reference, else across the chip's threads */
static inline void tpurt_nn_planes_run(tpurt_kernel_ctx_t* ctx, bool ref, int64_t n, tpurt_range_fn_t fn, void* u) {
  if (n <= 0) return;
  if (ref) fn(u, 0, n, 0);
  else tpurt_parallel_for(ctx, n, 1, fn, u);
}

/* a and b as planes of the same count (and channels) */
static inline tpurt_status_t tpurt_nn_planes_check(const tpurt_op_call_t* call, const tpurt_tensor_t* a,
                                                   const tpurt_tensor_t* b, tpurt_nn_plane_t* pa,
                                                   tpurt_nn_plane_t* pb) {
  if (!tpurt_nn_plane_of(a, pa) || !tpurt_nn_plane_of(b, pb) || a->ndim != b->ndim)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected 3-D or 4-D tensors, got %d-D and %d-D", call->name,
                        (int)a->ndim, (int)b->ndim);
  if (pa->count != pb->count || (a->ndim == 4 && a->sizes[1] != b->sizes[1]))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: batch/channel sizes differ", call->name);
  return TPURT_OK;
}

#endif /* TPURT_OPS_NN_PLANE_H_ */
