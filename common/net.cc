#include "ddprun/common/net.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ddprun/common/unique_fd.h"

namespace ddprun {

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

UniqueFd connect_tcp(const std::string& host, int port, int timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0) return UniqueFd();
  UniqueFd connected;
  for (const addrinfo* entry = found; entry != nullptr && !connected.valid();
       entry = entry->ai_next) {
    UniqueFd sock(::socket(entry->ai_family, entry->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!sock.valid()) continue;
    if (::connect(sock.get(), entry->ai_addr, entry->ai_addrlen) == 0) {
      connected = std::move(sock);
      break;
    }
    if (errno != EINPROGRESS) continue;
    pollfd wait{sock.get(), POLLOUT, 0};
    int error = 0;
    socklen_t len = sizeof error;
    int ready = 0;
    do {
      ready = ::poll(&wait, 1, timeout_ms);
    } while (ready < 0 && errno == EINTR);
    if (ready == 1 && ::getsockopt(sock.get(), SOL_SOCKET, SO_ERROR, &error, &len) == 0 &&
        error == 0) {
      connected = std::move(sock);
    }
  }
  ::freeaddrinfo(found);
  return connected;
}

bool keep_alive(int fd) {
  const int on = 1, idle_s = 2, interval_s = 2, probes = kPeerDeadAfterSeconds / interval_s - 1;
  const unsigned user_timeout_ms = kPeerDeadAfterSeconds * 1000;
  return ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) == 0 &&
         ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s) == 0 &&
         ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s) == 0 &&
         ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes) == 0 &&
         // Also for data sent and never acknowledged, and the bound on the probes above.
         ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms,
                      sizeof user_timeout_ms) == 0;
}

bool can_connect(const std::string& host, int port, int timeout_ms) {
  return connect_tcp(host, port, timeout_ms).valid();
}

ssize_t recv_to_line_end(int fd, char* buffer, std::size_t size) {
  const ssize_t got = ::recv(fd, buffer, size, MSG_PEEK | MSG_DONTWAIT);
  if (got <= 0) return got;
  const auto* end =
      static_cast<const char*>(std::memchr(buffer, '\n', static_cast<std::size_t>(got)));
  return ::recv(
      fd, buffer,
      end != nullptr ? static_cast<std::size_t>(end - buffer + 1) : static_cast<std::size_t>(got),
      MSG_DONTWAIT);
}

bool LineOutbox::send(int fd, std::string_view lines) {
  unsent_.append(lines);
  return flush(fd, std::chrono::milliseconds(0));
}

bool LineOutbox::send_waiting(int fd, std::string_view lines,
                              std::chrono::milliseconds stall_limit) {
  unsent_.append(lines);
  return flush(fd, std::max(stall_limit, std::chrono::milliseconds(1)));
}

bool LineOutbox::beat(int fd) {
  if (unsent_.empty()) unsent_.push_back('\n');
  return flush(fd, std::chrono::milliseconds(0));
}

bool LineOutbox::flush(int fd, std::chrono::milliseconds stall_limit) {
  std::size_t sent = 0;
  while (!failed_ && sent < unsent_.size()) {
    const ssize_t n =
        ::send(fd, unsent_.data() + sent, unsent_.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (stall_limit.count() == 0) break;
      // The bound restarts with every byte taken: a slow reader is waited for, one that
      // takes nothing for the whole limit (stopped, hung) is not.
      pollfd ready{fd, POLLOUT, 0};
      int woke = 0;
      do {
        woke = ::poll(&ready, 1, static_cast<int>(stall_limit.count()));
      } while (woke < 0 && errno == EINTR);
      if (woke == 0) failed_ = true;
    } else {
      failed_ = true;
    }
  }
  unsent_.erase(0, sent);
  if (failed_) unsent_.clear();  // nobody will read it
  return !failed_;
}

std::string Heartbeat::silence() const {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", std::chrono::duration<double>(silent_after).count());
  return text;
}

}  // namespace ddprun
