// torchvision's operators on the tpu device (and, where torchvision's own _C
// could not load, on the CPU as well): what the csrc files that register
// torchvision kernels share. vision.cpp holds the schemas, the run-time CPU
// registration and run_vision_kernel; the kernels are C (runtime/ops/vision).
#pragma once

#include <vector>

#include <torch/library.h>

#include "tpu_common.h"

namespace torch_tpu {
namespace vision {

// One argument of a vision kernel call: a tensor (kept alive by the call), an
// int, a double or a bool, in the order the C kernel reads them.
struct KernelArg {
  enum Kind { kTensor, kInt, kDouble, kBool } kind;
  at::Tensor t;
  int64_t i = 0;
  double d = 0.0;
  bool b = false;
  KernelArg(const at::Tensor& tensor) : kind(kTensor), t(tensor) {}  // NOLINT: implicit on purpose
  KernelArg(int64_t v) : kind(kInt), i(v) {}                          // NOLINT
  KernelArg(double v) : kind(kDouble), d(v) {}                        // NOLINT
  KernelArg(bool v) : kind(kBool), b(v) {}                            // NOLINT
};

// Runs the runtime kernel `kernel` ("tv_roi_align") for the torchvision op `op`
// on the device the outputs live on: queued on the current tpu queue for tpu
// tensors (the host returns at once), run to completion on the calling thread
// (plus the runtime's compute threads) for CPU tensors. Every tensor argument
// and output must be on that one device. The first tensor argument's dtype
// must be one the kernel lists (else NotImplementedError naming op and dtype).
void run_vision_kernel(const char* kernel, const char* op, const std::vector<KernelArg>& args,
                       const std::vector<at::Tensor>& outputs);

// TORCH_CHECKs that every tensor is on `device`, naming the op and the argument.
void check_same_device(const char* op, const at::Tensor& first, const char* first_name, const at::Tensor& t,
                       const char* name);

// A function that registers CPU kernels on the run-time torchvision CPU library.
// It runs only where torch_tpu defines torchvision's schemas itself (torchvision's
// _C did not load): a proper CPU torchvision keeps its own CPU kernels.
using CpuRegistrar = void (*)(torch::Library& cpu);
struct CpuRegistration {
  explicit CpuRegistration(CpuRegistrar fn);
};

// Defines torchvision 0.28's schemas in a run-time fragment and registers the CPU
// kernels (idempotent). Called by torch_tpu/_vision.py when torchvision.extension
// finds no _C; returns false when the schemas exist already (another library
// defined them first), in which case nothing is registered.
bool define_ops();

}  // namespace vision
}  // namespace torch_tpu

// In a csrc file: TORCH_TPU_VISION_CPU_IMPL(name, fn) registers fn as the CPU kernel of
// torchvision::name at run time (see CpuRegistration). The PrivateUse1 kernel is
// registered statically with TORCH_LIBRARY_IMPL(torchvision, PrivateUse1, m).
#define TORCH_TPU_VISION_CPU_CAT2(a, b) a##b
#define TORCH_TPU_VISION_CPU_CAT(a, b) TORCH_TPU_VISION_CPU_CAT2(a, b)
#define TORCH_TPU_VISION_CPU_IMPL(name, fn)                                                    \
  static ::torch_tpu::vision::CpuRegistration TORCH_TPU_VISION_CPU_CAT(tpu_vision_cpu_, __LINE__)( \
      [](torch::Library& cpu) { cpu.impl(name, TORCH_FN(fn)); })
