// What the boxed fallback knows about an op, worked out once from its schema
// and the C op table: argument classes, the kernel (tpurt_op_resolve, the one
// resolution rule), how each return aliases an argument, and the CPU rules on
// overlapping written tensors. Also which structured ops are registered
// directly, past PyTorch's composite wrapper.
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <torch/library.h>

#include "fallback.h"

namespace torch_tpu {

namespace fallback {

static std::unique_ptr<c10::KernelFunction> cpp_meta_of(const c10::OperatorName& name);

namespace {

ArgClass classify(const c10::TypePtr& real) {
  c10::TypePtr t = real;
  if (t->kind() == c10::TypeKind::OptionalType) t = t->castRaw<c10::OptionalType>()->getElementType();
  switch (t->kind()) {
    case c10::TypeKind::TensorType: return ArgClass::kTensor;
    case c10::TypeKind::IntType: case c10::TypeKind::SymIntType: return ArgClass::kInt;
    case c10::TypeKind::FloatType: case c10::TypeKind::SymFloatType: return ArgClass::kDouble;
    case c10::TypeKind::BoolType: case c10::TypeKind::SymBoolType: return ArgClass::kBool;
    case c10::TypeKind::NumberType: return ArgClass::kScalar;
    case c10::TypeKind::ScalarTypeType: return ArgClass::kDtype;
    case c10::TypeKind::LayoutType: case c10::TypeKind::MemoryFormatType: return ArgClass::kEnum;
    case c10::TypeKind::StringType: return ArgClass::kString;
    case c10::TypeKind::GeneratorType: return ArgClass::kGenerator;
    case c10::TypeKind::DeviceObjType: return ArgClass::kDevice;
    case c10::TypeKind::ListType: {
      c10::TypePtr e = t->castRaw<c10::ListType>()->getElementType();
      switch (e->kind()) {
        case c10::TypeKind::TensorType: return ArgClass::kTensorList;
        case c10::TypeKind::OptionalType:
          return e->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType
                     ? ArgClass::kOptTensorList
                     : ArgClass::kUnknown;
        case c10::TypeKind::IntType: case c10::TypeKind::SymIntType: return ArgClass::kIntList;
        case c10::TypeKind::FloatType: return ArgClass::kDoubleList;
        case c10::TypeKind::BoolType: return ArgClass::kBoolList;
        default: return ArgClass::kUnknown;
      }
    }
    default: return ArgClass::kUnknown;
  }
}

bool is_tensor_type(const c10::TypePtr& t, bool* is_list) {
  c10::TypePtr u = t;
  if (u->kind() == c10::TypeKind::OptionalType) u = u->castRaw<c10::OptionalType>()->getElementType();
  if (u->kind() == c10::TypeKind::TensorType) {
    *is_list = false;
    return true;
  }
  if (u->kind() == c10::TypeKind::ListType &&
      u->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::TensorType) {
    *is_list = true;
    return true;
  }
  return false;
}

std::string base_name(const c10::OperatorName& name) {
  char buf[256];
  return tpurt_op_base_name(name.name.c_str(), buf, sizeof buf);
}

// How each return relates to the arguments (fresh, a written argument, a view).
void classify_returns(const c10::FunctionSchema& schema, OpInfo* info) {
  const auto& args = schema.arguments();
  bool any_view = false, all_view = !schema.returns().empty();
  for (const auto& r : schema.returns()) {
    RetInfo ri;
    if (!is_tensor_type(r.type(), &ri.is_list)) {
      ri.kind = RetKind::kUnsupported;
      info->unsupported_ret = true;
    } else if (const c10::AliasInfo* ra = r.alias_info()) {
      for (size_t j = 0; j < args.size() && ri.arg < 0; ++j) {
        const c10::AliasInfo* aa = args[j].alias_info();
        if (!aa) continue;
        for (const auto& s : ra->beforeSets())
          if (aa->beforeSets().count(s)) ri.arg = static_cast<int>(j);
      }
      if (ri.arg < 0) {
        ri.kind = RetKind::kUnsupported;
        info->unsupported_ret = true;
      } else {
        ri.kind = ra->isWrite() ? RetKind::kWritten : RetKind::kView;
      }
    }
    if (ri.kind == RetKind::kView) any_view = true;
    else all_view = false;
    info->rets.push_back(ri);
  }
  info->all_views = any_view && all_view;
  if (any_view && !all_view) info->unsupported_ret = true;
}

// Ops PyTorch 2.13 gives no (usable) meta function take their output layouts
// from a twin op or a rule (fallback_outputs.cpp).
OpInfo::MetaVia meta_via(const std::string& full_name) {
  if (full_name == "aten::convolution_overrideable") return OpInfo::MetaVia::kConvolution;
  if (full_name == "aten::convolution_backward_overrideable") return OpInfo::MetaVia::kConvolutionBackward;
  // output = empty_like(self)
  if (full_name == "aten::_logcumsumexp" || full_name == "aten::_logcumsumexp.out") return OpInfo::MetaVia::kLikeSelf;
  // grad_input = empty_like(self), self the second argument (no meta function in 2.13)
  if (full_name == "aten::fractional_max_pool3d_backward") return OpInfo::MetaVia::kLikeInput;
  // native_layer_norm's meta is a Python decomposition (torch._refs), ~10 ms per new shape
  if (full_name == "aten::native_layer_norm") return OpInfo::MetaVia::kLayerNorm;
  // pow.Tensor_Scalar_out: its Python meta (torch._refs.pow) types
  // bool ** True as int64 and refuses the bool out tensor that the C++
  // structured meta (and CPU) chose; only the out layout is needed here.
  if (full_name == "aten::pow.Tensor_Scalar_out") return OpInfo::MetaVia::kPowScalarOut;
  // abs.out, angle.out: CPU's unary_op_impl_with_complex_to_float_out takes a complex out= for a
  // complex self (the real result, imaginary parts 0), which PyTorch's Python meta (torch._refs.abs)
  // refuses, and checks a real out= with its own words.
  if (full_name == "aten::abs.out" || full_name == "aten::angle.out") return OpInfo::MetaVia::kComplexToFloatOut;
  // geqrf has no meta function; its shapes follow from the input's.
  if (full_name == "aten::geqrf" || full_name == "aten::geqrf.a") return OpInfo::MetaVia::kGeqrf;
  // _thnn_fused_lstm_cell's Python meta dereferences its optional biases.
  if (full_name == "aten::_thnn_fused_lstm_cell") return OpInfo::MetaVia::kRnnCell;
  // CPU takes a uint8 target; PyTorch's meta (its decomposition) gathers with it and refuses.
  if (full_name == "aten::nll_loss_forward" || full_name == "aten::nll_loss2d_forward" ||
      full_name == "aten::nll_loss_forward.output" || full_name == "aten::nll_loss2d_forward.output")
    return OpInfo::MetaVia::kNllLoss;
  if (full_name == "aten::nll_loss_backward" || full_name == "aten::nll_loss2d_backward" ||
      full_name == "aten::nll_loss_backward.grad_input" || full_name == "aten::nll_loss2d_backward.grad_input")
    return OpInfo::MetaVia::kNllLossBackward;
  // index_reduce's C++ meta selects slice 0 of source along dim, which a source empty along dim
  // lacks (CPU's kernel never selects it); the layout is self's either way.
  if (full_name.compare(0, 18, "aten::index_reduce") == 0) return OpInfo::MetaVia::kIndexReduce;
  return OpInfo::MetaVia::kSelf;
}

// Which written tensors CPU refuses (fallback_check.cpp applies it).
void overlap_rules(const std::string& base, OpInfo* info) {
  // The ops whose CPU kernels refuse to write a tensor whose elements share
  // memory (at::assert_no_internal_overlap): the TensorIterator ones (our
  // elementwise and random families) but fill/zero/masked_fill/index_fill and
  // threshold (idempotent: its TensorIterator skips the check), which CPU
  // allows, and these others. Reductions, index_put, resize_ allow it.
  static const char* const kRefuseOverlap[] = {"cat", "gather", "index_select", "masked_select", "take", "mm",
                                               "bmm", "addmm", "baddbmm", "addbmm", "mv", "addmv",
                                               "linspace", "logspace", "arange", "range"};
  static const char* const kAllowOverlap[] = {"fill", "zero", "masked_fill", "index_fill", "threshold"};
  const bool alias_safe = info->def && (info->def->flags & TPURT_OP_ALIAS_SAFE);
  info->refuse_overlap = alias_safe || info->random;
  for (const char* n : kAllowOverlap)
    if (base == n) info->refuse_overlap = false;
  for (const char* n : kRefuseOverlap)
    if (base == n) info->refuse_overlap = true;
  // ... and of these, an out= that overlaps an input at all (at::assert_no_overlap);
  // TensorIterator ops take out= identical to an input but not a partial overlap.
  static const char* const kRefuseAlias[] = {"cat", "gather", "index_select", "take", "kthvalue"};
  for (const char* n : kRefuseAlias)
    if (base == n) info->refuse_alias = info->refuse_overlap = true;
  // masked_fill_, index_fill_ and index_put_ on an expanded self: CPU warns that it is deprecated and
  // writes it; it still refuses a mask that partially overlaps self, and (index_fill_, index_put_) an
  // index or value tensor that overlaps it at all.
  static const char* const kTail =
      " on expanded tensors is deprecated. Please clone() the tensor before performing this operation. "
      "This also applies to advanced indexing e.g. tensor[";
  static const std::string masked_fill = std::string("Use of masked_fill_") + kTail + "mask] = scalar";
  static const std::string index_fill = std::string("Use of index_fill_") + kTail + "indices] = tensor";
  static const std::string index_put = std::string("Use of index_put_") + kTail + "indices] = tensor";
  if (base == "masked_fill") info->warn_overlap = masked_fill.c_str();
  if (base == "index_fill") info->warn_overlap = index_fill.c_str();
  if (base == "index_put" || base == "_index_put_impl") info->warn_overlap = index_put.c_str();
  if (info->warn_overlap) {
    info->refuse_overlap = false;
    info->refuse_alias = base != "masked_fill";
  }
}

std::unique_ptr<OpInfo> build_op_info(const c10::OperatorHandle& op) {
  auto info = std::make_unique<OpInfo>();
  const c10::FunctionSchema& schema = op.schema();
  const c10::OperatorName& name = op.operator_name();
  info->handle = &op;
  info->full_name = name.name + (name.overload_name.empty() ? "" : "." + name.overload_name);
  info->base = base_name(name);
  info->overload = name.overload_name;
  info->def = tpurt_op_resolve(name.name.c_str(), name.overload_name.c_str(), 0);
  info->cdef = tpurt_op_resolve(name.name.c_str(), name.overload_name.c_str(), TPURT_RESOLVE_COMPLEX);
  info->random = info->def && (info->def->flags & TPURT_OP_RANDOM);

  const auto& args = schema.arguments();
  info->num_args = args.size();
  for (const auto& a : args) {
    info->arg_class.push_back(classify(a.real_type()));
    info->arg_is_out.push_back(a.is_out());
    info->arg_written.push_back(a.alias_info() != nullptr && a.alias_info()->isWrite());
    if (info->arg_class.back() == ArgClass::kGenerator) info->has_generator_arg = true;
  }
  classify_returns(schema, info.get());
  info->meta_via = meta_via(info->full_name);
  info->precheck = precheck_for(info->full_name);
  info->cpp_meta = cpp_meta_of(name);
  overlap_rules(info->base, info.get());
  info->repeat_interleave = info->full_name == "aten::repeat_interleave.Tensor";
  // CPU's kernels for these return before their dtype dispatch when self is empty (an empty integer
  // tensor's normal_ is no error there; uniform_ and cauchy_ check first and refuse it)
  info->empty_fill_noop = info->full_name == "aten::normal_" || info->full_name == "aten::log_normal_" ||
                          info->full_name == "aten::exponential_";
  info->bool_index_arg1 = (info->base == "index" || info->base == "index_put" || info->base == "_index_put_impl") &&
                          args.size() > 1 && info->arg_class[1] == ArgClass::kOptTensorList;
  if (info->base == "index_fill" || info->base == "index_add" || info->base == "index_copy" ||
      info->base == "index_select" || info->base == "index_reduce")
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i].name() == "index" && info->arg_class[i] == ArgClass::kTensor) info->cpu_index_arg = static_cast<int>(i);
  info->mask_put = info->bool_index_arg1 &&
                   (info->full_name == "aten::_index_put_impl_" || info->full_name == "aten::index_put_");
  return info;
}

}  // namespace

// Built on first use; the table holds a few hundred ops.
static std::unique_ptr<c10::KernelFunction> cpp_meta_of(const c10::OperatorName& name) {
  static const auto* index = [] {
    auto* m = new std::unordered_map<std::string, const MetaFn*>();
    for (size_t i = 0; i < kCppMetaTableSize; ++i) m->emplace(kCppMetaTable[i].name, &kCppMetaTable[i]);
    return m;
  }();
  if (name.name.rfind("aten::", 0) != 0) return nullptr;
  std::string key = name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
  auto it = index->find(key);
  if (it == index->end()) return nullptr;
  return std::make_unique<c10::KernelFunction>(it->second->make());
}

namespace {

std::mutex g_ops_mu;
std::unordered_map<const void*, std::unique_ptr<OpInfo>> g_ops;  // never erased: entries live for the process
std::unordered_set<const void*> g_direct_ops;                     // schemas of the direct structured ops

// A small direct-mapped per-thread cache in front of g_ops, so the hot path
// takes no lock.
struct OpInfoSlot {
  const void* key = nullptr;
  const OpInfo* info = nullptr;
};
thread_local OpInfoSlot t_op_slots[128];

}  // namespace

const OpInfo& get_op_info(const c10::OperatorHandle& op) {
  const void* key = &op.schema();
  OpInfoSlot& slot = t_op_slots[(reinterpret_cast<uintptr_t>(key) >> 4) & 127];
  if (TPURT_LIKELY(slot.key == key)) return *slot.info;
  std::lock_guard<std::mutex> lock(g_ops_mu);
  auto it = g_ops.find(key);
  if (it == g_ops.end()) {
    auto info = build_op_info(op);
    info->direct = g_direct_ops.count(key) != 0;
    it = g_ops.emplace(key, std::move(info)).first;
  }
  slot.key = key;
  slot.info = it->second.get();
  return *slot.info;
}

// ============================ direct structured ops ============================
// PyTorch serves a structured op's functional and in-place forms (add.Tensor,
// mul_.Tensor, ...) on a new backend through a CompositeExplicitAutogradNonFunctional
// wrapper: C++ meta (TensorIterator), allocation, then a second dispatch of the
// .out form. That wrapper costs as much as the whole rest of our path. For the
// ops with a C kernel we register the fallback directly, so a call is one
// dispatch and one cached layout lookup. The checks the wrapper's C++ meta
// makes are kept: the first call of each signature (arguments' dtypes, sizes,
// strides and scalar values) runs the wrapper itself, and only a signature
// that succeeded is cached (fallback_outputs.cpp). (PyTorch's Python meta
// registrations, which the ordinary path would consult, skip some of those
// checks: sub on bool, ...)

namespace {

bool qualifies_direct(const c10::OperatorHandle& op) {
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional)) return false;
  if (op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) return false;
  const c10::FunctionSchema& schema = op.schema();
  if (schema.is_mutable() && !schema.is_mutable({c10::SchemaArgType::input, 0})) return false;
  for (const auto& a : schema.arguments())
    if (a.is_out()) return false;
  const c10::OperatorName& name = op.operator_name();
  std::string base = base_name(name);
  // copy: ours is native; pow: x ** 0 / ** 1 are special-cased on the .out path.
  if (base == "copy" || base == "pow" || base == "index" || base == "index_put") return false;
  const tpurt_op_def_t* def = tpurt_op_resolve(name.name.c_str(), name.overload_name.c_str(), 0);
  if (!def) return false;
  if (def->flags & TPURT_OP_RANDOM) return false;
  if (schema.returns().empty()) return false;
  for (const auto& r : schema.returns()) {
    bool is_list = false;
    if (!is_tensor_type(r.type(), &is_list) || is_list) return false;
    if (r.alias_info() && !r.alias_info()->isWrite()) return false;  // a view
  }
  return true;
}

std::unique_ptr<torch::Library> g_direct_lib;

}  // namespace
}  // namespace fallback

// Called once from the module's init, after every static registration of this
// library (ours in other files included) is in place. TORCH_TPU_DIRECT_STRUCTURED=0
// turns it off (read here only).
void register_direct_structured_ops() {
  using namespace fallback;
  static std::once_flag once;
  std::call_once(once, [] {
    if (const char* e = std::getenv("TORCH_TPU_DIRECT_STRUCTURED"); e && std::strcmp(e, "0") == 0) return;
    auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__,
                                           __LINE__);
    auto& d = c10::Dispatcher::singleton();
    for (const c10::OperatorName& name : d.getAllOpNames()) {
      if (name.name.rfind("aten::", 0) != 0) continue;
      auto op = d.findOp(name);
      if (!op || !qualifies_direct(*op)) continue;
      {
        std::lock_guard<std::mutex> lock(g_ops_mu);
        g_direct_ops.insert(&op->schema());
      }
      std::string qualified = name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
      if (!register_fast_op(*lib, *op))
        lib->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&tpu_fallback>());
    }
    register_fast_fronts(*lib);
    g_direct_lib = std::move(lib);
  });
}

size_t direct_structured_op_count() {
  std::lock_guard<std::mutex> lock(fallback::g_ops_mu);
  return fallback::g_direct_ops.size();
}

}  // namespace torch_tpu
