#include "ddprun/worker/ddp.h"

#include <torch/torch.h>

#include <chrono>
#include <map>

#include "ddprun/contract/errors.h"
#include "ddprun/worker/errors.h"
#include "torch_compat.h"

namespace ddprun::worker {
namespace {

std::size_t byte_size(const at::Tensor& t) {
  return static_cast<std::size_t>(t.numel() * t.element_size());
}

// Broadcasts `tensors` from rank 0 with one collective per dtype: flatten into a buffer of
// the data plane, send, copy back.
void broadcast_coalesced(Plane& data, const std::vector<at::Tensor>& tensors) {
  std::map<at::ScalarType, std::vector<at::Tensor>> by_type;
  for (const auto& t : tensors) by_type[t.scalar_type()].push_back(t);
  std::vector<at::Tensor> flats;
  for (auto& [type, group] : by_type) {
    std::int64_t numel = 0;
    for (const auto& t : group) numel += t.numel();
    auto flat = data.device_zeros(numel, type);
    std::int64_t offset = 0;
    for (const auto& t : group) {
      flat.narrow(0, offset, t.numel()).copy_(t.reshape(-1));
      offset += t.numel();
    }
    flats.push_back(flat);
  }
  data.broadcast(flats, 0);
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

// Never 0: a rank without the tensor contributes 0 below.
std::int64_t shape_signature(const at::Tensor& t) {
  std::uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(static_cast<std::uint64_t>(t.scalar_type()));
  mix(static_cast<std::uint64_t>(t.dim()));
  for (const auto size : t.sizes()) mix(static_cast<std::uint64_t>(size));
  mix(t.requires_grad() ? 1 : 2);
  return h == 0 ? 1 : static_cast<std::int64_t>(h);
}

std::string describe(const at::Tensor& t) {
  std::string text = std::string(c10::toString(t.scalar_type())) + " [";
  for (std::int64_t d = 0; d < t.dim(); ++d) text += (d ? ", " : "") + std::to_string(t.size(d));
  return text + "]" + (t.requires_grad() ? "" : ", no grad");
}

// Every rank must hold the same parameters and buffers (count, order, dtypes, shapes), as
// PyTorch's DDP checks at construction: anything else would all-reduce unrelated numbers
// or hang. Two control all-reduces; throws on every rank, naming the first difference.
void check_ranks_agree(Plane& control,
                       const std::vector<std::pair<std::string, at::Tensor>>& state) {
  const auto n = static_cast<std::int64_t>(state.size());
  auto counts = torch::tensor({n, -n}, torch::kLong);
  control.allreduce(counts, ReduceOp::kMax);
  const std::int64_t most = counts[0].item<std::int64_t>(),
                     fewest = -counts[1].item<std::int64_t>();
  auto signatures = torch::zeros({2 * most}, torch::kLong);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto sig = shape_signature(state[static_cast<std::size_t>(i)].second);
    signatures[i] = sig;
    signatures[most + i] = -sig;
  }
  control.allreduce(signatures, ReduceOp::kMax);
  const auto* s = signatures.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < most; ++i) {
    if (s[i] == -s[most + i]) continue;
    const std::string here = i < n ? "'" + state[static_cast<std::size_t>(i)].first + "', " +
                                         describe(state[static_cast<std::size_t>(i)].second)
                                   : "nothing (" + std::to_string(n) + " parameters and buffers)";
    throw ConsistencyError("the ranks' models differ: parameter or buffer #" +
                               std::to_string(i + 1) + " differs between ranks (rank " +
                               std::to_string(control.rank()) + " has " + here +
                               "; the ranks hold " + std::to_string(fewest) + " to " +
                               std::to_string(most) + " parameters and buffers)",
                           "every rank must build the same model, in the same order");
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 Communicator& comm, DdpOptions options)
    : module_(std::move(module)), comm_(comm), options_(options) {
  const bool own_hook = options_.comm_hook.start && options_.comm_hook.wire == at::kFloat;
  if (options_.shard_gradients && (options_.find_unused_parameters || own_hook)) {
    throw ddprun::UsageError(
        "DDP: sharded gradients (ZeRO-1) with " +
            std::string(options_.find_unused_parameters ? "find_unused_parameters"
                                                        : "a comm hook of one's own") +
            " is not supported",
        "use one of the two (the built-in bf16 and fp16 hooks do go with it)");
  }
  std::vector<std::pair<std::string, at::Tensor>> state;
  for (const auto& item : module_->named_parameters(/*recurse=*/true)) {
    state.emplace_back(item.key(), item.value());
  }
  for (const auto& item : module_->named_buffers(/*recurse=*/true)) {
    state.emplace_back(item.key(), item.value());
  }
  // A model split over several devices of the rank is fine: gradients are copied into the
  // buckets on the data plane's device. A CPU model beside a GPU data plane is a mistake.
  for (const auto& [name, tensor] : state) {
    if (tensor.device().type() != comm_.data().device().type()) {
      throw ddprun::UsageError("DDP: '" + name + "' is on " + tensor.device().str() +
                                   ", the data plane on " + comm_.data().device().str(),
                               "move the model to the communicator's device first");
    }
  }
  if (comm_.world_size() > 1) check_ranks_agree(comm_.control(), state);
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
    if (options_.shard_gradients) {  // equal shares in rank order
      const std::int64_t world = comm_.world_size();
      numel = (numel + world - 1) / world * world;
    }
    current.flat =
        comm_.data().device_zeros(numel, params_[current.params.front()].tensor.scalar_type());
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
  if (comm_.world_size() > 1) check_bucket_layout_agrees();

  for (std::size_t i = 0; i < params_.size(); ++i) {
    hooks_.push_back(
        compat::add_gradient_ready_hook(params_[i].tensor, [this, i] { on_gradient_ready(i); }));
  }
  std::lock_guard lock(mutex_);
  reset_step_locked();
}

DistributedDataParallel::~DistributedDataParallel() = default;

at::Tensor DistributedDataParallel::bucket_share(std::size_t b) {
  auto& flat = buckets_[b].flat;
  const std::int64_t share = flat.numel() / comm_.world_size();
  return flat.narrow(0, comm_.rank() * share, share);
}

std::vector<std::pair<at::Tensor, std::int64_t>> DistributedDataParallel::bucket_parameters(
    std::size_t b) const {
  std::vector<std::pair<at::Tensor, std::int64_t>> out;
  for (const auto i : buckets_[b].params) out.emplace_back(params_[i].tensor, params_[i].offset);
  return out;
}

// Buckets follow from the parameters (already agreed) and the caps: ranks given different
// caps would pair unrelated buckets.
void DistributedDataParallel::check_bucket_layout_agrees() {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& bucket : buckets_)
    h = (h ^ static_cast<std::uint64_t>(bucket.flat.numel())) * 1099511628211ull;
  for (const char c : options_.comm_hook.name)
    h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  // A rank that reduce-scatters would pair its all-to-alls with another's all-reduces.
  h = (h ^ (options_.shard_gradients ? 2u : 1u)) * 1099511628211ull;
  h = (h ^ (keeps_next_share() ? 2u : 1u)) * 1099511628211ull;
  const auto mine = static_cast<std::int64_t>(h >> 1);
  auto both = torch::tensor({mine, -mine}, torch::kLong);
  comm_.control().allreduce(both, ReduceOp::kMax);
  if (both[0].item<std::int64_t>() != -both[1].item<std::int64_t>()) {
    throw ConsistencyError(
        "the ranks' gradient buckets differ (rank " + std::to_string(comm_.rank()) + " has " +
            std::to_string(buckets_.size()) + " bucket(s))",
        "give every rank the same bucket_cap_mb (DdpOptions::bucket_cap_bytes), "
        "the same comm hook (here '" +
            options_.comm_hook.name + "') and the same shard_gradients (ZeRO-1)");
  }
}

void DistributedDataParallel::broadcast_state() {
  if (comm_.world_size() == 1) return;
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> state;
  for (const auto& p : module_->parameters(true)) state.push_back(p);
  for (const auto& b : module_->buffers(true)) state.push_back(b);
  if (!state.empty()) broadcast_coalesced(comm_.data(), state);
}

void DistributedDataParallel::prepare_for_forward() {
  if (!options_.broadcast_buffers || !sync_enabled_ || comm_.world_size() == 1) return;
  std::vector<at::Tensor> buffers;
  for (const auto& b : module_->buffers(true)) buffers.push_back(b);
  if (buffers.empty()) return;
  torch::NoGradGuard no_grad;
  broadcast_coalesced(comm_.data(), buffers);
}

void DistributedDataParallel::set_gradient_sync(bool enabled) {
  sync_enabled_ = enabled;
}

void DistributedDataParallel::prepare_for_backward() {
  std::lock_guard lock(mutex_);
  reset_step_locked();
}

void DistributedDataParallel::reset_step_locked() {
  for (auto& p : params_) p.ready = p.used = false;
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
  p.used = true;
  mark_ready_locked(p);
  if (options_.overlap) launch_ready_buckets_locked();
}

void DistributedDataParallel::mark_ready_locked(Param& p) {
  p.ready = true;
  ++ready_count_;
  // Nothing to communicate alone, unless the optimizer reads the gradients from the buckets.
  if (comm_.world_size() == 1 && !options_.shard_gradients) return;
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
    const auto started = std::chrono::steady_clock::now();
    bucket.work = options_.shard_gradients && !options_.keep_next_share
                      ? comm_.data().reduce_scatter_async(bucket.flat, options_.comm_hook.wire)
                  : options_.comm_hook.start
                      ? options_.comm_hook.start(comm_.data(), bucket.flat)
                      : comm_.data().allreduce_async(bucket.flat, ReduceOp::kSum);
    stats_.wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    stats_.launch_order.push_back(next_bucket_);
    if (!backward_ended_) {
      ++stats_.launched_during_backward;
      if (bucket.work.asynchronous()) ++stats_.overlapped_with_backward;
    }
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

void DistributedDataParallel::wait_counted(PendingWork& work) {
  const auto started = std::chrono::steady_clock::now();
  work.wait();
  stats_.wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
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
  if (options_.shard_gradients) {
    launch_ready_buckets_locked();
    TORCH_CHECK(world == 1 || next_bucket_ == buckets_.size(), "DDP: a bucket was never launched");
    torch::NoGradGuard no_grad;
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      wait_counted(buckets_[b].work);
      if (keeps_next_share()) {
        buckets_[b].flat.div_(world);  // all-reduced whole: every share is an average
      } else {
        bucket_share(b).div_(world);
      }
    }
    for (auto& p : params_) p.tensor.mutable_grad().reset();  // in the buckets now
  } else if (world > 1) {
    launch_ready_buckets_locked();  // all of them without overlap; the rest otherwise
    TORCH_CHECK(next_bucket_ == buckets_.size(), "DDP: a bucket was never launched");
    torch::NoGradGuard no_grad;
    // Which parameters some rank used, counted while the buckets travel; launched after
    // them on every rank, so every rank's collectives come in one order.
    PendingWork counting;
    if (options_.find_unused_parameters) {
      if (!used_counts_.defined()) {
        used_counts_ = torch::zeros({static_cast<std::int64_t>(params_.size())}, torch::kInt);
      }
      auto* counts = used_counts_.data_ptr<std::int32_t>();
      for (std::size_t i = 0; i < params_.size(); ++i) counts[i] = params_[i].used ? 1 : 0;
      counting = comm_.control().allreduce_async(used_counts_, ReduceOp::kSum);
    }
    for (auto& bucket : buckets_) wait_counted(bucket.work);
    wait_counted(counting);
    if (options_.find_unused_parameters) {
      for (std::size_t i = 0; i < params_.size(); ++i) {
        if (used_counts_.data_ptr<std::int32_t>()[i] == 0) {
          stats_.unused_on_every_rank.push_back(params_[i].name);
        }
      }
    }
    for (auto& bucket : buckets_) {
      bucket.flat.div_(world);
      for (const auto i : bucket.params) {
        auto& p = params_[i];
        if (options_.find_unused_parameters && used_counts_.data_ptr<std::int32_t>()[i] == 0) {
          continue;  // as PyTorch: a gradient no rank computed stays what it was
        }
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
