#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include "ddprun/common/signal_name.h"
#include "fake_runner.h"
#include "job/doctor.h"
#include "policy/supervision.h"
#include "report/labels.h"
#include "report/report.h"

#include <algorithm>

namespace ddprun {
namespace {

using testing::exited;  // wait statuses as the kernel encodes them
using testing::killed;

TEST(WaitStatus, DescribesExitCodesAndSignals) {
  ASSERT_TRUE(WIFEXITED(exited(3)));
  EXPECT_EQ(describe_wait_status(exited(3)), "exit code 3");
  ASSERT_TRUE(WIFSIGNALED(killed(SIGKILL)));
  EXPECT_EQ(describe_wait_status(killed(SIGKILL)), "signal SIGKILL");
  EXPECT_EQ(signal_name(SIGUSR2), "SIGUSR2");
}

TEST(ExitCode, WorkerCodeOr128PlusSignal) {
  RoundResult result;
  result.ranks.resize(2);
  EXPECT_EQ(exit_code_for(result), 0);
  result.outcome = Outcome::kWorkerFailed;
  result.first_failure = 1;
  result.ranks[1].wait_status = exited(42);
  EXPECT_EQ(exit_code_for(result), 42);
  result.ranks[1].wait_status = killed(SIGSEGV);
  EXPECT_EQ(exit_code_for(result), 128 + SIGSEGV);
  result.outcome = Outcome::kStopped;
  result.stop_signal = SIGTERM;
  EXPECT_EQ(exit_code_for(result), 143);
}

TEST(FailureReport, NamesRankHowAndTailAndErrorFileMessage) {
  RankResult failed;
  failed.rank = 3;
  failed.local_rank = 1;
  failed.host = "gpu7";
  failed.pid = 1234;
  failed.wait_status = exited(2);
  failed.stderr_tail = {"Traceback", "ValueError: bad"};
  const std::string report = format_failure_report(
      failed, R"({"message": {"message": "ValueError: bad", "extraInfo": {"timestamp": "1"}}})");
  EXPECT_NE(report.find("rank 3 (local rank 1 on gpu7, pid 1234) failed first: exit code 2"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("its error file says: ValueError: bad"), std::string::npos);
  EXPECT_NE(report.find("  | Traceback\n  | ValueError: bad\n"), std::string::npos);
}

TEST(FailureReport, AnErrorFilesControlBytesAreEscapedLineByLine) {
  RankResult failed;
  failed.wait_status = exited(1);
  // A terminal title, a colour, a carriage return over ddprun's line, a forged line of
  // ddprun's own on the next line.
  const std::string report = format_failure_report(
      failed, R"({"message": {"message": "\u001b]0;owned\u0007bad\r\u001b[31mred\nddprun: fine", )"
              R"("extraInfo": {"timestamp": "1"}}})");
  EXPECT_NE(report.find("ddprun: its error file says: \\x1b]0;owned\\x07bad\\x0d\\x1b[31mred\n"
                        "ddprun:   ddprun: fine\n"),
            std::string::npos)
      << report;
  EXPECT_EQ(report.find('\x1b'), std::string::npos) << report;
  EXPECT_EQ(report.find('\r'), std::string::npos) << report;
}

TEST(FailureReport, IgnoresAnUnreadableErrorFile) {
  RankResult failed;
  failed.wait_status = killed(SIGKILL);
  const std::string report = format_failure_report(failed, "{not json");
  EXPECT_EQ(report.find("error file"), std::string::npos);
  EXPECT_NE(report.find("signal SIGKILL"), std::string::npos);
}

}  // namespace
}  // namespace ddprun

namespace ddprun {
namespace {

TEST(Summary, StartBlockNamesRunWorkersNodeAndMaster) {
  LaunchPlan plan;
  plan.run_id = "r1";
  plan.world_size = 4;
  plan.master_addr = "10.0.0.1";
  plan.master_port = 29500;
  plan.attempt_dir = "/logs/attempt_0";
  plan.nodes = {{"vm", 0, 4, 0}};
  EXPECT_EQ(format_launch_summary(plan, true, 0),
            "ddprun: run r1: 4 workers on 1 node (vm: ranks 0-3), master 10.0.0.1:29500\n"
            "ddprun: logs in /logs/attempt_0\n");
}

// The restart named is the one the verdict named: under --restart-scope rank the round's
// restart count (1) plus a worker replaced before it, not TORCHELASTIC_RESTART_COUNT alone.
TEST(Summary, StartLineCountsTheRestartsSpentAsTheVerdictDid) {
  LaunchPlan plan;
  plan.run_id = "r1";
  plan.world_size = 2;
  plan.master_addr = "vm";
  plan.master_port = 29500;
  plan.nodes = {{"vm", 0, 2, 0}};
  plan.restart_count = 1;
  plan.max_restarts = 3;
  EXPECT_EQ(
      format_launch_summary(plan, false, 2),
      "ddprun: run r1: 2 workers on 1 node (vm: ranks 0-1), master vm:29500, restart 2 of 3\n");
  EXPECT_EQ(format_launch_summary(plan, false, 0),
            "ddprun: run r1: 2 workers on 1 node (vm: ranks 0-1), master vm:29500\n");
}

// With GPUs assigned, the start block names each of this node's ranks' GPUs.
TEST(Summary, StartBlockNamesEachRanksGpus) {
  LaunchPlan plan;
  plan.run_id = "r1";
  plan.world_size = 4;
  plan.master_addr = "n1";
  plan.master_port = 29500;
  plan.this_node = 1;
  plan.nodes = {{"n1", 0, 2, 0}, {"n2", 1, 2, 2}};
  for (int r = 0; r < 4; ++r) {
    RankPlan& rank = plan.ranks.emplace_back();
    rank.rank = r;
    rank.local_rank = r % 2;
    rank.node_rank = r / 2;
    rank.host = r < 2 ? "n1" : "n2";
  }
  plan.devices.visible.devices = {"GPU-a", "GPU-b", "GPU-c", "GPU-d"};
  plan.devices.per_rank = 2;
  EXPECT_EQ(format_launch_summary(plan, false, 0),
            "ddprun: run r1: 4 workers on 2 nodes (n2: ranks 2-3), master n1:29500\n"
            "ddprun: GPUs on n2: rank 2: GPU-a,GPU-b; rank 3: GPU-c,GPU-d\n");
}

TEST(Summary, RankTableHasARowPerRankWithStatusAndMemory) {
  RoundResult result;
  result.ranks.resize(2);
  result.ranks[0].exited = true;
  result.ranks[0].wait_status = 0;
  result.ranks[0].max_rss_kb = 2048;
  result.ranks[1].rank = 1;
  result.ranks[1].exited = true;
  result.ranks[1].wait_status = SIGKILL;
  const std::string table = format_rank_table(result);
  EXPECT_NE(table.find("exit code 0"), std::string::npos) << table;
  EXPECT_NE(table.find("2.0 MB"), std::string::npos) << table;
  EXPECT_NE(table.find("signal SIGKILL"), std::string::npos) << table;
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 3);
}

}  // namespace
}  // namespace ddprun

namespace ddprun {
namespace {

TEST(Doctor, FindsResolvedLibrariesInTheLoaderTrace) {
  const std::string trace =
      "\tlinux-vdso.so.1 (0x00007ffd)\n"
      "\tlibtorch_cpu.so.1.13 => /lib/x86_64-linux-gnu/libtorch_cpu.so.1.13 (0x00007fb6)\n"
      "\tlibblas.so.3 => /lib/x86_64-linux-gnu/libblas.so.3 (0x00007fb6)\n";
  EXPECT_EQ(loaded_library(trace, "libtorch_cpu"), "/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13");
  EXPECT_EQ(loaded_library(trace, "libblas"), "/lib/x86_64-linux-gnu/libblas.so.3");
  EXPECT_EQ(loaded_library(trace, "libnccl"), "");
}

TEST(Doctor, FormatsOneRowPerKeyWithContinuationLines) {
  EXPECT_EQ(format_doctor({{"host", "vm"}, {"master", "a:1\nb: lo"}}),
            "  host          vm\n  master        a:1\n                b: lo\n");
}

}  // namespace
}  // namespace ddprun
