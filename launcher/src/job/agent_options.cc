#include "job/agent_options.h"

#include <cstdio>

#include "plan/placement.h"
#include "plan/torchrun_values.h"

namespace ddprun {
namespace {

std::string join_filters(const std::vector<std::string>& filters) {
  std::string list;
  for (const auto& filter : filters) list += (list.empty() ? "" : ",") + filter;
  return list;
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

// The options each agent acts on for its own node, as its arguments.
std::vector<std::string> passed_on(const Options& options) {
  std::vector<std::string> args;
  if (options.log_dir) args.insert(args.end(), {"--log-dir", *options.log_dir});
  if (options.role != "default") args.insert(args.end(), {"--role", options.role});
  if (options.redirects.any()) {
    args.insert(args.end(), {"--redirects", format_stream_choice(options.redirects)});
  }
  if (options.tee.any()) args.insert(args.end(), {"--tee", format_stream_choice(options.tee)});
  if (options.local_ranks_filter) {
    args.insert(args.end(), {"--local-ranks-filter", format_rank_set(*options.local_ranks_filter)});
  }
  if (!options.signals_to_handle.empty()) {
    args.insert(args.end(), {"--signals-to-handle", format_signal_list(options.signals_to_handle)});
  }
  if (options.stall_timeout_s) {
    args.insert(args.end(), {"--stall-timeout", seconds_text(*options.stall_timeout_s)});
  }
  if (options.exit_timeout_s) {
    args.insert(args.end(), {"--exit-timeout", seconds_text(*options.exit_timeout_s)});
  }
  // Each agent hands out its own node's GPUs the same way.
  if (options.gpus_per_proc) {
    args.insert(args.end(), {"--gpus-per-proc", std::to_string(*options.gpus_per_proc)});
  }
  if (options.virtual_local_rank) args.emplace_back("--virtual-local-rank");
  if (options.bind != BindMode::kNone) {
    // "--numa-binding exclusive": each agent places its own node's workers.
    const std::string flag = bind_mode_text(options.bind);
    const auto space = flag.find(' ');
    args.insert(args.end(), {flag.substr(0, space), flag.substr(space + 1)});
  }
  if (options.tag_output) args.emplace_back("--tag-output");
  // Each node folds its own ranks' lines, as the head decided for the job.
  if (options.fold_output) {
    args.emplace_back(*options.fold_output ? "--fold-output" : "--no-fold-output");
    if (*options.fold_output && options.fold_window_ms != Options().fold_window_ms) {
      args.insert(args.end(), {"--fold-window", std::to_string(options.fold_window_ms)});
    }
  }
  if (!options.duplicate_stdout_filters.empty()) {
    args.insert(args.end(),
                {"--duplicate-stdout-filters", join_filters(options.duplicate_stdout_filters)});
  }
  if (!options.duplicate_stderr_filters.empty()) {
    args.insert(args.end(),
                {"--duplicate-stderr-filters", join_filters(options.duplicate_stderr_filters)});
  }
  if (!options.stacks) args.emplace_back("--no-stacks");
  // Each node replaces its own lost ranks and reports them (the head keeps the budget).
  if (options.restart_scope == RestartScope::kRank) {
    args.insert(args.end(), {"--restart-scope", "rank"});
    if (options.warm_spare) args.emplace_back("--warm-spare");
  }
  if (options.mode == Mode::kCheck) {
    args.emplace_back("--check");  // answer the preflight, run nothing
    for (const auto& path : options.check_paths) args.insert(args.end(), {"--check-path", path});
    if (options.check_bandwidth) args.emplace_back("--bandwidth");
  }
  return args;
}

}  // namespace

AgentOptions agent_options(const Options& options) {
  AgentOptions agents;
  agents.passed_on = passed_on(options);
  agents.shutdown_timeout = seconds_text(options.shutdown_timeout_s);
  agents.ssh_config = options.ssh_config;
  agents.ssh_fanout = options.ssh_fanout;
  agents.env_vars = options.env_vars;
  agents.join_timeout_s = options.rdzv_conf.join_timeout_s;
  agents.check = options.mode == Mode::kCheck;
  agents.agent = options.agent;
  agents.agent_subtree_last = options.agent_subtree_last;
  return agents;
}

}  // namespace ddprun
