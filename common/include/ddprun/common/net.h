#pragma once
// TCP addresses and connections. Thread-safe.

#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/common/unique_fd.h"

namespace ddprun {

// An IPv4 or IPv6 socket address as text ("10.1.2.3", "::1"); empty for other families.
std::string address_text(const sockaddr* address);

// The addresses `host` resolves to (getaddrinfo), as text; empty when it does not resolve.
std::vector<std::string> resolve_addresses(const std::string& host);

// A TCP connection to `host`:`port` (non-blocking, close-on-exec), trying each address
// `host` resolves to, each for up to `timeout_ms`; an invalid fd when none accepted.
UniqueFd connect_tcp(const std::string& host, int port, int timeout_ms);

// How long a peer whose host died or whose network is cut may stay silent on a connection
// marked by keep_alive before the kernel ends it (ETIMEDOUT): ssh's agents get about as
// long (ServerAliveInterval).
inline constexpr int kPeerDeadAfterSeconds = 10;

// Asks the kernel to probe `fd`'s peer while the connection is idle (every 2 s after 2 s of
// silence) and to end the connection when kPeerDeadAfterSeconds pass without an answer or
// an acknowledgement of data sent: a host that died or a cut link is then a closed
// connection, as a killed process is, not a silence that lasts for ever. A process that
// is merely stopped still answers (its kernel does). Returns false when not applied.
bool keep_alive(int fd);

// The launchers' own heartbeat on their rendezvous connections (node 0 and each node's
// ddprun): each side sends an empty line every `every` and takes the other as lost after
// `silent_after` without a byte from it. keep_alive finds a host that died or a cut link;
// a ddprun that is stopped (SIGSTOP, a debugger) or hung still has a kernel that answers,
// and only its own lines show that it lives.
struct Heartbeat {
  std::chrono::milliseconds every{0};  // 0: none
  std::chrono::milliseconds silent_after{0};
  bool on() const { return every.count() > 0; }
  // "10 s", "0.6 s": the silence bound as messages say it.
  std::string silence() const;
};
inline constexpr Heartbeat kLaunchersHeartbeat{std::chrono::seconds(2),
                                               std::chrono::seconds(kPeerDeadAfterSeconds)};

// One peer's side of a heartbeat: when its last bytes came, when it is sent its next beat.
struct PeerBeat {
  std::chrono::steady_clock::time_point heard_at;
  std::chrono::steady_clock::time_point beat_at;
};

// The heartbeat's rules, written once for every loop that keeps one (node 0's connections
// in a round and while the nodes gather, a node's towards node 0 in a round and between
// rounds). A loop turns the watch each time it wakes; a turn that comes far later than a
// beat was due means this process itself was stopped or held up (a suspended job, Ctrl-Z),
// and its peers' silence then counts from that turn: what they sent meanwhile is read
// before any verdict. Pure: the caller gives the time.
class HeartbeatWatch {
 public:
  using Clock = std::chrono::steady_clock;
  explicit HeartbeatWatch(Heartbeat beat = kLaunchersHeartbeat,
                          Clock::time_point now = Clock::now())
      : beat_(beat), tended_at_(now) {}
  const Heartbeat& beat() const { return beat_; }
  bool on() const { return beat_.on(); }
  // A peer first heard at `now`, its first beat one period later.
  PeerBeat start(Clock::time_point now) const { return {now, now + beat_.every}; }
  // A beat (or a line, which is one too) sent to the peer at `now`.
  void sent(PeerBeat& peer, Clock::time_point now) const { peer.beat_at = now + beat_.every; }
  // One turn of the owner's loop.
  void turn(Clock::time_point now) {
    if (now - tended_at_ > 2 * beat_.every) resumed_at_ = now;
    tended_at_ = now;
  }
  bool beat_due(const PeerBeat& peer, Clock::time_point now) const {
    return on() && now >= peer.beat_at;
  }
  // Whether the peer sent nothing for the heartbeat's bound (counted from this process's
  // last resumption, when later).
  bool silent(const PeerBeat& peer, Clock::time_point now) const {
    return on() && now >= silent_at(peer);
  }
  // When the loop must next wake for this peer: its beat, or, when its silence is watched,
  // the moment it becomes silent.
  Clock::time_point due(const PeerBeat& peer, bool watch_silence = true) const {
    return watch_silence ? std::min(peer.beat_at, silent_at(peer)) : peer.beat_at;
  }

 private:
  Clock::time_point silent_at(const PeerBeat& peer) const {
    return std::max(peer.heard_at, resumed_at_) + beat_.silent_after;
  }
  Heartbeat beat_;
  Clock::time_point tended_at_;
  Clock::time_point resumed_at_{};
};

// The lines one side sends on a launchers' connection, which the other side reads as whole
// lines or not at all: a line the socket took only in part (its buffer full, the reader
// slow) keeps its tail here, and the tail goes before anything sent later, a heartbeat's
// empty line included, which would otherwise land inside the line and tear it in two.
// Never waits unless asked (send_waiting). Not thread-safe.
class LineOutbox {
 public:
  // Sends `lines` (whole lines) after the tail still unsent, without waiting; what the
  // socket does not take now waits here for the next send or beat. False once the
  // connection failed (reset, closed); true when bytes merely wait.
  bool send(int fd, std::string_view lines);
  // As send, but waits until the connection took everything, or failed, or took nothing
  // for `stall_limit` (a reader stopped or hung: the connection counts as failed then).
  bool send_waiting(int fd, std::string_view lines, std::chrono::milliseconds stall_limit);
  // A heartbeat: the tail still unsent when there is one (bytes that reach the reader are
  // a beat), an empty line otherwise. Never waits.
  bool beat(int fd);
  // Bytes that wait for room in the socket.
  std::size_t unsent() const { return unsent_.size(); }

 private:
  // Waits at most `stall_limit` for room each time the socket is full; 0: never waits.
  bool flush(int fd, std::chrono::milliseconds stall_limit);
  std::string unsent_;
  bool failed_ = false;
};

// Whether a TCP connection to `host`:`port` is accepted within `timeout_ms`, trying each
// address `host` resolves to. The connection is closed at once.
bool can_connect(const std::string& host, int port, int timeout_ms);

// Receives what came on `fd` (never waiting), at most `size` bytes and never past the end
// of a line: what follows a line may be someone else's to read. As recv; -1 with EAGAIN
// when nothing came.
ssize_t recv_to_line_end(int fd, char* buffer, std::size_t size);

}  // namespace ddprun
