#include "launcher_harness.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <regex>
#include <sstream>

#include "child_process.h"

namespace ddprun::testing {

std::string child_bin() {
  return TEST_CHILD_BIN;
}
std::string ddprun_bin() {
  return DDPRUN_BIN;
}

Launched::Launched(const std::vector<std::string>& args, const std::vector<std::string>& extra_env,
                   bool ready_pipe) {
  int out[2], err[2], ready[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) std::abort();
  if (ready_pipe) {
    if (::pipe2(ready, O_CLOEXEC) != 0) std::abort();
    ::fcntl(ready[1], F_SETFD, 0);  // the write end is passed down on purpose
  }
  std::vector<std::string> extra = extra_env;
  if (ready_pipe) extra.push_back("TEST_READY_FD=" + std::to_string(ready[1]));
  std::vector<std::string> argv{ddprun_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_ = support::spawn_child(argv, support::environment_with(extra), out[1], err[1]);
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  if (ready_pipe) {
    ::close(ready[1]);
    ready_fd_ = ready[0];
  }
}

Launched::~Launched() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  for (int fd : {out_fd_, err_fd_, ready_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

// Reads whatever is available from the open pipes, waiting up to timeout_ms.
// Returns false when every pipe is closed.
bool Launched::pump(int timeout_ms) {
  pollfd fds[3];
  std::string* sinks[3];
  int* owners[3];
  nfds_t count = 0;
  for (auto [fd, sink] : {std::pair{&out_fd_, &out_}, {&err_fd_, &err_}, {&ready_fd_, &ready_}}) {
    if (*fd < 0) continue;
    fds[count] = {*fd, POLLIN, 0};
    sinks[count] = sink;
    owners[count] = fd;
    ++count;
  }
  if (count == 0) return false;
  if (::poll(fds, count, timeout_ms) <= 0) return true;
  for (nfds_t i = 0; i < count; ++i) {
    if (fds[i].revents == 0) continue;
    char buffer[65536];
    const ssize_t got = ::read(fds[i].fd, buffer, sizeof buffer);
    if (got <= 0) {
      ::close(*owners[i]);
      *owners[i] = -1;
    } else {
      sinks[i]->append(buffer, static_cast<std::size_t>(got));
    }
  }
  return true;
}

std::vector<pid_t> Launched::wait_ready(int count, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (static_cast<int>(split_lines(ready_).size()) < count) {
    if (std::chrono::steady_clock::now() > deadline || !pump(100)) {
      ADD_FAILURE() << "workers not ready; stdout:\n" << out_ << "\nstderr:\n" << err_;
      return {};
    }
  }
  std::vector<pid_t> pids;
  for (const auto& line : split_lines(ready_)) {
    int rank = 0, pid = 0, grandchild = 0;
    std::istringstream(line) >> rank >> pid >> grandchild;
    pids.push_back(pid);
    if (grandchild > 0) pids.push_back(grandchild);
  }
  return pids;
}

void Launched::wait_stdout(const std::function<bool(const std::string&)>& predicate,
                           std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!predicate(out_)) {
    if (std::chrono::steady_clock::now() > deadline || !pump(100)) {
      ADD_FAILURE() << "expected output did not come; stdout:\n" << out_ << "\nstderr:\n" << err_;
      return;
    }
  }
}

pid_t Launched::worker_pid(int rank) const {
  for (const auto& line : split_lines(ready_)) {
    int line_rank = -1, pid = 0;
    std::istringstream(line) >> line_rank >> pid;
    if (line_rank == rank) return pid;
  }
  ADD_FAILURE() << "rank " << rank << " never said it was ready";
  return -1;
}

void Launched::signal(int sig) {
  ::kill(pid_, sig);
}

Finished Launched::finish(std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (pump(100)) {
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "ddprun did not finish in time; stdout:\n" << out_ << "\nstderr:\n" << err_;
      ::kill(pid_, SIGKILL);
      break;
    }
  }
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  Finished finished;
  finished.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  finished.out = out_;
  finished.err = err_;
  return finished;
}

Finished run_ddprun(const std::vector<std::string>& args,
                    const std::vector<std::string>& extra_env) {
  Launched launched(args, extra_env);
  return launched.finish();
}

std::vector<pid_t> wait_all_gone(const std::vector<pid_t>& pids,
                                 std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<pid_t> alive;
  for (pid_t pid : pids) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) continue;  // already gone (and reaped)
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, static_cast<int>(std::max<long long>(0, left.count()))) <= 0) {
      alive.push_back(pid);
    }
    ::close(fd);
  }
  return alive;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> with_child(std::vector<std::string> ddprun_args,
                                    const std::vector<std::string>& child_args) {
  ddprun_args.push_back("--");
  ddprun_args.push_back(child_bin());
  ddprun_args.insert(ddprun_args.end(), child_args.begin(), child_args.end());
  return ddprun_args;
}

std::map<int, std::map<std::string, std::string>> env_by_rank(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> ranks;
  const std::regex tagged(R"(^\[[^:\]]+:(\d+)\] ([A-Za-z_][A-Za-z0-9_]*)=(.*)$)");
  for (const auto& line : split_lines(out)) {
    std::smatch match;
    if (std::regex_match(line, match, tagged)) ranks[std::stoi(match[1])][match[2]] = match[3];
  }
  return ranks;
}

}  // namespace ddprun::testing
