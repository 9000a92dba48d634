// The generic op path's shared pieces, for the files of the boxed fallback
// only: what is known about an op (OpInfo, built once per schema), the call in
// progress (per-op information: fallback_op_info.cpp), and the stages
// tpu_fallback (fallback.cpp) runs in order:
//   check    (fallback_check.cpp)    kernel, devices, dtypes, layouts, math bits, overlap
//   outputs  (fallback_outputs.cpp)  output layouts (meta cache) and allocation per alias annotations
//   marshal  (fallback_call.cpp)     IValues -> tpurt_op_call_t
//   submit   (fallback_call.cpp)     queue the kernel, copy back aliased outputs
// A stage that finds the device cannot run the call throws Unsupported; tpu_fallback
// turns that into a CPU run (when opted in) or NotImplementedError.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>
#include <c10/util/SmallVector.h>

#include "tpu_common.h"

namespace torch_tpu {

// The boxed fallback itself (fallback.cpp).
void tpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

namespace fallback {

// ============================ per-op information ============================

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

struct Call;

struct OpInfo {
  const c10::OperatorHandle* handle = nullptr;
  std::string full_name;  // "aten::add.Tensor"
  std::string base;       // "add" (tpurt_op_base_name)
  std::string overload;   // "Tensor"
  const tpurt_op_def_t* def = nullptr;   // tpurt_op_resolve(name, overload, 0)
  const tpurt_op_def_t* cdef = nullptr;  // the same with TPURT_RESOLVE_COMPLEX; may be null
  size_t num_args = 0;
  std::vector<ArgClass> arg_class;
  std::vector<bool> arg_is_out;  // out= arguments leave the kernel's args
  std::vector<bool> arg_written; // out= arguments and self of an in-place op
  bool refuse_overlap = false;   // CPU refuses a written tensor whose elements share memory
  bool refuse_alias = false;     // ... any overlap of a written tensor with an input (else only a partial one)
  const char* warn_overlap = nullptr;  // CPU warns (this message) instead of refusing a self whose elements share memory
  std::vector<RetInfo> rets;
  bool all_views = false;     // a view op: metadata only, no kernel
  bool unsupported_ret = false;
  bool bool_index_arg1 = false;  // index / index_put: bool masks become long indices
  bool mask_put = false;         // index_put_ / _index_put_impl_: one value through a mask is a masked_fill_
  // index_fill / index_add / index_copy / index_select / index_reduce: the argument `index` may be a
  // CPU tensor of any rank (CPU code passes torch.tensor([...]) there); it is copied to the device,
  // as advanced indexing's x[cpu_index] is. -1: none.
  int cpu_index_arg = -1;
  bool random = false;
  bool has_generator_arg = false;
  // Ops PyTorch gives no meta function take their shapes from a twin op.
  // kLikeSelf: ops whose output is empty_like(self) (contiguous) but have no meta; kLikeInput: the
  // same of the second argument (a backward's input).
  enum class MetaVia : uint8_t { kSelf, kConvolution, kConvolutionBackward, kLikeSelf, kLikeInput, kPowScalarOut, kComplexToFloatOut, kGeqrf, kRnnCell, kNllLoss, kNllLossBackward, kLayerNorm, kIndexReduce } meta_via = MetaVia::kSelf;
  bool repeat_interleave = false;  // repeat_interleave.Tensor: output_size from the data
  bool empty_fill_noop = false;    // normal_ / log_normal_ / exponential_: CPU returns an empty self as is
  // CPU's checks on shapes, dtypes and Python scalars that PyTorch's meta
  // function lacks (fallback_precheck.cpp), run at the call before anything
  // is queued; null for most ops.
  void (*precheck)(const Call& c) = nullptr;
  // Registered directly for PrivateUse1 in place of PyTorch's structured
  // CompositeExplicitAutogradNonFunctional wrapper (fallback_op_info.cpp).
  bool direct = false;
  // ATen's C++ meta function where torch._meta_registrations put a Python one
  // on the Meta key (fallback_meta_table.cpp); null: the Meta key is used.
  std::unique_ptr<c10::KernelFunction> cpp_meta;
};

// The precheck for an op by its full name, or null (fallback_precheck.cpp).
void (*precheck_for(const std::string& full_name))(const Call& c);

// The generated table of C++ meta functions (fallback_meta_table.cpp),
// looked up by "name.overload" ("add.Tensor"; "mm" for a default overload).
struct MetaFn {
  const char* name;
  c10::KernelFunction (*make)();
};
extern const MetaFn kCppMetaTable[];
extern const size_t kCppMetaTableSize;

// Registers the unboxed front (fallback_fast.cpp) for a direct structured op
// it serves (add, sub, mul, div and their in-place forms); false for others.
bool register_fast_op(torch::Library& lib, const c10::OperatorHandle& op);
// The unboxed fronts of fill_.Scalar and pow.Tensor_Scalar (fallback_fast.cpp), which are not direct
// structured ops.
void register_fast_fronts(torch::Library& lib);

// The op's information, built on its first call (fallback_op_info.cpp); lock-free
// after a thread's first call of the op.
const OpInfo& get_op_info(const c10::OperatorHandle& op);

// ============================ the call in progress ============================

struct Call {
  const c10::OperatorHandle& op;
  const OpInfo& info;
  torch::jit::Stack* stack;
  size_t first;      // stack index of the first argument
  const char* name;  // info.full_name, for messages

  Call(const c10::OperatorHandle& o, const OpInfo& i, torch::jit::Stack* s)
      : op(o), info(i), stack(s), first(s->size() - i.num_args), name(i.full_name.c_str()) {}
  c10::IValue& arg(size_t i) const { return (*stack)[first + i]; }
  at::ArrayRef<c10::IValue> args() const { return at::ArrayRef<c10::IValue>(stack->data() + first, info.num_args); }
};

// The device cannot run this call as made (no kernel, a dtype or layout its
// kernel does not take, shapes that depend on the data).
struct Unsupported {
  const char* why;      // completes "The operator 'x' ... on the tpu device" in the CPU fallback's warning
  std::string message;  // the NotImplementedError's message
  bool dtype = false;   // refused for a dtype of the call
  bool chalf = false;   // ... for complex32 (ComplexHalf), which runs widened (fallback.cpp)
};

// ================================ check ================================

struct Checked {
  c10::DeviceIndex device = -1;          // the tensors' tpu device (-1: none among the arguments)
  const tpurt_op_def_t* def = nullptr;   // the kernel (null for a view op)
  bool has_tensor = false;               // the call has a tensor argument ...
  c10::ScalarType first_dtype = c10::ScalarType::Undefined;  // ... and this is the first one's dtype
  bool written_math_bits = false;        // a written tensor is a conj() / negative view (tpu_fallback)
};
// The call's arguments against its kernel: a kernel exists, tensors are on one
// tpu device (or 0-d CPU scalars), their dtypes and layouts are the device's and
// the kernel's, written tensors overlap as CPU allows. Settles math bits and
// expands boolean index masks in place on the stack. Throws Unsupported or the
// error CPU raises.
Checked check_call(const Call& c);
// ================================ outputs ================================

struct OutMeta {
  bool defined;  // backward ops return undefined tensors for outputs not asked for
  c10::ScalarType dtype;
  c10::SmallVector<int64_t, 6> sizes, strides;
  int64_t offset;
};
struct MetaEntry {
  std::vector<int64_t> key;
  std::vector<c10::SmallVector<OutMeta, 1>> rets;  // per return; a list return has several
  // A direct structured op's int arguments as PyTorch's wrapper passed them on to the .out form on the
  // signature's first call, where they differ (cat's dim, wrapped by its meta: -2 -> 2): (argument,
  // value), given to the kernel on later calls too, so every call of a signature records the same call
  // (a compiled program's captures at several sizes are compared number by number).
  std::vector<std::pair<uint32_t, int64_t>> wrapper_ints;
};

// pow.Tensor_Scalar_out with exponent 0 or 1 is answered without its kernel
// (true: the stack holds the result); repeat_interleave without output_size
// learns it from the data first (tpu_fallback calls them for those ops only).
bool answer_pow_without_kernel(const Call& c);
// self[mask] = value with one bool mask and one value, run as masked_fill_ where ATen's index_put_
// would (true: done, self is the result).
bool put_mask_as_masked_fill(const Call& c);
void settle_repeat_interleave_size(const Call& c);

// The output layouts for this call: the meta cache, else PyTorch's meta
// functions. `key` is scratch for the cache key. Null when a direct structured
// op's first call of a signature ran through PyTorch's own wrapper: the stack
// then holds the results. Throws Unsupported when shapes need the data.
std::shared_ptr<const MetaEntry> output_layouts(const Call& c, std::vector<int64_t>& key);
// Runs PyTorch's meta function for the call, for its errors only: raises the
// error CPU raises for arguments PyTorch itself refuses; returns otherwise.
void raise_meta_refusal(const Call& c);

// The results as the schema's alias annotations say (written arguments,
// views of arguments, fresh tensors), and the tensors the kernel writes.
struct Outputs {
  c10::SmallVector<c10::IValue, 2> results;
  c10::SmallVector<at::Tensor, 4> kernel_outs;  // flattened, in return order
};
void make_outputs(const Call& c, const MetaEntry& meta, Outputs* out);

// ============================ marshal and submit ============================

// Tensors of more than TPURT_MAX_DIMS dims reach a kernel folded: the call's
// tensors (0-d ones aside) all have one shape, dims of size 1 are dropped and
// neighbours that are one run in every tensor are merged, as the elementwise
// engine coalesces them. Row-major element order is kept, so an elementwise,
// random or whole-tensor reduction kernel computes the same thing. Folded dim
// g covers the original dims up to last[g], takes size[g] and the strides of
// dim last[g].
struct DimFold {
  bool active = false;
  int64_t ndim = 0;  // the original dims
  int32_t folded = 0;
  int64_t size[TPURT_MAX_DIMS];
  int64_t last[TPURT_MAX_DIMS];
};

// A kernel call's arrays, reused per thread and nesting depth so the hot path
// does not allocate (tpu_fallback holds one for the call it runs).
struct CallBuf {
  DimFold fold;
  std::vector<tpurt_arg_t> args;
  std::vector<tpurt_tensor_t> tensors;
  std::vector<int64_t> list_slots;  // tensor index + 1, 0 for None; patched into list_ptrs
  std::vector<const tpurt_tensor_t*> list_ptrs;
  std::vector<int64_t> ints;
  std::vector<double> doubles;
  std::vector<uint8_t> bools;
  std::vector<tpurt_tensor_t> outputs;
  std::vector<int64_t> key;  // the meta cache key
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
    fold.active = false;
  }
};

// Outputs that share storage with an input are computed into temporaries
// and copied back after the kernel.
using CopyBacks = c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 2>;  // (real, temp)
// Device copies of CPU scalars, alive until the kernel is queued.
using KeepAlive = c10::SmallVector<at::Tensor, 4>;

// The kernel once the outputs are known: a complex result from real inputs
// goes to the complex kernel; where there is none, the real kernel writes a
// temporary of the complex dtype's real part, copied (cast) into the result
// after it (CPU computes such an out= in the inputs' dtypes and casts too). An
// op without tensor arguments has its dtype mask checked against its first
// output. Throws Unsupported.
const tpurt_op_def_t* check_outputs_kernel(const Call& c, const Checked& k, Outputs& outs, CopyBacks* copy_back);

// IValues -> tpurt_op_call_t: the schema's arguments in order, out= removed
// (CPU scalars become device tensors, Python numbers keep their category for
// alias-safe kernels, random ops get their Philox reservation), and the
// outputs (aliased ones swapped for temporaries). `call` points into `b`.
void marshal_call(const Call& c, const tpurt_op_def_t* def, c10::DeviceIndex device, Outputs& outs,
                  CallBuf& b, KeepAlive* keep_alive, CopyBacks* copy_back, tpurt_op_call_t* call);
// Queues the kernel on the current stream, then the copy-backs.
void submit_call(const Call& c, const tpurt_op_def_t* def, c10::DeviceIndex device,
                 const tpurt_op_call_t& call, const CopyBacks& copy_back);

// ================================ shared ================================

// The one ScalarType -> tpurt dtype table; TPURT_DTYPE_INVALID for the others.
// Inline: the check stage asks it for every tensor argument.
inline tpurt_dtype_t map_dtype(c10::ScalarType type) {
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
    case c10::ScalarType::UInt16: return TPURT_DTYPE_UINT16;
    case c10::ScalarType::UInt32: return TPURT_DTYPE_UINT32;
    case c10::ScalarType::UInt64: return TPURT_DTYPE_UINT64;
    default: return TPURT_DTYPE_INVALID;
  }
}
// Whether a is b's storage too.
inline bool shares_storage(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.storage().is_alias_of(b.storage());
}

}  // namespace fallback
}  // namespace torch_tpu
