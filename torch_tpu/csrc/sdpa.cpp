// scaled_dot_product_attention's backend choice for the tpu device. SDPA asks
// _fused_sdp_choice_stub per device type; PyTorch registers no PrivateUse1
// entry, so without this every tpu SDPA ran the unfused math path (a seq x seq
// matrix and a dozen ops). Returning flash_attention sends non-CUDA devices to
// aten::_scaled_dot_product_flash_attention_for_cpu, whose autograd formula
// calls its _backward op: both are C kernels in runtime/ops/nn/attention.c,
// reached through the boxed fallback. Only a C++ stub registration can do this.
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <torch/library.h>

namespace torch_tpu {
namespace {

bool fused_dtype(c10::ScalarType t) {
  return t == c10::kFloat || t == c10::kBFloat16 || t == c10::kHalf;
}

// What the fused kernel takes: 4-D dense q/k/v of one 16/32-bit float dtype, no
// dropout, value head dim equal to the query's (its output is shaped like the
// query), kv heads dividing query heads (grouped-query attention), an optional
// mask broadcastable to (batch, heads, L, S) that needs no gradient, not together with is_causal.
// Everything else goes to the math path, which raises the errors CPU raises.
int64_t tpu_fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                             std::optional<double> scale, bool enable_gqa) {
  const auto math = static_cast<int64_t>(at::SDPBackend::math);
  if (!at::globalContext().userEnabledFlashSDP()) return math;  // sdpa_kernel(...) without FLASH
  if (q.is_nested() || k.is_nested() || v.is_nested()) return math;
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return math;
  if (!fused_dtype(q.scalar_type()) || k.scalar_type() != q.scalar_type() ||
      v.scalar_type() != q.scalar_type())
    return math;
  if (dropout_p > 0.0) return math;
  // Symbolic sizes (torch.compile with dynamic shapes) are compared as such: reading them as
  // ints would specialize the graph to this call's batch and sequence length.
  const c10::SymInt B = q.sym_size(0), Hq = q.sym_size(1), L = q.sym_size(2), E = q.sym_size(3);
  const c10::SymInt Hk = k.sym_size(1), S = k.sym_size(2);
  if (k.sym_size(0) != B || v.sym_size(0) != B || v.sym_size(1) != Hk || v.sym_size(2) != S ||
      k.sym_size(3) != E || v.sym_size(3) != E)
    return math;
  if (Hk <= 0 || Hq % Hk != 0 || (Hq != Hk && !enable_gqa)) return math;
  if (L == 0 || S == 0 || E == 0) return math;
  if (mask.has_value() && mask->defined()) {
    // the fused op has no gradient for the mask (T5's learned position bias needs one)
    if (is_causal || mask->dim() > 4 || mask->requires_grad()) return math;
    const auto mt = mask->scalar_type();
    if (mt != c10::kBool && !at::isFloatingType(mt)) return math;
  }
  return static_cast<int64_t>(at::SDPBackend::flash_attention);
}

}  // namespace
}  // namespace torch_tpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_tpu::tpu_fused_sdp_choice)
}  // namespace at::native

// The op form (torch._fused_sdp_choice) answers the same for tpu tensors.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", &torch_tpu::tpu_fused_sdp_choice);
}
