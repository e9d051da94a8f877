#pragma once
// What training minimises and how the model is measured against it: the optimizer, the
// loss, and the test evaluation (which measures that same loss).

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "data.h"
#include "models.h"

namespace ddprun::worker {

class Plane;

// SGD (lr, momentum, weight_decay), or Adam (lr, weight_decay) when `config.name` is
// "adam", over `params`.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        std::vector<at::Tensor> params);

// The mean loss of `logits` (N x classes) against class labels `targets` (N): cross entropy,
// or for `kind` "mse" the mean squared error against one-hot targets.
at::Tensor compute_loss(const std::string& kind, const at::Tensor& logits,
                        const at::Tensor& targets);

struct EvalResult {
  double accuracy = 0;  // fraction of test samples classified right
  double loss = 0;      // mean loss per test sample
};

// Collective: every rank must call it. This rank evaluates test samples rank, rank + world,
// ... (no padding, so each sample counts once) on `device` without gradients, 256 at a
// time; sums and counts are all-reduced, so every rank returns the same result. Leaves the
// model in training mode.
EvalResult evaluate(Model& model, const Dataset& test, Plane& control, const std::string& loss_kind,
                    const c10::Device& device);

}  // namespace ddprun::worker
