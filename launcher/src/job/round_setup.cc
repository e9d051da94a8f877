#include "job/round_setup.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "ddprun/contract/env_names.h"
#include "ddprun/contract/errors.h"
#include "job/agent_options.h"
#include "nodes/agents.h"
#include "nodes/ports.h"
#include "plan/rank_environment.h"
#include "report/report.h"
#include "run/python_stack_hook.h"
#include "run/restart_policy.h"
#include "run/scratch_dir.h"

namespace ddprun {

std::vector<ChildSpec> worker_children(const LaunchPlan& plan, const std::string& program_path,
                                       const Environment& env, const std::string& python_hook_dir,
                                       const std::string& membership_file, bool replacements) {
  const NodePlan& node = plan.nodes.at(static_cast<std::size_t>(plan.this_node));
  std::vector<ChildSpec> children;
  children.reserve(static_cast<std::size_t>(node.nproc));
  for (int local = 0; local < node.nproc; ++local) {
    const RankPlan& rank = plan.ranks.at(static_cast<std::size_t>(node.first_rank + local));
    ChildSpec& child = children.emplace_back();
    child.node_rank = rank.node_rank;
    child.rank = rank.rank;
    child.local_rank = rank.local_rank;
    child.host = rank.host;
    child.path = program_path;
    child.argv = plan.program;
    auto vars = rank_environment(plan, rank);
    if (!python_hook_dir.empty()) {
      child.python_stack_file = rank_file(plan, rank.rank, RankFile::kPythonStacks);
      vars.emplace_back(env::kDdprunPythonStackFile, child.python_stack_file);
      const auto python_path = lookup(env, "PYTHONPATH");
      vars.emplace_back("PYTHONPATH",
                        python_hook_dir + (python_path && !python_path->empty() ? ":" + *python_path
                                                                                : std::string()));
    }
    if (!membership_file.empty()) {
      child.membership_file = membership_file;
      vars.emplace_back(env::kDdprunMembershipFile, membership_file);
    }
    if (replacements) vars.emplace_back(env::kDdprunReplacement, "1");
    child.env = merge_environment(env, vars);
    child.stacks_log = rank_file(plan, rank.rank, RankFile::kStacksLog);
    child.trace_file = rank_file(plan, rank.rank, RankFile::kTraceFile);
    child.stdout_log = rank_file(plan, rank.rank, RankFile::kStdoutLog);
    child.stderr_log = rank_file(plan, rank.rank, RankFile::kStderrLog);
    child.error_file = rank_file(plan, rank.rank, RankFile::kErrorFile);
    child.progress_file = rank_file(plan, rank.rank, RankFile::kProgressFile);
    if (const RankPlacement* placement = rank_placement(plan, rank)) child.cpus = placement->cpus;
    child.stdout_to_console = (rank.console_streams & 1) != 0;
    child.stderr_to_console = (rank.console_streams & 2) != 0;
  }
  return children;
}

RoundState first_round_state(const PlanInputs& inputs) {
  RoundState state;
  state.restart_count = inputs.restart_count;
  state.master_port = inputs.master_port;
  state.fixed_port = inputs.fixed_port;
  state.nodes = inputs.cluster.nodes;
  state.spare_nodes = inputs.spare_nodes;
  state.this_node = inputs.cluster.this_node;
  return state;
}

PlanInputs round_inputs(const PlanInputs& inputs, const RoundState& state) {
  PlanInputs round = inputs;
  round.restart_count = state.restart_count;
  round.master_port = state.master_port;
  round.fixed_port = state.fixed_port;
  round.cluster.nodes = state.nodes;
  round.spare_nodes = state.spare_nodes;
  round.cluster.this_node = state.this_node;
  return round;
}

namespace {

// How long ssh may take to reach a lost node again (--rdzv-conf join_timeout when given).
constexpr double kNodeAgainConnectSeconds = 10;

}  // namespace

SpareNodes spare_nodes(const Options& options, const PlanInputs& job_inputs, RoundState& state,
                       const Environment& env, const std::string& self) {
  return [&options, &job_inputs, &state, &env, self](int node) -> std::optional<SpareNode> {
    if (node < 0 || node >= static_cast<int>(state.nodes.size()) || node == state.this_node) {
      return std::nullopt;
    }
    NodeSlots& place = state.nodes[static_cast<std::size_t>(node)];
    const auto spare = std::find_if(state.spare_nodes.begin(), state.spare_nodes.end(),
                                    [&](const NodeSlots& s) { return s.slots == place.slots; });
    // No spare fits: the node itself, reached anew (its ddprun alone may have died).
    const bool again = spare == state.spare_nodes.end();
    if (!again) {
      place = *spare;
      state.spare_nodes.erase(spare);
    }
    // The round's plan with the spare in the node's place: the same ranks, port and round.
    const PlanInputs inputs = round_inputs(job_inputs, state);
    const LaunchPlan plan = build_plan(plan_options(options), inputs, env);
    AgentOptions agents = agent_options(options);
    agents.passed_on.emplace_back("--agent-replaces");
    // Under an agent of this head's own, also in an ssh tree (the node's parent agent handed
    // it up): one agent for the node alone.
    agents.ssh_fanout = std::max(agents.ssh_fanout, static_cast<int>(plan.nodes.size()));
    // A host that is down must not hold the survivors for ssh's own connect timeout.
    if (again && !agents.join_timeout_s) agents.join_timeout_s = kNodeAgainConnectSeconds;
    for (ChildSpec& agent : agent_launches(agents, inputs, plan, env, self).agents) {
      if (agent.node_rank == node) return SpareNode{std::move(agent), again};
    }
    return std::nullopt;
  };
}

std::string replace_failed_node(RoundState& state, std::optional<int> this_node,
                                const RoundResult& previous) {
  if (!previous.first_failure || state.spare_nodes.empty()) return {};
  // srun and mpirun stand for all nodes at once: no node to blame. In the ssh tree, the
  // agent that failed first names the node below it whose rank did.
  const auto node = first_failed_node(previous);
  if (!node || *node == this_node || *node >= static_cast<int>(state.nodes.size())) return {};
  NodeSlots& place = state.nodes.at(static_cast<std::size_t>(*node));
  const auto spare = std::find_if(state.spare_nodes.begin(), state.spare_nodes.end(),
                                  [&](const NodeSlots& s) { return s.slots == place.slots; });
  if (spare == state.spare_nodes.end()) return {};
  const std::string line = "ddprun: leaving " + place.host + " out: node " + std::to_string(*node) +
                           " failed first; the spare node " + spare->host + " takes its place (" +
                           std::to_string(state.spare_nodes.size() - 1) + " spare(s) left)\n";
  place = *spare;
  state.spare_nodes.erase(spare);
  return line;
}

RoundSetup prepare_round(const Options& options, const PlanInputs& job_inputs, RoundState& state,
                         const Environment& env, int round, const RoundResult* previous,
                         const std::string& program_path, const std::string& self) {
  std::string notice =
      previous ? replace_failed_node(state, state.this_node, *previous) : std::string();
  state.restart_count = options.agent ? options.restart_count.value_or(0) : round;
  if (previous) state.replacements += previous->recoveries;
  if (!state.fixed_port && !state.master_port_hold.valid() && round == 0) {
    state.master_port_hold = hold_port(state.master_port);  // the inputs' pick, held from now
  }
  // Every restart, and round 0 when its pick was taken meanwhile: a port of its own.
  if (!state.fixed_port && (round > 0 || !state.master_port_hold.valid())) {
    HeldPort picked = hold_free_port();
    state.master_port = picked.port;
    state.master_port_hold = std::move(picked.hold);
  }
  const PlanInputs inputs = round_inputs(job_inputs, state);
  // A fixed port taken while the last round ran (another job, a stray process): say who
  // holds it now, as at the start, instead of starting a round that cannot bind it.
  if (round > 0 && inputs.fixed_port && inputs.cluster.this_node == 0 && !options.agent &&
      !port_is_free(inputs.master_port)) {
    const std::string holder = describe_port_user(inputs.master_port);
    throw UsageError("cannot restart: master port " + std::to_string(inputs.master_port) +
                         " was taken on this host while round " + std::to_string(round - 1) +
                         " ran" + (holder.empty() ? "" : ", by " + holder),
                     "free the port, or leave out --master-port so that every restart picks a "
                     "free one");
  }
  const LaunchPlan plan = build_plan(plan_options(options), inputs, env);
  AgentLaunches agents = agent_launches(agent_options(options), inputs, plan, env, self);
  RoundSetup setup;
  setup.notice = std::move(notice);
  if (agents.local_workers || options.log_dir) {
    make_private_folder(plan.attempt_dir, options.log_dir ? "name another --log-dir"
                                                          : "set TMPDIR to a folder of your own");
  }
  if (agents.local_workers) {
    // Absolute: a worker that changes its folder still finds it.
    const std::string hook_dir =
        options.stacks
            ? write_python_stack_hook(std::filesystem::absolute(plan.attempt_dir + "/python"))
            : std::string();
    // --restart-scope rank: the round's membership file, beside its progress files (none
    // without restarts: no rank is ever replaced, and the workers know it from its absence).
    const std::string membership =
        options.restart_scope == RestartScope::kRank && options.max_restarts > 0
            ? std::filesystem::absolute(plan.attempt_dir + "/membership.json").string()
            : std::string();
    setup.children =
        worker_children(plan, program_path, env, hook_dir, membership, options.agent_replaces);
    for (ChildSpec& child : setup.children) {
      if (!options.duplicate_stdout_filters.empty())
        child.filtered_stdout_log = filtered_log(plan, false);
      if (!options.duplicate_stderr_filters.empty())
        child.filtered_stderr_log = filtered_log(plan, true);
    }
  }
  setup.summary = format_launch_summary(plan, options.log_dir.has_value(), state.restarts_spent());
  if (inputs.launcher != LauncherKind::kLocal) {
    const std::size_t reached = plan.nodes.size() - (agents.local_workers ? 1 : 0);
    setup.summary += "ddprun: starting " + std::to_string(reached) + " node agent(s) with " +
                     std::string(launcher_name(inputs.launcher));
    if (inputs.launcher == LauncherKind::kSsh && agents.agents.size() < reached) {
      setup.summary += ", a tree: " + std::to_string(agents.agents.size()) +
                       " from here, each starting the next at most " +
                       std::to_string(options.ssh_fanout);
    }
    setup.summary += "\n";
  }
  for (ChildSpec& agent : agents.agents) setup.children.push_back(std::move(agent));
  if (options.log_dir) setup.log_dir = plan.attempt_dir;
  // --restart-scope rank over ssh: a lost node's ranks go on on a spare node (or on the
  // node itself, reached anew), live.
  if (options.restart_scope == RestartScope::kRank && !options.agent && options.max_restarts > 0 &&
      inputs.launcher == LauncherKind::kSsh) {
    setup.spares = spare_nodes(options, job_inputs, state, env, self);
  }
  return setup;
}

}  // namespace ddprun
