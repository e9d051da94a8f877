#pragma once
// What one round of the job starts on this node: its plan, this node's workers, and in
// head mode the agents that reach the other nodes (agents.h).

#include <string>

#include "job.h"
#include "job_inputs.h"
#include "options.h"

namespace ddprun {

// The children that run `plan`'s ranks on this node, each with `program_path` as its
// executable and `env` with its rank's contract variables laid over it. With a
// `python_hook_dir` (python_stack_hook.h), Python workers can show their frames: it goes
// first on PYTHONPATH, with DDPRUN_PYTHON_STACK_FILE.
std::vector<ChildSpec> worker_children(const LaunchPlan& plan, const std::string& program_path,
                                       const Environment& env,
                                       const std::string& python_hook_dir = {});

// Prepares round `round`: its restart count (the head's, on an agent), a fresh master
// port when the port was picked here, the plan, its attempt folder, the children, and the
// summary to print. `self` is this ddprun's executable (for agents). Throws what planning
// and folder creation throw.
RoundSetup prepare_round(const Options& options, PlanInputs& inputs, const Environment& env,
                         int round, const RoundResult* previous, const std::string& program_path,
                         const std::string& self);

// After a round that `previous` says a remote node's agent failed first: that node's place
// goes to the first spare with as many slots (same node rank, same ranks: the world size
// stays), which leaves the spares. Returns the line that says so, or empty when no spare
// fits or the failure is not a remote node's.
std::string replace_failed_node(PlanInputs& inputs, const RoundResult& previous);

}  // namespace ddprun
