// The runtime side of the PrivateUse1 ("tpu") integration: runtime start-up
// and error mapping, the device allocator, the DeviceGuardImpl (streams =
// runtime queues, events = runtime events), the Philox generator, the pinned
// host allocator and the PrivateUse1 hooks. No op logic here.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include <ATen/EmptyTensor.h>
#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>

#include "memory_history.h"
#include "tpu_common.h"

namespace torch_tpu {

// ============================ runtime, devices ============================

namespace {
constexpr int kMaxDevices = TPURT_MAX_CHIPS;  // tpurt_init refuses more
std::mutex g_init_mu;
std::atomic<bool> g_initialized{false};
int g_device_count = 0;
tpurt_device_t* g_devices[kMaxDevices] = {};
thread_local c10::DeviceIndex t_current_device = 0;

std::string take_message(tpurt_status_t status) {
  std::string msg = tpurt_status_message(status);
  tpurt_status_free(status);
  return msg;
}
}  // namespace

void ensure_init() {
  if (TPURT_LIKELY(g_initialized.load(std::memory_order_acquire))) return;
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (g_initialized.load(std::memory_order_relaxed)) return;
  tpurt_status_t s = tpurt_init();
  TORCH_CHECK(s == nullptr, "tpu runtime failed to start: ", s ? take_message(s) : "");
  int n = std::min(tpurt_device_count(), kMaxDevices);
  for (int i = 0; i < n; ++i) {
    tpurt_status_t ds = tpurt_device_get(i, &g_devices[i]);
    TORCH_CHECK(ds == nullptr, "tpu runtime: cannot open chip ", i, ": ", ds ? take_message(ds) : "");
  }
  g_device_count = n;
  g_initialized.store(true, std::memory_order_release);
}

bool is_initialized() { return g_initialized.load(std::memory_order_acquire); }

int device_count_noexcept() {
  try {
    ensure_init();
  } catch (...) {
    return 0;
  }
  return g_device_count;
}

tpurt_device_t* get_device(c10::DeviceIndex index) {
  ensure_init();
  if (index < 0) index = t_current_device;
  TORCH_CHECK_INDEX(index < g_device_count, "tpu device index ", static_cast<int>(index),
                    " is out of range: ", g_device_count, " tpu device(s) are visible");
  return g_devices[index];
}

c10::DeviceIndex current_device_index() { return t_current_device; }

void set_current_device_index(c10::DeviceIndex index) {
  if (index < 0) return;
  ensure_init();
  TORCH_CHECK_INDEX(index < g_device_count, "tpu device index ", static_cast<int>(index),
                    " is out of range: ", g_device_count, " tpu device(s) are visible");
  t_current_device = index;
}

void throw_status(tpurt_status_t status, const char* what) {
  tpurt_status_code_t code = tpurt_status_code(status);
  if (code == TPURT_STATUS_CANCELLED) {
    try {
      raise_pending_interrupt();
    } catch (...) {
      tpurt_status_free(status);
      throw;
    }
  }
  std::string body = take_message(status);
  std::string msg;
  // The runtime already names the op in kernel errors; do not repeat it.
  if (what && *what && body.compare(0, std::strlen(what), what) != 0) {
    msg = what;
    msg += ": ";
  }
  msg += body;
  // A kernel's own error (the runtime names it "aten::...") raised here, in
  // Strict or DeferAndFuse, is one the kernel met when it ran, after the
  // Python line that issued it had returned: say how to find that line.
  if (body.compare(0, 6, "aten::") == 0 && tpurt_exec_mode_get() != TPURT_EXEC_DEBUG)
    msg += " (the op ran asynchronously; set TORCH_TPU_EAGER_MODE=debug to raise at the line that issued it)";
  switch (code) {
    case TPURT_STATUS_RESOURCE_EXHAUSTED:
      C10_THROW_ERROR(OutOfMemoryError, msg);
    case TPURT_STATUS_OUT_OF_RANGE:
      C10_THROW_ERROR(IndexError, msg);
    case TPURT_STATUS_UNIMPLEMENTED:
      C10_THROW_ERROR(NotImplementedError, msg);
    default:
      C10_THROW_ERROR(Error, msg);
  }
}

// ================================ streams ================================
// StreamId 0 is the device's default queue. Other ids index a fixed pool of
// queues created on first use (as CUDA's stream pool): torch.Stream() hands
// them out round-robin, so creating many streams never leaks queues.

namespace {
constexpr int kPoolSize = 8;
constexpr int kNumStreamIds = 1 + 2 * kPoolSize;  // default, normal pool, high-priority pool

struct DeviceStreams {
  std::atomic<tpurt_queue_t*> queues[kNumStreamIds] = {};
  std::atomic<uint32_t> next_normal{0}, next_high{0};
  std::mutex mu;
};
DeviceStreams g_streams[kMaxDevices];
thread_local c10::StreamId t_current_stream[kMaxDevices] = {};

tpurt_queue_t* queue_for_id(c10::DeviceIndex index, c10::StreamId id) {
  TORCH_CHECK(index >= 0 && index < kMaxDevices, "invalid tpu device index ", static_cast<int>(index));
  TORCH_CHECK(id >= 0 && id < kNumStreamIds, "invalid tpu stream id ", id);
  DeviceStreams& ds = g_streams[index];
  tpurt_queue_t* q = ds.queues[id].load(std::memory_order_acquire);
  if (TPURT_LIKELY(q != nullptr)) return q;
  tpurt_device_t* dev = get_device(index);
  std::lock_guard<std::mutex> lock(ds.mu);
  q = ds.queues[id].load(std::memory_order_relaxed);
  if (q) return q;
  if (id == 0) {
    q = tpurt_device_default_queue(dev);
    TORCH_CHECK(q, "tpu runtime returned no default queue");
  } else {
    int priority = id > kPoolSize ? -1 : 0;
    check_status(tpurt_queue_create(dev, priority, &q), "creating a tpu stream");
  }
  ds.queues[id].store(q, std::memory_order_release);
  return q;
}

c10::Stream make_stream(c10::DeviceIndex index, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, index), id);
}

c10::DeviceIndex resolve(c10::DeviceIndex index) { return index < 0 ? t_current_device : index; }

c10::Stream pool_stream(c10::DeviceIndex index, bool high_priority) {
  index = resolve(index);
  DeviceStreams& ds = g_streams[index];
  uint32_t n = (high_priority ? ds.next_high : ds.next_normal).fetch_add(1) % kPoolSize;
  c10::StreamId id = 1 + n + (high_priority ? kPoolSize : 0);
  queue_for_id(index, id);  // create it now so errors surface here
  return make_stream(index, id);
}
}  // namespace

tpurt_queue_t* queue_for_stream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == kTpu, "expected a tpu stream, got ", stream);
  return queue_for_id(resolve(stream.device_index()), stream.id());
}

tpurt_queue_t* current_queue(c10::DeviceIndex index) {
  index = resolve(index);
  return queue_for_id(index, t_current_stream[index]);
}

// =============================== allocator ===============================

namespace {
void free_device_memory(void* ptr) {
  if (!ptr || !is_initialized()) return;
  if (g_device_count == 1) {
    if (TPURT_UNLIKELY(mem_observing())) mem_observe_free(0, g_devices[0], ptr);
    tpurt_memory_free(g_devices[0], ptr);
    return;
  }
  for (int i = 0; i < g_device_count; ++i) {
    if (tpurt_memory_is_device_ptr(g_devices[i], ptr)) {
      if (TPURT_UNLIKELY(mem_observing())) mem_observe_free(static_cast<c10::DeviceIndex>(i), g_devices[i], ptr);
      tpurt_memory_free(g_devices[i], ptr);
      return;
    }
  }
}

// A c10::DeviceAllocator so torch.accelerator.memory_allocated / empty_cache /
// max_memory_allocated / reset_peak_memory_stats reach the runtime's counters.
struct TpuAllocator final : public c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex index = t_current_device;
    tpurt_device_t* dev = get_device(index);
    void* ptr = nullptr;
    // Stream-ordered: the block may be handed out again at once to work on
    // the current queue (runtime/include/tpurt/device.h).
    tpurt_queue_t* q = current_queue(index);
    tpurt_status_t s = tpurt_memory_allocate(dev, q, nbytes, &ptr);
    // The status says why: out of memory (pointing at the memory snapshot
    // when history is recorded), a forked child, ...
    if (s) throw_status(mem_observe_oom(s), "tpu allocate");
    if (TPURT_UNLIKELY(mem_observing())) mem_observe_alloc(index, dev, ptr, nbytes, q);
    return {ptr, ptr, &free_device_memory, c10::Device(kTpu, index)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_device_memory; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count == 0) return;
    check_status(tpurt_queue_submit_copy(current_queue(), dest, src, count), "tpu copy_data");
  }

  bool initialized() override { return is_initialized(); }
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    if (!is_initialized()) return;
    for (int i = 0; i < g_device_count; ++i)
      check_status(tpurt_memory_empty_cache(get_device(static_cast<c10::DeviceIndex>(i))), "tpu empty_cache");
  }
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (ptr.get_deleter() != &free_device_memory || !ptr.get()) return;
    check_status(tpurt_memory_record_queue(get_device(stream.device_index()), ptr.get(), queue_for_stream(stream)),
                 "tpu record_stream");
  }
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    tpurt_memory_stats_t ms;
    check_status(tpurt_memory_stats(get_device(device), &ms), "tpu memory stats");
    c10::CachingDeviceAllocator::DeviceStats st;
    auto set = [](c10::CachingAllocator::StatArray& a, int64_t cur, int64_t peak, int64_t alloc, int64_t freed) {
      for (auto& x : a) {
        x.current = cur;
        x.peak = peak;
        x.allocated = alloc;
        x.freed = freed;
      }
    };
    int64_t base_alloc = static_cast<int64_t>(ms.allocated_bytes);
    set(st.allocated_bytes, base_alloc, static_cast<int64_t>(ms.peak_allocated_bytes), 0, 0);
    set(st.active_bytes, base_alloc, static_cast<int64_t>(ms.peak_allocated_bytes), 0, 0);
    set(st.requested_bytes, base_alloc, static_cast<int64_t>(ms.peak_allocated_bytes), 0, 0);
    set(st.reserved_bytes, static_cast<int64_t>(ms.reserved_bytes), static_cast<int64_t>(ms.peak_reserved_bytes), 0, 0);
    int64_t live = static_cast<int64_t>(ms.num_allocs) - static_cast<int64_t>(ms.num_frees);
    set(st.allocation, live, live, static_cast<int64_t>(ms.num_allocs), static_cast<int64_t>(ms.num_frees));
    set(st.segment, static_cast<int64_t>(ms.num_segments), static_cast<int64_t>(ms.num_segments), 0, 0);
    st.num_ooms = static_cast<int64_t>(ms.num_ooms);
    return st;
  }
  void resetAccumulatedStats(c10::DeviceIndex /*device*/) override {}
  void resetPeakStats(c10::DeviceIndex device) override { tpurt_memory_reset_peak(get_device(device)); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    uint64_t free_b = 0, total_b = 0;
    check_status(tpurt_memory_get_info(get_device(device), &free_b, &total_b), "tpu mem_get_info");
    return {static_cast<size_t>(free_b), static_cast<size_t>(total_b)};
  }
};
TpuAllocator g_allocator;
}  // namespace

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

c10::Allocator* device_allocator() { return &g_allocator; }

void resize_storage_bytes(c10::StorageImpl* storage, size_t new_bytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  c10::Allocator* alloc = storage->allocator() ? storage->allocator() : &g_allocator;
  c10::DeviceIndex saved = t_current_device;
  c10::DeviceIndex index = storage->device().index();
  set_current_device_index(index < 0 ? saved : index);
  try {
    c10::DataPtr fresh = alloc->allocate(new_bytes);
    size_t keep = std::min(new_bytes, storage->nbytes());
    const void* old = storage->data();
    if (keep > 0 && old) {
      check_status(tpurt_queue_submit_copy(current_queue(), fresh.get(), old, keep),
                   "resizing a tpu storage");
    }
    storage->set_data_ptr_noswap(std::move(fresh));
    storage->set_nbytes(new_bytes);
  } catch (...) {
    t_current_device = saved;
    throw;
  }
  t_current_device = saved;
}

// ============================== device guard ==============================

namespace {
tpurt_event_t* as_event(void* e) { return static_cast<tpurt_event_t*>(e); }

struct TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  TpuGuardImpl() = default;
  explicit TpuGuardImpl(c10::DeviceType t) {
    TORCH_CHECK(t == kTpu, "TpuGuardImpl made for device type ", t);
  }
  c10::DeviceType type() const override { return kTpu; }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kTpu, "expected a tpu device, got ", d);
    c10::DeviceIndex old = t_current_device;
    set_current_device_index(d.index());
    return c10::Device(kTpu, old);
  }
  c10::Device getDevice() const override { return c10::Device(kTpu, t_current_device); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kTpu, "expected a tpu device, got ", d);
    set_current_device_index(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) t_current_device = d.index();
  }

  c10::Stream getStream(c10::Device d) const override {
    c10::DeviceIndex index = resolve(d.index());
    return make_stream(index, t_current_stream[index]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return make_stream(resolve(d.index()), 0); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority = false) const override {
    return pool_stream(d.index(), high_priority);
  }
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override {
    return pool_stream(d.index(), priority < 0);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    queue_for_stream(s);  // validates the id and creates the queue
    c10::DeviceIndex index = resolve(s.device_index());
    c10::Stream old = make_stream(index, t_current_stream[index]);
    t_current_stream[index] = s.id();
    return old;
  }
  void* getStreamNativeHandle(const c10::Stream s) const override { return queue_for_stream(s); }

  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count_noexcept());
  }

  // ---- events ----
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event) tpurt_event_release(as_event(event));
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "event device index ",
                static_cast<int>(device_index), " does not match the recording stream's device ",
                static_cast<int>(stream.device_index()));
    tpurt_queue_t* q = queue_for_stream(stream);
    if (!*event) {
      tpurt_event_t* e = nullptr;
      uint32_t flags = flag == c10::EventFlag::BACKEND_DEFAULT ? TPURT_EVENT_TIMING : 0;
      check_status(tpurt_event_create(get_device(stream.device_index()), flags, &e),
                   "creating a tpu event");
      *event = e;
    }
    check_status(tpurt_event_record(as_event(*event), q), "recording a tpu event");
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (!event) return;
    check_status(tpurt_queue_wait_event(queue_for_stream(stream), as_event(event)),
                 "tpu stream wait_event");
  }
  bool queryEvent(void* event) const override { return !event || tpurt_event_query(as_event(event)); }
  void synchronizeEvent(void* event) const override {
    if (event) check_status(tpurt_event_synchronize(as_event(event)), "tpu event synchronize");
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "both events must be recorded before calculating elapsed time");
    float ms = 0;
    check_status(tpurt_event_elapsed_ms(as_event(start), as_event(end), &ms), "tpu event elapsed_time");
    return ms;
  }

  // ---- streams ----
  bool queryStream(const c10::Stream& s) const override { return tpurt_queue_is_idle(queue_for_stream(s)); }
  void synchronizeStream(const c10::Stream& s) const override {
    check_status(tpurt_queue_synchronize(queue_for_stream(s)), "tpu stream synchronize");
  }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    check_status(tpurt_device_synchronize(get_device(index)), "tpu synchronize");
  }
  void recordDataPtrOnStream(const c10::DataPtr& ptr, const c10::Stream& s) const override {
    if (ptr.get_deleter() != &free_device_memory || !ptr.get()) return;
    check_status(tpurt_memory_record_queue(get_device(s.device_index()), ptr.get(), queue_for_stream(s)),
                 "tpu record_stream");
  }
};
}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

// =============================== generator ===============================
// Counter-based Philox: the state is (seed, offset). A random kernel gets a
// reserved range of counter values, so its stream depends only on (seed,
// offset, element index), never on the thread count. State tensor: 16 bytes,
// seed then offset (little endian), as CUDA's generator.

namespace {
struct TpuGenerator final : public c10::GeneratorImpl {
  explicit TpuGenerator(c10::DeviceIndex index)
      : c10::GeneratorImpl(c10::Device(kTpu, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}
  static c10::DeviceType device_type() { return kTpu; }

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    uint64_t s = c10::detail::getNonDeterministicRandom();
    set_current_seed(s);
    return s;
  }
  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.numel() == 16 &&
                    state.device().is_cpu(),
                "a tpu generator state is a CPU uint8 tensor of 16 bytes, got ", state.numel(),
                " elements of ", state.dtype().name(), " on ", state.device());
    const uint8_t* p = static_cast<const uint8_t*>(state.data());
    std::memcpy(&seed_, p, 8);
    std::memcpy(&offset_, p + 8, 8);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    at::TensorBase t = at::detail::empty_cpu({16}, c10::ScalarType::Byte);
    uint8_t* p = static_cast<uint8_t*>(t.mutable_data_ptr());
    std::memcpy(p, &seed_, 8);
    std::memcpy(p + 8, &offset_, 8);
    return t.getIntrusivePtr();
  }
  tpurt_rng_t reserve(uint64_t count) {
    tpurt_rng_t r{seed_, offset_};
    offset_ += (count + 3) / 4 * 4;
    return r;
  }

 private:
  TpuGenerator* clone_impl() const override {
    auto* g = new TpuGenerator(device().index());
    g->seed_ = seed_;
    g->offset_ = offset_;
    return g;
  }
  uint64_t seed_ = c10::default_rng_seed_val;
  uint64_t offset_ = 0;
};

std::once_flag g_gen_once[kMaxDevices];
at::Generator g_default_gens[kMaxDevices];
}  // namespace

const at::Generator& default_generator(c10::DeviceIndex index) {
  index = resolve(index);
  int n = device_count_noexcept();
  TORCH_CHECK_INDEX(index >= 0 && index < n, "tpu device index ", static_cast<int>(index),
                    " is out of range: ", n, " tpu device(s) are visible");
  std::call_once(g_gen_once[index], [index] {
    g_default_gens[index] = at::make_generator<TpuGenerator>(index);
    g_default_gens[index].set_current_seed(c10::detail::getNonDeterministicRandom());
  });
  return g_default_gens[index];
}

tpurt_rng_t generator_reserve(const at::Generator& gen, uint64_t count) {
  auto* g = at::check_generator<TpuGenerator>(gen);
  std::lock_guard<std::mutex> lock(g->mutex_);
  return g->reserve(count);
}

// ============================ pinned host memory ============================
// Host memory is host memory for the vTPU; "pinned" only has to be tracked so
// that is_pinned() answers truthfully.

namespace {
std::mutex g_pinned_mu;
std::unordered_set<const void*> g_pinned;

void free_pinned(void* ptr) {
  if (!ptr) return;
  {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    g_pinned.erase(ptr);
  }
  c10::free_cpu(ptr);
}

struct TpuPinnedAllocator final : public at::HostAllocator {
  at::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (p) {
      std::lock_guard<std::mutex> lock(g_pinned_mu);
      g_pinned.insert(p);
    }
    return {p, p, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override { return {}; }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};
TpuPinnedAllocator g_pinned_allocator;
}  // namespace

REGISTER_HOST_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_pinned_allocator)

// ================================== hooks ==================================

namespace {
struct TpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count_noexcept() > 0; }
  void init() const override { ensure_init(); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return is_initialized(); }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(device_count_noexcept());
  }
  void setCurrentDevice(c10::DeviceIndex d) const override { set_current_device_index(d); }
  c10::DeviceIndex getCurrentDevice() const override { return t_current_device; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    c10::DeviceIndex old = t_current_device;
    set_current_device_index(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    if (d < 0 || d >= device_count_noexcept()) return t_current_device;
    return exchangeDevice(d);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return at::make_generator<TpuGenerator>(resolve(index));
  }
  at::Device getDeviceFromPtr(void* data) const override {
    ensure_init();
    for (int i = 0; i < g_device_count; ++i)
      if (tpurt_memory_is_device_ptr(g_devices[i], data)) return at::Device(kTpu, i);
    TORCH_CHECK(false, "pointer ", data, " is not tpu device memory");
  }
  bool isPinnedPtr(const void* data) const override {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    return g_pinned.count(data) != 0;
  }
  at::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), new_bytes);
  }
};

const bool g_hooks_registered [[maybe_unused]] = [] {
  at::RegisterPrivateUse1HooksInterface(new TpuHooks());
  return true;
}();
}  // namespace

}  // namespace torch_tpu
