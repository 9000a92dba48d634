/* embedding_bag: _embedding_bag / _embedding_bag_forward_only (sum, mean, max
 * over bags of weight rows, optional per-sample weights in sum mode, a
 * padding index that bags skip) and the backward: _embedding_bag_backward /
 * _embedding_bag_dense_backward (grad of weight) and
 * _embedding_bag_per_sample_weights_backward. Semantics follow PyTorch CPU
 * (EmbeddingBag.cpp): an empty bag gives zeros; mean divides by the count of
 * non-padding indices; max records the winning row per column. The forward
 * splits over bags, the weight backward over column ranges (every thread
 * walks all indices for its own columns, so no two write one element), the
 * per-sample backward over indices. Sums run in double. */
#include <math.h>
#include <string.h>

#include "ops/nn/nn.h"

enum { EB_SUM = 0, EB_MEAN = 1, EB_MAX = 2 };

static bool is_index(tpurt_dtype_t d) { return d == TPURT_DTYPE_INT64 || d == TPURT_DTYPE_INT32; }

/* ---- shared validation: indices in range, offsets a non-decreasing start list ---- */

typedef struct bags_t {
  const tpurt_tensor_t *idx, *offs;
  int64_t n, nbags, num_weights, padding;
  int64_t is, os; /* strides of the 1-d indices / offsets */
} bags_t;

static tpurt_status_t bags_check(const tpurt_op_call_t* call, bags_t* b, bool include_last) {
  if (b->idx->ndim != 1 || b->offs->ndim != 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: input has to be a 1D or 2D Tensor, and offsets a 1D Tensor",
                        call->name);
  if (!is_index(b->idx->dtype) || !is_index(b->offs->dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: indices and offsets must be int32 or int64", call->name);
  b->n = b->idx->sizes[0];
  b->is = b->idx->strides[0], b->os = b->offs->strides[0];
  int64_t no = b->offs->sizes[0];
  b->nbags = include_last ? (no > 0 ? no - 1 : 0) : no;
  const int64_t* ip = b->idx->dtype == TPURT_DTYPE_INT64 ? (const int64_t*)b->idx->data : NULL;
  for (int64_t i = 0; i < b->n; ++i) {
    int64_t v = ip ? ip[i * b->is] : tpurt_nn_ldi(b->idx, i * b->is);
    if (v < 0 || v >= b->num_weights)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: Index %lld of input takes value %lld which is not in the valid range [0, %lld)",
                          call->name, (long long)i, (long long)v, (long long)b->num_weights);
  }
  if (no > 0 && tpurt_nn_ldi(b->offs, 0) != 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from position 0. However, got %lld",
                        call->name, (long long)tpurt_nn_ldi(b->offs, 0));
  for (int64_t k = 0; k + 1 < no; ++k) {
    int64_t a = tpurt_nn_ldi(b->offs, k * b->os), c = tpurt_nn_ldi(b->offs, (k + 1) * b->os);
    if (c < a || c > b->n)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: offsets[%lld] = %lld is out of order or past the %lld indices",
                          call->name, (long long)(k + 1), (long long)c, (long long)b->n);
  }
  return TPURT_OK;
}

static inline void bag_range(const bags_t* b, int64_t k, int64_t* s, int64_t* e) {
  *s = tpurt_nn_ldi(b->offs, k * b->os);
  int64_t no = b->offs->sizes[0];
  *e = k + 1 < no ? tpurt_nn_ldi(b->offs, (k + 1) * b->os) : b->n;
  if (*e > b->n) *e = b->n;
}

/* ---- forward ---- */

typedef struct eb_fwd_t {
  bags_t b;
  const tpurt_tensor_t *w, *psw, *out, *o2b, *bsize, *maxi;
  int mode;
  int64_t dim;
  double* acc;  /* [threads][dim] */
  int64_t* arg; /* [threads][dim] */
} eb_fwd_t;

static void eb_fwd_bags(void* u, int64_t k0, int64_t k1, int tid) {
  const eb_fwd_t* a = u;
  const tpurt_tensor_t *w = a->w, *out = a->out;
  int64_t ws0 = w->strides[0], ws1 = w->strides[1], os0 = out->strides[0], os1 = out->strides[1];
  bool write_maxi = a->maxi && a->mode == EB_MAX && a->maxi->ndim == 2;
  /* rows are read whole (index outer, column inner) into a per-thread accumulator */
  double* acc = a->acc + (size_t)tid * (size_t)a->dim;
  int64_t* arg = a->arg + (size_t)tid * (size_t)a->dim;
  const float* wf = w->dtype == TPURT_DTYPE_FLOAT32 && ws1 == 1 ? (const float*)w->data : NULL;
  const int64_t* ip = a->b.idx->dtype == TPURT_DTYPE_INT64 ? (const int64_t*)a->b.idx->data : NULL;
  for (int64_t k = k0; k < k1; ++k) {
    int64_t s, e, count = 0;
    bag_range(&a->b, k, &s, &e);
    for (int64_t d = 0; d < a->dim; ++d) acc[d] = 0, arg[d] = -1;
    for (int64_t i = s; i < e; ++i) {
      int64_t r = ip ? ip[i * a->b.is] : tpurt_nn_ldi(a->b.idx, i * a->b.is);
      if (r == a->b.padding) continue;
      ++count;
      if (a->mode == EB_MAX) {
        for (int64_t d = 0; d < a->dim; ++d) {
          double v = wf ? (double)wf[r * ws0 + d] : tpurt_nn_ld(w, r * ws0 + d * ws1);
          if (arg[d] < 0 || v > acc[d]) acc[d] = v, arg[d] = r;
        }
        continue;
      }
      double sw = a->psw ? tpurt_nn_ld(a->psw, i * a->psw->strides[0]) : 1.0;
      if (wf) {
        const float* row = wf + r * ws0;
        for (int64_t d = 0; d < a->dim; ++d) acc[d] += (double)row[d] * sw;
      } else {
        for (int64_t d = 0; d < a->dim; ++d) acc[d] += tpurt_nn_ld(w, r * ws0 + d * ws1) * sw;
      }
    }
    for (int64_t d = 0; d < a->dim; ++d) {
      double v = a->mode == EB_MEAN && count > 0 ? acc[d] / (double)count : acc[d];
      tpurt_nn_st(out, k * os0 + d * os1, v);
      if (write_maxi) tpurt_nn_sti(a->maxi, k * a->maxi->strides[0] + d * a->maxi->strides[1], arg[d]);
    }
    /* with include_last_offset the meta sizes these by the offsets (one more than the bags) */
    if (a->bsize && a->bsize->ndim == 1 && a->bsize->sizes[0] >= a->b.nbags)
      tpurt_nn_sti(a->bsize, k * a->bsize->strides[0], count);
    if (a->maxi && a->maxi->ndim == 1 && a->maxi->sizes[0] >= a->b.nbags)
      tpurt_nn_sti(a->maxi, k * a->maxi->strides[0], count); /* CPU's non-max modes return bag_size here */
    if (a->o2b && a->o2b->ndim == 1 && a->o2b->sizes[0] == a->b.n)
      for (int64_t i = s; i < e; ++i) tpurt_nn_sti(a->o2b, i * a->o2b->strides[0], k);
  }
}

/* _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights?,
 *                include_last_offset, padding_idx) -> (output, offset2bag, bag_size, max_indices) */
static tpurt_status_t eb_forward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_tensor_t* w = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t *idx = tpurt_arg_tensor(call, 1), *offs = tpurt_arg_tensor(call, 2);
  if (!w || !idx || !offs || call->num_outputs < 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (weight, indices, offsets, ...)", call->name);
  if (w->ndim != 2) return TPURT_STATUS(INVALID_ARGUMENT, "%s: weight has to be a 2D Tensor", call->name);
  if (!tpurt_dtype_is_floating(w->dtype))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for %s", call->name, tpurt_dtype_name(w->dtype));
  eb_fwd_t a = {{idx, offs}, w, tpurt_arg_tensor(call, 6), &call->outputs[0]};
  a.mode = (int)tpurt_arg_int(call, 4, EB_SUM);
  a.b.num_weights = w->sizes[0];
  a.b.padding = tpurt_arg_int(call, 8, -1);
  if (a.mode < EB_SUM || a.mode > EB_MAX)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: mode has to be one of sum, mean or max", call->name);
  if (a.psw && a.mode != EB_SUM)
    return TPURT_STATUS(UNIMPLEMENTED, "%s: per_sample_weights was not None. per_sample_weights is only supported for mode='sum'",
                        call->name);
  TPURT_RETURN_IF_ERROR(bags_check(call, &a.b, tpurt_arg_int(call, 7, 0) != 0));
  if (a.psw && (a.psw->ndim != 1 || a.psw->sizes[0] != a.b.n))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected per_sample_weights to be 1D with the indices' length", call->name);
  a.dim = w->sizes[1];
  if (a.out->ndim != 2 || a.out->sizes[0] != a.b.nbags || a.out->sizes[1] != a.dim)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: output must be [bags, dim]", call->name);
  a.o2b = call->num_outputs > 1 ? &call->outputs[1] : NULL;
  a.bsize = call->num_outputs > 2 ? &call->outputs[2] : NULL;
  a.maxi = call->num_outputs > 3 ? &call->outputs[3] : NULL;
  for (const tpurt_tensor_t* t = a.bsize; t; t = t == a.bsize ? a.maxi : NULL) /* entries past the bags */
    if (t->ndim == 1)
      for (int64_t k = a.b.nbags; k < t->sizes[0]; ++k) tpurt_nn_sti(t, k * t->strides[0], 0);
  if (a.b.nbags == 0) return TPURT_OK;
  int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
  a.acc = tpurt_kernel_scratch(ctx, (size_t)nt * (size_t)(a.dim + 1) * (sizeof(double) + sizeof(int64_t)));
  if (!a.acc) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", call->name);
  a.arg = (int64_t*)(a.acc + (size_t)nt * (size_t)(a.dim + 1));
  if (ref) eb_fwd_bags(&a, 0, a.b.nbags, 0);
  else tpurt_parallel_for(ctx, a.b.nbags, 1, eb_fwd_bags, &a);
  return TPURT_OK;
}

/* ---- weight backward ---- */

typedef struct eb_bwd_t {
  const tpurt_tensor_t *grad, *idx, *psw, *bsize, *maxi, *out;
  const int64_t* bag_of;    /* [n] bag of each index */
  const int64_t* freq;      /* [num_weights] occurrences, or NULL */
  int64_t n, nbags, num_weights, padding, dim;
  int mode;
} eb_bwd_t;

static void eb_bwd_cols(void* u, int64_t d0, int64_t d1, int tid) {
  const eb_bwd_t* a = u;
  const tpurt_tensor_t *g = a->grad, *o = a->out;
  int64_t gs0 = g->strides[0], gs1 = g->strides[1], os0 = o->strides[0], os1 = o->strides[1];
  for (int64_t r = 0; r < a->num_weights; ++r)
    for (int64_t d = d0; d < d1; ++d) tpurt_nn_st(o, r * os0 + d * os1, 0);
  if (a->mode == EB_MAX) {
    for (int64_t k = 0; k < a->nbags; ++k)
      for (int64_t d = d0; d < d1; ++d) {
        int64_t r = tpurt_nn_ldi(a->maxi, k * a->maxi->strides[0] + d * a->maxi->strides[1]);
        if (r < 0 || r >= a->num_weights || r == a->padding) continue; /* an empty bag */
        tpurt_nn_st(o, r * os0 + d * os1, tpurt_nn_ld(o, r * os0 + d * os1) + tpurt_nn_ld(g, k * gs0 + d * gs1));
      }
    return;
  }
  for (int64_t i = 0; i < a->n; ++i) {
    int64_t r = tpurt_nn_ldi(a->idx, i * a->idx->strides[0]), k = a->bag_of[i];
    if (r == a->padding || k < 0 || k >= a->nbags) continue;
    double scale = 1;
    if (a->mode == EB_MEAN) {
      int64_t c = tpurt_nn_ldi(a->bsize, k * a->bsize->strides[0]);
      scale = c > 0 ? 1.0 / (double)c : 0;
    }
    if (a->psw) scale *= tpurt_nn_ld(a->psw, i * a->psw->strides[0]);
    if (a->freq) scale /= (double)a->freq[r];
    for (int64_t d = d0; d < d1; ++d)
      tpurt_nn_st(o, r * os0 + d * os1, tpurt_nn_ld(o, r * os0 + d * os1) + tpurt_nn_ld(g, k * gs0 + d * gs1) * scale);
  }
}

/* _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
 *                         scale_grad_by_freq, mode, sparse, per_sample_weights?, padding_idx)
 * _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
 *                               scale_grad_by_freq, mode, per_sample_weights?, padding_idx) */
static tpurt_status_t eb_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool dense, bool ref) {
  int sh = dense ? -1 : 0; /* the dense form has no offsets argument */
  const tpurt_tensor_t *g = tpurt_arg_tensor(call, 0), *idx = tpurt_arg_tensor(call, 1);
  const tpurt_tensor_t* offs = dense ? NULL : tpurt_arg_tensor(call, 2);
  const tpurt_tensor_t* o2b = tpurt_arg_tensor(call, 3 + sh);
  eb_bwd_t a = {g, idx, tpurt_arg_tensor(call, dense ? 8 : 10), tpurt_arg_tensor(call, 4 + sh),
                tpurt_arg_tensor(call, 5 + sh)};
  if (!g || !idx || !a.bsize || !a.maxi || call->num_outputs < 1 || (!dense && !offs))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing tensor arguments", call->name);
  if (!dense && tpurt_arg_int(call, 9, 0))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: sparse gradients are not supported on the device", call->name);
  a.out = &call->outputs[0];
  a.num_weights = tpurt_arg_int(call, 6 + sh, 0);
  bool by_freq = tpurt_arg_int(call, 7 + sh, 0) != 0;
  a.mode = (int)tpurt_arg_int(call, 8 + sh, EB_SUM);
  a.padding = tpurt_arg_int(call, dense ? 9 : 11, -1);
  if (g->ndim != 2 || a.out->ndim != 2 || a.out->sizes[0] != a.num_weights || a.out->sizes[1] != g->sizes[1])
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: grad must be [bags, dim] and the result [num_weights, dim]", call->name);
  if (!tpurt_dtype_is_floating(g->dtype) || !tpurt_dtype_is_floating(a.out->dtype))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for %s", call->name, tpurt_dtype_name(g->dtype));
  a.nbags = g->sizes[0], a.dim = g->sizes[1];
  bags_t b = {idx, offs ? offs : idx};
  b.num_weights = a.num_weights;
  if (idx->ndim != 1 || !is_index(idx->dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: indices must be a 1-D int32/int64 tensor", call->name);
  a.n = idx->sizes[0];
  int64_t* bag_of = tpurt_kernel_scratch(ctx, (size_t)(a.n + (by_freq ? 2 * a.num_weights : 0) + 1) * sizeof(int64_t));
  if (!bag_of) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", call->name);
  if (offs) {
    /* the bag of every index from the offsets (include_last_offset is implied by the bag count) */
    TPURT_RETURN_IF_ERROR(bags_check(call, &b, offs->sizes[0] == a.nbags + 1 && a.nbags > 0));
    for (int64_t i = 0; i < a.n; ++i) bag_of[i] = -1;
    for (int64_t k = 0; k < a.nbags; ++k) {
      int64_t s, e;
      bag_range(&b, k, &s, &e);
      for (int64_t i = s; i < e; ++i) bag_of[i] = k;
    }
  } else {
    if (a.mode != EB_MAX && (!o2b || tpurt_tensor_numel(o2b) != a.n))
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: offset2bag must have one entry per index", call->name);
    for (int64_t i = 0; i < a.n && a.mode != EB_MAX; ++i) {
      bag_of[i] = tpurt_nn_ldi(o2b, i * o2b->strides[0]);
      int64_t r = tpurt_nn_ldi(idx, i * idx->strides[0]);
      if (r < 0 || r >= a.num_weights)
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: index %lld out of range [0, %lld)", call->name, (long long)r,
                            (long long)a.num_weights);
    }
  }
  if (by_freq && a.mode != EB_MAX) {
    /* CPU divides the gradient of the r-th smallest distinct index by the count of the r-th
     * element of the sorted index list (counts[sorted[r]], not counts[index]: the two differ once
     * an index repeats); freq[] ends up holding that divisor per row, to match */
    int64_t *count = bag_of + a.n, *freq = count + a.num_weights;
    memset(count, 0, (size_t)a.num_weights * sizeof(int64_t));
    for (int64_t i = 0; i < a.n; ++i) count[tpurt_nn_ldi(idx, i * idx->strides[0])]++;
    int64_t rank = 0, pos_row = 0, pos_seen = 0; /* sorted[rank]: the row where the running count passes rank */
    for (int64_t r = 0; r < a.num_weights; ++r) {
      freq[r] = 1;
      if (!count[r]) continue;
      while (pos_seen + count[pos_row] <= rank) pos_seen += count[pos_row++];
      freq[r] = count[pos_row];
      ++rank;
    }
    a.freq = freq;
  }
  a.bag_of = bag_of;
  if (a.mode == EB_MAX && (a.maxi->ndim != 2 || a.maxi->sizes[0] != a.nbags))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: maximum_indices must be [bags, dim] in max mode", call->name);
  if (a.dim == 0) return TPURT_OK;
  if (ref) eb_bwd_cols(&a, 0, a.dim, 0);
  else tpurt_parallel_for(ctx, a.dim, 8, eb_bwd_cols, &a);
  return TPURT_OK;
}

/* ---- per-sample-weights backward: dot(grad[bag], weight[index]) ---- */

typedef struct eb_psw_t {
  const tpurt_tensor_t *grad, *w, *idx, *o2b, *out;
  int64_t padding, dim;
} eb_psw_t;

static void eb_psw_range(void* u, int64_t i0, int64_t i1, int tid) {
  const eb_psw_t* a = u;
  for (int64_t i = i0; i < i1; ++i) {
    int64_t r = tpurt_nn_ldi(a->idx, i * a->idx->strides[0]), k = tpurt_nn_ldi(a->o2b, i * a->o2b->strides[0]);
    double acc = 0;
    if (r != a->padding)
      for (int64_t d = 0; d < a->dim; ++d)
        acc += tpurt_nn_ld(a->grad, k * a->grad->strides[0] + d * a->grad->strides[1]) *
               tpurt_nn_ld(a->w, r * a->w->strides[0] + d * a->w->strides[1]);
    tpurt_nn_st(a->out, i * a->out->strides[0], acc);
  }
}

/* _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode, padding_idx) */
static tpurt_status_t eb_psw_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  eb_psw_t a = {tpurt_arg_tensor(call, 0), tpurt_arg_tensor(call, 1), tpurt_arg_tensor(call, 2),
                tpurt_arg_tensor(call, 4)};
  if (!a.grad || !a.w || !a.idx || !a.o2b || call->num_outputs < 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing tensor arguments", call->name);
  if (tpurt_arg_int(call, 5, EB_SUM) != EB_SUM)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: per_sample_weights is only supported for mode='sum'", call->name);
  a.out = &call->outputs[0];
  a.padding = tpurt_arg_int(call, 6, -1);
  int64_t n = tpurt_tensor_numel(a.idx);
  if (a.idx->ndim != 1 || tpurt_tensor_numel(a.o2b) != n || tpurt_tensor_numel(a.out) != n || a.w->ndim != 2 ||
      a.grad->ndim != 2 || a.grad->sizes[1] != a.w->sizes[1])
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: inconsistent shapes", call->name);
  a.dim = a.w->sizes[1];
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = tpurt_nn_ldi(a.idx, i * a.idx->strides[0]), k = tpurt_nn_ldi(a.o2b, i * a.o2b->strides[0]);
    if (r < 0 || r >= a.w->sizes[0] || k < 0 || k >= a.grad->sizes[0])
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: index %lld or bag %lld out of range", call->name, (long long)r,
                          (long long)k);
  }
  if (n == 0) return TPURT_OK;
  if (ref) eb_psw_range(&a, 0, n, 0);
  else tpurt_parallel_for(ctx, n, 256, eb_psw_range, &a);
  return TPURT_OK;
}

TPURT_NN_PAIR(embedding_bag, eb_forward(ctx, call, ref))
TPURT_NN_PAIR(embedding_bag_backward, eb_backward(ctx, call, false, ref))
TPURT_NN_PAIR(embedding_bag_dense_backward, eb_backward(ctx, call, true, ref))
TPURT_NN_PAIR(embedding_bag_psw_backward, eb_psw_backward(ctx, call, ref))
