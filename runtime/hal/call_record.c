/* Call records (hal/call_record.h). */
#include "hal/call_record.h"

#include <string.h>

#define ALIGN_UP(x, a) (((x) + (a) - 1) & ~(uint64_t)((a) - 1))
tpurt_status_t tpurt_call_validate(const tpurt_op_call_t* call) {
  if (call->num_args < 0 || call->num_outputs < 0 || (call->num_args && !call->args) ||
      (call->num_outputs && !call->outputs))
    return TPURT_STATUS(INVALID_ARGUMENT, "op call %s: bad argument/output arrays",
                        call->name ? call->name : "?");
  for (int32_t i = 0; i < call->num_args; ++i) {
    const tpurt_arg_t* a = &call->args[i];
    switch (a->kind) {
      case TPURT_ARG_INT_LIST:
      case TPURT_ARG_DOUBLE_LIST:
      case TPURT_ARG_BOOL_LIST:
      case TPURT_ARG_TENSOR_LIST:
        if (a->count < 0 || (a->count && !a->v.ints))
          return TPURT_STATUS(INVALID_ARGUMENT, "op call %s: argument %d: bad list (count %d)",
                              call->name ? call->name : "?", (int)i, (int)a->count);
        break;
      default:
        break;
    }
  }
  return TPURT_OK;
}

#define A8(x) ALIGN_UP((uint64_t)(x), 8)

uint64_t tpurt_call_record_size(const tpurt_op_call_t* call) {
  uint64_t n = A8(sizeof(tpurt_arg_t) * (uint64_t)call->num_args) +
               A8(sizeof(tpurt_tensor_t) * (uint64_t)call->num_outputs) +
               A8(strlen(call->name ? call->name : "") + 1) +
               A8(strlen(call->overload ? call->overload : "") + 1);
  for (int32_t i = 0; i < call->num_args; ++i) {
    const tpurt_arg_t* a = &call->args[i];
    switch (a->kind) {
      case TPURT_ARG_TENSOR:
        if (a->v.tensor) n += sizeof(tpurt_tensor_t);
        break;
      case TPURT_ARG_INT_LIST: n += A8(sizeof(int64_t) * (uint64_t)a->count); break;
      case TPURT_ARG_DOUBLE_LIST: n += A8(sizeof(double) * (uint64_t)a->count); break;
      case TPURT_ARG_BOOL_LIST: n += A8(sizeof(bool) * (uint64_t)a->count); break;
      case TPURT_ARG_TENSOR_LIST:
        n += A8(sizeof(void*) * (uint64_t)a->count);
        for (int32_t k = 0; k < a->count; ++k)
          if (a->v.tensors[k]) n += sizeof(tpurt_tensor_t);
        break;
      case TPURT_ARG_STRING:
        if (a->v.s) n += A8(strlen(a->v.s) + 1);
        break;
      default:
        break;
    }
  }
  return n;
}

void tpurt_call_record_copy(const tpurt_op_call_t* call, uint8_t* buf, tpurt_op_call_t* out) {
  uint8_t* p = buf;
#define TAKE(bytes) (p += A8(bytes), p - A8(bytes))
  tpurt_arg_t* args = (tpurt_arg_t*)TAKE(sizeof(tpurt_arg_t) * (uint64_t)call->num_args);
  tpurt_tensor_t* outs = (tpurt_tensor_t*)TAKE(sizeof(tpurt_tensor_t) * (uint64_t)call->num_outputs);
  const char* name = call->name ? call->name : "";
  const char* ovl = call->overload ? call->overload : "";
  size_t ln = strlen(name) + 1, lo = strlen(ovl) + 1;
  char* name_c = (char*)TAKE(ln);
  memcpy(name_c, name, ln);
  char* ovl_c = (char*)TAKE(lo);
  memcpy(ovl_c, ovl, lo);
  if (call->num_outputs) memcpy(outs, call->outputs, sizeof(tpurt_tensor_t) * call->num_outputs);
  if (call->num_args) memcpy(args, call->args, sizeof(tpurt_arg_t) * call->num_args);
  for (int32_t i = 0; i < call->num_args; ++i) {
    tpurt_arg_t* a = &args[i];
    switch (a->kind) {
      case TPURT_ARG_TENSOR:
        if (a->v.tensor) {
          tpurt_tensor_t* t = (tpurt_tensor_t*)TAKE(sizeof(tpurt_tensor_t));
          *t = *a->v.tensor;
          a->v.tensor = t;
        }
        break;
      case TPURT_ARG_INT_LIST: {
        int64_t* v = (int64_t*)TAKE(sizeof(int64_t) * (uint64_t)a->count);
        if (a->count) memcpy(v, a->v.ints, sizeof(int64_t) * a->count);
        a->v.ints = v;
        break;
      }
      case TPURT_ARG_DOUBLE_LIST: {
        double* v = (double*)TAKE(sizeof(double) * (uint64_t)a->count);
        if (a->count) memcpy(v, a->v.doubles, sizeof(double) * a->count);
        a->v.doubles = v;
        break;
      }
      case TPURT_ARG_BOOL_LIST: {
        bool* v = (bool*)TAKE(sizeof(bool) * (uint64_t)a->count);
        if (a->count) memcpy(v, a->v.bools, sizeof(bool) * a->count);
        a->v.bools = v;
        break;
      }
      case TPURT_ARG_TENSOR_LIST: {
        const tpurt_tensor_t** v = (const tpurt_tensor_t**)TAKE(sizeof(void*) * (uint64_t)a->count);
        for (int32_t k = 0; k < a->count; ++k) {
          if (!a->v.tensors[k]) {
            v[k] = NULL;
            continue;
          }
          tpurt_tensor_t* t = (tpurt_tensor_t*)TAKE(sizeof(tpurt_tensor_t));
          *t = *a->v.tensors[k];
          v[k] = t;
        }
        a->v.tensors = v;
        break;
      }
      case TPURT_ARG_STRING:
        if (a->v.s) {
          size_t l = strlen(a->v.s) + 1;
          char* s = (char*)TAKE(l);
          memcpy(s, a->v.s, l);
          a->v.s = s;
        }
        break;
      default:
        break;
    }
  }
#undef TAKE
  *out = *call;
  out->name = name_c;
  out->overload = ovl_c;
  out->args = args;
  out->outputs = outs;
}

