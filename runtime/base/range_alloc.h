/* Internal: a first-fit, coalescing allocator of offsets within a fixed range
 * (a chip's HBM). Few, large ranges are expected (caching-allocator segments),
 * so free ranges live in an address-sorted array. Not thread-safe: the owner
 * locks. */
#ifndef TPURT_BASE_RANGE_ALLOC_H_
#define TPURT_BASE_RANGE_ALLOC_H_

#include <stddef.h>
#include <stdint.h>

#include "tpurt/base.h"

typedef struct tpurt_range_t {
  uint64_t offset;
  uint64_t size;
} tpurt_range_t;

typedef struct tpurt_range_alloc_t {
  uint64_t capacity;
  uint64_t used;
  tpurt_range_t* free;  /* sorted by offset, never adjacent (always merged) */
  size_t num_free;
  size_t cap_free;
} tpurt_range_alloc_t;

tpurt_status_t tpurt_range_alloc_init(tpurt_range_alloc_t* ra, uint64_t capacity);
void tpurt_range_alloc_deinit(tpurt_range_alloc_t* ra);
/* First fit; `align` is a power of two and the sizes callers pass are
 * multiples of it. Returns false when no free range is large enough. */
bool tpurt_range_alloc_take(tpurt_range_alloc_t* ra, uint64_t size, uint64_t align,
                            uint64_t* out_offset);
/* Returns [offset, offset+size) and merges it with its neighbours. Returns
 * false only if host memory for the free list ran out (the range is then
 * leaked, never double-handed out). */
bool tpurt_range_alloc_give(tpurt_range_alloc_t* ra, uint64_t offset, uint64_t size);
/* The largest free range (what one allocation could still get). */
uint64_t tpurt_range_alloc_largest(const tpurt_range_alloc_t* ra);

#endif /* TPURT_BASE_RANGE_ALLOC_H_ */
