#pragma once
// Head-node mode: how one ddprun on the first node reaches the others. Pure functions that
// decide whether to fan out, which launcher to use, and build the argument arrays for
// ssh, srun and mpirun. Remote command lines are built from arrays and quoted once here;
// nothing else in ddprun writes shell code. See docs/multinode.md.

#include <string>
#include <string_view>
#include <vector>

#include "cluster.h"
#include "options.h"
#include "plan.h"

namespace ddprun {

// "ssh", "mpirun", "srun" or "local".
std::string_view launcher_name(LauncherKind kind);

// Quotes `word` for a POSIX shell so that it reaches the program as one argument with
// nothing expanded: 'it'\''s' style. The empty word becomes ''.
std::string shell_quote(std::string_view word);

// Whether ddprun was started once per node by someone else (srun step, mpirun, an
// operator, an explicit --node-rank, or the head as an agent): then it never fans out.
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

// One message from the head: an environment (hello) or a signal to forward.
struct AgentMessage {
  Environment env;
  int signal_number = 0;
};
// Parses one line from the head. Throws UsageError for anything else.
AgentMessage parse_agent_message(std::string_view line);

// ddprun's own arguments for the agent on `node` (without the executable): --agent, the
// agreed master address, port, run id and restart round, the node list, this node's
// worker count, and the options that shape output, then "--" and the program.
std::vector<std::string> agent_arguments(const Options& options, const LaunchPlan& plan,
                                         const NodePlan* node);

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

}  // namespace ddprun
