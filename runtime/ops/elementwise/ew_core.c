/* The generic elementwise op driver (promotion, dtype checks, scalars) and
 * the ops that do not fit one expression: copy_, fill_, zero_, where,
 * masked_fill_. */
#include <stdatomic.h>
#include <string.h>
#include <tgmath.h>

#include "ops/elementwise/ew_list.h"
#include "ops/elementwise/ew_ops.h"

static tpurt_status_t ew_cast_copy(tpurt_kernel_ctx_t* ctx, const tpurt_tensor_t* dst, const tpurt_tensor_t* src);

/* The largest value of an unsigned integer dtype; 0 for the others. */
static uint64_t ew_unsigned_max(tpurt_dtype_t dt) {
  switch (dt) {
    case TPURT_DTYPE_UINT8: return UINT8_MAX;
    case TPURT_DTYPE_UINT16: return UINT16_MAX;
    case TPURT_DTYPE_UINT32: return UINT32_MAX;
    case TPURT_DTYPE_UINT64: return UINT64_MAX;
    default: return 0;
  }
}

tpurt_status_t tpurt_ew_op_run_inputs(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const ew_op_t* op,
                                      const tpurt_arg_t* const* ins, ew_params_t* p, bool reference) {
  if (call->num_outputs < op->nout)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected %d outputs, got %d", op->name, op->nout,
                        call->num_outputs);
  tpurt_dtype_t compute;
  switch (op->promote) {
    case EW_P_BOOL: compute = TPURT_DTYPE_BOOL; break;
    case EW_P_FIRST: compute = tpurt_ew_result_type(ins, 1); break;
    default: compute = tpurt_ew_result_type(ins, op->nin); break;
  }
  if (compute == TPURT_DTYPE_INVALID)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: inputs must be tensors or numbers", op->name);
  /* integers promote to the default dtype, which a floating output's dtype shows (float64 under
   * torch.set_default_dtype(torch.float64)) */
  if (op->promote == EW_P_FLOAT && !tpurt_dtype_is_floating(compute))
    compute = op->out != EW_O_BOOL && call->outputs[0].dtype == TPURT_DTYPE_FLOAT64 ? TPURT_DTYPE_FLOAT64
                                                                                    : TPURT_DTYPE_FLOAT32;
  tpurt_dtype_t ld = tpurt_ew_loop_dtype(compute);
  if (!(op->allow & (1u << compute)) || !op->loops[ld])
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for dtype %s", op->name, tpurt_dtype_name(compute));
  tpurt_dtype_t out_ld = op->out == EW_O_BOOL ? TPURT_DTYPE_BOOL : ld;
  p->compute = compute;
  p->bits = 8 * (int)tpurt_dtype_size(compute);
  p->loop_float = tpurt_dtype_is_floating(ld);
  p->out_float = tpurt_dtype_is_floating(out_ld);
  p->err = 0;
  if (op->setup) TPURT_RETURN_IF_ERROR(op->setup(call, p));
  if (!p->loop_float) {
    /* integer params must fit the compute dtype, as PyTorch's checked
     * Scalar.to<scalar_t>() requires (threshold 300 on uint8 is an error). Its check
     * (c10::overflows) lets an unsigned type take a negative value down to -max, which wraps
     * (threshold's value -9 on uint8 is 247 on CPU). */
    for (int k = 0; k < 6; ++k) {
      _Alignas(8) char tmp[8];
      tpurt_dtype_store_i64(compute, tmp, p->i[k]);
      int64_t v = tpurt_dtype_load_i64(compute, tmp);
      if (v != p->i[k] && p->i[k] < 0 && ew_unsigned_max(compute) &&
          (uint64_t)0 - (uint64_t)p->i[k] <= ew_unsigned_max(compute))
        v = p->i[k] = (int64_t)(uint64_t)v; /* the wrapped value (as stored) */
      if (v != p->i[k] && compute != TPURT_DTYPE_BOOL)
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: value %lld cannot be converted to type %s without overflow",
                            op->name, (long long)p->i[k], tpurt_dtype_name(compute));
      p->i[k] = v;
    }
  }

  tpurt_ew_config_t cfg = {.op = op->name, .num_outputs = op->nout, .num_inputs = op->nin,
                           .user = p, .grain = op->grain, .loop = op->loops[ld]};
  if (ld == TPURT_DTYPE_FLOAT32 || ld == TPURT_DTYPE_FLOAT64) cfg.expr = op->expr;
  if (compute == TPURT_DTYPE_BFLOAT16 && out_ld == TPURT_DTYPE_FLOAT32) cfg.loop_bf16 = op->loop_bf16;
  tpurt_tensor_t wrapped[4];
  _Alignas(8) char storage[4][8];
  for (int k = 0; k < op->nout; ++k) {
    cfg.tensors[k] = &call->outputs[k];
    cfg.loop_dtypes[k] = out_ld;
  }
  tpurt_arg_t rounded[4];
  for (int k = 0; k < op->nin; ++k) {
    const tpurt_arg_t* in = ins[k];
    /* A Python number with a 16-bit float compute dtype is that dtype first (CPU casts every
     * operand to the common dtype, then computes in float): bf16(1) - 1.00390625 is 0. Except
     * CPU's mul and div kernels, which read a second-operand scalar's original value in float
     * (BinaryOpsKernel.cpp: original_scalar_value), and lerp's, which reads its weight so
     * (LerpKernel.cpp: weight.to<opmath_t>()). */
    if (in && (in->kind == TPURT_ARG_DOUBLE || in->kind == TPURT_ARG_INT) && ld != compute &&
        (compute == TPURT_DTYPE_FLOAT16 || compute == TPURT_DTYPE_BFLOAT16) &&
        !(k == 1 && (strcmp(op->name, "mul") == 0 || strncmp(op->name, "div", 3) == 0)) &&
        !(k == 2 && strcmp(op->name, "lerp") == 0)) {
      _Alignas(8) char tmp[8];
      tpurt_dtype_store_f64(compute, tmp, in->kind == TPURT_ARG_DOUBLE ? in->v.d : (double)in->v.i);
      rounded[k] = *in;
      rounded[k].kind = TPURT_ARG_DOUBLE;
      rounded[k].v.d = tpurt_dtype_load_f64(compute, tmp);
      in = &rounded[k];
    }
    const tpurt_tensor_t* t = tpurt_arg_as_tensor(in, &wrapped[k], storage[k]);
    if (!t) return TPURT_STATUS(INVALID_ARGUMENT, "%s: input %d is not a tensor or number", op->name, k);
    cfg.tensors[op->nout + k] = t;
    cfg.loop_dtypes[op->nout + k] = op->promote == EW_P_BOOL ? TPURT_DTYPE_BOOL : ld;
  }
  /* An output of another dtype than a compute dtype the loops widen (float16/bfloat16 in float32,
   * uint16/32/64 in int64), as an out= of float64 for float16 inputs: CPU rounds each result to the
   * compute dtype first, then casts (float16 33000 + 33000 is inf in a float64 out too). The loop
   * writes a dense scratch of the compute dtype, which a copy then casts. */
  tpurt_tensor_t narrow;
  const tpurt_tensor_t* cast_to = NULL;
  if (op->nout == 1 && ld != compute && out_ld == ld && call->outputs[0].dtype != compute &&
      tpurt_tensor_numel(&call->outputs[0]) > 0) {
    cast_to = &call->outputs[0];
    narrow = *cast_to;
    narrow.dtype = compute;
    narrow.data = tpurt_kernel_scratch(ctx, (size_t)tpurt_tensor_numel(cast_to) * tpurt_dtype_size(compute));
    if (!narrow.data) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch memory", op->name);
    int64_t st = 1;
    for (int32_t d = narrow.ndim - 1; d >= 0; --d) {
      narrow.strides[d] = st;
      st *= narrow.sizes[d] > 1 ? narrow.sizes[d] : 1;
    }
    cfg.tensors[0] = &narrow;
  }
  tpurt_status_t s = reference ? tpurt_ew_run_reference(&cfg, op->ref, p) : tpurt_ew_run(ctx, &cfg);
  if (s) return s;
  if (p->err) return TPURT_STATUS(INVALID_ARGUMENT, "%s: ZeroDivisionError (integer division by zero)", op->name);
  if (cast_to) return ew_cast_copy(ctx, cast_to, &narrow);
  return TPURT_OK;
}

tpurt_status_t tpurt_ew_op_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const ew_op_t* op,
                               bool reference) {
  const tpurt_arg_t* ins[4];
  for (int k = 0; k < op->nin; ++k) {
    int a = op->in_arg[k];
    if (a >= call->num_args)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected at least %d args, got %d", op->name, a + 1,
                          call->num_args);
    ins[k] = tpurt_arg_at(call, a);
  }
  ew_params_t p;
  memset(&p, 0, sizeof(p));
  return tpurt_ew_op_run_inputs(ctx, call, op, ins, &p, reference);
}

/* ------------------------------------------------------------------------ */
/* copy_(self, src, non_blocking) -> self: strided copy with a dtype cast.    */

typedef struct copy_user_t {
  tpurt_dtype_t dst, src;
} copy_user_t;

static void copy_loop(char** d, const int64_t* s, int64_t n, void* u) {
  const copy_user_t* c = (const copy_user_t*)u;
  tpurt_ew_convert_strided(c->dst, d[0], s[0], c->src, d[1], s[1], n);
}

static void copy_ref(tpurt_ew_value_t* out, const tpurt_ew_value_t* in, void* u) { out[0] = in[0]; }

static tpurt_status_t copy_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  const tpurt_tensor_t* src = tpurt_arg_tensor(call, 1);
  if (call->num_outputs < 1 || !src) return TPURT_STATUS(INVALID_ARGUMENT, "copy_: expected (self, src) and one output");
  const tpurt_tensor_t* dst = &call->outputs[0];
  copy_user_t u = {dst->dtype, src->dtype};
  tpurt_ew_config_t cfg = {.op = "copy_", .num_outputs = 1, .num_inputs = 1, .loop = copy_loop, .user = &u,
                           .grain = 65536};
  cfg.tensors[0] = dst;
  cfg.tensors[1] = src;
  if (reference) {
    /* through the loop dtype of the destination, one element at a time */
    cfg.loop_dtypes[0] = cfg.loop_dtypes[1] = dst->dtype;
    return tpurt_ew_run_reference(&cfg, copy_ref, NULL);
  }
  cfg.loop_dtypes[0] = dst->dtype;
  cfg.loop_dtypes[1] = src->dtype;
  return tpurt_ew_run(ctx, &cfg);
}
static tpurt_status_t ew_cast_copy(tpurt_kernel_ctx_t* ctx, const tpurt_tensor_t* dst, const tpurt_tensor_t* src) {
  copy_user_t u = {dst->dtype, src->dtype};
  tpurt_ew_config_t cfg = {.op = "copy_", .num_outputs = 1, .num_inputs = 1, .loop = copy_loop, .user = &u,
                           .grain = 65536};
  cfg.tensors[0] = dst;
  cfg.tensors[1] = src;
  cfg.loop_dtypes[0] = dst->dtype;
  cfg.loop_dtypes[1] = src->dtype;
  return tpurt_ew_run(ctx, &cfg);
}
tpurt_status_t tpurt_ew_k_copy(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return copy_run(ctx, call, false);
}
tpurt_status_t tpurt_ew_r_copy(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return copy_run(ctx, call, true);
}

/* ------------------------------------------------------------------------ */
/* fill_(self, value) / zero_(self): value is a Scalar or a 0-d tensor.       */

static void fill_loop(char** d, const int64_t* s, int64_t n, void* u) {
  size_t es = *(const size_t*)u;
  char* o = d[0];
  const char* v = d[1];
  if (s[0] == (int64_t)es) {
    switch (es) {
      case 1: memset(o, *(const uint8_t*)v, (size_t)n); return;
      case 2: { uint16_t x = *(const uint16_t*)v; uint16_t* q = (uint16_t*)o; for (int64_t i = 0; i < n; ++i) q[i] = x; return; }
      case 4: { uint32_t x = *(const uint32_t*)v; uint32_t* q = (uint32_t*)o; for (int64_t i = 0; i < n; ++i) q[i] = x; return; }
      default: { uint64_t x = *(const uint64_t*)v; uint64_t* q = (uint64_t*)o; for (int64_t i = 0; i < n; ++i) q[i] = x; return; }
    }
  }
  for (int64_t i = 0; i < n; ++i) memcpy(o + i * s[0], v, es);
}

static const tpurt_ew_expr_t* fill_expr(void) {
  static const tpurt_ew_expr_t* _Atomic e;
  const tpurt_ew_expr_t* x = atomic_load_explicit(&e, memory_order_relaxed);
  if (!x) atomic_store_explicit(&e, x = tpurt_ew_expr_find("identity"), memory_order_relaxed);
  return x;
}

static tpurt_status_t fill_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const tpurt_arg_t* value,
                               bool reference) {
  if (call->num_outputs < 1) return TPURT_STATUS(INVALID_ARGUMENT, "fill_: expected one output");
  const tpurt_tensor_t* dst = &call->outputs[0];
  tpurt_tensor_t wrapped;
  _Alignas(8) char storage[8];
  const tpurt_tensor_t* v = tpurt_arg_as_tensor(value, &wrapped, storage);
  if (!v) return TPURT_STATUS(INVALID_ARGUMENT, "fill_: value must be a number or a tensor");
  if (v->ndim != 0 && tpurt_tensor_numel(v) != 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "fill_: value tensor must be 0-dimensional, has %d dims", v->ndim);
  /* a 1-element tensor of any rank: read its one element as a 0-d tensor */
  tpurt_tensor_t v0 = *v;
  v0.ndim = 0;
  size_t es = tpurt_dtype_size(dst->dtype);
  tpurt_ew_config_t cfg = {.op = "fill_", .num_outputs = 1, .num_inputs = 1, .loop = fill_loop, .user = &es,
                           .grain = 65536};
  cfg.tensors[0] = dst;
  cfg.tensors[1] = &v0;
  cfg.loop_dtypes[0] = cfg.loop_dtypes[1] = dst->dtype;
  /* A float fill is the identity of its broadcast value: an expression a fused chain's generated
   * kernel can compute (a compiled optimizer's lerp weight is a full_like inside the update). */
  if (dst->dtype == TPURT_DTYPE_FLOAT32 || dst->dtype == TPURT_DTYPE_FLOAT64) cfg.expr = fill_expr();
  if (reference) return tpurt_ew_run_reference(&cfg, copy_ref, NULL);
  return tpurt_ew_run(ctx, &cfg);
}
static tpurt_status_t fill_args(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  if (call->num_args < 2) return TPURT_STATUS(INVALID_ARGUMENT, "fill_: expected (self, value)");
  return fill_run(ctx, call, tpurt_arg_at(call, 1), reference);
}
tpurt_status_t tpurt_ew_k_fill(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return fill_args(ctx, call, false);
}
tpurt_status_t tpurt_ew_r_fill(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return fill_args(ctx, call, true);
}
static const tpurt_arg_t kZeroArg = {.kind = TPURT_ARG_INT, .v.i = 0};
tpurt_status_t tpurt_ew_k_zero(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return fill_run(ctx, call, &kZeroArg, false);
}
tpurt_status_t tpurt_ew_r_zero(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return fill_run(ctx, call, &kZeroArg, true);
}

/* ------------------------------------------------------------------------ */
/* where(cond, self, other); masked_fill_(self, mask, value) = where(mask, value, self) */

#define WHERE_LOOP(NAME, T)                                                                  \
  static void NAME(char** d, const int64_t* s, int64_t n, void* u) {                       \
    if (s[0] == sizeof(T) && s[1] == 1 && s[2] == sizeof(T) && s[3] == sizeof(T)) {          \
      T* o = (T*)d[0];                                                                       \
      const bool* c = (const bool*)d[1];                                                     \
      const T *x = (const T*)d[2], *y = (const T*)d[3];                                      \
      _Pragma("GCC ivdep") for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : y[i];        \
    } else if (s[0] == sizeof(T) && s[1] == 1 && s[2] == 0 && s[3] == sizeof(T)) {           \
      T* o = (T*)d[0];                                                                       \
      const bool* c = (const bool*)d[1];                                                     \
      const T xv = *(const T*)d[2], *y = (const T*)d[3];                                     \
      _Pragma("GCC ivdep") for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? xv : y[i];          \
    } else {                                                                                 \
      for (int64_t i = 0; i < n; ++i)                                                        \
        *(T*)(d[0] + i * s[0]) = *(const bool*)(d[1] + i * s[1]) ? *(const T*)(d[2] + i * s[2]) \
                                                                 : *(const T*)(d[3] + i * s[3]); \
    }                                                                                        \
  }
/* where only moves bits, so one loop per element size serves every dtype */
WHERE_LOOP(where_1, uint8_t)
WHERE_LOOP(where_2, uint16_t)
WHERE_LOOP(where_4, uint32_t)
WHERE_LOOP(where_8, uint64_t)

static void where_ref(tpurt_ew_value_t* out, const tpurt_ew_value_t* in, void* u) {
  out[0] = in[0].i ? in[1] : in[2];
}

/* inputs: cond, x, y; compute dtype given */
static tpurt_status_t where_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const char* name,
                                const tpurt_arg_t* const* ins, tpurt_dtype_t compute, bool reference) {
  if (call->num_outputs < 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected one output", name);
  if (compute == TPURT_DTYPE_INVALID) return TPURT_STATUS(INVALID_ARGUMENT, "%s: bad input dtypes", name);
  tpurt_ew_config_t cfg = {.op = name, .num_outputs = 1, .num_inputs = 3};
  tpurt_tensor_t wrapped[3];
  _Alignas(8) char storage[3][8];
  cfg.tensors[0] = &call->outputs[0];
  cfg.loop_dtypes[0] = compute;
  for (int k = 0; k < 3; ++k) {
    cfg.tensors[1 + k] = tpurt_arg_as_tensor(ins[k], &wrapped[k], storage[k]);
    if (!cfg.tensors[1 + k]) return TPURT_STATUS(INVALID_ARGUMENT, "%s: input %d is not a tensor", name, k);
    cfg.loop_dtypes[1 + k] = k == 0 ? TPURT_DTYPE_BOOL : compute;
  }
  if (reference) return tpurt_ew_run_reference(&cfg, where_ref, NULL);
  switch (tpurt_dtype_size(compute)) {
    case 1: cfg.loop = where_1; break;
    case 2: cfg.loop = where_2; break;
    case 4: cfg.loop = where_4; break;
    default: cfg.loop = where_8; break;
  }
  return tpurt_ew_run(ctx, &cfg);
}

static tpurt_status_t where_args(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  if (call->num_args < 3) return TPURT_STATUS(INVALID_ARGUMENT, "where: expected (condition, self, other)");
  const tpurt_arg_t* ins[3] = {tpurt_arg_at(call, 0), tpurt_arg_at(call, 1), tpurt_arg_at(call, 2)};
  return where_run(ctx, call, "where", ins, tpurt_ew_result_type(ins + 1, 2), reference);
}
tpurt_status_t tpurt_ew_k_where(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return where_args(ctx, call, false);
}
tpurt_status_t tpurt_ew_r_where(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return where_args(ctx, call, true);
}

static tpurt_status_t masked_fill_args(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  if (call->num_args < 3 || call->num_outputs < 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "masked_fill_: expected (self, mask, value)");
  const tpurt_tensor_t* vt = tpurt_arg_tensor(call, 2);
  if (vt && vt->ndim != 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "masked_fill_: only supports a 0-dimensional value tensor, got %d dims",
                        vt->ndim);
  const tpurt_tensor_t* mask = tpurt_arg_tensor(call, 1);
  if (!mask || mask->dtype != TPURT_DTYPE_BOOL)
    return TPURT_STATUS(INVALID_ARGUMENT, "masked_fill_: mask must be a bool tensor");
  const tpurt_arg_t* ins[3] = {tpurt_arg_at(call, 1), tpurt_arg_at(call, 2), tpurt_arg_at(call, 0)};
  return where_run(ctx, call, "masked_fill_", ins, call->outputs[0].dtype, reference);
}
tpurt_status_t tpurt_ew_k_masked_fill(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return masked_fill_args(ctx, call, false);
}
tpurt_status_t tpurt_ew_r_masked_fill(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return masked_fill_args(ctx, call, true);
}

