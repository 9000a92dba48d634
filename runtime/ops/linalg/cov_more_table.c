/* The "more coverage" kernel family's op table (see tpurt/kernel.h for the ABI;
 * kernels in cov_upsample.c and its neighbours, declared in cov_more.h). */
#include "ops/linalg/cov_more.h"

#define M(NAME, FN) {NAME, tpurt_linalg_##FN, tpurt_linalg_##FN##_ref, 0}

const tpurt_op_def_t tpurt_ops_more[] = {
    M("upsample_nearest3d_backward", upsample_nearest_bwd),
    M("_upsample_nearest_exact1d_backward", upsample_nearest_exact_bwd),
    M("_upsample_nearest_exact2d_backward", upsample_nearest_exact_bwd),
    M("_upsample_nearest_exact3d_backward", upsample_nearest_exact_bwd),
    M("upsample_trilinear3d_backward", upsample_linear_bwd),
    M("upsample_bicubic2d_backward", upsample_bicubic_bwd),
    M("_upsample_bilinear2d_aa", upsample_bilinear_aa),
    M("_upsample_bilinear2d_aa_backward", upsample_bilinear_aa_bwd),
    {"_cdist_forward", tpurt_linalg_cdist_forward, tpurt_linalg_cdist_forward_ref, 0,
     TPURT_DTYPE_BIT(FLOAT32) | TPURT_DTYPE_BIT(FLOAT64)},
    M("_cdist_backward", cdist_backward),
    M("_pdist_forward", pdist_forward),
    M("_pdist_backward", pdist_backward),
    M("_embedding_bag", embedding_bag),
    M("_embedding_bag_forward_only", embedding_bag),
    M("_embedding_bag_backward", embedding_bag_backward),
    M("_embedding_bag_dense_backward", embedding_bag_dense_backward),
    M("_embedding_bag_per_sample_weights_backward", embedding_bag_psw_backward),
    M("grid_sampler_2d", grid_sampler_2d),
    M("grid_sampler_2d_backward", grid_sampler_2d_backward),
    M("grid_sampler_3d", grid_sampler_3d),
    M("grid_sampler_3d_backward", grid_sampler_3d_backward),
    M("_ctc_loss", ctc_loss), /* _ctc_loss and _ctc_loss.Tensor: lengths as int lists or tensors */
    M("_ctc_loss_backward", ctc_loss_backward),
    M("linalg_ldl_factor_ex", ldl_factor),
    M("linalg_ldl_solve", ldl_solve),
    TPURT_OP_TABLE_END,
};
