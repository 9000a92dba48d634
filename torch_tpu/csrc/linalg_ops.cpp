// linalg ops whose CPU/CUDA kernels check more at the call than the device
// kernel can: the checks are PyTorch's own (ATen/native/LinearAlgebraUtils.h,
// or the same condition and words), then the op runs through the generic path.
#include <ATen/ATen.h>
#include <ATen/native/LinearAlgebraUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "fallback.h"

namespace torch_tpu {
namespace {

// linalg_eig_out on CPU and CUDA starts with TORCH_CHECK(input.isfinite().all().item<bool>()): a read of
// the data, a sync on both. The same check here (eig is a host-side LAPACK call on CUDA too), so inf/nan
// raise at the call in every eager mode, not at the next sync.
void eig_check_finite(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  const at::Tensor& self = (*stack)[stack->size() - n].toTensor();
  TORCH_CHECK(self.isfinite().all().item<bool>(), "torch.linalg.eig: input tensor should not contain infs or NaNs.");
  tpu_fallback(op, stack);
}

// linalg_eigvals.out as CPU's linalg_eigvals_out: its checks, then _linalg_eigvals into out.
at::Tensor& linalg_eigvals_out_tpu(const at::Tensor& self, at::Tensor& out) {
  at::native::squareCheckInputs(self, "linalg.eigvals");
  at::native::checkLinalgCompatibleDtype("torch.linalg.eigvals", out.scalar_type(),
                                         c10::toComplexType(self.scalar_type()), "eigenvalues");
  at::native::checkSameDevice("torch.linalg.eigvals", out, self, "eigenvalues");
  at::Tensor values = at::_linalg_eigvals(self);
  at::native::resize_output(out, values.sizes());
  out.copy_(values);
  return out;
}

}  // namespace
}  // namespace torch_tpu

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* op : {"linalg_eig", "linalg_eig.out", "_linalg_eigvals"})
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&torch_tpu::eig_check_finite>());
  m.impl("linalg_eigvals.out", TORCH_FN(torch_tpu::linalg_eigvals_out_tpu));
}
