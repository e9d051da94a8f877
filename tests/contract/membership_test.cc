// The membership file: what the launcher writes, the workers read back whole, and a part or
// a stranger's file is no membership at all.
#include "ddprun/contract/membership.h"

#include <gtest/gtest.h>

namespace ddprun {
namespace {

Membership three_ranks() {
  Membership m;
  m.version = 3;
  m.recoveries = 1;
  m.ranks = {{0, Membership::State::kRunning, 4101},
             {1, Membership::State::kReplaced, 4251},
             {2, Membership::State::kLost, 4103}};
  return m;
}

TEST(MembershipFile, WhatIsWrittenReadsBackTheSame) {
  const Membership written = three_ranks();
  const auto read = parse_membership(format_membership(written));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->version, 3);
  EXPECT_EQ(read->recoveries, 1);
  ASSERT_EQ(read->ranks.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(read->ranks[i].rank, written.ranks[i].rank);
    EXPECT_EQ(read->ranks[i].state, written.ranks[i].state);
    EXPECT_EQ(read->ranks[i].pid, written.ranks[i].pid);
  }
}

TEST(MembershipFile, EveryStateHasANameThatReadsBack) {
  for (const auto state : {Membership::State::kRunning, Membership::State::kLost,
                           Membership::State::kReplaced, Membership::State::kDone}) {
    Membership m;
    m.version = 1;
    m.ranks = {{0, state, 7}};
    const auto read = parse_membership(format_membership(m));
    ASSERT_TRUE(read.has_value()) << membership_state_name(state);
    EXPECT_EQ(read->ranks.at(0).state, state);
  }
}

TEST(MembershipFile, APartOrAnotherFileIsNoMembership) {
  const std::string whole = format_membership(three_ranks());
  for (std::size_t cut = 0; cut + 3 < whole.size(); cut += 7) {
    EXPECT_FALSE(parse_membership(whole.substr(0, cut)).has_value()) << cut;
  }
  EXPECT_FALSE(parse_membership("").has_value());
  EXPECT_FALSE(parse_membership("[]").has_value());
  EXPECT_FALSE(parse_membership(R"({"version": 0, "recoveries": 0, "ranks": []})").has_value());
  EXPECT_FALSE(parse_membership(R"({"version": 1, "recoveries": -1, "ranks": []})").has_value());
  // Ranks out of order, an unknown state, a pid that is text.
  EXPECT_FALSE(
      parse_membership(
          R"({"version": 1, "recoveries": 0, "ranks": [{"rank": 1, "state": "running", "pid": 5}]})")
          .has_value());
  EXPECT_FALSE(
      parse_membership(
          R"({"version": 1, "recoveries": 0, "ranks": [{"rank": 0, "state": "gone", "pid": 5}]})")
          .has_value());
  EXPECT_FALSE(
      parse_membership(
          R"({"version": 1, "recoveries": 0, "ranks": [{"rank": 0, "state": "done", "pid": "5"}]})")
          .has_value());
}

TEST(MembershipFile, OneNodesPartNamesAnyRanksInIncreasingOrder) {
  const auto part = parse_membership_part(
      R"({"version": 3, "recoveries": 1, "ranks": [{"rank": 2, "state": "running", "pid": 5},)"
      R"( {"rank": 3, "state": "replaced", "pid": 9}]})");
  ASSERT_TRUE(part.has_value());
  ASSERT_EQ(part->ranks.size(), 2U);
  EXPECT_EQ(part->ranks[1].rank, 3);
  EXPECT_EQ(part->ranks[1].state, Membership::State::kReplaced);
  EXPECT_EQ(part->recoveries, 1);
  // Not a whole file: rank 0 and 1 are missing.
  EXPECT_FALSE(parse_membership(format_membership(*part)).has_value());
  // Twice the same rank, ranks going down, a negative rank.
  for (const char* ranks :
       {R"([{"rank": 2, "state": "done", "pid": 5}, {"rank": 2, "state": "done", "pid": 6}])",
        R"([{"rank": 3, "state": "done", "pid": 5}, {"rank": 2, "state": "done", "pid": 6}])",
        R"([{"rank": -1, "state": "done", "pid": 5}])"}) {
    EXPECT_FALSE(parse_membership_part(std::string(R"({"version": 1, "recoveries": 0, "ranks": )") +
                                       ranks + "}")
                     .has_value())
        << ranks;
  }
}

}  // namespace
}  // namespace ddprun
