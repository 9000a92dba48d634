// The Python module torch_tpu._C: the few runtime functions the Python
// package calls (init, device queries, synchronize, memory statistics, the
// default generator, the op table, CPU fallback switch). Importing it only
// registers the C++ pieces with PyTorch; it never starts the runtime.
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include "tpu_common.h"
#include "tpurt/debug.h"

namespace torch_tpu::vision {
bool define_ops();  // vision.cpp
}

namespace py = pybind11;

namespace {

tpurt_device_t* device_arg(int64_t index) {
  return torch_tpu::get_device(static_cast<c10::DeviceIndex>(index));
}

py::dict memory_stats(int64_t device) {
  tpurt_memory_stats_t s{};
  torch_tpu::check_status(tpurt_memory_stats(device_arg(device), &s), "tpu memory_stats");
  py::dict d;
  d["allocated_bytes"] = s.allocated_bytes;
  d["peak_allocated_bytes"] = s.peak_allocated_bytes;
  d["reserved_bytes"] = s.reserved_bytes;
  d["peak_reserved_bytes"] = s.peak_reserved_bytes;
  d["capacity_bytes"] = s.capacity_bytes;
  d["num_allocs"] = s.num_allocs;
  d["num_frees"] = s.num_frees;
  d["num_ooms"] = s.num_ooms;
  d["num_segments"] = s.num_segments;
  return d;
}

py::dict device_info(int64_t device) {
  tpurt_device_info_t info{};
  torch_tpu::check_status(tpurt_device_query(device_arg(device), &info), "tpu device_info");
  py::dict d;
  d["name"] = std::string(info.name, strnlen(info.name, sizeof(info.name)));
  d["hbm_bytes"] = info.hbm_bytes;
  d["num_threads"] = info.num_threads;
  return d;
}

}  // namespace

namespace torch_tpu {
void register_kernel_cache(py::module_& m);  // kernel_cache.cpp
void register_profiler(py::module_& m);      // profiler.cpp
void register_memory_history(py::module_& m);  // memory_history.cpp
void register_program(py::module_& m);       // program.cpp
void register_dist(py::module_& m);          // dist.cpp
}

PYBIND11_MODULE(_C, m) {
  // Small kernels on an idle queue run on the submitting thread (vtpu_queue.c).
  // The runtime's own default keeps every kernel on the queue's worker (its C
  // tests hold kernels on gates the host opens later); the kernels PyTorch's
  // ops reach are pure compute, so this layer turns it on unless the user chose.
  setenv("TPURT_VTPU_INLINE_MAX", "65536", /*overwrite=*/0);
  torch_tpu::install_host_hooks();
  m.doc() = "torch_tpu C++ layer: PrivateUse1 registrations over the tpurt runtime";
  torch_tpu::register_direct_structured_ops();
  m.def("_direct_structured_op_count", [] { return torch_tpu::direct_structured_op_count(); });

  m.def("_init", [] { torch_tpu::ensure_init(); });
  // torchvision's schemas and CPU kernels, where torchvision's own _C did not load (torch_tpu/_vision.py)
  m.def("_vision_define_ops", [] { return torch_tpu::vision::define_ops(); });
  m.def("_device_count", [] { return torch_tpu::device_count_noexcept(); });
  m.def(
      "_synchronize",
      [](int64_t device) {
        tpurt_device_t* dev = device_arg(device);
        tpurt_status_t s;
        {
          py::gil_scoped_release no_gil;
          s = tpurt_device_synchronize(dev);
        }
        torch_tpu::check_status(s, "tpu synchronize");
      },
      py::arg("device") = -1);
  m.def("_get_exec_mode", [] { return static_cast<int>(tpurt_exec_mode_get()); });
  m.def("_set_exec_mode", [](int mode) {
    TORCH_CHECK_VALUE(mode >= 0 && mode <= 2, "tpu execution mode must be 0 (strict), 1 (debug) or 2 (defer), got ",
                      mode);
    tpurt_status_t s;
    {
      py::gil_scoped_release no_gil;  // the switch waits for other threads' ops
      s = tpurt_exec_mode_set(static_cast<tpurt_exec_mode_t>(mode));
    }
    torch_tpu::check_status(s, "tpu set_eager_mode");
  });
  m.def("_memory_stats", &memory_stats, py::arg("device") = -1);
  m.def("_reset_peak_memory_stats", [](int64_t device) { tpurt_memory_reset_peak(device_arg(device)); },
        py::arg("device") = -1);
  m.def(
      "_empty_cache",
      [](int64_t device) {
        tpurt_device_t* dev = device_arg(device);
        tpurt_status_t s;
        {
          py::gil_scoped_release no_gil;
          s = tpurt_memory_empty_cache(dev);
        }
        torch_tpu::check_status(s, "tpu empty_cache");
      },
      py::arg("device") = -1);
  m.def(
      "_mem_get_info",
      [](int64_t device) {
        uint64_t free_bytes = 0, total = 0;
        torch_tpu::check_status(tpurt_memory_get_info(device_arg(device), &free_bytes, &total), "tpu mem_get_info");
        return py::make_tuple(free_bytes, total);
      },
      py::arg("device") = -1);
  m.def(
      "_get_default_generator",
      [](int64_t device) {
        const at::Generator& gen = torch_tpu::default_generator(static_cast<c10::DeviceIndex>(device));
        return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(gen));
      },
      py::arg("device") = -1);
  // The op-table entry an operator's calls reach (tpurt_op_resolve: the one
  // rule): _op_resolve("aten::add_", "Tensor") -> "add", or None.
  m.def(
      "_op_resolve",
      [](const std::string& name, const std::string& overload, bool complex) -> py::object {
        const tpurt_op_def_t* def =
            tpurt_op_resolve(name.c_str(), overload.c_str(), complex ? TPURT_RESOLVE_COMPLEX : 0);
        if (!def) return py::none();
        return py::str(def->name);
      },
      py::arg("name"), py::arg("overload") = "", py::arg("complex") = false);
  // The dtypes an op-table entry computes in (its dtype mask, tpurt/kernel.h), or None.
  m.def("_op_dtypes", [](const std::string& name) -> py::object {
    const tpurt_op_def_t* def = tpurt_op_lookup(name.c_str());
    if (!def) return py::none();
    py::list dtypes;
    for (int d = 0; d < TPURT_DTYPE_COUNT; ++d)
      if (tpurt_op_supports_dtype(def, static_cast<tpurt_dtype_t>(d)))
        dtypes.append(torch_tpu::from_tpurt_dtype(static_cast<tpurt_dtype_t>(d)));
    return dtypes;
  });
  // Whether an op-table entry draws random numbers (TPURT_OP_RANDOM: the fallback gives it a generator
  // reservation), or None without an entry.
  m.def("_op_draws_random", [](const std::string& name) -> py::object {
    const tpurt_op_def_t* def = tpurt_op_lookup(name.c_str());
    if (!def) return py::none();
    return py::bool_((def->flags & TPURT_OP_RANDOM) != 0);
  });
  // Which library runs fp32 matrix products ("own", "mkl" or "openblas"); _set_fp32_blas(2/1/0/-1) for tests.
  m.def("_fp32_blas", [] { return std::string(tpurt_fp32_blas()); });
  m.def("_set_fp32_blas", [](int which) { tpurt_fp32_blas_set(which); });
  m.def("_kernel_names", [] {
    py::list names;
    for (size_t i = 0, n = tpurt_op_count(); i < n; ++i) names.append(tpurt_op_at(i)->name);
    return names;
  });
  m.def("_set_cpu_fallback", [](bool on) { torch_tpu::set_cpu_fallback_enabled(on); });
  m.def("_get_cpu_fallback", [] { return torch_tpu::cpu_fallback_enabled(); });
  m.def("_is_device_ptr", [](uint64_t ptr) {
    int n = torch_tpu::device_count_noexcept();
    for (int i = 0; i < n; ++i)
      if (tpurt_memory_is_device_ptr(device_arg(i), reinterpret_cast<const void*>(ptr))) return true;
    return false;
  });
  m.def("_meta_cache_stats", [] {
    torch_tpu::MetaCacheStats s = torch_tpu::meta_cache_stats();
    py::dict d;
    d["hits"] = s.hits;
    d["misses"] = s.misses;
    d["size"] = s.size;
    return d;
  });
  m.def("_device_info", &device_info, py::arg("device") = -1);

  // ---- Debug mode (runtime/exec/debug/) ----
  m.def("_debug_set_nan_check", [](int mode) { tpurt_debug_set_nan_check(mode); });
  m.def("_debug_get_nan_check", [] { return tpurt_debug_nan_check(); });
  m.def("_debug_stats", [] {
    tpurt_debug_stats_t s{};
    tpurt_debug_stats(&s);
    py::dict d;
    d["violations"] = s.violations;
    d["patched_pages"] = s.patched_pages;
    d["guarded_allocs"] = s.guarded_allocs;
    d["quarantined_bytes"] = s.quarantined_bytes;
    return d;
  });
  // Raises the device memory violation host code caused since the last op, if any.
  m.def("_debug_check_violation", [] { torch_tpu::check_status(tpurt_debug_take_violation(), "tpu debug"); });
  // Tests of the guards: runs the deliberately faulty "_debug_touch" kernel over
  // `nbytes` bytes at device address `ptr` (reads them, or adds 1 to each).
  m.def(
      "_debug_touch",
      [](uint64_t ptr, int64_t nbytes, bool write) {
        tpurt_tensor_t t{};
        t.data = reinterpret_cast<void*>(ptr);
        t.dtype = TPURT_DTYPE_UINT8;
        t.ndim = 1;
        t.sizes[0] = nbytes;
        t.strides[0] = 1;
        tpurt_arg_t args[2]{};
        args[0].kind = TPURT_ARG_TENSOR;
        args[0].v.tensor = &t;
        args[1].kind = TPURT_ARG_BOOL;
        args[1].v.b = write;
        tpurt_op_call_t call{};
        call.name = "_debug_touch";
        call.overload = "";
        call.num_args = 2;
        call.args = args;
        tpurt_status_t s;
        {
          py::gil_scoped_release no_gil;
          s = tpurt_queue_submit_kernel(torch_tpu::current_queue(), tpurt_debug_touch_op(), &call);
          if (!s) s = tpurt_queue_synchronize(torch_tpu::current_queue());
        }
        torch_tpu::check_status(s, "aten::_debug_touch");
      },
      py::arg("ptr"), py::arg("nbytes"), py::arg("write") = false);
  // DeferAndFuse statistics and switches (runtime/exec/defer/fuse_run.c).
  m.def("_fusion_stats", [] {
    tpurt_fuse_stats_t st;
    tpurt_fuse_stats_get(&st);
    py::dict d;
    d["ops_recorded"] = st.ops_recorded;
    d["flushes"] = st.flushes;
    d["kernels_launched"] = st.kernels_launched;
    d["fused_kernels"] = st.fused_groups;
    d["fused_ops"] = st.fused_ops;
    d["stores_skipped"] = st.stores_skipped;
    d["bytes_skipped"] = st.bytes_skipped;
    d["fallbacks"] = st.fallbacks;
    d["plans_made"] = st.plans_made;
    d["plans_replayed"] = st.plans_replayed;
    d["codegen_lookups"] = st.codegen_lookups;
    d["codegen_memory_hits"] = st.codegen_memory_hits;
    d["codegen_disk_loads"] = st.codegen_disk_loads;
    d["codegen_shared_loads"] = st.codegen_shared_loads;
    d["codegen_shared_stores"] = st.codegen_shared_stores;
    d["codegen_builds"] = st.codegen_builds;
    d["codegen_build_failures"] = st.codegen_build_failures;
    d["codegen_disk_rejects"] = st.codegen_disk_rejects;
    d["codegen_runs"] = st.codegen_runs;
    return d;
  });
  m.def("_fusion_wait_builds", [] {
    py::gil_scoped_release nogil;
    tpurt_fuse_wait_builds();
  });
  m.def("_fusion_set_codegen", [](bool on) { tpurt_fuse_set_codegen(on); });
  m.def("_fusion_codegen", [] { return tpurt_fuse_codegen(); });
  m.def("_fusion_stats_reset", [] { tpurt_fuse_stats_reset(); });
  m.def("_fusion_set_enabled", [](bool on) { tpurt_fuse_set_enabled(on); });
  m.def("_fusion_enabled", [] { return tpurt_fuse_enabled(); });
  m.def("_fusion_cache_clear", [] { tpurt_fuse_cache_clear(); });
  torch_tpu::register_kernel_cache(m);
  torch_tpu::register_profiler(m);
  torch_tpu::register_memory_history(m);
  torch_tpu::register_program(m);
  torch_tpu::register_dist(m);
}
