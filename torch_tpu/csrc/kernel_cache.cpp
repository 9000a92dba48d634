// torch_tpu._C's view of the on-disk kernel cache (tpurt/kernel_cache.h), for
// `python -m torch_tpu.cache`: the runtime's own rules and walks, so the
// tool and the runtime never disagree about what is trusted or owned.
#include <torch/extension.h>

#include "tpu_common.h"
#include "tpurt/kernel_cache.h"

namespace py = pybind11;

namespace {

py::dict entry_dict(const tpurt_kernel_cache_entry_t* e) {
  py::dict d;
  d["name"] = std::string(e->name);
  d["library"] = e->library;
  d["record"] = e->record;
  d["failure"] = e->failure;
  d["bytes"] = e->bytes;
  d["last_used"] = e->last_used;
  if (e->problem) d["problem"] = std::string(e->problem);
  return d;
}

void append_entry(void* user, const tpurt_kernel_cache_entry_t* e) {
  static_cast<py::list*>(user)->append(entry_dict(e));
}

}  // namespace

namespace torch_tpu {

void register_kernel_cache(py::module_& m) {
  m.def("_kernel_cache_info", [] {
    tpurt_kernel_cache_info_t info{};
    tpurt_kernel_cache_disk_info(&info);
    py::dict d;
    d["dir"] = std::string(info.dir);
    d["exists"] = info.exists;
    d["trusted"] = info.trusted;
    d["why"] = std::string(info.why);
    d["kernels"] = info.kernels;
    d["failures"] = info.failures;
    d["bytes"] = info.bytes;
    d["limit_bytes"] = info.limit_bytes;
    return d;
  });
  m.def("_kernel_cache_list", [] {
    py::list out;
    check_status(tpurt_kernel_cache_disk_list(append_entry, &out), "kernel cache list");
    return out;
  });
  m.def("_kernel_cache_clear", [] {
    uint64_t removed = 0;
    check_status(tpurt_kernel_cache_disk_clear(&removed), "kernel cache clear");
    return removed;
  });
  m.def(
      "_kernel_cache_verify",
      [](bool remove) {
        py::list bad;
        uint64_t good = 0, nbad = 0;
        check_status(tpurt_kernel_cache_disk_verify(remove, append_entry, &bad, &good, &nbad), "kernel cache verify");
        return py::make_tuple(good, bad);
      },
      py::arg("remove") = false);
}

}  // namespace torch_tpu
