/* Every elementwise kernel: EW_X(kernel, "registered name") once per name it
 * answers to. Kernel functions are tpurt_ew_k_<kernel> / tpurt_ew_r_<kernel>
 * (optimized / reference). Expanded in elementwise_table.c; declared below. */
#ifndef TPURT_OPS_EW_LIST_H_
#define TPURT_OPS_EW_LIST_H_

#include "tpurt/kernel.h"

#define EW_OP_LIST(EW_X)                                                    \
  EW_X(copy, "copy") EW_X(fill, "fill") EW_X(zero, "zero")                  \
  EW_X(where, "where") EW_X(masked_fill, "masked_fill")                     \
  EW_X(clamp, "clamp") EW_X(clamp_min, "clamp_min") EW_X(clamp_max, "clamp_max") \
  EW_X(add, "add") EW_X(sub, "sub") EW_X(rsub, "rsub") EW_X(add_relu, "_add_relu") \
  EW_X(mul, "mul") EW_X(div, "div") EW_X(remainder, "remainder") EW_X(fmod, "fmod") \
  EW_X(floor_divide, "floor_divide") EW_X(pow, "pow") EW_X(atan2, "atan2")  \
  EW_X(hypot, "hypot") EW_X(copysign, "copysign") EW_X(nextafter, "nextafter") \
  EW_X(xlogy, "xlogy") EW_X(xlog1py, "special_xlog1py") EW_X(logaddexp, "logaddexp") \
  EW_X(logaddexp2, "logaddexp2") EW_X(heaviside, "heaviside")               \
  EW_X(maximum, "maximum") EW_X(minimum, "minimum") EW_X(fmax, "fmax") EW_X(fmin, "fmin") \
  EW_X(gcd, "gcd") EW_X(lcm, "lcm")                                         \
  EW_X(eq, "eq") EW_X(ne, "ne") EW_X(lt, "lt") EW_X(le, "le") EW_X(gt, "gt") EW_X(ge, "ge") \
  EW_X(logical_and, "logical_and") EW_X(logical_or, "logical_or")           \
  EW_X(logical_xor, "logical_xor") EW_X(logical_not, "logical_not")         \
  EW_X(bitwise_and, "bitwise_and") EW_X(bitwise_or, "bitwise_or")           \
  EW_X(bitwise_xor, "bitwise_xor") EW_X(bitwise_not, "bitwise_not")         \
  EW_X(lshift, "bitwise_left_shift") EW_X(lshift, "__lshift__")             \
  EW_X(lshift, "__ilshift__") EW_X(lshift, "__ilshift_")                    \
  EW_X(rshift, "bitwise_right_shift") EW_X(rshift, "__rshift__")            \
  EW_X(rshift, "__irshift__") EW_X(rshift, "__irshift_")                    \
  EW_X(neg, "neg") EW_X(abs, "abs") EW_X(sign, "sign") EW_X(sign, "sgn")    \
  EW_X(reciprocal, "reciprocal") EW_X(sqrt, "sqrt") EW_X(rsqrt, "rsqrt")    \
  EW_X(exp, "exp") EW_X(exp2, "exp2") EW_X(expm1, "expm1") EW_X(log, "log") \
  EW_X(log2, "log2") EW_X(log10, "log10") EW_X(log1p, "log1p")              \
  EW_X(sin, "sin") EW_X(cos, "cos") EW_X(tan, "tan") EW_X(tanh, "tanh")     \
  EW_X(sinh, "sinh") EW_X(cosh, "cosh") EW_X(asin, "asin") EW_X(acos, "acos") \
  EW_X(atan, "atan") EW_X(asinh, "asinh") EW_X(acosh, "acosh") EW_X(atanh, "atanh") \
  EW_X(sigmoid, "sigmoid") EW_X(erf, "erf") EW_X(erfc, "erfc") EW_X(erfinv, "erfinv") \
  EW_X(lgamma, "lgamma") EW_X(digamma, "digamma") EW_X(sinc, "sinc")        \
  EW_X(special_entr, "special_entr") EW_X(angle, "angle")                   \
  EW_X(floor, "floor") EW_X(ceil, "ceil") EW_X(trunc, "trunc") EW_X(round, "round") \
  EW_X(frac, "frac") EW_X(isnan, "isnan") EW_X(isposinf, "isposinf")        \
  EW_X(isneginf, "isneginf") EW_X(signbit, "signbit") EW_X(nan_to_num, "nan_to_num") \
  EW_X(logit, "logit") EW_X(relu, "relu") EW_X(gelu, "gelu") EW_X(silu, "silu") \
  EW_X(mish, "mish") EW_X(hardsigmoid, "hardsigmoid") EW_X(hardswish, "hardswish") \
  EW_X(elu, "elu") EW_X(leaky_relu, "leaky_relu") EW_X(hardtanh, "hardtanh") \
  EW_X(softplus, "softplus") EW_X(threshold, "threshold")                   \
  EW_X(hardshrink, "hardshrink") EW_X(softshrink, "softshrink")             \
  EW_X(threshold_backward, "threshold_backward")                            \
  EW_X(sigmoid_backward, "sigmoid_backward") EW_X(tanh_backward, "tanh_backward") \
  EW_X(silu_backward, "silu_backward") EW_X(gelu_backward, "gelu_backward") \
  EW_X(hardsigmoid_backward, "hardsigmoid_backward")                        \
  EW_X(hardswish_backward, "hardswish_backward")                            \
  EW_X(hardtanh_backward, "hardtanh_backward")                              \
  EW_X(leaky_relu_backward, "leaky_relu_backward") EW_X(elu_backward, "elu_backward") \
  EW_X(softplus_backward, "softplus_backward") EW_X(logit_backward, "logit_backward") \
  EW_X(hardshrink_backward, "hardshrink_backward")                          \
  EW_X(softshrink_backward, "softshrink_backward")                          \
  EW_X(log_sigmoid_backward, "log_sigmoid_backward")                        \
  EW_X(lerp, "lerp") EW_X(addcmul, "addcmul") EW_X(addcdiv, "addcdiv")      \
  EW_X(identity, "conj_physical") EW_X(log_sigmoid_forward, "log_sigmoid_forward")

#define EW_DECLARE(k, name)                                                                 \
  tpurt_status_t tpurt_ew_k_##k(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);      \
  tpurt_status_t tpurt_ew_r_##k(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call);
EW_OP_LIST(EW_DECLARE)
#undef EW_DECLARE

#endif /* TPURT_OPS_EW_LIST_H_ */
