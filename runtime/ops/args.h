/* Reading a kernel call's arguments (tpurt_op_call_t.args, tpurt/kernel.h):
 * the one set of readers every kernel family uses. An index past the last
 * argument reads as absent (None); a reader given an argument of a kind it
 * does not read returns its default. Internal to runtime/ops; not an ABI. */
#ifndef TPURT_OPS_ARGS_H_
#define TPURT_OPS_ARGS_H_

#include "tpurt/kernel.h"

/* args[i], or NULL past the last argument. */
static inline const tpurt_arg_t* tpurt_arg_at(const tpurt_op_call_t* call, int i) {
  return i >= 0 && i < call->num_args ? &call->args[i] : NULL;
}
/* The kind of args[i]; TPURT_ARG_NONE past the last argument. */
static inline tpurt_arg_kind_t tpurt_arg_kind(const tpurt_op_call_t* call, int i) {
  const tpurt_arg_t* a = tpurt_arg_at(call, i);
  return a ? a->kind : TPURT_ARG_NONE;
}
static inline bool tpurt_arg_is(const tpurt_op_call_t* call, int i, tpurt_arg_kind_t kind) {
  const tpurt_arg_t* a = tpurt_arg_at(call, i);
  return a && a->kind == kind;
}
/* Given, and not None. */
static inline bool tpurt_arg_present(const tpurt_op_call_t* call, int i) {
  return tpurt_arg_kind(call, i) != TPURT_ARG_NONE;
}
/* A Scalar: INT, DOUBLE or BOOL. */
static inline bool tpurt_arg_is_scalar(const tpurt_op_call_t* call, int i) {
  tpurt_arg_kind_t k = tpurt_arg_kind(call, i);
  return k == TPURT_ARG_INT || k == TPURT_ARG_DOUBLE || k == TPURT_ARG_BOOL;
}

/* One argument (may be NULL) as a number. An int reads INT, DTYPE and OTHER
 * as their value, DOUBLE truncated toward zero, BOOL as 0/1, a one-element int
 * list and a one-element tensor as that element; a double reads INT, DOUBLE,
 * BOOL and a one-element tensor. Anything else (None included) is dflt. */
int64_t tpurt_arg_value_int(const tpurt_arg_t* a, int64_t dflt);
double tpurt_arg_value_double(const tpurt_arg_t* a, double dflt);

static inline int64_t tpurt_arg_int(const tpurt_op_call_t* call, int i, int64_t dflt) {
  return tpurt_arg_value_int(tpurt_arg_at(call, i), dflt);
}
static inline double tpurt_arg_double(const tpurt_op_call_t* call, int i, double dflt) {
  return tpurt_arg_value_double(tpurt_arg_at(call, i), dflt);
}
/* BOOL, or INT (nonzero is true); else dflt. */
static inline bool tpurt_arg_bool(const tpurt_op_call_t* call, int i, bool dflt) {
  const tpurt_arg_t* a = tpurt_arg_at(call, i);
  if (a && a->kind == TPURT_ARG_BOOL) return a->v.b;
  if (a && a->kind == TPURT_ARG_INT) return a->v.i != 0;
  return dflt;
}
/* An optional Scalar (a scale factor, a p): true and *out when one is given. */
static inline bool tpurt_arg_opt_double(const tpurt_op_call_t* call, int i, double* out) {
  if (!tpurt_arg_is_scalar(call, i)) return false;
  *out = tpurt_arg_double(call, i, 0.0);
  return true;
}
static inline const char* tpurt_arg_string(const tpurt_op_call_t* call, int i, const char* dflt) {
  const tpurt_arg_t* a = tpurt_arg_at(call, i);
  return a && a->kind == TPURT_ARG_STRING ? a->v.s : dflt;
}
/* The tensor, or NULL when args[i] is absent, None or not a tensor. */
static inline const tpurt_tensor_t* tpurt_arg_tensor(const tpurt_op_call_t* call, int i) {
  const tpurt_arg_t* a = tpurt_arg_at(call, i);
  return a && a->kind == TPURT_ARG_TENSOR ? a->v.tensor : NULL;
}

/* The Philox state reserved for a random kernel's call: its last
 * TPURT_ARG_RNG argument (tpurt/kernel.h, TPURT_OP_RANDOM); NULL if none. */
static inline const tpurt_rng_t* tpurt_arg_rng(const tpurt_op_call_t* call) {
  for (int i = call->num_args - 1; i >= 0; --i)
    if (call->args[i].kind == TPURT_ARG_RNG) return &call->args[i].v.rng;
  return NULL;
}

/* Lists: the elements and *out_count, or NULL and 0 when args[i] is not a
 * list of that kind (an empty list gives a non-NULL pointer). A Tensor?[]
 * entry is NULL for None. */
static inline const int64_t* tpurt_arg_ints(const tpurt_op_call_t* call, int i, int32_t* out_count) {
  static const int64_t empty[1] = {0};
  const tpurt_arg_t* a = tpurt_arg_at(call, i);
  bool ok = a && a->kind == TPURT_ARG_INT_LIST;
  *out_count = ok ? a->count : 0;
  return !ok ? NULL : a->v.ints ? a->v.ints : empty;
}
/* An int[] argument, or an int as a one-element list (kept in *one): dims= of flip, roll, ... */
static inline const int64_t* tpurt_arg_int_list(const tpurt_op_call_t* call, int i, int64_t* one,
                                                int32_t* out_count) {
  if (tpurt_arg_is(call, i, TPURT_ARG_INT)) {
    *one = call->args[i].v.i;
    *out_count = 1;
    return one;
  }
  return tpurt_arg_ints(call, i, out_count);
}
static inline const bool* tpurt_arg_bools(const tpurt_op_call_t* call, int i, int32_t* out_count) {
  static const bool empty[1] = {false};
  const tpurt_arg_t* a = tpurt_arg_at(call, i);
  bool ok = a && a->kind == TPURT_ARG_BOOL_LIST;
  *out_count = ok ? a->count : 0;
  return !ok ? NULL : a->v.bools ? a->v.bools : empty;
}
static inline const tpurt_tensor_t* const* tpurt_arg_tensors(const tpurt_op_call_t* call, int i,
                                                             int32_t* out_count) {
  static const tpurt_tensor_t* const empty[1] = {NULL};
  const tpurt_arg_t* a = tpurt_arg_at(call, i);
  bool ok = a && a->kind == TPURT_ARG_TENSOR_LIST;
  *out_count = ok ? a->count : 0;
  return !ok ? NULL : a->v.tensors ? a->v.tensors : empty;
}

/* An output_mask (bool[]): mask[k] = element k for k < n; entries past the
 * list's end (or every entry, when args[i] is not a bool list) keep their value. */
static inline void tpurt_arg_bool_mask(const tpurt_op_call_t* call, int i, int n, bool* mask) {
  int32_t count;
  const bool* b = tpurt_arg_bools(call, i, &count);
  for (int k = 0; k < n && k < count; ++k) mask[k] = b[k];
}

/* ---- readers that check (INVALID_ARGUMENT naming the op) ---- */

/* args[i] as a tensor with exactly `ndim` dims (-1: any). */
tpurt_status_t tpurt_arg_tensor_nd(const tpurt_op_call_t* call, int i, int ndim, const tpurt_tensor_t** out);
/* args[i] as a tensor with at least `min_ndim` dims. */
tpurt_status_t tpurt_arg_tensor_min_nd(const tpurt_op_call_t* call, int i, int min_ndim,
                                       const tpurt_tensor_t** out);
/* n ints from an int or int[n] argument (pooling's kernel_size, stride, ...):
 * one value fills all n; absent, None or [] gives dflt[0..n), or an error
 * when dflt is NULL (a required argument). */
tpurt_status_t tpurt_arg_int_n(const tpurt_op_call_t* call, int i, int n, const int64_t* dflt, int64_t* out);
/* At least min_args arguments and min_outputs outputs; args[0], when a
 * tensor, is not NULL. */
tpurt_status_t tpurt_arg_need(const tpurt_op_call_t* call, int min_args, int min_outputs);
/* Stores Scalar argument i (or a one-element tensor) into one element of `dtype`. */
tpurt_status_t tpurt_arg_scalar_store(const tpurt_op_call_t* call, int i, tpurt_dtype_t dtype, void* out_elem);

/* A Scalar argument (INT/DOUBLE/BOOL) as a 0-d tensor (int64/float64/bool)
 * whose data lives in `storage8` (8 bytes); a tensor argument as itself;
 * NULL for other kinds. */
const tpurt_tensor_t* tpurt_arg_as_tensor(const tpurt_arg_t* a, tpurt_tensor_t* storage_tensor, void* storage8);

#endif /* TPURT_OPS_ARGS_H_ */
