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

// The outgoing half: rounds sent to the next node, each timed to its acknowledgement.
struct Sender {
  const RingRounds& plan;
  std::int64_t sent = 0;  // in this round
  bool awaiting_ack = false;
  bool done = false;
  Clock::time_point first_byte{}, round_start{};

  // An acknowledgement came: keep the round's time, then start another or close.
  void round_acknowledged(int out, LinkMeasurement& result) {
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - round_start).count();
    if (result.rounds == 0 || seconds < result.seconds) result.seconds = seconds;
    result.bytes = plan.round_bytes;
    ++result.rounds;
    sent = 0;
    awaiting_ack = false;
    const bool more = result.rounds < plan.min_rounds ||
                      (result.rounds < plan.max_rounds && now - first_byte < plan.budget);
    if (!more) {
      ::shutdown(out, SHUT_WR);  // the next node's receiving half ends on this
      done = true;
    }
  }
};

// The incoming half: the previous node's rounds, one acknowledgement byte for each.
struct Receiver {
  std::int64_t round_bytes;
  std::int64_t received = 0;  // in all
  std::int64_t acks_written = 0;
  bool done = false;
  std::int64_t acks_owed() const { return received / round_bytes - acks_written; }
};

}  // namespace

LinkMeasurement measure_ring_link(int listener, const std::string& next_host, int next_port,
                                  const RingRounds& rounds, std::chrono::milliseconds timeout) {
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
  Sender sender{rounds};
  Receiver receiver{rounds.round_bytes};
  while (!(sender.done && receiver.done && receiver.acks_owed() == 0)) {
    std::vector<pollfd> fds;
    if (!in.valid()) fds.push_back({listener, POLLIN, 0});
    if (in.valid()) {
      const short events = static_cast<short>((receiver.done ? 0 : POLLIN) |
                                              (receiver.acks_owed() > 0 ? POLLOUT : 0));
      if (events != 0) fds.push_back({in.get(), events, 0});
    }
    if (!sender.done) {
      fds.push_back({out.get(), static_cast<short>(sender.awaiting_ack ? POLLIN : POLLOUT), 0});
    }
    const int ready = ::poll(fds.data(), fds.size(), remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      result.error = !sender.done
                         ? "the link to " + next + " stalled after " + std::to_string(sender.sent) +
                               " of " + std::to_string(rounds.round_bytes) + " bytes (round " +
                               std::to_string(result.rounds + 1) + ")"
                         : "the previous node sent " +
                               std::to_string(receiver.received % rounds.round_bytes) + " of " +
                               std::to_string(rounds.round_bytes) + " bytes (round " +
                               std::to_string(receiver.received / rounds.round_bytes + 1) + ")";
      result.seconds = 0;
      return result;
    }
    for (const pollfd& fd : fds) {
      if (fd.revents == 0) continue;
      if (fd.fd == listener) {
        in = UniqueFd(::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      } else if (in.valid() && fd.fd == in.get()) {
        if (!receiver.done && (fd.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
          const ssize_t got = ::read(in.get(), sink.data(), sink.size());
          if (got < 0 && errno != EAGAIN && errno != EINTR) {
            result.error =
                "the previous node's connection failed: " + std::string(std::strerror(errno));
            return result;
          }
          // Closed mid-round, or before the rounds every node sends (a stray client on
          // the port, not the previous node): not a measured link.
          if (got == 0 && (receiver.received % rounds.round_bytes != 0 ||
                           receiver.received < rounds.min_rounds * rounds.round_bytes)) {
            result.error = "the previous node's connection closed early";
            return result;
          }
          if (got == 0) receiver.done = true;
          if (got > 0) receiver.received += got;
        }
        if (receiver.acks_owed() > 0 && ::send(in.get(), "k", 1, MSG_NOSIGNAL) == 1) {
          ++receiver.acks_written;
        }
      } else if (!sender.awaiting_ack) {
        const auto want = static_cast<std::size_t>(std::min<std::int64_t>(
            rounds.round_bytes - sender.sent, static_cast<std::int64_t>(chunk.size())));
        const ssize_t wrote = ::send(out.get(), chunk.data(), want, MSG_NOSIGNAL);
        if (wrote < 0 && errno != EAGAIN && errno != EINTR) {
          result.error = "sending to " + next + ": " + std::strerror(errno);
          return result;
        }
        if (wrote > 0) {
          const auto now = Clock::now();
          if (sender.sent == 0) sender.round_start = now;
          if (result.rounds == 0 && sender.sent == 0) sender.first_byte = now;
          sender.sent += wrote;
          sender.awaiting_ack = sender.sent == rounds.round_bytes;
        }
      } else {
        char ack = 0;
        const ssize_t got = ::read(out.get(), &ack, 1);
        if (got == 1) {
          sender.round_acknowledged(out.get(), result);
        } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
          result.error = next + " closed the link before acknowledging";
          result.seconds = 0;
          return result;
        }
      }
    }
  }
  return result;
}

}  // namespace ddprun
