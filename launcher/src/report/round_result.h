#pragma once
// How one round on this node ended: each child's end, and the outcome the job acts on.

#include <sys/types.h>

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/contract/collective_trace.h"

namespace ddprun {

// Where a worker was when ddprun gave up waiting for it (stacks.h reads these).
struct StackCapture {
  std::string native;   // eu-stack's output: every thread's native frames
  std::string python;   // faulthandler's dump of every Python thread, when the rank armed it
  std::string problem;  // one line saying why a part is missing; empty when none is
};

// A rank's collective trace as ddprun read it (collective_trace.h).
struct TraceSnapshot {
  trace::TraceFile file;
  std::int64_t read_ns = 0;  // when (CLOCK_REALTIME, as the trace's times)
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
  std::string progress_file;
  // What it left in those files when the round ended (Runner::rank_files).
  std::string error_text;              // its error file's head; empty: none
  std::optional<long long> last_step;  // its progress file's step; nullopt: none
  std::optional<StackCapture> stacks;  // captured before ddprun killed it
  // Its last collectives, read with its stacks or after a failed round; nullopt: none kept.
  std::optional<TraceSnapshot> trace;
  // --restart-scope rank: the child that replaced this one after it failed, in the same
  // round; whether this child is itself a replacement.
  std::optional<std::size_t> replaced_by;
  bool replacement = false;
  // Seconds from the round's start to its first step (the first round's workers on this
  // node; a step written before the watch began counts at its start, kFirstStepWatchAfter).
  std::optional<double> first_step_seconds;
};

// What a node says the moment it happens, to its head (and what a head tells its nodes as
// the cause of a stop): the job's first failure, a stop by a signal, a preemption notice,
// or workers that could not be started (docs/multinode.md, "When a node leaves").
struct NodeEvent {
  // kLost: an agent of the ssh tree lost the agent of a node below it (that node's ddprun
  // ended with no failure of its own to report) under --restart-scope rank, and hands it up:
  // the head moves that node's ranks, or fails the round.
  enum class Kind { kFailed, kStopped, kNotice, kSetupFailed, kLost };
  Kind kind = Kind::kFailed;
  int node = 0;      // the node where it happened
  int nodes = 1;     // kLost: that node and the nodes below it in the ssh tree, lost with it
  int code = 0;      // the exit code it gives the job (kStopped: 128 + the signal)
  int signal = 0;    // kStopped, kNotice
  std::string what;  // one line for people: "rank 3 (node2) exit code 1", an error's text
};

enum class Outcome {
  kSucceeded,     // every worker exited 0
  kWorkerFailed,  // a worker failed first; the others were stopped
  kStopped,       // ddprun was told to stop (a signal); not a candidate for restart
  kPreempted,     // workers exited kExitPreempted (checkpoint saved), none failed
  kTimedOut,      // --exit-timeout: a child exited and others were still running after it
  kStalled,       // --stall-timeout: no worker's progress file advanced for that long
};

struct RoundResult {
  Outcome outcome = Outcome::kSucceeded;
  // With kStopped and kPreempted: the stop signal. With kWorkerFailed, kTimedOut and
  // kStalled: a stop that came after that cause (Slurm 26.05 stops every task once one
  // failed); the round keeps its cause and code but is never restarted. 0: none.
  int stop_signal = 0;
  bool lost_head = false;  // agent: the head's connection closed
  bool drained = false;    // the walltime notice went out this round
  // With kStopped: what stopped it when it came from elsewhere (another node's failure or
  // stop, which the head named in its stop message, or a node's own report to this head);
  // the job's exit code is its code.
  std::optional<NodeEvent> cause;
  // The first preemption notice of the round, whenever it came (before or after a stop or
  // failure decision): a failed round that had one ends the job drained (75) instead of
  // starting another round, whose workers would never hear of it.
  int notice = 0;
  std::optional<std::size_t> first_failure;  // index into ranks, with kWorkerFailed
  // With kWorkerFailed when the first failure was an agent's that reported its node's
  // failure first (NodeEvent::kFailed): the code it reported, the job's exit code. srun
  // standing for every node ends with the highest code of its tasks, which may be the
  // SIGTERM (143) its --kill-on-bad-exit sent the others; the report names the root cause.
  std::optional<int> first_failure_code;
  // With kTimedOut: the child that exited first, and those still running at the timeout.
  std::optional<std::size_t> first_exit;
  std::vector<std::size_t> still_running;
  // With kStalled: the workers at the lowest step (one that never wrote counts as lowest),
  // that step (-1: none written), and the highest step of any worker.
  std::vector<std::size_t> behind;
  long long behind_step = -1;
  long long ahead_step = -1;
  // Workers in local rank order, then agents, then replacements (--restart-scope rank) in
  // the order they started.
  std::vector<RankResult> ranks;
  std::string stacks_when;   // when the ranks' stacks were taken; empty: never
  double spawn_seconds = 0;  // how long starting every child took
  // --restart-scope rank: the lost ranks replaced in this round, and, when a lost rank was
  // not replaced for a reason other than the end of the restarts (its replacement failed
  // during its recovery, or could not be started), that reason in a few words.
  int recoveries = 0;
  std::string not_replaced;
};

}  // namespace ddprun
