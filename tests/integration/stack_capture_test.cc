// Stacks before SIGKILL, for real: a C++ rank stuck in a named function and a Python rank
// that ignores SIGTERM are named where they are, and the capture never holds up a
// teardown for long.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "launcher_harness.h"

namespace ddprun::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A tool a test needs is missing: a failure under CI, a reported skip elsewhere.
bool missing(const std::string& tool) {
  return unavailable(::access(("/usr/bin/" + tool).c_str(), X_OK) != 0, tool + " is not installed");
}

// A Python worker in `dir` that ignores SIGTERM, tells the test it is ready (its rank and
// pid on $TEST_READY_FD), then runs `body`.
std::string python_worker(const std::string& dir, const std::string& body) {
  const std::string script = dir + "/stuck.py";
  std::ofstream(script)
      << "import os, signal, time\n"
         "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
      << body
      << "fd = int(os.environ['TEST_READY_FD'])\n"
         "os.write(fd, ('%s %d 0\\n' % (os.environ['RANK'], os.getpid())).encode())\n"
         "main()\n";
  return script;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(StackCapture, ACxxRankThatOutlivesTheGraceIsNamedInItsFunctionBeforeSigkill) {
  if (missing("eu-stack")) GTEST_SKIP();
  TempDir logs;
  Launched job(
      with_child({"--nproc-per-node", "3", "--shutdown-timeout", "0.3", "--log-dir", logs.path()},
                 {"ignore:15", "ready", "wait-signal@0", "exit:3@0", "stuck"}),
      {}, true);
  const auto pids = job.wait_ready(3);
  ::kill(job.worker_pid(0), SIGUSR1);  // rank 0 fails; ranks 1 and 2 ignore the SIGTERM
  const auto done = job.finish(seconds(30));
  EXPECT_EQ(done.exit_code, 3) << done.err;
  EXPECT_NE(done.err.find("where the 2 ranks still running were (before SIGKILL, after the "
                          "0.3 s grace):"),
            std::string::npos)
      << done.err;
  EXPECT_NE(done.err.find("ranks 1-2: in (anonymous namespace)::stuck_in_named_function <- "),
            std::string::npos)
      << done.err;
  const std::string stacks = read_all(logs.path() + "/attempt_0/rank_2.stacks");
  EXPECT_NE(stacks.find("TID " + std::to_string(job.worker_pid(2)) + ":"), std::string::npos)
      << stacks;
  EXPECT_FALSE(std::filesystem::exists(logs.path() + "/attempt_0/rank_0.stacks"));
  EXPECT_TRUE(wait_all_gone(pids, milliseconds(5000)).empty());
}

TEST(StackCapture, NoStacksLeavesTheTeardownAsItWas) {
  Launched job(with_child({"--nproc-per-node", "2", "--shutdown-timeout", "0.2", "--no-stacks"},
                          {"ignore:15", "ready", "wait-signal@0", "exit:3@0", "stuck"}),
               {}, true);
  job.wait_ready(2);
  ::kill(job.worker_pid(0), SIGUSR1);
  const auto done = job.finish(seconds(30));
  EXPECT_EQ(done.exit_code, 3) << done.err;
  EXPECT_EQ(done.err.find("still running"), std::string::npos) << done.err;
}

// The check: a Python rank whose SIGTERM is ignored, stopped with ddprun, is named
// in its Python function, with no change to the script.
TEST(StackCapture, APythonRankIgnoringSigtermIsNamedInItsPythonFunction) {
  if (missing("python3") || missing("eu-stack")) GTEST_SKIP();
  TempDir dir;
  const std::string script = python_worker(dir.path(),
                                           "def wait_for_data():\n"
                                           "    while True:\n"
                                           "        time.sleep(60)\n"
                                           "def main():\n"
                                           "    wait_for_data()\n");
  Launched job({"--nproc-per-node", "2", "--shutdown-timeout", "0.3", "/usr/bin/python3", script},
               {}, true);
  const auto pids = job.wait_ready(2);
  job.signal(SIGTERM);
  const auto done = job.finish(seconds(30));
  EXPECT_EQ(done.exit_code, 128 + SIGTERM) << done.err;
  EXPECT_NE(done.err.find("ranks 0-1: in wait_for_data (stuck.py:5) <- main (stuck.py:7)"),
            std::string::npos)
      << done.err;
  EXPECT_TRUE(wait_all_gone(pids, milliseconds(5000)).empty());
}

// A rank that is stopped (SIGSTOP) cannot run faulthandler: its native stack still comes,
// the missing Python frames are said in the file, and nothing waits for it.
TEST(StackCapture, AStoppedPythonRankStillGetsItsNativeStack) {
  if (missing("python3") || missing("eu-stack")) GTEST_SKIP();
  TempDir dir;
  const std::string script = python_worker(dir.path(), "def main():\n    time.sleep(600)\n");
  Launched job({"--nproc-per-node", "1", "--shutdown-timeout", "0.3", "--log-dir", dir.path(),
                "/usr/bin/python3", script},
               {}, true);
  const auto pids = job.wait_ready(1);
  ::kill(job.worker_pid(0), SIGSTOP);
  job.signal(SIGTERM);
  const auto done = job.finish(seconds(30));
  EXPECT_EQ(done.exit_code, 128 + SIGTERM) << done.err;
  EXPECT_NE(done.err.find("rank 0: in "), std::string::npos) << done.err;
  const std::string stacks = read_all(dir.path() + "/attempt_0/rank_0.stacks");
  EXPECT_NE(stacks.find("is stopped (SIGSTOP or a debugger): no Python frames"), std::string::npos)
      << stacks;
  // Where it stopped depends on when SIGSTOP came (the ready line's write, or the sleep).
  EXPECT_NE(stacks.find("TID " + std::to_string(job.worker_pid(0)) + ":\n#0 "), std::string::npos)
      << stacks;
  EXPECT_TRUE(wait_all_gone(pids, milliseconds(5000)).empty());
}

}  // namespace
}  // namespace ddprun::testing
