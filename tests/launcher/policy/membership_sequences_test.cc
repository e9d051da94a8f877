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
// With a spare node (the second exploration) node 1 may be lost, and the spare that takes
// its ranks may report and be lost in turn:
// - a lost node's ranks cost one recovery each, and no start (here or on the spare) goes
//   beyond what this node, node 1 and the spare used together;
// - a node lost while the round runs, with its part heard and the budget for its ranks, has
//   them started on the spare at once;
// - from node 1's loss until the spare said who runs there, no membership is whole; a whole
//   one after it names the spare's processes, with every recovery counted;
// - a round that stopped nobody ends the job with 0 and no restart.
// The third exploration is an ssh tree: the node with ranks 2 and 3 is node 2, below node
// 1's agent (the head's child, which reports its own empty part and passes on node 2's), and
// that node's loss is node 1's agent handing it up (NodeEvent::kLost) while the agent goes
// on: the same invariants hold, counting what the agent passes on of node 2 after the loss as
// nothing. The fourth is the same tree where node 1's agent itself may be lost, and node 2
// with it (or handed up before it): node 1's place goes to an agent on node 1 again (its part
// has no ranks), node 2's to the spare, at the first of the two losses and only then.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <functional>
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
constexpr int kBudget = 2;       // --max-restarts
constexpr int kSpareBudget = 3;  // with a spare node: node 1's 2 ranks and one more
// Who an event is about: the round's first children, the replacements here (in start order),
// the spare node's agent.
constexpr std::size_t kAgent = 2;
constexpr std::size_t kFirstReplacement = 3;
constexpr std::size_t kSpare = 6;  // after up to 3 replacements here
const char* const kSpareHost = "spare";

struct Event {
  enum class Kind { kLost, kDone, kReport, kSpareReport, kNodeFails, kStop, kHandUp };
  Kind kind = Kind::kLost;
  // kLost, kDone: 0, 1, a replacement (3, 4), node 1's agent (kAgent: exits 255, no report
  // of its own: lost), the spare's (kSpare)
  std::size_t child = 0;
  int recoveries = 0;  // kReport, kSpareReport
};

std::string describe(const std::vector<Event>& events) {
  std::ostringstream out;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    out << " [" << (i + 1) * kStep.count() << " ms] ";
    switch (e.kind) {
      case Event::Kind::kLost:
        out << (e.child == kAgent   ? std::string("node 1 lost")
                : e.child == kSpare ? std::string("the spare lost")
                                    : "child " + std::to_string(e.child) + " killed");
        break;
      case Event::Kind::kDone:
        out << "child " << e.child << " exits 0";
        break;
      case Event::Kind::kReport:
        out << "node 1 reports " << e.recoveries << " replacement(s)";
        break;
      case Event::Kind::kSpareReport:
        out << "the spare reports " << e.recoveries << " replacement(s)";
        break;
      case Event::Kind::kNodeFails:
        out << "node 1 fails";
        break;
      case Event::Kind::kStop:
        out << "SIGTERM";
        break;
      case Event::Kind::kHandUp:
        out << "node 1's agent hands up node 2";
        break;
    }
    out << ";";
  }
  return out.str();
}

// Node 1's part; the spare's (spare: ranks 2 and 3 replaced from the start, pids from 700).
Membership node1_part(int recoveries, bool spare = false) {
  Membership part;
  part.version = 1;
  part.recoveries = recoveries;
  const auto state = [](bool replaced) {
    return replaced ? Membership::State::kReplaced : Membership::State::kRunning;
  };
  const pid_t first = spare ? 700 : 502;
  part.ranks = {
      {2, state(spare), first},
      {3, state(spare || recoveries > 0), recoveries > 0 ? first + 100 + recoveries : first + 1}};
  return part;
}

struct Run {
  int exit_code = -1;
  bool waits_forever = false;
  std::string refused;                    // the fake runner's own checks
  std::vector<Ms> replacement_starts;     // when each replacement here started
  std::optional<Ms> spare_start;          // when the spare's agent started
  std::vector<std::pair<Ms, int>> asked;  // when the policy asked for a node's spare, and whose
};

// The tree: node 1's agent (kAgent) has node 2 below it, which holds ranks 2 and 3 (what
// the other explorations call node 1's), its loss handed up.
constexpr int kTreeParent = 1;
constexpr int kTreeLost = 2;
// The subtree: node 1's own place, reached again when its agent is lost.
const char* const kParentAgainHost = "node1again";

NodeEvent handed_up_node1() {
  NodeEvent lost;
  lost.kind = NodeEvent::Kind::kLost;
  lost.node = kTreeLost;
  lost.code = 255;
  lost.what = "node 2 (node2) was lost (its ddprun ended: exit code 255)";
  return lost;
}

// With `spare`, one spare node can take node 1's ranks; with `tree`, those ranks are node 2's,
// below node 1's agent (kAgent), which hands node 2 up when it is lost; with `subtree` as
// well, a loss of kAgent is its own (node 2 goes with it) and kHandUp hands node 2 up.
Run run_sequence(FakeRunner& runner, const std::vector<Event>& events, bool spare = false,
                 bool tree = false, bool subtree = false) {
  JobSettings settings;
  settings.max_restarts = spare ? kSpareBudget : kBudget;
  settings.round.restart_scope = RestartScope::kRank;
  settings.round.recovery_window = Ms(50);
  settings.round.shutdown_grace = kGrace;
  settings.summaries = false;
  settings.tables = false;
  std::vector<std::optional<std::pair<Ms, int>>> exits(kSpare + 1);
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    const Ms at = kStep * static_cast<int>(i + 1);
    switch (e.kind) {
      case Event::Kind::kLost:
      case Event::Kind::kDone:
        if (tree && !subtree && e.child == kAgent && e.kind == Event::Kind::kLost) {
          runner.report_at(0, at, kAgent, handed_up_node1());
          break;
        }
        if (!exits[e.child]) {
          const bool agent = e.child == kAgent || e.child == kSpare;
          exits[e.child] = {at, e.kind == Event::Kind::kDone ? exited(0)
                                : agent                      ? exited(255)
                                                             : killed(SIGKILL)};
        }
        break;
      case Event::Kind::kReport:
        runner.report_membership_at(0, at, kAgent, tree ? kTreeLost : 1, node1_part(e.recoveries));
        break;
      case Event::Kind::kSpareReport:
        runner.report_membership_from_host_at(0, at, kSpareHost, tree ? kTreeLost : 1,
                                              node1_part(e.recoveries, /*spare=*/true));
        break;
      case Event::Kind::kNodeFails:
        if (!exits[kAgent]) exits[kAgent] = {at, exited(1)};
        break;
      case Event::Kind::kStop:
        runner.signal_at(0, at, SIGTERM);
        break;
      case Event::Kind::kHandUp:
        runner.report_at(0, at, kAgent, handed_up_node1());
        break;
    }
  }
  // Node 1 reached again says who runs there (nobody) soon after its start.
  for (std::size_t i = 0; subtree && i <= events.size(); ++i) {
    runner.report_membership_from_host_at(0, kStep * static_cast<int>(i + 1) + Ms(10),
                                          kParentAgainHost, kTreeParent, Membership{});
  }
  Run run;
  runner.waits_forever_after = Ms(20000);
  runner.behaviour = [&](int round, std::size_t child) {
    FakeBehaviour b;
    b.exit_after = Ms(round > 0 ? 1 : 1000);  // a rank left alone finishes after 1 s
    const ChildSpec& spec = runner.started.at(static_cast<std::size_t>(round)).at(child);
    b.exits_like_agent = spec.agent;
    if (round > 0) return b;
    std::size_t who = child;
    if (spec.host == kParentAgainHost) return b;  // node 1 again: no rank, runs to the end
    if (spec.host == kSpareHost) {
      who = kSpare;
      run.spare_start = runner.elapsed();
    } else if (child >= kFirstReplacement) {
      who = kFirstReplacement + run.replacement_starts.size();
      run.replacement_starts.push_back(runner.elapsed());
    }
    if (who < exits.size() && exits[who]) {
      b.exit_after = std::max(Ms(1), exits[who]->first - runner.elapsed());
      b.exit_status = exits[who]->second;
    }
    return b;
  };
  std::vector<ChildSpec> children(3);
  for (std::size_t i = 0; i < children.size(); ++i) children[i].rank = static_cast<int>(i);
  children[kAgent].agent = true;
  children[kAgent].node_rank = 1;
  children[kAgent].rank = -1;
  children[kAgent].host = "node1";
  if (tree) {
    children[kAgent].node_rank = kTreeParent;
    children[kAgent].control_nodes = 2;                                        // node 1 and node 2
    runner.report_membership_at(0, Ms(1), kAgent, kTreeParent, Membership{});  // no ranks
  }
  int spares_left = 1;
  const SpareNodes spares = [&](int node) -> std::optional<SpareNode> {
    run.asked.emplace_back(runner.elapsed(), node);
    if (subtree && node == kTreeParent) {
      SpareNode again{children[kAgent]};
      again.agent.host = kParentAgainHost;
      again.agent.control_nodes = 1;
      again.again = true;
      return again;
    }
    if (node != (tree ? kTreeLost : 1)) {
      throw std::logic_error("a spare asked for node " + std::to_string(node));
    }
    if (spares_left == 0) return std::nullopt;
    --spares_left;
    SpareNode taken{children[kAgent]};
    taken.agent.host = kSpareHost;
    taken.agent.node_rank = tree ? kTreeLost : 1;
    taken.agent.control_nodes = 1;
    return taken;
  };
  std::ostringstream messages;
  try {
    run.exit_code = run_job(
        runner, settings,
        [&](int, const RoundResult*) {
          RoundSetup setup{children, "", "", ""};
          if (spare) setup.spares = spares;
          return setup;
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

std::optional<Ms> time_of(const std::vector<Event>& events, Event::Kind kind, std::size_t who) {
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].kind == kind && (kind != Event::Kind::kLost || events[i].child == who))
      return kStep * static_cast<int>(i + 1);
  }
  return std::nullopt;
}

// The first invariant a run with a spare node broke, or empty. In the tree, what node 1's
// agent passes on of node 2 counts until node 2's loss only (its own part has no ranks).
std::string check_spare(const FakeRunner& runner, const Run& run, const std::vector<Event>& events,
                        bool tree = false, bool subtree = false) {
  if (!run.refused.empty()) return "the fake runner refused: " + run.refused;
  if (run.waits_forever) return "the job waits forever";
  std::optional<Ms> stopped;  // the round's first stop, by the policy or a signal to ddprun
  for (const auto& s : runner.sent) {
    if (s.round == 0) stopped = std::min(stopped.value_or(s.at), s.at);
  }
  const auto stop_signal = time_of(events, Event::Kind::kStop, 0);
  // Node 2's loss: node 1's (with node 2 below it in the subtree), or its hand-up.
  auto node_lost = time_of(events, Event::Kind::kLost, kAgent);
  if (const auto handed_up = time_of(events, Event::Kind::kHandUp, 0); subtree && handed_up) {
    node_lost = std::min(node_lost.value_or(*handed_up), *handed_up);
  }

  const auto started_by = [&](Ms at) {  // recoveries started by `at`, here and on the spare
    const auto local = std::count_if(run.replacement_starts.begin(), run.replacement_starts.end(),
                                     [&](Ms t) { return t <= at; });
    return static_cast<int>(local) + (run.spare_start && *run.spare_start <= at ? 2 : 0);
  };
  // Node 1's and the spare's own replacements as heard before `at`: each only adds up.
  const auto remote_before = [&](Ms at) {
    int node1 = 0, spare = 0;
    for (std::size_t i = 0; i < runner.parts_heard.size(); ++i) {
      const auto& [t, n] = runner.parts_heard[i];
      if (t >= at) continue;
      const bool from_parent = runner.parts_heard_from[i] == kAgent;
      // The tree: node 2's last words through node 1's agent once the spare stands for it.
      if (tree && from_parent && run.spare_start && node_lost && t >= *node_lost) continue;
      int& heard = from_parent ? node1 : spare;
      heard = std::max(heard, n);
    }
    return node1 + spare;
  };
  std::vector<Ms> starts = run.replacement_starts;
  if (run.spare_start) starts.push_back(*run.spare_start);
  for (const Ms start : starts) {
    if (stop_signal && start >= *stop_signal) return "a recovery started after a stop signal";
    if (started_by(start) + remote_before(start) > kSpareBudget) {
      return "a recovery started beyond the job's budget";
    }
  }
  if (run.spare_start && (!node_lost || *run.spare_start != *node_lost)) {
    return "the spare started other than at node 1's loss";
  }
  // Once moved, node 2 moves again only when the spare that stands for it is lost.
  const auto spare_lost = time_of(events, Event::Kind::kLost, kSpare);
  for (const auto& [at, node] : run.asked) {
    if (node == (tree ? kTreeLost : 1) && run.spare_start && at > *run.spare_start &&
        (!spare_lost || at != *spare_lost)) {
      return "node 2 was moved again while the spare stood for it";
    }
  }
  // Node 1's agent lost with node 2 already on the spare: node 1's place (no rank, no
  // recovery) is reached again at once, whatever the budget left.
  const auto agent_lost = time_of(events, Event::Kind::kLost, kAgent);
  if (subtree && agent_lost && run.spare_start && *run.spare_start < *agent_lost &&
      (!spare_lost || *spare_lost > *agent_lost) && (!stopped || *stopped >= *agent_lost) &&
      std::find(run.asked.begin(), run.asked.end(), std::make_pair(*agent_lost, kTreeParent)) ==
          run.asked.end()) {
    return "node 1's agent was lost after node 2 moved, and node 1 was not reached again";
  }
  bool node1_heard = false;  // before its loss, through its own agent (the tree: node 1's)
  for (std::size_t i = 0; i < runner.parts_heard.size(); ++i) {
    node1_heard = node1_heard || (runner.parts_heard_from[i] == kAgent &&
                                  runner.parts_heard_node[i] == (tree ? kTreeLost : 1) &&
                                  (!node_lost || runner.parts_heard[i].first < *node_lost));
  }
  if (node_lost && !run.spare_start && (!stopped || *stopped >= *node_lost) && node1_heard &&
      started_by(*node_lost) + remote_before(*node_lost) + 2 <= kSpareBudget) {
    return "node 1 was lost with the budget for its ranks, and the spare did not start";
  }
  // The membership.
  std::optional<Ms> spare_heard;
  for (std::size_t i = 0; i < runner.parts_heard.size(); ++i) {
    if (runner.parts_heard_from[i] != kAgent &&
        runner.parts_heard_node[i] == (tree ? kTreeLost : 1)) {
      spare_heard = runner.parts_heard[i].first;
      break;
    }
  }
  for (const auto& published : runner.memberships) {
    if (published.round != 0 || !published.whole) continue;
    const Membership& m = published.membership;
    if (m.ranks.size() != 4) return "a whole membership without every rank";
    if (!run.spare_start || published.at < *run.spare_start) continue;
    if (!spare_heard || published.at < *spare_heard) {
      return "a whole membership after node 1's loss before the spare said who runs there";
    }
    if (m.ranks[2].pid < 700 || m.ranks[3].pid < 700 ||
        m.ranks[2].state != Membership::State::kReplaced) {
      return "a whole membership after the move without the spare's processes";
    }
    const int remote = remote_before(published.at + Ms(1));
    const int high = started_by(published.at) + remote;
    const int low = started_by(published.at - Ms(1)) + remote;
    if (m.recoveries < low || m.recoveries > high) {
      return "a membership's recoveries are " + std::to_string(m.recoveries) + ", not " +
             std::to_string(high);
    }
  }
  if (!runner.round_ends.empty() && !stopped &&
      (runner.started.size() != 1 || run.exit_code != 0)) {
    return "a round that stopped nobody did not end the job with 0";
  }
  return {};
}

// Runs `events` and says the first invariant the run broke, or empty.
using Checked = std::function<std::string(const std::vector<Event>&)>;

void explore(std::vector<Event>& events, std::size_t depth, const std::vector<Event>& alphabet,
             const Checked& checked, Exploration& out) {
  if (!events.empty()) out.add(checked(events), [&] { return describe(events); });
  if (events.size() == depth) return;
  for (const Event& next : alphabet) {
    // A child ends once, node 1 fails once, and one stop is enough.
    const auto reports = [](const Event& e) {
      return e.kind == Event::Kind::kReport || e.kind == Event::Kind::kSpareReport;
    };
    const bool repeat = std::any_of(events.begin(), events.end(), [&](const Event& e) {
      return !reports(next) && !reports(e) && e.child == next.child;
    });
    if (repeat) continue;
    events.push_back(next);
    explore(events, depth, alphabet, checked, out);
    events.pop_back();
  }
}

void explore_all(const std::vector<Event>& alphabet, const char* depth_name, const char* what,
                 const Checked& checked) {
  const std::size_t depth = exploration_depth(depth_name, 6, 4);
  Exploration out;
  std::vector<Event> events;
  explore(events, depth, alphabet, checked, out);
  for (const std::string& v : out.violations) ADD_FAILURE() << v;
  std::printf("[ explored ] %ld sequences of a head with %s (up to %zu events)\n", out.sequences,
              what, depth);
  EXPECT_GT(out.sequences, 1000);
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
  explore_all(alphabet, "DDPRUN_MEMBERSHIP_DEPTH", "node 1's membership",
              [](const std::vector<Event>& events) {
                FakeRunner runner;
                const auto run = run_sequence(runner, events);
                return check(runner, run, events);
              });
}

// With a spare node: a rank here, a replacement, node 1 and the spare lost; node 1 and the
// spare reporting 0 or 1 replacements; a stop.
std::vector<Event> spare_alphabet() {
  std::vector<Event> alphabet;
  for (const std::size_t child :
       {std::size_t{0}, std::size_t{1}, kFirstReplacement, kAgent, kSpare})
    alphabet.push_back({Event::Kind::kLost, child, 0});
  for (int r = 0; r <= 1; ++r) {
    alphabet.push_back({Event::Kind::kReport, 99, r});
    alphabet.push_back({Event::Kind::kSpareReport, 97, r});
  }
  alphabet.push_back({Event::Kind::kStop, 98, 0});
  return alphabet;
}

TEST(MembershipSequences, ALostNodesRanksMoveToTheSpareWithinTheBudgetAndTheMembershipWaits) {
  const std::vector<Event> alphabet = spare_alphabet();
  explore_all(alphabet, "DDPRUN_SPARE_NODE_DEPTH", "a spare node",
              [](const std::vector<Event>& events) {
                FakeRunner runner;
                const auto run = run_sequence(runner, events, /*spare=*/true);
                return check_spare(runner, run, events);
              });
}

TEST(MembershipSequences, ANodeLostBelowATreeAgentMovesToTheSpareAsALostAgentWould) {
  const std::vector<Event> alphabet = spare_alphabet();
  explore_all(alphabet, "DDPRUN_SPARE_NODE_DEPTH", "a node below a tree agent",
              [](const std::vector<Event>& events) {
                FakeRunner runner;
                const auto run = run_sequence(runner, events, /*spare=*/true, /*tree=*/true);
                return check_spare(runner, run, events, /*tree=*/true);
              });
}

TEST(MembershipSequences, AnInnerTreeAgentLostMovesTheNodeBelowItOnceAndWithinTheBudget) {
  std::vector<Event> alphabet = spare_alphabet();
  alphabet.push_back({Event::Kind::kHandUp, 96, 0});
  explore_all(alphabet, "DDPRUN_SPARE_NODE_DEPTH", "an inner node of the tree",
              [](const std::vector<Event>& events) {
                FakeRunner runner;
                const auto run = run_sequence(runner, events, /*spare=*/true, /*tree=*/true,
                                              /*subtree=*/true);
                return check_spare(runner, run, events, /*tree=*/true, /*subtree=*/true);
              });
}

}  // namespace
}  // namespace ddprun
