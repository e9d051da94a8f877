#include "rank_environment.h"

#include <algorithm>

#include "ddprun/contract/env_names.h"
#include "ddprun/contract/version.h"

namespace ddprun {

std::vector<std::pair<std::string, std::string>> rank_environment(const LaunchPlan& plan,
                                                                  const RankPlan& rank) {
  const NodePlan& node = plan.nodes.at(static_cast<std::size_t>(rank.node_rank));
  const auto str = [](int value) { return std::to_string(value); };
  const bool narrowed = plan.devices.virtual_local_rank && plan.devices.per_rank > 0;
  std::vector<std::pair<std::string, std::string>> vars = {
      {env::kRank, str(rank.rank)},
      // torchrun's --virtual-local-rank: every worker's own GPU is its device 0.
      {env::kLocalRank, narrowed ? "0" : str(rank.local_rank)},
      {env::kWorldSize, str(plan.world_size)},
      {env::kLocalWorldSize, str(node.nproc)},
      {env::kGroupRank, str(node.node_rank)},
      {env::kGroupWorldSize, str(static_cast<int>(plan.nodes.size()))},
      {env::kRoleRank, str(rank.rank)},
      {env::kRoleWorldSize, str(plan.world_size)},
      {env::kRoleName, plan.role},
      {env::kMasterAddr, plan.master_addr},
      {env::kMasterPort, str(plan.master_port)},
      {env::kRunId, plan.run_id},
      {env::kRestartCount, str(plan.restart_count)},
      {env::kMaxRestarts, str(plan.max_restarts)},
      {env::kErrorFile, rank.error_file},
      {env::kDdprunProgressFile, rank.progress_file},
      {env::kTorchNcclAsyncErrorHandling, plan.nccl_async_error_handling},
      {env::kDdprunHost, rank.host},
      {env::kDdprunVersion, kVersion},
      {env::kDdprunStdoutTty, plan.stdout_is_tty ? "1" : "0"},
  };
  if (plan.set_legacy_nccl_async) {
    vars.emplace_back(env::kNcclAsyncErrorHandling, plan.nccl_async_error_handling);
  }
  if (plan.devices.per_rank > 0) {
    // Positions in the node's list; a narrowed worker numbers its own GPUs from 0.
    std::string visible;
    std::string ordinals;
    for (const int position : rank_devices(plan, rank)) {
      const std::string separator = ordinals.empty() ? "" : ",";
      visible += separator + plan.devices.visible.devices.at(static_cast<std::size_t>(position));
      ordinals += separator + str(narrowed ? position % plan.devices.per_rank : position);
    }
    if (narrowed) vars.emplace_back(env::kCudaVisibleDevices, visible);
    vars.emplace_back(env::kDdprunDevices, ordinals);
  }
  if (!plan.socket_interface.name.empty() && rank.node_rank == plan.this_node) {
    vars.emplace_back(env::kNcclSocketIfname, plan.socket_interface.name);
    vars.emplace_back(env::kGlooSocketIfname, plan.socket_interface.name);
  }
  if (plan.logs_to_dir) vars.emplace_back(env::kDdprunLogDir, plan.attempt_dir);
  if (plan.job_end_unix) {
    vars.emplace_back(env::kDdprunJobEndTime, std::to_string(*plan.job_end_unix));
  }
  if (plan.threads.set_omp) {
    // torchrun's rule, so that Python scripts see what they would under torchrun; ddp-train
    // reads its share of the CPUs from DDPRUN_THREADS_PER_RANK instead.
    if (node.nproc > 1) vars.emplace_back(env::kOmpNumThreads, "1");
    vars.emplace_back(env::kDdprunThreadsPerRank,
                      str(std::max(1, plan.threads.cpu_count / std::max(1, node.nproc))));
  }
  return vars;
}

std::vector<std::string> merge_environment(
    const Environment& env, const std::vector<std::pair<std::string, std::string>>& overrides) {
  Environment merged = env;
  for (const auto& [key, value] : overrides) merged[key] = value;
  std::vector<std::string> result;
  result.reserve(merged.size());
  for (const auto& [key, value] : merged) result.push_back(key + "=" + value);
  return result;
}

}  // namespace ddprun
