#include "ddprun/worker/communicator.h"

#include "ddprun/worker/errors.h"
#include "net.h"
#include "torch_compat.h"

namespace ddprun::worker {

struct PendingWork::Impl {
  c10::intrusive_ptr<c10d::Work> work;
};

PendingWork::PendingWork() = default;
PendingWork::~PendingWork() = default;
PendingWork::PendingWork(PendingWork&&) noexcept = default;
PendingWork& PendingWork::operator=(PendingWork&&) noexcept = default;

void PendingWork::wait() {
  if (impl_ && impl_->work) impl_->work->wait();
}

struct Communicator::Impl {
  int rank = 0;
  int size = 1;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<compat::CollectiveBackend> backend;
};

namespace {

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

}  // namespace

std::unique_ptr<Communicator> Communicator::connect(const WorkerEnv& env,
                                                    const CommOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->rank = env.rank;
  impl->size = env.world_size;
  const bool server = env.rank == 0;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  if (!server && !wait_for_listener(env.master_addr, env.master_port, options.timeout)) {
    throw EnvError("rank " + std::to_string(env.rank) + ": no rendezvous store at " + where +
                       " after " + std::to_string(options.timeout.count() / 1000) + " s",
                   "is rank 0 running? check MASTER_ADDR and MASTER_PORT");
  }
  auto store = compat::make_tcp_store(env.master_addr, static_cast<std::uint16_t>(env.master_port),
                                      server, env.world_size, options.timeout);
  // A worker of another run, or of an earlier restart round, uses other keys: it can
  // never complete this round's rendezvous.
  impl->store = compat::make_prefix_store(
      "ddprun/" + env.run_id + "/" + std::to_string(env.restart_count), store);

  if (options.backend == "gloo") {
    impl->backend = compat::make_gloo(impl->store, env.rank, env.world_size, options.timeout,
                                      env.gloo_socket_ifname, env.master_addr);
  } else if (options.backend == "nccl") {
    impl->backend = compat::make_nccl(impl->store, env.rank, env.world_size, options.timeout);
    if (!impl->backend) {
      throw ddprun::ConfigError("backend 'nccl' is not available: this LibTorch has no CUDA",
                                "use \"backend\": \"gloo\"");
    }
  } else {
    throw ddprun::ConfigError("unknown backend '" + options.backend + "'");
  }
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

int Communicator::rank() const {
  return impl_->rank;
}
int Communicator::world_size() const {
  return impl_->size;
}

PendingWork Communicator::allreduce_async(at::Tensor& tensor, ReduceOp op) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions opts;
  opts.reduceOp = to_c10d(op);
  PendingWork pending;
  pending.impl_ = std::make_unique<PendingWork::Impl>();
  pending.impl_->work = impl_->backend->allreduce(tensors, opts);
  return pending;
}

void Communicator::allreduce(at::Tensor& tensor, ReduceOp op) {
  allreduce_async(tensor, op).wait();
}

void Communicator::broadcast(std::vector<at::Tensor>& tensors, int root) {
  // Gloo broadcasts several tensors in one call only if they have one shape: one call each.
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  for (auto& t : tensors) {
    std::vector<at::Tensor> one{t};
    works.push_back(impl_->backend->broadcast(one, opts));
  }
  for (auto& w : works) w->wait();
}

void Communicator::barrier() {
  impl_->backend->barrier(c10d::BarrierOptions())->wait();
}

}  // namespace ddprun::worker
