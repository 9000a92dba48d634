// Sparse tensors on the tpu device are not supported. PyTorch sends the ops
// that make or read a sparse tpu tensor (torch.sparse_coo_tensor(...,
// device="tpu"), .to_sparse(), coalesce, _values, ...) to the
// SparsePrivateUse1 / SparseCsrPrivateUse1 keys, where without a kernel the
// dispatcher's error names a backend ("Sparsetpu") rather than what is
// missing; this fallback names the op and the layout instead (as
// quantized.cpp does for quantized tensors).
#include <torch/library.h>

namespace {

void sparse_fallback(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op.schema().operator_name(),
                              ": sparse tensors (layouts torch.sparse_coo, sparse_csr, sparse_csc, sparse_bsr, "
                              "sparse_bsc) are not supported on the tpu device. Keep sparse tensors on the CPU, or "
                              "use a dense (torch.strided) tensor on tpu.");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_fallback>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_fallback>());
}
