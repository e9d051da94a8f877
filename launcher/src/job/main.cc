// ddprun: wires command line -> environment -> cluster and plan inputs -> job -> exit code.
// The entrance is a table: run() passes the door once and hands each mode to its own
// function below; what they share is resolved once (Session) and never rewritten.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <ctime>

#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/options.h"
#include "cli/program_command.h"
#include "ddprun/contract/errors.h"
#include "job/doctor.h"
#include "job/job_inputs.h"
#include "job/job_settings.h"
#include "job/preflight.h"
#include "job/rendezvous_job.h"
#include "job/report_file.h"
#include "job/round_setup.h"
#include "nodes/agents.h"
#include "nodes/ports.h"
#include "nodes/rendezvous_secret.h"
#include "output/output_fold.h"
#include "plan/deadline.h"
#include "plan/host_facts.h"
#include "plan/plan.h"
#include "plan/plan_format.h"
#include "plan/rank_environment.h"
#include "policy/supervision.h"
#include "report/control.h"
#include "report/labels.h"
#include "report/report.h"
#include "run/agent_messages.h"
#include "run/child_set.h"
#include "run/control_socket.h"
#include "run/process_runner.h"
#include "run/restart_policy.h"
#include "run/scratch_dir.h"
#include "run/stale_agents.h"

extern char** environ;

namespace ddprun {
namespace {

std::string tmpdir(const Environment& env) {
  return lookup(env, "TMPDIR").value_or("/tmp");
}

// A scheduler's tool (squeue, qstat, bjobs) for walltime.h: its stdout when it exits 0
// within a few seconds.
RunCommand tool_runner(const Environment& env) {
  return [&env](const std::vector<std::string>& argv) -> std::optional<std::string> {
    try {
      SpawnSpec spec{resolve_program(argv.front(), env), argv, merge_environment(env, {})};
      SignalChannel signals;
      const auto runs = run_all_captured(signals, {std::move(spec)}, {}, 5000);
      const CapturedRun& run = runs.front();
      if (run.timed_out || !WIFEXITED(run.wait_status) || WEXITSTATUS(run.wait_status) != 0) {
        return std::nullopt;
      }
      return run.out;
    } catch (const std::exception&) {
      return std::nullopt;  // not installed: no end time from it
    }
  };
}

// What the modes that plan share, resolved once: the options as the job takes them, the
// environment with --env laid over it, the plan's inputs and the job's end.
struct Session {
  Options options;
  Environment env;
  PlanInputs inputs;
  std::optional<JobEndTime> job_end;
  std::int64_t now_unix = 0;
  RunnerClock::time_point launched;  // the report's start-up phases
  std::int64_t launched_unix = 0;
};

// The door, for every mode but --control: an agent's hello from its head, the worker
// command, and --env NAME=VALUE, which holds for every worker, the head's own included.
void pass_the_door(Options& options, Environment& env) {
  if (options.agent_stdin) read_agent_hello(STDIN_FILENO, env);
  options.program = worker_command(options, env, probe_file);
  forwarded_environment(env, options.env_vars);  // a bad --env fails here, on any node count
  for (const auto& item : options.env_vars) {
    const auto equals = item.find('=');
    if (equals != std::string::npos) env[item.substr(0, equals)] = item.substr(equals + 1);
  }
}

int run_doctor(const Options& options, const Environment& env) {
  std::cout << "ddprun doctor: what ddprun sees on this node\n"
            << format_doctor(gather_doctor_rows(options, env, doctor_program(options, env)));
  return kExitOk;
}

// The job's end (walltime), asked only of what needs it: agents learn it from the head
// (--deadline), --drain-before 0 asks nobody. The scheduler's tools (squeue, qstat) wait
// out their timeout when the controller does not answer: a dry run or a check never asks
// them. (Started once per node, every node still asks when the environment has no end
// time: each must send its own workers the notice.)
std::optional<JobEndTime> find_job_end(const Session& s) {
  const Options& options = s.options;
  const Mode mode = options.mode;
  const bool ask = mode == Mode::kPrintJobEnd || options.drain_before_s > 0 ||
                   options.deadline_unix || options.time_limit_s;
  if (!ask) return std::nullopt;
  const bool ask_tools = mode == Mode::kPrintJobEnd || mode == Mode::kRun;
  const RunCommand no_tools = [](const std::vector<std::string>&) -> std::optional<std::string> {
    return std::nullopt;
  };
  return resolve_job_end(options.deadline_unix, options.time_limit_s, s.inputs.cluster.scheduler,
                         s.inputs.cluster.job_id, s.env, ask_tools ? tool_runner(s.env) : no_tools,
                         s.now_unix);
}

// A run's output options left to ddprun: torchrun keeps redirected output (and the
// filtered copies) in a temporary folder when given none; the folded console is for a
// person at a terminal only (docs/launching.md#folded-output), so the plan is built for
// its rank count only then (agents are told by their head).
void settle_run_output(Session& s) {
  Options& options = s.options;
  const bool filters =
      !options.duplicate_stdout_filters.empty() || !options.duplicate_stderr_filters.empty();
  if (!options.log_dir && (options.redirects.any() || options.tee.any() || filters)) {
    const LogFolder logs = default_log_folder(tmpdir(s.env), s.inputs.run_id);
    std::cerr << logs.note;
    options.log_dir = logs.path;
  }
  if (!options.fold_output) {
    options.fold_output =
        s.inputs.stdout_is_tty && !options.agent &&
        static_cast<int>(build_plan(plan_options(options), s.inputs, s.env).ranks.size()) >=
            kFoldFromRanks;
  }
}

Session resolve_session(Options options, Environment env, RunnerClock::time_point launched,
                        std::int64_t launched_unix) {
  const Mode mode = options.mode;
  Session s{std::move(options), std::move(env), {}, std::nullopt, 0, launched, launched_unix};
  PlanInputs& inputs = s.inputs;
  inputs = resolve_plan_inputs(s.options, s.env, read_file_from_disk, read_host_facts(),
                               system_services(s.env), mode == Mode::kRun || mode == Mode::kCheck);
  // What the scheduler's reader found odd but usable (a --segment size that does not
  // divide the nodes): node 0 says it once for the job.
  if (!s.options.agent && inputs.cluster.this_node.value_or(0) == 0) {
    for (const std::string& warning : inputs.cluster.warnings) {
      std::cerr << "ddprun: warning: " << warning << "\n";
    }
  }
  // Each node replaces its own ranks and tells its head: srun and mpirun stand for every
  // node as one child that takes no messages.
  if (s.options.restart_scope == RestartScope::kRank &&
      (inputs.launcher == LauncherKind::kSrun || inputs.launcher == LauncherKind::kMpirun)) {
    throw UsageError(
        "--restart-scope rank over several nodes needs a ddprun on each node that talks "
        "with node 0's; --launcher " +
            std::string(inputs.launcher == LauncherKind::kSrun ? "srun" : "mpirun") +
            " starts them as one task",
        "use --launcher ssh, or start ddprun once per node (srun ddprun ..., mpirun -npernode "
        "1 ddprun ...) with --max-restarts, so that the nodes meet");
  }
  // MIG devices name no PCI device: nvidia-smi -L tells which GPU each is on.
  const auto& gpus = inputs.gpus.devices;
  if (s.options.bind != BindMode::kNone &&
      std::any_of(gpus.begin(), gpus.end(),
                  [](const std::string& g) { return g.rfind("MIG-", 0) == 0; })) {
    inputs.mig_parents = parse_mig_parents(tool_runner(s.env)({"nvidia-smi", "-L"}).value_or(""));
  }
  s.now_unix = static_cast<std::int64_t>(std::time(nullptr));
  s.job_end = find_job_end(s);
  inputs.stdout_is_tty = ::isatty(STDOUT_FILENO) == 1;
  if (mode == Mode::kDryRun || mode == Mode::kCheck) {
    inputs.scratch_dir = tmpdir(s.env) + "/ddprun-" + inputs.run_id;  // as a run names it
  }
  if (mode == Mode::kRun) {
    if (s.job_end) inputs.job_end_unix = s.job_end->unix_seconds;
    settle_run_output(s);
  }
  return s;
}

int print_job_end(const Session& s) {
  if (!s.job_end) return 1;
  std::cout << s.job_end->unix_seconds << " " << s.job_end->source << "\n";
  return kExitOk;
}

// --dry-run and --check. Streamed: a plan of 131,072 ranks prints 81 MB (143 MB as JSON),
// never held whole.
int print_plan(const Session& s) {
  const LaunchPlan plan = build_plan(plan_options(s.options), s.inputs, s.env);
  if (s.options.mode == Mode::kCheck) return run_check(s.options, s.inputs, plan, s.env, std::cout);
  if (s.options.format == PlanFormat::kJson) {
    write_plan_json(plan, std::cout);
  } else {
    write_plan_text(plan, std::cout);
  }
  return kExitOk;
}

// The runner's settings that come from the session (the job handle's are added with it).
ProcessRunnerConfig make_runner_config(const Session& s) {
  const Options& options = s.options;
  ProcessRunnerConfig config;
  config.relay.console_is_tty = s.inputs.stdout_is_tty;
  config.relay.fold = *options.fold_output;
  config.relay.fold_window = std::chrono::milliseconds(options.fold_window_ms);
  config.relay.stdout_filters = options.duplicate_stdout_filters;
  config.relay.stderr_filters = options.duplicate_stderr_filters;
  config.tag_output = options.tag_output;
  config.head_fd = options.agent_stdin ? STDIN_FILENO : -1;
  config.head_beats_on_stdin = options.agent_stdin && options.agent_head_beats;
  if (options.stacks) {
    try {
      config.eu_stack = resolve_program("eu-stack", s.env);
    } catch (const ProgramError&) {
      // Each capture says so in one line.
    }
  }
  // Once per job, by node 0's ddprun (every other node's would repeat it): for its ranks.
  config.show_first_steps =
      !options.quiet && !options.agent && s.inputs.cluster.this_node.value_or(0) == 0;
  config.record_first_steps = writes_report(options, s.inputs);
  config.run_id = s.inputs.run_id;
  config.max_restarts = options.max_restarts;
  // A closed terminal does not end the job (docs/launching.md), unless SIGHUP is named in
  // --signals-to-handle.
  config.detach_on_hangup = !options.agent && std::find(options.signals_to_handle.begin(),
                                                        options.signals_to_handle.end(),
                                                        SIGHUP) == options.signals_to_handle.end();
  config.tmp_dir = tmpdir(s.env);
  config.warm_spare = options.warm_spare && options.max_restarts > 0;
  return config;
}

// The handle on the running job (control_socket.h): every ddprun that is not an agent
// serves one on its node; node 0's is the folder's "latest". Sets `config`'s control, and
// names its console file after the socket (the pid keeps two runs of one job id apart).
// Returns that name's stem, which the console's spill file shares.
std::string open_control(const Session& s, std::optional<ControlServer>& control,
                         ProcessRunnerConfig& config) {
  const int node = s.inputs.cluster.this_node.value_or(0);
  const std::string control_dir = control_folder(s.env, ::geteuid());
  const std::string control_name = control_socket_name(s.inputs.run_id, node);
  if (!s.options.agent) {
    try {
      control.emplace(control_dir, control_name, node == 0);
      if (!control->problem().empty()) {
        std::cerr << "ddprun: warning: " << control->problem()
                  << "; --status, --stacks and --stop cannot reach this run\n";
      } else {
        config.control = &*control;
      }
    } catch (const Error& e) {
      std::cerr << "ddprun: warning: no control socket: " << e.what()
                << (e.hint().empty() ? "" : " (" + e.hint() + ")") << "\n";
    }
  }
  const std::string stem = control_name.substr(0, control_name.size() - 5) + "-" +
                           std::to_string(::getpid());  // without ".sock"
  config.console_file = stem + ".console";
  config.private_dir = config.control != nullptr ? control_dir : std::string();
  return stem;
}

// What this node's rounds run with, made once by run_here.
struct RunContext {
  SignalChannel& signals;
  Guardian& guardian;
  const ProcessRunnerConfig& runner_config;
  const JobSettings& settings;
  std::string program_path;
  std::string self;
  std::string spill_path;  // a console that stalls across the job's end: the rest goes here
};

// This node's rounds, here or through agents; with `meet`, as node 0 of per-node rounds:
// it gathers the other nodes before every round on the launchers' port, and the workers
// get another port every round. ddprun's messages go through the runner's console: a
// console that is not reading must not hold up the job, nor its exit for long.
int run_rounds(const Session& s, const RunContext& run, bool meet) {
  std::optional<RendezvousHost> rendezvous;  // keeps every node's connection for the job
  RoundState round_state = first_round_state(s.inputs);
  if (meet) {
    open_rendezvous(rendezvous, s.options, s.inputs, s.env, s.inputs.master_port);
    HeldPort picked = hold_free_port();
    round_state.master_port = picked.port;
    round_state.master_port_hold = std::move(picked.hold);
    round_state.fixed_port = false;
  }
  ProcessRunner runner(run.signals, run.guardian, run.runner_config);
  // --restart-scope rank: a node lost during a round may join it again, live.
  std::optional<RejoinsDuringRound> rejoins;
  if (rendezvous && s.options.restart_scope == RestartScope::kRank && s.options.max_restarts > 0) {
    rejoins.emplace(*rendezvous, runner.messages());
    runner.set_round_joins(&*rejoins);
  }
  // On the way out (an error mid-round included) the runner, which outlives `rejoins`, takes
  // no join any more.
  struct ForgetJoins {
    ProcessRunner& runner;
    ~ForgetJoins() { runner.set_round_joins(nullptr); }
  } forget_joins{runner};
  std::optional<ReportFile> report;  // --report: node 0's view of the job, round by round
  if (writes_report(s.options, s.inputs)) {
    const double inputs_seconds =
        std::chrono::duration<double>(RunnerClock::now() - s.launched).count();
    report.emplace(*s.options.report,
                   report_start(s.options, s.inputs, s.launched_unix, inputs_seconds),
                   runner.messages());
  }
  const RoundObserver observe = [&](const RoundResult* result, const RoundDecision& decision) {
    if (!report) return;
    std::vector<std::string> hosts;
    for (const NodeSlots& node : round_state.nodes) hosts.push_back(node.host);
    report->add_round(result, decision, std::move(hosts));
  };
  const auto start_round = [&](int round, const RoundResult* previous) {
    RoundSetup setup = prepare_round(s.options, s.inputs, round_state, s.env, round, previous,
                                     run.program_path, run.self);
    runner.set_restarts_spent(round_state.restarts_spent());
    if (rendezvous) {
      gather_into_round(setup, *rendezvous, round, round_state.master_port, s.options, run.signals,
                        runner, run.runner_config.detach_on_hangup, rejoins ? &*rejoins : nullptr);
    }
    return setup;
  };
  const int code = run_job(runner, run.settings, start_round, runner.messages(), observe);
  if (rendezvous) rendezvous->end_job({code, ""});  // every node exits with the job's code
  runner.finish_console(run.spill_path);
  runner.release_attached(code);
  return code;
}

// --run (the default): the job on this node, or this node's part of per-node rounds.
int run_here(Session& s) {
  const Options& options = s.options;
  // One ddprun per node (srun, mpirun, by hand) that may restart: the launchers meet
  // before every round (rendezvous.h), node 0's on the agreed master port, so that every
  // node runs the same rounds. By hand, they always meet: nothing else makes sure every
  // node comes (a node that never does is one error after --rdzv-conf join_timeout), or
  // gives c10d its node ranks.
  const bool meet = (options.max_restarts > 0 || s.inputs.cluster.scheduler == "static") &&
                    !options.agent && s.inputs.cluster.nodes.size() > 1 &&
                    started_per_node(options, s.inputs.cluster, s.env);
  const std::string program_path = resolve_program(options.program.front(), s.env);
  if (options.agent && options.agent_replaces && options.node_rank) {
    // In a lost node's place, maybe on its own host: what is left of its earlier ddprun must
    // not keep the devices (or run the same ranks) while the ranks start here again.
    // As the head wrote them on this agent's command line, and in its workers' environment.
    const StaleProcesses stale = stale_processes(
        {s.inputs.run_id, *options.node_rank, options.master_addr.value_or(s.inputs.master_addr),
         options.master_port.value_or(s.inputs.master_port)});
    if (!stale.empty()) {
      const bool ended = end_stale(stale, std::chrono::seconds(10));
      std::string pids;
      for (const auto* group : {&stale.agents, &stale.guardians, &stale.workers}) {
        for (const pid_t pid : *group) pids += (pids.empty() ? "" : " ") + std::to_string(pid);
      }
      std::cerr << "ddprun: node " << *options.node_rank << " (" << s.inputs.host.hostname << "): "
                << (ended ? "ended what was left of its earlier ddprun on this host"
                          : "warning: what is left of its earlier ddprun on this host did not "
                            "end within 10 s")
                << " (" << stale.agents.size() << " ddprun, " << stale.guardians.size()
                << " guardian(s), " << stale.workers.size() << " worker(s) still running: pids "
                << pids << ")"
                << (ended ? " before its ranks start here again" : "; its ranks start anyway")
                << "\n";
    }
  }
  // Made below, declared first: it is told that ddprun leaves only after the control socket
  // and the scratch folder are gone (their destructors run before its own), so a ddprun
  // killed on its way out (a signal pending as an exception unwinds) still leaves nothing.
  std::optional<Guardian> guardian;
  std::optional<ScratchDir> scratch;
  if (!options.log_dir) scratch.emplace(tmpdir(s.env), s.inputs.run_id);
  s.inputs.scratch_dir = scratch ? scratch->path() : std::string();  // exists while the job runs
  ProcessRunnerConfig runner_config = make_runner_config(s);
  std::optional<ControlServer> control;
  const std::string stem = open_control(s, control, runner_config);
  JobSettings settings = job_settings(options, s.job_end, s.now_unix, RunnerClock::now(),
                                      colour_wanted(STDERR_FILENO, s.env));
  settings.round.node_rank = s.inputs.cluster.this_node.value_or(0);
  if (settings.round.drain_at && !options.quiet) {
    std::cerr << format_drain_line(*s.job_end, options.drain_before_s, options.drain_signal,
                                   s.now_unix);
  }
  SignalChannel signals(options.signals_to_handle);
  guardian.emplace(s.inputs.scratch_dir, [&control] {
    if (control) control->remove_files();
  });
  const std::string spill_name = stem + ".txt";
  const RunContext run{signals,
                       *guardian,
                       runner_config,
                       settings,
                       program_path,
                       this_executable(),
                       options.log_dir ? *options.log_dir + "/console_not_shown-" + spill_name
                                       : "ddprun-console-" + spill_name};  // a private folder's
  int code = 0;
  if (meet && s.inputs.cluster.this_node != 0) {
    PeerJob peer{options, s.inputs, s.env, program_path, run.self, settings, runner_config};
    code = run_peer_job(peer, s.inputs.master_port, secret_read_once(s.env),
                        rendezvous_join_timeout(options), signals, *guardian, run.spill_path);
  } else {
    code = run_rounds(s, run, meet);
  }
  signals.discard_pending();  // the outcome is decided; a late signal must not change it
  return code;
}

int run(Options options, Environment env) {
  const auto launched = RunnerClock::now();
  const auto launched_unix = static_cast<std::int64_t>(std::time(nullptr));
  const Mode mode = options.mode;
  if (mode != Mode::kControl) pass_the_door(options, env);
  const auto session = [&] {
    return resolve_session(std::move(options), std::move(env), launched, launched_unix);
  };
  switch (mode) {
    case Mode::kControl:
      return run_control_client(options.control, options.control_run, env, std::cout, std::cerr);
    case Mode::kDoctor:
      return run_doctor(options, env);
    case Mode::kPrintJobEnd:
      return print_job_end(session());
    case Mode::kDryRun:
    case Mode::kCheck:
      return print_plan(session());
    case Mode::kRun: {
      Session s = session();
      return run_here(s);
    }
  }
  return kExitLauncherError;
}

}  // namespace
}  // namespace ddprun

int main(int argc, char** argv) {
  const ddprun::Environment env = ddprun::snapshot_environment(environ);
  const bool colour = ddprun::colour_wanted(STDERR_FILENO, env);
  const auto command_line = ddprun::parse_command_line(argc, argv, env);
  if (!command_line.options) {
    std::string message = command_line.message;
    const std::string plain = ddprun::error_label(false);
    if (message.rfind(plain, 0) == 0 && colour) {
      message.replace(0, plain.size(), ddprun::error_label(true));
    }
    (command_line.exit_code == 0 ? std::cout : std::cerr) << message;
    return command_line.exit_code;
  }
  const ddprun::Options& options = *command_line.options;
  try {
    return ddprun::run(options, env);
  } catch (const ddprun::Error& e) {
    if (options.agent && options.mode == ddprun::Mode::kRun && options.node_rank) {
      // An ssh agent's own error travels to its head as the node's event, as a node behind
      // the rendezvous tells node 0 (rendezvous_job.cc): the head names it and stops every
      // node without a restart.
      ddprun::NodeEvent failed;
      failed.kind = ddprun::NodeEvent::Kind::kSetupFailed;
      failed.node = *options.node_rank;
      failed.code = e.exit_code();
      failed.what = e.what();
      std::cerr << ddprun::node_event_line(failed);
    }
    std::cerr << ddprun::error_label(colour) << e.what();
    if (!e.hint().empty()) std::cerr << " (" << e.hint() << ")";
    std::cerr << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << ddprun::error_label(colour) << e.what() << "\n";
    return ddprun::kExitLauncherError;
  }
}
