// The worker's side of the membership file: which group a process joins, when survivors may
// join the next one, and waiting for a version that another process renames in place.
#include "ddprun/worker/membership.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ddprun/worker/errors.h"

namespace ddprun::worker {
namespace {

using State = Membership::State;

Membership two_ranks(State one, pid_t one_pid, int recoveries) {
  Membership m;
  m.version = 1 + recoveries;
  m.recoveries = recoveries;
  m.ranks = {{0, State::kRunning, 100}, {1, one, one_pid}};
  return m;
}

TEST(GroupGeneration, AFirstProcessJoinsGroupZeroAReplacementTheRecoverysGroup) {
  EXPECT_EQ(group_generation(two_ranks(State::kRunning, 101, 0), 1, 101), 0);
  EXPECT_EQ(group_generation(two_ranks(State::kReplaced, 202, 1), 1, 202), 1);
  EXPECT_EQ(group_generation(two_ranks(State::kReplaced, 303, 2), 1, 303), 2);
}

TEST(GroupGeneration, NotYetWhileTheFileDoesNotNameThisProcessOrARankIsLost) {
  // The replacement runs before ddprun has written its pid.
  EXPECT_FALSE(group_generation(two_ranks(State::kLost, 101, 0), 1, 202).has_value());
  // Its own entry is there, but another rank was lost since and is not yet replaced.
  Membership m = two_ranks(State::kReplaced, 202, 1);
  m.ranks[0].state = State::kLost;
  EXPECT_FALSE(group_generation(m, 1, 202).has_value());
  EXPECT_FALSE(group_generation(m, 7, 202).has_value());
}

TEST(ReplacementsRunning, OnlyAfterARecoveryAndWithNoRankLost) {
  EXPECT_FALSE(replacements_running(two_ranks(State::kRunning, 101, 0), 0));
  EXPECT_FALSE(replacements_running(two_ranks(State::kLost, 101, 0), 0));
  EXPECT_TRUE(replacements_running(two_ranks(State::kReplaced, 202, 1), 0));
  EXPECT_FALSE(replacements_running(two_ranks(State::kReplaced, 202, 1), 1));
  Membership m = two_ranks(State::kReplaced, 202, 2);
  m.ranks[0].state = State::kLost;
  EXPECT_FALSE(replacements_running(m, 1));
  m.ranks[0].state = State::kDone;
  EXPECT_TRUE(replacements_running(m, 1));
}

class MembershipFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/ddprun-membership-XXXXXX";
    ASSERT_NE(mkdtemp(name), nullptr);
    dir_ = name;
    path_ = dir_ + "/membership.json";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // As ddprun writes it: a new file renamed over the old one.
  void publish(const Membership& m) const {
    const std::string tmp = path_ + ".tmp";
    std::ofstream(tmp) << format_membership(m);
    ASSERT_EQ(std::rename(tmp.c_str(), path_.c_str()), 0);
  }
  std::string dir_, path_;
};

TEST_F(MembershipFolder, NoFileYetIsNoMembershipAndAStrangersFileAnError) {
  EXPECT_FALSE(read_membership(path_).has_value());
  std::ofstream(path_) << "{\"version\": 1}";
  EXPECT_THROW(read_membership(path_), EnvError);
}

TEST_F(MembershipFolder, AWaitEndsWithTheVersionThatIsReady) {
  publish(two_ranks(State::kLost, 101, 0));
  const auto ready = [](const Membership& m) { return replacements_running(m, 0); };
  std::thread writer([&] {
    // The waiter sees version 1 first, whatever the order: it is already there.
    publish(two_ranks(State::kReplaced, 202, 1));
  });
  const Membership got = wait_for_membership(path_, ready, std::chrono::seconds(20));
  writer.join();
  EXPECT_EQ(got.recoveries, 1);
  EXPECT_EQ(got.ranks[1].pid, 202);
}

TEST_F(MembershipFolder, AWaitEndsWithAnErrorAfterItsTimeoutOrWhatGiveUpThrows) {
  publish(two_ranks(State::kLost, 101, 0));
  const auto ready = [](const Membership& m) { return replacements_running(m, 0); };
  EXPECT_THROW(wait_for_membership(path_, ready, std::chrono::milliseconds(50)), EnvError);
  int asked = 0;
  const auto give_up = [&] {
    if (++asked == 2) throw CollectiveError("stopping");
  };
  EXPECT_THROW(wait_for_membership(path_, ready, std::chrono::seconds(20), give_up,
                                   std::chrono::milliseconds(1)),
               CollectiveError);
  EXPECT_EQ(asked, 2);
}

}  // namespace
}  // namespace ddprun::worker
