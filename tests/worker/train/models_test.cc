// ddp-train's models split into stages and fed in micro-batches: which blocks each stage
// takes, and that a micro-batched step computes what the whole-batch step computes.

#include "models.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <vector>

#include "config.h"

namespace ddprun::worker {
namespace {

TEST(ModelStages, EachStageTakesConsecutiveBlocksAndTheEarlierStagesTakeTheExtra) {
  auto mlp = make_model("mlp");
  EXPECT_EQ(mlp->block_stages(), (std::vector<std::size_t>{}));  // not placed yet
  mlp->place({torch::kCPU, torch::kCPU});
  EXPECT_EQ(mlp->stage_count(), 2u);
  EXPECT_EQ(mlp->block_stages(), (std::vector<std::size_t>{0, 0, 1}));
  mlp->place({torch::kCPU, torch::kCPU, torch::kCPU});
  EXPECT_EQ(mlp->block_stages(), (std::vector<std::size_t>{0, 1, 2}));
  auto toy = make_model("toy");
  EXPECT_THROW(toy->place({torch::kCPU, torch::kCPU, torch::kCPU}), std::invalid_argument);
  EXPECT_THROW(toy->place({}), std::invalid_argument);
}

TEST(ModelStages, TheConfigKnowsEveryModelsBlockCount) {
  for (const char* name : {"mlp", "cnn", "toy"})
    EXPECT_EQ(static_cast<std::size_t>(model_block_count(name)), make_model(name)->block_count())
        << name;
  EXPECT_EQ(model_block_count("resnet"), 0);
}

struct Step {
  at::Tensor logits;
  std::vector<at::Tensor> grads;
};

// One forward and backward of `name` (fresh weights from seed 5) on `x`.
Step step(const std::string& name, const at::Tensor& x, std::size_t stages,
          std::int64_t split_size) {
  torch::manual_seed(5);
  auto model = make_model(name);
  model->place(std::vector<torch::Device>(stages, torch::kCPU));
  model->set_split_size(split_size);
  Step s;
  s.logits = model->forward(x);
  s.logits.pow(2).mean().backward();
  for (const auto& p : model->parameters()) s.grads.push_back(p.grad().clone());
  return s;
}

TEST(MicroBatches, TheSplitStepComputesTheWholeBatchStepsLogitsAndGradients) {
  torch::manual_seed(1);
  const std::vector<std::pair<std::string, at::Tensor>> cases = {
      {"toy", torch::randn({20, 10})},
      {"mlp", torch::randn({20, 1, 28, 28})},
      {"cnn", torch::randn({10, 1, 28, 28})},
  };
  for (const auto& [name, x] : cases) {
    const auto whole = step(name, x, 1, 0);
    // 3 rows per micro-batch leaves a short last one; 2 stages make the wavefront matter.
    const auto split = step(name, x, 2, 3);
    ASSERT_EQ(split.logits.sizes(), whole.logits.sizes()) << name;
    EXPECT_TRUE(torch::allclose(split.logits, whole.logits, 1e-5, 1e-6)) << name;
    ASSERT_EQ(split.grads.size(), whole.grads.size());
    for (std::size_t i = 0; i < whole.grads.size(); ++i) {
      EXPECT_TRUE(torch::allclose(split.grads[i], whole.grads[i], 1e-4, 1e-6))
          << name << " parameter " << i << " max diff "
          << (split.grads[i] - whole.grads[i]).abs().max().item<float>();
    }
    // Not vacuous: the gradients are not all zero.
    EXPECT_GT(whole.grads.front().abs().sum().item<float>(), 0) << name;
  }
}

}  // namespace
}  // namespace ddprun::worker
