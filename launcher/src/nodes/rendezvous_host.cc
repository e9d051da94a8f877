// Node 0's side of the rendezvous (rendezvous.h): the listener, the gathering before each
// round, the connections read between rounds, the job's end told to every node. How one
// connection's join is checked and placed is in rendezvous_joins.cc.
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <map>
#include <utility>

#include "ddprun/common/net.h"
#include "ddprun/contract/errors.h"
#include "nodes/ports.h"
#include "nodes/rendezvous.h"
#include "nodes/rendezvous_io.h"
#include "nodes/rendezvous_secret.h"
#include "run/agent_messages.h"

namespace ddprun {
namespace {

// Connections that have not sent a whole join yet, at least (or twice the node count);
// past this, the oldest is closed (a flood): a real node sends its join as soon as it
// connects.
constexpr std::size_t kMaxPending = 512;
constexpr int kAcceptsPerTurn = 64;
// How long node 0 takes no connection during a round once it ran out of descriptors.
constexpr std::chrono::seconds kAcceptPause{1};

// "the limit is 1024 descriptors".
std::string descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return "the descriptor limit";
  return "the limit is " + std::to_string(limit.rlim_cur) + " open descriptors (hard limit " +
         (limit.rlim_max == RLIM_INFINITY ? std::string("unlimited")
                                          : std::to_string(limit.rlim_max)) +
         ")";
}

// Node 0's descriptors for a job: one connection per other node, its workers' pipes and log
// files (five each at most), and ddprun's own (signals, the control socket, the console).
rlim_t descriptors_needed(int nodes, int nproc) {
  return static_cast<rlim_t>(nodes - 1) + 5 * static_cast<rlim_t>(nproc) + 64;
}

}  // namespace

RendezvousHost::RendezvousHost(int port, std::string run_id, std::string secret, int nodes,
                               int nproc, const std::string& address)
    : listener_(listen_on(port, address)),
      port_(port),
      run_id_(std::move(run_id)),
      secret_(std::move(secret)),
      nodes_(nodes),
      nproc_(nproc),
      gathering_(nodes) {
  if (!listener_.valid()) {
    const std::string holder = describe_port_user(port);
    throw UsageError("cannot listen on port " + std::to_string(port) +
                         " for the other nodes' ddprun" + (holder.empty() ? "" : ": " + holder),
                     "free the port, or give another --master-port (the same on every node)");
  }
  set_blocking(listener_.get(), false);
  joined_.resize(static_cast<std::size_t>(nodes_));
  // A connection per node: the soft descriptor limit most sites give (1024) goes up to the
  // hard one, as a process may raise its own (node 0's workers inherit it). A limit still
  // too small is said now, not as a failed join much later.
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &limit);
  }
  const rlim_t needed = descriptors_needed(nodes_, nproc_);
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < needed) {
    throw ConfigError("node 0's ddprun needs about " + std::to_string(needed) +
                          " open descriptors for " + std::to_string(nodes_) + " nodes (one per " +
                          "node, and its own and its workers'), but " + descriptor_limit(),
                      "raise the hard limit (ulimit -Hn, or the site's limits.conf) on node 0 to "
                      "at least " +
                          std::to_string(needed));
  }
}

std::vector<JoinedPeer*> RendezvousHost::peers() {
  std::vector<JoinedPeer*> out;
  for (auto& peer : joined_) {
    if (peer) out.push_back(&*peer);
  }
  return out;
}

std::vector<const JoinedPeer*> RendezvousHost::peers() const {
  std::vector<const JoinedPeer*> out;
  for (const auto& peer : joined_) {
    if (peer) out.push_back(&*peer);
  }
  return out;
}

std::string RendezvousHost::describe() const {
  std::string joined;
  std::string awaited;
  for (int node = 1; node < nodes_; ++node) {
    const auto& peer = joined_[static_cast<std::size_t>(node)];
    std::string& list = peer ? joined : awaited;
    list += (list.empty() ? "" : ", ") + std::to_string(node);
    if (peer) list += " (" + printable_host(peer->join.host) + ")";
  }
  std::string spares;
  for (const JoinedPeer& spare : spares_) {
    spares += (spares.empty() ? "; spares: " : ", ") + printable_host(spare.join.host);
  }
  return "joined: " + (joined.empty() ? std::string("none") : joined) +
         "; awaited: " + (awaited.empty() ? std::string("none") : awaited) + spares +
         (refused_ > 0 ? "; refused connections: " + std::to_string(refused_) : "");
}

void RendezvousHost::end_job(const JobEnd& end) {
  const std::string line = format_job_end(end);
  for (auto& peer : joined_) {
    if (peer) (void)write_all_fd(peer->socket.get(), line);
    peer.reset();
  }
  for (const JoinedPeer& spare : spares_) (void)write_all_fd(spare.socket.get(), line);
  spares_.clear();
  // Nothing joins a job that ended (node 0 may still drain its console).
  end_round_joins();
  pending_.clear();
}

std::string RendezvousHost::spare_host(std::size_t in_line) const {
  return in_line < spares_.size() ? printable_host(spares_[in_line].join.host) : std::string();
}

bool RendezvousHost::read_spare(std::size_t index) {
  JoinedPeer& spare = spares_[index];
  char chunk[512];
  for (;;) {
    const ssize_t got = ::recv(spare.socket.get(), chunk, sizeof chunk, MSG_DONTWAIT);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (got <= 0) return false;
    spare.beat.heard_at = RendezvousClock::now();
    spare.buffer.append(chunk, static_cast<std::size_t>(got));
    if (spare.buffer.size() > kMaxJoinBytes) return false;
  }
  // Heartbeats only: anything else is its stop or notice (it ends its wait), or no ddprun.
  if (spare.buffer.find_first_not_of('\n') != std::string::npos) return false;
  spare.buffer.clear();
  return true;
}

void RendezvousHost::keep_spares(RendezvousClock::time_point now, std::ostream& log) {
  spare_watch_.turn(now);
  for (auto spare = spares_.begin(); spare != spares_.end();) {
    if (spare_watch_.silent(spare->beat, now)) {
      log << "ddprun: rendezvous: the spare node " << printable_host(spare->join.host)
          << " sent nothing in " << spare_watch_.beat().silence()
          << " (its ddprun is stopped or hung): no longer a spare\n";
      spare = spares_.erase(spare);
      continue;
    }
    if (spare_watch_.beat_due(spare->beat, now)) {
      (void)::send(spare->socket.get(), "\n", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      spare_watch_.sent(spare->beat, now);
    }
    ++spare;
  }
}

void RendezvousHost::seat_spares(std::ostream& log) {
  while (!spares_.empty()) {
    // A lost node's place in a round; a place free in a gather (its node left).
    int place = -1;
    if (running_round_ && !awaited_.empty()) place = *awaited_.begin();
    for (int node = 1; !running_round_ && place == -1 && node < nodes_; ++node) {
      if (!joined_[static_cast<std::size_t>(node)]) place = node;
    }
    if (place == -1) return;
    // What it sent first: one that left, or said its stop or notice, leaves the line (its
    // word would otherwise be read as a node's of the job).
    if (!read_spare(0)) {
      forget_spare(0, log);
      continue;
    }
    JoinedPeer spare = std::move(spares_.front());
    spares_.erase(spares_.begin());
    log << "ddprun: rendezvous: the spare node " << printable_host(spare.join.host)
        << " takes node " << place << "'s place (" << spares_.size() << " spare(s) left)\n";
    // Round 0 for seat: this line says it once.
    seat(place, spare.join, std::move(spare.socket), std::move(spare.buffer), true, 0, log);
  }
}

bool RendezvousHost::read_connected(JoinedPeer& peer, std::optional<NodeEvent>& event) {
  const auto report = GatherEvent::of(GatherEvent::Kind::kReported, peer.join.node_rank);
  char chunk[512];
  for (;;) {
    // Whole lines first: one may have come with the join itself.
    for (auto newline = peer.buffer.find('\n'); newline != std::string::npos;
         newline = peer.buffer.find('\n')) {
      const std::string line = peer.buffer.substr(0, newline);
      peer.buffer.erase(0, newline + 1);
      // The exit report of a round that gave up on this node (SIGKILL) ends that round
      // here; events decide.
      if (auto reported = parse_node_event_line(line); reported && !event) event = reported;
      if (parse_exit_report(line)) gathering_.on(report);
    }
    if (peer.buffer.size() > kMaxJoinBytes) return false;  // not a ddprun
    const ssize_t got = ::recv(peer.socket.get(), chunk, sizeof chunk, MSG_DONTWAIT);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (got <= 0) return false;
    peer.beat.heard_at = RendezvousClock::now();
    peer.buffer.append(chunk, static_cast<std::size_t>(got));
  }
}

RendezvousHost::Gathered RendezvousHost::gather(int round, RendezvousClock::time_point deadline,
                                                int interrupt_fd, std::ostream& log,
                                                NodeEvent& ended, int control_fd) {
  end_round_joins();
  // Joins that came during the last round for a node it did not await: taken now, unless
  // their ddprun gave up meanwhile (it closed the connection).
  for (Pending& p : pending_) {
    if (!p.parked) continue;
    p.parked = false;
    char byte = 0;
    if (::recv(p.fd.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
      p.fd.reset();
      continue;
    }
    take_join(p, round, log);
    p.fd.reset();  // closed, or moved into joined_
  }
  std::erase_if(pending_, [](const Pending& p) { return !p.fd.valid(); });
  // The nodes kept from earlier rounds are read in full once, then those that poll says
  // sent something: one that left is dropped (it may join again); one stopped or noticed
  // meanwhile ends the job. (Never every node on every wake: 1,000 joins would cost a
  // million reads.)
  std::vector<std::size_t> to_read;
  for (std::size_t node = 1; node < joined_.size(); ++node) to_read.push_back(node);
  if (gathered_round_ != round) {
    // Each node's silence counts from the gather's start: during the round its connection
    // was the round's to read. (A gather interrupted and called again goes on counting.)
    gathered_round_ = round;
    gathering_.begin();
    const auto now = RendezvousClock::now();
    watch_ = HeartbeatWatch(watch_.beat(), now);
    for (auto& peer : joined_) {
      if (peer) peer->beat = watch_.start(now);
    }
  }
  for (;;) {
    for (const std::size_t node : to_read) {
      auto& peer = joined_[node];
      if (!peer) continue;
      std::optional<NodeEvent> event;
      const bool still = read_connected(*peer, event);
      if (event && gathering_.on(GatherEvent::ended(static_cast<int>(node), *event)).kind ==
                       GatherVerdict::Kind::kEnd) {
        ended = *event;
        return Gathered::kNodeEnded;
      }
      if (!still) {
        log << "ddprun: node " << node << " (" << printable_host(peer->join.host)
            << ") left before round " << round << " started; waiting for it to join again\n";
        drop(node);
      }
    }
    to_read.clear();
    seat_spares(log);  // in the places of nodes that left
    if (gathering_.verdict().kind == GatherVerdict::Kind::kStart) {
      if (round == 0) order_by_host();
      return Gathered::kAllJoined;
    }
    const auto now = RendezvousClock::now();
    if (watch_.on()) keep_heartbeats(round, now, log);
    if (spare_watch_.on()) keep_spares(now, log);
    if (now >= deadline && gathering_.on(GatherEvent::of(GatherEvent::Kind::kTimedOut)).kind ==
                               GatherVerdict::Kind::kTimedOut) {
      std::string absent;
      for (const int node : gathering_.absent()) absent += " " + std::to_string(node);
      const std::string what =
          "only " + std::to_string(nodes_ - static_cast<int>(gathering_.absent().size())) + " of " +
          std::to_string(nodes_) + " nodes joined round " + std::to_string(round) +
          " of the rendezvous on port " + std::to_string(port_) +
          " in time; missing node(s):" + absent +
          (refused_ > 0
               ? " (" + std::to_string(refused_) + " refused connection(s): node 0's log says why)"
               : "");
      end_job({kExitLauncherError, what});  // the nodes that came learn why
      throw ConfigError(what,
                        "start ddprun on every node with the same options, or raise --rdzv-conf "
                        "join_timeout");
    }
    std::vector<pollfd> fds = {
        {listener_.get(), POLLIN, 0}, {interrupt_fd, POLLIN, 0}, {control_fd, POLLIN, 0}};
    auto wake = deadline;
    for (const auto& peer : joined_) {
      if (watch_.on() && peer) wake = std::min(wake, watch_.due(peer->beat));
    }
    for (const Pending& p : pending_) {
      fds.push_back({p.fd.get(), POLLIN, 0});
      wake = std::min(wake, p.until);
    }
    const std::size_t polled_pending = pending_.size();
    const std::size_t first_spare = fds.size();
    for (const JoinedPeer& spare : spares_) {
      fds.push_back({spare.socket.get(), POLLIN, 0});
      if (spare_watch_.on()) wake = std::min(wake, spare_watch_.due(spare.beat));
    }
    const std::size_t polled_spares = spares_.size();
    const std::size_t first_joined = fds.size();
    std::vector<std::size_t> polled_nodes;
    for (std::size_t node = 1; node < joined_.size(); ++node) {
      if (!joined_[node]) continue;
      fds.push_back({joined_[node]->socket.get(), POLLIN, 0});
      polled_nodes.push_back(node);
    }
    const int ready = ::poll(fds.data(), fds.size(), ms_until(wake));
    for (std::size_t k = 0; ready > 0 && k < polled_nodes.size(); ++k) {
      if (fds[first_joined + k].revents != 0) to_read.push_back(polled_nodes[k]);
    }
    if (ready < 0 && errno != EINTR)
      throw std::system_error(errno, std::generic_category(), "poll");
    // What came with the interruption is read first: nothing waits on it.
    const bool interrupted = ready > 0 && (fds[1].revents != 0 || fds[2].revents != 0);
    // Read what came on the pending connections, in the order polled.
    for (std::size_t k = 0; ready > 0 && k < polled_pending; ++k) {
      if (fds[k + 3].revents != 0) read_pending(pending_[k], round, log);
    }
    for (std::size_t k = polled_spares; ready > 0 && k-- > 0;) {  // from the last: erased in place
      if (fds[first_spare + k].revents != 0 && !read_spare(k)) forget_spare(k, log);
    }
    if (ready > 0 && fds[0].revents != 0) accept_connections(log);
    expire_pending(log);
    if (interrupted) return Gathered::kInterrupted;
  }
}

void RendezvousHost::read_pending(Pending& p, int round, std::ostream& log) {
  char chunk[512];
  const ssize_t got = ::recv(p.fd.get(), chunk, sizeof chunk, 0);
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (got <= 0) {
    p.fd.reset();
    return;
  }
  p.buffer.append(chunk, static_cast<std::size_t>(got));
  if (p.buffer.find('\n') != std::string::npos) {
    take_whole(p, round, log);
  } else if (p.buffer.size() > kMaxJoinBytes) {
    refuse(log, "a line longer than " + std::to_string(kMaxJoinBytes) + " bytes");
    p.fd.reset();
  }
}

void RendezvousHost::take_whole(Pending& p, int round, std::ostream& log) {
  if (const auto node = running_round_ ? parked_node(p) : std::nullopt) {
    // For the next gather: the round runs without it. One a node: the newest ddprun's.
    for (Pending& other : pending_) {
      if (&other != &p && other.parked && other.parked_node == *node && other.fd.valid()) {
        log << "ddprun: rendezvous: a newer join for node " << *node << " came during round "
            << *running_round_ << "; the earlier one is closed\n";
        other.fd.reset();
      }
    }
    p.parked = true;
    p.parked_node = *node;
    return;
  }
  take_join(p, round, log);
  p.fd.reset();  // closed, or moved into joined_
}

std::optional<int> RendezvousHost::parked_node(const Pending& p) const {
  std::string why;
  const auto join = parse_join(std::string_view(p.buffer).substr(0, p.buffer.find('\n')), why);
  // Only a node of this run that proved the secret waits: anything else is refused at once,
  // as in a gather, and holds nothing for the rest of the round.
  if (!join || join->run_id != run_id_ || secret_.empty() != join->proof.empty()) return {};
  if (!secret_.empty() && !same_proof(join->proof, join_proof(secret_, p.nonce, *join))) return {};
  // Any rank: a lost place now, or a spare's wait (none allowed: the next gather's turn).
  const bool awaited = join->node_rank == -1 ? !awaited_.empty() || spares_allowed()
                                             : awaited_.count(join->node_rank) > 0;
  if (awaited) return {};
  return join->node_rank;
}

void RendezvousHost::accept_connections(std::ostream& log) {
  // Every node may connect at once (srun starts them together): all are let wait.
  const std::size_t max_pending = std::max(kMaxPending, 2 * static_cast<std::size_t>(nodes_));
  // New connections (the listener is non-blocking), at most kAcceptsPerTurn a turn: a
  // flood of connections must not keep the loop from its heartbeats and the joined nodes.
  for (int accepted = 0; accepted < kAcceptsPerTurn; ++accepted) {
    sockaddr_in from{};
    socklen_t from_size = sizeof from;
    const int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&from), &from_size,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if ((errno == EMFILE || errno == ENFILE) && running_round_) {
        // During a round every node is in: the round goes on, and the listener rests a
        // while (the connection waits in the kernel's queue; retried at once it would spin).
        // Said once a minute at most, once the pause is over: nothing here may need a
        // descriptor (a sanitizer's checks do).
        if (accept_pauses_++ % 60 == 0) {
          pause_note_ = "ddprun: rendezvous: out of file descriptors (" + descriptor_limit() +
                        "): took no connection for " + std::to_string(kAcceptPause.count()) +
                        " s; round " + std::to_string(*running_round_) + " went on\n";
        }
        accept_paused_until_ = RendezvousClock::now() + kAcceptPause;
        return;
      }
      if (errno == EMFILE || errno == ENFILE) {
        // Another process's share of the system, or descriptors held elsewhere: every
        // node that came learns why, and none waits for a round that cannot start.
        const std::string what = "node 0's ddprun ran out of file descriptors while " +
                                 std::to_string(nodes_ - 1) + " nodes joined (" +
                                 descriptor_limit() + ")";
        end_job({kExitLauncherError, what});
        throw ConfigError(what, "raise the limit (ulimit -n) on node 0: it needs one per " +
                                    std::string("node and a few dozen of its own"));
      }
      return;
    }
    if (pending_.size() >= max_pending) {
      // From the address with the most (loopback counts as one: any 127.x.y.z is this
      // host), one that sent nothing, the oldest: a flood from one host cannot push out
      // the joins of the others, nor one under way, nor a join that proved the secret and
      // waits, parked.
      std::map<std::uint32_t, std::size_t> by_source;
      std::size_t most = 0;
      for (const Pending& p : pending_) {
        if (!p.parked) most = std::max(most, ++by_source[p.source]);
      }
      const auto rank = [&](const Pending& p) {  // lower goes first
        if (p.parked) return 3;
        return (by_source[p.source] == most ? 0 : 2) + (p.buffer.empty() ? 0 : 1);
      };
      const auto oldest = std::min_element(
          pending_.begin(), pending_.end(), [&](const Pending& a, const Pending& b) {
            return rank(a) != rank(b) ? rank(a) < rank(b) : a.until < b.until;
          });
      if (oldest != pending_.end() && !oldest->parked) {
        pending_.erase(oldest);
        refuse(log, "more than " + std::to_string(max_pending) +
                        " connections without a join: the oldest from the busiest address is "
                        "closed");
      }
    }
    // Each connection its own nonce, greeted at once (the socket's buffer is empty: a
    // short line fits; one that does not is no client).
    // A joined node's host dying, or its link cut, ends the connection (net.h): the
    // node has left, and every other node hears of it.
    keep_alive(fd);
    Pending p{UniqueFd(fd), random_nonce(), {}, RendezvousClock::now() + kJoinReadTimeout};
    p.source = from_size >= sizeof from ? ntohl(from.sin_addr.s_addr) : 0;
    if ((p.source >> 24) == 127) p.source = INADDR_LOOPBACK;  // one host, any 127.x.y.z
    if (write_all_fd(p.fd.get(), format_greeting(p.nonce))) pending_.push_back(std::move(p));
  }
}

void RendezvousHost::expire_pending(std::ostream& log) {
  const auto now = RendezvousClock::now();
  for (Pending& p : pending_) {
    if (p.fd.valid() && !p.parked && now >= p.until) {
      refuse(log,
             "no complete join within " + std::to_string(kJoinReadTimeout.count() / 1000) + " s");
      p.fd.reset();
    }
  }
  std::erase_if(pending_, [](const Pending& p) { return !p.fd.valid(); });
}

void RendezvousHost::await_in_round(int node, int round) {
  running_round_ = round;
  awaited_.insert(node);
  // A join that came for it before its loss was seen (it went silent only now): taken at the
  // next serve_round_joins, which round_join_due asks for at once.
  for (Pending& p : pending_) {
    if (p.parked && (p.parked_node == node || p.parked_node == -1)) p.parked = false;
  }
}

void RendezvousHost::forget_in_round(int node) {
  awaited_.erase(node);
}

void RendezvousHost::round_join_fds(std::vector<int>& fds) const {
  if (!running_round_) return;
  if (!round_accept_paused()) fds.push_back(listener_.get());
  for (const Pending& p : pending_) {
    if (!p.parked) fds.push_back(p.fd.get());
  }
  for (const JoinedPeer& spare : spares_) fds.push_back(spare.socket.get());
}

std::optional<RendezvousClock::time_point> RendezvousHost::round_join_due() const {
  std::optional<RendezvousClock::time_point> due;
  if (!running_round_) return due;
  if (round_accept_paused()) due = accept_paused_until_;  // the listener watched again
  if (!awaited_.empty() && !spares_.empty()) return RendezvousClock::now();  // to be seated
  for (const JoinedPeer& spare : spares_) {
    if (!spare_watch_.on()) break;
    const auto at = spare_watch_.due(spare.beat);
    if (!due || at < *due) due = at;
  }
  for (const Pending& p : pending_) {
    if (p.parked) continue;
    // A whole join no longer parked (await_in_round) is due now.
    const auto at = p.buffer.find('\n') != std::string::npos ? RendezvousClock::now() : p.until;
    if (!due || at < *due) due = at;
  }
  return due;
}

std::vector<int> RendezvousHost::serve_round_joins(int fd, std::ostream& log) {
  if (!running_round_) return {};
  if (!pause_note_.empty() && !round_accept_paused()) log << std::exchange(pause_note_, {});
  if (fd == listener_.get()) {
    accept_connections(log);
  } else if (fd >= 0) {
    for (Pending& p : pending_) {
      if (p.fd.get() == fd && !p.parked) read_pending(p, *running_round_, log);
    }
    for (std::size_t k = 0; k < spares_.size(); ++k) {
      if (spares_[k].socket.get() != fd) continue;
      if (!read_spare(k)) forget_spare(k, log);
      break;
    }
  }
  seat_spares(log);  // first in line, before a join that came later
  for (Pending& p : pending_) {
    if (p.fd.valid() && !p.parked && p.buffer.find('\n') != std::string::npos) {
      take_whole(p, *running_round_, log);
    }
  }
  if (spare_watch_.on()) keep_spares(RendezvousClock::now(), log);
  expire_pending(log);
  return std::exchange(rejoined_, {});
}

void RendezvousHost::end_round_joins() {
  running_round_.reset();
  accept_paused_until_.reset();
  accept_pauses_ = 0;
  pause_note_.clear();
  awaited_.clear();
  rejoined_.clear();
  retired_.clear();  // the round's children that read them are gone
}

void RendezvousHost::keep_heartbeats(int round, RendezvousClock::time_point now,
                                     std::ostream& log) {
  watch_.turn(now);
  for (std::size_t node = 1; node < joined_.size(); ++node) {
    auto& peer = joined_[node];
    if (!peer) continue;
    if (watch_.silent(peer->beat, now)) {
      log << "ddprun: node " << node << " (" << printable_host(peer->join.host)
          << ") sent nothing in " << watch_.beat().silence() << " before round " << round
          << " started, though its host answers (its ddprun is stopped or hung); dropped, "
             "waiting for it to join again\n";
      drop(node);
      continue;
    }
    if (watch_.beat_due(peer->beat, now)) {
      // Never waiting: a node that reads nothing has a full socket, and is silent itself.
      (void)::send(peer->socket.get(), "\n", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      watch_.sent(peer->beat, now);
    }
  }
}

void RendezvousHost::forget_spare(std::size_t index, std::ostream& log) {
  log << "ddprun: rendezvous: the spare node " << printable_host(spares_[index].join.host)
      << " left (" << spares_.size() - 1 << " spare(s) left)\n";
  spares_.erase(spares_.begin() + static_cast<std::ptrdiff_t>(index));
}

void RendezvousHost::drop(std::size_t node) {
  joined_[node].reset();
  gathering_.on(GatherEvent::of(GatherEvent::Kind::kLeft, static_cast<int>(node)));
}

std::optional<int> peer_round_line(const JoinedPeer& peer, std::string& line,
                                   Gathering& gathering) {
  if (const auto event = parse_node_event_line(line)) {
    line = node_event_line(*event);  // as this side writes it: nothing else comes through
    line.pop_back();
    return std::nullopt;
  }
  if (const auto report = parse_membership_report_line(line)) {
    line = membership_report_line(*report);  // its ranks (--restart-scope rank), as written here
    line.pop_back();
    return std::nullopt;
  }
  if (parse_agent_answer(line)) return std::nullopt;  // its ranks, for --status or --stacks
  const auto code = parse_exit_report(line);
  if (code) gathering.on(GatherEvent::of(GatherEvent::Kind::kReported, peer.join.node_rank));
  return code.value_or(255);
}

}  // namespace ddprun
