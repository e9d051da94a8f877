#pragma once
// What a round's end means for the job (run_job, supervision.h), inside policy/ only: what is
// printed after the round (the rank table, stacks, the failure report) and whether the job
// restarts or ends, with which code and why, from what the round read (RankResult).

#include <optional>
#include <ostream>
#include <string>

#include "policy/supervision.h"

namespace ddprun {

// What run_job keeps from one failed round to the next.
struct FailureHistory {
  std::string previous_failure;        // how the last restarted round failed
  std::optional<long long> best_step;  // the furthest step any round reported
};

// run_job's decision after a round: no exit code means restart.
struct Verdict {
  std::optional<int> exit_code;
  std::string why;  // the decision's words in --report
};

// Prints what the user reads after `result` to `messages` and decides. `round_code` is
// exit_code_for(result); `restarts_used` counts this round's restarts and replacements so
// far. Updates `history` when the failed round is restarted or reached a newer step.
Verdict judge_round(const RoundResult& result, const JobSettings& settings, const RoundSetup& setup,
                    int round, int restarts_used, int round_code, FailureHistory& history,
                    std::ostream& messages);

// One of ddprun's messages as a report's sentence: without the "ddprun: " (and "error: ")
// at the start of each line, its lines joined by a space.
std::string plain_message(const std::string& message);

}  // namespace ddprun
