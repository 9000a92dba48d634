/* tpurt tensors as kernels see them: a typed, strided view of device memory.
 * The runtime never owns tensor storage through this struct; it is a
 * descriptor (like DLPack's DLTensor, with strides always present). */
#ifndef TPURT_TENSOR_H_
#define TPURT_TENSOR_H_

#include "tpurt/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPURT_MAX_DIMS 16

typedef struct tpurt_tensor_t {
  void* data;            /* address of element [0,...,0] (storage base + offset) */
  tpurt_dtype_t dtype;
  int32_t ndim;          /* 0 for a scalar tensor */
  int64_t sizes[TPURT_MAX_DIMS];
  int64_t strides[TPURT_MAX_DIMS]; /* in elements; may be 0 (expanded) */
} tpurt_tensor_t;

static inline int64_t tpurt_tensor_numel(const tpurt_tensor_t* t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t->ndim; ++i) n *= t->sizes[i];
  return n;
}

static inline bool tpurt_tensor_is_contiguous(const tpurt_tensor_t* t) {
  int64_t expected = 1;
  for (int32_t i = t->ndim - 1; i >= 0; --i) {
    if (t->sizes[i] != 1 && t->strides[i] != expected) return false;
    expected *= t->sizes[i];
  }
  return true;
}

static inline size_t tpurt_tensor_itemsize(const tpurt_tensor_t* t) {
  return tpurt_dtype_size(t->dtype);
}

/* The very same view: element i of one is element i of the other. */
static inline bool tpurt_tensor_same_view(const tpurt_tensor_t* a, const tpurt_tensor_t* b) {
  if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (int32_t d = 0; d < a->ndim; ++d) {
    if (a->sizes[d] != b->sizes[d]) return false;
    if (a->sizes[d] != 1 && a->strides[d] != b->strides[d]) return false;
  }
  return true;
}

static inline bool tpurt_tensor_same_shape(const tpurt_tensor_t* a, const tpurt_tensor_t* b) {
  if (a->ndim != b->ndim) return false;
  for (int32_t d = 0; d < a->ndim; ++d)
    if (a->sizes[d] != b->sizes[d]) return false;
  return true;
}

/* t broadcasts to s's shape (right-aligned, each dim 1 or equal). */
static inline bool tpurt_tensor_broadcasts_to(const tpurt_tensor_t* t, const tpurt_tensor_t* s) {
  if (t->ndim > s->ndim) return false;
  int32_t off = s->ndim - t->ndim;
  for (int32_t d = 0; d < t->ndim; ++d)
    if (t->sizes[d] != 1 && t->sizes[d] != s->sizes[off + d]) return false;
  return true;
}

#ifdef __cplusplus
}
#endif
#endif /* TPURT_TENSOR_H_ */
