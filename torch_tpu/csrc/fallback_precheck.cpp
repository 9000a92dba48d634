// CPU's argument checks that PyTorch's meta functions lack, for the ops whose
// kernels would otherwise find the problem only when they run (at the next
// sync in Strict and DeferAndFuse). Everything here depends on shapes, dtypes
// and Python scalars only, so it raises at the call in every eager mode, with
// CPU's exception type and words.
#include <ATen/Dispatch.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/DistributionTemplates.h>

#include "fallback.h"

namespace torch_tpu::fallback {
namespace {

// index_put_ / _index_put_impl_ (self, indices, values, accumulate, ...):
// the index tensors broadcast together, there are no more of them than self
// has dims, and values broadcast to the indexing result and have self's dtype (ATen's
// index_put_ / TensorIterator checks). Boolean masks are long indices by now.
void index_put_shapes(const Call& c) {
  if (!c.arg(0).isTensor() || !c.arg(1).isList() || !c.arg(2).isTensor()) return;
  const at::Tensor& self = c.arg(0).toTensor();
  const at::Tensor& values = c.arg(2).toTensor();
  auto l = c.arg(1).toListRef();
  TORCH_CHECK_INDEX(static_cast<int64_t>(l.size()) <= self.dim(), "too many indices for tensor of dimension ",
                    self.dim(), " (got ", l.size(), ")");
  std::vector<int64_t> bshape;
  bool any = false, adjacent = true;
  int64_t first = -1, last = -1;
  for (size_t i = 0; i < l.size(); ++i) {
    if (!l[i].isTensor() || !l[i].toTensor().defined()) continue;
    const at::Tensor& t = l[i].toTensor();
    if (!any) {
      bshape.assign(t.sizes().begin(), t.sizes().end());
      any = true;
    } else {
      std::vector<int64_t> nb(std::max<size_t>(bshape.size(), static_cast<size_t>(t.dim())));
      bool ok = true;
      for (size_t k = 0; k < nb.size(); ++k) {  // right-aligned broadcast
        int64_t ia = static_cast<int64_t>(k) - static_cast<int64_t>(nb.size() - bshape.size());
        int64_t ib = static_cast<int64_t>(k) - static_cast<int64_t>(nb.size() - t.dim());
        int64_t a = ia >= 0 ? bshape[ia] : 1, e = ib >= 0 ? t.size(ib) : 1;
        ok &= a == e || a == 1 || e == 1;
        nb[k] = a == 1 ? e : a;
      }
      if (!ok) {  // ATen's expandTensors words it with every index shape
        std::string shapes;
        for (const auto& x : l)
          if (x.isTensor() && x.toTensor().defined())
            shapes += (shapes.empty() ? "" : ", ") + c10::str(x.toTensor().sizes());
        TORCH_CHECK_INDEX(false, "shape mismatch: indexing tensors could not be broadcast together with shapes ",
                          shapes);
      }
      bshape = nb;
    }
    if (last >= 0 && static_cast<int64_t>(i) != last + 1) adjacent = false;
    if (first < 0) first = static_cast<int64_t>(i);
    last = static_cast<int64_t>(i);
  }
  // the indexing result: the broadcast index shape replaces the indexed dims
  // (placed first when the indexed dims are not adjacent); with no index tensor, self's shape
  std::vector<int64_t> result;
  if (!any) {
    result = self.sizes().vec();
  } else if (adjacent) {
    for (int64_t d = 0; d < first; ++d) result.push_back(self.size(d));
    result.insert(result.end(), bshape.begin(), bshape.end());
    for (int64_t d = last + 1; d < self.dim(); ++d) result.push_back(self.size(d));
  } else {
    result = bshape;
    for (int64_t d = 0; d < self.dim(); ++d) {
      bool indexed = d < static_cast<int64_t>(l.size()) && l[d].isTensor() && l[d].toTensor().defined();
      if (!indexed) result.push_back(self.size(d));
    }
  }
  TORCH_CHECK(at::is_expandable_to(values.sizes(), result), "shape mismatch: value tensor of shape ",
              values.sizes(), " cannot be broadcast to indexing result of shape ", c10::IntArrayRef(result));
  TORCH_CHECK(values.scalar_type() == self.scalar_type(),
              "Index put requires the source and destination dtypes match, got ", self.scalar_type(),
              " for the destination and ", values.scalar_type(), " for the source.");
}

// kthvalue.values(self, k, dim, keepdim, values!, indices!): an empty reduced
// dim is an IndexError on CPU (PyTorch's meta reports k out of range instead).
void kthvalue_empty_dim(const Call& c) {
  if (!c.arg(0).isTensor() || !c.arg(2).isInt()) return;
  const at::Tensor& self = c.arg(0).toTensor();
  if (self.dim() == 0) return;
  int64_t dim = c10::maybe_wrap_dim(c.arg(2).toInt(), self.dim());
  TORCH_CHECK_INDEX(self.size(dim) != 0, "kthvalue(): Expected reduction dim ", dim, " to have non-zero size.");
}

// floor_divide on bool operands: CPU has no kernel (NotImplementedError);
// PyTorch's meta (its reference) raises RuntimeError instead.
void floor_divide_bool(const Call& c) {
  const c10::IValue &a = c.arg(0), &b = c.arg(1);
  if (!a.isTensor()) return;
  c10::ScalarType r = b.isTensor() ? at::result_type(a.toTensor(), b.toTensor())
                                   : at::result_type(a.toTensor(), b.toScalar());
  TORCH_CHECK_NOT_IMPLEMENTED(r != at::kBool, "\"floor_divide\" not implemented for 'Bool'");
}

// div with a rounding mode on uint16/32/64: CPU has no kernel (NotImplementedError); true division
// computes in float and is taken.
void div_mode_unsigned(const Call& c) {
  const c10::IValue &a = c.arg(0), &b = c.arg(1), &mode = c.arg(2);
  if (!a.isTensor() || mode.isNone()) return;
  c10::ScalarType r = b.isTensor() ? at::result_type(a.toTensor(), b.toTensor())
                                   : at::result_type(a.toTensor(), b.toScalar());
  TORCH_CHECK_NOT_IMPLEMENTED(r != at::kUInt16 && r != at::kUInt32 && r != at::kUInt64, "\"div_",
                              mode.toStringRef(), "_cpu\" not implemented for '", c10::toString(r), "'");
}

// fill_(self, value) / fill(self, value): CPU converts the value to self's dtype with c10's checked
// conversion ("value cannot be converted to type uint8_t without overflow"); the same conversion here.
void fill_value_overflow(const Call& c) {
  const c10::IValue& x = c.arg(1);
  if (!c.arg(0).isTensor() || !(x.isScalar() || x.isUnsigned())) return;
  // an int above INT64_MAX is an IValue of its own tag, which isScalar() leaves out
  const c10::Scalar v = x.isScalar() ? x.toScalar() : c10::Scalar(x.toUInt());
  c10::ScalarType st = c.arg(0).toTensor().scalar_type();
  switch (st) {
#define TPU_FILL_CHECK(T, name) \
  case c10::ScalarType::name:   \
    (void)v.to<T>();            \
    break;
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX(TPU_FILL_CHECK)
#undef TPU_FILL_CHECK
    case c10::ScalarType::UInt16: (void)v.to<uint16_t>(); break;
    case c10::ScalarType::UInt32: (void)v.to<uint32_t>(); break;
    case c10::ScalarType::UInt64: (void)v.to<uint64_t>(); break;
    default: break;
  }
}

// round.decimals on an integral tensor: CPU has no kernel for any decimals (NotImplementedError, named
// after the kernel its decimals pick); ours ran only floats and refused the others when it ran.
void round_decimals_integral(const Call& c) {
  if (!c.arg(0).isTensor() || !c.arg(1).isInt()) return;
  c10::ScalarType st = c.arg(0).toTensor().scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(st) || at::isComplexType(st), "\"",
                              c.arg(1).toInt() == 0 ? "round_vml_cpu" : "round_cpu", "\" not implemented for '",
                              c10::toString(st), "'");
}

// The random fills: PyTorch's own templates (ATen/native/DistributionTemplates.h)
// check the bounds against the dtype (errors, and CPU's warnings for float
// bounds past 2^digits) and then call a kernel; given kernels that do nothing,
// they are the checks alone.
template <typename RNG>
struct NoRandomKernel {
  void operator()(at::TensorIteratorBase&, uint64_t, int64_t, std::optional<at::Generator>) {}
  void operator()(at::TensorIteratorBase&, std::optional<at::Generator>) {}
};
template <typename RNG>
struct NoUniformKernel {
  void operator()(at::TensorIteratorBase&, double, double, std::optional<at::Generator>) {}
};

// random_.from(self, from, to?), random_.to(self, to) and their out= forms.
void random_bounds(const Call& c) {
  if (!c.arg(0).isTensor()) return;
  at::Tensor self = c.arg(0).toTensor();
  const std::string& ov = c.info.overload;
  bool has_from = ov.compare(0, 4, "from") == 0;
  if (!has_from && ov.compare(0, 2, "to") != 0) {
    // random_() without bounds: CPU has no kernel for the wide unsigned dtypes
    c10::ScalarType st = self.scalar_type();
    TORCH_CHECK_NOT_IMPLEMENTED(st != at::kUInt16 && st != at::kUInt32 && st != at::kUInt64,
                                "\"random_kernel_cpu\" not implemented for '", c10::toString(st), "'");
    return;
  }
  if (!c.arg(1).isInt()) return;
  int64_t from = has_from ? c.arg(1).toInt() : 0;
  std::optional<int64_t> to;
  if (!has_from) to = c.arg(1).toInt();
  else if (c.info.num_args > 2 && c.arg(2).isInt()) to = c.arg(2).toInt();
  at::native::templates::random_from_to_impl<NoRandomKernel, void*>(self, from, to, std::nullopt);
  // A float output: the bounds move inward to values the dtype holds, as CPU's do, so a draw
  // rounded to the dtype stays in [from, to); the kernel takes the moved ones.
  if (!at::isFloatingType(self.scalar_type()) || from == std::numeric_limits<int64_t>::lowest()) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "random_bounds", [&] {
    if (has_from) c.arg(1) = at::native::templates::update_from<scalar_t>(from);
    if (to) c.arg(has_from ? 2 : 1) = at::native::templates::update_to<scalar_t>(*to);
  });
}

// uniform_(self, from, to): bounds within the dtype, from <= to, to - from representable.
void uniform_bounds(const Call& c) {
  if (!c.arg(0).isTensor() || !c.arg(1).isDouble() || !c.arg(2).isDouble()) return;
  at::Tensor self = c.arg(0).toTensor();
  at::native::templates::uniform_impl_<NoUniformKernel, void*>(self, c.arg(1).toDouble(), c.arg(2).toDouble(),
                                                               std::nullopt);
}

// normal's standard deviation: a float one >= 0 at the call; a tensor one real, and all its
// elements >= 0, which, as on CUDA, reads the tensor (a sync) so the error comes at the call.
void normal_std(const Call& c) {
  size_t i = c.info.overload.empty() || c.info.overload == "out" ? 2 : 1;  // normal_(self, mean, std) / normal.*(mean, std)
  if (i >= c.info.num_args) return;
  const c10::IValue& std = c.arg(i);
  if (std.isDouble()) {
    TORCH_CHECK(std.toDouble() >= 0.0, "normal expects std >= 0.0, but found std ", std.toDouble());
  } else if (std.isTensor()) {
    const at::Tensor& t = std.toTensor();
    TORCH_CHECK(!t.is_complex(), "normal expects standard deviation to be non-complex");
    TORCH_CHECK(t.numel() == 0 || t.min().ge(0).item<bool>(), "normal expects all elements of std >= 0.0");
  }
}

// exponential_(self, lambd) / log_normal_(self, mean, std): CPU's parameter checks, in its words,
// before anything else (an empty self included).
void exponential_lambda(const Call& c) {
  if (c.info.num_args < 2 || !c.arg(1).isDouble()) return;
  const double l = c.arg(1).toDouble();
  TORCH_CHECK(l > 0.0, "exponential_ expects lambda > 0.0, but found lambda=", l);
}
void log_normal_std(const Call& c) {
  if (c.info.num_args < 3 || !c.arg(2).isDouble()) return;
  const double sd = c.arg(2).toDouble();
  TORCH_CHECK(sd > 0.0, "log_normal_ expects std > 0.0, but found std=", sd);
}

// roll(self, shifts, dims): CPU checks the lists before the dims' range.
void roll_lists(const Call& c) {
  if (!c.arg(1).isIntList() || !c.arg(2).isIntList()) return;
  auto shifts = c.arg(1).toDimVector();
  auto dims = c.arg(2).toDimVector();
  TORCH_CHECK(!shifts.empty(), "`shifts` required");
  if (dims.empty() && shifts.size() == 1) return;
  TORCH_CHECK(shifts.size() == dims.size(), "shifts and dimensions must align. shifts: ", shifts.size(),
              ", dims:", dims.size());
}

// repeat_interleave.Tensor(repeats, output_size?): an int32/int64 vector of repeats, none negative.
// The negative check reads the repeats, which the output size does too when it is not given.
void repeat_interleave_repeats(const Call& c) {
  if (!c.arg(0).isTensor()) return;
  const at::Tensor& rep = c.arg(0).toTensor();
  TORCH_CHECK_NOT_IMPLEMENTED(rep.scalar_type() == at::kLong || rep.scalar_type() == at::kInt,
                              "\"repeat_interleave_cpu\" not implemented for '", c10::toString(rep.scalar_type()), "'");
  TORCH_CHECK(rep.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  if (c.info.num_args > 1 && c.arg(1).isNone() && rep.numel() > 0)
    TORCH_CHECK(rep.min().item<int64_t>() >= 0, "repeats can not be negative");
}

// arange.start_out(start, end, step, out) / arange.out(end, out): CPU's checks, in its order, in
// the output's accumulate type (double for floats, int64 for integers).
void arange_range(const Call& c) {
  bool start_out = c.info.overload == "start_out";
  if (c.info.overload != "out" && !start_out) return;
  size_t n = start_out ? 3 : 1;
  if (!c.arg(n).isTensor()) return;
  c10::Scalar start = start_out ? c.arg(0).toScalar() : c10::Scalar(0);
  c10::Scalar end = c.arg(start_out ? 1 : 0).toScalar();
  c10::Scalar step = start_out ? c.arg(2).toScalar() : c10::Scalar(1);
  auto check = [&](auto xstart, auto xend, auto xstep) {
    TORCH_CHECK_VALUE(xstep > 0 || xstep < 0, "step must be nonzero");
    TORCH_CHECK(std::isfinite(static_cast<double>(xstart)) && std::isfinite(static_cast<double>(xend)),
                "unsupported range: ", xstart, " -> ", xend);
    TORCH_CHECK(((xstep > 0) && (xend >= xstart)) || ((xstep < 0) && (xend <= xstart)),
                "upper bound and lower bound inconsistent with step sign");
  };
  c10::ScalarType st = c.arg(n).toTensor().scalar_type();
  if (at::isFloatingType(st)) {
    check(start.to<double>(), end.to<double>(), step.to<double>());
    double size_d = std::ceil((end.to<double>() - start.to<double>()) / step.to<double>());
    TORCH_CHECK(size_d >= 0 && size_d <= static_cast<double>(std::numeric_limits<int64_t>::max()),
                "invalid size, possible overflow?");
  } else if (at::isIntegralType(st, /*includeBool=*/false)) {
    check(start.to<int64_t>(), end.to<int64_t>(), step.to<int64_t>());
  }
}

// complex(real, imag) / polar(abs, angle), and their out= forms: CPU's dtype checks.
void complex_parts(const Call& c) {
  if (!c.arg(0).isTensor() || !c.arg(1).isTensor()) return;
  c10::ScalarType a = c.arg(0).toTensor().scalar_type(), b = c.arg(1).toTensor().scalar_type();
  auto floating = [](c10::ScalarType t) { return t == at::kFloat || t == at::kDouble || t == at::kHalf; };
  TORCH_CHECK(floating(a) && floating(b), "Expected both inputs to be Half, Float or Double tensors but got ", a,
              " and ", b);
  TORCH_CHECK(a == b, "Expected object of scalar type ", a, " but got scalar type ", b, " for second argument");
  if (c.info.num_args > 2 && c.arg(2).isTensor()) {
    c10::ScalarType r = c.arg(2).toTensor().scalar_type();
    TORCH_CHECK(r == c10::toComplexType(a), "Expected object of scalar type ", c10::toComplexType(a),
                " but got scalar type ", r, " for argument 'out'");
  }
}

// all/any with out=: CPU takes a bool or uint8 result only.
void all_any_result(const Call& c) {
  for (size_t i = 0; i < c.info.num_args; ++i) {
    if (!c.info.arg_is_out[i] || !c.arg(i).isTensor()) continue;
    c10::ScalarType r = c.arg(i).toTensor().scalar_type();
    TORCH_CHECK(r == at::kBool || r == at::kByte, c.info.base, " only supports bool tensor for result, got: ", r);
  }
}

// var/std(+_mean).correction(self, dim?, correction?, keepdim): CPU warns when the correction
// leaves no degrees of freedom (the reduced count K <= correction).
void var_dof_warning(const Call& c) {
  if (!c.arg(0).isTensor() || c.info.num_args < 3) return;
  const at::Tensor& self = c.arg(0).toTensor();
  int64_t k = 1;
  if (self.dim() > 0 && c.arg(1).isIntList() && !c.arg(1).toDimVector().empty()) {
    for (int64_t d : c.arg(1).toDimVector()) k *= self.size(c10::maybe_wrap_dim(d, self.dim()));
  } else {
    k = self.numel();
  }
  double correction = c.arg(2).isNone() ? 1.0 : c.arg(2).toScalar().toDouble();
  if (k > 0 && static_cast<double>(k) - correction <= 0)
    TORCH_WARN(c.info.base, "(): degrees of freedom is <= 0. Correction should be strictly less than the ",
               "reduction factor (input numel divided by output numel).");
}

// isposinf/isneginf with out=: CPU takes a bool result only.
void isinf_sign_result(const Call& c) {
  if (c.info.num_args < 2 || !c.arg(1).isTensor()) return;
  TORCH_CHECK(c.arg(1).toTensor().scalar_type() == at::kBool, c.info.base,
              " does not support non-boolean outputs.");
}

// nansum(self, dim=[]): CPU reduces every dim, as for dim=None (sum's legacy rule); PyTorch's
// meta function reads [] as no dims at all, so the output would not be the kernel's.
void nansum_empty_dims(const Call& c) {
  if (c.info.num_args > 1 && c.arg(1).isIntList() && c.arg(1).toDimVector().empty()) c.arg(1) = c10::IValue();
}

// pow.Tensor_Scalar_out(self, exponent, out!): an integral self with a negative integral exponent
// (its layouts come from the functional overload's Python meta, which does not check it).
void pow_negative_int_exponent(const Call& c) {
  if (!c.arg(0).isTensor() || !c.arg(1).isScalar()) return;
  const at::Tensor& self = c.arg(0).toTensor();
  const c10::Scalar e = c.arg(1).toScalar();
  TORCH_CHECK(!(at::isIntegralType(self.scalar_type(), /*includeBool=*/true) && e.isIntegral(true) && e.toLong() < 0),
              "Integers to negative integer powers are not allowed.");
}

// nll_loss_forward / nll_loss2d_forward(self, target, weight?, reduction, ignore_index): CPU reads the
// weight as self's dtype and refuses another one, even for empty inputs.
void nll_loss_weight_dtype(const Call& c) {
  if (!c.arg(0).isTensor() || c.info.num_args < 3 || !c.arg(2).isTensor()) return;
  const at::Tensor& w = c.arg(2).toTensor();
  if (!w.defined()) return;
  TORCH_CHECK(w.scalar_type() == c.arg(0).toTensor().scalar_type(), "expected scalar type ",
              c.arg(0).toTensor().scalar_type(), " but found ", w.scalar_type());
}

// index_add(self, dim, index, source, alpha) on complex tensors: the kernel adds the (real,
// imaginary) pairs, so it takes a real alpha only; refuse a complex one at the call.
void index_add_complex_alpha(const Call& c) {
  if (c.info.num_args < 5 || !c.arg(0).isTensor() || !c.arg(0).toTensor().is_complex()) return;
  const c10::IValue& a = c.arg(4);
  bool imag = a.isComplexDouble() ? a.toComplexDouble().imag() != 0
              : a.isScalar() && a.toScalar().isComplex() ? a.toScalar().toComplexDouble().imag() != 0
                                                         : false;
  TORCH_CHECK_NOT_IMPLEMENTED(!imag, "index_add: a complex alpha on complex tensors is not supported on the tpu ",
                              "device");
}

// index_fill(self, dim, index, value): CPU's checks, in its order and words (the meta function
// accepts an int32 or floating index, which our kernel took or refused only when it ran).
void index_fill_checks(const Call& c) {
  if (c.info.num_args < 4 || !c.arg(0).isTensor() || !c.arg(1).isInt() || !c.arg(2).isTensor()) return;
  const at::Tensor &self = c.arg(0).toTensor(), &index = c.arg(2).toTensor();
  const c10::IValue& value = c.arg(3);
  if (value.isTensor())
    TORCH_CHECK(value.toTensor().dim() == 0, "index_fill_ only supports a 0-dimensional value tensor, but got tensor ",
                "with ", value.toTensor().dim(), " dimension(s).");
  TORCH_CHECK_INDEX(index.scalar_type() == c10::kLong, "index_fill_(): Expected dtype int64 for index.");
  bool complex_value = value.isComplexDouble() || (value.isScalar() && value.toScalar().isComplex());
  TORCH_CHECK(self.is_complex() || !complex_value,
              "index_fill_(): Converting complex Scalar to non-complex type is not supported");
  c10::maybe_wrap_dim(c.arg(1).toInt(), std::max<int64_t>(self.dim(), 1));
  TORCH_CHECK(index.dim() <= 1, "Index has to be a vector/scalar");
}

// scatter_reduce / index_reduce (self, dim, index, src, reduce, ...): amax and amin of complex
// tensors, and index_reduce's include_self=False of complex ones, which CPU refuses at its dtype
// dispatch (the complex kernels have sum, prod and mean).
void reduce_complex_minmax(const Call& c) {
  if (c.info.num_args < 5 || !c.arg(0).isTensor() || !c.arg(0).toTensor().is_complex() || !c.arg(4).isString())
    return;
  const std::string r = c.arg(4).toStringRef();
  const bool scatter = c.info.base == "scatter_reduce";
  // index_reduce(include_self=False) of complex: CPU has no kernel for the exclusion's initial values
  TORCH_CHECK_NOT_IMPLEMENTED(scatter || c.info.num_args < 6 || !c.arg(5).isBool() || c.arg(5).toBool(),
                              "\"index_reduce_func_exclude_input_init\" not implemented for '",
                              c10::toString(c.arg(0).toTensor().scalar_type()), "'");
  if (r != "amax" && r != "amin") return;
  TORCH_CHECK_NOT_IMPLEMENTED(false, "\"",
                              scatter ? (r == "amax" ? "scatter_gather_tensor_cpu_reduce_amax"
                                                     : "scatter_gather_tensor_cpu_reduce_amin")
                                      : (r == "amax" ? "maximum_cpu" : "minimum_cpu"),
                              "\" not implemented for '", c10::toString(c.arg(0).toTensor().scalar_type()), "'");
}

// index_select(self, dim, index): the index's dtype and rank, as CPU checks them.
void index_select_checks(const Call& c) {
  if (c.info.num_args < 3 || !c.arg(0).isTensor() || !c.arg(1).isInt() || !c.arg(2).isTensor()) return;
  const at::Tensor& index = c.arg(2).toTensor();
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(index.scalar_type() == c10::kLong || index.scalar_type() == c10::kInt,
              "index_select(): Expected dtype int32 or int64 for index");
}

// mm(self, mat2): CPU refuses operands of two dtypes (its meta function does not).
void mm_same_dtype(const Call& c) {
  if (!c.arg(0).isTensor() || !c.arg(1).isTensor()) return;
  const at::Tensor &a = c.arg(0).toTensor(), &b = c.arg(1).toTensor();
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ",
              a.scalar_type(), " != ", b.scalar_type());
}

// linalg_householder_product(input, tau): CPU's dtype check, in its words (PyTorch's Python meta
// function, which would otherwise answer first, names dtypes as torch.int32).
void householder_tau_dtype(const Call& c) {
  if (!c.arg(0).isTensor() || !c.arg(1).isTensor()) return;
  const at::Tensor &input = c.arg(0).toTensor(), &tau = c.arg(1).toTensor();
  TORCH_CHECK(tau.scalar_type() == input.scalar_type(), "torch.linalg.householder_product: tau dtype ",
              tau.scalar_type(), " does not match input dtype ", input.scalar_type());
}

// put_(self, index, source, accumulate=False): CPU's alert where deterministic algorithms are asked
// for (without accumulate, duplicate indices land in an unspecified order) and its overlap checks:
// self may not share memory between its elements, nor with index or source at all.
void put_checks(const Call& c) {
  if (c.info.num_args < 3 || !c.arg(0).isTensor() || !c.arg(1).isTensor() || !c.arg(2).isTensor()) return;
  bool acc = c.info.num_args > 3 && c.arg(3).isBool() && c.arg(3).toBool();
  if (!acc) at::globalContext().alertNotDeterministic("put_");
  const at::Tensor& self = c.arg(0).toTensor();
  at::assert_no_internal_overlap(self);
  at::assert_no_overlap(self, c.arg(1).toTensor());
  at::assert_no_overlap(self, c.arg(2).toTensor());
}

// masked_scatter_(self, mask, source): the mask broadcasts to self, or CPU's expand error at the call
// (the kernel would find it only when it runs).
void masked_scatter_mask_shape(const Call& c) {
  if (!c.arg(0).isTensor() || !c.arg(1).isTensor()) return;
  const at::Tensor& self = c.arg(0).toTensor();
  const at::Tensor& mask = c.arg(1).toTensor();
  if (mask.sizes() != self.sizes()) (void)mask.expand(self.sizes());
}

// grid_sampler_2d / _3d (input, grid, ...): CPU's argument checks (check_grid_sampler_common and the
// 2-d/3-d ones), which PyTorch's meta function (a Python decomposition) does not make.
void grid_sampler_shapes(const Call& c) {
  if (!c.arg(0).isTensor() || !c.arg(1).isTensor()) return;
  const at::Tensor& input = c.arg(0).toTensor();
  const at::Tensor& grid = c.arg(1).toTensor();
  TORCH_CHECK(input.dim() >= 1 && grid.dim() >= 1 && input.size(0) == grid.size(0),
              "grid_sampler(): expected grid and input to have same batch size, but got input with sizes ",
              input.sizes(), " and grid with sizes ", grid.sizes());
  TORCH_CHECK(grid.size(-1) == input.dim() - 2, "grid_sampler(): expected grid to have size ", input.dim() - 2,
              " in last dimension, but got grid with sizes ", grid.sizes());
  for (int64_t i = 2; i < input.dim(); ++i)
    TORCH_CHECK(input.size(i) > 0, "grid_sampler(): expected input to have non-empty spatial dimensions, but input has ",
                "sizes ", input.sizes(), " with dimension ", i, " being empty");
  int64_t nd = c.info.base == "grid_sampler_3d" ? 5 : 4;
  TORCH_CHECK(input.dim() == nd && input.dim() == grid.dim(), "grid_sampler(): expected ", nd,
              "D input and grid with same number of dimensions, but got input with sizes ", input.sizes(),
              " and grid with sizes ", grid.sizes());
}

// The upsample forwards (upsample_<mode><n>d, _upsample_nearest_exact<n>d, _upsample_bi*2d_aa): CPU
// computes them in the floating types, and the nearest ones, bilinear2d and bicubic2d (and their
// antialiased forms) in uint8 too; it refuses other dtypes at the call in its dispatch macro's
// words, where our kernels' masks are wider (nearest took every dtype).
void upsample_dtype(const Call& c) {
  if (!c.arg(0).isTensor()) return;
  const c10::ScalarType t = c.arg(0).toTensor().scalar_type();
  if (at::isFloatingType(t)) return;
  const std::string& b = c.info.base;
  const bool u8 = b.find("nearest") != std::string::npos || b.find("bilinear2d") != std::string::npos ||
                  b.find("bicubic2d") != std::string::npos;
  TORCH_CHECK_NOT_IMPLEMENTED(u8 && t == c10::kByte, "\"", b, "\" not implemented for '", c10::toString(t), "'");
}

// addcmul / addcdiv (self, tensor1, tensor2, value): a complex value with real tensors is CPU's
// RuntimeError (the complex kernel would refuse it only when it runs), and addcmul of bools has no
// CPU kernel (NotImplementedError).
const char* cpu_type_name(c10::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float";
    case at::kDouble: return "double";
    case at::kHalf:
    case at::kBFloat16: return "float";  // CPU converts value to the op's float compute type
    case at::kLong: return "int64_t";
    case at::kInt: return "int";
    case at::kShort: return "int16_t";
    case at::kChar: return "int8_t";
    case at::kByte: return "uint8_t";
    case at::kBool: return "bool";
    default: return c10::toString(t);
  }
}

void addc_value(const Call& c) {
  if (c.info.num_args < 4 || !c.arg(0).isTensor() || !c.arg(1).isTensor() || !c.arg(2).isTensor()) return;
  const at::Tensor &self = c.arg(0).toTensor(), &t1 = c.arg(1).toTensor(), &t2 = c.arg(2).toTensor();
  // (the categories only: bool, complex, which promoteTypes settles as result_type would)
  c10::ScalarType r = c10::promoteTypes(c10::promoteTypes(self.scalar_type(), t1.scalar_type()), t2.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(!(c.info.base == "addcmul" && r == at::kBool),
                              "\"addcmul_cpu_out\" not implemented for 'Bool'");
  const c10::IValue& v = c.arg(3);
  if (!v.isComplexDouble() || c10::isComplexType(r)) return;
  TORCH_CHECK(false, "value cannot be converted to type ", cpu_type_name(r), " without overflow");
}

// lerp(self, end, weight) of integers or bools: CPU has no kernel (its lerp computes in floating or
// complex types only).
void lerp_floats(const Call& c) {
  if (!c.arg(0).isTensor()) return;
  c10::ScalarType t = c.arg(0).toTensor().scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(t) || c10::isComplexType(t), "\"",
                              c.arg(2).isTensor() ? "lerp_kernel_tensor" : "lerp_kernel_scalar",
                              "\" not implemented for '", t, "'");
}

// threshold(self, threshold, value) of an integer self: CPU converts both Scalars to self's type with
// c10's checked conversion, so a value the type cannot hold (300, or -256, on uint8) is refused at the
// call; the kernel would find it only when it runs.
void threshold_scalars(const Call& c) {
  if (c.info.num_args < 3 || !c.arg(0).isTensor()) return;
  c10::ScalarType t = c.arg(0).toTensor().scalar_type();
  if (!c10::isIntegralType(t, /*includeBool=*/false)) return;
  for (size_t i = 1; i <= 2; ++i)
    if (c.arg(i).isScalar()) AT_DISPATCH_INTEGRAL_TYPES(t, "threshold", [&] { (void)c.arg(i).toScalar().to<scalar_t>(); });
}

// frexp.Tensor_out(self, *, mantissa, exponent): CPU's frexp_out checks (ATen's words) before any
// cast to the outs: the mantissa has self's dtype and the exponent is int32.
void frexp_outs(const Call& c) {
  if (c.info.num_args < 3 || !c.arg(0).isTensor() || !c.arg(1).isTensor() || !c.arg(2).isTensor()) return;
  const at::Tensor &self = c.arg(0).toTensor(), &mantissa = c.arg(1).toTensor(), &exponent = c.arg(2).toTensor();
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "torch.frexp() only supports floating-point dtypes");
  TORCH_CHECK(mantissa.dtype() == self.dtype(), "torch.frexp() expects mantissa to have dtype ", self.dtype(),
              " but got ", mantissa.dtype());
  TORCH_CHECK(exponent.dtype() == at::kInt, "torch.frexp() expects exponent to have int dtype but got ",
              exponent.dtype());
}

// pow(Tensor, Tensor) whose result type is bool: CPU has no kernel.
void pow_bool(const Call& c) {
  if (!c.arg(0).isTensor() || !c.arg(1).isTensor()) return;
  TORCH_CHECK_NOT_IMPLEMENTED(at::result_type(c.arg(0).toTensor(), c.arg(1).toTensor()) != at::kBool,
                              "\"pow\" not implemented for 'Bool'");
}

}  // namespace

void (*precheck_for(const std::string& full_name))(const Call& c) {
  if (full_name == "aten::_index_put_impl_" || full_name == "aten::_index_put_impl" ||
      full_name == "aten::_index_put_impl.out" || full_name == "aten::index_put_" || full_name == "aten::index_put" ||
      full_name == "aten::index_put.out")
    return index_put_shapes;
  if (full_name == "aten::kthvalue.values") return kthvalue_empty_dim;
  if (full_name.compare(0, 13, "aten::random_") == 0 || full_name.compare(0, 13, "aten::random.") == 0)
    return random_bounds;
  if (full_name == "aten::uniform_" || full_name.compare(0, 14, "aten::uniform.") == 0) return uniform_bounds;
  if (full_name.compare(0, 12, "aten::normal") == 0) return normal_std;
  if (full_name == "aten::exponential_") return exponential_lambda;
  if (full_name == "aten::log_normal_") return log_normal_std;
  if (full_name == "aten::roll" || full_name == "aten::roll.out") return roll_lists;
  if (full_name == "aten::repeat_interleave.Tensor" || full_name == "aten::repeat_interleave.Tensor_out")
    return repeat_interleave_repeats;
  if (full_name.compare(0, 12, "aten::arange") == 0) return arange_range;
  if (full_name == "aten::isposinf.out" || full_name == "aten::isneginf.out") return isinf_sign_result;
  if (full_name == "aten::nansum" || full_name == "aten::nansum.out") return nansum_empty_dims;
  if (full_name == "aten::all.out" || full_name == "aten::all.dims_out" || full_name == "aten::all.all_out" ||
      full_name == "aten::any.out" || full_name == "aten::any.dims_out" || full_name == "aten::any.all_out")
    return all_any_result;
  if (full_name == "aten::var.correction" || full_name == "aten::var.correction_out" ||
      full_name == "aten::std.correction" || full_name == "aten::std.correction_out" ||
      full_name == "aten::var_mean.correction" || full_name == "aten::var_mean.correction_out" ||
      full_name == "aten::std_mean.correction" || full_name == "aten::std_mean.correction_out")
    return var_dof_warning;
  if (full_name == "aten::complex" || full_name == "aten::complex.out" || full_name == "aten::polar" ||
      full_name == "aten::polar.out")
    return complex_parts;
  if (full_name.compare(0, 18, "aten::floor_divide") == 0) return floor_divide_bool;
  if (full_name == "aten::fill_.Scalar" || full_name == "aten::fill.Scalar" || full_name == "aten::fill.Scalar_out")
    return fill_value_overflow;
  if (full_name == "aten::round.decimals" || full_name == "aten::round.decimals_out" ||
      full_name == "aten::round_.decimals")
    return round_decimals_integral;
  if (full_name == "aten::pow.Tensor_Scalar_out") return pow_negative_int_exponent;
  if (full_name == "aten::pow.Tensor_Tensor" || full_name == "aten::pow.Tensor_Tensor_out" ||
      full_name == "aten::pow_.Tensor")
    return pow_bool;
  if (full_name == "aten::frexp.Tensor_out") return frexp_outs;
  if (full_name == "aten::threshold" || full_name == "aten::threshold_" || full_name == "aten::threshold.out")
    return threshold_scalars;
  if (full_name.compare(0, 10, "aten::lerp") == 0) return lerp_floats;
  if (full_name.compare(0, 13, "aten::addcmul") == 0 || full_name.compare(0, 13, "aten::addcdiv") == 0)
    return addc_value;
  if (full_name.compare(0, 15, "aten::index_add") == 0) return index_add_complex_alpha;
  if (full_name.compare(0, 16, "aten::index_fill") == 0) return index_fill_checks;
  if (full_name.compare(0, 20, "aten::scatter_reduce") == 0 || full_name.compare(0, 18, "aten::index_reduce") == 0)
    return reduce_complex_minmax;
  if (full_name == "aten::index_select" || full_name == "aten::index_select.out") return index_select_checks;
  if (full_name == "aten::nll_loss_forward" || full_name == "aten::nll_loss_forward.output" ||
      full_name == "aten::nll_loss2d_forward" || full_name == "aten::nll_loss2d_forward.output")
    return nll_loss_weight_dtype;
  if (full_name == "aten::mm" || full_name == "aten::mm.out") return mm_same_dtype;
  if (full_name == "aten::put_") return put_checks;
  if (full_name == "aten::linalg_householder_product" || full_name == "aten::linalg_householder_product.out")
    return householder_tau_dtype;
  if (full_name == "aten::grid_sampler_2d" || full_name == "aten::grid_sampler_3d") return grid_sampler_shapes;
  if (full_name == "aten::masked_scatter_") return masked_scatter_mask_shape;
  if ((full_name.compare(0, 14, "aten::upsample") == 0 || full_name.compare(0, 15, "aten::_upsample") == 0) &&
      full_name.find("backward") == std::string::npos)
    return upsample_dtype;
  if (full_name.compare(0, 9, "aten::div") == 0 && full_name.find("_mode") != std::string::npos)
    return div_mode_unsigned;
  return nullptr;
}

}  // namespace torch_tpu::fallback
