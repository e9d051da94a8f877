// Mixed precision: autocast's guard on the CPU, and the float16 loss scaler's arithmetic
// (unscaling, skipping an overflowed step, the scale's back-off and growth, ranks that hold
// different shares agreeing). float16 autocast itself needs a GPU (scripts/check-gpu.sh).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ddprun/worker/autocast.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/grad_scaler.h"
#include "ranks_as_threads.h"

namespace ddprun::worker {
namespace {

TEST(Autocast, BFloat16OnTheCpuRunsALinearLayerInBFloat16AndEndsWithTheGuard) {
  torch::nn::Linear linear(4, 3);
  const auto x = torch::randn({2, 4});
  {
    Autocast autocast(Precision::kBFloat16, /*on_gpu=*/false);
    EXPECT_EQ(linear->forward(x).scalar_type(), torch::kBFloat16);
  }
  EXPECT_EQ(linear->forward(x).scalar_type(), torch::kFloat);
  Autocast off(Precision::kFloat, /*on_gpu=*/false);
  EXPECT_EQ(linear->forward(x).scalar_type(), torch::kFloat);
}

TEST(Autocast, Float16OnTheCpuIsRefusedWithItsReason) {
  try {
    Autocast autocast(Precision::kFloat16, /*on_gpu=*/false);
    FAIL() << "float16 autocast on the CPU was accepted";
  } catch (const ddprun::UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "float16 autocast runs on GPUs only");
  }
}

GradScalerOptions small_scale() {
  GradScalerOptions options;
  options.init_scale = 8;
  options.growth_interval = 2;
  return options;
}

TEST(GradScaler, UnscalesInPlaceAndDoublesTheScaleAfterTheIntervalOfGoodSteps) {
  GradScaler scaler(small_scale());
  EXPECT_EQ(scaler.scale(torch::tensor({1.5F})).item<float>(), 12.0F);
  auto g = torch::tensor({8.0F, -16.0F, 0.0F});
  EXPECT_TRUE(scaler.unscale({g, at::Tensor()}));  // an undefined gradient is skipped
  EXPECT_TRUE(torch::equal(g, torch::tensor({1.0F, -2.0F, 0.0F})));
  scaler.update(true);
  EXPECT_EQ(scaler.current_scale(), 8);
  scaler.update(true);
  EXPECT_EQ(scaler.current_scale(), 16);
}

TEST(GradScaler, AnOverflowSkipsTheStepHalvesTheScaleAndRestartsTheCountOfGoodSteps) {
  GradScaler scaler(small_scale());
  for (const float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    auto fine = torch::tensor({8.0F});
    auto overflowed = torch::tensor({1.0F, bad});
    EXPECT_FALSE(scaler.unscale({fine, overflowed})) << bad;
  }
  scaler.update(true);   // one good step of two
  scaler.update(false);  // an overflow: halved, and the good step forgotten
  EXPECT_EQ(scaler.current_scale(), 4);
  scaler.update(true);
  EXPECT_EQ(scaler.current_scale(), 4);
  scaler.update(true);
  EXPECT_EQ(scaler.current_scale(), 8);
}

TEST(GradScaler, RanksHoldingDifferentSharesAgreeThatOneOverflowed) {
  std::vector<int> finite(3, -1);
  run_ranks(
      3,
      [&](Communicator& comm) {
        GradScaler scaler;
        auto share = torch::full({4}, 65536.0F);
        if (comm.rank() == 2) share[1] = std::numeric_limits<float>::infinity();
        finite[static_cast<std::size_t>(comm.rank())] = scaler.unscale({share}, &comm.control());
      },
      /*same_node=*/false);
  EXPECT_EQ(finite, std::vector<int>({0, 0, 0}));
}

TEST(GradScaler, ItsStateTakenBackGoesOnAsTheScalerItCameFrom) {
  GradScaler before(small_scale()), after(small_scale());
  before.update(false);  // 4
  before.update(true);   // one good step of two
  after.load_state(before.state());
  EXPECT_EQ(after.current_scale(), 4);
  after.update(true);
  EXPECT_EQ(after.current_scale(), 8);
  // What is not a scaler's state is refused, and the scaler stays as it was.
  for (const auto& bad : {torch::tensor({0.0, 0.0}, torch::kDouble),
                          torch::tensor({8.0, 2.0}, torch::kDouble),  // a count past the interval
                          torch::tensor({8.0, 0.5}, torch::kDouble), torch::tensor({8.0F, 0.0F}),
                          torch::tensor({8.0}, torch::kDouble)}) {
    EXPECT_THROW(after.load_state(bad), CheckpointError) << bad;
  }
  EXPECT_EQ(after.current_scale(), 8);
}

TEST(GradScaler, RefusesOptionsThatCannotConverge) {
  GradScalerOptions options;
  options.backoff_factor = 1;
  EXPECT_THROW(GradScaler{options}, ddprun::UsageError);
}

}  // namespace
}  // namespace ddprun::worker
