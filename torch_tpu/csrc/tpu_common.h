// Shared by the torch_tpu C++ layer: the runtime headers (made C++-safe), the
// mapping of runtime statuses onto PyTorch exceptions, and the small set of
// device/stream/generator helpers the other translation units call.
// Only c10/ATen core headers here: this is included by every TU.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

// dtype.h uses C11's _Static_assert, which C++ spells static_assert.
#ifndef _Static_assert
#define TORCH_TPU_UNDEF_STATIC_ASSERT
#define _Static_assert static_assert
#endif
#include "tpurt/tpurt.h"
#ifdef TORCH_TPU_UNDEF_STATIC_ASSERT
#undef _Static_assert
#undef TORCH_TPU_UNDEF_STATIC_ASSERT
#endif

namespace torch_tpu {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

// ---- runtime and errors ----

// tpurt_init once per process; throws RuntimeError with the runtime's message.
void ensure_init();
// True once tpurt_init has succeeded (never initializes).
bool is_initialized();
// Number of chips; 0 when the runtime cannot start (never throws).
int device_count_noexcept();
// The chip for a device index (-1 = current); initializes the runtime.
tpurt_device_t* get_device(c10::DeviceIndex index);
c10::DeviceIndex current_device_index();
void set_current_device_index(c10::DeviceIndex index);

// Consumes `status` and throws the PyTorch exception matching its code
// (RESOURCE_EXHAUSTED -> OutOfMemoryError, OUT_OF_RANGE -> IndexError,
// UNIMPLEMENTED -> NotImplementedError, others -> RuntimeError). `what` is
// prefixed to the message ("aten::add.Tensor: ...").
[[noreturn]] void throw_status(tpurt_status_t status, const char* what);
inline void check_status(tpurt_status_t status, const char* what) {
  if (TPURT_UNLIKELY(status != nullptr)) throw_status(status, what);
}

// Installs the runtime's host hooks (host_hooks.cpp): issuer threads, Ctrl-C.
void install_host_hooks();
// Re-raises the Python exception a signal handler raised while the runtime
// waited (KeyboardInterrupt), if one is kept; returns otherwise.
void raise_pending_interrupt();

// Makes `index` the current device for a scope (-1: leave it).
struct DeviceScope {
  c10::DeviceIndex saved;
  explicit DeviceScope(c10::DeviceIndex index) : saved(current_device_index()) {
    if (index >= 0 && index != saved) set_current_device_index(index);
  }
  ~DeviceScope() {
    if (current_device_index() != saved) set_current_device_index(saved);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
};

// ---- streams (runtime queues) ----

// The queue behind a c10::Stream of this backend (id 0 = default queue).
tpurt_queue_t* queue_for_stream(const c10::Stream& stream);
// The current thread's current queue on the device (-1 = current device).
tpurt_queue_t* current_queue(c10::DeviceIndex index = -1);

// ---- memory ----

c10::Allocator* device_allocator();
// Fresh tpu tensors on the current device, straight from the allocator (no
// dispatcher round trip).
at::Tensor empty_tpu(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype);
at::Tensor empty_tpu_contiguous(c10::IntArrayRef sizes, c10::ScalarType dtype);
// Grows/shrinks a storage's bytes, keeping the first min(old, new) bytes
// (a stream-ordered device-to-device copy).
void resize_storage_bytes(c10::StorageImpl* storage, size_t new_bytes);

// ---- random numbers ----

const at::Generator& default_generator(c10::DeviceIndex index);
// Reserves `count` Philox counter values (rounded up to a multiple of 4) from
// a tpu generator; returns the key and the first reserved offset.
tpurt_rng_t generator_reserve(const at::Generator& gen, uint64_t count);

// ---- the generic op path (fallback*.cpp) ----

bool cpu_fallback_enabled();
void set_cpu_fallback_enabled(bool enabled);
struct MetaCacheStats {
  uint64_t hits, misses, size;
};
MetaCacheStats meta_cache_stats();
// Registers the fallback directly for structured ops with a C kernel (fallback_op_info.cpp).
void register_direct_structured_ops();
size_t direct_structured_op_count();

// Maps a tpu dtype; throws NotImplementedError naming `op` for others.
tpurt_dtype_t to_tpurt_dtype(c10::ScalarType type, const char* op);
// The inverse (Undefined for TPURT_DTYPE_INVALID).
c10::ScalarType from_tpurt_dtype(tpurt_dtype_t dtype);
// Throws RuntimeError (CPU's setStorage message) when t's view reaches past
// the end of its storage: a storage resized smaller under it, or a view an
// unchecked op made. No kernel or copy may touch bytes the tensor does not own.
void check_in_storage(const at::TensorBase& t, const char* op);
// Fills a kernel tensor descriptor (data = data_ptr()); checks the view lies in its storage.
void fill_tensor_desc(const at::TensorBase& t, tpurt_tensor_t* out, const char* op);
// fill_tensor_desc's body for callers that have already checked t's dims (at most
// TPURT_MAX_DIMS) and mapped its dtype: the unboxed front, per op. `check_storage` false only
// for a tensor the caller has just allocated.
inline void fill_tensor_desc_as(const at::TensorBase& t, tpurt_dtype_t dtype, bool check_storage,
                                tpurt_tensor_t* out, const char* op) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const int64_t ndim = impl->dim();
  // A contiguous tensor fits its storage when its offset plus its elements do (check_in_storage
  // raises with the full message when they do not); any other layout gets the whole check.
  if (check_storage) {
    const int64_t numel = impl->numel();
    if (!impl->is_contiguous() ||
        (numel > 0 && static_cast<size_t>(impl->storage_offset() + numel) * impl->itemsize() >
                          (impl->has_storage() ? impl->storage().nbytes() : 0)))
      check_in_storage(t, op);
  }
  out->data = impl->storage().data() == nullptr ? nullptr : t.data_ptr();
  out->dtype = dtype;
  out->ndim = static_cast<int32_t>(ndim);
  const int64_t* sizes = impl->sizes().data();
  const int64_t* strides = impl->strides().data();
  for (int64_t i = 0; i < ndim; ++i) {
    out->sizes[i] = sizes[i];
    out->strides[i] = strides[i];
  }
}
// Queues the "copy" kernel dst <- src (same device; broadcasting and dtype
// conversion included), or a plain byte copy when no kernel is registered and
// the layouts allow it. Throws if neither can do it.
void submit_device_copy(const at::TensorBase& dst, const at::TensorBase& src, const char* op);
// t <- kernel(t) in place with a unary kernel ("conj_physical", "neg") on the stored values.
void submit_inplace_unary(const at::Tensor& t, const char* kernel, const char* op);

}  // namespace torch_tpu
