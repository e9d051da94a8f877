#include <algorithm>
#include <string>
#include <vector>

#include "cli/parser.h"
#include "ddprun/contract/errors.h"
#include "plan/deadline.h"
#include "plan/restart_rule.h"
#include "plan/torchrun_values.h"

namespace ddprun {
namespace {

// torchrun's comma-separated filter list; an empty piece would match every line and is
// left out.
std::vector<std::string> split_filters(const std::string& list) {
  std::vector<std::string> filters;
  for (std::size_t start = 0; start <= list.size();) {
    const auto comma = std::min(list.find(',', start), list.size());
    if (comma > start) filters.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return filters;
}

}  // namespace

void finish_options(Parser& parser) {
  Options& options = parser.options;
  TorchrunStrings& torchrun = parser.torchrun;
  const CLI::App& app = parser.app;
  // The mode: one flag at most chooses it.
  std::string chosen;
  const auto choose = [&](const std::string& flag, Mode mode) {
    if (!chosen.empty()) throw UsageError(chosen + " and " + flag + " exclude each other");
    chosen = flag;
    options.mode = mode;
  };
  if (parser.dry_run) choose("--dry-run", Mode::kDryRun);
  if (parser.check) choose("--check", Mode::kCheck);
  if (parser.doctor) choose("--doctor", Mode::kDoctor);
  if (parser.print_job_end) choose("--print-job-end", Mode::kPrintJobEnd);
  for (const ControlVerb verb :
       {ControlVerb::kStatus, ControlVerb::kStacks, ControlVerb::kStop, ControlVerb::kAttach}) {
    const std::string flag = "--" + std::string(control_verb_name(verb));
    if (app.count(flag) == 0) continue;
    choose(flag, Mode::kControl);
    options.control = verb;
    const auto& run = parser.control_runs[static_cast<int>(verb)];
    options.control_run = run.empty() ? std::string() : run.front();
  }
  if (torchrun.nnodes) options.nnodes = parse_nnodes(*torchrun.nnodes);
  const bool repeats = options.restart_on.allow_repeats;
  options.restart_on = parse_restart_on(torchrun.restart_on);
  options.restart_on.allow_repeats = repeats;
  if (torchrun.restart_scope == "rank") options.restart_scope = RestartScope::kRank;
  if (options.warm_spare && options.restart_scope != RestartScope::kRank) {
    throw UsageError(
        "--warm-spare needs --restart-scope rank: only a lost rank's replacement "
        "takes the spare",
        "add --restart-scope rank, or leave out --warm-spare");
  }
  if (options.agent_replaces && (!options.agent || options.restart_scope != RestartScope::kRank)) {
    throw UsageError("--agent-replaces is for agents under --restart-scope rank",
                     "it is set by a head ddprun; leave it out");
  }
  check_rendezvous_backend(options.rdzv_backend);
  options.rdzv_conf = parse_rendezvous_conf(torchrun.rdzv_conf);
  if (torchrun.rdzv_endpoint && !torchrun.standalone) {
    const Endpoint endpoint = parse_endpoint("--rdzv-endpoint", *torchrun.rdzv_endpoint);
    if (options.master_addr && *options.master_addr != endpoint.host) {
      throw UsageError("--rdzv-endpoint " + *torchrun.rdzv_endpoint + " and --master-addr " +
                       *options.master_addr + " name different hosts; give one of them");
    }
    options.master_addr = endpoint.host;
    // torchrun's c10d store listens on 29400 unless told otherwise.
    const int port = endpoint.port.value_or(options.rdzv_backend == "c10d" ? 29400 : 0);
    if (port == 0) {
      options.free_master_port = !options.master_port;
    } else {
      if (options.master_port && *options.master_port != port) {
        throw UsageError("--rdzv-endpoint " + *torchrun.rdzv_endpoint + " and --master-port " +
                         std::to_string(*options.master_port) + " name different ports");
      }
      options.master_port = port;
    }
  }
  if (torchrun.standalone) {
    // torchrun's --standalone: a store on this machine, on a free port, whatever else says.
    if (options.nnodes.value_or(1) != 1) {
      throw UsageError("--standalone runs one node; --nnodes " + std::to_string(*options.nnodes) +
                       " asks for more");
    }
    if (!options.scheduler) options.scheduler = "local";
    if (!options.master_addr) options.master_addr = "127.0.0.1";
    if (!options.master_port) options.free_master_port = true;
  }
  // torchrun replaces the rendezvous id with a fresh one under --standalone (a lone node
  // has nothing to meet); ddprun's own --run-id is kept.
  if (torchrun.rdzv_id && !torchrun.standalone && !options.run_id)
    options.run_id = torchrun.rdzv_id;
  if (torchrun.redirects)
    options.redirects = parse_stream_choice("--redirects", *torchrun.redirects);
  if (torchrun.tee) options.tee = parse_stream_choice("--tee", *torchrun.tee);
  if (torchrun.local_ranks_filter) {
    options.local_ranks_filter = parse_local_ranks_filter(*torchrun.local_ranks_filter);
  }
  if (parser.fold_output && parser.no_fold_output) {
    throw UsageError("--fold-output and --no-fold-output exclude each other");
  }
  if (parser.fold_output || parser.no_fold_output) options.fold_output = parser.fold_output;
  if (torchrun.duplicate_stdout_filters) {
    options.duplicate_stdout_filters = split_filters(*torchrun.duplicate_stdout_filters);
  }
  if (torchrun.duplicate_stderr_filters) {
    options.duplicate_stderr_filters = split_filters(*torchrun.duplicate_stderr_filters);
  }
  if (torchrun.signals_to_handle) {
    options.signals_to_handle = parse_signal_list(*torchrun.signals_to_handle);
  }
  if (torchrun.deadline && torchrun.time_limit) {
    throw UsageError("--deadline and --time-limit both give the job's end; give one");
  }
  if (torchrun.deadline) options.deadline_unix = parse_deadline(*torchrun.deadline);
  if (torchrun.time_limit) {
    options.time_limit_s = parse_duration("--time-limit", *torchrun.time_limit);
  }
  if (torchrun.drain_before) {
    options.drain_before_s = parse_duration("--drain-before", *torchrun.drain_before);
  }
  if (torchrun.drain_signal) {
    const auto signals = parse_signal_list(*torchrun.drain_signal);
    if (signals.size() != 1) throw UsageError("--drain-signal: give one signal");
    options.drain_signal = signals.front();
  }
  if (torchrun.event_log_handler != "null") {
    throw UsageError("--event-log-handler " + torchrun.event_log_handler +
                     ": torchrun's Python event handlers are not supported; only 'null'");
  }
  if (torchrun.logs_specs) {
    throw UsageError("--logs-specs " + *torchrun.logs_specs +
                         ": torchrun's Python log plugins are not supported",
                     "use --log-dir with --redirects/--tee, and --tag-output");
  }
  if (torchrun.numa_binding) {
    const auto mode = parse_numa_binding(*torchrun.numa_binding);
    if (!mode) {
      throw UsageError("--numa-binding " + *torchrun.numa_binding + ": not a binding mode",
                       "give node, socket, exclusive, core-complex or none");
    }
    options.bind = *mode;
  }
  if (torchrun.cpu_bind) {
    const auto mode = parse_cpu_bind(*torchrun.cpu_bind);
    if (!mode) {
      throw UsageError("--cpu-bind " + *torchrun.cpu_bind + ": not a binding mode",
                       "give cores, numa or none");
    }
    if (*mode != BindMode::kNone && options.bind != BindMode::kNone) {
      throw UsageError("--numa-binding and --cpu-bind cannot go together",
                       "--numa-binding binds near each worker's GPU, --cpu-bind splits the "
                       "CPUs without GPUs: give one");
    }
    if (*mode != BindMode::kNone) options.bind = *mode;
  }
  if (options.gpus_per_proc) {
    // Without a number of workers, the GPUs set it: GPUs / K on every node ("auto" and
    // "gpu" both mean that with --gpus-per-proc).
    if (app.count("--nproc-per-node") == 0) options.nproc_per_node = "auto";
    if (options.nproc_per_node == "cpu") {
      throw UsageError("--gpus-per-proc " + std::to_string(*options.gpus_per_proc) +
                           " and --nproc-per-node cpu cannot go together",
                       "give --nproc-per-node gpu, a number, or leave it out");
    }
  }
  if (options.check_bandwidth && options.mode != Mode::kCheck) {
    throw UsageError("--bandwidth measures the links during --check",
                     "run ddprun --check --bandwidth ...");
  }
  if (options.report && options.mode != Mode::kRun) {
    throw UsageError("--report writes the report of a job that runs",
                     "leave --report out with --dry-run, --check, --doctor, --print-job-end "
                     "and the job handle's options");
  }
  if (options.module && options.no_python) {
    throw UsageError("--module and --no-python cannot go together (as in torchrun)");
  }
  if (options.agent != options.agent_nodes.has_value()) {
    throw UsageError(
        "--agent and --agent-nodes go together (they are set by a head ddprun, not by hand)");
  }
}

}  // namespace ddprun
