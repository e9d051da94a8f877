// The job's clock (deadline.h): --deadline and --time-limit parsing, which source wins,
// and the start line. Time zone fixed to UTC for the local-time forms.
#include "plan/deadline.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <csignal>
#include <ctime>

#include "ddprun/contract/errors.h"

namespace ddprun {
namespace {

class DeadlineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* tz = std::getenv("TZ")) saved_ = tz;
    ::setenv("TZ", "UTC", 1);
    ::tzset();
  }
  void TearDown() override {
    if (saved_.empty()) {
      ::unsetenv("TZ");
    } else {
      ::setenv("TZ", saved_.c_str(), 1);
    }
    ::tzset();
  }
  std::string saved_;
};

TEST_F(DeadlineTest, DeadlinesAreUnixSecondsOrLocalTime) {
  EXPECT_EQ(parse_deadline("1795000000"), 1795000000);
  EXPECT_EQ(parse_deadline("2026-11-23T19:00"), 1795460400);
  EXPECT_EQ(parse_deadline("2026-11-23 19:00:30"), 1795460430);
  for (const char* bad : {"", "soon", "2026-11-23", "2026-11-23T19", "2026-02-31T00:00",
                          "2026-11-23T25:00", "2026-11-23T19:00:00Z", "-5", "12:00"}) {
    EXPECT_THROW(parse_deadline(bad), UsageError) << bad;
  }
}

TEST_F(DeadlineTest, DurationsAreSecondsOrSlurmsClockForms) {
  const std::pair<const char*, std::int64_t> good[] = {
      {"600", 600},           {"90.9", 90},          {"0", 0},
      {"10:00", 600},         {"1:30:00", 5400},     {"01:00:05", 3605},
      {"2-00:00:00", 172800}, {"1-01:00:00", 90000}, {"100:00:00", 360000}};
  for (const auto& [text, seconds] : good) {
    EXPECT_EQ(parse_duration("--time-limit", text), seconds) << text;
  }
  for (const char* bad :
       {"", "-5", "1:60", "1:2:3:4", "a:00", "1-10", "x-01:00:00", "5m", ":30", "1::0", "inf"}) {
    EXPECT_THROW(parse_duration("--time-limit", bad), UsageError) << bad;
  }
}

TEST_F(DeadlineTest, ADeadlineByHandWinsThenATimeLimitThenTheScheduler) {
  int asked = 0;
  const RunCommand run = [&](const std::vector<std::string>&) -> std::optional<std::string> {
    ++asked;
    return std::nullopt;
  };
  const auto by_hand = resolve_job_end(1795000000, std::nullopt, "slurm", "7", {}, run, 100);
  ASSERT_TRUE(by_hand);
  EXPECT_EQ(by_hand->unix_seconds, 1795000000);
  EXPECT_EQ(by_hand->source, "--deadline");
  const auto limit = resolve_job_end(std::nullopt, 3600, "slurm", "7", {}, run, 100);
  ASSERT_TRUE(limit);
  EXPECT_EQ(limit->unix_seconds, 3700);
  EXPECT_EQ(limit->source, "--time-limit");
  EXPECT_EQ(asked, 0);  // the scheduler is not asked when the user said
  EXPECT_FALSE(resolve_job_end(std::nullopt, std::nullopt, "local", "", {}, run, 100));
  EXPECT_EQ(asked, 0);  // no job: nothing to ask
}

TEST_F(DeadlineTest, TheStartLineSaysWhenAndWarnsWhenTooLittleIsLeft) {
  const JobEndTime end{1795460400, "squeue"};
  EXPECT_EQ(format_drain_line(end, 300, SIGUSR1, 1795450000),
            "ddprun: the job ends at 2026-11-23 19:00:00 (squeue); workers get SIGUSR1 at "
            "18:55:00, 300 s before\n");
  const std::string late = format_drain_line(end, 300, SIGUSR1, 1795460300);
  EXPECT_NE(late.find("workers get SIGUSR1 at 18:59:10, 50 s before\n"), std::string::npos) << late;
  EXPECT_NE(late.find("ddprun: warning: only 100 s are left, less than twice --drain-before "
                      "300: the notice comes when half of that has passed\n"),
            std::string::npos)
      << late;
}

TEST_F(DeadlineTest, TheNoticeNeverComesBeforeHalfOfWhatIsLeft) {
  EXPECT_EQ(drain_time(10000, 300, 0), 9700);       // plenty of time: 300 s before the end
  EXPECT_EQ(drain_time(10000, 300, 9500), 9750);    // 500 s left: after 250 s
  EXPECT_EQ(drain_time(10000, 300, 9999), 9999);    // a second left: at once
  EXPECT_EQ(drain_time(10000, 300, 10500), 10250);  // already past: at once
}

}  // namespace
}  // namespace ddprun
