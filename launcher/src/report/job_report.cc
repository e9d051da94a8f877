#include "report/job_report.h"

#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "ddprun/common/signal_name.h"
#include "ddprun/contract/error_file.h"
#include "report/control.h"
#include "report/labels.h"

namespace ddprun {
namespace {

using json = nlohmann::ordered_json;

json or_null(const std::string& text) {
  return text.empty() ? json(nullptr) : json(text);
}

template <typename T>
json or_null(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

json signal_or_null(int sig) {
  return sig == 0 ? json(nullptr) : json(signal_name(sig));
}

const char* outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::kSucceeded:
      return "succeeded";
    case Outcome::kWorkerFailed:
      return "failed";
    case Outcome::kStopped:
      return "stopped";
    case Outcome::kPreempted:
      return "preempted";
    case Outcome::kTimedOut:
      return "exit_timeout";
    case Outcome::kStalled:
      return "stalled";
  }
  return "failed";
}

// "rank 3 (node2) exit code 1", "node 2's ddprun: signal SIGKILL".
std::string describe_child(const RankResult& child) {
  const std::string how = child.exited    ? describe_wait_status(child.wait_status)
                          : child.started ? std::string("still running")
                                          : std::string("not started");
  if (child.agent) return child_label(child) + "'s ddprun: " + how;
  return "rank " + std::to_string(child.rank) + " (" + child.host + ") " + how;
}

template <typename T>
const T* entry(const std::vector<T>& values, std::size_t index) {
  return index < values.size() ? &values[index] : nullptr;
}

json rank_json(const RankResult& child, const std::string* error_text,
               const std::optional<long long>* step) {
  json row;
  row["kind"] = child.agent ? "agent" : "worker";
  row["rank"] = child.agent ? json(nullptr) : json(child.rank);
  row["local_rank"] = child.agent ? json(nullptr) : json(child.local_rank);
  row["node"] = child.agent && child.node_rank < 0 ? json(nullptr) : json(child.node_rank);
  row["host"] = child.host;
  row["pid"] = child.started ? json(static_cast<long long>(child.pid)) : json(nullptr);
  row["started"] = child.started;
  const bool exited = child.exited && WIFEXITED(child.wait_status);
  const bool signaled = child.exited && WIFSIGNALED(child.wait_status);
  row["exit_code"] = exited ? json(WEXITSTATUS(child.wait_status)) : json(nullptr);
  row["signal"] = signaled ? json(signal_name(WTERMSIG(child.wait_status))) : json(nullptr);
  row["end"] = child.exited    ? describe_wait_status(child.wait_status)
               : child.started ? "still running"
                               : "not started";
  row["run_seconds"] = child.run_seconds;
  row["max_rss_kb"] = child.max_rss_kb;
  row["last_step"] = step != nullptr ? or_null(*step) : json(nullptr);
  row["first_step_seconds"] = or_null(child.first_step_seconds);
  // --restart-scope rank: whether this child took a lost rank's place, and whether one
  // took its own.
  row["replacement"] = child.replacement;
  row["replaced"] = child.replaced_by.has_value();
  const auto parsed = error_text != nullptr ? parse_error_file(*error_text) : std::nullopt;
  row["error_message"] = parsed ? json(parsed->message) : json(nullptr);
  return row;
}

json stderr_json(const RankResult& child) {
  json lines = json::array();
  for (const std::string& line : child.stderr_tail) lines.push_back(line);
  return lines;
}

// What ended `round` and gave its code: the first failure (with its error file), the
// timeout or stall, the signal that stopped ddprun, or another node's report; null for a
// round that succeeded or drained.
json root_cause_json(const ReportRound& round) {
  const RoundResult& result = *round.result;
  json cause;
  cause["round"] = round.decision.round;
  cause["code"] = round.decision.round_code;
  cause["kind"] = nullptr;  // set below; here for the keys' order
  cause["what"] = "";
  cause["rank"] = nullptr;
  cause["node"] = nullptr;
  cause["host"] = nullptr;
  cause["exit_code"] = nullptr;
  cause["signal"] = nullptr;
  cause["error_file"] = nullptr;
  cause["error_file_text"] = nullptr;
  cause["message"] = nullptr;
  cause["callstack"] = nullptr;
  cause["stderr_tail"] = json::array();
  const auto blame = [&](std::size_t index) {
    const RankResult& child = result.ranks.at(index);
    cause["rank"] = child.agent ? json(nullptr) : json(child.rank);
    cause["node"] = child.agent && child.node_rank < 0 ? json(nullptr) : json(child.node_rank);
    cause["host"] = child.host;
    if (child.exited && WIFEXITED(child.wait_status)) {
      cause["exit_code"] = WEXITSTATUS(child.wait_status);
    } else if (child.exited && WIFSIGNALED(child.wait_status)) {
      cause["signal"] = signal_name(WTERMSIG(child.wait_status));
    }
    cause["error_file"] = or_null(child.error_file);
    const std::string* text = entry(round.error_file_texts, index);
    if (text != nullptr && !text->empty()) {
      cause["error_file_text"] = *text;
      if (const auto parsed = parse_error_file(*text)) {
        cause["message"] = parsed->message;
        cause["callstack"] = or_null(parsed->callstack);
      }
    }
    cause["stderr_tail"] = stderr_json(child);
  };
  switch (result.outcome) {
    case Outcome::kSucceeded:
    case Outcome::kPreempted:
      return nullptr;
    case Outcome::kWorkerFailed: {
      const std::size_t index = result.first_failure.value_or(0);
      cause["kind"] = "failure";
      cause["what"] = describe_child(result.ranks.at(index)) + " (failed first)";
      blame(index);
      break;
    }
    case Outcome::kTimedOut: {
      cause["kind"] = "exit_timeout";
      std::vector<int> running;
      for (const std::size_t i : result.still_running) running.push_back(result.ranks[i].rank);
      cause["what"] =
          (running.empty() ? std::string("ranks") : format_number_set("rank", running)) +
          " still running after " +
          (result.first_exit ? describe_child(result.ranks.at(*result.first_exit))
                             : std::string("another rank exited")) +
          " (--exit-timeout)";
      if (result.first_exit) blame(*result.first_exit);
      break;
    }
    case Outcome::kStalled: {
      cause["kind"] = "stall";
      std::vector<int> behind;
      for (const std::size_t i : result.behind) behind.push_back(result.ranks[i].rank);
      cause["what"] = "no rank advanced (--stall-timeout); " +
                      (behind.empty() ? std::string("none") : format_number_set("rank", behind)) +
                      " behind, at step " + std::to_string(result.behind_step) +
                      " (the furthest: " + std::to_string(result.ahead_step) + ")";
      break;
    }
    case Outcome::kStopped:
      if (result.cause) {
        cause["kind"] = "node";
        cause["node"] = result.cause->node;
        cause["what"] = "node " + std::to_string(result.cause->node) + ": " + result.cause->what;
      } else if (result.lost_head) {
        cause["kind"] = "lost_head";
        cause["what"] = "lost the connection to the head ddprun";
      } else {
        cause["kind"] = "signal";
        cause["signal"] = signal_or_null(result.stop_signal);
        cause["what"] = "ddprun was stopped by " + signal_name(result.stop_signal);
      }
      break;
  }
  return cause;
}

json round_json(const ReportRound& round) {
  const RoundDecision& decision = round.decision;
  json doc;
  doc["round"] = decision.round;
  doc["started"] = round.result.has_value();
  doc["nodes"] = round.hosts;
  doc["prepare_seconds"] = decision.prepare_seconds;
  doc["spawn_seconds"] = round.result ? json(round.result->spawn_seconds) : json(nullptr);
  doc["run_seconds"] = decision.run_seconds;
  doc["exit_code"] = decision.round_code;
  doc["restarted"] = decision.restart;
  doc["decision"] = decision.why;
  if (!round.result) {
    doc["outcome"] = "not_started";
    for (const char* key : {"stop_signal", "notice", "cause", "root_cause", "stacks_taken"}) {
      doc[key] = nullptr;
    }
    doc["drained"] = false;
    doc["recoveries"] = 0;
    doc["not_replaced"] = nullptr;
    doc["ranks"] = json::array();
    return doc;
  }
  const RoundResult& result = *round.result;
  doc["outcome"] = outcome_name(result.outcome);
  doc["stop_signal"] = signal_or_null(result.stop_signal);
  doc["notice"] = signal_or_null(result.notice);
  doc["drained"] = result.drained;
  if (result.cause) {
    doc["cause"] = {{"kind", node_event_name(result.cause->kind)},
                    {"node", result.cause->node},
                    {"code", result.cause->code},
                    {"what", result.cause->what}};
  } else {
    doc["cause"] = nullptr;
  }
  doc["root_cause"] = root_cause_json(round);
  doc["stacks_taken"] = or_null(result.stacks_when);
  doc["recoveries"] = result.recoveries;
  doc["not_replaced"] = or_null(result.not_replaced);
  json ranks = json::array();
  for (std::size_t i = 0; i < result.ranks.size(); ++i) {
    ranks.push_back(
        rank_json(result.ranks[i], entry(round.error_file_texts, i), entry(round.steps, i)));
  }
  doc["ranks"] = std::move(ranks);
  return doc;
}

}  // namespace

std::string format_job_report(const JobReport& report) {
  json doc;
  doc["schema"] = kJobReportSchema;
  doc["ddprun_version"] = report.version;
  doc["run_id"] = report.run_id;
  doc["job_id"] = or_null(report.job_id);
  doc["scheduler"] = report.scheduler;
  doc["this_node"] = report.this_node;
  json nodes = json::array();
  for (std::size_t i = 0; i < report.nodes.size(); ++i) {
    nodes.push_back(
        {{"node", i}, {"host", report.nodes[i].host}, {"slots", report.nodes[i].slots}});
  }
  doc["nodes"] = std::move(nodes);
  doc["state"] = report.exit_code ? "ended" : "running";
  doc["started_unix"] = report.started_unix;
  doc["ended_unix"] = or_null(report.ended_unix);
  doc["max_restarts"] = report.max_restarts;
  int restarts = 0;
  for (const ReportRound& round : report.rounds) restarts += round.decision.restart ? 1 : 0;
  doc["restarts"] = restarts;
  doc["exit_code"] = or_null(report.exit_code);
  // Why the job ended: the last round's decision.
  if (report.exit_code && !report.rounds.empty()) {
    doc["end"] = report.rounds.back().decision.why;
  } else {
    doc["end"] = nullptr;
  }
  // The job's root cause: what ended its last round, when the job did not succeed.
  doc["root_cause"] = nullptr;
  if (report.exit_code && *report.exit_code != 0 && !report.rounds.empty()) {
    const ReportRound& last = report.rounds.back();
    if (last.result) {
      doc["root_cause"] = root_cause_json(last);
    } else {
      doc["root_cause"] = {{"round", last.decision.round},
                           {"code", last.decision.round_code},
                           {"kind", "before_round"},
                           {"what", last.decision.why},
                           {"rank", nullptr},
                           {"node", nullptr},
                           {"host", nullptr},
                           {"exit_code", nullptr},
                           {"signal", nullptr},
                           {"error_file", nullptr},
                           {"error_file_text", nullptr},
                           {"message", nullptr},
                           {"callstack", nullptr},
                           {"stderr_tail", json::array()}};
    }
  }
  // The start-up's phases as this ddprun saw them (round 0's).
  json startup = json::array();
  startup.push_back({{"phase", "inputs"}, {"seconds", report.inputs_seconds}});
  if (!report.rounds.empty()) {
    const ReportRound& first = report.rounds.front();
    startup.push_back({{"phase", "prepare"}, {"seconds", first.decision.prepare_seconds}});
    if (first.result) {
      startup.push_back({{"phase", "spawn"}, {"seconds", first.result->spawn_seconds}});
      // Until the last worker's first step, naming it.
      const RankResult* last = nullptr;
      for (const RankResult& child : first.result->ranks) {
        if (child.first_step_seconds &&
            (last == nullptr || *child.first_step_seconds > *last->first_step_seconds)) {
          last = &child;
        }
      }
      if (last != nullptr) {
        startup.push_back({{"phase", "first_step"},
                           {"seconds", *last->first_step_seconds},
                           {"rank", last->rank},
                           {"host", last->host}});
      }
    }
  }
  doc["startup"] = std::move(startup);
  json rounds = json::array();
  for (const ReportRound& round : report.rounds) rounds.push_back(round_json(round));
  doc["rounds"] = std::move(rounds);
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace ddprun
