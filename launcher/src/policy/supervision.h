#pragma once
// The job's policy, over a Runner (runner.h): one round starts this node's children and,
// on the first failure, stops the rest (SIGTERM to each, the grace, then SIGKILL); signals
// to ddprun are forwarded or stop the round; the job restarts failed rounds up to
// --max-restarts and turns the last round into ddprun's exit code (docs/exit-codes.md).
// Processes, signals, the clock and the ranks' files only through the Runner (no system
// calls here), so the policy tests run it with a fake runner in microseconds and no file.

#include <chrono>
#include <csignal>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "report/job_report.h"
#include "report/round_result.h"
#include "run/restart_policy.h"
#include "run/runner.h"

namespace ddprun {

struct RoundPolicy {
  std::chrono::milliseconds shutdown_grace{15000};  // SIGTERM to SIGKILL
  // After the last child exits, its output still in flight is drained for at most this
  // long (a grandchild that escaped its process group may hold a pipe open forever).
  std::chrono::milliseconds drain_after_exit{2000};
  // --exit-timeout: once a child has exited, the live ones get this long, then the round
  // is stopped and fails (Outcome::kTimedOut).
  std::optional<std::chrono::milliseconds> exit_timeout;
  // --signals-to-handle: more signals that stop the job like SIGTERM does.
  std::vector<int> extra_stop_signals;
  // Before the job's walltime end: the workers get `drain_signal` once at `drain_at`, and
  // those it ends (exit 75, or killed by it) count as preempted, not failed.
  std::optional<RunnerClock::time_point> drain_at;
  int drain_signal = SIGUSR1;
  // Before SIGKILL goes to workers that outlived the grace, ddprun takes their stacks
  // (Runner::capture_stacks) and the round's result keeps them.
  bool capture_stacks = false;
  // With capture_stacks, agents (other nodes' ddprun) get this long after the grace before
  // their SIGKILL: their own grace ends at about the same time, and their stacks (taken
  // within CaptureLimits, stack_capture.h) must reach this console first.
  std::chrono::milliseconds agent_stack_allowance{7000};
  // --stall-timeout: when no worker's progress (Runner::progress) has advanced for this
  // long, and some worker has written one, the round stops (Outcome::kStalled) after the
  // stacks of all are taken. Checked every `stall_check_every`.
  std::optional<std::chrono::milliseconds> stall_timeout;
  std::chrono::milliseconds stall_check_every{1000};
  // This node, named in what the round tells its head (Runner::announce).
  int node_rank = 0;
  // --restart-scope rank: a failed worker is started again in the same round (a
  // replacement) while the others go on, as long as the round has recoveries left
  // (run_round). A replacement that fails within `recovery_window` of its start failed
  // during its recovery: the round then fails as under kJob (a full restart decides).
  RestartScope restart_scope = RestartScope::kJob;
  std::chrono::milliseconds recovery_window{10000};
  // An agent started on a spare node in a lost node's place (--agent-replaces): its first
  // workers are replacements (the membership says so, and their recovery window applies).
  bool starts_replacements = false;
  // An agent of the ssh tree (--restart-scope rank): a node below it whose ddprun is lost is
  // handed up (NodeEvent::kLost) for the head to move, instead of failing the round.
  bool hands_up_lost_nodes = false;
};

// --restart-scope rank, a head over ssh: a lost node's ranks again, on a spare node. Given
// the lost node's rank, it returns the agent that starts its ranks there (on agent.host) as
// replacements (`again`: no spare fits, the node itself is tried anew), or nullopt when
// there is none. It takes the spare: the job's next rounds keep it in the node's place.
struct SpareNode {
  ChildSpec agent;
  bool again = false;
  // A per-node launcher's place awaited (agent.join_by) while a ddprun waits as a spare to
  // take it: its host, which the loss's line names.
  std::string waiting_spare = {};
};
using SpareNodes = std::function<std::optional<SpareNode>(int node)>;

// Whether `sig` stops the job: SIGINT, SIGTERM, SIGHUP, SIGQUIT, or one of `extra`
// (--signals-to-handle) that is not a notice (SIGUSR1, SIGUSR2).
bool is_stop_signal(int sig, const std::vector<int>& extra);

// Starts `children` in order and returns when every started one has ended. When a start
// throws, the children already started are killed and waited for, then it rethrows.
// Under RestartScope::kRank, at most `recoveries_left` failed workers are replaced (a
// replacement that cannot be started fails the round instead).
// A lost agent of one node whose ranks `spares` can start elsewhere is replaced the same way
// (each of its ranks one recovery).
RoundResult run_round(Runner& runner, const std::vector<ChildSpec>& children,
                      const RoundPolicy& policy, int recoveries_left = 0,
                      const SpareNodes& spares = {});

// The code ddprun exits with after `result`: 0 on success; the failing worker's exit code,
// or 128 + its signal; kExitPreempted; 128 + the signal that stopped ddprun, or the code of
// the cause another node gave for the stop.
int exit_code_for(const RoundResult& result);

struct JobSettings {
  RoundPolicy round;
  int max_restarts = 0;   // full restarts and replacements (--restart-scope rank) together
  RestartRule restart;    // which failures a restart may fix (restart_policy.h)
  bool agent = false;     // runs one round of the head's: the head decides on restarts
  bool summaries = true;  // print each round's summary before it starts
  bool tables = true;     // print the rank table after each round
  bool colour = false;    // "error:" in bold red
};

// What one round starts, and what to tell the user.
struct RoundSetup {
  std::vector<ChildSpec> children;
  std::string summary;  // printed before the round when settings.summaries
  std::string notice;   // printed before the round always (e.g. a spare node taking over)
  std::string log_dir;  // named after a final failure; empty: no log folder
  SpareNodes spares =
      SpareNodes();  // --restart-scope rank: where a lost node's ranks may go (run_round)
  // Set when the job ends before this round starts (the nodes' gathering was stopped, or
  // a notice came meanwhile): run_job prints `end_message` and returns this code.
  std::optional<int> end_code = std::nullopt;
  std::string end_message = std::string();
};

// Told after every round what run_job decided (--report): the round's result (null when
// the job ended before it started) and the decision, before the next round is made.
using RoundObserver = std::function<void(const RoundResult* result, const RoundDecision& decision)>;

// Runs rounds made by `make_round(round number, previous round)` until one succeeds, is stopped or
// preempted, or fails with no restart left; messages go to `messages`, and each round's
// decision to `observer` when there is one. Returns ddprun's exit code. Exceptions from
// make_round, the runner and the observer pass through.
// `previous` is the round before (null for round 0).
int run_job(Runner& runner, const JobSettings& settings,
            const std::function<RoundSetup(int round, const RoundResult* previous)>& make_round,
            std::ostream& messages, const RoundObserver& observer = {});

}  // namespace ddprun
