// --fold-output's rules (output_fold.h) on sequences of lines with a clock by hand: no
// process, no console.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "output/output_fold.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using Clock = OutputFold::Clock;

const Clock::time_point t0{};

// What the fold let out so far, as the console would show it ("2>" before stderr's).
std::string shown(OutputFold& fold) {
  std::string text;
  for (const auto& out : fold.take()) text += (out.is_stderr ? "2>" : "") + out.text;
  return text;
}

// A fold of `ranks` sources, rank r as source r, both streams open.
OutputFold fold_of(int ranks, std::chrono::milliseconds window = 150ms) {
  OutputFold fold(window);
  for (int rank = 0; rank < ranks; ++rank) fold.add_source(rank, true, true);
  return fold;
}

void line(OutputFold& fold, Clock::time_point at, int rank, const std::string& text,
          bool is_stderr = false) {
  fold.add(at, static_cast<std::size_t>(rank), is_stderr, text,
           "<" + std::to_string(rank) + "> " + text + "\n", true);
}

TEST(FormatRankRanges, RunsOfThreeOrMoreBecomeRanges) {
  const struct {
    std::vector<int> ranks;
    const char* text;
  } cases[] = {
      {{0}, "0"},
      {{0, 1}, "0,1"},
      {{0, 1, 2}, "0-2"},
      {{3, 1, 2, 0}, "0-3"},
      {{0, 1, 2, 3, 4, 5, 6, 7, 9}, "0-7,9"},
      {{9, 0, 2, 3, 4, 7, 8}, "0,2-4,7-9"},
      {{0, 2, 3, 5}, "0,2,3,5"},
      {{5, 5, 6, 7}, "5-7"},
  };
  for (const auto& c : cases) EXPECT_EQ(format_rank_ranges(c.ranks), c.text) << c.text;
}

TEST(OutputFold, TheSameLineFromEveryRankIsOneLineTaggedWithTheRanksAsSoonAsAllHaveIt) {
  OutputFold fold = fold_of(4);
  line(fold, t0, 0, "loading");
  line(fold, t0 + 1ms, 2, "loading");
  line(fold, t0 + 2ms, 1, "loading");
  EXPECT_EQ(shown(fold), "");  // rank 3 may still print it
  line(fold, t0 + 3ms, 3, "loading");
  EXPECT_EQ(shown(fold), "[0-3] loading\n");
  EXPECT_FALSE(fold.holding());
  EXPECT_FALSE(fold.next_deadline());
}

// LibTorch's and glog's log lines carry the time (and glog the thread id), which differ on
// every rank, and PyTorch puts "[rankN]:" in front: those fold by level, place and message.
TEST(FoldMatchText, LogLinesMatchByLevelPlaceAndMessageAndRankTagsAreLeftOut) {
  const std::string c10 = "[W1128 05:39:13.342912942 Utils.hpp:137] Warning: deprecated";
  const struct {
    std::string a, b;
    bool same;
  } cases[] = {
      {c10, "[W1128 05:39:13.350000001 Utils.hpp:137] Warning: deprecated", true},
      {c10, "[W1129 00:00:00.1 Utils.hpp:137] Warning: deprecated", true},
      {"[rank0]:" + c10, "[rank12]:[W1128 05:39:14.1 Utils.hpp:137] Warning: deprecated", true},
      {"[W417 23:50:25.019233077 ProcessGroupNCCL.cpp:1553] Warning: x",  // month unpadded
       "[W417 23:50:26.5 ProcessGroupNCCL.cpp:1553] Warning: x", true},
      {"W0731 10:50:07.575000 3247964 /x/api.py:897] Sending SIGTERM",  // glog: thread ids
       "W0731 10:50:07.580000 3247990 /x/api.py:897] Sending SIGTERM", true},
      {"[rank0]: Traceback (most recent call last):", "[rank3]: Traceback (most recent call last):",
       true},
      // What differs apart from the time, the thread id and the rank keeps them apart.
      {c10, "[W1128 05:39:13.342912942 Utils.hpp:138] Warning: deprecated", false},
      {c10, "[E1128 05:39:13.342912942 Utils.hpp:137] Warning: deprecated", false},
      {c10, "[W1128 05:39:13.342912942 Utils.hpp:137] Warning: deprecated!", false},
      {c10, "[rank0]:" + c10.substr(0, c10.size() - 1), false},
      {"[rank0]: a", "a", false},  // a tagged line and a plain one are different lines
      {"loss 0.25", "loss 0.26", false},
      // Lines that only look like a header match as they are.
      {"[W1128 nothing here] x", "[W1128 nothing else] x", false},
      {"W1128 05:39:13.1 Utils.hpp:137] no thread id",
       "W1128 05:39:14.1 Utils.hpp:137] no thread id", false},
      {"[W1128 05:39:13.1 Utils.hpp] x", "[W1128 05:39:14.1 Utils.hpp] x", false},
      {"[rankA]: x", "[rankB]: x", false},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(fold_match_text(c.a) == fold_match_text(c.b), c.same) << c.a << " | " << c.b;
    EXPECT_EQ(fold_match_text(c.a), fold_match_text(c.a));
  }
  EXPECT_EQ(fold_match_text("plain"), "plain");
  EXPECT_EQ(without_rank_tag("[rank7]:[W1 x"), "[W1 x");
  EXPECT_EQ(without_rank_tag("[rank7]:   File \"x.py\""), "  File \"x.py\"");
  EXPECT_EQ(without_rank_tag("[rank]: x"), "[rank]: x");
}

TEST(OutputFold, EveryRanksLibTorchWarningIsOneLineWithTheFirstRanksTime) {
  OutputFold fold = fold_of(3);
  line(fold, t0, 0, "[rank0]:[W1128 05:39:13.342912942 Utils.hpp:137] Warning: old name");
  line(fold, t0 + 1ms, 2, "[rank2]:[W1128 05:39:13.351000000 Utils.hpp:137] Warning: old name");
  line(fold, t0 + 2ms, 1, "[rank1]:[W1128 05:39:13.360000000 Utils.hpp:137] Warning: old name");
  EXPECT_EQ(shown(fold), "[0-2] [W1128 05:39:13.342912942 Utils.hpp:137] Warning: old name\n");
  // Alone, a rank's line is shown as it came, its tag included.
  line(fold, t0 + 3ms, 1, "[rank1]:[W1128 05:39:14.0 Utils.hpp:99] Warning: mine");
  fold.release_due(t0 + 200ms);
  EXPECT_EQ(shown(fold), "<1> [rank1]:[W1128 05:39:14.0 Utils.hpp:99] Warning: mine\n");
}

TEST(OutputFold, ThreeSameLinesAndOneThatDiffersPerRank) {
  // The check: every rank prints a, b, c and its own line.
  OutputFold fold = fold_of(4);
  for (int rank = 0; rank < 4; ++rank) {
    const auto at = t0 + std::chrono::milliseconds(rank);
    for (const char* text : {"a", "b", "c"}) line(fold, at, rank, text);
    line(fold, at, rank, "rank " + std::to_string(rank));
  }
  // Ranks 1-3 have moved past rank 0's own line: it goes out. Rank 0 printed nothing after
  // rank 1's: it could still print the same, so rank 1's line (and those after it) wait.
  EXPECT_EQ(shown(fold), "[0-3] a\n[0-3] b\n[0-3] c\n<0> rank 0\n");
  line(fold, t0 + 5ms, 0, "step 1");  // now every rank is past rank 1's line
  EXPECT_EQ(shown(fold), "<1> rank 1\n");
  for (int rank = 0; rank < 4; ++rank) fold.close(t0 + 10ms, static_cast<std::size_t>(rank), false);
  EXPECT_EQ(shown(fold), "<2> rank 2\n<3> rank 3\n<0> step 1\n");
}

TEST(OutputFold, ALineNobodyElsePrintsGoesOutWhenItsWindowEnds) {
  OutputFold fold = fold_of(3);
  line(fold, t0, 1, "only me");
  ASSERT_TRUE(fold.next_deadline());
  EXPECT_EQ(*fold.next_deadline(), t0 + 150ms);
  fold.release_due(t0 + 149ms);
  EXPECT_EQ(shown(fold), "");
  fold.release_due(t0 + 150ms);
  EXPECT_EQ(shown(fold), "<1> only me\n");
  EXPECT_FALSE(fold.next_deadline());
}

TEST(OutputFold, ALineThatComesAfterTheWindowStartsAGroupOfItsOwn) {
  OutputFold fold = fold_of(3);
  line(fold, t0, 0, "step");
  line(fold, t0 + 10ms, 1, "step");
  fold.release_due(t0 + 150ms);
  EXPECT_EQ(shown(fold), "[0,1] step\n");
  line(fold, t0 + 400ms, 2, "step");
  fold.release_due(t0 + 550ms);
  EXPECT_EQ(shown(fold), "<2> step\n");
}

TEST(OutputFold, EachRanksLinesKeepTheirOrder) {
  const struct {
    const char* what;
    std::vector<std::pair<int, const char*>> lines;  // rank, text; 1 ms apart
    const char* shown;                               // after release_all
  } cases[] = {
      // Rank 1 prints b before a: it cannot join rank 0's a (older than its b), so it opens
      // a later a of its own.
      {"b before a", {{0, "a"}, {0, "b"}, {1, "b"}, {1, "a"}}, "<0> a\n[0,1] b\n<1> a\n"},
      // A rank that prints a line twice is in two groups.
      {"twice", {{0, "--"}, {0, "--"}, {1, "--"}, {1, "--"}}, "[0,1] --\n[0,1] --\n"},
      {"interleaved", {{0, "x"}, {1, "x"}, {1, "y"}, {0, "y"}}, "[0,1] x\n[0,1] y\n"},
  };
  for (const auto& c : cases) {
    OutputFold fold = fold_of(2);
    auto at = t0;
    for (const auto& [rank, text] : c.lines) line(fold, at += 1ms, rank, text);
    fold.release_all();
    EXPECT_EQ(shown(fold), c.shown) << c.what;
  }
}

TEST(OutputFold, AGroupWaitsBehindAnOlderOneSoThatTheConsoleKeepsTheOrder) {
  OutputFold fold = fold_of(3);
  line(fold, t0, 0, "mine");  // rank 2 may still print it
  line(fold, t0 + 1ms, 0, "both");
  line(fold, t0 + 2ms, 1, "both");  // behind "mine"
  EXPECT_EQ(shown(fold), "");
  fold.release_due(t0 + 150ms);
  EXPECT_EQ(shown(fold), "<0> mine\n");
  fold.release_due(t0 + 151ms);
  EXPECT_EQ(shown(fold), "[0,1] both\n");
}

TEST(OutputFold, ARankThatMovedOnCannotJoinSoADifferingLineGoesOutAtOnce) {
  OutputFold fold = fold_of(2);
  line(fold, t0, 0, "loss 0.5");
  line(fold, t0 + 1ms, 1, "loss 0.7");  // rank 1 is past rank 0's line: nobody else can join
  EXPECT_EQ(shown(fold), "<0> loss 0.5\n");
  line(fold, t0 + 2ms, 0, "next");  // and rank 0 is past rank 1's
  EXPECT_EQ(shown(fold), "<1> loss 0.7\n");
}

TEST(OutputFold, StreamsFoldApartButKeepTheirCommonOrder) {
  OutputFold fold = fold_of(2);
  line(fold, t0, 0, "warning", true);
  line(fold, t0, 0, "warning");
  line(fold, t0 + 1ms, 1, "warning", true);
  line(fold, t0 + 1ms, 1, "warning");
  const auto out = fold.take();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].is_stderr);
  EXPECT_EQ(out[0].text, "[0,1] warning\n");
  EXPECT_FALSE(out[1].is_stderr);
  EXPECT_EQ(out[1].text, "[0,1] warning\n");
}

TEST(OutputFold, ARankWhoseStreamReachesNoConsoleIsNotWaitedFor) {
  OutputFold fold(150ms);
  fold.add_source(0, true, true);
  fold.add_source(1, false, true);  // its stdout is redirected to files only
  line(fold, t0, 0, "hello");
  EXPECT_EQ(shown(fold), "<0> hello\n");
}

TEST(OutputFold, ALineThatMustNotFoldKeepsItsPlaceAndJoinsNothing) {
  OutputFold fold = fold_of(2);
  line(fold, t0, 0, "a");
  fold.add(t0, 0, false, "a", "\r<0> a\n", true, /*foldable=*/false);
  line(fold, t0 + 1ms, 1, "a");
  fold.release_all();
  EXPECT_EQ(shown(fold), "[0,1] a\n\r<0> a\n");
}

TEST(OutputFold, ConsecutiveLinesOfOneStreamAreOneWriteAndCountTheirLines) {
  OutputFold fold = fold_of(1);
  line(fold, t0, 0, "x");
  line(fold, t0, 0, "y");
  fold.add(t0, 0, false, "z", "<0> z\n", /*logged=*/false);
  const auto out = fold.take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "<0> x\n<0> y\n<0> z\n");
  EXPECT_EQ(out[0].lines, 3u);
  EXPECT_FALSE(out[0].logged);  // one of them is in no log file
}

TEST(OutputFold, HeldLinesPastTheByteLimitGoOutOldestFirst) {
  OutputFold fold(150ms, /*max_held_bytes=*/40);
  fold.add_source(0, true, true);
  fold.add_source(1, true, true);
  line(fold, t0, 0, "first line");   // 10 + 16 bytes held
  line(fold, t0, 0, "second line");  // over 40: the first goes
  EXPECT_EQ(shown(fold), "<0> first line\n");
  EXPECT_TRUE(fold.holding());
}

TEST(OutputFold, ReleaseAllLetsEverythingOutInOrder) {
  OutputFold fold = fold_of(3);
  line(fold, t0, 0, "a");
  line(fold, t0, 1, "a");
  line(fold, t0, 2, "b");
  fold.release_all();
  EXPECT_EQ(shown(fold), "[0,1] a\n<2> b\n");
  EXPECT_FALSE(fold.holding());
}

TEST(OutputFold, SixtyFourRanksReadAsOne) {
  OutputFold fold = fold_of(64);
  for (int rank = 63; rank >= 0; --rank) {
    line(fold, t0 + std::chrono::milliseconds(63 - rank), rank, "NCCL version 2.21.5");
  }
  EXPECT_EQ(shown(fold), "[0-63] NCCL version 2.21.5\n");
}

}  // namespace
}  // namespace ddprun
