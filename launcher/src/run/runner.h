#pragma once
// The line between the job's policy (supervision.h: when to stop whom, restarts, exit codes) and
// the mechanism that runs processes (process_runner.h). Policy tests drive the job with a
// fake runner and a fake clock (tests/launcher/fake_runner.h): no process is started.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/contract/membership.h"
#include "report/round_result.h"

namespace ddprun {

using RunnerClock = std::chrono::steady_clock;

// One child of a round: a worker of this node, or an agent that starts a node's part
// elsewhere (ssh running a remote ddprun agent, or srun/mpirun starting one on every node).
struct ChildSpec {
  bool agent = false;
  int node_rank = 0;  // for an agent: its node, or -1 when it stands for all of them
  int rank = -1;      // workers only
  int local_rank = 0;
  std::string host;
  std::string path;  // resolved executable
  std::vector<std::string> argv;
  std::vector<std::string> env;  // KEY=VALUE
  // Agents over ssh: written to its stdin first; then signals travel as messages on the
  // same pipe (ssh cannot deliver signals). Empty: stdin is /dev/null.
  std::string hello;
  // Agents: how many nodes answer a control request sent on its stdin (control.h): its
  // ssh subtree, or every node under srun; 0 when it takes none (mpirun).
  int control_nodes = 0;
  std::string stdout_log;  // workers with --log-dir; empty: no log file
  std::string stderr_log;
  // Workers with --duplicate-stdout-filters/--duplicate-stderr-filters: the node's one
  // file for the lines that match (plan.h, filtered_log); empty: none.
  std::string filtered_stdout_log;
  std::string filtered_stderr_log;
  std::string error_file;     // TORCHELASTIC_ERROR_FILE; removed before the start
  std::string progress_file;  // DDPRUN_PROGRESS_FILE; removed before the start
  // DDPRUN_PYTHON_STACK_FILE (python_stack_hook.h); removed before the start; empty: none.
  std::string python_stack_file;
  std::string stacks_log;  // where its stacks are written when captured; empty: nowhere
  std::string trace_file;  // DDPRUN_TRACE_FILE; removed before the start
  // DDPRUN_MEMBERSHIP_FILE (--restart-scope rank): the round's one file, the same for every
  // worker, that publish_membership rewrites; empty: none.
  std::string membership_file;
  // An agent that is another node's ddprun behind this socket of the launchers'
  // rendezvous (rendezvous.h): no process is started; `hello` goes on the socket, which is
  // read a line at a time as ChildSet::connect says. -1: a process.
  int connection = -1;
  std::function<std::optional<int>(std::string& line)> connection_line_end;
  std::size_t connection_max_line = 0;
  // An agent still to come (--restart-scope rank, per-node launchers): a lost node's ddprun
  // started again joins the round by this time, and the runner's RoundJoins makes it this
  // child; otherwise the child ends with exit 255 then. Set with `node_rank` and `host`.
  std::optional<std::chrono::steady_clock::time_point> join_by;
  std::vector<int> cpus;  // workers with --numa-binding/--cpu-bind: their CPUs; empty: ddprun's
  bool stdout_to_console = true;  // workers only: agents filter their own workers
  bool stderr_to_console = true;
  // An agent over ssh: the launchers' heartbeat goes to it on its stdin too (an empty line
  // each period), and it takes the head's silence for a lost head (a cut link, which only
  // ssh's own keepalive would notice, on the head's side).
  bool heartbeat_on_stdin = false;
};

// Something the runner saw while the policy waited.
struct RunnerEvent {
  enum class Kind {
    kExited,      // child `child` ended with `wait_status`
    kSignal,      // ddprun received `signal_number`, or the head sent it to this agent
    kHeadLost,    // agent mode: the head's connection closed
    kDeadline,    // the deadline passed
    kNodeEvent,   // agent `child` reported `node_event` (its node, or one below it)
    kMembership,  // agent `child` passed on node `node`'s part of the membership (rank scope)
    kJoined,      // agent `child`, which awaited a node (ChildSpec::join_by), is it, on `host`
  };
  Kind kind = Kind::kDeadline;
  std::size_t child = 0;
  int wait_status = 0;
  long max_rss_kb = 0;
  double run_seconds = 0;
  int signal_number = 0;
  bool from_head = false;  // kSignal: the head sent it (as a message), not the system
  // kSignal from the head: why the head stops the job (another node's failure or stop).
  std::optional<NodeEvent> cause;
  NodeEvent node_event;   // kNodeEvent
  Membership membership;  // kMembership: the ranks of node `node` (the agent's or one below it)
  int node = 0;
  std::string host;  // kJoined: where the node's ddprun joined from
};

class Runner {
 public:
  virtual ~Runner() = default;
  virtual RunnerClock::time_point now() const = 0;
  // Starts `spec` as the next child (numbered from 0 in each round) and returns its pid.
  // Throws std::system_error when it cannot.
  virtual pid_t start(const ChildSpec& spec) = 0;
  // Signals a live child: a worker's main process (SIGKILL: its whole process group); an
  // ssh agent by message (SIGKILL drops the connection instead); srun or mpirun themselves.
  virtual void signal(std::size_t child, int signal_number) = 0;
  // Blocks until the next event, or until `deadline` (kDeadline). Output is relayed
  // meanwhile.
  virtual RunnerEvent wait(std::optional<RunnerClock::time_point> deadline) = 0;
  // Whether some child's output is still open (after the last exit: still draining).
  virtual bool output_open() const = 0;
  // Stops reading output that has not ended (a grandchild that escaped its process
  // group may hold a pipe open forever).
  virtual void close_output() = 0;
  // Where each of `children` (live workers) is, taken at once within a bounded time
  // (stack_capture.h); one capture per child, in order.
  virtual std::vector<StackCapture> capture_stacks(const std::vector<std::size_t>& children) = 0;
  // The collective trace `child` (a worker, running or not) keeps; nullopt when none.
  virtual std::optional<TraceSnapshot> trace(std::size_t child) = 0;
  // The step `child` (a worker) last wrote to its DDPRUN_PROGRESS_FILE; nullopt when none.
  virtual std::optional<long long> progress(std::size_t child) = 0;
  // What `child` (a worker, ended) left in its error and progress files (RankResult's
  // error_text and last_step), read once when the round ends.
  struct RankFiles {
    std::string error_text;
    std::optional<long long> last_step;
  };
  virtual RankFiles rank_files(std::size_t child) = 0;
  // The last stderr lines of `child`.
  virtual std::deque<std::string> stderr_tail(std::size_t child) const = 0;
  // Tells this node's head `event` at once (an agent; nothing without a head).
  virtual void announce(const NodeEvent& event) = 0;
  // From now until the round's end, stop signals to agents carry `cause`, so that their
  // nodes report the job's cause and exit code, not the signal.
  virtual void set_stop_cause(const NodeEvent& cause) = 0;
  // Says `membership`'s change on the console. On an agent, reports it to the head as node
  // `node`'s part. On the head (or alone), when `whole` (every node's ranks are in it),
  // replaces the round's membership file (ChildSpec::membership_file) whole with it and
  // sends it to every agent, which writes it to its own file and passes it down. A file
  // that cannot be written is said once and costs nothing else: the job goes on.
  virtual void publish_membership(const Membership& membership, bool whole, int node) = 0;
  // Agent `child` answers for one node fewer from now on: a node below it in the ssh tree
  // now runs under an agent of this head's own (control requests wait for no answer of it).
  virtual void one_node_fewer_below(std::size_t child) = 0;
  // Seconds from the round's start to each child's first step (DDPRUN_PROGRESS_FILE), as far
  // as seen; empty when they were not watched (run/first_steps.h says when they are).
  virtual std::vector<std::optional<double>> first_steps() const { return {}; }
  // Ends the round: forgets its children, so the next round numbers from 0 again.
  virtual void end_round() = 0;
};

}  // namespace ddprun
