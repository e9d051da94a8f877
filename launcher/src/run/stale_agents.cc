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
#include <sstream>
#include <system_error>

#include "ddprun/common/files.h"
#include "ddprun/common/unique_fd.h"

namespace ddprun {

namespace {

struct ProcessSeen {
  pid_t pid = 0;
  pid_t parent = 0;
};

// The arguments of process `pid` (its /proc cmdline, split at its NULs).
std::vector<std::string> arguments(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  std::string::size_type start = 0;
  while (start < all.size()) {
    const auto end = all.find('\0', start);
    args.push_back(all.substr(start, end == std::string::npos ? end : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return args;
}

bool has_pair(const std::vector<std::string>& args, const std::string& option,
              const std::string& value) {
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == option && args[i + 1] == value) return true;
  }
  return false;
}

// Whether `args` are a ddprun agent's of `run_id` for node `node`, up to the "--" that begins
// the program's own.
bool an_agent_of(std::vector<std::string> args, const std::string& run_id, int node) {
  if (args.empty() || std::filesystem::path(args.front()).filename() != "ddprun") return false;
  args.erase(std::find(args.begin(), args.end(), "--"), args.end());
  return std::find(args.begin(), args.end(), "--agent") != args.end() &&
         has_pair(args, "--run-id", run_id) && has_pair(args, "--node-rank", std::to_string(node));
}

// The parent's pid, from /proc/PID/stat ("pid (comm) state ppid ..."; comm may hold spaces).
pid_t parent_of(const std::string& pid) {
  const std::string stat = read_any_file_head("/proc/" + pid + "/stat", 512);
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 1));
  std::string state;
  long parent = 0;
  rest >> state >> parent;
  return static_cast<pid_t>(parent);
}

// Every agent of the run's node here, this user's, guardians included.
std::vector<ProcessSeen> agents_seen(const std::string& run_id, int node) {
  std::vector<ProcessSeen> seen;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const std::string pid = entry.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat info {};
    if (::stat(entry.path().c_str(), &info) != 0 || info.st_uid != ::getuid()) continue;
    if (std::stoi(pid) == ::getpid() || !an_agent_of(arguments(pid), run_id, node)) continue;
    seen.push_back({static_cast<pid_t>(std::stoi(pid)), parent_of(pid)});
  }
  return seen;
}

}  // namespace

std::vector<pid_t> stale_agents(const std::string& run_id, int node_rank) {
  const std::vector<ProcessSeen> seen = agents_seen(run_id, node_rank);
  std::vector<pid_t> agents;
  for (const ProcessSeen& each : seen) {
    const bool guardian = std::any_of(seen.begin(), seen.end(), [&](const ProcessSeen& other) {
      return other.pid == each.parent;
    });
    if (!guardian) agents.push_back(each.pid);
  }
  return agents;
}

void end_stale_agents(const std::vector<pid_t>& agents, std::chrono::milliseconds wait) {
  // Each agent and its children (its guardian, its workers, its ssh clients), watched
  // before the kill: a pid is not reused while its descriptor is open.
  std::vector<pid_t> ending = agents;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const std::string pid = entry.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (std::find(agents.begin(), agents.end(), parent_of(pid)) != agents.end())
      ending.push_back(static_cast<pid_t>(std::stoi(pid)));
  }
  std::vector<UniqueFd> watched;
  for (const pid_t pid : ending) {
    watched.emplace_back(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  }
  for (const pid_t pid : agents) ::kill(pid, SIGKILL);
  const auto until = std::chrono::steady_clock::now() + wait;
  for (const UniqueFd& fd : watched) {
    if (!fd.valid()) continue;  // gone already, or no pidfd here: nothing to wait on
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    pollfd ended{fd.get(), POLLIN, 0};
    if (left.count() <= 0 || ::poll(&ended, 1, static_cast<int>(left.count())) == 0) return;
  }
}

}  // namespace ddprun
