#include "run/process.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
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

bool ignored_at_start(int sig) {
  struct sigaction action {};
  return ::sigaction(sig, nullptr, &action) == 0 && action.sa_handler == SIG_IGN;
}

// The signals ddprun takes over: child exits, and those it forwards to workers. A SIGHUP
// that ddprun was started with ignored (nohup, `trap '' HUP`) stays ignored: blocking it
// would queue it on the signalfd and stop the job.
sigset_t handled_signals(const std::vector<int>& extra) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) {
    sigaddset(&set, sig);
  }
  for (int sig : extra) sigaddset(&set, sig);
  if (ignored_at_start(SIGHUP)) sigdelset(&set, SIGHUP);
  return set;
}

// Only async-signal-safe calls between fork and exec.
void write_stderr_raw(const char* text) noexcept {
  const auto ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

}  // namespace

Pipe make_pipe(bool nonblocking_read) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe2");
  Pipe pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
  if (!nonblocking_read) return pipe;
  const int flags = ::fcntl(fds[0], F_GETFL);
  if (flags < 0 || ::fcntl(fds[0], F_SETFL, flags | O_NONBLOCK) != 0) throw_errno("fcntl");
  return pipe;
}

SignalChannel::SignalChannel(const std::vector<int>& extra) {
  const sigset_t set = handled_signals(extra);
  if (::sigprocmask(SIG_BLOCK, &set, &original_mask_) != 0) throw_errno("sigprocmask");
  const int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) throw_errno("signalfd");
  fd_ = UniqueFd(fd);
  // An inherited ignored SIGCHLD would reap the workers behind ddprun's back (waitpid
  // then fails with ECHILD): children are ddprun's to wait for.
  ::signal(SIGCHLD, SIG_DFL);
  // A worker's console may vanish (a closed pipe); that must not kill ddprun.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &original_sigpipe_);
}

SignalChannel::~SignalChannel() {
  ::sigaction(SIGPIPE, &original_sigpipe_, nullptr);
  if (!outcome_decided_) ::sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
}

int SignalChannel::discard_pending() {
  outcome_decided_ = true;
  int count = 0;
  while (read_signal() != 0) ++count;
  return count;
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

namespace {

// What the child of spawn_process reads: all made before the clone, nothing allocated after.
struct ChildStart {
  const SpawnSpec* spec = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  int stdin_fd = -1;
  pid_t parent = 0;
  bool keep_sighup_ignored = false;
  const cpu_set_t* cpus = nullptr;
  const sigset_t* child_mask = nullptr;
};

// The child, on its own stack in ddprun's memory until it execs (CLONE_VM | CLONE_VFORK):
// only system calls, no allocation, nothing written that ddprun reads after. Not
// instrumented by AddressSanitizer: its frame's redzones would stay poisoned in ddprun's
// shadow memory, since the frame never returns.
__attribute__((no_sanitize("address"))) int start_child(void* start_arg) {
  const ChildStart& start = *static_cast<const ChildStart*>(start_arg);
  const SpawnSpec& spec = *start.spec;
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != start.parent) ::_exit(128 + SIGKILL);  // ddprun died before prctl
  // ddprun's helpers (eu-stack) may read its stack where Yama allows only ancestors.
  ::prctl(PR_SET_PTRACER, start.parent, 0, 0, 0);
  // Workers start with default dispositions, except a SIGHUP that ddprun itself was
  // started with ignored (nohup): they inherit that, as nohup's children do. Every signal
  // is blocked until the mask below, so no handler of ddprun's runs here.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD}) {
    if (sig != SIGHUP || !start.keep_sighup_ignored) ::sigaction(sig, &default_action, nullptr);
  }
  if (::dup2(start.stdin_fd, STDIN_FILENO) < 0 || ::dup2(spec.stdout_fd, STDOUT_FILENO) < 0 ||
      ::dup2(spec.stderr_fd, STDERR_FILENO) < 0) {
    ::_exit(127);
  }
  if (!spec.cpus.empty() && ::sched_setaffinity(0, sizeof(cpu_set_t), start.cpus) != 0) {
    write_stderr_raw("ddprun: error: cannot bind the worker to its CPUs: ");
    write_stderr_raw(::strerror(errno));
    write_stderr_raw("\n");
    ::_exit(127);
  }
  ::sigprocmask(SIG_SETMASK, start.child_mask, nullptr);
  ::execve(spec.path.c_str(), start.argv, start.envp);
  write_stderr_raw("ddprun: error: cannot execute ");
  write_stderr_raw(spec.path.c_str());
  write_stderr_raw(": ");
  write_stderr_raw(::strerror(errno));
  write_stderr_raw("\n");
  ::_exit(127);
}

// The child's stack until it execs: ddprun is suspended meanwhile (CLONE_VFORK), so one
// stack serves every spawn of this thread.
constexpr std::size_t kChildStackBytes = 64 * 1024;

}  // namespace

bool set_process_cpus(pid_t pid, const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int cpu : cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(static_cast<std::size_t>(cpu), &set);
  }
  bool all = true;
  std::error_code error;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", error)) {
    const pid_t tid = static_cast<pid_t>(std::stol(task.path().filename().string()));
    all = ::sched_setaffinity(tid, sizeof set, &set) == 0 && all;
  }
  return all && !error;
}

pid_t spawn_process(const SpawnSpec& spec, const sigset_t& child_mask) {
  // Everything the child needs is prepared before the clone: after it, only system calls.
  std::vector<char*> argv;
  argv.reserve(spec.argv.size() + 1);
  for (const auto& arg : spec.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(spec.env.size() + 1);
  for (const auto& var : spec.env) envp.push_back(const_cast<char*>(var.c_str()));
  envp.push_back(nullptr);
  UniqueFd dev_null;
  if (spec.stdin_fd < 0) {
    dev_null = UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!dev_null.valid()) throw_errno("open /dev/null");
  }
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (const int cpu : spec.cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(static_cast<std::size_t>(cpu), &cpus);
  }
  ChildStart start;
  start.spec = &spec;
  start.argv = argv.data();
  start.envp = envp.data();
  start.stdin_fd = spec.stdin_fd >= 0 ? spec.stdin_fd : dev_null.get();
  start.parent = ::getpid();
  start.keep_sighup_ignored = ignored_at_start(SIGHUP);
  start.cpus = &cpus;
  start.child_mask = &child_mask;

  // vfork's way, as posix_spawn does it (which cannot set a parent-death signal or CPUs):
  // the child shares ddprun's memory until its exec, so no page table is copied for it
  // (8 no-op workers: 1.39x the floor instead of 1.57x; 32: 1.30x instead of 1.60x). Every
  // signal stays blocked in the child until its own mask is set, so no handler of ddprun's
  // runs on the shared memory.
  static thread_local std::vector<char> stack(kChildStackBytes);
  sigset_t all, before;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &before);
  const pid_t pid =
      ::clone(start_child, stack.data() + stack.size(), CLONE_VM | CLONE_VFORK | SIGCHLD, &start);
  const int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) {
    errno = clone_errno;
    throw_errno("clone");
  }
  // Also set it here, so the group exists before anyone signals it.
  ::setpgid(pid, pid);
  return pid;
}

void signal_group(pid_t pgid, int signal_number) noexcept {
  if (pgid > 0) ::kill(-pgid, signal_number);
}

void signal_process(pid_t pid, int signal_number) noexcept {
  if (pid > 0) ::kill(pid, signal_number);
}

Guardian::Guardian(std::string scratch_dir, std::function<void()> at_exit) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe2");
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  pid_ = ::fork();
  if (pid_ < 0) throw_errno("fork");
  if (pid_ == 0) {
    // Its own name (its command line stays ddprun's): a ddprun that ends a lost node's
    // earlier one on the host leaves its guardian to kill that one's workers
    // (stale_agents.h).
    ::prctl(PR_SET_NAME, kGuardianName, 0, 0, 0);
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
    bool ended_well = false;  // ddprun said it leaves, having cleaned up itself
    for (;;) {
      const ssize_t got = ::read(read_end.get(), &message, sizeof message);
      if (got < 0 && errno == EINTR) continue;
      if (got != static_cast<ssize_t>(sizeof message)) break;  // EOF: ddprun is gone
      if (message > 0) groups.insert(message);
      if (message < 0) groups.erase(-message);
      if (message == 0) ended_well = true;
    }
    for (pid_t group : groups) ::kill(-group, SIGKILL);
    if (ended_well) ::_exit(0);
    if (!scratch_dir.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir, ignored);
    }
    if (at_exit) at_exit();
    ::_exit(0);
  }
  channel_ = std::move(write_end);
}

Guardian::~Guardian() {
  // ddprun's own destructors removed its files before this one (ScratchDir, ControlServer:
  // job/main.cc declares the guardian first): the guardian only has to go, and is waited
  // for so that no process of the job outlives ddprun.
  constexpr std::int32_t kLeaving = 0;
  write_all(channel_.get(), {reinterpret_cast<const char*>(&kLeaving), sizeof kLeaving});
  channel_.reset();
  if (pid_ > 0) {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

void Guardian::watch(pid_t pgid) noexcept {
  if (pgid <= 0) return;  // 0 means "ddprun leaves" (the destructor's)
  const std::int32_t message = pgid;
  write_all(channel_.get(), {reinterpret_cast<const char*>(&message), sizeof message});
}

void Guardian::forget(pid_t pgid) noexcept {
  if (pgid <= 0) return;
  const std::int32_t message = -pgid;
  write_all(channel_.get(), {reinterpret_cast<const char*>(&message), sizeof message});
}

}  // namespace ddprun
