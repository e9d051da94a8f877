#include "restart_policy.h"

#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "ddprun/common/parse_int.h"
#include "ddprun/contract/errors.h"
#include "error_digest.h"
#include "report.h"

namespace ddprun {
namespace {

// An agent that lost its node: ssh's own failure (255), or killed by a signal.
bool lost_node(const RankResult& child) {
  return child.agent && ((WIFEXITED(child.wait_status) && WEXITSTATUS(child.wait_status) == 255) ||
                         WIFSIGNALED(child.wait_status));
}

}  // namespace

RestartRule parse_restart_on(const std::string& text) {
  RestartRule rule;
  if (text == "any") return rule;
  rule.any = false;
  std::stringstream items(text);
  std::string item;
  bool some = false;
  while (std::getline(items, item, ',')) {
    some = true;
    if (item == "signals") {
      rule.signals = true;
      continue;
    }
    const auto code = parse_int(item);
    if (!code || *code < 1 || *code > 255) {
      throw UsageError(
          "--restart-on " + text + ": '" + item + "' is neither 'signals' nor an exit code 1-255",
          "e.g. --restart-on any, --restart-on signals, --restart-on signals,3");
    }
    rule.exit_codes.insert(*code);
  }
  if (!some || text.back() == ',') throw UsageError("--restart-on " + text + ": an empty item");
  return rule;
}

std::string failure_signature(const RoundResult& result, const std::string& error_file_text) {
  if (result.outcome == Outcome::kTimedOut) {
    std::string running;
    for (const std::size_t child : result.still_running) running += std::to_string(child) + ",";
    return "exit timeout; still running: " + running;
  }
  if (result.outcome != Outcome::kWorkerFailed || !result.first_failure) return {};
  const RankResult& failed = result.ranks.at(*result.first_failure);
  return child_label(failed) + ": " + describe_wait_status(failed.wait_status) + ": " +
         error_digest_line(failed, error_file_text);
}

bool restart_covers(const RestartRule& rule, const RoundResult& result, std::string& why) {
  if (rule.any) return true;
  if (result.outcome == Outcome::kTimedOut) {
    why = "the round timed out (--exit-timeout), and --restart-on does not say 'any'";
    return false;
  }
  if (!result.first_failure) return false;
  const RankResult& failed = result.ranks.at(*result.first_failure);
  if (rule.signals && (WIFSIGNALED(failed.wait_status) || lost_node(failed))) return true;
  if (WIFEXITED(failed.wait_status) && !lost_node(failed) &&
      rule.exit_codes.count(WEXITSTATUS(failed.wait_status)) > 0) {
    return true;
  }
  why = child_label(failed) + " ended with " + describe_wait_status(failed.wait_status) +
        ", which --restart-on does not list";
  return false;
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
