#include "objective.h"

#include <torch/torch.h>

#include <algorithm>

#include "ddprun/worker/communicator.h"

namespace ddprun::worker {
namespace {

// Test samples per forward pass: the CNN's activations then stay under the 32 MiB above
// which malloc maps (and unmaps) every block, so they are reused, not faulted in (allocator.h).
constexpr std::int64_t kEvalChunk = 256;

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        std::vector<at::Tensor> params) {
  if (config.name == "adamw") {
    return std::make_unique<torch::optim::AdamW>(
        std::move(params), torch::optim::AdamWOptions(config.lr).weight_decay(config.weight_decay));
  }
  if (config.name == "adam") {
    return std::make_unique<torch::optim::Adam>(
        std::move(params), torch::optim::AdamOptions(config.lr).weight_decay(config.weight_decay));
  }
  return std::make_unique<torch::optim::SGD>(std::move(params),
                                             torch::optim::SGDOptions(config.lr)
                                                 .momentum(config.momentum)
                                                 .weight_decay(config.weight_decay));
}

at::Tensor compute_loss(const std::string& kind, const at::Tensor& logits,
                        const at::Tensor& targets) {
  if (kind == "mse") {
    const auto one_hot = torch::one_hot(targets, logits.size(1)).to(logits.scalar_type());
    return torch::mse_loss(logits, one_hot);
  }
  return torch::cross_entropy_loss(logits, targets);
}

EvalResult evaluate(Model& model, const Dataset& test, Plane& control, const std::string& loss_kind,
                    const c10::Device& device) {
  torch::NoGradGuard no_grad;
  model.eval();
  const auto mine = torch::arange(control.rank(), test.size(), control.world_size(), torch::kLong);
  double correct = 0, loss = 0;
  for (std::int64_t start = 0; start < mine.size(0); start += kEvalChunk) {
    const auto batch =
        gather(test, mine.narrow(0, start, std::min(kEvalChunk, mine.size(0) - start)));
    const auto x = batch.inputs.to(device);
    const auto logits = model.forward(x);  // on the last stage's device
    const auto y = batch.targets.to(logits.device());
    correct += logits.argmax(1).eq(y).sum().item<double>();
    loss += compute_loss(loss_kind, logits, y).item<double>() * static_cast<double>(y.size(0));
  }
  model.train();
  auto sums = torch::tensor({correct, loss, static_cast<double>(mine.size(0))}, torch::kDouble);
  control.allreduce(sums, ReduceOp::kSum);
  const auto* s = sums.data_ptr<double>();
  return {s[0] / std::max(s[2], 1.0), s[1] / std::max(s[2], 1.0)};
}

}  // namespace ddprun::worker
