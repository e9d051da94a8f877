#include "run/stale_agents.h"

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "ddprun/common/files.h"
#include "ddprun/common/unique_fd.h"
#include "ddprun/contract/env_names.h"
#include "run/process.h"

namespace ddprun {

namespace {

// A /proc file's NUL-separated fields (cmdline, environ).
std::vector<std::string> fields(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> parts;
  std::string::size_type start = 0;
  while (start < all.size()) {
    const auto end = all.find('\0', start);
    parts.push_back(all.substr(start, end == std::string::npos ? end : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return parts;
}

bool has_pair(const std::vector<std::string>& args, const std::string& option,
              const std::string& value) {
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == option && args[i + 1] == value) return true;
  }
  return false;
}

// Whether `args` are a ddprun agent's of `who`, up to the "--" that begins the program's own.
bool an_agent_of(std::vector<std::string> args, const AgentIdentity& who) {
  if (args.empty() || std::filesystem::path(args.front()).filename() != "ddprun") return false;
  args.erase(std::find(args.begin(), args.end(), "--"), args.end());
  return std::find(args.begin(), args.end(), "--agent") != args.end() &&
         has_pair(args, "--run-id", who.run_id) &&
         has_pair(args, "--node-rank", std::to_string(who.node_rank)) &&
         has_pair(args, "--master-addr", who.master_addr) &&
         has_pair(args, "--master-port", std::to_string(who.master_port));
}

// Whether `environ` is a worker's of `who`.
bool a_worker_of(const std::vector<std::string>& environ, const AgentIdentity& who) {
  const auto has = [&](const char* name, const std::string& value) {
    return std::find(environ.begin(), environ.end(), std::string(name) + "=" + value) !=
           environ.end();
  };
  return has(env::kRunId, who.run_id) && has(env::kGroupRank, std::to_string(who.node_rank)) &&
         has(env::kMasterAddr, who.master_addr) &&
         has(env::kMasterPort, std::to_string(who.master_port));
}

UniqueFd open_pidfd(pid_t pid) {
  return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
}

// SIGKILL through the descriptor: never to a process that took the pid since.
void kill_through(const UniqueFd& pidfd) {
  if (pidfd.valid()) ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
}

// Waits until every one of `pidfds` has ended, or `until`. Returns whether all did.
bool wait_ended(const std::vector<UniqueFd>& pidfds, std::chrono::steady_clock::time_point until) {
  for (const UniqueFd& fd : pidfds) {
    if (!fd.valid()) continue;  // gone before it could be watched
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      pollfd ended{fd.get(), POLLIN, 0};
      const int ready = ::poll(&ended, 1, static_cast<int>(std::max<long long>(0, left.count())));
      if (ready > 0) break;
      if (ready == 0) return false;
      if (errno != EINTR) return false;
    }
  }
  return true;
}

}  // namespace

StaleProcesses stale_processes(const AgentIdentity& who) {
  StaleProcesses stale;
  std::error_code error;
  std::filesystem::directory_iterator entry("/proc", error);
  for (; !error && entry != std::filesystem::directory_iterator(); entry.increment(error)) {
    const std::string name = entry->path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(name));
    struct stat info {};
    if (pid == ::getpid() || ::stat(entry->path().c_str(), &info) != 0 ||
        info.st_uid != ::getuid()) {
      continue;
    }
    if (an_agent_of(fields(entry->path() / "cmdline"), who)) {
      std::string comm = read_any_file_head(entry->path() / "comm", 64);
      while (!comm.empty() && comm.back() == '\n') comm.pop_back();
      (comm == kGuardianName ? stale.guardians : stale.agents).push_back(pid);
    } else if (a_worker_of(fields(entry->path() / "environ"), who)) {
      stale.workers.push_back(pid);
    }
  }
  return stale;
}

bool end_stale(const StaleProcesses& stale, std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  // Watched before any kill, so that every signal and wait is of these processes.
  std::vector<UniqueFd> first;  // the agents and their guardians
  std::vector<UniqueFd> workers;
  for (const pid_t pid : stale.agents) first.push_back(open_pidfd(pid));
  for (const pid_t pid : stale.guardians) first.push_back(open_pidfd(pid));
  for (const pid_t pid : stale.workers) workers.push_back(open_pidfd(pid));
  for (std::size_t i = 0; i < stale.agents.size(); ++i) kill_through(first[i]);
  const bool agents_ended = wait_ended(first, until);
  for (const UniqueFd& worker : workers) kill_through(worker);  // what the guardians left
  return wait_ended(workers, until) && agents_ended;
}

}  // namespace ddprun
