// A peer's side of the rendezvous (rendezvous.h): joining node 0 (greeting, join, the
// host's proof checked before anything it says is believed) and waiting for its next word.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "ddprun/common/net.h"
#include "ddprun/contract/errors.h"
#include "nodes/rendezvous.h"
#include "nodes/rendezvous_io.h"
#include "nodes/rendezvous_secret.h"
#include "run/agent_messages.h"

namespace ddprun {

namespace {

enum class HostLine { kLine, kStop, kClosed, kTimedOut, kSilent };

// Reads the host's next line into `line`, never past its end (what follows it is the
// round's own), until `deadline` (none: for ever). Meanwhile `interrupt_fd` is served with
// `on_interrupt`: an event it asks to tell is kept in `held` when given, else sent at once.
// With a heartbeat (once joined), one is sent to the host when due, its empty lines are
// not lines, and a host silent for the heartbeat's `silent_after` is kSilent. Once joined,
// node 0 is known: a line may then be up to kMaxPeerLine (a late membership, many ranks).
HostLine read_host_line(int socket, std::optional<RendezvousClock::time_point> deadline,
                        int interrupt_fd, const OnInterrupt& on_interrupt,
                        std::optional<NodeEvent>* held, std::string& line,
                        const Heartbeat& beat = {}, std::size_t max_line = kMaxJoinBytes) {
  line.clear();
  HeartbeatWatch watch(beat);
  PeerBeat host = watch.start(RendezvousClock::now());
  for (;;) {
    auto wake = deadline;
    if (watch.on()) {
      const auto due = watch.due(host);
      if (!wake || due < *wake) wake = due;
    }
    pollfd fds[2] = {{socket, POLLIN, 0}, {interrupt_fd, POLLIN, 0}};
    const int ready = ::poll(fds, 2, wake ? ms_until(*wake) : -1);
    if (ready < 0 && errno == EINTR) continue;
    const auto now = RendezvousClock::now();
    if (ready == 0 && deadline && now >= *deadline) return HostLine::kTimedOut;
    watch.turn(now);  // what waits on the socket is read before any verdict
    const bool readable = ready > 0 && fds[0].revents != 0;
    if (!readable && watch.silent(host, now)) return HostLine::kSilent;
    if (watch.beat_due(host, now)) {
      (void)::send(socket, "\n", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      watch.sent(host, now);
    }
    if (ready <= 0) continue;
    if (fds[1].revents != 0) {
      const PeerInterrupt what = on_interrupt();
      if (what.tell && held != nullptr) *held = what.tell;
      if (what.tell && held == nullptr) (void)write_all_fd(socket, node_event_line(*what.tell));
      if (what.stop) return HostLine::kStop;
      continue;
    }
    char chunk[512];
    const ssize_t got = recv_to_line_end(socket, chunk, sizeof chunk);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return HostLine::kClosed;
    host.heard_at = now;
    line.append(chunk, static_cast<std::size_t>(got));
    if (line.back() == '\n') {
      line.pop_back();
      if (line.empty() && beat.on()) continue;  // a heartbeat
      return HostLine::kLine;
    }
    if (line.size() > max_line) throw ConfigError("node 0's ddprun sent no round start");
  }
}

ConfigError no_answer(const std::string& where) {
  return ConfigError("node 0's ddprun did not answer at " + where + " in time",
                     "start ddprun on node 0 too, with the same --master-addr and "
                     "--master-port, or raise --rdzv-conf join_timeout");
}

constexpr const char* kSameSecretHint =
    "give every node the same DDPRUN_RDZV_TOKEN, or the same ~/.ddprun/rdzv-token (node 0 "
    "makes it; a shared home folder shares it), or check who listens on that port on node 0";

}  // namespace

UniqueFd join_host(const std::string& host, int port, JoinRequest join, const SecretSource& secret,
                   RendezvousClock::time_point deadline, int interrupt_fd,
                   const OnInterrupt& on_interrupt) {
  const std::string where = host + ":" + std::to_string(port);
  std::optional<NodeEvent> tell;   // a notice that came before the host's proof: sent after it
  std::optional<std::string> key;  // asked for at the first greeting
  std::string line;
  for (;;) {
    pollfd wait{interrupt_fd, POLLIN, 0};
    if (::poll(&wait, 1, 0) > 0) {
      const PeerInterrupt what = on_interrupt();
      if (what.stop) return UniqueFd();
      if (what.tell) tell = what.tell;
    }
    UniqueFd sock = connect_tcp(host, port, 1000);
    if (sock.valid()) set_blocking(sock.get(), true);
    // Node 0's host dying, or the link to it cut, ends this connection (net.h), and with it
    // this node's workers: never a wait without end.
    if (sock.valid()) keep_alive(sock.get());
    // The greeting comes once node 0 gathers (during a round it does not: wait for it).
    const HostLine greeted =
        sock.valid() ? read_host_line(sock.get(), deadline, interrupt_fd, on_interrupt, &tell, line)
                     : HostLine::kClosed;
    if (greeted == HostLine::kStop) return UniqueFd();
    if (greeted == HostLine::kTimedOut) throw no_answer(where);
    if (greeted == HostLine::kClosed) {
      if (RendezvousClock::now() >= deadline) throw no_answer(where);
      pollfd again{interrupt_fd, POLLIN, 0};
      (void)::poll(&again, 1, 200);  // nobody listens yet: try again soon
      continue;
    }
    const auto host_nonce = parse_greeting(line);
    if (!host_nonce) {
      throw ConfigError("what listens at " + where + " is not node 0's ddprun (it sent no " +
                            "rendezvous greeting); this node sent it nothing",
                        "check who listens on that port on node 0");
    }
    if (!key) key = secret ? secret() : std::string();
    join.nonce = random_nonce();
    join.proof = key->empty() ? std::string() : join_proof(*key, *host_nonce, join);
    if (!write_all_fd(sock.get(), format_join(join))) continue;
    const HostLine answered =
        read_host_line(sock.get(), deadline, interrupt_fd, on_interrupt, &tell, line);
    if (answered == HostLine::kStop) return UniqueFd();
    if (answered == HostLine::kTimedOut) throw no_answer(where);
    if (answered == HostLine::kClosed) {
      throw ConfigError(
          "node 0's ddprun at " + where + " closed the connection at this node's " + "join",
          key->empty() ? "it refused the join: node 0's output says why"
                       : std::string(kSameSecretHint));
    }
    const auto proof = parse_host_proof(line);
    if (!proof) {
      const auto refused = parse_job_end(line);
      throw ConfigError(
          "the ddprun at " + where + " " +
              (refused ? "refused this node's join before proving itself: " + refused->why
                       : std::string("sent something else than a proof")),
          kSameSecretHint);
    }
    if (!key->empty() && !same_proof(*proof, host_proof(*key, join.nonce, *host_nonce))) {
      throw ConfigError("the ddprun at " + where + " did not prove it holds the rendezvous " +
                            "secret: another secret, or not node 0's ddprun; this node runs " +
                            "nothing it says",
                        kSameSecretHint);
    }
    if (tell) (void)write_all_fd(sock.get(), node_event_line(*tell));
    return sock;
  }
}

std::optional<HostWord> wait_for_host(int socket, const std::string& where,
                                      std::optional<RendezvousClock::time_point> deadline,
                                      int interrupt_fd, const OnInterrupt& on_interrupt,
                                      const Heartbeat& beat) {
  std::string line;
  for (;;) {
    switch (read_host_line(socket, deadline, interrupt_fd, on_interrupt, nullptr, line, beat,
                           kMaxPeerLine)) {
      case HostLine::kTimedOut:
        throw ConfigError("node 0's ddprun at " + where + " started no round in time",
                          "a node may be missing: raise --rdzv-conf join_timeout, or check "
                          "every node's ddprun");
      case HostLine::kSilent:
        throw ConfigError(
            "node 0's ddprun at " + where + " sent nothing in " + beat.silence() +
                ", though its host answers: it is stopped (SIGSTOP, a debugger) or hung",
            "this node has left the job; node 0's output says more once it runs again");
      case HostLine::kStop:
      case HostLine::kClosed:
        return std::nullopt;  // told to stop, or the host is gone
      case HostLine::kLine:
        break;
    }
    HostWord word;
    word.start = parse_round_start(line);
    if (!word.start) word.end = parse_job_end(line);
    if (!word.start && !word.end) word.spare = parse_spare_wait(line);
    if (word.start || word.end || word.spare) return word;
    // A signal or a control request that node 0 sent for the round this node had already
    // ended (its exit report was on the way): nothing to do.
    try {
      (void)parse_agent_message(line);
      continue;
    } catch (const Error&) {
    }
    throw ConfigError("node 0's ddprun at " + where + " sent something else than a round start");
  }
}

}  // namespace ddprun
