#include "ddprun/worker/membership.h"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "ddprun/worker/errors.h"

namespace ddprun::worker {

std::optional<Membership> read_membership(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  auto membership = parse_membership(text.str());
  if (!membership) {
    throw EnvError(path + " is not a membership file",
                   "DDPRUN_MEMBERSHIP_FILE is ddprun's (--restart-scope rank): do not set it "
                   "by hand");
  }
  return membership;
}

namespace {

std::string folder_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// An inotify descriptor that reports names moved into or made in one folder.
class FolderWatch {
 public:
  explicit FolderWatch(const std::string& folder) : fd_(inotify_init1(IN_CLOEXEC | IN_NONBLOCK)) {
    if (fd_ >= 0 && inotify_add_watch(fd_, folder.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE) < 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~FolderWatch() {
    if (fd_ >= 0) ::close(fd_);
  }
  FolderWatch(const FolderWatch&) = delete;
  FolderWatch& operator=(const FolderWatch&) = delete;

  // Returns when something changed in the folder or `wait` passed. Without a watch (inotify
  // refused), it only waits.
  void wait_for_change(std::chrono::milliseconds wait) const {
    pollfd p{fd_, POLLIN, 0};
    const int timeout = static_cast<int>(wait.count());
    if (fd_ < 0) {
      ::poll(nullptr, 0, timeout);
      return;
    }
    if (::poll(&p, 1, timeout) > 0) {
      char events[4096];
      while (::read(fd_, events, sizeof events) > 0) {
      }
    }
  }

 private:
  int fd_;
};

}  // namespace

Membership wait_for_membership(const std::string& path,
                               const std::function<bool(const Membership&)>& ready,
                               std::chrono::milliseconds timeout,
                               const std::function<void()>& give_up,
                               std::chrono::milliseconds slice) {
  // Watching first, reading second: a version renamed in between wakes the wait.
  const FolderWatch watch(folder_of(path));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto membership = read_membership(path); membership && ready(*membership)) {
      return *membership;
    }
    if (give_up) give_up();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      throw EnvError(path + ": no membership to go on with after " +
                         std::to_string(timeout.count() / 1000) + " s",
                     "is ddprun still running this round? its log says what it did");
    }
    watch.wait_for_change(std::min(left, slice));
  }
}

std::optional<int> group_generation(const Membership& membership, int rank, pid_t self) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= membership.ranks.size()) return std::nullopt;
  const Membership::Member& member = membership.ranks[static_cast<std::size_t>(rank)];
  if (member.pid != self) return std::nullopt;
  if (member.state == Membership::State::kRunning) return 0;
  if (member.state != Membership::State::kReplaced || !replacements_running(membership, 0)) {
    return std::nullopt;
  }
  return membership.recoveries;
}

bool replacements_running(const Membership& membership, int generation) {
  if (membership.recoveries <= generation) return false;
  for (const Membership::Member& member : membership.ranks) {
    if (member.state == Membership::State::kLost) return false;
  }
  return true;
}

}  // namespace ddprun::worker
