#include "ddprun/worker/ddp.h"

#include <torch/torch.h>

#include <map>

namespace ddprun::worker {
namespace {

std::size_t byte_size(const at::Tensor& t) {
  return static_cast<std::size_t>(t.numel() * t.element_size());
}

// Broadcasts `tensors` from rank 0 with one collective per dtype: flatten, send, copy back.
void broadcast_coalesced(Communicator& comm, const std::vector<at::Tensor>& tensors) {
  std::map<at::ScalarType, std::vector<at::Tensor>> by_type;
  for (const auto& t : tensors) by_type[t.scalar_type()].push_back(t);
  std::vector<at::Tensor> flats;
  for (auto& [type, group] : by_type) {
    std::vector<at::Tensor> views;
    for (const auto& t : group) views.push_back(t.reshape(-1));
    flats.push_back(torch::cat(views));
  }
  comm.broadcast(flats, 0);
  std::size_t i = 0;
  for (auto& [type, group] : by_type) {
    std::int64_t offset = 0;
    for (auto& t : group) {
      t.copy_(flats[i].narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
    ++i;
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 Communicator& comm, DdpOptions options)
    : module_(std::move(module)), comm_(comm) {
  broadcast_state();

  // Gradients become ready roughly in reverse registration order during backward, so
  // buckets are filled from the last parameter; an overlapping reducer can then launch
  // bucket 0 first.
  auto params = module_->parameters(/*recurse=*/true);
  Bucket current;
  std::size_t current_bytes = 0;
  const auto close = [&] {
    if (current.params.empty()) return;
    std::int64_t numel = 0;
    for (const auto& p : current.params) numel += p.numel();
    current.flat = torch::zeros({numel}, current.params.front().options());
    buckets_.push_back(std::move(current));
    current = Bucket{};
    current_bytes = 0;
  };
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    if (!it->requires_grad()) continue;
    const bool fits =
        current.params.empty() || (current.params.front().scalar_type() == it->scalar_type() &&
                                   current_bytes + byte_size(*it) <= options.bucket_cap_bytes);
    if (!fits) close();
    current.params.push_back(*it);
    current_bytes += byte_size(*it);
  }
  close();
}

void DistributedDataParallel::broadcast_state() {
  if (comm_.world_size() == 1) return;
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> state;
  for (const auto& p : module_->parameters(true)) state.push_back(p);
  for (const auto& b : module_->buffers(true)) state.push_back(b);
  if (!state.empty()) broadcast_coalesced(comm_, state);
}

void DistributedDataParallel::prepare_for_backward() {}

void DistributedDataParallel::finish_gradient_sync() {
  const int world = comm_.world_size();
  if (!sync_enabled_ || world == 1) return;
  torch::NoGradGuard no_grad;

  // Launch every bucket before waiting for any: copying bucket i+1 overlaps bucket i's
  // reduction.
  std::vector<PendingWork> works;
  works.reserve(buckets_.size());
  for (auto& bucket : buckets_) {
    std::int64_t offset = 0;
    for (const auto& p : bucket.params) {
      auto slice = bucket.flat.narrow(0, offset, p.numel());
      const auto& grad = p.grad();
      if (grad.defined()) {
        slice.copy_(grad.reshape(-1));
      } else {
        slice.zero_();
      }
      offset += p.numel();
    }
    works.push_back(comm_.allreduce_async(bucket.flat, ReduceOp::kSum));
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    works[b].wait();
    auto& bucket = buckets_[b];
    bucket.flat.div_(world);
    std::int64_t offset = 0;
    for (auto& p : bucket.params) {
      auto slice = bucket.flat.narrow(0, offset, p.numel()).view_as(p);
      if (p.grad().defined()) {
        p.mutable_grad().copy_(slice);
      } else {
        p.mutable_grad() = slice.clone();
      }
      offset += p.numel();
    }
  }
}

}  // namespace ddprun::worker
