// An unboxed front for the hottest direct structured ops (fallback_op_info.cpp
// registers them): add, sub, mul and div, functional and in-place, on tensors
// that need none of the generic path's work. Boxing a call copies its tensors
// into IValues; each copy takes a TensorImpl's count from one to two, which
// increfs its Python object under the GIL; that and the generic stages (check,
// cached layout lookup, alias rules, marshalling) cost more host time than the
// kernel of a small op. A call qualifies when both tensors are dense,
// contiguous tpu tensors of one dtype (floating, or integral for add, sub and
// mul) on the current device, with no math bits, whose sizes broadcast (an
// in-place op's to self's), or the other operand is a Python number that
// keeps the tensor's dtype: then nothing can fail, the output is contiguous
// (TensorIterator's layout for contiguous operands), and the call goes to the
// same kernel and queue the generic path would use. Every other call is boxed
// and handed to tpu_fallback, unchanged. fill_.Scalar and pow.Tensor_Scalar
// have fronts of the same kind (below, registered by register_fast_fronts).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>

#include <torch/library.h>

#include "fallback.h"

namespace torch_tpu::fallback {
namespace {

bool floating(c10::ScalarType t) {
  return t == c10::kFloat || t == c10::kBFloat16 || t == c10::kHalf || t == c10::kDouble;
}
bool integral(c10::ScalarType t) {
  return t == c10::kLong || t == c10::kInt || t == c10::kShort || t == c10::kChar || t == c10::kByte;
}

// Whether a contiguous tensor's size-1 dims have the strides a contiguous tensor of its shape gets: an
// ambiguous one (a channels-last (N, C, 1, 1), a slice) is contiguous too, but TensorIterator lays a
// result out after its strides where it broadcasts or meets a number, so those take the boxed path.
inline bool size1_strides_canonical(const c10::TensorImpl* impl) {
  c10::IntArrayRef sizes = impl->sizes(), strides = impl->strides();
  int64_t expect = 1;
  for (int64_t d = impl->dim() - 1; d >= 0; --d) {
    if (sizes[d] == 1 && strides[d] != expect) return false;
    expect *= std::max<int64_t>(sizes[d], 1);
  }
  return true;
}

// A dense tpu tensor the kernel can take as it is.
inline bool plain(const at::Tensor& t, c10::DeviceIndex device) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  return t.defined() && impl->device_type() == kTpu && impl->device().index() == device &&
         impl->layout() == c10::kStrided && impl->is_contiguous() && !impl->is_neg() &&
         impl->storage().data() != nullptr && impl->dim() <= TPURT_MAX_DIMS &&  // more: folded by the boxed path
         size1_strides_canonical(impl);
}

// A Python number (a wrapped 0-d CPU tensor) as a kernel argument, when the
// result keeps the tensor's dtype: any real number with a floating tensor, an
// integer with an integral one.
inline bool number_arg(const at::Tensor& t, bool is_float, tpurt_arg_t* a) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (!t.defined() || !impl->is_wrapped_number() || impl->device_type() != c10::DeviceType::CPU) return false;
  if (t.scalar_type() == c10::kDouble && is_float) {
    a->kind = TPURT_ARG_DOUBLE;
    a->v.d = *t.const_data_ptr<double>();
    return true;
  }
  if (t.scalar_type() == c10::kLong) {
    a->kind = TPURT_ARG_INT;
    a->v.i = *t.const_data_ptr<int64_t>();
    return true;
  }
  return false;
}

// alpha as a kernel argument; a floating alpha only with a floating tensor
// (CPU refuses it for integral ones).
inline bool scalar_arg(const c10::Scalar& s, bool is_float, tpurt_arg_t* a) {
  if (s.isFloatingPoint() && is_float) {
    a->kind = TPURT_ARG_DOUBLE;
    a->v.d = s.toDouble();
    return true;
  }
  if (s.isIntegral(false)) {
    a->kind = TPURT_ARG_INT;
    a->v.i = s.toLong();
    return true;
  }
  return false;
}

using Sizes = c10::SmallVector<int64_t, 6>;

// The broadcast of a's and b's sizes; false when they do not broadcast.
inline bool broadcast(c10::IntArrayRef a, c10::IntArrayRef b, Sizes* out) {
  if (a.equals(b)) {
    out->assign(a.begin(), a.end());
    return true;
  }
  const size_t n = std::max(a.size(), b.size());
  out->resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (sa != sb && sa != 1 && sb != 1) return false;
    (*out)[i] = sa == 1 ? sb : sa;
  }
  return true;
}

// One op of the front: its handle (for the boxed path) and kernel.
struct FastOp {
  const char* name;      // "aten::add"
  const char* overload;  // "Tensor"
  const char* full;      // "aten::add.Tensor", for messages
  std::optional<c10::OperatorHandle> handle;
  const tpurt_op_def_t* def = nullptr;
  std::string base;  // the kernel call's name ("add")
};

enum Op { kAdd, kSub, kMul, kDiv, kAdd_, kSub_, kMul_, kDiv_, kNumOps };
FastOp g_ops[kNumOps] = {
    {"aten::add", "Tensor", "aten::add.Tensor"},   {"aten::sub", "Tensor", "aten::sub.Tensor"},
    {"aten::mul", "Tensor", "aten::mul.Tensor"},   {"aten::div", "Tensor", "aten::div.Tensor"},
    {"aten::add_", "Tensor", "aten::add_.Tensor"}, {"aten::sub_", "Tensor", "aten::sub_.Tensor"},
    {"aten::mul_", "Tensor", "aten::mul_.Tensor"}, {"aten::div_", "Tensor", "aten::div_.Tensor"},
};

// The kernel's arguments (self, other[, alpha]) and the output's sizes, or
// false when the call must take the generic path.
template <Op kOp, bool kInPlace>
inline bool fast_args(const FastOp& op, const at::Tensor& self, const at::Tensor& other, const c10::Scalar* alpha,
                      c10::DeviceIndex device, tpurt_tensor_t* t, tpurt_arg_t* a, Sizes* sizes) {
  if (!op.def || !plain(self, device)) return false;
  const c10::ScalarType dtype = self.scalar_type();
  const bool is_float = floating(dtype);
  // div of integers is a true division (a float result)
  if (!is_float && (kOp == kDiv || kOp == kDiv_ || !integral(dtype))) return false;
  const tpurt_dtype_t tdtype = map_dtype(dtype);
  if (!tpurt_op_supports_dtype(op.def, tdtype)) return false;
  std::memset(a, 0, 3 * sizeof(tpurt_arg_t));
  if (alpha && !scalar_arg(*alpha, is_float, &a[2])) return false;
  a[0].kind = TPURT_ARG_TENSOR;
  a[0].v.tensor = &t[0];
  if (plain(other, device)) {
    if (other.scalar_type() != dtype || !broadcast(self.sizes(), other.sizes(), sizes)) return false;
    if (kInPlace) {
      // an in-place op writes self's shape; one whose other operand shares
      // self's memory gets CPU's overlap rules on the generic path
      if (!self.sizes().equals(*sizes) || shares_storage(self, other)) return false;
    }
    fill_tensor_desc_as(other, tdtype, true, &t[1], op.full);
    a[1].kind = TPURT_ARG_TENSOR;
    a[1].v.tensor = &t[1];
  } else if ((op.def->flags & TPURT_OP_ALIAS_SAFE) && number_arg(other, is_float, &a[1])) {
    if (!kInPlace) sizes->assign(self.sizes().begin(), self.sizes().end());
  } else {
    return false;
  }
  fill_tensor_desc_as(self, tdtype, true, &t[0], op.full);
  return true;
}

inline void submit(const FastOp& op, c10::DeviceIndex device, tpurt_arg_t* a, int nargs, tpurt_tensor_t* out) {
  tpurt_op_call_t call{op.base.c_str(), op.overload, nargs, a, 1, out};
  tpurt_status_t s = tpurt_queue_submit_kernel(current_queue(device), op.def, &call);
  if (TPURT_UNLIKELY(s != nullptr)) throw_status(s, op.full);
}

template <typename... Args>
c10::IValue boxed(const FastOp& op, Args&&... args) {
  torch::jit::Stack stack;
  stack.reserve(sizeof...(Args));
  torch::jit::push(stack, std::forward<Args>(args)...);
  tpu_fallback(*op.handle, &stack);
  return std::move(stack.back());
}

// Runs the call on the fast path: the functional forms into a fresh `out`,
// the in-place ones into self. False when it must be boxed instead.
template <Op kOp, bool kInPlace>
bool run_fast(const at::Tensor& self, const at::Tensor& other, const c10::Scalar* alpha, at::Tensor* out) {
  const FastOp& op = g_ops[kOp];
  const c10::DeviceIndex device = current_device_index();
  tpurt_tensor_t t[3];
  tpurt_arg_t a[3];
  Sizes sizes;
  if (!fast_args<kOp, kInPlace>(op, self, other, alpha, device, t, a, &sizes)) return false;
  tpurt_tensor_t* result = &t[0];
  if (!kInPlace) {
    *out = empty_tpu_contiguous(sizes, self.scalar_type());
    fill_tensor_desc_as(*out, t[0].dtype, false, &t[2], op.full);  // just allocated
    result = &t[2];
  }
  submit(op, device, a, alpha ? 3 : 2, result);
  return true;
}

template <Op kOp>
at::Tensor binary_alpha(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  at::Tensor out;
  return run_fast<kOp, false>(self, other, &alpha, &out) ? out : boxed(g_ops[kOp], self, other, alpha).toTensor();
}

template <Op kOp>
at::Tensor binary(const at::Tensor& self, const at::Tensor& other) {
  at::Tensor out;
  return run_fast<kOp, false>(self, other, nullptr, &out) ? out : boxed(g_ops[kOp], self, other).toTensor();
}

template <Op kOp>
at::Tensor& binary_alpha_(at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  if (!run_fast<kOp, true>(self, other, &alpha, nullptr)) boxed(g_ops[kOp], self, other, alpha);
  return self;
}

template <Op kOp>
at::Tensor& binary_(at::Tensor& self, const at::Tensor& other) {
  if (!run_fast<kOp, true>(self, other, nullptr, nullptr)) boxed(g_ops[kOp], self, other);
  return self;
}

// ---- fill_.Scalar and pow.Tensor_Scalar ----
// A decode step of Hugging Face generate() makes its masks and flags with torch.full / new_ones
// (fill_ on a fresh bool or int64 tensor) and GPT-2's gelu_new computes x ** 3.0: through the
// boxed path each cost about 7,000 host instructions against CPU's 1,000 (fill_) and its
// structured wrapper's 6,000 (pow), counted by bench/callgrind_generate.py. These fronts take the
// calls that can neither fail nor need the boxed path's work and send the kernel the arguments
// the boxed path would; every other call goes where it went before.

FastOp g_fill = {"aten::fill_", "Scalar", "aten::fill_.Scalar"};
FastOp g_pow = {"aten::pow", "Tensor_Scalar", "aten::pow.Tensor_Scalar"};

// value as fill_'s argument when converting it to dtype cannot fail (CPU's fill_ raises on a value
// the dtype cannot hold): a bool into bool, an integer into int64 or into a narrower integer that
// holds it, a real number into a floating dtype whose finite range holds it (or NaN / inf).
inline bool fill_value_arg(const c10::Scalar& v, c10::ScalarType dtype, tpurt_arg_t* a) {
  if (v.isBoolean()) {
    if (dtype != c10::kBool) return false;
    a->kind = TPURT_ARG_BOOL;
    a->v.b = v.toBool();
    return true;
  }
  if (dtype == c10::kBool || v.isComplex()) return false;
  if (v.isIntegral(false)) {
    if (v.type() != c10::kLong) return false;  // an unsigned value above int64's range
    const int64_t i = v.toLong();
    bool fits = true;
    switch (dtype) {
      case c10::kLong: break;
      case c10::kInt: fits = i >= INT32_MIN && i <= INT32_MAX; break;
      case c10::kShort: fits = i >= INT16_MIN && i <= INT16_MAX; break;
      case c10::kChar: fits = i >= INT8_MIN && i <= INT8_MAX; break;
      case c10::kByte: fits = i >= 0 && i <= UINT8_MAX; break;
      default: fits = floating(dtype) && i >= -65504 && i <= 65504; break;
    }
    if (!fits) return false;
    a->kind = TPURT_ARG_INT;
    a->v.i = i;
    return true;
  }
  if (!v.isFloatingPoint()) return false;
  const double d = v.toDouble();
  if (integral(dtype)) {
    // a whole number in a float (new_ones fills 1.0): what it converts to is certain within the
    // dtype's range (int64: where doubles are still whole numbers one apart)
    const double lo = dtype == c10::kLong    ? -9007199254740992.0
                      : dtype == c10::kInt   ? INT32_MIN
                      : dtype == c10::kShort ? INT16_MIN
                      : dtype == c10::kChar  ? INT8_MIN
                                             : 0;
    const double hi = dtype == c10::kLong    ? 9007199254740992.0
                      : dtype == c10::kInt   ? INT32_MAX
                      : dtype == c10::kShort ? INT16_MAX
                      : dtype == c10::kChar  ? INT8_MAX
                                             : UINT8_MAX;
    if (!(d >= lo && d <= hi) || d != std::trunc(d)) return false;  // NaN fails the first test
    a->kind = TPURT_ARG_DOUBLE;
    a->v.d = d;
    return true;
  }
  if (!floating(dtype)) return false;
  const double max = dtype == c10::kDouble  ? std::numeric_limits<double>::max()
                     : dtype == c10::kFloat ? std::numeric_limits<float>::max()
                     : dtype == c10::kHalf  ? 65504.0
                                            : 3.3895313892515355e38;  // bfloat16's largest finite
  if (std::isfinite(d) && std::fabs(d) > max) return false;
  a->kind = TPURT_ARG_DOUBLE;
  a->v.d = d;
  return true;
}

at::Tensor& fill_scalar_(at::Tensor& self, const c10::Scalar& value) {
  const FastOp& op = g_fill;
  const c10::DeviceIndex device = current_device_index();
  tpurt_arg_t a[2];
  std::memset(a, 0, sizeof a);
  if (op.def && plain(self, device) && fill_value_arg(value, self.scalar_type(), &a[1])) {
    const tpurt_dtype_t tdtype = map_dtype(self.scalar_type());
    if (tpurt_op_supports_dtype(op.def, tdtype)) {
      tpurt_tensor_t t;
      fill_tensor_desc_as(self, tdtype, true, &t, op.full);
      a[0].kind = TPURT_ARG_TENSOR;
      a[0].v.tensor = &t;
      submit(op, device, a, 2, &t);
      return self;
    }
  }
  boxed(op, self, value);
  return self;
}

at::Tensor pow_tensor_scalar(const at::Tensor& self, const c10::Scalar& exponent) {
  const FastOp& op = g_pow;
  const c10::DeviceIndex device = current_device_index();
  tpurt_arg_t a[2];
  std::memset(a, 0, sizeof a);
  // a floating tensor and a real exponent other than 0 and 1 (ATen's pow_out answers those without
  // a kernel: fill and copy): the result keeps self's dtype, laid out as self
  if (op.def && plain(self, device) && floating(self.scalar_type()) && !exponent.isBoolean() &&
      exponent.type() != c10::kUInt64 && scalar_arg(exponent, true, &a[1]) &&
      !(a[1].kind == TPURT_ARG_DOUBLE ? a[1].v.d == 0.0 || a[1].v.d == 1.0 : a[1].v.i == 0 || a[1].v.i == 1)) {
    const tpurt_dtype_t tdtype = map_dtype(self.scalar_type());
    if (tpurt_op_supports_dtype(op.def, tdtype)) {
      tpurt_tensor_t t[2];
      fill_tensor_desc_as(self, tdtype, true, &t[0], op.full);
      a[0].kind = TPURT_ARG_TENSOR;
      a[0].v.tensor = &t[0];
      at::Tensor out = empty_tpu_contiguous(self.sizes(), self.scalar_type());
      fill_tensor_desc_as(out, tdtype, false, &t[1], op.full);  // just allocated
      submit(op, device, a, 2, &t[1]);
      return out;
    }
  }
  // PyTorch's own kernel for a new backend: meta, allocation, then pow.Tensor_Scalar_out (boxed)
  torch::jit::Stack stack;
  torch::jit::push(stack, self, exponent);
  op.handle->callBoxedForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional, stack);
  return std::move(stack.back()).toTensor();
}

template <typename Fn>
void add_front(torch::Library& lib, FastOp& op, Fn fn) {
  auto handle = c10::Dispatcher::singleton().findSchema({op.name, op.overload});
  if (!handle || handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) return;
  op.handle = *handle;
  op.def = tpurt_op_resolve(op.name, op.overload, 0);
  char buf[64];
  op.base = tpurt_op_base_name(op.name, buf, sizeof buf);
  lib.impl(op.full + 6, fn);
}

template <Op kOp, typename Fn>
void add_impl(torch::Library& lib, const c10::OperatorHandle& handle, Fn fn) {
  FastOp& op = g_ops[kOp];
  op.handle = handle;
  op.def = tpurt_op_resolve(op.name, op.overload, 0);
  char buf[64];
  op.base = tpurt_op_base_name(op.name, buf, sizeof buf);
  lib.impl(op.full + 6, fn);
}

}  // namespace

void register_fast_fronts(torch::Library& lib) {
  add_front(lib, g_fill, TORCH_FN(fill_scalar_));
  add_front(lib, g_pow, TORCH_FN(pow_tensor_scalar));
}

bool register_fast_op(torch::Library& lib, const c10::OperatorHandle& handle) {
  const c10::OperatorName& name = handle.operator_name();
  if (name.overload_name != "Tensor") return false;
  const std::string& n = name.name;
  if (n == "aten::add") add_impl<kAdd>(lib, handle, TORCH_FN(binary_alpha<kAdd>));
  else if (n == "aten::sub") add_impl<kSub>(lib, handle, TORCH_FN(binary_alpha<kSub>));
  else if (n == "aten::mul") add_impl<kMul>(lib, handle, TORCH_FN(binary<kMul>));
  else if (n == "aten::div") add_impl<kDiv>(lib, handle, TORCH_FN(binary<kDiv>));
  else if (n == "aten::add_") add_impl<kAdd_>(lib, handle, TORCH_FN(binary_alpha_<kAdd_>));
  else if (n == "aten::sub_") add_impl<kSub_>(lib, handle, TORCH_FN(binary_alpha_<kSub_>));
  else if (n == "aten::mul_") add_impl<kMul_>(lib, handle, TORCH_FN(binary_<kMul_>));
  else if (n == "aten::div_") add_impl<kDiv_>(lib, handle, TORCH_FN(binary_<kDiv_>));
  else return false;
  return true;
}

}  // namespace torch_tpu::fallback
