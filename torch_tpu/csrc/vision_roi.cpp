// torchvision::nms, roi_align, roi_pool and their backwards for tpu tensors (and for
// CPU tensors where torchvision's _C did not load): argument checks in torchvision's
// words, output allocation, and one call of the C kernel (runtime/ops/vision/).
#include <ATen/TensorUtils.h>
#include <ATen/ops/empty.h>

#include "vision/vision.h"

namespace torch_tpu {
namespace vision {
namespace {

void check_pooled(const char* op, int64_t ph, int64_t pw) {
  TORCH_CHECK(ph >= 0 && pw >= 0, op, ": pooled_height and pooled_width must be non-negative, got ", ph, " and ",
              pw);
}

void check_rois(const char* op, const at::Tensor& rois) {
  TORCH_CHECK(rois.dim() == 2 && rois.size(1) == 5, "rois must have shape as Tensor[K, 5]");
}

void check_input4(const char* op, const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() == 4, op, ": ", name, " must be a 4-D tensor [N, C, H, W], got ", t.dim(), "D ", t.sizes());
}

void check_grad_shape(const char* op, const at::Tensor& grad, const at::Tensor& rois, int64_t channels, int64_t ph,
                      int64_t pw) {
  TORCH_CHECK(grad.dim() == 4 && grad.size(0) == rois.size(0) && grad.size(1) == channels && grad.size(2) == ph &&
                  grad.size(3) == pw,
              op, ": grad must have shape [K, channels, pooled_height, pooled_width] = [", rois.size(0), ", ",
              channels, ", ", ph, ", ", pw, "], got ", grad.sizes());
}

void check_sizes(const char* op, int64_t batch, int64_t channels, int64_t height, int64_t width) {
  TORCH_CHECK(batch >= 0 && channels >= 0 && height >= 0 && width >= 0, op,
              ": batch_size, channels, height and width must be non-negative, got ", batch, ", ", channels, ", ",
              height, ", ", width);
}

at::Tensor nms(const at::Tensor& dets, const at::Tensor& scores, double iou_threshold) {
  constexpr const char* op = "torchvision::nms";
  TORCH_CHECK(dets.dim() == 2, "boxes should be a 2d tensor, got ", dets.dim(), "D");
  TORCH_CHECK(dets.size(1) == 4, "boxes should have 4 elements in dimension 1, got ", dets.size(1));
  TORCH_CHECK(scores.dim() == 1, "scores should be a 1d tensor, got ", scores.dim(), "D");
  TORCH_CHECK(dets.size(0) == scores.size(0),
              "boxes and scores should have same number of elements in dimension 0, got ", dets.size(0), " and ",
              scores.size(0));
  check_same_device(op, dets, "dets", scores, "scores");
  TORCH_CHECK(dets.scalar_type() == scores.scalar_type(), "dets should have the same type as scores");
  const int64_t n = dets.size(0);
  at::Tensor keep = at::empty({n}, dets.options().dtype(at::kLong));
  if (n == 0) return keep;
  at::Tensor count = at::empty({1}, dets.options().dtype(at::kLong));
  run_vision_kernel("tv_nms", op, {dets.contiguous(), scores.contiguous(), iou_threshold}, {keep, count});
  // How many were kept decides the result's size: read it (a sync on the tpu device).
  const int64_t kept = count.to(at::kCPU).item<int64_t>();
  return keep.narrow(0, 0, kept);
}

at::Tensor roi_align(const at::Tensor& input, const at::Tensor& rois, double spatial_scale, int64_t pooled_height,
                     int64_t pooled_width, int64_t sampling_ratio, bool aligned) {
  constexpr const char* op = "torchvision::roi_align";
  check_rois(op, rois);
  at::checkAllSameType("roi_align_forward_kernel", {{input, "input", 1}, {rois, "rois", 2}});
  check_input4(op, input, "input");
  check_same_device(op, input, "input", rois, "rois");
  check_pooled(op, pooled_height, pooled_width);
  at::Tensor out = at::empty({rois.size(0), input.size(1), pooled_height, pooled_width}, input.options());
  run_vision_kernel("tv_roi_align", op,
                    {input.contiguous(), rois.contiguous(), spatial_scale, pooled_height, pooled_width,
                     sampling_ratio, aligned},
                    {out});
  return out;
}

at::Tensor roi_align_backward(const at::Tensor& grad, const at::Tensor& rois, double spatial_scale,
                              int64_t pooled_height, int64_t pooled_width, int64_t batch_size, int64_t channels,
                              int64_t height, int64_t width, int64_t sampling_ratio, bool aligned) {
  constexpr const char* op = "torchvision::_roi_align_backward";
  check_rois(op, rois);
  at::checkAllSameType("roi_align_backward_kernel", {{grad, "grad", 1}, {rois, "rois", 2}});
  check_same_device(op, grad, "grad", rois, "rois");
  check_pooled(op, pooled_height, pooled_width);
  check_sizes(op, batch_size, channels, height, width);
  check_grad_shape(op, grad, rois, channels, pooled_height, pooled_width);
  at::Tensor grad_input = at::empty({batch_size, channels, height, width}, grad.options());
  if (grad_input.numel() == 0) return grad_input;
  if (grad.numel() == 0) return grad_input.zero_();
  run_vision_kernel("tv_roi_align_backward", op,
                    {grad.contiguous(), rois.contiguous(), spatial_scale, pooled_height, pooled_width, batch_size,
                     channels, height, width, sampling_ratio, aligned},
                    {grad_input});
  return grad_input;
}

std::tuple<at::Tensor, at::Tensor> roi_pool(const at::Tensor& input, const at::Tensor& rois, double spatial_scale,
                                            int64_t pooled_height, int64_t pooled_width) {
  constexpr const char* op = "torchvision::roi_pool";
  check_rois(op, rois);
  at::checkAllSameType("roi_pool_forward_kernel", {{input, "input", 1}, {rois, "rois", 2}});
  check_input4(op, input, "input");
  check_same_device(op, input, "input", rois, "rois");
  check_pooled(op, pooled_height, pooled_width);
  const std::vector<int64_t> shape{rois.size(0), input.size(1), pooled_height, pooled_width};
  at::Tensor out = at::empty(shape, input.options());
  at::Tensor argmax = at::empty(shape, input.options().dtype(at::kInt));
  run_vision_kernel("tv_roi_pool", op,
                    {input.contiguous(), rois.contiguous(), spatial_scale, pooled_height, pooled_width},
                    {out, argmax});
  return {out, argmax};
}

at::Tensor roi_pool_backward(const at::Tensor& grad, const at::Tensor& rois, const at::Tensor& argmax,
                             double spatial_scale, int64_t pooled_height, int64_t pooled_width, int64_t batch_size,
                             int64_t channels, int64_t height, int64_t width) {
  constexpr const char* op = "torchvision::_roi_pool_backward";
  check_rois(op, rois);
  at::checkAllSameType("roi_pool_backward_kernel", {{grad, "grad", 1}, {rois, "rois", 2}});
  check_same_device(op, grad, "grad", rois, "rois");
  check_same_device(op, grad, "grad", argmax, "argmax");
  check_pooled(op, pooled_height, pooled_width);
  check_sizes(op, batch_size, channels, height, width);
  check_grad_shape(op, grad, rois, channels, pooled_height, pooled_width);
  TORCH_CHECK(argmax.scalar_type() == at::kInt && argmax.sizes() == grad.sizes(), op,
              ": argmax must be the int32 tensor roi_pool returned, shaped like grad ", grad.sizes(), ", got ",
              argmax.scalar_type(), " ", argmax.sizes());
  at::Tensor grad_input = at::empty({batch_size, channels, height, width}, grad.options());
  if (grad_input.numel() == 0) return grad_input;
  if (grad.numel() == 0) return grad_input.zero_();
  run_vision_kernel("tv_roi_pool_backward", op,
                    {grad.contiguous(), rois.contiguous(), argmax.contiguous(), spatial_scale, pooled_height,
                     pooled_width, batch_size, channels, height, width},
                    {grad_input});
  return grad_input;
}

}  // namespace
}  // namespace vision
}  // namespace torch_tpu

TORCH_LIBRARY_IMPL(torchvision, PrivateUse1, m) {
  m.impl("nms", TORCH_FN(torch_tpu::vision::nms));
  m.impl("roi_align", TORCH_FN(torch_tpu::vision::roi_align));
  m.impl("_roi_align_backward", TORCH_FN(torch_tpu::vision::roi_align_backward));
  m.impl("roi_pool", TORCH_FN(torch_tpu::vision::roi_pool));
  m.impl("_roi_pool_backward", TORCH_FN(torch_tpu::vision::roi_pool_backward));
}

TORCH_TPU_VISION_CPU_IMPL("nms", torch_tpu::vision::nms);
TORCH_TPU_VISION_CPU_IMPL("roi_align", torch_tpu::vision::roi_align);
TORCH_TPU_VISION_CPU_IMPL("_roi_align_backward", torch_tpu::vision::roi_align_backward);
TORCH_TPU_VISION_CPU_IMPL("roi_pool", torch_tpu::vision::roi_pool);
TORCH_TPU_VISION_CPU_IMPL("_roi_pool_backward", torch_tpu::vision::roi_pool_backward);
