/* nextafter on 16-bit floats by bit steps (ew_nextafter16.c). */
#ifndef TPURT_OPS_EW_NEXTAFTER16_H_
#define TPURT_OPS_EW_NEXTAFTER16_H_

#include "ops/elementwise/elementwise.h"

/* nextafter(self, other) into a bfloat16 or float16 outputs[0]. */
tpurt_status_t tpurt_ew_nextafter16(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref);

#endif /* TPURT_OPS_EW_NEXTAFTER16_H_ */
