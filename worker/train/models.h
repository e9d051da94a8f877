#pragma once
// The models ddp-train knows, as consecutive blocks that can be split over several devices
// of one rank (model parallelism inside a data-parallel rank) and fed in micro-batches.

#include <torch/nn/module.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddprun/worker/communicator.h"

namespace ddprun::worker {

class Model : public torch::nn::Module {
 public:
  // Logits (N x classes) for a batch of inputs, on the last stage's device. The input goes
  // to the first stage's device. With a split size, the batch flows through the stages in
  // micro-batches of that many rows: stage s works on micro-batch j while stage s+1 works
  // on j-1 (on GPUs their kernels run at the same time), and the outputs are concatenated.
  // Numerically the unsplit forward, up to the summation order of the batch's rows.
  at::Tensor forward(const at::Tensor& x);

  // Splits the blocks into devices.size() consecutive stages of as equal a block count as
  // can be (the earlier stages take the extra block) and moves stage s to devices[s].
  // Throws std::invalid_argument for no devices or more devices than blocks.
  void place(const std::vector<torch::Device>& devices);
  // 0: whole batches; > 0: micro-batches of this many rows.
  void set_split_size(std::int64_t rows) { split_size_ = rows; }

  std::size_t stage_count() const { return stage_devices_.size(); }
  // The stage each block runs in.
  const std::vector<std::size_t>& block_stages() const { return block_stage_; }
  virtual std::size_t block_count() const = 0;
  // The plane its batch norms (model.batch_norm) compute their statistics over; null: each
  // rank's own rows.
  void set_batch_norm_plane(Plane* plane);

 protected:
  // Block i applied to h (block 0 gets the raw batch).
  virtual at::Tensor block(std::size_t i, const at::Tensor& h) = 0;
  // The submodules block i owns (moved with it).
  virtual std::vector<std::shared_ptr<torch::nn::Module>> block_modules(std::size_t i) = 0;

 private:
  at::Tensor run_stage(std::size_t stage, at::Tensor h);

  std::vector<torch::Device> stage_devices_{torch::kCPU};
  std::vector<std::size_t> block_stage_;
  std::int64_t split_size_ = 0;
};

// "mlp": 784-256-128-10 with ReLU (3 blocks: one per layer); "cnn": two 3x3 conv layers
// (16, 32 channels) with max pooling, then 1568-10 (3 blocks); "toy": Linear 10-10, ReLU,
// Linear 10-5 (2 blocks). With `batch_norm` (cnn and toy) a SyncBatchNorm follows each conv
// layer (the toy's first layer). Initialised from the global LibTorch generator (seed it
// first for reproducibility), on the CPU as one stage. Throws std::invalid_argument for
// another name.
std::shared_ptr<Model> make_model(const std::string& name, bool batch_norm = false);

}  // namespace ddprun::worker
