// The boxed fallback's first stage: before anything is allocated or queued,
// the call is checked against its kernel (ask before you fail): a kernel
// exists, the tensors are on one tpu device, their dtypes are the device's and
// in the kernel's dtype mask, their layouts are ones it reads, and written
// tensors overlap only as CPU allows. Math bits and boolean index masks are
// settled on the way.
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/nonzero.h>

#include <ATen/ops/empty_strided.h>

#include "fallback.h"

namespace torch_tpu::fallback {

namespace {

[[noreturn]] void refuse_no_kernel(const OpInfo& info) {
  throw Unsupported{"is not implemented",
                    c10::str("The operator '", info.full_name, "' is not implemented for the tpu device yet. Set "
                             "TORCH_TPU_CPU_FALLBACK=1 to run unsupported operators on the CPU (slow).")};
}

[[noreturn]] void refuse_dtype(const Call& c, c10::ScalarType dtype) {
  throw Unsupported{"has no kernel for this dtype",
                    c10::str(c.name, ": \"", c.info.base, "\" not implemented for '", dtype, "': dtype ", dtype,
                             " is not supported on the tpu device"), true,
                    dtype == c10::ScalarType::ComplexHalf};
}

// The dtype mask of the op-table entry (tpurt/kernel.h), in its words.
std::string dtype_list(const tpurt_op_def_t* def) {
  std::string s;
  for (int d = 0; d < TPURT_DTYPE_COUNT; ++d) {
    if (!tpurt_op_supports_dtype(def, static_cast<tpurt_dtype_t>(d))) continue;
    if (!s.empty()) s += ", ";
    s += tpurt_dtype_name(static_cast<tpurt_dtype_t>(d));
  }
  return s.empty() ? "none" : s;
}

// CPU's words first ("<kernel>" not implemented for '<ScalarType>', its dispatch macros' refusal,
// which PyTorch's tests match), then ours.
[[noreturn]] void refuse_dtype_mask(const Call& c, const tpurt_op_def_t* def, tpurt_dtype_t d, c10::ScalarType st) {
  throw Unsupported{"has no kernel for this dtype",
                    c10::str(c.name, ": \"", def->name, "\" not implemented for '", c10::toString(st), "': dtype ",
                             tpurt_dtype_name(d), " is not supported by its tpu kernel '",
                             def->name, "' (which computes in ", dtype_list(def),
                             "). Set TORCH_TPU_CPU_FALLBACK=1 to run it on the CPU (slow)."),
                    true};
}

inline void check_dtype_mask(const Call& c, const tpurt_op_def_t* def, c10::ScalarType dtype) {
  tpurt_dtype_t d = map_dtype(dtype);
  if (TPURT_UNLIKELY(!tpurt_op_supports_dtype(def, d))) refuse_dtype_mask(c, def, d, dtype);
}

// The op's complex kernel exists and takes a first tensor of this (real) dtype, or the op has no
// real kernel to fall back to (then its dtype check names the complex one).
inline bool complex_kernel_takes(const OpInfo& info, c10::ScalarType first) {
  return info.cdef && (!info.def || tpurt_op_supports_dtype(info.cdef, map_dtype(first)));
}

uint32_t layout_bit(c10::Layout layout) { return layout == c10::kStrided ? TPURT_LAYOUT_STRIDED : 0; }

void check_layout(const Call& c, const tpurt_op_def_t* def, c10::Layout layout) {
  if (def && tpurt_op_supports_layout(def, layout_bit(layout))) return;
  throw Unsupported{"has no kernel for this layout",
                    c10::str(c.name, ": layout ", layout, " is not supported by ",
                             def ? c10::str("its tpu kernel '", def->name, "'") : std::string("the tpu device"),
                             " (strided tensors only). Set TORCH_TPU_CPU_FALLBACK=1 to run it on the CPU (slow).")};
}

// Bool/uint8 masks in index / index_put become long indices (nonzero), as
// ATen's own advanced indexing does; CPU index tensors move to the device.
void expand_bool_indices(const Call& c) {
  if (!c.arg(0).isTensor()) return;
  const at::Tensor& self = c.arg(0).toTensor();
  c10::IValue& slot = c.arg(1);
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
  int64_t pos = 0;  // the dim of self the entry indexes
  for (const auto& e : l) {
    if (!e.isTensor()) {
      out.push_back(std::nullopt);
      ++pos;
      continue;
    }
    at::Tensor t = e.toTensor();
    if (t.is_cpu()) t = t.to(self.device());
    if (t.scalar_type() == c10::kBool || t.scalar_type() == c10::kByte) {
      // ATen's words; aten::index has warned already, above the backend
      if (t.scalar_type() == c10::kByte && c.info.base != "index")
        TORCH_WARN("indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead.");
      // ATen's expandTensors: a mask covers t.dim() dims of self, size for size
      for (int64_t j = 0; j < t.dim(); ++j)
        TORCH_CHECK_INDEX(pos + j < self.dim() && t.size(j) == self.size(pos + j), "The shape of the mask ",
                          t.sizes(), " at index ", j, " does not match the shape of the indexed tensor ",
                          self.sizes(), " at index ", pos + j);
      pos += t.dim();
      at::Tensor nz = at::nonzero(t);
      for (int64_t j = 0; j < t.dim(); ++j) out.push_back(nz.select(1, j));
    } else {
      out.push_back(t);
      ++pos;
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
void check_written_overlap(const Call& c) {
  static const char* const kShared =
      "unsupported operation: more than one element of the written-to tensor refers to a single memory "
      "location. Please clone() the tensor before performing the operation.";
  static const char* const kAliased =
      "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single "
      "memory location. Please clone() the tensor before performing the operation.";
  const OpInfo& info = c.info;
  auto each_tensor = [](const c10::IValue& v, const auto& fn) {
    if (v.isTensor()) fn(v.toTensor());
    else if (v.isTensorList() || v.isList())  // a list of optional tensors too (index_put_'s indices)
      for (const c10::IValue& e : v.toListRef())
        if (e.isTensor()) fn(e.toTensor());
  };
  for (size_t i = 0; i < info.num_args; ++i) {
    if (!info.arg_written[i]) continue;
    const c10::IValue& v = c.arg(i);
    each_tensor(v, [&](const at::Tensor& w) {
      if (!w.defined() || at::has_internal_overlap(w) != at::MemOverlap::Yes) return;
      if (info.warn_overlap) {
        TORCH_WARN(info.warn_overlap);
      } else {
        TORCH_CHECK(false, kShared);
      }
    });
    if (!v.isTensor() || !v.toTensor().defined()) continue;
    const at::Tensor& w = v.toTensor();
    for (size_t j = 0; j < info.num_args; ++j) {
      if (info.arg_written[j]) continue;
      each_tensor(c.arg(j), [&](const at::Tensor& in) {
        if (!in.defined()) return;
        at::MemOverlapStatus st = at::get_overlap_status(w, in);  // the same tensor: Full
        TORCH_CHECK(st != at::MemOverlapStatus::Partial && !(info.refuse_alias && st == at::MemOverlapStatus::Full),
                    kAliased);
      });
    }
  }
}

}  // namespace

// self[mask] = value with one value, as ATen's own index_put_ does it (canDispatchToMaskedFill):
// masked_fill_, over the dims the mask covers. nanoGPT's top-k filter is one such call
// (`logits[logits < v[:, [-1]]] = -float("Inf")`): as indices (expand_bool_indices) the mask's
// count of true elements would have to reach the host, a wait for the queue on every call. Taken
// where ATen takes it (one bool mask, sizes matching self's leading dims, a one-element value on
// the CPU, no accumulation) and for a value on self's device of self's dtype, which index_put_'s
// general path accepts with the same result.
bool put_mask_as_masked_fill(const Call& c) {
  const c10::IValue &s = c.arg(0), &idx = c.arg(1), &v = c.arg(2);
  if (!s.isTensor() || !idx.isList() || !v.isTensor() || !c.arg(3).isBool() || c.arg(3).toBool()) return false;
  auto l = idx.toListRef();
  if (l.size() != 1 || !l[0].isTensor()) return false;
  const at::Tensor &self = s.toTensor(), &mask = l[0].toTensor(), &val = v.toTensor();
  if (mask.scalar_type() != c10::kBool || mask.device() != self.device() || mask.dim() > self.dim() ||
      !mask.sizes().equals(self.sizes().slice(0, mask.dim())) || val.numel() != 1 ||
      !(val.is_cpu() || (val.device() == self.device() && val.scalar_type() == self.scalar_type())))
    return false;
  std::vector<int64_t> shape(mask.sizes().begin(), mask.sizes().end());
  shape.resize(self.dim(), 1);  // the dims after the mask's: broadcast
  self.masked_fill_(mask.view(shape), val.dim() == 0 ? val : val.reshape({}));
  return true;
}

Checked check_call(const Call& c) {
  const OpInfo& info = c.info;
  if ((!info.def && !info.cdef && !info.all_views) || info.unsupported_ret) refuse_no_kernel(info);
  if (info.bool_index_arg1) expand_bool_indices(c);

  // One pass over the tensor arguments: devices, dtypes, layouts, math bits.
  Checked k;
  c10::ScalarType bad_dtype = c10::ScalarType::Undefined;     // the first the device has no dtype for
  c10::ScalarType complex_type = c10::ScalarType::Undefined;  // of a complex tensor argument, if any
  c10::ScalarType complex_out = c10::ScalarType::Undefined;   // of a complex out= argument, if any
  c10::Layout layout = c10::kStrided;                         // a non-strided layout, if any
  bool move_index = false;                                    // a CPU `index` to copy to the device
  auto visit = [&](const at::Tensor& t, size_t i) __attribute__((always_inline)) {
    if (!t.defined()) return;
    if (t.device().type() == kTpu) {
      c10::DeviceIndex d = t.device().index();
      TORCH_CHECK(k.device < 0 || k.device == d, c.name, ": expected all tensors to be on the same device, but "
                  "found tensors on tpu:", static_cast<int>(k.device), " and tpu:", static_cast<int>(d));
      k.device = d;
    } else if (t.is_cpu() && static_cast<int>(i) == info.cpu_index_arg) {
      move_index = true;
    } else if (t.is_cpu()) {
      // CPU's and CUDA's words first ("Expected all tensors to be on the same device, but found at
      // least two devices, ..."), then which argument it was
      TORCH_CHECK(t.dim() == 0, c.name, ": Expected all tensors to be on the same device, but found at least "
                  "two devices, tpu and cpu! (argument '", c.op.schema().arguments()[i].name(),
                  "' is a CPU tensor; only 0-dim CPU scalars may join tpu tensors. Move it with .to('tpu').)");
    } else {
      TORCH_CHECK(false, c.name, ": argument '", c.op.schema().arguments()[i].name(), "' is on ", t.device(),
                  "; expected a tpu tensor");
    }
    const c10::ScalarType st = t.scalar_type();
    if (!k.has_tensor) {
      k.has_tensor = true;
      k.first_dtype = st;
    }
    if (TPURT_UNLIKELY(map_dtype(st) == TPURT_DTYPE_INVALID) && bad_dtype == c10::ScalarType::Undefined)
      bad_dtype = st;
    if (c10::isComplexType(st)) (info.arg_is_out[i] ? complex_out : complex_type) = st;
    if (TPURT_UNLIKELY(t.layout() != c10::kStrided)) layout = t.layout();
  };
  for (size_t i = 0; i < info.num_args; ++i) {
    c10::IValue& v = c.arg(i);
    if (v.isTensor()) {
      // Math bits (conj(), the negative view of imag(conj(x))) arrive only
      // for the ops PyTorch's conj/neg fallbacks let through (mm, bmm, dot,
      // ...) because CPU's kernels read the bits; ours read stored values.
      const at::Tensor& t = v.toTensor();
      if (TPURT_UNLIKELY(t.defined() && (t.is_conj() || t.is_neg()) && !info.all_views)) {
        if (!info.arg_written[i]) v = t.resolve_conj().resolve_neg();
        else k.written_math_bits = true;  // an out= or self_ the kernel would write as stored values
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
  if (info.all_views) return k;  // metadata only: no kernel reads the tensors
  if (move_index) {
    TORCH_CHECK(k.device >= 0, c.name, ": no tpu tensor among the arguments");
    c10::IValue& v = c.arg(static_cast<size_t>(info.cpu_index_arg));
    v = v.toTensor().to(c10::Device(kTpu, k.device));
  }
  // CPU's own checks come before its dtype dispatch ("... not implemented for 'Float'")
  if (TPURT_UNLIKELY(info.precheck != nullptr)) info.precheck(c);
  if (bad_dtype != c10::ScalarType::Undefined) refuse_dtype(c, bad_dtype);

  // Complex tensors reach only kernels that take them (TPURT_OP_COMPLEX, tpurt/kernel.h).
  // (a complex out= of real inputs: the complex kernel if any, else the real one into a real
  // temporary, check_outputs_kernel)
  // (a complex kernel that computes in complex dtypes only, complex::sum, leaves a real input with a
  // complex out= to the real kernel: sum(bool, out=complex) as CPU computes it)
  k.def = complex_type != c10::ScalarType::Undefined ||
                  (complex_out != c10::ScalarType::Undefined && complex_kernel_takes(info, k.first_dtype))
              ? info.cdef
              : info.def;
  if (!k.def) {
    if (complex_type == c10::ScalarType::Undefined) refuse_no_kernel(info);
    refuse_dtype(c, complex_type);
  }
  if (TPURT_UNLIKELY(layout != c10::kStrided)) check_layout(c, k.def, layout);
  if (k.has_tensor)
    check_dtype_mask(c, k.def,
                     k.def == info.def && !(k.def->flags & TPURT_OP_COMPLEX) &&
                             complex_type == c10::ScalarType::Undefined && c10::isComplexType(k.first_dtype)
                         ? c10::toRealValueType(k.first_dtype)  // only a complex out=: a real temporary
                         : k.first_dtype);
  if (info.refuse_overlap || info.warn_overlap) check_written_overlap(c);
  return k;
}

const tpurt_op_def_t* check_outputs_kernel(const Call& c, const Checked& k, Outputs& outs, CopyBacks* copy_back) {
  const tpurt_op_def_t* def = k.def;
  auto& kernel_outs = outs.kernel_outs;
  for (const at::Tensor& out : kernel_outs)  // a complex32 result of other inputs (float16 * 1j)
    if (out.defined() && out.scalar_type() == c10::ScalarType::ComplexHalf) refuse_dtype(c, out.scalar_type());
  if (!(def->flags & TPURT_OP_COMPLEX)) {
    // A complex result from real inputs (a dtype= argument, an out=): the complex kernel, if any,
    // else the real kernel into real temporaries.
    bool complex_out = false;
    for (const at::Tensor& out : kernel_outs) complex_out |= out.defined() && out.is_complex();
    if (complex_out && complex_kernel_takes(c.info, k.first_dtype)) {
      def = c.info.cdef;
    } else if (complex_out) {
      for (at::Tensor& out : kernel_outs) {
        if (!out.defined() || !out.is_complex()) continue;
        at::Tensor temp = at::empty_strided(out.sizes(), out.strides(), out.options().dtype(c10::toRealValueType(out.scalar_type())));
        copy_back->emplace_back(out, temp);
        out = temp;
      }
    }
  }
  if (!k.has_tensor) {  // a factory: its first output's dtype is the kernel's
    for (const at::Tensor& out : kernel_outs) {
      if (!out.defined()) continue;
      check_dtype_mask(c, def, out.scalar_type());
      break;
    }
  }
  return def;
}

}  // namespace torch_tpu::fallback
