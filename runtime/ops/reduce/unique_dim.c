/* The order in which unique_dim visits the slices of its input, as PyTorch CPU's
 * unique_dim computes it: std::sort of the slice indices 0..n-1 with a
 * lexicographic comparator that compares elements with `<` and `>` only (so
 * NaN, neither below nor above anything, compares as equal and leaves the
 * order to the algorithm). With NaN that comparator is not a strict weak
 * order, so the result depends on the sort's exact steps: this file performs
 * the steps of libstdc++'s std::sort (introsort: median-of-three quicksort
 * down to runs of 16, heapsort past 2*log2(n) levels, then a final insertion
 * sort), which is the std::sort PyTorch's CPU build uses. Without NaN every
 * correct sort gives the same order up to equal slices, which unique merges.
 *
 * Input: a contiguous 2-D tensor rows[n][m] of a real dtype (the slices, one
 * per row). Output: int64 perm[n]. Where libstdc++'s unguarded loops would
 * read out of bounds (possible only with NaN, undefined behaviour on CPU),
 * these loops stop at the bounds instead. */
#include <stdlib.h>
#include <string.h>

#include "ops/reduce/reduce_ops.h"

typedef struct ud_rows_t {
  const char* data;
  int64_t m;     /* elements per row */
  size_t esz;    /* bytes per element */
  tpurt_dtype_t dtype;
  bool is_int, is_u64;
} ud_rows_t;

/* comp(a, b): row a < row b lexicographically, elements compared with < and >
 * in the row dtype (integers and bool exactly, uint64 unsigned, floats in
 * double, which holds half, bfloat16, float and double exactly). */
static bool ud_less(const ud_rows_t* r, int64_t a, int64_t b) {
  const char* pa = r->data + (size_t)(a * r->m) * r->esz;
  const char* pb = r->data + (size_t)(b * r->m) * r->esz;
  for (int64_t i = 0; i < r->m; ++i) {
    if (r->is_u64) {
      uint64_t x, y;
      memcpy(&x, pa + (size_t)i * 8, 8);
      memcpy(&y, pb + (size_t)i * 8, 8);
      if (x < y) return true;
      if (x > y) return false;
    } else if (r->is_int) {
      int64_t x = tpurt_dtype_load_i64(r->dtype, pa + (size_t)i * r->esz);
      int64_t y = tpurt_dtype_load_i64(r->dtype, pb + (size_t)i * r->esz);
      if (x < y) return true;
      if (x > y) return false;
    } else {
      double x = tpurt_dtype_load_f64(r->dtype, pa + (size_t)i * r->esz);
      double y = tpurt_dtype_load_f64(r->dtype, pb + (size_t)i * r->esz);
      if (x < y) return true;
      if (x > y) return false;
    }
  }
  return false;
}

static void ud_swap(int64_t* a, int64_t* b) {
  int64_t t = *a;
  *a = *b;
  *b = t;
}

/* ---- heapsort (std::__partial_sort(first, last, last)) ---- */

static void ud_push_heap(const ud_rows_t* r, int64_t* v, int64_t hole, int64_t top, int64_t value) {
  int64_t parent = (hole - 1) / 2;
  while (hole > top && ud_less(r, v[parent], value)) {
    v[hole] = v[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  v[hole] = value;
}

static void ud_adjust_heap(const ud_rows_t* r, int64_t* v, int64_t hole, int64_t len, int64_t value) {
  const int64_t top = hole;
  int64_t child = hole;
  while (child < (len - 1) / 2) {
    child = 2 * (child + 1);
    if (ud_less(r, v[child], v[child - 1])) child--;
    v[hole] = v[child];
    hole = child;
  }
  if ((len & 1) == 0 && child == (len - 2) / 2) {
    child = 2 * (child + 1);
    v[hole] = v[child - 1];
    hole = child - 1;
  }
  ud_push_heap(r, v, hole, top, value);
}

static void ud_heap_sort(const ud_rows_t* r, int64_t* v, int64_t len) {
  if (len >= 2) { /* make_heap */
    for (int64_t parent = (len - 2) / 2;; --parent) {
      ud_adjust_heap(r, v, parent, len, v[parent]);
      if (parent == 0) break;
    }
  }
  for (int64_t last = len; last > 1;) { /* sort_heap: pop_heap(first, last-1, last-1) */
    --last;
    int64_t value = v[last];
    v[last] = v[0];
    ud_adjust_heap(r, v, 0, last, value);
  }
}

/* ---- introsort ---- */

enum { UD_THRESHOLD = 16 };

static void ud_move_median_to_first(const ud_rows_t* r, int64_t* v, int64_t result, int64_t a, int64_t b,
                                    int64_t c) {
  if (ud_less(r, v[a], v[b])) {
    if (ud_less(r, v[b], v[c])) ud_swap(&v[result], &v[b]);
    else if (ud_less(r, v[a], v[c])) ud_swap(&v[result], &v[c]);
    else ud_swap(&v[result], &v[a]);
  } else if (ud_less(r, v[a], v[c])) {
    ud_swap(&v[result], &v[a]);
  } else if (ud_less(r, v[b], v[c])) {
    ud_swap(&v[result], &v[c]);
  } else {
    ud_swap(&v[result], &v[b]);
  }
}

/* std::__unguarded_partition(first, last, pivot) over v[lo..hi), pivot at v[p] */
static int64_t ud_partition(const ud_rows_t* r, int64_t* v, int64_t first, int64_t last, int64_t p) {
  const int64_t lo = first, hi = last;
  for (;;) {
    while (first < hi - 1 && ud_less(r, v[first], v[p])) ++first;
    --last;
    while (last > lo && ud_less(r, v[p], v[last])) --last;
    if (!(first < last)) return first;
    ud_swap(&v[first], &v[last]);
    ++first;
  }
}

static void ud_introsort_loop(const ud_rows_t* r, int64_t* v, int64_t first, int64_t last, int depth) {
  while (last - first > UD_THRESHOLD) {
    if (depth == 0) {
      ud_heap_sort(r, v + first, last - first);
      return;
    }
    --depth;
    int64_t mid = first + (last - first) / 2;
    ud_move_median_to_first(r, v, first, first + 1, mid, last - 1);
    int64_t cut = ud_partition(r, v, first + 1, last, first);
    ud_introsort_loop(r, v, cut, last, depth);
    last = cut;
  }
}

/* std::__unguarded_linear_insert at v[i]; stops at `lo` (libstdc++ relies on a
 * smaller element before it) */
static void ud_linear_insert(const ud_rows_t* r, int64_t* v, int64_t lo, int64_t i) {
  int64_t val = v[i];
  int64_t next = i - 1;
  while (next >= lo && ud_less(r, val, v[next])) {
    v[i] = v[next];
    i = next;
    --next;
  }
  v[i] = val;
}

/* std::__insertion_sort(first, last) */
static void ud_insertion_sort(const ud_rows_t* r, int64_t* v, int64_t first, int64_t last) {
  if (first == last) return;
  for (int64_t i = first + 1; i < last; ++i) {
    if (ud_less(r, v[i], v[first])) {
      int64_t val = v[i];
      memmove(v + first + 1, v + first, sizeof(int64_t) * (size_t)(i - first));
      v[first] = val;
    } else {
      ud_linear_insert(r, v, first, i);
    }
  }
}

static void ud_sort(const ud_rows_t* r, int64_t* v, int64_t n) {
  if (n <= 0) return;
  int lg = 0;
  for (int64_t k = n; k > 1; k >>= 1) ++lg; /* std::__lg(n) */
  ud_introsort_loop(r, v, 0, n, 2 * lg);
  if (n > UD_THRESHOLD) { /* std::__final_insertion_sort */
    ud_insertion_sort(r, v, 0, UD_THRESHOLD);
    for (int64_t i = UD_THRESHOLD; i < n; ++i) ud_linear_insert(r, v, 0, i);
  } else {
    ud_insertion_sort(r, v, 0, n);
  }
}

static tpurt_status_t unique_dim_order_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c) {
  (void)ctx;
  const tpurt_tensor_t* in = tpurt_arg_tensor(c, 0);
  if (!in || c->num_outputs < 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (rows) -> perm", c->name);
  const tpurt_tensor_t* out = &c->outputs[0];
  if (in->ndim != 2 || !tpurt_tensor_is_contiguous(in))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: rows must be a contiguous 2-D tensor", c->name);
  if (tpurt_dtype_is_complex(in->dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: complex rows have no order", c->name);
  int64_t n = in->sizes[0];
  if (out->dtype != TPURT_DTYPE_INT64 || out->ndim != 1 || out->sizes[0] != n || !tpurt_tensor_is_contiguous(out))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: perm must be a contiguous int64 tensor of %lld elements", c->name,
                        (long long)n);
  int64_t* v = (int64_t*)out->data;
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  ud_rows_t r = {.data = (const char*)in->data, .m = in->sizes[1], .esz = tpurt_dtype_size(in->dtype),
                 .dtype = in->dtype, .is_int = !tpurt_dtype_is_floating(in->dtype),
                 .is_u64 = in->dtype == TPURT_DTYPE_UINT64};
  if (r.m == 0) return TPURT_OK; /* all rows equal: std::sort leaves them in place */
  ud_sort(&r, v, n);
  return TPURT_OK;
}

tpurt_status_t tpurt_kernel_unique_dim_order(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) {
  return unique_dim_order_impl(x, c);
}
tpurt_status_t tpurt_kernel_unique_dim_order_ref(tpurt_kernel_ctx_t* x, const tpurt_op_call_t* c) {
  return unique_dim_order_impl(x, c);
}
