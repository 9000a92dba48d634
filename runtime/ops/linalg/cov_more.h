/* Kernels of the "more coverage" family (issue 3): upsampling backward for the
 * separable modes, pairwise distances, embedding_bag, grid sampling backward,
 * and a few long-tail ops. Each has a reference twin (suffix _ref); the
 * table is cov_more_table.c. */
#ifndef TPURT_OPS_LINALG_COV_MORE_H_
#define TPURT_OPS_LINALG_COV_MORE_H_

#include "tpurt/kernel.h"

#define TPURT_MORE_DECLARE(NAME)                                                              \
  tpurt_status_t tpurt_more_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);     \
  tpurt_status_t tpurt_more_##NAME##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);

TPURT_MORE_DECLARE(upsample_nearest_bwd)
TPURT_MORE_DECLARE(upsample_nearest_exact_bwd)
TPURT_MORE_DECLARE(upsample_linear_bwd)
TPURT_MORE_DECLARE(upsample_bicubic_bwd)
TPURT_MORE_DECLARE(upsample_bilinear_aa)
TPURT_MORE_DECLARE(upsample_bilinear_aa_bwd)
TPURT_MORE_DECLARE(cdist_forward)
TPURT_MORE_DECLARE(cdist_backward)
TPURT_MORE_DECLARE(pdist_forward)
TPURT_MORE_DECLARE(pdist_backward)
TPURT_MORE_DECLARE(embedding_bag)
TPURT_MORE_DECLARE(embedding_bag_backward)
TPURT_MORE_DECLARE(embedding_bag_dense_backward)
TPURT_MORE_DECLARE(embedding_bag_psw_backward)
TPURT_MORE_DECLARE(grid_sampler_2d)
TPURT_MORE_DECLARE(grid_sampler_2d_backward)
TPURT_MORE_DECLARE(grid_sampler_3d)
TPURT_MORE_DECLARE(grid_sampler_3d_backward)
TPURT_MORE_DECLARE(ctc_loss)
TPURT_MORE_DECLARE(ctc_loss_backward)
TPURT_MORE_DECLARE(ldl_factor)
TPURT_MORE_DECLARE(ldl_solve)

/* Element `off` (in elements) of t through double / int64: the generic
 * per-element access of these kernels' slow paths. */
static inline double tpurt_more_ld(const tpurt_tensor_t* t, int64_t off) {
  return tpurt_dtype_load_f64(t->dtype, (const char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype));
}
static inline void tpurt_more_st(const tpurt_tensor_t* t, int64_t off, double v) {
  tpurt_dtype_store_f64(t->dtype, (char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype), v);
}
static inline int64_t tpurt_more_ldi(const tpurt_tensor_t* t, int64_t off) {
  return tpurt_dtype_load_i64(t->dtype, (const char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype));
}
static inline void tpurt_more_sti(const tpurt_tensor_t* t, int64_t off, int64_t v) {
  tpurt_dtype_store_i64(t->dtype, (char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype), v);
}

/* A kernel and its reference twin from one expression in `ref`. */
#define TPURT_MORE_PAIR(NAME, EXPR)                                                              \
  tpurt_status_t tpurt_more_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {        \
    const bool ref = false;                                                                      \
    return EXPR;                                                                                 \
  }                                                                                              \
  tpurt_status_t tpurt_more_##NAME##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {  \
    const bool ref = true;                                                                       \
    return EXPR;                                                                                 \
  }

/* Shared argument helpers (cov_upsample.c). */
bool tpurt_more_opt_double(const tpurt_op_call_t* call, int i, double* out);
bool tpurt_more_bool_arg(const tpurt_op_call_t* call, int i, bool dflt);
/* Offset in elements of element `lin` (row-major over t's sizes) of t. */
int64_t tpurt_more_offset(const tpurt_tensor_t* t, int64_t lin);

#endif /* TPURT_OPS_LINALG_COV_MORE_H_ */
