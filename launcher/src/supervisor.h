#pragma once
// Runs one round of a launch plan on this node: spawns the node's workers, relays their
// output line by line, forwards signals, and on the first failure stops the rest
// (SIGTERM to each worker's process group, grace, SIGKILL). One blocking poll() waits
// for signals, child exits and output alike; nothing polls on a timer.

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "cluster.h"
#include "plan.h"
#include "process.h"

namespace ddprun {

struct SupervisorConfig {
  std::chrono::milliseconds shutdown_grace{15000};
  bool tag_output = false;
  bool stdout_to_console = true;
  bool stderr_to_console = true;
  // The console is a terminal: lines a worker redraws with '\r' are passed on as they
  // come, each redraw written as "\r" + prefix + its text.
  bool console_is_tty = false;
  std::size_t tail_lines = 20;  // stderr lines kept per rank for failure reports
  int console_stdout = 1;       // where relayed output goes
  int console_stderr = 2;
};

struct RankResult {
  bool agent = false;  // a remote agent (or the srun/mpirun starting them), not a worker
  int node_rank = 0;   // for an agent: its node, or -1 when it stands for all of them
  int rank = 0;
  int local_rank = 0;
  std::string host;
  pid_t pid = -1;
  bool started = false;
  bool exited = false;
  int wait_status = 0;  // as from waitpid
  double run_seconds = 0;
  long max_rss_kb = 0;
  std::deque<std::string> stderr_tail;
  std::string error_file;
};

// A child that starts this node's part elsewhere: ssh running a remote ddprun agent, or
// srun/mpirun starting one on every node. Supervised like a worker.
struct AgentLaunch {
  int node_rank = -1;  // -1: srun/mpirun for all nodes
  std::string host;
  std::string path;  // resolved ssh, srun or mpirun
  std::vector<std::string> argv;
  std::vector<std::string> env;  // KEY=VALUE
  // Written to its stdin first; then signals travel as messages on the same pipe
  // (ssh cannot deliver signals). Empty: stdin is /dev/null and signals go to the process.
  std::string hello;
};

// What one round runs on this node.
struct RoundSpec {
  bool local_workers = true;        // this node's ranks of the plan
  std::vector<AgentLaunch> agents;  // head mode
  int head_fd = -1;                 // agent mode: messages from the head; EOF = head gone
};

enum class Outcome {
  kSucceeded,     // every worker exited 0
  kWorkerFailed,  // a worker failed first; the others were stopped
  kStopped,       // ddprun was told to stop (a signal); not a candidate for restart
  kPreempted,     // workers exited kExitPreempted (checkpoint saved), none failed
};

struct RoundResult {
  Outcome outcome = Outcome::kSucceeded;
  int stop_signal = 0;                       // with kStopped
  bool lost_head = false;                    // agent: the head's connection closed
  std::optional<std::size_t> first_failure;  // index into ranks, with kWorkerFailed
  std::vector<RankResult> ranks;             // this node's ranks, in local rank order
};

class Supervisor {
 public:
  Supervisor(SignalChannel& signals, Guardian& guardian, SupervisorConfig config)
      : signals_(signals), guardian_(guardian), config_(std::move(config)) {}

  // Runs this node's part of `plan` with `program_path` as the executable and `env` as
  // the base environment. Returns when every worker has exited. Throws std::system_error
  // only when it cannot set up (folders, pipes); workers already started are stopped first.
  RoundResult run(const LaunchPlan& plan, const std::string& program_path, const Environment& env,
                  const RoundSpec& spec = {});

 private:
  SignalChannel& signals_;
  Guardian& guardian_;
  SupervisorConfig config_;
};

// The code ddprun exits with after `result` (docs/exit-codes.md): 0 on success; the
// failing worker's exit code, or 128 + its signal; 128 + the signal that stopped ddprun.
int exit_code_for(const RoundResult& result);

// How a worker ended, e.g. "exit code 3" or "signal SIGKILL".
std::string describe_wait_status(int wait_status);

// "rank 3", "node 2" (a remote agent) or "the agents' launcher" (srun or mpirun).
std::string child_label(const RankResult& child);

// The failure report printed to stderr: which rank failed and how, the last lines of its
// stderr, and the message from its error file if it wrote one (`error_file_text` is the
// file's content or empty).
// With `colour`, "error:" is bold red (for a terminal that did not ask for NO_COLOR).
std::string format_failure_report(const RankResult& failed, const std::string& error_file_text,
                                  bool colour = false);

// "ddprun: error: ", with "error:" in bold red when `colour`.
std::string error_label(bool colour);

// Whether ddprun may colour what it writes to the terminal `fd`: a terminal, TERM not
// "dumb", and NO_COLOR (no-color.org) unset or empty.
bool colour_wanted(int fd, const Environment& env);

}  // namespace ddprun
