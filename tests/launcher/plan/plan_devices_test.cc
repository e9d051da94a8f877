// Which GPUs each rank gets: the default (every worker sees all, picks by LOCAL_RANK),
// --virtual-local-rank (CUDA_VISIBLE_DEVICES narrowed per rank), --gpus-per-proc K, and the
// network interface NCCL and gloo are pointed at. Synthetic GPU environments only.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "ddprun/contract/errors.h"
#include "job/job_inputs.h"
#include "plan/plan.h"
#include "plan/plan_format.h"
#include "plan/rank_environment.h"

namespace ddprun {
namespace {

PlanInputs inputs_with(const Environment& env, int device_files = 0) {
  PlanInputs inputs;
  inputs.host = HostFacts{"gpu-node", 32, device_files};
  inputs.cluster = local_cluster(inputs.host);
  inputs.run_id = "run1";
  inputs.master_addr = "127.0.0.1";
  inputs.master_port = 29500;
  inputs.scratch_dir = "/tmp/s";
  inputs.gpus = visible_gpus(env, device_files);
  inputs.visible_gpus = static_cast<int>(inputs.gpus.devices.size());
  return inputs;
}

Options options_with(const std::string& nproc) {
  Options options;
  options.nproc_per_node = nproc;
  options.program = {"./w"};
  return options;
}

std::map<std::string, std::string> env_of(const LaunchPlan& plan, int rank) {
  const auto vars = rank_environment(plan, plan.ranks.at(static_cast<std::size_t>(rank)));
  return {vars.begin(), vars.end()};
}

std::string value_or_unset(const std::map<std::string, std::string>& env, const std::string& key) {
  const auto it = env.find(key);
  return it == env.end() ? "<unset>" : it->second;
}

// The error text of build_plan, or "" when it plans.
std::string plan_error(const Options& options, const PlanInputs& inputs) {
  try {
    build_plan(plan_options(options), inputs, {});
  } catch (const UsageError& e) {
    return std::string(e.what()) + " (" + e.hint() + ")";
  }
  return "";
}

TEST(DevicePlan, ByDefaultEveryWorkerSeesAllAndPicksByLocalRank) {
  const auto plan = build_plan(plan_options(options_with("gpu")),
                               inputs_with({{"CUDA_VISIBLE_DEVICES", "4,5,6"}}), {});
  ASSERT_EQ(plan.world_size, 3);
  for (int rank = 0; rank < 3; ++rank) {
    const auto env = env_of(plan, rank);
    EXPECT_EQ(env.at("LOCAL_RANK"), std::to_string(rank));
    EXPECT_EQ(env.at("DDPRUN_DEVICES"), std::to_string(rank));
    // Left as ddprun found it: the worker inherits the outer value.
    EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);
  }
}

TEST(DevicePlan, VirtualLocalRankNarrowsUuidsPerRankAsTorchrunDoes) {
  Options options = options_with("gpu");
  options.virtual_local_rank = true;
  const auto plan = build_plan(
      plan_options(options), inputs_with({{"CUDA_VISIBLE_DEVICES", "GPU-uuid-a,GPU-uuid-b"}}), {});
  ASSERT_EQ(plan.world_size, 2);
  EXPECT_EQ(env_of(plan, 0).at("CUDA_VISIBLE_DEVICES"), "GPU-uuid-a");
  EXPECT_EQ(env_of(plan, 1).at("CUDA_VISIBLE_DEVICES"), "GPU-uuid-b");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(env_of(plan, rank).at("LOCAL_RANK"), "0");  // torchrun 2.x's rule
    EXPECT_EQ(env_of(plan, rank).at("DDPRUN_DEVICES"), "0");
  }
}

TEST(DevicePlan, VirtualLocalRankWithoutOuterListNarrowsToOrdinals) {
  Options options = options_with("2");
  options.virtual_local_rank = true;
  const auto from_files = build_plan(plan_options(options), inputs_with({}, 4), {});
  EXPECT_EQ(env_of(from_files, 1).at("CUDA_VISIBLE_DEVICES"), "1");
  // Slurm's node-wide ids are not CUDA's numbering inside the job's cgroup.
  const auto from_slurm =
      build_plan(plan_options(options), inputs_with({{"SLURM_JOB_GPUS", "6,7"}}), {});
  EXPECT_EQ(env_of(from_slurm, 1).at("CUDA_VISIBLE_DEVICES"), "1");
}

// torchrun 2.x on a machine without GPUs starts the workers: LOCAL_RANK 0 and
// CUDA_VISIBLE_DEVICES its local rank (nothing to narrow, so the ordinal).
TEST(DevicePlan, VirtualLocalRankWithoutAnyGpuStartsAsTorchrunDoes) {
  Options options = options_with("3");
  options.virtual_local_rank = true;
  const auto plan = build_plan(plan_options(options), inputs_with({}, 0), {});
  EXPECT_TRUE(plan.devices.ordinals_only);
  EXPECT_EQ(plan.devices.per_rank, 0);
  for (int r = 0; r < 3; ++r) {
    const auto env = env_of(plan, r);
    EXPECT_EQ(env.at("LOCAL_RANK"), "0");
    EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), std::to_string(r));
    EXPECT_EQ(env.count("DDPRUN_DEVICES"), 0u);
  }
  EXPECT_NE(format_plan_text(plan).find("CUDA_VISIBLE_DEVICES set to each local rank"),
            std::string::npos);
}

TEST(DevicePlan, GpusPerProcDividesTheNodesGpus) {
  Options options = options_with("auto");
  options.gpus_per_proc = 2;
  const auto plan =
      build_plan(plan_options(options), inputs_with({{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}}), {});
  ASSERT_EQ(plan.world_size, 2);
  EXPECT_EQ(plan.nodes[0].nproc, 2);
  EXPECT_EQ(env_of(plan, 0).at("DDPRUN_DEVICES"), "0,1");
  EXPECT_EQ(env_of(plan, 1).at("DDPRUN_DEVICES"), "2,3");
  EXPECT_EQ(env_of(plan, 1).at("LOCAL_RANK"), "1");
  EXPECT_EQ(env_of(plan, 1).count("CUDA_VISIBLE_DEVICES"), 0u);
  EXPECT_EQ(env_of(plan, 1).at("LOCAL_WORLD_SIZE"), "2");
}

TEST(DevicePlan, GpusPerProcWithVirtualLocalRankNarrowsToTheRanksBlock) {
  Options options = options_with("gpu");
  options.gpus_per_proc = 2;
  options.virtual_local_rank = true;
  const auto plan = build_plan(plan_options(options),
                               inputs_with({{"CUDA_VISIBLE_DEVICES", "4,5,6,7,GPU-x,GPU-y"}}), {});
  ASSERT_EQ(plan.world_size, 3);
  EXPECT_EQ(env_of(plan, 0).at("CUDA_VISIBLE_DEVICES"), "4,5");
  EXPECT_EQ(env_of(plan, 1).at("CUDA_VISIBLE_DEVICES"), "6,7");
  EXPECT_EQ(env_of(plan, 2).at("CUDA_VISIBLE_DEVICES"), "GPU-x,GPU-y");
  EXPECT_EQ(env_of(plan, 2).at("DDPRUN_DEVICES"), "0,1");
  EXPECT_EQ(env_of(plan, 2).at("LOCAL_RANK"), "0");
}

TEST(DevicePlan, GivenNumberOfWorkersUsesTheFirstGpus) {
  Options options = options_with("1");
  options.gpus_per_proc = 2;
  const auto plan = build_plan(plan_options(options), inputs_with({}, 8), {});
  ASSERT_EQ(plan.world_size, 1);
  EXPECT_EQ(env_of(plan, 0).at("DDPRUN_DEVICES"), "0,1");
}

TEST(DevicePlan, NoDevicesWhenNoneVisibleOrMoreWorkersThanGpus) {
  const auto cpu_only = build_plan(plan_options(options_with("2")), inputs_with({}), {});
  EXPECT_EQ(value_or_unset(env_of(cpu_only, 0), "DDPRUN_DEVICES"), "<unset>");
  EXPECT_EQ(cpu_only.devices.per_rank, 0);
  // A CPU job on a machine with one GPU: nothing assigned, nothing refused.
  const auto crowded = build_plan(plan_options(options_with("3")), inputs_with({}, 1), {});
  EXPECT_EQ(value_or_unset(env_of(crowded, 0), "DDPRUN_DEVICES"), "<unset>");
  EXPECT_EQ(value_or_unset(env_of(crowded, 2), "CUDA_VISIBLE_DEVICES"), "<unset>");
  EXPECT_EQ(env_of(crowded, 2).at("LOCAL_RANK"), "2");
}

TEST(DevicePlan, BadRequestsEndInOneLineSayingWhatToDo) {
  Options uneven = options_with("auto");
  uneven.gpus_per_proc = 3;
  EXPECT_EQ(plan_error(uneven, inputs_with({{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}})),
            "--gpus-per-proc 3: gpu-node has 4 visible GPUs, not a multiple of 3 (give a K that "
            "divides every node's GPUs, or a number of workers with --nproc-per-node)");
  EXPECT_EQ(plan_error(uneven, inputs_with({{"CUDA_VISIBLE_DEVICES", ""}})),
            "--gpus-per-proc 3: no GPU is visible on gpu-node (check CUDA_VISIBLE_DEVICES and "
            "the job's GPU request, or drop --gpus-per-proc)");
  Options too_many = options_with("3");
  too_many.gpus_per_proc = 2;
  EXPECT_EQ(plan_error(too_many, inputs_with({{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}})),
            "--gpus-per-proc 2: 3 workers of 2 GPUs need 6 GPUs, gpu-node has 4 visible "
            "(CUDA_VISIBLE_DEVICES=0,1,2,3) (give fewer workers with --nproc-per-node)");
  Options narrowed = options_with("3");
  narrowed.virtual_local_rank = true;
  EXPECT_EQ(plan_error(narrowed, inputs_with({{"SLURM_JOB_GPUS", "0,1"}})),
            "--virtual-local-rank: 3 workers need 3 GPUs, gpu-node has 2 visible "
            "(SLURM_JOB_GPUS=0,1) (give fewer workers with --nproc-per-node)");
  // CUDA_VISIBLE_DEVICES set to nothing hides every GPU: torchrun raises there too.
  EXPECT_EQ(plan_error(narrowed, inputs_with({{"CUDA_VISIBLE_DEVICES", ""}})),
            "--virtual-local-rank: no GPU is visible on gpu-node (CUDA_VISIBLE_DEVICES=) (check "
            "CUDA_VISIBLE_DEVICES and the job's GPU request, or drop --virtual-local-rank)");
  Options fits = options_with("2");
  fits.virtual_local_rank = true;
  EXPECT_EQ(plan_error(fits, inputs_with({{"CUDA_VISIBLE_DEVICES", "0,1"}})), "");
}

TEST(DevicePlan, AnAgentChecksTheHeadsWorkerCountAgainstItsOwnGpus) {
  Options options = options_with("auto");
  options.agent = true;
  options.gpus_per_proc = 2;
  PlanInputs inputs = inputs_with({{"CUDA_VISIBLE_DEVICES", "0,1"}});
  inputs.cluster = Cluster{"hostfile", "", {{"a", 1}, {"gpu-node", 2}}, 1, {}};
  EXPECT_NE(plan_error(options, inputs).find("2 workers of 2 GPUs need 4 GPUs"), std::string::npos);
  inputs.cluster.nodes[1].slots = 1;
  const auto plan = build_plan(plan_options(options), inputs, {});
  EXPECT_EQ(env_of(plan, 1).at("DDPRUN_DEVICES"), "0,1");
}

TEST(DevicePlan, JsonAndTextPlansShowEachRanksDevices) {
  Options options = options_with("gpu");
  options.virtual_local_rank = true;
  const auto plan = build_plan(
      plan_options(options), inputs_with({{"CUDA_VISIBLE_DEVICES", "GPU-uuid-a,GPU-uuid-b"}}), {});
  const auto doc = nlohmann::json::parse(format_plan_json(plan));
  EXPECT_EQ(doc["gpus"]["visible"], nlohmann::json({"GPU-uuid-a", "GPU-uuid-b"}));
  EXPECT_EQ(doc["gpus"]["source"], "CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(doc["gpus"]["per_rank"], 1);
  EXPECT_EQ(doc["gpus"]["virtual_local_rank"], true);
  EXPECT_EQ(doc["ranks"][1]["devices"], nlohmann::json({"GPU-uuid-b"}));
  EXPECT_EQ(doc["ranks"][1]["env"]["CUDA_VISIBLE_DEVICES"], "GPU-uuid-b");
  EXPECT_TRUE(doc["socket_ifname"].is_null());
  const auto text = format_plan_text(plan);
  EXPECT_NE(text.find("gpus         2 visible (CUDA_VISIBLE_DEVICES=GPU-uuid-a,GPU-uuid-b), 1 per "
                      "rank, CUDA_VISIBLE_DEVICES narrowed per rank"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("CUDA_VISIBLE_DEVICES=GPU-uuid-b DDPRUN_DEVICES=0"), std::string::npos);
}

TEST(SocketInterfacePlan, SetForThisNodesRanksOnly) {
  PlanInputs inputs = inputs_with({});
  inputs.cluster = Cluster{"hostfile", "", {{"a", 2}, {"b", 2}}, 1, {}};
  inputs.socket_interface = {"ib0", "routes to the master 10.0.0.1 (a)"};
  const auto plan = build_plan(plan_options(options_with("2")), inputs, {});
  EXPECT_EQ(value_or_unset(env_of(plan, 0), "NCCL_SOCKET_IFNAME"), "<unset>");
  EXPECT_EQ(env_of(plan, 2).at("NCCL_SOCKET_IFNAME"), "ib0");
  EXPECT_EQ(env_of(plan, 3).at("GLOO_SOCKET_IFNAME"), "ib0");
  const auto doc = nlohmann::json::parse(format_plan_json(plan));
  EXPECT_EQ(doc["socket_ifname"], "ib0");
  EXPECT_EQ(doc["socket_ifname_reason"], "routes to the master 10.0.0.1 (a)");
  EXPECT_NE(format_plan_text(plan).find("network      NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME "
                                        "ib0 on node 1 (routes to the master 10.0.0.1 (a))"),
            std::string::npos);
}

}  // namespace
}  // namespace ddprun
