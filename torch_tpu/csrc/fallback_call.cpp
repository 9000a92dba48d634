// The boxed fallback's last stages: the call's IValues become a
// tpurt_op_call_t (tpurt/kernel.h: the schema's arguments in order, out=
// arguments removed, then the outputs), and the kernel is queued on the current
// stream. Also the dtype table and tensor descriptors every C++ file uses.
#include <cstring>
#include <mutex>
#include <unordered_map>

#include <ATen/ops/scalar_tensor.h>

#include "fallback.h"

namespace torch_tpu {

// ================================ dtypes ================================

tpurt_dtype_t to_tpurt_dtype(c10::ScalarType type, const char* op) {
  tpurt_dtype_t d = fallback::map_dtype(type);
  TORCH_CHECK_NOT_IMPLEMENTED(d != TPURT_DTYPE_INVALID, op, ": dtype ", type,
                              " is not supported on the tpu device");
  return d;
}

c10::ScalarType from_tpurt_dtype(tpurt_dtype_t dtype) {
  for (int s = 0; s < static_cast<int>(c10::ScalarType::NumOptions); ++s)
    if (fallback::map_dtype(static_cast<c10::ScalarType>(s)) == dtype) return static_cast<c10::ScalarType>(s);
  return c10::ScalarType::Undefined;
}

void fill_tensor_desc(const at::TensorBase& t, tpurt_tensor_t* out, const char* op) {
  const int64_t ndim = t.dim();
  if (C10_UNLIKELY(ndim > TPURT_MAX_DIMS)) {
    // Past 64 dims CPU's TensorIterator refuses the tensor: the same RuntimeError, in its words.
    TORCH_CHECK(ndim <= 64, "only tensors with up to 64 dims are supported");
    TORCH_CHECK_NOT_IMPLEMENTED(false, op, ": tensors of ", ndim,
                                " dimensions are not supported on the tpu device (at most ", TPURT_MAX_DIMS, ")");
  }
  fill_tensor_desc_as(t, to_tpurt_dtype(t.scalar_type(), op), true, out, op);
}

namespace fallback {
namespace {

// ============================ folded dims ============================

void fill_folded_desc(const at::TensorBase& t, tpurt_tensor_t* out, const char* op, const DimFold& f) {
  if (!f.active || t.dim() != f.ndim) return fill_tensor_desc(t, out, op);
  check_in_storage(t, op);
  out->data = t.unsafeGetTensorImpl()->storage().data() == nullptr ? nullptr : t.data_ptr();
  out->dtype = to_tpurt_dtype(t.scalar_type(), op);
  out->ndim = f.folded;
  for (int32_t g = 0; g < f.folded; ++g) {
    out->sizes[g] = f.size[g];
    out->strides[g] = t.stride(f.last[g]);
  }
}

// Plans the fold for a call with a tensor of more than TPURT_MAX_DIMS dims (DimFold);
// leaves it inactive where the kernel could not take the folded call: a kernel
// that is not elementwise, random, a fill or a whole-tensor reduction, an int
// argument given (a dim; None or [] is the whole tensor), a tensor list, tensors of different shapes, or still too
// many dims once folded (fill_tensor_desc then refuses, naming the count).
void plan_fold(const Call& c, const tpurt_op_def_t* def, const Outputs& outs, DimFold* f) {
  const uint32_t kinds = TPURT_OP_ELEMENTWISE | TPURT_OP_RANDOM | TPURT_OP_OVERWRITES_SELF | TPURT_OP_REDUCE_ENGINE;
  if (!(def->flags & kinds)) return;
  c10::SmallVector<const at::Tensor*, 6> ts;
  for (size_t i = 0; i < c.info.num_args; ++i) {
    ArgClass k = c.info.arg_class[i];
    const c10::IValue& v = c.arg(i);
    bool whole = v.isNone() || (k == ArgClass::kIntList && v.isList() && v.toListRef().empty());
    if (((k == ArgClass::kInt || k == ArgClass::kIntList) && !whole) || k == ArgClass::kTensorList ||
        k == ArgClass::kOptTensorList)
      return;
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().dim() > 0) ts.push_back(&v.toTensor());
  }
  for (const at::Tensor& t : outs.kernel_outs)
    if (t.defined() && t.dim() > 0) ts.push_back(&t);
  if (ts.empty() || ts[0]->dim() <= TPURT_MAX_DIMS) return;
  at::IntArrayRef sizes = ts[0]->sizes();
  for (const at::Tensor* t : ts)
    if (t->sizes() != sizes) return;
  int32_t n = 0;
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    if (sizes[d] == 1) continue;
    bool merge = n > 0;
    for (const at::Tensor* t : ts) merge = merge && t->stride(f->last[n - 1]) == t->stride(d) * sizes[d];
    if (merge) {
      f->size[n - 1] *= sizes[d];
      f->last[n - 1] = d;
      continue;
    }
    if (n == TPURT_MAX_DIMS) return;
    f->size[n] = sizes[d];
    f->last[n] = d;
    ++n;
  }
  f->ndim = static_cast<int64_t>(sizes.size());
  f->folded = n;
  f->active = true;
}

// ============================ CPU scalars ============================

const tpurt_op_def_t* fill_kernel() {
  static const tpurt_op_def_t* def = tpurt_op_resolve("fill", "Scalar", 0);
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

// ============================ arguments ============================

// Appends the descriptor of a tensor argument (CPU scalars copied to the
// device first); returns its index in b.tensors.
int64_t add_tensor(CallBuf& b, const at::Tensor& t0, const char* name, KeepAlive* keep_alive, int64_t* max_numel) {
  const at::Tensor* t = &t0;
  if (t0.is_cpu()) {
    keep_alive->push_back(scalar_to_tpu(t0, name));
    t = &keep_alive->back();
  }
  b.tensors.emplace_back();
  fill_folded_desc(*t, &b.tensors.back(), name, b.fold);
  *max_numel = std::max<int64_t>(*max_numel, t->numel());
  return static_cast<int64_t>(b.tensors.size() - 1);
}

// Whether a tensor argument of the call is uint64 (where a scalar above INT64_MAX keeps its bits).
bool has_uint64_tensor(const Call& c) {
  for (size_t i = 0; i < c.info.num_args; ++i) {
    const c10::IValue& x = c.arg(i);
    if (x.isTensor() && x.toTensor().defined() && x.toTensor().scalar_type() == c10::ScalarType::UInt64) return true;
  }
  return false;
}

// A Python number keeps its category for alias-safe kernels: the elementwise
// engine promotes scalar args as PyTorch does (int32 + 2.5 -> float32).
bool wrapped_number_arg(const at::Tensor& w, tpurt_arg_t* a) {
  switch (w.scalar_type()) {
    case c10::ScalarType::Bool:
      a->kind = TPURT_ARG_BOOL;
      a->v.b = *w.const_data_ptr<bool>();
      return true;
    case c10::ScalarType::Long:
      a->kind = TPURT_ARG_INT;
      a->v.i = *w.const_data_ptr<int64_t>();
      return true;
    case c10::ScalarType::Double:
      a->kind = TPURT_ARG_DOUBLE;
      a->v.d = *w.const_data_ptr<double>();
      return true;
    default:
      return false;
  }
}

// One schema argument as a kernel argument. Buffers are referred to by offsets
// (into b.tensors, b.ints, ...) until patch_pointers: the vectors still grow.
tpurt_arg_t marshal_arg(const Call& c, size_t i, bool alias_safe, CallBuf& b, KeepAlive* keep_alive,
                        int64_t* max_numel) {
  const c10::IValue& v = c.arg(i);
  tpurt_arg_t a;
  std::memset(&a, 0, sizeof(a));
  a.kind = TPURT_ARG_NONE;
  switch (c.info.arg_class[i]) {
    case ArgClass::kTensor:
      if (!v.isTensor() || !v.toTensor().defined()) break;
      if (alias_safe && v.toTensor().is_cpu() && v.toTensor().unsafeGetTensorImpl()->is_wrapped_number() &&
          wrapped_number_arg(v.toTensor(), &a))
        break;
      a.kind = TPURT_ARG_TENSOR;
      a.v.i = add_tensor(b, v.toTensor(), c.name, keep_alive, max_numel);
      break;
    case ArgClass::kTensorList:
    case ArgClass::kOptTensorList:
      if (v.isList()) {
        auto l = v.toListRef();
        a.kind = TPURT_ARG_TENSOR_LIST;
        a.count = static_cast<int32_t>(l.size());
        a.v.i = static_cast<int64_t>(b.list_slots.size());
        for (const auto& e : l)
          b.list_slots.push_back(e.isTensor() && e.toTensor().defined()
                                     ? add_tensor(b, e.toTensor(), c.name, keep_alive, max_numel) + 1
                                     : 0);
      }
      break;
    case ArgClass::kInt:
      if (v.isInt()) {
        a.kind = TPURT_ARG_INT;
        a.v.i = v.toInt();
      } else if (v.isUnsigned()) {
        // above INT64_MAX (a uint64 fill): the same 64 bits, which is what a uint64 kernel stores
        a.kind = TPURT_ARG_INT;
        a.v.i = static_cast<int64_t>(v.toUInt());
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
      } else if (v.isUnsigned()) {
        // above INT64_MAX: for a uint64 tensor the same 64 bits, which is what its kernel stores;
        // otherwise the number itself (pow(x, 2**64 - 1) on floats: the bits read as int64 were -1)
        if (has_uint64_tensor(c)) {
          a.kind = TPURT_ARG_INT;
          a.v.i = static_cast<int64_t>(v.toUInt());
        } else {
          a.kind = TPURT_ARG_DOUBLE;
          a.v.d = static_cast<double>(v.toUInt());
        }
      } else if (v.isSymInt()) {
        a.kind = TPURT_ARG_INT;
        a.v.i = v.toSymInt().guard_int(__FILE__, __LINE__);
      } else if (v.isComplexDouble()) {
        // No complex arg kind: a 0-d complex128 tensor (only complex kernels get one, fallback_check.cpp).
        a.kind = TPURT_ARG_TENSOR;
        a.v.i = add_tensor(b, at::scalar_tensor(c10::Scalar(v.toComplexDouble()), at::kComplexDouble), c.name,
                           keep_alive, max_numel);
      } else if (!v.isNone()) {
        TORCH_CHECK_NOT_IMPLEMENTED(false, c.name, ": scalar argument '", c.op.schema().arguments()[i].name(),
                                    "' of type ", v.tagKind(), " is not supported on the tpu device");
      }
      break;
    case ArgClass::kDtype:
      if (!v.isNone()) {
        a.kind = TPURT_ARG_DTYPE;
        a.v.i = to_tpurt_dtype(static_cast<c10::ScalarType>(v.toInt()), c.name);
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
      if (c.info.random) {
        a.kind = TPURT_ARG_RNG;  // reserved in patch_pointers, once max_numel is known
        a.count = v.isGenerator() ? 1 : 0;
      }
      break;
    case ArgClass::kUnknown:
      if (!v.isNone()) a.kind = TPURT_ARG_OTHER;
      break;
  }
  return a;
}

// Outputs that share storage with an input are computed into fresh
// temporaries (unless the kernel is alias-safe) and copied back after it.
void swap_aliased_outputs(const Call& c, bool alias_safe, Outputs& outs, CopyBacks* copy_back, int64_t* max_numel) {
  const OpInfo& info = c.info;
  for (at::Tensor& out : outs.kernel_outs) {
    if (!out.defined()) continue;
    *max_numel = std::max<int64_t>(*max_numel, out.numel());
    if (alias_safe) continue;
    bool aliased = false;
    for (size_t i = 0; i < info.num_args && !aliased; ++i) {
      if (info.arg_is_out[i]) continue;
      const c10::IValue& v = c.arg(i);
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
      copy_back->emplace_back(out, temp);
      out = temp;
    }
  }
}

// The Philox reservation of a random op: from its Generator argument, else
// the device's default generator.
tpurt_rng_t reserve_rng(const Call& c, bool explicit_gen, c10::DeviceIndex device, int64_t max_numel) {
  const at::Generator* gen = nullptr;
  at::Generator user_gen;
  if (explicit_gen) {
    // Find the Generator argument again (the kernel arg index differs
    // from the schema index once out= arguments are removed).
    for (size_t i = 0; i < c.info.num_args; ++i)
      if (c.info.arg_class[i] == ArgClass::kGenerator && c.arg(i).isGenerator()) {
        user_gen = c.arg(i).toGenerator();
        gen = &user_gen;
      }
    TORCH_CHECK(gen && gen->device().type() == kTpu, c.name, ": expected a tpu Generator, got one for ",
                gen ? gen->device() : c10::Device("cpu"));
  }
  return generator_reserve(gen ? *gen : default_generator(device), tpurt_rng_reservation(max_numel));
}

// Buffer offsets become pointers (the vectors no longer grow); random ops get
// their counter reservation.
void patch_pointers(const Call& c, c10::DeviceIndex device, int64_t max_numel, CallBuf& b) {
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
        a.v.rng = reserve_rng(c, explicit_gen, device, max_numel);
        break;
      }
      default: break;
    }
  }
}

}  // namespace

void marshal_call(const Call& c, const tpurt_op_def_t* def, c10::DeviceIndex device, Outputs& outs, CallBuf& b,
                  KeepAlive* keep_alive, CopyBacks* copy_back, tpurt_op_call_t* call) {
  const OpInfo& info = c.info;
  const bool alias_safe = def->flags & TPURT_OP_ALIAS_SAFE;
  int64_t max_numel = 0;
  plan_fold(c, def, outs, &b.fold);
  for (size_t i = 0; i < info.num_args; ++i)
    if (!info.arg_is_out[i]) b.args.push_back(marshal_arg(c, i, alias_safe, b, keep_alive, &max_numel));
  if (info.random && !info.has_generator_arg) {  // native_dropout: the RNG goes last (tpurt/kernel.h)
    tpurt_arg_t a;
    std::memset(&a, 0, sizeof(a));
    a.kind = TPURT_ARG_RNG;
    b.args.push_back(a);
  }
  swap_aliased_outputs(c, alias_safe, outs, copy_back, &max_numel);
  b.outputs.resize(outs.kernel_outs.size());
  for (size_t k = 0; k < outs.kernel_outs.size(); ++k) {
    if (outs.kernel_outs[k].defined()) {
      fill_folded_desc(outs.kernel_outs[k], &b.outputs[k], c.name, b.fold);
    } else {  // an output the caller did not ask for (output_mask): data == NULL
      std::memset(&b.outputs[k], 0, sizeof(tpurt_tensor_t));
      b.outputs[k].dtype = TPURT_DTYPE_FLOAT32;
    }
  }
  patch_pointers(c, device, max_numel, b);
  call->name = info.base.c_str();
  call->overload = info.overload.c_str();
  call->num_args = static_cast<int32_t>(b.args.size());
  call->args = b.args.data();
  call->num_outputs = static_cast<int32_t>(b.outputs.size());
  call->outputs = b.outputs.data();
}

void submit_call(const Call& c, const tpurt_op_def_t* def, c10::DeviceIndex device, const tpurt_op_call_t& call,
                 const CopyBacks& copy_back) {
  tpurt_status_t s = tpurt_queue_submit_kernel(current_queue(device), def, &call);
  if (s) throw_status(s, c.name);
  for (const auto& pr : copy_back) submit_device_copy(pr.first, pr.second, c.name);
}

}  // namespace fallback
}  // namespace torch_tpu
