#include "job/preflight.h"
#include "temp_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

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
  NodeCheck check;
  check.node_rank = node_rank;
  check.hostname = "n" + std::to_string(node_rank + 1);
  check.master_addresses = {"10.0.0.1"};
  check.master_reachable = true;
  check.program = "/bin/w";
  check.unix_time = 1000;
  check.gpus = 1;
  check.shm_free_mb = 4096;
  check.paths = {{"/ckpt", true, 50000, ""}};
  return check;
}

PreflightExpect asked_at_1000() {
  PreflightExpect expect;
  expect.asked_at = 1000;
  expect.answered_by = 1001;
  expect.gpus_per_worker = 1;
  expect.workers_from_gpus = true;
  return expect;
}

TEST(Preflight, CheckLinesRoundTripAndOtherLinesAreIgnored) {
  NodeCheck check = good(2);
  check.master_addresses = {"10.0.0.1", "fd00::1"};
  check.master_reachable = false;
  check.program = "";
  check.program_error = "w: not found";
  check.paths.push_back({"/data", false, -1, "/data: Permission denied"});
  const std::string line = node_check_line(check);
  const auto parsed = parse_node_check(line.substr(0, line.size() - 1));
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->node_rank, 2);
  EXPECT_EQ(parsed->master_addresses, check.master_addresses);
  EXPECT_FALSE(parsed->master_reachable);
  EXPECT_EQ(parsed->program_error, "w: not found");
  EXPECT_EQ(parsed->unix_time, 1000);
  EXPECT_EQ(parsed->gpus, 1);
  EXPECT_EQ(parsed->shm_free_mb, 4096);
  ASSERT_EQ(parsed->paths.size(), 2u);
  EXPECT_EQ(parsed->paths[1].path, "/data");
  EXPECT_FALSE(parsed->paths[1].writable);
  EXPECT_EQ(parsed->paths[1].error, "/data: Permission denied");
  EXPECT_EQ(parsed->paths[0].free_mb, 50000);
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

TEST(Preflight, ANodeWhoseTopologyDiffersIsNamedWithItsPlacement) {
  const std::string usual =
      "2 packages, 2 NUMA nodes, 32 cores, 64 CPUs (64 allowed), 8 GPUs, 4 NICs";
  NodeCheck first = good(0);
  first.topology = usual;
  first.placement = {"CPUs 0-15,32-47 (16 cores), NUMA 0, GPU 0000:02:00.0, NIC mlx5_0"};
  NodeCheck odd = good(1);
  odd.topology = "2 packages, 2 NUMA nodes, 32 cores, 64 CPUs (48 allowed), 8 GPUs, 4 NICs";
  NodeCheck third = good(2);
  third.topology = usual;
  // The round trip keeps both.
  const auto parsed = parse_node_check(node_check_line(first));
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->topology, usual);
  EXPECT_EQ(parsed->placement, first.placement);
  const auto summary = format_preflight(three_nodes(), {{first, ""}, {odd, ""}, {third, ""}});
  EXPECT_FALSE(summary.ok);
  EXPECT_NE(summary.text.find("node 1 (n2): its topology differs from the others': 2 packages, 2 "
                              "NUMA nodes, 32 cores, 64 CPUs (48 allowed)"),
            std::string::npos)
      << summary.text;
  EXPECT_EQ(summary.text.find("node 0 (n1): its topology"), std::string::npos);
  EXPECT_NE(
      summary.text.find(
          "        rank 0: CPUs 0-15,32-47 (16 cores), NUMA 0, GPU 0000:02:00.0, NIC mlx5_0\n"),
      std::string::npos)
      << summary.text;
  third.topology = usual;
  EXPECT_TRUE(format_preflight(three_nodes(), {{first, ""}, {third, ""}, {third, ""}}).ok);
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

TEST(Preflight, ClocksGpusSharedMemoryAndPathsAreCheckedPerNode) {
  EXPECT_TRUE(format_preflight(three_nodes(), {{good(0), ""}, {good(1), ""}, {good(2), ""}},
                               asked_at_1000())
                  .ok);
  NodeCheck late = good(0);
  late.unix_time = 940;
  NodeCheck odd = good(1);
  odd.gpus = 0;
  odd.shm_free_mb = 12;
  NodeCheck full = good(2);
  full.unix_time = 1010;
  full.paths = {{"/ckpt", true, 100, ""}, {"/logs", false, -1, "/: Read-only file system"}};
  const auto summary =
      format_preflight(three_nodes(), {{late, ""}, {odd, ""}, {full, ""}}, asked_at_1000());
  EXPECT_FALSE(summary.ok);
  for (const char* expected :
       {"node 0 (n1): its clock is 60 s behind this node's",
        "node 2 (n3): its clock is 9 s ahead of this node's",
        "node 1 (n2): sees 0 GPU(s), the plan gives it 1 workers, one per GPU",
        "node 1 (n2): /dev/shm has 12 MB free", "node 2 (n3): /ckpt has only 100 MB free",
        "node 2 (n3): /logs cannot be written: /: Read-only file system"}) {
    EXPECT_NE(summary.text.find(expected), std::string::npos) << expected << "\n" << summary.text;
  }
}

// --gpus-per-proc 2: a node of one worker must see 2 GPUs (workers from the GPUs), or at
// least 2 when the worker count was given.
TEST(Preflight, WithSeveralGpusPerWorkerEachNodeMustSeeWorkersTimesThat) {
  PreflightExpect expect = asked_at_1000();
  expect.gpus_per_worker = 2;
  NodeCheck two = good(0), one = good(1), three = good(2);
  two.gpus = 2;
  one.gpus = 1;
  three.gpus = 3;
  auto summary = format_preflight(three_nodes(), {{two, ""}, {one, ""}, {three, ""}}, expect);
  EXPECT_FALSE(summary.ok);
  EXPECT_EQ(summary.text.find("node 0 (n1): sees"), std::string::npos) << summary.text;
  EXPECT_NE(
      summary.text.find("node 1 (n2): sees 1 GPU(s), the plan gives it 1 workers, 2 GPUs each"),
      std::string::npos)
      << summary.text;
  EXPECT_NE(summary.text.find("node 2 (n3): sees 3 GPU(s)"), std::string::npos) << summary.text;
  expect.workers_from_gpus = false;  // --nproc-per-node 1 --gpus-per-proc 2: 3 GPUs are enough
  summary = format_preflight(three_nodes(), {{two, ""}, {one, ""}, {three, ""}}, expect);
  EXPECT_EQ(summary.text.find("node 2 (n3): sees"), std::string::npos) << summary.text;
  EXPECT_NE(summary.text.find("node 1 (n2): sees 1 GPU(s)"), std::string::npos) << summary.text;
}

// --bandwidth: each node's link to the next is shown, the slowest named, one far slower
// than the median link is a problem, and so is one that could not be measured; one fast
// link does not make the ordinary ones slow.
TEST(Preflight, LinksAreShownTheSlowestNamedAndAFarSlowerOneIsAProblem) {
  NodeCheck a = good(0), b = good(1), c = good(2);
  a.link_to = "node 1 (n2)";
  a.link_mb_s = 1100;
  b.link_to = "node 2 (n3)";
  b.link_mb_s = 1000;
  c.link_to = "node 0 (n1)";
  c.link_mb_s = 900;
  const auto line = node_check_line(c);
  const auto parsed = parse_node_check(line);
  ASSERT_TRUE(parsed) << line;
  EXPECT_EQ(parsed->link_to, "node 0 (n1)");
  EXPECT_EQ(parsed->link_mb_s, 900);
  auto summary = format_preflight(three_nodes(), {{a, ""}, {b, ""}, {c, ""}}, asked_at_1000());
  EXPECT_TRUE(summary.ok) << summary.text;
  EXPECT_NE(summary.text.find("link to node 1 (n2): 1100 MB/s"), std::string::npos) << summary.text;
  EXPECT_NE(summary.text.find("ddprun: preflight: links 900 MB/s to 1100 MB/s; the slowest: "
                              "node 2 (n3) to node 0 (n1)"),
            std::string::npos)
      << summary.text;
  a.link_mb_s = 2191;  // as measured once on 2 shared cores, the others 1260 and 1071
  b.link_mb_s = 1260;
  c.link_mb_s = 1071;
  summary = format_preflight(three_nodes(), {{a, ""}, {b, ""}, {c, ""}}, asked_at_1000());
  EXPECT_TRUE(summary.ok) << summary.text;
  a.link_mb_s = 1100;
  b.link_mb_s = 300;
  c.link_error = "no connection to n1:29501";
  summary = format_preflight(three_nodes(), {{a, ""}, {b, ""}, {c, ""}}, asked_at_1000());
  EXPECT_FALSE(summary.ok);
  for (const char* expected :
       {"node 1 (n2): its link to node 2 (n3) carries 300 MB/s, the median link 1100 MB/s",
        "node 2 (n3): its link to node 0 (n1) could not be measured: no connection to n1:29501",
        "link to node 0 (n1): NOT measured"}) {
    EXPECT_NE(summary.text.find(expected), std::string::npos) << expected << "\n" << summary.text;
  }
}

TEST(Preflight, APathIsCheckedThroughItsNearestExistingFolder) {
  const support::TempDir temp;
  const std::string dir = temp.path();
  const PathCheck fresh = check_path(dir + "/not/yet/made");
  EXPECT_TRUE(fresh.writable) << fresh.error;
  EXPECT_GT(fresh.free_mb, 0);
  ::chmod(dir.c_str(), 0500);
  const PathCheck locked = check_path(dir + "/sub");
  if (::geteuid() != 0) {  // root writes anywhere
    EXPECT_FALSE(locked.writable);
    EXPECT_NE(locked.error.find(dir), std::string::npos) << locked.error;
  }
  ::chmod(dir.c_str(), 0700);
  ::rmdir(dir.c_str());
  const PathCheck proc = check_path("/proc/ddprun-preflight");
  EXPECT_FALSE(proc.writable);  // even root cannot make folders in /proc
  EXPECT_NE(proc.error.find("/proc"), std::string::npos) << proc.error;
}

}  // namespace
}  // namespace ddprun
