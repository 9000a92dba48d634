// torch_tpu._C's side of programs (tpurt/program.h): capture on the current
// stream's queue, and a launch that allocates the outputs and the arena with
// the device's caching allocator, reserves the launch's random numbers from
// the default generator and queues the program. The compile backend
// (torch_tpu/_compile.py) decides what to capture and when.
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/extension.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "tpu_common.h"
#include "tpurt/export.h"
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
  // A program that takes sizes at launch (generalize) runs with `binding`
  // (an index from bind(), which holds the outputs' bytes and views).
  std::vector<at::Tensor> launch(const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> storages,
                                 std::optional<std::pair<uint64_t, uint64_t>> rng_given, int64_t binding) {
    TORCH_CHECK(static_cast<int32_t>(inputs.size()) == info_.num_inputs, "compiled program: expected ",
                info_.num_inputs, " tensor inputs, got ", inputs.size());
    const Binding* b = nullptr;
    if (binding >= 0) {
      TORCH_CHECK(binding < static_cast<int64_t>(bindings_.size()), "compiled program: no binding ", binding);
      b = &bindings_[binding];
    }
    const std::vector<int64_t>& obytes = b ? b->out_bytes : out_bytes_;
    const std::vector<OutSpec>& specs = b ? b->outs : outs_;
    auto opts = at::TensorOptions().dtype(at::kByte).device(c10::Device(kTpu, dev_));
    std::vector<void*> in(inputs.size()), out(obytes.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      TORCH_CHECK(inputs[i].device().type() == kTpu && inputs[i].device().index() == dev_,
                  "compiled program: input ", i, " is on ", inputs[i].device(), ", the program on tpu:", dev_);
      in[i] = storage_base(inputs[i]);
    }
    if (storages.empty())
      for (int64_t n : obytes) storages.push_back(at::empty({n}, opts));
    for (size_t j = 0; j < out.size(); ++j) out[j] = storage_base(storages[j]);
    if (b && from_file_) {  // its sizes came from a file: every storage must hold what the program reaches
      std::vector<uint64_t> ib(inputs.size()), ob(storages.size());
      for (size_t i = 0; i < inputs.size(); ++i) ib[i] = inputs[i].storage().nbytes();
      for (size_t j = 0; j < storages.size(); ++j) ob[j] = storages[j].storage().nbytes();
      check_status(tpurt_program_check_storages(p_, b->b, ib.data(), static_cast<int32_t>(ib.size()), ob.data(),
                                                static_cast<int32_t>(ob.size())),
                   "exported program");
    }
    uint64_t arena_bytes = b ? b->arena_bytes : info_.arena_bytes;
    uint64_t rng_count = b ? b->rng_count : info_.rng_count;
    at::Tensor arena = arena_bytes ? at::empty({static_cast<int64_t>(arena_bytes)}, opts) : at::Tensor();
    tpurt_rng_t rng{0, 0};
    if (rng_given) rng = {rng_given->first, rng_given->second};
    else if (rng_count) rng = generator_reserve(default_generator(dev_), rng_count);
    tpurt_queue_t* q = current_queue(dev_);
    check_status(tpurt_program_launch_bound(p_, b ? b->b : nullptr, q, in.data(), static_cast<int32_t>(in.size()),
                                            out.data(), static_cast<int32_t>(out.size()),
                                            arena.defined() ? storage_base(arena) : nullptr, rng),
                 "compiled program");
    std::vector<at::Tensor> result;
    result.reserve(specs.size());
    for (const OutSpec& s : specs) {
      const at::Tensor& base = s.from_input ? inputs[s.index] : storages[s.index];
      at::Tensor t = at::empty({0}, base.options().dtype(s.dtype));
      t.set_(base.storage(), s.offset, s.sizes, s.strides);
      result.push_back(std::move(t));
    }
    return result;
  }

  // Makes this program take sizes at launch (tpurt_program_generalize):
  // `others` captured the graph at other sizes; values[k][e] is size
  // expression e at capture k (this program's first).
  void generalize(const std::vector<std::shared_ptr<Program>>& others, const std::vector<std::vector<int64_t>>& values) {
    TORCH_CHECK(values.size() == others.size() + 1 && !values.empty(), "generalize: one row of values per capture");
    std::vector<const tpurt_program_t*> o;
    for (const auto& x : others) o.push_back(x->p_);
    std::vector<int64_t> flat;
    for (const auto& row : values) {
      TORCH_CHECK(row.size() == values[0].size(), "generalize: rows of values differ in length");
      flat.insert(flat.end(), row.begin(), row.end());
    }
    check_status(tpurt_program_generalize(p_, o.data(), static_cast<int32_t>(o.size()), flat.data(),
                                          static_cast<int32_t>(values[0].size())),
                 "compiled program");
  }

  // The program's sizes at `values`, with the outputs' storage bytes and
  // views (out_specs() tuples) at those sizes: an index for launch(binding=).
  int64_t bind(const std::vector<int64_t>& values, const std::vector<int64_t>& out_bytes, const py::list& out_specs) {
    Binding b{};
    TORCH_CHECK(out_bytes.size() == out_bytes_.size(), "compiled program: ", out_bytes_.size(),
                " output storages, ", out_bytes.size(), " sizes given");
    for (const py::handle& h : out_specs) {
      auto t = h.cast<py::tuple>();
      b.outs.push_back({t[0].cast<bool>(), t[1].cast<int64_t>(), t[2].cast<at::ScalarType>(),
                        t[3].cast<std::vector<int64_t>>(), t[4].cast<std::vector<int64_t>>(), t[5].cast<int64_t>()});
    }
    TORCH_CHECK(b.outs.size() == outs_.size(), "compiled program: ", outs_.size(), " outputs, ", b.outs.size(),
                " views given");
    b.out_bytes = out_bytes;
    check_status(tpurt_program_bind(p_, values.data(), static_cast<int32_t>(values.size()), &b.b, &b.arena_bytes,
                                    &b.rng_count),
                 "compiled program");
    bindings_.push_back(std::move(b));
    return static_cast<int64_t>(bindings_.size() - 1);
  }

  // What torch_tpu.export needs to describe the outputs.
  py::list out_specs() const {
    py::list l;
    for (const OutSpec& s : outs_)
      l.append(py::make_tuple(s.from_input, s.index, py::cast(s.dtype), s.sizes, s.strides, s.offset));
    return l;
  }
  const std::vector<int64_t>& out_bytes() const { return out_bytes_; }
  tpurt_program_t* raw() const { return p_; }
  void set_from_file() { from_file_ = true; }

  // The size values the program was captured at (empty: its sizes are fixed).
  std::vector<int64_t> values() const {
    const int64_t* v = tpurt_program_values(p_);
    return v ? std::vector<int64_t>(v, v + tpurt_program_num_values(p_)) : std::vector<int64_t>();
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
  bool from_file_ = false;
  struct Binding {
    tpurt_program_binding_t* b;  // owned by p_
    uint64_t arena_bytes, rng_count;
    std::vector<int64_t> out_bytes;
    std::vector<OutSpec> outs;
  };
  std::vector<Binding> bindings_;
};

// A loaded artifact (tpurt/export.h), for torch_tpu.export.load.
class Export {
 public:
  explicit Export(tpurt_export_t* e) : e_(e) {}
  ~Export() { tpurt_export_free(e_); }
  Export(const Export&) = delete;
  Export& operator=(const Export&) = delete;

  std::string manifest() const {
    size_t n = 0;
    const char* m = tpurt_export_manifest(e_, &n);
    return std::string(m ? m : "", n);
  }

  // Each tensor as a dict; a weight's data as a CPU uint8 tensor (a copy).
  py::list tensors() const {
    py::list l;
    for (int32_t i = 0; i < tpurt_export_num_tensors(e_); ++i) {
      const tpurt_export_tensor_t* t = tpurt_export_tensor(e_, i);
      py::dict d;
      d["name"] = std::string(t->name ? t->name : "");
      d["role"] = static_cast<int>(t->role);
      d["dtype"] = py::cast(from_tpurt_dtype(t->dtype));
      d["sizes"] = std::vector<int64_t>(t->sizes, t->sizes + t->ndim);
      d["strides"] = std::vector<int64_t>(t->strides, t->strides + t->ndim);
      d["storage_offset"] = t->storage_offset;
      d["storage_bytes"] = t->storage_bytes;
      d["program_index"] = t->program_index;
      d["from_input"] = t->from_input;
      d["writes_back"] = t->writes_back;
      if (t->role == TPURT_EXPORT_WEIGHT) {
        at::Tensor data = at::empty({static_cast<int64_t>(t->storage_bytes)}, at::kByte);
        if (t->storage_bytes) std::memcpy(data.data_ptr(), t->data, t->storage_bytes);
        d["data"] = data;
      }
      l.append(d);
    }
    return l;
  }

  // The program, runnable on tpu:`device` with the table's outputs.
  std::shared_ptr<Program> program(int64_t device) const {
    tpurt_program_t* p = tpurt_export_program(e_);
    tpurt_program_info_t info;
    tpurt_program_query(p, &info);
    std::vector<int64_t> out_bytes;
    for (int32_t j = 0; j < info.num_outputs; ++j)
      out_bytes.push_back(static_cast<int64_t>(tpurt_export_output_storage_bytes(e_, j)));
    std::vector<OutSpec> outs;
    for (int32_t i = 0; i < tpurt_export_num_tensors(e_); ++i) {
      const tpurt_export_tensor_t* t = tpurt_export_tensor(e_, i);
      if (t->role != TPURT_EXPORT_OUTPUT) continue;
      outs.push_back({t->from_input, t->program_index, from_tpurt_dtype(t->dtype),
                      std::vector<int64_t>(t->sizes, t->sizes + t->ndim),
                      std::vector<int64_t>(t->strides, t->strides + t->ndim), t->storage_offset});
    }
    tpurt_program_retain(p);
    auto prog = std::make_shared<Program>(p, static_cast<c10::DeviceIndex>(device), std::move(out_bytes), std::move(outs));
    prog->set_from_file();
    return prog;
  }

 private:
  tpurt_export_t* e_;
};

c10::DeviceIndex resolve_dev(int64_t device) {
  return device < 0 ? current_device_index() : static_cast<c10::DeviceIndex>(device);
}

// The key a compiled graph's programs are kept under (torch_tpu/_compile.py,
// _GraphRunner): everything about the arguments the recorded kernels depend
// on, packed into bytes, and the tpu tensors among them (a launch's inputs),
// in one pass. None when the call cannot use a program (a CPU tensor of more
// than one element, another device, a sparse or non-strided tensor, an
// argument of another type). A CPU scalar reaches kernels as a value, so its
// value is part of the key; tpu tensors are keyed by layout and by which of
// them share a storage.
py::object program_signature(const py::sequence& args) {
  std::string key;
  key.reserve(64 * args.size());
  py::list tensors;
  std::vector<const void*> storages;  // alias classes, in order of first sight
  auto put = [&key](int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  auto put_shape = [&put](c10::IntArrayRef r) {
    put(static_cast<int64_t>(r.size()));
    for (int64_t v : r) put(v);
  };
  for (const py::handle& h : args) {
    PyObject* o = h.ptr();
    if (THPVariable_Check(o)) {
      const at::Tensor& t = THPVariable_Unpack(o);
      if (t.device().is_cpu()) {
        if (t.numel() > 1 || t.layout() != c10::kStrided) return py::none();
        put(1);
        put(static_cast<int64_t>(t.scalar_type()));
        put_shape(t.sizes());
        if (t.numel() == 1) {
          char v[16] = {0};
          std::memcpy(v, t.const_data_ptr(), std::min<size_t>(t.element_size(), sizeof v));
          key.append(v, sizeof v);
        }
        continue;
      }
      if (t.device().type() != kTpu || t.layout() != c10::kStrided) return py::none();
      const void* st = t.storage().data();
      size_t alias = std::find(storages.begin(), storages.end(), st) - storages.begin();
      if (alias == storages.size()) storages.push_back(st);
      put(2);
      put(t.device().index());
      put(static_cast<int64_t>(t.scalar_type()));
      put_shape(t.sizes());
      for (int64_t v : t.strides()) put(v);
      put(t.storage_offset());
      put(static_cast<int64_t>(alias));
      tensors.append(h);
    } else if (o == Py_None) {
      put(3);
    } else if (PyBool_Check(o)) {
      put(4);
      put(o == Py_True);
    } else if (PyLong_Check(o)) {
      int overflow = 0;
      long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
      if (overflow) {  // beyond 64 bits: its decimal digits
        std::string d = py::str(h);
        put(5);
        put(static_cast<int64_t>(d.size()));
        key += d;
      } else {
        put(6);
        put(static_cast<int64_t>(v));
      }
    } else if (PyFloat_Check(o)) {
      double v = PyFloat_AS_DOUBLE(o);
      put(7);
      key.append(reinterpret_cast<const char*>(&v), sizeof v);
    } else if (PyUnicode_Check(o)) {
      Py_ssize_t n = 0;
      const char* u = PyUnicode_AsUTF8AndSize(o, &n);
      if (!u) throw py::error_already_set();
      put(8);
      put(static_cast<int64_t>(n));
      key.append(u, static_cast<size_t>(n));
    } else if (THPDtype_Check(o)) {
      put(9);
      put(static_cast<int64_t>(reinterpret_cast<THPDtype*>(o)->scalar_type));
    } else if (THPDevice_Check(o)) {
      const c10::Device& d = reinterpret_cast<THPDevice*>(o)->device;
      put(10);
      put(static_cast<int64_t>(d.type()));
      put(d.index());
    } else {
      return py::none();
    }
  }
  return py::make_tuple(py::bytes(key), tensors);
}

}  // namespace

void register_program(py::module_& m) {
  m.def("_program_signature", &program_signature, py::arg("args"));
  py::class_<Program, std::shared_ptr<Program>>(m, "_Program")
      .def("launch", &Program::launch, py::arg("inputs"), py::arg("storages") = std::vector<at::Tensor>(),
           py::arg("rng") = py::none(), py::arg("binding") = -1)
      .def("generalize", &Program::generalize, py::arg("others"), py::arg("values"))
      .def("bind", &Program::bind, py::arg("values"), py::arg("out_bytes"), py::arg("out_specs"))
      .def("info", &Program::info)
      .def("out_specs", &Program::out_specs)
      .def("out_bytes", &Program::out_bytes)
      .def("values", &Program::values);

  py::class_<Export, std::shared_ptr<Export>>(m, "_Export")
      .def("manifest", &Export::manifest)
      .def("tensors", &Export::tensors)
      .def("program", &Export::program, py::arg("device") = 0);

  m.def("_export_load", [](const std::string& path) {
    tpurt_export_t* e = nullptr;
    check_status(tpurt_export_load(path.c_str(), &e), "torch_tpu.export.load");
    return std::make_shared<Export>(e);
  });

  // Writes an artifact: `tensors` are dicts as _Export.tensors() gives them
  // (a weight's "data": a contiguous CPU uint8 tensor of storage_bytes).
  m.def(
      "_export_save",
      [](const std::string& path, const std::shared_ptr<Program>& prog, const py::list& tensors,
         const std::string& manifest, const py::object& sizes) {
        std::vector<tpurt_export_tensor_t> ts;
        std::vector<std::string> names;
        std::vector<at::Tensor> keep;
        names.reserve(tensors.size());
        for (const py::handle& h : tensors) {
          py::dict d = h.cast<py::dict>();
          tpurt_export_tensor_t t{};
          names.push_back(d["name"].cast<std::string>());
          t.role = static_cast<tpurt_export_role_t>(d["role"].cast<int>());
          t.dtype = to_tpurt_dtype(d["dtype"].cast<at::ScalarType>(), "torch_tpu.export");
          auto sizes = d["sizes"].cast<std::vector<int64_t>>();
          auto strides = d["strides"].cast<std::vector<int64_t>>();
          TORCH_CHECK(sizes.size() == strides.size() && sizes.size() <= TPURT_MAX_DIMS,
                      "torch_tpu.export: tensor ", names.back(), " has ", sizes.size(), " dims (at most ",
                      TPURT_MAX_DIMS, ")");
          t.ndim = static_cast<int32_t>(sizes.size());
          std::copy(sizes.begin(), sizes.end(), t.sizes);
          std::copy(strides.begin(), strides.end(), t.strides);
          t.storage_offset = d["storage_offset"].cast<int64_t>();
          t.storage_bytes = d["storage_bytes"].cast<uint64_t>();
          t.program_index = d["program_index"].cast<int32_t>();
          t.from_input = d["from_input"].cast<bool>();
          t.writes_back = d["writes_back"].cast<int32_t>();
          if (t.role == TPURT_EXPORT_WEIGHT) {
            at::Tensor data = d["data"].cast<at::Tensor>().contiguous();
            TORCH_CHECK(data.device().is_cpu() && data.scalar_type() == at::kByte &&
                            static_cast<uint64_t>(data.numel()) == t.storage_bytes,
                        "torch_tpu.export: weight ", names.back(), "'s data must be ", t.storage_bytes,
                        " CPU bytes");
            keep.push_back(data);
            t.data = data.data_ptr();
          }
          ts.push_back(t);
        }
        for (size_t i = 0; i < ts.size(); ++i) ts[i].name = names[i].c_str();
        std::string sz = sizes.is_none() ? std::string() : sizes.cast<std::string>();
        check_status(tpurt_export_save_sized(path.c_str(), prog->raw(), ts.data(), static_cast<int32_t>(ts.size()),
                                             manifest.data(), manifest.size(), sz.data(), sz.size()),
                     "torch_tpu.export.save");
      },
      py::arg("path"), py::arg("program"), py::arg("tensors"), py::arg("manifest"), py::arg("sizes") = py::none());

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
