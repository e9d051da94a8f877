#pragma once
// Every process-control syscall ddprun makes lives here: file descriptors, pipes, signal
// masks, spawning workers into their own process groups, and the guardian that kills
// them if ddprun itself dies. Failures throw std::system_error naming the call.

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace ddprun {

// Owns one file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  int release() noexcept;
  void reset() noexcept;

 private:
  int fd_ = -1;
};

struct Pipe {
  UniqueFd read_end;
  UniqueFd write_end;
};

// A pipe whose ends are close-on-exec; the read end is non-blocking unless it is to be a
// child's stdin (programs expect a blocking one).
Pipe make_pipe(bool nonblocking_read = true);

// Opens `path` for appending (created 0644), close-on-exec.
UniqueFd open_log_file(const std::string& path);

// Creates `path` and its parents with mode 0700 where missing.
void make_directories(const std::string& path);

// Writes all of `data` to `fd`, retrying on EINTR and short writes. Returns false if the
// reader is gone (EPIPE) or the write failed; output is best effort.
bool write_all(int fd, std::string_view data) noexcept;

// Blocks the signals ddprun handles and delivers them through a signalfd instead, so the
// supervisor can wait for signals, child exits and output in one poll(). Restores the
// previous mask on destruction. Construct it before spawning anything.
class SignalChannel {
 public:
  SignalChannel();
  ~SignalChannel();
  SignalChannel(const SignalChannel&) = delete;
  SignalChannel& operator=(const SignalChannel&) = delete;

  int fd() const noexcept { return fd_.get(); }
  // The mask to give children: the one ddprun started with.
  const sigset_t& original_mask() const noexcept { return original_mask_; }
  // Reads one pending signal number, or 0 when none is pending.
  int read_signal();

 private:
  sigset_t original_mask_{};
  UniqueFd fd_;
};

struct SpawnSpec {
  std::string path;               // resolved executable
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // KEY=VALUE
  int stdin_fd = -1;              // -1: /dev/null
  int stdout_fd = -1;
  int stderr_fd = -1;
};

// Forks and execs `spec` as the leader of a new process group (its pgid is its pid), with
// stdin from `stdin_fd` or /dev/null, the original signal mask and default dispositions, and
// SIGKILL as its parent-death signal. An exec failure makes the child print one line and exit 127.
pid_t spawn_process(const SpawnSpec& spec, const sigset_t& child_mask);

// What a command printed and how it ended (run_all_captured).
struct CapturedRun {
  std::string out;
  std::string err;
  int wait_status = 0;
  bool timed_out = false;
};

// Runs every spec at once (each in its own process group; stdin from a pipe holding
// `inputs[i]` when given, else /dev/null), collects
// their output, and returns when all have ended; a command still running after `timeout_ms`
// is killed with its group and marked timed_out. Blocks in poll(); no busy waiting.
std::vector<CapturedRun> run_all_captured(std::vector<SpawnSpec> specs,
                                          const std::vector<std::string>& inputs, int timeout_ms,
                                          const sigset_t& child_mask);

// Sends `signal_number` to the process group `pgid`; ignores groups already gone.
void signal_group(pid_t pgid, int signal_number) noexcept;

// A forked helper that outlives ddprun only long enough to SIGKILL every process group
// ddprun told it about, should ddprun die without cleaning up (e.g. SIGKILL). It learns of
// ddprun's death from EOF on a pipe, which the kernel guarantees.
class Guardian {
 public:
  // `scratch_dir`, when not empty, is removed by the guardian as it exits, so that a
  // killed ddprun leaves no temporary files behind either.
  explicit Guardian(std::string scratch_dir = {});
  ~Guardian();  // tells the guardian to exit without killing, and reaps it
  Guardian(const Guardian&) = delete;
  Guardian& operator=(const Guardian&) = delete;

  void watch(pid_t pgid) noexcept;
  void forget(pid_t pgid) noexcept;
  pid_t pid() const noexcept { return pid_; }

 private:
  pid_t pid_ = -1;
  UniqueFd channel_;
};

}  // namespace ddprun
