#include "run/restart_policy.h"

#include <sys/wait.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <string_view>

#include "ddprun/common/parse_int.h"
#include "ddprun/common/signal_name.h"
#include "ddprun/contract/errors.h"
#include "report/error_digest.h"
#include "report/labels.h"
#include "report/report.h"

namespace ddprun {
namespace {

// An agent that lost its node: ssh's own failure (255), or killed by a signal.
bool lost_node(const RankResult& child) {
  return child.agent && ((WIFEXITED(child.wait_status) && WEXITSTATUS(child.wait_status) == 255) ||
                         WIFSIGNALED(child.wait_status));
}

// A worker killed by a signal, here or behind an agent (which exits 128 + the signal, as
// ddprun does: docs/exit-codes.md), or a node lost.
bool signal_death(const RankResult& child) {
  if (WIFSIGNALED(child.wait_status) || lost_node(child)) return true;
  const int code = WIFEXITED(child.wait_status) ? WEXITSTATUS(child.wait_status) : 0;
  return child.agent && code > 128 && code < 128 + NSIG;
}

}  // namespace

std::string failure_signature(const RoundResult& result, const std::string& error_file_text) {
  if (result.outcome == Outcome::kTimedOut) {
    std::string running;
    for (const std::size_t child : result.still_running) running += std::to_string(child) + ",";
    return "exit timeout; still running: " + running;
  }
  if (result.outcome == Outcome::kStalled) {
    std::string behind;
    for (const std::size_t child : result.behind) behind += std::to_string(child) + ",";
    return "stall; behind: " + behind;
  }
  if (result.outcome != Outcome::kWorkerFailed || !result.first_failure) return {};
  const RankResult& failed = result.ranks.at(*result.first_failure);
  return child_label(failed) + ": " + describe_wait_status(failed.wait_status) + ": " +
         error_digest_line(failed, error_file_text);
}

bool restart_covers(const RestartRule& rule, const RoundResult& result, std::string& why) {
  if (rule.any) return true;
  if (result.outcome == Outcome::kStalled) {
    if (rule.stalls) return true;
    why = "the round stalled (--stall-timeout), and --restart-on does not say 'stall'";
    return false;
  }
  if (result.outcome == Outcome::kTimedOut) {
    why = "the round timed out (--exit-timeout), and --restart-on does not say 'any'";
    return false;
  }
  if (!result.first_failure) return false;
  const RankResult& failed = result.ranks.at(*result.first_failure);
  if (rule.signals && signal_death(failed)) return true;
  if (WIFEXITED(failed.wait_status) && !lost_node(failed) &&
      rule.exit_codes.count(WEXITSTATUS(failed.wait_status)) > 0) {
    return true;
  }
  why = child_label(failed) + " ended with " + describe_wait_status(failed.wait_status) +
        ", which --restart-on does not list";
  return false;
}

RestartDecision decide_restart(const RoundResult& result, const RestartQuestion& question) {
  using Answer = RestartDecision::Answer;
  if (result.notice != 0 && !question.agent) {
    return {Answer::kEndPreempted,
            "a preemption notice (" + signal_name(result.notice) + ") came during the round",
            false};
  }
  if (result.stop_signal != 0) {
    // Stopped after the failure (Slurm 26.05 sends SIGTERM to every task once one failed):
    // the failure stays the root cause and gives the exit code.
    return {Answer::kEnd,
            result.lost_head ? "lost the connection to the head ddprun after the failure"
                             : "ddprun was stopped by " + signal_name(result.stop_signal) +
                                   " after the round failed; exit " +
                                   std::to_string(question.round_code) + ", the failure's",
            true};
  }
  if (question.agent) return {Answer::kEnd, "the head ddprun decides on restarts", false};
  if (question.restarts_used >= question.max_restarts) {
    return {Answer::kEnd,
            question.max_restarts == 0
                ? "no restart asked for (--max-restarts 0)"
                : "no restart left (--max-restarts " + std::to_string(question.max_restarts) + ")",
            false};
  }
  std::string why;
  if (!restart_covers(question.rule, result, why)) return {Answer::kEnd, why, true};
  if (!question.rule.allow_repeats && question.failure == question.last_failure &&
      !question.progressed) {
    return {Answer::kEnd,
            "round " + std::to_string(question.round) + " failed as the one before it did (" +
                question.failure +
                ") and reached no newer step (DDPRUN_PROGRESS_FILE); --restart-repeated "
                "restarts anyway",
            true};
  }
  return {Answer::kRestart,
          "restart " + std::to_string(question.restarts_used + 1) + " of " +
              std::to_string(question.max_restarts),
          false};
}

namespace {
constexpr std::string_view kFailedNodePrefix = "ddprun: node ";
constexpr std::string_view kFailedNodeSuffix = " failed first";
}  // namespace

std::string first_failed_node_line(int node_rank) {
  return std::string(kFailedNodePrefix) + std::to_string(node_rank) +
         std::string(kFailedNodeSuffix) + "\n";
}

std::optional<int> first_failed_node(const RoundResult& result) {
  if (!result.first_failure) return std::nullopt;
  const RankResult& failed = result.ranks.at(*result.first_failure);
  if (failed.node_rank < 0) return std::nullopt;
  if (!failed.agent) return failed.node_rank;
  for (auto line = failed.stderr_tail.rbegin(); line != failed.stderr_tail.rend(); ++line) {
    std::string_view text = *line;
    if (!text.starts_with(kFailedNodePrefix) || !text.ends_with(kFailedNodeSuffix)) continue;
    text.remove_prefix(kFailedNodePrefix.size());
    text.remove_suffix(kFailedNodeSuffix.size());
    if (const auto node = parse_int(text); node && *node >= 0) return static_cast<int>(*node);
  }
  return failed.node_rank;
}

std::optional<long long> parse_progress(const std::string& text) {
  const auto end = text.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return std::nullopt;
  const std::string digits = text.substr(0, end + 1);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 18) {
    return std::nullopt;
  }
  return std::strtoll(digits.c_str(), nullptr, 10);
}

}  // namespace ddprun
