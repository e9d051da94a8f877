// Serving the control socket's connections (control_socket.h, ControlServer::accept): each
// request line read as it comes, none waited for.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "run/control_socket.h"

namespace ddprun {

bool ControlServer::watch(int fd) {
  epoll_event interest{};
  interest.events = EPOLLIN;
  interest.data.fd = fd;
  return ::epoll_ctl(ready_.get(), EPOLL_CTL_ADD, fd, &interest) == 0;
}

void ControlServer::take_new_connections() {
  for (;;) {
    UniqueFd connection(::accept4(listening_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!connection.valid()) return;  // none left (EAGAIN), or it failed: the next call retries
    // Answers are sent blocking, within a second each (send_text); requests are read with
    // MSG_DONTWAIT.
    const timeval second{1, 0};
    ::setsockopt(connection.get(), SOL_SOCKET, SO_SNDTIMEO, &second, sizeof second);
    ucred peer{};
    socklen_t size = sizeof peer;
    std::optional<uid_t> uid;
    if (::getsockopt(connection.get(), SOL_SOCKET, SO_PEERCRED, &peer, &size) == 0) uid = peer.uid;
    // Closing the oldest also takes it off epoll (no other descriptor shares it).
    if (pending_.size() >= kMaxPending) pending_.erase(pending_.begin());
    if (!watch(connection.get())) continue;
    pending_.push_back(
        {std::move(connection), uid, {}, std::chrono::steady_clock::now() + request_within_});
  }
}

bool ControlServer::read_some(Pending& pending) {
  constexpr std::size_t kLimit = 64;
  char buffer[kLimit];
  for (;;) {
    const ssize_t got =
        ::recv(pending.connection.get(), buffer, kLimit - pending.line.size(), MSG_DONTWAIT);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno != EAGAIN && errno != EWOULDBLOCK;  // broken: done with it
    if (got == 0) return true;                                    // closed: what came is all
    pending.line.append(buffer, static_cast<std::size_t>(got));
    const auto end = pending.line.find('\n');
    if (end != std::string::npos) {
      pending.line.resize(end);
      return true;
    }
    if (pending.line.size() >= kLimit) return true;
  }
}

std::optional<ControlRequest> ControlServer::finish(Pending pending) {
  const int connection = pending.connection.get();
  if (pending.uid != ::geteuid()) {
    // Answered once its request is read: closing with the request unread would reset the
    // connection, and the peer would not see why.
    send_text(connection, "error: refused: this job belongs to user id " +
                              std::to_string(::geteuid()) + ", not to " +
                              (pending.uid ? "user id " + std::to_string(*pending.uid)
                                           : std::string("a peer of unknown user id")) +
                              "\n");
    return std::nullopt;
  }
  const auto verb = parse_control_verb(pending.line);
  if (!verb) {
    send_text(connection,
              "error: unknown request '" + pending.line + "' (status, stacks, stop or attach)\n");
    return std::nullopt;
  }
  return ControlRequest{std::move(pending.connection), *verb};
}

std::optional<ControlServer::Pending> ControlServer::take_whole() {
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (!read_some(*it)) continue;
    Pending done = std::move(*it);
    pending_.erase(it);
    ::epoll_ctl(ready_.get(), EPOLL_CTL_DEL, done.connection.get(), nullptr);
    return done;  // the others not read yet stay readable: the caller's loop comes back
  }
  return std::nullopt;
}

std::optional<ControlRequest> ControlServer::accept() {
  if (!listening_.valid()) return std::nullopt;
  // What was sent while ddprun served another request is read before any is let go.
  if (auto done = take_whole()) return finish(std::move(*done));
  // Let go of those that sent no whole line in time (closing also takes them off epoll).
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(pending_, [&](const Pending& pending) { return pending.deadline <= now; });
  take_new_connections();
  if (auto done = take_whole()) return finish(std::move(*done));
  return std::nullopt;
}

}  // namespace ddprun
