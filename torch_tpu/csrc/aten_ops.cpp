// Native ATen registrations for the tpu (PrivateUse1) key: only the ops the
// generic boxed fallback cannot serve — tensor creation, metadata-only views,
// storage resizing, host<->device copies, reading a scalar, and the ops whose
// output shape depends on the data (nonzero and what is built on it).
#include <cstring>

#include <ATen/MemoryOverlap.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/all.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/count_nonzero.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/index.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/view_as_real.h>
#include <ATen/ops/view_native.h>
#include <c10/core/StorageImpl.h>
#include <torch/library.h>

#include "tpu_common.h"

namespace torch_tpu {

at::Tensor empty_tpu(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype) {
  return at::detail::empty_strided_generic(sizes, strides, device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
}

at::Tensor empty_tpu_contiguous(c10::IntArrayRef sizes, c10::ScalarType dtype) {
  return at::detail::empty_generic(sizes, device_allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype, std::nullopt);
}

// ================================== copies ==================================

namespace {

const tpurt_op_def_t* copy_kernel() {
  static const tpurt_op_def_t* def = tpurt_op_resolve("copy", "", 0);
  return def;
}

// Elements from the first to the last one the view touches (strides >= 0).
int64_t span_elems(const at::Tensor& t) {
  int64_t n = 1;
  for (int64_t d = 0; d < t.dim(); ++d) n += (t.size(d) - 1) * t.stride(d);
  return n;
}

char* storage_bytes(const at::Tensor& t) {
  return static_cast<char*>(const_cast<void*>(t.storage().data())) + t.storage_offset() * t.element_size();
}

}  // namespace

void check_in_storage(const at::TensorBase& t, const char* op) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  auto sizes = impl->sizes();
  auto strides = impl->strides();
  int64_t last = impl->storage_offset();
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return;  // no element: any storage holds it
    last += (sizes[d] - 1) * strides[d];
  }
  size_t need = static_cast<size_t>(last + 1) * impl->itemsize();
  size_t have = impl->has_storage() ? impl->storage().nbytes() : 0;
  if (C10_LIKELY(need <= have)) return;
  TORCH_CHECK(false, op, ": setStorage: sizes ", sizes, ", strides ", strides, ", storage offset ",
              impl->storage_offset(), ", and itemsize ", impl->itemsize(), " requiring a storage size of ", need,
              " are out of bounds for storage of size ", have);
}

namespace {

bool same_dense_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes().equals(b.sizes()) && a.strides().equals(b.strides()) &&
         a.is_non_overlapping_and_dense() && b.is_non_overlapping_and_dense();
}

// The real-dtype copy kernel never sees complex tensors (TPURT_OP_COMPLEX, tpurt/kernel.h).
const tpurt_op_def_t* complex_copy_kernel() {
  static const tpurt_op_def_t* def = tpurt_op_resolve("copy", "", TPURT_RESOLVE_COMPLEX);
  return def;
}

void submit_copy_kernel(const at::Tensor& dst, const at::Tensor& src, const char* op) {
  // complex32 (ComplexHalf) has no kernel dtype: its (real, imaginary) float16 pairs are copied as
  // such (view_as_real), to or from complex32 or complex64; any other dtype goes through complex64.
  const bool dh = dst.scalar_type() == at::kComplexHalf, sh = src.scalar_type() == at::kComplexHalf;
  if (dh || sh) {
    at::ScalarType other = dh ? src.scalar_type() : dst.scalar_type();
    if (other == at::kComplexHalf || other == at::kComplexFloat) {
      TORCH_CHECK_NOT_IMPLEMENTED(dst.dim() < TPURT_MAX_DIMS, op, ": complex32 tensors of ", dst.dim(),
                                  " dimensions are not supported on the tpu device");
      at::Tensor s = src.sizes().equals(dst.sizes()) ? src : src.expand(dst.sizes());
      return submit_copy_kernel(at::view_as_real(dst), at::view_as_real(s), op);
    }
    at::Tensor mid = empty_tpu_contiguous(dst.sizes(), at::kComplexFloat);
    submit_copy_kernel(mid, src.expand(dst.sizes()), op);
    return submit_copy_kernel(dst, mid, op);
  }
  if (dst.dim() > TPURT_MAX_DIMS) {
    // More dims than a kernel takes (CPU copies up to its 64 and more): drop the size-1 dims and
    // merge the dims that are contiguous in both tensors; what still has too many is refused below.
    at::Tensor s = src.sizes().equals(dst.sizes()) ? src : src.expand(dst.sizes());
    c10::SmallVector<int64_t, TPURT_MAX_DIMS> sz, ds, ss;
    for (int64_t k = 0; k < dst.dim(); ++k) {
      const int64_t n = dst.size(k);
      if (n == 1) continue;
      if (!sz.empty() && ds.back() == dst.stride(k) * n && ss.back() == s.stride(k) * n) {
        sz.back() *= n;
        ds.back() = dst.stride(k);
        ss.back() = s.stride(k);
        continue;
      }
      sz.push_back(n);
      ds.push_back(dst.stride(k));
      ss.push_back(s.stride(k));
    }
    if (sz.size() <= TPURT_MAX_DIMS) return submit_copy_kernel(dst.as_strided(sz, ds), s.as_strided(sz, ss), op);
  }
  const tpurt_op_def_t* def = copy_kernel();
  if (dst.is_complex() || src.is_complex()) {
    def = complex_copy_kernel();
    TORCH_CHECK_NOT_IMPLEMENTED(def, op, ": dtype ", dst.is_complex() ? dst.scalar_type() : src.scalar_type(),
                                " is not supported on the tpu device");
  }
  tpurt_tensor_t d, s;
  fill_tensor_desc(dst, &d, op);
  fill_tensor_desc(src, &s, op);
  tpurt_arg_t a[3];
  std::memset(a, 0, sizeof(a));
  a[0].kind = TPURT_ARG_TENSOR;
  a[0].v.tensor = &d;
  a[1].kind = TPURT_ARG_TENSOR;
  a[1].v.tensor = &s;
  a[2].kind = TPURT_ARG_BOOL;
  a[2].v.b = false;
  tpurt_op_call_t call{"copy", "", 3, a, 1, &d};
  check_status(tpurt_queue_submit_kernel(current_queue(), def, &call), op);
}

void copy_d2h(const at::Tensor& dst, const at::Tensor& src);

// CPU -> tpu. The host side does dtype conversion, broadcasting and strides;
// the device side gets one contiguous byte copy.
void copy_h2d(const at::Tensor& dst, const at::Tensor& src) {
  DeviceScope scope(dst.device().index());
  tpurt_device_t* dev = get_device(-1);
  tpurt_queue_t* q = current_queue();
  if (same_dense_layout(dst, src)) {
    check_status(tpurt_memcpy_h2d(dev, q, dst.data_ptr(), src.const_data_ptr(), dst.numel() * dst.element_size()),
                 "copy to tpu");
    return;
  }
  if (dst.is_non_overlapping_and_dense()) {
    at::Tensor stage = at::empty_strided(dst.sizes(), dst.strides(), src.options().dtype(dst.scalar_type()));
    stage.copy_(src);
    check_status(tpurt_memcpy_h2d(dev, q, dst.data_ptr(), stage.const_data_ptr(), dst.numel() * dst.element_size()),
                 "copy to tpu");
    return;
  }
  if (copy_kernel()) {  // a strided view: fill a dense temporary, then scatter on the device
    at::Tensor tmp = empty_tpu_contiguous(dst.sizes(), dst.scalar_type());
    copy_h2d(tmp, src);
    submit_device_copy(dst, tmp, "copy to tpu");
    return;
  }
  // No copy kernel: rewrite the span of storage the view covers.
  int64_t n = span_elems(dst);
  at::Tensor host = at::empty({n}, src.options().dtype(dst.scalar_type()));
  size_t bytes = n * dst.element_size();
  check_status(tpurt_memcpy_d2h(dev, q, host.data_ptr(), storage_bytes(dst), bytes), "copy to tpu");
  host.as_strided(dst.sizes(), dst.strides(), 0).copy_(src);
  check_status(tpurt_memcpy_h2d(dev, q, storage_bytes(dst), host.const_data_ptr(), bytes), "copy to tpu");
}

// tpu -> CPU: one byte copy of the span the source covers, then the host does
// dtype conversion and strides.
void copy_d2h(const at::Tensor& dst, const at::Tensor& src) {
  DeviceScope scope(src.device().index());
  tpurt_device_t* dev = get_device(-1);
  tpurt_queue_t* q = current_queue();
  if (same_dense_layout(dst, src)) {
    check_status(tpurt_memcpy_d2h(dev, q, dst.data_ptr(), src.const_data_ptr(), src.numel() * src.element_size()),
                 "copy from tpu");
    return;
  }
  at::Tensor s = src;
  if (copy_kernel() && span_elems(src) > 2 * src.numel() + 4096) {
    s = empty_tpu_contiguous(src.sizes(), src.scalar_type());  // gather the sparse view first
    submit_copy_kernel(s, src, "copy from tpu");
  }
  int64_t n = span_elems(s);
  at::Tensor host = at::empty({n}, dst.options().dtype(s.scalar_type()));
  check_status(tpurt_memcpy_d2h(dev, q, host.data_ptr(), storage_bytes(s), n * s.element_size()),
               "copy from tpu");
  dst.copy_(host.as_strided(s.sizes(), s.strides(), 0));
}

}  // namespace

void submit_device_copy(const at::TensorBase& dst_base, const at::TensorBase& src_base, const char* op) {
  at::Tensor dst(dst_base), src(src_base);
  if (dst.numel() == 0) return;
  DeviceScope scope(dst.device().index());
  if (const tpurt_op_def_t* def = copy_kernel()) {
    if (!(def->flags & TPURT_OP_ALIAS_SAFE) && dst.storage().is_alias_of(src.storage())) {
      if (dst.data_ptr() == src.data_ptr() && dst.scalar_type() == src.scalar_type() &&
          dst.sizes().equals(src.sizes()) && dst.strides().equals(src.strides()))
        return;  // copying a view onto itself
      at::Tensor tmp = empty_tpu_contiguous(src.sizes(), src.scalar_type());
      submit_copy_kernel(tmp, src, op);
      submit_copy_kernel(dst, tmp, op);
      return;
    }
    submit_copy_kernel(dst, src, op);
    return;
  }
  if (same_dense_layout(dst, src)) {
    check_status(tpurt_queue_submit_copy(current_queue(), dst.data_ptr(), src.const_data_ptr(),
                                         dst.numel() * dst.element_size()),
                 op);
    return;
  }
  // No copy kernel and the layouts differ: through the host.
  at::Tensor host = at::empty(src.sizes(), src.options().device(c10::kCPU));
  copy_d2h(host, src);
  copy_h2d(dst, host);
}

// ============================= native registrations =============================

namespace {

// torch.use_deterministic_algorithms(True) with fill_uninitialized_memory (the default): as on CPU
// and CUDA, new tensors and the bytes a resize adds read NaN (floating, complex) or the dtype's
// maximum (integers, bool) instead of whatever the allocator left there.
bool deterministic_fill() {
  return at::globalContext().deterministicAlgorithms() && at::globalContext().deterministicFillUninitializedMemory();
}

at::Tensor fill_if_deterministic(at::Tensor& t) {
  if (C10_UNLIKELY(deterministic_fill()) && t.numel() > 0) at::native::fill_empty_deterministic_(t);
  return t;
}

c10::Device tpu_device_or_current(std::optional<c10::Device> device) {
  c10::Device d = device.value_or(c10::Device(kTpu, current_device_index()));
  TORCH_CHECK(d.type() == kTpu, "expected a tpu device, got ", d);
  return d;
}

at::Tensor tpu_empty(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                     std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                     std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  c10::Device d = tpu_device_or_current(device);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "tpu tensors support only the strided layout, got ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "only CPU tensors can be pinned");
  DeviceScope scope(d.index());
  at::Tensor t = at::detail::empty_generic(size, device_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype), memory_format);
  return fill_if_deterministic(t);
}

at::Tensor tpu_empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                             std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                             std::optional<bool> pin_memory) {
  c10::Device d = tpu_device_or_current(device);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "tpu tensors support only the strided layout, got ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "only CPU tensors can be pinned");
  DeviceScope scope(d.index());
  at::Tensor t = at::detail::empty_strided_generic(size, stride, device_allocator(),
                                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                   c10::dtype_or_default(dtype));
  return fill_if_deterministic(t);
}

at::Tensor tpu_as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                          std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor tpu_view(const at::Tensor& self, c10::IntArrayRef size) { return at::native::view(self, size); }

at::Tensor tpu_reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  // Callable with any geometry (torch.ops.aten._reshape_alias): checked as as_strided is.
  at::native::checkInBoundsForStorage(size, stride, self.storage_offset(), self.dtype(), self.storage());
  return at::native::_reshape_alias(self, size, stride);
}

// Sets sizes (and strides) and grows the storage when it is too small, as
// resize_impl_cpu_ does, but with a stream-ordered device copy.
void resize_impl(c10::TensorImpl* self, c10::IntArrayRef size, std::optional<c10::IntArrayRef> stride) {
  if (self->sizes().equals(size) && (!stride || self->strides().equals(*stride))) return;
  size_t itemsize = self->dtype().itemsize();
  size_t offset = self->storage_offset();
  size_t need;
  if (stride) {
    self->set_sizes_and_strides(size, *stride);
    need = at::detail::computeStorageNbytes(size, *stride, itemsize, offset);
  } else {
    self->set_sizes_contiguous(size);
    need = at::detail::computeStorageNbytesContiguous(size, itemsize, offset);
  }
  if (self->numel() == 0) return;
  c10::StorageImpl* storage = self->unsafe_storage().unsafeGetStorageImpl();
  TORCH_CHECK(storage, "cannot resize a tpu tensor without storage");
  if (need > storage->nbytes()) resize_storage_bytes(storage, need);
}

const at::Tensor& tpu_resize_(const at::Tensor& self, c10::IntArrayRef size,
                              std::optional<c10::MemoryFormat> memory_format) {
  for (int64_t s : size) TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s, ": ", size);
  DeviceScope scope(self.device().index());
  const c10::Storage& st = self.unsafeGetTensorImpl()->unsafe_storage();
  int64_t old_nbytes = st ? static_cast<int64_t>(st.nbytes()) : 0;
  resize_impl(self.unsafeGetTensorImpl(), size, std::nullopt);
  if (C10_UNLIKELY(deterministic_fill())) at::native::fill_resize_deterministic_(self, old_nbytes);
  if (memory_format) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format ", *memory_format);
    self.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& tpu_set_storage(at::Tensor& self, c10::Storage source, int64_t storage_offset, c10::IntArrayRef size,
                            c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, source, storage_offset, size, stride);
  // The view must lie in the storage it is given. CPU grows a resizable
  // storage here with uninitialised bytes, and rejects a non-resizable one
  // (a loaded checkpoint's): a tensor made over device storage never reaches
  // past it, so a checkpoint claiming more elements than its storage holds
  // raises as on CPU instead of exposing memory a freed tensor left.
  at::native::checkInBoundsForStorage(size, stride, storage_offset, self.dtype(), source);
  self.unsafeGetTensorImpl()->set_storage_offset(storage_offset);
  std::optional<c10::IntArrayRef> st = stride.data() != nullptr ? std::optional<c10::IntArrayRef>(stride)
                                                                 : std::nullopt;
  DeviceScope scope(self.device().index());
  resize_impl(self.unsafeGetTensorImpl(), size, st);
  return self;
}

at::Tensor& tpu_set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return tpu_set_storage(self, std::move(source), 0, {n}, {});
}

at::Tensor& tpu_set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return tpu_set_storage(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& tpu_set_empty(at::Tensor& self) {
  DeviceScope scope(self.device().index());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), /*resizable=*/true);
  return tpu_set_storage(self, std::move(storage), 0, {0}, {});
}

}  // namespace

// t <- kernel(t) in place with a unary kernel ("conj_physical", "neg"): settles
// the math bits of a device-to-device copy (and of written arguments, fallback.cpp).
void submit_inplace_unary(const at::Tensor& t, const char* kernel, const char* op) {
  const bool conj = std::strcmp(kernel, "conj_physical") == 0;
  if (t.scalar_type() == at::kComplexHalf && (conj || std::strcmp(kernel, "neg") == 0)) {
    // complex32 is no kernel dtype: negate its float16 (real, imaginary) pairs, or their imaginary
    // halves, through a view of the same storage without the math bits
    at::Tensor plain = t.is_conj() ? t.conj() : t;
    if (plain.is_neg()) plain = plain._neg_view();
    at::Tensor pairs = at::view_as_real(plain);
    return submit_inplace_unary(conj ? pairs.select(-1, 1) : pairs, "neg", op);
  }
  const tpurt_op_def_t* def = tpurt_op_resolve(kernel, "", t.is_complex() ? TPURT_RESOLVE_COMPLEX : 0);
  TORCH_CHECK_NOT_IMPLEMENTED(def, op, ": no ", kernel, " kernel for dtype ", t.scalar_type(), " on the tpu device");
  tpurt_tensor_t d;
  fill_tensor_desc(t, &d, op);
  tpurt_arg_t a[1];
  std::memset(a, 0, sizeof(a));
  a[0].kind = TPURT_ARG_TENSOR;
  a[0].v.tensor = &d;
  tpurt_op_call_t call{kernel, "", 1, a, 1, &d};
  check_status(tpurt_queue_submit_kernel(current_queue(), def, &call), op);
}

namespace {

at::Tensor tpu_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  // Host<->device copies complete before returning, so non_blocking only
  // affects device-to-device copies (which are always queued).
  (void)non_blocking;
  // CPU's copy_ checks these in its TensorIterator; PyTorch hands a tpu copy
  // to _copy_from before building one, so they are made here: the source
  // broadcasts to the destination's shape exactly, the destination has no
  // two elements in one memory location, and the two do not partly overlap.
  if (!self.sizes().equals(dst.sizes())) {
    std::vector<int64_t> shape = at::infer_size(dst.sizes(), self.sizes());
    TORCH_CHECK(dst.sizes().equals(shape), "output with shape ", dst.sizes(), " doesn't match the broadcast shape ",
                c10::IntArrayRef(shape));
  }
  at::assert_no_internal_overlap(dst);
  if (self.device() == dst.device()) at::assert_no_partial_overlap(dst, self);
  if (dst.numel() == 0) return dst;
  bool src_tpu = self.device().type() == kTpu, dst_tpu = dst.device().type() == kTpu;
  if (src_tpu) check_in_storage(self, "aten::copy_");
  if (dst_tpu) check_in_storage(dst, "aten::copy_");
  // Math bits (a lazy conj(), the negative view imag(conj(x)) gives) are
  // settled here, not by PyTorch's fallbacks (registered below): the stored
  // values are copied, then conjugated / negated where the bits differ.
  const bool flip_conj = self.is_conj() != dst.is_conj(), flip_neg = self.is_neg() != dst.is_neg();
  if (dst_tpu && self.is_cpu() && (flip_conj || flip_neg)) {
    at::Tensor v = self.resolve_conj().resolve_neg();  // the values, then as dst stores them
    if (dst.is_conj()) v = v.conj().resolve_conj();
    if (dst.is_neg()) v = v.neg();
    copy_h2d(dst, v);
    return dst;
  }
  if (src_tpu && dst.is_cpu() && (self.is_conj() || self.is_neg())) {
    at::Tensor host = at::empty(self.sizes(), self.options().device(c10::kCPU));
    copy_d2h(host, self);  // the stored values; the host copy_ below applies both tensors' bits
    if (self.is_conj()) host = host.conj();
    if (self.is_neg()) host = host._neg_view();
    dst.copy_(host);
    return dst;
  }
  if (src_tpu && dst_tpu) {
    if (self.device() == dst.device()) {
      submit_device_copy(dst, self, "aten::copy_");
      DeviceScope scope(dst.device().index());
      if (flip_conj) submit_inplace_unary(dst, "conj_physical", "aten::copy_");
      if (flip_neg) submit_inplace_unary(dst, "neg", "aten::copy_");
    } else {
      at::Tensor host = at::empty(self.sizes(), self.options().device(c10::kCPU));
      tpu_copy_from(self, host, false);  // the values, math bits applied
      tpu_copy_from(host, dst, false);
    }
  } else if (dst_tpu && self.is_cpu()) {
    copy_h2d(dst, self);
  } else if (src_tpu && dst.is_cpu()) {
    copy_d2h(dst, self);
  } else {
    TORCH_CHECK(false, "copy between ", self.device(), " and ", dst.device(), " is not supported by the tpu backend");
  }
  return dst;
}

at::Tensor tpu_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  tpu_resize_(dst, self.sizes(), std::nullopt);
  return tpu_copy_from(self, dst, false);
}

// The value read into a host buffer and made a Scalar as CPU's _local_scalar_dense makes it; the
// dtypes a model's .item() / `if tensor:` reads take no host tensor (its allocation and a second
// dispatch of item() were 3,500 of the 4,100 host instructions of a read; generate() reads the
// device twice a token). Other dtypes are read through a host tensor.
std::optional<at::Scalar> scalar_from_bytes(c10::ScalarType t, const void* p) {
  switch (t) {
    case c10::kFloat: return at::Scalar(*static_cast<const float*>(p));
    case c10::kDouble: return at::Scalar(*static_cast<const double*>(p));
    case c10::kHalf: return at::Scalar(*static_cast<const c10::Half*>(p));
    case c10::kBFloat16: return at::Scalar(*static_cast<const c10::BFloat16*>(p));
    case c10::kLong: return at::Scalar(*static_cast<const int64_t*>(p));
    case c10::kInt: return at::Scalar(*static_cast<const int32_t*>(p));
    case c10::kShort: return at::Scalar(*static_cast<const int16_t*>(p));
    case c10::kChar: return at::Scalar(*static_cast<const int8_t*>(p));
    case c10::kByte: return at::Scalar(*static_cast<const uint8_t*>(p));
    case c10::kBool: return at::Scalar(*static_cast<const bool*>(p));
    default: return std::nullopt;
  }
}

at::Scalar tpu_local_scalar_dense(const at::Tensor& self) {
  check_in_storage(self, "aten::_local_scalar_dense");
  DeviceScope scope(self.device().index());
  alignas(16) unsigned char bytes[16];  // the widest element: complex128
  const size_t size = self.element_size();
  TORCH_CHECK(size <= sizeof bytes, "_local_scalar_dense: ", self.scalar_type(), " elements are wider than ", sizeof bytes,
              " bytes");
  check_status(tpurt_memcpy_d2h(get_device(-1), current_queue(), bytes, self.const_data_ptr(), size),
               "aten::_local_scalar_dense");
  if (std::optional<at::Scalar> value = scalar_from_bytes(self.scalar_type(), bytes)) return *value;
  at::Tensor host = at::empty({}, self.options().device(c10::kCPU));
  std::memcpy(host.data_ptr(), bytes, size);
  return host.item();
}

void tpu_record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kTpu, "record_stream: expected a tpu stream, got ", stream);
  const void* ptr = self.storage().data();
  if (!ptr) return;
  check_status(tpurt_memory_record_queue(get_device(stream.device_index()), const_cast<void*>(ptr),
                                         queue_for_stream(stream)),
               "record_stream");
}

// ---- ops whose output size depends on the data: count, wait, allocate, fill ----

at::Tensor tpu_nonzero(const at::Tensor& self) {
  static const tpurt_op_def_t* def = tpurt_op_resolve("nonzero", "", 0);
  if (!def) {
    TORCH_CHECK_NOT_IMPLEMENTED(cpu_fallback_enabled(),
                                "The operator 'aten::nonzero' is not implemented for the tpu device yet. Set "
                                "TORCH_TPU_CPU_FALLBACK=1 to run unsupported operators on the CPU (slow).");
    TORCH_WARN_ONCE("aten::nonzero runs on the CPU for the tpu device (TORCH_TPU_CPU_FALLBACK=1)");
    return at::nonzero(self.cpu()).to(self.device());
  }
  TORCH_CHECK(self.dim() <= TPURT_MAX_DIMS, "nonzero: at most ", TPURT_MAX_DIMS, " dimensions");
  int64_t count = at::count_nonzero(self).item<int64_t>();
  DeviceScope scope(self.device().index());
  at::Tensor out = empty_tpu_contiguous({count, self.dim()}, c10::kLong);
  if (count == 0) return out;
  tpurt_tensor_t in_desc, out_desc;
  fill_tensor_desc(self, &in_desc, "aten::nonzero");
  fill_tensor_desc(out, &out_desc, "aten::nonzero");
  tpurt_arg_t a;
  std::memset(&a, 0, sizeof(a));
  a.kind = TPURT_ARG_TENSOR;
  a.v.tensor = &in_desc;
  tpurt_op_call_t call{"nonzero", "", 1, &a, 1, &out_desc};
  check_status(tpurt_queue_submit_kernel(current_queue(), def, &call), "aten::nonzero");
  return out;
}

at::Tensor& tpu_nonzero_out(const at::Tensor& self, at::Tensor& out) {
  // CPU's check and words, before any work is queued
  TORCH_CHECK(out.scalar_type() == c10::kLong, "nonzero: Expected out tensor to have scalar type Long but got scalar type",
              out.scalar_type());
  at::Tensor r = tpu_nonzero(self);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

at::Tensor tpu_masked_select(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == c10::kBool, "masked_select: expected BoolTensor for mask");
  auto expanded = at::expand_outplace(self, mask);
  at::Tensor s = std::get<0>(expanded)->reshape(-1);
  at::Tensor m = std::get<1>(expanded)->reshape(-1);
  at::Tensor idx = tpu_nonzero(m).select(1, 0);
  c10::List<std::optional<at::Tensor>> indices;
  indices.push_back(idx);
  return at::index(s, indices);
}

at::Tensor& tpu_masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  // CPU's checks: out's elements distinct, out sharing no memory with the inputs
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, mask);
  at::Tensor r = tpu_masked_select(self, mask);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

bool tpu_equal(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(), "Cannot compare two tensors on different devices. Got: ",
              self.device(), " and ", other.device());
  if (!self.sizes().equals(other.sizes())) return false;
  if (self.numel() == 0) return true;
  return at::eq(self, other).all().item<bool>();
}

bool tpu_is_set_to(const at::Tensor& self, const at::Tensor& other) {
  return self.storage().unsafeGetStorageImpl() == other.storage().unsafeGetStorageImpl() &&
         self.storage_offset() == other.storage_offset() && self.sizes().equals(other.sizes()) &&
         self.strides().equals(other.strides());
}

}  // namespace
}  // namespace torch_tpu

// _copy_from settles conj/neg bits itself (tpu_copy_from): the math-bit
// fallbacks would resolve them with a clone, which copies through _copy_from
// again, forever.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace torch_tpu;
  m.impl("empty.memory_format", TORCH_FN(tpu_empty));
  m.impl("empty_strided", TORCH_FN(tpu_empty_strided));
  m.impl("as_strided", TORCH_FN(tpu_as_strided));
  m.impl("view", TORCH_FN(tpu_view));
  m.impl("_reshape_alias", TORCH_FN(tpu_reshape_alias));
  m.impl("resize_", TORCH_FN(tpu_resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(tpu_set_storage));
  m.impl("set_.source_Storage", TORCH_FN(tpu_set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(tpu_set_source_tensor));
  m.impl("set_", TORCH_FN(tpu_set_empty));
  m.impl("_copy_from", TORCH_FN(tpu_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(tpu_copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(tpu_local_scalar_dense));
  m.impl("record_stream", TORCH_FN(tpu_record_stream));
  m.impl("nonzero", TORCH_FN(tpu_nonzero));
  m.impl("nonzero.out", TORCH_FN(tpu_nonzero_out));
  m.impl("masked_select", TORCH_FN(tpu_masked_select));
  m.impl("masked_select.out", TORCH_FN(tpu_masked_select_out));
  m.impl("equal", TORCH_FN(tpu_equal));
  m.impl("is_set_to", TORCH_FN(tpu_is_set_to));
}
