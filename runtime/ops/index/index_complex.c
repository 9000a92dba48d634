/* Data movement on complex tensors through the real-dtype index kernels, which
 * move elements by their byte size and never look at the values: complex64
 * travels as opaque 8-byte int64 elements (the same sizes and strides), so
 * every op here takes it; complex128 travels as its (real, imaginary) float64
 * pairs, an extra trailing dim of 2, which only ops whose dims never reach
 * the last one accept (cat, flip, roll, index_select, index_copy: their dim arguments are
 * wrapped against the complex tensor's own dims first; index: its index tensors never reach it). */
#include <inttypes.h>
#include <string.h>

#include "ops/args.h"
#include "ops/index/index_common.h"
#include "ops/index/index_kernels.h"

/* The views live in kernel scratch, sized for the call: a tensor list may be of any length. */
typedef struct cxi_frame_t {
  tpurt_arg_t args[8];
  tpurt_tensor_t* views;
  const tpurt_tensor_t** list;
  int64_t dims[TPURT_MAX_DIMS], shifts[TPURT_MAX_DIMS];
  tpurt_tensor_t outs[2];
  int64_t nviews, cap;
} cxi_frame_t;

/* t as the real kernel sees it; NULL when t is complex of another dtype. */
static const tpurt_tensor_t* cxi_view(cxi_frame_t* f, const tpurt_tensor_t* t, tpurt_dtype_t cd) {
  if (!t || !tpurt_dtype_is_complex(t->dtype)) return t; /* index tensors, masks */
  if (t->dtype != cd || f->nviews >= f->cap) return NULL;
  tpurt_tensor_t* v = &f->views[f->nviews++];
  *v = *t;
  if (cd == TPURT_DTYPE_COMPLEX64) {
    v->dtype = TPURT_DTYPE_INT64;
    return v;
  }
  v->dtype = TPURT_DTYPE_FLOAT64;
  if (t->ndim == 1 && t->sizes[0] == 0) return v; /* cat's legacy empty tensor stays one that cat skips */
  if (t->ndim == 0) { /* one element: [1, 2], so a 0-d self of index_select lines up with its [1] result */
    v->ndim = 2;
    v->sizes[0] = 1, v->strides[0] = 2;
    v->sizes[1] = 2, v->strides[1] = 1;
    return v;
  }
  for (int32_t k = 0; k < t->ndim; ++k) v->strides[k] = 2 * t->strides[k];
  v->sizes[t->ndim] = 2;
  v->strides[t->ndim] = 1;
  v->ndim = t->ndim + 1;
  return v;
}

/* A cat whose list holds real tensors, or complex ones of another dtype than
 * the output: the real cat kernel takes it as it is, converting each element
 * (tpurt_dtype_convert: a real value gets a zero imaginary part), as CPU's cat
 * promotes its inputs to the result dtype. */
static bool cxi_cat_mixed(const tpurt_op_call_t* call, tpurt_dtype_t cd) {
  int32_t count;
  const tpurt_tensor_t* const* list = tpurt_arg_tensors(call, 0, &count);
  for (int32_t k = 0; list && k < count; ++k) {
    const tpurt_tensor_t* t = list[k];
    if (t && t->dtype != cd) return true; /* a legacy empty one too: the real cat skips it */
  }
  return false;
}

/* Runs `kernel` on the views. dims_arg: the argument holding dim(s) to wrap
 * for complex128 (-1: none); roll: a flattened roll (no dims) shifts twice as
 * many reals. */
static tpurt_status_t cxi_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const char* kernel,
                              bool c128_ok, int dims_arg, bool roll, bool reference) {
  const tpurt_op_def_t* def = tpurt_op_lookup(kernel);
  if (!def || call->num_outputs < 1 || call->num_outputs > 2 || call->num_args > 8)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: unexpected call for complex tensors", kernel);
  tpurt_dtype_t cd = call->outputs[0].dtype;
  if (!tpurt_dtype_is_complex(cd))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a complex output", kernel);
  if (cd == TPURT_DTYPE_COMPLEX128 && (!c128_ok || call->outputs[0].ndim >= TPURT_MAX_DIMS))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: complex128 is not supported on the tpu device", kernel);
  cxi_frame_t frame;
  cxi_frame_t* f = &frame;
  f->nviews = 0;
  int64_t listed = 0;
  for (int i = 0; i < call->num_args; ++i)
    if (call->args[i].kind == TPURT_ARG_TENSOR_LIST) listed += call->args[i].count;
  f->cap = 8 + 2 + listed;
  f->views = tpurt_kernel_scratch(ctx, (size_t)f->cap * sizeof(tpurt_tensor_t));
  f->list = tpurt_kernel_scratch(ctx, (size_t)(listed > 0 ? listed : 1) * sizeof(const tpurt_tensor_t*));
  if (!f->views || !f->list)
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch for the views of %lld tensors", kernel, (long long)listed);
  int32_t ndim = call->outputs[0].ndim;
  bool list_is_data = strcmp(kernel, "cat") == 0;
  if (list_is_data && cxi_cat_mixed(call, cd))
    return reference ? tpurt_index_r_cat(ctx, call) : tpurt_index_k_cat(ctx, call);
  for (int i = 0; i < call->num_args; ++i) {
    tpurt_arg_t a = call->args[i];
    if (a.kind == TPURT_ARG_TENSOR) {
      a.v.tensor = cxi_view(f, a.v.tensor, cd);
      if (!a.v.tensor) goto mixed;
    } else if (a.kind == TPURT_ARG_TENSOR_LIST) {
      for (int32_t k = 0; k < a.count; ++k) {
        const tpurt_tensor_t* t = a.v.tensors[k];
        /* cat's list holds data (index's holds indices): a real tensor in it would be moved as if its
         * bits were complex */
        if (list_is_data && t && !tpurt_dtype_is_complex(t->dtype) && !(t->ndim == 1 && t->sizes[0] == 0))
          goto real_data;
        f->list[k] = t ? cxi_view(f, t, cd) : NULL;
        if (a.v.tensors[k] && !f->list[k]) goto mixed;
      }
      a.v.tensors = f->list;
    } else if (i == dims_arg && cd == TPURT_DTYPE_COMPLEX128 && (a.kind == TPURT_ARG_INT || a.kind == TPURT_ARG_INT_LIST)) {
      int32_t n = a.kind == TPURT_ARG_INT ? 1 : a.count;
      if (n > TPURT_MAX_DIMS) return TPURT_STATUS(INVALID_ARGUMENT, "%s: too many dims", kernel);
      for (int32_t k = 0; k < n; ++k) {
        int64_t d = a.kind == TPURT_ARG_INT ? a.v.i : a.v.ints[k];
        int32_t range = ndim ? ndim : 1; /* a 0-d tensor takes dims -1 and 0, as PyTorch's wrap */
        if (d < -range || d >= range)
          return TPURT_STATUS(OUT_OF_RANGE, "%s: dimension %lld out of range for %d dims", kernel, (long long)d, ndim);
        f->dims[k] = d < 0 ? d + range : d;
      }
      if (a.kind == TPURT_ARG_INT) a.v.i = f->dims[0];
      else a.v.ints = f->dims;
      /* a 0-d tensor's dim 0 names no dim of it (flip and roll leave it as it is); in the pair
       * view it would name the (real, imaginary) dim */
      if (ndim == 0 && a.kind == TPURT_ARG_INT_LIST) a.count = 0;
    }
    f->args[i] = a;
  }
  if (roll && cd == TPURT_DTYPE_COMPLEX128 && call->num_args > 2 && f->args[2].kind == TPURT_ARG_INT_LIST &&
      f->args[2].count == 0 && f->args[1].kind == TPURT_ARG_INT_LIST && f->args[1].count == 1) {
    f->shifts[0] = 2 * f->args[1].v.ints[0];
    f->args[1].v.ints = f->shifts;
  }
  for (int k = 0; k < call->num_outputs; ++k) {
    const tpurt_tensor_t* o = cxi_view(f, &call->outputs[k], cd);
    if (!o) goto mixed;
    f->outs[k] = *o;
  }
  tpurt_op_call_t rc = *call;
  rc.args = f->args;
  rc.outputs = f->outs;
  return (reference ? def->reference : def->fn)(ctx, &rc);
mixed:
  return TPURT_STATUS(UNIMPLEMENTED, "%s: complex tensors of different dtypes", kernel);
real_data:
  return TPURT_STATUS(UNIMPLEMENTED, "%s: real and complex tensors mixed", kernel);
}

#define CXI_KERNELS(NAME, C128, DIMS, ROLL)                                                                  \
  static tpurt_status_t cxi_k_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {                \
    return cxi_run(ctx, call, #NAME, C128, DIMS, ROLL, false);                                               \
  }                                                                                                          \
  static tpurt_status_t cxi_r_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {                \
    return cxi_run(ctx, call, #NAME, C128, DIMS, ROLL, true);                                                \
  }
CXI_KERNELS(cat, true, 1, false)          /* (tensors, dim) */
CXI_KERNELS(flip, true, 1, false)         /* (self, dims) */
CXI_KERNELS(roll, true, 2, true)          /* (self, shifts, dims) */
CXI_KERNELS(index_select, true, 1, false) /* (self, dim, index) */
CXI_KERNELS(gather, false, -1, false)
CXI_KERNELS(take, false, -1, false)
/* (self, indices): the index tensors cover self's dims only, so the pair dim stays last in the
 * result either way (adjacent or not); a 0-d self has no pair view that lines up */
CXI_KERNELS(index, (tpurt_arg_tensor(call, 0) && tpurt_arg_tensor(call, 0)->ndim > 0), -1, false)

CXI_KERNELS(index_copy, true, 1, false)   /* (self, dim, index, source) */

/* The real (part 0) or imaginary (part 1) float64 part of complex128 t, with t's dims. */
static tpurt_tensor_t cxi_part(const tpurt_tensor_t* t, int part) {
  tpurt_tensor_t v = *t;
  v.dtype = TPURT_DTYPE_FLOAT64;
  v.data = (char*)t->data + part * sizeof(double);
  for (int32_t k = 0; k < t->ndim; ++k) v.strides[k] = 2 * t->strides[k];
  return v;
}

/* index_fill on complex128: the real index_fill on each part, with that part of the value. */
static tpurt_status_t cxi_index_fill_parts(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call,
                                           const tpurt_tensor_t* vt, bool reference) {
  const tpurt_op_def_t* def = tpurt_op_lookup("index_fill");
  if (!def) return TPURT_STATUS(UNIMPLEMENTED, "index_fill: no real kernel");
  double val[2] = {0, 0};
  if (vt && tpurt_dtype_is_complex(vt->dtype)) {
    bool c64 = vt->dtype == TPURT_DTYPE_COMPLEX64;
    val[0] = c64 ? ((const float*)vt->data)[0] : ((const double*)vt->data)[0];
    val[1] = c64 ? ((const float*)vt->data)[1] : ((const double*)vt->data)[1];
  } else {
    val[0] = vt ? tpurt_dtype_load_f64(vt->dtype, vt->data) : tpurt_arg_double(call, 3, 0.0);
  }
  for (int part = 0; part < 2; ++part) {
    tpurt_tensor_t self = cxi_part(tpurt_arg_tensor(call, 0), part), out = cxi_part(&call->outputs[0], part);
    tpurt_arg_t args[4];
    memcpy(args, call->args, sizeof(args));
    args[0].v.tensor = &self;
    args[3].kind = TPURT_ARG_DOUBLE;
    args[3].v.d = val[part];
    tpurt_op_call_t rc = *call;
    rc.args = args;
    rc.outputs = &out;
    TPURT_RETURN_IF_ERROR((reference ? def->reference : def->fn)(ctx, &rc));
  }
  return TPURT_OK;
}

/* index_fill(self, dim, index, value) on complex64: the value as a 0-d complex64 tensor, so the real
 * kernel moves its 8 bytes as one int64 element (a real Scalar gets a zero imaginary part); complex128
 * fills its two float64 parts apart. */
static tpurt_status_t cxi_index_fill(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  if (call->num_args != 4) return TPURT_STATUS(INVALID_ARGUMENT, "index_fill: expected (self, dim, index, value)");
  tpurt_arg_t args[4];
  memcpy(args, call->args, sizeof(args));
  const tpurt_tensor_t* vt = tpurt_arg_tensor(call, 3);
  if (vt && vt->ndim != 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "index_fill: only supports a 0-dimensional value tensor, got %d dims",
                        vt->ndim);
  const tpurt_tensor_t* self = tpurt_arg_tensor(call, 0);
  if (self && self->dtype == TPURT_DTYPE_COMPLEX128 && call->num_outputs == 1)
    return cxi_index_fill_parts(ctx, call, vt, reference);
  float val[2] = {0, 0};
  tpurt_tensor_t v0 = {.data = val, .dtype = TPURT_DTYPE_COMPLEX64, .ndim = 0};
  if (!vt || vt->dtype != TPURT_DTYPE_COMPLEX64) {
    if (vt && vt->dtype == TPURT_DTYPE_COMPLEX128) {
      val[0] = (float)((const double*)vt->data)[0];
      val[1] = (float)((const double*)vt->data)[1];
    } else {
      val[0] = (float)(vt ? tpurt_dtype_load_f64(vt->dtype, vt->data) : tpurt_arg_double(call, 3, 0.0));
    }
    args[3].kind = TPURT_ARG_TENSOR;
    args[3].v.tensor = &v0;
  }
  tpurt_op_call_t rc = *call;
  rc.args = args;
  return cxi_run(ctx, &rc, "index_fill", false, 1, false, reference);
}
static tpurt_status_t cxi_k_index_fill(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return cxi_index_fill(ctx, call, false);
}
static tpurt_status_t cxi_r_index_fill(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return cxi_index_fill(ctx, call, true);
}

/* Ops that move or add elements one for one: the real kernel run twice, on the real parts then on the
 * imaginary parts (each a float32/float64 view with the complex tensor's dims and twice its strides).
 * Moving and summing complex numbers is moving and summing their parts, so put_ (accumulate or not),
 * masked_scatter and take of both complex dtypes are the real kernels' results, part by part. Every
 * complex tensor of the call must have the output's dtype (CPU requires that of these ops). */
static tpurt_tensor_t cxi_part_any(const tpurt_tensor_t* t, int part) {
  if (t->dtype == TPURT_DTYPE_COMPLEX128) return cxi_part(t, part);
  tpurt_tensor_t v = *t;
  v.dtype = TPURT_DTYPE_FLOAT32;
  v.data = (char*)t->data + part * sizeof(float);
  for (int32_t k = 0; k < t->ndim; ++k) v.strides[k] = 2 * t->strides[k];
  return v;
}

static tpurt_status_t cxi_by_parts(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const char* kernel,
                                   bool reference) {
  const tpurt_op_def_t* def = tpurt_op_lookup(kernel);
  if (!def || call->num_outputs != 1 || call->num_args > 8)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: unexpected call for complex tensors", kernel);
  tpurt_dtype_t cd = call->outputs[0].dtype;
  if (!tpurt_dtype_is_complex(cd)) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a complex output", kernel);
  for (int i = 0; i < call->num_args; ++i) {
    const tpurt_tensor_t* t = call->args[i].kind == TPURT_ARG_TENSOR ? call->args[i].v.tensor : NULL;
    if (t && tpurt_dtype_is_complex(t->dtype) && t->dtype != cd)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected every complex tensor to be %s, got %s", kernel,
                          tpurt_dtype_name(cd), tpurt_dtype_name(t->dtype));
    if (t && !tpurt_dtype_is_complex(t->dtype) && i != 1) /* arg 1: the index or mask */
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected %s data, got %s", kernel, tpurt_dtype_name(cd),
                          tpurt_dtype_name(t->dtype));
  }
  for (int part = 0; part < 2; ++part) {
    tpurt_arg_t args[8];
    tpurt_tensor_t views[8];
    for (int i = 0; i < call->num_args; ++i) {
      args[i] = call->args[i];
      const tpurt_tensor_t* t = args[i].kind == TPURT_ARG_TENSOR ? args[i].v.tensor : NULL;
      if (t && tpurt_dtype_is_complex(t->dtype)) {
        views[i] = cxi_part_any(t, part);
        args[i].v.tensor = &views[i];
      }
    }
    tpurt_tensor_t out = cxi_part_any(&call->outputs[0], part);
    tpurt_op_call_t rc = *call;
    rc.args = args;
    rc.outputs = &out;
    TPURT_RETURN_IF_ERROR((reference ? def->reference : def->fn)(ctx, &rc));
  }
  return TPURT_OK;
}
#define CXI_PART_KERNELS(NAME)                                                                 \
  static tpurt_status_t cxi_k_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { \
    return cxi_by_parts(ctx, call, #NAME, false);                                              \
  }                                                                                            \
  static tpurt_status_t cxi_r_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { \
    return cxi_by_parts(ctx, call, #NAME, true);                                               \
  }
CXI_PART_KERNELS(put)            /* (self, index, source, accumulate) */
CXI_PART_KERNELS(masked_scatter) /* (self, mask, source) */
/* take: complex64 moves 8-byte elements (above); complex128 by parts */
static tpurt_status_t cxi_k_take_any(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  if (call->num_outputs == 1 && call->outputs[0].dtype == TPURT_DTYPE_COMPLEX128)
    return cxi_by_parts(ctx, call, "take", false);
  return cxi_k_take(ctx, call);
}
static tpurt_status_t cxi_r_take_any(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  if (call->num_outputs == 1 && call->outputs[0].dtype == TPURT_DTYPE_COMPLEX128)
    return cxi_by_parts(ctx, call, "take", true);
  return cxi_r_take(ctx, call);
}

/* scatter(self, dim, index, src|value [, reduce]) on complex tensors: out = self, then the element of
 * out at each index element's position (its dim coordinate replaced by the index value) takes, adds or
 * multiplies (reduce "add" / "multiply") src's element at that position, or the one value, in complex
 * arithmetic of the tensors' precision and in row-major index order, as CPU's loop. All indices are
 * checked before anything is written. */
static tpurt_status_t cxi_scatter(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, 4, 1));
  const tpurt_tensor_t* s0 = tpurt_arg_tensor(call, 0);
  const tpurt_tensor_t* i0 = tpurt_arg_tensor(call, 2);
  const tpurt_tensor_t* v0 = tpurt_arg_tensor(call, 3);
  tpurt_dtype_t cd = call->outputs[0].dtype;
  if (!s0 || !i0 || s0->dtype != cd || !tpurt_dtype_is_complex(cd))
    return TPURT_STATUS(INVALID_ARGUMENT, "scatter: expected complex self and out of one dtype and an index tensor");
  if (i0->dtype != TPURT_DTYPE_INT64)
    return TPURT_STATUS(INVALID_ARGUMENT, "scatter(): Expected dtype int64 for index");
  int mode = 0; /* 0: copy, 1: add, 2: multiply */
  const char* rs = tpurt_arg_string(call, 4, NULL);
  if (rs && !strcmp(rs, "add")) mode = 1;
  else if (rs && !strcmp(rs, "multiply")) mode = 2;
  else if (rs) return TPURT_STATUS(INVALID_ARGUMENT, "reduce argument must be either add or multiply, got %s", rs);
  tpurt_tensor_t self, idx, out, src;
  tpurt_index_as_1d(s0, &self);
  tpurt_index_as_1d(i0, &idx);
  tpurt_index_as_1d(&call->outputs[0], &out);
  int32_t dim;
  TPURT_RETURN_IF_ERROR(tpurt_index_wrap_dim("scatter", tpurt_arg_int(call, 1, 0), s0->ndim, &dim));
  /* the value: a Scalar (a complex one arrives as a 0-d tensor), or a 0-d src; else src elements */
  double val[2] = {0, 0};
  bool scalar = !v0 || v0->ndim == 0;
  if (!v0) {
    val[0] = tpurt_arg_double(call, 3, 0.0);
  } else if (v0->ndim == 0) {
    val[0] = tpurt_dtype_load_f64(v0->dtype, v0->data);
    if (v0->dtype == TPURT_DTYPE_COMPLEX64) val[1] = ((const float*)v0->data)[1];
    if (v0->dtype == TPURT_DTYPE_COMPLEX128) val[1] = ((const double*)v0->data)[1];
  } else {
    if (v0->dtype != cd)
      return TPURT_STATUS(INVALID_ARGUMENT, "scatter(): Expected self.dtype to be equal to src.dtype");
    tpurt_index_as_1d(v0, &src);
  }
  int64_t n = tpurt_tensor_numel(&idx);
  if (n > 0 && (idx.ndim != self.ndim || (!scalar && src.ndim != idx.ndim)))
    return TPURT_STATUS(INVALID_ARGUMENT, "Index tensor must have the same number of dimensions as self tensor");
  for (int32_t d = 0; n > 0 && d < idx.ndim; ++d) {
    if ((d != dim && idx.sizes[d] > self.sizes[d]) || (!scalar && idx.sizes[d] > src.sizes[d]))
      return TPURT_STATUS(INVALID_ARGUMENT, "Size does not match at dimension %d: index %" PRId64 ", self %" PRId64,
                          d, idx.sizes[d], self.sizes[d]);
  }
  int64_t* vals = tpurt_kernel_scratch(ctx, (size_t)(n + 1) * sizeof(int64_t));
  if (!vals) return TPURT_STATUS(RESOURCE_EXHAUSTED, "scatter: no scratch for %" PRId64 " indices", n);
  for (int64_t l = 0; l < n; ++l) {
    int64_t v = ((const int64_t*)idx.data)[tpurt_index_offset(&idx, l)];
    if (v < 0 || v >= self.sizes[dim])
      return TPURT_STATUS(INVALID_ARGUMENT, "index %" PRId64 " is out of bounds for dimension %d with size %" PRId64,
                          v, dim, self.sizes[dim]);
    vals[l] = v;
  }
  bool c64 = cd == TPURT_DTYPE_COMPLEX64;
  size_t es = tpurt_dtype_size(cd);
  int64_t total = tpurt_tensor_numel(&out);
  if (out.data != self.data || memcmp(out.strides, self.strides, sizeof(int64_t) * (size_t)out.ndim) != 0)
    for (int64_t l = 0; l < total; ++l)
      memcpy((char*)out.data + tpurt_index_offset(&out, l) * (int64_t)es,
             (const char*)self.data + tpurt_index_offset(&self, l) * (int64_t)es, es);
  for (int64_t l = 0; l < n; ++l) {
    int64_t rem = l, oo = 0, so = 0;
    for (int32_t d = idx.ndim - 1; d >= 0; --d) {
      int64_t p = rem % idx.sizes[d];
      rem /= idx.sizes[d];
      oo += (d == dim ? vals[l] : p) * out.strides[d];
      if (!scalar) so += p * src.strides[d];
    }
    if (c64) {
      float* o = (float*)out.data + 2 * oo;
      float br = scalar ? (float)val[0] : ((const float*)src.data)[2 * so];
      float bi = scalar ? (float)val[1] : ((const float*)src.data)[2 * so + 1];
      float ar = o[0], ai = o[1];
      if (mode == 0) o[0] = br, o[1] = bi;
      else if (mode == 1) o[0] = ar + br, o[1] = ai + bi;
      else o[0] = ar * br - ai * bi, o[1] = ar * bi + ai * br;
    } else {
      double* o = (double*)out.data + 2 * oo;
      double br = scalar ? val[0] : ((const double*)src.data)[2 * so];
      double bi = scalar ? val[1] : ((const double*)src.data)[2 * so + 1];
      double ar = o[0], ai = o[1];
      if (mode == 0) o[0] = br, o[1] = bi;
      else if (mode == 1) o[0] = ar + br, o[1] = ai + bi;
      else o[0] = ar * br - ai * bi, o[1] = ar * bi + ai * br;
    }
  }
  return TPURT_OK;
}

/* complex128 reaches only the ops that take it (above); complex64 all. */
#define CXI(NAME, DT) {"complex::" #NAME, cxi_k_##NAME, cxi_r_##NAME, 0, DT, TPURT_LAYOUT_STRIDED}
const tpurt_op_def_t tpurt_ops_index_complex[] = {
    CXI(cat, TPURT_DTYPES_ALL | TPURT_DTYPES_UINT_WIDE), /* a list may start with a real tensor */
    CXI(flip, TPURT_DTYPES_COMPLEX),
    CXI(roll, TPURT_DTYPES_COMPLEX),
    CXI(index_select, TPURT_DTYPES_COMPLEX),
    CXI(gather, TPURT_DTYPE_BIT(COMPLEX64)),
    {"complex::take", cxi_k_take_any, cxi_r_take_any, 0, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::scatter", cxi_scatter, cxi_scatter, TPURT_OP_ALIAS_SAFE, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::put", cxi_k_put, cxi_r_put, TPURT_OP_ALIAS_SAFE, TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::masked_scatter", cxi_k_masked_scatter, cxi_r_masked_scatter, TPURT_OP_ALIAS_SAFE, TPURT_DTYPES_COMPLEX,
     TPURT_LAYOUT_STRIDED},
    CXI(index, TPURT_DTYPES_COMPLEX),
    CXI(index_copy, TPURT_DTYPES_COMPLEX),
    CXI(index_fill, TPURT_DTYPES_COMPLEX),
    /* the real kernels themselves: the index engine accumulates complex elements too (sum, product,
     * mean; index_common.c's complex rows) */
    {"complex::scatter_add", tpurt_index_k_scatter_add, tpurt_index_r_scatter_add, TPURT_OP_ALIAS_SAFE,
     TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::scatter_reduce", tpurt_index_k_scatter_reduce, tpurt_index_r_scatter_reduce, TPURT_OP_ALIAS_SAFE,
     TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    {"complex::index_reduce", tpurt_index_k_index_reduce, tpurt_index_r_index_reduce, TPURT_OP_ALIAS_SAFE,
     TPURT_DTYPES_COMPLEX, TPURT_LAYOUT_STRIDED},
    TPURT_OP_TABLE_END,
};
