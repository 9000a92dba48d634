/* Matmul-family kernels (mm, addmm, bmm, baddbmm, addbmm, addmv, mv, dot,
 * vdot, addr, _addmm_activation, _int_mm, trace): each turns its tensors into
 * one strided tpurt_gemm_t and runs it; the reference variants run the same
 * descriptor through tpurt_gemm_reference. */
#include <math.h>

#include "ops/linalg/gemm.h"
#include "ops/linalg/linalg.h"

static tpurt_status_t out_arg(const tpurt_op_call_t* call, int i, int ndim,
                              const tpurt_tensor_t** out) {
  if (i >= call->num_outputs)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing output %d", call->name, i);
  const tpurt_tensor_t* t = &call->outputs[i];
  if (ndim >= 0 && t->ndim != ndim)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: output must be %d-D, got %d-D", call->name, ndim,
                        (int)t->ndim);
  *out = t;
  return TPURT_OK;
}

/* Stride of `t` for output dim `d` of an `nd`-D output, with broadcasting
 * (trailing alignment; a missing or size-1 dim gets stride 0). */
static int64_t bstride(const tpurt_tensor_t* t, int nd, int d, int64_t out_size) {
  int td = d - (nd - t->ndim);
  if (td < 0 || t->sizes[td] == 1) return 0;
  return t->strides[td];
}

static tpurt_status_t check_bcast(const char* op, const tpurt_tensor_t* self,
                                  const tpurt_tensor_t* out) {
  if (self->ndim > out->ndim)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: self has %d dims, result %d", op, (int)self->ndim,
                        (int)out->ndim);
  for (int d = 0; d < self->ndim; ++d) {
    int64_t s = self->sizes[d], o = out->sizes[d + out->ndim - self->ndim];
    if (s != 1 && s != o)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: self size %lld at dim %d does not broadcast to %lld",
                          op, (long long)s, d, (long long)o);
  }
  return TPURT_OK;
}

static tpurt_status_t run(tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g, bool ref) {
  return ref ? tpurt_gemm_reference(g) : tpurt_gemm(ctx, g, NULL);
}

static tpurt_status_t check_dtypes(const char* op, tpurt_dtype_t a, tpurt_dtype_t b,
                                   tpurt_dtype_t out) {
  if (a != b || a != out)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected one dtype, got %s, %s and output %s", op,
                        tpurt_dtype_name(a), tpurt_dtype_name(b), tpurt_dtype_name(out));
  return TPURT_OK;
}

/* out[(b,) m, n] = beta * self + alpha * A @ B, for 2-D or batched 3-D A/B/out.
 * self NULL: beta is 0. */
static tpurt_status_t matmul_into(tpurt_kernel_ctx_t* ctx, const char* op,
                                  const tpurt_tensor_t* out, const tpurt_tensor_t* self,
                                  const tpurt_tensor_t* A, const tpurt_tensor_t* B, double beta,
                                  double alpha, bool ref) {
  int nd = A->ndim; /* 2 or 3 */
  int o = nd - 2;
  if (B->ndim != nd || out->ndim != nd)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: operands must all be %d-D", op, nd);
  int64_t batch = nd == 3 ? A->sizes[0] : 1;
  int64_t m = A->sizes[o], k = A->sizes[o + 1], n = B->sizes[o + 1];
  if (B->sizes[o] != k || out->sizes[o] != m || out->sizes[o + 1] != n ||
      (nd == 3 && (B->sizes[0] != batch || out->sizes[0] != batch)))
    return TPURT_STATUS(INVALID_ARGUMENT,
                        "%s: shapes do not match: [%lld x %lld] @ [%lld x %lld] -> [%lld x %lld]",
                        op, (long long)m, (long long)k, (long long)B->sizes[o],
                        (long long)n, (long long)out->sizes[o], (long long)out->sizes[o + 1]);
  TPURT_RETURN_IF_ERROR(check_dtypes(op, A->dtype, B->dtype, out->dtype));
  if (batch == 0) return TPURT_OK; /* (gemm's batch 0 means 1) */
  tpurt_gemm_t g = {.m = m, .n = n, .k = k, .ab_dtype = A->dtype, .c_dtype = out->dtype,
                    .a = A->data, .a_rs = A->strides[o], .a_cs = A->strides[o + 1],
                    .b = B->data, .b_rs = B->strides[o], .b_cs = B->strides[o + 1],
                    .c = out->data, .c_rs = out->strides[o], .c_cs = out->strides[o + 1],
                    .alpha = alpha, .beta = self ? beta : 0.0, .batch = batch,
                    .a_bs = nd == 3 ? A->strides[0] : 0, .b_bs = nd == 3 ? B->strides[0] : 0,
                    .c_bs = nd == 3 ? out->strides[0] : 0};
  if (self && beta != 0) {
    TPURT_RETURN_IF_ERROR(check_bcast(op, self, out));
    if (self->dtype != out->dtype)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: self dtype %s differs from result dtype %s", op,
                          tpurt_dtype_name(self->dtype), tpurt_dtype_name(out->dtype));
    g.c_in = self->data;
    g.c_in_rs = bstride(self, nd, o, m);
    g.c_in_cs = bstride(self, nd, o + 1, n);
    g.c_in_bs = nd == 3 ? bstride(self, nd, 0, batch) : 0;
  }
  return run(ctx, &g, ref);
}

static tpurt_status_t mm_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_tensor_t *a = NULL, *b = NULL, *out = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, 2, &a));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 1, 2, &b));
  TPURT_RETURN_IF_ERROR(out_arg(call, 0, 2, &out));
  return matmul_into(ctx, "mm", out, NULL, a, b, 0, 1, ref);
}

static tpurt_status_t bmm_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_tensor_t *a = NULL, *b = NULL, *out = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, 3, &a));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 1, 3, &b));
  TPURT_RETURN_IF_ERROR(out_arg(call, 0, 3, &out));
  return matmul_into(ctx, "bmm", out, NULL, a, b, 0, 1, ref);
}

/* addmm / baddbmm: (self, m1, m2, beta, alpha) */
static tpurt_status_t addmm_like(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, int nd,
                                 bool ref) {
  const tpurt_tensor_t *self = NULL, *a = NULL, *b = NULL, *out = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &self));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 1, nd, &a));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 2, nd, &b));
  TPURT_RETURN_IF_ERROR(out_arg(call, 0, nd, &out));
  return matmul_into(ctx, call->name, out, self, a, b, tpurt_arg_double(call, 3, 1), tpurt_arg_double(call, 4, 1),
                     ref);
}
static tpurt_status_t addmm_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  return addmm_like(ctx, call, 2, ref);
}
static tpurt_status_t baddbmm_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  return addmm_like(ctx, call, 3, ref);
}

/* addbmm: out = beta * self + alpha * sum_b batch1[b] @ batch2[b] (one GEMM
 * per batch entry accumulating into out, as PyTorch CPU does). */
static tpurt_status_t addbmm_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_tensor_t *self = NULL, *a = NULL, *b = NULL, *out = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &self));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 1, 3, &a));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 2, 3, &b));
  TPURT_RETURN_IF_ERROR(out_arg(call, 0, 2, &out));
  double beta = tpurt_arg_double(call, 3, 1), alpha = tpurt_arg_double(call, 4, 1);
  if (a->sizes[0] != b->sizes[0])
    return TPURT_STATUS(INVALID_ARGUMENT, "addbmm: batch sizes differ: %lld vs %lld",
                        (long long)a->sizes[0], (long long)b->sizes[0]);
  tpurt_tensor_t a2 = *a, b2 = *b;
  a2.ndim = b2.ndim = 2;
  for (int d = 0; d < 2; ++d) {
    a2.sizes[d] = a->sizes[d + 1], a2.strides[d] = a->strides[d + 1];
    b2.sizes[d] = b->sizes[d + 1], b2.strides[d] = b->strides[d + 1];
  }
  size_t es = tpurt_dtype_size(a->dtype);
  if (a->sizes[0] == 0) /* out = beta * self */
    return matmul_into(ctx, "addbmm", out, self, &a2, &b2, beta, 0.0, ref);
  for (int64_t i = 0; i < a->sizes[0]; ++i) {
    a2.data = (char*)a->data + (size_t)(i * a->strides[0]) * es;
    b2.data = (char*)b->data + (size_t)(i * b->strides[0]) * es;
    if (i == 0) TPURT_RETURN_IF_ERROR(matmul_into(ctx, "addbmm", out, self, &a2, &b2, beta, alpha, ref));
    else TPURT_RETURN_IF_ERROR(matmul_into(ctx, "addbmm", out, out, &a2, &b2, 1.0, alpha, ref));
  }
  return TPURT_OK;
}

/* A 1-D tensor as an [n x 1] (column) or [1 x n] (row) 2-D view. */
static tpurt_tensor_t as_col(const tpurt_tensor_t* v) {
  tpurt_tensor_t t = *v;
  t.ndim = 2;
  t.sizes[0] = v->sizes[0], t.strides[0] = v->strides[0];
  t.sizes[1] = 1, t.strides[1] = 1;
  return t;
}
static tpurt_tensor_t as_row(const tpurt_tensor_t* v) {
  tpurt_tensor_t t = *v;
  t.ndim = 2;
  t.sizes[0] = 1, t.strides[0] = 1;
  t.sizes[1] = v->sizes[0], t.strides[1] = v->strides[0];
  return t;
}
static tpurt_tensor_t as_scalar_mat(const tpurt_tensor_t* v) { /* 0-d -> [1 x 1] */
  tpurt_tensor_t t = *v;
  t.ndim = 2;
  t.sizes[0] = t.sizes[1] = 1;
  t.strides[0] = t.strides[1] = 1;
  return t;
}

/* addmv (self, mat, vec, beta, alpha) and mv (self=mat, vec) */
static tpurt_status_t addmv_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  bool is_mv = call->num_args <= 2;
  const tpurt_tensor_t *self = NULL, *mat = NULL, *vec = NULL, *out = NULL;
  if (!is_mv) TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &self));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, is_mv ? 0 : 1, 2, &mat));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, is_mv ? 1 : 2, 1, &vec));
  TPURT_RETURN_IF_ERROR(out_arg(call, 0, 1, &out));
  tpurt_tensor_t v2 = as_col(vec), o2 = as_col(out), s2;
  if (self) {
    TPURT_RETURN_IF_ERROR(check_bcast(call->name, self, out));
    s2 = self->ndim == 1 ? as_col(self) : as_scalar_mat(self);
    if (self->ndim == 1 && self->sizes[0] == 1) s2.strides[0] = 0;
    if (self->ndim == 0) s2.strides[0] = s2.strides[1] = 0;
  }
  return matmul_into(ctx, call->name, &o2, self ? &s2 : NULL, mat, &v2,
                     tpurt_arg_double(call, 3, 1), tpurt_arg_double(call, 4, 1), ref);
}

/* addr (self, vec1, vec2, beta, alpha): outer product, a GEMM with k = 1 */
static tpurt_status_t addr_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_tensor_t *self = NULL, *v1 = NULL, *v2 = NULL, *out = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &self));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 1, 1, &v1));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 2, 1, &v2));
  TPURT_RETURN_IF_ERROR(out_arg(call, 0, 2, &out));
  tpurt_tensor_t a = as_col(v1), b = as_row(v2);
  return matmul_into(ctx, "addr", out, self, &a, &b, tpurt_arg_double(call, 3, 1), tpurt_arg_double(call, 4, 1),
                     ref);
}

/* dot / vdot (real dtypes: vdot == dot): a 1 x 1 GEMM with k = n */
static tpurt_status_t dot_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_tensor_t *x = NULL, *y = NULL, *out = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, 1, &x));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 1, 1, &y));
  TPURT_RETURN_IF_ERROR(out_arg(call, 0, 0, &out));
  if (x->sizes[0] != y->sizes[0])
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: 1-D tensors of different sizes %lld and %lld",
                        call->name, (long long)x->sizes[0], (long long)y->sizes[0]);
  tpurt_tensor_t a = as_row(x), b = as_col(y), o = as_scalar_mat(out);
  return matmul_into(ctx, call->name, &o, NULL, &a, &b, 0, 1, ref);
}

/* _int_mm: int8 @ int8 -> int32 */
static tpurt_status_t int_mm_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_tensor_t *a = NULL, *b = NULL, *out = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, 2, &a));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 1, 2, &b));
  TPURT_RETURN_IF_ERROR(out_arg(call, 0, 2, &out));
  if (a->dtype != TPURT_DTYPE_INT8 || b->dtype != TPURT_DTYPE_INT8 || out->dtype != TPURT_DTYPE_INT32)
    return TPURT_STATUS(UNIMPLEMENTED, "_int_mm: expected int8 inputs and int32 output, got %s, %s -> %s",
                        tpurt_dtype_name(a->dtype), tpurt_dtype_name(b->dtype),
                        tpurt_dtype_name(out->dtype));
  if (a->sizes[1] != b->sizes[0] || out->sizes[0] != a->sizes[0] || out->sizes[1] != b->sizes[1])
    return TPURT_STATUS(INVALID_ARGUMENT, "_int_mm: shapes do not match");
  tpurt_gemm_t g = {.m = a->sizes[0], .n = b->sizes[1], .k = a->sizes[1],
                    .ab_dtype = TPURT_DTYPE_INT8, .c_dtype = TPURT_DTYPE_INT32,
                    .a = a->data, .a_rs = a->strides[0], .a_cs = a->strides[1],
                    .b = b->data, .b_rs = b->strides[0], .b_cs = b->strides[1],
                    .c = out->data, .c_rs = out->strides[0], .c_cs = out->strides[1],
                    .alpha = 1, .beta = 0};
  return run(ctx, &g, ref);
}

/* _addmm_activation: addmm then relu, or gelu (erf form) when use_gelu. */
typedef struct act_t {
  const tpurt_tensor_t* out;
  bool gelu;
} act_t;
static void act_rows(void* u, int64_t r0, int64_t r1, int tid) {
  act_t* a = (act_t*)u;
  const tpurt_tensor_t* t = a->out;
  size_t es = tpurt_dtype_size(t->dtype);
  bool fl = tpurt_dtype_is_floating(t->dtype);
  for (int64_t i = r0; i < r1; ++i)
    for (int64_t j = 0; j < t->sizes[1]; ++j) {
      char* p = (char*)t->data + (size_t)(i * t->strides[0] + j * t->strides[1]) * es;
      if (!fl) {
        int64_t v = tpurt_dtype_load_i64(t->dtype, p);
        tpurt_dtype_store_i64(t->dtype, p, v > 0 ? v : 0);
        continue;
      }
      double v = tpurt_dtype_load_f64(t->dtype, p);
      if (a->gelu) v = 0.5 * v * (1.0 + erf(v * 0.70710678118654752440));
      else v = v > 0 ? v : (isnan(v) ? v : 0.0);
      tpurt_dtype_store_f64(t->dtype, p, v);
    }
}
static tpurt_status_t addmm_act_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  TPURT_RETURN_IF_ERROR(addmm_like(ctx, call, 2, ref));
  bool gelu = tpurt_arg_is(call, 5, TPURT_ARG_BOOL) && tpurt_arg_bool(call, 5, false);
  act_t a = {&call->outputs[0], gelu};
  if (gelu && !tpurt_dtype_is_floating(a.out->dtype))
    return TPURT_STATUS(UNIMPLEMENTED, "_addmm_activation: gelu on %s", tpurt_dtype_name(a.out->dtype));
  if (ref) act_rows(&a, 0, a.out->sizes[0], 0);
  else tpurt_parallel_for(ctx, a.out->sizes[0], 16, act_rows, &a);
  return TPURT_OK;
}

/* trace: sum of the diagonal (double / int64 accumulation; output dtype as given) */
static tpurt_status_t trace_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_tensor_t *x = NULL, *out = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, 2, &x));
  TPURT_RETURN_IF_ERROR(out_arg(call, 0, 0, &out));
  int64_t n = x->sizes[0] < x->sizes[1] ? x->sizes[0] : x->sizes[1];
  size_t es = tpurt_dtype_size(x->dtype);
  int64_t step = x->strides[0] + x->strides[1];
  if (tpurt_dtype_is_floating(x->dtype)) {
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += tpurt_dtype_load_f64(x->dtype, (char*)x->data + (size_t)(i * step) * es);
    tpurt_dtype_store_f64(out->dtype, out->data, acc);
  } else {
    int64_t acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += tpurt_dtype_load_i64(x->dtype, (char*)x->data + (size_t)(i * step) * es);
    tpurt_dtype_store_i64(out->dtype, out->data, acc);
  }
  return TPURT_OK;
}

#define KERNEL_PAIR(NAME, IMPL)                                                                \
  tpurt_status_t tpurt_linalg_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {    \
    return IMPL(ctx, call, false);                                                             \
  }                                                                                            \
  tpurt_status_t tpurt_linalg_##NAME##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { \
    return IMPL(ctx, call, true);                                                              \
  }
KERNEL_PAIR(mm, mm_impl)
KERNEL_PAIR(bmm, bmm_impl)
KERNEL_PAIR(addmm, addmm_impl)
KERNEL_PAIR(baddbmm, baddbmm_impl)
KERNEL_PAIR(addbmm, addbmm_impl)
KERNEL_PAIR(addmv, addmv_impl)
KERNEL_PAIR(addr, addr_impl)
KERNEL_PAIR(dot, dot_impl)
KERNEL_PAIR(int_mm, int_mm_impl)
KERNEL_PAIR(addmm_act, addmm_act_impl)
KERNEL_PAIR(trace, trace_impl)
