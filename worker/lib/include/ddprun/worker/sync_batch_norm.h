#pragma once
// Batch normalisation whose statistics are computed over every rank's rows, as
// torch.nn.SyncBatchNorm computes them: per channel (dimension 1 of an N x C or N x C x ...
// input), each rank's row count, mean and sum of squared deviations, in double whatever the
// input's dtype, go to every rank in one all-gather on the plane in forward and are merged
// with their counts; backward all-reduces the sums of dy and dy x (x - mean) once. N ranks
// with B rows each normalise as one process with N x B rows would. The output has the
// input's dtype (bf16 under autocast included); the arithmetic runs in float. Without a
// plane it uses this rank's rows only (a plain batch norm); in eval mode the running
// statistics. Training forwards and backwards are collectives: every rank must run them
// alike. Fewer than 2 values per channel over all ranks throws ddprun::UsageError.

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
