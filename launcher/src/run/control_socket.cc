#include "run/control_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "ddprun/contract/errors.h"
#include "run/scratch_dir.h"

namespace ddprun {
namespace {

constexpr int kClientTimeoutMs = 30000;

// A Unix socket address for `folder`/`name`. A path too long for sun_path goes through the
// folder's descriptor (`folder_fd`, opened by the caller) as /proc/self/fd/N/name.
bool socket_address(const std::string& folder, const std::string& name, int folder_fd,
                    sockaddr_un& address) {
  address = {};
  address.sun_family = AF_UNIX;
  std::string path = folder + "/" + name;
  if (path.size() >= sizeof address.sun_path) {
    path = "/proc/self/fd/" + std::to_string(folder_fd) + "/" + name;
    if (folder_fd < 0 || path.size() >= sizeof address.sun_path) return false;
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return true;
}

void set_timeouts(int fd, int ms) {
  timeval limit{ms / 1000, (ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
}

// Connects to `folder`/`name`; errno is kept on failure.
UniqueFd connect_to(const std::string& folder, const std::string& name) {
  UniqueFd folder_fd(::open(folder.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  const int folder_error = errno;
  sockaddr_un address;
  if (!socket_address(folder, name, folder_fd.get(), address)) {
    // No folder: no socket in it (ENOENT), whatever the path's length.
    errno = folder_fd.valid() ? ENAMETOOLONG : folder_error;
    return UniqueFd();
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return fd;
  int result;
  do {
    result = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address);
  } while (result < 0 && errno == EINTR);
  if (result < 0) return UniqueFd();
  return fd;
}

std::string read_line(int fd, std::size_t limit) {
  std::string line;
  char c = 0;
  while (line.size() < limit) {
    const ssize_t got = ::read(fd, &c, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0 || c == '\n') break;
    line += c;
  }
  return line;
}

bool copy_from(int file, std::ostream& out) {
  char buffer[65536];
  bool any = false;
  for (;;) {
    const ssize_t got = ::read(file, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    out.write(buffer, got);
    any = true;
  }
  out.flush();
  return any;
}

// --attach: the console file from its start, then as it grows, until the job's ddprun
// sends "exit N" (or goes away) on `connection`.
int follow_console(int connection, const std::string& file, std::ostream& out, std::ostream& err) {
  UniqueFd console(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!console.valid()) {
    err << "ddprun: cannot read " << file << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  UniqueFd watch(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (watch.valid()) ::inotify_add_watch(watch.get(), file.c_str(), IN_MODIFY);
  std::string said;
  for (;;) {
    copy_from(console.get(), out);
    pollfd fds[2] = {{connection, POLLIN, 0}, {watch.get(), POLLIN, 0}};
    // Without inotify, the file is read again every second.
    if (::poll(fds, 2, watch.valid() ? -1 : 1000) < 0 && errno != EINTR) break;
    if (fds[1].revents != 0) {
      char events[4096];
      while (::read(watch.get(), events, sizeof events) > 0) {
      }
    }
    if (fds[0].revents != 0) {
      char buffer[256];
      const ssize_t got = ::read(connection, buffer, sizeof buffer);
      if (got > 0) {
        said.append(buffer, static_cast<std::size_t>(got));
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      break;  // the job's ddprun closed the connection
    }
  }
  copy_from(console.get(), out);
  if (said.rfind("exit ", 0) == 0) return std::atoi(said.c_str() + 5);
  err << "ddprun: the job's ddprun went away without an exit code\n";
  return 1;
}

// The one "RUNID.nodeN.sock" in `folder`; nullopt when there is none, or several.
std::optional<std::string> node_socket_in(const std::string& folder, const std::string& run_id) {
  const std::string zero = control_socket_name(run_id, 0);
  const std::string prefix = zero.substr(0, zero.size() - 5) + ".node";
  std::optional<std::string> found;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ignored)) {
    const std::string file = entry.path().filename().string();
    if (file.rfind(prefix, 0) != 0 || !file.ends_with(".sock")) continue;
    if (found) return std::nullopt;
    found = file;
  }
  return found;
}

// The live job sockets in `folder` (node 0's and nodes' own), sorted; a socket left by a job
// that ended refuses the connection and is not listed.
std::vector<std::string> live_sockets_in(const std::string& folder) {
  std::vector<std::string> live;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ignored)) {
    const std::string file = entry.path().filename().string();
    if (!file.ends_with(".sock") || !entry.is_socket(ignored)) continue;
    if (connect_to(folder, file).valid()) live.push_back(file);
  }
  std::sort(live.begin(), live.end());
  return live;
}

// Where a run's socket is: `folder`/`name`, found by its run id (node 0's, or this node's
// own), or without one the latest run, else the only live one.
struct Found {
  std::string folder;
  std::string name;
  std::vector<std::string> several;  // without a run id, more than one live and no latest
};
std::optional<Found> find_socket(const std::vector<std::string>& folders,
                                 const std::string& run_id) {
  for (const std::string& folder : folders) {
    if (run_id.empty()) {
      // Without a run id only this shell's own folder: a run found elsewhere could be any
      // of the user's jobs, so it is named, not guessed.
      if (folder != folders.front()) break;
      if (connect_to(folder, std::string(kLatestLink)).valid()) {
        return Found{folder, std::string(kLatestLink), {}};
      }
      // The latest run ended while an older one goes on: the only live one, or a choice.
      auto live = live_sockets_in(folder);
      if (live.size() == 1) return Found{folder, live.front(), {}};
      if (live.size() > 1) return Found{folder, "", std::move(live)};
      continue;
    }
    std::string name = control_socket_name(run_id, 0);
    if (::access((folder + "/" + name).c_str(), F_OK) != 0) {
      // Not node 0: a node started on its own (by hand, srun) serves RUNID.nodeN.sock.
      name = node_socket_in(folder, run_id).value_or("");
    }
    if (!name.empty()) return Found{folder, name, {}};
  }
  return std::nullopt;
}

}  // namespace

// The control folder's own way out when it is not private.
constexpr const char* kElsewhere = "set XDG_RUNTIME_DIR to a folder of your own";

ControlServer::ControlServer(const std::string& folder, const std::string& name, bool latest,
                             std::chrono::milliseconds request_within)
    : folder_(folder), name_(name), path_(folder + "/" + name), request_within_(request_within) {
  make_private_folder(folder, kElsewhere);
  UniqueFd folder_fd(::open(folder.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  sockaddr_un address;
  if (!socket_address(folder, name, folder_fd.get(), address)) {
    problem_ = "the control socket's path is too long: " + path_;
    return;
  }
  if (connect_to(folder, name).valid()) {
    problem_ = "another ddprun of run id " + name + " serves " + path_ + " on this host";
    return;
  }
  ::unlink(path_.c_str());  // a socket left by a ddprun that was killed
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  const auto bind_here = [&] {
    return ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  };
  bool bound = fd.valid() && bind_here();
  if (fd.valid() && !bound && errno == ENOENT) {
    // Another run's ddprun removed the folder as it ended, between our mkdir and bind.
    make_private_folder(folder, kElsewhere);
    folder_fd = UniqueFd(::open(folder.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    bound = socket_address(folder, name, folder_fd.get(), address) && bind_here();
  }
  if (!bound || ::listen(fd.get(), 16) != 0) {
    problem_ = "cannot listen on " + path_ + ": " + std::strerror(errno);
    return;
  }
  ::chmod(path_.c_str(), 0600);
  listening_ = std::move(fd);
  ready_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!ready_.valid() || !watch(listening_.get())) {
    problem_ = std::string("cannot watch the control socket: ") + std::strerror(errno);
    listening_.reset();
    ready_.reset();
    return;
  }
  if (latest) {
    const std::string temporary = folder + "/.latest-" + std::to_string(::getpid());
    ::unlink(temporary.c_str());
    if (::symlink(name.c_str(), temporary.c_str()) == 0) {
      const std::string link = folder + "/" + std::string(kLatestLink);
      if (::rename(temporary.c_str(), link.c_str()) == 0) {
        latest_ = true;
      } else {
        ::unlink(temporary.c_str());
      }
    }
  }
}

ControlServer::~ControlServer() {
  remove_files();
}

void ControlServer::remove_files() const noexcept {
  if (!listening_.valid()) return;
  ::unlink(path_.c_str());
  if (latest_) {
    const std::string link = folder_ + "/" + std::string(kLatestLink);
    char target[256];
    const ssize_t size = ::readlink(link.c_str(), target, sizeof target);
    if (size > 0 && std::string_view(target, static_cast<std::size_t>(size)) == name_) {
      ::unlink(link.c_str());
    }
  }
  ::rmdir(folder_.c_str());  // fails while another run's socket (or a console file) is in it
}

bool send_text(int connection, std::string_view text) {
  while (!text.empty()) {
    const ssize_t sent = ::send(connection, text.data(), text.size(), MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    text.remove_prefix(static_cast<std::size_t>(sent));
  }
  return true;
}

int run_control_client(ControlVerb verb, const std::string& run_id, const Environment& env,
                       std::ostream& out, std::ostream& err) {
  // The folder this shell would use first, then (for a named run) the ones a shell with
  // another XDG_RUNTIME_DIR would: a job is found from any shell of its user on its node.
  const auto folders = control_folders_to_search(env, ::geteuid());
  const auto found = find_socket(folders, run_id);
  if (found && !found->several.empty()) {
    err << "ddprun: error: " << found->several.size() << " runs of yours on this host (in "
        << found->folder << "):";
    for (const auto& name : found->several) err << " " << name.substr(0, name.size() - 5);
    err << "; name one: ddprun --" << control_verb_name(verb) << " RUN_ID\n";
    return 1;
  }
  const std::string folder = found ? found->folder : folders.front();
  const std::string name =
      found ? found->name
            : (run_id.empty() ? std::string(kLatestLink) : control_socket_name(run_id, 0));
  UniqueFd connection = connect_to(folder, name);
  if (!connection.valid()) {
    const int error = errno;
    err << "ddprun: error: ";
    if (error == ENOENT && run_id.empty()) {
      err << "no running job of yours on this host (no " << folder << "/" << kLatestLink << ")";
    } else if (error == ENOENT) {
      err << "no run " << run_id << " of yours on this host (no " << folder << "/" << name << ")";
    } else if (error == ENAMETOOLONG) {
      // Longer than any path (PATH_MAX), or than a socket's through its folder: no job
      // could have listened there.
      err << "no " << (run_id.empty() ? "running job" : "run " + run_id)
          << " of yours on this host: its socket's path would be "
          << folder.size() + 1 + name.size() << " bytes, longer than a job can listen on ("
          << PATH_MAX - 1 << " bytes for a path, " << sizeof(sockaddr_un::sun_path) - 1
          << " for a socket's path within its folder)";
    } else if (error == ECONNREFUSED) {
      err << "run " << (run_id.empty() ? "latest" : run_id) << " has ended (" << folder << "/"
          << name << " is left from it)";
    } else {
      err << "cannot reach " << folder << "/" << name << ": " << std::strerror(error);
    }
    err << " (ask on the job's first node, as the user who started it)\n";
    return 1;
  }
  // A refused request still has its answer to read.
  const bool sent = send_text(connection.get(), std::string(control_verb_name(verb)) + "\n");
  if (verb == ControlVerb::kAttach) {
    const std::string first = read_line(connection.get(), 4096);
    if (first.rfind("console ", 0) != 0) {
      err << "ddprun: " << (first.empty() ? "error: no answer from the job's ddprun" : first)
          << "\n";
      return 1;
    }
    return follow_console(connection.get(), first.substr(8), out, err);
  }
  // ddprun answers from its event loop; between rounds (a rendezvous) it does not.
  set_timeouts(connection.get(), kClientTimeoutMs);
  std::string answer;
  char buffer[65536];
  bool timed_out = false;
  for (;;) {
    const ssize_t got = ::read(connection.get(), buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    timed_out = got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    if (got <= 0) break;
    answer.append(buffer, static_cast<std::size_t>(got));
  }
  if (answer.empty() && !sent) {
    err << "ddprun: error: the job's ddprun closed the connection\n";
    return 1;
  }
  if (answer.empty()) {
    err << "ddprun: error: no answer from the job's ddprun"
        << (timed_out ? " within " + std::to_string(kClientTimeoutMs / 1000) +
                            " s (between two rounds it answers only once the next one starts)"
                      : std::string())
        << "\n";
    return 1;
  }
  if (answer.rfind("error: ", 0) == 0) {
    err << "ddprun: " << answer;
    return 1;
  }
  out << answer;
  out.flush();
  return 0;
}

}  // namespace ddprun
