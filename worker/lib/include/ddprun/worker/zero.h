#pragma once
// ZeRO stage 1: each rank keeps the optimizer state of only its 1/N share of the parameters
// (docs/worker-library.md). DDP, made with DdpOptions::shard_gradients, reduce-scatters each
// gradient bucket so that a rank receives the average of its share only; step() runs the
// optimizer on the shares and all-gathers the updated shares into every parameter. The
// shares are cut from each bucket's flat buffer in rank order, so any element-wise optimizer
// (SGD with momentum, Adam, AdamW) computes exactly what it would unsharded.

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ddprun/worker/communicator.h"
#include "ddprun/worker/ddp.h"

namespace ddprun::worker {

// One share's optimizer state as tensors in a fixed order (SGD: its momentum buffer; Adam
// and AdamW: the two moments and the AMSGrad maximum, undefined without amsgrad) and Adam's
// step count; no tensors: no state yet (before the first step).
struct ShareState {
  std::vector<at::Tensor> tensors;
  std::int64_t step = 0;
};

// What a rank holds of the shares' state when its group fails (DdpOptions::keep_next_share),
// per bucket: its own share's and the next rank's.
struct HeldShares {
  std::vector<ShareState> own;
  std::vector<ShareState> next;
};

class ShardedOptimizer {
 public:
  using MakeOptimizer =
      std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor> params)>;
  // `ddp` must shard gradients; `make` builds the optimizer (torch::optim::SGD, Adam or
  // AdamW) over the share tensors it is given. Every rank's parameters must be the same
  // (DDP broadcast them).
  ShardedOptimizer(DistributedDataParallel& ddp, Communicator& comm, const MakeOptimizer& make);

  // After ddp.finish_gradient_sync(): scales the averaged gradients so that their norm over
  // all parameters is at most `max_norm` (one all-reduce on the control plane). Returns the
  // norm before.
  double clip_grad_norm(double max_norm);
  void set_lr(double lr);
  // Steps this rank's shares, then every rank's updated shares to every parameter
  // (collective on the data plane).
  void step();

  // Consolidates every rank's state into `full`, an optimizer of the same kind over the
  // model's parameters, as it would hold it unsharded (collective; for checkpoints).
  void save_state_into(torch::optim::Optimizer& full);
  // Takes this rank's shares of `full`'s per-parameter state, whatever world size wrote it.
  void load_state_from(const torch::optim::Optimizer& full);

  const torch::optim::Optimizer& optimizer() const { return *optimizer_; }

  // Live recovery (runtime.recovery "peer"), with DdpOptions::keep_next_share: this rank
  // also keeps the state of the next rank's share ((rank + 1) mod world), stepped beside its
  // own from the whole averaged gradient, so that a lost rank's share lives on in the rank
  // before it. `held` takes both as they stand (no collective: the group may have failed).
  HeldShares held() const;
  // In the next group, after DDP and this optimizer were made again: every share's state
  // from a rank that holds it (its own rank, else the one before it) to the ranks that keep
  // it; `lost` are the ranks that hold nothing (replacements; `held` is empty there).
  // Collective over `control`. Throws CollectiveError when two neighbours were lost, whose
  // share then lived on them alone.
  void restore(Plane& control, const HeldShares& held, const std::vector<int>& lost);
  // The next rank's share's optimizer (for tests); null without keep_next_share.
  const torch::optim::Optimizer* next_optimizer() const { return next_optimizer_.get(); }

 private:
  bool keeps_next() const { return next_optimizer_ != nullptr; }
  int next_rank() const { return (comm_.rank() + 1) % comm_.world_size(); }
  // Rank `r`'s slice of bucket `b`'s flat buffer.
  at::Tensor slice_of(std::size_t b, int r);
  // Before a step, a copy of the shares' state; after one a lost peer interrupted, that
  // again, and the shares' values from the parameters (which the step had not written yet).
  HeldShares held_copy() const;
  void put_back(const HeldShares& copy);

  DistributedDataParallel& ddp_;
  Communicator& comm_;
  std::vector<at::Tensor> shares_;  // this rank's slice of each bucket's parameters
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<at::Tensor> next_shares_;  // keep_next_share: the next rank's slices
  std::unique_ptr<torch::optim::Optimizer> next_optimizer_;
};

// The bytes of `optimizer`'s state tensors on this rank (momentum, Adam's moments).
std::int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer);

// `optimizer`'s state for `param` (null before its first step), and setting it. LibTorch
// keys the state by the parameter's address, as a string in 1.13 and as a pointer in 2.x:
// these work in both.
const torch::optim::OptimizerParamState* param_state(const torch::optim::Optimizer& optimizer,
                                                     const at::Tensor& param);
void set_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                     std::unique_ptr<torch::optim::OptimizerParamState> state);

}  // namespace ddprun::worker
