/* The training kernel family: the fused recurrent cells nn.LSTM/nn.GRU reach
 * on an accelerator (rnn_cell.c), the fused optimizer steps (optim.c) and the
 * gradient scaler's kernels (amp.c). Each kernel has a reference twin (suffix
 * _ref); the op table is train_table.c. Internal to runtime/ops. */
#ifndef TPURT_OPS_TRAIN_TRAIN_H_
#define TPURT_OPS_TRAIN_TRAIN_H_

#include "ops/args.h"

#define TPURT_TRAIN_DECLARE(NAME)                                                              \
  tpurt_status_t tpurt_train_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);     \
  tpurt_status_t tpurt_train_##NAME##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);

TPURT_TRAIN_DECLARE(lstm_cell)
TPURT_TRAIN_DECLARE(lstm_cell_backward)
TPURT_TRAIN_DECLARE(gru_cell)
TPURT_TRAIN_DECLARE(gru_cell_backward)
TPURT_TRAIN_DECLARE(fused_adam)
TPURT_TRAIN_DECLARE(fused_adamw)
TPURT_TRAIN_DECLARE(fused_sgd)
TPURT_TRAIN_DECLARE(fused_adagrad)
TPURT_TRAIN_DECLARE(amp_unscale)
TPURT_TRAIN_DECLARE(amp_update_scale)

/* Byte address of element `i` (row-major order over the sizes) of t. */
static inline char* tpurt_train_addr(const tpurt_tensor_t* t, int64_t i) {
  int64_t off = 0;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    int64_t s = t->sizes[d];
    if (s == 0) return (char*)t->data;
    off += (i % s) * t->strides[d];
    i /= s;
  }
  return (char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype);
}
/* A tensor as the scalar loops read it: contiguous float32 directly (the
 * common case, decided once per tensor), anything else through the dtype
 * table's converters and its strides. */
typedef struct tpurt_train_view_t {
  const tpurt_tensor_t* t;
  float* f32; /* t's data when t is contiguous float32, else NULL */
} tpurt_train_view_t;

static inline tpurt_train_view_t tpurt_train_view(const tpurt_tensor_t* t) {
  tpurt_train_view_t v = {t, NULL};
  if (t && t->dtype == TPURT_DTYPE_FLOAT32 && tpurt_tensor_is_contiguous(t)) v.f32 = (float*)t->data;
  return v;
}
static inline double tpurt_train_ld(tpurt_train_view_t v, int64_t i) {
  if (v.f32) return v.f32[i];
  return tpurt_dtype_load_f64(v.t->dtype, tpurt_train_addr(v.t, i));
}
static inline void tpurt_train_st(tpurt_train_view_t v, int64_t i, double x) {
  if (v.f32) v.f32[i] = (float)x;
  else tpurt_dtype_store_f64(v.t->dtype, tpurt_train_addr(v.t, i), x);
}

#endif /* TPURT_OPS_TRAIN_TRAIN_H_ */
