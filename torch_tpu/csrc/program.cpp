// torch_tpu._C's side of programs (tpurt/program.h): capture on the current
// stream's queue, and a launch that allocates the outputs and the arena with
// the device's caching allocator, reserves the launch's random numbers from
// the default generator and queues the program. The compile backend
// (torch_tpu/_compile.py) decides what to capture and when.
#include <torch/extension.h>

#include <optional>
#include <utility>

#include "tpu_common.h"
#include "tpurt/program.h"

namespace py = pybind11;

namespace torch_tpu {
namespace {

// Where a graph output lives at launch: a new storage (index into the
// launch's output storages) or an input's storage, and its view.
struct OutSpec {
  bool from_input;
  int64_t index;
  at::ScalarType dtype;
  std::vector<int64_t> sizes, strides;
  int64_t offset;
};

uint8_t* storage_base(const at::Tensor& t) {
  return static_cast<uint8_t*>(const_cast<void*>(t.storage().data()));
}

class Program {
 public:
  Program(tpurt_program_t* p, c10::DeviceIndex dev, std::vector<int64_t> out_bytes, std::vector<OutSpec> outs)
      : p_(p), dev_(dev), out_bytes_(std::move(out_bytes)), outs_(std::move(outs)) {
    tpurt_program_query(p_, &info_);
  }
  ~Program() { tpurt_program_release(p_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  // One run; `storages` are the outputs' storages when given (the capture's
  // own), else new ones; `rng` the Philox (seed, offset) to use when given
  // (the first run uses what the capture already reserved), else reserved now.
  std::vector<at::Tensor> launch(const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> storages,
                                 std::optional<std::pair<uint64_t, uint64_t>> rng_given) {
    TORCH_CHECK(static_cast<int32_t>(inputs.size()) == info_.num_inputs, "compiled program: expected ",
                info_.num_inputs, " tensor inputs, got ", inputs.size());
    auto opts = at::TensorOptions().dtype(at::kByte).device(c10::Device(kTpu, dev_));
    std::vector<void*> in(inputs.size()), out(out_bytes_.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      TORCH_CHECK(inputs[i].device().type() == kTpu && inputs[i].device().index() == dev_,
                  "compiled program: input ", i, " is on ", inputs[i].device(), ", the program on tpu:", dev_);
      in[i] = storage_base(inputs[i]);
    }
    if (storages.empty())
      for (int64_t b : out_bytes_) storages.push_back(at::empty({b}, opts));
    for (size_t j = 0; j < out.size(); ++j) out[j] = storage_base(storages[j]);
    at::Tensor arena = info_.arena_bytes ? at::empty({static_cast<int64_t>(info_.arena_bytes)}, opts) : at::Tensor();
    tpurt_rng_t rng{0, 0};
    if (rng_given) rng = {rng_given->first, rng_given->second};
    else if (info_.rng_count) rng = generator_reserve(default_generator(dev_), info_.rng_count);
    tpurt_queue_t* q = current_queue(dev_);
    check_status(tpurt_program_launch(p_, q, in.data(), static_cast<int32_t>(in.size()), out.data(),
                                      static_cast<int32_t>(out.size()), arena.defined() ? storage_base(arena) : nullptr,
                                      rng),
                 "compiled program");
    std::vector<at::Tensor> result;
    result.reserve(outs_.size());
    for (const OutSpec& s : outs_) {
      const at::Tensor& base = s.from_input ? inputs[s.index] : storages[s.index];
      at::Tensor t = at::empty({0}, base.options().dtype(s.dtype));
      t.set_(base.storage(), s.offset, s.sizes, s.strides);
      result.push_back(std::move(t));
    }
    return result;
  }

  py::dict info() const {
    tpurt_program_info_t i;
    tpurt_program_query(p_, &i);
    py::dict d;
    d["arena_bytes"] = i.arena_bytes;
    d["rng_count"] = i.rng_count;
    d["num_records"] = i.num_records;
    d["num_kernels"] = i.num_kernels;
    d["num_inputs"] = i.num_inputs;
    d["num_outputs"] = i.num_outputs;
    d["launches"] = i.launches;
    return d;
  }

 private:
  tpurt_program_t* p_;
  c10::DeviceIndex dev_;
  std::vector<int64_t> out_bytes_;
  std::vector<OutSpec> outs_;
  tpurt_program_info_t info_;
};

c10::DeviceIndex resolve_dev(int64_t device) {
  return device < 0 ? current_device_index() : static_cast<c10::DeviceIndex>(device);
}

}  // namespace

void register_program(py::module_& m) {
  py::class_<Program, std::shared_ptr<Program>>(m, "_Program")
      .def("launch", &Program::launch, py::arg("inputs"), py::arg("storages") = std::vector<at::Tensor>(),
           py::arg("rng") = py::none())
      .def("info", &Program::info);

  // Starts capturing on the device's current stream; returns the default
  // generator's (seed, offset) to hand back to _capture_end.
  m.def(
      "_capture_begin",
      [](int64_t device) {
        c10::DeviceIndex dev = resolve_dev(device);
        tpurt_rng_t r = generator_reserve(default_generator(dev), 0);
        check_status(tpurt_capture_begin(current_queue(dev)), "capture");
        return py::make_tuple(r.seed, r.offset);
      },
      py::arg("device") = -1);
  m.def(
      "_capture_abort", [](int64_t device) { tpurt_capture_abort(current_queue(resolve_dev(device))); },
      py::arg("device") = -1);
  m.def(
      "_capture_active", [](int64_t device) { return tpurt_capture_active(current_queue(resolve_dev(device))); },
      py::arg("device") = -1);
  // Ends the capture: inputs are the graph's tpu tensor inputs, outputs its
  // tensor outputs; returns (program, storages): the outputs' own storages,
  // for the first launch that computes them.
  m.def(
      "_capture_end",
      [](const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs, uint64_t seed,
         uint64_t before, int64_t device) {
        c10::DeviceIndex dev = resolve_dev(device);
        tpurt_queue_t* q = current_queue(dev);
        tpurt_rng_t after = generator_reserve(default_generator(dev), 0);
        std::vector<tpurt_program_range_t> in, out;
        for (const at::Tensor& t : inputs) in.push_back({storage_base(t), t.storage().nbytes()});
        std::vector<OutSpec> specs;
        std::vector<int64_t> out_bytes;
        std::vector<at::Tensor> storages;
        for (const at::Tensor& t : outputs) {
          OutSpec s{false, -1, t.scalar_type(), t.sizes().vec(), t.strides().vec(), t.storage_offset()};
          uint8_t* base = storage_base(t);
          for (size_t i = 0; i < inputs.size() && s.index < 0; ++i)
            if (storage_base(inputs[i]) == base) s = {true, static_cast<int64_t>(i), s.dtype, s.sizes, s.strides, s.offset};
          for (size_t j = 0; j < out.size() && s.index < 0; ++j)
            if (out[j].base == base) s.index = static_cast<int64_t>(j);
          if (s.index < 0) {
            s.index = static_cast<int64_t>(out.size());
            out.push_back({base, t.storage().nbytes()});
            out_bytes.push_back(static_cast<int64_t>(t.storage().nbytes()));
            storages.push_back(at::empty({0}, t.options().dtype(at::kByte)).set_(t.storage()));
          }
          specs.push_back(std::move(s));
        }
        tpurt_program_t* p = nullptr;
        check_status(tpurt_capture_end(q, in.data(), static_cast<int32_t>(in.size()), out.data(),
                                       static_cast<int32_t>(out.size()), seed, before, after.offset, &p),
                     "capture");
        auto prog = std::make_shared<Program>(p, dev, std::move(out_bytes), std::move(specs));
        return py::make_tuple(prog, storages);
      },
      py::arg("inputs"), py::arg("outputs"), py::arg("seed"), py::arg("before"), py::arg("device") = -1);
}

}  // namespace torch_tpu
