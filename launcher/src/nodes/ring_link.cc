#include "nodes/ring_link.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "ddprun/common/net.h"
#include "ddprun/common/unique_fd.h"

namespace ddprun {
namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<std::int64_t>(0, left));
}

}  // namespace

LinkMeasurement measure_ring_link(int listener, const std::string& next_host, int next_port,
                                  std::int64_t bytes, std::chrono::milliseconds timeout) {
  LinkMeasurement result;
  const auto deadline = Clock::now() + timeout;
  const std::string next = next_host + ":" + std::to_string(next_port);
  UniqueFd out;
  while (!out.valid()) {
    out = connect_tcp(next_host, next_port, std::min(200, remaining_ms(deadline)));
    if (out.valid()) break;
    if (remaining_ms(deadline) == 0) {
      result.error = "no connection to " + next;
      return result;
    }
    ::poll(nullptr, 0, 20);  // the next node is not listening yet: try again shortly
  }

  UniqueFd in;
  std::vector<char> chunk(1 << 20, 'x');
  std::array<char, 1 << 16> sink{};
  std::int64_t sent = 0, received = 0;
  bool acknowledged = false, ack_sent = false;
  Clock::time_point first_byte{};
  while (!(acknowledged && ack_sent)) {
    std::vector<pollfd> fds;
    if (!in.valid()) fds.push_back({listener, POLLIN, 0});
    if (in.valid() && !ack_sent) fds.push_back({in.get(), POLLIN, 0});
    if (!acknowledged) {
      fds.push_back({out.get(), static_cast<short>(sent < bytes ? POLLOUT : POLLIN), 0});
    }
    const int ready = ::poll(fds.data(), fds.size(), remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      result.error = !acknowledged
                         ? "the link to " + next + " stalled after " + std::to_string(sent) +
                               " of " + std::to_string(bytes) + " bytes"
                         : "the previous node sent " + std::to_string(received) + " of " +
                               std::to_string(bytes) + " bytes";
      return result;
    }
    for (const pollfd& fd : fds) {
      if (fd.revents == 0) continue;
      if (fd.fd == listener) {
        in = UniqueFd(::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      } else if (in.valid() && fd.fd == in.get()) {
        const ssize_t got = ::read(in.get(), sink.data(), sink.size());
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
          result.error = "the previous node's connection closed early";
          return result;
        }
        if (got > 0) received += got;
        if (received >= bytes && ::write(in.get(), "k", 1) == 1) ack_sent = true;
      } else if (sent < bytes) {
        const auto want = static_cast<std::size_t>(
            std::min<std::int64_t>(bytes - sent, static_cast<std::int64_t>(chunk.size())));
        const ssize_t wrote = ::send(out.get(), chunk.data(), want, MSG_NOSIGNAL);
        if (wrote < 0 && errno != EAGAIN && errno != EINTR) {
          result.error = "sending to " + next + ": " + std::strerror(errno);
          return result;
        }
        if (wrote > 0) {
          if (sent == 0) first_byte = Clock::now();
          sent += wrote;
        }
      } else {
        char ack = 0;
        const ssize_t got = ::read(out.get(), &ack, 1);
        if (got == 1) {
          acknowledged = true;
          result.bytes = sent;
          result.seconds = std::chrono::duration<double>(Clock::now() - first_byte).count();
        } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
          result.error = next + " closed the link before acknowledging";
          return result;
        }
      }
    }
  }
  return result;
}

}  // namespace ddprun
