#pragma once
// Batch normalisation whose statistics are computed over every rank's rows, as
// torch.nn.SyncBatchNorm: per channel (dimension 1 of an N x C or N x C x ... input), the
// sums and sums of squares of all ranks' rows come from one all-reduce on the plane in
// forward, and their gradients from one in backward (an all-reduce whose gradient is an
// all-reduce), so N ranks with B rows each normalise as one process with N x B rows would.
// Without a plane it uses this rank's rows only (a plain batch norm); in eval mode the
// running statistics. Training forwards are collectives: every rank must run them alike.

#include <torch/nn/module.h>

#include <cstdint>

#include "ddprun/worker/communicator.h"

namespace ddprun::worker {

class SyncBatchNorm : public torch::nn::Module {
 public:
  explicit SyncBatchNorm(std::int64_t channels, double eps = 1e-5, double momentum = 0.1);
  // The plane the statistics travel on (the data plane: the tensors' device); null: local.
  void set_plane(Plane* plane) { plane_ = plane; }
  at::Tensor forward(const at::Tensor& x);

  at::Tensor weight, bias;               // per channel, trainable
  at::Tensor running_mean, running_var;  // buffers, updated in training forwards

 private:
  double eps_, momentum_;
  Plane* plane_ = nullptr;
};

}  // namespace ddprun::worker
