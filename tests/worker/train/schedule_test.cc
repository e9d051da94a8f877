// The learning-rate schedule: warm-up, then constant, cosine or step decay, at the steps
// where each changes.

#include "schedule.h"

#include <gtest/gtest.h>

namespace ddprun::worker {
namespace {

OptimizerConfig optimizer(std::int64_t warmup, const std::string& decay) {
  OptimizerConfig o;
  o.name = "sgd";
  o.lr = 0.1;
  o.warmup_steps = warmup;
  o.decay = decay;
  return o;
}

TEST(Schedule, WarmUpRisesLinearlyToTheRateThenStaysWithoutDecay) {
  const auto o = optimizer(4, "none");
  EXPECT_DOUBLE_EQ(learning_rate(o, 0, 100), 0.025);
  EXPECT_DOUBLE_EQ(learning_rate(o, 1, 100), 0.05);
  EXPECT_DOUBLE_EQ(learning_rate(o, 3, 100), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 4, 100), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 99, 100), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(optimizer(0, "none"), 0, 100), 0.1);
}

TEST(Schedule, CosineFallsFromTheRateAfterWarmUpToMinLrAtTheLastStep) {
  auto o = optimizer(10, "cosine");
  o.min_lr = 0.01;
  EXPECT_DOUBLE_EQ(learning_rate(o, 9, 111), 0.1);       // the warm-up's last step
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 111), 0.1);      // the decay's first
  EXPECT_NEAR(learning_rate(o, 60, 111), 0.055, 1e-12);  // half-way: the middle
  EXPECT_NEAR(learning_rate(o, 110, 111), 0.01, 1e-12);  // the last step: min_lr
  EXPECT_NEAR(learning_rate(o, 500, 111), 0.01, 1e-12);  // beyond: stays there
  EXPECT_GT(learning_rate(o, 30, 111), learning_rate(o, 31, 111));
}

TEST(Schedule, StepDecayMultipliesByGammaEveryDecayEverySteps) {
  auto o = optimizer(2, "step");
  o.decay_every = 5;
  o.decay_gamma = 0.5;
  EXPECT_DOUBLE_EQ(learning_rate(o, 2, 100), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 6, 100), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 7, 100), 0.05);
  EXPECT_DOUBLE_EQ(learning_rate(o, 12, 100), 0.025);
}

}  // namespace
}  // namespace ddprun::worker
