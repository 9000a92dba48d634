// The boxed fallback's outputs: their layouts come from PyTorch's own meta
// functions, cached per input signature (dtypes, sizes, strides, scalar
// values), and the tensors follow the schema's alias annotations: a written
// argument is resized if meta says so, a view shares its argument's storage,
// anything else is a fresh device tensor.
#include <cstring>
#include <typeinfo>
#include <mutex>
#include <unordered_map>

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>
#include <pybind11/pybind11.h>
#include <c10/core/DefaultDtype.h>

#include "fallback.h"

namespace torch_tpu {
namespace fallback {
namespace {

// ================================ meta cache ================================

constexpr size_t kMetaCacheMax = 8192;
std::mutex g_meta_mu;
std::unordered_map<uint64_t, std::shared_ptr<const MetaEntry>> g_meta;
std::atomic<uint64_t> g_meta_hits{0}, g_meta_misses{0};
// Per-thread direct-mapped front of g_meta (entries are immutable; a slot
// keeps its entry alive after g_meta drops it).
thread_local std::shared_ptr<const MetaEntry> t_meta_slots[256];

// Adds an entry (its key filled in) to the shared cache; the whole cache is
// dropped when full (signatures in a steady program are few).
void remember_layout(uint64_t h, std::shared_ptr<const MetaEntry> entry) {
  std::lock_guard<std::mutex> lock(g_meta_mu);
  if (g_meta.size() >= kMetaCacheMax) g_meta.clear();
  g_meta[h] = std::move(entry);
}

uint64_t hash_words(const std::vector<int64_t>& w) {
  uint64_t h = 0x243F6A8885A308D3ull ^ w.size();
  for (int64_t v : w) {
    h ^= static_cast<uint64_t>(v);
    h *= 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  return h;
}

void key_tensor(std::vector<int64_t>& k, const at::Tensor& t) {
  if (!t.defined()) {
    k.push_back(-1);
    return;
  }
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  int64_t dim = impl->dim();
  k.push_back((t.is_cpu() ? 2 : 0) | (impl->is_wrapped_number() ? 4 : 0) |
              (static_cast<int64_t>(t.scalar_type()) << 8) | (dim << 16));
  auto sizes = impl->sizes();
  auto strides = impl->strides();
  k.insert(k.end(), sizes.begin(), sizes.end());
  k.insert(k.end(), strides.begin(), strides.end());
  k.push_back(impl->storage_offset());
}

// Appends the IValue's signature; false when it cannot be keyed (the call then
// always runs meta).
bool key_ivalue(std::vector<int64_t>& k, const c10::IValue& v) {
  if (v.isTensor()) {
    key_tensor(k, v.toTensor());
  } else if (v.isNone()) {
    k.push_back(-2);
  } else if (v.isInt()) {
    k.push_back(-3);
    k.push_back(v.toInt());
  } else if (v.isDouble()) {
    double d = v.toDouble();
    int64_t bits;
    std::memcpy(&bits, &d, 8);
    k.push_back(-4);
    k.push_back(bits);
  } else if (v.isBool()) {
    k.push_back(-5);
    k.push_back(v.toBool());
  } else if (v.isList()) {
    auto l = v.toListRef();
    k.push_back(-6);
    k.push_back(static_cast<int64_t>(l.size()));
    for (const auto& e : l)
      if (!key_ivalue(k, e)) return false;
  } else if (v.isString()) {
    const std::string& s = v.toStringRef();
    k.push_back(-7);
    k.push_back(static_cast<int64_t>(s.size()));
    for (size_t i = 0; i < s.size(); i += 8) {
      int64_t w = 0;
      std::memcpy(&w, s.data() + i, std::min<size_t>(8, s.size() - i));
      k.push_back(w);
    }
  } else if (v.isDevice()) {
    k.push_back(-8);
    k.push_back((static_cast<int64_t>(v.toDevice().type()) << 8) | v.toDevice().index());
  } else if (v.isGenerator()) {
    k.push_back(-9);
  } else if (v.isSymInt()) {
    auto m = v.toSymInt().maybe_as_int();
    if (!m) return false;
    k.push_back(-3);
    k.push_back(*m);
  } else {
    return false;
  }
  return true;
}

// ============================ PyTorch's meta functions ============================

at::Tensor to_meta(const at::Tensor& t) {
  // Wrapped Python numbers stay as they are (type promotion depends on the
  // wrapped flag). Other CPU 0-d tensors become meta tensors: many meta
  // functions (index_fill, index_put, ...) reject mixed devices, and the
  // kernel gets them as device tensors anyway.
  if (!t.defined() || (t.is_cpu() && t.unsafeGetTensorImpl()->is_wrapped_number())) return t;
  auto opts = at::TensorOptions().dtype(t.scalar_type()).device(c10::kMeta);
  at::Tensor m;
  if (t.storage_offset() == 0) {
    m = at::empty_strided(t.sizes(), t.strides(), opts);
  } else {
    size_t bytes = at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.element_size(),
                                                   t.storage_offset());
    m = at::empty({static_cast<int64_t>(bytes / t.element_size())}, opts)
            .as_strided(t.sizes(), t.strides(), t.storage_offset());
  }
  return m;
}

c10::IValue ivalue_to_meta(const c10::IValue& v) {
  if (v.isTensor()) return to_meta(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(to_meta(t));
    return out;
  }
  if (v.isList()) {
    auto l = v.toListRef();
    bool has_tensor = false;
    for (const auto& e : l) has_tensor |= e.isTensor();
    if (!has_tensor) return v;
    c10::List<std::optional<at::Tensor>> out;
    for (const auto& e : l)
      out.push_back(e.isTensor() ? std::optional<at::Tensor>(to_meta(e.toTensor())) : std::nullopt);
    return out;
  }
  return v;
}

OutMeta out_meta(const at::Tensor& t) {
  OutMeta m;
  m.defined = t.defined();
  if (!m.defined) {
    m.dtype = c10::ScalarType::Undefined;
    m.offset = 0;
    return m;
  }
  m.dtype = t.scalar_type();
  m.sizes.assign(t.sizes().begin(), t.sizes().end());
  m.strides.assign(t.strides().begin(), t.strides().end());
  m.offset = t.storage_offset();
  return m;
}

// Contiguous strides for `sizes` into `strides`.
void contiguous_strides(const c10::SmallVector<int64_t, 6>& sizes, c10::SmallVector<int64_t, 6>* strides) {
  strides->resize(sizes.size());
  int64_t st = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    (*strides)[d] = st;
    st *= std::max<int64_t>(sizes[d], 1);
  }
}

// geqrf, as LAPACK (and CPU) lays it out: a is input-shaped with each matrix
// column-major, tau is [..., min(m, n)] contiguous.
std::shared_ptr<MetaEntry> geqrf_layouts(const at::Tensor& self) {
  TORCH_CHECK(self.dim() >= 2, "geqrf: input must have at least 2 dimensions.");
  auto entry = std::make_shared<MetaEntry>();
  int64_t nd = self.dim(), m = self.size(nd - 2), n = self.size(nd - 1);
  OutMeta a, tau;
  a.defined = tau.defined = true;
  a.dtype = tau.dtype = self.scalar_type();
  a.offset = tau.offset = 0;
  a.sizes.assign(self.sizes().begin(), self.sizes().end());
  a.strides.resize(nd);
  a.strides[nd - 2] = 1;
  a.strides[nd - 1] = std::max<int64_t>(m, 1);
  int64_t st = std::max<int64_t>(m * n, 1);
  for (int64_t d = nd - 3; d >= 0; --d) {
    a.strides[d] = st;
    st *= std::max<int64_t>(self.size(d), 1);
  }
  tau.sizes.assign(self.sizes().begin(), self.sizes().end() - 2);
  tau.sizes.push_back(std::min(m, n));
  contiguous_strides(tau.sizes, &tau.strides);
  entry->rets.push_back({a});
  entry->rets.push_back({tau});
  return entry;
}

// Every return as empty_like(self), contiguous.
std::shared_ptr<MetaEntry> like_self_layouts(const OpInfo& info, const at::Tensor& self) {
  auto entry = std::make_shared<MetaEntry>();
  OutMeta m;
  m.defined = true;
  m.dtype = self.scalar_type();
  m.sizes.assign(self.sizes().begin(), self.sizes().end());
  contiguous_strides(m.sizes, &m.strides);
  m.offset = 0;
  for (size_t r = 0; r < info.rets.size(); ++r) entry->rets.push_back({m});
  return entry;
}

// native_layer_norm(input, normalized_shape, weight, bias, eps) -> (out, mean, rstd),
// after CPU's own argument checks: out has the input's shape, contiguous, as
// CPU's kernel gives it; mean and rstd are [outer dims..., 1, ..., 1] in the
// computation dtype (float32 for 16-bit inputs), as PyTorch's meta function
// (torch._refs.native_layer_norm) gives them.
std::shared_ptr<MetaEntry> layer_norm_layouts(at::ArrayRef<c10::IValue> args) {
  const at::Tensor& x = args[0].toTensor();
  std::vector<int64_t> normalized;
  for (const auto& e : args[1].toListRef()) normalized.push_back(e.isInt() ? e.toInt() : e.toSymInt().guard_int(__FILE__, __LINE__));
  at::Tensor w = args[2].isTensor() ? args[2].toTensor() : at::Tensor();
  at::Tensor b = args[3].isTensor() ? args[3].toTensor() : at::Tensor();
  at::native::_check_layer_norm_inputs(x, normalized, w, b);
  auto entry = std::make_shared<MetaEntry>();
  OutMeta out, stat;
  out.defined = stat.defined = true;
  out.offset = stat.offset = 0;
  out.dtype = x.scalar_type();
  stat.dtype = at::isReducedFloatingType(out.dtype) ? at::kFloat : out.dtype;
  out.sizes.assign(x.sizes().begin(), x.sizes().end());
  contiguous_strides(out.sizes, &out.strides);
  const int64_t axis = x.dim() - static_cast<int64_t>(normalized.size());
  for (int64_t d = 0; d < x.dim(); ++d) stat.sizes.push_back(d < axis ? x.size(d) : 1);
  contiguous_strides(stat.sizes, &stat.strides);
  entry->rets.push_back({out});
  entry->rets.push_back({stat});
  entry->rets.push_back({stat});
  return entry;
}

// A convolution's output (and its backward's grad_input and grad_weight) is channels-last where
// CPU's is: CPU's kernels (mkldnn_conv_use_channels_last, thnn_conv_use_channels_last) go
// channels-last when the input or the weight suggests it, in 2-D for every dtype and in 3-D except
// for float64 (which CPU runs through its contiguous slow kernel); else contiguous. PyTorch's meta
// functions say contiguous for the forward and follow the input for the backward.
void conv_layouts(const c10::IValue& input_v, const c10::IValue& weight_v, MetaEntry* entry) {
  if (!input_v.isTensor() || !weight_v.isTensor()) return;
  const at::Tensor& input = input_v.toTensor();
  const at::Tensor& weight = weight_v.toTensor();
  if (!input.defined() || !weight.defined()) return;
  const int64_t nd = weight.dim();
  const auto mf = nd == 4 ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::ChannelsLast3d;
  if (nd != 4 && nd != 5) return;
  bool channels_last = (input.suggest_memory_format() == mf || weight.suggest_memory_format() == mf) &&
                       !(nd == 5 && (input.scalar_type() == at::kDouble || weight.scalar_type() == at::kDouble));
  for (size_t r = 0; r < entry->rets.size() && r < 2; ++r) {
    for (OutMeta& m : entry->rets[r]) {
      if (!m.defined || static_cast<int64_t>(m.sizes.size()) != nd) continue;
      if (!channels_last) {
        contiguous_strides(m.sizes, &m.strides);
        continue;
      }
      auto st = nd == 4 ? c10::get_channels_last_strides_2d(m.sizes) : c10::get_channels_last_strides_3d(m.sizes);
      m.strides.assign(st.begin(), st.end());
    }
  }
}

// _fused_rms_norm_backward's grad_input: channels_last (3d) where its input and grad_output are, as
// CPU's decomposition of rms_norm (elementwise ops over both) lays it out; PyTorch's meta function
// says contiguous. Asked on the meta-cache miss path only.
void rms_norm_backward_layouts(at::ArrayRef<c10::IValue> args, MetaEntry* entry) {
  if (args.size() < 2 || !args[0].isTensor() || !args[1].isTensor() || entry->rets.empty()) return;
  const at::Tensor& grad = args[0].toTensor();
  const at::Tensor& input = args[1].toTensor();
  const int64_t nd = input.dim();
  if (!input.defined() || !grad.defined() || (nd != 4 && nd != 5)) return;
  const auto mf = nd == 4 ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::ChannelsLast3d;
  if (input.suggest_memory_format() != mf || grad.suggest_memory_format() != mf) return;
  for (OutMeta& m : entry->rets[0]) {
    if (!m.defined || static_cast<int64_t>(m.sizes.size()) != nd) continue;
    auto st = nd == 4 ? c10::get_channels_last_strides_2d(m.sizes) : c10::get_channels_last_strides_3d(m.sizes);
    m.strides.assign(st.begin(), st.end());
  }
}

// Thrown (and caught below) when PyTorch cannot give output shapes without
// the data: no meta function, or a data-dependent one.
struct NoMeta {
  std::string why;
};

// Runs `op` on CPU with zero tensors of the arguments' shapes, dtypes and strides; raises CPU's error
// if CPU refuses the call (used on error paths only, for CPU's words), else returns.
void cpu_refusal(const c10::OperatorHandle& op, at::ArrayRef<c10::IValue> args) {
  auto to_cpu = [](const at::Tensor& t) {
    if (!t.defined() || t.is_cpu()) return t;
    return at::zeros({0}, t.options().device(c10::kCPU)).set_(
        at::zeros({static_cast<int64_t>(at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.element_size(),
                                                                          t.storage_offset()) /
                                        t.element_size()) + 1},
                  t.options().device(c10::kCPU)).storage(),
        t.storage_offset(), t.sizes(), t.strides());
  };
  torch::jit::Stack st;
  for (const auto& a : args) {
    if (a.isTensor()) {
      st.push_back(to_cpu(a.toTensor()));
    } else if (a.isTensorList()) {
      c10::List<at::Tensor> l;
      for (const at::Tensor& t : a.toTensorList()) l.push_back(to_cpu(t));
      st.push_back(l);
    } else {
      st.push_back(a);
    }
  }
  op.callBoxedForDispatchKey(c10::DispatchKey::CPU, st);
}

// strict: an error of ATen's C++ meta function stands (no retry with the Python one).
// Switches deterministic-algorithm alerts off for its scope (restoring warn_only after).
struct NoDeterminismAlerts {
  bool on, warn_only;
  NoDeterminismAlerts()
      : on(at::globalContext().deterministicAlgorithms()),
        warn_only(at::globalContext().deterministicAlgorithmsWarnOnly()) {
    if (on) at::globalContext().setDeterministicAlgorithms(false, false);
  }
  ~NoDeterminismAlerts() {
    if (on) at::globalContext().setDeterministicAlgorithms(true, warn_only);
  }
  NoDeterminismAlerts(const NoDeterminismAlerts&) = delete;
  NoDeterminismAlerts& operator=(const NoDeterminismAlerts&) = delete;
};

std::shared_ptr<MetaEntry> run_meta(const c10::OperatorHandle& op, const OpInfo& info,
                                    at::ArrayRef<c10::IValue> args, bool strict = false) {
  if (info.meta_via == OpInfo::MetaVia::kGeqrf) return geqrf_layouts(args[0].toTensor());
  if (info.meta_via == OpInfo::MetaVia::kLikeSelf) return like_self_layouts(info, args[0].toTensor());
  if (info.meta_via == OpInfo::MetaVia::kLikeInput && args.size() > 1 && args[1].isTensor())
    return like_self_layouts(info, args[1].toTensor());
  if (info.meta_via == OpInfo::MetaVia::kLayerNorm) return layer_norm_layouts(args);
  // PyTorch's Python meta functions take a Meta tensor for a CUDA one (device_hint), so with
  // deterministic algorithms on they would raise CUDA's alerts (median, histc, ...) for a tpu op;
  // shapes never depend on it, and the tpu's own alerts are raised at the call (fallback_precheck).
  NoDeterminismAlerts no_alerts;
  torch::jit::Stack meta_stack;
  meta_stack.reserve(args.size() + 1);
  // A Generator goes to meta as None: it never changes a shape, and some of PyTorch's Python meta
  // functions (the refs of exponential_, geometric_, ...) reject any generator.
  for (const auto& a : args) meta_stack.push_back(a.isGenerator() ? c10::IValue() : ivalue_to_meta(a));
  if (!info.cpp_meta) {
    // A Python meta function (torch._meta_registrations, through out_wrapper) resizes the meta copy
    // of a caller's out= of another shape with Python's warning, which DropResizeWarning does not
    // see: it gets empty copies (resized silently), and apply_layout warns once, for the caller's
    // tensor (linalg.eigh(out=) warned twice).
    const auto& sargs = op.schema().arguments();
    for (size_t i = 0; i < sargs.size() && i < meta_stack.size(); ++i) {
      if (!sargs[i].is_out() || !meta_stack[i].isTensor()) continue;
      const at::Tensor& m = meta_stack[i].toTensor();
      if (m.defined() && m.numel() != 0) meta_stack[i] = at::empty({0}, m.options());
    }
  }
  const c10::OperatorHandle* meta_op = &op;
  if (info.meta_via == OpInfo::MetaVia::kConvolution) {
    // convolution_overrideable(input, weight, bias, ...) has convolution's arguments.
    static const c10::OperatorHandle conv = c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
    meta_op = &conv;
  } else if (info.meta_via == OpInfo::MetaVia::kPowScalarOut) {
    static const c10::OperatorHandle pow_ts =
        c10::Dispatcher::singleton().findSchemaOrThrow("aten::pow", "Tensor_Scalar");
    meta_op = &pow_ts;
    meta_stack.pop_back();  // the out argument
  } else if (info.meta_via == OpInfo::MetaVia::kComplexToFloatOut && args.size() == 2 && args[0].isTensor() &&
             args[1].isTensor() && args[0].toTensor().is_complex()) {
    // the functional op's layout (self's shape), after CPU's check of the out= dtype; into a complex
    // out= the complex kernel writes 0 imaginary parts
    const c10::ScalarType real = c10::toRealValueType(args[0].toTensor().scalar_type());
    const c10::ScalarType r = args[1].toTensor().scalar_type();
    TORCH_CHECK(c10::isComplexType(r) || c10::canCast(real, r), "result type ", real,
                " can't be cast to the desired output type ", r);
    const bool is_abs = info.base == "abs";  // abs keeps a complex result's precision, angle may widen it
    TORCH_CHECK(!is_abs || !c10::isComplexType(r) || r == args[0].toTensor().scalar_type(), "Found dtype ", r,
                " but expected ", args[0].toTensor().scalar_type());
    static const c10::OperatorHandle abs = c10::Dispatcher::singleton().findSchemaOrThrow("aten::abs", "");
    static const c10::OperatorHandle angle = c10::Dispatcher::singleton().findSchemaOrThrow("aten::angle", "");
    meta_op = is_abs ? &abs : &angle;
    meta_stack.pop_back();  // the out argument
  } else if (info.meta_via == OpInfo::MetaVia::kConvolutionBackward) {
    // convolution_backward adds bias_sizes after weight: [out_channels].
    static const c10::OperatorHandle conv_bwd =
        c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution_backward", "");
    meta_op = &conv_bwd;
    const at::Tensor& w = args[2].toTensor();
    bool transposed = args[6].toBool();
    int64_t groups = args[8].toInt();
    int64_t out_channels = transposed ? w.size(1) * groups : w.size(0);
    meta_stack.insert(meta_stack.begin() + 3, c10::IValue(std::vector<int64_t>{out_channels}));
  } else if (info.meta_via == OpInfo::MetaVia::kRnnCell) {
    // (input_gates, hidden_gates, state, input_bias?, hidden_bias?): absent
    // biases (None, or undefined tensors from ATen's RNN.cpp) become
    // gate-sized meta tensors; they do not change the shapes.
    const at::Tensor gates = meta_stack[0].toTensor();
    for (size_t i = 3; i < 5 && i < meta_stack.size(); ++i) {
      const c10::IValue& b = meta_stack[i];
      bool absent = b.isNone() || (b.isTensor() && !b.toTensor().defined());
      if (absent && gates.dim() == 2) meta_stack[i] = at::empty({gates.size(1)}, gates.options());
    }
  } else if (info.meta_via == OpInfo::MetaVia::kNllLoss || info.meta_via == OpInfo::MetaVia::kNllLossBackward) {
    // a uint8 target shapes like an int64 one (the kernel reads either)
    size_t t = info.meta_via == OpInfo::MetaVia::kNllLoss ? 1 : 2;
    if (t < meta_stack.size() && meta_stack[t].isTensor()) {
      const at::Tensor target = meta_stack[t].toTensor();
      if (target.defined() && target.scalar_type() == at::kByte) meta_stack[t] = target.to(at::kLong);
    }
  }
  if (info.meta_via == OpInfo::MetaVia::kIndexReduce && meta_stack.size() > 3 && meta_stack[0].isTensor() &&
      meta_stack[1].isInt() && meta_stack[2].isTensor() && meta_stack[3].isTensor()) {
    // (self, dim, index, source, ...): a source empty along dim, and its empty index, as one slice
    const at::Tensor index = meta_stack[2].toTensor(), source = meta_stack[3].toTensor();
    if (source.dim() > 0 && index.numel() == 0) {
      const int64_t d = c10::maybe_wrap_dim(meta_stack[1].toInt(), source.dim());
      if (source.size(d) == 0) {
        std::vector<int64_t> sizes = source.sizes().vec();
        sizes[d] = 1;
        meta_stack[3] = at::empty(sizes, source.options());
        meta_stack[2] = at::zeros({1}, index.options());
      }
    }
  }
  try {
    // ATen's C++ meta function where PyTorch's Meta key holds a Python one
    // (torch._meta_registrations): the same checks and layouts as CPU's
    // eager kernels, in microseconds instead of a millisecond of Python, so a
    // new shape costs little more than a cached one.
    if (info.cpp_meta && meta_op == &op) {
      // Where the C++ meta function raises an IndexError, PyTorch's Python meta decides: some of
      // ATen's C++ meta functions assume real tensors, e.g. index_add's selects slice 0 along a
      // size-0 dim when the result is on Meta, an error CPU's kernel never reaches. Refusals are
      // rare, so the copy is a miss-path cost.
      torch::jit::Stack retry = meta_stack;
      try {
        info.cpp_meta->callBoxed(op, c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
      } catch (const c10::IndexError& e) {
        // An index error of a size-0 dim (see above) is a Meta artefact; any other refusal is CPU's
        // (dtype checks, heaviside's "different dtypes", ...), and stands.
        if (strict) throw;
        std::exception_ptr cpp_error = std::current_exception();
        meta_stack = std::move(retry);
        try {
          meta_op->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
        } catch (...) {
          // Both refuse: ATen's words are CPU's (the Python meta's may differ).
          std::rethrow_exception(cpp_error);
        }
      }
    } else {
      try {
        meta_op->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
      } catch (const std::exception& e) {
        // Some Python meta functions (torch._meta_registrations: linalg_eig's, cholesky_inverse's
        // squareCheckInputs) refuse arguments with AssertionError where CPU's kernel raises
        // RuntimeError with the same words: raise it as CPU does. (pybind11's error_already_set is
        // told by its type's name: its type_info may differ across shared objects.)
        std::string msg;
        bool assertion = false, cast = false;
        if (std::strcmp(typeid(e).name(), typeid(pybind11::error_already_set).name()) == 0) {
          const auto& pe = static_cast<const pybind11::error_already_set&>(e);
          pybind11::gil_scoped_acquire gil;
          if (pe.matches(PyExc_AssertionError)) {
            assertion = true;
            msg = pybind11::str(pe.value()).cast<std::string>();
          } else if (pe.matches(PyExc_RuntimeError)) {
            msg = pybind11::str(pe.value()).cast<std::string>();
            cast = msg.find("Attempting to cast from") != std::string::npos;
          }
        }
        TORCH_CHECK(!assertion, msg);
        // An out= of a dtype the result cannot be cast to: the Python meta's out_wrapper refuses it in
        // its own words; CPU's kernel checks it first, in the op's words ("Expected eigenvalues to be
        // safely castable ...", "but got int instead"). Error path only: CPU is asked with tensors of
        // the same shapes and dtypes, and its refusal stands.
        if (cast) cpu_refusal(op, args);
        throw;
      }
    }
  } catch (const c10::NotImplementedError& e) {
    throw NoMeta{e.what_without_backtrace()};
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    if (msg.find("meta tensor") != std::string::npos || msg.find("Meta") != std::string::npos ||
        msg.find("data-dependent") != std::string::npos)
      throw NoMeta{msg};
    throw;
  }
  auto entry = std::make_shared<MetaEntry>();
  for (size_t r = 0; r < info.rets.size(); ++r) {
    const c10::IValue& v = meta_stack[r];
    c10::SmallVector<OutMeta, 1> outs;
    if (v.isTensor() || v.isNone()) {
      outs.push_back(out_meta(v.isTensor() ? v.toTensor() : at::Tensor()));
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) outs.push_back(out_meta(t));
    }
    entry->rets.push_back(std::move(outs));
  }
  if (info.meta_via == OpInfo::MetaVia::kConvolution || info.meta_via == OpInfo::MetaVia::kConvolutionBackward)
    conv_layouts(info.meta_via == OpInfo::MetaVia::kConvolution ? args[0] : args[1],
                 info.meta_via == OpInfo::MetaVia::kConvolution ? args[1] : args[2], entry.get());
  else if (info.full_name == "aten::_fused_rms_norm_backward")
    rms_norm_backward_layouts(args, entry.get());
  return entry;
}

// PyTorch's resize_output warns when a user's out= of another shape with
// elements is resized. Our meta runs resize meta copies, and PyTorch's
// structured wrapper resizes an output it allocated itself (an op whose .out
// meta sizes it in two steps, mse_loss: elementwise, then reduced): neither
// concerns a tensor of the caller's, so their warning is dropped, and
// apply_layout gives the user's one, whether or not the layout was cached.
constexpr const char kResizeWarning[] = "An output with one or more elements was resized";
struct DropResizeWarning : c10::WarningHandler {
  c10::WarningHandler* next = c10::WarningUtils::get_warning_handler();
  void process(const c10::Warning& w) override {
    if (w.msg().rfind(kResizeWarning, 0) == 0) return;
    next->process(w);
  }
};

// The int arguments of a direct structured op's first call of a signature, and those PyTorch's
// wrapper passed on to the .out form where they differ: the first call through our fallback while
// the wrapper runs is that .out call.
struct WrapperInts {
  const OpInfo* info;
  std::vector<std::pair<uint32_t, int64_t>> outer, passed;
  bool seen;
};
thread_local WrapperInts* t_wrapper_ints = nullptr;

void note_wrapper_ints(const Call& c) {
  WrapperInts& w = *t_wrapper_ints;
  w.seen = true;
  if (c.info.base != w.info->base || c.info.num_args < w.info->num_args) return;
  for (const auto& [i, v] : w.outer)
    if (c.arg(i).isInt() && c.arg(i).toInt() != v) w.passed.push_back({i, c.arg(i).toInt()});
}

// First call of a direct structured op with this signature: PyTorch's own
// structured wrapper runs (C++ meta with all its checks, allocation, then our
// .out kernel), and the output layout is remembered only if it succeeded.
void run_structured_wrapper(const Call& c, bool cacheable, uint64_t h, const std::vector<int64_t>& key) {
  WrapperInts w{&c.info, {}, {}, false};
  for (size_t i = 0; i < c.info.num_args; ++i)
    if (c.arg(i).isInt()) w.outer.push_back({static_cast<uint32_t>(i), c.arg(i).toInt()});
  {
    DropResizeWarning drop;
    c10::WarningUtils::WarningHandlerGuard guard(&drop);
    WrapperInts* outer = t_wrapper_ints;
    t_wrapper_ints = cacheable && !w.outer.empty() ? &w : nullptr;
    try {
      c.op.callBoxedForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional, *c.stack);
    } catch (...) {
      t_wrapper_ints = outer;
      throw;
    }
    t_wrapper_ints = outer;
  }
  if (!cacheable) return;
  auto entry = std::make_shared<MetaEntry>();
  entry->key = key;
  entry->wrapper_ints = std::move(w.passed);
  const size_t nrets = c.info.rets.size();
  for (size_t r = 0; r < nrets; ++r) {
    const c10::IValue& v = (*c.stack)[c.stack->size() - nrets + r];
    entry->rets.push_back({out_meta(v.isTensor() ? v.toTensor() : at::Tensor())});
  }
  remember_layout(h, std::move(entry));
}

// ================================ allocation ================================

// Places meta's sizes/strides on a written output whose shape differs (an
// out= tensor of another shape is resized, as at::native::resize_output does).
// A written tensor of the right shape keeps its strides: it may be a strided
// view, and meta (or the functional twin used for pow's out=) may report a
// contiguous layout for it.
void apply_layout(const at::Tensor& t, const OutMeta& m) {
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->sizes().equals(m.sizes)) return;
  if (impl->numel() != 0)
    TORCH_WARN(kResizeWarning, " since it had shape ", impl->sizes(), ", which does not match the required output "
               "shape ", c10::IntArrayRef(m.sizes), ". This behavior is deprecated, and in a future PyTorch release "
               "outputs will not be resized unless they have zero elements. You can explicitly reuse an out tensor t "
               "by resizing it, inplace, to zero elements with t.resize_(0).");
  size_t need = at::detail::computeStorageNbytes(m.sizes, m.strides, t.element_size(), t.storage_offset());
  c10::StorageImpl* st = impl->unsafe_storage().unsafeGetStorageImpl();
  if (need > st->nbytes()) resize_storage_bytes(st, need);
  impl->set_sizes_and_strides(m.sizes, m.strides);
}

// A view of `base`'s storage with meta's layout; dtype-changing views
// (view_as_complex, view_as_real) get a TensorImpl of meta's dtype.
at::Tensor make_view(const at::Tensor& base, const OutMeta& m) {
  if (!m.defined) return at::Tensor();
  if (m.dtype == base.scalar_type()) return at::native::as_strided_tensorimpl(base, m.sizes, m.strides, m.offset);
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(base.storage()),
                                                   base.key_set(), c10::scalarTypeToTypeMeta(m.dtype));
  impl->set_sizes_and_strides(m.sizes, m.strides, m.offset);
  return at::Tensor(std::move(impl));
}

at::Tensor make_fresh(const OutMeta& m) {
  return m.defined ? empty_tpu(m.sizes, m.strides, m.dtype) : at::Tensor();
}

// An elementwise kernel's fresh output takes the memory layout of its first
// input of the same shape that is dense but not contiguous (channels_last,
// a transpose), as TensorIterator lays CPU's out; PyTorch's Python meta
// functions (abs, isinf, logical_not, ...) say contiguous.
OutMeta elementwise_layout(const Call& c, const OutMeta& m) {
  if (!m.defined || !c.info.def || !(c.info.def->flags & TPURT_OP_ELEMENTWISE) || m.sizes.size() < 2) return m;
  c10::SmallVector<int64_t, 6> contiguous;
  contiguous_strides(m.sizes, &contiguous);
  if (m.strides != contiguous) return m;  // meta chose a layout itself
  for (size_t i = 0; i < c.info.num_args; ++i) {
    const c10::IValue& v = c.arg(i);
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || t.is_cpu() || !t.sizes().equals(m.sizes)) continue;
    if (t.is_contiguous() || !t.is_non_overlapping_and_dense()) return m;
    OutMeta r = m;
    r.strides.assign(t.strides().begin(), t.strides().end());
    return r;
  }
  return m;
}

}  // namespace

// ================================ the stage ================================

bool answer_pow_without_kernel(const Call& c) {
  if (c.info.num_args != 3) return false;
  // As ATen's pow_out: x ** 0 fills 1 and x ** 1 copies, for every dtype
  // (bool ** True is bool, no kernel runs).
  const c10::IValue& e = c.arg(1);
  bool zero = (e.isBool() && !e.toBool()) || (e.isInt() && e.toInt() == 0) || (e.isDouble() && e.toDouble() == 0.0);
  bool one = (e.isBool() && e.toBool()) || (e.isInt() && e.toInt() == 1) || (e.isDouble() && e.toDouble() == 1.0);
  if (!zero && !one) return false;
  at::Tensor self = c.arg(0).toTensor();
  at::Tensor out = c.arg(2).toTensor();
  at::native::resize_output(out, self.sizes());
  if (zero) out.fill_(1);
  else out.copy_(self);
  torch::jit::drop(*c.stack, c.info.num_args);
  c.stack->push_back(std::move(out));
  return true;
}

void settle_repeat_interleave_size(const Call& c) {
  if (c.info.num_args == 2 && c.arg(1).isNone() && c.arg(0).isTensor()) {
    // The output size depends on the data: sum the repeats on the device,
    // wait for it, and continue with an explicit output_size.
    const at::Tensor& rep = c.arg(0).toTensor();
    int64_t total = rep.numel() == 0 ? 0 : rep.sum().item<int64_t>();
    c.arg(1) = c10::IValue(total);
  }
}

void raise_meta_refusal(const Call& c) {
  if (c.info.cpp_meta && c.info.meta_via == OpInfo::MetaVia::kSelf) {
    // ATen's own meta function: each of its errors, NotImplementedError ones included, is CPU's
    torch::jit::Stack st;
    for (const auto& a : c.args()) st.push_back(a.isGenerator() ? c10::IValue() : ivalue_to_meta(a));
    c.info.cpp_meta->callBoxed(c.op, c10::DispatchKeySet(c10::DispatchKey::Meta), &st);
    return;
  }
  try {
    run_meta(c.op, c.info, c.args(), /*strict=*/true);
  } catch (const NoMeta&) {
  }
}

std::shared_ptr<const MetaEntry> output_layouts(const Call& c, std::vector<int64_t>& key) {
  const OpInfo& info = c.info;
  if (TPURT_UNLIKELY(t_wrapper_ints != nullptr) && !t_wrapper_ints->seen) note_wrapper_ints(c);
  at::ArrayRef<c10::IValue> args = c.args();
  key.push_back(reinterpret_cast<intptr_t>(&info));
  // Integer inputs promote to the default dtype (true division, a Python float
  // with an integer tensor), so the same arguments can give another dtype.
  key.push_back(static_cast<int64_t>(c10::get_default_dtype_as_scalartype()));
  bool cacheable = true;
  for (const auto& a : args)
    if (!key_ivalue(key, a)) {
      cacheable = false;
      break;
    }
  std::shared_ptr<const MetaEntry> meta;
  uint64_t h = 0;
  if (cacheable) {
    h = hash_words(key);
    std::shared_ptr<const MetaEntry>& slot = t_meta_slots[h & 255];
    if (slot && slot->key == key) {
      meta = slot;
    } else {
      std::lock_guard<std::mutex> lock(g_meta_mu);
      auto it = g_meta.find(h);
      if (it != g_meta.end() && it->second->key == key) meta = it->second;
      if (meta) slot = meta;
    }
  }
  if (meta) {
    g_meta_hits.fetch_add(1, std::memory_order_relaxed);
    for (const auto& [i, v] : meta->wrapper_ints) c.arg(i) = c10::IValue(v);
    return meta;
  }
  g_meta_misses.fetch_add(1, std::memory_order_relaxed);
  if (info.direct) {
    run_structured_wrapper(c, cacheable, h, key);
    return nullptr;
  }
  std::shared_ptr<MetaEntry> fresh;
  try {
    DropResizeWarning drop;
    c10::WarningUtils::WarningHandlerGuard guard(&drop);
    fresh = run_meta(c.op, info, args);
  } catch (const NoMeta& e) {
    // An op that returns nothing and only writes its arguments (for
    // example _cummax_helper(self, values!, indices!, dim)): its callers
    // have sized the written tensors already, so no shapes are needed.
    if (!info.rets.empty())
      throw Unsupported{"has output shapes that depend on the data",
                        c10::str(c.name, ": the tpu device cannot run this operator because its output shape "
                                 "cannot be computed without the data (", e.why, "). Set "
                                 "TORCH_TPU_CPU_FALLBACK=1 to run it on the CPU (slow).")};
    fresh = std::make_shared<MetaEntry>();
  }
  if (cacheable) {
    fresh->key = key;
    remember_layout(h, fresh);
  }
  return fresh;
}

void make_outputs(const Call& c, const MetaEntry& meta, Outputs* out) {
  const OpInfo& info = c.info;
  for (size_t r = 0; r < info.rets.size(); ++r) {
    const RetInfo& ri = info.rets[r];
    const auto& metas = meta.rets[r];
    if (ri.kind == RetKind::kWritten) {
      const c10::IValue& a = c.arg(ri.arg);
      if (ri.is_list) {
        size_t k = 0;
        for (const at::Tensor& t : a.toTensorList()) {
          if (k < metas.size()) apply_layout(t, metas[k]);
          out->kernel_outs.push_back(t);
          ++k;
        }
      } else {
        const at::Tensor& t = a.toTensor();
        // an empty out= tensor (a composite's at::empty({0})) is laid out as a fresh one
        apply_layout(t, t.numel() == 0 ? elementwise_layout(c, metas[0]) : metas[0]);
        out->kernel_outs.push_back(t);
      }
      out->results.push_back(a);
    } else if (ri.kind == RetKind::kView) {
      const c10::IValue& a = c.arg(ri.arg);
      const at::Tensor& base = a.isTensor() ? a.toTensor() : a.toTensorList().get(0);
      if (ri.is_list) {
        c10::List<at::Tensor> views;
        for (const OutMeta& m : metas) views.push_back(make_view(base, m));
        out->results.push_back(std::move(views));
      } else {
        out->results.push_back(make_view(base, metas[0]));
      }
    } else if (ri.is_list) {  // fresh
      c10::List<at::Tensor> outs;
      for (const OutMeta& m : metas) {
        at::Tensor t = make_fresh(m);
        out->kernel_outs.push_back(t);
        outs.push_back(t);
      }
      out->results.push_back(std::move(outs));
    } else {
      at::Tensor t = make_fresh(elementwise_layout(c, metas[0]));
      out->kernel_outs.push_back(t);
      out->results.push_back(std::move(t));
    }
  }
}

}  // namespace fallback

MetaCacheStats meta_cache_stats() {
  using namespace fallback;
  std::lock_guard<std::mutex> lock(g_meta_mu);
  return {g_meta_hits.load(), g_meta_misses.load(), g_meta.size()};
}

}  // namespace torch_tpu
