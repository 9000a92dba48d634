/* Advanced indexing: aten::index.Tensor (x[i, None, j]) and
 * aten::_index_put_impl_ / index_put_ (x[i, j] = v, accumulate or not).
 * Bool/uint8 masks in the index list are expanded here to coordinates (as
 * PyTorch's expandTensors does), so the PyTorch layer only has to size the
 * output. */
#include <inttypes.h>
#include <stdlib.h>

#include "ops/index/index_common.h"
#include "ops/index/index_kernels.h"

/* A resolved index list: per self dim either "sliced" or indexed by an int64
 * array over the broadcast shape B. */
typedef struct {
  int32_t D;                       /* self ndim */
  bool indexed[TPURT_MAX_DIMS];
  int32_t nb;                      /* ndim of B */
  int64_t bsizes[TPURT_MAX_DIMS];
  int64_t nB;                      /* numel of B */
  bool adjacent;                   /* indexed dims are contiguous: result keeps them in place */
  int32_t first;                   /* first indexed dim */
  int32_t rnd;                     /* result ndim */
  int64_t rsizes[TPURT_MAX_DIMS];  /* natural result shape */
  int64_t* off;                    /* [nB] element offsets into self (sum idx*stride) */
} adv_plan_t;

/* Expands bool masks and builds the plan from the indices (a Tensor?[] in
 * args[list_arg]); `off` is computed against `strides` (those of the tensor
 * that is read or written). */
static tpurt_status_t adv_plan(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const char* op,
                               const tpurt_tensor_t* self, int list_arg, const int64_t* strides, adv_plan_t* p) {
  memset(p, 0, sizeof(*p));
  int32_t count;
  const tpurt_tensor_t* const* list = tpurt_arg_tensors(call, list_arg, &count);
  if (!list) return TPURT_STATUS(INVALID_ARGUMENT, "%s: indices must be a list of tensors", op);
  p->D = self->ndim;
  /* per self dim: the index tensor (NULL = sliced); masks become 1-d coords */
  const tpurt_tensor_t* per_dim[TPURT_MAX_DIMS] = {0};
  tpurt_tensor_t mask_coords[TPURT_MAX_DIMS];
  int32_t d = 0;
  for (int32_t i = 0; i < count; ++i) {
    const tpurt_tensor_t* t = list[i];
    if (t && (t->dtype == TPURT_DTYPE_BOOL || t->dtype == TPURT_DTYPE_UINT8)) {
      int32_t k = t->ndim;
      if (k == 0) return TPURT_STATUS(UNIMPLEMENTED, "%s: 0-d boolean index", op);
      if (d + k > self->ndim)
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: too many indices for tensor of dimension %d", op, self->ndim);
      for (int32_t e = 0; e < k; ++e)
        if (t->sizes[e] != self->sizes[d + e])
          return TPURT_STATUS(INVALID_ARGUMENT, "%s: the shape of the mask at index %d does not match the shape "
                              "of the indexed tensor (mask size %" PRId64 " vs %" PRId64 " at dim %d)",
                              op, e, t->sizes[e], self->sizes[d + e], d + e);
      tpurt_index_nz_t nz;
      int64_t cnt;
      TPURT_RETURN_IF_ERROR(tpurt_index_nz_count(ctx, t, &nz, &cnt));
      int64_t* coords = tpurt_kernel_scratch(ctx, (size_t)(cnt * k + 1) * sizeof(int64_t));
      if (!coords) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch for mask coordinates", op);
      /* coordinate e of the c-th true element at coords[e*cnt + c] */
      tpurt_index_nz_write(ctx, &nz, coords, 1, cnt, cnt);
      for (int32_t e = 0; e < k; ++e, ++d) {
        tpurt_index_make_contig(&mask_coords[d], coords + e * cnt, TPURT_DTYPE_INT64, 1, &cnt);
        per_dim[d] = &mask_coords[d];
      }
    } else {
      if (d >= self->ndim)
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: too many indices for tensor of dimension %d", op, self->ndim);
      if (t && !tpurt_index_is_index_dtype(t->dtype))
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: tensors used as indices must be long, int, byte or bool, got %s",
                            op, tpurt_dtype_name(t->dtype));
      per_dim[d++] = t;
    }
  }
  /* broadcast shape of the index tensors */
  int32_t nidx = 0, last = -1;
  p->first = -1;
  for (int32_t e = 0; e < p->D; ++e) {
    const tpurt_tensor_t* t = per_dim[e];
    if (!t) continue;
    p->indexed[e] = true;
    if (p->first < 0) p->first = e;
    p->adjacent = (nidx == 0) || (last == e - 1 && p->adjacent);
    last = e;
    ++nidx;
    if (t->ndim > p->nb) {
      int32_t grow = t->ndim - p->nb;
      memmove(p->bsizes + grow, p->bsizes, sizeof(int64_t) * p->nb);
      for (int32_t g = 0; g < grow; ++g) p->bsizes[g] = 1;
      p->nb = t->ndim;
    }
    for (int32_t a = t->ndim - 1, b = p->nb - 1; a >= 0; --a, --b) {
      if (p->bsizes[b] == 1) p->bsizes[b] = t->sizes[a];
      else if (t->sizes[a] != 1 && t->sizes[a] != p->bsizes[b])
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: shape mismatch: indexing tensors could not be broadcast together", op);
    }
  }
  if (nidx == 0) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected at least one non-None index", op);
  p->nB = 1;
  for (int32_t b = 0; b < p->nb; ++b) p->nB *= p->bsizes[b];
  /* natural result shape */
  p->rnd = 0;
  if (p->adjacent) {
    for (int32_t e = 0; e < p->first; ++e) p->rsizes[p->rnd++] = self->sizes[e];
    for (int32_t b = 0; b < p->nb; ++b) p->rsizes[p->rnd++] = p->bsizes[b];
    for (int32_t e = p->first; e < p->D; ++e)
      if (!p->indexed[e]) p->rsizes[p->rnd++] = self->sizes[e];
  } else {
    for (int32_t b = 0; b < p->nb; ++b) p->rsizes[p->rnd++] = p->bsizes[b];
    for (int32_t e = 0; e < p->D; ++e)
      if (!p->indexed[e]) p->rsizes[p->rnd++] = self->sizes[e];
  }
  if (p->rnd > TPURT_MAX_DIMS) return TPURT_STATUS(UNIMPLEMENTED, "%s: result has more than 16 dims", op);
  /* offsets: sum over indexed dims of wrapped index * stride */
  int64_t* buf = tpurt_kernel_scratch(ctx, (size_t)(2 * p->nB + 1) * sizeof(int64_t));
  if (!buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch for %" PRId64 " indices", op, p->nB);
  p->off = buf;
  int64_t* tmp = buf + p->nB;
  memset(p->off, 0, (size_t)p->nB * sizeof(int64_t));
  for (int32_t e = 0; e < p->D; ++e) {
    if (!per_dim[e]) continue;
    TPURT_RETURN_IF_ERROR(tpurt_index_load(op, per_dim[e], p->nb, p->bsizes, e, self->sizes[e], true, tmp));
    for (int64_t b = 0; b < p->nB; ++b) p->off[b] += tmp[b] * strides[e];
  }
  return TPURT_OK;
}

/* The result dim of B dim b and of sliced self dim e. */
static int32_t adv_rdim_b(const adv_plan_t* p, int32_t b) { return p->adjacent ? p->first + b : b; }
static int32_t adv_rdim_s(const adv_plan_t* p, int32_t e) {
  int32_t k = 0; /* number of sliced dims before e */
  for (int32_t f = 0; f < e; ++f) k += !p->indexed[f];
  if (!p->adjacent) return p->nb + k;
  return e < p->first ? k : k + p->nb;
}

static tpurt_status_t check_result_shape(const char* op, const adv_plan_t* p, const tpurt_tensor_t* t,
                                         const char* what) {
  bool ok = t->ndim == p->rnd;
  for (int32_t r = 0; ok && r < p->rnd; ++r) ok = t->sizes[r] == p->rsizes[r];
  if (!ok) return TPURT_STATUS(INVALID_ARGUMENT, "%s: %s has %d dims / wrong sizes for the indexing result of %d dims",
                               op, what, t->ndim, p->rnd);
  return TPURT_OK;
}

/* ---- index.Tensor ---- */

static tpurt_status_t index_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 2, 1));
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (!self) return TPURT_STATUS(INVALID_ARGUMENT, "index: self must be a tensor");
  if (out->dtype != self->dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "index: out dtype %s differs from self dtype %s", tpurt_dtype_name(out->dtype),
                        tpurt_dtype_name(self->dtype));
  /* No element to gather, no index read: PyTorch CPU does not check the
   * indices of an empty result either (x[idx] of a (3, 0) tensor with idx 5). */
  if (tpurt_tensor_numel(out) == 0) return TPURT_OK;
  adv_plan_t p;
  TPURT_RETURN_IF_ERROR(adv_plan(ctx, call, "index", self, 1, self->strides, &p));
  TPURT_RETURN_IF_ERROR(check_result_shape("index", &p, out, "out"));
  size_t es = tpurt_dtype_size(self->dtype);
  if (reference) {
    /* obviously-correct loop over result elements */
    int64_t n = tpurt_tensor_numel(out);
    for (int64_t l = 0; l < n; ++l) {
      int64_t rpos[TPURT_MAX_DIMS], rem = l;
      for (int32_t r = p.rnd - 1; r >= 0; --r) { rpos[r] = rem % p.rsizes[r]; rem /= p.rsizes[r]; }
      int64_t b = 0;
      for (int32_t k = 0; k < p.nb; ++k) b = b * p.bsizes[k] + rpos[adv_rdim_b(&p, k)];
      int64_t so = p.off[b];
      for (int32_t e = 0; e < p.D; ++e)
        if (!p.indexed[e]) so += rpos[adv_rdim_s(&p, e)] * self->strides[e];
      memcpy((char*)out->data + tpurt_index_offset(out, l) * (int64_t)es, (const char*)self->data + so * (int64_t)es, es);
    }
    return TPURT_OK;
  }
  /* walk the result in its natural order; ops: out, self (sliced dims), off[] (B dims) */
  int64_t bst[TPURT_MAX_DIMS];
  for (int32_t b = p.nb - 1, s = 1; b >= 0; --b) { bst[b] = s; s *= p.bsizes[b]; }
  int32_t kind[TPURT_MAX_DIMS]; /* per result dim: B dim index, or -(self dim)-1 */
  for (int32_t b = 0; b < p.nb; ++b) kind[adv_rdim_b(&p, b)] = b;
  for (int32_t e = 0; e < p.D; ++e)
    if (!p.indexed[e]) kind[adv_rdim_s(&p, e)] = -e - 1;
  tpurt_index_space_t sp;
  tpurt_index_space_init(&sp, 3);
  for (int32_t r = 0; r < p.rnd; ++r) {
    int64_t st[3] = {out->strides[r], 0, 0};
    if (kind[r] >= 0) st[2] = bst[kind[r]];
    else st[1] = self->strides[-kind[r] - 1];
    tpurt_index_space_push(&sp, p.rsizes[r], st);
  }
  tpurt_index_space_coalesce(&sp);
  tpurt_index_gather_run(ctx, &sp, (char*)out->data, (const char*)self->data, p.off, es);
  return TPURT_OK;
}

tpurt_status_t tpurt_index_k_index(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return index_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_index(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return index_impl(ctx, call, true);
}

/* ---- index_put ---- */

static tpurt_status_t index_put_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 3, 1));
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* values = tpurt_arg_tensor(call, 2);
  const tpurt_tensor_t* out = &call->outputs[0];
  bool accumulate = tpurt_arg_bool(call, 3, false);
  if (!self || !values) return TPURT_STATUS(INVALID_ARGUMENT, "index_put: self and values must be tensors");
  if (out->dtype != self->dtype || out->ndim != self->ndim)
    return TPURT_STATUS(INVALID_ARGUMENT, "index_put: out does not match self");
  adv_plan_t p;
  /* offsets computed against out's strides: out is what we write */
  TPURT_RETURN_IF_ERROR(adv_plan(ctx, call, "index_put", self, 1, out->strides, &p));
  int64_t vst[TPURT_MAX_DIMS];
  if (!tpurt_index_broadcast_strides(values, p.rnd, p.rsizes, vst))
    return TPURT_STATUS(INVALID_ARGUMENT, "index_put: shape mismatch: value tensor of %d dims cannot be broadcast to "
                        "indexing result of %d dims", values->ndim, p.rnd);
  tpurt_tensor_t vals = *values;
  /* values must not change under us (may alias out) and must be out's dtype */
  if (values->dtype != out->dtype || tpurt_index_may_overlap(values, out)) {
    int64_t n = tpurt_tensor_numel(values);
    void* buf = tpurt_kernel_scratch(ctx, (size_t)(n + 1) * tpurt_dtype_size(out->dtype));
    if (!buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "index_put: no scratch for values");
    tpurt_index_make_contig(&vals, buf, out->dtype, values->ndim, values->sizes);
    TPURT_RETURN_IF_ERROR(tpurt_index_copy(ctx, &vals, values));
    tpurt_index_broadcast_strides(&vals, p.rnd, p.rsizes, vst);
  }
  TPURT_RETURN_IF_ERROR(tpurt_index_copy(ctx, out, self));
  int64_t rn = 1;
  for (int32_t r = 0; r < p.rnd; ++r) rn *= p.rsizes[r];
  if (rn == 0) return TPURT_OK;
  tpurt_index_red_t red = accumulate ? TPURT_INDEX_RED_SUM : TPURT_INDEX_RED_COPY;
  size_t es = tpurt_dtype_size(out->dtype);
  if (reference) {
    tpurt_index_accum_fn_t fn = tpurt_index_accum_fn(out->dtype, red);
    for (int64_t l = 0; l < rn; ++l) { /* result order = serial b order per destination */
      int64_t rpos[TPURT_MAX_DIMS], rem = l;
      for (int32_t r = p.rnd - 1; r >= 0; --r) { rpos[r] = rem % p.rsizes[r]; rem /= p.rsizes[r]; }
      int64_t b = 0, vo = 0;
      for (int32_t k = 0; k < p.nb; ++k) b = b * p.bsizes[k] + rpos[adv_rdim_b(&p, k)];
      for (int32_t r = 0; r < p.rnd; ++r) vo += rpos[r] * vst[r];
      int64_t oo = p.off[b];
      for (int32_t e = 0; e < p.D; ++e)
        if (!p.indexed[e]) oo += rpos[adv_rdim_s(&p, e)] * out->strides[e];
      fn((char*)out->data + oo * (int64_t)es, (const char*)vals.data + vo * (int64_t)es, 1.0, 1);
    }
    return TPURT_OK;
  }
  /* J = the flattened B dims; needs values' strides over B to flatten */
  int64_t vb[TPURT_MAX_DIMS] = {0};
  for (int32_t b = 0; b < p.nb; ++b) vb[b] = vst[adv_rdim_b(&p, b)];
  int64_t vj = p.nb ? vb[p.nb - 1] : 0;
  bool flat = true;
  for (int32_t b = p.nb - 2; b >= 0; --b) {
    int64_t expect = vb[b + 1] * p.bsizes[b + 1];
    if (p.bsizes[b] != 1 && vb[b] != expect) flat = false;
  }
  if (!flat) {
    /* materialize values at the result shape, contiguous */
    void* buf = tpurt_kernel_scratch(ctx, (size_t)rn * es);
    if (!buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "index_put: no scratch for broadcast values");
    tpurt_tensor_t full;
    tpurt_index_make_contig(&full, buf, out->dtype, p.rnd, p.rsizes);
    tpurt_tensor_t bv = vals;
    bv.ndim = p.rnd;
    memcpy(bv.sizes, p.rsizes, sizeof(int64_t) * p.rnd);
    memcpy(bv.strides, vst, sizeof(int64_t) * p.rnd);
    TPURT_RETURN_IF_ERROR(tpurt_index_copy(ctx, &full, &bv));
    vals = full;
    memcpy(vst, full.strides, sizeof(int64_t) * p.rnd);
    vj = p.nb ? vst[adv_rdim_b(&p, p.nb - 1)] : 0;
    /* B dims of a contiguous result in the non-adjacent layout lead, so they
     * flatten; in the adjacent layout they are consecutive dims: also flat */
  }
  tpurt_index_scatter_t job;
  tpurt_index_scatter_init(&job, out->dtype, red);
  job.out = (char*)out->data;
  job.src = (const char*)vals.data;
  job.off = p.off;
  job.J = p.nB;
  job.src_j = vj;
  job.off_j = 1;
  job.out_t = out;
  tpurt_index_space_init(&job.sp, 3);
  for (int32_t e = 0; e < p.D; ++e) {
    if (p.indexed[e]) continue;
    int64_t st[3] = {out->strides[e], vst[adv_rdim_s(&p, e)], 0};
    tpurt_index_space_push(&job.sp, self->sizes[e], st);
  }
  tpurt_index_space_coalesce(&job.sp);
  return tpurt_index_scatter_run(ctx, &job);
}

tpurt_status_t tpurt_index_k_index_put(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return index_put_impl(ctx, call, false);
}
tpurt_status_t tpurt_index_r_index_put(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return index_put_impl(ctx, call, true);
}
