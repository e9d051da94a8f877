#include "ddprun/contract/environment.h"

#include <gtest/gtest.h>

namespace ddprun {
namespace {

TEST(Environment, SnapshotSplitsAtTheFirstEqualsAndKeepsTheFirstOfARepeatedName) {
  const char* envp[] = {"A=1", "B=x=y", "EMPTY=", "NOEQUALS", "A=2", nullptr};
  const Environment env = snapshot_environment(envp);
  EXPECT_EQ(env.size(), 3u);
  EXPECT_EQ(lookup(env, "A"), "1");
  EXPECT_EQ(lookup(env, "B"), "x=y");
  EXPECT_EQ(lookup(env, "EMPTY"), "");
  EXPECT_FALSE(lookup(env, "NOEQUALS").has_value());
  EXPECT_TRUE(snapshot_environment(nullptr).empty());
}

}  // namespace
}  // namespace ddprun
