#include "ddprun/worker/communicator.h"

#include <sched.h>

#include <chrono>
#include <memory>
#include <utility>

#include "collective_trace.h"
#include "communicator_impl.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/shm_allreduce.h"
#include "torch_compat.h"

namespace ddprun::worker {

PendingWork::PendingWork() = default;
PendingWork::~PendingWork() = default;
PendingWork::PendingWork(PendingWork&&) noexcept = default;
PendingWork& PendingWork::operator=(PendingWork&&) noexcept = default;

bool PendingWork::asynchronous() const {
  return impl_ && (impl_->work || impl_->step);
}

void yield_while_running(c10d::Work& work) {
  const auto until = std::chrono::steady_clock::now() + kSpinBeforeBlocking;
  while (!work.isCompleted() && std::chrono::steady_clock::now() < until) sched_yield();
}

void PendingWork::wait() {
  if (!impl_) return;
  // Ended on a normal return only: a collective that failed or timed out stays open.
  trace::Entry* const traced = std::exchange(impl_->traced, nullptr);
  struct EndOnReturn {
    trace::Entry* entry;
    ~EndOnReturn() {
      if (std::uncaught_exceptions() == 0) TraceWriter::end(entry);
    }
  } end_on_return{traced};
  if (auto step = std::move(impl_->step)) {
    if (!step->done) impl_->plane->finish_through(step.get());
    return;
  }
  auto then = std::move(impl_->then);  // run once, whatever happens
  if (!impl_->work) {
    if (then) impl_->owner->guard("all-reduce", then);
    return;
  }
  auto work = std::move(impl_->work);  // waited for once, whatever happens
  // Gloo's all-reduce is a chain of hand-offs between its threads and the peer's (worker,
  // socket loop). Blocked here, this thread leaves its core idle: an idle (virtual) CPU
  // halts, and on a busy one a woken thread can wait out another's time slice. Over
  // loopback on 2 cores a 940 KB all-reduce then took 0.5 ms half the time and 2-8 ms
  // otherwise. Yielding instead keeps the core awake and hands it at once to whichever
  // gloo thread is ready; past kSpinBeforeBlocking (a straggler) it blocks as before.
  // Only from kSpinFromBytes: a tiny all-reduce (the toy's 220 bytes) is over before a
  // blocked thread would sleep, and spinning there made its steps bimodal (2 ranks on 2
  // cores: 20-77k samples/s against 45-62k blocking). The MLP's 940 KB and the CNN's 82 KB
  // gain. (NCCL's wait() only orders streams: never spin on a GPU's progress.)
  if (impl_->yield_first) yield_while_running(*work);
  impl_->owner->guard("all-reduce", [&] { work->wait(); });
  if (then) impl_->owner->guard("all-reduce", then);
}

PendingWork Plane::Impl::traced(PendingWork pending, trace::Entry* entry) {
  if (pending.impl_) {
    pending.impl_->traced = entry;
  } else {
    TraceWriter::end(entry);
  }
  return pending;
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

std::optional<ShmOp> to_shm(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ShmOp::kSum;
    case ReduceOp::kMin:
      return ShmOp::kMin;
    case ReduceOp::kMax:
      return ShmOp::kMax;
  }
  return std::nullopt;
}

std::optional<ShmType> to_shm(const at::Tensor& tensor) {
  if (!tensor.device().is_cpu() || !tensor.is_contiguous()) return std::nullopt;
  switch (tensor.scalar_type()) {
    case at::kFloat:
      return ShmType::kFloat32;
    case at::kDouble:
      return ShmType::kFloat64;
    case at::kInt:
      return ShmType::kInt32;
    case at::kLong:
      return ShmType::kInt64;
    default:
      return std::nullopt;
  }
}

Plane::Plane(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Plane::~Plane() = default;

int Plane::rank() const {
  return impl_->owner->rank;
}
int Plane::world_size() const {
  return impl_->owner->size;
}
at::Device Plane::device() const {
  return impl_->device;
}

std::string Plane::transport() const {
  if (impl_->across_nodes) {
    return impl_->name + " between " + std::to_string(impl_->nodes) +
           " nodes + shared memory within";
  }
  return impl_->shm ? impl_->name + " + shared memory" : impl_->name;
}

at::Tensor Plane::device_zeros(std::int64_t numel, at::ScalarType type) {
  auto tensor = at::zeros({numel}, at::TensorOptions().dtype(type).device(impl_->device));
  if (impl_->device_rules) {
    for (auto it = impl_->device_storages.begin(); it != impl_->device_storages.end();) {
      it = it->second.expired() ? impl_->device_storages.erase(it) : std::next(it);
    }
    impl_->device_storages.insert_or_assign(tensor.storage().data(),
                                            tensor.storage().getWeakStorageImpl());
  }
  return tensor;
}

void Plane::Impl::check_device_rules(const char* op, const at::Tensor& tensor) const {
  if (!device_rules) return;
  std::string broken;
  if (tensor.layout() != at::kStrided) {
    broken = "is not dense";
  } else if (!tensor.is_contiguous()) {
    broken = "is not contiguous";
  } else if (tensor.device() != device) {
    broken = "is on " + tensor.device().str() + ", not the plane's " + device.str();
  } else {
    const auto it = device_storages.find(tensor.storage().data());
    const auto storage =
        it == device_storages.end() ? c10::intrusive_ptr<c10::StorageImpl>() : it->second.lock();
    if (storage.get() != tensor.storage().unsafeGetStorageImpl()) {
      broken = "was not made by device_zeros() (under NCCL it would be a CPU tensor)";
    }
  }
  if (!broken.empty()) {
    throw ddprun::UsageError(std::string(op) + " on the data plane (" + kGlooAsNccl + "): a " +
                                 std::string(c10::toString(tensor.scalar_type())) + " tensor of " +
                                 std::to_string(tensor.numel()) + " element(s) " + broken,
                             "collectives on CPU tensors belong on Communicator::control()");
  }
}

// Gloo's collectives (ProcessGroupGloo in LibTorch 1.13 and 2.6) carry these types only;
// any other failed inside gloo's thread with "Invalid scalar type", which came back as a
// failed collective and a roll call that blamed the ranks' liveness. Later LibTorch may
// add bf16 to gloo: it is refused on every version, so that a job behaves alike wherever
// it runs. NCCL carries bf16 and bool too.
void Plane::Impl::check_carried(const char* op, const at::Tensor& tensor) const {
  const auto type = tensor.scalar_type();
  const bool nccl = name == "nccl";
  switch (type) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kChar:
    case at::kByte:
    case at::kInt:
    case at::kLong:
      return;
    case at::kBFloat16:
    case at::kBool:
      if (nccl) return;
      break;
    default:
      break;
  }
  throw ddprun::UsageError(
      std::string(op) + " of a " + c10::toString(type) + " tensor on rank " +
          std::to_string(owner->rank) + ": " + name +
          " carries Float, Double, Half, Char, Byte, Int and Long" +
          (nccl ? ", BFloat16 and Bool" : "") + ", not " + c10::toString(type),
      "convert it first, e.g. to float (tensor.to(at::kFloat)), and back after the collective");
}

PendingWork Plane::allreduce_async(at::Tensor& tensor, ReduceOp op) {
  TraceScope scope(*impl_, trace::Op::kAllreduce, bytes_of(tensor));
  return Impl::traced(allreduce_untraced(tensor, op), scope.take());
}

PendingWork Plane::allreduce_untraced(at::Tensor& tensor, ReduceOp op) {
  impl_->check_carried("all-reduce", tensor);
  impl_->check_device_rules("all-reduce", tensor);
  auto& owner = *impl_->owner;
  if (impl_->across_nodes) {
    if (const auto type = to_shm(tensor)) return impl_->allreduce_across_nodes(tensor, *type, op);
  } else if (impl_->shm) {
    if (const auto type = to_shm(tensor)) {
      owner.guard("all-reduce", [&] {
        impl_->shm->allreduce(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()), *type,
                              *to_shm(op), owner.timeout);
      });
      return PendingWork();
    }
  }
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions opts;
  opts.reduceOp = to_c10d(op);
  PendingWork pending;
  pending.impl_ = std::make_unique<PendingWork::Impl>();
  pending.impl_->owner = &owner;
  pending.impl_->yield_first =
      owner.yield_in_wait && impl_->device.is_cpu() &&
      static_cast<std::size_t>(tensor.numel() * tensor.element_size()) >= kSpinFromBytes;
  owner.guard("all-reduce", [&] {
    pending.impl_->work =
        compat::start_collective([&] { return impl_->backend->allreduce(tensors, opts); });
  });
  return pending;
}

void Plane::allreduce(at::Tensor& tensor, ReduceOp op) {
  allreduce_async(tensor, op).wait();
}

void Plane::broadcast(std::vector<at::Tensor>& tensors, int root) {
  std::uint64_t bytes = 0;
  for (const auto& t : tensors) bytes += bytes_of(t);
  TraceScope scope(*impl_, trace::Op::kBroadcast, bytes);
  for (const auto& t : tensors) {
    impl_->check_carried("broadcast", t);
    impl_->check_device_rules("broadcast", t);
  }
  // Gloo broadcasts several tensors in one call only if they have one shape: one call each.
  impl_->owner->guard("broadcast", [&] {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t};
      works.push_back(
          compat::start_collective([&] { return impl_->backend->broadcast(one, opts); }));
    }
    for (auto& w : works) w->wait();
  });
}

void Plane::barrier() {
  if (impl_->device_rules) {
    throw ddprun::UsageError(std::string("barrier on the data plane (") + kGlooAsNccl +
                                 "): only all-reduce and broadcast travel there",
                             "use Communicator::control().barrier()");
  }
  TraceScope scope(*impl_, trace::Op::kBarrier, 0);
  impl_->owner->guard("barrier", [&] {
    compat::start_collective([&] {
      return impl_->backend->barrier(c10d::BarrierOptions());
    })->wait();
  });
}

}  // namespace ddprun::worker
