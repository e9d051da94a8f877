#pragma once
// Exit codes and the error types every room throws. Library code throws; each program's
// main() catches once, prints one "PROGRAM: error: ..." line and maps the type to an exit
// code (docs/exit-codes.md).

#include <stdexcept>
#include <string>

namespace ddprun {

// Exit codes of ddprun itself. A failed worker's own code (or 128 + signal) is passed
// through unchanged; these are chosen like env(1) and timeout(1) so they rarely clash.
inline constexpr int kExitOk = 0;
inline constexpr int kExitLauncherError = 125;  // bad input, bad config, system error
inline constexpr int kExitProgramNotExecutable = 126;
inline constexpr int kExitProgramNotFound = 127;
// A worker stopped on a preemption notice (SIGTERM, SIGUSR1, SIGUSR2) after saving a
// checkpoint: sysexits' EX_TEMPFAIL, "try again later". ddprun exits with it too and
// does not restart (docs/fault-tolerance.md).
inline constexpr int kExitPreempted = 75;
// --exit-timeout ran out: a rank exited and the others were still running that long
// later (124, as timeout(1) exits).
inline constexpr int kExitTimedOut = 124;

// Base of everything ddprun reports as its own error. `what()` is the message; `hint()`
// the next step for the user (may be empty).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, std::string hint = {})
      : std::runtime_error(message), hint_(std::move(hint)) {}
  const std::string& hint() const noexcept { return hint_; }
  virtual int exit_code() const noexcept { return kExitLauncherError; }

 private:
  std::string hint_;
};

// The command line is wrong (unknown option, bad value, contradictory options).
class UsageError : public Error {
 public:
  using Error::Error;
};

// A file the user gave (hostfile, config) is malformed.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// What a scheduler or MPI runtime put in the environment is missing or inconsistent.
class SchedulerEnvError : public Error {
 public:
  using Error::Error;
};

// The program to launch cannot be run.
class ProgramError : public Error {
 public:
  ProgramError(const std::string& message, int code, std::string hint = {})
      : Error(message, std::move(hint)), code_(code) {}
  int exit_code() const noexcept override { return code_; }

 private:
  int code_;
};

}  // namespace ddprun
