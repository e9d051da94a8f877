#include "preflight.h"

#include <gtest/gtest.h>

namespace ddprun {
namespace {

LaunchPlan three_nodes() {
  LaunchPlan plan;
  plan.master_addr = "n1";
  plan.master_port = 29500;
  plan.nodes = {{"n1", 0, 1, 0}, {"n2", 1, 1, 1}, {"n3", 2, 1, 2}};
  return plan;
}

NodeCheck good(int node_rank) {
  return {node_rank, "n" + std::to_string(node_rank + 1), {"10.0.0.1"}, true, "/bin/w", ""};
}

TEST(Preflight, CheckLinesRoundTripAndOtherLinesAreIgnored) {
  const NodeCheck check = {2, "n3", {"10.0.0.1", "fd00::1"}, false, "", "w: not found"};
  const std::string line = node_check_line(check);
  const auto parsed = parse_node_check(line.substr(0, line.size() - 1));
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->node_rank, 2);
  EXPECT_EQ(parsed->master_addresses, check.master_addresses);
  EXPECT_FALSE(parsed->master_reachable);
  EXPECT_EQ(parsed->program_error, "w: not found");
  for (const char* other : {"", "hello", "{}", "{\"ddprun_check\":1}", "[1]"}) {
    EXPECT_FALSE(parse_node_check(other)) << other;
  }
}

TEST(Preflight, AllGoodIsOk) {
  const auto summary =
      format_preflight(three_nodes(), {{good(0), ""}, {good(1), ""}, {good(2), ""}});
  EXPECT_TRUE(summary.ok) << summary.text;
  EXPECT_NE(summary.text.find("every node is ready"), std::string::npos);
}

TEST(Preflight, NamesEachProblemAndItsNode) {
  NodeCheck differs = good(1);
  differs.master_addresses = {"127.0.1.1"};
  differs.master_reachable = false;
  const auto summary = format_preflight(
      three_nodes(), {{good(0), ""}, {differs, ""}, {std::nullopt, "exit code 255: no route"}});
  EXPECT_FALSE(summary.ok);
  EXPECT_NE(summary.text.find("node 1 (n2): master address n1 resolves to 127.0.1.1, not 10.0.0.1"),
            std::string::npos)
      << summary.text;
  EXPECT_NE(summary.text.find("node 1 (n2): cannot connect to n1:29500"), std::string::npos);
  EXPECT_NE(summary.text.find("node 2 (n3) did not answer: exit code 255: no route"),
            std::string::npos);
}

TEST(Preflight, MissingProgramIsAProblem) {
  NodeCheck missing = good(2);
  missing.program.clear();
  missing.program_error = "./w: no such file";
  const auto summary =
      format_preflight(three_nodes(), {{good(0), ""}, {good(1), ""}, {missing, ""}});
  EXPECT_FALSE(summary.ok);
  EXPECT_NE(summary.text.find("node 2 (n3): ./w: no such file"), std::string::npos);
}

}  // namespace
}  // namespace ddprun
