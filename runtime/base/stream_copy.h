/* Internal: a copy whose destination is written with non-temporal
 * (streaming) stores, for large copies whose output is not read again soon:
 * no read-for-ownership of the destination's lines and no eviction of what
 * the caches hold. */
#ifndef TPURT_BASE_STREAM_COPY_H_
#define TPURT_BASE_STREAM_COPY_H_

#include <stddef.h>

/* memcpy(dst, src, n) for non-overlapping ranges, the destination's whole
 * 64-byte lines streamed (plain memcpy where the ISA has no such store).
 * Fenced: the stores are visible to other threads and processes once it
 * returns, as a memcpy's are to whoever synchronizes with the caller. */
void tpurt_stream_copy(void* dst, const void* src, size_t n);
/* The same without the fence, for a kernel that streams many rows: it calls
 * tpurt_stream_fence() once after the last (before its job ends). */
void tpurt_stream_copy_unfenced(void* dst, const void* src, size_t n);
void tpurt_stream_fence(void);

/* Outputs from this many bytes on (a few times the caches) are worth writing
 * with streaming stores: their lines are not read first, a third of a large
 * row kernel's memory traffic (softmax, layer norm). */
#define TPURT_STREAM_BYTES ((size_t)8 << 20)

#endif /* TPURT_BASE_STREAM_COPY_H_ */
