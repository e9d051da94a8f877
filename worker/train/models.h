#pragma once
// The models ddp-train knows.

#include <torch/nn/module.h>

#include <memory>
#include <string>

namespace ddprun::worker {

class Model : public torch::nn::Module {
 public:
  // Logits (N x classes) for a batch of inputs.
  virtual at::Tensor forward(const at::Tensor& x) = 0;
};

// "mlp": 784-256-128-10 with ReLU; "cnn": two 3x3 conv layers (16, 32 channels) with max
// pooling, then 1568-10; "toy": Linear 10-10, ReLU, Linear 10-5. Initialised from the
// global LibTorch generator (seed it first for reproducibility). Throws
// std::invalid_argument for another name.
std::shared_ptr<Model> make_model(const std::string& name);

}  // namespace ddprun::worker
