// torchvision's ps_roi_align, ps_roi_pool and deform_conv2d, with their
// backwards, for torch_tpu: the tpu kernels (TORCH_LIBRARY_IMPL for
// PrivateUse1) and, where torchvision's own _C did not load, the CPU kernels
// (TORCH_TPU_VISION_CPU_IMPL, registered at run time by vision.cpp). Each
// wrapper checks its arguments at the call, in torchvision's words, allocates
// the outputs and runs the C kernel (runtime/ops/vision: ps_roi.c,
// deform_conv.c) on the outputs' device. Autograd is torchvision's own
// (torch.library.register_autograd in its Python, calling the backward ops).
#include <tuple>

#include <ATen/ATen.h>

#include "vision/vision.h"

namespace torch_tpu {
namespace vision {
namespace {

void check_rois(const char* op, const at::Tensor& input, const char* input_name, const at::Tensor& rois) {
  check_same_device(op, input, input_name, rois, "rois");
  TORCH_CHECK(rois.dim() == 2 && rois.size(1) == 5, "rois must have shape as Tensor[K, 5]");
  TORCH_CHECK(input.scalar_type() == rois.scalar_type(), "Expected tensor for ", input_name,
              " to have the same type as tensor for rois; but type ", input.scalar_type(), " does not equal ",
              rois.scalar_type());
}

void check_pooled(const char* op, int64_t channels, int64_t pooled_height, int64_t pooled_width) {
  TORCH_CHECK(pooled_height > 0 && pooled_width > 0, op, ": pooled_height and pooled_width must be positive, got ",
              pooled_height, " and ", pooled_width);
  TORCH_CHECK(channels % (pooled_height * pooled_width) == 0,
              "input channels must be a multiple of pooling height * pooling width");
}

std::tuple<at::Tensor, at::Tensor> ps_forward(const char* op, const char* kernel, const at::Tensor& input,
                                              const at::Tensor& rois, double spatial_scale, int64_t pooled_height,
                                              int64_t pooled_width, const int64_t* sampling_ratio) {
  TORCH_CHECK(input.dim() == 4, op, ": input must be a 4-D tensor [N, C, H, W], got ", input.dim(), " dims");
  check_rois(op, input, "input", rois);
  check_pooled(op, input.size(1), pooled_height, pooled_width);
  int64_t channels_out = input.size(1) / (pooled_height * pooled_width);
  std::vector<int64_t> size{rois.size(0), channels_out, pooled_height, pooled_width};
  at::Tensor out = at::empty(size, input.options());
  at::Tensor mapping = at::empty(size, input.options().dtype(at::kInt));
  std::vector<KernelArg> args{input, rois, spatial_scale, pooled_height, pooled_width};
  if (sampling_ratio) args.emplace_back(*sampling_ratio);
  run_vision_kernel(kernel, op, args, {out, mapping});
  return {out, mapping};
}

at::Tensor ps_backward(const char* op, const char* kernel, const at::Tensor& grad, const at::Tensor& rois,
                       const at::Tensor& channel_mapping, double spatial_scale, int64_t pooled_height,
                       int64_t pooled_width, const int64_t* sampling_ratio, int64_t batch_size, int64_t channels,
                       int64_t height, int64_t width) {
  check_rois(op, grad, "grad", rois);
  check_same_device(op, grad, "grad", channel_mapping, "channel_mapping");
  check_pooled(op, channels, pooled_height, pooled_width);
  TORCH_CHECK(batch_size >= 0 && channels >= 0 && height >= 0 && width >= 0, op,
              ": batch_size, channels, height and width must be non-negative");
  std::vector<int64_t> want{rois.size(0), channels / (pooled_height * pooled_width), pooled_height, pooled_width};
  TORCH_CHECK(grad.sizes() == at::IntArrayRef(want), op, ": grad must have shape ", at::IntArrayRef(want),
              ", got ", grad.sizes());
  TORCH_CHECK(channel_mapping.sizes() == at::IntArrayRef(want), op, ": channel_mapping must have shape ",
              at::IntArrayRef(want), ", got ", channel_mapping.sizes());
  TORCH_CHECK(channel_mapping.scalar_type() == at::kInt || channel_mapping.scalar_type() == at::kLong, op,
              ": channel_mapping must be an integer tensor, got ", channel_mapping.scalar_type());
  at::Tensor grad_input = at::empty({batch_size, channels, height, width}, grad.options());
  std::vector<KernelArg> args{grad, rois, channel_mapping, spatial_scale, pooled_height, pooled_width};
  if (sampling_ratio) args.emplace_back(*sampling_ratio);
  for (int64_t v : {batch_size, channels, height, width}) args.emplace_back(v);
  run_vision_kernel(kernel, op, args, {grad_input});
  return grad_input;
}

std::tuple<at::Tensor, at::Tensor> ps_roi_align(const at::Tensor& input, const at::Tensor& rois,
                                                double spatial_scale, int64_t pooled_height, int64_t pooled_width,
                                                int64_t sampling_ratio) {
  return ps_forward("ps_roi_align", "tv_ps_roi_align", input, rois, spatial_scale, pooled_height, pooled_width,
                    &sampling_ratio);
}
at::Tensor ps_roi_align_backward(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& channel_mapping,
                                 double spatial_scale, int64_t pooled_height, int64_t pooled_width,
                                 int64_t sampling_ratio, int64_t batch_size, int64_t channels, int64_t height,
                                 int64_t width) {
  return ps_backward("_ps_roi_align_backward", "tv_ps_roi_align_backward", grad, rois, channel_mapping,
                     spatial_scale, pooled_height, pooled_width, &sampling_ratio, batch_size, channels, height, width);
}
std::tuple<at::Tensor, at::Tensor> ps_roi_pool(const at::Tensor& input, const at::Tensor& rois, double spatial_scale,
                                               int64_t pooled_height, int64_t pooled_width) {
  return ps_forward("ps_roi_pool", "tv_ps_roi_pool", input, rois, spatial_scale, pooled_height, pooled_width,
                    nullptr);
}
at::Tensor ps_roi_pool_backward(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& channel_mapping,
                                double spatial_scale, int64_t pooled_height, int64_t pooled_width, int64_t batch_size,
                                int64_t channels, int64_t height, int64_t width) {
  return ps_backward("_ps_roi_pool_backward", "tv_ps_roi_pool_backward", grad, rois, channel_mapping, spatial_scale,
                     pooled_height, pooled_width, nullptr, batch_size, channels, height, width);
}

// deform_conv2d's checks, as torchvision's CPU kernel makes them; the output's [Ho, Wo]
std::pair<int64_t, int64_t> check_deform(const char* op, const at::Tensor& input, const at::Tensor& weight,
                                         const at::Tensor& offset, const at::Tensor& mask, const at::Tensor& bias,
                                         int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                                         int64_t dil_h, int64_t dil_w, int64_t groups, int64_t offset_groups,
                                         bool use_mask) {
  check_same_device(op, input, "input", weight, "weight");
  check_same_device(op, input, "input", offset, "offset");
  check_same_device(op, input, "input", mask, "mask");
  check_same_device(op, input, "input", bias, "bias");
  for (const at::Tensor* t : {&weight, &offset, &mask, &bias})
    TORCH_CHECK(t->scalar_type() == input.scalar_type(), op,
                ": input, weight, offset, mask and bias must have one dtype, got ", input.scalar_type(), " and ",
                t->scalar_type());
  TORCH_CHECK(input.dim() == 4, op, ": input must be 4-D, got ", input.dim(), " dims");
  TORCH_CHECK(offset.dim() == 4, op, ": offset must be 4-D, got ", offset.dim(), " dims");
  TORCH_CHECK(!use_mask || mask.dim() == 4, op, ": mask must be 4-D, got ", mask.dim(), " dims");
  TORCH_CHECK(weight.dim() == 4, op, ": weight must be 4-D, got ", weight.dim(), " dims");
  int64_t kh = weight.size(2), kw = weight.size(3);
  TORCH_CHECK(kh > 0 && kw > 0, "weight_h: ", kh, " weight_w: ", kw);
  TORCH_CHECK(stride_h > 0 && stride_w > 0, "stride_h: ", stride_h, " stride_w: ", stride_w);
  TORCH_CHECK(pad_h >= 0 && pad_w >= 0, "pad_h: ", pad_h, " pad_w: ", pad_w);
  TORCH_CHECK(dil_h > 0 && dil_w > 0, "dilation_h: ", dil_h, " dilation_w: ", dil_w);
  TORCH_CHECK(groups > 0 && offset_groups > 0, op, ": groups (", groups, ") and offset_groups (", offset_groups,
              ") must be positive");
  TORCH_CHECK(weight.size(1) * groups == input.size(1), op, ": weight.size(1) * groups (", weight.size(1), " * ",
              groups, ") must equal the input's channels (", input.size(1), ")");
  TORCH_CHECK(weight.size(0) % groups == 0, op, ": weight.size(0) (", weight.size(0),
              ") must be a multiple of groups (", groups, ")");
  TORCH_CHECK(offset.size(1) == offset_groups * 2 * kh * kw, "offset.shape[1] is not valid: got: ", offset.size(1),
              " expected: ", offset_groups * 2 * kh * kw);
  TORCH_CHECK(!use_mask || mask.size(1) == offset_groups * kh * kw, "mask.shape[1] is not valid: got: ",
              mask.size(1), " expected: ", offset_groups * kh * kw);
  TORCH_CHECK(input.size(1) % offset_groups == 0, op, ": the input's channels (", input.size(1),
              ") must be a multiple of offset_groups (", offset_groups, ")");
  TORCH_CHECK(offset.size(0) == input.size(0), "invalid batch size of offset");
  int64_t out_h = (input.size(2) + 2 * pad_h - (dil_h * (kh - 1) + 1)) / stride_h + 1;
  int64_t out_w = (input.size(3) + 2 * pad_w - (dil_w * (kw - 1) + 1)) / stride_w + 1;
  TORCH_CHECK(offset.size(2) == out_h && offset.size(3) == out_w, "offset output dims: (", offset.size(2), ", ",
              offset.size(3), ") - computed output dims: (", out_h, ", ", out_w, ")");
  TORCH_CHECK(mask.dim() >= 1 && mask.size(0) == input.size(0), "invalid batch size of mask");
  TORCH_CHECK(!use_mask || (mask.size(2) == out_h && mask.size(3) == out_w), "mask output dims: (", mask.size(2),
              ", ", mask.size(3), ") - computed output dims: (", out_h, ", ", out_w, ")");
  TORCH_CHECK(out_h > 0 && out_w > 0, "Calculated output size too small - out_h: ", out_h, " out_w: ", out_w);
  TORCH_CHECK(bias.numel() == weight.size(0), op, ": bias has ", bias.numel(), " elements, expected out_channels = ",
              weight.size(0));
  return {out_h, out_w};
}

at::Tensor deform_conv2d(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offset,
                         const at::Tensor& mask, const at::Tensor& bias, int64_t stride_h, int64_t stride_w,
                         int64_t pad_h, int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t groups,
                         int64_t offset_groups, bool use_mask) {
  const char* op = "deform_conv2d";
  auto hw = check_deform(op, input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
                         groups, offset_groups, use_mask);
  at::Tensor out = at::empty({input.size(0), weight.size(0), hw.first, hw.second}, input.options());
  run_vision_kernel("tv_deform_conv2d", op,
                    {input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups,
                     offset_groups, use_mask},
                    {out});
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> deform_conv2d_backward(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offset,
    const at::Tensor& mask, const at::Tensor& bias, int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
    int64_t dil_h, int64_t dil_w, int64_t groups, int64_t offset_groups, bool use_mask) {
  const char* op = "_deform_conv2d_backward";
  auto hw = check_deform(op, input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
                         groups, offset_groups, use_mask);
  check_same_device(op, input, "input", grad, "grad");
  TORCH_CHECK(grad.scalar_type() == input.scalar_type(), op, ": grad must have the input's dtype ",
              input.scalar_type(), ", got ", grad.scalar_type());
  std::vector<int64_t> want{input.size(0), weight.size(0), hw.first, hw.second};
  TORCH_CHECK(grad.sizes() == at::IntArrayRef(want), op, ": grad must have shape ", at::IntArrayRef(want), ", got ",
              grad.sizes());
  at::Tensor gi = at::empty(input.sizes(), input.options()), gw = at::empty(weight.sizes(), weight.options());
  at::Tensor go = at::empty(offset.sizes(), offset.options()), gm = at::empty(mask.sizes(), mask.options());
  at::Tensor gb = at::empty(bias.sizes(), bias.options());
  if (input.size(0) == 0) {  // nothing to run: every grad is zero
    for (at::Tensor* t : {&gi, &gw, &go, &gm, &gb}) t->zero_();
    return {gi, gw, go, gm, gb};
  }
  run_vision_kernel("tv_deform_conv2d_backward", op,
                    {grad, input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups,
                     offset_groups, use_mask},
                    {gi, gw, go, gm, gb});
  return {gi, gw, go, gm, gb};
}

}  // namespace

TORCH_TPU_VISION_CPU_IMPL("ps_roi_align", ps_roi_align);
TORCH_TPU_VISION_CPU_IMPL("_ps_roi_align_backward", ps_roi_align_backward);
TORCH_TPU_VISION_CPU_IMPL("ps_roi_pool", ps_roi_pool);
TORCH_TPU_VISION_CPU_IMPL("_ps_roi_pool_backward", ps_roi_pool_backward);
TORCH_TPU_VISION_CPU_IMPL("deform_conv2d", deform_conv2d);
TORCH_TPU_VISION_CPU_IMPL("_deform_conv2d_backward", deform_conv2d_backward);

}  // namespace vision
}  // namespace torch_tpu

TORCH_LIBRARY_IMPL(torchvision, PrivateUse1, m) {
  using namespace torch_tpu::vision;
  m.impl("ps_roi_align", TORCH_FN(ps_roi_align));
  m.impl("_ps_roi_align_backward", TORCH_FN(ps_roi_align_backward));
  m.impl("ps_roi_pool", TORCH_FN(ps_roi_pool));
  m.impl("_ps_roi_pool_backward", TORCH_FN(ps_roi_pool_backward));
  m.impl("deform_conv2d", TORCH_FN(deform_conv2d));
  m.impl("_deform_conv2d_backward", TORCH_FN(deform_conv2d_backward));
}
