/* Call records: a kernel call (tpurt_op_call_t) deep-copied into one flat
 * buffer, so the caller's arrays may go away at once. Queues copy every call
 * they are given (into their command ring, or DeferAndFuse's pending graph). */
#ifndef TPURT_HAL_CALL_RECORD_H_
#define TPURT_HAL_CALL_RECORD_H_

#include "tpurt/kernel.h"

/* INVALID_ARGUMENT when the call's arrays are malformed (negative counts,
 * NULL arrays with nonzero counts). */
tpurt_status_t tpurt_call_validate(const tpurt_op_call_t* call);
/* Bytes a record of `call` takes (a multiple of 8). */
uint64_t tpurt_call_record_size(const tpurt_op_call_t* call);
/* Deep-copies `call` into `buf` (tpurt_call_record_size bytes, 8-aligned);
 * *out points into it. */
void tpurt_call_record_copy(const tpurt_op_call_t* call, uint8_t* buf, tpurt_op_call_t* out);

#endif /* TPURT_HAL_CALL_RECORD_H_ */
