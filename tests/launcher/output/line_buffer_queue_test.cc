// The bounded queue in front of a console that does not keep up, and what ddprun says
// about the lines it left out.
#include <gtest/gtest.h>

#include <string>

#include "output/line_buffer.h"
#include "report/report.h"

namespace ddprun {
namespace {

// Writes everything queued, as a console with room would take it.
std::string write_all_of(ConsoleQueue& queue) {
  std::string written;
  while (!queue.empty()) {
    written += queue.front();
    queue.consume(queue.front().size());
  }
  return written;
}

TEST(ConsoleQueue, WritesChunksInOrderAcrossPartialWrites) {
  ConsoleQueue queue(100);
  EXPECT_TRUE(queue.push("a1\na2\n", 2, true));
  EXPECT_TRUE(queue.push("b1\n", 1, true));
  EXPECT_EQ(queue.bytes(), 9u);
  EXPECT_EQ(queue.front(), "a1\na2\n");
  queue.consume(4);  // the console took part of a line
  EXPECT_EQ(queue.front(), "2\n");
  EXPECT_EQ(queue.bytes(), 5u);
  queue.consume(3);  // the rest, and the first byte of the next chunk
  EXPECT_EQ(queue.front(), "1\n");
  queue.consume(2);
  EXPECT_TRUE(queue.empty());
  EXPECT_EQ(queue.bytes(), 0u);
  EXPECT_EQ(queue.front(), "");
  EXPECT_EQ(queue.dropped().lines, 0u);
}

TEST(ConsoleQueue, FullQueueDropsTheOldestWholeChunksAndCountsTheirLines) {
  ConsoleQueue queue(10);
  EXPECT_TRUE(queue.push("old1\n", 1, true));
  EXPECT_TRUE(queue.push("old2\n", 1, false));
  EXPECT_FALSE(queue.push("new\n", 1, true));  // 14 bytes do not fit: "old1" goes
  EXPECT_EQ(queue.bytes(), 9u);
  EXPECT_EQ(queue.dropped().lines, 1u);
  EXPECT_EQ(queue.dropped().logged_lines, 1u);
  EXPECT_FALSE(queue.push("newer\nx\n", 2, false));  // "old2" goes, then "new"
  EXPECT_EQ(write_all_of(queue), "newer\nx\n");
  EXPECT_EQ(queue.dropped().lines, 3u);
  EXPECT_EQ(queue.dropped().logged_lines, 2u);
}

TEST(ConsoleQueue, BegunChunkIsNeverCutSoNoLineIsBroken) {
  ConsoleQueue queue(10);
  EXPECT_TRUE(queue.push("abcdef\n", 1, true));
  queue.consume(3);                               // "abc" is on the console
  EXPECT_FALSE(queue.push("123456\n", 1, true));  // no room, and "def\n" must stay
  EXPECT_EQ(write_all_of(queue), "def\n");
  EXPECT_EQ(queue.dropped().lines, 1u);
}

TEST(ConsoleQueue, ChunkLargerThanTheBoundIsDroppedItself) {
  ConsoleQueue queue(8);
  EXPECT_TRUE(queue.push("keep\n", 1, true));
  EXPECT_FALSE(queue.push(std::string(20, 'x') + "\n", 1, false));
  EXPECT_EQ(queue.dropped().lines, 2u);  // "keep" made way, in vain
  EXPECT_EQ(queue.dropped().logged_lines, 1u);
  EXPECT_TRUE(queue.empty());
}

TEST(ConsoleQueue, DdprunsOwnMessagesAreNeverDroppedToMakeRoom) {
  ConsoleQueue queue(12);
  queue.push_message("ddprun: x\n");
  EXPECT_TRUE(queue.push("a\n", 1, true));
  EXPECT_FALSE(queue.push("bb\n", 1, true));  // "a" goes; the message stays
  EXPECT_EQ(write_all_of(queue), "ddprun: x\n");
  EXPECT_EQ(queue.dropped().lines, 2u);      // neither worker line fitted beside it
  queue.push_message(std::string(40, 'm'));  // over the bound, queued all the same
  EXPECT_EQ(queue.bytes(), 40u);
}

TEST(ConsoleQueue, DropAllCountsEverythingAndEndsABrokenLine) {
  ConsoleQueue queue(100);
  queue.push("one\ntwo\n", 2, true);
  queue.push_message("ddprun: report\n");
  queue.push("three\n", 1, false);
  queue.consume(2);  // "on" is on the console
  queue.drop_all();
  EXPECT_EQ(queue.dropped().lines, 3u);
  EXPECT_EQ(queue.dropped().logged_lines, 2u);
  // What comes next starts a line of its own.
  EXPECT_EQ(write_all_of(queue), "\n");
  queue.push("a\n", 1, true);
  queue.drop_all();  // nothing had begun: nothing left
  EXPECT_TRUE(queue.empty());
  const auto taken = queue.take_dropped();
  EXPECT_EQ(taken.lines, 4u);
  EXPECT_EQ(taken.logged_lines, 3u);
  EXPECT_EQ(queue.dropped().lines, 0u);
}

TEST(ConsoleReport, NoticeSaysWhereTheLinesAre) {
  EXPECT_EQ(format_console_notice(true, "/logs/attempt_0"),
            "ddprun: console not reading: lines it cannot take are left out of it; the log "
            "files in /logs/attempt_0 keep every line\n");
  EXPECT_EQ(format_console_notice(false, ""),
            "ddprun: console not reading: lines it cannot take are left out of it and kept "
            "nowhere (--log-dir keeps every line)\n");
}

TEST(ConsoleReport, CountSaysHowManyLinesAndWhereTheyAre) {
  EXPECT_EQ(format_console_dropped(1234, 1234, "/logs/attempt_0"),
            "ddprun: console not reading: 1234 lines not shown (all are in /logs/attempt_0)\n");
  EXPECT_EQ(format_console_dropped(1, 1, "/l"),
            "ddprun: console not reading: 1 line not shown (it is in /l)\n");
  EXPECT_EQ(format_console_dropped(10, 4, "/l"),
            "ddprun: console not reading: 10 lines not shown (4 of them are in /l)\n");
  EXPECT_EQ(format_console_dropped(10, 0, ""),
            "ddprun: console not reading: 10 lines not shown (kept nowhere: --log-dir keeps "
            "every line)\n");
}

}  // namespace
}  // namespace ddprun
