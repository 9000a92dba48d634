// The c10d backend "tpu_dist": what c10d's Backend API forces into C++ (a
// Backend subclass, its Work objects, tensors to buffers). Every collective is
// the runtime's (tpurt/dist.h), queued on the tensor's current stream in order
// with the kernels around it; this file only shapes arguments, makes
// non-contiguous tensors dense and back, and wraps the result in a Work.
// Also the topology queries torch.tpu exposes.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/extension.h>

#include <atomic>
#include <functional>
#include <algorithm>
#include <cstring>
#include <map>
#include <thread>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <unistd.h>

#include "tpu_common.h"

namespace py = pybind11;

namespace torch_tpu {
namespace {

// Runs f with the GIL released when this thread holds it (DDP's reducer and
// the autograd engine call in without it).
template <class F>
tpurt_status_t without_gil(F f) {
  if (PyGILState_Check()) {
    py::gil_scoped_release no_gil;
    return f();
  }
  return f();
}

tpurt_dist_redop_t to_redop(const c10d::ReduceOp& op, const char* what) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return TPURT_DIST_SUM;
    case c10d::ReduceOp::AVG: return TPURT_DIST_AVG;
    case c10d::ReduceOp::PRODUCT: return TPURT_DIST_PRODUCT;
    case c10d::ReduceOp::MIN: return TPURT_DIST_MIN;
    case c10d::ReduceOp::MAX: return TPURT_DIST_MAX;
    case c10d::ReduceOp::BAND: return TPURT_DIST_BAND;
    case c10d::ReduceOp::BOR: return TPURT_DIST_BOR;
    case c10d::ReduceOp::BXOR: return TPURT_DIST_BXOR;
    default: break;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, "tpu_dist: ", what, ": reduction ", static_cast<int>(op.op_),
                              " is not supported");
}

// The runtime's reduction for `rop` over the dense tensor `d`, which is about
// to be reduced. PREMUL_SUM (torch.distributed._make_nccl_premul_sum) is
// NCCL's: each rank's input times its factor, then summed. The product is
// the device's mul kernel on the current stream, before the sum: in place
// when `d` is this collective's to overwrite (`in_place`), else into a new
// tensor that replaces `d`, so no input the caller still owns changes.
tpurt_dist_redop_t reduction(const c10d::ReduceOp& rop, at::Tensor& d, bool in_place, const char* what) {
  if (rop.op_ != c10d::ReduceOp::PREMUL_SUM) return to_redop(rop, what);
  // c10d makes PREMUL_SUM only with this supplement (makePreMulSum).
  auto* sup = static_cast<c10d::PreMulSumSupplement*>(rop.supplement_.get());
  TORCH_CHECK_VALUE(sup, "tpu_dist: ", what, ": premul_sum without its factor (make the op with "
                    "torch.distributed._make_nccl_premul_sum(factor))");
  auto t = d.scalar_type();
  TORCH_CHECK_VALUE(t == at::kHalf || t == at::kBFloat16 || t == at::kFloat || t == at::kDouble, "tpu_dist: ", what,
                    ": premul_sum needs a float16, bfloat16, float32 or float64 tensor, got ", t);
  const at::Tensor& f = sup->tensor_factor;
  if (f.defined()) {
    TORCH_CHECK_VALUE(f.numel() == 1 && at::isFloatingType(f.scalar_type()), "tpu_dist: ", what,
                      ": premul_sum's factor must be one floating-point number, got ", f.numel(), " elements of ",
                      f.scalar_type());
    if (f.device().type() == kTpu) {
      at::Tensor f0 = f.reshape({}).to(t);  // stays on the device: no host wait for its value
      if (in_place) d.mul_(f0);
      else d = d.mul(f0);
      return TPURT_DIST_SUM;
    }
    TORCH_CHECK_VALUE(f.device().is_cpu(), "tpu_dist: ", what, ": premul_sum's factor must be a tpu or cpu tensor, got ",
                      f.device().str());
  }
  double v = f.defined() ? f.item<double>() : sup->double_factor;
  if (in_place) d.mul_(v);
  else d = d.mul(v);
  return TPURT_DIST_SUM;
}

// The group's error as a command on a stream that waits for a collective run
// on the group's stream: a failed collective then fails that stream's next
// synchronize too (.cpu(), .item()), not only the group's.
tpurt_status_t group_error_on_queue(void* comm) {
  return tpurt_dist_comm_error(static_cast<tpurt_dist_comm_t*>(comm));
}

c10::Stream current_stream() {
  return c10::impl::getDeviceGuardImpl(kTpu)->getStream(c10::Device(kTpu, current_device_index()));
}

// A queued collective. Its event marks where its stream (the group's, or a
// send's lane) is once the collective has run; wait() makes the current stream
// wait for it (the host does not block, as with NCCL on a CUDA stream) and
// raises at once when the group has already failed. The future (DDP's bucket
// allreduce waits on it) completes once the collective has run, with the
// group's error when it failed (getFuture).
class TpuWork : public c10d::Work {
 public:
  // on: the queue the collective ran on (default: the current stream's)
  TpuWork(int rank, c10d::OpType type, tpurt_dist_comm_t* comm, std::vector<at::Tensor> outputs, bool block_host,
          tpurt_queue_t* on = nullptr)
      : Work(rank, type), comm_(comm), outputs_(std::move(outputs)), block_host_(block_host), stream_(current_stream()) {
    tpurt_device_t* dev = get_device(-1);
    check_status(tpurt_event_create(dev, 0, &event_), "tpu_dist work");
    queue_ = on ? on : queue_for_stream(stream_);
    check_status(tpurt_event_record(event_, queue_), "tpu_dist work");
  }
  ~TpuWork() override { tpurt_event_release(event_); }

  bool isCompleted() override {
    if (!tpurt_event_query(event_)) return false;
    if (!copy_back_.empty()) wait(kNoTimeout);  // done on the chip: CPU tensors get their results now
    return true;
  }
  bool isSuccess() const override { return tpurt_dist_comm_error(comm_) == TPURT_OK; }
  std::vector<at::Tensor> result() override { return outputs_; }

  bool wait(std::chrono::milliseconds timeout) override {
    waited_ = true;
    if (block_host_) {
      // barrier(): the host waits for the queue (and raises its error).
      check_status(without_gil([&] { return tpurt_queue_synchronize(queue_); }), "tpu_dist barrier");
    } else if (!tpurt_event_query(event_)) {
      tpurt_queue_t* cur = current_queue();
      check_status(tpurt_queue_wait_event(cur, event_), "tpu_dist wait");
      if (cur != queue_)
        check_status(tpurt_queue_submit_host_fn_named(cur, group_error_on_queue, comm_, "tpu_dist wait"),
                     "tpu_dist wait");
    }
    check_status(tpurt_dist_comm_error(comm_), "tpu_dist");
    // CPU tensors' results: copied from their chip copies (the host waits for the collective, as with gloo).
    std::vector<std::pair<at::Tensor, at::Tensor>> back;
    back.swap(copy_back_);
    for (auto& [user, chip] : back) user.copy_(chip);
    return true;
  }

  // At wait(): each CPU tensor `first` gets its chip copy `second`'s value.
  void add_copy_back(std::vector<std::pair<at::Tensor, at::Tensor>> pairs) {
    for (auto& p : pairs) copy_back_.push_back(std::move(p));
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    if (future_) return future_;
    if (!copy_back_.empty()) {  // the CPU tensors are written at wait(): the host waits, as with gloo
      wait(kNoTimeout);
      future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                         std::vector<c10::Device>{});
      future_->markCompleted(c10::IValue(outputs_));
      return future_;
    }
    // Completed once the collective has run (a host call queued on its stream after it), with the group's error
    // when it failed: the waiter (DDP's reducer at the end of backward) learns at wait() which rank and collective
    // failed, and never goes on with outputs the collective did not write. A future completed at issue, which only
    // ordered the waiter's stream (NCCL's way), left the error to the group's next collective. The host waits at
    // wait(), as with gloo's futures; callbacks added with then() run on the stream's thread when it completes.
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                       std::vector<c10::Device>{});
    // Asked after wait() (`w.wait(); w.get_future().value()`, which NCCL's and gloo's futures allow): the host
    // waits for the collective here, so the future is complete on return.
    if (waited_) tpurt_status_free(without_gil([&] { return tpurt_event_synchronize(event_); }));
    if (tpurt_event_query(event_)) {
      complete_future(new FutureDone{future_, outputs_, comm_});
      return future_;
    }
    auto* done = new FutureDone{future_, outputs_, comm_};
    tpurt_status_t st = tpurt_queue_submit_host_fn_named(queue_, complete_future, done, "tpu_dist future");
    if (st) delete done;
    check_status(st, "tpu_dist future");
    return future_;
  }
  struct FutureDone {
    c10::intrusive_ptr<c10::ivalue::Future> future;
    std::vector<at::Tensor> outputs;
    tpurt_dist_comm_t* comm;
  };
  static tpurt_status_t complete_future(void* user) {
    std::unique_ptr<FutureDone> d(static_cast<FutureDone*>(user));
    tpurt_status_t st = tpurt_dist_comm_error(d->comm);
    if (st) {
      std::string msg = std::string("tpu_dist: ") + tpurt_status_message(st);
      tpurt_status_free(st);
      d->future->setError(std::make_exception_ptr(std::runtime_error(msg)));
    } else {
      d->future->markCompleted(c10::IValue(d->outputs));
    }
    return TPURT_OK;
  }
  void synchronize() override { wait(kNoTimeout); }

  // recv from any source: the sender's rank, which the runtime writes into
  // `source` (an int32 device tensor, so it outlives the queued receive as
  // any buffer does) once the receive has run; the host waits for that.
  void set_source(at::Tensor source) { source_ = std::move(source); }
  int sourceRank() const override {
    TORCH_CHECK(source_.defined(), "tpu_dist: sourceRank() is only known for a recv from any source");
    check_status(without_gil([&] { return tpurt_event_synchronize(event_); }), "tpu_dist recv");
    check_status(tpurt_dist_comm_error(comm_), "tpu_dist");
    return source_.item<int>();
  }

 private:
  tpurt_dist_comm_t* comm_;
  std::vector<at::Tensor> outputs_;
  bool block_host_;
  c10::Stream stream_;  // where the collective ran (the group's stream)
  tpurt_event_t* event_ = nullptr;
  tpurt_queue_t* queue_ = nullptr;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  bool waited_ = false;  // wait() was called
  at::Tensor source_;
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back_;
};

class TpuDistBackend : public c10d::Backend {
 public:
  // rank/size: in the whole group; local_rank/local_size: among this host's
  // chips (the shared-memory communicator); cross: the gloo group of the
  // hosts' first ranks (on those ranks only) when the group spans hosts.
  // world: a gloo group of every rank (across hosts only), for what moves
  // between two ranks of different hosts (send/recv, all_to_all).
  // column: a gloo group of the ranks with this local rank on every host (reduce_scatter between hosts).
  // p2p_store: the group's store, where a send between hosts is counted (a receive from any source asks it).
  TpuDistBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, int local_rank, int local_size,
                 int host, int hosts, c10::intrusive_ptr<c10d::Backend> cross, c10::intrusive_ptr<c10d::Backend> world,
                 c10::intrusive_ptr<c10d::Backend> column, c10::intrusive_ptr<c10d::Store> p2p_store,
                 std::chrono::milliseconds timeout)
      : Backend(rank, size), timeout_(timeout), local_rank_(local_rank), local_size_(local_size), host_(host),
        hosts_(hosts), cross_(std::move(cross)), world_(std::move(world)), column_(std::move(column)),
        p2p_store_(std::move(p2p_store)) {
    const char* hc = getenv("TORCH_TPU_DIST_HOST_CHECK");
    host_check_ = !(hc && strcmp(hc, "0") == 0);
    const char* os = getenv("TORCH_TPU_DIST_OWN_STREAM");
    own_stream_ = !(os && strcmp(os, "0") == 0);
    rank = local_rank;
    size = local_size;
    ensure_init();
    tpurt_device_t* dev = get_device(-1);
    int fd;
    void* base;
    uint64_t bytes;
    check_status(tpurt_device_shareable_memory(dev, &fd, &base, &bytes), "tpu_dist");
    // Rank 0 names the shared block (its pid first, so a crashed job's
    // leftover is recognised and swept) and tells the others through the store.
    std::string name;
    if (rank == 0) {
      std::random_device rd;
      char buf[96];
      snprintf(buf, sizeof(buf), "/tpurt_dist_%d_%08x%08x", static_cast<int>(getpid()), rd(), rd());
      name = buf;
      store->set("tpu_dist/shm", std::vector<uint8_t>(name.begin(), name.end()));
    } else {
      auto v = store->get("tpu_dist/shm");
      name.assign(v.begin(), v.end());
    }
    tpurt_dist_comm_params_t p{};
    p.name = name.c_str();
    p.rank = rank;
    p.size = size;
    p.timeout_ms = static_cast<uint64_t>(timeout.count());
    p.mem_fd = fd;
    p.mem_base = base;
    p.mem_bytes = bytes;
    p.first_rank = host * local_size;  // errors name ranks of the whole group
    check_status(without_gil([&] { return tpurt_dist_comm_create(&p, &comm_); }), "tpu_dist init");
    if (hosts_ > 1 && p2p_store_) {
      tpurt_dist_comm_set_abort_hook(comm_, publish_abort, this);
      watcher_ = std::thread([this] { watch(); });
    }
    if (own_stream_) {
      // A high-priority stream of the pool, as ProcessGroupNCCL takes one from CUDA's (FSDP2's streams come from
      // the normal-priority pool).
      stream_ = c10::impl::getDeviceGuardImpl(kTpu)->getStreamFromGlobalPool(
          c10::Device(kTpu, current_device_index()), /*high_priority=*/true);
    }
  }

  ~TpuDistBackend() override { release(); }

  const std::string getBackendName() const override { return "tpu_dist"; }
  void setTimeout(std::chrono::milliseconds timeout) override {
    timeout_ = timeout;
    if (comm_) tpurt_dist_comm_set_timeout(comm_, static_cast<uint64_t>(timeout.count()));
  }
  void shutdown() override { release(); }
  void abort() override {
    if (comm_) tpurt_dist_comm_abort(comm_, "aborted by the application");
    release();
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    if (any_cpu(tensors)) {
      auto c = chip(tensors);
      return copy_back(broadcast(c, opts), tensors, c);
    }
    OnGroupStream on(this);
    on.use(tensors);
    if (hosts_ > 1) return x_broadcast(one(tensors, "broadcast"), static_cast<int>(opts.rootRank));
    at::Tensor& t = one(tensors, "broadcast");
    at::Tensor d = dense(t);
    tpurt_dist_op_t op = base_op(TPURT_DIST_BROADCAST, d);
    op.root = static_cast<int>(opts.rootRank);
    op.in = getRank() == op.root ? d.data_ptr() : nullptr;
    op.out = d.data_ptr();
    submit(op, "broadcast");
    write_back(t, d);
    return work(c10d::OpType::BROADCAST, {t});
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    if (any_cpu(tensors)) {
      auto c = chip(tensors);
      return copy_back(allreduce(c, opts), tensors, c);
    }
    OnGroupStream on(this);
    on.use(tensors);
    if (hosts_ > 1) return x_allreduce(one(tensors, "allreduce"), opts.reduceOp);
    at::Tensor& t = one(tensors, "allreduce");
    at::Tensor d = dense(t);
    tpurt_dist_op_t op = base_op(TPURT_DIST_ALLREDUCE, d);
    op.redop = reduction(opts.reduceOp, d, true, "allreduce");  // t is the output: scaled in place
    op.in = d.data_ptr();
    op.out = d.data_ptr();
    submit(op, "allreduce");
    write_back(t, d);
    return work(c10d::OpType::ALLREDUCE, {t});
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    if (any_cpu(tensors)) {
      auto c = chip(tensors);
      return copy_back(allreduce_coalesced(c, opts), tensors, c);
    }
    OnGroupStream on(this);
    on.use(tensors);
    for (auto& t : tensors) {
      std::vector<at::Tensor> one_t{t};
      allreduce(one_t, opts);
    }
    return work(c10d::OpType::ALLREDUCE_COALESCED, tensors);
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    if (any_cpu(tensors)) {
      auto c = chip(tensors);
      return copy_back(reduce(c, opts), tensors, c);
    }
    OnGroupStream on(this);
    on.use(tensors);
    if (hosts_ > 1) {
      PartOf step_of(this, TPURT_DIST_REDUCE);
      at::Tensor& t = one(tensors, "reduce");
      at::Tensor tmp = t.clone(at::MemoryFormat::Contiguous);
      x_allreduce(tmp, opts.reduceOp);
      if (getRank() == static_cast<int>(opts.rootRank)) t.copy_(tmp);
      return work(c10d::OpType::REDUCE, {t});
    }
    at::Tensor& t = one(tensors, "reduce");
    at::Tensor d = dense(t);
    int root = static_cast<int>(opts.rootRank);
    // premul_sum scales in place only the root's tensor (its output) or a dense copy.
    at::Tensor in = d;
    tpurt_dist_redop_t red = reduction(opts.reduceOp, in, getRank() == root || !d.is_same(t), "reduce");
    tpurt_dist_op_t op = base_op(TPURT_DIST_REDUCE, d);
    op.redop = red;
    op.root = root;
    op.in = in.data_ptr();
    op.out = getRank() == op.root ? d.data_ptr() : nullptr;
    submit(op, "reduce");
    if (getRank() == op.root) write_back(t, d);
    return work(c10d::OpType::REDUCE, {t});
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    if (any_cpu(inputs) || any_cpu(outputs)) {
      auto ci = chip(inputs);
      auto co = chip(outputs);
      return copy_back(allgather(co, ci, opts), outputs, co);
    }
    OnGroupStream on(this);
    on.use(outputs, inputs);
    if (hosts_ > 1) {
      at::Tensor& in = one(inputs, "all_gather");
      TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                        "tpu_dist: all_gather needs one list of ", getSize(), " output tensors");
      at::Tensor flat = empty_tpu_contiguous({static_cast<int64_t>(getSize()) * in.numel()}, in.scalar_type());
      _allgather_base(flat, in, opts);
      for (int r = 0; r < getSize(); ++r) outputs[0][r].copy_(flat.narrow(0, r * in.numel(), in.numel()).view(in.sizes()));
      return work(c10d::OpType::ALLGATHER, outputs[0]);
    }
    at::Tensor& in = one(inputs, "all_gather");
    TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                      "tpu_dist: all_gather needs one list of ", getSize(), " output tensors");
    for (auto& o : outputs[0]) check_like(o, in, "all_gather output");
    at::Tensor d = dense(in);
    at::Tensor flat = empty_tpu_contiguous({static_cast<int64_t>(getSize()) * d.numel()}, d.scalar_type());
    tpurt_dist_op_t op = base_op(TPURT_DIST_ALLGATHER, d);
    op.in = d.data_ptr();
    op.out = flat.data_ptr();
    submit(op, "all_gather");
    for (int r = 0; r < getSize(); ++r) outputs[0][r].copy_(flat.narrow(0, r * d.numel(), d.numel()).view(in.sizes()));
    return work(c10d::OpType::ALLGATHER, outputs[0]);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    if (on_cpu(output) || on_cpu(input)) {
      std::vector<at::Tensor> o{output}, co{chip(output)};
      at::Tensor ci = chip(input);
      return copy_back(_allgather_base(co[0], ci, opts), o, co);
    }
    OnGroupStream on(this);
    on.use(output, input);
    if (hosts_ > 1) return x_allgather(output, input);
    check_tpu(input, "all_gather_into_tensor");
    check_tpu(output, "all_gather_into_tensor");
    TORCH_CHECK_VALUE(output.numel() == input.numel() * getSize() && output.scalar_type() == input.scalar_type(),
                      "tpu_dist: all_gather_into_tensor: output must have ", getSize(), " x the input's ", input.numel(),
                      " elements of ", input.scalar_type(), ", got ", output.numel(), " of ", output.scalar_type());
    at::Tensor d = dense(input), o = dense(output);
    tpurt_dist_op_t op = base_op(TPURT_DIST_ALLGATHER, d);
    op.in = d.data_ptr();
    op.out = o.data_ptr();
    submit(op, "all_gather_into_tensor");
    write_back(output, o);
    return work(c10d::OpType::_ALLGATHER_BASE, {output});
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override {
    if (any_cpu(inputs) || any_cpu(outputs)) {
      auto ci = chip(inputs), co = chip(outputs);
      return copy_back(allgather_into_tensor_coalesced(co, ci, opts), outputs, co);
    }
    OnGroupStream on(this);
    on.use(outputs, inputs);
    TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "tpu_dist: all_gather_into_tensor_coalesced: as many outputs as inputs");
    for (size_t i = 0; i < inputs.size(); ++i) _allgather_base(outputs[i], inputs[i], opts);
    return work(c10d::OpType::COALESCED, outputs);
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    if (any_cpu(inputs) || any_cpu(outputs)) {
      auto ci = chip(inputs);
      auto co = chip(outputs);
      return copy_back(allgather_coalesced(co, ci, opts), outputs, co);
    }
    OnGroupStream on(this);
    on.use(outputs, inputs);
    TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "tpu_dist: allgather_coalesced: one output list per input");
    std::vector<at::Tensor> all;
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::vector<std::vector<at::Tensor>> o{outputs[i]};
      std::vector<at::Tensor> in{inputs[i]};
      allgather(o, in, opts);
      for (auto& t : outputs[i]) all.push_back(t);
    }
    return work(c10d::OpType::ALLGATHER_COALESCED, all);
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    if (any_cpu(inputs) || any_cpu(outputs)) {
      auto ci = chip(inputs);
      auto co = chip(outputs);
      return copy_back(gather(co, ci, opts), outputs, co);
    }
    OnGroupStream on(this);
    on.use(outputs, inputs);
    if (hosts_ > 1) return x_gather(outputs, one(inputs, "gather"), static_cast<int>(opts.rootRank));
    at::Tensor& in = one(inputs, "gather");
    int root = static_cast<int>(opts.rootRank);
    bool is_root = getRank() == root;
    if (is_root)
      TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                        "tpu_dist: gather: the root needs one list of ", getSize(), " output tensors");
    at::Tensor d = dense(in);
    at::Tensor flat;
    tpurt_dist_op_t op = base_op(TPURT_DIST_GATHER, d);
    op.root = root;
    op.in = d.data_ptr();
    if (is_root) {
      flat = empty_tpu_contiguous({static_cast<int64_t>(getSize()) * d.numel()}, d.scalar_type());
      op.out = flat.data_ptr();
    }
    submit(op, "gather");
    std::vector<at::Tensor> outs;
    if (is_root) {
      for (int r = 0; r < getSize(); ++r) outputs[0][r].copy_(flat.narrow(0, r * d.numel(), d.numel()).view(in.sizes()));
      outs = outputs[0];
    }
    return work(c10d::OpType::GATHER, outs);
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    if (any_cpu(inputs) || any_cpu(outputs)) {
      auto ci = chip(inputs);
      auto co = chip(outputs);
      return copy_back(scatter(co, ci, opts), outputs, co);
    }
    OnGroupStream on(this);
    on.use(outputs, inputs);
    if (hosts_ > 1) return x_scatter(one(outputs, "scatter"), inputs, static_cast<int>(opts.rootRank));
    at::Tensor& out = one(outputs, "scatter");
    int root = static_cast<int>(opts.rootRank);
    bool is_root = getRank() == root;
    at::Tensor d = dense(out);
    at::Tensor flat;
    tpurt_dist_op_t op = base_op(TPURT_DIST_SCATTER, d);
    op.root = root;
    if (is_root) {
      TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                        "tpu_dist: scatter: the root needs one list of ", getSize(), " input tensors");
      std::vector<at::Tensor> parts;
      for (auto& t : inputs[0]) {
        check_like(t, out, "scatter input");
        parts.push_back(t.reshape({-1}));
      }
      flat = at::cat(parts);
      op.in = flat.data_ptr();
    }
    op.out = d.data_ptr();
    submit(op, "scatter");
    write_back(out, d);
    return work(c10d::OpType::SCATTER, {out});
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    if (any_cpu(inputs) || any_cpu(outputs)) {
      auto ci = chip(inputs);
      auto co = chip(outputs);
      return copy_back(reduce_scatter(co, ci, opts), outputs, co);
    }
    OnGroupStream on(this);
    on.use(outputs, inputs);
    at::Tensor& out = one(outputs, "reduce_scatter");
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                      "tpu_dist: reduce_scatter needs one list of ", getSize(), " input tensors");
    std::vector<at::Tensor> parts;
    for (auto& t : inputs[0]) {
      check_like(t, out, "reduce_scatter input");
      parts.push_back(t.reshape({-1}));
    }
    at::Tensor flat = at::cat(parts);
    if (hosts_ > 1) return x_reduce_scatter(out, flat, opts.reduceOp, c10d::OpType::REDUCE_SCATTER);
    return reduce_scatter_flat(out, flat, true, opts, c10d::OpType::REDUCE_SCATTER);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    if (on_cpu(output) || on_cpu(input)) {
      std::vector<at::Tensor> o{output}, co{chip(output)};
      at::Tensor ci = chip(input);
      return copy_back(_reduce_scatter_base(co[0], ci, opts), o, co);
    }
    OnGroupStream on(this);
    on.use(output, input);
    check_tpu(input, "reduce_scatter_tensor");
    check_tpu(output, "reduce_scatter_tensor");
    TORCH_CHECK_VALUE(input.numel() == output.numel() * getSize() && output.scalar_type() == input.scalar_type(),
                      "tpu_dist: reduce_scatter_tensor: input must have ", getSize(), " x the output's ", output.numel(),
                      " elements of ", output.scalar_type(), ", got ", input.numel(), " of ", input.scalar_type());
    if (hosts_ > 1) return x_reduce_scatter(output, input, opts.reduceOp, c10d::OpType::_REDUCE_SCATTER_BASE);
    at::Tensor flat = dense(input);
    bool owned = !flat.is_same(input);
    return reduce_scatter_flat(output, flat, owned, opts, c10d::OpType::_REDUCE_SCATTER_BASE);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    if (any_cpu(inputs) || any_cpu(outputs)) {
      auto ci = chip(inputs), co = chip(outputs);
      return copy_back(reduce_scatter_tensor_coalesced(co, ci, opts), outputs, co);
    }
    OnGroupStream on(this);
    on.use(outputs, inputs);
    TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "tpu_dist: reduce_scatter_tensor_coalesced: as many outputs as inputs");
    for (size_t i = 0; i < inputs.size(); ++i) _reduce_scatter_base(outputs[i], inputs[i], opts);
    return work(c10d::OpType::COALESCED, outputs);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits, const c10d::AllToAllOptions& opts) override {
    if (on_cpu(output) || on_cpu(input)) {
      std::vector<at::Tensor> o{output}, co{chip(output)};
      at::Tensor ci = chip(input);
      return copy_back(alltoall_base(co[0], ci, out_splits, in_splits, opts), o, co);
    }
    OnGroupStream on(this);
    on.use(output, input);
    check_tpu(input, "all_to_all_single");
    check_tpu(output, "all_to_all_single");
    TORCH_CHECK_VALUE(input.scalar_type() == output.scalar_type(), "tpu_dist: all_to_all_single: input is ",
                      input.scalar_type(), ", output ", output.scalar_type());
    int n = getSize();
    int64_t in_rows = input.dim() ? input.size(0) : 1, out_rows = output.dim() ? output.size(0) : 1;
    int64_t in_row = in_rows ? input.numel() / in_rows : 0, out_row = out_rows ? output.numel() / out_rows : 0;
    auto splits = [&](std::vector<int64_t>& s, int64_t rows, const char* which) {
      std::vector<uint64_t> v(n);
      if (s.empty()) {
        TORCH_CHECK_VALUE(rows % n == 0, "tpu_dist: all_to_all_single: the ", which, "'s first dimension (", rows,
                          ") must divide by the group size ", n, " without split sizes");
        for (auto& x : v) x = static_cast<uint64_t>(rows / n);
      } else {
        TORCH_CHECK_VALUE(static_cast<int>(s.size()) == n, "tpu_dist: all_to_all_single: ", which, " split sizes need ",
                          n, " entries");
        int64_t sum = 0;
        for (int i = 0; i < n; ++i) {
          v[i] = static_cast<uint64_t>(s[i]);
          sum += s[i];
        }
        TORCH_CHECK_VALUE(sum == rows, "tpu_dist: all_to_all_single: ", which, " split sizes sum to ", sum,
                          ", the first dimension is ", rows);
      }
      return v;
    };
    std::vector<uint64_t> sc = splits(in_splits, in_rows, "input"), rc = splits(out_splits, out_rows, "output");
    std::vector<uint64_t> so(n), ro(n);
    uint64_t a = 0, b = 0;
    for (int i = 0; i < n; ++i) {
      sc[i] *= static_cast<uint64_t>(in_row);
      rc[i] *= static_cast<uint64_t>(out_row);
      so[i] = a;
      ro[i] = b;
      a += sc[i];
      b += rc[i];
    }
    at::Tensor d = dense(input), o = dense(output);
    std::optional<PartOf> step_of;
    if (hosts_ > 1) step_of.emplace(this, TPURT_DIST_ALLTOALL);
    tpurt_dist_op_t op = base_op(TPURT_DIST_ALLTOALL, d);
    op.in = d.data_ptr();
    op.out = o.data_ptr();
    op.count = 0;
    // Across hosts: this host's ranks' parts through shared memory (the
    // local group's counts are this host's slice), the others through gloo.
    int first = host_ * local_size_;
    op.send_counts = sc.data() + first;
    op.send_offsets = so.data() + first;
    op.recv_counts = rc.data() + first;
    op.recv_offsets = ro.data() + first;
    submit(op, "all_to_all_single");
    if (hosts_ > 1) {
      size_t es = d.element_size();
      std::vector<RemoteP2P> remote;
      for (int g = 0; g < n; ++g) {
        if (g / local_size_ == host_) continue;
        if (sc[g]) remote.push_back({static_cast<uint8_t*>(d.data_ptr()) + so[g] * es, sc[g] * es, g, kAllToAllTag, false, false});
        if (rc[g]) remote.push_back({static_cast<uint8_t*>(o.data_ptr()) + ro[g] * es, rc[g] * es, g, kAllToAllTag, true, false});
      }
      remote_p2p(std::move(remote));
    }
    write_back(output, o);
    return work(c10d::OpType::ALLTOALL_BASE, {output});
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    if (any_cpu(inputs) || any_cpu(outputs)) {
      auto ci = chip(inputs), co = chip(outputs);
      return copy_back(alltoall(co, ci, opts), outputs, co);
    }
    OnGroupStream on(this);
    on.use(outputs, inputs);
    int n = getSize();
    TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == n && static_cast<int>(inputs.size()) == n,
                      "tpu_dist: all_to_all needs ", n, " input and ", n, " output tensors");
    std::vector<at::Tensor> ins, outs;
    std::vector<int64_t> isz, osz;
    for (int i = 0; i < n; ++i) {
      check_tpu(inputs[i], "all_to_all");
      check_tpu(outputs[i], "all_to_all");
      ins.push_back(inputs[i].reshape({-1}));
      isz.push_back(inputs[i].numel());
      osz.push_back(outputs[i].numel());
    }
    at::Tensor in = at::cat(ins);
    int64_t total = 0;
    for (auto x : osz) total += x;
    at::Tensor out = empty_tpu_contiguous({total}, in.scalar_type());
    alltoall_base(out, in, osz, isz, opts);
    int64_t off = 0;
    for (int i = 0; i < n; ++i) {
      outputs[i].copy_(out.narrow(0, off, osz[i]).view(outputs[i].sizes()));
      off += osz[i];
    }
    return work(c10d::OpType::ALLTOALL, outputs);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    OnGroupStream on(this);
    if (hosts_ > 1) {
      PartOf step_of(this, TPURT_DIST_BARRIER);
      tpurt_dist_op_t op{};
      op.kind = TPURT_DIST_BARRIER;
      op.dtype = TPURT_DTYPE_UINT8;
      submit(op, "barrier");
      x_fold({TPURT_DIST_BARRIER, -1, 0, -1, -1}, nullptr, 0, nullptr);  // the call exchange is the barrier
      submit(op, "barrier");
      return c10::make_intrusive<TpuWork>(getRank(), c10d::OpType::BARRIER, comm_, std::vector<at::Tensor>{}, true);
    }
    tpurt_dist_op_t op{};
    op.kind = TPURT_DIST_BARRIER;
    op.dtype = TPURT_DTYPE_UINT8;
    submit(op, "barrier");
    return c10::make_intrusive<TpuWork>(getRank(), c10d::OpType::BARRIER, comm_, std::vector<at::Tensor>{}, true);
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    if (any_cpu(tensors)) {  // the chip copy is what is sent: the caller may reuse its tensor at once
      auto c = chip(tensors);
      return send(c, dst, tag);
    }
    if (!coalescing_ && same_host(dst)) {  // on its peer's lane (lone_send)
      at::Tensor& t = one(tensors, "send");
      at::Tensor d = dense(t);  // on the caller's stream, which the lane waits for
      tpurt_dist_op_t op = base_op(TPURT_DIST_SEND, d);
      op.peer = dst % local_size_;
      op.tag = tag;
      op.in = d.data_ptr();
      return lone_send(op, t, d);
    }
    OnGroupStream on(this);
    on.use(tensors);
    at::Tensor& t = one(tensors, "send");
    at::Tensor d = dense(t);
    if (!same_host(dst)) {
      RemoteP2P m{d.data_ptr(), static_cast<uint64_t>(d.nbytes()), dst, tag, false};
      if (coalescing_) return defer_remote(m, t, d);
      remote_p2p({m});
      return work(c10d::OpType::SEND, {t});
    }
    tpurt_dist_op_t op = base_op(TPURT_DIST_SEND, d);
    op.peer = dst % local_size_;
    op.tag = tag;
    op.in = d.data_ptr();
    if (coalescing_) return defer(op, t, d, false);
    submit(op, "send");
    return work(c10d::OpType::SEND, {t});
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    if (any_cpu(tensors)) {
      auto c = chip(tensors);
      return copy_back(recv(c, src, tag), tensors, c);
    }
    OnGroupStream on(this);
    on.use(tensors);
    at::Tensor& t = one(tensors, "recv");
    at::Tensor d = dense(t);
    if (!same_host(src)) {
      RemoteP2P m{d.data_ptr(), static_cast<uint64_t>(d.nbytes()), src, tag, true};
      if (coalescing_) return defer_remote(m, t, d);
      remote_p2p({m});
      write_back(t, d);
      return work(c10d::OpType::RECV, {t});
    }
    tpurt_dist_op_t op = base_op(TPURT_DIST_RECV, d);
    op.peer = src % local_size_;
    op.tag = tag;
    op.out = d.data_ptr();
    if (coalescing_) return defer(op, t, d, true);
    submit(op, "recv");
    write_back(t, d);
    return work(c10d::OpType::RECV, {t});
  }

  // batch_isend_irecv: the sends and receives between start and end run as
  // one group (every send posted first), so no order of them deadlocks.
  // Across hosts, those with a rank of this host form the group, then those
  // with other hosts' ranks go to gloo all at once (every rank queues its
  // local group before its gloo part, so neither waits on the other).
  // Collectives called meanwhile run at once.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override {
    coalescing_ = true;
    pending_copy_back_.clear();
    pending_.clear();
    pending_tensors_.clear();
    pending_remote_.clear();
  }
  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    coalescing_ = false;
    OnGroupStream on(this);
    for (auto& p : pending_tensors_) on.use(p.user, p.dense);
    std::vector<at::Tensor> outs;
    if (!pending_.empty()) {
      TORCH_CHECK(comm_ != nullptr, "tpu_dist: the process group has been shut down");
      check_status(tpurt_dist_comm_error(comm_), "tpu_dist");
      for (auto& o : pending_)  // after the lone sends to the same peers: messages to a peer keep their order
        if (o.kind == TPURT_DIST_SEND && lane(o.peer).queue)
          check_status(tpurt_queue_wait_event(current_queue(), lane(o.peer).done), "tpu_dist coalesced send/recv");
      check_status(tpurt_dist_enqueue_group(comm_, current_queue(), pending_.data(), static_cast<int>(pending_.size())),
                   "tpu_dist coalesced send/recv");
      for (auto& o : pending_)
        if (o.kind == TPURT_DIST_SEND)
          check_status(tpurt_event_record(lane(o.peer).group_done, current_queue()), "tpu_dist coalesced send/recv");
    }
    if (!pending_remote_.empty()) remote_p2p(pending_remote_);
    for (auto& p : pending_tensors_) {
      if (p.is_recv) write_back(p.user, p.dense);
      outs.push_back(p.user);
    }
    pending_.clear();
    pending_tensors_.clear();
    pending_remote_.clear();
    auto w = work(c10d::OpType::COALESCED, outs);
    static_cast<TpuWork*>(w.get())->add_copy_back(std::move(pending_copy_back_));
    pending_copy_back_.clear();
    return w;
  }

  // The first message with this tag that any rank of the group sends here;
  // Work.wait() then _source_rank() (what dist.recv(src=None) returns) says
  // who sent it.
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    if (any_cpu(tensors)) {
      auto c = chip(tensors);
      return copy_back(recvAnysource(c, tag), tensors, c);
    }
    OnGroupStream on(this);
    on.use(tensors);
    at::Tensor& t = one(tensors, "recv");
    TORCH_CHECK_NOT_IMPLEMENTED(!coalescing_, "tpu_dist: recv from any source inside batch_isend_irecv is not supported");
    at::Tensor d = dense(t);
    at::Tensor source = at::full({}, -1, at::TensorOptions().dtype(at::kInt).device(t.device()));
    if (hosts_ > 1) {
      x_recv_anysource(d, tag, source);
    } else {
      tpurt_dist_op_t op = base_op(TPURT_DIST_RECV, d);
      op.peer = TPURT_DIST_ANY_SOURCE;
      op.tag = tag;
      op.out = d.data_ptr();
      op.out_source = static_cast<int*>(source.data_ptr());
      submit(op, "recv");
    }
    write_back(t, d);
    auto w = c10::make_intrusive<TpuWork>(getRank(), c10d::OpType::RECVANYSOURCE, comm_, std::vector<at::Tensor>{t},
                                          false);
    w->set_source(source);
    return w;
  }

 private:
  // The group's stream (NCCL's way: a stream per process group). A collective runs there, after what the caller's
  // current stream had queued when it was called, and so overlaps what the caller queues next (DDP's bucket
  // allreduces overlap the rest of backward). For the call's duration the group's stream is current, so what the
  // call allocates and runs itself (dense copies, premul_sum's product, write-backs, the Work's event) is ordered
  // there. The caller's tensors are recorded as used there (record_stream): the caching allocator does not hand
  // their memory to the caller's stream before the group's stream is past the collective. Work.wait() and the
  // Work's future make the waiter's stream wait. TORCH_TPU_DIST_OWN_STREAM=0: on the caller's stream instead.
  class OnGroupStream {
   public:
    explicit OnGroupStream(TpuDistBackend* b) : b_(b) {
      if (!b->stream_) return;
      c10::Stream cur = current_stream();
      if (cur == *b->stream_) return;  // a call made by another of this group's calls
      tpurt_event_t* e = nullptr;
      check_status(tpurt_event_create(get_device(-1), 0, &e), "tpu_dist");
      tpurt_status_t st = tpurt_event_record(e, queue_for_stream(cur));
      if (!st) st = tpurt_queue_wait_event(queue_for_stream(*b->stream_), e);
      tpurt_event_release(e);
      check_status(st, "tpu_dist: ordering the group's stream after the caller's");
      prev_ = c10::impl::getDeviceGuardImpl(kTpu)->exchangeStream(*b->stream_);
    }
    ~OnGroupStream() {
      if (prev_) c10::impl::getDeviceGuardImpl(kTpu)->exchangeStream(*prev_);
    }
    OnGroupStream(const OnGroupStream&) = delete;
    OnGroupStream& operator=(const OnGroupStream&) = delete;
    // The caller's tensors, used on the group's stream.
    template <class... T>
    void use(const T&... ts) {
      if (prev_) (keep(ts), ...);
    }

   private:
    void keep(const at::Tensor& t) {
      if (t.defined() && t.device().type() == kTpu && t.has_storage())
        c10::impl::getDeviceGuardImpl(kTpu)->recordDataPtrOnStream(t.storage().data_ptr(), *b_->stream_);
    }
    void keep(const std::vector<at::Tensor>& v) {
      for (auto& t : v) keep(t);
    }
    void keep(const std::vector<std::vector<at::Tensor>>& vv) {
      for (auto& v : vv) keep(v);
    }
    TpuDistBackend* b_;
    std::optional<c10::Stream> prev_;
  };

  // A message between this rank and a rank of another host: `bytes` at `ptr`
  // (this rank's device memory) to or from `peer` through gloo.
  struct RemoteP2P {
    void* ptr;
    uint64_t bytes;
    int peer, tag;
    bool is_recv;
    bool counted = true;  // a user's message (not all_to_all's part): counted for receives from any source
  };

  void release() {
    if (!comm_) return;
    // Queued collectives hold the communicator: let them finish first.
    tpurt_status_free(without_gil([&] { return tpurt_device_synchronize(get_device(-1)); }));
    for (auto& l : lanes_)
      if (l.queue) tpurt_status_free(without_gil([&] { return tpurt_queue_synchronize(l.queue); }));
    if (watcher_.joinable()) {
      {
        std::lock_guard<std::mutex> lk(watch_mu_);
        watch_stop_ = true;
      }
      watch_cv_.notify_all();
      without_gil([&] {
        watcher_.join();
        return TPURT_OK;
      });
    }
    tpurt_dist_comm_set_abort_hook(comm_, nullptr, nullptr);
    tpurt_dist_comm_destroy(comm_);
    comm_ = nullptr;
    for (auto& l : lanes_) {
      if (l.queue) tpurt_queue_release(l.queue);
      tpurt_event_release(l.done);
      tpurt_event_release(l.group_done);
    }
    lanes_.clear();
  }

  // A send within the host outside batch_isend_irecv runs on a queue of its peer's (NCCL's way: point-to-point
  // ops on a stream per pair), outside the group's issue order (tpurt_dist_enqueue_send): until its receiver takes
  // it, it holds back neither the group's collectives issued after it nor sends to other peers. The lane waits
  // for what the caller's stream had queued (the input is final) and for the batch groups that sent to the same
  // peer before (messages to a peer keep their order; such a group likewise waits for the lane); the Work's
  // event is on the lane, so Work.wait() (dist.send waits) makes the caller's stream wait until the message is
  // taken. A private queue, not a pool stream, which may be another group's or the application's: a send held
  // there would hold back their work. The input stays referenced until the send has run.
  struct Lane {
    tpurt_queue_t* queue = nullptr;     // made on the first lone send to the peer
    tpurt_event_t* done = nullptr;      // after the lane's last send
    tpurt_event_t* group_done = nullptr;  // on the group's stream, after the last batch group that sent to the peer
  };
  std::vector<Lane> lanes_;
  Lane& lane(int peer) {
    if (lanes_.empty()) lanes_.resize(local_size_);
    Lane& l = lanes_.at(peer);
    if (!l.done) {
      check_status(tpurt_event_create(get_device(-1), 0, &l.done), "tpu_dist send");
      check_status(tpurt_event_create(get_device(-1), 0, &l.group_done), "tpu_dist send");
    }
    return l;
  }
  static tpurt_status_t drop_tensors(void* user) {
    delete static_cast<std::vector<at::Tensor>*>(user);
    return TPURT_OK;
  }
  c10::intrusive_ptr<c10d::Work> lone_send(const tpurt_dist_op_t& op, const at::Tensor& t, const at::Tensor& d) {
    TORCH_CHECK(comm_ != nullptr, "tpu_dist: send: the process group has been shut down");
    check_status(tpurt_dist_comm_error(comm_), "tpu_dist");
    Lane& l = lane(op.peer);
    if (!l.queue) check_status(tpurt_queue_create(get_device(-1), -1, &l.queue), "tpu_dist send");
    tpurt_queue_t* caller = current_queue();
    tpurt_event_t* e = nullptr;
    check_status(tpurt_event_create(get_device(-1), 0, &e), "tpu_dist send");
    tpurt_status_t st = tpurt_event_record(e, caller);
    if (!st) st = tpurt_queue_wait_event(l.queue, e);
    tpurt_event_release(e);
    if (!st) st = tpurt_queue_wait_event(l.queue, l.group_done);
    check_status(st, "tpu_dist send");
    check_status(tpurt_dist_enqueue_send(comm_, l.queue, &op), "send");
    auto* keep = new std::vector<at::Tensor>{t, d};
    st = tpurt_queue_submit_host_fn(l.queue, drop_tensors, keep);
    if (st) {  // not queued: the send may still read them, so wait for it first
      tpurt_status_free(without_gil([&] { return tpurt_queue_synchronize(l.queue); }));
      delete keep;
    }
    check_status(st, "tpu_dist send");
    check_status(tpurt_event_record(l.done, l.queue), "tpu_dist send");
    return c10::make_intrusive<TpuWork>(getRank(), c10d::OpType::SEND, comm_, std::vector<at::Tensor>{t}, false,
                                        l.queue);
  }

  // ---- CPU tensors (with FSDP2's CPU offload: clip_grad_norm_'s all_reduce, full_tensor() of an offloaded
  // parameter; object collectives): each is copied to this chip, the collective runs on the copies, and the
  // Work copies the results back at wait(), where the host waits (as gloo's Work does). ----
  static bool on_cpu(const at::Tensor& t) { return t.defined() && t.device().is_cpu(); }
  static bool any_cpu(const std::vector<at::Tensor>& v) {
    for (auto& t : v)
      if (on_cpu(t)) return true;
    return false;
  }
  static bool any_cpu(const std::vector<std::vector<at::Tensor>>& vv) {
    for (auto& v : vv)
      if (any_cpu(v)) return true;
    return false;
  }
  static at::Tensor chip(const at::Tensor& t) { return on_cpu(t) ? t.to(c10::Device(kTpu, current_device_index())) : t; }
  static std::vector<at::Tensor> chip(const std::vector<at::Tensor>& v) {
    std::vector<at::Tensor> r;
    for (auto& t : v) r.push_back(chip(t));
    return r;
  }
  static std::vector<std::vector<at::Tensor>> chip(const std::vector<std::vector<at::Tensor>>& vv) {
    std::vector<std::vector<at::Tensor>> r;
    for (auto& v : vv) r.push_back(chip(v));
    return r;
  }
  // w copies each CPU tensor of `user` from its chip copy in `chips` at wait() (inside batch_isend_irecv, the
  // group's Work does).
  c10::intrusive_ptr<c10d::Work> copy_back(c10::intrusive_ptr<c10d::Work> w, const std::vector<at::Tensor>& user,
                                           const std::vector<at::Tensor>& chips) {
    std::vector<std::pair<at::Tensor, at::Tensor>> pairs;
    for (size_t i = 0; i < user.size(); ++i)
      if (on_cpu(user[i])) pairs.emplace_back(user[i], chips[i]);
    if (coalescing_) {
      for (auto& p : pairs) pending_copy_back_.push_back(std::move(p));
    } else {
      static_cast<TpuWork*>(w.get())->add_copy_back(std::move(pairs));
    }
    return w;
  }
  c10::intrusive_ptr<c10d::Work> copy_back(c10::intrusive_ptr<c10d::Work> w,
                                           const std::vector<std::vector<at::Tensor>>& user,
                                           const std::vector<std::vector<at::Tensor>>& chips) {
    std::vector<at::Tensor> u, c;
    for (size_t i = 0; i < user.size(); ++i)
      for (size_t j = 0; j < user[i].size(); ++j) {
        u.push_back(user[i][j]);
        c.push_back(chips[i][j]);
      }
    return copy_back(std::move(w), u, c);
  }

  void check_tpu(const at::Tensor& t, const char* what) {
    TORCH_CHECK_VALUE(t.defined() && t.device().type() == kTpu, "tpu_dist: ", what, ": expected a tpu tensor, got ",
                      t.defined() ? t.device().str() : std::string("an undefined tensor"));
    TORCH_CHECK(comm_ != nullptr, "tpu_dist: ", what, ": the process group has been shut down");
    TORCH_CHECK_VALUE(t.layout() == c10::kStrided, "tpu_dist: ", what, ": only dense (strided) tensors");
  }
  at::Tensor& one(std::vector<at::Tensor>& v, const char* what) {
    TORCH_CHECK_VALUE(v.size() == 1, "tpu_dist: ", what, ": one tensor per process (one chip each), got ", v.size());
    check_tpu(v[0], what);
    return v[0];
  }
  void check_like(const at::Tensor& t, const at::Tensor& ref, const char* what) {
    check_tpu(t, what);
    TORCH_CHECK_VALUE(t.numel() == ref.numel() && t.scalar_type() == ref.scalar_type(), "tpu_dist: ", what,
                      " has ", t.numel(), " elements of ", t.scalar_type(), ", expected ", ref.numel(), " of ",
                      ref.scalar_type());
  }
  // A dense tensor holding t's values (t itself when it already is one).
  static at::Tensor dense(const at::Tensor& t) {
    return t.is_contiguous() && t.storage_offset() >= 0 ? t : t.contiguous();
  }
  static void write_back(at::Tensor& t, const at::Tensor& d) {
    if (!d.is_same(t)) t.copy_(d);
  }
  tpurt_dist_op_t base_op(tpurt_dist_kind_t kind, const at::Tensor& d) {
    tpurt_dist_op_t op{};
    op.kind = kind;
    op.dtype = to_tpurt_dtype(d.scalar_type(), "tpu_dist");
    op.count = static_cast<uint64_t>(d.numel());
    op.part_of = part_of_;
    return op;
  }
  // While one is alive, the ops this call submits within the host are steps of `kind` across hosts (their errors
  // and header compare say so). The outermost call names it (reduce across hosts runs as an allreduce).
  class PartOf {
   public:
    PartOf(TpuDistBackend* b, tpurt_dist_kind_t kind) : b_(b), prev_(b->part_of_) {
      if (!prev_) b->part_of_ = kind;
    }
    ~PartOf() { b_->part_of_ = prev_; }
    PartOf(const PartOf&) = delete;
    PartOf& operator=(const PartOf&) = delete;

   private:
    TpuDistBackend* b_;
    tpurt_dist_kind_t prev_;
  };
  void submit(const tpurt_dist_op_t& op, const char* what) {
    TORCH_CHECK(comm_ != nullptr, "tpu_dist: ", what, ": the process group has been shut down");
    tpurt_status_t early = tpurt_dist_comm_error(comm_);
    check_status(early, "tpu_dist");
    check_status(tpurt_dist_enqueue(comm_, current_queue(), &op), what);
  }
  c10::intrusive_ptr<c10d::Work> work(c10d::OpType type, std::vector<at::Tensor> outs) {
    return c10::make_intrusive<TpuWork>(getRank(), type, comm_, std::move(outs), false);
  }
  // flat: the dense input; `flat_owned` when it is a copy this call made
  // (premul_sum may then scale it in place).
  c10::intrusive_ptr<c10d::Work> reduce_scatter_flat(at::Tensor& out, at::Tensor flat, bool flat_owned,
                                                     const c10d::ReduceScatterOptions& opts, c10d::OpType type) {
    at::Tensor d = dense(out);
    tpurt_dist_op_t op = base_op(TPURT_DIST_REDUCE_SCATTER, d);
    op.redop = reduction(opts.reduceOp, flat, flat_owned, "reduce_scatter");
    op.in = flat.data_ptr();
    op.out = d.data_ptr();
    submit(op, "reduce_scatter");
    write_back(out, d);
    return work(type, {out});
  }

  c10::intrusive_ptr<c10d::Work> defer(const tpurt_dist_op_t& op, const at::Tensor& user, const at::Tensor& d,
                                       bool is_recv) {
    pending_.push_back(op);
    pending_tensors_.push_back({user, d, is_recv});  // keeps d alive until the group is queued
    return work(is_recv ? c10d::OpType::RECV : c10d::OpType::SEND, {user});
  }
  c10::intrusive_ptr<c10d::Work> defer_remote(const RemoteP2P& m, const at::Tensor& user, const at::Tensor& d) {
    pending_remote_.push_back(m);
    pending_tensors_.push_back({user, d, m.is_recv});
    return work(m.is_recv ? c10d::OpType::RECV : c10d::OpType::SEND, {user});
  }

  // ---- across hosts: within the host through shared memory, between hosts
  // gloo on the first rank of each host (host-visible copies of the device
  // buffers), then within the host again. Ranks are node-contiguous (rank =
  // host * local_size + local_rank, as torchrun assigns them). ----
  bool same_host(int rank) const { return rank / local_size_ == host_; }
  static constexpr int kAllToAllTag = 0x74707561;  // all_to_all's parts between hosts
  // The bytes at ptr as a CPU tensor for gloo's data movement (dtype-blind).
  static at::Tensor host_bytes(void* ptr, uint64_t bytes) {
    return at::from_blob(ptr, {static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte));
  }
  // The root's list for gloo's gather/scatter between hosts: one byte view per host of `part` bytes
  // at base (none off the root: base is null there).
  static std::vector<std::vector<at::Tensor>> host_parts(uint8_t* base, uint64_t part, int hosts) {
    std::vector<std::vector<at::Tensor>> v;
    if (!base) return v;
    v.emplace_back();
    for (int h = 0; h < hosts; ++h) v[0].push_back(host_bytes(base + h * part, part));
    return v;
  }

  // Posts every message at once on the queue (in issue order), then waits
  // for all of them, so no order of sends and receives deadlocks.
  // A send between hosts is also counted in the group's store under (receiver, tag), and each rank counts the
  // messages from other hosts it has received per tag: a receive from any source learns from the two whether a
  // message from another host is there to take (gloo has no probe, and a posted gloo receive cannot be taken back).
  void remote_p2p(std::vector<RemoteP2P> msgs) {
    TORCH_CHECK(world_, "tpu_dist: no gloo group between the hosts' ranks");
    auto world = world_;
    auto store = p2p_store_;
    auto taken = remote_taken_;
    std::string what = "point-to-point messages between hosts (";
    for (size_t i = 0; i < msgs.size(); ++i)
      what += (i ? ", " : "") + std::string(msgs[i].is_recv ? "recv from rank " : "send to rank ") +
              std::to_string(msgs[i].peer) + ", " + std::to_string(msgs[i].bytes) + " bytes";
    what += ")";
    tpurt_dist_comm_t* comm = comm_;
    host_step([world, store, taken, msgs, comm] {
      tpurt_status_t st = tpurt_dist_comm_error(comm);  // (no gloo call once aborted: exchange_calls)
      if (st) return st;
      std::vector<c10::intrusive_ptr<c10d::Work>> works;
      for (const auto& m : msgs) {
        std::vector<at::Tensor> v{host_bytes(m.ptr, m.bytes)};
        if (!m.is_recv && m.counted && store) store->add(any_source_key(m.peer, m.tag), 1);
        works.push_back(m.is_recv ? world->recv(v, m.peer, m.tag) : world->send(v, m.peer, m.tag));
      }
      st = xwait_p2p(works);
      if (st) return st;
      for (const auto& m : msgs)
        if (m.is_recv && m.counted) ++(*taken)[m.tag];
      return TPURT_OK;
    }, what);
  }
  static std::string any_source_key(int dst, int tag) {
    return "any/" + std::to_string(dst) + "/" + std::to_string(tag);
  }

  // recv from any source in a group spanning hosts: on the queue, in issue order, polls this host's shared
  // memory for a message with the tag (tpurt_dist_recv_poll) and, every millisecond, the store's count of
  // messages sent here with the tag from other hosts; when that count is ahead of the ones received, a gloo
  // receive from any rank takes the next of them. The sender's group rank goes into `source`.
  void x_recv_anysource(const at::Tensor& d, int tag, const at::Tensor& source) {
    TORCH_CHECK(world_ && p2p_store_, "tpu_dist: no gloo group between the hosts' ranks");
    tpurt_dist_op_t op = base_op(TPURT_DIST_RECV, d);
    op.peer = TPURT_DIST_ANY_SOURCE;
    op.tag = tag;
    op.out = d.data_ptr();
    op.out_source = static_cast<int*>(source.data_ptr());
    auto world = world_;
    auto store = p2p_store_;
    auto taken = remote_taken_;
    tpurt_dist_comm_t* comm = comm_;
    int first = host_ * local_size_, me = getRank();
    std::string key = any_source_key(me, tag);
    auto timeout = timeout_;
    host_step([op, world, store, taken, comm, first, me, key, timeout, tag] {
      using clock = std::chrono::steady_clock;
      auto t0 = clock::now(), asked = t0 - std::chrono::seconds(1);
      for (;;) {
        bool got = false;
        tpurt_status_t st = tpurt_dist_recv_poll(comm, &op, &got);
        if (st) return st;
        if (got) {
          *op.out_source += first;  // a local rank: the group's rank
          return TPURT_OK;
        }
        auto now = clock::now();
        if (now - asked >= std::chrono::milliseconds(1)) {
          asked = now;
          if (store->add(key, 0) > (*taken)[tag]) {
            std::vector<at::Tensor> v{host_bytes(op.out, op.count * tpurt_dtype_size(op.dtype))};
            auto w = world->recvAnysource(v, tag);
            st = xwait_p2p({w});
            if (st) return st;
            ++(*taken)[tag];
            *op.out_source = w->sourceRank();
            return TPURT_OK;
          }
        }
        st = tpurt_dist_comm_error(comm);
        if (st) return st;
        if (now - t0 > timeout) {
          char msg[256];
          snprintf(msg, sizeof(msg), "no rank sent rank %d a message with tag %d for its recv from any source within "
                   "the %.1f s timeout", me, tag, std::chrono::duration<double>(timeout).count());
          tpurt_dist_comm_abort(comm, msg);
          return tpurt_dist_comm_error(comm);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }, "recv from any source (tag " + std::to_string(tag) + ") of rank " + std::to_string(me));
  }

  // ---- a step between hosts, and its failures ----
  // A step runs on the group's queue thread (in issue order, tpurt_dist_enqueue_host); what it waits for in gloo
  // ends when the group is aborted meanwhile (xwait, xwait_p2p), whether by this host (a local rank died or timed
  // out: shared memory) or by another (the watcher reads the group's abort key in the store, which the rank that
  // aborted a host's communicator wrote there: publish_abort). A step that fails aborts this host's communicator
  // (tpurt_dist_enqueue_host), so every rank of every host fails its pending and next collectives with the same
  // message, naming the rank and the collective, and none is left waiting in gloo.
  struct HostStep {
    std::function<tpurt_status_t()> fn;
    std::string what;  // the collective and the ranks of other hosts it waits for, for its error
    TpuDistBackend* b;
  };
  static HostStep*& current_step() {  // the step this queue thread runs
    static thread_local HostStep* step = nullptr;
    return step;
  }
  static tpurt_status_t run_host_step(void* user) {
    auto* step = static_cast<HostStep*>(user);
    TpuDistBackend* b = step->b;
    tpurt_status_t st;
    current_step() = step;
    b->step_since_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count());
    try {
      st = step->fn();
    } catch (const std::exception& e) {
      st = b->step_failed(step->what, e.what());
    }
    b->step_since_ns_.store(0);
    current_step() = nullptr;
    delete step;
    return st;
  }
  void host_step(std::function<tpurt_status_t()> fn, std::string what) {
    auto* step = new HostStep{std::move(fn), std::move(what), this};
    tpurt_status_t st = tpurt_dist_enqueue_host(comm_, current_queue(), run_host_step, step);
    if (st) delete step;
    check_status(st, "tpu_dist between hosts");
  }
  // The ranks of other hosts a step waits for: local rank l of every other host.
  std::string peers_between_hosts(int l) const {
    std::string r;
    for (int h = 0; h < hosts_; ++h)
      if (h != host_) r += (r.empty() ? "" : ", ") + std::to_string(h * local_size_ + l);
    return (hosts_ > 2 ? "ranks " : "rank ") + r;
  }
  // Waits for a gloo collective of a step in slices (gloo's own wait cannot be interrupted), returning the group's
  // error as soon as it is aborted; gloo's errors and timeout throw (run_host_step: step_failed).
  static tpurt_status_t xwait(const c10::intrusive_ptr<c10d::Work>& w) {
    tpurt_dist_comm_t* comm = current_step()->b->comm_;
    for (;;) {
      try {
        w->wait(std::chrono::milliseconds(20));
        return TPURT_OK;
      } catch (const std::exception&) {
        // The slice ran out, or the work failed; it may also have completed just after the slice ran out: then
        // its own outcome (a whole wait returns at once, or throws its error).
        if (w->isCompleted()) {
          w->wait();
          return TPURT_OK;
        }
      }
      tpurt_status_t st = tpurt_dist_comm_error(comm);
      if (st) return st;
    }
  }
  // Waits for a step's gloo sends and receives. Their waits cannot be sliced (a gloo send or receive whose wait
  // times out fails every connection of its gloo group), so they wait whole, registered with the watcher, which
  // aborts them (Work::abort) once the group is aborted.
  static tpurt_status_t xwait_p2p(const std::vector<c10::intrusive_ptr<c10d::Work>>& works) {
    TpuDistBackend* b = current_step()->b;
    {
      std::lock_guard<std::mutex> lk(b->watch_mu_);
      for (auto& w : works) b->inflight_.push_back(w);
    }
    std::exception_ptr ex;
    bool done = true;
    for (auto& w : works) {
      try {
        tpurt_status_t st = tpurt_dist_comm_error(b->comm_);
        if (st) {
          tpurt_status_free(st);
          done = false;
          break;
        }
        if (!w->wait()) {
          done = false;
          break;
        }
      } catch (...) {
        ex = std::current_exception();
        break;
      }
    }
    {
      std::lock_guard<std::mutex> lk(b->watch_mu_);
      b->inflight_.clear();
    }
    if (ex) std::rethrow_exception(ex);
    if (done) return TPURT_OK;
    tpurt_status_t st = tpurt_dist_comm_error(b->comm_);
    return st ? st : tpurt_status_make(TPURT_STATUS_ABORTED, __FILE__, __LINE__, "tpu_dist: a message between hosts "
                                       "was abandoned");
  }
  // A gloo call of a step failed (a peer's connection closed, gloo's timeout). The cause was usually seen on the
  // host of the rank that died or stopped, which publishes it: wait a little for that (so every rank reports the
  // same cause), else abort with what this rank saw, naming the step and the ranks it waited for.
  tpurt_status_t step_failed(const std::string& what, const char* err) {
    auto deadline = std::chrono::steady_clock::now() + std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(3));
    for (;;) {
      tpurt_status_t st = tpurt_dist_comm_error(comm_);
      if (st) return st;
      std::string m = remote_abort();
      if (!m.empty()) {
        tpurt_dist_comm_abort(comm_, m.c_str());
        return tpurt_dist_comm_error(comm_);
      }
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::string e = err;
    e = e.substr(0, e.find('\n'));  // c10d's messages go on with a C++ backtrace
    std::string msg = what + " failed on rank " + std::to_string(getRank()) + ": " + e;
    tpurt_dist_comm_abort(comm_, msg.c_str());
    return tpurt_dist_comm_error(comm_);
  }
  // The store key every rank of the group watches: the message of the first host that aborted.
  static constexpr const char* kAbortKey = "abort";
  // tpurt_dist_comm_abort's hook: this process aborted its host's communicator first; the other hosts learn why.
  static void publish_abort(void* user, const char* why) {
    auto* b = static_cast<TpuDistBackend*>(user);
    try {
      b->p2p_store_->compareSet(kAbortKey, {}, std::vector<uint8_t>(why, why + strlen(why)));
    } catch (...) {  // the store's host is gone: the other hosts see their gloo connections fail instead
    }
  }
  std::string remote_abort() {
    try {
      if (!p2p_store_->check({kAbortKey})) return {};
      auto v = p2p_store_->get(kAbortKey);
      return std::string(v.begin(), v.end());
    } catch (...) {
      return {};
    }
  }
  // A thread of the group's (across hosts only): while a step has been running for 100 ms, it asks the store every
  // 200 ms whether another host aborted (and then aborts this host's communicator with that message), and aborts
  // the step's gloo sends and receives once the group is aborted. Idle otherwise (a 50 ms tick).
  void watch() {
    std::unique_lock<std::mutex> lk(watch_mu_);
    auto asked = std::chrono::steady_clock::time_point();
    while (!watch_stop_) {
      watch_cv_.wait_for(lk, std::chrono::milliseconds(50));
      if (watch_stop_) break;
      int64_t since = step_since_ns_.load();
      auto now = std::chrono::steady_clock::now();
      if (!since || now.time_since_epoch().count() - since < 100000000) continue;
      tpurt_status_t st = tpurt_dist_comm_error(comm_);
      bool aborted = st != TPURT_OK;
      tpurt_status_free(st);
      if (!aborted && now - asked >= std::chrono::milliseconds(200)) {
        asked = now;
        lk.unlock();
        std::string m = remote_abort();
        if (!m.empty()) tpurt_dist_comm_abort(comm_, m.c_str());
        lk.lock();
        aborted = !m.empty();
      }
      if (aborted)
        for (auto& w : inflight_) {
          try {
            w->abort();
          } catch (...) {
          }
        }
    }
  }

  // What a collective's step between hosts runs (-1: not part of this kind), for the hosts to compare.
  struct XCall {
    int64_t kind, dtype, count, root, redop;
  };
  static int64_t dtype_code(c10::ScalarType t) { return to_tpurt_dtype(t, "tpu_dist"); }
  static std::string describe(const int64_t* h) {  // h: call number, then an XCall
    char buf[160];
    const char* kind = tpurt_dist_kind_name(static_cast<tpurt_dist_kind_t>(h[1]));
    if (h[1] == TPURT_DIST_BARRIER) return "barrier";
    int n = snprintf(buf, sizeof(buf), "%s(%s, %lld elements", kind, tpurt_dtype_name(static_cast<tpurt_dtype_t>(h[2])),
                     static_cast<long long>(h[3]));
    if (h[5] >= 0) n += snprintf(buf + n, sizeof(buf) - n, ", %s", tpurt_dist_redop_name(static_cast<tpurt_dist_redop_t>(h[5])));
    if (h[4] >= 0) n += snprintf(buf + n, sizeof(buf) - n, ", root %lld", static_cast<long long>(h[4]));
    snprintf(buf + n, sizeof(buf) - n, ")");
    return buf;
  }
  // Every step between hosts starts with the call exchange on the hosts' first ranks (column 0, which is the gloo
  // group cross_): one gloo all_gather of a fixed kCallWords int64 per host, a header (the step's number, collective,
  // dtype, count, root, reduction) and kFoldBytes of payload. Its size is the same whatever the step, so the first
  // ranks of hosts that called different steps still meet in it and compare, rather than each waiting in a gloo call
  // the other never makes; they then fail on every rank, naming both calls (the abort reaches the host's other ranks
  // through its shared memory). A small step's data rides in the payload (x_fold): that step exchanges once between
  // hosts, where a separate header exchange before the data doubled a small message's latency.
  static constexpr int64_t kHeaderWords = 8;
  static constexpr int64_t kFoldBytes = 4096;
  static constexpr int64_t kCallWords = kHeaderWords + kFoldBytes / 8;
  // Runs on the queue (first ranks only): exchanges `me` (this host's row) over g into `all` (one row per host),
  // waiting in slices while watching the group (xwait), and compares the headers.
  // `check` false (TORCH_TPU_DIST_HOST_CHECK=0): no compare.
  static tpurt_status_t exchange_calls(const c10::intrusive_ptr<c10d::Backend>& g, at::Tensor me, at::Tensor all,
                                       tpurt_dist_comm_t* comm, int L, bool check, bool folded) {
    // No gloo call once the group is aborted: one that no peer will match would hold gloo's thread until its timeout.
    tpurt_status_t st = tpurt_dist_comm_error(comm);
    if (!st) st = xwait(g->_allgather_base(all, me));
    if (st || !check) return st;
    int n = g->getSize();
    const int64_t* a = all.data_ptr<int64_t>();
    for (int i = 1; i < n; ++i) {
      if (std::equal(a, a + 6, a + kCallWords * i)) continue;
      char msg[512];
      snprintf(msg, sizeof(msg), "mismatched collectives between hosts at call #%lld of the group's steps between "
               "hosts: rank 0 called %s but rank %d called %s (%s)", static_cast<long long>(a[0]),
               describe(a).c_str(), i * L, describe(a + kCallWords * i).c_str(),
               folded ? "no data from another host was used" : "no data was exchanged between the hosts");
      tpurt_dist_comm_abort(comm, msg);
      return tpurt_dist_comm_error(comm);
    }
    return TPURT_OK;
  }
  // This host's row of the call exchange: the header, then `bytes` at src (device memory, read when the step runs).
  static at::Tensor call_row(int64_t seq, const XCall& call, const void* src, uint64_t bytes) {
    at::Tensor me = at::zeros({kCallWords}, at::kLong);
    int64_t* m = me.data_ptr<int64_t>();
    int64_t h[6] = {seq, call.kind, call.dtype, call.count, call.root, call.redop};
    std::copy(h, h + 6, m);
    if (bytes) memcpy(m + kHeaderWords, src, bytes);
    return me;
  }

  // Queues fn, a collective's step between hosts. `columns`: every local rank moves its share over its column (local
  // rank l of every host, column_); else only the hosts' first ranks do, over cross_ (the other ranks queue nothing).
  // The first ranks make the call exchange first; in a step of every column the host's other ranks wait for its
  // outcome (a barrier within the host, which fails with the first rank's error) before their gloo call, so no
  // column's data moves between hosts whose calls differ, and no column is left waiting in a gloo call for a peer
  // that called something else. (Ranks of one host that disagree among themselves, in a way their own collectives
  // within the host did not show, are not caught here: their hosts' first ranks agree.)
  // TORCH_TPU_DIST_HOST_CHECK=0 skips the exchange and the barrier.
  void x_step(bool columns, XCall call, std::function<tpurt_status_t()> fn) {
    int64_t seq = ++x_calls_;
    bool first = local_rank_ == 0;
    if (!columns && !first) return;
    tpurt_dist_comm_t* comm = comm_;
    int L = local_size_;
    bool check = host_check_;
    auto cross = column_;  // on a first rank, the same group as cross_
    host_step([cross, first, columns, call, fn, seq, comm, L, check]() -> tpurt_status_t {
      tpurt_status_t st0 = tpurt_dist_comm_error(comm);  // (no gloo call once aborted: exchange_calls)
      if (st0) return st0;
      if (check && first) {
        at::Tensor all = at::empty({kCallWords * cross->getSize()}, at::kLong);
        tpurt_status_t st = exchange_calls(cross, call_row(seq, call, nullptr, 0), all, comm, L, true, false);
        if (st) return st;
      }
      if (check && columns && L > 1) {
        tpurt_dist_op_t b{};
        b.kind = TPURT_DIST_BARRIER;
        b.dtype = TPURT_DTYPE_UINT8;
        b.part_of = static_cast<tpurt_dist_kind_t>(call.kind);
        tpurt_status_t st = tpurt_dist_run(comm, &b);
        if (st) return st;
      }
      return fn();
    }, step_what(call, seq, columns ? local_rank_ : 0));
  }
  // A step's description for its error: the collective, its number among the steps between hosts, and the ranks
  // of other hosts it waits for (local rank l's column).
  std::string step_what(const XCall& call, int64_t seq, int l) const {
    int64_t h[6] = {seq, call.kind, call.dtype, call.count, call.root, call.redop};
    return describe(h) + " between hosts (step #" + std::to_string(seq) + ", with " + peers_between_hosts(l) + ")";
  }
  // A step of the hosts' first ranks whose data (`bytes` at src, at most kFoldBytes, in device memory; none on a
  // host that sends nothing) rides in the call exchange: once the calls compare equal, fn gets every host's payload
  // (rows[h], host order). Other ranks queue nothing.
  void x_fold(XCall call, const void* src, uint64_t bytes,
              std::function<tpurt_status_t(const std::vector<const uint8_t*>& rows)> fn) {
    int64_t seq = ++x_calls_;
    if (local_rank_ != 0) return;
    TORCH_CHECK(cross_ && bytes <= static_cast<uint64_t>(kFoldBytes), "tpu_dist: bad step between hosts");
    tpurt_dist_comm_t* comm = comm_;
    int L = local_size_;
    bool check = host_check_;
    auto cross = cross_;
    host_step([cross, call, src, bytes, fn, seq, comm, L, check]() -> tpurt_status_t {
      int n = cross->getSize();
      at::Tensor all = at::empty({kCallWords * n}, at::kLong);
      tpurt_status_t st = exchange_calls(cross, call_row(seq, call, src, bytes), all, comm, L, check, true);
      if (st || !fn) return st;
      std::vector<const uint8_t*> rows;
      for (int h = 0; h < n; ++h)
        rows.push_back(reinterpret_cast<const uint8_t*>(all.data_ptr<int64_t>() + kCallWords * h + kHeaderWords));
      return fn(rows);
    }, step_what(call, seq, 0));
  }
  // out = rows[0] op rows[1] op ... (the hosts' partial results, in host order, so every host computes the same
  // bits), n elements of `type` each; on bool, sum and max are or, product and min are and (as gloo_op maps them).
  static void reduce_rows(void* out, const std::vector<const uint8_t*>& rows, int64_t n, c10::ScalarType type,
                          const c10d::ReduceOp& op) {
    at::Tensor acc = host_view(out, n, type);
    acc.copy_(host_view(const_cast<uint8_t*>(rows[0]), n, type));
    auto k = op.op_;
    if (type == at::kBool) {
      k = k == c10d::ReduceOp::PRODUCT || k == c10d::ReduceOp::MIN || k == c10d::ReduceOp::BAND ? c10d::ReduceOp::BAND
          : k == c10d::ReduceOp::BXOR ? c10d::ReduceOp::BXOR : c10d::ReduceOp::BOR;
    }
    for (size_t h = 1; h < rows.size(); ++h) {
      at::Tensor x = host_view(const_cast<uint8_t*>(rows[h]), n, type);
      switch (k) {
        case c10d::ReduceOp::SUM: acc.add_(x); break;
        case c10d::ReduceOp::PRODUCT: acc.mul_(x); break;
        case c10d::ReduceOp::MIN: at::minimum_out(acc, acc, x); break;
        case c10d::ReduceOp::MAX: at::maximum_out(acc, acc, x); break;
        case c10d::ReduceOp::BAND: acc.bitwise_and_(x); break;
        case c10d::ReduceOp::BOR: acc.bitwise_or_(x); break;
        case c10d::ReduceOp::BXOR: acc.bitwise_xor_(x); break;
        default: TORCH_CHECK(false, "tpu_dist: reduction ", static_cast<int>(k), " between hosts");
      }
    }
  }
  // The `numel` elements of device memory at `ptr` as a CPU tensor over the same bytes, for gloo
  // (vTPU memory is host-visible, so nothing is copied; the host step runs in queue order).
  static at::Tensor host_view(void* ptr, int64_t numel, c10::ScalarType type) {
    return at::from_blob(ptr, {numel}, at::TensorOptions().dtype(type));
  }
  // Within this host, local rank `root`'s `x` to every local rank.
  void local_broadcast(const at::Tensor& x, int root, const char* what) {
    tpurt_dist_op_t op = base_op(TPURT_DIST_BROADCAST, x);
    op.root = root;
    op.in = local_rank_ == root ? x.data_ptr() : nullptr;
    op.out = x.data_ptr();
    submit(op, what);
  }

  // t is overwritten with the result (callers pass a copy when the
  // collective's input is the user's: reduce, reduce_scatter).
  // By columns, as reduce_scatter: within each host a reduce-scatter hands local rank l the host's partial sum of
  // block l (the message padded to a multiple of the host's ranks), the column (local rank l of every host, a gloo
  // group) all-reduces that block, and an all-gather within the host puts the blocks together. Every local rank
  // moves 1/local_size of the message between hosts at once, where a reduce to the host's first rank, its
  // all_reduce and a broadcast sent all of it through that one rank.
  // Messages up to kLeaderBytes go through the hosts' first ranks instead (a reduce to the host's first rank, its
  // all_reduce between the hosts, a broadcast within the host): one gloo step on two ranks per column of hosts
  // rather than on every local rank, which is what a small message's latency is made of.
  static constexpr int64_t kLeaderBytes = 64 << 10;
  c10::intrusive_ptr<c10d::Work> x_allreduce(at::Tensor& t, const c10d::ReduceOp& rop) {
    PartOf step_of(this, TPURT_DIST_ALLREDUCE);
    TORCH_CHECK(column_, "tpu_dist: no gloo group between the hosts' ranks");
    at::Tensor d = dense(t);
    tpurt_dist_redop_t red = reduction(rop, d, true, "allreduce");
    bool avg = red == TPURT_DIST_AVG;
    c10::ScalarType st = d.scalar_type();
    TORCH_CHECK_VALUE(!avg || at::isFloatingType(st) || at::isComplexType(st), "tpu_dist: allreduce avg needs a "
                      "floating or complex tensor, got ", st);
    if (avg) red = TPURT_DIST_SUM;
    c10d::ReduceOp gop = avg || rop.op_ == c10d::ReduceOp::PREMUL_SUM ? c10d::ReduceOp(c10d::ReduceOp::SUM) : rop;
    if (static_cast<int64_t>(d.nbytes()) <= kLeaderBytes) {
      tpurt_dist_op_t op = base_op(TPURT_DIST_REDUCE, d);
      op.redop = red;
      op.root = 0;
      op.in = d.data_ptr();
      op.out = local_rank_ == 0 ? d.data_ptr() : nullptr;
      submit(op, "allreduce");
      auto cross = cross_;
      void* ptr = d.data_ptr();
      int64_t n = d.numel();
      XCall call{TPURT_DIST_ALLREDUCE, dtype_code(st), n, -1, avg ? TPURT_DIST_AVG : red};
      if (static_cast<int64_t>(d.nbytes()) <= kFoldBytes) {  // the hosts' partial results ride in the call exchange
        x_fold(call, ptr, d.nbytes(), [ptr, n, st, gop](const std::vector<const uint8_t*>& rows) {
          reduce_rows(ptr, rows, n, st, gop);
          return TPURT_OK;
        });
      } else {
        x_step(false, call, [cross, ptr, n, st, gop] {
          std::vector<at::Tensor> v{gloo_view(ptr, n, st)};
          c10d::AllreduceOptions o;
          o.reduceOp = gloo_op(st, gop);
          return xwait(cross->allreduce(v, o));
        });
      }
      local_broadcast(d, 0, "allreduce");
      if (avg) d.div_(getSize());
      write_back(t, d);
      return work(c10d::OpType::ALLREDUCE, {t});
    }
    int64_t n = d.numel(), L = local_size_, c = (n + L - 1) / L;
    at::Tensor flat = d.view({-1}), block = flat;
    if (L > 1) {
      at::Tensor padded = flat;
      if (c * L != n) {  // the padding's values are reduced and dropped
        padded = empty_tpu_contiguous({c * L}, st);
        padded.narrow(0, 0, n).copy_(flat);
      }
      block = empty_tpu_contiguous({c}, st);
      tpurt_dist_op_t op = base_op(TPURT_DIST_REDUCE_SCATTER, block);
      op.redop = red;
      op.in = padded.data_ptr();
      op.out = block.data_ptr();
      submit(op, "allreduce");
      flat = padded;
    }
    auto column = column_;
    void* ptr = block.data_ptr();
    x_step(true, {TPURT_DIST_ALLREDUCE, dtype_code(st), n, -1, avg ? TPURT_DIST_AVG : red},
           [column, ptr, c, st, gop] {
      std::vector<at::Tensor> v{gloo_view(ptr, c, st)};
      c10d::AllreduceOptions o;
      o.reduceOp = gloo_op(st, gop);
      return xwait(column->allreduce(v, o));
    });
    if (L > 1) {
      tpurt_dist_op_t op = base_op(TPURT_DIST_ALLGATHER, block);
      op.in = block.data_ptr();
      op.out = flat.data_ptr();
      submit(op, "allreduce");
      if (!flat.is_same(d.view({-1}))) d.view({-1}).copy_(flat.narrow(0, 0, n));
    }
    if (avg) d.div_(getSize());
    write_back(t, d);
    return work(c10d::OpType::ALLREDUCE, {t});
  }

  // Between hosts, gloo works on the host-visible bytes of a chip buffer: bool as bytes (with the logical
  // reduction: or for sum/max/bor, and for product/min/band), complex as its (real, imaginary) pairs (what c10d
  // allows on complex tensors, sum and avg, is the same reduction on them).
  static at::Tensor gloo_view(void* ptr, int64_t numel, c10::ScalarType type) {
    if (type == at::kBool) return host_view(ptr, numel, at::kByte);
    if (at::isComplexType(type)) return host_view(ptr, numel * 2, c10::toRealValueType(type));
    return host_view(ptr, numel, type);
  }
  static c10d::ReduceOp gloo_op(c10::ScalarType type, const c10d::ReduceOp& op) {
    if (type != at::kBool) return op;
    auto k = op.op_;
    if (k == c10d::ReduceOp::PRODUCT || k == c10d::ReduceOp::MIN || k == c10d::ReduceOp::BAND)
      return c10d::ReduceOp(c10d::ReduceOp::MIN);
    return k == c10d::ReduceOp::BXOR ? c10d::ReduceOp(c10d::ReduceOp::BXOR) : c10d::ReduceOp(c10d::ReduceOp::MAX);
  }

  // reduce_scatter across hosts. Rank (host h, local rank l) gets block h * local_size + l. Within each host a
  // reduce-scatter hands local rank l the host's partial reduction of its column's blocks ((h', l) for every host
  // h'); then the column (local rank l of every host) reduce-scatters those through gloo, each rank keeping its own
  // block. Between hosts each rank moves (hosts - 1) blocks, every local rank at once, where an all_reduce and a
  // slice moved the whole message through each host's first rank.
  c10::intrusive_ptr<c10d::Work> x_reduce_scatter(at::Tensor& out, const at::Tensor& input, const c10d::ReduceOp& rop,
                                                  c10d::OpType type) {
    PartOf step_of(this, TPURT_DIST_REDUCE_SCATTER);
    TORCH_CHECK(column_, "tpu_dist: no gloo group between the hosts' ranks");
    int64_t c = out.numel(), H = hosts_, L = local_size_;
    c10::ScalarType st = input.scalar_type();
    // [H, L, c] -> [L, H, c]: local rank l's share contiguous (a copy this call owns, so premul_sum scales it)
    at::Tensor perm = empty_tpu_contiguous({L * H * c}, st);
    perm.view({L, H, c}).copy_(input.reshape({H, L, c}).transpose(0, 1));
    tpurt_dist_redop_t red = reduction(rop, perm, true, "reduce_scatter");
    bool avg = red == TPURT_DIST_AVG;
    TORCH_CHECK_VALUE(!avg || at::isFloatingType(st) || at::isComplexType(st), "tpu_dist: reduce_scatter avg needs a "
                      "floating or complex tensor, got ", st);
    if (avg) red = TPURT_DIST_SUM;
    at::Tensor part = perm;
    if (L > 1) {
      part = empty_tpu_contiguous({H * c}, st);
      tpurt_dist_op_t op = base_op(TPURT_DIST_REDUCE_SCATTER, part);
      op.redop = red;
      op.in = perm.data_ptr();
      op.out = part.data_ptr();
      submit(op, "reduce_scatter");
    }
    at::Tensor d = dense(out);
    auto column = column_;
    void *src = part.data_ptr(), *dst = d.data_ptr();
    c10d::ReduceOp gop = avg || rop.op_ == c10d::ReduceOp::PREMUL_SUM ? c10d::ReduceOp(c10d::ReduceOp::SUM) : rop;
    x_step(true, {TPURT_DIST_REDUCE_SCATTER, dtype_code(st), c, -1, avg ? TPURT_DIST_AVG : red},
           [column, src, dst, c, H, st, gop] {
      at::Tensor in = gloo_view(src, H * c, st), o = gloo_view(dst, c, st);
      c10d::ReduceScatterOptions opts;
      opts.reduceOp = gloo_op(st, gop);
      return xwait(column->_reduce_scatter_base(o, in, opts));
    });
    if (avg) d.div_(getSize());
    write_back(out, d);
    return work(type, {out});
  }

  c10::intrusive_ptr<c10d::Work> x_broadcast(at::Tensor& t, int root) {
    PartOf step_of(this, TPURT_DIST_BROADCAST);
    int root_host = root / local_size_, root_local = root % local_size_;
    at::Tensor d = dense(t);
    if (host_ == root_host && root_local != 0) {  // the root's host leader gets the data first
      local_broadcast(d, root_local, "broadcast");
    }
    {
      auto cross = cross_;
      void* ptr = d.data_ptr();
      int64_t n = d.numel();
      c10::ScalarType type = d.scalar_type();
      XCall call{TPURT_DIST_BROADCAST, dtype_code(type), n, root, -1};
      uint64_t bytes = d.nbytes();
      if (static_cast<int64_t>(bytes) <= kFoldBytes) {  // the root host's data rides in the call exchange
        bool mine = host_ == root_host;
        x_fold(call, mine ? ptr : nullptr, mine ? bytes : 0, [ptr, bytes, mine, root_host](const std::vector<const uint8_t*>& rows) {
          if (!mine) memcpy(ptr, rows[root_host], bytes);
          return TPURT_OK;
        });
      } else {
        x_step(false, call, [cross, ptr, n, type, root_host] {
          std::vector<at::Tensor> v{host_view(ptr, n, type)};
          c10d::BroadcastOptions o;
          o.rootRank = root_host;
          return xwait(cross->broadcast(v, o));
        });
      }
    }
    local_broadcast(d, 0, "broadcast");
    write_back(t, d);
    return work(c10d::OpType::BROADCAST, {t});
  }

  // By columns: the column (local rank l of every host, a gloo group) all-gathers its members' inputs, then an
  // all-gather within each host puts the columns together ([local rank, host] order, transposed into the output's
  // rank order). Each rank sends its own input to every other host, every local rank at once.
  c10::intrusive_ptr<c10d::Work> x_allgather(at::Tensor& output, at::Tensor& input) {
    PartOf step_of(this, TPURT_DIST_ALLGATHER);
    check_tpu(input, "all_gather_into_tensor");
    check_tpu(output, "all_gather_into_tensor");
    TORCH_CHECK_VALUE(output.numel() == input.numel() * getSize() && output.scalar_type() == input.scalar_type(),
                      "tpu_dist: all_gather_into_tensor: output must have ", getSize(), " x the input's ", input.numel(),
                      " elements of ", input.scalar_type());
    TORCH_CHECK(column_, "tpu_dist: no gloo group between the hosts' ranks");
    at::Tensor d = dense(input), o = dense(output);
    int64_t n = d.numel(), H = hosts_, L = local_size_;
    c10::ScalarType st = d.scalar_type();
    if (static_cast<int64_t>(o.nbytes()) <= kLeaderBytes) {  // small: a gather to the host's first rank, its
      at::Tensor hostbuf;                                   // all_gather between hosts, a broadcast in the host
      tpurt_dist_op_t op = base_op(TPURT_DIST_GATHER, d);
      op.root = 0;
      op.in = d.data_ptr();
      if (local_rank_ == 0) {
        hostbuf = empty_tpu_contiguous({n * L}, st);
        op.out = hostbuf.data_ptr();
      }
      submit(op, "all_gather");
      auto cross = cross_;
      void* src = hostbuf.defined() ? hostbuf.data_ptr() : nullptr;
      void* dst = o.data_ptr();
      int64_t ln = n * L, total = n * getSize();
      XCall call{TPURT_DIST_ALLGATHER, dtype_code(st), n, -1, -1};
      uint64_t hbytes = static_cast<uint64_t>(ln) * c10::elementSize(st);
      if (static_cast<int64_t>(hbytes) <= kFoldBytes) {  // each host's part rides in the call exchange
        x_fold(call, src, hbytes, [dst, hbytes](const std::vector<const uint8_t*>& rows) {
          for (size_t h = 0; h < rows.size(); ++h) memcpy(static_cast<uint8_t*>(dst) + h * hbytes, rows[h], hbytes);
          return TPURT_OK;
        });
      } else {
        x_step(false, call, [cross, src, dst, ln, total, st] {
          at::Tensor out = gloo_view(dst, total, st), in = gloo_view(src, ln, st);
          return xwait(cross->_allgather_base(out, in));
        });
      }
      local_broadcast(o, 0, "all_gather");
      write_back(output, o);
      return work(c10d::OpType::_ALLGATHER_BASE, {output});
    }
    at::Tensor col = L > 1 ? empty_tpu_contiguous({H * n}, st) : o;  // this column's inputs, host-major
    auto column = column_;
    void *src = d.data_ptr(), *dst = col.data_ptr();
    x_step(true, {TPURT_DIST_ALLGATHER, dtype_code(st), n, -1, -1}, [column, src, dst, n, H, st] {
      at::Tensor out = gloo_view(dst, H * n, st), in = gloo_view(src, n, st);
      return xwait(column->_allgather_base(out, in));
    });
    if (L > 1) {
      at::Tensor all = empty_tpu_contiguous({L * H * n}, st);
      tpurt_dist_op_t op = base_op(TPURT_DIST_ALLGATHER, col);
      op.in = col.data_ptr();
      op.out = all.data_ptr();
      submit(op, "all_gather");
      o.view({H, L, n}).copy_(all.view({L, H, n}).transpose(0, 1));
    }
    write_back(output, o);
    return work(c10d::OpType::_ALLGATHER_BASE, {output});
  }

  // gather: within each host to its first rank, between hosts (gloo) to the
  // root's host, then to the root within that host.
  c10::intrusive_ptr<c10d::Work> x_gather(std::vector<std::vector<at::Tensor>>& outputs, at::Tensor& in, int root) {
    PartOf step_of(this, TPURT_DIST_GATHER);
    TORCH_CHECK_VALUE(root >= 0 && root < getSize(), "tpu_dist: gather: root ", root, " is not a rank of this group");
    int root_host = root / local_size_, root_local = root % local_size_;
    bool is_root = getRank() == root, on_root_host = host_ == root_host;
    if (is_root)
      TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                        "tpu_dist: gather: the root needs one list of ", getSize(), " output tensors");
    at::Tensor d = dense(in);
    int64_t n = d.numel();
    at::Tensor hostbuf, all;
    tpurt_dist_op_t op = base_op(TPURT_DIST_GATHER, d);
    op.root = 0;
    op.in = d.data_ptr();
    if (local_rank_ == 0) {
      hostbuf = empty_tpu_contiguous({n * local_size_}, d.scalar_type());
      op.out = hostbuf.data_ptr();
    }
    submit(op, "gather");
    if (on_root_host && (local_rank_ == 0 || is_root)) all = empty_tpu_contiguous({n * getSize()}, d.scalar_type());
    {
      auto cross = cross_;
      uint64_t part = hostbuf.defined() ? static_cast<uint64_t>(hostbuf.nbytes()) : 0;
      void* src = hostbuf.defined() ? hostbuf.data_ptr() : nullptr;
      uint8_t* dst = all.defined() ? static_cast<uint8_t*>(all.data_ptr()) : nullptr;
      int hosts = hosts_;
      x_step(false, {TPURT_DIST_GATHER, dtype_code(d.scalar_type()), n, root, -1},
             [cross, src, dst, part, hosts, root_host] {
        std::vector<at::Tensor> ins{host_bytes(src, part)};
        std::vector<std::vector<at::Tensor>> outs = host_parts(dst, part, hosts);
        c10d::GatherOptions o;
        o.rootRank = root_host;
        return xwait(cross->gather(outs, ins, o));
      });
    }
    if (on_root_host && root_local != 0 && (local_rank_ == 0 || is_root)) local_p2p(all, local_rank_ == 0 ? root_local : 0, is_root, "gather");
    std::vector<at::Tensor> outs;
    if (is_root) {
      for (int r = 0; r < getSize(); ++r) {
        check_like(outputs[0][r], in, "gather output");
        outputs[0][r].copy_(all.narrow(0, r * n, n).view(outputs[0][r].sizes()));
      }
      outs = outputs[0];
    }
    return work(c10d::OpType::GATHER, outs);
  }

  // scatter: the root's inputs to its host's first rank, between hosts
  // (gloo) each host's part to its first rank, then within each host.
  c10::intrusive_ptr<c10d::Work> x_scatter(at::Tensor& out, std::vector<std::vector<at::Tensor>>& inputs, int root) {
    PartOf step_of(this, TPURT_DIST_SCATTER);
    TORCH_CHECK_VALUE(root >= 0 && root < getSize(), "tpu_dist: scatter: root ", root, " is not a rank of this group");
    int root_host = root / local_size_, root_local = root % local_size_;
    bool is_root = getRank() == root, on_root_host = host_ == root_host;
    at::Tensor d = dense(out);
    int64_t n = d.numel();
    at::Tensor all, hostbuf;
    if (is_root) {
      TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                        "tpu_dist: scatter: the root needs one list of ", getSize(), " input tensors");
      std::vector<at::Tensor> parts;
      for (auto& t : inputs[0]) {
        check_like(t, out, "scatter input");
        parts.push_back(t.reshape({-1}));
      }
      all = at::cat(parts);
    }
    if (on_root_host && root_local != 0) {
      if (local_rank_ == 0) all = empty_tpu_contiguous({n * getSize()}, d.scalar_type());
      if (local_rank_ == 0 || is_root) local_p2p(all, is_root ? 0 : root_local, local_rank_ == 0, "scatter");
    }
    if (local_rank_ == 0) hostbuf = empty_tpu_contiguous({n * local_size_}, d.scalar_type());
    {
      auto cross = cross_;
      uint64_t part = hostbuf.defined() ? static_cast<uint64_t>(hostbuf.nbytes()) : 0;
      void* dst = hostbuf.defined() ? hostbuf.data_ptr() : nullptr;
      uint8_t* src = on_root_host && all.defined() ? static_cast<uint8_t*>(all.data_ptr()) : nullptr;
      int hosts = hosts_;
      x_step(false, {TPURT_DIST_SCATTER, dtype_code(d.scalar_type()), n, root, -1},
             [cross, src, dst, part, hosts, root_host] {
        std::vector<at::Tensor> outs{host_bytes(dst, part)};
        std::vector<std::vector<at::Tensor>> ins = host_parts(src, part, hosts);
        c10d::ScatterOptions o;
        o.rootRank = root_host;
        return xwait(cross->scatter(outs, ins, o));
      });
    }
    tpurt_dist_op_t op = base_op(TPURT_DIST_SCATTER, d);
    op.root = 0;
    op.in = local_rank_ == 0 ? hostbuf.data_ptr() : nullptr;
    op.out = d.data_ptr();
    submit(op, "scatter");
    write_back(out, d);
    return work(c10d::OpType::SCATTER, {out});
  }

  // Within this host: x (dense) sent to or received from local rank `peer`.
  void local_p2p(const at::Tensor& x, int peer, bool is_recv, const char* what) {
    tpurt_dist_op_t op = base_op(is_recv ? TPURT_DIST_RECV : TPURT_DIST_SEND, x);
    op.peer = peer;
    op.tag = 0;
    if (is_recv) op.out = x.data_ptr();
    else op.in = x.data_ptr();
    // a send after the lone sends to the same peer, and they after it (messages to a peer keep their order)
    if (!is_recv && lane(peer).queue) check_status(tpurt_queue_wait_event(current_queue(), lane(peer).done), what);
    submit(op, what);
    if (!is_recv) check_status(tpurt_event_record(lane(peer).group_done, current_queue()), what);
  }

  struct Pending {
    at::Tensor user, dense;
    bool is_recv;
  };
  std::chrono::milliseconds timeout_;
  int local_rank_, local_size_, host_, hosts_;
  c10::intrusive_ptr<c10d::Backend> cross_, world_, column_;
  c10::intrusive_ptr<c10d::Store> p2p_store_;
  int64_t x_calls_ = 0;     // collectives' steps between hosts issued (the same sequence on every rank)
  bool host_check_ = true;  // x_step's exchange (TORCH_TPU_DIST_HOST_CHECK=0: off)
  bool own_stream_ = true;  // TORCH_TPU_DIST_OWN_STREAM=0: collectives on the caller's stream
  std::optional<c10::Stream> stream_;  // the group's stream (OnGroupStream)
  // Messages from other hosts received, per tag (touched by host steps only, which run one at a time in issue order).
  std::shared_ptr<std::map<int, int64_t>> remote_taken_ = std::make_shared<std::map<int, int64_t>>();
  tpurt_dist_comm_t* comm_ = nullptr;
  tpurt_dist_kind_t part_of_ = static_cast<tpurt_dist_kind_t>(0);  // PartOf
  // Across hosts: the watcher (watch) and what it watches: when the step running now began (steady clock ns; 0:
  // none), and the step's gloo sends and receives (xwait_p2p).
  std::thread watcher_;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;
  std::atomic<int64_t> step_since_ns_{0};
  std::vector<c10::intrusive_ptr<c10d::Work>> inflight_;
  bool coalescing_ = false;
  std::vector<tpurt_dist_op_t> pending_;
  std::vector<Pending> pending_tensors_;
  std::vector<RemoteP2P> pending_remote_;
  std::vector<std::pair<at::Tensor, at::Tensor>> pending_copy_back_;
};

c10::intrusive_ptr<c10d::Backend> create_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                 double timeout_s, int local_rank, int local_size, int host, int hosts,
                                                 py::object cross, py::object world, py::object column,
                                                 py::object p2p_store) {
  auto ms = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
  c10::intrusive_ptr<c10d::Backend> x, w, col;
  c10::intrusive_ptr<c10d::Store> ps;
  if (!cross.is_none()) x = cross.cast<c10::intrusive_ptr<c10d::Backend>>();
  if (!world.is_none()) w = world.cast<c10::intrusive_ptr<c10d::Backend>>();
  if (!column.is_none()) col = column.cast<c10::intrusive_ptr<c10d::Backend>>();
  if (!p2p_store.is_none()) ps = p2p_store.cast<c10::intrusive_ptr<c10d::Store>>();
  return c10::make_intrusive<TpuDistBackend>(store, rank, size, local_rank, local_size, host, hosts, x, w, col, ps, ms);
}

// Bad shapes and topology strings are the caller's values: ValueError.
void check_value(tpurt_status_t s, const char* what) {
  if (s && tpurt_status_code(s) == TPURT_STATUS_INVALID_ARGUMENT) {
    std::string msg = std::string(what) + ": " + tpurt_status_message(s);
    tpurt_status_free(s);
    TORCH_CHECK_VALUE(false, msg);
  }
  check_status(s, what);
}

tpurt_dist_topology_t parse_topology(const std::string& spec) {
  tpurt_dist_topology_t t{};
  check_value(tpurt_dist_topology_parse(spec.c_str(), &t), "tpu topology");
  return t;
}

}  // namespace

void register_dist(py::module_& m) {
  m.def("_dist_create_backend", &create_backend);
  m.def("_dist_host_config", [] {
    tpurt_dist_host_config_t c{};
    check_status(tpurt_dist_host_config(&c), "tpu topology");
    py::dict d;
    std::vector<int> dims(c.topology.dims, c.topology.dims + c.topology.ndims);
    d["dims"] = dims;
    d["chip"] = c.chip;
    d["chips_on_host"] = c.chips_on_host;
    return d;
  });
  m.def("_dist_topology_coords", [](const std::string& spec, int chip) {
    tpurt_dist_topology_t t = parse_topology(spec);
    int c[TPURT_DIST_MAX_AXES];
    check_value(tpurt_dist_topology_coords(&t, chip, c), "tpu topology");
    return std::vector<int>(c, c + t.ndims);
  });
  m.def("_dist_topology_neighbors", [](const std::string& spec, int chip) {
    tpurt_dist_topology_t t = parse_topology(spec);
    int nb[2 * TPURT_DIST_MAX_AXES], n = 0;
    check_value(tpurt_dist_topology_neighbors(&t, chip, nb, &n), "tpu topology");
    return std::vector<int>(nb, nb + n);
  });
  m.def("_dist_mesh_layout", [](const std::string& spec, std::vector<int64_t> mesh, std::vector<int64_t> dcn) {
    tpurt_dist_topology_t t = parse_topology(spec);
    TORCH_CHECK_VALUE(dcn.empty() || dcn.size() == mesh.size(), "topology_aware_mesh: dcn_mesh_shape ",
                      c10::IntArrayRef(dcn), " must have as many dimensions as mesh_shape ", c10::IntArrayRef(mesh));
    int64_t total = 1;
    for (size_t i = 0; i < mesh.size(); ++i) total *= mesh[i] * (dcn.empty() ? 1 : dcn[i]);
    TORCH_CHECK_VALUE(total > 0 && total <= (1 << 20), "topology_aware_mesh: bad mesh shape");
    std::vector<int64_t> out(static_cast<size_t>(total));
    check_value(tpurt_dist_mesh_layout(&t, static_cast<int>(mesh.size()), mesh.data(), dcn.empty() ? nullptr : dcn.data(),
                                       out.data(), total),
                "topology_aware_mesh");
    return out;
  });
}

}  // namespace torch_tpu
