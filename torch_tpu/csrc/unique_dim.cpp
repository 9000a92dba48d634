// torch.ops.tpu._unique_dim_order(rows) -> perm: the order in which PyTorch CPU's
// unique_dim visits the slices (rows) of its input, from the C kernel
// _tpu_unique_dim_order (runtime/ops/reduce/unique_dim.c: libstdc++'s std::sort
// with CPU's comparator, so slices holding NaN come out in CPU's order too).
// torch_tpu/decompositions.py's unique_dim builds its outputs from it.
#include <cstring>

#include <torch/library.h>

#include "tpu_common.h"

namespace torch_tpu {
namespace {

at::Tensor tpu_unique_dim_order(const at::Tensor& rows) {
  constexpr const char* op = "tpu::_unique_dim_order";
  TORCH_CHECK(rows.device().type() == kTpu, op, ": expected a tpu tensor, got one on ", rows.device());
  TORCH_CHECK(rows.dim() == 2, op, ": expected a 2-D tensor of slices, got ", rows.dim(), " dimensions");
  TORCH_CHECK(!rows.is_complex(), op, ": complex slices have no order (unique_dim on CPU refuses them too)");
  static const tpurt_op_def_t* def = tpurt_op_resolve("_tpu_unique_dim_order", "", 0);
  TORCH_CHECK(def, op, ": the runtime has no _tpu_unique_dim_order kernel");
  TORCH_CHECK_NOT_IMPLEMENTED(tpurt_op_supports_dtype(def, to_tpurt_dtype(rows.scalar_type(), op)), op,
                              ": dtype ", rows.scalar_type(), " is not supported on the tpu device");
  DeviceScope scope(rows.device().index());
  at::Tensor in = rows.contiguous();
  at::Tensor out = empty_tpu_contiguous({rows.size(0)}, c10::kLong);
  if (rows.size(0) == 0) return out;
  tpurt_tensor_t in_desc, out_desc;
  fill_tensor_desc(in, &in_desc, op);
  fill_tensor_desc(out, &out_desc, op);
  tpurt_arg_t a;
  std::memset(&a, 0, sizeof(a));
  a.kind = TPURT_ARG_TENSOR;
  a.v.tensor = &in_desc;
  tpurt_op_call_t call{"_tpu_unique_dim_order", "", 1, &a, 1, &out_desc};
  check_status(tpurt_queue_submit_kernel(current_queue(), def, &call), op);
  return out;
}

}  // namespace
}  // namespace torch_tpu

// A fragment, so other files may add ops to the tpu namespace too.
TORCH_LIBRARY_FRAGMENT(tpu, m) {
  m.def("_unique_dim_order(Tensor rows) -> Tensor");
}

TORCH_LIBRARY_IMPL(tpu, PrivateUse1, m) {
  m.impl("_unique_dim_order", TORCH_FN(torch_tpu::tpu_unique_dim_order));
}
