#include "process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>

namespace ddprun {
namespace {

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// The signals ddprun takes over: child exits, and those it forwards to workers.
sigset_t handled_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) {
    sigaddset(&set, sig);
  }
  return set;
}

// Only async-signal-safe calls between fork and exec.
void write_stderr_raw(const char* text) noexcept {
  const auto ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = other.release();
  }
  return *this;
}

int UniqueFd::release() noexcept {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);  // never retried: the fd is gone even on EINTR
  fd_ = -1;
}

Pipe make_pipe(bool nonblocking_read) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe2");
  Pipe pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
  if (!nonblocking_read) return pipe;
  const int flags = ::fcntl(fds[0], F_GETFL);
  if (flags < 0 || ::fcntl(fds[0], F_SETFL, flags | O_NONBLOCK) != 0) throw_errno("fcntl");
  return pipe;
}

UniqueFd open_log_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno("open " + path);
  return UniqueFd(fd);
}

void make_directories(const std::string& path) {
  std::string prefix;
  std::size_t start = 0;
  while (start <= path.size()) {
    const auto slash = path.find('/', start);
    prefix = path.substr(0, slash);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      throw_errno("mkdir " + prefix);
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) throw_errno("stat " + path);
  if (!S_ISDIR(info.st_mode)) {
    throw std::system_error(ENOTDIR, std::generic_category(), "mkdir " + path);
  }
}

bool write_all(int fd, std::string_view data) noexcept {
  while (!data.empty()) {
    const ssize_t written = ::write(fd, data.data(), data.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        // A non-blocking console: wait until it drains rather than drop output.
        pollfd ready{fd, POLLOUT, 0};
        ::poll(&ready, 1, -1);
        continue;
      }
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(written));
  }
  return true;
}

SignalChannel::SignalChannel() {
  const sigset_t set = handled_signals();
  if (::sigprocmask(SIG_BLOCK, &set, &original_mask_) != 0) throw_errno("sigprocmask");
  const int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) throw_errno("signalfd");
  fd_ = UniqueFd(fd);
  // A worker's console may vanish (a closed pipe); that must not kill ddprun.
  ::signal(SIGPIPE, SIG_IGN);
}

SignalChannel::~SignalChannel() {
  ::signal(SIGPIPE, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
}

int SignalChannel::read_signal() {
  signalfd_siginfo info{};
  for (;;) {
    const ssize_t got = ::read(fd_.get(), &info, sizeof info);
    if (got == static_cast<ssize_t>(sizeof info)) return static_cast<int>(info.ssi_signo);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EAGAIN) return 0;
    throw_errno("read signalfd");
  }
}

pid_t spawn_process(const SpawnSpec& spec, const sigset_t& child_mask) {
  // Everything the child needs is prepared before fork: after it, only async-signal-safe
  // calls are allowed.
  std::vector<char*> argv;
  argv.reserve(spec.argv.size() + 1);
  for (const auto& arg : spec.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(spec.env.size() + 1);
  for (const auto& var : spec.env) envp.push_back(const_cast<char*>(var.c_str()));
  envp.push_back(nullptr);
  const UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null.valid()) throw_errno("open /dev/null");
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) throw_errno("fork");
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(128 + SIGKILL);  // ddprun died before prctl
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD}) {
      ::signal(sig, SIG_DFL);
    }
    const int stdin_fd = spec.stdin_fd >= 0 ? spec.stdin_fd : dev_null.get();
    if (::dup2(stdin_fd, STDIN_FILENO) < 0 || ::dup2(spec.stdout_fd, STDOUT_FILENO) < 0 ||
        ::dup2(spec.stderr_fd, STDERR_FILENO) < 0) {
      ::_exit(127);
    }
    ::sigprocmask(SIG_SETMASK, &child_mask, nullptr);
    ::execve(spec.path.c_str(), argv.data(), envp.data());
    write_stderr_raw("ddprun: error: cannot execute ");
    write_stderr_raw(spec.path.c_str());
    write_stderr_raw(": ");
    write_stderr_raw(::strerror(errno));
    write_stderr_raw("\n");
    ::_exit(127);
  }
  // Also set it here, so the group exists before anyone signals it.
  ::setpgid(pid, pid);
  return pid;
}

std::vector<CapturedRun> run_all_captured(std::vector<SpawnSpec> specs,
                                          const std::vector<std::string>& inputs, int timeout_ms,
                                          const sigset_t& child_mask) {
  struct Running {
    pid_t pid = -1;
    UniqueFd out;
    UniqueFd err;
  };
  std::vector<CapturedRun> results(specs.size());
  std::vector<Running> running(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    Pipe out = make_pipe();
    Pipe err = make_pipe();
    specs[i].stdout_fd = out.write_end.get();
    specs[i].stderr_fd = err.write_end.get();
    const bool has_input = i < inputs.size() && !inputs[i].empty();
    Pipe in = has_input ? make_pipe(/*nonblocking_read=*/false) : Pipe{};
    specs[i].stdin_fd = has_input ? in.read_end.get() : -1;
    running[i].pid = spawn_process(specs[i], child_mask);
    // Small messages: they fit in the pipe, and closing it gives the reader its EOF.
    if (has_input) write_all(in.write_end.get(), inputs[i]);
    running[i].out = std::move(out.read_end);
    running[i].err = std::move(err.read_end);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<UniqueFd*, std::string*>> targets;
    for (std::size_t i = 0; i < running.size(); ++i) {
      for (auto [fd, text] : {std::pair{&running[i].out, &results[i].out},
                              std::pair{&running[i].err, &results[i].err}}) {
        if (!fd->valid()) continue;
        fds.push_back({fd->get(), POLLIN, 0});
        targets.emplace_back(fd, text);
      }
    }
    if (fds.empty()) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      for (std::size_t i = 0; i < running.size(); ++i) {
        if (running[i].out.valid() || running[i].err.valid()) results[i].timed_out = true;
        signal_group(running[i].pid, SIGKILL);
        running[i].out.reset();
        running[i].err.reset();
      }
      break;
    }
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(left));
    if (ready < 0 && errno != EINTR) throw_errno("poll");
    for (std::size_t k = 0; ready > 0 && k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      char buffer[4096];
      const ssize_t got = ::read(fds[k].fd, buffer, sizeof buffer);
      if (got > 0) {
        targets[k].second->append(buffer, static_cast<std::size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        targets[k].first->reset();
      }
    }
  }
  for (std::size_t i = 0; i < running.size(); ++i) {
    while (::waitpid(running[i].pid, &results[i].wait_status, 0) < 0 && errno == EINTR) {
    }
    signal_group(running[i].pid, SIGKILL);  // whatever it left behind
  }
  return results;
}

void signal_group(pid_t pgid, int signal_number) noexcept {
  if (pgid > 0) ::kill(-pgid, signal_number);
}

Guardian::Guardian(std::string scratch_dir) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe2");
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  pid_ = ::fork();
  if (pid_ < 0) throw_errno("fork");
  if (pid_ == 0) {
    write_end.reset();
    // Keep ddprun's stdout and stderr, nothing else: whoever reads ddprun's output sees
    // its end only once the guardian has finished cleaning up too.
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    const int keep = read_end.get();
    ::close_range(3, static_cast<unsigned>(keep) - 1, 0);
    ::close_range(static_cast<unsigned>(keep) + 1, ~0U, 0);
    // Terminal and job-control signals are ddprun's business, not the guardian's.
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGTSTP}) {
      ::signal(sig, SIG_IGN);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (::chdir("/") != 0) {
      // Not fatal: it only keeps the working directory busy.
    }
    std::set<pid_t> groups;
    std::int32_t message = 0;
    for (;;) {
      const ssize_t got = ::read(read_end.get(), &message, sizeof message);
      if (got < 0 && errno == EINTR) continue;
      if (got != static_cast<ssize_t>(sizeof message)) break;  // EOF: ddprun is gone
      if (message > 0) groups.insert(message);
      if (message < 0) groups.erase(-message);
    }
    for (pid_t group : groups) ::kill(-group, SIGKILL);
    if (!scratch_dir.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir, ignored);
    }
    ::_exit(0);
  }
  channel_ = std::move(write_end);
}

Guardian::~Guardian() {
  channel_.reset();
  if (pid_ > 0) {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

void Guardian::watch(pid_t pgid) noexcept {
  const std::int32_t message = pgid;
  write_all(channel_.get(), {reinterpret_cast<const char*>(&message), sizeof message});
}

void Guardian::forget(pid_t pgid) noexcept {
  const std::int32_t message = -pgid;
  write_all(channel_.get(), {reinterpret_cast<const char*>(&message), sizeof message});
}

}  // namespace ddprun
