// The first-step watch: inotify on the progress files' folder, no polling; a file that
// holds no whole step yet is not a step, and the watch ends when every worker has one.
#include "run/first_steps.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <fstream>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace ddprun {
namespace {

void write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// Waits (without a timer of its own) until inotify has something, then hands it over.
bool readable_within(int fd, int ms) {
  pollfd wait{fd, POLLIN, 0};
  return ::poll(&wait, 1, ms) == 1;
}

TEST(FirstSteps, EachWorkersFirstStepIsSeenOnceAndTheWatchEndsWithTheLast) {
  const support::TempDir dir;
  const std::vector<std::string> files = {dir.path() + "/rank_0.progress", "",
                                          dir.path() + "/rank_1.progress"};
  const auto started = FirstSteps::Clock::now();
  FirstSteps steps(files, started, started);
  ASSERT_GE(steps.fd(), 0);
  write(files[0], "  ");  // written, no step yet
  ASSERT_TRUE(readable_within(steps.fd(), 5000));
  EXPECT_FALSE(steps.on_readable(started + std::chrono::milliseconds(100)));
  EXPECT_FALSE(steps.seconds()[0]);
  write(files[0], "12      ");
  write(dir.path() + "/unrelated", "5");
  ASSERT_TRUE(readable_within(steps.fd(), 5000));
  EXPECT_FALSE(steps.on_readable(started + std::chrono::milliseconds(1500)));
  ASSERT_TRUE(steps.seconds()[0]);
  EXPECT_DOUBLE_EQ(*steps.seconds()[0], 1.5);
  write(files[0], "13      ");  // later steps change nothing
  write(files[2], "1\n");
  ASSERT_TRUE(readable_within(steps.fd(), 5000));
  EXPECT_TRUE(steps.on_readable(started + std::chrono::milliseconds(2500)));
  EXPECT_DOUBLE_EQ(*steps.seconds()[0], 1.5);
  EXPECT_DOUBLE_EQ(*steps.seconds()[2], 2.5);
  EXPECT_FALSE(steps.seconds()[1]);  // an agent: no file
  EXPECT_LT(steps.fd(), 0);          // closed: nothing is left to watch
  EXPECT_EQ(format_first_steps(steps.seconds(), {0, -1, 1}, {"n0", "", "n1"}),
            "ddprun: first step on 2 ranks within 2.50 s of their start (the last: rank 1 "
            "(n1); the first: rank 0 (n0) at 1.50 s)\n");
}

// Armed a moment into the round: a step written before the watch counts as seen then, and
// when every rank has one already, no descriptor is kept.
TEST(FirstSteps, StepsWrittenBeforeTheWatchCountAtItsStart) {
  const support::TempDir dir;
  const std::vector<std::string> files = {dir.path() + "/rank_0.progress",
                                          dir.path() + "/rank_1.progress"};
  write(files[0], "3");
  const auto started = FirstSteps::Clock::now();
  FirstSteps partly(files, started, started + std::chrono::seconds(1));
  EXPECT_FALSE(partly.done());
  ASSERT_GE(partly.fd(), 0);
  ASSERT_TRUE(partly.seconds()[0]);
  EXPECT_DOUBLE_EQ(*partly.seconds()[0], 1.0);
  write(files[1], "3");
  FirstSteps all(files, started, started + std::chrono::seconds(1));
  EXPECT_TRUE(all.done());
  EXPECT_LT(all.fd(), 0);
}

TEST(FirstSteps, NoFileNoDescriptorAndNoStepNoLine) {
  FirstSteps none({"", ""}, FirstSteps::Clock::now(), FirstSteps::Clock::now());
  EXPECT_LT(none.fd(), 0);
  EXPECT_EQ(format_first_steps({std::nullopt, std::nullopt}, {0, 1}, {"a", "b"}), "");
  EXPECT_EQ(format_first_steps({0.25}, {3}, {"a"}),
            "ddprun: first step on rank 3 within 0.25 s of their start\n");
}

}  // namespace
}  // namespace ddprun
