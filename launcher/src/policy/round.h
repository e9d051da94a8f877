#pragma once
// The supervision of one round (run_round, supervision.h), inside policy/ only. Its state is two
// things: the phase, which only moves forward, and whether a preemption notice went out
// (the workers then stop on their own at an agreed step). Every transition is in `handle`
// (round.cc) and the deadline checks of `wait_for_all` (round_deadlines.cc); none does I/O
// (the Runner does), so every sequence of events can be explored with a fake runner
// (tests/launcher/policy/supervision_sequences_test.cc). What the round ended with is `finish`
// (round_outcome.cc).
//
//   kRunning  --worker fails-------------> kFailing   (SIGTERM to the rest; restartable)
//   kRunning  --exit timeout-------------> kTimedOut  (SIGTERM to the rest; restartable)
//   kRunning  --no progress (stall)------> kStalled   (stacks, SIGTERM to all; restartable)
//   any       --stop signal, head lost---> kStopping  (the signal to the rest; never
//                                                      restarted: 128+N, or 75 if drained)
//   kFailing/kTimedOut/kStalled/kStopping --grace-> stacks, SIGKILL to the rest (to agents
//                                                    only after agent_stack_allowance)
//   kStopping --a second SIGINT----------> SIGKILL at once
//   kFailing/kTimedOut/kStalled --stop signal, head lost, a node's stop--> as any stop,
//                                          but the round keeps its cause and that cause's
//                                          code (never restarted): Slurm 26.05 sends SIGTERM
//                                          to every task once one task failed
//   any       --SIGKILL from the head------> SIGKILL at once (the head gave up on the node)
//   any       --SIGUSR1/2, drain time----> forwarded; notice_ set (a worker ending with 75,
//                                          or killed by the notice, is drained, not failed;
//                                          an exit 75 without a notice is a failure)
//   any       --SIGUSR1/2-----------------> notice_seen_: a failed round ends drained, no restart
//   kRunning  --worker fails, rank scope--> kRunning: a replacement of the same spec starts
//                                          as a new child (a recovery), while recoveries
//                                          are left, no notice came, and the failed child
//                                          was not a replacement within its recovery
//                                          window; otherwise as "worker fails" above
//   kRunning  --agent of one node lost,--> kRunning: its ranks start on a spare node (an
//             rank scope, a spare            agent there, each rank a recovery) while as
//                                          many recoveries are left and no notice came
//   kRunning  --agent of a node below a --> kRunning: an ssh tree's agent hands it up
//             tree agent lost, rank scope    (kLost, with the nodes below it, which went
//                                          with it) and goes on; the head starts their ranks
//                                          under agents of its own as above, all or none
//   kRunning  --agent of an inner node ----> kRunning: its ranks and those of every node
//             lost, rank scope, spares       below it start under agents of the head's own,
//                                          all or none (then as "worker fails")
//
// Under --restart-scope rank every change of who runs (a start, a loss, a replacement, a
// rank that finished) is published (Runner::publish_membership) with a version one higher.
// Over several nodes each node replaces its own ranks and reports its part to the head at
// every change (an agent between them passes it on); the head merges the parts with its own
// ranks, publishes the whole once every node's part came, and holds the job's budget: a
// node's replacement beyond the recoveries left fails the round (a full restart decides).
// A head over ssh with spare nodes starts a lost node's ranks on a spare (move_node), each
// rank one recovery, and publishes again once the spare's part came.
//
// An agent tells its head at once (Runner::announce) when its round fails, when ddprun
// itself is stopped or gets a notice; the head acts on such a report from an agent child as
// on its own failure, stop or notice, and its stop signals then carry the cause, so that
// every node fails together within one grace and exits with the job's code.

#include <sys/wait.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "policy/supervision.h"

namespace ddprun {

inline bool exited_with(int status, int code) {
  return WIFEXITED(status) && WEXITSTATUS(status) == code;
}

// "15 s", "0.5 s".
std::string format_seconds(std::chrono::milliseconds span);

class Round {
 public:
  enum class Phase { kRunning, kFailing, kTimedOut, kStalled, kStopping };
  // The kill escalation, a machine beside the phase: a stop asks the live children
  // (kAsked, until the grace ends); then, with stacks and agents, the workers get SIGKILL
  // while the agents send their nodes' stacks (kAgentsLast, until their allowance ends);
  // then every live child has SIGKILL (kKilled), and nothing more is asked.
  enum class Escalation { kNone, kAsked, kAgentsLast, kKilled };

  Round(Runner& runner, const RoundPolicy& policy, int recoveries_left,
        const SpareNodes& spares = {})
      : runner_(runner), policy_(policy), spares_(spares), recoveries_left_(recoveries_left) {}

  // Starts `children`, supervises them until every one has ended, and says how the round
  // ended. A start that throws: the children started are killed and reaped, and it rethrows.
  RoundResult run(const std::vector<ChildSpec>& children);

 private:
  static constexpr std::size_t kNoChild = static_cast<std::size_t>(-1);

  // round.cc: starts, replacements, and the events.
  // The spec of index `index`: the round's children's, then the spare nodes' agents.
  const ChildSpec& spec(std::size_t index) const {
    return index < specs_->size() ? (*specs_)[index] : moved_specs_.at(index - specs_->size());
  }
  // A new child (not started yet) that runs spec(spec_index).
  RankResult& add_child(std::size_t spec_index);
  // Forgets the child add_child made last (its start failed).
  void drop_last_child();
  bool rank_scope() const { return policy_.restart_scope == RestartScope::kRank; }
  // Tells the workers who runs now (--restart-scope rank): each worker of the round's
  // specs, as its last child (a replacement, when it has one) stands.
  void publish(std::string change);
  // Starts a replacement for failed worker `child` when the round may (--restart-scope
  // rank; the caller checked the phase). Returns whether one runs; when none does for a
  // reason other than the end of the recoveries, not_replaced_ says why.
  bool replace(std::size_t child);
  // The replacements the other nodes reported (their parts), and the recoveries the whole
  // round has left with them.
  int remote_recoveries() const;
  int recoveries_left() const { return recoveries_left_ - remote_recoveries(); }
  // The nodes below node `first` in the ssh tree (the rest of the `count` from it) that were
  // not moved from there already.
  std::vector<int> nodes_below(int first, int count) const;
  // Node `lost` (`name`; `line` says how it was lost) and the nodes `below` it in the ssh
  // tree, which went with it: their ranks start on spare nodes or the nodes again (the lost
  // node's as `again_how` says, the others under agents of this head's own), all of them
  // within the budget or none, each line said. Returns the lost node's stand-in; none when
  // they do not all run, not_replaced_ saying why when that was not the want of a spare for
  // the lost node itself (the round then fails, and the stand-ins started spend nothing).
  std::optional<std::size_t> move_together(int lost, const std::vector<int>& below,
                                           const std::string& name, const std::string& line,
                                           const std::string& again_how);
  // Starts lost agent `child`'s ranks on a spare node (--restart-scope rank, an agent of one
  // node), and the ranks of the nodes below it in the ssh tree, which went with it, each
  // under an agent of its own: all of them, or the round fails. Returns whether they run;
  // when they do not for a reason other than no spare, not_replaced_ says why.
  bool move_node(std::size_t child);
  // Node `node` (`name`: "node 1 (node2)") was lost: its ranks (its last part) start on a
  // spare node, or the node again (`again_how` says how), each a recovery. Returns the child
  // that stands for it and where it went (with the restarts left) for the loss's line; none
  // when none fits, not_replaced_ saying why when that was not the want of a spare.
  struct Moved {
    std::size_t child;
    std::string where;
    int ranks;  // its ranks, each a recovery
  };
  std::optional<Moved> start_on_spare(int node, const std::string& name,
                                      const std::string& again_how);
  // An agent of the ssh tree: lost agent `child` (a node below this one) and every node
  // below it, which went with it, are the head's to move; says so to the head (one
  // NodeEvent::kLost, with how many nodes went). Returns whether it did.
  bool hand_up(std::size_t child);
  // The head: agent `child` handed up node `lost.node`, lost below it with the nodes below
  // it (lost.nodes in all): their ranks go on under agents of this head's own on spare nodes
  // (or the nodes again), all or none. Returns whether they run; when they do not for a
  // reason other than no spare, not_replaced_ says why.
  bool move_below(std::size_t child, const NodeEvent& lost);
  // Agent `child` passed on node `node`'s part of the membership.
  void on_membership(std::size_t child, int node, Membership part);
  // An agent of one node (not srun or mpirun standing for every node).
  bool one_node_agent(std::size_t child) const {
    return ranks_[child].agent && ranks_[child].node_rank >= 0;
  }
  // What this round's first failure tells the head and the other nodes.
  NodeEvent failure_event(std::size_t child) const;
  // The round fails: `child` failed first (a worker here, or an agent that ended or reported
  // its node's failure). The head hears at once, and the other nodes hear why they stop. A
  // node that failed stops its own; one the head failed (`stop_its_node`) is stopped too.
  void fail(std::size_t child, bool stop_its_node = false);
  // Forwards a notice (not back to `except`, the agent that reported it). Only one that
  // went out while the round ran drains it: after a stop decision the stop decides, and a
  // worker the notice kills then is just stopped. Either way a failed round then ends the
  // job drained instead of starting another (notice_seen_).
  void send_notice(int sig, std::size_t except = kNoChild);
  void handle(const RunnerEvent& event);
  // Whether this round already has its cause: its first failure, its exit timeout or its
  // stall, or a stop that came after one of those.
  bool has_own_cause() const;
  // The phase that decides the round's outcome: the one a stop came in when the round
  // already had its cause.
  Phase outcome_phase() const { return stopped_after_.value_or(phase_); }
  // A stop decision: `cause` is what ddprun reports (128 + it), `forward` what the live
  // children get. A job told to stop never restarts. A stop that comes after this round's
  // own cause (a failure, the exit timeout, a stall) keeps that cause and its exit code: a
  // scheduler that stops every task once one failed (Slurm 26.05's SIGTERM, srun
  // --kill-on-bad-exit) must not turn the root cause into 128 + 15.
  void on_stop(int cause, int forward);
  void on_signal(const RunnerEvent& event);
  // What agent `child` reported of its node (or of one below it).
  void on_node_event(std::size_t child, const NodeEvent& event);
  void on_exit(const RunnerEvent& event);
  double seconds_since(RunnerClock::time_point start) const;

  // round_deadlines.cc: the live children, the kill escalation, the loop and its deadlines.
  std::size_t live() const;
  std::size_t live_agents() const;
  void signal_live(int sig, std::size_t except = kNoChild);
  void kill_live();
  void kill_live_workers();
  // Sends `sig` to every live child but `except`; SIGKILL follows when the grace from the
  // first stop ends.
  void stop_live(int sig, std::size_t except = kNoChild);
  // Takes the stacks of the live workers (agents take their own node's), once a round.
  void capture_live_stacks(const std::string& when);
  // Every worker's collective trace as it stands, the exited ones' too: they say which
  // collective they left in (a rank that timed out names the one that never entered it).
  void read_traces();
  void wait_for_all();
  // At the escalation step's end: the next step (Escalation).
  void escalate(RunnerClock::time_point now);
  // Reads every live worker's progress; when none advanced for the stall timeout (and one
  // wrote some), takes everyone's stacks and stops the round.
  void check_stall(RunnerClock::time_point now);

  // round_outcome.cc: how the round ended.
  // A child that the notice ended: it exited 75 (a worker, or an agent whose node drained),
  // or the notice's default action killed it (a worker here, or one behind an agent, which
  // reports 128 + the signal).
  // An exit 75 is a drain after a notice, or after a stop signal (a scheduler's preemption
  // by SIGTERM: the worker saved and asks to be requeued); unprompted, it is a failure. An
  // agent's 75 is its node's drain, which its own round already judged.
  bool drained_by_notice(const RankResult& child) const;
  // The outcome from the phase that decides it (outcome_phase), a drain, a stop and the
  // first failure coming first, in that order.
  Outcome outcome(Phase phase, bool all_ended_cleanly) const;
  RoundResult finish();

  Runner& runner_;
  const RoundPolicy& policy_;
  const SpareNodes& spares_;
  const std::vector<ChildSpec>* specs_ = nullptr;
  std::deque<ChildSpec> moved_specs_;  // the agents started on spare nodes (move_node)
  // The children that awaited a node's ddprun (ChildSpec::join_by) and have it (kJoined).
  std::set<std::size_t> joined_;
  // An agent of the ssh tree: the lost agents below it that it handed up (no failure here).
  std::set<std::size_t> handed_up_;
  // The head: the nodes lost below an agent whose ranks it moved, each to the child that
  // stands for it now (what comes of such a node through its old path is its last words).
  std::map<int, std::size_t> moved_below_;
  std::vector<RankResult> ranks_;
  // Per child: the spec it runs (index into specs_) and when it started.
  std::vector<std::size_t> spec_of_;
  std::vector<RunnerClock::time_point> started_at_;
  // --restart-scope rank: replacements still allowed, those started, the membership's
  // version, and why a lost worker was not replaced (RoundResult::not_replaced).
  int recoveries_left_ = 0;
  int recoveries_ = 0;
  long membership_version_ = 0;
  std::string not_replaced_;
  Phase phase_ = Phase::kRunning;
  Escalation escalation_ = Escalation::kNone;
  bool lost_head_ = false;   // agent: the head's connection closed
  bool drain_sent_ = false;  // the walltime notice went out (policy.drain_at)
  bool any_drained_ = false;
  std::vector<int> notice_signals_;  // notices that went out this round
  int notice_seen_ = 0;              // the round's first notice, whenever it came
  int stop_signal_ = 0;
  // The phase (kFailing, kTimedOut, kStalled) the round was in when a stop came after its
  // own cause; nullopt: no stop, or the stop came first.
  std::optional<Phase> stopped_after_;
  std::optional<NodeEvent> cause_;  // a stop's cause from elsewhere (RoundResult::cause)
  // What each agent child reported of its node's failure; nullopt: nothing.
  std::vector<std::optional<NodeEvent>> reported_;
  // What each other node last reported of its ranks (rank scope), by node.
  std::map<int, Membership> parts_;
  std::optional<std::size_t> first_failure_;
  std::optional<std::size_t> first_exit_;
  std::vector<std::size_t> still_running_;
  std::string stacks_when_;  // set when the stacks were taken
  double spawn_seconds_ = 0;
  // --stall-timeout: each worker's last progress, when any advanced last, the next check.
  std::vector<std::optional<long long>> steps_;
  RunnerClock::time_point last_advance_{};
  std::vector<std::size_t> behind_;
  long long behind_step_ = -1;
  long long ahead_step_ = -1;
  // The round's own deadlines (the walltime drain is the policy's: drain_at).
  struct Timers {
    std::optional<RunnerClock::time_point> exit;         // --exit-timeout, from the first exit
    std::optional<RunnerClock::time_point> escalate;     // the escalation step's end
    std::optional<RunnerClock::time_point> drain;        // output, after the last exit
    std::optional<RunnerClock::time_point> stall_check;  // --stall-timeout's next look
  } timers_;
};

}  // namespace ddprun
