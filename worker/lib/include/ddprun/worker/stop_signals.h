#pragma once
// Preemption notices (docs/fault-tolerance.md): signals that only ask training to stop at
// the next step all ranks agree on. No LibTorch.

#include <signal.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::worker {

// The number of "SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1" or "SIGUSR2"; nullopt otherwise.
std::optional<int> stop_signal_number(const std::string& name);

// While alive, each of `signals` only records that it arrived (an async-signal-safe
// handler, SA_RESTART so that blocking calls in other threads go on); a second one changes
// nothing, SIGKILL stays the way to stop at once. The previous dispositions come back on
// destruction, unless keep_until_exit() was called. One instance at a time per process (checked).
// Throws std::system_error when sigaction fails, std::logic_error for a second instance.
class StopSignals {
 public:
  explicit StopSignals(const std::vector<int>& signals);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first of the signals received since construction, or 0. Async-signal-safe and
  // thread-safe.
  static int received() noexcept;

  // For a process that is stopping on a notice: the signals stay recorded, not acted on,
  // until the process exits (destruction leaves them so). A launcher's later SIGTERM (srun
  // stopping the other nodes after one node's exit 75) then cannot kill it between its
  // checkpoint and its exit status.
  void keep_until_exit() noexcept { keep_ = true; }

 private:
  std::vector<std::pair<int, struct sigaction>> previous_;
  bool keep_ = false;
};

}  // namespace ddprun::worker
