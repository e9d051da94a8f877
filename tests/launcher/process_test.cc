// The signal channel in this process: a stop signal that arrives after the job's outcome
// is decided is dropped, not delivered when the channel lifts its mask (which would end
// ddprun with 128+signal instead of its own exit code).
#include <gtest/gtest.h>
#include <signal.h>

#include "run/process.h"

namespace ddprun {
namespace {

TEST(SignalChannel, PendingSignalsAreDiscardedAndLaterOnesStayBlockedUntilExit) {
  sigset_t before;
  ASSERT_EQ(::sigprocmask(SIG_SETMASK, nullptr, &before), 0);
  {
    SignalChannel signals;
    ASSERT_EQ(::raise(SIGTERM), 0);  // blocked: pending on the channel
    ASSERT_EQ(::raise(SIGHUP), 0);
    EXPECT_EQ(signals.discard_pending(), 2);
    EXPECT_EQ(signals.read_signal(), 0);
    ASSERT_EQ(::raise(SIGTERM), 0);  // after the outcome was decided (srun's late stop)
  }
  // Still alive: no signal was delivered when the channel went, and the late one still
  // waits, blocked, as it would until ddprun exits.
  sigset_t pending;
  ASSERT_EQ(::sigpending(&pending), 0);
  EXPECT_EQ(sigismember(&pending, SIGTERM), 1);
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  const timespec now{0, 0};
  EXPECT_EQ(::sigtimedwait(&term, nullptr, &now), SIGTERM);
  ASSERT_EQ(::sigprocmask(SIG_SETMASK, &before, nullptr), 0);  // for the tests after this one
}

TEST(SignalChannel, SignalsAreReadInOrderWhileTheChannelLives) {
  SignalChannel signals;
  ASSERT_EQ(::raise(SIGUSR1), 0);
  EXPECT_EQ(signals.read_signal(), SIGUSR1);
  EXPECT_EQ(signals.read_signal(), 0);
}

}  // namespace
}  // namespace ddprun
