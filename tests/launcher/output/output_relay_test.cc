// ddprun's console on real descriptors (pipes, a file, a socket pair), no processes: writes
// never wait, the shared descriptions keep their flags, and the queue stays bounded.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "ddprun/common/nonblocking_output.h"
#include "output/output_relay.h"
#include "report/control.h"
#include "temp_dir.h"

namespace ddprun {
namespace {

struct TestPipe {
  TestPipe() {
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0) std::abort();
    read_end = UniqueFd(ends[0]);
    write_end = UniqueFd(ends[1]);
    ::fcntl(write_end.get(), F_SETPIPE_SZ, 4096);
  }
  std::string read_all() {
    std::string text;
    ::fcntl(read_end.get(), F_SETFL, O_NONBLOCK);
    char buffer[65536];
    for (ssize_t got; (got = ::read(read_end.get(), buffer, sizeof buffer)) > 0;) {
      text.append(buffer, static_cast<std::size_t>(got));
    }
    return text;
  }
  UniqueFd read_end;
  UniqueFd write_end;
};

bool blocking(int fd) {
  return (::fcntl(fd, F_GETFL) & O_NONBLOCK) == 0;
}

TEST(NonBlockingOutput, FullPipeTakesNothingAndItsSharedDescriptionStaysBlocking) {
  TestPipe pipe;
  NonBlockingOutput output(pipe.write_end.get());
  EXPECT_EQ(output.method(), NonBlockingOutput::Method::kReopened);
  EXPECT_NE(output.poll_fd(), pipe.write_end.get());
  const std::string data(100000, 'x');
  const ssize_t first = output.write_some(data);
  EXPECT_GT(first, 0);
  EXPECT_LT(first, static_cast<ssize_t>(data.size()));
  EXPECT_EQ(output.write_some(data), 0);  // full: no wait, no error
  EXPECT_TRUE(blocking(pipe.write_end.get()));
  EXPECT_EQ(pipe.read_all().size(), static_cast<std::size_t>(first));
}

TEST(NonBlockingOutput, FilesAreWrittenDirectlyAndSocketsWithSend) {
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  NonBlockingOutput to_file(::fileno(file));
  EXPECT_EQ(to_file.method(), NonBlockingOutput::Method::kDirect);
  EXPECT_EQ(to_file.write_some("line\n"), 5);
  std::fclose(file);

  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd ours(pair[0]), theirs(pair[1]);
  NonBlockingOutput to_socket(ours.get());
  EXPECT_EQ(to_socket.method(), NonBlockingOutput::Method::kSend);
  const std::string data(1 << 20, 'y');
  ssize_t total = 0;
  for (ssize_t written; (written = to_socket.write_some(data)) > 0;) total += written;
  EXPECT_GT(total, 0);  // until the socket's buffer is full, then 0 without waiting
  EXPECT_TRUE(blocking(ours.get()));
}

TEST(NonBlockingOutput, WriteToAPipeWithoutReaderFails) {
  TestPipe pipe;
  NonBlockingOutput output(pipe.write_end.get());
  pipe.read_end.reset();
  const auto previous = ::signal(SIGPIPE, SIG_IGN);
  EXPECT_EQ(output.write_some("x\n"), -1);
  EXPECT_EQ(errno, EPIPE);
  ::signal(SIGPIPE, previous);
}

TEST(Console, StalledStdoutNeverBlocksAndKeepsItsQueueBounded) {
  TestPipe out, err;
  Console console(out.write_end.get(), err.write_end.get(), /*max_queued=*/1000);
  console.set_log_folder("/logs/attempt_0");
  for (int i = 0; i < 10000; ++i) {
    console.write(false, "rank 0 line " + std::to_string(i) + "\n", 1, true);
  }
  std::vector<int> fds;
  console.add_write_interest(fds);
  EXPECT_EQ(fds.size(), 1u);  // stdout has output waiting, stderr none
  EXPECT_TRUE(console.waiting());
  // stderr is read: the notice came at once.
  EXPECT_EQ(err.read_all(),
            "ddprun: console not reading: lines it cannot take are left out of it; the log files "
            "in /logs/attempt_0 keep every line\n");
  console.give_up();
  EXPECT_FALSE(console.waiting());
  const auto dropped = console.take_dropped();
  const std::string shown = out.read_all();
  std::size_t shown_lines = 0;
  for (char c : shown) shown_lines += c == '\n' ? 1 : 0;
  EXPECT_EQ(dropped.lines + shown_lines, 10000u);
  EXPECT_EQ(dropped.logged_lines, dropped.lines);
  EXPECT_EQ(shown.substr(0, 15), "rank 0 line 0\nr");  // what fitted went out in order
}

TEST(Console, OneQueueServesStdoutAndStderrOnTheSamePipe) {
  TestPipe both;
  Console console(both.write_end.get(), both.write_end.get());
  console.write(false, "out 1\n", 1, false);
  console.write(true, "err 1\n", 1, false);
  console.message("ddprun: report\n");
  console.write(false, "out 2\n", 1, false);
  EXPECT_EQ(both.read_all(), "out 1\nerr 1\nddprun: report\nout 2\n");
}

TEST(Console, SlowReaderGetsEverythingInOrderThroughTheLoopsWrites) {
  TestPipe out, err;
  Console console(out.write_end.get(), err.write_end.get());
  std::string expected;
  for (int i = 0; i < 2000; ++i) {
    const std::string line = "line " + std::to_string(i) + "\n";
    expected += line;
    console.write(false, line, 1, false);
  }
  std::string got;
  std::vector<int> fds;
  for (int turns = 0; turns < 10000; ++turns) {
    got += out.read_all();  // the reader takes what is there
    fds.clear();
    console.add_write_interest(fds);
    if (fds.empty()) break;
    console.on_writable(fds.front());  // as the loop does on POLLOUT
  }
  got += out.read_all();
  EXPECT_EQ(got, expected);
  EXPECT_EQ(console.take_dropped().lines, 0u);
}

// A log on a full disk (/dev/full: every write fails with ENOSPC) is said once, by name,
// and the lines still reach the console.
TEST(OutputRelay, ALogThatCannotBeWrittenIsSaidOnceAndTheConsoleKeepsTheLines) {
  TestPipe out, err;
  Console console(out.write_end.get(), err.write_end.get());
  OutputRelay relay(RelayConfig{}, console);
  RelayTarget target;
  target.prefix = "[0] ";
  target.stdout_log = UniqueFd(::open("/dev/full", O_WRONLY | O_CLOEXEC));
  ASSERT_TRUE(target.stdout_log.valid());
  target.stdout_log_path = "logs/rank0.stdout.log";
  relay.add(std::move(target));
  relay.feed(0, false, "first\n");
  relay.feed(0, false, "second\n");
  EXPECT_EQ(out.read_all(), "[0] first\n[0] second\n");
  EXPECT_EQ(err.read_all(),
            "ddprun: warning: cannot write logs/rank0.stdout.log: No space left on device; the "
            "rest of this output is on the console only\n");
}

RelayTarget fold_worker(int rank, bool stdout_to_console = true) {
  RelayTarget target;
  target.worker = true;
  target.rank = rank;
  target.label = "[n1:" + std::to_string(rank) + "] ";
  target.stdout_to_console = stdout_to_console;
  return target;
}

TEST(OutputRelay, FoldedLinesGoOutOnceTaggedAndADdprunMessageLetsOutWhatIsHeld) {
  TestPipe out, err;
  Console console(out.write_end.get(), err.write_end.get());
  RelayConfig config;
  config.fold = true;
  OutputRelay relay(config, console);
  console.set_before_message([&] { relay.release_all_folded(); });
  for (int rank = 0; rank < 3; ++rank) relay.add(fold_worker(rank));
  for (std::size_t child = 0; child < 3; ++child) relay.feed(child, false, "loading\n");
  EXPECT_EQ(out.read_all(), "[0-2] loading\n");  // every rank has it: out at once
  relay.feed(1, false, "rank 1 only\n");
  EXPECT_EQ(out.read_all(), "");  // ranks 0 and 2 may still print it
  ASSERT_TRUE(relay.fold_deadline());
  console.message("ddprun: a message\n");
  EXPECT_EQ(out.read_all(), "rank 1 only\n");
  EXPECT_FALSE(relay.fold_deadline());
}

TEST(OutputRelay, LinesThatMatchTheFiltersAreCopiedWithTheirRankWhateverTheConsoleShows) {
  TestPipe out, err;
  Console console(out.write_end.get(), err.write_end.get());
  const support::TempDir dir;
  RelayConfig config;
  config.stdout_filters = {"warn", "NaN"};
  OutputRelay relay(config, console);
  relay.open_filtered(false, dir.path() + "/filtered_stdout.log");
  relay.add(fold_worker(0));
  relay.add(fold_worker(1, /*stdout_to_console=*/false));  // -r 1: files only
  relay.feed(0, false, "a warning\nfine\n");
  relay.feed(1, false, "loss NaN\nwarn");
  relay.feed(1, false, "");  // the end of its stream: its last line, unterminated
  EXPECT_EQ(out.read_all(), "a warning\nfine\n");
  std::ifstream copied(dir.path() + "/filtered_stdout.log");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(copied)), {}),
            "[n1:0] a warning\n[n1:1] loss NaN\n[n1:1] warn\n");
}

// A worker cannot forge ddprun's own messages: a line of its that holds the marker of an
// answer or a node's event is shown with the marker escaped and reaches no handler.
TEST(OutputRelay, AWorkersLineWithTheControlMarkerIsShownEscapedAndHandledAsNothing) {
  TestPipe out, err;
  Console console(out.write_end.get(), err.write_end.get());
  OutputRelay relay(RelayConfig{}, console);
  int handled = 0;
  relay.set_answer_handler([&](std::size_t, std::string_view) { ++handled; });
  RelayTarget worker;
  worker.worker = true;
  relay.add(std::move(worker));
  RelayTarget agent;
  agent.answers = true;
  relay.add(std::move(agent));
  NodeEvent forged;
  forged.kind = NodeEvent::Kind::kStopped;
  forged.signal = SIGTERM;
  forged.code = 143;
  const std::string line = node_event_line(forged);
  relay.feed(0, true, "ok\n" + line);
  EXPECT_EQ(handled, 0);
  const std::string shown = err.read_all();
  EXPECT_EQ(shown.find('\x1e'), std::string::npos) << shown;
  EXPECT_NE(shown.find("\\x1eddprun-control {\"code\":143"), std::string::npos) << shown;
  relay.feed(1, true, line);  // an agent's own line is an event for the head
  EXPECT_EQ(handled, 1);
}

// An agent's answer longer than a worker's longest line (every rank's stacks) reaches the
// handler whole, in one piece, however it was cut on the way.
TEST(OutputRelay, AnAgentsLongAnswerArrivesWhole) {
  TestPipe out, err;
  Console console(out.write_end.get(), err.write_end.get());
  OutputRelay relay(RelayConfig{}, console);
  std::vector<std::string> handled;
  relay.set_answer_handler([&](std::size_t, std::string_view line) { handled.emplace_back(line); });
  RelayTarget agent;
  agent.answers = true;
  relay.add(std::move(agent));
  RankStatus rank;
  rank.host = "n2";
  rank.state = "running";
  rank.last_line = std::string(300 * 1024, 's');  // a long line of its own
  const std::string answer = agent_answer_line(7, {rank});
  ASSERT_GT(answer.size(), 4 * LineSplitter::kMaxLine);
  for (std::size_t at = 0; at < answer.size(); at += 4096) {
    relay.feed(0, true, std::string_view(answer).substr(at, 4096));
  }
  ASSERT_EQ(handled.size(), 1u);
  const auto parsed = parse_agent_answer(handled.front());
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->ranks.at(0).last_line.size(), 300u * 1024);
  EXPECT_EQ(err.read_all(), "");  // nothing of it on the console
}

}  // namespace
}  // namespace ddprun
