// The job's policy (supervision.h) driven by a fake runner and a fake clock: restarts, teardown
// (SIGTERM, the grace, SIGKILL), signals to ddprun, the root cause and exit codes. No
// process is started; the whole file runs in milliseconds.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <functional>
#include <sstream>

#include "ddprun/contract/errors.h"
#include "fake_runner.h"
#include "policy/supervision.h"

namespace ddprun {
namespace {

using testing::exited;
using testing::FakeBehaviour;
using testing::FakeRunner;
using testing::killed;
using testing::Ms;

constexpr Ms kGrace{15000};

std::vector<ChildSpec> workers(int count) {
  std::vector<ChildSpec> children;
  for (int rank = 0; rank < count; ++rank) {
    ChildSpec& child = children.emplace_back();
    child.rank = rank;
    child.local_rank = rank;
    child.host = "node0";
    child.path = "/bin/worker";
  }
  return children;
}

struct JobRun {
  int exit_code = -1;
  std::string messages;
};

// Every round runs `children` (with `spares` for a lost node's ranks).
JobRun run(FakeRunner& runner, JobSettings settings, const std::vector<ChildSpec>& children,
           const SpareNodes& spares = {}) {
  settings.round.shutdown_grace = kGrace;
  settings.colour = false;
  std::ostringstream messages;
  JobRun result;
  result.exit_code = run_job(
      runner, settings,
      [&](int, const RoundResult*) {
        RoundSetup setup{children, "", "", ""};
        setup.spares = spares;
        return setup;
      },
      messages);
  result.messages = messages.str();
  return result;
}

JobRun run(FakeRunner& runner, JobSettings settings, int nproc = 4) {
  return run(runner, std::move(settings), workers(nproc));
}

FakeBehaviour exits_after(Ms after, int status) {
  FakeBehaviour b;
  b.exit_after = after;
  b.exit_status = status;
  return b;
}

FakeBehaviour runs_until_stopped(bool ignores_stop = false) {
  FakeBehaviour b;
  b.ignores_stop = ignores_stop;
  return b;
}

TEST(JobPolicy, EveryWorkerExitingZeroSucceedsInOneRoundWithoutSignals) {
  FakeRunner runner;
  const JobRun job = run(runner, {});
  EXPECT_EQ(job.exit_code, 0);
  EXPECT_EQ(runner.started.size(), 1u);
  EXPECT_EQ(runner.started[0].size(), 4u);
  EXPECT_TRUE(runner.sent.empty());
}

TEST(JobPolicy, TheFirstFailureStopsEveryOtherWorkerWithSigtermAtOnce) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    return child == 2 ? exits_after(Ms(10), exited(3)) : runs_until_stopped();
  };
  const JobRun job = run(runner, {});
  EXPECT_EQ(job.exit_code, 3);
  for (std::size_t child : {0u, 1u, 3u}) {
    const auto sent = runner.sent_to(child);
    ASSERT_EQ(sent.size(), 1u) << "child " << child;
    EXPECT_EQ(sent[0].signal_number, SIGTERM);
    EXPECT_EQ(sent[0].at, Ms(10));
  }
  EXPECT_TRUE(runner.sent_to(2).empty());
  EXPECT_NE(job.messages.find("rank 2 (local rank 2 on node0, pid 1002) failed first: exit code 3"),
            std::string::npos)
      << job.messages;
}

TEST(JobPolicy, AWorkerThatIgnoresSigtermGetsSigkillExactlyAfterTheGrace) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    return child == 1 ? exits_after(Ms(10), exited(1)) : runs_until_stopped(child == 0);
  };
  const JobRun job = run(runner, {});
  const auto sent = runner.sent_to(0);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].signal_number, SIGTERM);
  EXPECT_EQ(sent[1].signal_number, SIGKILL);
  EXPECT_EQ(sent[1].at - sent[0].at, kGrace);
  // The others stopped on SIGTERM and are never sent SIGKILL.
  ASSERT_EQ(runner.sent_to(2).size(), 1u);
  EXPECT_EQ(job.exit_code, 1);
}

TEST(JobPolicy, TheRootCauseIsTheFirstFailureNotTheWorkersStoppedAfterIt) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    if (child == 3) return exits_after(Ms(5), killed(SIGSEGV));
    if (child == 0) return exits_after(Ms(6), exited(9));  // fails while being stopped
    return runs_until_stopped();
  };
  const JobRun job = run(runner, {});
  EXPECT_EQ(job.exit_code, 128 + SIGSEGV);
  EXPECT_NE(
      job.messages.find("rank 3 (local rank 3 on node0, pid 1003) failed first: signal SIGSEGV"),
      std::string::npos)
      << job.messages;
}

// A different rank fails each round (rank N in round N): not the same failure again.
FakeBehaviour rank_of_the_round_exits_7(int round, std::size_t child) {
  return child == static_cast<std::size_t>(round) ? exits_after(Ms(10), exited(7))
                                                  : runs_until_stopped();
}

TEST(JobPolicy, FailedRoundsRestartUpToMaxRestartsThenTheLastFailureIsTheExitCode) {
  FakeRunner runner;
  runner.behaviour = rank_of_the_round_exits_7;
  JobSettings settings;
  settings.max_restarts = 2;
  const JobRun job = run(runner, settings);
  EXPECT_EQ(runner.started.size(), 3u);
  EXPECT_EQ(runner.rounds_ended, 3);
  EXPECT_EQ(job.exit_code, 7);
  EXPECT_NE(job.messages.find("restart 1 of 2"), std::string::npos);
  EXPECT_NE(job.messages.find("restart 2 of 2"), std::string::npos);
  EXPECT_EQ(job.messages.find("restart 3"), std::string::npos);
}

// Rounds whose workers report `step_of_round(round)` in their progress files (as the
// runner reads them: no file, no process).
JobRun run_with_progress(FakeRunner& runner, JobSettings settings,
                         const std::function<std::optional<long long>(int)>& step_of_round) {
  settings.round.shutdown_grace = kGrace;
  runner.files = [&](int round, std::size_t) {
    return Runner::RankFiles{"", step_of_round(round)};
  };
  std::ostringstream messages;
  JobRun result;
  result.exit_code = run_job(
      runner, settings,
      [&](int, const RoundResult*) {
        return RoundSetup{workers(2), "", "", ""};
      },
      messages);
  result.messages = messages.str();
  return result;
}

FakeBehaviour rank1_exits_7(int, std::size_t child) {
  return child == 1 ? exits_after(Ms(10), exited(7)) : runs_until_stopped();
}

TEST(JobPolicy, TheSameFailureTwiceWithoutProgressEndsTheRestarts) {
  FakeRunner runner;
  runner.behaviour = rank1_exits_7;
  JobSettings settings;
  settings.max_restarts = 5;
  const JobRun job = run_with_progress(runner, settings, [](int) { return std::nullopt; });
  EXPECT_EQ(runner.started.size(), 2u);
  EXPECT_EQ(job.exit_code, 7);
  EXPECT_NE(job.messages.find("ddprun: not restarting: round 1 failed as the one before it did "
                              "(rank 1: exit code 7: exit code 7) and reached no newer step"),
            std::string::npos)
      << job.messages;
}

TEST(JobPolicy, TheSameFailureAfterProgressIsRestartedAgain) {
  FakeRunner runner;
  runner.behaviour = rank1_exits_7;
  JobSettings settings;
  settings.max_restarts = 3;
  // Steps 100, 200, 300, 300: the fourth round reached nothing newer, but it is the last.
  const JobRun job =
      run_with_progress(runner, settings, [](int round) { return std::min(3, round + 1) * 100LL; });
  EXPECT_EQ(runner.started.size(), 4u);
  EXPECT_EQ(job.messages.find("not restarting"), std::string::npos) << job.messages;
  FakeRunner stuck;
  stuck.behaviour = rank1_exits_7;
  settings.max_restarts = 5;
  // 100 in round 0, then 100 again: no progress in round 1, so no third round.
  run_with_progress(stuck, settings, [](int) { return 100LL; });
  EXPECT_EQ(stuck.started.size(), 2u);
}

TEST(JobPolicy, RestartRepeatedKeepsRestartingTheSameFailure) {
  FakeRunner runner;
  runner.behaviour = rank1_exits_7;
  JobSettings settings;
  settings.max_restarts = 3;
  settings.restart.allow_repeats = true;
  run_with_progress(runner, settings, [](int) { return std::nullopt; });
  EXPECT_EQ(runner.started.size(), 4u);
}

TEST(JobPolicy, RestartOnSignalsRestartsACrashButNotAnExitCode) {
  JobSettings settings;
  settings.max_restarts = 1;
  settings.restart = parse_restart_on("signals,3");
  FakeRunner crash;
  crash.behaviour = [](int round, std::size_t child) {
    return child == 0 && round == 0 ? exits_after(Ms(5), killed(SIGSEGV))
                                    : exits_after(Ms(5), exited(0));
  };
  EXPECT_EQ(run(crash, settings).exit_code, 0);
  EXPECT_EQ(crash.started.size(), 2u);
  FakeRunner listed;
  listed.behaviour = [](int round, std::size_t child) {
    return child == 0 && round == 0 ? exits_after(Ms(5), exited(3)) : exits_after(Ms(5), exited(0));
  };
  EXPECT_EQ(run(listed, settings).exit_code, 0);
  FakeRunner other;
  other.behaviour = rank1_exits_7;
  const JobRun job = run(other, settings);
  EXPECT_EQ(other.started.size(), 1u);
  EXPECT_EQ(job.exit_code, 7);
  EXPECT_NE(job.messages.find("ddprun: not restarting: rank 1 ended with exit code 7, which "
                              "--restart-on does not list"),
            std::string::npos)
      << job.messages;
}

TEST(JobPolicy, RestartOnParsesAnyAListOrRefuses) {
  EXPECT_TRUE(parse_restart_on("any").any);
  const RestartRule rule = parse_restart_on("signals,1,255");
  EXPECT_FALSE(rule.any);
  EXPECT_TRUE(rule.signals);
  EXPECT_EQ(rule.exit_codes, (std::set<int>{1, 255}));
  for (const char* bad : {"", "0", "256", "sig", "signals,", ",3", "any,3", "3,,4"}) {
    EXPECT_THROW(parse_restart_on(bad), UsageError) << bad;
  }
  EXPECT_EQ(parse_progress("42\n"), 42);
  EXPECT_EQ(parse_progress(""), std::nullopt);
  EXPECT_EQ(parse_progress("-1"), std::nullopt);
  EXPECT_EQ(parse_progress("12x"), std::nullopt);
}

TEST(JobPolicy, ARestartThatSucceedsEndsTheJobWithZero) {
  FakeRunner runner;
  runner.behaviour = [](int round, std::size_t child) {
    return round == 0 && child == 0 ? exits_after(Ms(1), exited(2)) : exits_after(Ms(3), exited(0));
  };
  JobSettings settings;
  settings.max_restarts = 5;
  const JobRun job = run(runner, settings);
  EXPECT_EQ(job.exit_code, 0);
  EXPECT_EQ(runner.started.size(), 2u);
}

// What an observer (--report) hears: each decision, in order with the rounds' making.
struct Observed {
  std::vector<std::string> order;  // "make N", "decided N"
  std::vector<RoundDecision> decisions;
  std::vector<std::optional<Outcome>> outcomes;                 // nullopt: the round never started
  std::vector<std::vector<std::optional<double>>> first_steps;  // each started round's ranks'
  int exit_code = -1;
};

Observed run_observed(FakeRunner& runner, JobSettings settings,
                      std::optional<RoundSetup> ends_before_round_1 = std::nullopt) {
  settings.round.shutdown_grace = kGrace;
  std::ostringstream messages;
  Observed seen;
  seen.exit_code = run_job(
      runner, settings,
      [&](int round, const RoundResult*) {
        seen.order.push_back("make " + std::to_string(round));
        if (round == 1 && ends_before_round_1) return *ends_before_round_1;
        return RoundSetup{workers(2), "", "", ""};
      },
      messages,
      [&](const RoundResult* result, const RoundDecision& decision) {
        seen.order.push_back("decided " + std::to_string(decision.round));
        seen.decisions.push_back(decision);
        seen.outcomes.push_back(result ? std::optional(result->outcome) : std::nullopt);
        if (result == nullptr) return;
        auto& firsts = seen.first_steps.emplace_back();
        for (const RankResult& rank : result->ranks) firsts.push_back(rank.first_step_seconds);
      });
  return seen;
}

TEST(JobPolicyObserver, HearsEveryRoundsDecisionBeforeTheNextRoundIsMade) {
  FakeRunner runner;
  runner.behaviour = rank_of_the_round_exits_7;
  JobSettings settings;
  settings.max_restarts = 1;
  const Observed seen = run_observed(runner, settings);
  EXPECT_EQ(seen.exit_code, 7);
  EXPECT_EQ(seen.order, (std::vector<std::string>{"make 0", "decided 0", "make 1", "decided 1"}));
  ASSERT_EQ(seen.decisions.size(), 2u);
  EXPECT_TRUE(seen.decisions[0].restart);
  EXPECT_EQ(seen.decisions[0].why, "restart 1 of 1");
  EXPECT_EQ(seen.decisions[0].round_code, 7);
  EXPECT_FALSE(seen.decisions[0].exit_code);
  EXPECT_DOUBLE_EQ(seen.decisions[0].run_seconds, 0.010);  // the fake clock: exits at 10 ms
  EXPECT_FALSE(seen.decisions[1].restart);
  EXPECT_EQ(seen.decisions[1].why, "not restarting: no restart left (--max-restarts 1)");
  EXPECT_EQ(seen.decisions[1].exit_code, 7);
  EXPECT_EQ(seen.outcomes[1], Outcome::kWorkerFailed);
}

// The report's first steps come from the runner (which watches the progress files) into
// each rank of the round's result.
TEST(JobPolicyObserver, EachRanksFirstStepIsTheRunnersInTheRoundsResult) {
  FakeRunner runner;
  runner.behaviour = [](int round, std::size_t child) {
    FakeBehaviour b = exits_after(Ms(10), exited(0));
    if (round == 0 && child == 1) b.first_step_seconds = 2.5;
    return b;
  };
  const Observed seen = run_observed(runner, {});
  EXPECT_EQ(seen.exit_code, 0);
  ASSERT_EQ(seen.first_steps.size(), 1u);
  EXPECT_EQ(seen.first_steps[0], (std::vector<std::optional<double>>{std::nullopt, 2.5}));
}

TEST(JobPolicyObserver, AStopAndARoundThatNeverStartedAreDecisionsToo) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return runs_until_stopped(); };
  runner.signal_at(0, Ms(50), SIGTERM);
  JobSettings settings;
  settings.max_restarts = 3;
  Observed seen = run_observed(runner, settings);
  ASSERT_EQ(seen.decisions.size(), 1u);
  EXPECT_EQ(seen.decisions[0].why,
            "not restarting: ddprun was stopped by SIGTERM (a stopped job is never restarted)");
  EXPECT_EQ(seen.decisions[0].exit_code, 128 + SIGTERM);

  FakeRunner second;
  second.behaviour = [](int round, std::size_t) {
    return round == 0 ? exits_after(Ms(1), exited(2)) : runs_until_stopped();
  };
  RoundSetup ends;
  ends.end_code = 130;
  ends.end_message = "ddprun: stopped by SIGINT while the nodes gathered\n";
  seen = run_observed(second, settings, ends);
  EXPECT_EQ(seen.exit_code, 130);
  ASSERT_EQ(seen.decisions.size(), 2u);
  EXPECT_EQ(seen.outcomes[1], std::nullopt);
  EXPECT_EQ(seen.decisions[1].why, "stopped by SIGINT while the nodes gathered");
  EXPECT_EQ(seen.decisions[1].exit_code, 130);
}

TEST(JobPolicyObserver, ARoundThatCannotBeMadeOrStartedEndsTheJobWithItsError) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return runs_until_stopped(true); };
  runner.fail_start_of = 1;
  std::ostringstream messages;
  std::vector<RoundDecision> decisions;
  const RoundObserver observer = [&](const RoundResult* result, const RoundDecision& decision) {
    EXPECT_EQ(result, nullptr);
    decisions.push_back(decision);
  };
  const auto make = [](int, const RoundResult*) { return RoundSetup{workers(2), "", "", ""}; };
  EXPECT_THROW(run_job(runner, {}, make, messages, observer), std::system_error);
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0].exit_code, kExitLauncherError);
  EXPECT_EQ(decisions[0].why.rfind("error: ", 0), 0u) << decisions[0].why;

  const auto unmade = [](int, const RoundResult*) -> RoundSetup {
    throw UsageError("--log-dir logs: not a folder");
  };
  EXPECT_THROW(run_job(runner, {}, unmade, messages, observer), UsageError);
  ASSERT_EQ(decisions.size(), 2u);
  EXPECT_EQ(decisions[1].why, "error: --log-dir logs: not a folder");
  EXPECT_EQ(decisions[1].exit_code, kExitLauncherError);
}

TEST(JobPolicy, AnAgentRunsOneRoundWhateverMaxRestartsSays) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    return child == 0 ? exits_after(Ms(1), exited(4)) : runs_until_stopped();
  };
  JobSettings settings;
  settings.max_restarts = 3;
  settings.agent = true;
  const JobRun job = run(runner, settings);
  EXPECT_EQ(runner.started.size(), 1u);
  EXPECT_EQ(job.exit_code, 4);
}

// Node 0 gave up on this node after its grace (its connection was read no more): the
// node's workers get SIGKILL at once, not another grace, so that its exit report comes
// before node 0's next round.
TEST(JobPolicy, AnAgentToldSigkillByItsHeadKillsItsWorkersAtOnce) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return runs_until_stopped(); };
  runner.head_signal_at(0, Ms(30), SIGKILL, std::nullopt);
  JobSettings settings;
  settings.agent = true;
  const JobRun job = run(runner, settings);
  EXPECT_EQ(job.exit_code, 128 + SIGKILL);
  for (std::size_t child = 0; child < 4; ++child) {
    const auto sent = runner.sent_to(child);
    ASSERT_EQ(sent.size(), 1u) << "child " << child;
    EXPECT_EQ(sent[0].signal_number, SIGKILL);
    EXPECT_EQ(sent[0].at, Ms(30));
  }
}

TEST(JobPolicy, AStopSignalStopsEveryWorkerAndIsNeverRestarted) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return runs_until_stopped(); };
  runner.signal_at(0, Ms(50), SIGTERM);
  JobSettings settings;
  settings.max_restarts = 3;
  const JobRun job = run(runner, settings);
  EXPECT_EQ(job.exit_code, 128 + SIGTERM);
  EXPECT_EQ(runner.started.size(), 1u);
  for (std::size_t child = 0; child < 4; ++child) {
    ASSERT_EQ(runner.sent_to(child).size(), 1u);
    EXPECT_EQ(runner.sent_to(child)[0].signal_number, SIGTERM);
  }
  EXPECT_NE(job.messages.find("ddprun: stopped by SIGTERM"), std::string::npos);
}

TEST(JobPolicy, WorkersKilledByTheStopAreNotARootCause) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    // Exits 1 on its own shortly after the stop began: not a failure to report.
    return child == 0 ? exits_after(Ms(12), exited(1)) : runs_until_stopped(true);
  };
  runner.signal_at(0, Ms(10), SIGINT);
  const JobRun job = run(runner, {});
  EXPECT_EQ(job.exit_code, 128 + SIGINT);
  EXPECT_EQ(job.messages.find("failed first"), std::string::npos);
}

TEST(JobPolicy, ASecondCtrlCSkipsTheGrace) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return runs_until_stopped(true); };
  runner.signal_at(0, Ms(10), SIGINT);
  runner.signal_at(0, Ms(20), SIGINT);
  const JobRun job = run(runner, {});
  const auto sent = runner.sent_to(0);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].signal_number, SIGINT);
  EXPECT_EQ(sent[1].signal_number, SIGKILL);
  EXPECT_EQ(sent[1].at, Ms(20));
  EXPECT_EQ(job.exit_code, 128 + SIGINT);
}

TEST(JobPolicy, APreemptionNoticeIsForwardedAndWorkersExiting75EndTheJobWith75) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) {
    FakeBehaviour b;
    b.status_on_notice = exited(kExitPreempted);
    return b;
  };
  runner.signal_at(0, Ms(30), SIGUSR1);
  JobSettings settings;
  settings.max_restarts = 2;  // a preempted job is not restarted here: it is requeued
  const JobRun job = run(runner, settings);
  EXPECT_EQ(job.exit_code, kExitPreempted);
  EXPECT_EQ(runner.started.size(), 1u);
  for (std::size_t child = 0; child < 4; ++child) {
    ASSERT_EQ(runner.sent_to(child).size(), 1u);
    EXPECT_EQ(runner.sent_to(child)[0].signal_number, SIGUSR1);
  }
  EXPECT_NE(job.messages.find("preemption notice; exit 75"), std::string::npos) << job.messages;
}

TEST(JobPolicy, TheWalltimeNoticeGoesOutOnceAtTheDrainTimeAndEndsTheJobWith75) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    FakeBehaviour b;
    // Rank 3 is a script without a handler: SIGUSR1's default action ends it.
    b.status_on_notice = child == 3 ? killed(SIGUSR1) : exited(kExitPreempted);
    return b;
  };
  JobSettings settings;
  settings.max_restarts = 2;
  settings.round.drain_at = runner.now() + Ms(5000);
  const JobRun job = run(runner, settings);
  EXPECT_EQ(job.exit_code, kExitPreempted);
  EXPECT_EQ(runner.started.size(), 1u);
  for (std::size_t child = 0; child < 4; ++child) {
    const auto sent = runner.sent_to(child);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].signal_number, SIGUSR1);
    EXPECT_EQ(sent[0].at, Ms(5000));
  }
  EXPECT_NE(job.messages.find("preemption notice (SIGUSR1, sent --drain-before the job's end)"),
            std::string::npos)
      << job.messages;
}

// A stop signal after the notice went out, as a scheduler sends one when another node's
// ddprun exited 75: it reaches the workers (every stop signal does), which, stopping at
// the agreed step, finish their checkpoint (ddp-train keeps stop signals harmless from its
// stop decision on) and exit 75; the job still ends with 75. The notice either went out
// from here (the drain time) or reached this node's agent as a signal from the head.
TEST(JobPolicy, AStopSignalAfterTheNoticeReachesTheWorkersAndTheDrainedJobStillEndsWith75) {
  for (const bool forwarded : {false, true}) {
    SCOPED_TRACE(forwarded ? "a notice forwarded from the head" : "the drain time here");
    FakeRunner runner;
    // Each worker needs 2 s after the notice to write its checkpoint and exit 75; the
    // SIGTERM comes 1 s in.
    runner.behaviour = [](int, std::size_t) {
      FakeBehaviour b;
      b.exit_after = Ms(7000);
      b.exit_status = exited(kExitPreempted);
      b.ignores_stop = true;
      return b;
    };
    JobSettings settings;
    if (forwarded) {
      runner.signal_at(0, Ms(5000), SIGUSR1);
    } else {
      settings.round.drain_at = runner.now() + Ms(5000);
    }
    runner.signal_at(0, Ms(6000), SIGTERM);
    const JobRun job = run(runner, settings);
    EXPECT_EQ(job.exit_code, kExitPreempted) << job.messages;
    for (std::size_t child = 0; child < 4; ++child) {
      const auto sent = runner.sent_to(child);
      ASSERT_EQ(sent.size(), 2u) << "child " << child;  // the notice, SIGTERM, no SIGKILL
      EXPECT_EQ(sent[0].signal_number, SIGUSR1);
      EXPECT_EQ(sent[1].signal_number, SIGTERM);
      EXPECT_EQ(sent[1].at, Ms(6000));
    }
  }
}

// A worker that a stop signal finds after a failed round began stopping: the stop decides
// (128 + the signal), and nothing restarts, whatever --max-restarts says.
// The stop cuts the failure's grace short and forbids a restart; the failure stays the
// root cause and gives the exit code.
TEST(JobPolicy, AStopSignalDuringAFailedRoundsGraceIsNeverRestartedAndKeepsTheFailuresCode) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    return child == 0 ? exits_after(Ms(100), exited(1)) : runs_until_stopped(true);
  };
  runner.signal_at(0, Ms(500), SIGINT);
  JobSettings settings;
  settings.max_restarts = 2;
  const JobRun job = run(runner, settings, 2);
  EXPECT_EQ(job.exit_code, 1) << job.messages;
  EXPECT_EQ(runner.started.size(), 1u);
  EXPECT_EQ(job.messages.find("restarting all workers"), std::string::npos) << job.messages;
  EXPECT_NE(job.messages.find("rank 0 (local rank 0 on node0, pid 1000) failed first"),
            std::string::npos)
      << job.messages;
  EXPECT_NE(job.messages.find("ddprun: not restarting: ddprun was stopped by SIGINT after the "
                              "round failed; exit 1, the failure's"),
            std::string::npos)
      << job.messages;
  const auto sent = runner.sent_to(1);
  ASSERT_EQ(sent.size(), 3u);  // SIGTERM for the failure, the SIGINT, SIGKILL after the grace
  EXPECT_EQ(sent[1].signal_number, SIGINT);
  EXPECT_EQ(sent[2].signal_number, SIGKILL);
  EXPECT_EQ(sent[2].at, Ms(100) + kGrace);
}

// One ddprun per node under srun (Slurm 26.05, or srun --kill-on-bad-exit): node 2 failed
// first and the head told this node so with its stop; then Slurm's SIGTERM reaches every
// surviving task. This node still exits with node 2's code, not 143, so srun's exit code
// (the highest of its tasks') is the job's root cause.
TEST(JobPolicySlurm, AnAgentStoppedForAnotherNodesFailureKeepsItsCodeWhenSlurmsSigtermFollows) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return runs_until_stopped(); };
  NodeEvent cause;
  cause.node = 2;
  cause.code = 3;
  cause.what = "rank 5 (node2) exited with code 3";
  runner.head_signal_at(0, Ms(30), SIGTERM, cause);
  runner.signal_at(0, Ms(40), SIGTERM);  // Slurm's, to every task of the step
  JobSettings settings;
  settings.agent = true;
  const JobRun job = run(runner, settings, 2);
  EXPECT_EQ(job.exit_code, 3) << job.messages;
  EXPECT_NE(job.messages.find("node 2 failed first (rank 5 (node2) exited with code 3); exit 3"),
            std::string::npos)
      << job.messages;
}

// A head: `count` workers here (ranks 0..count-1), node 1's ddprun as the last child.
std::vector<ChildSpec> worker_and_node1(int count = 1) {
  std::vector<ChildSpec> children = workers(count);
  ChildSpec& agent = children.emplace_back();
  agent.agent = true;
  agent.node_rank = 1;
  agent.host = "node1";
  return children;
}

// The head heard node 1's failure (kFailed, at once, before node 1's ddprun ends); Slurm's
// SIGTERM to every task follows, and node 1 also reports that it was stopped by it. The
// head's exit code stays node 1's failure's, its message names node 1's rank, and no round
// is restarted.
TEST(JobPolicySlurm, TheHeadKeepsAReportedFailuresCodeWhenSigtermsFollowHereAndOnTheNode) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    return child == 1 ? exits_after(Ms(300), exited(3)) : runs_until_stopped(true);
  };
  NodeEvent failed;
  failed.kind = NodeEvent::Kind::kFailed;
  failed.node = 1;
  failed.code = 3;
  failed.what = "rank 1 (node1) exited with code 3";
  runner.report_at(0, Ms(20), 1, failed);
  NodeEvent stopped;
  stopped.kind = NodeEvent::Kind::kStopped;
  stopped.node = 1;
  stopped.signal = SIGTERM;
  stopped.code = 128 + SIGTERM;
  stopped.what = "stopped by SIGTERM";
  runner.report_at(0, Ms(50), 1, stopped);
  runner.signal_at(0, Ms(60), SIGTERM);
  JobSettings settings;
  settings.max_restarts = 3;
  const JobRun job = run(runner, settings, worker_and_node1());
  const std::string& text = job.messages;
  EXPECT_EQ(job.exit_code, 3) << text;
  EXPECT_EQ(runner.started.size(), 1u) << text;
  EXPECT_NE(text.find("node1"), std::string::npos) << text;
  EXPECT_NE(text.find("failed first"), std::string::npos) << text;
  EXPECT_NE(text.find("not restarting: ddprun was stopped by SIGTERM after the round failed; "
                      "exit 3, the failure's"),
            std::string::npos)
      << text;
  // The other nodes were told node 1's failure, never node 1's stop.
  ASSERT_FALSE(runner.stop_causes.empty());
  ASSERT_TRUE(runner.stop_causes[0].has_value());
  EXPECT_EQ(runner.stop_causes[0]->kind, NodeEvent::Kind::kFailed);
  EXPECT_EQ(runner.stop_causes[0]->code, 3);
}

// Head mode through srun: one srun child stands for every node. Node 1's agent reports its
// rank's failure (code 3) at once; srun's --kill-on-bad-exit then sends SIGTERM to the
// other agents, and srun ends with the highest code of its tasks, 143. The head exits 3.
TEST(JobPolicySlurm, AHeadOverSrunExitsWithTheReportedFailureNotSrunsHighestCode) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return exits_after(Ms(400), exited(128 + SIGTERM)); };
  NodeEvent failed;
  failed.kind = NodeEvent::Kind::kFailed;
  failed.node = 1;
  failed.code = 3;
  failed.what = "rank 9 (node1) exited with code 3";
  runner.report_at(0, Ms(20), 0, failed);
  ChildSpec srun;
  srun.agent = true;
  srun.node_rank = -1;
  srun.host = "srun";
  const JobRun job = run(runner, {}, {srun});
  EXPECT_EQ(job.exit_code, 3) << job.messages;
}

// One ddprun for a whole node: a worker failed, SIGTERM reaches ddprun during the grace
// (srun --kill-on-bad-exit after another task's exit): the failure's code, no restart.
TEST(JobPolicySlurm, OwnSigtermAfterAWorkerFailedKeepsTheWorkersCode) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    return child == 2 ? exits_after(Ms(10), exited(7)) : runs_until_stopped(true);
  };
  runner.signal_at(0, Ms(20), SIGTERM);
  JobSettings settings;
  settings.max_restarts = 1;
  const JobRun job = run(runner, settings);
  EXPECT_EQ(job.exit_code, 7) << job.messages;
  EXPECT_EQ(runner.started.size(), 1u);
  EXPECT_NE(job.messages.find("rank 2 (local rank 2 on node0, pid 1002) failed first: exit code 7"),
            std::string::npos)
      << job.messages;
}

// The exit timeout is a cause too: a SIGTERM after it keeps 124 (the timeout's code).
TEST(JobPolicySlurm, OwnSigtermAfterTheExitTimeoutKeepsTheTimeoutsCode) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    return child == 0 ? exits_after(Ms(10), exited(0)) : runs_until_stopped(true);
  };
  runner.signal_at(0, Ms(200), SIGTERM);
  JobSettings settings;
  settings.round.exit_timeout = Ms(100);
  const JobRun job = run(runner, settings);
  EXPECT_EQ(job.exit_code, kExitTimedOut) << job.messages;
}

// A stop that comes first is still the job's end: 128 + the signal, as before.
TEST(JobPolicySlurm, ASigtermBeforeAnyFailureIsStillTheExitCode) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    return child == 2 ? exits_after(Ms(30), exited(7)) : runs_until_stopped();
  };
  runner.signal_at(0, Ms(20), SIGTERM);
  const JobRun job = run(runner, {});
  EXPECT_EQ(job.exit_code, 128 + SIGTERM) << job.messages;
}

// Head mode: the agent of a node whose worker was killed by a signal exits 128 + N; for
// --restart-on signals that is a signal death, as it would be on the head's own node.
TEST(JobPolicy, RestartOnSignalsCoversARemoteWorkerKilledByASignal) {
  FakeRunner runner;
  runner.behaviour = [](int round, std::size_t child) {
    if (round > 0) return exits_after(Ms(1), exited(0));
    return child == 1 ? exits_after(Ms(100), exited(128 + SIGKILL)) : runs_until_stopped();
  };
  JobSettings settings;
  settings.max_restarts = 1;
  settings.restart = parse_restart_on("signals");
  settings.round.shutdown_grace = kGrace;
  std::ostringstream messages;
  const int code = run_job(
      runner, settings,
      [](int, const RoundResult*) {
        std::vector<ChildSpec> children = workers(1);
        ChildSpec& agent = children.emplace_back();
        agent.agent = true;
        agent.node_rank = 1;
        agent.host = "node1";
        return RoundSetup{children, "", "", ""};
      },
      messages);
  EXPECT_EQ(code, 0) << messages.str();
  EXPECT_EQ(runner.started.size(), 2u) << messages.str();
}

// An agent whose worker failed says last which node failed first, for its head.
TEST(JobPolicy, AnAgentNamesTheNodeThatFailedFirstInItsLastLine) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    return child == 1 ? exits_after(Ms(100), exited(3)) : runs_until_stopped();
  };
  JobSettings settings;
  settings.agent = true;
  std::ostringstream messages;
  run_job(
      runner, settings,
      [](int, const RoundResult*) {
        std::vector<ChildSpec> children = workers(2);
        for (ChildSpec& child : children) child.node_rank = 5;
        return RoundSetup{children, "", "", ""};
      },
      messages);
  const std::string text = messages.str();
  EXPECT_TRUE(text.ends_with("\nddprun: node 5 failed first\n")) << text;
}

// An agent forwards the head's notice; a worker that the notice's default action kills
// has drained, so the agent's node exits 75, not 128 + 10.
TEST(JobPolicy, AnAgentsWorkerKilledByTheForwardedNoticeHasDrained) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) {
    FakeBehaviour b;
    b.status_on_notice = killed(SIGUSR1);
    return b;
  };
  runner.signal_at(0, Ms(100), SIGUSR1);
  JobSettings settings;
  settings.agent = true;
  const JobRun job = run(runner, settings, 2);
  EXPECT_EQ(job.exit_code, kExitPreempted) << job.messages;
}

TEST(JobPolicy, AJobThatEndsBeforeTheDrainTimeIsNotDisturbed) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return exits_after(Ms(100), exited(0)); };
  JobSettings settings;
  settings.round.drain_at = runner.now() + Ms(5000);
  settings.round.drain_signal = SIGUSR2;
  EXPECT_EQ(run(runner, settings).exit_code, 0);
  EXPECT_TRUE(runner.sent.empty());
}

TEST(JobPolicy, APreemptedWorkerDoesNotStopItsPeersButAFailureAmongThemStillCounts) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    if (child == 0) return exits_after(Ms(5), exited(kExitPreempted));
    if (child == 1) return exits_after(Ms(20), exited(6));
    return exits_after(Ms(8), exited(kExitPreempted));
  };
  runner.signal_at(0, Ms(1), SIGUSR1);
  JobSettings settings;
  settings.max_restarts = 1;
  const JobRun job = run(runner, settings);
  // The failure is reported, but the notice ends the job drained: no restart.
  EXPECT_EQ(job.exit_code, kExitPreempted) << job.messages;
  EXPECT_EQ(runner.started.size(), 1u);
  EXPECT_NE(job.messages.find("exit code 6"), std::string::npos) << job.messages;
  for (const auto& sent : runner.sent_to(2)) EXPECT_EQ(sent.signal_number, SIGUSR1);
}

TEST(JobPolicy, AnExit75WithoutANoticeIsAFailure) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    return child == 0 ? exits_after(Ms(5), exited(kExitPreempted))
                      : exits_after(Ms(500), exited(0));
  };
  const JobRun job = run(runner, {});
  EXPECT_EQ(job.exit_code, kExitPreempted);
  ASSERT_FALSE(runner.sent_to(1).empty());  // the others are stopped, as after any failure
  EXPECT_EQ(runner.sent_to(1).front().signal_number, SIGTERM);
  EXPECT_NE(job.messages.find("rank 0"), std::string::npos) << job.messages;
}

TEST(JobPolicy, ADrainingRankIsNeverCutShortByTheExitTimeout) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    // Rank 0 drains at once; rank 1 takes 2 s to save its checkpoint.
    FakeBehaviour b;
    b.status_on_notice = child == 0 ? std::optional<int>(exited(kExitPreempted)) : std::nullopt;
    if (child == 1) b.exit_after = Ms(2000);
    b.exit_status = exited(kExitPreempted);
    return b;
  };
  runner.signal_at(0, Ms(10), SIGUSR1);
  JobSettings settings;
  settings.round.exit_timeout = Ms(100);
  settings.max_restarts = 1;
  const JobRun job = run(runner, settings, 2);
  EXPECT_EQ(job.exit_code, kExitPreempted) << job.messages;
  for (const auto& sent : runner.sent_to(1)) EXPECT_EQ(sent.signal_number, SIGUSR1);
  EXPECT_EQ(runner.started.size(), 1u);
}

TEST(JobPolicy, ANoticeDuringAFailedRoundsTeardownEndsTheJobDrained) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    if (child == 0) return exits_after(Ms(10), exited(1));
    FakeBehaviour b;  // takes its grace to stop
    b.ignores_stop = true;
    return b;
  };
  runner.signal_at(0, Ms(50), SIGUSR1);
  JobSettings settings;
  settings.max_restarts = 3;
  settings.round.shutdown_grace = Ms(1000);
  const JobRun job = run(runner, settings);
  EXPECT_EQ(job.exit_code, kExitPreempted) << job.messages;
  EXPECT_EQ(runner.started.size(), 1u);  // no new round
  EXPECT_NE(job.messages.find("not restarting: a preemption notice (SIGUSR1)"), std::string::npos)
      << job.messages;
}

TEST(JobPolicy, LosingTheHeadStopsThisNodesWorkers) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return runs_until_stopped(); };
  runner.signal_at(0, Ms(10), 0);  // the head's connection closes
  JobSettings settings;
  settings.agent = true;
  const JobRun job = run(runner, settings);
  EXPECT_EQ(job.exit_code, 128 + SIGHUP);
  EXPECT_EQ(runner.sent_to(3).at(0).signal_number, SIGTERM);
  EXPECT_NE(job.messages.find("lost the connection to the head ddprun"), std::string::npos);
}

TEST(JobPolicy, AFailedStartKillsTheChildrenAlreadyStartedAndRethrows) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return runs_until_stopped(true); };
  runner.fail_start_of = 2;
  EXPECT_THROW(run(runner, {}), std::system_error);
  ASSERT_EQ(runner.sent.size(), 2u);
  for (const auto& sent : runner.sent) EXPECT_EQ(sent.signal_number, SIGKILL);
  EXPECT_EQ(runner.rounds_ended, 1);
}

TEST(JobPolicy, ExitTimeoutStopsTheRanksStillRunningAfterAnEarlyCleanExit) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    return child == 1 ? exits_after(Ms(100), exited(0)) : runs_until_stopped();
  };
  JobSettings settings;
  settings.round.exit_timeout = Ms(3000);
  settings.max_restarts = 0;
  const JobRun job = run(runner, settings);
  EXPECT_EQ(job.exit_code, kExitTimedOut);
  for (std::size_t child : {0u, 2u, 3u}) {
    const auto sent = runner.sent_to(child);
    ASSERT_EQ(sent.size(), 1u) << "child " << child;
    EXPECT_EQ(sent[0].signal_number, SIGTERM);
    EXPECT_EQ(sent[0].at, Ms(3100));  // the exit, then exactly the timeout
  }
  EXPECT_NE(job.messages.find("rank 1 on node0 exited (exit code 0) and ranks 0, 2-3 were still "
                              "running 3 s later (--exit-timeout)"),
            std::string::npos)
      << job.messages;
}

TEST(JobPolicy, WithoutExitTimeoutAnEarlyExitStopsNobody) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    return child == 1 ? exits_after(Ms(100), exited(0)) : exits_after(Ms(60000), exited(0));
  };
  const JobRun job = run(runner, {});
  EXPECT_EQ(job.exit_code, 0);
  EXPECT_TRUE(runner.sent.empty());
}

TEST(JobPolicy, ExitTimeoutIsNotTriggeredWhenTheOthersFinishInTime) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    return exits_after(Ms(100 + 500 * static_cast<long>(child)), exited(0));
  };
  JobSettings settings;
  settings.round.exit_timeout = Ms(3000);
  const JobRun job = run(runner, settings);
  EXPECT_EQ(job.exit_code, 0);
  EXPECT_TRUE(runner.sent.empty());
}

TEST(JobPolicy, ATimedOutRoundIsRestartedLikeAFailure) {
  FakeRunner runner;
  runner.behaviour = [](int round, std::size_t child) {
    if (round == 1) return exits_after(Ms(10), exited(0));
    return child == 0 ? exits_after(Ms(10), exited(0)) : runs_until_stopped();
  };
  JobSettings settings;
  settings.round.exit_timeout = Ms(1000);
  settings.max_restarts = 1;
  const JobRun job = run(runner, settings);
  EXPECT_EQ(job.exit_code, 0);
  EXPECT_EQ(runner.started.size(), 2u);
}

TEST(JobPolicy, SignalsToHandleAreForwardedAndStopTheJob) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return runs_until_stopped(); };
  runner.signal_at(0, Ms(50), SIGXCPU);
  JobSettings settings;
  settings.round.extra_stop_signals = {SIGXCPU};
  const JobRun job = run(runner, settings);
  EXPECT_EQ(job.exit_code, 128 + SIGXCPU);
  for (std::size_t child = 0; child < 4; ++child) {
    // The signal itself first (as torchrun passes it on), SIGKILL after the grace to
    // workers that do not stop on it.
    const auto sent = runner.sent_to(child);
    ASSERT_EQ(sent.size(), 2u);
    EXPECT_EQ(sent[0].signal_number, SIGXCPU);
    EXPECT_EQ(sent[0].at, Ms(50));
    EXPECT_EQ(sent[1].signal_number, SIGKILL);
    EXPECT_EQ(sent[1].at, Ms(50) + kGrace);
  }
  EXPECT_NE(job.messages.find("ddprun: stopped by SIGXCPU"), std::string::npos) << job.messages;
}

TEST(JobPolicy, ExitCodesFollowTheFirstFailure) {
  for (const auto& [status, code] : std::vector<std::pair<int, int>>{
           {exited(1), 1}, {exited(127), 127}, {killed(SIGKILL), 128 + SIGKILL}}) {
    FakeRunner runner;
    runner.behaviour = [status = status](int, std::size_t child) {
      return child == 0 ? exits_after(Ms(1), status) : runs_until_stopped();
    };
    EXPECT_EQ(run(runner, {}, 2).exit_code, code);
  }
}

}  // namespace
}  // namespace ddprun

namespace ddprun {
namespace {

JobSettings with_stacks() {
  JobSettings settings;
  settings.round.capture_stacks = true;
  return settings;
}

TEST(JobPolicyStacks, TheWorkersThatOutliveTheGraceHaveTheirStacksTakenJustBeforeSigkill) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    if (child == 1) return exits_after(Ms(10), exited(1));
    return runs_until_stopped(child == 0 || child == 3);  // 0 and 3 ignore SIGTERM
  };
  const JobRun job = run(runner, with_stacks());
  ASSERT_EQ(runner.captures.size(), 1u);
  EXPECT_EQ(runner.captures[0].children, (std::vector<std::size_t>{0, 3}));
  EXPECT_EQ(runner.captures[0].at, Ms(10) + kGrace);
  EXPECT_EQ(runner.sent_to(0).back().signal_number, SIGKILL);
  EXPECT_EQ(runner.sent_to(0).back().at, Ms(10) + kGrace);
  EXPECT_NE(job.messages.find("ddprun: where the 2 ranks still running were (before SIGKILL, "
                              "after the 15 s grace):\n"
                              "ddprun:   rank 0: in step (t.py:0)\n"
                              "ddprun:   rank 3: in step (t.py:3)\n"),
            std::string::npos)
      << job.messages;
  EXPECT_EQ(job.exit_code, 1);
}

TEST(JobPolicyStacks, NoStacksWhenEveryWorkerStopsWithinTheGraceOrTheUserAsksForNone) {
  FakeRunner stops;
  stops.behaviour = [](int, std::size_t child) {
    return child == 1 ? exits_after(Ms(10), exited(1)) : runs_until_stopped();
  };
  run(stops, with_stacks());
  EXPECT_TRUE(stops.captures.empty());

  FakeRunner off;
  off.behaviour = [](int, std::size_t child) {
    return child == 1 ? exits_after(Ms(10), exited(1)) : runs_until_stopped(true);
  };
  const JobRun job = run(off, {});
  EXPECT_TRUE(off.captures.empty());
  EXPECT_EQ(job.messages.find("still running"), std::string::npos) << job.messages;
}

TEST(JobPolicyStacks, ASecondCtrlCKillsAtOnceWithoutTakingStacks) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return runs_until_stopped(true); };
  runner.signal_at(0, Ms(10), SIGINT);
  runner.signal_at(0, Ms(20), SIGINT);
  run(runner, with_stacks());
  EXPECT_TRUE(runner.captures.empty());
}

TEST(JobPolicyStacks, EachRoundTakesItsOwn) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    return child == 1 ? exits_after(Ms(10), exited(1)) : runs_until_stopped(child == 2);
  };
  JobSettings settings = with_stacks();
  settings.max_restarts = 1;
  settings.restart.allow_repeats = true;
  run(runner, settings);
  ASSERT_EQ(runner.captures.size(), 2u);
  EXPECT_EQ(runner.captures[1].round, 1);
  EXPECT_EQ(runner.captures[1].children, (std::vector<std::size_t>{2}));
}

}  // namespace
}  // namespace ddprun

namespace ddprun {
namespace {

constexpr Ms kStall{30000};

JobSettings with_stall_timeout() {
  JobSettings settings;
  settings.round.capture_stacks = true;
  settings.round.stall_timeout = kStall;
  settings.round.stall_check_every = Ms(1000);
  return settings;
}

// Ranks write a step every 100 ms until `stop` (per rank), then nothing.
std::function<std::optional<long long>(int, std::size_t, Ms)> steps_until(std::vector<Ms> stop) {
  return [stop](int, std::size_t child, Ms at) -> std::optional<long long> {
    return std::min(at, stop.at(child)).count() / 100;
  };
}

TEST(JobPolicyStall, NoProgressForTheTimeoutNamesTheRanksBehindTakesStacksAndStopsTheRound) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return runs_until_stopped(); };
  // Ranks 1 and 2 stop at step 50; the others wait for them one step later.
  runner.progress_at = steps_until({Ms(5100), Ms(5000), Ms(5000), Ms(5100)});
  const JobRun job = run(runner, with_stall_timeout());
  EXPECT_EQ(job.exit_code, kExitTimedOut);
  ASSERT_EQ(runner.captures.size(), 1u);
  EXPECT_EQ(runner.captures[0].children, (std::vector<std::size_t>{0, 1, 2, 3}));
  // Found at the first check at least the timeout after the last advance (5.1 s).
  EXPECT_GE(runner.captures[0].at, Ms(5100) + kStall);
  EXPECT_LE(runner.captures[0].at, Ms(5100) + kStall + Ms(1000));
  EXPECT_EQ(runner.sent_to(0).at(0).signal_number, SIGTERM);
  EXPECT_EQ(runner.sent_to(0).at(0).at, runner.captures[0].at);
  EXPECT_NE(job.messages.find("ddprun: error: no rank advanced for 30 s (--stall-timeout, "
                              "DDPRUN_PROGRESS_FILE): ranks 1-2 on node0 were behind, at step "
                              "50 (the furthest: step 51); stopped the round\n"),
            std::string::npos)
      << job.messages;
  EXPECT_NE(job.messages.find("where the 4 ranks still running were (when the stall was found: "
                              "no progress for 30 s)"),
            std::string::npos)
      << job.messages;
}

TEST(JobPolicyStall, AProgramThatWritesNoProgressIsNeverStalled) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return exits_after(Ms(600000), exited(0)); };
  const JobRun job = run(runner, with_stall_timeout());
  EXPECT_EQ(job.exit_code, 0);
  EXPECT_TRUE(runner.captures.empty());
  EXPECT_GT(runner.progress_reads, 0);
}

TEST(JobPolicyStall, ProgressOnAnyRankKeepsTheRoundAliveAndARankThatNeverWroteIsBehind) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return runs_until_stopped(); };
  runner.progress_at = [](int, std::size_t child, Ms at) -> std::optional<long long> {
    if (child == 3) return std::nullopt;                             // never writes
    if (child == 0) return std::min(at, Ms(100000)).count() / 1000;  // advances until 100 s
    return 7;
  };
  const JobRun job = run(runner, with_stall_timeout());
  ASSERT_EQ(runner.captures.size(), 1u);
  EXPECT_GE(runner.captures[0].at, Ms(130000));
  EXPECT_NE(job.messages.find("rank 3 on node0 was behind, with no step written (the furthest: "
                              "step 100)"),
            std::string::npos)
      << job.messages;
}

TEST(JobPolicyStall, AStallIsRestartedOnlyWhenTheRuleSaysSo) {
  for (const char* rule : {"any", "stall", "signals"}) {
    FakeRunner runner;
    runner.behaviour = [](int round, std::size_t) {
      return round == 0 ? runs_until_stopped() : exits_after(Ms(1), exited(0));
    };
    runner.progress_at = [](int, std::size_t, Ms) { return 5; };
    JobSettings settings = with_stall_timeout();
    settings.max_restarts = 1;
    settings.restart = parse_restart_on(rule);
    const JobRun job = run(runner, settings);
    const bool restarts = std::string(rule) != "signals";
    EXPECT_EQ(runner.started.size(), restarts ? 2u : 1u) << rule;
    EXPECT_EQ(job.exit_code, restarts ? 0 : kExitTimedOut) << rule;
    EXPECT_NE(job.messages.find("every rank was at step 5"), std::string::npos) << job.messages;
  }
}

TEST(JobPolicyStall, AFailureBeforeTheStallIsTheRootCauseAndNoStallIsCalled) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    return child == 2 ? exits_after(Ms(40000), exited(4)) : runs_until_stopped();
  };
  runner.progress_at = [](int, std::size_t, Ms at) {
    return std::min(at, Ms(20000)).count() / 100;
  };
  const JobRun job = run(runner, with_stall_timeout());
  EXPECT_EQ(job.exit_code, 4);
  EXPECT_TRUE(runner.captures.empty());
  EXPECT_EQ(job.messages.find("--stall-timeout"), std::string::npos) << job.messages;
}

}  // namespace
}  // namespace ddprun

namespace ddprun {
namespace {

// A head: worker 0 here, an agent (another node's ddprun) as child 1; both outlive the grace.
std::vector<ChildSpec> worker_and_agent() {
  std::vector<ChildSpec> children = workers(1);
  ChildSpec& agent = children.emplace_back();
  agent.agent = true;
  agent.node_rank = 1;
  return children;
}

TEST(JobPolicyStacks, AgentsGetTheAllowanceAfterTheGraceToSendTheirOwnStacks) {
  for (const bool second_ctrl_c : {false, true}) {
    FakeRunner runner;
    runner.behaviour = [](int, std::size_t) { return runs_until_stopped(true); };
    runner.signal_at(0, Ms(10), SIGINT);
    if (second_ctrl_c) runner.signal_at(0, Ms(10) + kGrace + Ms(100), SIGINT);
    JobSettings settings = with_stacks();
    settings.round.shutdown_grace = kGrace;
    settings.tables = false;
    std::ostringstream messages;
    run_job(
        runner, settings,
        [](int, const RoundResult*) {
          return RoundSetup{worker_and_agent(), "", "", ""};
        },
        messages);
    ASSERT_EQ(runner.captures.size(), 1u);
    EXPECT_EQ(runner.captures[0].children, (std::vector<std::size_t>{0}));  // the worker only
    EXPECT_EQ(runner.sent_to(0).back().signal_number, SIGKILL);
    EXPECT_EQ(runner.sent_to(0).back().at, Ms(10) + kGrace);
    EXPECT_EQ(runner.sent_to(1).back().signal_number, SIGKILL);
    EXPECT_EQ(runner.sent_to(1).back().at,
              Ms(10) + kGrace + (second_ctrl_c ? Ms(100) : settings.round.agent_stack_allowance))
        << second_ctrl_c;
  }
}

// --restart-scope rank: the lost rank alone is started again, in the same round.
namespace rank_scope {

void expect_said(const JobRun& job, const std::string& text) {
  EXPECT_NE(job.messages.find(text), std::string::npos) << "no \"" << text << "\" in:\n"
                                                        << job.messages;
}

JobSettings settings(int max_restarts) {
  JobSettings s;
  s.max_restarts = max_restarts;
  s.round.restart_scope = RestartScope::kRank;
  s.summaries = false;
  s.tables = false;
  return s;
}

// Child 1 (rank 1) ends with `lost` at 100 ms; the others finish at 1 s; each replacement
// (children 3, 4, ...) does what `replacement(n)` says, n counting from 0.
void lose_rank_1(FakeRunner& runner, int lost, std::function<FakeBehaviour(int n)> replacement) {
  runner.behaviour = [=](int round, std::size_t child) {
    if (round > 0) return exits_after(Ms(10), exited(0));
    if (child == 1) return exits_after(Ms(100), lost);
    if (child < 3) return exits_after(Ms(1000), exited(0));
    return replacement(static_cast<int>(child) - 3);
  };
}

TEST(JobPolicyRankScope, ALostRankIsStartedAgainAloneAndTheOthersAreNeverSignalled) {
  FakeRunner runner;
  lose_rank_1(runner, killed(SIGKILL), [](int) { return exits_after(Ms(500), exited(0)); });
  const JobRun job = run(runner, settings(2), 3);
  EXPECT_EQ(job.exit_code, 0) << job.messages;
  ASSERT_EQ(runner.started.size(), 1u);  // no second round
  ASSERT_EQ(runner.started[0].size(), 4u);
  EXPECT_EQ(runner.started[0][3].rank, 1);  // the lost one's spec again
  EXPECT_EQ(runner.started[0][3].local_rank, 1);
  EXPECT_EQ(runner.started[0][3].argv, runner.started[0][1].argv);
  // Its environment, and that it replaces a lost process (it waits for the membership).
  std::vector<std::string> env = runner.started[0][1].env;
  env.emplace_back("DDPRUN_REPLACEMENT=1");
  EXPECT_EQ(runner.started[0][3].env, env);
  EXPECT_TRUE(runner.sent.empty());  // nobody was stopped
}

TEST(JobPolicyRankScope, EveryChangeIsPublishedWithAHigherVersionAndTheReplacementsPid) {
  FakeRunner runner;
  lose_rank_1(runner, exited(1), [](int) { return exits_after(Ms(500), exited(0)); });
  run(runner, settings(1), 3);
  ASSERT_GE(runner.memberships.size(), 3u);
  for (std::size_t i = 0; i < runner.memberships.size(); ++i) {
    EXPECT_EQ(runner.memberships[i].membership.version, static_cast<long>(i + 1));
  }
  const Membership& first = runner.memberships[0].membership;
  ASSERT_EQ(first.ranks.size(), 3u);
  for (const auto& member : first.ranks) EXPECT_EQ(member.state, Membership::State::kRunning);
  EXPECT_EQ(first.ranks[1].pid, 1001);
  const Membership& lost = runner.memberships[1].membership;
  EXPECT_EQ(lost.ranks[1].state, Membership::State::kLost);
  EXPECT_EQ(lost.recoveries, 0);
  const Membership& replaced = runner.memberships[2].membership;
  EXPECT_EQ(replaced.ranks[1].state, Membership::State::kReplaced);
  EXPECT_EQ(replaced.ranks[1].pid, 1003);
  EXPECT_EQ(replaced.recoveries, 1);
  EXPECT_EQ(replaced.ranks[0].state, Membership::State::kRunning);
  EXPECT_NE(
      replaced.change.find("rank 1 (pid 1001) exit code 1; started its replacement, pid 1003"),
      std::string::npos)
      << replaced.change;
  const Membership& last = runner.memberships.back().membership;
  for (const auto& member : last.ranks) EXPECT_EQ(member.state, Membership::State::kDone);
}

TEST(JobPolicyRankScope, ReplacementsCountAgainstMaxRestartsAndAFailurePastThemEndsTheJob) {
  FakeRunner runner;
  // The replacement dies long after its recovery: a second loss, with no restart left.
  lose_rank_1(runner, killed(SIGKILL), [](int) { return exits_after(Ms(600), killed(SIGKILL)); });
  JobSettings s = settings(1);
  s.round.recovery_window = Ms(100);
  const JobRun job = run(runner, s, 3);
  EXPECT_EQ(job.exit_code, 128 + SIGKILL);
  EXPECT_EQ(runner.started.size(), 1u);
  EXPECT_EQ(runner.started[0].size(), 4u);
  expect_said(job,
              "rank 1 (local rank 1 on node0, pid 1003) failed first: signal "
              "SIGKILL");
  EXPECT_EQ(job.messages.find("restarting"), std::string::npos) << job.messages;
  // The survivors were stopped at the second loss.
  ASSERT_EQ(runner.sent_to(0).size(), 1u);
  EXPECT_EQ(runner.sent_to(0)[0].signal_number, SIGTERM);
  EXPECT_EQ(runner.sent_to(0)[0].at, Ms(700));
}

TEST(JobPolicyRankScope, AReplacementThatFailsDuringItsRecoveryFallsBackToAFullRestart) {
  FakeRunner runner;
  lose_rank_1(runner, exited(1), [](int) { return exits_after(Ms(50), exited(1)); });
  const JobRun job = run(runner, settings(3), 3);
  EXPECT_EQ(job.exit_code, 0) << job.messages;
  ASSERT_EQ(runner.started.size(), 2u);
  EXPECT_EQ(runner.started[0].size(), 4u);
  expect_said(job,
              "ddprun: not replacing the lost rank alone: rank 1's replacement "
              "exit code 1 0.05 s after its start, during its recovery");
  // One recovery and the full restart: the second of three.
  expect_said(job, "restarting all workers (restart 2 of 3)");
}

TEST(JobPolicyRankScope, AReplacementThatCannotBeStartedFallsBackToAFullRestart) {
  FakeRunner runner;
  runner.fail_start_of = 3;
  lose_rank_1(runner, exited(1), [](int) { return exits_after(Ms(50), exited(0)); });
  const JobRun job = run(runner, settings(1), 3);
  EXPECT_EQ(job.exit_code, 0) << job.messages;
  EXPECT_EQ(runner.started.size(), 2u);
  expect_said(job, "rank 1's replacement could not be started: fork");
  expect_said(job, "restarting all workers (restart 1 of 1)");
}

TEST(JobPolicyRankScope, AStopSignalStopsTheReplacementTooAndNothingStartsAfterIt) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    if (child == 1) return exits_after(Ms(100), killed(SIGKILL));
    return runs_until_stopped();
  };
  runner.signal_at(0, Ms(300), SIGTERM);
  const JobRun job = run(runner, settings(5), 3);
  EXPECT_EQ(job.exit_code, 128 + SIGTERM);
  ASSERT_EQ(runner.started.size(), 1u);
  EXPECT_EQ(runner.started[0].size(), 4u);  // the stopped ones were not replaced
  ASSERT_EQ(runner.sent_to(3).size(), 1u);
  EXPECT_EQ(runner.sent_to(3)[0].signal_number, SIGTERM);
}

TEST(JobPolicyRankScope, ANoticeReplacesNobodyAndTheJobEndsDrained) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    if (child == 1) return exits_after(Ms(200), killed(SIGKILL));
    FakeBehaviour b;
    b.status_on_notice = exited(kExitPreempted);
    return b;
  };
  runner.signal_at(0, Ms(100), SIGUSR1);
  const JobRun job = run(runner, settings(5), 3);
  EXPECT_EQ(job.exit_code, kExitPreempted);
  EXPECT_EQ(runner.started[0].size(), 3u);
}

TEST(JobPolicyRankScope, AReplacedLossStartsNoExitTimer) {
  FakeRunner runner;
  // The replacement finishes with the others, at 1 s.
  lose_rank_1(runner, killed(SIGKILL), [](int) { return exits_after(Ms(900), exited(0)); });
  JobSettings s = settings(1);
  s.round.exit_timeout = Ms(300);  // shorter than from the loss at 0.1 s to the end
  const JobRun job = run(runner, s, 3);
  EXPECT_EQ(job.exit_code, 0) << job.messages;
  EXPECT_TRUE(runner.sent.empty());
}

// Over several nodes: ranks 0 and 1 here, ranks 2 and 3 behind node 1's ddprun (child 2,
// worker_and_node1(2)), which replaces its own and reports its part.
Membership node1_part(int recoveries, Membership::State rank3, pid_t pid3) {
  Membership part;
  part.version = 1;
  part.recoveries = recoveries;
  part.ranks = {{2, Membership::State::kRunning, 501}, {3, rank3, pid3}};
  return part;
}

void everyone_finishes_at_1s(FakeRunner& runner) {
  runner.behaviour = [](int, std::size_t) {
    FakeBehaviour b = exits_after(Ms(1000), exited(0));
    b.exits_like_agent = true;
    return b;
  };
}

TEST(JobPolicyRankScope, TheHeadPublishesTheWholeOnceEveryNodeSaidWhoRunsThere) {
  FakeRunner runner;
  everyone_finishes_at_1s(runner);
  runner.report_membership_at(0, Ms(20), 2, 1, node1_part(0, Membership::State::kRunning, 502));
  runner.report_membership_at(0, Ms(200), 2, 1, node1_part(1, Membership::State::kReplaced, 777));
  const JobRun job = run(runner, settings(2), worker_and_node1(2));
  EXPECT_EQ(job.exit_code, 0) << job.messages;
  EXPECT_TRUE(runner.sent.empty());  // nobody was stopped
  ASSERT_GE(runner.memberships.size(), 3u);
  // At the start node 1 had not said anything yet: only the change, no file.
  EXPECT_FALSE(runner.memberships[0].whole);
  const auto& merged = runner.memberships[1];
  EXPECT_TRUE(merged.whole);
  EXPECT_EQ(merged.at, Ms(20));
  ASSERT_EQ(merged.membership.ranks.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_EQ(merged.membership.ranks[i].rank, static_cast<int>(i));
  EXPECT_EQ(merged.membership.ranks[2].pid, 501);
  const auto& replaced = runner.memberships[2];
  EXPECT_EQ(replaced.at, Ms(200));
  EXPECT_EQ(replaced.membership.recoveries, 1);
  EXPECT_EQ(replaced.membership.ranks[3].state, Membership::State::kReplaced);
  EXPECT_EQ(replaced.membership.ranks[3].pid, 777);
  EXPECT_TRUE(replaced.membership.change.empty()) << "node 1 said it on its own console";
  for (std::size_t i = 1; i < runner.memberships.size(); ++i) {
    EXPECT_GT(runner.memberships[i].membership.version,
              runner.memberships[i - 1].membership.version);
  }
}

TEST(JobPolicyRankScope, TheHeadKeepsTheBudgetOfEveryNodesReplacements) {
  {
    // Node 1 replaced two ranks with one restart left: the round fails at the second.
    FakeRunner runner;
    everyone_finishes_at_1s(runner);
    runner.report_membership_at(0, Ms(20), 2, 1, node1_part(0, Membership::State::kRunning, 502));
    runner.report_membership_at(0, Ms(200), 2, 1, node1_part(1, Membership::State::kReplaced, 777));
    runner.report_membership_at(0, Ms(300), 2, 1, node1_part(2, Membership::State::kReplaced, 778));
    const JobRun job = run(runner, settings(1), worker_and_node1(2));
    EXPECT_EQ(job.exit_code, 1) << job.messages;
    EXPECT_EQ(runner.started.size(), 1u) << "the restart was spent";
    expect_said(job, "node 1 replaced a lost rank beyond the round's 1 restart(s) left");
    ASSERT_EQ(runner.sent_to(0).size(), 1u);
    EXPECT_EQ(runner.sent_to(0)[0].at, Ms(300));
    EXPECT_EQ(runner.sent_to(0)[0].signal_number, SIGTERM);
  }
  {
    // Node 1's replacement spent the last restart: a rank lost here is not replaced.
    FakeRunner runner;
    runner.behaviour = [](int round, std::size_t child) {
      FakeBehaviour b = exits_after(Ms(child == 1 && round == 0 ? 400 : 1000),
                                    child == 1 && round == 0 ? killed(SIGKILL) : exited(0));
      b.exits_like_agent = true;
      return b;
    };
    runner.report_membership_at(0, Ms(20), 2, 1, node1_part(0, Membership::State::kRunning, 502));
    runner.report_membership_at(0, Ms(200), 2, 1, node1_part(1, Membership::State::kReplaced, 777));
    const JobRun job = run(runner, settings(1), worker_and_node1(2));
    EXPECT_EQ(job.exit_code, 128 + SIGKILL) << job.messages;
    ASSERT_EQ(runner.started.size(), 1u);
    EXPECT_EQ(runner.started[0].size(), 3u) << "no replacement here";
  }
}

// A head over ssh with spare nodes: node 1's ddprun (child 2) is lost at 0.3 s; `spares`
// gives the agent that starts its ranks on node2 (child 3), which reports them at 0.4 s.
struct SpareRun {
  JobRun job;
  int spares_taken = 0;
};
SpareRun run_with_spare(FakeRunner& runner, JobSettings settings, bool spare_fits = true,
                        bool again = false,
                        std::optional<std::chrono::milliseconds> awaited = std::nullopt,
                        const std::string& waiting_spare = "") {
  settings.round.shutdown_grace = kGrace;
  settings.colour = false;
  SpareRun result;
  const SpareNodes spares = [&](int node) -> std::optional<SpareNode> {
    EXPECT_EQ(node, 1);
    if (!spare_fits) return std::nullopt;
    ++result.spares_taken;
    SpareNode spare;
    spare.agent = worker_and_node1(0).front();
    spare.agent.host = again ? "node1" : "node2";
    spare.again = again;
    if (awaited) spare.agent.join_by = runner.now() + *awaited;
    spare.waiting_spare = waiting_spare;
    return spare;
  };
  std::ostringstream messages;
  result.job.exit_code = run_job(
      runner, settings,
      [&](int, const RoundResult*) {
        RoundSetup setup{worker_and_node1(2), "", "", ""};
        setup.spares = spares;
        return setup;
      },
      messages);
  result.job.messages = messages.str();
  return result;
}

void lose_node1_at_300ms(FakeRunner& runner) {
  runner.behaviour = [](int round, std::size_t child) {
    const bool lost = round == 0 && child == 2;
    FakeBehaviour b = exits_after(Ms(lost ? 300 : 1000), lost ? exited(255) : exited(0));
    b.exits_like_agent = true;
    return b;
  };
  runner.report_membership_at(0, Ms(20), 2, 1, node1_part(0, Membership::State::kRunning, 502));
}

Membership spare_part() {
  Membership part;
  part.version = 1;
  part.ranks = {{2, Membership::State::kReplaced, 601}, {3, Membership::State::kReplaced, 602}};
  return part;
}

TEST(JobPolicyRankScope, ALostNodesRanksStartOnASpareNodeAndTheOthersGoOn) {
  FakeRunner runner;
  lose_node1_at_300ms(runner);
  // Node 1's last words after its loss count for nothing: the spare stands for it.
  runner.report_membership_at(0, Ms(350), 2, 1, node1_part(5, Membership::State::kReplaced, 9));
  runner.report_membership_at(0, Ms(400), 3, 1, spare_part());
  const SpareRun run = run_with_spare(runner, settings(3));
  EXPECT_EQ(run.job.exit_code, 0) << run.job.messages;
  EXPECT_EQ(run.spares_taken, 1);
  EXPECT_TRUE(runner.sent.empty()) << "nobody was stopped";
  ASSERT_EQ(runner.started.size(), 1u) << "no full restart";
  ASSERT_EQ(runner.started[0].size(), 4u);
  EXPECT_EQ(runner.started[0][3].host, "node2");
  // The loss: said, but not whole until the spare said who runs there.
  const auto said = std::find_if(runner.memberships.begin(), runner.memberships.end(),
                                 [](const auto& m) { return !m.membership.change.empty(); });
  ASSERT_NE(said, runner.memberships.end());
  EXPECT_EQ(said->at, Ms(300));
  EXPECT_FALSE(said->whole);
  EXPECT_NE(said->membership.change.find("node 1 (node1) was lost (its ddprun ended: exit code "
                                         "255)"),
            std::string::npos)
      << said->membership.change;
  EXPECT_NE(said->membership.change.find("; started its 2 rank(s) on the spare node node2 (1 "
                                         "restart(s) left)"),
            std::string::npos)
      << said->membership.change;
  const auto whole = std::find_if(said, runner.memberships.end(), [](const auto& m) {
    return m.whole && m.membership.recoveries > 0;
  });
  ASSERT_NE(whole, runner.memberships.end());
  EXPECT_EQ(whole->at, Ms(400));
  EXPECT_EQ(whole->membership.recoveries, 2);
  ASSERT_EQ(whole->membership.ranks.size(), 4u);
  EXPECT_EQ(whole->membership.ranks[2].pid, 601);
  EXPECT_EQ(whole->membership.ranks[3].state, Membership::State::kReplaced);
  EXPECT_EQ(whole->membership.ranks[3].pid, 602);
}

TEST(JobPolicyRankScope, ALostNodeNeedsARecoveryForEachOfItsRanksAndASpareThatFits) {
  {
    FakeRunner runner;
    lose_node1_at_300ms(runner);
    const SpareRun run = run_with_spare(runner, settings(1));
    EXPECT_EQ(run.spares_taken, 0);
    expect_said(run.job,
                "node 1 (node1) was lost with 2 rank(s) and the round has 1 restart(s) "
                "left (--max-restarts)");
    expect_said(run.job, "restarting all workers (restart 1 of 1)");
    EXPECT_EQ(run.job.exit_code, 0) << run.job.messages;
    EXPECT_EQ(runner.started.size(), 2u);
  }
  {
    FakeRunner runner;
    lose_node1_at_300ms(runner);
    const SpareRun run = run_with_spare(runner, settings(3), /*spare_fits=*/false);
    expect_said(run.job, "restarting all workers (restart 1 of 3)");
    EXPECT_EQ(runner.started.size(), 2u);
    EXPECT_EQ(runner.started[0].size(), 3u);
  }
}

TEST(JobPolicyRankScope, WithNoSpareThatFitsALostNodesRanksStartOnItAgain) {
  FakeRunner runner;
  lose_node1_at_300ms(runner);
  runner.report_membership_at(0, Ms(400), 3, 1, spare_part());
  const SpareRun run = run_with_spare(runner, settings(2), true, /*again=*/true);
  EXPECT_EQ(run.job.exit_code, 0) << run.job.messages;
  ASSERT_EQ(runner.started.size(), 1u) << "no full restart";
  ASSERT_EQ(runner.started[0].size(), 4u);
  EXPECT_EQ(runner.started[0][3].host, "node1");
  ASSERT_FALSE(runner.memberships.empty());
  const auto said = std::find_if(runner.memberships.begin(), runner.memberships.end(),
                                 [](const auto& m) { return !m.membership.change.empty(); });
  ASSERT_NE(said, runner.memberships.end());
  EXPECT_NE(said->membership.change.find("; started its 2 rank(s) there again, with no spare "
                                         "node that fits (0 restart(s) left)"),
            std::string::npos)
      << said->membership.change;
}

// Per-node launchers: the lost node's place awaits its ddprun's join (the runner attaches it);
// the line says where its ranks go on and for how long, or names the ddprun that waits as a
// spare to take it.
TEST(JobPolicyRankScope, ALostPerNodeLaunchersRanksGoOnWhereItsDdprunJoinsAgain) {
  for (const std::string waiting : {"", "node3"}) {
    FakeRunner runner;
    lose_node1_at_300ms(runner);
    runner.report_membership_at(0, Ms(400), 3, 1, spare_part());
    const SpareRun run = run_with_spare(runner, settings(2), true, /*again=*/true,
                                        std::chrono::seconds(600), waiting);
    EXPECT_EQ(run.job.exit_code, 0) << run.job.messages;
    ASSERT_EQ(runner.started.size(), 1u) << "no full restart";
    ASSERT_EQ(runner.started[0].size(), 4u);
    EXPECT_TRUE(runner.started[0][3].join_by.has_value());
    const auto said = std::find_if(runner.memberships.begin(), runner.memberships.end(),
                                   [](const auto& m) { return !m.membership.change.empty(); });
    ASSERT_NE(said, runner.memberships.end());
    const std::string where =
        waiting.empty() ? "where its ddprun joins again (start it with the same options, on "
                          "node1 or another host, within 600 s)"
                        : "on node3, whose ddprun waits as a spare";
    EXPECT_NE(said->membership.change.find("node 1 (node1) was lost (its ddprun ended: exit code "
                                           "255); its 2 rank(s) go on " +
                                           where + " (0 restart(s) left)"),
              std::string::npos)
        << said->membership.change;
  }
}

// ... and one whose ddprun never joins ends with the wait (exit 255, nothing reported): the
// round fails saying why, and the job ends with it (the node's ranks spent the restarts).
TEST(JobPolicyRankScope, ALostPerNodeLauncherThatNeverJoinsAgainFailsTheRoundSayingWhy) {
  FakeRunner runner;
  runner.behaviour = [](int round, std::size_t child) {
    const bool lost = round == 0 && child == 2;
    const bool awaited = round == 0 && child == 3;  // started at 0.3 s: ends at 0.9 s
    FakeBehaviour b = exits_after(Ms(lost      ? 300
                                     : awaited ? 600
                                               : 1000),
                                  lost || awaited ? exited(255) : exited(0));
    b.exits_like_agent = true;
    return b;
  };
  runner.report_membership_at(0, Ms(20), 2, 1, node1_part(0, Membership::State::kRunning, 502));
  const SpareRun run =
      run_with_spare(runner, settings(2), true, /*again=*/true, std::chrono::milliseconds(600));
  EXPECT_EQ(run.job.exit_code, 255) << run.job.messages;
  EXPECT_EQ(runner.started.size(), 1u) << "no restart is left";
  expect_said(run.job,
              "not replacing the lost rank alone: node 1 (node1)'s ddprun did not join again in "
              "time (--rdzv-conf join_timeout)");
}

// An ssh tree: node 1's agent started node 2's (below it). Node 2's ddprun is lost: node 1
// hands it up to the head (kLost, at once) and goes on; its round ends well. Without the
// tree's hand-up (not an agent of the tree) the same loss fails the round.
// Node 1's agent (`tree`: of the ssh tree) with a rank of its own and node 2's agent below
// it, standing for `control_nodes` nodes; node 2's ddprun is lost at 300 ms.
JobRun run_agent_losing_node2(FakeRunner& runner, bool tree, int control_nodes) {
  runner.behaviour = [](int, std::size_t child) {
    FakeBehaviour b = exits_after(Ms(child == 1 ? 300 : 1000), child == 1 ? exited(255) : 0);
    b.exits_like_agent = child == 1;
    return b;
  };
  std::vector<ChildSpec> children = workers(1);
  ChildSpec& below = children.emplace_back();
  below.agent = true;
  below.node_rank = 2;
  below.host = "node3";
  below.control_nodes = control_nodes;
  JobSettings s = settings(2 * control_nodes);
  s.agent = true;
  s.round.node_rank = 1;
  s.round.hands_up_lost_nodes = tree;
  return run(runner, s, children);
}

TEST(JobPolicyRankScope, AnAgentOfTheSshTreeHandsUpALostNodeBelowItAndGoesOn) {
  for (const bool tree : {true, false}) {
    FakeRunner runner;
    const JobRun job = run_agent_losing_node2(runner, tree, 1);
    const auto lost =
        std::find_if(runner.announced.begin(), runner.announced.end(),
                     [](const auto& a) { return a.event.kind == NodeEvent::Kind::kLost; });
    if (!tree) {
      EXPECT_EQ(job.exit_code, 255) << job.messages;
      EXPECT_EQ(lost, runner.announced.end());
      continue;
    }
    EXPECT_EQ(job.exit_code, 0) << job.messages;
    EXPECT_TRUE(runner.sent.empty()) << "nobody was stopped";
    EXPECT_EQ(runner.started.size(), 1u);
    ASSERT_NE(lost, runner.announced.end());
    EXPECT_EQ(lost->at, Ms(300));
    EXPECT_EQ(lost->event.node, 2);
    EXPECT_EQ(lost->event.code, 255);
    EXPECT_EQ(lost->event.what, "node 2 (node3) was lost (its ddprun ended: exit code 255)");
  }
}

// An ssh tree seen from the head: node 1's agent (child 2) passes on node 1's part and node
// 2's (ranks 4 and 5, below it), returned.
Membership node2_below_node1(FakeRunner& runner) {
  Membership node2;
  node2.version = 1;
  node2.ranks = {{4, Membership::State::kRunning, 701}, {5, Membership::State::kRunning, 702}};
  runner.report_membership_at(0, Ms(20), 2, 1, node1_part(0, Membership::State::kRunning, 502));
  runner.report_membership_at(0, Ms(20), 2, 2, node2);
  return node2;
}

// What node 1's agent says of node 2 when its ddprun is lost (Round::hand_up).
NodeEvent node2_handed_up() {
  NodeEvent lost;
  lost.kind = NodeEvent::Kind::kLost;
  lost.node = 2;
  lost.code = 255;
  lost.what = "node 2 (node3) was lost (its ddprun ended: exit code 255)";
  return lost;
}

// The head's side: node 1's agent (node 1 and node 2 below it) hands up node 2, lost. The
// head starts node 2's ranks under an agent of its own on the spare node, each a recovery;
// what still comes of node 2 through node 1's agent is its last words; the membership is
// whole again once the spare said who runs there. With no spare, the round fails on it.
TEST(JobPolicyRankScope, AHeadMovesANodeHandedUpFromBelowAnAgentToAnAgentOfItsOwn) {
  for (const bool spare_fits : {true, false}) {
    FakeRunner runner;
    runner.behaviour = [](int, std::size_t) {
      FakeBehaviour b = exits_after(Ms(1000), exited(0));
      b.exits_like_agent = true;
      return b;
    };
    const Membership node2 = node2_below_node1(runner);
    const NodeEvent lost = node2_handed_up();
    NodeEvent outside = lost;  // not of node 1's subtree (nodes 1 and 2): nothing to move
    outside.node = 7;
    runner.report_at(0, Ms(250), 2, outside);
    runner.report_at(0, Ms(300), 2, lost);
    Membership stale = node2;
    stale.ranks[0].pid = 9;
    runner.report_membership_at(0, Ms(350), 2, 2, stale);
    Membership spare = node2;
    spare.ranks = {{4, Membership::State::kReplaced, 801}, {5, Membership::State::kReplaced, 802}};
    runner.report_membership_from_host_at(0, Ms(400), "node4", 2, spare);
    std::vector<ChildSpec> children = worker_and_node1(2);
    children[2].control_nodes = 2;  // node 1 and node 2, below it
    const SpareNodes spares = [&](int node) -> std::optional<SpareNode> {
      EXPECT_EQ(node, 2);
      if (!spare_fits) return std::nullopt;
      SpareNode place;
      place.agent.agent = true;
      place.agent.node_rank = 2;
      place.agent.host = "node4";
      return place;
    };
    const JobRun job = run(runner, settings(2), children, spares);
    const int code = job.exit_code;
    const std::ostringstream messages(job.messages);
    if (!spare_fits) {
      ASSERT_GE(runner.started.size(), 2u) << "a full restart";
      // Node 1's agent, which would go on otherwise, is stopped with the others.
      EXPECT_FALSE(runner.sent_to(2).empty()) << "node 1's agent was not stopped";
      EXPECT_NE(messages.str().find("ddprun: not replacing the lost rank alone: node 2 (node3) was "
                                    "lost (its ddprun ended: exit code 255), below node 1"),
                std::string::npos)
          << messages.str();
      continue;
    }
    EXPECT_EQ(code, 0) << messages.str();
    EXPECT_TRUE(runner.sent.empty()) << "nobody was stopped";
    ASSERT_EQ(runner.started.size(), 1u) << "no full restart";
    ASSERT_EQ(runner.started[0].size(), 4u);
    EXPECT_EQ(runner.started[0][3].node_rank, 2);
    EXPECT_EQ(runner.started[0][3].host, "node4");
    EXPECT_EQ(runner.fewer_below, std::vector<std::size_t>{2}) << "node 1's agent answers alone";
    const auto said = std::find_if(runner.memberships.begin(), runner.memberships.end(),
                                   [](const auto& m) { return !m.membership.change.empty(); });
    ASSERT_NE(said, runner.memberships.end());
    EXPECT_EQ(said->at, Ms(300));
    EXPECT_FALSE(said->whole) << "not whole until the spare said who runs there";
    EXPECT_EQ(said->membership.change,
              "node 2 (node3) was lost (its ddprun ended: exit code 255); started its 2 rank(s) "
              "on the spare node node4 (0 restart(s) left)");
    const auto whole = std::find_if(said, runner.memberships.end(), [](const auto& m) {
      return m.whole && m.membership.recoveries > 0;
    });
    ASSERT_NE(whole, runner.memberships.end());
    EXPECT_EQ(whole->at, Ms(400));
    EXPECT_EQ(whole->membership.recoveries, 2);
    ASSERT_EQ(whole->membership.ranks.size(), 6u);
    EXPECT_EQ(whole->membership.ranks[4].pid, 801);
    EXPECT_EQ(whole->membership.ranks[5].state, Membership::State::kReplaced);
  }
}

// A node moved from below an agent, then its stand-in lost after its recovery window: the
// next stand-in's part counts (the membership is whole again with its processes).
TEST(JobPolicyRankScope, ANodeMovedFromBelowAnAgentAndLostAgainGoesOnOnTheNextSpare) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t child) {
    FakeBehaviour b = exits_after(Ms(child == 3 ? 500 : 2000), child == 3 ? exited(255) : 0);
    b.exits_like_agent = true;
    return b;
  };
  const Membership node2 = node2_below_node1(runner);
  const NodeEvent lost = node2_handed_up();
  runner.report_at(0, Ms(100), 2, lost);
  Membership first = node2;
  first.ranks = {{4, Membership::State::kReplaced, 801}, {5, Membership::State::kReplaced, 802}};
  runner.report_membership_from_host_at(0, Ms(200), "spare1", 2, first);
  Membership second = node2;
  second.ranks = {{4, Membership::State::kReplaced, 901}, {5, Membership::State::kReplaced, 902}};
  runner.report_membership_from_host_at(0, Ms(900), "spare2", 2, second);
  std::vector<ChildSpec> children = worker_and_node1(2);
  children[2].control_nodes = 2;
  int taken = 0;
  const SpareNodes spares = [&](int node) -> std::optional<SpareNode> {
    EXPECT_EQ(node, 2);
    SpareNode place;
    place.agent.agent = true;
    place.agent.node_rank = 2;
    place.agent.host = "spare" + std::to_string(++taken);
    return place;
  };
  JobSettings s = settings(4);
  s.round.recovery_window = Ms(100);
  const JobRun job = run(runner, s, children, spares);
  const int code = job.exit_code;
  const std::ostringstream messages(job.messages);
  EXPECT_EQ(code, 0) << messages.str();
  ASSERT_EQ(runner.started.size(), 1u) << "no full restart";
  EXPECT_EQ(taken, 2);
  const auto whole = std::find_if(runner.memberships.begin(), runner.memberships.end(),
                                  [](const auto& m) { return m.whole && m.at >= Ms(900); });
  ASSERT_NE(whole, runner.memberships.end()) << "the second stand-in's part was not taken";
  ASSERT_EQ(whole->membership.ranks.size(), 6u);
  EXPECT_EQ(whole->membership.ranks[4].pid, 901);
  EXPECT_EQ(whole->membership.recoveries, 4);
}

// An inner node of the ssh tree, seen from the head: node 1's agent (child 2) stands for
// nodes 1, 2 and 3 and passes on their parts (ranks 2-7, two a node).
Membership two_ranks_from(int first, pid_t pid, Membership::State state) {
  Membership part;
  part.version = 1;
  part.ranks = {{first, state, pid}, {first + 1, state, pid + 1}};
  return part;
}

// A spare node for each node asked for (`asked` records them): node N's is "spareN"; none
// for node `none_for`.
SpareNodes spare_per_node(std::vector<int>& asked, int none_for = -1) {
  return [&asked, none_for](int node) -> std::optional<SpareNode> {
    asked.push_back(node);
    if (node == none_for) return std::nullopt;
    SpareNode place;
    place.agent.agent = true;
    place.agent.node_rank = node;
    place.agent.host = "spare" + std::to_string(node);
    return place;
  };
}

// Node 1's ddprun is lost, and nodes 2 and 3, below it in the tree, with it. The head
// starts all three nodes' ranks under agents of its own (each rank a recovery), says so a
// node, and publishes a whole membership once every stand-in said who runs there. A node
// the head moved from below node 1 earlier runs elsewhere: it is not moved again. Without
// the budget for every rank, none moves and the round fails saying why.
TEST(JobPolicyRankScope, AHeadMovesEveryNodeOfALostInnerAgentsSubtree) {
  enum class Case { kAll, kOneMovedBefore, kBudgetShort };
  for (const Case c : {Case::kAll, Case::kOneMovedBefore, Case::kBudgetShort}) {
    SCOPED_TRACE(static_cast<int>(c));
    FakeRunner runner;
    runner.behaviour = [](int round, std::size_t child) {
      FakeBehaviour b = exits_after(Ms(round == 0 && child == 2 ? 300 : 1000),
                                    round == 0 && child == 2 ? exited(255) : exited(0));
      b.exits_like_agent = child >= 2;
      return b;
    };
    for (int node = 1; node <= 3; ++node) {
      runner.report_membership_at(
          0, Ms(20), 2, node,
          two_ranks_from(2 * node, 500 + 10 * node, Membership::State::kRunning));
    }
    if (c == Case::kOneMovedBefore) {
      runner.report_at(0, Ms(100), 2, node2_handed_up());
      runner.report_membership_from_host_at(0, Ms(150), "spare2", 2,
                                            two_ranks_from(4, 620, Membership::State::kReplaced));
    }
    for (int node = 1; node <= 3; ++node) {
      runner.report_membership_from_host_at(
          0, Ms(400), "spare" + std::to_string(node), node,
          two_ranks_from(2 * node, 700 + 10 * node, Membership::State::kReplaced));
    }
    std::vector<ChildSpec> children = worker_and_node1(2);
    children[2].control_nodes = 3;  // nodes 1, 2 and 3
    std::vector<int> asked;
    const JobRun job =
        run(runner, settings(c == Case::kBudgetShort ? 5 : 8), children, spare_per_node(asked));
    if (c == Case::kBudgetShort) {
      EXPECT_TRUE(asked.empty()) << "a node moved without the budget for all";
      ASSERT_GE(runner.started.size(), 2u) << "a full restart";
      expect_said(job,
                  "not replacing the lost rank alone: node 1 (node1) was lost with the 2 node(s) "
                  "below it in the ssh tree, 6 rank(s) in all, and the round has 5 restart(s) "
                  "left (--max-restarts)");
      continue;
    }
    EXPECT_EQ(job.exit_code, 0) << job.messages;
    ASSERT_EQ(runner.started.size(), 1u) << "no full restart";
    std::vector<std::string> changes;
    for (const auto& m : runner.memberships) {
      if (!m.membership.change.empty()) changes.push_back(m.membership.change);
    }
    if (c == Case::kOneMovedBefore) {
      EXPECT_EQ(asked, (std::vector<int>{2, 1, 3}));
      ASSERT_EQ(changes.size(), 3u);
      EXPECT_EQ(changes[1],
                "node 1 (node1) was lost (its ddprun ended: exit code 255), and with it the 1 "
                "node(s) below it in the ssh tree; started its 2 rank(s) on the spare node "
                "spare1 (4 restart(s) left)");
      EXPECT_EQ(changes[2],
                "node 3, below node 1 (node1) in the ssh tree, went with it; started its 2 "
                "rank(s) on the spare node spare3 (2 restart(s) left)");
      continue;
    }
    EXPECT_EQ(asked, (std::vector<int>{1, 2, 3}));
    ASSERT_EQ(runner.started[0].size(), 6u);
    for (std::size_t i = 3; i < 6; ++i) {
      EXPECT_EQ(runner.started[0][i].node_rank, static_cast<int>(i) - 2);
      EXPECT_EQ(runner.started[0][i].host, "spare" + std::to_string(i - 2));
    }
    ASSERT_EQ(changes.size(), 3u);
    EXPECT_EQ(changes[0],
              "node 1 (node1) was lost (its ddprun ended: exit code 255), and with it the 2 "
              "node(s) below it in the ssh tree; started its 2 rank(s) on the spare node spare1 "
              "(6 restart(s) left)");
    EXPECT_EQ(changes[1],
              "node 2, below node 1 (node1) in the ssh tree, went with it; started its 2 rank(s) "
              "on the spare node spare2 (4 restart(s) left)");
    const auto whole = std::find_if(runner.memberships.begin(), runner.memberships.end(),
                                    [](const auto& m) { return m.whole && m.at >= Ms(300); });
    ASSERT_NE(whole, runner.memberships.end());
    EXPECT_EQ(whole->at, Ms(400)) << "whole only once every stand-in said who runs there";
    ASSERT_EQ(whole->membership.ranks.size(), 8u);
    for (std::size_t r = 2; r < 8; ++r) {
      EXPECT_EQ(whole->membership.ranks[r].state, Membership::State::kReplaced) << r;
      EXPECT_GE(whole->membership.ranks[r].pid, 700) << r;
    }
    EXPECT_EQ(whole->membership.recoveries, 6);
  }
}

// An agent of the tree whose child, node 2, stands for nodes 2 and 3 (below it): the child's
// ddprun lost, the agent hands up both nodes, each on its own, and goes on.
TEST(JobPolicyRankScope, AnAgentHandsUpEveryNodeBelowALostInnerChild) {
  FakeRunner runner;
  const JobRun job = run_agent_losing_node2(runner, /*tree=*/true, /*control_nodes=*/2);
  EXPECT_EQ(job.exit_code, 0) << job.messages;
  EXPECT_TRUE(runner.sent.empty()) << "nobody was stopped";
  std::vector<NodeEvent> lost;
  for (const auto& a : runner.announced) {
    if (a.event.kind == NodeEvent::Kind::kLost) lost.push_back(a.event);
  }
  ASSERT_EQ(lost.size(), 1u) << "one event for the node and the node below it";
  EXPECT_EQ(lost[0].node, 2);
  EXPECT_EQ(lost[0].nodes, 2);
  EXPECT_EQ(lost[0].what, "node 2 (node3) was lost (its ddprun ended: exit code 255)");
}

// An agent of the tree that is given a lost node from below its child (node 3, below node 2)
// passes it on up, the head's to move, and goes on.
TEST(JobPolicyRankScope, AnAgentPassesUpANodeLostFurtherDown) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return exits_after(Ms(1000), exited(0)); };
  NodeEvent lost = node2_handed_up();
  lost.node = 3;
  lost.what = "node 3 (node4) was lost (its ddprun ended: exit code 255)";
  runner.report_at(0, Ms(300), 1, lost);
  std::vector<ChildSpec> children = workers(1);
  ChildSpec& below = children.emplace_back();
  below.agent = true;
  below.node_rank = 2;
  below.host = "node3";
  below.control_nodes = 2;
  JobSettings s = settings(2);
  s.agent = true;
  s.round.node_rank = 1;
  s.round.hands_up_lost_nodes = true;
  const JobRun job = run(runner, s, children);
  EXPECT_EQ(job.exit_code, 0) << job.messages;
  EXPECT_TRUE(runner.sent.empty()) << "nobody was stopped";
  const auto up = std::find_if(runner.announced.begin(), runner.announced.end(), [](const auto& a) {
    return a.event.kind == NodeEvent::Kind::kLost;
  });
  ASSERT_NE(up, runner.announced.end());
  EXPECT_EQ(up->event.node, 3);
  EXPECT_EQ(up->event.what, lost.what);
}

// The head's side: node 1's agent (nodes 1-4 below the head) hands up node 2 and node 3 below
// it, lost together (nodes 2). Both move, the lines naming each; with a budget short of their
// 4 ranks neither does, and the round fails on the loss; with no spare for node 3, the round
// fails saying so, and the stand-in started for node 2 spends no restart (the replacement
// node 2 made itself before still does).
TEST(JobPolicyRankScope, AHeadMovesANodeHandedUpWithTheNodesBelowItTogether) {
  enum class Case { kBoth, kBudgetShort, kNoSpareBelow };
  for (const Case c : {Case::kBoth, Case::kBudgetShort, Case::kNoSpareBelow}) {
    SCOPED_TRACE(static_cast<int>(c));
    FakeRunner runner;
    runner.behaviour = [](int, std::size_t) {
      FakeBehaviour b = exits_after(Ms(1000), exited(0));
      b.exits_like_agent = true;
      return b;
    };
    for (int node = 1; node <= 3; ++node) {
      Membership part = two_ranks_from(2 * node, 500 + 10 * node, Membership::State::kRunning);
      // Without a spare below: node 2 replaced a rank of its own before; that one counts.
      if (c == Case::kNoSpareBelow && node == 2) part.recoveries = 1;
      runner.report_membership_at(0, Ms(20), 2, node, part);
    }
    NodeEvent lost = node2_handed_up();
    lost.nodes = 2;
    runner.report_at(0, Ms(300), 2, lost);
    std::vector<ChildSpec> children = worker_and_node1(2);
    children[2].control_nodes = 4;
    std::vector<int> asked;
    const JobRun job = run(runner, settings(c == Case::kBudgetShort ? 3 : 6), children,
                           spare_per_node(asked, c == Case::kNoSpareBelow ? 3 : -1));
    if (c != Case::kBoth) {
      ASSERT_GE(runner.started.size(), 2u) << "a full restart";
      if (c == Case::kBudgetShort) {
        EXPECT_TRUE(asked.empty()) << "a node moved without the budget for all";
        expect_said(job,
                    "node 2 (node3) was lost with the 1 node(s) below it in the ssh tree, "
                    "4 rank(s) in all, and the round has 3 restart(s) left");
        expect_said(job, "restarting all workers (restart 1 of 3)");
      } else {
        expect_said(job,
                    "node 3, below node 2 (node3) in the ssh tree and lost with it, has no "
                    "spare node that fits");
        expect_said(job, "restarting all workers (restart 2 of 6)");
      }
      continue;
    }
    EXPECT_EQ(job.exit_code, 0) << job.messages;
    ASSERT_EQ(runner.started.size(), 1u) << "no full restart";
    EXPECT_EQ(asked, (std::vector<int>{2, 3}));
    EXPECT_EQ(runner.fewer_below, (std::vector<std::size_t>{2, 2})) << "two answers fewer";
    std::vector<std::string> changes;
    for (const auto& m : runner.memberships) {
      if (!m.membership.change.empty()) changes.push_back(m.membership.change);
    }
    ASSERT_EQ(changes.size(), 2u);
    EXPECT_EQ(changes[0],
              "node 2 (node3) was lost (its ddprun ended: exit code 255), and with it the 1 "
              "node(s) below it in the ssh tree; started its 2 rank(s) on the spare node spare2 "
              "(4 restart(s) left)");
    EXPECT_EQ(changes[1],
              "node 3, below node 2 (node3) in the ssh tree, went with it; started its 2 "
              "rank(s) on the spare node spare3 (2 restart(s) left)");
  }
}

TEST(JobPolicyRankScope, AnAgentInALostNodesPlaceStartsReplacements) {
  FakeRunner runner;
  runner.behaviour = [](int, std::size_t) { return exits_after(Ms(100), exited(0)); };
  JobSettings s = settings(2);
  s.agent = true;
  s.round.starts_replacements = true;
  const JobRun job = run(runner, s, 2);
  EXPECT_EQ(job.exit_code, 0) << job.messages;
  ASSERT_FALSE(runner.memberships.empty());
  for (const auto& member : runner.memberships[0].membership.ranks) {
    EXPECT_EQ(member.state, Membership::State::kReplaced);
  }
  EXPECT_EQ(runner.memberships[0].membership.recoveries, 0) << "the head counted them";
}

TEST(JobPolicyRankScope, UnderJobScopeNothingIsPublished) {
  FakeRunner runner;
  lose_rank_1(runner, exited(1), [](int) { return exits_after(Ms(50), exited(0)); });
  JobSettings s = settings(1);
  s.round.restart_scope = RestartScope::kJob;
  const JobRun job = run(runner, s, 3);
  EXPECT_EQ(job.exit_code, 0);
  EXPECT_EQ(runner.started.size(), 2u);
  EXPECT_TRUE(runner.memberships.empty());
}

}  // namespace rank_scope

}  // namespace
}  // namespace ddprun
