#include "ddprun/worker/stop_signals.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>

namespace ddprun::worker {
namespace {

sighandler_t handler_of(int sig) {
  struct sigaction current {};
  ::sigaction(sig, nullptr, &current);
  return current.sa_handler;
}

TEST(StopSignalsTest, OnlyStopSignalNamesMapToNumbers) {
  EXPECT_EQ(stop_signal_number("SIGTERM"), SIGTERM);
  EXPECT_EQ(stop_signal_number("SIGUSR2"), SIGUSR2);
  EXPECT_FALSE(stop_signal_number("SIGKILL").has_value());
  EXPECT_FALSE(stop_signal_number("sigterm").has_value());
}

TEST(StopSignalsTest, ASignalOnlySetsTheFlagAndTheFirstOneIsKept) {
  const sighandler_t before = handler_of(SIGUSR1);
  {
    const StopSignals stop({SIGUSR1, SIGUSR2});
    EXPECT_EQ(StopSignals::received(), 0);
    ASSERT_EQ(::raise(SIGUSR1), 0);  // the process would die with the default action
    EXPECT_EQ(StopSignals::received(), SIGUSR1);
    ASSERT_EQ(::raise(SIGUSR2), 0);
    EXPECT_EQ(StopSignals::received(), SIGUSR1);
    EXPECT_THROW(StopSignals again({SIGTERM}), std::logic_error);
  }
  EXPECT_EQ(handler_of(SIGUSR1), before);  // restored
  const StopSignals fresh({SIGUSR2});
  EXPECT_EQ(StopSignals::received(), 0);  // a new instance starts clear
}

// A worker stopping on a notice keeps SIGTERM harmless until it exits; without
// keep_until_exit() the default action is back after destruction. In a child: the kept
// disposition lasts for the life of the process.
TEST(StopSignalsTest, KeptUntilExitASigtermAfterDestructionNoLongerKills) {
  for (const bool keep : {true, false}) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      {
        StopSignals stop({SIGTERM});
        if (keep) stop.keep_until_exit();
      }
      ::raise(SIGTERM);
      ::_exit(75);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (keep) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 75) << status;
    } else {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
    }
  }
}

}  // namespace
}  // namespace ddprun::worker
