#pragma once
// Builds the environment contract of one rank (docs/environment.md): torchrun's variables
// plus ddprun's own, in one place.

#include <string>
#include <utility>
#include <vector>

#include "plan.h"

namespace ddprun {

// The variables ddprun sets for `rank`. Thread counts (OMP_NUM_THREADS,
// OPENBLAS_NUM_THREADS) are included only when `env` does not already set them: then each
// worker gets an equal share of this node's CPUs, at least one.
std::vector<std::pair<std::string, std::string>> rank_environment(
    const LaunchPlan& plan, const NodePlan& node, const RankPlan& rank, const PlanInputs& inputs,
    const Options& options, const Environment& env);

// "KEY=VALUE" strings for execve: `env` with `overrides` laid over it.
std::vector<std::string> merge_environment(
    const Environment& env, const std::vector<std::pair<std::string, std::string>>& overrides);

}  // namespace ddprun
