#include "nodes/agents.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>

#include "ddprun/contract/env_names.h"
#include "ddprun/contract/errors.h"
#include "plan/host_facts.h"
#include "plan/rank_environment.h"
#include "plan/shell_quote.h"
#include "run/agent_messages.h"
#include "schedulers.h"

namespace ddprun {
namespace {

// Forwarded by default when set: what a worker needs to find its program, libraries and
// devices, and to tune its communication and threads like the head's.
constexpr std::array<std::string_view, 7> kForwardedNames = {
    "PATH",        "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME",
    "VIRTUAL_ENV", "CONDA_PREFIX",    "NO_COLOR"};
constexpr std::array<std::string_view, 10> kForwardedPrefixes = {
    "CUDA_", "NCCL_", "OMP_", "OPENBLAS_", "MKL_", "GLOO_", "TORCH_", "PYTORCH_", "UCX_", "FI_"};
// Per-node by nature: each node's scheduler or administrator sets its own.
constexpr std::array<std::string_view, 2> kNeverForwarded = {env::kCudaVisibleDevices,
                                                             "OMP_PLACES"};

bool forwarded_by_default(std::string_view name) {
  if (std::find(kNeverForwarded.begin(), kNeverForwarded.end(), name) != kNeverForwarded.end()) {
    return false;
  }
  if (std::find(kForwardedNames.begin(), kForwardedNames.end(), name) != kForwardedNames.end()) {
    return true;
  }
  return std::any_of(kForwardedPrefixes.begin(), kForwardedPrefixes.end(),
                     [&](std::string_view prefix) { return name.rfind(prefix, 0) == 0; });
}

}  // namespace

Environment forwarded_environment(const Environment& env, const std::vector<std::string>& extra) {
  Environment forwarded;
  for (const auto& [name, value] : env) {
    if (forwarded_by_default(name)) forwarded[name] = value;
  }
  for (const auto& item : extra) {
    const auto equals = item.find('=');
    const std::string name = item.substr(0, equals);
    if (!valid_variable_name(name)) {
      throw UsageError("--env '" + item + "': '" + name + "' is not a variable name",
                       "use --env NAME or --env NAME=VALUE");
    }
    if (equals != std::string::npos) {
      forwarded[name] = item.substr(equals + 1);
      continue;
    }
    const auto value = lookup(env, name);
    if (!value) {
      throw UsageError("--env " + name + ": " + name + " is not set here",
                       "set it, or give its value with --env " + name + "=VALUE");
    }
    forwarded[name] = *value;
  }
  return forwarded;
}

std::vector<std::string> agent_arguments(const AgentOptions& options, const LaunchPlan& plan,
                                         const NodePlan* node, int subtree_last) {
  std::string nodes;
  for (const NodePlan& each : plan.nodes) {
    if (!nodes.empty()) nodes += ',';
    nodes += each.host + ":" + std::to_string(each.nproc);
  }
  std::vector<std::string> args = {"--agent",
                                   "--agent-nodes",
                                   nodes,
                                   "--master-addr",
                                   plan.master_addr,
                                   "--master-port",
                                   std::to_string(plan.master_port),
                                   "--run-id",
                                   plan.run_id,
                                   "--restart-count",
                                   std::to_string(plan.restart_count),
                                   "--max-restarts",
                                   std::to_string(plan.max_restarts),
                                   "--shutdown-timeout",
                                   options.shutdown_timeout};
  if (node != nullptr) {
    // Over ssh: the head beats on its stdin (ChildSpec::heartbeat_on_stdin).
    args.insert(args.end(),
                {"--node-rank", std::to_string(node->node_rank), "--agent-stdin", "--head-beats"});
  }
  if (node != nullptr && subtree_last > node->node_rank) {
    // It starts agents of its own: it needs what this ddprun uses to start them. The
    // values of --env reach it in the hello, never on a command line: names only here.
    args.insert(args.end(), {"--agent-subtree", std::to_string(subtree_last), "--ssh-fanout",
                             std::to_string(options.ssh_fanout)});
    if (options.ssh_config) args.insert(args.end(), {"--ssh-config", *options.ssh_config});
    for (const auto& item : options.env_vars) {
      args.insert(args.end(), {"--env", item.substr(0, item.find('='))});
    }
  }
  if (plan.job_end_unix) {
    // The agents' workers learn the end too; the head alone sends the notice.
    args.insert(args.end(), {"--deadline", std::to_string(*plan.job_end_unix)});
  }
  args.insert(args.end(), options.passed_on.begin(), options.passed_on.end());
  args.emplace_back("--");
  args.insert(args.end(), plan.program.begin(), plan.program.end());
  return args;
}

std::vector<std::string> ssh_command(const std::string& host, const AgentOptions& options,
                                     const std::string& cwd,
                                     const std::vector<std::string>& remote_argv) {
  std::vector<std::string> argv = {"ssh"};
  if (options.ssh_config) argv.insert(argv.end(), {"-F", *options.ssh_config});
  // No terminal and no password prompt; a node that stops answering is noticed within
  // seconds rather than at the next TCP timeout.
  argv.insert(argv.end(), {"-T", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=1", "-o",
                           "ServerAliveCountMax=3"});
  if (options.join_timeout_s) {
    // torchrun's join_timeout: how long a node may take to join; here, ssh's connection.
    const auto seconds = static_cast<long>(std::max(1.0, std::ceil(*options.join_timeout_s)));
    argv.insert(argv.end(), {"-o", "ConnectTimeout=" + std::to_string(seconds)});
  }
  argv.insert(argv.end(), {"--", host});
  std::string command = "cd -- " + shell_quote(cwd) + " && exec";
  for (const auto& word : remote_argv) command += " " + shell_quote(word);
  argv.push_back(std::move(command));
  return argv;
}

std::vector<std::string> srun_command(const LaunchPlan& plan,
                                      const std::vector<std::string>& agent_argv) {
  const std::string nodes = std::to_string(plan.nodes.size());
  std::vector<std::string> argv = {"srun", "--nodes=" + nodes, "--ntasks=" + nodes,
                                   "--ntasks-per-node=1", "--kill-on-bad-exit=1",
                                   // Every agent reads the head's messages (the hello, then
                                   // signals) from srun's stdin, as ssh agents do: srun
                                   // itself forwards SIGINT only when it comes twice, and
                                   // SIGTERM kills the step without telling the tasks.
                                   "--input=all"};
  argv.insert(argv.end(), agent_argv.begin(), agent_argv.end());
  return argv;
}

std::vector<std::string> mpirun_command(const LaunchPlan& plan, const Environment& forwarded,
                                        const std::vector<std::string>& agent_argv) {
  std::string hosts;
  for (const NodePlan& node : plan.nodes) {
    if (!hosts.empty()) hosts += ',';
    hosts += node.host;
  }
  std::vector<std::string> argv = {
      "mpirun", "-np", std::to_string(plan.nodes.size()), "-npernode", "1", "--host", hosts};
  // Names only: the values travel in mpirun's environment, not on a command line.
  for (const auto& [name, value] : forwarded) argv.insert(argv.end(), {"-x", name});
  argv.insert(argv.end(), agent_argv.begin(), agent_argv.end());
  return argv;
}

std::vector<std::pair<int, int>> subtree_children(int first, int last, int fanout) {
  std::vector<std::pair<int, int>> ranges;
  const int rest = last - first;
  if (rest <= 0) return ranges;
  const int count = std::min(std::max(fanout, 1), rest);
  int next = first + 1;
  for (int i = 0; i < count; ++i) {
    const int size = rest / count + (i < rest % count ? 1 : 0);
    ranges.emplace_back(next, next + size - 1);
    next += size;
  }
  return ranges;
}

AgentLaunches agent_launches(const AgentOptions& options, const PlanInputs& inputs,
                             const LaunchPlan& plan, const Environment& env,
                             const std::string& self) {
  AgentLaunches launches;
  if (inputs.launcher == LauncherKind::kLocal) return launches;
  const Environment forwarded = forwarded_environment(env, options.env_vars);
  const auto agent_argv = [&](const NodePlan* node, int subtree_last) {
    std::vector<std::string> argv = {self};
    const auto args = agent_arguments(options, plan, node, subtree_last);
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  };
  if (inputs.launcher == LauncherKind::kSsh) {
    const std::string ssh = resolve_program("ssh", env);
    const std::string cwd = current_directory();
    const std::vector<std::string> own_env = merge_environment(env, {});
    // This node's children in the ssh tree: every other node when the head is node 0 and
    // they are no more than --ssh-fanout; else each child starts the rest of its range.
    // --check asks every node itself: its agents answer for their own node only.
    std::vector<std::pair<int, int>> children;
    const int last = static_cast<int>(plan.nodes.size()) - 1;
    const int fanout = options.check ? last : options.ssh_fanout;
    if (options.agent) {
      children = subtree_children(plan.this_node, options.agent_subtree_last.value_or(0), fanout);
    } else if (plan.this_node == 0) {
      children = subtree_children(0, last, fanout);
    } else {
      for (const NodePlan& node : plan.nodes) {
        if (node.node_rank != plan.this_node) children.emplace_back(node.node_rank, node.node_rank);
      }
    }
    for (const auto& [first, subtree_last] : children) {
      const NodePlan& node = plan.nodes.at(static_cast<std::size_t>(first));
      ChildSpec agent;
      agent.agent = true;
      agent.node_rank = node.node_rank;
      agent.host = node.host;
      agent.path = ssh;
      agent.argv = ssh_command(node.host, options, cwd, agent_argv(&node, subtree_last));
      agent.env = own_env;
      agent.hello = agent_hello(forwarded);
      agent.control_nodes = subtree_last - first + 1;
      agent.heartbeat_on_stdin = true;
      launches.agents.push_back(std::move(agent));
    }
    return launches;
  }
  // srun and mpirun start an agent on this node too, and pass the environment themselves.
  launches.local_workers = false;
  ChildSpec agent;
  agent.agent = true;
  agent.node_rank = -1;
  agent.host = std::string(launcher_name(inputs.launcher));
  agent.path = resolve_program(agent.host, env);
  if (inputs.launcher == LauncherKind::kSrun) {
    std::vector<std::string> argv = agent_argv(nullptr, -1);
    argv.insert(argv.begin() + 1, "--agent-stdin");
    agent.argv = srun_command(plan, argv);
    agent.hello = agent_hello({});  // srun exports the environment itself
    agent.control_nodes = static_cast<int>(plan.nodes.size());  // --input=all: every agent
  } else {
    agent.argv = mpirun_command(plan, forwarded, agent_argv(nullptr, -1));
  }
  agent.env = merge_environment(env, {forwarded.begin(), forwarded.end()});
  launches.agents.push_back(std::move(agent));
  return launches;
}

}  // namespace ddprun
