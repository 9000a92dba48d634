/* DeferAndFuse's pending list (defer/defer.h): records in an arena that
 * grows in 64 KiB chunks, freed whole when the list has run. */
#include <stdlib.h>
#include <string.h>

#include "exec/defer/defer.h"

#define CHUNK_BYTES ((size_t)64 << 10)

struct tpurt_defer_chunk_t {
  tpurt_defer_chunk_t* next;
  size_t size, used;
  _Alignas(16) uint8_t data[];
};

tpurt_defer_list_t* tpurt_defer_list_new(void) { return calloc(1, sizeof(tpurt_defer_list_t)); }

void tpurt_defer_list_free(tpurt_defer_list_t* list) {
  if (!list) return;
  for (tpurt_defer_chunk_t* c = list->chunks; c;) {
    tpurt_defer_chunk_t* n = c->next;
    free(c);
    c = n;
  }
  for (int i = 0; i < TPURT_DEFER_PLANS; ++i) tpurt_defer_plan_free(list->plans[i]);
  free(list->recs);
  free(list);
}

void* tpurt_defer_list_alloc(tpurt_defer_list_t* list, size_t bytes) {
  bytes = (bytes + 7) & ~(size_t)7;
  if (bytes == 0) bytes = 8;
  tpurt_defer_chunk_t* c = list->chunks;
  if (!c || c->size - c->used < bytes) {
    size_t size = bytes > CHUNK_BYTES ? bytes : CHUNK_BYTES;
    tpurt_defer_chunk_t* n = malloc(sizeof(*n) + size);
    if (!n) return NULL;
    n->size = size;
    n->used = 0;
    n->next = c;
    list->chunks = c = n;
    list->arena_bytes += size;
  }
  void* p = c->data + c->used;
  c->used += bytes;
  return p;
}

bool tpurt_defer_list_reserve(tpurt_defer_list_t* list, int32_t n) {
  if (n <= list->cap_recs) return true;
  tpurt_defer_rec_t* r = realloc(list->recs, sizeof(*r) * (size_t)n);
  if (!r) return false;
  list->recs = r;
  list->cap_recs = n;
  return true;
}

tpurt_defer_rec_t* tpurt_defer_list_push(tpurt_defer_list_t* list) {
  if (list->num_recs == list->cap_recs) {
    int32_t cap = list->cap_recs ? list->cap_recs * 2 : 64;
    tpurt_defer_rec_t* r = realloc(list->recs, sizeof(*r) * (size_t)cap);
    if (!r) return NULL;
    list->recs = r;
    list->cap_recs = cap;
  }
  tpurt_defer_rec_t* r = &list->recs[list->num_recs++];
  memset(r, 0, sizeof(*r));
  return r;
}
