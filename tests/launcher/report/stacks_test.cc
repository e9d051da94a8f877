// Reading captured stacks (stacks.h): the line that says where a rank is, from
// faulthandler's dump and from eu-stack's output, and the grouped digest. Pure: no process.
#include "report/stacks.h"

#include <gtest/gtest.h>

namespace ddprun {
namespace {

constexpr const char* kFaulthandlerDump =
    "Thread 0x00007f2d5b7fe6c0 (most recent call first):\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 324 in wait\n"
    "  File \"/work/loader.py\", line 12 in prefetch\n"
    "\n"
    "Current thread 0x00007f2d6c550040 (most recent call first):\n"
    "  File \"/work/dist.py\", line 30 in all_reduce\n"
    "  File \"/work/train.py\", line 88 in train_step\n"
    "  File \"/work/train.py\", line 120 in <module>\n";

constexpr const char* kEuStack =
    "PID 30278 - process\n"
    "TID 30278:\n"
    "#0  0x00007f2d6c620503 pthread_cond_wait@@GLIBC_2.3.2 - /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "#1  0x00007f2d6c620504 std::condition_variable::wait(std::unique_lock<std::mutex>&) - "
    "/usr/lib/x86_64-linux-gnu/libstdc++.so.6\n"
    "#2  0x00000000005d64b4 - /opt/app/train\n"
    "#3  0x0000000000545963 c10d::ProcessGroupGloo::AsyncWork::wait(std::chrono::duration<long, "
    "std::ratio<1l, 1000l> >) - /usr/lib/libtorch_cpu.so\n"
    "#4  0x000000000053acbc (anonymous namespace)::Trainer::step(int) const [clone "
    ".constprop.0] [clone .isra.0] - /opt/app/train\n"
    "#5  0x000000000052b9e0 main - /opt/app/train\n"
    "TID 30279:\n"
    "#0  0x00007f2d6c620503 epoll_wait - /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "#1  0x00007f2d6c620600 gloo::transport::tcp::Loop::run() - /usr/lib/libgloo.so\n";

TEST(StackSummary, PythonFramesComeFromTheThreadThatTookTheSignalInnermostFirst) {
  EXPECT_EQ(python_summary(kFaulthandlerDump),
            "in all_reduce (dist.py:30) <- train_step (train.py:88)");
}

TEST(StackSummary, WithoutACurrentThreadTheFirstThreadSpeaks) {
  EXPECT_EQ(python_summary("Thread 0x1 (most recent call first):\n"
                           "  File \"a.py\", line 3 in f\n"),
            "in f (a.py:3)");
  EXPECT_EQ(python_summary(""), "");
  EXPECT_EQ(python_summary("Current thread 0x1 (most recent call first):\n  <no Python frame>\n"),
            "");
}

TEST(StackSummary, NativeFramesSkipTheRuntimeAndNamelessFramesAndLoseTheirArguments) {
  EXPECT_EQ(native_summary(kEuStack),
            "in c10d::ProcessGroupGloo::AsyncWork::wait <- (anonymous namespace)::Trainer::step");
}

TEST(StackSummary, AThreadWhollyInTheRuntimeShowsItsFirstNamedFrame) {
  EXPECT_EQ(native_summary("TID 7:\n#0  0x1 clock_nanosleep@GLIBC_2.2.5 - /lib/libc.so.6\n"
                           "#1  0x2 - /lib/libc.so.6\n"),
            "in clock_nanosleep");
  EXPECT_EQ(native_summary("TID 7:\n#0  0x1 - /opt/app\n"), "");
}

TEST(StackSummary, OperatorsAndLambdasKeepTheirOwnParentheses) {
  EXPECT_EQ(native_summary("TID 1:\n#0  0x1 main::{lambda()#1}::operator()() const - /app\n"
                           "#1  0x2 std::function<void ()>::operator()() const - /app\n"),
            "in main::{lambda()#1}::operator() <- std::function<void ()>::operator()");
}

TEST(StackSummary, PythonWinsThenNativeThenTheProblem) {
  StackCapture capture;
  capture.native = kEuStack;
  EXPECT_EQ(stack_summary(capture),
            "in c10d::ProcessGroupGloo::AsyncWork::wait <- (anonymous namespace)::Trainer::step");
  capture.python = kFaulthandlerDump;
  EXPECT_EQ(stack_summary(capture), "in all_reduce (dist.py:30) <- train_step (train.py:88)");
  StackCapture nothing;
  nothing.problem = "eu-stack: ptrace: Operation not permitted";
  EXPECT_EQ(stack_summary(nothing), "no stack: eu-stack: ptrace: Operation not permitted");
}

RoundResult round_with(const std::vector<std::string>& python_frames) {
  RoundResult result;
  for (std::size_t i = 0; i < python_frames.size(); ++i) {
    RankResult& rank = result.ranks.emplace_back();
    rank.rank = static_cast<int>(i);
    if (python_frames[i].empty()) continue;
    rank.stacks.emplace();
    rank.stacks->python =
        "Current thread 0x1 (most recent call first):\n  File \"train.py\", "
        "line 88 in " +
        python_frames[i] + "\n";
  }
  RankResult& agent = result.ranks.emplace_back();
  agent.agent = true;
  agent.stacks = StackCapture{};  // an agent's own node reports its ranks: never listed here
  return result;
}

TEST(StackDigest, RanksInTheSamePlaceShareALineAndTheOddOneOutComesFirst) {
  const auto result =
      round_with({"all_reduce", "all_reduce", "", "load_batch", "all_reduce", "all_reduce"});
  EXPECT_EQ(format_stack_digest(result, "before SIGKILL", "/logs/rank_<N>.stacks"),
            "ddprun: where the 5 ranks still running were (before SIGKILL):\n"
            "ddprun:   rank 3: in load_batch (train.py:88)\n"
            "ddprun:   ranks 0-1, 4-5: in all_reduce (train.py:88)\n"
            "ddprun:   every thread's stack: /logs/rank_<N>.stacks\n");
}

TEST(StackDigest, NothingCapturedSaysNothing) {
  EXPECT_EQ(format_stack_digest(round_with({"", ""}), "x", ""), "");
}

TEST(StackDigest, ManyPlacesAreCutAfterTen) {
  std::vector<std::string> places;
  for (int i = 0; i < 13; ++i) places.push_back("f" + std::to_string(i));
  const std::string digest = format_stack_digest(round_with(places), "x", "");
  EXPECT_NE(digest.find("and 3 more places"), std::string::npos) << digest;
  EXPECT_EQ(digest.find("f12"), std::string::npos) << digest;
}

// A rank's trace: `started` collectives on `plane`, the last one still open when `open`.
std::optional<TraceSnapshot> traced(int plane, std::uint64_t started, bool open,
                                    std::int64_t start_ns = 1000) {
  TraceSnapshot capture;
  capture.read_ns = 3'200'001'000;
  trace::PlaneTrace& p = capture.file.planes[plane];
  p.started = started;
  for (std::uint64_t k = started > 3 ? started - 3 : 1; k <= started; ++k) {
    trace::Entry& e = p.entries[(k - 1) % trace::kEntries];
    e.seq = k;
    e.op = static_cast<std::uint8_t>(trace::Op::kAllreduce);
    e.bytes = 4000;
    e.start_ns = start_ns;
    e.end_ns = k == started && open ? 0 : start_ns + 10;
  }
  return capture;
}

// Ranks with their stacks taken and these traces.
RoundResult ranks_with(std::vector<std::optional<TraceSnapshot>> traces) {
  RoundResult result;
  for (std::size_t i = 0; i < traces.size(); ++i) {
    RankResult& rank = result.ranks.emplace_back();
    rank.rank = static_cast<int>(i);
    rank.stacks.emplace();
    rank.trace = std::move(traces[i]);
  }
  return result;
}

TEST(Collectives, TheRankThatDidNotEnterTheLatestCollectiveIsNamedWithThoseWaitingInIt) {
  const auto result = ranks_with(
      {traced(1, 57, true), traced(1, 57, true), traced(1, 56, false), traced(1, 57, true)});
  EXPECT_EQ(format_collectives(result),
            "ddprun:   data plane, collective #57 (all-reduce, 4.0 kB): ranks 0-1, 3 are in it "
            "(for 3.2 s); rank 2 has not entered it (last: #56)\n");
}

TEST(Collectives, EveryRankPastTheLatestSaysNothingAndRanksStuckApartAreListed) {
  EXPECT_EQ(format_collectives(ranks_with({traced(0, 9, false), traced(0, 9, false)})), "");
  EXPECT_EQ(format_collectives(
                ranks_with({traced(0, 9, false), traced(0, 7, false), traced(0, 8, false)})),
            "ddprun:   control plane, collective #9: ranks 1-2 have not entered it (last: #7, "
            "#8)\n");
  EXPECT_EQ(format_collectives(ranks_with({std::nullopt, std::nullopt})), "");
}

TEST(Collectives, TheDigestEndsWithThem) {
  const std::string digest = format_stack_digest(
      ranks_with({traced(1, 5, true), traced(1, 4, false)}), "before SIGKILL", "");
  EXPECT_NE(digest.find("data plane, collective #5"), std::string::npos) << digest;
}

}  // namespace
}  // namespace ddprun
