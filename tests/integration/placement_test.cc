// --numa-binding and --cpu-bind for real: each worker reads its own affinity mask from
// /proc/self/status; ddprun's inherited mask is set on this test's thread before ddprun
// starts (a child inherits it, as from taskset or Slurm's --cpu-bind).
#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "launcher_harness.h"
#include "topology_shapes.h"

namespace ddprun::testing {
namespace {

const std::string kShowMask =
    "grep Cpus_allowed_list /proc/self/status; echo OMP=$OMP_NUM_THREADS; echo "
    "SHARERS=$DDPRUN_CPU_SHARERS";

// The CPUs this process may run on.
std::vector<int> own_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(static_cast<std::size_t>(cpu), &set)) cpus.push_back(cpu);
  }
  return cpus;
}

// Restricts this thread (and so the ddprun it starts) to `cpus` until destroyed.
class AffinityScope {
 public:
  explicit AffinityScope(const std::vector<int>& cpus) {
    CPU_ZERO(&saved_);
    ::sched_getaffinity(0, sizeof saved_, &saved_);
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : cpus) CPU_SET(static_cast<std::size_t>(cpu), &set);
    EXPECT_EQ(::sched_setaffinity(0, sizeof set, &set), 0);
  }
  ~AffinityScope() { ::sched_setaffinity(0, sizeof saved_, &saved_); }
  AffinityScope(const AffinityScope&) = delete;
  AffinityScope& operator=(const AffinityScope&) = delete;

 private:
  cpu_set_t saved_;
};

// rank -> its Cpus_allowed_list and OMP_NUM_THREADS, from "[host:R] ..." lines.
std::map<int, std::pair<std::string, std::string>> masks_by_rank(const std::string& out) {
  std::map<int, std::pair<std::string, std::string>> masks;
  const std::regex mask_line(R"(\[[^:\]]+:(\d+)\] Cpus_allowed_list:\s*(\S+))");
  const std::regex omp_line(R"(\[[^:\]]+:(\d+)\] OMP=(\S*))");
  for (const auto& line : split_lines(out)) {
    std::smatch match;
    if (std::regex_search(line, match, mask_line)) masks[std::stoi(match[1])].first = match[2];
    if (std::regex_search(line, match, omp_line)) masks[std::stoi(match[1])].second = match[2];
  }
  return masks;
}

class Placement : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name :
         {"OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS",
          "SGE_HGR_gpu", "HWLOC_XMLFILE", "CUDA_DEVICE_ORDER"}) {
      ::unsetenv(name);
    }
  }
};

TEST_F(Placement, ExclusiveGivesTwoWorkersOneCpuEachInTheirOwnMask) {
  const auto cpus = own_cpus();
  if (unavailable(cpus.size() < 2, "this machine gives the test fewer than 2 CPUs")) GTEST_SKIP();
  // Exactly two CPUs, as on the 2-CPU machines this must hold on.
  AffinityScope two({cpus[0], cpus[1]});
  const auto done = run_ddprun({"--numa-binding", "exclusive", "--nproc-per-node", "2",
                                "--tag-output", "sh", "-c", kShowMask});
  ASSERT_EQ(done.exit_code, 0) << done.err << done.out;
  const auto masks = masks_by_rank(done.out);
  ASSERT_EQ(masks.size(), 2u) << done.out;
  EXPECT_EQ(masks.at(0).first, std::to_string(cpus[0]));
  EXPECT_EQ(masks.at(1).first, std::to_string(cpus[1]));
  EXPECT_EQ(masks.at(0).second, "1") << "OMP_NUM_THREADS: one per core";
  EXPECT_NE(done.out.find("] SHARERS=1\n"), std::string::npos) << "each CPU its rank's own";
  // The start block (on stderr) shows it.
  EXPECT_NE(done.err.find("ddprun: --numa-binding exclusive on "), std::string::npos) << done.err;
  EXPECT_NE(done.err.find("rank 1: CPUs " + std::to_string(cpus[1]) + " (1 core)"),
            std::string::npos)
      << done.err;
}

TEST_F(Placement, InheritedMaskIsNeverLeft) {
  const auto cpus = own_cpus();
  ASSERT_FALSE(cpus.empty());
  AffinityScope one({cpus.back()});
  const std::string mask = std::to_string(cpus.back());
  for (const char* bind : {"--cpu-bind", "--numa-binding"}) {
    const std::string mode = std::string(bind) == "--cpu-bind" ? "cores" : "node";
    const auto done =
        run_ddprun({bind, mode, "--nproc-per-node", "1", "--tag-output", "sh", "-c", kShowMask});
    ASSERT_EQ(done.exit_code, 0) << done.err;
    EXPECT_EQ(masks_by_rank(done.out).at(0).first, mask) << bind;
  }
  // Unbound, a worker keeps what ddprun inherited.
  const auto unbound = run_ddprun({"--nproc-per-node", "2", "--tag-output", "sh", "-c", kShowMask});
  ASSERT_EQ(unbound.exit_code, 0) << unbound.err;
  EXPECT_EQ(masks_by_rank(unbound.out).at(1).first, mask);
  // Two ranks cannot each have a core of one: one clear error, nothing started.
  const auto refused = run_ddprun(
      {"--numa-binding", "exclusive", "--nproc-per-node", "2", "sh", "-c", "echo started"});
  EXPECT_EQ(refused.exit_code, 125);
  EXPECT_EQ(refused.out.find("started"), std::string::npos);
  EXPECT_NE(refused.err.find("ddprun: error: --numa-binding exclusive: 2 ranks share NUMA node"),
            std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("which has 1 CPU(s) this job may use (CPUs " + mask + ")"),
            std::string::npos)
      << refused.err;
}

TEST_F(Placement, UserThreadCountIsKept) {
  const auto done = run_ddprun(
      {"--cpu-bind", "cores", "--nproc-per-node", "1", "--tag-output", "sh", "-c", kShowMask},
      {"OMP_NUM_THREADS=7"});
  ASSERT_EQ(done.exit_code, 0) << done.err;
  EXPECT_EQ(masks_by_rank(done.out).at(0).second, "7");
}

// A saved topology (hwloc reads HWLOC_XMLFILE): the dry run shows each rank's place on a
// 2-socket 8-GPU node, with CUDA_VISIBLE_DEVICES shuffled and given as UUIDs.
TEST_F(Placement, DryRunOnASavedEightGpuTopology) {
  TempDir dir;
  const std::string xml = dir.path() + "/node.xml";
  std::ofstream(xml) << shape_xml(two_socket_8gpu());
  const auto done = run_ddprun(
      {"--numa-binding", "node", "--nproc-per-node", "gpu", "--dry-run", "--format", "json", "w"},
      {"HWLOC_XMLFILE=" + xml,
       "CUDA_VISIBLE_DEVICES=5,GPU-00000001-aaaa-bbbb-cccc-000000000001,7,2"});
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const auto doc = nlohmann::json::parse(done.out);
  EXPECT_EQ(doc["binding"], "--numa-binding node");
  const auto& ranks = doc["ranks"];
  ASSERT_EQ(ranks.size(), 4u);
  EXPECT_EQ(ranks[0]["placement"]["cpus"], "16-31,48-63");
  EXPECT_EQ(ranks[0]["placement"]["gpus"][0], "0000:23:00.0");
  EXPECT_EQ(ranks[0]["placement"]["nic"], "mlx5_2");
  EXPECT_EQ(ranks[1]["placement"]["cpus"], "0-15,32-47");
  EXPECT_EQ(ranks[1]["placement"]["numa_nodes"][0], 0);
  EXPECT_EQ(ranks[2]["placement"]["nic"], "mlx5_3");
  EXPECT_EQ(ranks[3]["placement"]["nic"], "mlx5_1");
  EXPECT_EQ(ranks[3]["env"]["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
  EXPECT_EQ(ranks[3]["env"]["OMP_NUM_THREADS"], "16");
}

}  // namespace
}  // namespace ddprun::testing
