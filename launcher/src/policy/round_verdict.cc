#include "policy/round_verdict.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/common/signal_name.h"
#include "ddprun/contract/errors.h"
#include "report/error_digest.h"
#include "report/labels.h"
#include "report/report.h"
#include "report/stacks.h"

namespace ddprun {
namespace {

// The furthest step this node's workers reported in their progress files this round.
std::optional<long long> reported_step(const RoundResult& result) {
  std::optional<long long> best;
  for (const RankResult& rank : result.ranks) {
    if (!rank.agent && rank.last_step && (!best || *rank.last_step > *best)) best = rank.last_step;
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
    case NodeEvent::Kind::kLost:
      break;
  }
  return "ddprun: stopped: " + node + ": " + cause.what + "\n";
}

// The report of the round's first failure and the digest of every rank's errors.
std::string failure_lines(const RoundResult& result, bool colour) {
  std::vector<std::string> error_files;
  for (const RankResult& rank : result.ranks) {
    error_files.push_back(rank.error_text);
  }
  const RankResult& failed = result.ranks.at(*result.first_failure);
  return format_failure_report(failed, error_files.at(*result.first_failure), colour) +
         format_error_digest(result, error_files);
}

}  // namespace

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

Verdict judge_round(const RoundResult& result, const JobSettings& settings, const RoundSetup& setup,
                    int round, int restarts_used, int round_code, FailureHistory& history,
                    std::ostream& messages) {
  if (settings.tables) messages << format_rank_table(result);
  messages << format_stack_digest(result, result.stacks_when,
                                  setup.log_dir.empty() ? "" : setup.log_dir + "/rank_<N>.stacks");
  if (result.outcome == Outcome::kWorkerFailed || result.outcome == Outcome::kTimedOut ||
      result.outcome == Outcome::kStalled) {
    const std::string first_error =
        result.first_failure ? result.ranks.at(*result.first_failure).error_text : "";
    if (result.stacks_when.empty()) messages << format_collectives(result);
    if (result.outcome == Outcome::kWorkerFailed) {
      messages << failure_lines(result, settings.colour);
    } else if (result.outcome == Outcome::kStalled) {
      messages << format_stall_report(result, *settings.round.stall_timeout, settings.colour);
    } else {
      messages << format_exit_timeout_report(result, *settings.round.exit_timeout, settings.colour);
    }
    const std::string failure = failure_signature(result, first_error);
    const auto step = reported_step(result);
    const bool progressed = step && (!history.best_step || *step > *history.best_step);
    if (progressed) history.best_step = step;
    if (!result.not_replaced.empty() && (result.notice == 0 || settings.agent)) {
      messages << "ddprun: not replacing the lost rank alone: " << result.not_replaced
               << "; a full restart decides\n";
    }
    RestartQuestion question;
    question.rule = settings.restart;
    question.max_restarts = settings.max_restarts;
    question.agent = settings.agent;
    question.round = round;
    question.restarts_used = restarts_used;
    question.round_code = round_code;
    question.failure = failure;
    question.last_failure = history.previous_failure;
    question.progressed = progressed;
    const RestartDecision decision = decide_restart(result, question);
    switch (decision.answer) {
      case RestartDecision::Answer::kEndPreempted:
        messages << "ddprun: not restarting: " << decision.why << "; exit " << kExitPreempted
                 << ": run the same command again to resume from the last checkpoint\n";
        return Verdict{kExitPreempted, "not restarting: " + decision.why};
      case RestartDecision::Answer::kRestart:
        history.previous_failure = failure;
        messages << "ddprun: restarting all workers (" << decision.why << ")\n";
        return Verdict{std::nullopt, decision.why};
      case RestartDecision::Answer::kEnd:
        if (decision.tell) messages << "ddprun: not restarting: " << decision.why << "\n";
        break;
    }
    const std::string& not_restarting = decision.why;
    if (!setup.log_dir.empty()) messages << "ddprun: logs are in " << setup.log_dir << "\n";
    // An agent's last word to its head: which node's rank failed first (the head gives
    // that node's place to a spare).
    if (settings.agent && result.outcome == Outcome::kWorkerFailed) {
      if (const auto node = first_failed_node(result)) messages << first_failed_node_line(*node);
    }
    return Verdict{round_code, "not restarting: " + not_restarting};
  } else if (result.outcome == Outcome::kPreempted) {
    messages << "ddprun: workers stopped on a preemption notice"
             << (result.drained ? " (" + signal_name(settings.round.drain_signal) +
                                      ", sent --drain-before the job's end)"
                 : result.stop_signal != 0 ? " (" + signal_name(result.stop_signal) + ")"
                                           : "")
             << "; exit " << kExitPreempted
             << ": run the same command again to resume from their last checkpoint\n";
    return Verdict{round_code,
                   "not restarting: the workers stopped on a preemption notice; run the same "
                   "command again to resume from their last checkpoint"};
  } else if (result.lost_head) {
    if (result.first_failure) messages << failure_lines(result, settings.colour);
    messages << "ddprun: error: lost the connection to the head ddprun; stopped this node's "
                "workers\n";
    return Verdict{round_code, "not restarting: lost the connection to the head ddprun"};
  } else if (result.outcome == Outcome::kStopped) {
    // This node's failure before its head named another node's is still worth its
    // report; the head's cause decides the rest.
    if (result.first_failure) messages << failure_lines(result, settings.colour);
    if (result.cause) {
      const std::string said = format_stop_cause(*result.cause);
      messages << said;
      return Verdict{round_code, "not restarting: " + plain_message(said)};
    }
    messages << "ddprun: stopped by " << signal_name(result.stop_signal) << "\n";
    return Verdict{round_code, "not restarting: ddprun was stopped by " +
                                   signal_name(result.stop_signal) +
                                   " (a stopped job is never restarted)"};
  }
  return Verdict{round_code, "every worker exited 0"};
}

}  // namespace ddprun
