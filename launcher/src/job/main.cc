// ddprun: wires command line -> environment -> cluster and plan inputs -> job -> exit code.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <ctime>

#include <iostream>
#include <optional>
#include <string_view>

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
#include "policy/job.h"
#include "report/control.h"
#include "report/labels.h"
#include "report/report.h"
#include "run/agent_messages.h"
#include "run/child_set.h"
#include "run/control_socket.h"
#include "run/process_runner.h"
#include "run/restart_policy.h"
#include "run/scratch_dir.h"

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

int run(Options options, Environment env) {
  const auto launched = RunnerClock::now();  // the report's start-up phases
  const auto launched_unix = static_cast<std::int64_t>(std::time(nullptr));
  const Mode mode = options.mode;
  if (mode == Mode::kControl) {
    return run_control_client(options.control, options.control_run, env, std::cout, std::cerr);
  }
  if (options.agent_stdin) read_agent_hello(STDIN_FILENO, env);
  options.program = worker_command(options, env, probe_file);
  forwarded_environment(env, options.env_vars);  // a bad --env fails here, on any node count
  // --env NAME=VALUE holds for every worker, the head's own included.
  for (const auto& item : options.env_vars) {
    const auto equals = item.find('=');
    if (equals != std::string::npos) env[item.substr(0, equals)] = item.substr(equals + 1);
  }
  if (mode == Mode::kDoctor) {
    std::cout << "ddprun doctor: what ddprun sees on this node\n"
              << format_doctor(gather_doctor_rows(options, env, doctor_program(options, env)));
    return kExitOk;
  }
  PlanInputs inputs =
      resolve_plan_inputs(options, env, read_file_from_disk, read_host_facts(),
                          system_services(env), mode == Mode::kRun || mode == Mode::kCheck);
  // What the scheduler's reader found odd but usable (a --segment size that does not
  // divide the nodes): node 0 says it once for the job.
  if (!options.agent && inputs.cluster.this_node.value_or(0) == 0) {
    for (const std::string& warning : inputs.cluster.warnings) {
      std::cerr << "ddprun: warning: " << warning << "\n";
    }
  }
  if (options.restart_scope == RestartScope::kRank && inputs.cluster.nodes.size() > 1) {
    throw UsageError("--restart-scope rank runs on a single node for now; this job has " +
                         std::to_string(inputs.cluster.nodes.size()) + " nodes",
                     "leave out --restart-scope (job: every rank restarts) on more nodes");
  }
  // MIG devices name no PCI device: nvidia-smi -L tells which GPU each is on.
  const auto& gpus = inputs.gpus.devices;
  if (options.bind != BindMode::kNone &&
      std::any_of(gpus.begin(), gpus.end(),
                  [](const std::string& g) { return g.rfind("MIG-", 0) == 0; })) {
    inputs.mig_parents = parse_mig_parents(tool_runner(env)({"nvidia-smi", "-L"}).value_or(""));
  }
  // One ddprun per node (srun, mpirun, by hand) that may restart: the launchers meet
  // before every round (rendezvous.h), node 0's on the agreed master port, so that every
  // node runs the same rounds; the workers get a fresh port each round.
  // By hand, they always meet: nothing else makes sure every node comes (a node that never
  // does is one error after --rdzv-conf join_timeout), or gives c10d its node ranks.
  const bool meet = (options.max_restarts > 0 || inputs.cluster.scheduler == "static") &&
                    !options.agent && mode == Mode::kRun && inputs.cluster.nodes.size() > 1 &&
                    started_per_node(options, inputs.cluster, env);
  const int rendezvous_port = inputs.master_port;
  const auto now_unix = static_cast<std::int64_t>(std::time(nullptr));
  // Agents learn the end from the head (--deadline); --drain-before 0 asks nobody.
  const bool ask = mode == Mode::kPrintJobEnd || options.drain_before_s > 0 ||
                   options.deadline_unix || options.time_limit_s;
  // The scheduler's tools (squeue, qstat) wait out their timeout when the controller does
  // not answer: a dry run or a check never asks them. (Started once per node, every node
  // still asks when the environment has no end time: each must send its own workers the
  // notice.)
  const bool ask_tools = mode == Mode::kPrintJobEnd || mode == Mode::kRun;
  const RunCommand no_tools = [](const std::vector<std::string>&) -> std::optional<std::string> {
    return std::nullopt;
  };
  const auto job_end = ask ? resolve_job_end(options.deadline_unix, options.time_limit_s,
                                             inputs.cluster.scheduler, inputs.cluster.job_id, env,
                                             ask_tools ? tool_runner(env) : no_tools, now_unix)
                           : std::nullopt;
  if (mode == Mode::kPrintJobEnd) {
    if (!job_end) return 1;
    std::cout << job_end->unix_seconds << " " << job_end->source << "\n";
    return kExitOk;
  }
  inputs.stdout_is_tty = ::isatty(STDOUT_FILENO) == 1;
  if (mode == Mode::kDryRun || mode == Mode::kCheck) {
    inputs.scratch_dir = tmpdir(env) + "/ddprun-" + inputs.run_id;
    const LaunchPlan plan = build_plan(plan_options(options), inputs, env);
    if (mode == Mode::kCheck) return run_check(options, inputs, plan, env, std::cout);
    // Streamed: a plan of 131,072 ranks prints 81 MB (143 MB as JSON), never held whole.
    if (options.format == PlanFormat::kJson) {
      write_plan_json(plan, std::cout);
    } else {
      write_plan_text(plan, std::cout);
    }
    return kExitOk;
  }

  const std::string program_path = resolve_program(options.program.front(), env);
  const std::string self = this_executable();
  const bool filters =
      !options.duplicate_stdout_filters.empty() || !options.duplicate_stderr_filters.empty();
  if (!options.log_dir && (options.redirects.any() || options.tee.any() || filters)) {
    // torchrun keeps redirected output (and the filtered copies) in a temporary folder
    // when given none.
    const LogFolder logs = default_log_folder(tmpdir(env), inputs.run_id);
    std::cerr << logs.note;
    options.log_dir = logs.path;
  }
  if (job_end) inputs.job_end_unix = job_end->unix_seconds;
  // Made below, declared first: it is told that ddprun leaves only after the control socket
  // and the scratch folder are gone (their destructors run before its own), so a ddprun
  // killed on its way out (a signal pending as an exception unwinds) still leaves nothing.
  std::optional<Guardian> guardian;
  std::optional<ScratchDir> scratch;
  if (!options.log_dir) scratch.emplace(tmpdir(env), inputs.run_id);
  inputs.scratch_dir = scratch ? scratch->path() : std::string();

  if (!options.fold_output) {
    // The default (docs/launching.md#folded-output): only a person at a terminal gets it,
    // so the plan is built for its rank count only then; agents are told by their head.
    options.fold_output =
        inputs.stdout_is_tty && !options.agent &&
        static_cast<int>(build_plan(plan_options(options), inputs, env).ranks.size()) >=
            kFoldFromRanks;
  }
  ProcessRunnerConfig runner_config;
  runner_config.relay.console_is_tty = inputs.stdout_is_tty;
  runner_config.relay.fold = *options.fold_output;
  runner_config.relay.fold_window = std::chrono::milliseconds(options.fold_window_ms);
  runner_config.relay.stdout_filters = options.duplicate_stdout_filters;
  runner_config.relay.stderr_filters = options.duplicate_stderr_filters;
  runner_config.tag_output = options.tag_output;
  runner_config.head_fd = options.agent_stdin ? STDIN_FILENO : -1;
  if (options.stacks) {
    try {
      runner_config.eu_stack = resolve_program("eu-stack", env);
    } catch (const ProgramError&) {
      // Each capture says so in one line.
    }
  }
  // The handle on the running job (control_socket.h): every ddprun that is not an agent
  // serves one on its node; node 0's is the folder's "latest".
  std::optional<ControlServer> control;
  const std::string control_dir = control_folder(env, ::geteuid());
  const std::string control_name =
      control_socket_name(inputs.run_id, inputs.cluster.this_node.value_or(0));
  if (!options.agent) {
    try {
      control.emplace(control_dir, control_name, inputs.cluster.this_node.value_or(0) == 0);
      if (!control->problem().empty()) {
        std::cerr << "ddprun: warning: " << control->problem()
                  << "; --status, --stacks and --stop cannot reach this run\n";
      } else {
        runner_config.control = &*control;
      }
    } catch (const Error& e) {
      std::cerr << "ddprun: warning: no control socket: " << e.what()
                << (e.hint().empty() ? "" : " (" + e.hint() + ")") << "\n";
    }
  }
  // Once per job, by node 0's ddprun (every other node's would repeat it): for its ranks.
  runner_config.show_first_steps =
      !options.quiet && !options.agent && inputs.cluster.this_node.value_or(0) == 0;
  runner_config.record_first_steps = writes_report(options, inputs);
  runner_config.run_id = inputs.run_id;
  runner_config.max_restarts = options.max_restarts;
  // A closed terminal does not end the job (docs/launching.md), unless SIGHUP is named in
  // --signals-to-handle.
  runner_config.detach_on_hangup =
      !options.agent &&
      std::find(options.signals_to_handle.begin(), options.signals_to_handle.end(), SIGHUP) ==
          options.signals_to_handle.end();
  runner_config.console_file = control_name.substr(0, control_name.size() - 5) + "-" +
                               std::to_string(::getpid()) + ".console";
  runner_config.private_dir = runner_config.control != nullptr ? control_dir : std::string();
  runner_config.tmp_dir = tmpdir(env);
  JobSettings settings = job_settings(options, job_end, now_unix, RunnerClock::now(),
                                      colour_wanted(STDERR_FILENO, env));
  settings.round.node_rank = inputs.cluster.this_node.value_or(0);
  if (settings.round.drain_at && !options.quiet) {
    std::cerr << format_drain_line(*job_end, options.drain_before_s, options.drain_signal,
                                   now_unix);
  }

  SignalChannel signals(options.signals_to_handle);
  guardian.emplace(inputs.scratch_dir, [&control] {
    if (control) control->remove_files();
  });
  const std::string spill_name =
      control_name.substr(0, control_name.size() - 5) + "-" + std::to_string(::getpid()) + ".txt";
  const std::string spill_path = options.log_dir
                                     ? *options.log_dir + "/console_not_shown-" + spill_name
                                     : "ddprun-console-" + spill_name;  // a private folder's
  const auto join_timeout = std::chrono::milliseconds(
      static_cast<long long>(options.rdzv_conf.join_timeout_s.value_or(600.0) * 1000.0));
  if (meet && inputs.cluster.this_node != 0) {
    PeerJob peer{options, inputs, env, program_path, self, settings, runner_config};
    // Read once node 0 answers: node 0 makes the token file before it listens.
    std::optional<std::string> secret;
    const SecretSource read_secret = [&] {
      if (!secret) {
        const RendezvousSecret found = rendezvous_secret(env, false);
        std::cerr << found.warning;
        secret = found.secret;
      }
      return *secret;
    };
    const int code = run_peer_job(peer, rendezvous_port, read_secret, join_timeout, signals,
                                  *guardian, spill_path);
    signals.discard_pending();  // as below: the outcome is decided
    return code;
  }
  std::optional<RendezvousHost> rendezvous;  // keeps every node's connection for the job
  if (meet) {
    const RendezvousSecret secret = rendezvous_secret(env, true);
    std::cerr << secret.warning;
    const SystemServices services = system_services(env);
    rendezvous.emplace(rendezvous_port, inputs.run_id, secret.secret,
                       static_cast<int>(inputs.cluster.nodes.size()),
                       this_node_nproc(options, inputs, env),
                       rendezvous_address(services.resolve_host(inputs.master_addr),
                                          services.network_interfaces()));
    inputs.master_port = pick_free_port();  // the workers': another one every round
    inputs.fixed_port = false;
  }
  RoundState round_state = first_round_state(inputs);
  ProcessRunner runner(signals, *guardian, runner_config);
  std::optional<ReportFile> report;  // --report: node 0's view of the job, round by round
  if (writes_report(options, inputs)) {
    const double inputs_seconds =
        std::chrono::duration<double>(RunnerClock::now() - launched).count();
    report.emplace(*options.report, report_start(options, inputs, launched_unix, inputs_seconds),
                   runner.messages());
  }
  const RoundObserver observe = [&](const RoundResult* result, const RoundDecision& decision) {
    if (!report) return;
    std::vector<std::string> hosts;
    for (const NodeSlots& node : round_state.nodes) hosts.push_back(node.host);
    report->add_round(result, decision, std::move(hosts));
  };
  // ddprun's messages go through the runner's console: a console that is not reading
  // must not hold up the job, nor its exit for long (process_runner.h).
  const int code = run_job(
      runner, settings,
      [&](int round, const RoundResult* previous) {
        runner.set_round(round);
        RoundSetup setup =
            prepare_round(options, inputs, round_state, env, round, previous, program_path, self);
        if (rendezvous) {
          const auto serve = [&](const std::string& gathering) {
            return runner.serve_between_rounds(round, gathering);
          };
          if (auto end =
                  gather_nodes(*rendezvous, round, RendezvousClock::now() + join_timeout, signals,
                               options.signals_to_handle, runner_config.detach_on_hangup,
                               runner.messages(), runner.control_fd(), serve)) {
            setup.end_code = end->code;
            setup.end_message = std::move(end->message);
            return setup;
          }
          add_peer_nodes(setup, *rendezvous, round, round_state.master_port);
        }
        return setup;
      },
      runner.messages(), observe);
  if (rendezvous) rendezvous->end_job({code, ""});  // every node exits with the job's code
  // A console that stalls across the job's end: what it did not take goes to a file.
  // (The pid keeps two runs of one job id apart.)
  runner.finish_console(spill_path);
  runner.release_attached(code);
  signals.discard_pending();  // the outcome is decided; a late signal must not change it
  return code;
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
