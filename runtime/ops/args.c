/* The kernel library's argument readers (see args.h). */
#include "ops/args.h"

#include <inttypes.h>
#include <string.h>

int64_t tpurt_arg_value_int(const tpurt_arg_t* a, int64_t dflt) {
  if (!a) return dflt;
  switch (a->kind) {
    case TPURT_ARG_INT: case TPURT_ARG_DTYPE: case TPURT_ARG_OTHER: return a->v.i;
    case TPURT_ARG_BOOL: return a->v.b;
    case TPURT_ARG_DOUBLE: return (int64_t)a->v.d;
    case TPURT_ARG_INT_LIST: return a->count == 1 ? a->v.ints[0] : dflt;
    case TPURT_ARG_TENSOR:
      if (a->v.tensor && tpurt_tensor_numel(a->v.tensor) == 1)
        return tpurt_dtype_load_i64(a->v.tensor->dtype, a->v.tensor->data);
      return dflt;
    default: return dflt;
  }
}

double tpurt_arg_value_double(const tpurt_arg_t* a, double dflt) {
  if (!a) return dflt;
  switch (a->kind) {
    case TPURT_ARG_INT: return (double)a->v.i;
    case TPURT_ARG_BOOL: return a->v.b ? 1.0 : 0.0;
    case TPURT_ARG_DOUBLE: return a->v.d;
    case TPURT_ARG_TENSOR:
      if (a->v.tensor && tpurt_tensor_numel(a->v.tensor) == 1)
        return tpurt_dtype_load_f64(a->v.tensor->dtype, a->v.tensor->data);
      return dflt;
    default: return dflt;
  }
}

tpurt_status_t tpurt_arg_tensor_nd(const tpurt_op_call_t* call, int i, int ndim, const tpurt_tensor_t** out) {
  const tpurt_tensor_t* t = tpurt_arg_tensor(call, i);
  if (!t) return TPURT_STATUS(INVALID_ARGUMENT, "%s: argument %d must be a tensor", call->name, i);
  if (ndim >= 0 && t->ndim != ndim)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: argument %d must be %d-D, got %d-D", call->name, i, ndim,
                        (int)t->ndim);
  *out = t;
  return TPURT_OK;
}

tpurt_status_t tpurt_arg_tensor_min_nd(const tpurt_op_call_t* call, int i, int min_ndim,
                                       const tpurt_tensor_t** out) {
  const tpurt_tensor_t* t = tpurt_arg_tensor(call, i);
  if (!t) return TPURT_STATUS(INVALID_ARGUMENT, "%s: argument %d must be a tensor", call->name, i);
  if (t->ndim < min_ndim)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: argument %d must have at least %d dims, got %d", call->name, i,
                        min_ndim, (int)t->ndim);
  *out = t;
  return TPURT_OK;
}

tpurt_status_t tpurt_arg_int_n(const tpurt_op_call_t* call, int i, int n, const int64_t* dflt, int64_t* out) {
  const tpurt_arg_t* a = tpurt_arg_at(call, i);
  if (!a || a->kind == TPURT_ARG_NONE || (a->kind == TPURT_ARG_INT_LIST && a->count == 0)) {
    if (!dflt) return TPURT_STATUS(INVALID_ARGUMENT, "%s: argument %d is required", call->name, i);
    memcpy(out, dflt, (size_t)n * sizeof(int64_t));
    return TPURT_OK;
  }
  if (a->kind == TPURT_ARG_INT) {
    for (int k = 0; k < n; ++k) out[k] = a->v.i;
    return TPURT_OK;
  }
  if (a->kind != TPURT_ARG_INT_LIST || (a->count != 1 && a->count != n))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: argument %d must be one or %d ints", call->name, i, n);
  for (int k = 0; k < n; ++k) out[k] = a->v.ints[a->count == 1 ? 0 : k];
  return TPURT_OK;
}

tpurt_status_t tpurt_arg_need(const tpurt_op_call_t* call, int min_args, int min_outputs) {
  if (call->num_args < min_args || call->num_outputs < min_outputs)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected at least %d args and %d outputs, got %d and %d",
                        call->name, min_args, min_outputs, call->num_args, call->num_outputs);
  if (min_args > 0 && call->args[0].kind == TPURT_ARG_TENSOR && call->args[0].v.tensor == NULL)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: NULL tensor", call->name);
  return TPURT_OK;
}

tpurt_status_t tpurt_arg_scalar_store(const tpurt_op_call_t* call, int i, tpurt_dtype_t dtype, void* out_elem) {
  const tpurt_arg_t* a = tpurt_arg_at(call, i);
  if (!a) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing scalar argument %d", call->name, i);
  switch (a->kind) {
    case TPURT_ARG_INT: tpurt_dtype_store_i64(dtype, out_elem, a->v.i); return TPURT_OK;
    case TPURT_ARG_BOOL: tpurt_dtype_store_i64(dtype, out_elem, a->v.b); return TPURT_OK;
    case TPURT_ARG_DOUBLE: tpurt_dtype_store_f64(dtype, out_elem, a->v.d); return TPURT_OK;
    case TPURT_ARG_TENSOR: {
      const tpurt_tensor_t* t = a->v.tensor;
      if (tpurt_tensor_numel(t) != 1)
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a 1-element tensor for argument %d, got %" PRId64
                            " elements", call->name, i, tpurt_tensor_numel(t));
      tpurt_dtype_convert(dtype, out_elem, t->dtype, t->data, 1);
      return TPURT_OK;
    }
    default:
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: argument %d is not a scalar (kind %d)", call->name, i,
                          (int)a->kind);
  }
}

const tpurt_tensor_t* tpurt_arg_as_tensor(const tpurt_arg_t* a, tpurt_tensor_t* t, void* storage8) {
  if (!a) return NULL;
  switch (a->kind) {
    case TPURT_ARG_TENSOR: return a->v.tensor;
    case TPURT_ARG_INT: memcpy(storage8, &a->v.i, 8); t->dtype = TPURT_DTYPE_INT64; break;
    case TPURT_ARG_DOUBLE: memcpy(storage8, &a->v.d, 8); t->dtype = TPURT_DTYPE_FLOAT64; break;
    case TPURT_ARG_BOOL: *(uint8_t*)storage8 = a->v.b ? 1 : 0; t->dtype = TPURT_DTYPE_BOOL; break;
    default: return NULL;
  }
  t->data = storage8;
  t->ndim = 0;
  return t;
}
