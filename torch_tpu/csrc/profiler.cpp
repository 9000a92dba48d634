// torch.profiler's device activity for the tpu: a Kineto PrivateUse1 plugin
// (REGISTER_PRIVATEUSE1_PROFILER, torch 2.13's supported hook). While a
// profile with ProfilerActivity.PrivateUse1 runs, the runtime's trace
// (tpurt/trace.h) records every command the device runs with its device-side
// times; at stop the session turns them into Kineto activities: kernels and
// copies on one track per queue, each linked to the aten op that launched it
// (a "tpuLaunchKernel" runtime event on the host thread, with the flow arrow
// the trace viewers draw), and, with a projection chip chosen
// (TORCH_TPU_PROJECT=v6e), the same kernels as a real TPU would run them, on
// a "projected v6e" track. The runtime does the recording; this file only
// converts.
#define USE_KINETO 1
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <GenericTraceActivity.h>
#include <libkineto.h>
#include <IActivityProfiler.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <torch/extension.h>

#include "memory_history.h"
#include "tpu_common.h"
#include "tpurt/precision.h"
#include "tpurt/project.h"
#include "tpurt/trace.h"

namespace py = pybind11;

namespace torch_tpu {
namespace {

// Device tracks: the queue id; the projected track of queue q is this + q.
constexpr int64_t kProjectedResource = 1000000;

std::mutex g_mu;
std::vector<tpurt_trace_event_t> g_last;  // the last session's events (projection.summary())
uint64_t g_last_busy_ns = 0;
int64_t g_last_offset_ns = 0;  // unix ns - trace ns, at the last stop
std::string g_project_chip;    // "" until read from TORCH_TPU_PROJECT or set from Python
bool g_project_read = false;

// Correlation ids are pushed per op on the op's thread; ops nest.
thread_local std::vector<uint64_t> tls_corr;

int64_t unix_minus_trace_ns() {
  int64_t unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  return unix_ns - static_cast<int64_t>(tpurt_trace_now_ns());
}

std::string project_chip() {
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_project_read) {
    const char* e = std::getenv("TORCH_TPU_PROJECT");
    if (e && *e && tpurt_project_chip_find(e)) g_project_chip = tpurt_project_chip_find(e)->name;
    g_project_read = true;
  }
  return g_project_chip;
}

double launch_seconds() {
  const char* e = std::getenv("TORCH_TPU_PROJECT_LAUNCH_US");
  double us = e && *e ? std::atof(e) : 1.0;
  return us > 0 ? us * 1e-6 : 0.0;
}

bool is_device_kind(uint32_t k) {
  return k == TPURT_TRACE_KERNEL || k == TPURT_TRACE_FUSED || k == TPURT_TRACE_COPY || k == TPURT_TRACE_CALL;
}

// The precision's bf16 passes for a float32 product (bf16 operands: 1).
int passes_for(int32_t dtype) {
  if (dtype != TPURT_DTYPE_FLOAT32) return 1;
  return tpurt_fp32_precision_passes(tpurt_fp32_precision());
}

class TpuSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    tpurt_trace_enable(true);
    mem_profiling_session(true);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    // Everything queued so far runs (and is recorded) before the trace stops.
    for (int i = 0, n = device_count_noexcept(); i < n; ++i) {
      tpurt_device_t* d = nullptr;
      if (tpurt_device_get(i, &d) == nullptr && d) tpurt_status_free(tpurt_device_synchronize(d));
    }
    busy_ns_ = tpurt_trace_busy_ns();
    tpurt_trace_enable(false);
    mem_profiling_session(false);
    events_.resize(tpurt_trace_count());
    events_.resize(tpurt_trace_take(events_.data(), events_.size()));
    if (tpurt_trace_dropped())
      errors_.push_back("tpu trace: " + std::to_string(tpurt_trace_dropped()) + " events dropped (buffer full)");
    offset_ns_ = unix_minus_trace_ns();
    std::lock_guard<std::mutex> g(g_mu);
    g_last = events_;
    g_last_busy_ns = busy_ns_;
    g_last_offset_ns = offset_ns_;
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                    int64_t /*startTime*/, int64_t /*endTime*/) override {
    span_ = std::make_unique<libkineto::TraceSpan>(0, 0, "tpu");
    std::map<uint64_t, const tpurt_trace_event_t*> launches;
    for (const auto& e : events_)
      if (e.kind == TPURT_TRACE_LAUNCH && e.id) launches[e.id] = &e;
    const tpurt_project_chip_t* chip = nullptr;
    std::string cname = project_chip();
    if (!cname.empty()) chip = tpurt_project_chip_find(cname.c_str());
    double launch_s = launch_seconds();
    std::map<uint64_t, int64_t> proj_end;  // per queue: where the projected timeline is
    std::set<uint64_t> flows_started;
    const pid_t pid = getpid();
    for (const auto& e : events_) {
      if (!is_device_kind(e.kind)) continue;
      const tpurt_trace_event_t* l = nullptr;
      auto it = launches.find(e.id);
      if (it != launches.end()) l = it->second;
      int64_t corr = l ? static_cast<int64_t>(l->corr) : 0;
      const libkineto::ITraceActivity* cpu_op = corr ? linked(static_cast<int32_t>(corr)) : nullptr;
      uint32_t flow_id = static_cast<uint32_t>(e.id & 0x7ffffff);
      // One arrow per launch: to its first kernel (a program launch runs many).
      bool first = l && !flows_started.count(e.id);
      if (first) {
        // The launch on the host thread: torch.profiler's cudaLaunchKernel.
        auto a = activity(libkineto::ActivityType::PRIVATEUSE1_RUNTIME,
                          e.kind == TPURT_TRACE_COPY ? "tpuMemcpyAsync"
                          : std::strcmp(l->name, "program launch") == 0 ? "tpuLaunchProgram"
                                                                          : "tpuLaunchKernel",
                          l->start_ns,
                          l->end_ns > l->start_ns ? l->end_ns : l->start_ns + 1);
        a.device = pid;
        a.resource = static_cast<int32_t>(l->tid);
        a.threadId = static_cast<int32_t>(l->tid);
        a.id = static_cast<int32_t>(corr);
        a.linked = cpu_op;
        a.flow.id = flow_id;
        a.flow.type = libkineto::kLinkAsyncCpuGpu;
        a.flow.start = 1;
        a.addMetadata("correlation", corr);
        a.log(logger);
        flows_started.insert(e.id);
      }
      auto type = e.kind == TPURT_TRACE_COPY ? libkineto::ActivityType::GPU_MEMCPY
                                             : libkineto::ActivityType::CONCURRENT_KERNEL;
      auto k = activity(type, e.name, e.start_ns, e.end_ns);
      k.device = e.device;
      k.resource = static_cast<int32_t>(e.queue);
      k.id = static_cast<int32_t>(corr);
      k.linked = cpu_op;
      if (first) {
        k.flow.id = flow_id;
        k.flow.type = libkineto::kLinkAsyncCpuGpu;
        k.flow.start = 0;
      }
      k.addMetadata("device", e.device);
      k.addMetadata("stream", static_cast<int64_t>(e.queue));
      k.addMetadata("correlation", corr);
      double flops = e.kind == TPURT_TRACE_FUSED ? e.flops : (l ? l->flops : 0.0);
      double bytes = e.kind == TPURT_TRACE_FUSED || e.kind == TPURT_TRACE_COPY ? e.bytes : (l ? l->bytes : 0.0);
      int32_t dtype = e.kind == TPURT_TRACE_FUSED ? e.dtype : (l ? l->dtype : -1);
      uint32_t flags = e.kind == TPURT_TRACE_FUSED ? e.flags : (l ? l->flags : 0u);
      k.addMetadata("flops", flops);
      k.addMetadata("bytes", bytes);
      if (e.kind == TPURT_TRACE_FUSED) k.addMetadataQuoted("fused", "true");
      k.log(logger);
      if (chip) {
        // The projected track: a kernel starts when it was launched and the
        // queue's previous projected kernel is done.
        bool cb = false;
        double s = tpurt_project_kernel_s(chip, flops, bytes, (flags & TPURT_TRACE_F_MATMUL) != 0,
                                          passes_for(dtype), launch_s, &cb);
        int64_t t0 = l ? static_cast<int64_t>(l->start_ns) : static_cast<int64_t>(e.start_ns);
        int64_t& qe = proj_end[e.queue];
        if (qe > t0) t0 = qe;
        int64_t dur = static_cast<int64_t>(s * 1e9);
        if (dur < 1) dur = 1;
        qe = t0 + dur;
        // A user annotation type: its time is not added to the ops' device time.
        auto p = activity(libkineto::ActivityType::GPU_USER_ANNOTATION, "projected " + cname + ": " + e.name,
                          static_cast<uint64_t>(t0),
                          static_cast<uint64_t>(t0 + dur));
        p.device = e.device;
        p.resource = static_cast<int32_t>(kProjectedResource + static_cast<int64_t>(e.queue));
        p.addMetadataQuoted("projected", cname);
        p.addMetadataQuoted("bound", cb ? "compute" : "memory");
        p.addMetadata("projected_us", s * 1e6);
        p.log(logger);
      }
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{0, 0x1000000, "TPU 0", "tpu:0 (vTPU)"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::set<uint64_t> queues;
    for (const auto& e : events_)
      if (is_device_kind(e.kind)) queues.insert(e.queue);
    std::vector<libkineto::ResourceInfo> out;
    std::string cname = project_chip();
    for (uint64_t q : queues) {
      out.push_back(libkineto::ResourceInfo{static_cast<int64_t>(q), static_cast<int64_t>(q), 0,
                                            "queue " + std::to_string(q)});
      if (!cname.empty())
        out.push_back(libkineto::ResourceInfo{kProjectedResource + static_cast<int64_t>(q),
                                              kProjectedResource + static_cast<int64_t>(q), 0,
                                              "projected " + cname + " (queue " + std::to_string(q) + ")"});
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  void pushCorrelationId(uint64_t id) override {
    tls_corr.push_back(id);
    tpurt_trace_set_correlation(id);
  }

  void popCorrelationId() override {
    if (!tls_corr.empty()) tls_corr.pop_back();
    tpurt_trace_set_correlation(tls_corr.empty() ? 0 : tls_corr.back());
  }

  std::string getDeviceProperties() override {
    tpurt_device_t* d = nullptr;
    tpurt_device_info_t info{};
    if (tpurt_device_get(0, &d) != nullptr || !d || tpurt_device_query(d, &info) != nullptr) return "";
    return "{\"id\": 0, \"name\": \"vTPU\", \"totalGlobalMem\": " + std::to_string(info.hbm_bytes) +
           ", \"numThreads\": " + std::to_string(info.num_threads) + "}";
  }

 private:
  libkineto::GenericTraceActivity activity(libkineto::ActivityType type, const std::string& name,
                                           uint64_t start_ns, uint64_t end_ns) {
    libkineto::GenericTraceActivity a(*span_, type, name);
    a.startTime = static_cast<int64_t>(start_ns) + offset_ns_;
    a.endTime = static_cast<int64_t>(end_ns) + offset_ns_;
    return a;
  }

  std::vector<tpurt_trace_event_t> events_;
  std::vector<std::string> errors_;
  std::unique_ptr<libkineto::TraceSpan> span_;
  uint64_t busy_ns_ = 0;
  int64_t offset_ns_ = 0;
};

class TpuActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override { return types_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& types, const libkineto::Config&) override {
    bool wanted = types.count(libkineto::ActivityType::CONCURRENT_KERNEL) ||
                  types.count(libkineto::ActivityType::GPU_MEMCPY) ||
                  types.count(libkineto::ActivityType::PRIVATEUSE1_RUNTIME);
    if (!wanted) return nullptr;
    return std::make_unique<TpuSession>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<libkineto::ActivityType>& types, const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_{"tpu"};
  std::set<libkineto::ActivityType> types_{
      libkineto::ActivityType::CONCURRENT_KERNEL, libkineto::ActivityType::GPU_MEMCPY,
      libkineto::ActivityType::GPU_MEMSET,        libkineto::ActivityType::GPU_USER_ANNOTATION,
      libkineto::ActivityType::PRIVATEUSE1_RUNTIME, libkineto::ActivityType::PRIVATEUSE1_DRIVER,
  };
};

REGISTER_PRIVATEUSE1_PROFILER(TpuActivityProfiler);

// torch.set_float32_matmul_precision, read when a float32 product runs.
tpurt_fp32_precision_t torch_fp32_precision() {
  switch (at::globalContext().float32MatmulPrecision()) {
    case at::Float32MatmulPrecision::HIGH:
      return TPURT_FP32_HIGH;
    case at::Float32MatmulPrecision::MEDIUM:
      return TPURT_FP32_MEDIUM;
    default:
      return TPURT_FP32_HIGHEST;
  }
}

}  // namespace

// torch_tpu._C's profiler functions: the last session's events (for
// torch_tpu.projection), tracing without torch.profiler, the projection table.
void register_profiler(py::module_& m) {
  tpurt_fp32_precision_set_source(torch_fp32_precision);
  m.def("_fp32_precision_override", [](int p) { tpurt_fp32_precision_override(p); });
  m.def("_trace_enable", [](bool on) { tpurt_trace_enable(on); });
  m.def("_trace_busy_ns", [] { return tpurt_trace_busy_ns(); });
  m.def("_trace_take_into_last", [] {
    std::vector<tpurt_trace_event_t> ev(tpurt_trace_count());
    ev.resize(tpurt_trace_take(ev.data(), ev.size()));
    std::lock_guard<std::mutex> g(g_mu);
    g_last = std::move(ev);
    g_last_busy_ns = tpurt_trace_busy_ns();
    g_last_offset_ns = unix_minus_trace_ns();
  });
  m.def("_trace_last", [] {
    // Device events joined with their launches: one dict per device event. Copied under the lock,
    // built after it (making Python objects can run the garbage collector, and with it any code).
    std::vector<tpurt_trace_event_t> last;
    int64_t offset_ns;
    uint64_t busy_ns;
    {
      std::lock_guard<std::mutex> g(g_mu);
      last = g_last;
      offset_ns = g_last_offset_ns;
      busy_ns = g_last_busy_ns;
    }
    std::map<uint64_t, const tpurt_trace_event_t*> launches;
    for (const auto& e : last)
      if (e.kind == TPURT_TRACE_LAUNCH && e.id) launches[e.id] = &e;
    py::list out;
    static const char* kinds[] = {"", "launch", "kernel", "fused", "copy", "call"};
    for (const auto& e : last) {
      if (!is_device_kind(e.kind)) continue;
      auto it = launches.find(e.id);
      const tpurt_trace_event_t* l = it != launches.end() ? it->second : nullptr;
      bool own = e.kind == TPURT_TRACE_FUSED || e.kind == TPURT_TRACE_COPY;
      py::dict d;
      d["kind"] = kinds[e.kind];
      d["name"] = std::string(e.name);
      d["device"] = e.device;
      d["queue"] = e.queue;
      d["start_ns"] = static_cast<int64_t>(e.start_ns) + offset_ns;
      d["end_ns"] = static_cast<int64_t>(e.end_ns) + offset_ns;
      d["correlation"] = l ? l->corr : 0;
      d["launch_ns"] = static_cast<int64_t>(l ? l->start_ns : e.start_ns) + offset_ns;
      d["flops"] = own && e.kind == TPURT_TRACE_FUSED ? e.flops : (l ? l->flops : 0.0);
      d["bytes"] = own ? e.bytes : (l ? l->bytes : 0.0);
      d["dtype"] = e.kind == TPURT_TRACE_FUSED ? e.dtype : (l ? l->dtype : -1);
      d["matmul"] = ((e.kind == TPURT_TRACE_FUSED ? e.flags : (l ? l->flags : 0u)) & TPURT_TRACE_F_MATMUL) != 0;
      out.append(d);
    }
    return py::make_tuple(out, busy_ns);
  });
  m.def("_project_chips", [] {
    py::list out;
    for (size_t i = 0; i < tpurt_project_chip_count(); ++i) {
      const tpurt_project_chip_t* c = tpurt_project_chip_at(i);
      py::dict d;
      d["name"] = c->name;
      d["bf16_flops"] = c->bf16_flops;
      d["hbm_bytes_per_s"] = c->hbm_bytes_per_s;
      d["hbm_bytes"] = c->hbm_bytes;
      d["ici_bytes_per_s"] = c->ici_bytes_per_s;
      d["source"] = c->source;
      out.append(d);
    }
    return out;
  });
  m.def("_project_kernel_s", [](const std::string& chip, double flops, double bytes, bool matmul, int passes,
                                double launch_s) {
    const tpurt_project_chip_t* c = tpurt_project_chip_find(chip.c_str());
    if (!c) throw std::invalid_argument("unknown TPU generation '" + chip + "' (v5e, v5p, v6e, v7)");
    bool cb = false;
    double s = tpurt_project_kernel_s(c, flops, bytes, matmul, passes, launch_s, &cb);
    return py::make_tuple(s, cb);
  });
  m.def("_project_set_chip", [](const std::string& chip) {
    const tpurt_project_chip_t* c = chip.empty() ? nullptr : tpurt_project_chip_find(chip.c_str());
    if (!chip.empty() && !c) throw std::invalid_argument("unknown TPU generation '" + chip + "' (v5e, v5p, v6e, v7)");
    std::lock_guard<std::mutex> g(g_mu);
    g_project_chip = c ? c->name : "";
    g_project_read = true;
  });
  m.def("_project_chip", [] { return project_chip(); });
  m.def("_project_launch_s", [] { return launch_seconds(); });
  m.def("_fp32_precision_passes", [](int32_t dtype) { return passes_for(dtype); });
}

}  // namespace torch_tpu
