// A spare node takes the place of a remote node that failed a round; nothing else moves.
#include "job/round_setup.h"

#include "run/restart_policy.h"

#include <gtest/gtest.h>

namespace ddprun {
namespace {

RoundState four_nodes_one_short_spare_one_spare() {
  RoundState state;
  state.nodes = {{"n1", 8}, {"n2", 8}, {"n3", 8}};
  state.spare_nodes = {{"s1", 4}, {"s2", 8}};
  return state;
}

RoundResult failed_first(bool agent, int node_rank) {
  RoundResult result;
  result.outcome = Outcome::kWorkerFailed;
  RankResult& rank = result.ranks.emplace_back();
  rank.agent = agent;
  rank.node_rank = node_rank;
  result.first_failure = 0;
  return result;
}

TEST(SpareNodes, TheFirstSpareWithAsManySlotsTakesTheFailedNodesPlace) {
  RoundState inputs = four_nodes_one_short_spare_one_spare();
  EXPECT_EQ(replace_failed_node(inputs, 0, failed_first(true, 2)),
            "ddprun: leaving n3 out: node 2 failed first; the spare node s2 takes its place (1 "
            "spare(s) left)\n");
  EXPECT_EQ(inputs.nodes[2].host, "s2");
  EXPECT_EQ(inputs.nodes[1].host, "n2");
  ASSERT_EQ(inputs.spare_nodes.size(), 1u);
  EXPECT_EQ(inputs.spare_nodes[0].host, "s1");
  // s1 has fewer slots: it cannot stand in for an 8-slot node.
  EXPECT_EQ(replace_failed_node(inputs, 0, failed_first(true, 1)), "");
  EXPECT_EQ(inputs.nodes[1].host, "n2");
}

TEST(SpareNodes, NoNodeToBlameMeansNoReplacement) {
  for (const auto& previous : {failed_first(false, 0),    // a worker of the head's own node
                               failed_first(true, -1),    // srun or mpirun: all nodes at once
                               failed_first(true, 0)}) {  // the head's node
    RoundState inputs = four_nodes_one_short_spare_one_spare();
    EXPECT_EQ(replace_failed_node(inputs, 0, previous), "");
    EXPECT_EQ(inputs.nodes[0].host, "n1");
    EXPECT_EQ(inputs.spare_nodes.size(), 2u);
  }
  RoundState no_spares = four_nodes_one_short_spare_one_spare();
  no_spares.spare_nodes.clear();
  EXPECT_EQ(replace_failed_node(no_spares, 0, failed_first(true, 2)), "");
  RoundResult succeeded;
  RoundState inputs = four_nodes_one_short_spare_one_spare();
  EXPECT_EQ(replace_failed_node(inputs, 0, succeeded), "");
}

// The ssh tree: node 1's agent starts node 2's; a rank on node 2 fails, so node 1's agent
// is the head's first failure, but its last line names node 2, which is the one replaced.
TEST(SpareNodes, AMidTreeAgentsFailureReplacesTheNodeItNamesNotItself) {
  RoundState inputs = four_nodes_one_short_spare_one_spare();
  RoundResult previous = failed_first(true, 1);
  previous.ranks[0].stderr_tail = {"[n3:17] Traceback (most recent call last):",
                                   "ddprun: node 2 failed first"};
  EXPECT_EQ(first_failed_node_line(2), previous.ranks[0].stderr_tail[1] + "\n");
  EXPECT_EQ(first_failed_node(previous), 2);
  EXPECT_EQ(replace_failed_node(inputs, 0, previous),
            "ddprun: leaving n3 out: node 2 failed first; the spare node s2 takes its place (1 "
            "spare(s) left)\n");
  EXPECT_EQ(inputs.nodes[1].host, "n2");  // node 1 itself was healthy
  // Without the line (an older agent, or a lost connection) the agent's own node is blamed.
  RoundResult silent = failed_first(true, 1);
  silent.ranks[0].stderr_tail = {"[n2:9] ddprun: node x failed first"};
  EXPECT_EQ(first_failed_node(silent), 1);
}

}  // namespace
}  // namespace ddprun
