#pragma once
// Builds the environment contract of one rank (docs/environment.md): torchrun's variables
// plus ddprun's own, in one place.

#include <string>
#include <utility>
#include <vector>

#include "plan/plan.h"

namespace ddprun {

// The variables ddprun sets for `rank` of `plan`, computed when needed rather than stored,
// so a plan of 100,000 ranks stays small. Thread counts (OMP_NUM_THREADS,
// OPENBLAS_NUM_THREADS) are included only when the user did not set them (plan.threads):
// then each worker gets an equal share of the node's CPUs, at least one. Devices
// (plan.devices): DDPRUN_DEVICES when the rank owns GPUs, and with --virtual-local-rank
// CUDA_VISIBLE_DEVICES narrowed to them and LOCAL_RANK 0; otherwise CUDA_VISIBLE_DEVICES
// is left as ddprun found it. NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME for this node's
// ranks when plan.socket_interface names one.
std::vector<std::pair<std::string, std::string>> rank_environment(const LaunchPlan& plan,
                                                                  const RankPlan& rank);

// The same, written over `vars` (its strings' storage reused): for printing the variables
// of many ranks without allocating for each one.
void rank_environment(const LaunchPlan& plan, const RankPlan& rank,
                      std::vector<std::pair<std::string, std::string>>& vars);

// "KEY=VALUE" strings for execve: `env` with `overrides` laid over it, less
// DDPRUN_RDZV_TOKEN (the launchers' secret, never a child's).
std::vector<std::string> merge_environment(
    const Environment& env, const std::vector<std::pair<std::string, std::string>>& overrides);

// A warm spare's environment (--warm-spare): a rank's `rank_env` ("KEY=VALUE") less what
// names that rank (its rank variables, files and devices), with DDPRUN_SPARE=1.
std::vector<std::string> spare_environment(const std::vector<std::string>& rank_env);
// What a spare reads on its stdin when it becomes a rank: that rank's whole environment,
// each "KEY=VALUE" ended by a NUL byte (as /proc/PID/environ has it).
std::string spare_assignment(const std::vector<std::string>& rank_env);

}  // namespace ddprun
