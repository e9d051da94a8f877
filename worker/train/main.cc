// ddp-train: wires the command line, the environment contract and the config to the
// training loop; every error ends here as one line, an error file and exit status 1. A
// clean stop on a preemption notice exits 75 (docs/exit-codes.md).

#include <c10/util/Exception.h>

#include <unistd.h>

#include <iostream>

#include "ddprun/contract/env_names.h"

#include "allocator.h"
#include "cli.h"
#include "ddprun/worker/env.h"
#include "ddprun/worker/errors.h"
#include "trainer.h"

extern char** environ;

namespace {

using ddprun::ErrorReport;

int fail(const std::string& error_file, const ErrorReport& report, const std::string& hint) {
  std::cerr << "ddp-train: error: " << report.message << "\n";
  if (!hint.empty()) std::cerr << "ddp-train: hint: " << hint << "\n";
  if (!error_file.empty()) ddprun::worker::write_error_file(error_file, report);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const auto env = ddprun::snapshot_environment(environ);
  ddprun::worker::tune_malloc(env);  // before the first tensor: see allocator.h
  // The error file is known before anything can fail, even when the rest of the
  // environment is malformed.
  const auto error_file_it = env.find(ddprun::env::kErrorFile);
  std::string error_file = error_file_it == env.end() ? "" : error_file_it->second;
  ddprun::worker::end_uncaught_exceptions_as_errors("ddp-train", error_file);
  try {
    std::string help;
    const auto command_line =
        ddprun::worker::parse_command_line(std::vector<std::string>(argv + 1, argv + argc), help);
    if (!command_line) {
      std::cout << help;
      return 0;
    }
    const auto config = ddprun::worker::load_config(*command_line);
    if (ddprun::worker::is_spare(env)) {
      // A warm spare: its data loaded, it waits for a lost rank's environment, then is that
      // rank (and its error file is that rank's).
      const auto result = ddprun::worker::run_training_as_spare(config, std::cout, [&] {
        std::optional<ddprun::worker::WorkerEnv> rank;
        if (const auto assigned = ddprun::worker::become_rank(STDIN_FILENO)) {
          const auto it = assigned->find(ddprun::env::kErrorFile);
          if (it != assigned->end()) error_file = it->second;
          ddprun::worker::end_uncaught_exceptions_as_errors("ddp-train", error_file);
          rank = ddprun::worker::read_worker_env(*assigned);
        }
        return rank;
      });
      return result && result->preempted ? ddprun::kExitPreempted : ddprun::kExitOk;
    }
    auto worker_env = ddprun::worker::read_worker_env(env);
    if (worker_env.standalone) worker_env.stdout_is_terminal = ::isatty(STDOUT_FILENO) == 1;
    const auto result = ddprun::worker::run_training(config, worker_env, std::cout);
    return result.preempted ? ddprun::kExitPreempted : ddprun::kExitOk;
  } catch (const ddprun::Error& e) {
    return fail(error_file, {e.what(), ""}, e.hint());
  } catch (const c10::Error& e) {
    return fail(error_file, {e.what_without_backtrace(), e.what()}, "");
  } catch (const std::exception& e) {
    return fail(error_file, {e.what(), ""}, "");
  }
}
