// The environment contract end to end, without processes: for every rank of a 3-node
// plan, the variables the launcher sets (rank_environment) read back in the worker
// library (read_worker_env) as the same placement, master, run and error file.
#include <gtest/gtest.h>

#include "ddprun/worker/env.h"
#include "job/job_inputs.h"
#include "plan/plan.h"
#include "plan/rank_environment.h"

namespace ddprun {
namespace {

TEST(ContractRoundTrip, EveryRankReadsBackThePlacementThePlanGaveIt) {
  PlanInputs inputs;
  inputs.host = HostFacts{"b", 8, 0};
  inputs.cluster = Cluster{"hostfile", "", {{"a", 2}, {"b", 3}, {"c", 1}}, 1, {}};
  inputs.run_id = "job42";
  inputs.master_addr = "10.0.0.1";
  inputs.master_port = 29511;
  inputs.restart_count = 2;
  inputs.scratch_dir = "/tmp/s";
  Options options;
  options.nproc_per_node = "auto";
  options.max_restarts = 3;
  options.program = {"./w"};
  const LaunchPlan plan = build_plan(plan_options(options), inputs, {});
  ASSERT_EQ(plan.world_size, 6);
  for (const RankPlan& rank : plan.ranks) {
    Environment env = {{"PATH", "/bin"}};
    for (const auto& [name, value] : rank_environment(plan, rank)) env[name] = value;
    const worker::WorkerEnv read = worker::read_worker_env(env);
    SCOPED_TRACE("rank " + std::to_string(rank.rank));
    EXPECT_FALSE(read.standalone);
    EXPECT_EQ(read.rank, rank.rank);
    EXPECT_EQ(read.local_rank, rank.local_rank);
    EXPECT_EQ(read.world_size, 6);
    EXPECT_EQ(read.local_world_size, plan.nodes[static_cast<std::size_t>(rank.node_rank)].nproc);
    EXPECT_EQ(read.group_rank, rank.node_rank);
    EXPECT_EQ(read.master_addr, "10.0.0.1");
    EXPECT_EQ(read.master_port, 29511);
    EXPECT_EQ(read.run_id, "job42");
    EXPECT_EQ(read.restart_count, 2);
    EXPECT_EQ(read.error_file, rank_file(plan, rank.rank, RankFile::kErrorFile));
    const int nproc = plan.nodes[static_cast<std::size_t>(rank.node_rank)].nproc;
    EXPECT_EQ(read.threads_per_rank, 8 / nproc);
    EXPECT_EQ(read.omp_num_threads, nproc > 1 ? std::optional<int>(1) : std::nullopt);
  }
}

}  // namespace
}  // namespace ddprun
