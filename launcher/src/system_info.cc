#include "system_info.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <system_error>

#include "ddprun/errors.h"
#include "process.h"

extern char** environ;

namespace ddprun {

Environment read_environment() {
  Environment env;
  for (char** var = environ; var != nullptr && *var != nullptr; ++var) {
    const std::string_view entry(*var);
    const auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

HostFacts read_host_facts() {
  HostFacts facts;
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) == 0) facts.hostname = name;
  if (facts.hostname.empty()) facts.hostname = "localhost";
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (::sched_getaffinity(0, sizeof cpus, &cpus) == 0) {
    facts.cpu_count = CPU_COUNT(&cpus);
  } else {
    facts.cpu_count = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  }
  if (DIR* dev = ::opendir("/dev")) {
    while (const dirent* entry = ::readdir(dev)) {
      const std::string_view name_view(entry->d_name);
      if (name_view.size() > 6 && name_view.substr(0, 6) == "nvidia" &&
          name_view.find_first_not_of("0123456789", 6) == std::string_view::npos) {
        ++facts.gpu_device_files;
      }
    }
    ::closedir(dev);
  }
  return facts;
}

namespace {

// 0 when `path` is an executable regular file, else the errno-like reason.
int check_executable(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return errno;
  if (S_ISDIR(info.st_mode)) return EISDIR;
  if (::access(path.c_str(), X_OK) != 0) return errno;
  return 0;
}

}  // namespace

std::string resolve_program(const std::string& program, const Environment& env) {
  if (program.empty()) throw ProgramError("the program name is empty", kExitProgramNotFound);
  if (program.find('/') != std::string::npos) {
    const int problem = check_executable(program);
    if (problem == 0) return program;
    if (problem == ENOENT || problem == ENOTDIR) {
      throw ProgramError(program + ": no such file", kExitProgramNotFound,
                         "check the path, relative to " + std::string("the current directory"));
    }
    throw ProgramError(program + ": not executable (" + std::strerror(problem) + ")",
                       kExitProgramNotExecutable,
                       "chmod +x it, or launch it through its interpreter");
  }
  const std::string path = lookup(env, "PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  int first_problem = 0;
  std::size_t start = 0;
  for (;;) {
    const auto colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? colon : colon - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + program;
    const int problem = check_executable(candidate);
    if (problem == 0) return candidate;
    if (problem != ENOENT && problem != ENOTDIR && first_problem == 0) first_problem = problem;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (first_problem != 0) {
    throw ProgramError(program + ": found in PATH but not executable", kExitProgramNotExecutable);
  }
  throw ProgramError(program + ": command not found in PATH", kExitProgramNotFound,
                     "give its path, e.g. ./" + program);
}

std::string random_run_id() {
  std::random_device device;
  std::uniform_int_distribution<unsigned> digit(0, 15);
  std::string id;
  for (int i = 0; i < 12; ++i) id += "0123456789abcdef"[digit(device)];
  return id;
}

namespace {

// A TCP listener on all IPv4 interfaces, as a raw fd, or -errno.
int open_listener(int port, int backlog) {
  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) throw std::system_error(errno, std::generic_category(), "socket");
  // Like the store's own listener: a port in TIME_WAIT counts as free.
  const int one = 1;
  ::setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) return -errno;
  // Listening makes a free-port check strict: a second listener would fail here too.
  if (::listen(sock.get(), backlog) != 0) return -errno;
  return sock.release();
}

// Binds and listens on `port` (0: any); returns the bound port or -errno.
int try_bind(int port) {
  const int fd = open_listener(port, 1);
  if (fd < 0) return fd;
  const UniqueFd sock(fd);
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -errno;
  return ntohs(addr.sin_port);
}

}  // namespace

std::string address_text(const sockaddr* address) {
  if (address == nullptr) return {};
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = nullptr;
  if (address->sa_family == AF_INET) {
    raw = &reinterpret_cast<const sockaddr_in*>(address)->sin_addr;
  } else if (address->sa_family == AF_INET6) {
    raw = &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
  } else {
    return {};
  }
  return ::inet_ntop(address->sa_family, raw, text, sizeof text) != nullptr ? text : "";
}

std::vector<std::string> resolve_addresses(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::vector<std::string> addresses;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return addresses;
  for (const addrinfo* entry = found; entry != nullptr; entry = entry->ai_next) {
    std::string text = address_text(entry->ai_addr);
    if (!text.empty()) addresses.push_back(std::move(text));
  }
  ::freeaddrinfo(found);
  return addresses;
}

bool port_is_free(int port) {
  return try_bind(port) > 0;
}

bool can_connect(const std::string& host, int port, int timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0) return false;
  bool connected = false;
  for (const addrinfo* entry = found; entry != nullptr && !connected; entry = entry->ai_next) {
    const UniqueFd sock(
        ::socket(entry->ai_family, entry->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!sock.valid()) continue;
    if (::connect(sock.get(), entry->ai_addr, entry->ai_addrlen) == 0) {
      connected = true;
      break;
    }
    if (errno != EINPROGRESS) continue;
    pollfd wait{sock.get(), POLLOUT, 0};
    int error = 0;
    socklen_t len = sizeof error;
    connected = ::poll(&wait, 1, timeout_ms) == 1 &&
                ::getsockopt(sock.get(), SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0;
  }
  ::freeaddrinfo(found);
  return connected;
}

UniqueFd listen_on(int port) {
  const int fd = open_listener(port, 128);
  return UniqueFd(fd < 0 ? -1 : fd);
}

namespace {

// Socket inodes listening on `port`, from /proc/net/tcp and tcp6.
std::vector<std::string> listening_inodes(int port) {
  std::vector<std::string> inodes;
  char wanted[8];
  std::snprintf(wanted, sizeof wanted, "%04X", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      const auto colon = local.rfind(':');
      if (state == "0A" && colon != std::string::npos && local.substr(colon + 1) == wanted) {
        inodes.push_back(inode);
      }
    }
  }
  return inodes;
}

std::string read_proc_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string text(64 * 1024, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

}  // namespace

std::string describe_port_user(int port) {
  const auto inodes = listening_inodes(port);
  if (inodes.empty()) return {};
  std::error_code error;
  for (const auto& process : std::filesystem::directory_iterator("/proc", error)) {
    const std::string pid = process.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code fd_error;
    for (const auto& fd : std::filesystem::directory_iterator(process.path() / "fd", fd_error)) {
      std::error_code link_error;
      const std::string target = std::filesystem::read_symlink(fd.path(), link_error).string();
      const bool match = std::any_of(inodes.begin(), inodes.end(), [&](const std::string& inode) {
        return target == "socket:[" + inode + "]";
      });
      if (!match) continue;
      std::string command = read_proc_file(process.path() / "cmdline");
      std::replace(command.begin(), command.end(), '\0', ' ');
      while (!command.empty() && command.back() == ' ') command.pop_back();
      if (command.size() > 80) command = command.substr(0, 77) + "...";
      std::string text = "pid " + pid + " (" + command;
      const std::string environ = read_proc_file(process.path() / "environ");
      const std::string key = std::string("TORCHELASTIC_RUN_ID") + "=";
      const auto at = environ.find(key);
      if (at != std::string::npos && (at == 0 || environ[at - 1] == '\0')) {
        const auto end = environ.find('\0', at);
        text += ", run " + environ.substr(at + key.size(), end - at - key.size());
      }
      return text + ")";
    }
  }
  return {};
}

int pick_free_port() {
  const int port = try_bind(0);
  if (port <= 0) throw std::system_error(-port, std::generic_category(), "bind to a free port");
  return port;
}

}  // namespace ddprun
