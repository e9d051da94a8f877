#include "nodes/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

#include "ddprun/common/files.h"
#include "ddprun/contract/env_names.h"

namespace ddprun {

namespace {

// A TCP listener on `address` (IPv4; empty: every interface), as a raw fd, or -errno.
int open_listener(int port, int backlog, const std::string& address = "") {
  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) throw std::system_error(errno, std::generic_category(), "socket");
  // Like the store's own listener: a port in TIME_WAIT counts as free.
  const int one = 1;
  ::setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (!address.empty() && ::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1)
    return -EINVAL;
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

bool port_is_free(int port) {
  return try_bind(port) > 0;
}

UniqueFd listen_on(int port, const std::string& address) {
  const int fd = open_listener(port, SOMAXCONN, address);  // every node may join at once
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
      std::string command = read_any_file_head((process.path() / "cmdline").string());
      // Arguments apart by spaces, and no control character (a newline inside an argument,
      // a script given with -c) may break the one-line message this goes into.
      std::replace_if(
          command.begin(), command.end(),
          [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }, ' ');
      while (!command.empty() && command.back() == ' ') command.pop_back();
      if (command.size() > 80) command = command.substr(0, 77) + "...";
      std::string text = "pid " + pid + " (" + command;
      const std::string environ = read_any_file_head((process.path() / "environ").string());
      const std::string key = std::string(env::kRunId) + "=";
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

namespace {

// A socket of `family` bound to `port` (0: any) as hold_port says, as a raw fd, or -errno.
int bind_hold_as(int family, int port) {
  UniqueFd sock(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return -errno;
  const int one = 1;
  const int zero = 0;
  if (::setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) return -errno;
  int bound = 0;
  if (family == AF_INET6) {
    // IPv6-only off: the one socket holds IPv4 too.
    if (::setsockopt(sock.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) != 0) return -errno;
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(static_cast<std::uint16_t>(port));
    bound = ::bind(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    bound = ::bind(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  }
  if (bound != 0) return -errno;
  return sock.release();
}

// IPv6 and IPv4 in one socket; IPv4 alone where IPv6 is off (no socket, no dual stack, no
// bind to ::).
int bind_hold(int port) {
  const int fd = bind_hold_as(AF_INET6, port);
  return fd >= 0 || fd == -EADDRINUSE ? fd : bind_hold_as(AF_INET, port);
}

// The port `fd` is bound to, or -errno.
int bound_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -errno;
  return addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port)
                                    : ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
}

}  // namespace

UniqueFd hold_port(int port) {
  const int fd = bind_hold(port);
  return UniqueFd(fd < 0 ? -1 : fd);
}

HeldPort hold_free_port() {
  const int fd = bind_hold(0);
  if (fd < 0) throw std::system_error(-fd, std::generic_category(), "bind to a free port");
  UniqueFd hold(fd);
  const int port = bound_port(hold.get());
  if (port <= 0) throw std::system_error(-port, std::generic_category(), "bind to a free port");
  return {port, std::move(hold)};
}

int pick_free_port() {
  const int port = try_bind(0);
  if (port <= 0) throw std::system_error(-port, std::generic_category(), "bind to a free port");
  return port;
}

}  // namespace ddprun
