/* Poisoned device memory (hal/poison.h): a sorted array of disjoint byte
 * ranges, each holding its own copy of an error. Only touched after a
 * failure, so a plain array under one lock does. */
#include "hal/poison.h"

#include <stdlib.h>
#include <string.h>

struct tpurt_poison_entry_t {
  uintptr_t begin, end;
  tpurt_status_t error;
};

void tpurt_poison_init(tpurt_poison_t* p) {
  memset(p, 0, sizeof(*p));
  pthread_mutex_init(&p->lock, NULL);
}

void tpurt_poison_deinit(tpurt_poison_t* p) {
  for (int32_t i = 0; i < p->n; ++i) tpurt_status_free(p->v[i].error);
  free(p->v);
  pthread_mutex_destroy(&p->lock);
  memset(p, 0, sizeof(*p));
}

/* The first entry ending after `addr`. */
static int32_t first_after(const tpurt_poison_t* p, uintptr_t addr) {
  int32_t lo = 0, hi = p->n;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (p->v[mid].end <= addr) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static bool reserve(tpurt_poison_t* p, int32_t extra) {
  if (p->n + extra <= p->cap) return true;
  int32_t cap = p->cap ? p->cap * 2 : 16;
  while (cap < p->n + extra) cap *= 2;
  tpurt_poison_entry_t* v = realloc(p->v, (size_t)cap * sizeof(*v));
  if (!v) return false;
  p->v = v;
  p->cap = cap;
  return true;
}

/* Removes [b, e) from the entries; index where an entry starting at b goes.
 * Lock held. On out of memory a split entry is kept whole (more poisoned,
 * never less). */
static int32_t cut(tpurt_poison_t* p, uintptr_t b, uintptr_t e) {
  if (p->n == 0) return 0;
  int32_t i = first_after(p, b);
  if (i < p->n && p->v[i].begin < b && p->v[i].end > e) {
    /* [b, e) lies inside entry i: split it in two. */
    tpurt_status_t copy = tpurt_status_copy(p->v[i].error);
    if (!reserve(p, 1)) {
      tpurt_status_free(copy);
      return i + 1;
    }
    memmove(&p->v[i + 2], &p->v[i + 1], (size_t)(p->n - i - 1) * sizeof(p->v[0]));
    p->v[i + 1] = (tpurt_poison_entry_t){e, p->v[i].end, copy};
    p->v[i].end = b;
    p->n++;
    return i + 1;
  }
  if (i < p->n && p->v[i].begin < b) p->v[i++].end = b; /* keep its head */
  int32_t j = i;
  while (j < p->n && p->v[j].end <= e) tpurt_status_free(p->v[j++].error);
  if (j < p->n && p->v[j].begin < e) p->v[j].begin = e; /* keep its tail */
  memmove(&p->v[i], &p->v[j], (size_t)(p->n - j) * sizeof(p->v[0]));
  p->n -= j - i;
  return i;
}

tpurt_status_t tpurt_poison_check(tpurt_poison_t* p, const void* ptr, size_t bytes) {
  if (!tpurt_poison_armed(p) || bytes == 0) return TPURT_OK;
  uintptr_t b = (uintptr_t)ptr, e = b + bytes;
  tpurt_status_t s = TPURT_OK;
  pthread_mutex_lock(&p->lock);
  int32_t i = first_after(p, b);
  if (i < p->n && p->v[i].begin < e) s = tpurt_status_copy(p->v[i].error);
  pthread_mutex_unlock(&p->lock);
  return s;
}

void tpurt_poison_mark(tpurt_poison_t* p, const void* ptr, size_t bytes, tpurt_status_t error) {
  if (!p || bytes == 0 || !error) return;
  uintptr_t b = (uintptr_t)ptr, e = b + bytes;
  tpurt_status_t copy = tpurt_status_copy(error);
  pthread_mutex_lock(&p->lock);
  int32_t i = cut(p, b, e);
  if (reserve(p, 1)) {
    memmove(&p->v[i + 1], &p->v[i], (size_t)(p->n - i) * sizeof(p->v[0]));
    p->v[i] = (tpurt_poison_entry_t){b, e, copy};
    p->n++;
    copy = NULL;
  }
  atomic_store_explicit(&p->count, (uint32_t)p->n, memory_order_release);
  pthread_mutex_unlock(&p->lock);
  tpurt_status_free(copy);
}

void tpurt_poison_clear(tpurt_poison_t* p, const void* ptr, size_t bytes) {
  if (!tpurt_poison_armed(p) || bytes == 0) return;
  uintptr_t b = (uintptr_t)ptr, e = b + bytes;
  pthread_mutex_lock(&p->lock);
  cut(p, b, e);
  atomic_store_explicit(&p->count, (uint32_t)p->n, memory_order_release);
  pthread_mutex_unlock(&p->lock);
}

/* The bytes a tensor's elements span: [*lo, *lo + return). 0 for no elements. */
static size_t tensor_span(const tpurt_tensor_t* t, uintptr_t* lo) {
  int64_t neg = 0, pos = 0;
  for (int32_t d = 0; d < t->ndim; ++d) {
    if (t->sizes[d] == 0) return 0;
    int64_t reach = t->strides[d] * (t->sizes[d] - 1);
    if (reach < 0) neg += reach;
    else pos += reach;
  }
  size_t es = tpurt_dtype_size(t->dtype);
  *lo = (uintptr_t)t->data + (intptr_t)(neg * (int64_t)es);
  return (size_t)(pos - neg + 1) * es;
}

static tpurt_status_t check_tensor(tpurt_poison_t* p, const tpurt_tensor_t* t) {
  uintptr_t lo;
  size_t n = t && t->data ? tensor_span(t, &lo) : 0;
  return n ? tpurt_poison_check(p, (const void*)lo, n) : TPURT_OK;
}

/* An op that writes self without reading it, called in place. */
static bool overwrites_first_arg(const tpurt_op_call_t* call, uint32_t op_flags) {
  return (op_flags & TPURT_OP_OVERWRITES_SELF) && call->num_args >= 1 && call->num_outputs >= 1 &&
         call->args[0].kind == TPURT_ARG_TENSOR && tpurt_tensor_same_view(call->args[0].v.tensor, &call->outputs[0]);
}

tpurt_status_t tpurt_poison_check_call(tpurt_poison_t* p, const tpurt_op_call_t* call, uint32_t op_flags) {
  if (!tpurt_poison_armed(p)) return TPURT_OK;
  for (int32_t i = overwrites_first_arg(call, op_flags) ? 1 : 0; i < call->num_args; ++i) {
    const tpurt_arg_t* a = &call->args[i];
    if (a->kind == TPURT_ARG_TENSOR) {
      TPURT_RETURN_IF_ERROR(check_tensor(p, a->v.tensor));
    } else if (a->kind == TPURT_ARG_TENSOR_LIST) {
      for (int32_t k = 0; k < a->count; ++k) TPURT_RETURN_IF_ERROR(check_tensor(p, a->v.tensors[k]));
    }
  }
  return TPURT_OK;
}

void tpurt_poison_mark_call(tpurt_poison_t* p, const tpurt_op_call_t* call, tpurt_status_t error) {
  if (!p) return;
  for (int32_t i = 0; i < call->num_outputs; ++i) {
    uintptr_t lo;
    size_t n = call->outputs[i].data ? tensor_span(&call->outputs[i], &lo) : 0;
    if (n) tpurt_poison_mark(p, (const void*)lo, n, error);
  }
}

void tpurt_poison_clear_call(tpurt_poison_t* p, const tpurt_op_call_t* call) {
  if (!tpurt_poison_armed(p)) return;
  for (int32_t i = 0; i < call->num_outputs; ++i) {
    const tpurt_tensor_t* t = &call->outputs[i];
    uintptr_t lo;
    size_t n = t->data ? tensor_span(t, &lo) : 0;
    /* Whole only when its elements fill the span (no gaps, no overlap). */
    if (n && (size_t)tpurt_tensor_numel(t) * tpurt_dtype_size(t->dtype) == n)
      tpurt_poison_clear(p, (const void*)lo, n);
  }
}
