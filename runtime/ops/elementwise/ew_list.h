/* Every elementwise kernel: EW_X(kernel, "registered name", dtypes, extra flags) once per
 * name it answers to. Kernel functions are tpurt_ew_k_<kernel> /
 * tpurt_ew_r_<kernel> (optimized / reference). Expanded in
 * elementwise_table.c; declared below. */
#ifndef TPURT_OPS_EW_LIST_H_
#define TPURT_OPS_EW_LIST_H_

#include "tpurt/kernel.h"

/* The dtypes an entry accepts for its first tensor argument (tpurt/kernel.h),
 * from its ew_op_t (ew_ops.h): the dtypes d for which some call with a first
 * operand of d reaches a compute dtype the op's `allow` admits. A unary op
 * computes in d itself (EW_P_FLOAT: integers and bool in float32, EW_P_BOOL:
 * anything read as bool). An op of two or more operands promotes: a bool or
 * integer first operand with a floating second computes in floating point, so
 * every op whose `allow` holds a floating dtype takes every real dtype; only
 * integer-only ops (bitwise, shifts, gcd/lcm) refuse floating first operands.
 * copy_, fill_, zero_, where (whose condition is read as bool) and
 * masked_fill_ move every real dtype. Which combinations of operands work
 * stays the kernel's to report. */
#define EW_DT_ANY TPURT_DTYPES_REAL
#define EW_DT_NUM (TPURT_DTYPES_FLOAT | TPURT_DTYPES_INT)     /* unary, allow EW_NUM: bool refused */
#define EW_DT_FLOAT TPURT_DTYPES_FLOAT                        /* unary on floats, no promotion */
#define EW_DT_INTB (TPURT_DTYPES_INT | TPURT_DTYPE_BIT(BOOL)) /* integer-only ops */
/* and uint16/32/64, for the ops CPU runs on them (copy, fill, eq/ne, mul, true division, bitwise, xlog1py;
 * div with a rounding mode is refused at the call, fallback_precheck.cpp) */
#define EW_DT_ANY_U (EW_DT_ANY | TPURT_DTYPES_UINT_WIDE)
#define EW_DT_INTB_U (EW_DT_INTB | TPURT_DTYPES_UINT_WIDE)
/* unary ops that compute integers in float (EW_P_FLOAT): CPU promotes uint16/32/64 to float32 too */
#define EW_DT_FLOATP_U (EW_DT_ANY | TPURT_DTYPES_UINT_WIDE)
/* and those that are identities or constants on unsigned integers (floor, isnan, signbit, ...) */
#define EW_DT_NUM_U (EW_DT_NUM | TPURT_DTYPES_UINT_WIDE)

#define EW_OP_LIST(EW_X) \
  EW_X(copy, "copy", EW_DT_ANY_U, TPURT_OP_OVERWRITES_SELF) \
  EW_X(fill, "fill", EW_DT_ANY_U, TPURT_OP_OVERWRITES_SELF) \
  EW_X(zero, "zero", EW_DT_ANY_U, TPURT_OP_OVERWRITES_SELF) \
  EW_X(where, "where", EW_DT_ANY, 0) \
  EW_X(masked_fill, "masked_fill", EW_DT_ANY, 0) \
  EW_X(clamp, "clamp", EW_DT_ANY, 0) \
  EW_X(clamp_min, "clamp_min", EW_DT_ANY, 0) \
  EW_X(clamp_max, "clamp_max", EW_DT_ANY, 0) \
  EW_X(add, "add", EW_DT_ANY, 0) \
  EW_X(sub, "sub", EW_DT_ANY, 0) \
  EW_X(rsub, "rsub", EW_DT_ANY, 0) \
  EW_X(add_relu, "_add_relu", EW_DT_ANY, 0) \
  EW_X(mul, "mul", EW_DT_ANY_U, 0) \
  EW_X(div, "div", EW_DT_ANY_U, 0) \
  EW_X(remainder, "remainder", EW_DT_ANY, 0) \
  EW_X(fmod, "fmod", EW_DT_ANY, 0) \
  EW_X(floor_divide, "floor_divide", EW_DT_ANY, 0) \
  EW_X(pow, "pow", EW_DT_ANY, 0) \
  EW_X(atan2, "atan2", EW_DT_ANY, 0) \
  EW_X(hypot, "hypot", EW_DT_ANY, 0) \
  EW_X(copysign, "copysign", EW_DT_ANY, 0) \
  EW_X(nextafter, "nextafter", EW_DT_ANY, 0) \
  EW_X(xlogy, "xlogy", EW_DT_ANY, 0) \
  EW_X(xlog1py, "special_xlog1py", EW_DT_ANY_U, 0) \
  EW_X(logaddexp, "logaddexp", EW_DT_ANY, 0) \
  EW_X(logaddexp2, "logaddexp2", EW_DT_ANY, 0) \
  EW_X(heaviside, "heaviside", EW_DT_ANY, 0) \
  EW_X(maximum, "maximum", EW_DT_ANY, 0) \
  EW_X(minimum, "minimum", EW_DT_ANY, 0) \
  EW_X(fmax, "fmax", EW_DT_ANY, 0) \
  EW_X(fmin, "fmin", EW_DT_ANY, 0) \
  EW_X(gcd, "gcd", EW_DT_INTB, 0) \
  EW_X(lcm, "lcm", EW_DT_INTB, 0) \
  EW_X(eq, "eq", EW_DT_ANY_U, 0) \
  EW_X(ne, "ne", EW_DT_ANY_U, 0) \
  EW_X(lt, "lt", EW_DT_ANY, 0) \
  EW_X(le, "le", EW_DT_ANY, 0) \
  EW_X(gt, "gt", EW_DT_ANY, 0) \
  EW_X(ge, "ge", EW_DT_ANY, 0) \
  EW_X(logical_and, "logical_and", EW_DT_ANY, 0) \
  EW_X(logical_or, "logical_or", EW_DT_ANY, 0) \
  EW_X(logical_xor, "logical_xor", EW_DT_ANY, 0) \
  EW_X(logical_not, "logical_not", EW_DT_ANY, 0) \
  EW_X(bitwise_and, "bitwise_and", EW_DT_INTB_U, 0) \
  EW_X(bitwise_or, "bitwise_or", EW_DT_INTB_U, 0) \
  EW_X(bitwise_xor, "bitwise_xor", EW_DT_INTB_U, 0) \
  EW_X(bitwise_not, "bitwise_not", EW_DT_INTB, 0) \
  EW_X(lshift, "bitwise_left_shift", EW_DT_INTB, 0) \
  EW_X(lshift, "__lshift__", EW_DT_INTB, 0) \
  EW_X(lshift, "__ilshift__", EW_DT_INTB, 0) \
  EW_X(lshift, "__ilshift_", EW_DT_INTB, 0) \
  EW_X(rshift, "bitwise_right_shift", EW_DT_INTB, 0) \
  EW_X(rshift, "__rshift__", EW_DT_INTB, 0) \
  EW_X(rshift, "__irshift__", EW_DT_INTB, 0) \
  EW_X(rshift, "__irshift_", EW_DT_INTB, 0) \
  EW_X(neg, "neg", EW_DT_NUM, 0) \
  EW_X(abs, "abs", EW_DT_NUM, 0) \
  EW_X(sign, "sign", EW_DT_ANY, 0) \
  EW_X(sign, "sgn", EW_DT_ANY, 0) \
  EW_X(reciprocal, "reciprocal", EW_DT_FLOATP_U, 0) \
  EW_X(sqrt, "sqrt", EW_DT_FLOATP_U, 0) \
  EW_X(rsqrt, "rsqrt", EW_DT_FLOATP_U, 0) \
  EW_X(exp, "exp", EW_DT_FLOATP_U, 0) \
  EW_X(exp2, "exp2", EW_DT_FLOATP_U, 0) \
  EW_X(expm1, "expm1", EW_DT_FLOATP_U, 0) \
  EW_X(log, "log", EW_DT_FLOATP_U, 0) \
  EW_X(log2, "log2", EW_DT_FLOATP_U, 0) \
  EW_X(log10, "log10", EW_DT_FLOATP_U, 0) \
  EW_X(log1p, "log1p", EW_DT_FLOATP_U, 0) \
  EW_X(sin, "sin", EW_DT_FLOATP_U, 0) \
  EW_X(cos, "cos", EW_DT_FLOATP_U, 0) \
  EW_X(tan, "tan", EW_DT_FLOATP_U, 0) \
  EW_X(tanh, "tanh", EW_DT_FLOATP_U, 0) \
  EW_X(sinh, "sinh", EW_DT_FLOATP_U, 0) \
  EW_X(cosh, "cosh", EW_DT_FLOATP_U, 0) \
  EW_X(asin, "asin", EW_DT_FLOATP_U, 0) \
  EW_X(acos, "acos", EW_DT_FLOATP_U, 0) \
  EW_X(atan, "atan", EW_DT_FLOATP_U, 0) \
  EW_X(asinh, "asinh", EW_DT_FLOATP_U, 0) \
  EW_X(acosh, "acosh", EW_DT_FLOATP_U, 0) \
  EW_X(atanh, "atanh", EW_DT_FLOATP_U, 0) \
  EW_X(sigmoid, "sigmoid", EW_DT_FLOATP_U, 0) \
  EW_X(erf, "erf", EW_DT_FLOATP_U, 0) \
  EW_X(erfc, "erfc", EW_DT_FLOATP_U, 0) \
  EW_X(erfinv, "erfinv", EW_DT_FLOATP_U, 0) \
  EW_X(lgamma, "lgamma", EW_DT_FLOATP_U, 0) \
  EW_X(digamma, "digamma", EW_DT_FLOATP_U, 0) \
  EW_X(sinc, "sinc", EW_DT_FLOATP_U, 0) \
  EW_X(special_entr, "special_entr", EW_DT_FLOATP_U, 0) \
  EW_X(angle, "angle", EW_DT_FLOATP_U, 0) \
  EW_X(floor, "floor", EW_DT_NUM_U, 0) \
  EW_X(ceil, "ceil", EW_DT_NUM_U, 0) \
  EW_X(trunc, "trunc", EW_DT_NUM_U, 0) \
  EW_X(round, "round", EW_DT_NUM_U, 0) \
  EW_X(frac, "frac", EW_DT_FLOAT, 0) \
  EW_X(isnan, "isnan", EW_DT_ANY_U, 0) \
  EW_X(isposinf, "isposinf", EW_DT_ANY_U, 0) \
  EW_X(isneginf, "isneginf", EW_DT_ANY_U, 0) \
  EW_X(signbit, "signbit", EW_DT_ANY_U, 0) \
  EW_X(nan_to_num, "nan_to_num", EW_DT_ANY_U, 0) \
  EW_X(logit, "logit", EW_DT_FLOATP_U, 0) \
  EW_X(relu, "relu", EW_DT_NUM, 0) \
  EW_X(gelu, "gelu", EW_DT_FLOAT, 0) \
  EW_X(silu, "silu", EW_DT_FLOAT, 0) \
  EW_X(mish, "mish", EW_DT_FLOAT, 0) \
  EW_X(hardsigmoid, "hardsigmoid", EW_DT_FLOAT, 0) \
  EW_X(hardswish, "hardswish", EW_DT_FLOAT, 0) \
  EW_X(elu, "elu", EW_DT_FLOAT, 0) \
  EW_X(leaky_relu, "leaky_relu", EW_DT_FLOAT, 0) \
  EW_X(hardtanh, "hardtanh", EW_DT_NUM, 0) \
  EW_X(softplus, "softplus", EW_DT_FLOAT, 0) \
  EW_X(threshold, "threshold", EW_DT_NUM, 0) \
  EW_X(hardshrink, "hardshrink", EW_DT_FLOAT, 0) \
  EW_X(softshrink, "softshrink", EW_DT_FLOAT, 0) \
  EW_X(threshold_backward, "threshold_backward", EW_DT_ANY, 0) \
  EW_X(sigmoid_backward, "sigmoid_backward", EW_DT_ANY, 0) \
  EW_X(tanh_backward, "tanh_backward", EW_DT_ANY, 0) \
  EW_X(silu_backward, "silu_backward", EW_DT_ANY, 0) \
  EW_X(gelu_backward, "gelu_backward", EW_DT_ANY, 0) \
  EW_X(hardsigmoid_backward, "hardsigmoid_backward", EW_DT_ANY, 0) \
  EW_X(hardswish_backward, "hardswish_backward", EW_DT_ANY, 0) \
  EW_X(hardtanh_backward, "hardtanh_backward", EW_DT_ANY, 0) \
  EW_X(leaky_relu_backward, "leaky_relu_backward", EW_DT_ANY, 0) \
  EW_X(elu_backward, "elu_backward", EW_DT_ANY, 0) \
  EW_X(softplus_backward, "softplus_backward", EW_DT_ANY, 0) \
  EW_X(logit_backward, "logit_backward", EW_DT_ANY, 0) \
  EW_X(hardshrink_backward, "hardshrink_backward", EW_DT_ANY, 0) \
  EW_X(softshrink_backward, "softshrink_backward", EW_DT_ANY, 0) \
  EW_X(log_sigmoid_backward, "log_sigmoid_backward", EW_DT_ANY, 0) \
  EW_X(lerp, "lerp", EW_DT_ANY, 0) \
  EW_X(addcmul, "addcmul", EW_DT_ANY, 0) \
  EW_X(addcdiv, "addcdiv", EW_DT_ANY, 0) \
  EW_X(identity, "conj_physical", EW_DT_ANY, 0) \
  EW_X(log_sigmoid_forward, "log_sigmoid_forward", EW_DT_FLOAT, 0)

#define EW_DECLARE(k, name, dtypes, flags)                                                                 \
  tpurt_status_t tpurt_ew_k_##k(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);      \
  tpurt_status_t tpurt_ew_r_##k(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);
EW_OP_LIST(EW_DECLARE)
#undef EW_DECLARE

#endif /* TPURT_OPS_EW_LIST_H_ */
