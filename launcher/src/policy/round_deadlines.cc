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
  kill_deadline_.reset();
  agent_kill_deadline_.reset();
  killed_ = true;
}

void Round::kill_live_workers() {
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    if (ranks_[i].started && !ranks_[i].exited && !ranks_[i].agent) runner_.signal(i, SIGKILL);
  }
}

void Round::stop_live(int sig, std::size_t except) {
  if (killed_) return;  // nothing left to ask: SIGKILL went out
  signal_live(sig, except);
  if (!kill_deadline_) kill_deadline_ = runner_.now() + policy_.shutdown_grace;
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
