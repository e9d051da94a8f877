#include "job.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>

#include "ddprun/common/files.h"
#include "ddprun/common/signal_name.h"
#include "ddprun/contract/errors.h"
#include "error_digest.h"
#include "report.h"

namespace ddprun {
namespace {

bool exited_with(int status, int code) {
  return WIFEXITED(status) && WEXITSTATUS(status) == code;
}

class Round {
 public:
  Round(Runner& runner, const RoundPolicy& policy) : runner_(runner), policy_(policy) {}

  RoundResult run(const std::vector<ChildSpec>& children) {
    ranks_.reserve(children.size());
    try {
      for (const ChildSpec& spec : children) {
        RankResult& rank = ranks_.emplace_back();
        rank.agent = spec.agent;
        rank.node_rank = spec.node_rank;
        rank.rank = spec.rank;
        rank.local_rank = spec.local_rank;
        rank.host = spec.host;
        rank.error_file = spec.error_file;
        rank.progress_file = spec.progress_file;
        rank.pid = runner_.start(spec);
        rank.started = true;
      }
    } catch (...) {
      begin_stop(SIGKILL);
      wait_for_all();
      runner_.end_round();
      throw;
    }
    wait_for_all();
    RoundResult result = finish();
    runner_.end_round();
    return result;
  }

 private:
  std::size_t live() const {
    return static_cast<std::size_t>(std::count_if(ranks_.begin(), ranks_.end(),
                                                  [](auto& r) { return r.started && !r.exited; }));
  }

  void signal_live(int sig) {
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].started && !ranks_[i].exited) runner_.signal(i, sig);
    }
  }

  // Sends `sig` to every live child; unless it is SIGKILL, SIGKILL follows after the grace.
  void begin_stop(int sig) {
    signal_live(sig);
    if (sig == SIGKILL) {
      kill_deadline_.reset();
      killed_ = true;
    } else if (!kill_deadline_ && !killed_) {
      kill_deadline_ = runner_.now() + policy_.shutdown_grace;
    }
  }

  bool is_stop_signal(int sig) const {
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT) return true;
    const auto& extra = policy_.extra_stop_signals;
    return std::find(extra.begin(), extra.end(), sig) != extra.end() && sig != SIGUSR1 &&
           sig != SIGUSR2;
  }

  bool stopping() const { return first_failure_ || stop_signal_ != 0 || killed_ || timed_out_; }

  void wait_for_all() {
    for (;;) {
      const bool none_live = live() == 0;
      if (none_live && !drain_deadline_) drain_deadline_ = runner_.now() + policy_.drain_after_exit;
      if (none_live && !runner_.output_open()) return;
      const auto now = runner_.now();
      if (kill_deadline_ && now >= *kill_deadline_) {
        begin_stop(SIGKILL);
        continue;
      }
      if (policy_.drain_at && !drained_ && now >= *policy_.drain_at) {
        drained_ = true;
        if (!none_live && !stopping()) signal_live(policy_.drain_signal);
        continue;
      }
      if (exit_deadline_ && now >= *exit_deadline_) {
        exit_deadline_.reset();
        if (!none_live && !stopping()) {
          timed_out_ = true;
          for (std::size_t i = 0; i < ranks_.size(); ++i) {
            if (ranks_[i].started && !ranks_[i].exited) still_running_.push_back(i);
          }
          begin_stop(SIGTERM);
        }
        continue;
      }
      if (drain_deadline_ && now >= *drain_deadline_) {
        runner_.close_output();
        continue;
      }
      std::optional<RunnerClock::time_point> deadline = kill_deadline_;
      const auto drain_at = drained_ ? std::nullopt : policy_.drain_at;
      for (const auto& other : {drain_deadline_, exit_deadline_, drain_at}) {
        if (other && (!deadline || *other < *deadline)) deadline = other;
      }
      handle(runner_.wait(deadline));
    }
  }

  void handle(const RunnerEvent& event) {
    switch (event.kind) {
      case RunnerEvent::Kind::kExited:
        on_exit(event);
        break;
      case RunnerEvent::Kind::kSignal:
        on_signal(event.signal_number);
        break;
      case RunnerEvent::Kind::kHeadLost:
        // This node's workers must not outlive the head.
        lost_head_ = true;
        if (stop_signal_ == 0 && !first_failure_) {
          stop_signal_ = SIGHUP;
          begin_stop(SIGTERM);
        }
        break;
      case RunnerEvent::Kind::kDeadline:
        break;
    }
  }

  void on_signal(int sig) {
    if (!is_stop_signal(sig)) {
      signal_live(sig);  // SIGUSR1/SIGUSR2: preemption notices, the workers decide
      noticed_ = true;
    } else if (stop_signal_ != 0 && sig == SIGINT) {
      begin_stop(SIGKILL);  // a second Ctrl-C: no more grace
    } else if (drained_ || preempted_ || noticed_) {
      // The workers are already stopping at an agreed step to write their checkpoint
      // (the walltime notice went out from here or, to a node's agent, from the head; or a
      // peer exited 75): a stop signal now (srun's --kill-on-bad-exit after another node's
      // 75, the scheduler's own SIGTERM) must not kill them mid-write. They get the grace,
      // then SIGKILL.
      if (stop_signal_ == 0) stop_signal_ = sig;
      if (!kill_deadline_ && !killed_) kill_deadline_ = runner_.now() + policy_.shutdown_grace;
    } else {
      if (stop_signal_ == 0) stop_signal_ = sig;
      begin_stop(sig);
    }
  }

  void on_exit(const RunnerEvent& event) {
    RankResult& rank = ranks_.at(event.child);
    rank.exited = true;
    rank.wait_status = event.wait_status;
    rank.max_rss_kb = event.max_rss_kb;
    rank.run_seconds = event.run_seconds;
    // A preempted worker is done, not failed: its peers agreed to stop at the same step
    // and are saving the same checkpoint, so they must not be interrupted.
    // A worker the walltime notice ended by its default action was drained, not failed.
    const bool preempted = exited_with(event.wait_status, kExitPreempted) ||
                           (drained_ && WIFSIGNALED(event.wait_status) &&
                            WTERMSIG(event.wait_status) == policy_.drain_signal);
    preempted_ = preempted_ || preempted;
    const bool failed = !exited_with(event.wait_status, 0) && !preempted;
    if (policy_.exit_timeout && !first_exit_) {
      first_exit_ = event.child;
      exit_deadline_ = runner_.now() + *policy_.exit_timeout;
    }
    // Children ddprun killed itself (a failed start) are no root cause.
    if (failed && !stopping()) {
      first_failure_ = event.child;
      begin_stop(SIGTERM);
    }
  }

  RoundResult finish() {
    RoundResult result;
    const bool all_ended_cleanly = std::all_of(ranks_.begin(), ranks_.end(), [&](auto& r) {
      return r.exited &&
             (exited_with(r.wait_status, 0) || exited_with(r.wait_status, kExitPreempted) ||
              (drained_ && WIFSIGNALED(r.wait_status) &&
               WTERMSIG(r.wait_status) == policy_.drain_signal));
    });
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      ranks_[i].stderr_tail = runner_.stderr_tail(i);
      result.ranks.push_back(std::move(ranks_[i]));
    }
    if (first_failure_) {
      result.outcome = Outcome::kWorkerFailed;
      result.first_failure = first_failure_;
    } else if (timed_out_) {
      result.outcome = Outcome::kTimedOut;
      result.first_exit = first_exit_;
      result.still_running = still_running_;
    } else if (preempted_ && all_ended_cleanly) {
      result.outcome = Outcome::kPreempted;
      result.stop_signal = stop_signal_;
    } else if (stop_signal_ != 0) {
      result.outcome = Outcome::kStopped;
      result.stop_signal = stop_signal_;
    }
    result.lost_head = lost_head_;
    result.drained = drained_;
    return result;
  }

  Runner& runner_;
  const RoundPolicy& policy_;
  std::vector<RankResult> ranks_;
  bool lost_head_ = false;
  bool preempted_ = false;
  bool noticed_ = false;  // a preemption notice was forwarded to the workers
  bool killed_ = false;
  bool timed_out_ = false;
  bool drained_ = false;
  int stop_signal_ = 0;
  std::optional<std::size_t> first_exit_;
  std::vector<std::size_t> still_running_;
  std::optional<RunnerClock::time_point> exit_deadline_;
  std::optional<std::size_t> first_failure_;
  std::optional<RunnerClock::time_point> kill_deadline_;
  std::optional<RunnerClock::time_point> drain_deadline_;
};

}  // namespace

RoundResult run_round(Runner& runner, const std::vector<ChildSpec>& children,
                      const RoundPolicy& policy) {
  return Round(runner, policy).run(children);
}

int exit_code_for(const RoundResult& result) {
  switch (result.outcome) {
    case Outcome::kSucceeded:
      return kExitOk;
    case Outcome::kStopped:
      return 128 + result.stop_signal;
    case Outcome::kPreempted:
      return kExitPreempted;
    case Outcome::kTimedOut:
      return kExitTimedOut;
    case Outcome::kWorkerFailed: {
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

}  // namespace

int run_job(Runner& runner, const JobSettings& settings,
            const std::function<RoundSetup(int round, const RoundResult* previous)>& make_round,
            std::ostream& messages) {
  std::string previous_failure;  // how the last restarted round failed
  std::optional<long long> best_step;
  std::optional<RoundResult> previous;
  for (int round = 0;; ++round) {
    const RoundSetup setup = make_round(round, previous ? &*previous : nullptr);
    if (settings.summaries || !setup.notice.empty()) messages << setup.notice;
    if (settings.summaries) messages << setup.summary;
    const RoundResult& result = previous.emplace(run_round(runner, setup.children, settings.round));
    if (settings.tables) messages << format_rank_table(result);
    if (result.outcome == Outcome::kWorkerFailed || result.outcome == Outcome::kTimedOut) {
      std::vector<std::string> error_files;
      for (const RankResult& rank : result.ranks) {
        error_files.push_back(rank.error_file.empty() ? "" : read_file_head(rank.error_file));
      }
      const std::string first_error =
          result.first_failure ? error_files.at(*result.first_failure) : std::string();
      if (result.outcome == Outcome::kWorkerFailed) {
        const RankResult& failed = result.ranks.at(*result.first_failure);
        messages << format_failure_report(failed, first_error, settings.colour);
        messages << format_error_digest(result, error_files);
      } else {
        messages << format_exit_timeout_report(result, *settings.round.exit_timeout,
                                               settings.colour);
      }
      const std::string failure = failure_signature(result, first_error);
      const auto step = reported_step(result);
      const bool progressed = step && (!best_step || *step > *best_step);
      if (progressed) best_step = step;
      if (round < settings.max_restarts && !settings.agent) {
        std::string why;
        if (!restart_covers(settings.restart, result, why)) {
          messages << "ddprun: not restarting: " << why << "\n";
        } else if (!settings.restart.allow_repeats && failure == previous_failure && !progressed) {
          messages << "ddprun: not restarting: round " << round
                   << " failed as the one before it did (" << failure
                   << ") and reached no newer step (DDPRUN_PROGRESS_FILE); --restart-repeated "
                      "restarts anyway\n";
        } else {
          previous_failure = failure;
          messages << "ddprun: restarting all workers (restart " << round + 1 << " of "
                   << settings.max_restarts << ")\n";
          continue;
        }
      }
      if (!setup.log_dir.empty()) messages << "ddprun: logs are in " << setup.log_dir << "\n";
    } else if (result.outcome == Outcome::kPreempted) {
      messages << "ddprun: workers stopped on a preemption notice"
               << (result.drained ? " (" + signal_name(settings.round.drain_signal) +
                                        ", sent --drain-before the job's end)"
                   : result.stop_signal != 0 ? " (" + signal_name(result.stop_signal) + ")"
                                             : "")
               << "; exit " << kExitPreempted
               << ": run the same command again to resume from their last checkpoint\n";
    } else if (result.lost_head) {
      messages << "ddprun: error: lost the connection to the head ddprun; stopped this node's "
                  "workers\n";
    } else if (result.outcome == Outcome::kStopped) {
      messages << "ddprun: stopped by " << signal_name(result.stop_signal) << "\n";
    }
    return exit_code_for(result);
  }
}

}  // namespace ddprun
