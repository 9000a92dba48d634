/* First-fit coalescing range allocator over an address-sorted free array. */
#include "base/range_alloc.h"

#include <stdlib.h>
#include <string.h>

tpurt_status_t tpurt_range_alloc_init(tpurt_range_alloc_t* ra, uint64_t capacity) {
  memset(ra, 0, sizeof(*ra));
  ra->capacity = capacity;
  ra->cap_free = 16;
  ra->free = malloc(ra->cap_free * sizeof(*ra->free));
  if (!ra->free) return TPURT_STATUS(RESOURCE_EXHAUSTED, "out of host memory");
  if (capacity) ra->free[ra->num_free++] = (tpurt_range_t){0, capacity};
  return TPURT_OK;
}

void tpurt_range_alloc_deinit(tpurt_range_alloc_t* ra) {
  free(ra->free);
  memset(ra, 0, sizeof(*ra));
}

bool tpurt_range_alloc_take(tpurt_range_alloc_t* ra, uint64_t size, uint64_t align,
                            uint64_t* out_offset) {
  if (size == 0) return false;
  for (size_t i = 0; i < ra->num_free; ++i) {
    tpurt_range_t* r = &ra->free[i];
    uint64_t start = (r->offset + align - 1) & ~(align - 1);
    uint64_t pad = start - r->offset;
    if (r->size < pad || r->size - pad < size) continue;
    uint64_t tail = r->size - pad - size;
    if (pad && tail) {
      /* The aligned piece comes out of the middle: keep both sides free. */
      if (ra->num_free == ra->cap_free) {
        size_t nc = ra->cap_free * 2;
        tpurt_range_t* nf = realloc(ra->free, nc * sizeof(*nf));
        if (!nf) return false;
        ra->free = nf;
        ra->cap_free = nc;
        r = &ra->free[i];
      }
      memmove(&ra->free[i + 2], &ra->free[i + 1], (ra->num_free - i - 1) * sizeof(*r));
      ++ra->num_free;
      ra->free[i + 1] = (tpurt_range_t){start + size, tail};
      r->size = pad;
    } else if (pad) {
      r->size = pad;
    } else if (tail) {
      r->offset += size;
      r->size = tail;
    } else {
      memmove(&ra->free[i], &ra->free[i + 1], (ra->num_free - i - 1) * sizeof(*r));
      --ra->num_free;
    }
    ra->used += size;
    *out_offset = start;
    return true;
  }
  return false;
}

bool tpurt_range_alloc_give(tpurt_range_alloc_t* ra, uint64_t offset, uint64_t size) {
  if (size == 0) return true;
  /* First free range after `offset`. */
  size_t lo = 0, hi = ra->num_free;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (ra->free[mid].offset < offset) lo = mid + 1;
    else hi = mid;
  }
  size_t i = lo;
  bool merge_prev = i > 0 && ra->free[i - 1].offset + ra->free[i - 1].size == offset;
  bool merge_next = i < ra->num_free && offset + size == ra->free[i].offset;
  if (merge_prev && merge_next) {
    ra->free[i - 1].size += size + ra->free[i].size;
    memmove(&ra->free[i], &ra->free[i + 1], (ra->num_free - i - 1) * sizeof(tpurt_range_t));
    --ra->num_free;
  } else if (merge_prev) {
    ra->free[i - 1].size += size;
  } else if (merge_next) {
    ra->free[i].offset = offset;
    ra->free[i].size += size;
  } else {
    if (ra->num_free == ra->cap_free) {
      size_t nc = ra->cap_free * 2;
      tpurt_range_t* nf = realloc(ra->free, nc * sizeof(*nf));
      if (!nf) return false;
      ra->free = nf;
      ra->cap_free = nc;
    }
    memmove(&ra->free[i + 1], &ra->free[i], (ra->num_free - i) * sizeof(tpurt_range_t));
    ra->free[i] = (tpurt_range_t){offset, size};
    ++ra->num_free;
  }
  ra->used -= size;
  return true;
}

uint64_t tpurt_range_alloc_largest(const tpurt_range_alloc_t* ra) {
  uint64_t best = 0;
  for (size_t i = 0; i < ra->num_free; ++i)
    if (ra->free[i].size > best) best = ra->free[i].size;
  return best;
}
