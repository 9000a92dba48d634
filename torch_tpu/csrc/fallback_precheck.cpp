// CPU's argument checks that PyTorch's meta functions lack, for the ops whose
// kernels would otherwise find the problem only when they run (at the next
// sync in Strict and DeferAndFuse). Everything here depends on shapes, dtypes
// and Python scalars only, so it raises at the call in every eager mode, with
// CPU's exception type and words.
#include <ATen/ExpandUtils.h>

#include "fallback.h"

namespace torch_tpu::fallback {
namespace {

// index_put_ / _index_put_impl_ (self, indices, values, accumulate, ...):
// the index tensors broadcast together, there are no more of them than self
// has dims, and values broadcast to the indexing result (ATen's
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
  if (!any) return;
  // the indexing result: the broadcast index shape replaces the indexed dims
  // (placed first when the indexed dims are not adjacent)
  std::vector<int64_t> result;
  if (adjacent) {
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

}  // namespace

void (*precheck_for(const std::string& full_name))(const Call& c) {
  if (full_name == "aten::_index_put_impl_" || full_name == "aten::_index_put_impl" ||
      full_name == "aten::_index_put_impl.out" || full_name == "aten::index_put_" || full_name == "aten::index_put" ||
      full_name == "aten::index_put.out")
    return index_put_shapes;
  if (full_name == "aten::kthvalue.values") return kthvalue_empty_dim;
  if (full_name.compare(0, 18, "aten::floor_divide") == 0) return floor_divide_bool;
  if (full_name.compare(0, 9, "aten::div") == 0 && full_name.find("_mode") != std::string::npos)
    return div_mode_unsigned;
  return nullptr;
}

}  // namespace torch_tpu::fallback
