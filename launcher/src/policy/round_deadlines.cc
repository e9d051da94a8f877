// The live children, the kill escalation (SIGTERM, the grace, stacks, SIGKILL, agents
// last) and the round's loop with its deadlines: the exit timeout, the walltime drain, the
// stall checks, the output drained after the last exit (round.h has the state machine).
#include <signal.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/contract/errors.h"
#include "policy/round.h"

namespace ddprun {

std::size_t Round::live() const {
  return static_cast<std::size_t>(
      std::count_if(ranks_.begin(), ranks_.end(), [](auto& r) { return r.started && !r.exited; }));
}

std::size_t Round::live_agents() const {
  return static_cast<std::size_t>(std::count_if(
      ranks_.begin(), ranks_.end(), [](auto& r) { return r.agent && r.started && !r.exited; }));
}

void Round::signal_live(int sig, std::size_t except) {
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    if (i != except && ranks_[i].started && !ranks_[i].exited) runner_.signal(i, sig);
  }
}

void Round::kill_live() {
  signal_live(SIGKILL);
  timers_.escalate.reset();
  escalation_ = Escalation::kKilled;
}

void Round::kill_live_workers() {
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    if (ranks_[i].started && !ranks_[i].exited && !ranks_[i].agent) runner_.signal(i, SIGKILL);
  }
}

void Round::stop_live(int sig, std::size_t except) {
  if (escalation_ == Escalation::kKilled) return;  // nothing left to ask: SIGKILL went out
  signal_live(sig, except);
  if (escalation_ == Escalation::kNone) {
    escalation_ = Escalation::kAsked;
    timers_.escalate = runner_.now() + policy_.shutdown_grace;
  }
}

void Round::escalate(RunnerClock::time_point now) {
  switch (escalation_) {
    case Escalation::kAsked:
      capture_live_stacks("before SIGKILL, after the " + format_seconds(policy_.shutdown_grace) +
                          " grace");
      if (policy_.capture_stacks && live_agents() > 0) {
        kill_live_workers();
        escalation_ = Escalation::kAgentsLast;
        timers_.escalate = now + policy_.agent_stack_allowance;
      } else {
        kill_live();
      }
      return;
    case Escalation::kAgentsLast:
      kill_live();
      return;
    case Escalation::kNone:
    case Escalation::kKilled:
      timers_.escalate.reset();
      return;
  }
}

void Round::capture_live_stacks(const std::string& when) {
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

void Round::read_traces() {
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    if (ranks_[i].started && !ranks_[i].agent) ranks_[i].trace = runner_.trace(i);
  }
}

void Round::wait_for_all() {
  for (;;) {
    const bool none_live = live() == 0;
    if (none_live && !timers_.drain) timers_.drain = runner_.now() + policy_.drain_after_exit;
    if (none_live && !runner_.output_open()) return;
    const auto now = runner_.now();
    if (timers_.escalate && now >= *timers_.escalate) {
      escalate(now);
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
    if (timers_.exit && now >= *timers_.exit) {
      timers_.exit.reset();
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
    if (timers_.drain && now >= *timers_.drain) {
      runner_.close_output();
      continue;
    }
    const bool watch_stalls = policy_.stall_timeout && phase_ == Phase::kRunning && !none_live;
    if (watch_stalls && !timers_.stall_check) {
      last_advance_ = now;
      timers_.stall_check = now + policy_.stall_check_every;
    }
    if (watch_stalls && now >= *timers_.stall_check) {
      check_stall(now);
      timers_.stall_check = now + policy_.stall_check_every;
      continue;
    }
    // The next of the round's deadlines; the stall checks only while they watch.
    std::optional<RunnerClock::time_point> deadline;
    const auto drain_at = drain_sent_ ? std::nullopt : policy_.drain_at;
    const auto stall_check = watch_stalls ? timers_.stall_check : std::nullopt;
    for (const auto& at : {timers_.escalate, timers_.exit, timers_.drain, stall_check, drain_at}) {
      if (at && (!deadline || *at < *deadline)) deadline = at;
    }
    handle(runner_.wait(deadline));
  }
}

void Round::check_stall(RunnerClock::time_point now) {
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

}  // namespace ddprun
