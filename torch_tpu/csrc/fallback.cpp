// The one generic path from ATen into the C op table: a boxed fallback for
// every op of the PrivateUse1 ("tpu") key that has no native registration.
// tpu_fallback runs the stages of fallback.h in order: check the call against
// its kernel, work out and allocate the outputs (PyTorch's own meta functions,
// cached per input signature; the schema's alias annotations), marshal the
// arguments into a tpurt_op_call_t and queue it on the current stream. A call
// the device cannot run goes to the CPU only when the user opted in.
#include <cstring>
#include <mutex>
#include <unordered_set>

#include <ATen/native/CPUFallback.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/_fused_rms_norm.h>
#include <ATen/ops/_linalg_check_errors.h>
#include <ATen/ops/addr_native.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/one_hot_native.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/empty_strided.h>
#include <torch/library.h>

#include "fallback.h"

namespace torch_tpu {

// ============================== CPU fallback ==============================

namespace {

// TORCH_TPU_CPU_FALLBACK is read here only (torch.tpu.set_cpu_fallback changes it).
std::atomic<bool> g_cpu_fallback{[] {
  const char* e = std::getenv("TORCH_TPU_CPU_FALLBACK");
  return e && *e && std::strcmp(e, "0") != 0;
}()};
std::mutex g_warned_mu;
std::unordered_set<std::string> g_warned;

void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack, const fallback::OpInfo& info,
                const char* why) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(g_warned_mu);
    first = g_warned.insert(info.full_name).second;
  }
  if (first) {
    TORCH_WARN("The operator '", info.full_name, "' ", why,
               " on the tpu device; it runs on the CPU instead (TORCH_TPU_CPU_FALLBACK=1), "
               "which copies its tensors and is slow.");
  }
  at::native::cpu_fallback(op, stack, /*error_on_views=*/false);
}

}  // namespace

bool cpu_fallback_enabled() { return g_cpu_fallback.load(std::memory_order_relaxed); }
void set_cpu_fallback_enabled(bool enabled) { g_cpu_fallback.store(enabled); }

// ================================ the fallback ================================

namespace {

// The call's buffers: one CallBuf per thread and nesting depth (PyTorch's
// structured wrapper, run on a signature's first call, calls the .out op back
// into the fallback while the outer call holds its buffer).
thread_local int t_depth = 0;
thread_local std::vector<std::unique_ptr<fallback::CallBuf>> t_bufs;

struct BufScope {
  fallback::CallBuf* buf;
  BufScope() {
    if (static_cast<int>(t_bufs.size()) <= t_depth) t_bufs.push_back(std::make_unique<fallback::CallBuf>());
    buf = t_bufs[t_depth++].get();
    buf->clear();
  }
  ~BufScope() { --t_depth; }
  BufScope(const BufScope&) = delete;
  BufScope& operator=(const BufScope&) = delete;
};

bool is_chalf(const c10::IValue& v) {
  if (v.isTensor()) return v.toTensor().defined() && v.toTensor().scalar_type() == at::kComplexHalf;
  if (v.isList()) {
    for (const auto& e : v.toListRef())
      if (is_chalf(e)) return true;
  }
  return false;
}

// complex32 -> complex64 and, beside it, float16 -> float32 (complex(float16, float16) is complex32)
at::Tensor widen_half(const at::Tensor& t) {
  if (!t.defined()) return t;
  if (t.scalar_type() == at::kComplexHalf) return t.to(at::kComplexFloat);
  if (t.scalar_type() == at::kHalf) return t.to(at::kFloat);
  return t;
}

c10::IValue widen_chalf(const c10::IValue& v, const fallback::ArgClass k) {
  if (v.isTensor()) return widen_half(v.toTensor());
  if (k == fallback::ArgClass::kDtype && v.isInt() && v.toInt() == static_cast<int64_t>(at::kComplexHalf))
    return c10::IValue(static_cast<int64_t>(at::kComplexFloat));
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(widen_half(t));
    return out;
  }
  if (v.isList() && (k == fallback::ArgClass::kOptTensorList)) {
    c10::List<std::optional<at::Tensor>> out;
    for (const auto& e : v.toListRef())
      out.push_back(e.isTensor() ? std::optional<at::Tensor>(widen_chalf(e, k).toTensor()) : std::nullopt);
    return out;
  }
  return v;
}

// complex32 (ComplexHalf) is no kernel dtype: a call with complex32 tensors (or dtype=complex32)
// runs in complex64, its float16 tensors in float32, and the results are rounded back where the
// op's result is complex32 or float16 (PyTorch's meta function says which); a written argument
// (out=, in place) gets the result copied back. True when it ran.
bool run_widened_chalf(const c10::OperatorHandle& op, torch::jit::Stack* stack, const fallback::Call& c,
                       bool chalf_result) {
  using namespace fallback;
  const OpInfo& info = c.info;
  bool any = chalf_result;
  for (size_t i = 0; i < info.num_args; ++i)
    any = any || is_chalf(c.arg(i)) ||
          (info.arg_class[i] == ArgClass::kDtype && c.arg(i).isInt() &&
           c.arg(i).toInt() == static_cast<int64_t>(at::kComplexHalf));
  if (!any || info.unsupported_ret) return false;
  // the result dtypes of the complex32 call (and CPU's errors for arguments PyTorch refuses)
  std::vector<c10::ScalarType> want;
  {
    auto to_meta = [](const at::Tensor& t) {
      if (!t.defined() || (t.is_cpu() && t.unsafeGetTensorImpl()->is_wrapped_number())) return t;
      return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
    };
    torch::jit::Stack meta;
    for (const auto& a : c.args()) {
      if (a.isTensor()) {
        meta.push_back(to_meta(a.toTensor()));
      } else if (a.isTensorList()) {
        c10::List<at::Tensor> l;
        for (const at::Tensor& t : a.toTensorList()) l.push_back(to_meta(t));
        meta.push_back(l);
      } else {
        meta.push_back(a.isGenerator() ? c10::IValue() : a);
      }
    }
    try {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
      for (size_t r = 0; r < info.rets.size() && r < meta.size(); ++r)
        want.push_back(meta[r].isTensor() ? meta[r].toTensor().scalar_type() : c10::ScalarType::Undefined);
    } catch (const c10::NotImplementedError&) {
    } catch (const c10::Error& e) {
      std::string msg = e.what_without_backtrace();
      if (msg.find("meta") == std::string::npos && msg.find("Meta") == std::string::npos) throw;
    }
  }
  torch::jit::Stack wide;
  for (size_t i = 0; i < info.num_args; ++i) wide.push_back(widen_chalf(c.arg(i), info.arg_class[i]));
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), &wide);
  // written complex32 (and float16) arguments take their widened results
  for (size_t i = 0; i < info.num_args; ++i) {
    if (!info.arg_written[i] || !c.arg(i).isTensor() || !c.arg(i).toTensor().defined()) continue;
    at::Tensor orig = c.arg(i).toTensor();
    if (orig.scalar_type() != at::kComplexHalf && orig.scalar_type() != at::kHalf) continue;
    for (size_t r = 0; r < info.rets.size(); ++r)
      if (info.rets[r].kind == RetKind::kWritten && info.rets[r].arg == static_cast<int>(i) && wide[r].isTensor()) {
        const at::Tensor& res = wide[r].toTensor();
        if (!orig.sizes().equals(res.sizes())) orig.resize_(res.sizes());
        orig.copy_(res);
        wide[r] = orig;
      }
  }
  for (size_t r = 0; r < info.rets.size() && r < wide.size(); ++r) {
    if (info.rets[r].kind != RetKind::kFresh || !wide[r].isTensor() || r >= want.size()) continue;
    const at::Tensor& t = wide[r].toTensor();
    if (t.defined() && (want[r] == at::kComplexHalf || want[r] == at::kHalf) && t.scalar_type() != want[r])
      wide[r] = t.to(want[r]);
  }
  torch::jit::drop(*stack, info.num_args);
  for (auto& r : wide) stack->push_back(std::move(r));
  return true;
}

// A written tensor with a math bit (a conj() view as out=, or as addmm_'s self): PyTorch's conj/neg
// fallbacks let mm, addmm, bmm, baddbmm, dot and solve_triangular through with the bits set, because
// CPU's kernels read them; ours read and write stored values. As MathBitsFallback's linalg path does:
// each such tensor's stored values become its values (bit cleared, then conjugated / negated in
// place by the device's kernels), the call runs, and the bit is set back over the values made
// stored again. If the call throws, the tensor keeps its values without the bit.
void run_with_written_math_bits(const c10::OperatorHandle& op, torch::jit::Stack* stack, const fallback::Call& c) {
  const fallback::OpInfo& info = c.info;
  std::vector<std::pair<at::Tensor, int>> flipped;  // the tensor; 1 conj, 2 neg, 3 both
  for (size_t i = 0; i < info.num_args; ++i) {
    if (!info.arg_written[i] || !c.arg(i).isTensor()) continue;
    at::Tensor t = c.arg(i).toTensor();
    if (!t.defined() || !(t.is_conj() || t.is_neg())) continue;
    const int bits = (t.is_conj() ? 1 : 0) | (t.is_neg() ? 2 : 0);
    t._set_conj(false);
    t._set_neg(false);
    DeviceScope scope(t.device().index());
    if (bits & 1) submit_inplace_unary(t, "conj_physical", c.name);
    if (bits & 2) submit_inplace_unary(t, "neg", c.name);
    flipped.emplace_back(t, bits);
  }
  tpu_fallback(op, stack);
  for (auto& [t, bits] : flipped) {
    DeviceScope scope(t.device().index());
    if (bits & 1) submit_inplace_unary(t, "conj_physical", c.name);
    if (bits & 2) submit_inplace_unary(t, "neg", c.name);
    t._set_conj(bits & 1);
    t._set_neg(bits & 2);
  }
}

}  // namespace

void tpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  using namespace fallback;
  const Call c(op, get_op_info(op), stack);
  if (TPURT_UNLIKELY(c.info.empty_fill_noop) && c.arg(0).isTensor() && c.arg(0).toTensor().numel() == 0) {
    if (c.info.precheck) c.info.precheck(c);  // the parameters' checks still apply
    at::Tensor self = c.arg(0).toTensor();
    torch::jit::drop(*stack, c.info.num_args);
    stack->push_back(std::move(self));
    return;
  }
  if (TPURT_UNLIKELY(c.info.mask_put) && put_mask_as_masked_fill(c)) {
    at::Tensor self = c.arg(0).toTensor();
    torch::jit::drop(*stack, c.info.num_args);
    stack->push_back(std::move(self));
    return;
  }
  try {
    const Checked k = check_call(c);
    if (TPURT_UNLIKELY(k.written_math_bits)) return run_with_written_math_bits(op, stack, c);
    DeviceScope device_scope(k.device);
    const c10::DeviceIndex device = k.device >= 0 ? k.device : current_device_index();
    if (TPURT_UNLIKELY(c.info.meta_via == OpInfo::MetaVia::kPowScalarOut) && answer_pow_without_kernel(c)) return;
    if (TPURT_UNLIKELY(c.info.repeat_interleave)) settle_repeat_interleave_size(c);

    BufScope scope;
    CallBuf& b = *scope.buf;
    std::shared_ptr<const MetaEntry> meta = output_layouts(c, b.key);
    if (!meta) return;  // a direct structured op ran through PyTorch's wrapper
    Outputs outs;
    make_outputs(c, *meta, &outs);

    if (!c.info.all_views) {
      CopyBacks copy_back;
      const tpurt_op_def_t* def = check_outputs_kernel(c, k, outs, &copy_back);
      KeepAlive keep_alive;
      tpurt_op_call_t call;
      marshal_call(c, def, device, outs, b, &keep_alive, &copy_back, &call);
      submit_call(c, def, device, call, copy_back);
    }
    torch::jit::drop(*stack, c.info.num_args);
    for (auto& r : outs.results) stack->push_back(std::move(r));
  } catch (const Unsupported& u) {
    if (u.dtype && run_widened_chalf(op, stack, c, u.chalf)) return;
    if (cpu_fallback_enabled()) return run_on_cpu(op, stack, c.info, u.why);
    // A dtype CPU refuses too (maximum or heaviside of complex tensors): CPU's error, from PyTorch's meta function.
    if (u.dtype) raise_meta_refusal(c);
    TORCH_CHECK_NOT_IMPLEMENTED(false, u.message);
  }
}

at::Tensor rms_norm_tpu(const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                       const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  // CPU's own argument checks (shapes of normalized_shape, weight, input)
  at::native::_check_rms_norm_inputs_symint(input, normalized_shape, weight.value_or(at::Tensor()));
  return std::get<0>(at::_fused_rms_norm(input, C10_AS_INTARRAYREF_SLOW(normalized_shape), weight, eps));
}

// The linalg ops with check_errors= (linalg_cholesky_ex, linalg_inv_ex, linalg_lu_factor_ex,
// linalg_ldl_factor_ex, _linalg_solve_ex): CPU runs the factorization, then checks its info output
// (at::_linalg_check_errors: it reads info, and raises torch.linalg.LinAlgError at the call). So here:
// the kernel runs with check_errors=false, then the same check (which waits for info: a sync, as on
// CPU and CUDA, only where the caller asked for the check).
void tpu_linalg_check_errors(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const size_t n = args.size(), base = stack->size() - n;
  size_t ce = n;
  for (size_t i = 0; i < n; ++i)
    if (args[i].name() == "check_errors") ce = i;
  const bool check = ce < n && (*stack)[base + ce].toBool();
  const int64_t a_dim = (*stack)[base].toTensor().dim();
  if (check) (*stack)[base + ce] = c10::IValue(false);
  tpu_fallback(op, stack);
  if (!check) return;
  const std::string& name = op.schema().name();
  const char* api = name == "aten::linalg_cholesky_ex"     ? "linalg.cholesky_ex"
                    : name == "aten::linalg_inv_ex"        ? "linalg.inv_ex"
                    : name == "aten::linalg_lu_factor_ex"  ? "torch.linalg.lu_factor_ex"
                    : name == "aten::linalg_ldl_factor_ex" ? "torch.linalg.ldl_factor_ex"
                                                           : "torch.linalg.solve_ex";
  at::_linalg_check_errors(stack->back().toTensor(), api, /*is_matrix=*/a_dim == 2);
}

// addr runs as PyTorch's math_addr (its CompositeExplicitAutograd kernel: outer product, mul, add),
// after CPU's scalar checks (addr_out), which math_addr lacks: a bool beta/alpha only for a bool
// result, a floating one not for an integral result.
static void addr_check_scalars(c10::ScalarType dt, const at::Scalar& beta, const at::Scalar& alpha) {
  if (dt != c10::ScalarType::Bool) {
    TORCH_CHECK(!beta.isBoolean(), "Boolean beta only supported for Boolean results.");
    TORCH_CHECK(!alpha.isBoolean(), "Boolean alpha only supported for Boolean results.");
  }
  if (at::isIntegralType(dt, /*includeBool=*/true)) {
    TORCH_CHECK(!beta.isFloatingPoint(), "For integral input tensors, argument beta must not be a floating point ",
                "number.");
    TORCH_CHECK(!alpha.isFloatingPoint(), "For integral input tensors, argument alpha must not be a floating point ",
                "number.");
  }
}
at::Tensor addr_tpu(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2, const at::Scalar& beta,
                    const at::Scalar& alpha) {
  addr_check_scalars(c10::promoteTypes(at::result_type(self, vec1), vec2.scalar_type()), beta, alpha);
  return at::native::math_addr(self, vec1, vec2, beta, alpha);
}
at::Tensor& addr_out_tpu(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2,
                         const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  addr_check_scalars(out.scalar_type(), beta, alpha);
  return at::native::math_addr_out(self, vec1, vec2, beta, alpha, out);
}

// one_hot: ATen's kernel reads max() when num_classes is -1 (a sync on every device) but on
// accelerators leaves a negative class to scatter, whose error then surfaces at some later sync in
// scatter's words (or never, when the result is empty). min and max come back in the same single
// read here, so CPU's check is made at the call, in CPU's words; the rest is ATen's kernel. Fake and
// functional tensors (torch.compile's tracing) go straight to ATen's, which has a branch for them.
at::Tensor one_hot_tpu(const at::Tensor& self, int64_t num_classes) {
  if (num_classes == -1 && self.scalar_type() == at::kLong && self.numel() > 0 &&
      !self.key_set().has_any(c10::DispatchKeySet(c10::DispatchKey::Python)) &&
      !self.key_set().has_any(c10::DispatchKeySet(c10::DispatchKey::Functionalize))) {
    auto [lo, hi] = at::aminmax(self);
    at::Tensor both = at::stack({lo, hi}).cpu();
    const int64_t* v = both.const_data_ptr<int64_t>();
    TORCH_CHECK(v[0] >= 0, "Class values must be non-negative.");
    num_classes = v[1] + 1;
  }
  return at::native::one_hot(self, num_classes);
}

}  // namespace torch_tpu

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torch_tpu::tpu_fallback>());
}

// Ops whose CompositeExplicitAutograd kernel only throws for other backends:
// they need an explicit PrivateUse1 entry to reach the generic path.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", torch::CppFunction::makeFromBoxedFunction<&torch_tpu::tpu_fallback>());
  m.impl("convolution_backward_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&torch_tpu::tpu_fallback>());
  // A direct registration (not the backend fallback) so AutogradPrivateUse1
  // uses _fused_rms_norm's autograd formula (-> _fused_rms_norm_backward)
  // instead of its CompositeImplicitAutograd decomposition.
  m.impl("_fused_rms_norm", torch::CppFunction::makeFromBoxedFunction<&torch_tpu::tpu_fallback>());
  m.impl("rms_norm", TORCH_FN(torch_tpu::rms_norm_tpu));
  // Ops whose CompositeExplicitAutograd kernel decomposes into other kernels
  // while one C kernel does the whole op: native_layer_norm would otherwise
  // run as a batch norm over (1, rows, features), one scalar pass per row.
  // (group norm likewise).
  for (const char* op : {"native_layer_norm", "native_group_norm"})
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&torch_tpu::tpu_fallback>());
  for (const char* op : {"linalg_cholesky_ex", "linalg_cholesky_ex.L", "linalg_inv_ex", "linalg_inv_ex.inverse",
                         "linalg_lu_factor_ex", "linalg_lu_factor_ex.out", "linalg_ldl_factor_ex",
                         "linalg_ldl_factor_ex.out", "_linalg_solve_ex", "_linalg_solve_ex.result"})
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&torch_tpu::tpu_linalg_check_errors>());
  m.impl("addr", TORCH_FN(torch_tpu::addr_tpu));
  m.impl("addr.out", TORCH_FN(torch_tpu::addr_out_tpu));
}

// rms_norm is CompositeImplicitAutograd and would decompose into pow / mean /
// rsqrt / mul on a non-CUDA device; the autograd-key registration routes it
// to the fused kernel while autograd still records _fused_rms_norm.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("rms_norm", TORCH_FN(torch_tpu::rms_norm_tpu));
  m.impl("one_hot", TORCH_FN(torch_tpu::one_hot_tpu));
}
