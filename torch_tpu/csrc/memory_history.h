// Memory history and torch.profiler memory events (memory_history.cpp): the
// hooks the allocator (device.cpp) calls. Off, each costs one relaxed load.
#pragma once

#include <atomic>

#include "tpu_common.h"

namespace torch_tpu {

// Bit 0: memory history is recorded; bit 1: a torch.profiler session runs.
extern std::atomic<int> g_mem_observing;
inline bool mem_observing() { return g_mem_observing.load(std::memory_order_relaxed) != 0; }

void mem_observe_alloc(c10::DeviceIndex index, tpurt_device_t* dev, void* ptr, size_t nbytes, tpurt_queue_t* q);
// Before the runtime frees ptr.
void mem_observe_free(c10::DeviceIndex index, tpurt_device_t* dev, void* ptr);
// An allocation failed with s: while history is on, its message says where the snapshot is. Consumes s.
tpurt_status_t mem_observe_oom(tpurt_status_t s);
bool mem_history_enabled();
void mem_profiling_session(bool on);

}  // namespace torch_tpu
