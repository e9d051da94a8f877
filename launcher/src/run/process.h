#pragma once
// Every process-control syscall ddprun makes lives here and in child_set.cc: pipes, signal
// masks, spawning children into their own process groups, signalling those groups, and
// the guardian that kills them if ddprun itself dies. Failures throw std::system_error
// naming the call.

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "ddprun/common/unique_fd.h"

namespace ddprun {

struct Pipe {
  UniqueFd read_end;
  UniqueFd write_end;
};

// A pipe whose ends are close-on-exec; the read end is non-blocking unless it is to be a
// child's stdin (programs expect a blocking one).
Pipe make_pipe(bool nonblocking_read = true);

// Blocks the signals ddprun handles and delivers them through a signalfd instead, so one
// poll() can wait for signals, child exits and output alike. Restores the previous mask
// and SIGPIPE's disposition on destruction; resets an inherited ignored SIGCHLD; leaves an
// inherited ignored SIGHUP (nohup) ignored. Construct it before spawning anything; one
// at a time.
class SignalChannel {
 public:
  // `extra`: signals to catch beyond ddprun's own (--signals-to-handle).
  explicit SignalChannel(const std::vector<int>& extra = {});
  ~SignalChannel();
  SignalChannel(const SignalChannel&) = delete;
  SignalChannel& operator=(const SignalChannel&) = delete;

  int fd() const noexcept { return fd_.get(); }
  // The mask to give children: the one ddprun started with.
  const sigset_t& original_mask() const noexcept { return original_mask_; }
  // Reads one pending signal number, or 0 when none is pending.
  int read_signal();
  // Reads and drops every pending signal: called once the job's outcome is decided, so
  // that a stop signal that came too late does not kill ddprun when its mask is lifted
  // and replace the exit code it has to give. From then on the handled signals stay
  // blocked until exit (the destructor leaves the mask as it is): one that comes later
  // still (srun stopping a step whose other node exited 75) cannot replace the code
  // either. Returns how many there were.
  int discard_pending();

 private:
  sigset_t original_mask_{};
  bool outcome_decided_ = false;
  struct sigaction original_sigpipe_ {};
  UniqueFd fd_;
};

struct SpawnSpec {
  std::string path;               // resolved executable
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // KEY=VALUE
  int stdin_fd = -1;              // -1: /dev/null
  int stdout_fd = -1;
  int stderr_fd = -1;
  std::vector<int> cpus{};  // the child's CPU affinity (placement.h); empty: ddprun's own
};

// Forks and execs `spec` as the leader of a new process group (its pgid is its pid), with
// stdin from `stdin_fd` or /dev/null, `cpus` as its CPU affinity when given (a failure
// to set it ends the child with one line and 127), `child_mask` as its signal mask, default
// dispositions, and SIGKILL as its parent-death signal. An exec failure makes the child
// print one line and exit 127.
pid_t spawn_process(const SpawnSpec& spec, const sigset_t& child_mask);

// Sets the CPU affinity of every thread of the running process `pid` (a warm spare that
// takes a bound rank); false when a thread could not be set.
bool set_process_cpus(pid_t pid, const std::vector<int>& cpus);

// Sends `signal_number` to the process group `pgid`; ignores groups already gone.
void signal_group(pid_t pgid, int signal_number) noexcept;

// Sends `signal_number` to the process `pid` alone; ignores one already gone.
void signal_process(pid_t pid, int signal_number) noexcept;

// The guardian process's name (/proc/PID/comm), 15 characters at most.
inline constexpr const char* kGuardianName = "ddprun-guardian";

// A forked helper that outlives ddprun only long enough to SIGKILL every process group
// ddprun told it about, should ddprun die without cleaning up (e.g. SIGKILL). It learns of
// ddprun's death from EOF on a pipe, which the kernel guarantees.
class Guardian {
 public:
  // `scratch_dir`, when not empty, is removed by the guardian as it exits, and `at_exit`
  // is run, so that a killed ddprun leaves no temporary files behind either.
  explicit Guardian(std::string scratch_dir = {}, std::function<void()> at_exit = {});
  // Tells the guardian that ddprun leaves on its own (it then kills only the groups still
  // watched and removes nothing), and reaps it: destroy it after what removes the files
  // (ScratchDir, ControlServer), so that a ddprun killed before they ran is cleaned up.
  ~Guardian();
  Guardian(const Guardian&) = delete;
  Guardian& operator=(const Guardian&) = delete;

  void watch(pid_t pgid) noexcept;
  void forget(pid_t pgid) noexcept;

 private:
  pid_t pid_ = -1;
  UniqueFd channel_;
};

}  // namespace ddprun
