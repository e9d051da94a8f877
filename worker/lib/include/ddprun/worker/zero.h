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

 private:
  DistributedDataParallel& ddp_;
  Communicator& comm_;
  std::vector<at::Tensor> shares_;  // this rank's slice of each bucket's parameters
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
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
