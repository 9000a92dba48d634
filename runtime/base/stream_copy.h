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

#endif /* TPURT_BASE_STREAM_COPY_H_ */
