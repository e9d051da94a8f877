#pragma once
// What one round of the job starts on this node: its plan, this node's workers, and in
// head mode the agents that reach the other nodes (agents.h).

#include <optional>
#include <string>
#include <vector>

#include "cli/options.h"
#include "ddprun/common/unique_fd.h"
#include "job/job_inputs.h"
#include "policy/supervision.h"

namespace ddprun {

// The children that run `plan`'s ranks on this node, each with `program_path` as its
// executable and `env` with its rank's contract variables laid over it. With a
// `python_hook_dir` (python_stack_hook.h), Python workers can show their frames: it goes
// first on PYTHONPATH, with DDPRUN_PYTHON_STACK_FILE. With a `membership_file`
// (--restart-scope rank), every worker gets it as DDPRUN_MEMBERSHIP_FILE; with
// `replacements` (an agent in a lost node's place), DDPRUN_REPLACEMENT=1.
std::vector<ChildSpec> worker_children(const LaunchPlan& plan, const std::string& program_path,
                                       const Environment& env,
                                       const std::string& python_hook_dir = {},
                                       const std::string& membership_file = {},
                                       bool replacements = false);

// What changes from one round to the next. The job's inputs are resolved at the start
// (main.cc completes a few before round 0) and no round rewrites them; each round plans
// from them with this laid over them.
struct RoundState {
  int restart_count = 0;
  int master_port = 0;     // the workers'
  bool fixed_port = true;  // false: picked free here, so a restart may pick anew
  // A port picked here stays held for rank 0 through its round (ports.h): no other
  // program's pick or plain bind takes it before rank 0's store binds it, nor while a lost
  // rank 0 waits for its replacement. A port given (--master-port, the job's) is not held.
  UniqueFd master_port_hold;
  std::vector<NodeSlots> nodes;        // the cluster's, with spares in failed nodes' places
  std::vector<NodeSlots> spare_nodes;  // the spares still unused
  // This node's place: the inputs', or where node 0 placed it (by hand, ranks by arrival).
  std::optional<int> this_node;
  // --restart-scope rank: workers replaced in the rounds so far, which count against
  // --max-restarts with the restarts.
  int replacements = 0;
  // What the round's run line and --status count against --max-restarts, as the verdict
  // that asked for the round did.
  int restarts_spent() const { return restart_count + replacements; }
};

// Round 0's state: the inputs' own.
RoundState first_round_state(const PlanInputs& inputs);
// `inputs` with `state` laid over them: what a round plans from.
PlanInputs round_inputs(const PlanInputs& inputs, const RoundState& state);

// Prepares round `round`: moves `state` on (a spare for a failed node, the restart count
// (the head's, on an agent), a fresh master port when the port was picked here), then
// makes the plan, its attempt folder, the children, and the summary to print. `self` is
// this ddprun's executable (for agents). Throws what planning and folder creation throw.
RoundSetup prepare_round(const Options& options, const PlanInputs& inputs, RoundState& state,
                         const Environment& env, int round, const RoundResult* previous,
                         const std::string& program_path, const std::string& self);

// --restart-scope rank, a head over ssh: the agent that starts node `node`'s ranks on the
// first spare with as many slots, in this round (SpareNodes), or, with none, on the node
// itself again. It moves `state` as replace_failed_node does; every reference must outlive
// the round.
SpareNodes spare_nodes(const Options& options, const PlanInputs& job_inputs, RoundState& state,
                       const Environment& env, const std::string& self);

// After a round that `previous` says a remote node's agent failed first: that node's place
// goes to the first spare with as many slots (same node rank, same ranks: the world size
// stays), which leaves the spares. `this_node` is never replaced. Returns the line that
// says so, or empty when no spare fits or the failure is not a remote node's.
std::string replace_failed_node(RoundState& state, std::optional<int> this_node,
                                const RoundResult& previous);

}  // namespace ddprun
