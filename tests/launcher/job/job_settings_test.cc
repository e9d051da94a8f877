// The command line as the job's policy: each option lands where the policy reads it.
#include "job/job_settings.h"

#include <gtest/gtest.h>

namespace ddprun {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(JobSettings, TimeoutsBecomeThePolicysSpans) {
  Options options;
  options.shutdown_timeout_s = 2.5;
  options.exit_timeout_s = 0.25;
  options.stall_timeout_s = 30;
  options.signals_to_handle = {SIGXCPU};
  options.max_restarts = 3;
  const JobSettings settings = job_settings(options, std::nullopt, 0, RunnerClock::now(), false);
  EXPECT_EQ(settings.round.shutdown_grace, milliseconds(2500));
  EXPECT_EQ(settings.round.exit_timeout, milliseconds(250));
  EXPECT_EQ(settings.round.stall_timeout, milliseconds(30000));
  EXPECT_EQ(settings.round.stall_check_every, milliseconds(1000));  // a tenth, at most 1 s
  EXPECT_EQ(settings.round.extra_stop_signals, std::vector<int>{SIGXCPU});
  EXPECT_EQ(settings.max_restarts, 3);
  EXPECT_FALSE(settings.round.drain_at);
}

TEST(JobSettings, AShortStallTimeoutIsCheckedAtATenthButNotBusily) {
  Options options;
  options.stall_timeout_s = 0.05;
  EXPECT_EQ(
      job_settings(options, std::nullopt, 0, RunnerClock::now(), false).round.stall_check_every,
      milliseconds(10));
}

TEST(JobSettings, TheHeadAloneDrainsBeforeTheJobsEnd) {
  Options options;
  options.drain_before_s = 300;
  options.drain_signal = SIGUSR2;
  const auto now = RunnerClock::now();
  const JobEndTime end{10000 + 3600, "test"};
  const JobSettings head = job_settings(options, end, 10000, now, false);
  ASSERT_TRUE(head.round.drain_at);
  EXPECT_EQ(*head.round.drain_at, now + seconds(3300));
  EXPECT_EQ(head.round.drain_signal, SIGUSR2);
  options.agent = true;
  const JobSettings agent = job_settings(options, end, 10000, now, false);
  EXPECT_FALSE(agent.round.drain_at);
  EXPECT_FALSE(agent.summaries);  // the head prints the start line
  EXPECT_TRUE(agent.tables);      // its node's table, relayed
}

TEST(JobSettings, QuietPrintsNeitherSummaryNorTable) {
  Options options;
  options.quiet = true;
  options.stacks = false;
  const JobSettings settings = job_settings(options, std::nullopt, 0, RunnerClock::now(), true);
  EXPECT_FALSE(settings.summaries);
  EXPECT_FALSE(settings.tables);
  EXPECT_FALSE(settings.round.capture_stacks);
  EXPECT_TRUE(settings.colour);
}

}  // namespace
}  // namespace ddprun
