// The supervision policy (supervision.h) against every sequence of up to kDepth events, in each
// mode (a node of its own, a head with an agent child, an agent under a head), with the
// workers' answers to notices, with or without --exit-timeout, with --stall-timeout (the
// workers' progress may stop) and stacks taken; workers may exit 75 unprompted, the agent
// child may report its node's failure, stop or notice the moment it happens, and the head
// may stop an agent with another node's failure as the cause. After each sequence the
// invariants of docs/fault-tolerance.md ("The policy's invariants") are checked. The fake
// runner makes each sequence a few microseconds; the whole file runs in seconds.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ddprun/contract/errors.h"
#include "exploration.h"
#include "fake_runner.h"
#include "policy/supervision.h"

namespace ddprun {
namespace {

using testing::exited;
using testing::Exploration;
using testing::exploration_depth;
using testing::FakeBehaviour;
using testing::FakeRunner;
using testing::killed;
using testing::Ms;
using testing::WaitsForever;

constexpr Ms kGrace{350};
constexpr Ms kStep{100};  // event i happens at (i + 1) steps
constexpr Ms kExitTimeout{250};
// --stall-timeout: workers write a step every 10 ms until a stall event freezes them.
constexpr Ms kStallTimeout{220};
// A reporting agent ends this long after its report (exit 1 after a failure, 143 after a
// stop), unless an exit of its own comes first.
constexpr Ms kReportToExit{50};
constexpr int kCauseCode = 3;  // the code of the failure a head names when it stops an agent

enum class Mode { kLocal, kHead, kAgent };

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kLocal:
      return "local";
    case Mode::kHead:
      return "head";
    case Mode::kAgent:
      return "agent";
  }
  return "?";
}

struct Event {
  // kReport: the agent child reports its node failed (value 0), was stopped by SIGTERM (1)
  // or got a notice (2). kHeadStop: the head stops this agent for another node's failure.
  enum class Kind { kExit, kSignal, kDrainTime, kHeadLost, kStall, kReport, kHeadStop };
  Kind kind = Kind::kSignal;
  std::size_t child = 0;
  int value = 0;  // the wait status of kExit, the signal of kSignal
};

struct Config {
  Mode mode = Mode::kLocal;
  int worker_notice_status = killed(SIGUSR1);  // how workers answer SIGUSR1/SIGUSR2
  bool exit_timeout = false;
  bool restart_on_signals = false;  // --restart-on signals instead of any
  // --restart-scope rank (local mode): a lost worker is replaced in the round, up to
  // kRankScopeRestarts times; children 2 and 3 are the replacements, in the order they start.
  bool rank_scope = false;
};

// Rank scope: --max-restarts (replacements and full restarts together), and the recovery
// window: a replacement that fails within it (one event after its start) fails the round.
constexpr int kRankScopeRestarts = 2;
constexpr Ms kRecoveryWindow{150};
constexpr std::size_t kReplacements = 2;

bool is_stop(int sig) {
  return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
}
bool is_notice(int sig) {
  return sig == SIGUSR1 || sig == SIGUSR2;
}

// Children: worker 0 obeys stop signals; in local and agent mode worker 1 ignores them
// (a trapped or hung rank); in head mode child 1 is the agent of node 1.
std::size_t child_count(Mode) {
  return 2;
}
bool is_agent_child(Mode mode, std::size_t child) {
  return mode == Mode::kHead && child == 1;
}

// `stall`: progress may stop (--stall-timeout). Left out with the exit timeout, a policy
// stop of the same kind, to keep the run short.
std::vector<Event> alphabet(Mode mode, bool stall, bool rank_scope = false) {
  std::vector<Event> events;
  // A replacement's end: at the event's time, or at once when it starts later than that.
  for (std::size_t n = 0; rank_scope && n < kReplacements; ++n) {
    for (int status : {exited(0), killed(SIGKILL)}) {
      events.push_back({Event::Kind::kExit, child_count(mode) + n, status});
    }
  }
  for (std::size_t child = 0; child < child_count(mode); ++child) {
    // A worker that exits 75 unprompted (no notice) has failed.
    std::vector<int> statuses = {exited(0), exited(1), killed(SIGKILL), exited(kExitPreempted)};
    if (is_agent_child(mode, child)) {
      // Its node finished; a peer node failed; a worker there was killed (the agent
      // reports 128 + 9); the node was lost (ssh's 255); the node drained.
      statuses = {exited(0), exited(1), exited(128 + SIGKILL), exited(255), exited(kExitPreempted)};
    }
    for (int status : statuses) events.push_back({Event::Kind::kExit, child, status});
  }
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1}) {
    events.push_back({Event::Kind::kSignal, 0, sig});
  }
  if (mode == Mode::kAgent) {
    events.push_back({Event::Kind::kHeadLost, 0, 0});
    events.push_back({Event::Kind::kHeadStop, 0, SIGTERM});
  } else {
    events.push_back({Event::Kind::kDrainTime, 0, 0});
  }
  if (mode == Mode::kHead) {
    for (int report : {0, 1, 2}) events.push_back({Event::Kind::kReport, 1, report});
  }
  if (stall) events.push_back({Event::Kind::kStall, 0, 0});
  return events;
}

std::string describe(const Event& e) {
  switch (e.kind) {
    case Event::Kind::kExit: {
      std::string status = WIFEXITED(e.value) ? "exits " + std::to_string(WEXITSTATUS(e.value))
                                              : "killed by " + std::to_string(WTERMSIG(e.value));
      return "child " + std::to_string(e.child) + " " + status;
    }
    case Event::Kind::kSignal:
      return "signal " + std::to_string(e.value);
    case Event::Kind::kDrainTime:
      return "drain time";
    case Event::Kind::kHeadLost:
      return "head lost";
    case Event::Kind::kStall:
      return "progress stops";
    case Event::Kind::kReport:
      return std::string("agent reports its node ") + (e.value == 0   ? "failed"
                                                       : e.value == 1 ? "stopped"
                                                                      : "got a notice");
    case Event::Kind::kHeadStop:
      return "head stops it for another node's failure";
  }
  return "?";
}

std::string describe(const Config& config, const std::vector<Event>& events) {
  std::ostringstream out;
  out << mode_name(config.mode) << ", notice "
      << (WIFEXITED(config.worker_notice_status) ? "exits 75" : "kills")
      << (config.exit_timeout ? ", exit timeout" : "")
      << (config.restart_on_signals ? ", restart-on signals" : "")
      << (config.rank_scope ? ", rank scope" : "") << ":";
  for (std::size_t i = 0; i < events.size(); ++i) {
    out << " [" << (i + 1) * kStep.count() << " ms] " << describe(events[i]) << ";";
  }
  return out.str();
}

struct Outcome {
  bool waits_forever = false;
  int exit_code = -1;
  // What went wrong that the outcome cannot show: a replacement started after a stop, or
  // the fake runner refused what the policy did; empty when nothing.
  std::string replacement_problem;
  std::vector<std::pair<Ms, int>> replacement_starts;  // (when, its rank)
};

bool is_stop_status(int sig) {
  return sig == 0 || sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
}

Outcome run_sequence(FakeRunner& runner, const Config& config, const std::vector<Event>& events) {
  JobSettings settings;
  settings.round.shutdown_grace = kGrace;
  if (config.exit_timeout) settings.round.exit_timeout = kExitTimeout;
  settings.max_restarts = config.rank_scope ? kRankScopeRestarts : 1;
  if (config.rank_scope) {
    settings.round.restart_scope = RestartScope::kRank;
    settings.round.recovery_window = kRecoveryWindow;
  }
  if (config.restart_on_signals) settings.restart = parse_restart_on("signals");
  settings.agent = config.mode == Mode::kAgent;
  settings.summaries = false;
  settings.tables = false;
  settings.round.capture_stacks = true;
  settings.round.stall_timeout = kStallTimeout;
  settings.round.stall_check_every = Ms(50);
  std::optional<Ms> stall_at;

  std::vector<std::optional<std::pair<Ms, int>>> exits(child_count(config.mode) +
                                                       (config.rank_scope ? kReplacements : 0));
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    const Ms at = kStep * static_cast<int>(i + 1);
    switch (e.kind) {
      case Event::Kind::kExit:
        if (!exits.at(e.child) || exits.at(e.child)->first > at) {
          exits.at(e.child) = std::make_pair(at, e.value);
        }
        break;
      case Event::Kind::kSignal:
        runner.signal_at(0, at, e.value);
        break;
      case Event::Kind::kHeadLost:
        runner.signal_at(0, at, 0);
        break;
      case Event::Kind::kDrainTime:
        settings.round.drain_at = runner.now() + at;
        break;
      case Event::Kind::kStall:
        stall_at = at;
        break;
      case Event::Kind::kReport: {
        NodeEvent report;
        report.node = 1;
        report.kind = e.value == 0   ? NodeEvent::Kind::kFailed
                      : e.value == 1 ? NodeEvent::Kind::kStopped
                                     : NodeEvent::Kind::kNotice;
        report.signal = e.value == 1 ? SIGTERM : e.value == 2 ? SIGUSR1 : 0;
        report.code = e.value == 0 ? 1 : e.value == 1 ? 128 + SIGTERM : 0;
        runner.report_at(0, at, e.child, report);
        // The agent ends soon after a failure or a stop it reported, as a real one does.
        auto& exit = exits.at(e.child);
        if (e.value != 2 && (!exit || exit->first > at + kReportToExit)) {
          exit = std::make_pair(at + kReportToExit, exited(report.code));
        }
        break;
      }
      case Event::Kind::kHeadStop: {
        NodeEvent cause;
        cause.node = 2;
        cause.code = kCauseCode;
        runner.head_signal_at(0, at, e.value, cause);
        break;
      }
    }
  }
  runner.waits_forever_after = Ms(20000);  // the events end by 0.7 s, the grace 0.35 s after
  runner.progress_at = [&](int round, std::size_t, Ms at) -> std::optional<long long> {
    const Ms until = round == 0 && stall_at ? std::min(at, *stall_at) : at;
    return until.count() / 10;
  };
  std::string replacement_problem;
  std::vector<std::pair<Ms, int>> replacement_starts;
  runner.behaviour = [&](int round, std::size_t child) {
    FakeBehaviour b;
    if (round > 0) {
      b.exit_after = Ms(1);
      return b;
    }
    if (child >= child_count(config.mode)) {  // a replacement (rank scope)
      // Never after a stop: a signal to ddprun, the head lost, or a stop the policy sent.
      for (const auto& h : runner.happened) {
        if (h.round == 0 && !h.exit && is_stop_status(h.status_or_signal)) {
          replacement_problem = "a replacement started after a stop signal";
        }
      }
      for (const auto& sent : runner.sent) {
        if (sent.round == 0 && !is_notice(sent.signal_number)) {
          replacement_problem = "a replacement started after the policy stopped the round";
        }
      }
      const Ms now = runner.elapsed();
      replacement_starts.emplace_back(now, runner.started[0].back().rank);
      if (exits.at(child)) {
        b.exit_after = std::max(Ms(1), exits.at(child)->first - now);
        b.exit_status = exits.at(child)->second;
      }
      b.status_on_notice = config.worker_notice_status;
      return b;
    }
    if (exits[child]) {
      b.exit_after = exits[child]->first;
      b.exit_status = exits[child]->second;
    }
    if (is_agent_child(config.mode, child)) {
      b.exits_like_agent = true;
      b.status_on_notice = exited(kExitPreempted);  // its node drains
    } else {
      b.ignores_stop = child == 1;
      b.status_on_notice = config.worker_notice_status;
    }
    return b;
  };
  std::vector<ChildSpec> children(child_count(config.mode));
  for (std::size_t i = 0; i < children.size(); ++i) {
    children[i].agent = is_agent_child(config.mode, i);
    children[i].node_rank = children[i].agent ? 1 : 0;
    children[i].rank = static_cast<int>(i);
  }
  std::ostringstream messages;
  Outcome outcome;
  try {
    outcome.exit_code = run_job(
        runner, settings,
        [&](int, const RoundResult*) {
          return RoundSetup{children, "", "", ""};
        },
        messages);
  } catch (const WaitsForever&) {
    outcome.waits_forever = true;
  } catch (const std::logic_error& e) {
    // The fake runner's own checks: a round that ended with a child running (an orphan), a
    // signal to a child already reaped, a capture of an exited one.
    replacement_problem = std::string("the fake runner refused: ") + e.what();
  }
  if (outcome.replacement_problem.empty()) outcome.replacement_problem = replacement_problem;
  outcome.replacement_starts = replacement_starts;
  return outcome;
}

// What happened in round 0, read back from the fake runner.
struct Round0 {
  const FakeRunner& runner;
  Mode mode;

  // Whether a notice went out to `child` before `order`, while the round still ran (a
  // notice after a stop decision drains nothing: the stop decides).
  bool notice_sent_before(std::size_t child, long order) const {
    long stopped = LONG_MAX;
    for (const auto& h : runner.happened) {
      if (h.round == 0 && !h.exit && (h.status_or_signal == 0 || is_stop(h.status_or_signal))) {
        stopped = std::min(stopped, h.order);
      }
    }
    for (const auto& s : runner.sent) {
      if (s.round == 0 && !is_notice(s.signal_number)) stopped = std::min(stopped, s.order);
    }
    for (const auto& s : runner.sent) {
      if (s.round == 0 && s.child == child && is_notice(s.signal_number) && s.order < order &&
          s.order < stopped) {
        return true;
      }
    }
    return false;
  }
  // Whether a stop (a stop signal, the head lost, a node's reported stop) came before `order`.
  bool stopped_before(long order) const {
    return std::any_of(runner.happened.begin(), runner.happened.end(), [&](const auto& h) {
      return h.round == 0 && !h.exit && h.order < order &&
             (h.status_or_signal == 0 || is_stop(h.status_or_signal) ||
              (h.reported && h.reported->kind == NodeEvent::Kind::kStopped));
    });
  }
  // A child that ended as a drained one: exit 75, or killed by a notice that went out to
  // it (an agent reports that as 128 + the signal).
  bool drained(const FakeRunner::Happened& h) const {
    const int status = h.status_or_signal;
    if (WIFEXITED(status) && WEXITSTATUS(status) == kExitPreempted) {
      // A worker's 75 is a drain only after a notice went out, or a stop; an agent's is its
      // node's.
      return is_agent_child(mode, h.child) || notice_sent_before(h.child, h.order) ||
             stopped_before(h.order);
    }
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    if (is_agent_child(mode, h.child) && WIFEXITED(status) && WEXITSTATUS(status) > 128) {
      sig = WEXITSTATUS(status) - 128;
    }
    return is_notice(sig) && notice_sent_before(h.child, h.order);
  }
  bool clean(const FakeRunner::Happened& h) const {
    return h.status_or_signal == exited(0) || drained(h);
  }
};

// A worker killed by a signal, here or behind an agent, or a node lost.
bool signal_death(Mode mode, const FakeRunner::Happened& h) {
  const int status = h.status_or_signal;
  if (WIFSIGNALED(status)) return true;
  const int code = WEXITSTATUS(status);
  return is_agent_child(mode, h.child) && (code == 255 || (code > 128 && code < 128 + 65));
}

int code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The invariants; returns the first one broken, or empty.
std::string check(const FakeRunner& runner, const Config& config, const Outcome& outcome,
                  const std::vector<Event>& events) {
  const Round0 round0{runner, config.mode};
  // Rank scope: the replacements of round 0, and the losses they replaced (which end no
  // rank: they are left out of the exits below).
  if (!outcome.replacement_problem.empty()) return outcome.replacement_problem;
  const std::size_t children0 =
      runner.started.empty() ? child_count(config.mode) : runner.started[0].size();
  const std::size_t replacements = children0 - child_count(config.mode);
  if (!config.rank_scope && replacements != 0) return "a replacement started under job scope";
  const auto rank_of = [&](std::size_t child) { return runner.started.at(0).at(child).rank; };
  const auto replaced = [&](const FakeRunner::Happened& h) {
    return std::any_of(
        outcome.replacement_starts.begin(), outcome.replacement_starts.end(),
        [&](const auto& r) { return r.first == h.at && r.second == rank_of(h.child); });
  };
  if (config.rank_scope) {
    if (replacements + (runner.started.size() - 1) > static_cast<std::size_t>(kRankScopeRestarts)) {
      return "replacements and restarts went past --max-restarts";
    }
    for (const auto& start : outcome.replacement_starts) {
      const bool lost_then =
          std::any_of(runner.happened.begin(), runner.happened.end(), [&](const auto& h) {
            return h.round == 0 && h.exit && h.at == start.first &&
                   rank_of(h.child) == start.second && !round0.clean(h);
          });
      if (!lost_then) return "a replacement started with no loss of its rank at that moment";
    }
    if (!outcome.waits_forever) {
      const auto reaped = std::count_if(runner.happened.begin(), runner.happened.end(),
                                        [](const auto& h) { return h.round == 0 && h.exit; });
      if (static_cast<std::size_t>(reaped) != children0) return "a child of round 0 was not reaped";
    }
  }
  std::vector<FakeRunner::Happened> exits;
  std::optional<FakeRunner::Happened> first_stop;  // a stop signal, the head lost, a node's stop
  std::optional<FakeRunner::Happened> failure_report;  // the agent's report of its failure
  std::vector<FakeRunner::Happened> stops;
  std::optional<Ms> notice_at;  // the round's first notice: a signal, a report, the drain time
  const auto reported = [](const FakeRunner::Happened& h, NodeEvent::Kind kind) {
    return h.reported && h.reported->kind == kind;
  };
  for (const auto& h : runner.happened) {
    if (h.round != 0) continue;
    if (h.exit) {
      if (!config.rank_scope || !replaced(h)) exits.push_back(h);
    } else if (h.status_or_signal == 0 || is_stop(h.status_or_signal) ||
               reported(h, NodeEvent::Kind::kStopped)) {
      stops.push_back(h);
      if (!first_stop) first_stop = h;
    } else if (reported(h, NodeEvent::Kind::kFailed) && !failure_report) {
      failure_report = h;
    }
    if (is_notice(h.status_or_signal) || reported(h, NodeEvent::Kind::kNotice)) {
      if (!notice_at) notice_at = h.at;
    }
  }
  bool drain_at_round_end = false;  // the drain time and the round's end at once: either way
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].kind != Event::Kind::kDrainTime || runner.round_ends.empty()) continue;
    const Ms at = kStep * static_cast<int>(i + 1);
    if (at < runner.round_ends[0] && (!notice_at || at < *notice_at)) notice_at = at;
    drain_at_round_end = at == runner.round_ends[0];
  }
  // The head stopped this agent for another node's failure, before any other stop.
  const bool head_stop_first =
      first_stop && !first_stop->reported &&
      std::any_of(events.begin(), events.end(), [&](const Event& e) {
        return e.kind == Event::Kind::kHeadStop && first_stop->status_or_signal == e.value &&
               first_stop->at == kStep * static_cast<int>(&e - events.data() + 1);
      });
  // The first stop the policy sent by itself (after a failure or the exit timeout).
  std::optional<FakeRunner::Sent> first_policy_stop;
  for (const auto& s : runner.sent) {
    if (s.round == 0 && !is_notice(s.signal_number)) {
      first_policy_stop = s;
      break;
    }
  }
  const long stop_order = first_stop ? first_stop->order : LONG_MAX;
  const long policy_order = first_policy_stop ? first_policy_stop->order : LONG_MAX;
  std::optional<FakeRunner::Happened> root;
  std::optional<int> root_code;  // the code a node reported for its failure, when it did
  for (const auto& h : exits) {
    if (!round0.clean(h) && h.order < stop_order && h.order < policy_order) {
      root = h;
      break;
    }
  }
  // A node's report of its failure is the root when it came first: the agent's exit that
  // follows carries its code.
  if (failure_report && failure_report->order < stop_order &&
      (!root || failure_report->order < root->order)) {
    const auto agent_exit = std::find_if(exits.begin(), exits.end(), [&](const auto& h) {
      return h.child == failure_report->child;
    });
    // Every other live child hears at once: the nodes fail together within one grace.
    for (std::size_t child = 0; child < child_count(config.mode); ++child) {
      if (child == failure_report->child) continue;
      const bool exited_before = std::any_of(exits.begin(), exits.end(), [&](const auto& h) {
        return h.child == child && h.order < failure_report->order;
      });
      const bool told = std::any_of(runner.sent.begin(), runner.sent.end(), [&](const auto& s) {
        return s.round == 0 && s.child == child && s.signal_number == SIGTERM &&
               s.at == failure_report->at;
      });
      if (!exited_before && !told) {
        return "a node's failure report did not stop child " + std::to_string(child) + " at once";
      }
    }
    if (agent_exit != exits.end()) {
      root = *agent_exit;
      root->order = failure_report->order;
      root_code = failure_report->reported->code;  // what it reported, whatever its exit
    }
  }
  const bool timed_out = !root && first_policy_stop && first_policy_stop->order < stop_order;
  const bool agent = config.mode == Mode::kAgent;
  const bool all_clean =
      !outcome.waits_forever && exits.size() == children0 - replacements &&
      std::all_of(exits.begin(), exits.end(), [&](const auto& h) { return round0.clean(h); });
  const bool any_drained =
      std::any_of(exits.begin(), exits.end(), [&](const auto& h) { return round0.drained(h); });
  const std::size_t rounds = runner.started.size();

  // A job must end within the grace (plus 1 s) of the event that ends it.
  std::optional<Ms> ending;
  if (first_stop) ending = first_stop->at;
  if (root && (!ending || root->at < *ending)) ending = root->at;
  if (first_policy_stop && (!ending || first_policy_stop->at < *ending)) {
    ending = first_policy_stop->at;
  }
  if (outcome.waits_forever) {
    if (ending) return "waits forever after the event that ends the job";
    return {};
  }
  if (runner.round_ends.empty()) return "round 0 never ended";
  // Agents get the stack allowance after the grace (theirs, to send their stacks).
  const Ms allowance =
      config.mode == Mode::kHead ? JobSettings().round.agent_stack_allowance : Ms(0);
  if (failure_report && (!ending || failure_report->at < *ending)) ending = failure_report->at;
  if (ending && runner.round_ends[0] > *ending + kGrace + allowance + Ms(1000)) {
    return "round 0 ended " + std::to_string(runner.round_ends[0].count()) +
           " ms in, later than the grace after the event that ended it";
  }

  // Stacks are taken at most once a round, of live workers only (the fake runner throws
  // for an exited one), and only just before each of them gets SIGKILL, or, on a stall,
  // just before the round's stop (SIGTERM) goes out.
  std::size_t captures_in_round0 = 0;
  for (const auto& capture : runner.captures) {
    if (capture.round != 0) continue;
    if (++captures_in_round0 > 1) return "stacks were taken twice in one round";
    for (const std::size_t child : capture.children) {
      if (is_agent_child(config.mode, child)) return "an agent's stacks were taken";
      const bool stopped_then =
          std::any_of(runner.sent.begin(), runner.sent.end(), [&](const auto& s) {
            return s.round == 0 && s.child == child && s.at == capture.at &&
                   (s.signal_number == SIGKILL || s.signal_number == SIGTERM);
          });
      if (!stopped_then) return "stacks were taken of a child that was not stopped then";
    }
  }

  // Every stop signal reaches every child that has not exited (or SIGKILL does).
  for (const auto& stop : stops) {
    const int forwarded =
        stop.status_or_signal == 0 || stop.reported ? SIGTERM : stop.status_or_signal;
    for (std::size_t child = 0; child < children0; ++child) {
      const bool exited_before =
          std::any_of(runner.happened.begin(), runner.happened.end(), [&](const auto& h) {
            return h.round == 0 && h.exit && h.child == child && h.order < stop.order;
          });
      if (exited_before) continue;
      const bool reached = std::any_of(runner.sent.begin(), runner.sent.end(), [&](const auto& s) {
        return s.round == 0 && s.child == child &&
               (s.signal_number == SIGKILL ||
                (s.signal_number == forwarded && s.order > stop.order));
      });
      if (!reached) {
        return "signal " + std::to_string(stop.status_or_signal) + " never reached child " +
               std::to_string(child);
      }
    }
  }

  // A drained round (every child ended cleanly, one by the notice) exits 75 everywhere,
  // a stop signal during the drain included, and is never restarted.
  if (all_clean && any_drained) {
    if (outcome.exit_code != kExitPreempted) {
      return "a drained round exited " + std::to_string(outcome.exit_code) + ", not 75";
    }
    if (rounds != 1) return "a drained round was restarted";
    return {};
  }
  // A stop signal (here, or a node's reported stop) never leads to a restart, and the exit
  // code is 128 + the signal, or the code of the failure elsewhere that the head named. A
  // stop after the round's own cause (a failure, the exit timeout, a stall: Slurm 26.05's
  // SIGTERM after a task failed) keeps that cause's code, checked below.
  const bool cause_before_stop = root || timed_out;
  if (first_stop) {
    const int cause = first_stop->status_or_signal == 0 ? SIGHUP
                      : first_stop->reported            ? first_stop->reported->signal
                                                        : first_stop->status_or_signal;
    if (rounds != 1) return "a round started after a stop signal";
    if (head_stop_first) {
      if (outcome.exit_code != kCauseCode) {
        return "stopped for another node's failure but exited " + std::to_string(outcome.exit_code);
      }
      return {};
    }
    if (!cause_before_stop) {
      if (outcome.exit_code != 128 + cause) {
        return "stopped by " + std::to_string(cause) + " but exited " +
               std::to_string(outcome.exit_code);
      }
      return {};
    }
  }
  // A notice is never lost: a failed round that had one ends the job drained, with no
  // round after it whose workers would never hear of it.
  if (!agent && notice_at && (root || timed_out) && !drain_at_round_end) {
    if (rounds != 1 || outcome.exit_code != kExitPreempted) {
      return "a failure with a notice in its round ended with rounds " + std::to_string(rounds) +
             ", exit " + std::to_string(outcome.exit_code) + " (not a drained end)";
    }
    return {};
  }
  if (root) {
    // --restart-on signals: a signal death, here or behind an agent, is one.
    // Rank scope: the replacements used restarts of the same --max-restarts.
    const bool restart =
        !agent && !first_stop && (!config.restart_on_signals || signal_death(config.mode, *root)) &&
        (!config.rank_scope || replacements < static_cast<std::size_t>(kRankScopeRestarts));
    if (restart) {
      if (rounds != 2 || outcome.exit_code != 0) {
        return "a failure (" + std::to_string(code_of(root->status_or_signal)) +
               ") that the rule covers was not restarted (rounds " + std::to_string(rounds) +
               ", exit " + std::to_string(outcome.exit_code) + ")";
      }
    } else if (rounds != 1 ||
               outcome.exit_code != root_code.value_or(code_of(root->status_or_signal))) {
      return "a failure (" + std::to_string(root_code.value_or(code_of(root->status_or_signal))) +
             ") ended with rounds " + std::to_string(rounds) + ", exit " +
             std::to_string(outcome.exit_code);
    }
    return {};
  }
  if (timed_out) {
    const bool restart =
        !agent && !first_stop && !config.restart_on_signals &&
        (!config.rank_scope || replacements < static_cast<std::size_t>(kRankScopeRestarts));
    if (restart ? (rounds != 2 || outcome.exit_code != 0)
                : (rounds != 1 || outcome.exit_code != kExitTimedOut)) {
      return "an exit timeout ended with rounds " + std::to_string(rounds) + ", exit " +
             std::to_string(outcome.exit_code);
    }
    return {};
  }
  if (all_clean && (rounds != 1 || outcome.exit_code != 0)) {
    return "every child exited 0 but the job exited " + std::to_string(outcome.exit_code);
  }
  return {};
}

void explore(const Config& config, const std::vector<Event>& events_so_far, std::size_t depth,
             const std::vector<Event>& alphabet, Exploration& out) {
  if (!events_so_far.empty()) {
    FakeRunner runner;
    const Outcome outcome = run_sequence(runner, config, events_so_far);
    out.add(check(runner, config, outcome, events_so_far),
            [&] { return describe(config, events_so_far); });
  }
  if (events_so_far.size() == depth) return;
  for (const Event& next : alphabet) {
    // A child ends once and the drain time comes once: a second such event is the same
    // sequence as a shorter one.
    const bool repeat = std::any_of(events_so_far.begin(), events_so_far.end(), [&](auto& e) {
      return e.kind == next.kind && next.kind != Event::Kind::kSignal &&
             (next.kind != Event::Kind::kExit || e.child == next.child);
    });
    if (repeat) continue;
    std::vector<Event> longer = events_so_far;
    longer.push_back(next);
    explore(config, longer, depth, alphabet, out);
  }
}

// Events per sequence: DDPRUN_SEQUENCE_DEPTH, else 6 (4 under the sanitizers: their job
// is the memory of every path the policy takes, and the optimized build explores the
// sequences to 6; at 5 the unoptimized sanitized runs took 500 s of CPU in CI, head mode
// 221 s of it, against 40 s for head mode at 6 optimized).
std::size_t depth() {
  return exploration_depth("DDPRUN_SEQUENCE_DEPTH", 6, 4);
}

class SupervisionSequences : public ::testing::TestWithParam<Mode> {};

TEST_P(SupervisionSequences, EverySequenceKeepsTheInvariants) {
  const Mode mode = GetParam();
  long total = 0;
  for (const int notice : {killed(SIGUSR1), exited(kExitPreempted)}) {
    for (const bool exit_timeout : {false, true}) {
      for (const bool signals : {false, true}) {
        if (mode == Mode::kAgent && signals) continue;  // agents never restart
        Config config{mode, notice, exit_timeout, signals};
        Exploration result;
        // The exit timeout and --restart-on add less: one event fewer for them; so do the
        // workers' answer to a notice in head mode, whose alphabet (the agent's reports) is
        // the largest.
        const bool fewer =
            exit_timeout || signals || (mode == Mode::kHead && notice == exited(kExitPreempted));
        const std::size_t d = depth() - (fewer && depth() > 4 ? 1 : 0);
        explore(config, {}, d, alphabet(mode, !exit_timeout), result);
        total += result.sequences;
        for (const std::string& v : result.violations) ADD_FAILURE() << v;
      }
    }
  }
  std::printf("[ explored ] %ld sequences in %s mode (up to %zu events)\n", total, mode_name(mode),
              depth());
}

// --restart-scope rank on a node of its own: the replacements' own ends join the alphabet
// (one event fewer: it is the largest). Beyond the invariants above: a rank is replaced
// only at the moment it was lost, never after a stop, at most --max-restarts times with
// the full restarts, and every child started, replacements included, is reaped.
TEST(SupervisionSequencesRankScope, EverySequenceKeepsTheInvariants) {
  long total = 0;
  const std::size_t d = depth() > 4 ? depth() - 1 : depth();
  for (const int notice : {killed(SIGUSR1), exited(kExitPreempted)}) {
    for (const bool exit_timeout : {false, true}) {
      Config config{Mode::kLocal, notice, exit_timeout, false, true};
      Exploration result;
      explore(config, {}, d - (exit_timeout || notice != killed(SIGUSR1) ? 1 : 0),
              alphabet(Mode::kLocal, !exit_timeout, true), result);
      total += result.sequences;
      for (const std::string& v : result.violations) ADD_FAILURE() << v;
    }
  }
  std::printf(
      "[ explored ] %ld sequences in local mode with --restart-scope rank (up to %zu "
      "events)\n",
      total, d);
}

INSTANTIATE_TEST_SUITE_P(Modes, SupervisionSequences,
                         ::testing::Values(Mode::kLocal, Mode::kHead, Mode::kAgent),
                         [](const ::testing::TestParamInfo<Mode>& param) {
                           return std::string(mode_name(param.param));
                         });

}  // namespace
}  // namespace ddprun
