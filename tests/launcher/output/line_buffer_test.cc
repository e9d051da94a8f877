#include "output/line_buffer.h"

#include <gtest/gtest.h>

namespace ddprun {
namespace {

using Lines = std::vector<std::string>;

TEST(LineSplitter, JoinsPiecesIntoWholeLines) {
  LineSplitter splitter;
  EXPECT_EQ(splitter.feed("hel"), Lines{});
  EXPECT_EQ(splitter.feed("lo\nwor"), Lines{"hello"});
  EXPECT_EQ(splitter.feed("ld\n\nlast"), (Lines{"world", ""}));
  EXPECT_EQ(splitter.finish(), Lines{"last"});
  EXPECT_EQ(splitter.finish(), Lines{});
}

TEST(LineSplitter, KeepsCarriageReturnsAndBinaryBytes) {
  LineSplitter splitter;
  const std::string data("a\r\nb\0c\n", 7);
  EXPECT_EQ(splitter.feed(data), (Lines{"a\r", std::string("b\0c", 3)}));
}

TEST(LineSplitter, CutsOverlongLinesAtTheLimit) {
  LineSplitter splitter;
  const std::string huge(LineSplitter::kMaxLine * 2 + 5, 'x');
  const auto lines = splitter.feed(huge);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].size(), LineSplitter::kMaxLine);
  EXPECT_EQ(splitter.finish(), Lines{std::string(5, 'x')});
}

TEST(LineSplitter, NewlineRightAtTheLimitEndsThatPiece) {
  LineSplitter splitter;
  const std::string exact(LineSplitter::kMaxLine, 'y');
  EXPECT_EQ(splitter.feed(exact + "\nz\n"), (Lines{exact, "z"}));
}

TEST(LineSplitter, RedrawGivesTheLatestVersionOfALineDrawnInPlace) {
  LineSplitter splitter;
  EXPECT_EQ(splitter.feed("\rstep 1\x1b[K\rstep 2\x1b[K"), Lines{});
  EXPECT_EQ(splitter.take_redraw(), "step 2\x1b[K");
  EXPECT_EQ(splitter.take_redraw(), std::nullopt);
  splitter.feed("no carriage return");
  EXPECT_EQ(splitter.take_redraw(), std::nullopt);
  EXPECT_EQ(splitter.finish(), Lines{"no carriage return"});
}

TEST(TailLines, KeepsOnlyTheLastLinesCutToSize) {
  TailLines tail(2);
  tail.add("one");
  tail.add("two");
  tail.add(std::string(TailLines::kMaxKeptLine + 10, 'w'));
  ASSERT_EQ(tail.lines().size(), 2u);
  EXPECT_EQ(tail.lines()[0], "two");
  EXPECT_EQ(tail.lines()[1].size(), TailLines::kMaxKeptLine);
}

}  // namespace
}  // namespace ddprun
