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
#include "job_inputs.h"
#include "options.h"
#include "plan.h"
#include "plan_format.h"
#include "process.h"
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

int run(const Options& options) {
  const Environment env = read_environment();
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
  for (int round = 0;; ++round) {
    inputs.restart_count = round;
    if (round > 0 && !inputs.fixed_port) inputs.master_port = pick_free_port();
    const LaunchPlan plan = build_plan(options, inputs, env);
    if (!options.quiet) std::cerr << format_launch_summary(plan, options.log_dir.has_value());
    const RoundResult result = supervisor.run(plan, program_path, env);
    if (!options.quiet) std::cerr << format_rank_table(result);
    if (result.outcome == Outcome::kWorkerFailed) {
      const RankResult& failed = result.ranks.at(*result.first_failure);
      std::cerr << format_failure_report(failed, read_small_file(failed.error_file),
                                         colour_wanted(STDERR_FILENO, env));
      if (round < options.max_restarts) {
        std::cerr << "ddprun: restarting all workers (restart " << round + 1 << " of "
                  << options.max_restarts << ")\n";
        continue;
      }
      if (options.log_dir) std::cerr << "ddprun: logs are in " << plan.attempt_dir << "\n";
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
