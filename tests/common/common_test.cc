#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "ddprun/common/files.h"
#include "ddprun/common/net.h"
#include "ddprun/common/parse_int.h"
#include "ddprun/common/printable.h"
#include "ddprun/common/signal_name.h"
#include "ddprun/common/unique_fd.h"
#include "temp_dir.h"
#include "unavailable.h"

namespace ddprun {
namespace {

TEST(ParseInt, AcceptsOnlyAWholeDecimalIntWithinRange) {
  EXPECT_EQ(parse_int("0"), 0);
  EXPECT_EQ(parse_int("29500"), 29500);
  EXPECT_EQ(parse_int("-1"), -1);
  EXPECT_EQ(parse_int("2147483647"), 2147483647);
  for (const char* bad : {"", "+1", " 1", "1 ", "1x", "0x10", "2147483648", "-", "1.0"}) {
    EXPECT_FALSE(parse_int(bad).has_value()) << bad;
  }
}

TEST(SignalName, NamedAndUnnamedSignals) {
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGUSR1), "SIGUSR1");
  EXPECT_EQ(signal_name(200), "SIG200");
}

class Files : public ::testing::Test {
 protected:
  support::TempDir temp_;
  std::string dir_ = temp_.path();
};

using support::unavailable;

TEST_F(Files, MakeDirectoriesGivesExactlyTheModeAndRefusesAFile) {
  const mode_t old_umask = ::umask(077);
  make_directories(dir_ + "/a/b", 0755);
  ::umask(old_umask);
  struct stat info {};
  ASSERT_EQ(::stat((dir_ + "/a/b").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0755u);
  make_directories(dir_ + "/a/b");  // exists: fine
  const UniqueFd file(::open((dir_ + "/f").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  EXPECT_THROW(make_directories(dir_ + "/f"), std::system_error);
  EXPECT_THROW(make_directories(dir_ + "/f/g"), std::system_error);
}

TEST_F(Files, WriteAllThenReadFileRoundTripsAndErrorsNameThePath) {
  const std::string path = dir_ + "/data";
  std::string text(200000, 'x');
  text[12345] = '\n';
  {
    UniqueFd fd(::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
    ASSERT_TRUE(fd.valid());
    EXPECT_TRUE(write_all(fd.get(), text));
    fd.close_or_throw(path);
    EXPECT_FALSE(fd.valid());
  }
  EXPECT_EQ(read_file(path), text);
  EXPECT_EQ(read_file_head(path, 10), text.substr(0, 10));
  EXPECT_EQ(read_file_head(dir_ + "/missing"), "");
  try {
    read_file(dir_ + "/missing");
    FAIL() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir_ + "/missing"), std::string::npos);
  }
}

// Another user's file or folder at `path` (user nobody); false when this test is not root.
bool give_to_nobody(const std::string& path) {
  return ::geteuid() == 0 && ::lchown(path.c_str(), 65534, 65534) == 0;
}

TEST_F(Files, MakePrivateDirectoryCreatesItClosedAndTakesItsOwnAgain) {
  const std::string dir = dir_ + "/parent/private";
  const mode_t old_umask = ::umask(0);
  const FolderCheck made = make_private_directory(dir);
  ::umask(old_umask);
  EXPECT_TRUE(made.ok()) << made.problem;
  struct stat info {};
  ASSERT_EQ(::lstat(dir.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  EXPECT_TRUE(make_private_directory(dir).ok());  // this user's already: fine
  const UniqueFd file(::open((dir_ + "/file").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  EXPECT_THROW(make_private_directory(dir_ + "/file/private"), std::system_error);
}

TEST_F(Files, CheckPrivateDirectoryRefusesALinkAFileAnOpenFolderAndAnotherUsersFolder) {
  const std::string real = dir_ + "/real";
  ASSERT_TRUE(make_private_directory(real).ok());
  ASSERT_EQ(::symlink(real.c_str(), (dir_ + "/link").c_str()), 0);
  EXPECT_EQ(check_private_directory(dir_ + "/link").problem,
            dir_ + "/link is a link, not a folder");
  const UniqueFd file(::open((dir_ + "/file").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  EXPECT_EQ(check_private_directory(dir_ + "/file").problem, dir_ + "/file is not a folder");
  EXPECT_EQ(check_private_directory(dir_ + "/none").problem,
            "cannot read " + dir_ + "/none: No such file or directory");
  ::chmod(real.c_str(), 0755);
  const FolderCheck open = make_private_directory(real);
  EXPECT_EQ(open.problem, real + " is open to other users (mode 755)");
  EXPECT_TRUE(open.only_mode);
  ::chmod(real.c_str(), 0700);
  if (unavailable(!give_to_nobody(real), "not root: cannot make a folder of another user"))
    GTEST_SKIP();
  const FolderCheck theirs = make_private_directory(real);
  EXPECT_EQ(theirs.problem, real + " belongs to user id 65534, not to you");
  EXPECT_EQ(theirs.owner, 65534u);
  EXPECT_TRUE(theirs.removable);  // root may remove anything
}

TEST_F(Files, MakeTempDirectoryGivesAFreshPrivateFolderEachTime) {
  const std::string first = make_temp_directory(dir_ + "/run-");
  const std::string second = make_temp_directory(dir_ + "/run-");
  EXPECT_NE(first, second);
  EXPECT_EQ(first.rfind(dir_ + "/run-", 0), 0u);
  EXPECT_TRUE(check_private_directory(first).ok());
  EXPECT_THROW(make_temp_directory(dir_ + "/missing/run-"), std::system_error);
}

TEST_F(Files, PerRankFilesAreNeverReachedThroughALinkOrAFifo) {
  const std::string target = dir_ + "/target";
  write_new_file(target, "kept\n");
  const std::string link = dir_ + "/link";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0666), 0);
  for (const std::string& path : {link, fifo}) {
    // None of these waits for a FIFO's other end; none writes through the link.
    EXPECT_THROW(open_own_file_for_append(path), std::system_error) << path;
    EXPECT_THROW(write_new_file(path, "x"), std::system_error) << path;
    EXPECT_EQ(read_file_head(path), "") << path;
    EXPECT_EQ(read_any_file_head(path), "") << path;
  }
  EXPECT_EQ(read_file(target), "kept\n");

  const std::string log = dir_ + "/rank_0.stdout.log";
  for (const char* line : {"one\n", "two\n"}) {
    const UniqueFd fd = open_own_file_for_append(log);
    ASSERT_TRUE(write_all(fd.get(), line));
  }
  EXPECT_EQ(read_file_head(log), "one\ntwo\n");
  struct stat info {};
  ASSERT_EQ(::stat(log.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);

  if (unavailable(!give_to_nobody(log), "not root: cannot make a file of another user"))
    GTEST_SKIP();
  EXPECT_THROW(open_own_file_for_append(log), std::system_error);
  EXPECT_EQ(read_file_head(log), "");  // planted by another user: no answer
  EXPECT_EQ(read_any_file_head(log), "one\ntwo\n");
}

TEST_F(Files, ReplaceFileSwapsTheWholeTextInAndNeverWritesThroughALink) {
  const std::string report = dir_ + "/report.json";
  replace_file(report, "first\n");
  replace_file(report, "second\n");
  EXPECT_EQ(read_file(report), "second\n");
  struct stat info {};
  ASSERT_EQ(::stat(report.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);

  // A link at the path is replaced by the file; what it pointed at is untouched.
  const std::string target = dir_ + "/target";
  write_new_file(target, "kept\n");
  const std::string link = dir_ + "/linked.json";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  replace_file(link, "new\n");
  EXPECT_EQ(read_file(target), "kept\n");
  ASSERT_EQ(::lstat(link.c_str(), &info), 0);
  EXPECT_TRUE(S_ISREG(info.st_mode));
  EXPECT_EQ(read_file(link), "new\n");

  // No temporary file is left beside them.
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"linked.json", "report.json", "target"}));

  // A folder that is not there: an error naming the path, and nothing made.
  EXPECT_THROW(replace_file(dir_ + "/missing/report.json", "x"), std::system_error);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/missing"));
}

TEST(Printable, ToHexWritesTwoLowerCaseDigitsAByte) {
  const unsigned char bytes[] = {0x00, 0x0f, 0xa5, 0xff};
  EXPECT_EQ(to_hex(bytes, sizeof bytes), "000fa5ff");
  EXPECT_EQ(to_hex(bytes, 0), "");
}

TEST(Printable, EscapesControlsAndBadUtf8AndCutsWithAMarker) {
  struct Case {
    std::string_view text;
    std::size_t max_bytes;
    std::string_view expected;
  };
  const Case cases[] = {
      {"plain text", 100, "plain text"},
      {"", 100, ""},
      {"a\nb\rc\td", 100, "a\\x0ab\\x0dc\\x09d"},
      {"\x1b[31mred\x1b]0;title\x07", 100, "\\x1b[31mred\\x1b]0;title\\x07"},
      {std::string_view("nul\0here", 8), 100, "nul\\x00here"},
      {"del\x7f", 100, "del\\x7f"},
      {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 100,
       "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
      {"c1 \xc2\x9b csi", 100, "c1 \\xc2\\x9b csi"},
      {"\xc2\xa0nbsp", 100, "\xc2\xa0nbsp"},
      {"lone \x80 \xff", 100, "lone \\x80 \\xff"},
      {"overlong \xc0\xaf \xe0\x80\xaf", 100, "overlong \\xc0\\xaf \\xe0\\x80\\xaf"},
      {"surrogate \xed\xa0\x80", 100, "surrogate \\xed\\xa0\\x80"},
      {"past max \xf4\x90\x80\x80", 100, "past max \\xf4\\x90\\x80\\x80"},
      {"cut \xe2\x82", 100, "cut \\xe2\\x82"},
      {"abcdef", 6, "abcdef"},
      {"abcdefgh", 6, "abcdef...(2 more bytes)"},
      {"ab\ncd", 4, "ab...(3 more bytes)"},          // the escape is not cut in two
      {"ab\xe2\x82\xac", 4, "ab...(3 more bytes)"},  // nor a character
      {"abc", 0, "...(3 more bytes)"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(printable(c.text, c.max_bytes), c.expected) << c.text;
  }
}

TEST(UniqueFd, ClosesOnceAndMovesOwnership) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd read_end(fds[0]);
  {
    UniqueFd write_end(fds[1]);
    UniqueFd moved = std::move(write_end);
    EXPECT_FALSE(write_end.valid());
    EXPECT_TRUE(write_all(moved.get(), "hi"));
  }
  // Both copies of the write end are gone: the reader sees the data, then EOF.
  char buffer[8];
  EXPECT_EQ(::read(read_end.get(), buffer, sizeof buffer), 2);
  EXPECT_EQ(::read(read_end.get(), buffer, sizeof buffer), 0);
}

TEST(WriteAll, ReportsAGoneReaderInsteadOfDying) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd write_end(fds[1]);
  ::close(fds[0]);
  const auto previous = ::signal(SIGPIPE, SIG_IGN);
  errno = 0;
  EXPECT_FALSE(write_all(write_end.get(), "lost"));
  EXPECT_EQ(errno, EPIPE);
  ::signal(SIGPIPE, previous);
}

// The lines read from `fd` until it has nothing more now (non-blocking), heartbeats (empty
// lines) left out; what follows the last newline is returned in `rest`.
std::vector<std::string> read_lines_now(int fd, std::string& rest) {
  std::vector<std::string> lines;
  char buffer[65536];
  ssize_t got = 0;
  while ((got = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT)) > 0) {
    rest.append(buffer, static_cast<std::size_t>(got));
  }
  std::size_t end = 0;
  while ((end = rest.find('\n')) != std::string::npos) {
    if (end > 0) lines.push_back(rest.substr(0, end));
    rest.erase(0, end + 1);
  }
  return lines;
}

// A line the socket takes only in part, then heartbeats and another line: the reader gets
// both lines whole, never a heartbeat inside the first one (which a plain send of "\n"
// would put there).
TEST(LineOutbox, AHeartbeatNeverLandsInsideALineTheSocketTookInPart) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds), 0);
  const UniqueFd writer(fds[0]), reader(fds[1]);
  const std::string first = std::string(4 << 20, 'a') + "\n";  // more than the socket holds
  LineOutbox outbox;
  ASSERT_TRUE(outbox.send(writer.get(), first));
  ASSERT_GT(outbox.unsent(), 0u) << "the socket took 4 MiB at once: the case is not made";
  const std::size_t waiting = outbox.unsent();
  EXPECT_TRUE(outbox.beat(writer.get()));  // no room: nothing moves, nothing is added
  EXPECT_EQ(outbox.unsent(), waiting);
  EXPECT_TRUE(outbox.send(writer.get(), "second\n"));
  std::vector<std::string> lines;
  std::string rest;
  for (int turn = 0; turn < 10000 && outbox.unsent() > 0; ++turn) {
    for (auto& line : read_lines_now(reader.get(), rest)) lines.push_back(std::move(line));
    ASSERT_TRUE(outbox.beat(writer.get()));
  }
  ASSERT_EQ(outbox.unsent(), 0u);
  for (auto& line : read_lines_now(reader.get(), rest)) lines.push_back(std::move(line));
  EXPECT_TRUE(rest.empty());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0] + "\n", first);
  EXPECT_EQ(lines[1], "second");
  EXPECT_TRUE(outbox.beat(writer.get()));  // nothing waits: an empty line
  EXPECT_EQ(read_lines_now(reader.get(), rest).size(), 0u);
  EXPECT_TRUE(rest.empty());
}

TEST(LineOutbox, SendWaitingDeliversTheTailFirstAndAGoneReaderIsAFailure) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds), 0);
  const UniqueFd writer(fds[0]);
  UniqueFd reader(fds[1]);
  const std::string first = std::string(4 << 20, 'b') + "\n";
  LineOutbox outbox;
  ASSERT_TRUE(outbox.send(writer.get(), first));
  ASSERT_GT(outbox.unsent(), 0u);
  std::string got;
  std::thread drain([&] {
    char buffer[65536];
    while (got.size() < first.size() + 4) {  // "end\n" too
      pollfd ready{reader.get(), POLLIN, 0};
      ::poll(&ready, 1, -1);
      const ssize_t n = ::recv(reader.get(), buffer, sizeof buffer, MSG_DONTWAIT);
      if (n > 0) got.append(buffer, static_cast<std::size_t>(n));
      if (n == 0) break;
    }
  });
  EXPECT_TRUE(outbox.send_waiting(writer.get(), "end\n", std::chrono::seconds(10)));
  EXPECT_EQ(outbox.unsent(), 0u);
  drain.join();
  EXPECT_EQ(got, first + "end\n");
  reader.reset();
  EXPECT_FALSE(outbox.send(writer.get(), "lost\n"));
  EXPECT_FALSE(outbox.beat(writer.get()));  // failed stays failed
  EXPECT_EQ(outbox.unsent(), 0u);
}

// The round's exit report waits for room, but not for a reader that takes nothing (node 0
// stopped with its socket full): without the bound this test would never end.
TEST(LineOutbox, SendWaitingGivesUpOnAReaderThatTakesNothingForTheStallLimit) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds), 0);
  const UniqueFd writer(fds[0]);
  const UniqueFd reader(fds[1]);  // open, and never read
  LineOutbox outbox;
  ASSERT_TRUE(outbox.send(writer.get(), std::string(4 << 20, 'c') + "\n"));
  ASSERT_GT(outbox.unsent(), 0u);
  EXPECT_FALSE(outbox.send_waiting(writer.get(), "exit 0\n", std::chrono::milliseconds(200)));
  EXPECT_EQ(outbox.unsent(), 0u);  // given up: nobody will read it
  EXPECT_FALSE(outbox.beat(writer.get()));
}

// The heartbeat's rules (HeartbeatWatch), written once for the four loops that keep one:
// beats every period, a peer silent at its bound and not a moment before, bytes and lines
// push both, and a turn that comes far too late (this process was stopped) restarts every
// peer's silence from that turn.
TEST(HeartbeatWatch, BeatsEveryPeriodAndCallsAPeerSilentOnlyAtItsBound) {
  using std::chrono::milliseconds;
  const Heartbeat beat{milliseconds(2000), milliseconds(10'000)};
  const auto t0 = HeartbeatWatch::Clock::time_point{} + std::chrono::hours(1);
  HeartbeatWatch watch(beat, t0);
  PeerBeat peer = watch.start(t0);
  EXPECT_FALSE(watch.beat_due(peer, t0 + milliseconds(1999)));
  EXPECT_TRUE(watch.beat_due(peer, t0 + milliseconds(2000)));
  EXPECT_EQ(watch.due(peer), t0 + milliseconds(2000));
  for (int k = 1; k <= 4; ++k) {  // the owner turns every beat; the peer sends nothing
    const auto now = t0 + k * milliseconds(2000);
    watch.turn(now);
    ASSERT_TRUE(watch.beat_due(peer, now));
    watch.sent(peer, now);
    EXPECT_FALSE(watch.silent(peer, now));
  }
  EXPECT_EQ(watch.due(peer), t0 + milliseconds(10'000));  // silence before the next beat
  EXPECT_EQ(watch.due(peer, false), t0 + milliseconds(10'000));
  watch.turn(t0 + milliseconds(9'999));
  EXPECT_FALSE(watch.silent(peer, t0 + milliseconds(9'999)));
  watch.turn(t0 + milliseconds(10'000));
  EXPECT_TRUE(watch.silent(peer, t0 + milliseconds(10'000)));
  peer.heard_at = t0 + milliseconds(10'000);  // bytes came after all
  EXPECT_FALSE(watch.silent(peer, t0 + milliseconds(19'999)));
  EXPECT_TRUE(watch.silent(peer, t0 + milliseconds(20'000)));
}

TEST(HeartbeatWatch, ATurnFarLaterThanABeatRestartsEveryPeersSilence) {
  using std::chrono::milliseconds;
  const Heartbeat beat{milliseconds(2000), milliseconds(10'000)};
  const auto t0 = HeartbeatWatch::Clock::time_point{} + std::chrono::hours(1);
  HeartbeatWatch watch(beat, t0);
  const PeerBeat peer = watch.start(t0);
  watch.turn(t0 + milliseconds(4000));  // two beats apart: not late
  EXPECT_TRUE(watch.silent(peer, t0 + milliseconds(10'000)));
  const auto resumed = t0 + milliseconds(60'000);  // stopped for most of a minute
  watch.turn(resumed);
  EXPECT_FALSE(watch.silent(peer, resumed));
  EXPECT_FALSE(watch.silent(peer, resumed + milliseconds(9'999)));
  EXPECT_TRUE(watch.silent(peer, resumed + milliseconds(10'000)));
  EXPECT_EQ(watch.due(peer), peer.beat_at);  // its beat is overdue: due at once
  // A peer whose next beat is far off wakes the loop when it falls silent, counted from
  // the resumption.
  EXPECT_EQ(watch.due(PeerBeat{t0, resumed + milliseconds(20'000)}),
            resumed + milliseconds(10'000));
}

TEST(HeartbeatWatch, WithoutAHeartbeatNothingIsEverSilentOrDue) {
  const auto t0 = HeartbeatWatch::Clock::time_point{} + std::chrono::hours(1);
  HeartbeatWatch watch(Heartbeat{}, t0);
  const PeerBeat peer = watch.start(t0);
  watch.turn(t0 + std::chrono::hours(1));
  EXPECT_FALSE(watch.on());
  EXPECT_FALSE(watch.silent(peer, t0 + std::chrono::hours(2)));
  EXPECT_FALSE(watch.beat_due(peer, t0 + std::chrono::hours(2)));
}

// A launchers' connection is probed while idle and given up after kPeerDeadAfterSeconds:
// probes start after 2 s and come every 2 s, and the probes plus the last wait fit the bound.
TEST(KeepAlive, ProbesAnIdleConnectionAndGivesUpWithinTheBound) {
  const UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(fd.valid());
  ASSERT_TRUE(keep_alive(fd.get()));
  const auto option = [&](int level, int name) {
    int value = -1;
    socklen_t size = sizeof value;
    EXPECT_EQ(::getsockopt(fd.get(), level, name, &value, &size), 0);
    return value;
  };
  EXPECT_EQ(option(SOL_SOCKET, SO_KEEPALIVE), 1);
  const int idle = option(IPPROTO_TCP, TCP_KEEPIDLE), every = option(IPPROTO_TCP, TCP_KEEPINTVL);
  EXPECT_EQ(idle, 2);
  EXPECT_EQ(every, 2);
  EXPECT_LE(idle + every * option(IPPROTO_TCP, TCP_KEEPCNT), kPeerDeadAfterSeconds);
  EXPECT_EQ(option(IPPROTO_TCP, TCP_USER_TIMEOUT), kPeerDeadAfterSeconds * 1000);
  EXPECT_FALSE(keep_alive(-1));
}

}  // namespace
}  // namespace ddprun
