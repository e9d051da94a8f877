#include "run/restart_policy.h"

#include <sys/wait.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <string_view>

#include "ddprun/common/parse_int.h"
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
