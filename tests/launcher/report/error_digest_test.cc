#include "report/error_digest.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ddprun/contract/error_file.h"
#include "fake_runner.h"
#include "report/labels.h"

namespace ddprun {
namespace {

using testing::exited;  // wait statuses as the kernel encodes them
using testing::killed;

RankResult worker(int rank, int wait_status, std::deque<std::string> tail = {}) {
  RankResult child;
  child.rank = rank;
  child.local_rank = rank;
  child.host = "gpu1";
  child.started = true;
  child.exited = true;
  child.wait_status = wait_status;
  child.stderr_tail = std::move(tail);
  return child;
}

RankResult agent(int node_rank, int wait_status, std::deque<std::string> tail = {}) {
  RankResult child = worker(0, wait_status, std::move(tail));
  child.agent = true;
  child.node_rank = node_rank;
  child.host = "node" + std::to_string(node_rank);
  return child;
}

RoundResult failed_round(std::vector<RankResult> children, std::size_t first_failure) {
  RoundResult result;
  result.outcome = Outcome::kWorkerFailed;
  result.first_failure = first_failure;
  result.ranks = std::move(children);
  return result;
}

const std::deque<std::string> kOomTraceback = {
    "Traceback (most recent call last):",
    "  File \"train.py\", line 12, in <module>",
    "    loss.backward()",
    "RuntimeError: CUDA out of memory",
};

struct NumberSetCase {
  std::vector<int> numbers;
  std::string expected;
};

TEST(DigestNumberSet, SinglesRunsAndGapsCompactly) {
  const std::vector<NumberSetCase> cases = {
      {{3}, "rank 3"},
      {{1, 3}, "ranks 1, 3"},
      {{0, 1}, "ranks 0-1"},
      {{0, 1, 2, 3, 4, 5, 6, 7, 12}, "ranks 0-7, 12"},
      {{0, 1, 2, 3, 4, 5, 6, 7, 12, 14, 15}, "ranks 0-7, 12, 14-15"},
      {{5, 3, 4, 3, 9}, "ranks 3-5, 9"},  // unsorted, repeated
      {{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 19, 20}, "ranks 0, 2, 4, 6, 8, 10, 12, 14 and 4 more"},
  };
  for (const auto& c : cases) EXPECT_EQ(format_number_set("rank", c.numbers), c.expected);
  EXPECT_EQ(format_number_set("node", {2}), "node 2");
  EXPECT_EQ(format_number_set("node", {1, 2, 3}), "nodes 1-3");
}

struct LineCase {
  const char* what;
  RankResult child;
  std::string error_file;
  std::string expected;
};

TEST(DigestLine, PicksAndNormalisesEachChildsErrorLine) {
  const std::string file_says =
      format_error_file({"ValueError: bad batch\nsecond line", "Traceback ..."}, 1);
  const std::vector<LineCase> cases = {
      {"a traceback's last line", worker(1, exited(1), kOomTraceback), "",
       "RuntimeError: CUDA out of memory"},
      {"the last error line, not later noise",
       worker(1, exited(1), {"RuntimeError: first", "RuntimeError: last", "step 7 done", ""}), "",
       "RuntimeError: last"},
      {"a program's own error line",
       worker(0, exited(1), {"loading", "ddp-train: error: no such file: data.idx"}), "",
       "ddp-train: error: no such file: data.idx"},
      {"an uncaught C++ exception",
       worker(0, killed(SIGABRT), {"terminate called after throwing an instance of 'x'"}), "",
       "terminate called after throwing an instance of 'x'"},
      {"the last non-empty line when none looks like an error",
       worker(0, exited(2), {"step 1", "step 2", "  "}), "", "step 2"},
      {"the exit code without stderr", worker(0, exited(3)), "", "exit code 3"},
      {"the signal without stderr", worker(0, killed(SIGSEGV)), "", "signal SIGSEGV"},
      {"the error file over stderr (its first line)", worker(0, exited(1), {"RuntimeError: other"}),
       file_says, "ValueError: bad batch"},
      {"stderr when the error file does not parse", worker(0, exited(1), {"RuntimeError: x"}),
       "{not json", "RuntimeError: x"},
      {"without ddprun's tag", worker(3, exited(1), {"[gpu1:3] RuntimeError: x"}), "",
       "RuntimeError: x"},
      {"without torchrun's tags", worker(3, exited(1), {"[rank3]:[default3]: RuntimeError: x"}), "",
       "RuntimeError: x"},
      {"with bracketed text that is no tag",
       worker(3, exited(1), {"[ERROR] disk full", "[W ProcessGroupNCCL.cpp:9] an error"}), "",
       "[W ProcessGroupNCCL.cpp:9] an error"},
      {"[ERROR] kept", worker(3, exited(1), {"[ERROR] disk full"}), "", "[ERROR] disk full"},
      {"without colours and trailing blanks",
       worker(0, exited(1), {"\033[1;31mRuntimeError\033[0m: x \t "}), "", "RuntimeError: x"},
      {"the last version of a redrawn line", worker(0, exited(1), {"10%\r50%\rOSError: y"}), "",
       "OSError: y"},
      {"its own rank hidden", worker(3, exited(1), {"[Rank 3] Watchdog caught an error"}), "",
       "[Rank N] Watchdog caught an error"},
      {"other ranks' numbers kept",
       worker(3, exited(1), {"rank 31, rank=30, local_rank 3: error from rank 5"}), "",
       "rank 31, rank=30, local_rank 3: error from rank 5"},
      {"an agent: its node's quoted worker line over ddprun's own lines",
       agent(2, exited(1),
             {"[node2:9] RuntimeError: boom",
              "ddprun: error: rank 9 (local rank 1 on node2, pid 77) failed first: exit code 1",
              "ddprun: last 1 lines of rank 9's stderr:", "  | RuntimeError: boom",
              "ddprun: error digest (2 of 4 ranks failed; root cause first):",
              "ddprun: logs are in /tmp/x"}),
       "", "RuntimeError: boom"},
      {"an agent's own error when no worker's says more",
       agent(2, exited(125),
             {"ddprun: run r1: 4 workers", "ddprun: error: cannot reach the head: refused",
              "ddprun: logs are in /tmp/x"}),
       "", "ddprun: error: cannot reach the head: refused"},
      {"an error file's C1 controls escaped (C0 and ESC are stripped)", worker(0, exited(1)),
       format_error_file({"bad\u009b2K\x1b[1mok", "Tb"}, 1), "bad\\xc2\\x9b2Kok"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(error_digest_line(c.child, c.error_file), c.expected) << c.what;
  }
}

TEST(Digest, GroupsIdenticalErrorsRootCauseFirstAndStoppedRanksLast) {
  std::deque<std::string> tagged;
  for (const auto& line : kOomTraceback) tagged.push_back("[gpu1:4] " + line);
  const RoundResult result = failed_round(
      {
          worker(0, killed(SIGTERM)),
          worker(1, exited(1), kOomTraceback),
          worker(2, killed(SIGTERM)),
          worker(3, killed(SIGKILL)),
          worker(4, exited(1), tagged),
          worker(5, killed(SIGTERM)),
          worker(6, exited(3)),
          worker(7, exited(128 + SIGTERM)),
      },
      1);
  EXPECT_EQ(format_error_digest(result, {}),
            "ddprun: error digest (3 of 8 ranks failed; root cause first):\n"
            "ddprun:   ranks 1, 4: RuntimeError: CUDA out of memory (root cause: rank 1 failed "
            "first)\n"
            "ddprun:   rank 6: exit code 3\n"
            "ddprun:   ranks 0, 2-3, 5, 7: stopped by ddprun after the failure\n");
}

TEST(Digest, RootCauseFirstEvenWhenOthersAreMoreCommonThenBySizeThenRank) {
  const std::deque<std::string> nccl = {"RuntimeError: NCCL error: remote process exited"};
  const RoundResult result = failed_round(
      {
          worker(0, exited(1), {"ValueError: z"}), worker(1, exited(1), nccl),
          worker(2, exited(1), nccl), worker(3, exited(1), {"ValueError: a"}),
          worker(4, exited(1), nccl), worker(5, killed(SIGSEGV)), worker(6, exited(0)),
          worker(7, exited(75)),  // preempted: no failure
      },
      5);
  EXPECT_EQ(format_error_digest(result, {}),
            "ddprun: error digest (6 of 8 ranks failed; root cause first):\n"
            "ddprun:   rank 5: signal SIGSEGV (root cause: rank 5 failed first)\n"
            "ddprun:   ranks 1-2, 4: RuntimeError: NCCL error: remote process exited\n"
            "ddprun:   rank 0: ValueError: z\n"
            "ddprun:   rank 3: ValueError: a\n");
}

TEST(Digest, TheFirstFailureIsARootCauseEvenWhenKilledBySigkill) {
  // The kernel's OOM killer ends the first rank; ddprun then stops rank 2 the same way.
  const RoundResult result = failed_round(
      {
          worker(0, exited(1), {"RuntimeError: connection reset by peer"}),
          worker(1, killed(SIGKILL)),
          worker(2, killed(SIGKILL)),
      },
      1);
  EXPECT_EQ(format_error_digest(result, {}),
            "ddprun: error digest (2 of 3 ranks failed; root cause first):\n"
            "ddprun:   rank 1: signal SIGKILL (root cause: rank 1 failed first)\n"
            "ddprun:   rank 0: RuntimeError: connection reset by peer\n"
            "ddprun:   rank 2: stopped by ddprun after the failure\n");
}

TEST(Digest, PrefersEachRanksErrorFileOverItsStderr) {
  const std::string oom = format_error_file({"torch.OutOfMemoryError: CUDA out of memory", ""}, 1);
  const RoundResult result = failed_round(
      {
          worker(0, exited(1), {"some other error"}),
          worker(1, exited(1), {"yet another error"}),
          worker(2, exited(1), {"RuntimeError: late"}),
      },
      0);
  // Rank 2 has no entry: a shorter vector counts as empty texts.
  EXPECT_EQ(format_error_digest(result, {oom, oom}),
            "ddprun: error digest (3 of 3 ranks failed; root cause first):\n"
            "ddprun:   ranks 0-1: torch.OutOfMemoryError: CUDA out of memory (root cause: rank 0 "
            "failed first)\n"
            "ddprun:   rank 2: RuntimeError: late\n");
}

TEST(Digest, EmptyWhenFewerThanTwoRanksFailedOrNoFirstFailure) {
  RoundResult one = failed_round(
      {worker(0, killed(SIGTERM)), worker(1, exited(1), kOomTraceback), worker(2, exited(0))}, 1);
  EXPECT_EQ(format_error_digest(one, {}), "");

  RoundResult stopped = failed_round({worker(0, exited(1)), worker(1, exited(1))}, 0);
  stopped.outcome = Outcome::kStopped;
  stopped.first_failure.reset();
  EXPECT_EQ(format_error_digest(stopped, {}), "");

  // A child never started (a failed start) is no failure.
  RoundResult unstarted = failed_round({worker(0, exited(1)), worker(1, exited(1))}, 0);
  unstarted.ranks[1].exited = false;
  EXPECT_EQ(format_error_digest(unstarted, {}), "");
}

TEST(Digest, CapsGroupsAndLineLength) {
  std::vector<RankResult> children;
  for (int rank = 0; rank < 14; ++rank) {
    children.push_back(worker(rank, exited(1), {"ValueError: case " + std::to_string(rank)}));
  }
  children.push_back(worker(14, exited(1), {"ValueError: case 13"}));
  children[0].stderr_tail = {"RuntimeError: " + std::string(400, 'x')};
  const std::string digest = format_error_digest(failed_round(std::move(children), 0), {});

  EXPECT_NE(digest.find("ddprun:   rank 0: RuntimeError: " + std::string(286, 'x') +
                        "... (root cause: rank 0 failed first)\n"),
            std::string::npos)
      << digest;
  EXPECT_EQ(digest.find(std::string(287, 'x')), std::string::npos);
  // Root cause, the biggest group, then 8 more in rank order; ranks 9-12 left over.
  EXPECT_NE(digest.find("\nddprun:   ranks 13-14: ValueError: case 13\n"
                        "ddprun:   rank 1: ValueError: case 1\n"),
            std::string::npos)
      << digest;
  EXPECT_NE(digest.find("ddprun:   rank 8: ValueError: case 8\n"
                        "ddprun:   ... and 4 more distinct errors (ranks 9-12)\n"),
            std::string::npos)
      << digest;
  EXPECT_EQ(digest.find("case 9"), std::string::npos);
  EXPECT_EQ(std::count(digest.begin(), digest.end(), '\n'), 1 + 10 + 1);
}

TEST(Digest, CutsLongLinesOnACharacterBoundary) {
  // 299 ASCII bytes, then 'é' (2 bytes) straddling the 300-byte cut.
  const std::string message = "E" + std::string(298, 'r') + "\xc3\xa9" + "tail";
  const RoundResult result =
      failed_round({worker(0, exited(1), {message}), worker(1, exited(2))}, 0);
  const std::string digest = format_error_digest(result, {});
  EXPECT_NE(digest.find("E" + std::string(298, 'r') + "... (root cause"), std::string::npos)
      << digest;
}

TEST(Digest, LabelsAgentsByNode) {
  const std::deque<std::string> remote_report = {
      "[n:9] RuntimeError: NCCL error",
      "ddprun: error: rank 9 (local rank 1 on n, pid 5) failed first: exit code 1 after 2.00 s",
      "  | RuntimeError: NCCL error"};
  const RoundResult head = failed_round(
      {
          worker(0, exited(1), {"RuntimeError: NCCL error"}),
          worker(1, killed(SIGTERM)),
          agent(1, exited(1), remote_report),
          agent(2, exited(1), remote_report),
          agent(3, exited(128 + SIGTERM)),  // an agent passes its workers' stop on
          agent(4, exited(1), {"ddprun: error: lost the connection to the head ddprun"}),
      },
      2);
  EXPECT_EQ(format_error_digest(head, {}),
            "ddprun: error digest (4 of 6 ranks and nodes failed; root cause first):\n"
            "ddprun:   rank 0 and nodes 1-2: RuntimeError: NCCL error (root cause: node 1 failed "
            "first)\n"
            "ddprun:   node 4: ddprun: error: lost the connection to the head ddprun\n"
            "ddprun:   rank 1 and node 3: stopped by ddprun after the failure\n");

  const RoundResult agents_only =
      failed_round({agent(0, exited(1), {"OSError: a"}), agent(1, exited(2), {"OSError: b"}),
                    agent(-1, killed(SIGKILL))},
                   1);
  EXPECT_EQ(format_error_digest(agents_only, {}),
            "ddprun: error digest (2 of 3 nodes failed; root cause first):\n"
            "ddprun:   node 1: OSError: b (root cause: node 1 failed first)\n"
            "ddprun:   node 0: OSError: a\n"
            "ddprun:   the agents' launcher: stopped by ddprun after the failure\n");
}

}  // namespace
}  // namespace ddprun
