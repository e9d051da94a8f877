// The real runner with real processes: an ssh agent gets signals as messages on its stdin,
// and one that stops reading them is killed, never waited for.
#include "run/process_runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "run/job.h"
#include "run/process.h"
#include "temp_dir.h"

namespace ddprun {
namespace {

TEST(ProcessRunner, AnAgentThatStopsReadingItsMessagesIsKilledNotWaitedFor) {
  ::alarm(60);  // the failure this guards against is a write that never returns
  SignalChannel signals;
  Guardian guardian;
  ProcessRunner runner(signals, guardian, ProcessRunnerConfig{});
  ChildSpec agent;
  agent.agent = true;
  agent.path = "/bin/sleep";
  agent.argv = {"sleep", "60"};  // never reads its stdin, like a stopped agent or ssh link
  agent.hello = "{}\n";
  runner.start(agent);
  // Far more than the 64 KiB pipe holds: every call must return at once, and once the pipe
  // is full the agent gets SIGKILL.
  for (int i = 0; i < 20000; ++i) runner.signal(0, SIGUSR1);
  const RunnerEvent event = runner.wait(RunnerClock::now() + std::chrono::seconds(30));
  ::alarm(0);
  ASSERT_EQ(event.kind, RunnerEvent::Kind::kExited);
  EXPECT_TRUE(WIFSIGNALED(event.wait_status) && WTERMSIG(event.wait_status) == SIGKILL)
      << "wait status " << event.wait_status;
}

// A worker whose output stays open a moment after it exits (here a grandchild in a session
// of its own holds it): the round ends when that output closes, not at the drain deadline
// (60 s here; it was the 2 s default that every such round waited out).
TEST(ProcessRunner, TheRoundEndsWhenTheLastOutputClosesNotAtTheDrainDeadline) {
  SignalChannel signals;
  Guardian guardian;
  ProcessRunner runner(signals, guardian, ProcessRunnerConfig{});
  ChildSpec worker;
  worker.rank = 0;
  worker.path = "/bin/sh";
  // The grandchild says it has left the worker's process group (which ddprun kills when
  // the worker exits) before the worker exits; then it keeps stdout 0.3 s longer.
  const support::TempDir dir;
  const std::string ready = dir.path() + "/ready";
  worker.argv = {"sh", "-c",
                 "setsid sh -c 'touch \"$0\"; sleep 0.3' \"" + ready + "\" & while [ ! -e \"" +
                     ready + "\" ]; do sleep 0.01; done; exit 0"};
  RoundPolicy policy;
  policy.drain_after_exit = std::chrono::seconds(60);
  const auto started = RunnerClock::now();
  const RoundResult result = run_round(runner, {worker}, policy);
  EXPECT_EQ(result.outcome, Outcome::kSucceeded);
  const auto took = RunnerClock::now() - started;
  EXPECT_GE(took, std::chrono::milliseconds(300));  // the output did stay open
  EXPECT_LT(took, std::chrono::seconds(30));
}

}  // namespace
}  // namespace ddprun
