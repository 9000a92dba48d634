// The runtime's host hooks (tpurt_set_host_hooks): which threads' errors are
// shared, and Ctrl-C. A wait for the device polls `interrupted` on the
// thread that waits; on Python's main thread it runs Python's signal
// handlers (PyErr_CheckSignals), so Ctrl-C during `.cpu()` or
// `torch.tpu.synchronize()` returns within a poll interval and the queue
// drops its backlog. The exception the handler raised (KeyboardInterrupt)
// is kept here and re-raised where the runtime's CANCELLED status reaches
// C++ (throw_status), so the user sees their own exception.
#include <Python.h>
#include <pybind11/pybind11.h>

#include <atomic>

#include "tpu_common.h"

namespace py = pybind11;

namespace torch_tpu {
namespace {

unsigned long g_main_ident = 0;
std::atomic<bool> g_pending{false};
PyObject* g_type = nullptr;  // the kept exception, under the GIL
PyObject* g_value = nullptr;
PyObject* g_tb = nullptr;

tpurt_status_t interrupted() {
  if (!Py_IsInitialized() || PyThread_get_thread_ident() != g_main_ident) return nullptr;
  if (!g_pending.load()) {
    PyGILState_STATE st = PyGILState_Ensure();
    if (PyErr_CheckSignals() < 0) {
      PyObject *t, *v, *tb;
      PyErr_Fetch(&t, &v, &tb);
      Py_XDECREF(g_type);
      Py_XDECREF(g_value);
      Py_XDECREF(g_tb);
      g_type = t;
      g_value = v;
      g_tb = tb;
      g_pending.store(true);
    }
    PyGILState_Release(st);
  }
  if (!g_pending.load()) return nullptr;
  return TPURT_STATUS(CANCELLED,
                      "interrupted: the work queued on the tpu that had not started was dropped; "
                      "tensors it would have written raise this error when read");
}

// PyTorch's autograd engine runs backward ops on threads of its own (no
// Python thread state): their errors go to whichever thread syncs.
bool thread_is_shared() { return Py_IsInitialized() && PyGILState_GetThisThreadState() == nullptr; }

}  // namespace

void install_host_hooks() {
  g_main_ident = PyThread_get_thread_ident();
  {
    py::gil_scoped_acquire gil;
    py::object main = py::module_::import("threading").attr("main_thread")();
    g_main_ident = main.attr("ident").cast<unsigned long>();
  }
  static const tpurt_host_hooks_t hooks = {thread_is_shared, interrupted};
  tpurt_set_host_hooks(&hooks);
}

void raise_pending_interrupt() {
  if (!g_pending.load() || !Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  if (!g_pending.exchange(false)) return;
  PyErr_Restore(g_type, g_value, g_tb);
  g_type = g_value = g_tb = nullptr;
  throw py::error_already_set();
}

}  // namespace torch_tpu
