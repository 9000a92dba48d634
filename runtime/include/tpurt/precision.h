/* Float32 matrix-product precision, as on a TPU's MXU (which multiplies
 * bfloat16): HIGHEST computes in float32 (a TPU takes 6 bf16 passes), HIGH
 * splits each operand into two bf16 parts and sums three bf16 products
 * (bf16x3), MEDIUM rounds the operands to bf16 and takes one product; all
 * accumulate in float32. Applies to every float32 GEMM (the matmul family and
 * convolutions; ops/linalg/gemm_precision.c). The PyTorch layer installs a
 * source that reads torch.get_float32_matmul_precision(). */
#ifndef TPURT_PRECISION_H_
#define TPURT_PRECISION_H_

#include "tpurt/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpurt_fp32_precision_e {
  TPURT_FP32_HIGHEST = 0,
  TPURT_FP32_HIGH = 1,
  TPURT_FP32_MEDIUM = 2,
} tpurt_fp32_precision_t;

/* Where the precision comes from (read when a float32 product runs); NULL:
 * HIGHEST. */
TPURT_API void tpurt_fp32_precision_set_source(tpurt_fp32_precision_t (*source)(void));
/* Overrides the source (tests; -1 removes the override). */
TPURT_API void tpurt_fp32_precision_override(int precision);
TPURT_API tpurt_fp32_precision_t tpurt_fp32_precision(void);
/* bf16 passes one float32 product takes on a TPU at `precision`: 6, 3, 1. */
TPURT_API int tpurt_fp32_precision_passes(tpurt_fp32_precision_t precision);

#ifdef __cplusplus
}
#endif
#endif /* TPURT_PRECISION_H_ */
