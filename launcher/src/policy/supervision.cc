#include "policy/supervision.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "ddprun/contract/errors.h"
#include "policy/round_verdict.h"

namespace ddprun {
namespace {

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

}  // namespace

int run_job(Runner& runner, const JobSettings& settings,
            const std::function<RoundSetup(int round, const RoundResult* previous)>& make_round,
            std::ostream& messages, const RoundObserver& observer) {
  FailureHistory history;
  // --restart-scope rank: replacements so far; they count against --max-restarts with the
  // full restarts (one a round).
  int recoveries = 0;
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
      // An agent's round: its replacements count against what its head has left, which
      // ends the round when a node goes beyond it (Round::on_membership).
      const int left =
          settings.agent
              ? (settings.round.restart_scope == RestartScope::kRank ? settings.max_restarts : 0)
              : std::max(0, settings.max_restarts - round - recoveries);
      previous.emplace(run_round(runner, setup.children, settings.round, left, setup.spares));
    } catch (...) {
      end_with_exception(observer, decision);
    }
    const RoundResult& result = *previous;
    recoveries += result.recoveries;
    const int restarts_used = round + recoveries;
    decision.run_seconds = seconds_since(run_start);
    decision.round_code = exit_code_for(result);
    Verdict verdict = judge_round(result, settings, setup, round, restarts_used,
                                  decision.round_code, history, messages);
    const int code = decide(&result, verdict.exit_code, std::move(verdict.why));
    if (verdict.exit_code) return code;
  }
}

}  // namespace ddprun
