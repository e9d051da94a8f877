#include "ddprun/worker/ddp.h"

#include <torch/torch.h>

#include <map>

#include "ddprun/contract/errors.h"
#include "torch_compat.h"

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
    : module_(std::move(module)), comm_(comm), options_(options) {
  broadcast_state();

  // Gradients become ready roughly in reverse registration order during backward, so
  // buckets are filled from the last parameter and bucket 0 can be launched first. The
  // first bucket is small so that communication starts early.
  for (const auto& item : module_->named_parameters(/*recurse=*/true)) {
    if (item.value().requires_grad()) params_.push_back({item.value(), item.key()});
  }
  Bucket current;
  std::size_t current_bytes = 0;
  const auto close = [&] {
    if (current.params.empty()) return;
    std::int64_t numel = 0;
    for (const auto i : current.params) {
      params_[i].bucket = buckets_.size();
      params_[i].offset = numel;
      numel += params_[i].tensor.numel();
    }
    current.flat = torch::zeros({numel}, params_[current.params.front()].tensor.options());
    buckets_.push_back(std::move(current));
    current = Bucket{};
    current_bytes = 0;
  };
  for (std::size_t i = params_.size(); i-- > 0;) {
    const auto& t = params_[i].tensor;
    const std::size_t cap =
        buckets_.empty() ? options_.first_bucket_cap_bytes : options_.bucket_cap_bytes;
    const bool fits = current.params.empty() ||
                      (params_[current.params.front()].tensor.scalar_type() == t.scalar_type() &&
                       params_[current.params.front()].tensor.device() == t.device() &&
                       current_bytes + byte_size(t) <= cap);
    if (!fits) close();
    current.params.push_back(i);
    current_bytes += byte_size(t);
  }
  close();

  for (std::size_t i = 0; i < params_.size(); ++i) {
    hooks_.push_back(
        compat::add_gradient_ready_hook(params_[i].tensor, [this, i] { on_gradient_ready(i); }));
  }
  std::lock_guard lock(mutex_);
  reset_step_locked();
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::broadcast_state() {
  if (comm_.world_size() == 1) return;
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> state;
  for (const auto& p : module_->parameters(true)) state.push_back(p);
  for (const auto& b : module_->buffers(true)) state.push_back(b);
  if (!state.empty()) broadcast_coalesced(comm_, state);
}

void DistributedDataParallel::set_gradient_sync(bool enabled) {
  sync_enabled_ = enabled;
}

void DistributedDataParallel::prepare_for_backward() {
  std::lock_guard lock(mutex_);
  reset_step_locked();
}

void DistributedDataParallel::reset_step_locked() {
  for (auto& p : params_) p.ready = false;
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.work = PendingWork();
  }
  ready_count_ = 0;
  next_bucket_ = 0;
  callback_queued_ = false;
  backward_ended_ = false;
  error_.clear();
  error_is_unused_ = false;
  stats_ = SyncStats{};
}

void DistributedDataParallel::on_gradient_ready(std::size_t index) {
  if (!sync_enabled_) return;  // no_sync: gradients accumulate locally
  std::lock_guard lock(mutex_);
  if (!error_.empty()) return;
  Param& p = params_[index];
  if (backward_ended_ || p.ready) {
    error_ = "parameter '" + p.name +
             "' got a gradient twice before finish_gradient_sync(): backward ran twice in "
             "one synced step";
    return;
  }
  if (!callback_queued_) {
    compat::queue_end_of_backward([this] { on_backward_end(); });
    callback_queued_ = true;
  }
  mark_ready_locked(p);
  if (options_.overlap) launch_ready_buckets_locked();
}

void DistributedDataParallel::mark_ready_locked(Param& p) {
  p.ready = true;
  ++ready_count_;
  if (comm_.world_size() == 1) return;  // nothing to communicate; readiness is still checked
  torch::NoGradGuard no_grad;
  auto& bucket = buckets_[p.bucket];
  auto slice = bucket.flat.narrow(0, p.offset, p.tensor.numel());
  const auto& grad = p.tensor.grad();
  if (grad.defined()) {
    slice.copy_(grad.reshape(-1));
  } else {
    slice.zero_();
  }
  --bucket.pending;
}

void DistributedDataParallel::launch_ready_buckets_locked() {
  if (comm_.world_size() == 1) return;
  // Every rank launches in index order, whatever order its buckets filled in: gloo pairs
  // collectives by sequence, so a different order would sum unrelated buffers.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    auto& bucket = buckets_[next_bucket_];
    bucket.work = comm_.allreduce_async(bucket.flat, ReduceOp::kSum);
    stats_.launch_order.push_back(next_bucket_);
    if (!backward_ended_) ++stats_.launched_during_backward;
    ++next_bucket_;
  }
}

void DistributedDataParallel::on_backward_end() {
  std::lock_guard lock(mutex_);
  if (backward_ended_) return;
  backward_ended_ = true;
  if (!error_.empty() || ready_count_ == params_.size()) return;
  std::vector<Param*> unused;
  for (auto& p : params_) {
    if (!p.ready) unused.push_back(&p);
  }
  if (!options_.find_unused_parameters) {
    std::string names;
    for (std::size_t i = 0; i < unused.size() && i < 10; ++i) {
      names += (i == 0 ? "" : ", ") + unused[i]->name;
    }
    if (unused.size() > 10) names += " and " + std::to_string(unused.size() - 10) + " more";
    error_ = std::to_string(unused.size()) +
             " trainable parameter(s) got no gradient in "
             "this backward pass: " +
             names;
    error_is_unused_ = true;
    return;
  }
  // Ready with what they hold (zero if nothing): every rank still launches every bucket.
  for (auto* p : unused) {
    stats_.unused_parameters.push_back(p->name);
    mark_ready_locked(*p);
  }
}

void DistributedDataParallel::finish_gradient_sync() {
  if (!sync_enabled_) return;
  std::unique_lock lock(mutex_);
  // No hook ran (no parameter took part in backward) or the callback has not run yet.
  if (!backward_ended_) {
    lock.unlock();
    on_backward_end();
    lock.lock();
  }
  if (!error_.empty()) {
    const std::string message = error_;
    const bool unused = error_is_unused_;
    reset_step_locked();
    if (unused) {
      throw ddprun::ConfigError(
          message,
          "make every parameter take part in the loss, or set runtime.find_unused_parameters "
          "(DdpOptions::find_unused_parameters) to treat them as having zero gradient");
    }
    throw ddprun::UsageError(message,
                             "call finish_gradient_sync() after each backward; use NoSyncGuard "
                             "to accumulate gradients over several backward passes");
  }
  const int world = comm_.world_size();
  if (world > 1) {
    launch_ready_buckets_locked();  // all of them without overlap; the rest otherwise
    TORCH_CHECK(next_bucket_ == buckets_.size(), "DDP: a bucket was never launched");
    torch::NoGradGuard no_grad;
    for (auto& bucket : buckets_) {
      bucket.work.wait();
      bucket.flat.div_(world);
      for (const auto i : bucket.params) {
        auto& p = params_[i];
        auto slice = bucket.flat.narrow(0, p.offset, p.tensor.numel()).view_as(p.tensor);
        if (p.tensor.grad().defined()) {
          p.tensor.mutable_grad().copy_(slice);
        } else {
          p.tensor.mutable_grad() = slice.clone();
        }
      }
    }
  }
  last_stats_ = std::move(stats_);
  reset_step_locked();
}

}  // namespace ddprun::worker
