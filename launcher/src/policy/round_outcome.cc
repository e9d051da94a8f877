// How a round ended: drained, stopped, failed, timed out or stalled, and the exit code
// that gives (round.h has the state machine).
#include <sys/wait.h>

#include <algorithm>

#include "ddprun/contract/errors.h"
#include "policy/round.h"

namespace ddprun {

bool Round::drained_by_notice(const RankResult& child) const {
  const int status = child.wait_status;
  if (exited_with(status, kExitPreempted)) {
    return child.agent || !notice_signals_.empty() || phase_ == Phase::kStopping;
  }
  if (notice_signals_.empty()) return false;
  const auto noticed = [&](int sig) {
    return std::find(notice_signals_.begin(), notice_signals_.end(), sig) != notice_signals_.end();
  };
  if (WIFSIGNALED(status)) return noticed(WTERMSIG(status));
  return child.agent && WIFEXITED(status) && WEXITSTATUS(status) > 128 &&
         noticed(WEXITSTATUS(status) - 128);
}

Outcome Round::outcome(Phase phase, bool all_ended_cleanly) const {
  // A drain that every rank finished cleanly is a preemption, whatever came meanwhile.
  if (any_drained_ && all_ended_cleanly && !first_failure_) return Outcome::kPreempted;
  // A stop after the round's own cause keeps that cause, unless the head named another.
  const bool cause_first = stopped_after_ && !cause_;
  if (stop_signal_ != 0 && !cause_first) return Outcome::kStopped;
  if (first_failure_) return Outcome::kWorkerFailed;
  switch (phase) {
    case Phase::kTimedOut:
      return Outcome::kTimedOut;
    case Phase::kStalled:
      return Outcome::kStalled;
    case Phase::kRunning:
    case Phase::kFailing:
    case Phase::kStopping:
      break;
  }
  return Outcome::kSucceeded;
}

RoundResult Round::finish() {
  // A failed round whose stacks (and traces with them) were not taken.
  const Phase phase = outcome_phase();
  if ((first_failure_ || phase == Phase::kTimedOut) && stacks_when_.empty()) read_traces();
  RoundResult result;
  bool all_ended_cleanly = true;
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    const RankResult& r = ranks_[i];
    // A lost agent that a spare stands for, or that was handed up (the head moved it).
    all_ended_cleanly = all_ended_cleanly &&
                        (r.replaced_by || handed_up_.count(i) > 0 ||
                         (r.exited && (exited_with(r.wait_status, 0) || drained_by_notice(r))));
  }
  const std::vector<std::optional<double>> first_steps = runner_.first_steps();
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    ranks_[i].stderr_tail = runner_.stderr_tail(i);
    if (ranks_[i].started && !ranks_[i].agent) {
      Runner::RankFiles files = runner_.rank_files(i);
      ranks_[i].error_text = std::move(files.error_text);
      ranks_[i].last_step = files.last_step;
    }
    if (i < first_steps.size()) ranks_[i].first_step_seconds = first_steps[i];
    result.ranks.push_back(std::move(ranks_[i]));
  }
  result.first_failure = first_failure_;
  if (first_failure_ && reported_[*first_failure_]) {
    result.first_failure_code = reported_[*first_failure_]->code;
  }
  result.stop_signal = stop_signal_;
  result.outcome = outcome(phase, all_ended_cleanly);
  if (result.outcome == Outcome::kTimedOut) {
    result.first_exit = first_exit_;
    result.still_running = still_running_;
  } else if (result.outcome == Outcome::kStalled) {
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
  result.recoveries = recoveries_ + remote_recoveries();
  result.not_replaced = not_replaced_;
  return result;
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

}  // namespace ddprun
