#include "cli/program_command.h"

#include <sys/stat.h>
#include <unistd.h>

namespace ddprun {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<std::string> worker_command(const Options& options, const Environment& env,
                                        const ExecutableProbe& probe) {
  const std::vector<std::string>& program = options.program;
  if (program.empty() || (options.no_python && !options.run_path)) return program;
  bool python = options.module || options.run_path || ends_with(program.front(), ".py");
  if (!python) {
    // A file here that cannot be executed is a script for Python (torchrun would run
    // anything through Python); a missing one is a command to find in PATH.
    const auto executable = probe(program.front());
    python = executable.has_value() && !*executable;
  }
  if (!python) return program;
  std::vector<std::string> command = {lookup(env, "PYTHON_EXEC").value_or("python3")};
  // torchrun runs a --run-path script inside its own interpreter, without -u.
  if (!options.run_path) command.emplace_back("-u");
  if (options.module && !options.run_path) command.emplace_back("-m");
  command.insert(command.end(), program.begin(), program.end());
  return command;
}

std::optional<bool> probe_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) return std::nullopt;
  return ::access(path.c_str(), X_OK) == 0;
}

}  // namespace ddprun
