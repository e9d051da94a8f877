#pragma once
// The head/agent protocol (docs/multinode.md): how one ddprun on the first node (the head)
// reaches the others. Which launcher to use; the agents' command lines for ssh, srun and
// mpirun (built from arrays, quoted once); the environment the head forwards; the messages
// on an ssh agent's stdin (a hello with the environment, then signals); and what a round
// starts to reach every node. Everything but agent_launches and read_agent_hello is pure.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cluster.h"
#include "control.h"
#include "options.h"
#include "plan.h"
#include "runner.h"

namespace ddprun {

// "ssh", "mpirun", "srun" or "local".
std::string_view launcher_name(LauncherKind kind);

// Whether ddprun was started once per node by someone else (srun step, mpirun, an
// operator, an explicit --node-rank, by hand with --nnodes, or the head as an agent): then
// it never fans out.
bool started_per_node(const Options& options, const Cluster& cluster, const Environment& env);

// The launcher --launcher names; for "auto": srun inside a Slurm job, else mpirun when an
// MPI-capable allocation (SGE, PBS, LSF) is there and `mpirun_found`, else ssh. Returns
// kLocal when this ddprun should not fan out at all (one node, or started per node).
LauncherKind choose_launcher(const Options& options, const Cluster& cluster, const Environment& env,
                             bool mpirun_found);

// The variables the head passes to every agent: the default set (docs/multinode.md:
// PATH, LD_LIBRARY_PATH, PYTHONPATH, CUDA_*, NCCL_*, OMP_*, ...) present in `env`, then
// each --env VAR (its value here) or VAR=VALUE. Throws UsageError for --env VAR when
// VAR is unset here.
Environment forwarded_environment(const Environment& env, const std::vector<std::string>& extra);

// What the head tells an agent on its standard input before anything else (one JSON
// line): the environment to add. Signals follow as {"signal": N} lines.
std::string agent_hello(const Environment& forwarded);
std::string agent_signal_message(int signal_number);

// One message from the head: an environment (hello), a signal to forward, or a control
// request to answer (control.h: agent_control_message).
struct AgentMessage {
  Environment env;
  int signal_number = 0;
  std::optional<ControlVerb> control;
  int control_id = 0;
};
// Parses one line from the head. Throws UsageError for anything else.
AgentMessage parse_agent_message(std::string_view line);

// ddprun's own arguments for the agent on `node` (without the executable): --agent, the
// agreed master address, port, run id and restart round, the node list, this node's
// worker count, and the options that shape output, then "--" and the program. With
// `subtree_last` beyond the node's rank (the ssh tree), that agent also starts the agents
// of nodes node+1 .. subtree_last.
std::vector<std::string> agent_arguments(const Options& options, const LaunchPlan& plan,
                                         const NodePlan* node, int subtree_last = -1);

// ssh's argv for running `remote_argv` in `cwd` on `host` (docs/multinode.md): batch
// mode, no terminal, the command quoted once.
std::vector<std::string> ssh_command(const std::string& host, const Options& options,
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
AgentLaunches agent_launches(const Options& options, const PlanInputs& inputs,
                             const LaunchPlan& plan, const Environment& env,
                             const std::string& self);

// An agent's first message from the head on `fd`: the environment its workers need, laid
// over `env`. Read byte by byte so nothing after the first line is taken from later
// reads. Throws UsageError when the head closed the connection or sent no hello.
void read_agent_hello(int fd, Environment& env);

}  // namespace ddprun
