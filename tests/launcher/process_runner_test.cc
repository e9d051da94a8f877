// The real runner with real processes: an ssh agent gets signals as messages on its stdin,
// and one that stops reading them is killed, never waited for.
#include "process_runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "process.h"

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

}  // namespace
}  // namespace ddprun
