#pragma once
// How one ddprun on the first node (the head) reaches the others (docs/multinode.md): the
// agents' command lines for ssh, srun and mpirun (built from arrays, quoted once), the
// environment the head forwards, and what a round starts to reach every node. Which
// launcher to use is planning's (job_inputs.h); what head and agents say to each other is
// agent_messages.h. Everything but agent_launches is pure.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cluster.h"
#include "plan/plan.h"
#include "run/runner.h"

namespace ddprun {

// The variables the head passes to every agent: the default set (docs/multinode.md:
// PATH, LD_LIBRARY_PATH, PYTHONPATH, CUDA_*, NCCL_*, OMP_*, ...) present in `env`, then
// each --env VAR (its value here) or VAR=VALUE. Throws UsageError for --env VAR when
// VAR is unset here.
Environment forwarded_environment(const Environment& env, const std::vector<std::string>& extra);

// What the head passes on to its agents from its own command line (job/agent_options.cc
// makes it from the options: this room never sees them).
struct AgentOptions {
  // The options that shape each node's workers and output, as an agent's arguments
  // (--log-dir DIR, --tee, --tag-output, --check, ...): each agent acts on them for its node.
  std::vector<std::string> passed_on;
  std::string shutdown_timeout = "15";    // --shutdown-timeout, in seconds
  std::optional<std::string> ssh_config;  // ssh -F
  int ssh_fanout = 32;
  std::vector<std::string> env_vars;      // --env NAME or NAME=VALUE
  std::optional<double> join_timeout_s;   // --rdzv-conf join_timeout: ssh's ConnectTimeout
  bool check = false;                     // --check: the head asks every node itself
  bool agent = false;                     // this ddprun is an agent (of the ssh tree)
  std::optional<int> agent_subtree_last;  // then: the last node of its range
};

// ddprun's own arguments for the agent on `node` (without the executable): --agent, the
// agreed master address, port, run id and restart round, the node list, this node's
// worker count, the job's end, and the options passed on, then "--" and the program. With
// `subtree_last` beyond the node's rank (the ssh tree), that agent also starts the agents
// of nodes node+1 .. subtree_last.
std::vector<std::string> agent_arguments(const AgentOptions& options, const LaunchPlan& plan,
                                         const NodePlan* node, int subtree_last = -1);

// ssh's argv for running `remote_argv` in `cwd` on `host` (docs/multinode.md): batch
// mode, no terminal, the command quoted once.
std::vector<std::string> ssh_command(const std::string& host, const AgentOptions& options,
                                     const std::string& cwd,
                                     const std::vector<std::string>& remote_argv);

// srun's argv for one agent per node of the allocation's `plan.nodes.size()` nodes.
std::vector<std::string> srun_command(const LaunchPlan& plan,
                                      const std::vector<std::string>& agent_argv);

// mpirun's argv for one agent per node on plan's hosts, exporting `forwarded`'s names.
std::vector<std::string> mpirun_command(const LaunchPlan& plan, const Environment& forwarded,
                                        const std::vector<std::string>& agent_argv);

// What a round starts on this node to reach the others: one agent per other node over ssh
// (this node runs its own workers), or one srun/mpirun that starts an agent on every
// node, this one's included (then this node starts no workers itself). `self` is this
// ddprun's executable. Resolves ssh, srun or mpirun in PATH (ProgramError if missing).
// The ssh tree: the nodes first+1 .. last, cut into at most `fanout` consecutive ranges of
// sizes that differ by one at most; node `first` starts the first node of each range,
// which starts the rest of its range the same way. Returns (first, last) of each range.
std::vector<std::pair<int, int>> subtree_children(int first, int last, int fanout);

struct AgentLaunches {
  bool local_workers = true;
  std::vector<ChildSpec> agents;
};
AgentLaunches agent_launches(const AgentOptions& options, const PlanInputs& inputs,
                             const LaunchPlan& plan, const Environment& env,
                             const std::string& self);

}  // namespace ddprun
