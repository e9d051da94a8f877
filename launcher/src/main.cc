// ddprun: wires command line -> cluster description -> launch plan -> supervisor -> exit.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <system_error>

#include "cluster.h"
#include "ddprun/errors.h"
#include "doctor.h"
#include "env_contract.h"
#include "job_inputs.h"
#include "options.h"
#include "plan.h"
#include "plan_format.h"
#include "preflight.h"
#include "process.h"
#include "remote.h"
#include "signal_names.h"
#include "summary.h"
#include "supervisor.h"
#include "system_info.h"

namespace ddprun {
namespace {

std::string read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string text(64 * 1024, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

// A private folder for error files when the user gave no --log-dir; removed at exit.
class ScratchDir {
 public:
  explicit ScratchDir(const Environment& env, const std::string& run_id) {
    std::string pattern = lookup(env, "TMPDIR").value_or("/tmp") + "/ddprun-" + run_id + "-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    }
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The program --doctor inspects: the one given, else ddp-train next to ddprun.
std::string doctor_worker(const Options& options, const Environment& env) {
  if (!options.program.empty()) return resolve_program(options.program.front(), env);
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return {};
  const auto sibling = self.parent_path() / "ddp-train";
  return std::filesystem::exists(sibling, error) ? sibling.string() : std::string();
}

// An agent's first message from the head: the environment its workers need. Read byte by
// byte so nothing after the first line is taken from the supervisor's later reads.
void read_agent_hello(Environment& env) {
  std::string line;
  char c = 0;
  for (;;) {
    const ssize_t got = ::read(STDIN_FILENO, &c, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw UsageError("the head ddprun closed the connection before starting");
    if (c == '\n') break;
    line += c;
    if (line.size() > (1 << 24)) throw UsageError("the head's first message is too long");
  }
  for (auto& [name, value] : parse_agent_message(line).env) env[name] = std::move(value);
}

std::string self_path() {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw std::system_error(error, "readlink /proc/self/exe");
  return self.string();
}

// What this round starts on this node: its own workers, and in head mode one agent per
// other node over ssh, or one srun/mpirun that starts an agent on every node.
RoundSpec round_spec(const Options& options, const PlanInputs& inputs, const LaunchPlan& plan,
                     const Environment& env) {
  RoundSpec spec;
  if (options.agent_stdin) spec.head_fd = STDIN_FILENO;
  if (inputs.launcher == LauncherKind::kLocal) return spec;
  const Environment forwarded = forwarded_environment(env, options.env_vars);
  const std::string self = self_path();
  const auto agent_argv = [&](const NodePlan* node) {
    std::vector<std::string> argv = {self};
    const auto args = agent_arguments(options, plan, node);
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  };
  if (inputs.launcher == LauncherKind::kSsh) {
    const std::string ssh = resolve_program("ssh", env);
    const std::string cwd = std::filesystem::current_path().string();
    const std::vector<std::string> own_env = merge_environment(env, {});
    for (const NodePlan& node : plan.nodes) {
      if (node.node_rank == plan.this_node) continue;
      AgentLaunch agent;
      agent.node_rank = node.node_rank;
      agent.host = node.host;
      agent.path = ssh;
      agent.argv = ssh_command(node.host, options, cwd, agent_argv(&node));
      agent.env = own_env;
      agent.hello = agent_hello(forwarded);
      spec.agents.push_back(std::move(agent));
    }
    return spec;
  }
  // srun and mpirun start an agent on this node too, and pass the environment themselves.
  spec.local_workers = false;
  AgentLaunch agent;
  agent.host = std::string(launcher_name(inputs.launcher));
  agent.path = resolve_program(agent.host, env);
  agent.argv = inputs.launcher == LauncherKind::kSrun
                   ? srun_command(plan, agent_argv(nullptr))
                   : mpirun_command(plan, forwarded, agent_argv(nullptr));
  agent.env = merge_environment(env, {forwarded.begin(), forwarded.end()});
  spec.agents.push_back(std::move(agent));
  return spec;
}

// Reports from what the launchers printed: each line that is a node's check, by node rank.
void collect_checks(const CapturedRun& run, std::vector<NodeReport>& reports, int node_rank) {
  bool any = false;
  std::size_t start = 0;
  for (std::size_t end; (end = run.out.find('\n', start)) != std::string::npos; start = end + 1) {
    const auto check = parse_node_check(std::string_view(run.out).substr(start, end - start));
    if (!check || check->node_rank < 0 ||
        static_cast<std::size_t>(check->node_rank) >= reports.size()) {
      continue;
    }
    reports[static_cast<std::size_t>(check->node_rank)].check = check;
    any = true;
  }
  if (any || node_rank < 0) return;
  std::string why = run.timed_out ? "no answer in time" : describe_wait_status(run.wait_status);
  const auto last = run.err.find_last_not_of('\n');
  if (last != std::string::npos) {
    const auto begin = run.err.rfind('\n', last);
    why += ": " + run.err.substr(begin == std::string::npos ? 0 : begin + 1,
                                 last - (begin == std::string::npos ? 0 : begin + 1) + 1);
  }
  reports[static_cast<std::size_t>(node_rank)].failure = why;
}

int run_check(const Options& options, const PlanInputs& inputs, const LaunchPlan& plan,
              const Environment& env) {
  const auto this_node = [&] {
    return check_this_node(plan.this_node, inputs.host.hostname, plan.master_addr, plan.master_port,
                           plan.program.front(), env);
  };
  if (options.agent) {
    std::cout << node_check_line(this_node());
    return kExitOk;
  }
  // The master port answers while the nodes check it (on the master node, the head).
  const UniqueFd listener = plan.this_node == 0 ? listen_on(plan.master_port) : UniqueFd();
  std::vector<NodeReport> reports(plan.nodes.size());
  const RoundSpec spec = round_spec(options, inputs, plan, env);
  if (inputs.launcher == LauncherKind::kLocal) {
    for (auto& report : reports) report.failure = "not reached: ddprun runs once per node here";
  }
  if (spec.local_workers) reports[static_cast<std::size_t>(plan.this_node)].check = this_node();
  std::vector<SpawnSpec> specs;
  std::vector<std::string> hellos;
  for (const AgentLaunch& agent : spec.agents) {
    specs.push_back({agent.path, agent.argv, agent.env});
    hellos.push_back(agent.hello);
  }
  SignalChannel signals;
  const auto runs = run_all_captured(std::move(specs), hellos, 30000, signals.original_mask());
  for (std::size_t i = 0; i < runs.size(); ++i)
    collect_checks(runs[i], reports, spec.agents[i].node_rank);
  const PreflightSummary summary = format_preflight(plan, reports);
  std::cout << summary.text;
  return summary.ok ? kExitOk : 1;
}

int run(const Options& options) {
  Environment env = read_environment();
  if (options.agent_stdin) read_agent_hello(env);
  forwarded_environment(env, options.env_vars);  // a bad --env fails here, on any node count
  // --env NAME=VALUE holds for every worker, the head's own included.
  for (const auto& item : options.env_vars) {
    const auto equals = item.find('=');
    if (equals != std::string::npos) env[item.substr(0, equals)] = item.substr(equals + 1);
  }
  if (options.doctor) {
    std::cout << "ddprun doctor: what ddprun sees on this node\n"
              << format_doctor(gather_doctor_rows(options, env, doctor_worker(options, env)));
    return kExitOk;
  }
  PlanInputs inputs = resolve_plan_inputs(options, env, read_file_from_disk, read_host_facts(),
                                          system_services(), !options.dry_run);
  inputs.stdout_is_tty = ::isatty(STDOUT_FILENO) == 1;

  if (options.dry_run) {
    inputs.scratch_dir = lookup(env, "TMPDIR").value_or("/tmp") + "/ddprun-" + inputs.run_id;
    const LaunchPlan plan = build_plan(options, inputs, env);
    std::cout << (options.format == PlanFormat::kJson ? format_plan_json(plan)
                                                      : format_plan_text(plan));
    return kExitOk;
  }

  if (options.check) {
    inputs.scratch_dir = lookup(env, "TMPDIR").value_or("/tmp") + "/ddprun-" + inputs.run_id;
    return run_check(options, inputs, build_plan(options, inputs, env), env);
  }

  const std::string program_path = resolve_program(options.program.front(), env);
  std::optional<ScratchDir> scratch;
  if (!options.log_dir) scratch.emplace(env, inputs.run_id);
  inputs.scratch_dir = scratch ? scratch->path() : std::string();

  SupervisorConfig config;
  config.shutdown_grace =
      std::chrono::milliseconds(static_cast<long long>(options.shutdown_timeout_s * 1000.0));
  config.tag_output = options.tag_output;
  config.console_is_tty = inputs.stdout_is_tty;
  config.stdout_to_console = !options.log_dir || (options.tee & 1) != 0;
  config.stderr_to_console = !options.log_dir || (options.tee & 2) != 0;

  SignalChannel signals;
  Guardian guardian(inputs.scratch_dir);
  Supervisor supervisor(signals, guardian, config);
  // An agent runs one round of the head's; the head decides about restarts.
  // Agents print their node's table (the head relays it) but no start line of their own.
  const bool summaries = !options.quiet && !options.agent;
  const bool tables = !options.quiet;
  for (int round = 0;; ++round) {
    inputs.restart_count = options.agent ? options.restart_count.value_or(0) : round;
    if (round > 0 && !inputs.fixed_port) inputs.master_port = pick_free_port();
    const LaunchPlan plan = build_plan(options, inputs, env);
    const RoundSpec spec = round_spec(options, inputs, plan, env);
    if (options.log_dir) make_directories(plan.attempt_dir);  // fails before any summary
    if (summaries) {
      std::cerr << format_launch_summary(plan, options.log_dir.has_value());
      if (inputs.launcher != LauncherKind::kLocal) {
        std::cerr << "ddprun: starting " << plan.nodes.size() - (spec.local_workers ? 1 : 0)
                  << " node agent(s) with " << launcher_name(inputs.launcher) << "\n";
      }
    }
    const RoundResult result = supervisor.run(plan, program_path, env, spec);
    if (tables) std::cerr << format_rank_table(result);
    if (result.outcome == Outcome::kWorkerFailed) {
      const RankResult& failed = result.ranks.at(*result.first_failure);
      std::cerr << format_failure_report(failed, read_small_file(failed.error_file),
                                         colour_wanted(STDERR_FILENO, env));
      if (round < options.max_restarts && !options.agent) {
        std::cerr << "ddprun: restarting all workers (restart " << round + 1 << " of "
                  << options.max_restarts << ")\n";
        continue;
      }
      if (options.log_dir) std::cerr << "ddprun: logs are in " << plan.attempt_dir << "\n";
    } else if (result.outcome == Outcome::kPreempted) {
      std::cerr << "ddprun: workers stopped on a preemption notice"
                << (result.stop_signal != 0 ? " (" + signal_name(result.stop_signal) + ")" : "")
                << "; exit " << kExitPreempted
                << ": run the same command again to resume from their last checkpoint\n";
    } else if (result.lost_head) {
      std::cerr << "ddprun: error: lost the connection to the head ddprun; stopped this node's "
                   "workers\n";
    } else if (result.outcome == Outcome::kStopped) {
      std::cerr << "ddprun: stopped by " << signal_name(result.stop_signal) << "\n";
    }
    return exit_code_for(result);
  }
}

}  // namespace
}  // namespace ddprun

int main(int argc, char** argv) {
  const auto command_line = ddprun::parse_command_line(argc, argv);
  if (!command_line.options) {
    std::string message = command_line.message;
    const std::string plain = ddprun::error_label(false);
    if (message.rfind(plain, 0) == 0 &&
        ddprun::colour_wanted(STDERR_FILENO, ddprun::read_environment())) {
      message.replace(0, plain.size(), ddprun::error_label(true));
    }
    (command_line.exit_code == 0 ? std::cout : std::cerr) << message;
    return command_line.exit_code;
  }
  try {
    return ddprun::run(*command_line.options);
  } catch (const ddprun::Error& e) {
    std::cerr << ddprun::error_label(
                     ddprun::colour_wanted(STDERR_FILENO, ddprun::read_environment()))
              << e.what();
    if (!e.hint().empty()) std::cerr << " (" << e.hint() << ")";
    std::cerr << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "ddprun: error: " << e.what() << "\n";
    return ddprun::kExitLauncherError;
  }
}
