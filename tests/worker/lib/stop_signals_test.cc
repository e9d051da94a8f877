#include "ddprun/worker/stop_signals.h"

#include <gtest/gtest.h>
#include <signal.h>

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

}  // namespace
}  // namespace ddprun::worker
