// torchvision's operators (torchvision::nms, roi_align, ...) for torch_tpu.
//
// The tpu kernels are registered statically for PrivateUse1 (TORCH_LIBRARY_IMPL
// may precede the schema). Where torchvision's own _C extension loaded (a CPU
// build of torchvision), that is all: its schemas and CPU kernels stand. Where it
// did not (the only torchvision 0.28.0 wheel on our machines is a CUDA build whose
// _C cannot load beside a CPU torch), torch_tpu/_vision.py calls define_ops(): the
// schemas, exactly torchvision 0.28's, go into a fragment created at run time, and
// the same C kernels are registered for CPU over host memory, so torchvision's
// Python API works on CPU tensors too. Ops with no kernel here (qnms, qroi_align,
// box_iou_rotated) are defined and raise NotImplementedError naming themselves.
#include "vision/vision.h"

#include <cstring>
#include <memory>
#include <mutex>

#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_tpu {
namespace vision {
namespace {

std::vector<CpuRegistrar>& cpu_registrars() {
  static std::vector<CpuRegistrar> fns;
  return fns;
}

// torchvision 0.28's schemas (the strings its _C.so registers).
const char* const kSchemas[] = {
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, SymInt width, int sampling_ratio, "
    "bool aligned) -> Tensor",
    "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width) "
    "-> (Tensor, Tensor)",
    "_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, SymInt width) -> Tensor",
    "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio) -> (Tensor, Tensor)",
    "_ps_roi_align_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, int sampling_ratio, SymInt batch_size, SymInt channels, "
    "SymInt height, SymInt width) -> Tensor",
    "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width) "
    "-> (Tensor, Tensor)",
    "_ps_roi_pool_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, "
    "SymInt width) -> Tensor",
    "deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, SymInt stride_h, "
    "SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, SymInt dilation_w, SymInt groups, "
    "SymInt offset_groups, bool use_mask) -> Tensor",
    "_deform_conv2d_backward(Tensor grad, Tensor input, Tensor weight, Tensor offset, Tensor mask, "
    "Tensor bias, SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, "
    "SymInt dilation_w, SymInt groups, SymInt offset_groups, bool use_mask) -> (Tensor, Tensor, Tensor, "
    "Tensor, Tensor)",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qroi_align(Tensor input, Tensor rois, float input_scale, int input_zero_point, float rois_scale, "
    "int rois_zero_point, float spatial_scale, SymInt pooled_height, SymInt pooled_width, int sampling_ratio, "
    "bool aligned) -> Tensor",
    "box_iou_rotated(Tensor boxes1, Tensor boxes2) -> Tensor",
};

int64_t cuda_version() { return -1; }  // what a torchvision built without CUDA answers

[[noreturn]] void no_kernel(const char* op, const char* what) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "torchvision::", op, " (", what,
                              ") is not implemented by torch_tpu, on the CPU or the tpu device; "
                              "torchvision's own CPU build of this op is not installed");
}

at::Tensor qnms_unimplemented(const at::Tensor&, const at::Tensor&, double) {
  no_kernel("qnms", "nms of quantized boxes");
}
at::Tensor qroi_align_unimplemented(const at::Tensor&, const at::Tensor&, double, int64_t, double, int64_t,
                                    double, c10::SymInt, c10::SymInt, int64_t, bool) {
  no_kernel("qroi_align", "roi_align of a quantized input");
}
at::Tensor box_iou_rotated_unimplemented(const at::Tensor&, const at::Tensor&) {
  no_kernel("box_iou_rotated", "IoU of rotated boxes");
}

std::mutex g_define_mutex;
bool g_defined = false;
std::unique_ptr<torch::Library> g_def_lib;
std::unique_ptr<torch::Library> g_cpu_lib;
std::unique_ptr<torch::Library> g_any_lib;

}  // namespace

CpuRegistration::CpuRegistration(CpuRegistrar fn) { cpu_registrars().push_back(fn); }

bool define_ops() {
  std::lock_guard<std::mutex> lock(g_define_mutex);
  if (g_defined) return true;
  if (c10::Dispatcher::singleton().findSchema({"torchvision::nms", ""}).has_value()) return false;
  g_def_lib = std::make_unique<torch::Library>(torch::Library::FRAGMENT, "torchvision", std::nullopt,
                                               __FILE__, __LINE__);
  for (const char* schema : kSchemas) g_def_lib->def(schema);
  g_def_lib->def("_cuda_version", &cuda_version);
  g_cpu_lib = std::make_unique<torch::Library>(torch::Library::IMPL, "torchvision", c10::DispatchKey::CPU,
                                               __FILE__, __LINE__);
  for (CpuRegistrar fn : cpu_registrars()) fn(*g_cpu_lib);
  // The ops with no kernel raise on every backend (CPU and tpu alike).
  g_any_lib = std::make_unique<torch::Library>(torch::Library::IMPL, "torchvision",
                                               c10::DispatchKey::CompositeExplicitAutograd, __FILE__, __LINE__);
  g_any_lib->impl("qnms", TORCH_FN(qnms_unimplemented));
  g_any_lib->impl("qroi_align", TORCH_FN(qroi_align_unimplemented));
  g_any_lib->impl("box_iou_rotated", TORCH_FN(box_iou_rotated_unimplemented));
  g_defined = true;
  return true;
}

void check_same_device(const char* op, const at::Tensor& first, const char* first_name, const at::Tensor& t,
                       const char* name) {
  TORCH_CHECK(t.device() == first.device(), op, ": expected all tensors to be on the same device, but ",
              first_name, " is on ", first.device(), " and ", name, " is on ", t.device());
}

void run_vision_kernel(const char* kernel, const char* op, const std::vector<KernelArg>& args,
                       const std::vector<at::Tensor>& outputs) {
  const tpurt_op_def_t* def = tpurt_op_lookup(kernel);
  TORCH_CHECK(def, op, ": the runtime has no ", kernel, " kernel");
  TORCH_CHECK(!outputs.empty(), op, ": a kernel call needs an output");
  const c10::Device device = outputs[0].device();
  TORCH_CHECK(device.type() == kTpu || device.type() == c10::DeviceType::CPU, op,
              ": expected CPU or tpu tensors, got one on ", device);
  const at::Tensor* first = nullptr;
  size_t num_tensors = 0;
  for (const KernelArg& a : args) {
    if (a.kind != KernelArg::kTensor) continue;
    if (!first) first = &a.t;
    TORCH_CHECK(a.t.device() == device, op, ": expected all tensors on ", device, ", got one on ",
                a.t.device());
    ++num_tensors;
  }
  for (const at::Tensor& o : outputs) TORCH_CHECK(o.device() == device, op, ": output on ", o.device());
  const at::Tensor& lead = first ? *first : outputs[0];
  TORCH_CHECK_NOT_IMPLEMENTED(tpurt_op_supports_dtype(def, to_tpurt_dtype(lead.scalar_type(), op)), op,
                              ": dtype ", lead.scalar_type(), " is not supported on the ",
                              device.type() == kTpu ? "tpu device" : "CPU by torch_tpu's kernels");
  bool any_output = false;
  for (const at::Tensor& o : outputs) any_output = any_output || o.numel() > 0;
  if (!any_output) return;

  std::vector<tpurt_tensor_t> descs(num_tensors + outputs.size());
  std::vector<tpurt_arg_t> cargs(args.size());
  size_t ti = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    tpurt_arg_t& c = cargs[i];
    std::memset(&c, 0, sizeof(c));
    const KernelArg& a = args[i];
    switch (a.kind) {
      case KernelArg::kTensor:
        fill_tensor_desc(a.t, &descs[ti], op);
        c.kind = TPURT_ARG_TENSOR;
        c.v.tensor = &descs[ti++];
        break;
      case KernelArg::kInt:
        c.kind = TPURT_ARG_INT;
        c.v.i = a.i;
        break;
      case KernelArg::kDouble:
        c.kind = TPURT_ARG_DOUBLE;
        c.v.d = a.d;
        break;
      case KernelArg::kBool:
        c.kind = TPURT_ARG_BOOL;
        c.v.b = a.b;
        break;
    }
  }
  for (const at::Tensor& o : outputs) fill_tensor_desc(o, &descs[ti++], op);
  tpurt_op_call_t call{kernel, "", static_cast<int32_t>(cargs.size()), cargs.data(),
                       static_cast<int32_t>(outputs.size()), &descs[num_tensors]};
  if (device.type() == kTpu) {
    DeviceScope scope(device.index());
    check_status(tpurt_queue_submit_kernel(current_queue(), def, &call), op);
  } else {
    ensure_init();
    check_status(tpurt_kernel_run(def->fn, &call), op);
  }
}

}  // namespace vision
}  // namespace torch_tpu
