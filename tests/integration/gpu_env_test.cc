// ddprun started for real in synthetic GPU environments (no GPU needed): each worker is
// env(1), which prints the environment ddprun gave it.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "launcher_harness.h"

namespace ddprun::testing {
namespace {

// What the machine running the tests may have set; each test sets its own.
class GpuEnvironment : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name :
         {"CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE",
          "SGE_HGR_gpu", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "LOCAL_RANK", "DDPRUN_DEVICES",
          "PET_NPROC_PER_NODE"}) {
      ::unsetenv(name);
    }
  }
};

std::string value_of(const std::map<std::string, std::string>& env, const std::string& key) {
  const auto it = env.find(key);
  return it == env.end() ? "<unset>" : it->second;
}

TEST_F(GpuEnvironment, VirtualLocalRankGivesEachWorkerItsOwnUuid) {
  const auto done =
      run_ddprun({"--nproc-per-node", "gpu", "--virtual-local-rank", "--tag-output", "env"},
                 {"CUDA_VISIBLE_DEVICES=GPU-uuid-a,GPU-uuid-b"});
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const auto ranks = env_by_rank(done.out);
  ASSERT_EQ(ranks.size(), 2u) << done.out;
  EXPECT_EQ(value_of(ranks.at(0), "CUDA_VISIBLE_DEVICES"), "GPU-uuid-a");
  EXPECT_EQ(value_of(ranks.at(1), "CUDA_VISIBLE_DEVICES"), "GPU-uuid-b");
  for (const auto& [rank, env] : ranks) {
    EXPECT_EQ(value_of(env, "LOCAL_RANK"), "0") << rank;
    EXPECT_EQ(value_of(env, "DDPRUN_DEVICES"), "0") << rank;
    EXPECT_EQ(value_of(env, "LOCAL_WORLD_SIZE"), "2") << rank;
  }
}

TEST_F(GpuEnvironment, GpusPerProcHandsOutBlocksAndLeavesTheOuterListAlone) {
  const auto done =
      run_ddprun({"--gpus-per-proc", "2", "--tag-output", "env"}, {"CUDA_VISIBLE_DEVICES=0,1,2,3"});
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const auto ranks = env_by_rank(done.out);
  ASSERT_EQ(ranks.size(), 2u) << done.out;
  EXPECT_EQ(value_of(ranks.at(0), "DDPRUN_DEVICES"), "0,1");
  EXPECT_EQ(value_of(ranks.at(1), "DDPRUN_DEVICES"), "2,3");
  EXPECT_EQ(value_of(ranks.at(1), "LOCAL_RANK"), "1");
  EXPECT_EQ(value_of(ranks.at(1), "CUDA_VISIBLE_DEVICES"), "0,1,2,3");
}

TEST_F(GpuEnvironment, SlurmsJobGpusCountWhenCudaVisibleDevicesIsUnset) {
  const auto done = run_ddprun({"--scheduler", "local", "--nproc-per-node", "gpu",
                                "--virtual-local-rank", "--tag-output", "env"},
                               {"SLURM_JOB_GPUS=5,7,9"});
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const auto ranks = env_by_rank(done.out);
  ASSERT_EQ(ranks.size(), 3u) << done.out;
  EXPECT_EQ(value_of(ranks.at(2), "CUDA_VISIBLE_DEVICES"), "2");
}

TEST_F(GpuEnvironment, TheUsersSocketInterfaceIsNeverReplaced) {
  const auto done = run_ddprun({"--nproc-per-node", "1", "--tag-output", "env"},
                               {"NCCL_SOCKET_IFNAME=^docker,lo"});
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const auto ranks = env_by_rank(done.out);
  ASSERT_EQ(ranks.size(), 1u) << done.out;
  EXPECT_EQ(value_of(ranks.at(0), "NCCL_SOCKET_IFNAME"), "^docker,lo");
  EXPECT_EQ(value_of(ranks.at(0), "GLOO_SOCKET_IFNAME"), "<unset>");
}

TEST_F(GpuEnvironment, DryRunJsonShowsEachRanksDevices) {
  const auto done = run_ddprun(
      {"--gpus-per-proc", "2", "--virtual-local-rank", "--dry-run", "--format", "json", "env"},
      {"CUDA_VISIBLE_DEVICES=MIG-a,MIG-b,MIG-c,MIG-d"});
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const auto doc = nlohmann::json::parse(done.out);
  EXPECT_EQ(doc["gpus"]["per_rank"], 2);
  ASSERT_EQ(doc["ranks"].size(), 2u);
  EXPECT_EQ(doc["ranks"][1]["devices"], nlohmann::json({"MIG-c", "MIG-d"}));
  EXPECT_EQ(doc["ranks"][1]["env"]["CUDA_VISIBLE_DEVICES"], "MIG-c,MIG-d");
  EXPECT_EQ(doc["ranks"][1]["env"]["DDPRUN_DEVICES"], "0,1");
}

TEST_F(GpuEnvironment, GpusThatDoNotDivideEndInOneLine) {
  const auto done = run_ddprun({"--gpus-per-proc", "3", "env"}, {"CUDA_VISIBLE_DEVICES=0,1,2,3"});
  EXPECT_EQ(done.exit_code, 125);
  EXPECT_EQ(std::regex_replace(done.err, std::regex(R"(: [^ ]+ has)"), ": HOST has"),
            "ddprun: error: --gpus-per-proc 3: HOST has 4 visible GPUs, not a multiple of 3 (give "
            "a K that divides every node's GPUs, or a number of workers with --nproc-per-node)\n");
  EXPECT_EQ(done.out, "");
}

}  // namespace
}  // namespace ddprun::testing
