/* nextafter for bfloat16 and float16: the next representable 16-bit value, a
 * step on the bit pattern as PyTorch CPU's c10::nextafter does (musl's
 * algorithm), since computing in float and rounding back would land on the
 * same value. Runs through the elementwise engine with 16-bit loop dtypes
 * (broadcasting, casts of other inputs). */
#include <string.h>

#include "ops/args.h"
#include "ops/elementwise/ew_nextafter16.h"

static inline bool is_nan16(uint16_t v, bool bf16) {
  return bf16 ? ((v & 0x7f80) == 0x7f80 && (v & 0x007f)) : ((v & 0x7c00) == 0x7c00 && (v & 0x03ff));
}

static uint16_t next16(uint16_t from, uint16_t to, bool bf16) {
  const uint16_t sign = 0x8000;
  if (is_nan16(from, bf16)) return from;
  if (is_nan16(to, bf16)) return to; /* CPU returns from + to: a NaN */
  if (from == to) return from;
  uint16_t af = from & ~sign, at = to & ~sign;
  if (af == 0) return at == 0 ? to : (uint16_t)((to & sign) | 1);
  if (af > at || ((from ^ to) & sign)) return (uint16_t)(from - 1);
  return (uint16_t)(from + 1);
}

static void loop16(char** data, const int64_t* strides, int64_t n, void* user) {
  bool bf16 = *(const bool*)user;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t a, b, r;
    memcpy(&a, data[1] + i * strides[1], 2);
    memcpy(&b, data[2] + i * strides[2], 2);
    r = next16(a, b, bf16);
    memcpy(data[0] + i * strides[0], &r, 2);
  }
}

static void ref16(tpurt_ew_value_t* out, const tpurt_ew_value_t* in, void* user) {
  /* the reference path hands values as doubles: go through the 16-bit patterns */
  bool bf16 = *(const bool*)user;
  tpurt_dtype_t dt = bf16 ? TPURT_DTYPE_BFLOAT16 : TPURT_DTYPE_FLOAT16;
  uint16_t a, b, r;
  tpurt_dtype_store_f64(dt, &a, in[0].d);
  tpurt_dtype_store_f64(dt, &b, in[1].d);
  r = next16(a, b, bf16);
  out[0].d = tpurt_dtype_load_f64(dt, &r);
}

tpurt_status_t tpurt_ew_nextafter16(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  if (call->num_args < 2 || call->num_outputs < 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "nextafter: expected (self, other) and an output");
  tpurt_dtype_t dt = call->outputs[0].dtype;
  bool bf16 = dt == TPURT_DTYPE_BFLOAT16;
  tpurt_ew_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.op = "nextafter";
  cfg.num_outputs = 1;
  cfg.num_inputs = 2;
  cfg.tensors[0] = &call->outputs[0];
  cfg.loop_dtypes[0] = dt;
  tpurt_tensor_t wrapped[2];
  _Alignas(8) char storage[2][8];
  for (int k = 0; k < 2; ++k) {
    const tpurt_tensor_t* t = tpurt_arg_as_tensor(tpurt_arg_at(call, k), &wrapped[k], storage[k]);
    if (!t) return TPURT_STATUS(INVALID_ARGUMENT, "nextafter: argument %d must be a tensor or a number", k);
    cfg.tensors[1 + k] = t;
    cfg.loop_dtypes[1 + k] = dt;
  }
  cfg.loop = loop16;
  cfg.user = &bf16;
  if (ref) return tpurt_ew_run_reference(&cfg, ref16, &bf16);
  return tpurt_ew_run(ctx, &cfg);
}
