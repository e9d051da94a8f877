// ddprun with a console that does not keep up: a pipe whose reader never reads, and one
// that reads slowly. Supervision (exits, signals, teardown) keeps its timing, the log files
// keep every line, and a failing worker's last lines reach a slow reader.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.h"
#include "launcher_harness.h"

namespace ddprun::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// ProcessRunnerConfig::console_stall: how long the drain at the end waits for a console
// that takes nothing. The bounds below are this plus room for a loaded machine.
constexpr seconds kConsoleStall{2};
constexpr seconds kSlack{10};
// Only the failure condition: a ddprun that blocks on its console never exits by itself.
constexpr seconds kGiveUp{40};

// Lines each worker prints: far more than a pipe and the console queue (4 MiB) hold.
constexpr int kLines = 300000;

struct Pipe {
  Pipe() {
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0) std::abort();
    read_end = ends[0];
    write_end = ends[1];
  }
  ~Pipe() {
    for (int fd : {read_end, write_end}) {
      if (fd >= 0) ::close(fd);
    }
  }
  void close_write() {
    ::close(write_end);
    write_end = -1;
  }
  int read_end = -1;
  int write_end = -1;
};

// Reads what `fd` holds now, without waiting.
std::string read_available(int fd) {
  std::string text;
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  char buffer[65536];
  for (ssize_t got; (got = ::read(fd, buffer, sizeof buffer)) > 0;) {
    text.append(buffer, static_cast<std::size_t>(got));
  }
  ::fcntl(fd, F_SETFL, flags);
  return text;
}

// ddprun started with stdout and stderr on descriptors the test chose, and a pipe for the
// workers' "ready" lines ($TEST_READY_FD).
class Started {
 public:
  Started(const std::vector<std::string>& args, int stdout_fd, int stderr_fd) {
    ::fcntl(ready_.write_end, F_SETFD, 0);  // passed down to the workers on purpose
    std::vector<std::string> argv{ddprun_bin()};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto env =
        support::environment_with({"TEST_READY_FD=" + std::to_string(ready_.write_end)});
    started_at_ = Clock::now();
    pid_ = support::spawn_child(argv, env, stdout_fd, stderr_fd);
    ready_.close_write();
    pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  }
  ~Started() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (pidfd_ >= 0) ::close(pidfd_);
  }
  Started(const Started&) = delete;
  Started& operator=(const Started&) = delete;

  pid_t pid() const { return pid_; }
  Clock::time_point started_at() const { return started_at_; }

  // Waits for ddprun to exit, up to kGiveUp (then SIGKILLs it and returns -1), reading
  // `read_fd` meanwhile: everything as it comes, or, with a `pause`, `chunk` bytes per
  // pause (a slow reader). Returns the exit code (128 + signal when killed).
  int wait_exit(int read_fd, std::string& text, milliseconds pause = milliseconds(0),
                std::size_t chunk = 65536) {
    const auto deadline = Clock::now() + kGiveUp;
    for (;;) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        ADD_FAILURE() << "ddprun did not exit within " << kGiveUp.count() << " s";
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        pid_ = -1;
        return -1;
      }
      pollfd fds[2] = {{pidfd_, POLLIN, 0}, {read_fd, POLLIN, 0}};
      const bool slow = pause.count() > 0;
      const nfds_t count = read_fd >= 0 && !slow ? 2 : 1;
      const int timeout = static_cast<int>(slow ? std::min(pause, left).count() : left.count());
      ::poll(fds, count, timeout);
      if (read_fd >= 0 && (slow || (fds[1].revents != 0))) {
        std::vector<char> buffer(chunk);
        const int flags = ::fcntl(read_fd, F_GETFL);
        ::fcntl(read_fd, F_SETFL, flags | O_NONBLOCK);
        const ssize_t got = ::read(read_fd, buffer.data(), buffer.size());
        ::fcntl(read_fd, F_SETFL, flags);
        if (got > 0) text.append(buffer.data(), static_cast<std::size_t>(got));
      }
      if (fds[0].revents != 0) break;
    }
    exited_at_ = Clock::now();
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    if (read_fd >= 0) text += read_available(read_fd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  double seconds_to_exit(Clock::time_point from) const {
    return std::chrono::duration<double>(exited_at_ - from).count();
  }

  // The pids of the workers that said they were ready.
  std::vector<pid_t> worker_pids() {
    ready_text_ += read_available(ready_.read_end);
    std::vector<pid_t> pids;
    for (const auto& line : split_lines(ready_text_)) {
      int rank = 0, pid = 0;
      std::istringstream(line) >> rank >> pid;
      pids.push_back(pid);
    }
    return pids;
  }

 private:
  Pipe ready_;
  std::string ready_text_;
  pid_t pid_ = -1;
  int pidfd_ = -1;
  Clock::time_point started_at_;
  Clock::time_point exited_at_;
};

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// What test_child's print:N writes for `rank`.
std::string printed(int rank, int count) {
  std::string text;
  for (int i = 0; i < count; ++i) {
    text += "rank " + std::to_string(rank) + " line " + std::to_string(i) + "\n";
  }
  return text;
}

std::string stdout_log(const TempDir& dir, int rank) {
  return dir.path() + "/attempt_0/rank_" + std::to_string(rank) + ".stdout.log";
}

TEST(StalledConsole, FailingWorkerEndsTheJobOnTimeAndTheLogsKeepEveryLine) {
  // stdout is a pipe nobody reads (a paused pager, Ctrl-S, a stuck ssh link).
  TempDir dir;
  Pipe console;
  Pipe err;
  Started ddprun(with_child({"--nproc-per-node", "2", "--log-dir", dir.path()},
                            {"ready", "print:" + std::to_string(kLines), "exit:3@1", "sleep@0"}),
                 console.write_end, err.write_end);
  console.close_write();  // held open by ddprun alone; its read end stays here, unread
  err.close_write();
  std::string err_text;
  const int code = ddprun.wait_exit(err.read_end, err_text);
  ASSERT_EQ(code, 3) << err_text;
  // Rank 1's exit, SIGTERM to rank 0, then at most one stall of the console drain.
  EXPECT_LT(ddprun.seconds_to_exit(ddprun.started_at()), (kConsoleStall + kSlack).count())
      << err_text;
  const auto pids = ddprun.worker_pids();
  EXPECT_EQ(pids.size(), 2u);
  EXPECT_TRUE(wait_all_gone(pids, milliseconds(5000)).empty());
  // Rank 1 printed everything before it exited; rank 0 may still have been printing when
  // it was stopped: its log holds whole lines, in order, as far as it got.
  EXPECT_TRUE(file_text(stdout_log(dir, 1)) == printed(1, kLines)) << "rank 1's log lacks lines";
  const std::string rank0 = file_text(stdout_log(dir, 0));
  EXPECT_TRUE(printed(0, kLines).compare(0, rank0.size(), rank0) == 0 &&
              (rank0.empty() || rank0.back() == '\n'))
      << "rank 0's log is not the start of what it printed";
  EXPECT_NE(err_text.find("rank 1 (local rank 1"), std::string::npos) << err_text;
  EXPECT_NE(err_text.find("console not reading: lines it cannot take are left out of it; the "
                          "log files in " +
                          dir.path() + "/attempt_0 keep every line"),
            std::string::npos)
      << err_text;
  const std::regex dropped(R"(console not reading: (\d+) lines not shown \(all are in )");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(err_text, match, dropped)) << err_text;
  EXPECT_GT(std::stol(match[1]), 0);
  EXPECT_LE(std::stol(match[1]), 2L * kLines);
}

TEST(StalledConsole, SigtermStopsTheJobOnTimeWhileTheConsoleIsNotReading) {
  TempDir dir;
  Pipe console;
  Pipe err;
  Started ddprun(with_child({"--nproc-per-node", "2", "--log-dir", dir.path()},
                            {"ready", "print:" + std::to_string(kLines), "sleep"}),
                 console.write_end, err.write_end);
  console.close_write();
  err.close_write();
  // Every line is in the log files: ddprun read all of it, so the console is full.
  const auto all_read = Clock::now() + seconds(20);
  const std::uintmax_t full = printed(0, kLines).size();
  // A log not made yet holds nothing (file_size's error value would count as full).
  const auto logged = [&](int rank) {
    std::error_code missing;
    const std::uintmax_t size = std::filesystem::file_size(stdout_log(dir, rank), missing);
    return missing ? 0 : size;
  };
  while (Clock::now() < all_read && (logged(0) < full || logged(1) < full)) {
    pollfd none{-1, 0, 0};
    ::poll(&none, 1, 20);
  }
  EXPECT_GE(logged(1), full) << "ddprun stopped reading its workers' output";
  const auto sent = Clock::now();
  ::kill(ddprun.pid(), SIGTERM);
  std::string err_text;
  const int code = ddprun.wait_exit(err.read_end, err_text);
  ASSERT_EQ(code, 128 + SIGTERM) << err_text;
  EXPECT_LT(ddprun.seconds_to_exit(sent), (kConsoleStall + kSlack).count()) << err_text;
  EXPECT_NE(err_text.find("stopped by SIGTERM"), std::string::npos) << err_text;
  const auto pids = ddprun.worker_pids();
  EXPECT_EQ(pids.size(), 2u);
  EXPECT_TRUE(wait_all_gone(pids, milliseconds(5000)).empty());
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(file_text(stdout_log(dir, rank)) == printed(rank, kLines))
        << "rank " << rank << "'s log file lacks lines";
  }
}

// The console stalls across the job's end (a paused pager, a stuck ssh link): after a
// bounded wait, what it did not take goes to a file that a line on stderr names; no last
// line is lost without a word.
TEST(StalledConsole, WhatItDidNotTakeAtTheEndIsSpilledToAFileThatStderrNames) {
  TempDir dir;
  Pipe console;
  Pipe err;
  constexpr int kPrinted = 20000;  // 350 KB: more than the pipe, less than the queue
  Started ddprun(with_child({"--nproc-per-node", "1", "--log-dir", dir.path()},
                            {"print:" + std::to_string(kPrinted)}),
                 console.write_end, err.write_end);
  console.close_write();
  err.close_write();
  std::string err_text;
  const int code = ddprun.wait_exit(err.read_end, err_text);
  ASSERT_EQ(code, 0) << err_text;
  const std::regex spilled(R"(its last (\d+) lines are in (\S+)\n)");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(err_text, match, spilled)) << err_text;
  EXPECT_EQ(match[2].str().rfind(dir.path() + "/console_not_shown-", 0), 0u) << match[2];
  // What the console took, then the file: every line, in order, none twice.
  const std::string shown = read_available(console.read_end);
  const std::string rest = file_text(match[2].str());
  EXPECT_GT(std::stol(match[1]), 0);
  EXPECT_TRUE(shown + rest == printed(0, kPrinted))
      << shown.size() << " bytes shown, " << rest.size() << " spilled";
}

TEST(SlowConsole, FailingWorkersLastLinesReachAReaderThatIsSlowButMoving) {
  // stdout and stderr on one pipe (2>&1) read at about 20 KB/s: draining what is queued
  // when the job ends takes several seconds, more than a fixed 2 s deadline would give.
  Pipe console;
  ::fcntl(console.write_end, F_SETPIPE_SZ, 4096);  // what waits, waits in ddprun
  Started ddprun(with_child({"--nproc-per-node", "2"},
                            {"sleep@0", "print:5000@1",  // about 85 KB before rank 1's traceback
                             "stderr:Traceback (most recent call last):@1",
                             "stderr:  File \"train.py\", line 7, in <module>@1",
                             "stderr:ValueError: the last line of rank 1@1", "exit:1@1"}),
                 console.write_end, console.write_end);
  console.close_write();
  std::string text;
  const int code = ddprun.wait_exit(console.read_end, text, milliseconds(25), 512);
  ASSERT_EQ(code, 1) << text;
  const auto traceback = text.find(
      "Traceback (most recent call last):\n"
      "  File \"train.py\", line 7, in <module>\n"
      "ValueError: the last line of rank 1\n");
  const auto report = text.find("rank 1 (local rank 1");
  ASSERT_NE(traceback, std::string::npos)
      << text.substr(text.size() - std::min<std::size_t>(text.size(), 2000));
  ASSERT_NE(report, std::string::npos);
  EXPECT_LT(traceback, report);  // the worker's lines first, then ddprun's report
  EXPECT_EQ(text.find("not shown"), std::string::npos);
  // Teardown did not wait for the console: rank 0 got its SIGTERM as soon as rank 1
  // failed, though the reader needed over 4 s for what rank 1 had printed (the bound
  // leaves room for a loaded machine and still tells the two apart).
  const std::regex row(R"(ddprun: +0 +0 +\d+ +signal SIGTERM +([0-9.]+) s)");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(text, match, row)) << text;
  EXPECT_LT(std::stod(match[1]), 3.0);
}

}  // namespace
}  // namespace ddprun::testing
