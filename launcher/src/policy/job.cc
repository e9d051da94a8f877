#include "policy/job.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <string_view>

#include "ddprun/common/files.h"
#include "ddprun/common/signal_name.h"
#include "ddprun/contract/errors.h"
#include "report/error_digest.h"
#include "report/labels.h"
#include "report/report.h"
#include "report/stacks.h"

namespace ddprun {
namespace {

bool exited_with(int status, int code) {
  return WIFEXITED(status) && WEXITSTATUS(status) == code;
}

// "15 s", "0.5 s".
std::string format_seconds(std::chrono::milliseconds span) {
  const long long ms = span.count();
  std::string text = std::to_string(ms / 1000);
  if (ms % 1000 != 0) {
    std::string fraction = std::to_string(1000 + ms % 1000).substr(1);
    while (fraction.back() == '0') fraction.pop_back();
    text += "." + fraction;
  }
  return text + " s";
}

bool is_notice_signal(int sig) {
  return sig == SIGUSR1 || sig == SIGUSR2;
}

// The exit code a child's end gives the job: its own, or 128 + its signal.
int code_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

constexpr std::size_t kNoChild = static_cast<std::size_t>(-1);

// The supervision of one round. Its state is two things: the phase, which only moves
// forward, and whether a preemption notice went out (the workers then stop on their own
// at an agreed step). Every transition is in `handle` and the deadline checks of
// `wait_for_all`; none does I/O (the Runner does), so every sequence of events can be
// explored with a fake runner (tests/launcher/job_sequences_test.cc).
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
//
// Under --restart-scope rank every change of who runs (a start, a loss, a replacement, a
// rank that finished) is published (Runner::publish_membership) with a version one higher.
//
// An agent tells its head at once (Runner::announce) when its round fails, when ddprun
// itself is stopped or gets a notice; the head acts on such a report from an agent child as
// on its own failure, stop or notice, and its stop signals then carry the cause, so that
// every node fails together within one grace and exits with the job's code.
class Round {
 public:
  enum class Phase { kRunning, kFailing, kTimedOut, kStalled, kStopping };

  Round(Runner& runner, const RoundPolicy& policy, int recoveries_left)
      : runner_(runner), policy_(policy), recoveries_left_(recoveries_left) {}

  RoundResult run(const std::vector<ChildSpec>& children) {
    specs_ = &children;
    ranks_.reserve(children.size());
    const auto spawn_start = runner_.now();
    try {
      for (std::size_t i = 0; i < children.size(); ++i) {
        RankResult& rank = add_child(i);
        rank.pid = runner_.start(children[i]);
        rank.started = true;
      }
    } catch (...) {
      kill_live();
      wait_for_all();
      runner_.end_round();
      throw;
    }
    spawn_seconds_ = seconds_since(spawn_start);
    if (rank_scope()) publish({});
    wait_for_all();
    RoundResult result = finish();
    runner_.end_round();
    return result;
  }

 private:
  // A new child (not started yet) that runs children[spec].
  RankResult& add_child(std::size_t spec_index) {
    const ChildSpec& spec = (*specs_)[spec_index];
    RankResult& rank = ranks_.emplace_back();
    rank.agent = spec.agent;
    rank.node_rank = spec.node_rank;
    rank.rank = spec.rank;
    rank.local_rank = spec.local_rank;
    rank.host = spec.host;
    rank.error_file = spec.error_file;
    rank.progress_file = spec.progress_file;
    reported_.emplace_back();
    spec_of_.push_back(spec_index);
    started_at_.push_back(runner_.now());
    return rank;
  }

  bool rank_scope() const { return policy_.restart_scope == RestartScope::kRank; }

  // Tells the workers who runs now (--restart-scope rank): each worker of the round's
  // specs, as its last child (a replacement, when it has one) stands.
  void publish(std::string change) {
    Membership membership;
    membership.version = ++membership_version_;
    membership.recoveries = recoveries_;
    membership.change = std::move(change);
    for (std::size_t i = 0; i < std::min(specs_->size(), ranks_.size()); ++i) {
      if (ranks_[i].agent) continue;
      std::size_t last = i;
      while (ranks_[last].replaced_by) last = *ranks_[last].replaced_by;
      const RankResult& child = ranks_[last];
      Membership::Member& member = membership.ranks.emplace_back();
      member.rank = child.rank;
      member.pid = child.pid;
      if (!child.exited) {
        member.state =
            child.replacement ? Membership::State::kReplaced : Membership::State::kRunning;
      } else {
        member.state =
            exited_with(child.wait_status, 0) ? Membership::State::kDone : Membership::State::kLost;
      }
    }
    std::sort(membership.ranks.begin(), membership.ranks.end(),
              [](const auto& a, const auto& b) { return a.rank < b.rank; });
    runner_.publish_membership(membership);
  }

  // Starts a replacement for failed worker `child` when the round may (--restart-scope
  // rank; the caller checked the phase). Returns whether one runs; when none does for a
  // reason other than the end of the recoveries, not_replaced_ says why.
  bool replace(std::size_t child) {
    if (notice_seen_ != 0 || recoveries_left_ <= 0) return false;  // a notice: the round drains
    const std::string name = "rank " + std::to_string(ranks_[child].rank);
    const std::string how = describe_wait_status(ranks_[child].wait_status);
    if (ranks_[child].replacement) {
      const auto ran =
          std::chrono::duration_cast<std::chrono::milliseconds>(runner_.now() - started_at_[child]);
      if (ran < policy_.recovery_window) {
        not_replaced_ = name + "'s replacement " + how + " " + format_seconds(ran) +
                        " after its start, during its recovery (the first " +
                        format_seconds(policy_.recovery_window) + ")";
        return false;
      }
    }
    const pid_t lost_pid = ranks_[child].pid;
    const std::size_t index = ranks_.size();
    add_child(spec_of_[child]).replacement = true;
    try {
      ranks_[index].pid = runner_.start((*specs_)[spec_of_[child]]);
    } catch (const std::exception& e) {
      ranks_.pop_back();
      reported_.pop_back();
      spec_of_.pop_back();
      started_at_.pop_back();
      not_replaced_ = name + "'s replacement could not be started: " + e.what();
      return false;
    }
    ranks_[index].started = true;
    ranks_[child].replaced_by = index;
    --recoveries_left_;
    ++recoveries_;
    publish(name + " (pid " + std::to_string(lost_pid) + ") " + how +
            "; started its replacement, pid " + std::to_string(ranks_[index].pid) + " (" +
            std::to_string(recoveries_left_) + " restart(s) left)");
    return true;
  }

  std::size_t live() const {
    return static_cast<std::size_t>(std::count_if(ranks_.begin(), ranks_.end(),
                                                  [](auto& r) { return r.started && !r.exited; }));
  }

  void signal_live(int sig, std::size_t except = kNoChild) {
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (i != except && ranks_[i].started && !ranks_[i].exited) runner_.signal(i, sig);
    }
  }

  void kill_live() {
    signal_live(SIGKILL);
    kill_deadline_.reset();
    agent_kill_deadline_.reset();
    killed_ = true;
  }

  std::size_t live_agents() const {
    return static_cast<std::size_t>(std::count_if(
        ranks_.begin(), ranks_.end(), [](auto& r) { return r.agent && r.started && !r.exited; }));
  }

  void kill_live_workers() {
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].started && !ranks_[i].exited && !ranks_[i].agent) runner_.signal(i, SIGKILL);
    }
  }

  // Takes the stacks of the live workers (agents take their own node's), once a round.
  void capture_live_stacks(const std::string& when) {
    if (!policy_.capture_stacks || !stacks_when_.empty()) return;
    std::vector<std::size_t> workers;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].started && !ranks_[i].exited && !ranks_[i].agent) workers.push_back(i);
    }
    if (workers.empty()) return;
    std::vector<StackCapture> captures = runner_.capture_stacks(workers);
    for (std::size_t k = 0; k < workers.size() && k < captures.size(); ++k) {
      ranks_[workers[k]].stacks = std::move(captures[k]);
    }
    read_traces();
    stacks_when_ = when;
  }

  // Every worker's collective trace as it stands, the exited ones' too: they say which
  // collective they left in (a rank that timed out names the one that never entered it).
  void read_traces() {
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].started && !ranks_[i].agent) ranks_[i].trace = runner_.trace(i);
    }
  }

  // Sends `sig` to every live child but `except`; SIGKILL follows when the grace from the
  // first stop ends.
  void stop_live(int sig, std::size_t except = kNoChild) {
    if (killed_) return;  // nothing left to ask: SIGKILL went out
    signal_live(sig, except);
    if (!kill_deadline_) kill_deadline_ = runner_.now() + policy_.shutdown_grace;
  }

  // An agent of one node (not srun or mpirun standing for every node).
  bool one_node_agent(std::size_t child) const {
    return ranks_[child].agent && ranks_[child].node_rank >= 0;
  }

  // What this round's first failure tells the head and the other nodes.
  NodeEvent failure_event(std::size_t child) const {
    if (reported_[child]) return *reported_[child];
    const RankResult& rank = ranks_[child];
    NodeEvent event;
    event.node = rank.agent && rank.node_rank >= 0 ? rank.node_rank : policy_.node_rank;
    event.code = rank.exited ? code_of(rank.wait_status) : kExitTimedOut;
    const std::string how = rank.exited ? describe_wait_status(rank.wait_status) : "timed out";
    event.what = rank.agent ? child_label(rank) + "'s ddprun: " + how
                            : "rank " + std::to_string(rank.rank) + " (" + rank.host + ") " + how;
    return event;
  }

  // The round fails: `child` failed first (a worker here, or an agent that ended or reported
  // its node's failure). The head hears at once, and the other nodes hear why they stop.
  void fail(std::size_t child) {
    phase_ = Phase::kFailing;
    first_failure_ = child;
    const NodeEvent event = failure_event(child);
    runner_.announce(event);
    runner_.set_stop_cause(event);
    stop_live(SIGTERM, one_node_agent(child) ? child : kNoChild);  // a node stops its own
  }

  // A child that the notice ended: it exited 75 (a worker, or an agent whose node drained),
  // or the notice's default action killed it (a worker here, or one behind an agent, which
  // reports 128 + the signal).
  // An exit 75 is a drain after a notice, or after a stop signal (a scheduler's preemption
  // by SIGTERM: the worker saved and asks to be requeued); unprompted, it is a failure. An
  // agent's 75 is its node's drain, which its own round already judged.
  bool drained_by_notice(const RankResult& child) const {
    const int status = child.wait_status;
    if (exited_with(status, kExitPreempted)) {
      return child.agent || !notice_signals_.empty() || phase_ == Phase::kStopping;
    }
    if (notice_signals_.empty()) return false;
    const auto noticed = [&](int sig) {
      return std::find(notice_signals_.begin(), notice_signals_.end(), sig) !=
             notice_signals_.end();
    };
    if (WIFSIGNALED(status)) return noticed(WTERMSIG(status));
    return child.agent && WIFEXITED(status) && WEXITSTATUS(status) > 128 &&
           noticed(WEXITSTATUS(status) - 128);
  }

  void wait_for_all() {
    for (;;) {
      const bool none_live = live() == 0;
      if (none_live && !drain_deadline_) drain_deadline_ = runner_.now() + policy_.drain_after_exit;
      if (none_live && !runner_.output_open()) return;
      const auto now = runner_.now();
      if (kill_deadline_ && now >= *kill_deadline_) {
        capture_live_stacks("before SIGKILL, after the " + format_seconds(policy_.shutdown_grace) +
                            " grace");
        if (policy_.capture_stacks && live_agents() > 0) {
          kill_live_workers();
          kill_deadline_.reset();
          agent_kill_deadline_ = now + policy_.agent_stack_allowance;
        } else {
          kill_live();
        }
        continue;
      }
      if (agent_kill_deadline_ && now >= *agent_kill_deadline_) {
        kill_live();
        continue;
      }
      if (policy_.drain_at && !drain_sent_ && now >= *policy_.drain_at) {
        drain_sent_ = true;
        if (!none_live && phase_ == Phase::kRunning) {
          send_notice(policy_.drain_signal);
        } else if (notice_seen_ == 0) {
          notice_seen_ = policy_.drain_signal;  // too late to drain: no round after this one
        }
        continue;
      }
      if (exit_deadline_ && now >= *exit_deadline_) {
        exit_deadline_.reset();
        // A rank still saving after a notice is never cut short.
        if (!none_live && phase_ == Phase::kRunning && notice_signals_.empty()) {
          phase_ = Phase::kTimedOut;
          for (std::size_t i = 0; i < ranks_.size(); ++i) {
            if (ranks_[i].started && !ranks_[i].exited) still_running_.push_back(i);
          }
          NodeEvent timed_out;
          timed_out.node = policy_.node_rank;
          timed_out.code = kExitTimedOut;
          timed_out.what = "ranks still running " + format_seconds(*policy_.exit_timeout) +
                           " after another exited (--exit-timeout)";
          runner_.announce(timed_out);
          runner_.set_stop_cause(timed_out);
          stop_live(SIGTERM);
        }
        continue;
      }
      if (drain_deadline_ && now >= *drain_deadline_) {
        runner_.close_output();
        continue;
      }
      const bool watch_stalls = policy_.stall_timeout && phase_ == Phase::kRunning && !none_live;
      if (watch_stalls && !next_stall_check_) {
        last_advance_ = now;
        next_stall_check_ = now + policy_.stall_check_every;
      }
      if (watch_stalls && now >= *next_stall_check_) {
        check_stall(now);
        next_stall_check_ = now + policy_.stall_check_every;
        continue;
      }
      std::optional<RunnerClock::time_point> deadline = kill_deadline_;
      if (agent_kill_deadline_ && (!deadline || *agent_kill_deadline_ < *deadline)) {
        deadline = agent_kill_deadline_;
      }
      if (watch_stalls)
        deadline = std::min(deadline.value_or(*next_stall_check_), *next_stall_check_);
      const auto drain_at = drain_sent_ ? std::nullopt : policy_.drain_at;
      for (const auto& other : {drain_deadline_, exit_deadline_, drain_at}) {
        if (other && (!deadline || *other < *deadline)) deadline = other;
      }
      handle(runner_.wait(deadline));
    }
  }

  // Reads every live worker's progress; when none advanced for the stall timeout (and one
  // wrote some), takes everyone's stacks and stops the round.
  void check_stall(RunnerClock::time_point now) {
    steps_.resize(ranks_.size());
    bool written = false;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].agent || !ranks_[i].started || ranks_[i].exited) continue;
      const auto step = runner_.progress(i);
      if (step && (!steps_[i] || *step > *steps_[i])) last_advance_ = now;
      if (step) steps_[i] = step;
      written = written || steps_[i].has_value();
    }
    if (!written || now - last_advance_ < *policy_.stall_timeout) return;
    phase_ = Phase::kStalled;
    NodeEvent stalled;
    stalled.node = policy_.node_rank;
    stalled.code = kExitTimedOut;
    stalled.what = "no progress for " + format_seconds(*policy_.stall_timeout);
    runner_.announce(stalled);
    runner_.set_stop_cause(stalled);
    long long lowest = LLONG_MAX;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].agent || !ranks_[i].started || ranks_[i].exited) continue;
      const long long step = steps_[i].value_or(-1);
      if (step < lowest) {
        lowest = step;
        behind_.clear();
      }
      if (step == lowest) behind_.push_back(i);
      ahead_step_ = std::max(ahead_step_, step);
    }
    behind_step_ = lowest;
    capture_live_stacks("when the stall was found: no progress for " +
                        format_seconds(*policy_.stall_timeout));
    stop_live(SIGTERM);
  }

  // Forwards a notice (not back to `except`, the agent that reported it). Only one that
  // went out while the round ran drains it: after a stop decision the stop decides, and a
  // worker the notice kills then is just stopped. Either way a failed round then ends the
  // job drained instead of starting another (notice_seen_).
  void send_notice(int sig, std::size_t except = kNoChild) {
    signal_live(sig, except);
    if (notice_seen_ == 0) notice_seen_ = sig;
    if (phase_ == Phase::kRunning &&
        std::find(notice_signals_.begin(), notice_signals_.end(), sig) == notice_signals_.end()) {
      notice_signals_.push_back(sig);
    }
  }

  void handle(const RunnerEvent& event) {
    switch (event.kind) {
      case RunnerEvent::Kind::kExited:
        on_exit(event);
        break;
      case RunnerEvent::Kind::kSignal:
        on_signal(event);
        break;
      case RunnerEvent::Kind::kNodeEvent:
        on_node_event(event.child, event.node_event);
        break;
      case RunnerEvent::Kind::kHeadLost:
        // This node's workers must not outlive the head.
        lost_head_ = true;
        on_stop(SIGHUP, SIGTERM);
        break;
      case RunnerEvent::Kind::kDeadline:
        break;
    }
  }

  // Whether this round already has its cause: its first failure, its exit timeout or its
  // stall, or a stop that came after one of those.
  bool has_own_cause() const {
    return stopped_after_ || phase_ == Phase::kFailing || phase_ == Phase::kTimedOut ||
           phase_ == Phase::kStalled;
  }

  // The phase that decides the round's outcome: the one a stop came in when the round
  // already had its cause.
  Phase outcome_phase() const { return stopped_after_.value_or(phase_); }

  // A stop decision: `cause` is what ddprun reports (128 + it), `forward` what the live
  // children get. A job told to stop never restarts. A stop that comes after this round's
  // own cause (a failure, the exit timeout, a stall) keeps that cause and its exit code: a
  // scheduler that stops every task once one failed (Slurm 26.05's SIGTERM, srun
  // --kill-on-bad-exit) must not turn the root cause into 128 + 15.
  void on_stop(int cause, int forward) {
    if (phase_ == Phase::kStopping && cause == SIGINT) {
      kill_live();  // a second Ctrl-C: no more grace
      return;
    }
    if (stop_signal_ == 0) {
      stop_signal_ = cause;
      if (has_own_cause()) stopped_after_ = phase_;
    }
    phase_ = Phase::kStopping;
    // Every stop signal reaches every live worker, after a notice too: a worker that is
    // writing its checkpoint decides itself what a stop means then (ddp-train finishes it).
    stop_live(forward);
  }

  void on_signal(const RunnerEvent& event) {
    const int sig = event.signal_number;
    if (event.from_head && sig == SIGKILL) {
      // The head gave up on this node after its grace: nothing is waited for any more.
      if (stop_signal_ == 0) {
        stop_signal_ = SIGKILL;
        if (has_own_cause()) stopped_after_ = phase_;
      }
      phase_ = Phase::kStopping;
      kill_live();
      return;
    }
    const bool stop = is_stop_signal(sig, policy_.extra_stop_signals);
    if (!event.from_head) {  // ddprun's own: the head (when there is one) must know at once
      NodeEvent own;
      own.kind = stop ? NodeEvent::Kind::kStopped : NodeEvent::Kind::kNotice;
      own.node = policy_.node_rank;
      own.signal = sig;
      own.code = stop ? 128 + sig : kExitPreempted;
      own.what = (stop ? "stopped by " : "a preemption notice, ") + signal_name(sig);
      runner_.announce(own);
    } else if (stop && event.cause && stop_signal_ == 0) {
      cause_ = event.cause;
    }
    if (stop) {
      on_stop(sig, sig);
    } else {
      send_notice(sig);  // SIGUSR1/SIGUSR2: preemption notices, the workers decide
    }
  }

  // What agent `child` reported of its node (or of one below it).
  void on_node_event(std::size_t child, const NodeEvent& event) {
    switch (event.kind) {
      case NodeEvent::Kind::kFailed:
        if (!reported_[child]) reported_[child] = event;
        if (phase_ == Phase::kRunning && !killed_) fail(child);
        break;
      case NodeEvent::Kind::kStopped:
      case NodeEvent::Kind::kSetupFailed:
        runner_.announce(event);
        // After this round's own cause, a node's stop (every task got Slurm's SIGTERM)
        // changes neither the cause nor what the other nodes are told.
        if (!has_own_cause()) {
          if (stop_signal_ == 0) cause_ = event;
          runner_.set_stop_cause(event);
        }
        on_stop(event.kind == NodeEvent::Kind::kStopped ? event.signal : SIGTERM, SIGTERM);
        break;
      case NodeEvent::Kind::kNotice:
        runner_.announce(event);
        send_notice(event.signal, one_node_agent(child) ? child : kNoChild);
        break;
    }
  }

  void on_exit(const RunnerEvent& event) {
    RankResult& rank = ranks_.at(event.child);
    rank.exited = true;
    rank.wait_status = event.wait_status;
    rank.max_rss_kb = event.max_rss_kb;
    rank.run_seconds = event.run_seconds;
    // A drained worker is done, not failed: its peers agreed to stop at the same step
    // and are saving the same checkpoint, so they must not be interrupted.
    const bool drained = drained_by_notice(rank);
    any_drained_ = any_drained_ || drained;
    const bool failed = !exited_with(event.wait_status, 0) && !drained;
    // --restart-scope rank: every end changes the membership; a lost worker replaced is no
    // exit of its rank (no exit timer, no failure).
    if (rank_scope() && !rank.agent) {
      publish({});  // lost or done; a replacement is a change of its own
      if (failed && phase_ == Phase::kRunning && !killed_ && replace(event.child)) return;
    }
    // A drained rank starts no exit timer: its peers are saving the same checkpoint.
    if (policy_.exit_timeout && !first_exit_ && !drained) {
      first_exit_ = event.child;
      exit_deadline_ = runner_.now() + *policy_.exit_timeout;
    }
    // Children that ddprun stopped itself are no root cause.
    if (failed && phase_ == Phase::kRunning && !killed_) fail(event.child);
  }

  RoundResult finish() {
    // A failed round whose stacks (and traces with them) were not taken.
    const Phase phase = outcome_phase();
    if ((first_failure_ || phase == Phase::kTimedOut) && stacks_when_.empty()) read_traces();
    RoundResult result;
    const bool all_ended_cleanly = std::all_of(ranks_.begin(), ranks_.end(), [&](auto& r) {
      return r.replaced_by || (r.exited && (exited_with(r.wait_status, 0) || drained_by_notice(r)));
    });
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      ranks_[i].stderr_tail = runner_.stderr_tail(i);
      result.ranks.push_back(std::move(ranks_[i]));
    }
    result.first_failure = first_failure_;
    if (first_failure_ && reported_[*first_failure_]) {
      result.first_failure_code = reported_[*first_failure_]->code;
    }
    // A stop after the round's own cause keeps that cause, unless the head named another.
    const bool cause_first = stopped_after_ && !cause_;
    result.stop_signal = stop_signal_;
    if (any_drained_ && all_ended_cleanly && !first_failure_) {
      result.outcome = Outcome::kPreempted;
    } else if (stop_signal_ != 0 && !cause_first) {
      result.outcome = Outcome::kStopped;
    } else if (first_failure_) {
      result.outcome = Outcome::kWorkerFailed;
    } else if (phase == Phase::kTimedOut) {
      result.outcome = Outcome::kTimedOut;
      result.first_exit = first_exit_;
      result.still_running = still_running_;
    } else if (phase == Phase::kStalled) {
      result.outcome = Outcome::kStalled;
      result.behind = behind_;
      result.behind_step = behind_step_;
      result.ahead_step = ahead_step_;
    }
    result.lost_head = lost_head_;
    result.drained = drain_sent_;
    result.cause = cause_;
    result.notice = notice_seen_;
    result.stacks_when = stacks_when_;
    result.spawn_seconds = spawn_seconds_;
    result.recoveries = recoveries_;
    result.not_replaced = not_replaced_;
    return result;
  }

  double seconds_since(RunnerClock::time_point start) const {
    return std::chrono::duration<double>(runner_.now() - start).count();
  }

  Runner& runner_;
  const RoundPolicy& policy_;
  const std::vector<ChildSpec>* specs_ = nullptr;
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
  bool killed_ = false;      // SIGKILL went out to every live child
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
  std::optional<std::size_t> first_failure_;
  std::optional<std::size_t> first_exit_;
  std::vector<std::size_t> still_running_;
  std::string stacks_when_;  // set when the stacks were taken
  double spawn_seconds_ = 0;
  // --stall-timeout: each worker's last progress, when any advanced last, the next check.
  std::vector<std::optional<long long>> steps_;
  RunnerClock::time_point last_advance_{};
  std::optional<RunnerClock::time_point> next_stall_check_;
  std::vector<std::size_t> behind_;
  long long behind_step_ = -1;
  long long ahead_step_ = -1;
  std::optional<RunnerClock::time_point> exit_deadline_;
  std::optional<RunnerClock::time_point> kill_deadline_;
  // After the grace with stacks: when the agents, left to send theirs, get SIGKILL.
  std::optional<RunnerClock::time_point> agent_kill_deadline_;
  std::optional<RunnerClock::time_point> drain_deadline_;
};

}  // namespace

bool is_stop_signal(int sig, const std::vector<int>& extra) {
  if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT) return true;
  return std::find(extra.begin(), extra.end(), sig) != extra.end() && !is_notice_signal(sig);
}

RoundResult run_round(Runner& runner, const std::vector<ChildSpec>& children,
                      const RoundPolicy& policy, int recoveries_left) {
  return Round(runner, policy, recoveries_left).run(children);
}

int exit_code_for(const RoundResult& result) {
  switch (result.outcome) {
    case Outcome::kSucceeded:
      return kExitOk;
    case Outcome::kStopped:
      return result.cause ? result.cause->code : 128 + result.stop_signal;
    case Outcome::kPreempted:
      return kExitPreempted;
    case Outcome::kTimedOut:
    case Outcome::kStalled:
      return kExitTimedOut;
    case Outcome::kWorkerFailed: {
      if (result.first_failure_code) return *result.first_failure_code;
      const int status = result.ranks.at(*result.first_failure).wait_status;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return 1;
    }
  }
  return 1;
}

namespace {

// The furthest step this node's workers reported in their progress files this round.
std::optional<long long> reported_step(const RoundResult& result) {
  std::optional<long long> best;
  for (const RankResult& rank : result.ranks) {
    if (rank.agent || rank.progress_file.empty()) continue;
    const auto step = parse_progress(read_file_head(rank.progress_file, 64));
    if (step && (!best || *step > *best)) best = step;
  }
  return best;
}

// Why this node stopped when the cause came from elsewhere (RoundResult::cause).
std::string format_stop_cause(const NodeEvent& cause) {
  const std::string node = "node " + std::to_string(cause.node);
  switch (cause.kind) {
    case NodeEvent::Kind::kFailed:
      return "ddprun: stopped this node's workers: " + node + " failed first (" + cause.what +
             "); exit " + std::to_string(cause.code) + "\n";
    case NodeEvent::Kind::kStopped:
      return "ddprun: " + node + " was " + cause.what + "; stopped every node, not restarting\n";
    case NodeEvent::Kind::kSetupFailed:
      return "ddprun: error: " + node + " could not start its workers: " + cause.what +
             "; stopped every node, not restarting\n";
    case NodeEvent::Kind::kNotice:
      break;
  }
  return "ddprun: stopped: " + node + ": " + cause.what + "\n";
}

// One of ddprun's messages as a report's sentence: without the "ddprun: " (and "error: ")
// at the start of each line, its lines joined by a space.
std::string plain_message(const std::string& message) {
  std::string text;
  std::size_t start = 0;
  while (start < message.size()) {
    std::size_t end = message.find('\n', start);
    if (end == std::string::npos) end = message.size();
    std::string_view line(message.data() + start, end - start);
    for (const std::string_view prefix : {"ddprun: ", "error: "}) {
      if (line.substr(0, prefix.size()) == prefix) line.remove_prefix(prefix.size());
    }
    if (!line.empty()) text += (text.empty() ? "" : " ") + std::string(line);
    start = end + 1;
  }
  return text;
}

// The job ends with the exception being handled (a round that could not be made or
// started): `observer` hears it as the round's decision, then it passes on. Call only
// inside a catch block.
[[noreturn]] void end_with_exception(const RoundObserver& observer, RoundDecision& decision) {
  int code = kExitLauncherError;
  std::string what = "an unknown error";
  try {
    throw;
  } catch (const Error& e) {
    code = e.exit_code();
    what = e.what();
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  decision.round_code = code;
  decision.exit_code = code;
  decision.restart = false;
  decision.why = "error: " + what;
  if (observer) observer(nullptr, decision);
  throw;
}

// The report of the round's first failure and the digest of every rank's errors.
std::string failure_lines(const RoundResult& result, bool colour) {
  std::vector<std::string> error_files;
  for (const RankResult& rank : result.ranks) {
    error_files.push_back(rank.error_file.empty() ? "" : read_file_head(rank.error_file));
  }
  const RankResult& failed = result.ranks.at(*result.first_failure);
  return format_failure_report(failed, error_files.at(*result.first_failure), colour) +
         format_error_digest(result, error_files);
}

}  // namespace

int run_job(Runner& runner, const JobSettings& settings,
            const std::function<RoundSetup(int round, const RoundResult* previous)>& make_round,
            std::ostream& messages, const RoundObserver& observer) {
  std::string previous_failure;  // how the last restarted round failed
  // --restart-scope rank: replacements so far; they count against --max-restarts with the
  // full restarts (one a round).
  int recoveries = 0;
  std::optional<long long> best_step;
  std::optional<RoundResult> previous;
  const auto seconds_since = [&](RunnerClock::time_point start) {
    return std::chrono::duration<double>(runner.now() - start).count();
  };
  for (int round = 0;; ++round) {
    RoundDecision decision;
    decision.round = round;
    const auto prepare_start = runner.now();
    RoundSetup setup;
    try {
      setup = make_round(round, previous ? &*previous : nullptr);
    } catch (...) {
      end_with_exception(observer, decision);
    }
    decision.prepare_seconds = seconds_since(prepare_start);
    // What the observer hears of this round's decision; returns the job's code when it ends.
    const auto decide = [&](const RoundResult* result, std::optional<int> code, std::string why) {
      decision.restart = !code;
      decision.exit_code = code;
      decision.why = std::move(why);
      if (observer) observer(result, decision);
      return code.value_or(0);
    };
    if (setup.end_code) {
      messages << setup.end_message;
      decision.round_code = *setup.end_code;
      return decide(nullptr, *setup.end_code, plain_message(setup.end_message));
    }
    if (settings.summaries || !setup.notice.empty()) messages << setup.notice;
    if (settings.summaries) messages << setup.summary;
    const auto run_start = runner.now();
    try {
      const int left = settings.agent ? 0 : std::max(0, settings.max_restarts - round - recoveries);
      previous.emplace(run_round(runner, setup.children, settings.round, left));
    } catch (...) {
      end_with_exception(observer, decision);
    }
    const RoundResult& result = *previous;
    recoveries += result.recoveries;
    const int restarts_used = round + recoveries;
    decision.run_seconds = seconds_since(run_start);
    decision.round_code = exit_code_for(result);
    if (settings.tables) messages << format_rank_table(result);
    messages << format_stack_digest(
        result, result.stacks_when,
        setup.log_dir.empty() ? "" : setup.log_dir + "/rank_<N>.stacks");
    if (result.outcome == Outcome::kWorkerFailed || result.outcome == Outcome::kTimedOut ||
        result.outcome == Outcome::kStalled) {
      const RankResult* failed =
          result.first_failure ? &result.ranks.at(*result.first_failure) : nullptr;
      const std::string first_error =
          failed && !failed->error_file.empty() ? read_file_head(failed->error_file) : "";
      if (result.stacks_when.empty()) messages << format_collectives(result);
      if (result.outcome == Outcome::kWorkerFailed) {
        messages << failure_lines(result, settings.colour);
      } else if (result.outcome == Outcome::kStalled) {
        messages << format_stall_report(result, *settings.round.stall_timeout, settings.colour);
      } else {
        messages << format_exit_timeout_report(result, *settings.round.exit_timeout,
                                               settings.colour);
      }
      const std::string failure = failure_signature(result, first_error);
      const auto step = reported_step(result);
      const bool progressed = step && (!best_step || *step > *best_step);
      if (progressed) best_step = step;
      if (result.notice != 0 && !settings.agent) {
        messages << "ddprun: not restarting: a preemption notice (" << signal_name(result.notice)
                 << ") came during the round; exit " << kExitPreempted
                 << ": run the same command again to resume from the last checkpoint\n";
        return decide(&result, kExitPreempted,
                      "not restarting: a preemption notice (" + signal_name(result.notice) +
                          ") came during the round");
      }
      if (!result.not_replaced.empty()) {
        messages << "ddprun: not replacing the lost rank alone: " << result.not_replaced
                 << "; a full restart decides\n";
      }
      std::string not_restarting;  // why this failed round is the job's last
      if (result.stop_signal != 0) {
        // Stopped after the failure (Slurm 26.05 sends SIGTERM to every task once one
        // failed): the failure stays the root cause and gives the exit code.
        not_restarting = result.lost_head
                             ? "lost the connection to the head ddprun after the failure"
                             : "ddprun was stopped by " + signal_name(result.stop_signal) +
                                   " after the round failed; exit " +
                                   std::to_string(decision.round_code) + ", the failure's";
        messages << "ddprun: not restarting: " << not_restarting << "\n";
      } else if (settings.agent) {
        not_restarting = "the head ddprun decides on restarts";
      } else if (restarts_used >= settings.max_restarts) {
        not_restarting =
            settings.max_restarts == 0
                ? "no restart asked for (--max-restarts 0)"
                : "no restart left (--max-restarts " + std::to_string(settings.max_restarts) + ")";
      } else if (!restart_covers(settings.restart, result, not_restarting)) {
        messages << "ddprun: not restarting: " << not_restarting << "\n";
      } else if (!settings.restart.allow_repeats && failure == previous_failure && !progressed) {
        not_restarting = "round " + std::to_string(round) + " failed as the one before it did (" +
                         failure +
                         ") and reached no newer step (DDPRUN_PROGRESS_FILE); "
                         "--restart-repeated restarts anyway";
        messages << "ddprun: not restarting: " << not_restarting << "\n";
      } else {
        previous_failure = failure;
        messages << "ddprun: restarting all workers (restart " << restarts_used + 1 << " of "
                 << settings.max_restarts << ")\n";
        decide(&result, std::nullopt,
               "restart " + std::to_string(restarts_used + 1) + " of " +
                   std::to_string(settings.max_restarts));
        continue;
      }
      if (!setup.log_dir.empty()) messages << "ddprun: logs are in " << setup.log_dir << "\n";
      // An agent's last word to its head: which node's rank failed first (the head gives
      // that node's place to a spare).
      if (settings.agent && result.outcome == Outcome::kWorkerFailed) {
        if (const auto node = first_failed_node(result)) messages << first_failed_node_line(*node);
      }
      return decide(&result, decision.round_code, "not restarting: " + not_restarting);
    } else if (result.outcome == Outcome::kPreempted) {
      messages << "ddprun: workers stopped on a preemption notice"
               << (result.drained ? " (" + signal_name(settings.round.drain_signal) +
                                        ", sent --drain-before the job's end)"
                   : result.stop_signal != 0 ? " (" + signal_name(result.stop_signal) + ")"
                                             : "")
               << "; exit " << kExitPreempted
               << ": run the same command again to resume from their last checkpoint\n";
      return decide(&result, decision.round_code,
                    "not restarting: the workers stopped on a preemption notice; run the same "
                    "command again to resume from their last checkpoint");
    } else if (result.lost_head) {
      if (result.first_failure) messages << failure_lines(result, settings.colour);
      messages << "ddprun: error: lost the connection to the head ddprun; stopped this node's "
                  "workers\n";
      return decide(&result, decision.round_code,
                    "not restarting: lost the connection to the head ddprun");
    } else if (result.outcome == Outcome::kStopped) {
      // This node's failure before its head named another node's is still worth its
      // report; the head's cause decides the rest.
      if (result.first_failure) messages << failure_lines(result, settings.colour);
      if (result.cause) {
        const std::string said = format_stop_cause(*result.cause);
        messages << said;
        return decide(&result, decision.round_code, "not restarting: " + plain_message(said));
      }
      messages << "ddprun: stopped by " << signal_name(result.stop_signal) << "\n";
      return decide(&result, decision.round_code,
                    "not restarting: ddprun was stopped by " + signal_name(result.stop_signal) +
                        " (a stopped job is never restarted)");
    }
    return decide(&result, decision.round_code, "every worker exited 0");
  }
}

}  // namespace ddprun
