// Node 0 of per-node rounds against every sequence of up to kDepth events across two gathers
// and the two rounds after them (docs/multinode.md, "One ddprun per node"): the gather's
// decisions (Gathering, gathering.h) and the round's policy (run_job) together, as
// gather_nodes and run_rounds put them together. Node 1 joins, leaves, reports the end of a
// round node 0 gave up on, is stopped or gets a notice; ddprun gets stop signals, notices and
// SIGHUP (which detaches, or stops), and ddprun --stop; the join timeout passes; in the rounds
// node 0's worker fails, exits 0 or exits 75 unprompted, node 1 is lost, fails, drains, is
// stopped or noticed, and ddprun gets signals. After each sequence the invariants are checked:
// a round starts only when node 1 is in (no node waits for one that has left, none is
// counted that left); the first stop or notice of a gather ends the job there with its code;
// no round starts after a stop or a notice anywhere; a notice ends the job drained (75) unless
// a stop came first or the job had already succeeded; a SIGHUP that detaches ends nothing and
// is raised again for the round; every node's exit code is node 0's (what node 0 tells them).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ddprun/contract/errors.h"
#include "exploration.h"
#include "fake_runner.h"
#include "policy/gathering.h"
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
constexpr Ms kStep{100};  // a round's k-th event happens (k + 1) steps after its start

// Phases: 0 the gather before round 0, 1 round 0, 2 the gather before round 1, 3 round 1.
bool is_gather(int phase) {
  return phase % 2 == 0;
}
int round_of(int phase) {
  return phase / 2;
}

struct Step {
  enum class Kind {
    // In a gather:
    kJoin,         // node 1 joins (again)
    kLeave,        // node 1's connection ends (or it falls silent)
    kReport,       // node 1 sends the exit report of the round node 0 gave up on
    kNodeStop,     // node 1 is stopped (SIGTERM)
    kNodeNotice,   // node 1 gets a notice (SIGUSR1)
    kControlStop,  // ddprun --stop
    kTimeout,      // the join timeout passes
    // In a gather or a round:
    kSignal,  // ddprun gets `value`
    // In a round:
    kExit,      // child `child` exits with wait status `value`
    kNodeSays,  // node 1 reports it was stopped (value 1) or got a notice (2)
  };
  int phase = 0;
  Kind kind = Kind::kJoin;
  std::size_t child = 0;
  int value = 0;
};

struct Config {
  bool hangup_detaches = false;
  bool worker_answers_notice_at_once = true;  // else it ignores it (and ends by an event)
  // A gather that never hears of events of this kind: how the defects of the issue on nodes
  // that leave looked (a notice read and forgotten, a joiner that died still counted, a deaf
  // job handle, ...), to show that the invariants catch each.
  std::optional<GatherEvent::Kind> deaf_to;
};

std::string describe(const Step& s) {
  std::string what;
  switch (s.kind) {
    case Step::Kind::kJoin:
      what = "node 1 joins";
      break;
    case Step::Kind::kLeave:
      what = "node 1 leaves";
      break;
    case Step::Kind::kReport:
      what = "node 1 reports its round's end";
      break;
    case Step::Kind::kNodeStop:
      what = "node 1 stopped";
      break;
    case Step::Kind::kNodeNotice:
      what = "node 1 noticed";
      break;
    case Step::Kind::kControlStop:
      what = "ddprun --stop";
      break;
    case Step::Kind::kTimeout:
      what = "join timeout";
      break;
    case Step::Kind::kSignal:
      what = "signal " + std::to_string(s.value);
      break;
    case Step::Kind::kExit:
      what = "child " + std::to_string(s.child) +
             (WIFEXITED(s.value) ? " exits " + std::to_string(WEXITSTATUS(s.value))
                                 : " killed by " + std::to_string(WTERMSIG(s.value)));
      break;
    case Step::Kind::kNodeSays:
      what = s.value == 1 ? "node 1 says it was stopped" : "node 1 says it got a notice";
      break;
  }
  static const char* const kPhases[] = {"gather 0", "round 0", "gather 1", "round 1"};
  return std::string(kPhases[s.phase]) + ": " + what;
}

std::string describe(const Config& config, const std::vector<Step>& steps) {
  std::ostringstream out;
  out << (config.hangup_detaches ? "SIGHUP detaches" : "SIGHUP stops")
      << (config.worker_answers_notice_at_once ? ", worker drains at once" : ", worker drains late")
      << ":";
  for (const Step& s : steps) out << " " << describe(s) << ";";
  return out.str();
}

std::vector<Step> alphabet(int phase, const Config& config) {
  std::vector<Step> out;
  using K = Step::Kind;
  if (is_gather(phase)) {
    for (K kind : {K::kJoin, K::kLeave, K::kReport, K::kNodeStop, K::kNodeNotice, K::kControlStop,
                   K::kTimeout}) {
      out.push_back({phase, kind});
    }
    for (int sig : {SIGTERM, SIGUSR1, SIGHUP}) out.push_back({phase, K::kSignal, 0, sig});
    return out;
  }
  // Child 0: node 0's worker; child 1: node 1 behind its connection.
  for (int status : {exited(0), exited(1), exited(kExitPreempted)}) {
    out.push_back({phase, K::kExit, 0, status});
  }
  for (int status : {exited(1), exited(255)}) out.push_back({phase, K::kExit, 1, status});
  out.push_back({phase, K::kNodeSays, 1, 1});
  out.push_back({phase, K::kNodeSays, 1, 2});
  for (int sig : {SIGTERM, SIGUSR1}) out.push_back({phase, K::kSignal, 0, sig});
  if (!config.hangup_detaches) out.push_back({phase, K::kSignal, 0, SIGHUP});
  return out;
}

// What one gather decided, and where node 1 stood when it began.
struct GatherRecord {
  GatherVerdict verdict;
  bool in_at_start = false;
  bool finishing_at_start = false;
};

struct Outcome {
  bool redundant = false;  // an event that never happens (after its phase was decided)
  bool waits_forever = false;
  std::string problem;  // the fake runner refused what the policy did
  int exit_code = -1;
  int told = -1;  // what node 1 was told: the job's end
  std::vector<GatherRecord> gathers;
};

// Where node 1 stands after round `round` (the I/O the real host does, as add_peer_nodes
// and peer_round_line do it): a node that ended its round by itself sent its exit report; one
// that exited 255 lost its connection (it left); one node 0 gave up on (SIGKILL) owes it.
std::optional<GatherEvent::Kind> node1_after(const FakeRunner& runner, int round) {
  for (const auto& h : runner.happened) {
    if (h.round != round || !h.exit || h.child != 1) continue;
    if (WIFSIGNALED(h.status_or_signal)) return std::nullopt;
    if (WEXITSTATUS(h.status_or_signal) == 255) return GatherEvent::Kind::kLeft;
    return GatherEvent::Kind::kReported;
  }
  return std::nullopt;
}

GatherEvent gather_event(const Step& s, const Config& config, bool& none) {
  using K = Step::Kind;
  using G = GatherEvent::Kind;
  none = false;
  switch (s.kind) {
    case K::kJoin:
      return GatherEvent::of(G::kJoined, 1);
    case K::kLeave:
      return GatherEvent::of(G::kLeft, 1);
    case K::kReport:
      return GatherEvent::of(G::kReported, 1);
    case K::kNodeStop:
      return GatherEvent::ended(1, signal_node_event(SIGTERM, true, 1));
    case K::kNodeNotice:
      return GatherEvent::ended(1, signal_node_event(SIGUSR1, false, 1));
    case K::kControlStop:
      return GatherEvent::of(G::kControlStop);
    case K::kTimeout:
      return GatherEvent::of(G::kTimedOut);
    default:
      break;
  }
  const auto event = signal_event(s.value, config.hangup_detaches, {});
  none = !event;
  return event.value_or(GatherEvent{});
}

Outcome run_sequence(FakeRunner& runner, const Config& config, const std::vector<Step>& steps) {
  Outcome outcome;
  JobSettings settings;
  settings.round.shutdown_grace = kGrace;
  settings.max_restarts = 1;
  settings.summaries = false;
  settings.tables = false;
  // The rounds' events, scheduled on the fake runner; a child with no exit of its own ends
  // (exit 0) one step after its round's last event.
  std::vector<std::vector<std::optional<std::pair<Ms, int>>>> exits(2,
                                                                    {std::nullopt, std::nullopt});
  std::vector<int> events_in_round(2, 0);
  for (const Step& s : steps) {
    if (is_gather(s.phase)) continue;
    const int round = round_of(s.phase);
    const Ms at = kStep * (++events_in_round[static_cast<std::size_t>(round)]);
    auto& exit = exits[static_cast<std::size_t>(round)];
    switch (s.kind) {
      case Step::Kind::kExit:
        if (!exit[s.child]) exit[s.child] = std::make_pair(at, s.value);
        break;
      case Step::Kind::kSignal:
        runner.signal_at(round, at, s.value);
        break;
      case Step::Kind::kNodeSays:
        runner.report_at(round, at, 1,
                         signal_node_event(s.value == 1 ? SIGTERM : SIGUSR1, s.value == 1, 1));
        break;
      default:
        break;
    }
  }
  runner.behaviour = [&](int round, std::size_t child) {
    FakeBehaviour b;
    const auto r = static_cast<std::size_t>(round);
    const auto& exit = exits.at(r).at(child);
    b.exit_after = exit ? exit->first : kStep * (events_in_round[r] + 1);
    b.exit_status = exit ? exit->second : exited(0);
    if (child == 1) {
      b.exits_like_agent = true;
      b.status_on_notice = exited(kExitPreempted);  // its node drains
    } else if (config.worker_answers_notice_at_once) {
      b.status_on_notice = killed(SIGUSR1);
    }
    return b;
  };
  Gathering gathering(2);
  std::size_t next = 0;  // the next step to consume
  const auto make_round = [&](int round, const RoundResult*) {
    if (round > 0) {
      if (const auto after = node1_after(runner, round - 1); after && after != config.deaf_to) {
        gathering.on(GatherEvent::of(*after, 1));
      }
    }
    // Every round event before this gather: its round must have run them all.
    gathering.begin();
    GatherRecord record;
    record.in_at_start = gathering.joined(1);
    record.finishing_at_start = gathering.finishing(1);
    const int phase = 2 * round;
    while (next < steps.size() && steps[next].phase < phase) ++next;
    for (; next < steps.size() && steps[next].phase == phase; ++next) {
      if (gathering.verdict().kind != GatherVerdict::Kind::kWait) outcome.redundant = true;
      bool none = false;
      const GatherEvent event = gather_event(steps[next], config, none);
      if (!none && event.kind != config.deaf_to) gathering.on(event);
    }
    // The join timeout always comes: no gather waits for ever.
    if (gathering.verdict().kind == GatherVerdict::Kind::kWait) {
      gathering.on(GatherEvent::of(GatherEvent::Kind::kTimedOut));
    }
    record.verdict = gathering.verdict();
    outcome.gathers.push_back(record);
    RoundSetup setup;
    switch (record.verdict.kind) {
      case GatherVerdict::Kind::kEnd:
        outcome.told = record.verdict.code;  // end_job: every connected node is told
        setup.end_code = record.verdict.code;
        setup.end_message = record.verdict.message;
        return setup;
      case GatherVerdict::Kind::kTimedOut:
        outcome.told = kExitLauncherError;
        throw ConfigError("node 1 never joined", "");
      default:
        break;
    }
    gathering.on(GatherEvent::of(GatherEvent::Kind::kRoundStarted, 1));
    setup.children.resize(2);
    setup.children[0].rank = 0;
    setup.children[1].agent = true;
    setup.children[1].node_rank = 1;
    setup.children[1].rank = 1;
    return setup;
  };
  std::ostringstream messages;
  try {
    outcome.exit_code = run_job(runner, settings, make_round, messages);
  } catch (const Error& e) {
    outcome.exit_code = e.exit_code();
  } catch (const WaitsForever&) {
    outcome.waits_forever = true;
  } catch (const std::logic_error& e) {
    outcome.problem = std::string("the fake runner refused: ") + e.what();
  }
  if (outcome.told < 0) outcome.told = outcome.exit_code;  // run_rounds: end_job({code})
  // Events of phases the job never reached change nothing: the same as a shorter sequence.
  const int reached = 2 * static_cast<int>(outcome.gathers.size()) - 1;
  for (const Step& s : steps) {
    if (s.phase > reached) outcome.redundant = true;
  }
  // So do a round's events that came after its end (a signal, a report), or a scripted exit
  // of a child the policy had ended first.
  for (int round = 0; round < 2; ++round) {
    std::size_t delivered = 0;
    for (const auto& h : runner.happened) delivered += h.round == round && !h.exit ? 1 : 0;
    std::size_t external = 0;
    for (const Step& s : steps) {
      if (is_gather(s.phase) || round_of(s.phase) != round) continue;
      if (s.kind == Step::Kind::kExit) {
        const bool as_scripted =
            std::any_of(runner.happened.begin(), runner.happened.end(), [&](const auto& h) {
              return h.round == round && h.exit && h.child == s.child &&
                     h.status_or_signal == s.value;
            });
        if (!as_scripted) outcome.redundant = true;
      } else if (++external > delivered) {
        outcome.redundant = true;
      }
    }
  }
  return outcome;
}

// What the gather must decide, from its events alone (the spec the invariants state).
GatherVerdict expected_gather(const GatherRecord& record, const Config& config,
                              const std::vector<Step>& events) {
  bool in = record.in_at_start;
  bool finishing = record.finishing_at_start;
  bool hung_up = false;
  GatherVerdict want;
  const auto end = [&](int code) {
    want.kind = GatherVerdict::Kind::kEnd;
    want.code = code;
    return want;
  };
  for (const Step& s : events) {
    if (in && !finishing) break;  // nobody awaited: the round starts at once
    switch (s.kind) {
      case Step::Kind::kJoin:
        in = true;
        finishing = false;
        break;
      case Step::Kind::kLeave:
        in = false;
        finishing = false;
        break;
      case Step::Kind::kReport:
        finishing = false;
        break;
      case Step::Kind::kNodeStop:
        return end(128 + SIGTERM);
      case Step::Kind::kNodeNotice:
        return end(kExitPreempted);
      case Step::Kind::kControlStop:
        return end(128 + SIGTERM);
      case Step::Kind::kTimeout:
        want.kind = GatherVerdict::Kind::kTimedOut;
        want.code = kExitLauncherError;
        return want;
      case Step::Kind::kSignal:
        if (s.value == SIGUSR1) return end(kExitPreempted);
        if (s.value == SIGHUP && config.hangup_detaches) {
          hung_up = true;
          break;
        }
        return end(128 + s.value);
      default:
        break;
    }
  }
  if (in && !finishing) {
    want.kind = GatherVerdict::Kind::kStart;
    want.hung_up = hung_up;
    return want;
  }
  want.kind = GatherVerdict::Kind::kTimedOut;
  want.code = kExitLauncherError;
  return want;
}

bool is_notice_step(const Step& s) {
  return s.kind == Step::Kind::kNodeNotice ||
         (s.kind == Step::Kind::kSignal && s.value == SIGUSR1) ||
         (s.kind == Step::Kind::kNodeSays && s.value == 2);
}
bool is_stop_step(const Step& s, const Config& config) {
  return s.kind == Step::Kind::kNodeStop || s.kind == Step::Kind::kControlStop ||
         (s.kind == Step::Kind::kNodeSays && s.value == 1) ||
         (s.kind == Step::Kind::kSignal &&
          (s.value == SIGTERM || (s.value == SIGHUP && !config.hangup_detaches)));
}

// The invariants; the first broken, or empty.
std::string check(const FakeRunner& runner, const Config& config, const Outcome& outcome,
                  const std::vector<Step>& steps) {
  if (!outcome.problem.empty()) return outcome.problem;
  if (outcome.waits_forever) return "waits forever";
  const std::size_t rounds = runner.started.size();
  if (outcome.told != outcome.exit_code) {
    return "node 0 exited " + std::to_string(outcome.exit_code) + " but told node 1 " +
           std::to_string(outcome.told);
  }
  for (std::size_t g = 0; g < outcome.gathers.size(); ++g) {
    const GatherRecord& record = outcome.gathers[g];
    std::vector<Step> events;
    for (const Step& s : steps) {
      if (s.phase == 2 * static_cast<int>(g)) events.push_back(s);
    }
    const GatherVerdict want = expected_gather(record, config, events);
    const GatherVerdict& got = record.verdict;
    if (got.kind != want.kind) {
      static const char* const kKinds[] = {"waits", "starts the round", "ends the job",
                                           "times out"};
      return "gather " + std::to_string(g) + " " + kKinds[static_cast<int>(got.kind)] +
             ", where it " + kKinds[static_cast<int>(want.kind)];
    }
    if (want.kind == GatherVerdict::Kind::kStart) {
      if (got.hung_up != want.hung_up) return "a SIGHUP that detaches was lost or invented";
      if (rounds <= g) return "gather " + std::to_string(g) + " started no round";
      continue;
    }
    if (got.code != want.code) {
      return "gather " + std::to_string(g) + " ended with " + std::to_string(got.code) + ", not " +
             std::to_string(want.code);
    }
    if (rounds != g) return "a round started after its gather ended the job";
    if (outcome.exit_code != want.code) {
      return "the job exited " + std::to_string(outcome.exit_code) +
             " after its gather ended it with " + std::to_string(want.code);
    }
  }
  // Across phases: no round after a stop or a notice; a notice ends the job drained unless
  // the job had succeeded, or a stop came in its phase or before (a stop that cuts a round's
  // drain short keeps its code: supervision_sequences_test.cc).
  for (const Step& s : steps) {
    const auto after = static_cast<std::size_t>(round_of(s.phase) + 1);
    if (is_stop_step(s, config) && rounds > after) {
      return "a round started after a stop (" + describe(s) + ")";
    }
  }
  const auto notice = std::find_if(steps.begin(), steps.end(), is_notice_step);
  if (notice != steps.end()) {
    if (rounds > static_cast<std::size_t>(round_of(notice->phase) + 1)) {
      return "a round started after a notice (" + describe(*notice) + ")";
    }
    const bool stop_by_then = std::any_of(steps.begin(), steps.end(), [&](const Step& s) {
      return s.phase <= notice->phase && is_stop_step(s, config);
    });
    if (!stop_by_then && outcome.exit_code != kExitPreempted && outcome.exit_code != 0) {
      return "a notice (" + describe(*notice) + ") was lost: the job exited " +
             std::to_string(outcome.exit_code);
    }
  }
  return {};
}

void explore(const Config& config, std::vector<Step>& steps, std::size_t depth, Exploration& out) {
  if (!steps.empty()) {
    FakeRunner runner;
    runner.waits_forever_after = Ms(20000);
    const Outcome outcome = run_sequence(runner, config, steps);
    if (outcome.redundant) return;  // nor any longer one: its events never happen either
    out.add(
        check(runner, config, outcome, steps), [&] { return describe(config, steps); },
        "0123456789(");
  }
  if (steps.size() == depth) return;
  for (int phase = steps.empty() ? 0 : steps.back().phase; phase < 4; ++phase) {
    for (const Step& next : alphabet(phase, config)) {
      // A child ends once a round: a second exit is the same sequence as a shorter one.
      const bool repeat =
          next.kind == Step::Kind::kExit &&
          std::any_of(steps.begin(), steps.end(), [&](const Step& s) {
            return s.kind == Step::Kind::kExit && s.phase == phase && s.child == next.child;
          });
      if (repeat) continue;
      steps.push_back(next);
      explore(config, steps, depth, out);
      steps.pop_back();
    }
  }
}

// Events per sequence: DDPRUN_GATHER_DEPTH, else 7 (5 under the sanitizers: 92,000 and
// 9,500 sequences; 2.5 s and 0.25 s optimized).
std::size_t depth() {
  return exploration_depth("DDPRUN_GATHER_DEPTH", 7, 5);
}

TEST(GatherSequences, EverySequenceOverTwoGathersAndTheirRoundsKeepsTheInvariants) {
  long total = 0;
  for (const bool detaches : {false, true}) {
    for (const bool at_once : {true, false}) {
      const Config config{detaches, at_once, std::nullopt};
      Exploration result;
      std::vector<Step> steps;
      explore(config, steps, depth(), result);
      total += result.sequences;
      for (const std::string& v : result.violations) ADD_FAILURE() << v;
    }
  }
  std::printf("[ explored ] %ld sequences over two gathers and their rounds (up to %zu events)\n",
              total, depth());
}

// The invariants catch each defect a gather had or could have: each deafness breaks them in at
// least one sequence (the first is printed).
TEST(GatherSequences, AGatherDeafToAnyKindOfEventBreaksAnInvariant) {
  using G = GatherEvent::Kind;
  const std::vector<std::pair<G, const char*>> defects = {
      {G::kLeft, "a joiner that died still counted as joined"},
      {G::kReported, "a node's late exit report never read"},
      {G::kNodeEnded, "a node stopped or noticed between rounds unheard"},
      {G::kStopSignal, "a stop signal while the nodes gather read and forgotten"},
      {G::kNoticeSignal, "a notice while the nodes gather read and forgotten"},
      {G::kHangup, "a SIGHUP that detaches forgotten"},
      {G::kControlStop, "a job handle deaf between rounds"},
      {G::kTimedOut, "no end to the wait"},
      {G::kJoined, "no node ever joins"},
  };
  for (const auto& [kind, what] : defects) {
    Exploration result;
    for (const bool detaches : {false, true}) {
      std::vector<Step> steps;
      explore({detaches, true, kind}, steps, std::min<std::size_t>(depth(), 5), result);
    }
    EXPECT_FALSE(result.violations.empty()) << "the invariants miss " << what;
    if (!result.violations.empty()) {
      std::printf("[ caught   ] %s: %s\n", what, result.violations.front().c_str());
    }
  }
}

}  // namespace
}  // namespace ddprun
