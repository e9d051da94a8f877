#pragma once
// Which failed rounds are worth a restart (docs/fault-tolerance.md): by default any
// failure, up to --max-restarts, except a round that failed the same way as the round
// before it and made no progress (a deterministic crash would only burn the allocation).
// --restart-on narrows it to signals and lost nodes, or to listed exit codes. Pure.

#include <optional>
#include <set>
#include <string>

#include "plan/restart_rule.h"
#include "report/round_result.h"

namespace ddprun {

// How a failed round failed, to compare with the round before: who failed first, how,
// and its error line (error_digest_line). Empty for rounds that did not fail.
std::string failure_signature(const RoundResult& result, const std::string& error_file_text);

// Whether `rule` allows restarting after `result` (a failed or timed-out round); when not,
// `why` says so in a few words.
bool restart_covers(const RestartRule& rule, const RoundResult& result, std::string& why);

// What decides whether a failed round (a worker's failure, the exit timeout, a stall)
// restarts the job, besides the round itself.
struct RestartQuestion {
  RestartRule rule;
  int max_restarts = 0;
  bool agent = false;        // one round of the head's: the head decides
  int round = 0;             // the round that failed
  int restarts_used = 0;     // restarts and replacements so far
  int round_code = 0;        // exit_code_for(result)
  std::string failure;       // failure_signature of this round
  std::string last_failure;  // that of the round restarted last; empty: none
  bool progressed = false;   // a worker reported a newer step than any round before
};

struct RestartDecision {
  enum class Answer { kRestart, kEnd, kEndPreempted } answer = Answer::kEnd;
  // The decision in a few words: "restart 2 of 3", or why the job ends.
  std::string why;
  // Whether the user is told the why as "ddprun: not restarting: ..." (not when the rank
  // table and the summary already say it: an agent's round, no restart left).
  bool tell = false;
};

// The decision after a failed round, in this order: a preemption notice during the round
// ends the job for a rerun (75); a stop after the failure keeps the failure's code; an
// agent leaves it to its head; no restart left; --restart-on does not cover the failure;
// the round failed as the one restarted last did and reached no newer step (unless
// --restart-repeated); otherwise restart. Pure.
RestartDecision decide_restart(const RoundResult& result, const RestartQuestion& question);

// The node whose rank failed first in `result`: the failed worker's node; when an agent
// failed first, the node it named in its last first_failed_node_line (a node deeper in the
// ssh tree), else the agent's own node. nullopt when no node can be blamed (no failure, or
// srun/mpirun standing for every node at once).
std::optional<int> first_failed_node(const RoundResult& result);
// What an agent prints last after a failed round, for the head: "ddprun: node N failed
// first".
std::string first_failed_node_line(int node_rank);

// The step a worker reported in its DDPRUN_PROGRESS_FILE: a decimal number (trailing
// whitespace allowed); nullopt when the text is anything else.
std::optional<long long> parse_progress(const std::string& text);

}  // namespace ddprun
