// --restart-scope rank over several nodes, from the head's side (round.h): ranks 0 and 1
// here, ranks 2 and 3 behind node 1's ddprun, which replaces its own and reports its part of
// the membership. Every sequence of up to 6 events (a rank here lost or done, its
// replacements lost, node 1 reporting 0 to 3 replacements, node 1 failing, a stop signal)
// runs against the policy with the fake runner, and after each these hold:
// - the budget is the job's: no replacement starts here once this node's and node 1's
//   together used --max-restarts, and a report that goes beyond it stops the round at once,
//   which then never restarts;
// - the membership is whole (ranks 0-3, once each) only once node 1 said who runs there, and
//   its recoveries are this node's and node 1's;
// - nothing is replaced after a stop, and every child is reaped.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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

constexpr Ms kStep{100};  // event i happens at (i + 1) steps
constexpr Ms kGrace{350};
constexpr int kBudget = 2;  // --max-restarts
constexpr std::size_t kAgent = 2;
constexpr std::size_t kFirstReplacement = 3;
constexpr std::size_t kReplacements = 2;

struct Event {
  enum class Kind { kLost, kDone, kReport, kNodeFails, kStop };
  Kind kind = Kind::kLost;
  std::size_t child = 0;  // kLost, kDone: 0, 1, or a replacement (3, 4 in start order)
  int recoveries = 0;     // kReport
};

std::string describe(const std::vector<Event>& events) {
  std::ostringstream out;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    out << " [" << (i + 1) * kStep.count() << " ms] ";
    switch (e.kind) {
      case Event::Kind::kLost:
        out << "child " << e.child << " killed";
        break;
      case Event::Kind::kDone:
        out << "child " << e.child << " exits 0";
        break;
      case Event::Kind::kReport:
        out << "node 1 reports " << e.recoveries << " replacement(s)";
        break;
      case Event::Kind::kNodeFails:
        out << "node 1 fails";
        break;
      case Event::Kind::kStop:
        out << "SIGTERM";
        break;
    }
    out << ";";
  }
  return out.str();
}

Membership node1_part(int recoveries) {
  Membership part;
  part.version = 1;
  part.recoveries = recoveries;
  part.ranks = {{2, Membership::State::kRunning, 502},
                {3, recoveries > 0 ? Membership::State::kReplaced : Membership::State::kRunning,
                 recoveries > 0 ? 600 + recoveries : 503}};
  return part;
}

struct Run {
  int exit_code = -1;
  bool waits_forever = false;
  std::string refused;                 // the fake runner's own checks
  std::vector<Ms> replacement_starts;  // when each replacement here started
};

Run run_sequence(FakeRunner& runner, const std::vector<Event>& events) {
  JobSettings settings;
  settings.max_restarts = kBudget;
  settings.round.restart_scope = RestartScope::kRank;
  settings.round.recovery_window = Ms(50);
  settings.round.shutdown_grace = kGrace;
  settings.summaries = false;
  settings.tables = false;
  std::vector<std::optional<std::pair<Ms, int>>> exits(kFirstReplacement + kReplacements);
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    const Ms at = kStep * static_cast<int>(i + 1);
    switch (e.kind) {
      case Event::Kind::kLost:
      case Event::Kind::kDone:
        if (!exits[e.child]) {
          exits[e.child] = {at, e.kind == Event::Kind::kLost ? killed(SIGKILL) : exited(0)};
        }
        break;
      case Event::Kind::kReport:
        runner.report_membership_at(0, at, kAgent, 1, node1_part(e.recoveries));
        break;
      case Event::Kind::kNodeFails:
        if (!exits[kAgent]) exits[kAgent] = {at, exited(1)};
        break;
      case Event::Kind::kStop:
        runner.signal_at(0, at, SIGTERM);
        break;
    }
  }
  Run run;
  runner.waits_forever_after = Ms(20000);
  runner.behaviour = [&](int round, std::size_t child) {
    FakeBehaviour b;
    b.exit_after = Ms(round > 0 ? 1 : 1000);  // a rank left alone finishes after 1 s
    b.exits_like_agent = child == kAgent;
    if (round > 0) return b;
    if (child >= kFirstReplacement) run.replacement_starts.push_back(runner.elapsed());
    if (child < exits.size() && exits[child]) {
      b.exit_after = std::max(Ms(1), exits[child]->first - runner.elapsed());
      b.exit_status = exits[child]->second;
    }
    return b;
  };
  std::vector<ChildSpec> children(3);
  for (std::size_t i = 0; i < children.size(); ++i) children[i].rank = static_cast<int>(i);
  children[kAgent].agent = true;
  children[kAgent].node_rank = 1;
  children[kAgent].rank = -1;
  std::ostringstream messages;
  try {
    run.exit_code = run_job(
        runner, settings,
        [&](int, const RoundResult*) {
          return RoundSetup{children, "", "", ""};
        },
        messages);
  } catch (const WaitsForever&) {
    run.waits_forever = true;
  } catch (const std::logic_error& e) {
    run.refused = e.what();
  }
  return run;
}

// The first invariant the run broke, or empty.
std::string check(const FakeRunner& runner, const Run& run, const std::vector<Event>& events) {
  if (!run.refused.empty()) return "the fake runner refused: " + run.refused;
  if (run.waits_forever) return "the job waits forever";
  // The round's first stop, by the policy or a signal to ddprun.
  std::optional<Ms> stopped;
  for (const auto& s : runner.sent) {
    if (s.round == 0 && s.signal_number != SIGUSR1)
      stopped = std::min(stopped.value_or(s.at), s.at);
  }
  std::optional<Ms> stop_signal;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Ms at = kStep * static_cast<int>(i + 1);
    if (events[i].kind == Event::Kind::kStop && !stop_signal) stop_signal = at;
  }

  const auto local_by = [&](Ms at) {  // replacements started here by `at`
    return static_cast<int>(std::count_if(run.replacement_starts.begin(),
                                          run.replacement_starts.end(),
                                          [&](Ms t) { return t <= at; }));
  };
  // Node 1's replacements as the head heard them before `at` (none once node 1 ended).
  const auto remote_before = [&](Ms at) {
    int recoveries = 0;
    for (const auto& [t, n] : runner.parts_heard) {
      if (t < at) recoveries = std::max(recoveries, n);  // they only add up
    }
    return recoveries;
  };
  for (const Ms start : run.replacement_starts) {
    if (stop_signal && start >= *stop_signal) return "a replacement started after a stop signal";
    if (local_by(start) + remote_before(start) > kBudget) {
      return "a replacement started beyond the job's budget";
    }
  }
  // A report beyond the budget while the round ran stops it at once, with no restart.
  for (const auto& [at, recoveries] : runner.parts_heard) {
    if (stopped && *stopped < at) break;  // the round was stopping already
    if (runner.round_ends.empty() || runner.round_ends[0] <= at) break;
    if (local_by(at) + recoveries > kBudget) {
      if (!stopped || *stopped != at) return "a report beyond the budget did not stop the round";
      if (runner.started.size() != 1) return "the job restarted after its budget was spent";
      if (run.exit_code == 0) return "the job succeeded after its budget was spent";
      break;
    }
  }
  // The membership: whole only with node 1's part, ranks 0-3 once, the recoveries summed.
  for (const auto& published : runner.memberships) {
    if (published.round != 0 || !published.whole) continue;
    const Membership& m = published.membership;
    if (m.ranks.size() != 4) return "a whole membership without every rank";
    for (std::size_t r = 0; r < m.ranks.size(); ++r) {
      if (m.ranks[r].rank != static_cast<int>(r)) return "a whole membership out of order";
    }
    // At the moment of a loss here, the loss is published before its replacement.
    const int remote = remote_before(published.at + Ms(1));
    const int high = local_by(published.at) + remote, low = local_by(published.at - Ms(1)) + remote;
    if (m.recoveries < low || m.recoveries > high) {
      return "a membership's recoveries are " + std::to_string(m.recoveries) + ", not " +
             std::to_string(high);
    }
  }
  std::optional<Ms> first_report;
  if (!runner.parts_heard.empty()) first_report = runner.parts_heard.front().first;
  for (const auto& published : runner.memberships) {
    if (published.round == 0 && published.whole &&
        (!first_report || published.at < *first_report)) {
      return "a whole membership before node 1 said who runs there";
    }
  }
  return {};
}

void explore(std::vector<Event>& events, std::size_t depth, const std::vector<Event>& alphabet,
             Exploration& out) {
  if (!events.empty()) {
    FakeRunner runner;
    const Run run = run_sequence(runner, events);
    out.add(check(runner, run, events), [&] { return describe(events); });
  }
  if (events.size() == depth) return;
  for (const Event& next : alphabet) {
    // A child ends once, node 1 fails once, and one stop is enough.
    const bool repeat = std::any_of(events.begin(), events.end(), [&](const Event& e) {
      return next.kind != Event::Kind::kReport && e.kind != Event::Kind::kReport &&
             e.child == next.child;
    });
    if (repeat) continue;
    events.push_back(next);
    explore(events, depth, alphabet, out);
    events.pop_back();
  }
}

TEST(MembershipSequences, TheHeadKeepsTheBudgetAndPublishesWholeMembershipsOnly) {
  std::vector<Event> alphabet;
  for (const std::size_t child :
       {std::size_t{0}, std::size_t{1}, kFirstReplacement, kFirstReplacement + 1}) {
    alphabet.push_back({Event::Kind::kLost, child, 0});
  }
  alphabet.push_back({Event::Kind::kDone, 0, 0});
  for (int r = 0; r <= 3; ++r) alphabet.push_back({Event::Kind::kReport, 99, r});
  alphabet.push_back({Event::Kind::kNodeFails, kAgent, 0});
  alphabet.push_back({Event::Kind::kStop, 98, 0});
  const std::size_t depth = exploration_depth("DDPRUN_MEMBERSHIP_DEPTH", 6, 4);
  Exploration out;
  std::vector<Event> events;
  explore(events, depth, alphabet, out);
  for (const std::string& v : out.violations) ADD_FAILURE() << v;
  std::printf("[ explored ] %ld sequences of a head with node 1's membership (up to %zu events)\n",
              out.sequences, depth);
  EXPECT_GT(out.sequences, 1000);
}

}  // namespace
}  // namespace ddprun
