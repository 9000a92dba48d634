// torch.tpu.memory._record_memory_history / _snapshot in torch.cuda's format,
// so PyTorch's memory_viz renders a tpu snapshot unchanged. The runtime's
// caching allocator reports segment events and OOMs to an observer
// (tpurt_memory_set_observer) and lists its segments and blocks
// (tpurt_memory_snapshot); this file adds what only PyTorch can: the Python
// (and C++) stack of each allocation (torch::CapturedTraceback, as
// torch.cuda does), the trace ring of alloc/free/segment/OOM events, and the
// snapshot dict. Also reports allocations to torch.profiler
// (profile_memory=True) while a profile runs. Off, each allocation and free
// pays one relaxed load.
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/extension.h>

#include <c10/core/Allocator.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "memory_history.h"
#include "tpu_common.h"

namespace py = pybind11;

// From torch/csrc/profiler/python/combined_traceback.h (libtorch_python), declared here because that
// header includes nlohmann/json, which torch's wheel does not ship.
namespace torch {
std::vector<py::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
void installCapturedTracebackPython();
}  // namespace torch

namespace torch_tpu {

std::atomic<int> g_mem_observing{0};

namespace {

enum Action { kAlloc, kFreeRequested, kFreeCompleted, kSegmentAlloc, kSegmentFree, kOom, kSnapshot };
const char* kActionNames[] = {"alloc", "free_requested", "free_completed", "segment_alloc",
                              "segment_free", "oom", "snapshot"};

struct Entry {
  Action action;
  uint64_t addr;
  uint64_t size;
  uint64_t stream;
  int64_t time_us;
  uint64_t device_free;  // oom
  std::shared_ptr<torch::CapturedTraceback> frames;
};

struct Live {
  uint64_t size;
  uint64_t requested;
  std::shared_ptr<torch::CapturedTraceback> frames;
};

std::mutex g_mu;
bool g_history = false;   // under g_mu (g_mem_observing mirrors it for the fast check)
bool g_profiling = false; // a torch.profiler session is running (memory events for profile_memory)
size_t g_max_entries = 100000;
bool g_python = true, g_cpp = false;
std::deque<Entry> g_trace[TPURT_MAX_CHIPS];
std::unordered_map<uint64_t, Live> g_live;
std::unordered_map<uint64_t, std::shared_ptr<torch::CapturedTraceback>> g_segment_frames;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int device_index_of(tpurt_device_t* d) {
  for (int i = 0, n = device_count_noexcept(); i < n; ++i) {
    tpurt_device_t* x = nullptr;
    if (tpurt_device_get(i, &x) == nullptr && x == d) return i;
  }
  return 0;
}

void push(int dev, Entry e) {
  auto& t = g_trace[dev];
  t.push_back(std::move(e));
  if (t.size() > g_max_entries) t.pop_front();
}

void update_observing() { g_mem_observing.store((g_history ? 1 : 0) | (g_profiling ? 2 : 0)); }

void observer(void* /*user*/, tpurt_device_t* device, uint32_t event, uint64_t addr, uint64_t size, uint64_t queue) {
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_history) return;
  int dev = device_index_of(device);
  Entry e{kSegmentAlloc, addr, size, queue, now_us(), 0, nullptr};
  if (event == TPURT_MEMORY_EVENT_SEGMENT_FREE) {
    e.action = kSegmentFree;
    g_segment_frames.erase(addr);
  } else if (event == TPURT_MEMORY_EVENT_OOM) {
    e.action = kOom;
    e.addr = 0;
    e.device_free = addr;
  }
  // A segment_alloc gets the stack of the allocation that made it, in
  // mem_observe_alloc: here the allocator's lock is held, and gathering a
  // Python stack takes the GIL, which could deadlock.
  push(dev, std::move(e));
}

std::shared_ptr<torch::CapturedTraceback> gather() {
  return torch::CapturedTraceback::gather(g_python, /*script=*/false, g_cpp);
}

}  // namespace

void mem_observe_alloc(c10::DeviceIndex index, tpurt_device_t* dev, void* ptr, size_t nbytes, tpurt_queue_t* q) {
  int obs = g_mem_observing.load(std::memory_order_relaxed);
  uint64_t size = tpurt_memory_block_size(dev, ptr);
  if ((obs & 2) && c10::memoryProfilingEnabled()) {
    tpurt_memory_stats_t st{};
    tpurt_status_free(tpurt_memory_stats(dev, &st));
    c10::reportMemoryUsageToProfiler(ptr, static_cast<int64_t>(size), st.allocated_bytes, st.reserved_bytes,
                                     c10::Device(kTpu, index));
  }
  if (!(obs & 1)) return;
  auto frames = gather();
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_history) return;
  // A segment this allocation made (its entry is among the last few) gets its stack.
  g_live[reinterpret_cast<uint64_t>(ptr)] = Live{size, nbytes, frames};
  push(index, Entry{kAlloc, reinterpret_cast<uint64_t>(ptr), size, tpurt_queue_id(q), now_us(), 0, frames});
  auto& t = g_trace[index];
  for (size_t i = t.size(); i-- > 0;) {
    Entry& e = t[i];
    if (e.action == kSegmentAlloc && !e.frames && reinterpret_cast<uint64_t>(ptr) >= e.addr &&
        reinterpret_cast<uint64_t>(ptr) < e.addr + e.size) {
      e.frames = frames;
      g_segment_frames[e.addr] = frames;
      break;
    }
    if (t.size() - i > 64) break;
  }
}

void mem_observe_free(c10::DeviceIndex index, tpurt_device_t* dev, void* ptr) {
  int obs = g_mem_observing.load(std::memory_order_relaxed);
  uint64_t size = tpurt_memory_block_size(dev, ptr);
  if ((obs & 2) && c10::memoryProfilingEnabled()) {
    tpurt_memory_stats_t st{};
    tpurt_status_free(tpurt_memory_stats(dev, &st));
    c10::reportMemoryUsageToProfiler(ptr, -static_cast<int64_t>(size),
                                     st.allocated_bytes >= size ? st.allocated_bytes - size : 0, st.reserved_bytes,
                                     c10::Device(kTpu, index));
  }
  if (!(obs & 1)) return;
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_history) return;
  auto it = g_live.find(reinterpret_cast<uint64_t>(ptr));
  std::shared_ptr<torch::CapturedTraceback> frames;
  uint64_t stream = 0;
  if (it != g_live.end()) {
    frames = it->second.frames;
    g_live.erase(it);
  }
  // The runtime's free is stream-ordered: the block is reusable by its queue
  // at once, so the request and its completion are one moment here.
  int64_t t = now_us();
  push(index, Entry{kFreeRequested, reinterpret_cast<uint64_t>(ptr), size, stream, t, 0, frames});
  push(index, Entry{kFreeCompleted, reinterpret_cast<uint64_t>(ptr), size, stream, t, 0, frames});
}

tpurt_status_t mem_observe_oom(tpurt_status_t s) {
  if (!mem_history_enabled() || tpurt_status_code(s) != TPURT_STATUS_RESOURCE_EXHAUSTED) return s;
  tpurt_status_t out = tpurt_status_make(
      TPURT_STATUS_RESOURCE_EXHAUSTED, __FILE__, __LINE__,
      "%s. Memory history is being recorded: torch.tpu.memory._dump_snapshot(\"snapshot.pickle\") saves "
      "it with this OOM and every allocation's stack (open it at https://pytorch.org/memory_viz, or "
      "python -m torch.cuda._memory_viz trace_plot snapshot.pickle)",
      tpurt_status_message(s));
  tpurt_status_free(s);
  return out;
}

bool mem_history_enabled() { return (g_mem_observing.load(std::memory_order_relaxed) & 1) != 0; }

void mem_profiling_session(bool on) {
  std::lock_guard<std::mutex> g(g_mu);
  g_profiling = on;
  update_observing();
}

namespace {

py::object frames_list(torch::CapturedTraceback* tb, std::unordered_map<torch::CapturedTraceback*, py::object>& cache) {
  if (!tb) return py::list();
  auto it = cache.find(tb);
  if (it != cache.end()) return it->second;
  std::vector<torch::CapturedTraceback*> v{tb};
  py::object o = torch::py_symbolize(v).at(0);
  cache[tb] = o;
  return o;
}

void record_history(py::object enabled, py::object context, py::object stacks, size_t max_entries) {
  // torch.cuda's spelling: enabled None/False -> off, "all"/"state"/True -> on.
  bool on = !enabled.is_none() && !(py::isinstance<py::bool_>(enabled) && !enabled.cast<bool>());
  std::string st = stacks.is_none() ? "python" : py::str(stacks).cast<std::string>();
  if (on) torch::installCapturedTracebackPython();
  // what is dropped is destroyed after the lock is released (its stacks hold Python objects)
  std::deque<Entry> old_trace[TPURT_MAX_CHIPS];
  std::unordered_map<uint64_t, Live> old_live;
  std::unordered_map<uint64_t, std::shared_ptr<torch::CapturedTraceback>> old_segment_frames;
  std::lock_guard<std::mutex> g(g_mu);
  g_history = on;
  g_max_entries = max_entries ? max_entries : 1;
  g_python = st == "python" || st == "all";
  g_cpp = st == "all";
  if (!on) {
    for (int i = 0; i < TPURT_MAX_CHIPS; ++i) old_trace[i].swap(g_trace[i]);
    old_live.swap(g_live);
    old_segment_frames.swap(g_segment_frames);
  }
  tpurt_memory_set_observer(on ? observer : nullptr, nullptr);
  update_observing();
}

// What a snapshot reads, copied under g_mu. The Python objects are built after the lock is
// released: making them can run Python's garbage collector, which can free a tpu tensor, whose
// free takes g_mu (mem_observe_free): built under the lock, that deadlocked.
struct SnapBlock {
  tpurt_memory_block_info_t info;
  uint64_t requested;
  std::shared_ptr<torch::CapturedTraceback> frames, segment_frames;
};

py::dict snapshot() {
  int n = device_count_noexcept();
  std::vector<std::vector<SnapBlock>> dev_blocks(n > 0 ? n : 0);
  std::vector<std::vector<Entry>> dev_trace(n > 0 ? n : 0);
  // The allocator's blocks first, without g_mu: the allocator calls `observer` (which takes g_mu)
  // with its own lock held, so g_mu is never held while asking for the allocator's.
  std::vector<std::vector<tpurt_memory_block_info_t>> dev_infos(dev_blocks.size());
  for (int dev = 0; dev < n; ++dev) {
    tpurt_device_t* d = nullptr;
    if (tpurt_device_get(dev, &d) != nullptr || !d) continue;
    auto& blocks = dev_infos[dev];
    size_t count = tpurt_memory_snapshot(d, nullptr, 0);
    blocks.resize(count + 64);  // room for segments made meanwhile
    blocks.resize(std::min(tpurt_memory_snapshot(d, blocks.data(), blocks.size()), blocks.size()));
  }
  {
    std::lock_guard<std::mutex> g(g_mu);
    for (int dev = 0; dev < n; ++dev) {
      for (const auto& b : dev_infos[dev]) {
        SnapBlock sb{b, 0, nullptr, nullptr};
        auto sf = g_segment_frames.find(b.segment);
        if (sf != g_segment_frames.end()) sb.segment_frames = sf->second;
        auto lv = g_live.find(b.addr);
        if (b.state != 0) {
          sb.requested = lv != g_live.end() ? lv->second.requested : b.size;
          if (lv != g_live.end()) sb.frames = lv->second.frames;
        }
        dev_blocks[dev].push_back(std::move(sb));
      }
      dev_trace[dev].assign(g_trace[dev].begin(), g_trace[dev].end());
    }
  }
  std::unordered_map<torch::CapturedTraceback*, py::object> cache;
  py::list segments;
  for (int dev = 0; dev < n; ++dev) {
    py::dict seg;
    py::list seg_blocks;
    uint64_t cur = UINT64_MAX, allocated = 0, requested = 0;
    auto close = [&]() {
      if (cur == UINT64_MAX) return;
      seg["blocks"] = seg_blocks;
      seg["allocated_size"] = allocated;
      seg["active_size"] = allocated;
      seg["requested_size"] = requested;
      segments.append(seg);
    };
    for (const auto& sb : dev_blocks[dev]) {
      const auto& b = sb.info;
      if (b.segment != cur) {
        close();
        seg = py::dict();
        seg_blocks = py::list();
        allocated = requested = 0;
        cur = b.segment;
        seg["device"] = dev;
        seg["address"] = b.segment;
        seg["total_size"] = b.segment_size;
        seg["stream"] = b.queue_id;
        seg["segment_type"] = b.small ? "small" : "large";
        seg["segment_pool_id"] = py::make_tuple(0, 0);
        seg["is_expandable"] = false;
        seg["frames"] = frames_list(sb.segment_frames.get(), cache);
      }
      py::dict blk;
      blk["address"] = b.addr;
      blk["size"] = b.size;
      bool live = b.state != 0;
      blk["requested_size"] = sb.requested;
      blk["state"] = b.state == 1 ? "active_allocated" : b.state == 2 ? "active_pending_free" : "inactive";
      blk["frames"] = frames_list(sb.frames.get(), cache);
      seg_blocks.append(blk);
      if (live) {
        allocated += b.size;
        requested += sb.requested;
      }
    }
    close();
  }
  py::list traces;
  for (int dev = 0; dev < n; ++dev) {
    py::list t;
    for (const auto& e : dev_trace[dev]) {
      py::dict d;
      d["action"] = kActionNames[e.action];
      d["addr"] = e.addr;
      d["size"] = e.size;
      d["stream"] = e.stream;
      d["time_us"] = e.time_us;
      d["frames"] = frames_list(e.frames.get(), cache);
      if (e.action == kOom) d["device_free"] = e.device_free;
      t.append(d);
    }
    traces.append(t);
  }
  py::dict out;
  out["segments"] = segments;
  out["device_traces"] = traces;
  py::dict settings;
  settings["PYTORCH_CUDA_ALLOC_CONF"] = "";
  settings["max_split_size"] = -1;
  settings["garbage_collection_threshold"] = 0.0;
  settings["expandable_segments"] = false;
  settings["pinned_num_register_threads"] = 1;
  settings["release_lock_on_malloc"] = false;
  settings["pinned_use_host_register"] = false;
  settings["roundup_power2_divisions"] = py::dict();
  out["allocator_settings"] = settings;
  return out;
}

}  // namespace

void register_memory_history(py::module_& m) {
  m.def("_memory_record_history", &record_history, py::arg("enabled"), py::arg("context"), py::arg("stacks"),
        py::arg("max_entries"));
  m.def("_memory_snapshot", &snapshot);
  m.def("_memory_history_enabled", &mem_history_enabled);
}

}  // namespace torch_tpu
