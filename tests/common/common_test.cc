#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "ddprun/common/files.h"
#include "ddprun/common/parse_int.h"
#include "ddprun/common/signal_name.h"
#include "ddprun/common/unique_fd.h"
#include "temp_dir.h"

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

}  // namespace
}  // namespace ddprun
