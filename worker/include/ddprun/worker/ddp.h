#pragma once
// Data-parallel training over a Communicator: identical start, averaged gradients.

#include <torch/nn/module.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "ddprun/worker/communicator.h"

namespace ddprun::worker {

struct DdpOptions {
  std::size_t bucket_cap_bytes = 25u << 20;  // like PyTorch's bucket_cap_mb = 25
};

// Wraps a module replicated on every rank. Construction broadcasts rank 0's parameters and
// buffers to all ranks (collective: every rank must construct it). Each step:
//   ddp.prepare_for_backward(); loss.backward(); ddp.finish_gradient_sync(); opt.step();
// prepare_for_backward is where a backward-overlapping reducer (c10d::Reducer or grad
// hooks) will start its work; today all communication happens in finish_gradient_sync.
// Not thread-safe. Keeps references to `module` and `comm`, which must outlive it.
class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, Communicator& comm,
                          DdpOptions options = {});

  void prepare_for_backward();

  // Replaces every parameter's gradient with the average over all ranks: gradients are
  // copied into flat buckets (at most bucket_cap_bytes, one dtype each, in reverse
  // registration order like PyTorch), all-reduced asynchronously bucket by bucket, waited
  // for, divided by the world size and copied back. A parameter without a gradient counts
  // as zero and gets one. Collective. Does nothing while gradient sync is off (no_sync),
  // so gradients accumulate locally until the next synced step averages the sum.
  void finish_gradient_sync();

  // Off: finish_gradient_sync() does nothing (PyTorch's no_sync()).
  void set_gradient_sync(bool enabled) { sync_enabled_ = enabled; }
  bool gradient_sync() const { return sync_enabled_; }

  // Broadcasts rank 0's parameters and buffers again (collective).
  void broadcast_state();

  std::size_t bucket_count() const { return buckets_.size(); }
  torch::nn::Module& module() { return *module_; }

 private:
  struct Bucket {
    std::vector<at::Tensor> params;
    at::Tensor flat;  // one contiguous buffer, reused every step
  };

  std::shared_ptr<torch::nn::Module> module_;
  Communicator& comm_;
  std::vector<Bucket> buckets_;
  bool sync_enabled_ = true;
};

// RAII no_sync(): gradient sync off for the guard's lifetime, then back to what it was.
class NoSyncGuard {
 public:
  explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), was_(ddp.gradient_sync()) {
    ddp_.set_gradient_sync(false);
  }
  ~NoSyncGuard() { ddp_.set_gradient_sync(was_); }
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;

 private:
  DistributedDataParallel& ddp_;
  bool was_;
};

}  // namespace ddprun::worker
