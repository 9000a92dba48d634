/* Kernels of the "more coverage" family (issue 3): upsampling backward for the
 * separable modes, pairwise distances, embedding_bag, grid sampling backward,
 * and a few long-tail ops. Each has a reference twin (suffix _ref); the
 * table is cov_more_table.c. */
#ifndef TPURT_OPS_LINALG_COV_MORE_H_
#define TPURT_OPS_LINALG_COV_MORE_H_

#include "ops/index/index_common.h" /* argument readers */
#include "ops/linalg/linalg.h"       /* TPURT_LINALG_DECLARE: these kernels are linalg-table kernels */

TPURT_LINALG_DECLARE(upsample_nearest_bwd)
TPURT_LINALG_DECLARE(upsample_nearest_exact_bwd)
TPURT_LINALG_DECLARE(upsample_linear_bwd)
TPURT_LINALG_DECLARE(upsample_bicubic_bwd)
TPURT_LINALG_DECLARE(upsample_bilinear_aa)
TPURT_LINALG_DECLARE(upsample_bilinear_aa_bwd)
TPURT_LINALG_DECLARE(cdist_forward)
TPURT_LINALG_DECLARE(cdist_backward)
TPURT_LINALG_DECLARE(pdist_forward)
TPURT_LINALG_DECLARE(pdist_backward)
TPURT_LINALG_DECLARE(embedding_bag)
TPURT_LINALG_DECLARE(embedding_bag_backward)
TPURT_LINALG_DECLARE(embedding_bag_dense_backward)
TPURT_LINALG_DECLARE(embedding_bag_psw_backward)
TPURT_LINALG_DECLARE(grid_sampler_2d)
TPURT_LINALG_DECLARE(grid_sampler_2d_backward)
TPURT_LINALG_DECLARE(grid_sampler_3d)
TPURT_LINALG_DECLARE(grid_sampler_3d_backward)
TPURT_LINALG_DECLARE(ctc_loss)
TPURT_LINALG_DECLARE(ctc_loss_backward)
TPURT_LINALG_DECLARE(ldl_factor)
TPURT_LINALG_DECLARE(ldl_solve)

/* Element `off` (in elements) of t through double / int64: the per-element
 * access of these kernels. float32, float64 and int64 are read and written inline (a
 * predictable branch); other dtypes go through the dtype table's out-of-line
 * converters, which cost a call per element. */
static inline double tpurt_more_ld(const tpurt_tensor_t* t, int64_t off) {
  if (t->dtype == TPURT_DTYPE_FLOAT32) return ((const float*)t->data)[off];
  if (t->dtype == TPURT_DTYPE_FLOAT64) return ((const double*)t->data)[off];
  return tpurt_dtype_load_f64(t->dtype, (const char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype));
}
static inline void tpurt_more_st(const tpurt_tensor_t* t, int64_t off, double v) {
  if (t->dtype == TPURT_DTYPE_FLOAT32) ((float*)t->data)[off] = (float)v;
  else if (t->dtype == TPURT_DTYPE_FLOAT64) ((double*)t->data)[off] = v;
  else tpurt_dtype_store_f64(t->dtype, (char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype), v);
}
static inline int64_t tpurt_more_ldi(const tpurt_tensor_t* t, int64_t off) {
  if (t->dtype == TPURT_DTYPE_INT64) return ((const int64_t*)t->data)[off];
  return tpurt_dtype_load_i64(t->dtype, (const char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype));
}
static inline void tpurt_more_sti(const tpurt_tensor_t* t, int64_t off, int64_t v) {
  if (t->dtype == TPURT_DTYPE_INT64) ((int64_t*)t->data)[off] = v;
  else tpurt_dtype_store_i64(t->dtype, (char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype), v);
}

/* A kernel and its reference twin from one expression in `ref` (which it may ignore: a plain
 * scalar kernel is its own reference). */
#define TPURT_MORE_PAIR(NAME, EXPR)                                                              \
  tpurt_status_t tpurt_linalg_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {        \
    const bool ref = false;                                                                      \
    (void)ref;                                                                                   \
    return EXPR;                                                                                 \
  }                                                                                              \
  tpurt_status_t tpurt_linalg_##NAME##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {  \
    const bool ref = true;                                                                       \
    (void)ref;                                                                                   \
    return EXPR;                                                                                 \
  }

/* Scalar argument i as a double, when given (a scale factor: absent or None means "derive it"). */
static inline bool tpurt_more_opt_double(const tpurt_op_call_t* call, int i, double* out) {
  if (!tpurt_index_arg_is_scalar(call, i)) return false;
  *out = tpurt_index_arg_double(call, i, 0.0);
  return true;
}

#endif /* TPURT_OPS_LINALG_COV_MORE_H_ */
