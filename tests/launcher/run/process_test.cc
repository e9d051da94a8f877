// The signal channel in this process: a stop signal that arrives after the job's outcome
// is decided is dropped, not delivered when the channel lifts its mask (which would end
// ddprun with 128+signal instead of its own exit code).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "run/process.h"
#include "temp_dir.h"

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

// The guardian: when ddprun leaves on its own it only goes (ddprun's destructors remove its
// files, and a later job of the same run id may already use the same socket name); when
// ddprun dies, it removes the scratch folder and runs its last words.
struct GuardianFiles : ::testing::Test {
  support::TempDir dir;
  std::string scratch = dir.path() + "/scratch";
  std::string last_words = dir.path() + "/last-words";
  void SetUp() override { std::filesystem::create_directory(scratch); }
  std::function<void()> write_last_words() {
    return [path = last_words] { std::ofstream(path) << "done\n"; };
  }
};

TEST_F(GuardianFiles, WhenDdprunLeavesOnItsOwnTheGuardianTouchesNoFile) {
  { Guardian guardian(scratch, write_last_words()); }  // reaped when this returns
  EXPECT_TRUE(std::filesystem::is_directory(scratch));
  EXPECT_FALSE(std::filesystem::exists(last_words));
}

TEST_F(GuardianFiles, WhenDdprunDiesTheGuardianRemovesTheScratchAndSaysItsLastWords) {
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t ddprun = ::fork();
  ASSERT_GE(ddprun, 0);
  if (ddprun == 0) {
    // The guardian keeps this stdout until it is done: the pipe's end tells the test.
    ::dup2(out[1], STDOUT_FILENO);
    ::close(out[0]);
    ::close(out[1]);
    Guardian guardian(scratch, write_last_words());
    ::_exit(0);  // no destructor runs: as a killed ddprun
  }
  ::close(out[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(ddprun, &status, 0), ddprun);
  char byte = 0;
  EXPECT_EQ(::read(out[0], &byte, 1), 0);  // the guardian is gone
  ::close(out[0]);
  EXPECT_FALSE(std::filesystem::exists(scratch));
  EXPECT_TRUE(std::filesystem::exists(last_words));
}

}  // namespace
}  // namespace ddprun
