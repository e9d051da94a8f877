// The signal channel in this process: a stop signal that arrives after the job's outcome
// is decided is dropped, not delivered when the channel lifts its mask (which would end
// ddprun with 128+signal instead of its own exit code).
#include <gtest/gtest.h>
#include <signal.h>

#include "process.h"

namespace ddprun {
namespace {

TEST(SignalChannel, PendingSignalsAreDiscardedBeforeTheMaskIsLifted) {
  {
    SignalChannel signals;
    ASSERT_EQ(::raise(SIGTERM), 0);  // blocked: pending on the channel
    ASSERT_EQ(::raise(SIGHUP), 0);
    EXPECT_EQ(signals.discard_pending(), 2);
    EXPECT_EQ(signals.read_signal(), 0);
  }
  // Still alive: neither signal was delivered when the mask was restored.
  SUCCEED();
}

TEST(SignalChannel, SignalsAreReadInOrderWhileTheChannelLives) {
  SignalChannel signals;
  ASSERT_EQ(::raise(SIGUSR1), 0);
  EXPECT_EQ(signals.read_signal(), SIGUSR1);
  EXPECT_EQ(signals.read_signal(), 0);
}

}  // namespace
}  // namespace ddprun
