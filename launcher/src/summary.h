#pragma once
// What ddprun tells the user around a run: a short block at the start, a per-rank table
// at the end. Pure formatting; main() decides whether to print (not with --quiet).

#include <string>

#include "plan.h"
#include "supervisor.h"

namespace ddprun {

// "ddprun: run abc: 4 workers on 1 node (vm: ranks 0-3), master 127.0.0.1:29500" and,
// with a log folder, where the logs go.
std::string format_launch_summary(const LaunchPlan& plan, bool logs_to_files);

// One row per rank of this node: exit status, run time, peak resident memory.
std::string format_rank_table(const RoundResult& result);

}  // namespace ddprun
