// Naming the rank that holds the others back (straggler.h): pure, no process.
#include "straggler.h"

#include <gtest/gtest.h>

namespace ddprun::worker {
namespace {

// Times over 10 steps: compute and wait in ms per step.
RankTimes ms_per_step(double compute_ms, double wait_ms) {
  return {compute_ms * 10 / 1000, wait_ms * 10 / 1000, 10};
}

TEST(Stragglers, TheRankThatComputesLongestWhileTheOthersWaitIsNamed) {
  const std::vector<RankTimes> ranks = {ms_per_step(10, 12), ms_per_step(22, 0.1),
                                        ms_per_step(10.5, 11.5), ms_per_step(9.8, 12.2)};
  const auto found = find_stragglers(ranks);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, 1);
  EXPECT_NEAR(found[0].compute_per_step, 0.022, 1e-12);
  EXPECT_NEAR(found[0].median, 0.01025, 1e-12);
  EXPECT_NEAR(found[0].others_wait, 0.012, 1e-12);
  EXPECT_EQ(straggler_line(found[0], "node3", 30),
            "ddp-train: straggler: rank 1 on node3 computes 22.0 ms a step, 2.15x the median "
            "10.2 ms; the others wait 12.0 ms a step (window ending at step 30)");
}

TEST(Stragglers, TenPercentAndHalfAMillisecondAboveTheMedianBothCount) {
  // 10.9 ms against a median of 10: under 10 %.
  EXPECT_TRUE(
      find_stragglers({ms_per_step(10, 1), ms_per_step(10.9, 0), ms_per_step(10, 1)}).empty());
  // 11 ms: 10 % and 1 ms above.
  EXPECT_EQ(find_stragglers({ms_per_step(10, 1), ms_per_step(11.05, 0), ms_per_step(10, 1)}).size(),
            1u);
  // 0.3 against 0.2 ms: 50 % but 0.1 ms, noise at this scale.
  EXPECT_TRUE(
      find_stragglers({ms_per_step(0.2, 1), ms_per_step(0.3, 0), ms_per_step(0.2, 1)}).empty());
}

TEST(Stragglers, OneRankOrNoStepsNamesNobody) {
  EXPECT_TRUE(find_stragglers({ms_per_step(50, 0)}).empty());
  EXPECT_TRUE(find_stragglers({RankTimes{}, RankTimes{}}).empty());
}

TEST(Stragglers, TheWindowHoldsAboutATenthOfASecondOfTheSlowestSteps) {
  EXPECT_EQ(next_window({ms_per_step(1, 1), ms_per_step(2, 0)}), 51);  // 2 ms steps
  EXPECT_EQ(next_window({ms_per_step(0.01, 0), ms_per_step(0.01, 0)}), 1000);
  EXPECT_EQ(next_window({ms_per_step(500, 0)}), 10);
  EXPECT_EQ(next_window({}), 10);
}

TEST(Stragglers, TheTableMarksTheStraggler) {
  const std::string table = timing_table(
      {ms_per_step(10, 12), ms_per_step(22, 0.1), ms_per_step(10, 12)}, {"a", "b", "c"});
  EXPECT_NE(table.find("ddp-train:     1  b                            22.0       0.1  <- "
                       "straggler\n"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("<- straggler"), table.rfind("<- straggler")) << table;
}

}  // namespace
}  // namespace ddprun::worker
