#include "plan/rank_environment.h"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <string_view>

#include "ddprun/contract/env_names.h"
#include "ddprun/contract/version.h"

namespace ddprun {

void rank_environment(const LaunchPlan& plan, const RankPlan& rank,
                      std::vector<std::pair<std::string, std::string>>& vars) {
  const NodePlan& node = plan.nodes.at(static_cast<std::size_t>(rank.node_rank));
  const bool narrowed = plan.devices.virtual_local_rank && plan.devices.per_rank > 0;
  std::size_t count = 0;
  // The next variable's value, emptied; the pair and its strings are reused when there.
  const auto next = [&vars, &count](const char* key) -> std::string& {
    if (count == vars.size()) vars.emplace_back();
    auto& [name, value] = vars[count++];
    name = key;
    value.clear();
    return value;
  };
  const auto put = [&next](const char* key, std::string_view value) { next(key) = value; };
  const auto put_int = [&next](const char* key, long long value) {
    char digits[24];
    next(key).append(digits, std::to_chars(std::begin(digits), std::end(digits), value).ptr);
  };
  put_int(env::kRank, rank.rank);
  // torchrun's --virtual-local-rank: every worker's own GPU is its device 0.
  put_int(env::kLocalRank, narrowed || plan.devices.ordinals_only ? 0 : rank.local_rank);
  put_int(env::kWorldSize, plan.world_size);
  put_int(env::kLocalWorldSize, node.nproc);
  put_int(env::kGroupRank, node.node_rank);
  put_int(env::kGroupWorldSize, static_cast<int>(plan.nodes.size()));
  put_int(env::kRoleRank, rank.rank);
  put_int(env::kRoleWorldSize, plan.world_size);
  put(env::kRoleName, plan.role);
  put(env::kMasterAddr, plan.master_addr);
  put_int(env::kMasterPort, plan.master_port);
  put(env::kRunId, plan.run_id);
  put_int(env::kRestartCount, plan.restart_count);
  put_int(env::kMaxRestarts, plan.max_restarts);
  append_rank_file(next(env::kErrorFile), plan, rank.rank, RankFile::kErrorFile);
  append_rank_file(next(env::kDdprunProgressFile), plan, rank.rank, RankFile::kProgressFile);
  append_rank_file(next(env::kDdprunTraceFile), plan, rank.rank, RankFile::kTraceFile);
  if (!plan.nccl_async_error_handling.empty()) {
    put(env::kTorchNcclAsyncErrorHandling, plan.nccl_async_error_handling);
  }
  put(env::kDdprunHost, rank.host);
  put(env::kDdprunVersion, kVersion);
  put(env::kDdprunStdoutTty, plan.stdout_is_tty ? "1" : "0");
  if (plan.devices.per_rank > 0) {
    // Positions in the node's list; a narrowed worker numbers its own GPUs from 0.
    std::string visible;
    std::string ordinals;
    for (const int position : rank_devices(plan, rank)) {
      const std::string separator = ordinals.empty() ? "" : ",";
      visible += separator + plan.devices.visible.devices.at(static_cast<std::size_t>(position));
      ordinals +=
          separator + std::to_string(narrowed ? position % plan.devices.per_rank : position);
    }
    if (narrowed) put(env::kCudaVisibleDevices, visible);
    put(env::kDdprunDevices, ordinals);
  } else if (plan.devices.ordinals_only) {
    put_int(env::kCudaVisibleDevices, rank.local_rank);
  }
  if (!plan.socket_interface.name.empty() && rank.node_rank == plan.this_node) {
    put(env::kNcclSocketIfname, plan.socket_interface.name);
    put(env::kGlooSocketIfname, plan.socket_interface.name);
  }
  if (plan.logs_to_dir) put(env::kDdprunLogDir, plan.attempt_dir);
  if (plan.job_end_unix) put_int(env::kDdprunJobEndTime, *plan.job_end_unix);
  const RankPlacement* placement = rank_placement(plan, rank);
  if (placement != nullptr) put_int(env::kDdprunCpuSharers, placement->sharers);
  if (placement != nullptr && plan.placement.set_device_order) {
    put(env::kCudaDeviceOrder, "PCI_BUS_ID");
  }
  if (plan.threads.set_omp && placement != nullptr) {
    // A bound rank has its own cores: one thread for each.
    put_int(env::kOmpNumThreads, placement->cores);
    put_int(env::kDdprunThreadsPerRank, placement->cores);
  } else if (plan.threads.set_omp) {
    // torchrun's rule, so that Python scripts see what they would under torchrun; ddp-train
    // reads its share of the CPUs from DDPRUN_THREADS_PER_RANK instead.
    if (node.nproc > 1) put(env::kOmpNumThreads, "1");
    put_int(env::kDdprunThreadsPerRank,
            std::max(1, plan.threads.cpu_count / std::max(1, node.nproc)));
  }
  vars.resize(count);
}

std::vector<std::pair<std::string, std::string>> rank_environment(const LaunchPlan& plan,
                                                                  const RankPlan& rank) {
  std::vector<std::pair<std::string, std::string>> vars;
  rank_environment(plan, rank, vars);
  return vars;
}

std::vector<std::string> merge_environment(
    const Environment& env, const std::vector<std::pair<std::string, std::string>>& overrides) {
  Environment merged = env;
  // The launchers' secret is ddprun's own: no child (worker, relay, agent, tool) gets it.
  merged.erase(env::kDdprunRdzvToken);
  for (const auto& [key, value] : overrides) merged[key] = value;
  std::vector<std::string> result;
  result.reserve(merged.size());
  for (const auto& [key, value] : merged) result.push_back(key + "=" + value);
  return result;
}

std::vector<std::string> spare_environment(const std::vector<std::string>& rank_env) {
  static const char* const kRanksOwn[] = {env::kRank,
                                          env::kLocalRank,
                                          env::kGroupRank,
                                          env::kRoleRank,
                                          env::kErrorFile,
                                          env::kDdprunProgressFile,
                                          env::kDdprunTraceFile,
                                          env::kDdprunPythonStackFile,
                                          env::kDdprunDevices,
                                          env::kCudaVisibleDevices};
  std::vector<std::string> out;
  for (const std::string& entry : rank_env) {
    const std::string_view key = std::string_view(entry).substr(0, entry.find('='));
    if (std::none_of(std::begin(kRanksOwn), std::end(kRanksOwn),
                     [&](const char* own) { return key == own; })) {
      out.push_back(entry);
    }
  }
  out.push_back(std::string(env::kDdprunSpare) + "=1");
  return out;
}

std::string spare_assignment(const std::vector<std::string>& rank_env) {
  std::string out;
  for (const std::string& entry : rank_env) {
    out += entry;
    out += '\0';
  }
  return out;
}

}  // namespace ddprun
