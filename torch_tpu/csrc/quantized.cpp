// Quantized tensors on the tpu device are not supported. PyTorch sends the
// ops that make or read them (_empty_affine_quantized, quantized kernels) to
// the QuantizedPrivateUse1 key, where without a kernel the dispatcher's error
// names a backend ("Quantizedtpu") rather than what is missing; this fallback
// names the op and the layout instead.
#include <torch/library.h>

namespace {

void quantized_fallback(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op.schema().operator_name(),
                              ": quantized tensors (the affine quantized layout, torch.per_tensor_affine / "
                              "per_channel_affine with qint8, quint8, qint32, quint4x2) are not supported on the "
                              "tpu device. Quantize on the CPU, or keep a floating-point dtype on tpu.");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&quantized_fallback>());
}
