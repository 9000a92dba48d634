// The one generic path from ATen into the C op table: a boxed fallback for
// every op of the PrivateUse1 ("tpu") key that has no native registration.
// It finds the C kernel by name, asks PyTorch's own meta functions for the
// output shapes (cached per input signature), allocates or reuses outputs as
// the schema's alias annotations say, and queues the kernel on the current
// stream. Ops without a kernel run on the CPU only when the user opted in.
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/_fused_rms_norm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/scalar_tensor.h>
#include <torch/library.h>

#include "tpu_common.h"

namespace torch_tpu {

// ================================ dtypes ================================

// The one ScalarType -> tpurt dtype table; TPURT_DTYPE_INVALID for the others.
static tpurt_dtype_t map_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Bool: return TPURT_DTYPE_BOOL;
    case c10::ScalarType::Byte: return TPURT_DTYPE_UINT8;
    case c10::ScalarType::Char: return TPURT_DTYPE_INT8;
    case c10::ScalarType::Short: return TPURT_DTYPE_INT16;
    case c10::ScalarType::Int: return TPURT_DTYPE_INT32;
    case c10::ScalarType::Long: return TPURT_DTYPE_INT64;
    case c10::ScalarType::Half: return TPURT_DTYPE_FLOAT16;
    case c10::ScalarType::BFloat16: return TPURT_DTYPE_BFLOAT16;
    case c10::ScalarType::Float: return TPURT_DTYPE_FLOAT32;
    case c10::ScalarType::Double: return TPURT_DTYPE_FLOAT64;
    case c10::ScalarType::ComplexFloat: return TPURT_DTYPE_COMPLEX64;
    case c10::ScalarType::ComplexDouble: return TPURT_DTYPE_COMPLEX128;
    default: return TPURT_DTYPE_INVALID;
  }
}

tpurt_dtype_t to_tpurt_dtype(c10::ScalarType type, const char* op) {
  tpurt_dtype_t d = map_dtype(type);
  TORCH_CHECK_NOT_IMPLEMENTED(d != TPURT_DTYPE_INVALID, op, ": dtype ", type,
                              " is not supported on the tpu device");
  return d;
}

static bool is_supported_dtype(c10::ScalarType type) { return map_dtype(type) != TPURT_DTYPE_INVALID; }

void fill_tensor_desc(const at::TensorBase& t, tpurt_tensor_t* out, const char* op) {
  int64_t ndim = t.dim();
  TORCH_CHECK_NOT_IMPLEMENTED(ndim <= TPURT_MAX_DIMS, op, ": tensors of ", ndim,
                              " dimensions are not supported on the tpu device (at most ",
                              TPURT_MAX_DIMS, ")");
  out->data = t.unsafeGetTensorImpl()->storage().data() == nullptr ? nullptr : t.data_ptr();
  out->dtype = to_tpurt_dtype(t.scalar_type(), op);
  out->ndim = static_cast<int32_t>(ndim);
  auto sizes = t.sizes();
  auto strides = t.strides();
  for (int64_t i = 0; i < ndim; ++i) {
    out->sizes[i] = sizes[i];
    out->strides[i] = strides[i];
  }
}

// ============================ per-op information ============================

namespace {

enum class ArgClass : uint8_t {
  kTensor, kTensorList, kOptTensorList, kInt, kDouble, kBool, kScalar, kDtype, kEnum,
  kIntList, kDoubleList, kBoolList, kString, kGenerator, kDevice, kUnknown,
};
enum class RetKind : uint8_t { kFresh, kWritten, kView, kUnsupported };

struct RetInfo {
  RetKind kind = RetKind::kFresh;
  bool is_list = false;
  int arg = -1;  // the aliased argument (written / view)
};

struct OpInfo {
  const c10::OperatorHandle* handle = nullptr;
  std::string full_name;  // "aten::add.Tensor"
  std::string base;       // "add"
  std::string overload;   // "Tensor"
  const tpurt_op_def_t* def = nullptr;
  // The kernel for calls with a complex tensor: "complex::<name>", else def
  // when it takes complex (TPURT_OP_COMPLEX, tpurt/kernel.h); may be null.
  const tpurt_op_def_t* cdef = nullptr;
  size_t num_args = 0;
  std::vector<ArgClass> arg_class;
  std::vector<bool> arg_is_out;  // out= arguments leave the kernel's args
  std::vector<bool> arg_written; // out= arguments and self of an in-place op
  bool refuse_overlap = false;   // CPU refuses a written tensor whose elements share memory
  bool refuse_alias = false;     // ... any overlap of a written tensor with an input (else only a partial one)
  std::vector<RetInfo> rets;
  bool all_views = false;     // a view op: metadata only, no kernel
  bool unsupported_ret = false;
  bool bool_index_arg1 = false;  // index / index_put: bool masks become long indices
  bool random = false;
  bool has_generator_arg = false;
  bool alias_safe = false;
  // Ops PyTorch gives no meta function take their shapes from a twin op.
  // kLikeSelf: ops whose output is empty_like(self) (contiguous) but have no meta.
  enum class MetaVia : uint8_t { kSelf, kConvolution, kConvolutionBackward, kLikeSelf, kPowScalarOut, kGeqrf } meta_via = MetaVia::kSelf;
  bool repeat_interleave = false;  // repeat_interleave.Tensor: output_size from the data
  // Registered directly for PrivateUse1 in place of PyTorch's structured
  // CompositeExplicitAutogradNonFunctional wrapper (see "direct structured ops").
  bool direct = false;
};

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

// "aten::add_" -> "add": the namespace goes, and an in-place name loses one
// trailing "_" (dunders keep theirs).
std::string kernel_base_name(const c10::OperatorName& name) {
  std::string base = name.name;
  if (base.rfind("aten::", 0) == 0) base = base.substr(6);
  if (base.size() > 1 && base.back() == '_' && !(base.size() > 2 && base.compare(base.size() - 2, 2, "__") == 0))
    base.pop_back();
  return base;
}

// The C kernel for an op: "base.overload", then "base" (tpurt/kernel.h).
const tpurt_op_def_t* find_kernel(const std::string& base, const std::string& overload) {
  const tpurt_op_def_t* def = overload.empty() ? nullptr : tpurt_op_lookup((base + "." + overload).c_str());
  return def ? def : tpurt_op_lookup(base.c_str());
}

std::unique_ptr<OpInfo> build_op_info(const c10::OperatorHandle& op) {
  auto info = std::make_unique<OpInfo>();
  const c10::FunctionSchema& schema = op.schema();
  const c10::OperatorName& name = op.operator_name();
  info->handle = &op;
  info->full_name = name.name + (name.overload_name.empty() ? "" : "." + name.overload_name);
  std::string base = kernel_base_name(name);
  info->base = base;
  info->overload = name.overload_name;
  info->def = find_kernel(base, name.overload_name);
  info->cdef = find_kernel("complex::" + base, name.overload_name);
  if (!info->cdef && info->def && (info->def->flags & TPURT_OP_COMPLEX)) info->cdef = info->def;
  info->random = info->def && (info->def->flags & TPURT_OP_RANDOM);
  info->alias_safe = info->def && (info->def->flags & TPURT_OP_ALIAS_SAFE);

  const auto& args = schema.arguments();
  info->num_args = args.size();
  for (const auto& a : args) {
    info->arg_class.push_back(classify(a.real_type()));
    info->arg_is_out.push_back(a.is_out());
    info->arg_written.push_back(a.alias_info() != nullptr && a.alias_info()->isWrite());
    if (info->arg_class.back() == ArgClass::kGenerator) info->has_generator_arg = true;
  }
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
  if (info->full_name == "aten::convolution_overrideable") info->meta_via = OpInfo::MetaVia::kConvolution;
  if (info->full_name == "aten::convolution_backward_overrideable")
    info->meta_via = OpInfo::MetaVia::kConvolutionBackward;
  // "Meta by rule": ops PyTorch 2.13 gives no meta function whose output is
  // simply empty_like(self).
  static const char* const kLikeSelfOps[] = {"aten::_logcumsumexp"};
  for (const char* n : kLikeSelfOps)
    if (info->full_name == n) info->meta_via = OpInfo::MetaVia::kLikeSelf;
  // pow.Tensor_Scalar_out: its Python meta (torch._refs.pow) types
  // bool ** True as int64 and refuses the bool out tensor that the C++
  // structured meta (and CPU) chose; only the out layout is needed here.
  if (info->full_name == "aten::pow.Tensor_Scalar_out") info->meta_via = OpInfo::MetaVia::kPowScalarOut;
  // geqrf has no meta function in PyTorch 2.13; its shapes follow from the input's.
  if (info->full_name == "aten::geqrf" || info->full_name == "aten::geqrf.a") info->meta_via = OpInfo::MetaVia::kGeqrf;
  // The ops whose CPU kernels refuse to write a tensor whose elements share
  // memory (at::assert_no_internal_overlap): the TensorIterator ones (our
  // elementwise and random families) but fill/zero/masked_fill/index_fill,
  // which CPU allows, and these others. Reductions, index_put, resize_ allow it.
  static const char* const kRefuseOverlap[] = {"cat", "gather", "index_select", "masked_select", "take", "mm",
                                               "bmm", "addmm", "baddbmm", "addbmm", "mv", "addmv"};
  static const char* const kAllowOverlap[] = {"fill", "zero", "masked_fill", "index_fill"};
  info->refuse_overlap = info->alias_safe || info->random;
  for (const char* n : kAllowOverlap)
    if (base == n) info->refuse_overlap = false;
  for (const char* n : kRefuseOverlap)
    if (base == n) info->refuse_overlap = true;
  // ... and of these, an out= that overlaps an input at all (at::assert_no_overlap);
  // TensorIterator ops take out= identical to an input but not a partial overlap.
  static const char* const kRefuseAlias[] = {"cat", "gather", "index_select", "take", "kthvalue"};
  for (const char* n : kRefuseAlias)
    if (base == n) info->refuse_alias = info->refuse_overlap = true;
  info->repeat_interleave = info->full_name == "aten::repeat_interleave.Tensor";
  info->bool_index_arg1 = (base == "index" || base == "index_put" || base == "_index_put_impl") &&
                          args.size() > 1 && info->arg_class[1] == ArgClass::kOptTensorList;
  return info;
}

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

// ============================== CPU fallback ==============================

std::atomic<bool> g_cpu_fallback{[] {
  const char* e = std::getenv("TORCH_TPU_CPU_FALLBACK");
  return e && *e && std::strcmp(e, "0") != 0;
}()};
std::mutex g_warned_mu;
std::unordered_set<std::string> g_warned;

void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack, const OpInfo& info,
                const char* why) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(g_warned_mu);
    first = g_warned.insert(info.full_name).second;
  }
  if (first) {
    TORCH_WARN("The operator '", info.full_name, "' ", why,
               " on the tpu device; it runs on the CPU instead (TORCH_TPU_CPU_FALLBACK=1), "
               "which copies its tensors and is slow.");
  }
  at::native::cpu_fallback(op, stack, /*error_on_views=*/false);
}

[[noreturn]] void throw_not_implemented(const OpInfo& info) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "The operator '", info.full_name,
                              "' is not implemented for the tpu device yet. Set "
                              "TORCH_TPU_CPU_FALLBACK=1 to run unsupported operators on the CPU (slow).");
}

// ================================ meta cache ================================

struct OutMeta {
  bool defined;  // backward ops return undefined tensors for outputs not asked for
  c10::ScalarType dtype;
  c10::SmallVector<int64_t, 6> sizes, strides;
  int64_t offset;
};
struct MetaEntry {
  std::vector<int64_t> key;
  std::vector<c10::SmallVector<OutMeta, 1>> rets;  // per return; a list return has several
};

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

// Thrown (and caught below) when PyTorch cannot give output shapes without
// the data: no meta function, or a data-dependent one.
struct NoMeta {
  std::string why;
};

std::shared_ptr<const MetaEntry> run_meta(const c10::OperatorHandle& op, const OpInfo& info,
                                          at::ArrayRef<c10::IValue> args) {
  torch::jit::Stack meta_stack;
  meta_stack.reserve(args.size() + 1);
  for (const auto& a : args) meta_stack.push_back(ivalue_to_meta(a));
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
  }
  if (info.meta_via == OpInfo::MetaVia::kGeqrf) {
    // As LAPACK (and CPU) lays them out: a is input-shaped with each matrix
    // column-major, tau is [..., min(m, n)] contiguous.
    const at::Tensor& self = args[0].toTensor();
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
    tau.strides.resize(tau.sizes.size());
    st = 1;
    for (int64_t d = static_cast<int64_t>(tau.sizes.size()) - 1; d >= 0; --d) {
      tau.strides[d] = st;
      st *= std::max<int64_t>(tau.sizes[d], 1);
    }
    entry->rets.push_back({a});
    entry->rets.push_back({tau});
    return entry;
  }
  if (info.meta_via == OpInfo::MetaVia::kLikeSelf) {
    auto entry = std::make_shared<MetaEntry>();
    const at::Tensor& self = args[0].toTensor();
    OutMeta m;
    m.defined = true;
    m.dtype = self.scalar_type();
    m.sizes.assign(self.sizes().begin(), self.sizes().end());
    m.strides.resize(m.sizes.size());
    int64_t st = 1;
    for (int64_t d = static_cast<int64_t>(m.sizes.size()) - 1; d >= 0; --d) {
      m.strides[d] = st;
      st *= std::max<int64_t>(m.sizes[d], 1);
    }
    m.offset = 0;
    for (size_t r = 0; r < info.rets.size(); ++r) entry->rets.push_back({m});
    return entry;
  }
  try {
    meta_op->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
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
  return entry;
}

// ============================= kernel call buffers =============================
// Reused per thread (and per nesting depth) so the hot path does not allocate.

struct CallBuf {
  std::vector<tpurt_arg_t> args;
  std::vector<tpurt_tensor_t> tensors;
  std::vector<int64_t> list_slots;  // tensor index + 1, 0 for None; patched into list_ptrs
  std::vector<const tpurt_tensor_t*> list_ptrs;
  std::vector<int64_t> ints;
  std::vector<double> doubles;
  std::vector<uint8_t> bools;
  std::vector<tpurt_tensor_t> outputs;
  std::vector<int64_t> key;
  void clear() {
    args.clear();
    tensors.clear();
    list_slots.clear();
    list_ptrs.clear();
    ints.clear();
    doubles.clear();
    bools.clear();
    outputs.clear();
    key.clear();
  }
};

thread_local int t_depth = 0;
thread_local std::vector<std::unique_ptr<CallBuf>> t_bufs;

struct BufScope {
  CallBuf* buf;
  BufScope() {
    if (static_cast<int>(t_bufs.size()) <= t_depth) t_bufs.push_back(std::make_unique<CallBuf>());
    buf = t_bufs[t_depth++].get();
    buf->clear();
  }
  ~BufScope() { --t_depth; }
};

// Places meta's sizes/strides on a written output whose shape differs (an
// out= tensor of another shape is resized, as at::native::resize_output does).
// A written tensor of the right shape keeps its strides: it may be a strided
// view, and meta (or the functional twin used for pow's out=) may report a
// contiguous layout for it.
void apply_layout(const at::Tensor& t, const OutMeta& m) {
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->sizes().equals(m.sizes)) return;
  size_t need = at::detail::computeStorageNbytes(m.sizes, m.strides, t.element_size(), t.storage_offset());
  c10::StorageImpl* st = impl->unsafe_storage().unsafeGetStorageImpl();
  if (need > st->nbytes()) resize_storage_bytes(st, need);
  impl->set_sizes_and_strides(m.sizes, m.strides);
}

const tpurt_op_def_t* fill_kernel() {
  static const tpurt_op_def_t* def = tpurt_op_lookup("fill");
  return def;
}

// A 0-d CPU tensor (a wrapped Python number, or a CPU scalar tensor) as a tpu
// tensor, written in queue order (the "fill" kernel) so nothing waits. The
// device copies are cached per (queue, dtype, value): kernels only read them,
// and a queue runs in order, so `x * 0.5` in a loop fills once.
struct ScalarKey {
  tpurt_queue_t* queue;
  int64_t dtype;
  uint64_t bits;
  bool operator==(const ScalarKey& o) const { return queue == o.queue && dtype == o.dtype && bits == o.bits; }
};
struct ScalarKeyHash {
  size_t operator()(const ScalarKey& k) const {
    return std::hash<uint64_t>()(k.bits * 31 + static_cast<uint64_t>(k.dtype)) ^
           std::hash<const void*>()(k.queue);
  }
};
constexpr size_t kScalarCacheMax = 256;
std::mutex g_scalar_mu;
// Leaked on purpose: its device tensors must not be freed during static
// destruction, after the runtime may have shut down.
auto& g_scalars = *new std::unordered_map<ScalarKey, at::Tensor, ScalarKeyHash>();

at::Tensor scalar_to_tpu(const at::Tensor& cpu, const char* op) {
  tpurt_queue_t* queue = current_queue();
  ScalarKey key{queue, static_cast<int64_t>(cpu.scalar_type()), 0};
  size_t itemsize = cpu.element_size();
  if (itemsize <= sizeof(key.bits)) {
    std::memcpy(&key.bits, cpu.const_data_ptr(), itemsize);
    std::lock_guard<std::mutex> lock(g_scalar_mu);
    auto it = g_scalars.find(key);
    if (it != g_scalars.end()) return it->second;
  }
  at::Tensor t = empty_tpu_contiguous({}, cpu.scalar_type());
  const tpurt_op_def_t* fill = fill_kernel();
  if (fill && !cpu.is_complex()) {  // a complex value is copied as it is
    tpurt_tensor_t desc;
    fill_tensor_desc(t, &desc, op);
    tpurt_arg_t a[2];
    std::memset(a, 0, sizeof(a));
    a[0].kind = TPURT_ARG_TENSOR;
    a[0].v.tensor = &desc;
    c10::Scalar s = cpu.item();
    if (s.isBoolean()) {
      a[1].kind = TPURT_ARG_BOOL;
      a[1].v.b = s.toBool();
    } else if (s.isIntegral(false)) {
      a[1].kind = TPURT_ARG_INT;
      a[1].v.i = s.toLong();
    } else {
      a[1].kind = TPURT_ARG_DOUBLE;
      a[1].v.d = s.toDouble();
    }
    tpurt_op_call_t call{"fill", "Scalar", 2, a, 1, &desc};
    check_status(tpurt_queue_submit_kernel(queue, fill, &call), op);
  } else {
    check_status(tpurt_memcpy_h2d(get_device(-1), queue, t.data_ptr(), cpu.const_data_ptr(), itemsize), op);
  }
  if (itemsize <= sizeof(key.bits)) {
    std::lock_guard<std::mutex> lock(g_scalar_mu);
    if (g_scalars.size() >= kScalarCacheMax) g_scalars.clear();
    g_scalars.emplace(key, t);
  }
  return t;
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

bool shares_storage(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.storage().is_alias_of(b.storage());
}

// Bool/uint8 masks in index / index_put become long indices (nonzero), as
// ATen's own advanced indexing does; CPU index tensors move to the device.
void expand_bool_indices(torch::jit::Stack* stack, size_t first_arg, const at::Tensor& self) {
  c10::IValue& slot = (*stack)[first_arg + 1];
  if (!slot.isList()) return;
  auto l = slot.toListRef();
  bool needs = false;
  for (const auto& e : l) {
    if (!e.isTensor()) continue;
    const at::Tensor& t = e.toTensor();
    needs |= t.scalar_type() == c10::kBool || t.scalar_type() == c10::kByte || t.is_cpu();
  }
  if (!needs) return;
  c10::List<std::optional<at::Tensor>> out;
  for (const auto& e : l) {
    if (!e.isTensor()) {
      out.push_back(std::nullopt);
      continue;
    }
    at::Tensor t = e.toTensor();
    if (t.is_cpu()) t = t.to(self.device());
    if (t.scalar_type() == c10::kBool || t.scalar_type() == c10::kByte) {
      at::Tensor nz = at::nonzero(t);
      for (int64_t j = 0; j < t.dim(); ++j) out.push_back(nz.select(1, j));
    } else {
      out.push_back(t);
    }
  }
  slot = c10::IValue(std::move(out));
}

// A written tensor (out=, or self in place) whose elements share memory (an
// expanded view) is refused where CPU refuses it (at::assert_no_internal_overlap:
// the result would depend on element order), and so is one that overlaps an
// input: partially always, at all for refuse_alias ops (at::assert_no_overlap).
// Only the certain cases, as ATen decides them. Inputs are compared with
// single written tensors only (a written list's pairs would cost n^2 per call).
void check_written_overlap(const OpInfo& info, const torch::jit::Stack& stack, size_t first) {
  static const char* const kShared =
      "unsupported operation: more than one element of the written-to tensor refers to a single memory "
      "location. Please clone() the tensor before performing the operation.";
  static const char* const kAliased =
      "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single "
      "memory location. Please clone() the tensor before performing the operation.";
  auto each_tensor = [](const c10::IValue& v, const auto& fn) {
    if (v.isTensor()) fn(v.toTensor());
    else if (v.isTensorList())
      for (const c10::IValue& e : v.toListRef()) fn(e.toTensor());
  };
  for (size_t i = 0; i < info.num_args; ++i) {
    if (!info.arg_written[i]) continue;
    const c10::IValue& v = stack[first + i];
    each_tensor(v, [&](const at::Tensor& w) {
      TORCH_CHECK(!w.defined() || at::has_internal_overlap(w) != at::MemOverlap::Yes, kShared);
    });
    if (!v.isTensor() || !v.toTensor().defined()) continue;
    const at::Tensor& w = v.toTensor();
    for (size_t j = 0; j < info.num_args; ++j) {
      if (info.arg_written[j]) continue;
      each_tensor(stack[first + j], [&](const at::Tensor& in) {
        if (!in.defined()) return;
        at::MemOverlapStatus st = at::get_overlap_status(w, in);  // the same tensor: Full
        TORCH_CHECK(st != at::MemOverlapStatus::Partial && !(info.refuse_alias && st == at::MemOverlapStatus::Full),
                    kAliased);
      });
    }
  }
}

// ================================ the fallback ================================

void tpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const OpInfo& info = get_op_info(op);
  const size_t nargs = info.num_args;
  const size_t first = stack->size() - nargs;
  const char* name = info.full_name.c_str();

  if ((!info.def && !info.cdef && !info.all_views) || info.unsupported_ret) {
    if (cpu_fallback_enabled()) return run_on_cpu(op, stack, info, "is not implemented");
    throw_not_implemented(info);
  }

  // Devices and dtypes of the tensor arguments.
  c10::DeviceIndex device = -1;
  bool bad_dtype = false;
  c10::ScalarType complex_type = c10::ScalarType::Undefined;  // of a complex tensor argument, if any
  auto visit = [&](const at::Tensor& t, size_t i) {
    if (!t.defined()) return;
    if (t.device().type() == kTpu) {
      c10::DeviceIndex d = t.device().index();
      TORCH_CHECK(device < 0 || device == d, name, ": expected all tensors to be on the same device, but found "
                  "tensors on tpu:", static_cast<int>(device), " and tpu:", static_cast<int>(d));
      device = d;
    } else if (t.is_cpu()) {
      TORCH_CHECK(t.dim() == 0, name, ": argument '", op.schema().arguments()[i].name(),
                  "' is a CPU tensor; expected all tensors to be on the same device (tpu), except 0-dim "
                  "CPU scalars. Move it with .to('tpu').");
    } else {
      TORCH_CHECK(false, name, ": argument '", op.schema().arguments()[i].name(), "' is on ", t.device(),
                  "; expected a tpu tensor");
    }
    bad_dtype |= !is_supported_dtype(t.scalar_type());
    if (c10::isComplexType(t.scalar_type())) complex_type = t.scalar_type();
  };
  if (info.bool_index_arg1 && (*stack)[first].isTensor())
    expand_bool_indices(stack, first, (*stack)[first].toTensor());
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue& v = (*stack)[first + i];
    if (v.isTensor()) {
      // Math bits (conj(), the negative view of imag(conj(x))) arrive only
      // for the ops PyTorch's conj/neg fallbacks let through (mm, bmm, dot,
      // ...) because CPU's kernels read the bits; ours read stored values.
      const at::Tensor& t = v.toTensor();
      if (t.defined() && (t.is_conj() || t.is_neg()) && !info.all_views) {
        const c10::AliasInfo* ai = op.schema().arguments()[i].alias_info();
        if (!ai || !ai->isWrite()) v = t.resolve_conj().resolve_neg();
      }
      visit(v.toTensor(), i);
    } else if (v.isComplexDouble()) {  // a complex Scalar: the op computes in complex
      complex_type = c10::ScalarType::ComplexDouble;
    } else if (v.isList() && (info.arg_class[i] == ArgClass::kTensorList ||
                              info.arg_class[i] == ArgClass::kOptTensorList)) {
      for (const auto& e : v.toListRef())
        if (e.isTensor()) visit(e.toTensor(), i);
    }
  }
  if (bad_dtype && !info.all_views) {
    if (cpu_fallback_enabled()) return run_on_cpu(op, stack, info, "has no kernel for this dtype");
    for (size_t i = 0; i < nargs; ++i) {
      const c10::IValue& v = (*stack)[first + i];
      if (v.isTensor() && v.toTensor().defined()) to_tpurt_dtype(v.toTensor().scalar_type(), name);
      if (v.isList())
        for (const auto& e : v.toListRef())
          if (e.isTensor()) to_tpurt_dtype(e.toTensor().scalar_type(), name);
    }
  }
  // Complex tensors reach only kernels that take them (TPURT_OP_COMPLEX, tpurt/kernel.h).
  const tpurt_op_def_t* def = complex_type != c10::ScalarType::Undefined ? info.cdef : info.def;
  if (!def && !info.all_views) {
    if (cpu_fallback_enabled()) return run_on_cpu(op, stack, info, "has no kernel for this dtype");
    if (complex_type == c10::ScalarType::Undefined) throw_not_implemented(info);
    TORCH_CHECK_NOT_IMPLEMENTED(false, name, ": dtype ", complex_type, " is not supported on the tpu device");
  }
  if (info.refuse_overlap) check_written_overlap(info, *stack, first);
  if (device < 0) device = current_device_index();
  DeviceScope device_scope(device);

  if (info.meta_via == OpInfo::MetaVia::kPowScalarOut && nargs == 3) {
    // As ATen's pow_out: x ** 0 fills 1 and x ** 1 copies, for every dtype
    // (bool ** True is bool, no kernel runs).
    const c10::IValue& e = (*stack)[first + 1];
    bool zero = (e.isBool() && !e.toBool()) || (e.isInt() && e.toInt() == 0) || (e.isDouble() && e.toDouble() == 0.0);
    bool one = (e.isBool() && e.toBool()) || (e.isInt() && e.toInt() == 1) || (e.isDouble() && e.toDouble() == 1.0);
    if (zero || one) {
      at::Tensor self = (*stack)[first].toTensor();
      at::Tensor out = (*stack)[first + 2].toTensor();
      at::native::resize_output(out, self.sizes());
      if (zero) out.fill_(1);
      else out.copy_(self);
      torch::jit::drop(*stack, nargs);
      stack->push_back(std::move(out));
      return;
    }
  }
  if (info.repeat_interleave && nargs == 2 && (*stack)[first + 1].isNone() && (*stack)[first].isTensor()) {
    // The output size depends on the data: sum the repeats on the device,
    // wait for it, and continue with an explicit output_size.
    const at::Tensor& rep = (*stack)[first].toTensor();
    int64_t total = rep.numel() == 0 ? 0 : rep.sum().item<int64_t>();
    (*stack)[first + 1] = c10::IValue(total);
  }

  BufScope scope;
  CallBuf& b = *scope.buf;
  at::ArrayRef<c10::IValue> args(stack->data() + first, nargs);

  // ---- output shapes: the meta cache, else PyTorch's meta functions ----
  b.key.push_back(reinterpret_cast<intptr_t>(&info));
  bool cacheable = true;
  for (const auto& a : args)
    if (!key_ivalue(b.key, a)) {
      cacheable = false;
      break;
    }
  std::shared_ptr<const MetaEntry> meta;
  uint64_t h = 0;
  if (cacheable) {
    h = hash_words(b.key);
    std::shared_ptr<const MetaEntry>& slot = t_meta_slots[h & 255];
    if (slot && slot->key == b.key) {
      meta = slot;
    } else {
      std::lock_guard<std::mutex> lock(g_meta_mu);
      auto it = g_meta.find(h);
      if (it != g_meta.end() && it->second->key == b.key) meta = it->second;
      if (meta) slot = meta;
    }
  }
  if (meta) {
    g_meta_hits.fetch_add(1, std::memory_order_relaxed);
  } else if (info.direct) {
    // First call with this signature: run PyTorch's own structured wrapper
    // (C++ meta with all its checks, allocation, then our .out kernel), and
    // remember the output layout only if it succeeded.
    g_meta_misses.fetch_add(1, std::memory_order_relaxed);
    op.callBoxedForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional, *stack);
    if (cacheable) {
      auto entry = std::make_shared<MetaEntry>();
      entry->key = b.key;
      const size_t nrets = info.rets.size();
      for (size_t r = 0; r < nrets; ++r) {
        const c10::IValue& v = (*stack)[stack->size() - nrets + r];
        entry->rets.push_back({out_meta(v.isTensor() ? v.toTensor() : at::Tensor())});
      }
      remember_layout(h, std::move(entry));
    }
    return;
  } else {
    g_meta_misses.fetch_add(1, std::memory_order_relaxed);
    std::shared_ptr<const MetaEntry> fresh;
    try {
      fresh = run_meta(op, info, args);
    } catch (const NoMeta& e) {
      // An op that returns nothing and only writes its arguments (for
      // example _cummax_helper(self, values!, indices!, dim)): its callers
      // have sized the written tensors already, so no shapes are needed.
      if (info.rets.empty()) {
        fresh = std::make_shared<MetaEntry>();
      } else {
        if (cpu_fallback_enabled()) return run_on_cpu(op, stack, info, "has output shapes that depend on the data");
        TORCH_CHECK_NOT_IMPLEMENTED(false, name, ": the tpu device cannot run this operator because its output "
                                    "shape cannot be computed without the data (", e.why, "). Set "
                                    "TORCH_TPU_CPU_FALLBACK=1 to run it on the CPU (slow).");
      }
    }
    if (cacheable) {
      std::const_pointer_cast<MetaEntry>(fresh)->key = b.key;
      remember_layout(h, fresh);
    }
    meta = std::move(fresh);
  }

  // ---- outputs, per the schema's alias annotations ----
  c10::SmallVector<c10::IValue, 2> results;
  c10::SmallVector<at::Tensor, 4> kernel_outs;  // flattened, in return order
  for (size_t r = 0; r < info.rets.size(); ++r) {
    const RetInfo& ri = info.rets[r];
    const auto& metas = meta->rets[r];
    if (ri.kind == RetKind::kWritten) {
      const c10::IValue& a = args[ri.arg];
      if (ri.is_list) {
        size_t k = 0;
        for (const at::Tensor& t : a.toTensorList()) {
          if (k < metas.size()) apply_layout(t, metas[k]);
          kernel_outs.push_back(t);
          ++k;
        }
      } else {
        apply_layout(a.toTensor(), metas[0]);
        kernel_outs.push_back(a.toTensor());
      }
      results.push_back(a);
    } else if (ri.kind == RetKind::kView) {
      const c10::IValue& a = args[ri.arg];
      const at::Tensor& base = a.isTensor() ? a.toTensor() : a.toTensorList().get(0);
      if (ri.is_list) {
        c10::List<at::Tensor> views;
        for (const OutMeta& m : metas)
          views.push_back(make_view(base, m));
        results.push_back(std::move(views));
      } else {
        const OutMeta& m = metas[0];
        results.push_back(make_view(base, m));
      }
    } else {  // fresh
      if (ri.is_list) {
        c10::List<at::Tensor> outs;
        for (const OutMeta& m : metas) {
          at::Tensor t = m.defined ? empty_tpu(m.sizes, m.strides, m.dtype) : at::Tensor();
          kernel_outs.push_back(t);
          outs.push_back(t);
        }
        results.push_back(std::move(outs));
      } else {
        const OutMeta& m = metas[0];
        at::Tensor t = m.defined ? empty_tpu(m.sizes, m.strides, m.dtype) : at::Tensor();
        kernel_outs.push_back(t);
        results.push_back(std::move(t));
      }
    }
  }

  if (!info.all_views && !(def->flags & TPURT_OP_COMPLEX)) {
    // A complex result from real inputs (a dtype= argument): the complex kernel, if any.
    for (const at::Tensor& out : kernel_outs) {
      if (!out.defined() || !out.is_complex()) continue;
      def = info.cdef;
      if (!def) {
        if (cpu_fallback_enabled()) return run_on_cpu(op, stack, info, "has no kernel for this dtype");
        TORCH_CHECK_NOT_IMPLEMENTED(false, name, ": dtype ", out.scalar_type(), " is not supported on the tpu device");
      }
      break;
    }
  }
  const bool alias_safe = def && (def->flags & TPURT_OP_ALIAS_SAFE);

  if (!info.all_views) {
    // ---- kernel arguments: schema order, out= arguments removed ----
    c10::SmallVector<at::Tensor, 4> keep_alive;  // device copies of CPU scalars
    int64_t max_numel = 0;
    auto add_tensor = [&](const at::Tensor& t0) -> int64_t {
      const at::Tensor* t = &t0;
      if (t0.is_cpu()) {
        keep_alive.push_back(scalar_to_tpu(t0, name));
        t = &keep_alive.back();
      }
      b.tensors.emplace_back();
      fill_tensor_desc(*t, &b.tensors.back(), name);
      max_numel = std::max<int64_t>(max_numel, t->numel());
      return static_cast<int64_t>(b.tensors.size() - 1);
    };
    for (size_t i = 0; i < nargs; ++i) {
      if (info.arg_is_out[i]) continue;
      const c10::IValue& v = args[i];
      tpurt_arg_t a;
      std::memset(&a, 0, sizeof(a));
      a.kind = TPURT_ARG_NONE;
      switch (info.arg_class[i]) {
        case ArgClass::kTensor:
          if (alias_safe && v.isTensor() && v.toTensor().is_cpu() &&
              v.toTensor().unsafeGetTensorImpl()->is_wrapped_number()) {
            // A Python number keeps its category: the elementwise engine
            // promotes scalar args as PyTorch does (int32 + 2.5 -> float32).
            const at::Tensor& w = v.toTensor();
            switch (w.scalar_type()) {
              case c10::ScalarType::Bool:
                a.kind = TPURT_ARG_BOOL;
                a.v.b = *w.const_data_ptr<bool>();
                break;
              case c10::ScalarType::Long:
                a.kind = TPURT_ARG_INT;
                a.v.i = *w.const_data_ptr<int64_t>();
                break;
              case c10::ScalarType::Double:
                a.kind = TPURT_ARG_DOUBLE;
                a.v.d = *w.const_data_ptr<double>();
                break;
              default:
                a.kind = TPURT_ARG_TENSOR;
                a.v.i = add_tensor(w);
                break;
            }
          } else if (v.isTensor() && v.toTensor().defined()) {
            a.kind = TPURT_ARG_TENSOR;
            a.v.i = add_tensor(v.toTensor());
          }
          break;
        case ArgClass::kTensorList:
        case ArgClass::kOptTensorList:
          if (v.isList()) {
            auto l = v.toListRef();
            a.kind = TPURT_ARG_TENSOR_LIST;
            a.count = static_cast<int32_t>(l.size());
            a.v.i = static_cast<int64_t>(b.list_slots.size());
            for (const auto& e : l)
              b.list_slots.push_back(e.isTensor() && e.toTensor().defined() ? add_tensor(e.toTensor()) + 1 : 0);
          }
          break;
        case ArgClass::kInt:
          if (v.isInt()) {
            a.kind = TPURT_ARG_INT;
            a.v.i = v.toInt();
          } else if (v.isSymInt()) {
            a.kind = TPURT_ARG_INT;
            a.v.i = v.toSymInt().guard_int(__FILE__, __LINE__);
          }
          break;
        case ArgClass::kDouble:
          if (!v.isNone()) {
            a.kind = TPURT_ARG_DOUBLE;
            a.v.d = v.toDouble();
          }
          break;
        case ArgClass::kBool:
          if (!v.isNone()) {
            a.kind = TPURT_ARG_BOOL;
            a.v.b = v.toBool();
          }
          break;
        case ArgClass::kScalar:
          if (v.isInt()) {
            a.kind = TPURT_ARG_INT;
            a.v.i = v.toInt();
          } else if (v.isDouble()) {
            a.kind = TPURT_ARG_DOUBLE;
            a.v.d = v.toDouble();
          } else if (v.isBool()) {
            a.kind = TPURT_ARG_BOOL;
            a.v.b = v.toBool();
          } else if (v.isSymInt()) {
            a.kind = TPURT_ARG_INT;
            a.v.i = v.toSymInt().guard_int(__FILE__, __LINE__);
          } else if (v.isComplexDouble()) {
            // No complex arg kind: a 0-d complex128 tensor (only complex kernels get one, see above).
            a.kind = TPURT_ARG_TENSOR;
            a.v.i = add_tensor(at::scalar_tensor(c10::Scalar(v.toComplexDouble()), at::kComplexDouble));
          } else if (!v.isNone()) {
            TORCH_CHECK_NOT_IMPLEMENTED(false, name, ": scalar argument '", op.schema().arguments()[i].name(),
                                        "' of type ", v.tagKind(), " is not supported on the tpu device");
          }
          break;
        case ArgClass::kDtype:
          if (!v.isNone()) {
            a.kind = TPURT_ARG_DTYPE;
            a.v.i = to_tpurt_dtype(static_cast<c10::ScalarType>(v.toInt()), name);
          }
          break;
        case ArgClass::kEnum:
          if (!v.isNone()) {
            a.kind = TPURT_ARG_OTHER;
            a.v.i = v.toInt();
          }
          break;
        case ArgClass::kDevice:
          if (v.isDevice()) {
            a.kind = TPURT_ARG_OTHER;
            a.v.i = v.toDevice().index();
          }
          break;
        case ArgClass::kIntList:
          if (v.isList()) {
            auto l = v.toListRef();
            a.kind = TPURT_ARG_INT_LIST;
            a.count = static_cast<int32_t>(l.size());
            a.v.i = static_cast<int64_t>(b.ints.size());
            for (const auto& e : l) b.ints.push_back(e.isInt() ? e.toInt() : e.toSymInt().guard_int(__FILE__, __LINE__));
          }
          break;
        case ArgClass::kDoubleList:
          if (v.isList()) {
            auto l = v.toListRef();
            a.kind = TPURT_ARG_DOUBLE_LIST;
            a.count = static_cast<int32_t>(l.size());
            a.v.i = static_cast<int64_t>(b.doubles.size());
            for (const auto& e : l) b.doubles.push_back(e.toDouble());
          }
          break;
        case ArgClass::kBoolList:
          if (v.isList()) {
            auto l = v.toListRef();
            a.kind = TPURT_ARG_BOOL_LIST;
            a.count = static_cast<int32_t>(l.size());
            a.v.i = static_cast<int64_t>(b.bools.size());
            for (const auto& e : l) b.bools.push_back(e.toBool() ? 1 : 0);
          }
          break;
        case ArgClass::kString:
          if (v.isString()) {
            a.kind = TPURT_ARG_STRING;
            a.v.s = v.toStringRef().c_str();
          }
          break;
        case ArgClass::kGenerator:
          if (info.random) {
            a.kind = TPURT_ARG_RNG;  // reserved below, once max_numel is known
            a.count = v.isGenerator() ? 1 : 0;
          }
          break;
        case ArgClass::kUnknown:
          if (!v.isNone()) a.kind = TPURT_ARG_OTHER;
          break;
      }
      b.args.push_back(a);
    }
    if (info.random && !info.has_generator_arg) {
      tpurt_arg_t a;
      std::memset(&a, 0, sizeof(a));
      a.kind = TPURT_ARG_RNG;
      b.args.push_back(a);
    }

    // ---- outputs that share storage with an input run into temporaries ----
    c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 2> copy_back;  // (real, temp)
    for (at::Tensor& out : kernel_outs) {
      if (!out.defined()) continue;
      max_numel = std::max<int64_t>(max_numel, out.numel());
      if (alias_safe) continue;
      bool aliased = false;
      for (size_t i = 0; i < nargs && !aliased; ++i) {
        if (info.arg_is_out[i]) continue;
        const c10::IValue& v = args[i];
        if (v.isTensor()) {
          aliased = shares_storage(out, v.toTensor());
        } else if (v.isList() && (info.arg_class[i] == ArgClass::kTensorList ||
                                  info.arg_class[i] == ArgClass::kOptTensorList)) {
          for (const auto& e : v.toListRef())
            if (e.isTensor() && shares_storage(out, e.toTensor())) aliased = true;
        }
      }
      if (aliased) {
        at::Tensor temp = empty_tpu_contiguous(out.sizes(), out.scalar_type());
        copy_back.emplace_back(out, temp);
        out = temp;
      }
    }
    b.outputs.resize(kernel_outs.size());
    for (size_t k = 0; k < kernel_outs.size(); ++k) {
      if (kernel_outs[k].defined()) {
        fill_tensor_desc(kernel_outs[k], &b.outputs[k], name);
      } else {  // an output the caller did not ask for (output_mask): data == NULL
        std::memset(&b.outputs[k], 0, sizeof(tpurt_tensor_t));
        b.outputs[k].dtype = TPURT_DTYPE_FLOAT32;
      }
    }

    // ---- patch buffer offsets into pointers (the vectors no longer grow) ----
    b.list_ptrs.resize(b.list_slots.size());
    const tpurt_tensor_t** slots = b.list_ptrs.data();
    for (size_t k = 0; k < b.list_slots.size(); ++k) {
      int64_t s = b.list_slots[k];
      slots[k] = s ? &b.tensors[s - 1] : nullptr;
    }
    for (tpurt_arg_t& a : b.args) {
      switch (a.kind) {
        case TPURT_ARG_TENSOR: a.v.tensor = &b.tensors[a.v.i]; break;
        case TPURT_ARG_TENSOR_LIST: a.v.tensors = slots + a.v.i; break;
        case TPURT_ARG_INT_LIST: a.v.ints = b.ints.data() + a.v.i; break;
        case TPURT_ARG_DOUBLE_LIST: a.v.doubles = b.doubles.data() + a.v.i; break;
        case TPURT_ARG_BOOL_LIST: a.v.bools = reinterpret_cast<const bool*>(b.bools.data()) + a.v.i; break;
        case TPURT_ARG_RNG: {
          bool explicit_gen = a.count == 1;
          a.count = 0;
          const at::Generator* gen = nullptr;
          at::Generator user_gen;
          if (explicit_gen) {
            // Find the Generator argument again (the kernel arg index differs
            // from the schema index once out= arguments are removed).
            for (size_t i = 0; i < nargs; ++i)
              if (info.arg_class[i] == ArgClass::kGenerator && args[i].isGenerator()) {
                user_gen = args[i].toGenerator();
                gen = &user_gen;
              }
            TORCH_CHECK(gen && gen->device().type() == kTpu, name,
                        ": expected a tpu Generator, got one for ", gen ? gen->device() : c10::Device("cpu"));
          }
          uint64_t count = (static_cast<uint64_t>(max_numel) + 3) / 4 * 4 + 4;
          a.v.rng = generator_reserve(gen ? *gen : default_generator(device), count);
          break;
        }
        default: break;
      }
    }

    tpurt_op_call_t call;
    call.name = info.base.c_str();
    call.overload = info.overload.c_str();
    call.num_args = static_cast<int32_t>(b.args.size());
    call.args = b.args.data();
    call.num_outputs = static_cast<int32_t>(b.outputs.size());
    call.outputs = b.outputs.data();
    tpurt_status_t s = tpurt_queue_submit_kernel(current_queue(device), def, &call);
    if (s) throw_status(s, name);
    for (const auto& pr : copy_back) submit_device_copy(pr.first, pr.second, name);
  }

  torch::jit::drop(*stack, nargs);
  for (auto& r : results) stack->push_back(std::move(r));
}

}  // namespace

bool cpu_fallback_enabled() { return g_cpu_fallback.load(std::memory_order_relaxed); }
void set_cpu_fallback_enabled(bool enabled) { g_cpu_fallback.store(enabled); }

at::Tensor rms_norm_tpu(const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                       const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  // CPU's own argument checks (shapes of normalized_shape, weight, input)
  at::native::_check_rms_norm_inputs_symint(input, normalized_shape, weight.value_or(at::Tensor()));
  return std::get<0>(at::_fused_rms_norm(input, C10_AS_INTARRAYREF_SLOW(normalized_shape), weight, eps));
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
// that succeeded is cached. (PyTorch's Python meta registrations, which the
// ordinary path would consult, skip some of those checks: sub on bool, ...)

namespace {

bool qualifies_direct(const c10::OperatorHandle& op) {
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional)) return false;
  if (op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) return false;
  const c10::FunctionSchema& schema = op.schema();
  if (schema.is_mutable() && !schema.is_mutable({c10::SchemaArgType::input, 0})) return false;
  for (const auto& a : schema.arguments())
    if (a.is_out()) return false;
  const c10::OperatorName& name = op.operator_name();
  std::string base = kernel_base_name(name);
  // copy: ours is native; pow: x ** 0 / ** 1 are special-cased on the .out path.
  if (base == "copy" || base == "pow" || base == "index" || base == "index_put") return false;
  const tpurt_op_def_t* def = find_kernel(base, name.overload_name);
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

// Called once from the module's init, after every static registration of this
// library (ours in other files included) is in place.
void register_direct_structured_ops() {
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
      lib->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&tpu_fallback>());
    }
    g_direct_lib = std::move(lib);
  });
}

size_t direct_structured_op_count() {
  std::lock_guard<std::mutex> lock(g_ops_mu);
  return g_direct_ops.size();
}

MetaCacheStats meta_cache_stats() {
  std::lock_guard<std::mutex> lock(g_meta_mu);
  return {g_meta_hits.load(), g_meta_misses.load(), g_meta.size()};
}

}  // namespace torch_tpu

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torch_tpu::tpu_fallback>());
}

// Ops whose CompositeExplicitAutograd kernel only throws for other backends:
// they need an explicit PrivateUse1 entry to reach the generic path.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", torch::CppFunction::makeFromBoxedFunction<&torch_tpu::tpu_fallback>());
  m.impl("convolution_backward_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&torch_tpu::tpu_fallback>());
  // A direct registration (not the backend fallback) so AutogradPrivateUse1
  // uses _fused_rms_norm's autograd formula (-> _fused_rms_norm_backward)
  // instead of its CompositeImplicitAutograd decomposition.
  m.impl("_fused_rms_norm", torch::CppFunction::makeFromBoxedFunction<&torch_tpu::tpu_fallback>());
  m.impl("rms_norm", TORCH_FN(torch_tpu::rms_norm_tpu));
  // Ops whose CompositeExplicitAutograd kernel decomposes into other kernels
  // while one C kernel does the whole op: native_layer_norm would otherwise
  // run as a batch norm over (1, rows, features), one scalar pass per row.
  // (group norm likewise).
  for (const char* op : {"native_layer_norm", "native_group_norm"})
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&torch_tpu::tpu_fallback>());
}

// rms_norm is CompositeImplicitAutograd and would decompose into pow / mean /
// rsqrt / mul on a non-CUDA device; the autograd-key registration routes it
// to the fused kernel while autograd still records _fused_rms_norm.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("rms_norm", TORCH_FN(torch_tpu::rms_norm_tpu));
}
