#include "nodes/rendezvous.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ddprun/common/net.h"
#include "ddprun/common/printable.h"
#include "ddprun/contract/errors.h"
#include "nodes/ports.h"
#include "nodes/rendezvous_secret.h"
#include "report/control.h"
#include "run/agent_messages.h"

namespace ddprun {
namespace {

// Connections that have not sent a whole join yet, at least (or twice the node count);
// past this, the oldest is closed (a flood): a real node sends its join as soon as it
// connects.
constexpr std::size_t kMaxPending = 512;
constexpr int kMaxLoggedRefusals = 5;

// Nonces and proofs are hex digests (rendezvous_secret.h); a little room for longer ones.
constexpr std::size_t kMaxNonceBytes = 128;

void set_blocking(int fd, bool blocking) {
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

bool write_all_fd(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t put = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(put));
  }
  return true;
}

// A string from the network as it may be printed (printable.h).
std::string printable_host(std::string_view text) {
  return printable(text, 255);
}

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

int ms_until(RendezvousClock::time_point when) {
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(when - RendezvousClock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, INT_MAX));
}

std::optional<nlohmann::json> json_object(std::string_view line) {
  if (line.size() > kMaxJoinBytes) return std::nullopt;
  auto doc = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return std::nullopt;
  return doc;
}

std::optional<int> int_field(const nlohmann::json& doc, const char* key, int low, int high) {
  const auto it = doc.find(key);
  if (it == doc.end() || !it->is_number_integer()) return std::nullopt;
  const auto value = it->get<long long>();
  if (value < low || value > high) return std::nullopt;
  return static_cast<int>(value);
}

std::optional<std::string> string_field(const nlohmann::json& doc, const char* key,
                                        std::size_t max) {
  const auto it = doc.find(key);
  if (it == doc.end() || !it->is_string()) return std::nullopt;
  auto value = it->get<std::string>();
  if (value.size() > max) return std::nullopt;
  return value;
}

}  // namespace

std::string format_join(const JoinRequest& join) {
  nlohmann::json doc = {{"ddprun_join", 1},      {"run", join.run_id},  {"node", join.node_rank},
                        {"round", join.round},   {"nproc", join.nproc}, {"host", join.host},
                        {"nnodes", join.nnodes}, {"nonce", join.nonce}};
  if (!join.proof.empty()) doc["proof"] = join.proof;
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string join_proof(std::string_view secret, std::string_view host_nonce,
                       const JoinRequest& join) {
  const std::string node = std::to_string(join.node_rank);
  const std::string round = std::to_string(join.round);
  const std::string nproc = std::to_string(join.nproc);
  const std::string nnodes = std::to_string(join.nnodes);
  return proof_of_secret(
      secret, {"join", host_nonce, join.nonce, join.run_id, node, round, nproc, join.host, nnodes});
}

std::string format_greeting(std::string_view nonce) {
  return nlohmann::json{{"ddprun_rdzv", 1}, {"nonce", nonce}}.dump() + "\n";
}

std::optional<std::string> parse_greeting(std::string_view line) {
  const auto doc = json_object(line);
  if (!doc || int_field(*doc, "ddprun_rdzv", 1, 1) != 1) return std::nullopt;
  auto nonce = string_field(*doc, "nonce", kMaxNonceBytes);
  if (!nonce || nonce->empty()) return std::nullopt;
  return nonce;
}

std::string host_proof(std::string_view secret, std::string_view peer_nonce,
                       std::string_view host_nonce) {
  return proof_of_secret(secret, {"host", peer_nonce, host_nonce});
}

std::string format_host_proof(std::string_view proof) {
  return nlohmann::json{{"ddprun_host", 1}, {"proof", proof}}.dump() + "\n";
}

std::optional<std::string> parse_host_proof(std::string_view line) {
  const auto doc = json_object(line);
  if (!doc || int_field(*doc, "ddprun_host", 1, 1) != 1) return std::nullopt;
  return string_field(*doc, "proof", kMaxNonceBytes);
}

std::optional<JoinRequest> parse_join(std::string_view line, std::string& why) {
  const auto doc = json_object(line);
  if (!doc || int_field(*doc, "ddprun_join", 1, 1) != 1) {
    why = "not a ddprun join";
    return std::nullopt;
  }
  JoinRequest join;
  const auto run = string_field(*doc, "run", 256);
  const auto node = int_field(*doc, "node", -1, 1 << 20);
  const auto round = int_field(*doc, "round", 0, 1 << 20);
  const auto nproc = int_field(*doc, "nproc", 1, 1 << 16);
  const auto host = string_field(*doc, "host", 255);
  const auto nnodes = int_field(*doc, "nnodes", 1, 1 << 20);
  const auto nonce = string_field(*doc, "nonce", kMaxNonceBytes);
  const auto proof = doc->contains("proof") ? string_field(*doc, "proof", kMaxNonceBytes)
                                            : std::optional<std::string>(std::string());
  if (!run || !node || !round || !nproc || !host || !nonce || nonce->empty() || !proof || !nnodes) {
    why = "a join with a missing or malformed field";
    return std::nullopt;
  }
  join.run_id = *run;
  join.node_rank = *node;
  join.round = *round;
  join.nproc = *nproc;
  join.host = *host;
  join.nnodes = *nnodes;
  join.nonce = *nonce;
  join.proof = *proof;
  return join;
}

std::string format_round_start(const RoundStart& start) {
  return nlohmann::json{
             {"round", start.round}, {"master_port", start.master_port}, {"node", start.node_rank}}
             .dump() +
         "\n";
}

std::optional<RoundStart> parse_round_start(std::string_view line) {
  const auto doc = json_object(line);
  if (!doc) return std::nullopt;
  const auto round = int_field(*doc, "round", 0, 1 << 20);
  const auto port = int_field(*doc, "master_port", 1, 65535);
  const auto node = int_field(*doc, "node", 1, 1 << 20);
  if (!round || !port || !node) return std::nullopt;
  return RoundStart{*round, *port, *node};
}

std::string format_exit_report(int code) {
  return nlohmann::json{{"exit", code}}.dump() + "\n";
}

std::optional<int> parse_exit_report(std::string_view line) {
  const auto doc = json_object(line);
  if (!doc) return std::nullopt;
  return int_field(*doc, "exit", 0, 255);
}

std::string format_job_end(const JobEnd& end) {
  return nlohmann::json{{"end", end.code}, {"why", end.why}}.dump(
             -1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n";
}

std::optional<JobEnd> parse_job_end(std::string_view line) {
  const auto doc = json_object(line);
  if (!doc) return std::nullopt;
  const auto code = int_field(*doc, "end", 0, 255);
  const auto why = string_field(*doc, "why", 1024);
  if (!code || !why) return std::nullopt;
  return JobEnd{*code, printable_host(*why)};
}

RendezvousHost::RendezvousHost(int port, std::string run_id, std::string secret, int nodes,
                               int nproc, const std::string& address)
    : listener_(listen_on(port, address)),
      port_(port),
      run_id_(std::move(run_id)),
      secret_(std::move(secret)),
      nodes_(nodes),
      nproc_(nproc) {
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
  return "joined: " + (joined.empty() ? std::string("none") : joined) +
         "; awaited: " + (awaited.empty() ? std::string("none") : awaited) +
         (refused_ > 0 ? "; refused connections: " + std::to_string(refused_) : "");
}

void RendezvousHost::end_job(const JobEnd& end) {
  const std::string line = format_job_end(end);
  for (auto& peer : joined_) {
    if (peer) (void)write_all_fd(peer->socket.get(), line);
    peer.reset();
  }
}

bool RendezvousHost::read_connected(JoinedPeer& peer, std::optional<NodeEvent>& event) {
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
      if (parse_exit_report(line)) peer.in_round = false;
    }
    if (peer.buffer.size() > kMaxJoinBytes) return false;  // not a ddprun
    const ssize_t got = ::recv(peer.socket.get(), chunk, sizeof chunk, MSG_DONTWAIT);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (got <= 0) return false;
    peer.buffer.append(chunk, static_cast<std::size_t>(got));
  }
}

bool natural_less(std::string_view a, std::string_view b) {
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      // Two numbers: the one with fewer digits (leading zeros aside) is smaller.
      std::size_t a_end = i;
      std::size_t b_end = j;
      while (a_end < a.size() && digit(a[a_end])) ++a_end;
      while (b_end < b.size() && digit(b[b_end])) ++b_end;
      std::size_t a_start = i;
      std::size_t b_start = j;
      while (a_start + 1 < a_end && a[a_start] == '0') ++a_start;
      while (b_start + 1 < b_end && b[b_start] == '0') ++b_start;
      const auto a_number = a.substr(a_start, a_end - a_start);
      const auto b_number = b.substr(b_start, b_end - b_start);
      if (a_number.size() != b_number.size()) return a_number.size() < b_number.size();
      if (a_number != b_number) return a_number < b_number;
      i = a_end;
      j = b_end;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

void RendezvousHost::order_by_host() {
  std::vector<std::size_t> slots;
  std::vector<JoinedPeer> placed;
  for (std::size_t node = 1; node < joined_.size(); ++node) {
    if (!joined_[node] || !joined_[node]->any_rank) continue;
    slots.push_back(node);
    placed.push_back(std::move(*joined_[node]));
  }
  // Stable: two nodes of one host keep their order of arrival (their ranks so far).
  std::stable_sort(placed.begin(), placed.end(), [](const JoinedPeer& a, const JoinedPeer& b) {
    return natural_less(a.join.host, b.join.host);
  });
  for (std::size_t k = 0; k < slots.size(); ++k) {
    placed[k].join.node_rank = static_cast<int>(slots[k]);
    placed[k].any_rank = false;  // placed for good: a later join takes the rank it left
    joined_[slots[k]] = std::move(placed[k]);
  }
}

void RendezvousHost::refuse(std::ostream& log, const std::string& why) {
  ++refused_;
  if (refused_ <= kMaxLoggedRefusals || refused_ % 100 == 0) {
    log << "ddprun: rendezvous: refused a connection: " << why
        << (refused_ > kMaxLoggedRefusals ? " (" + std::to_string(refused_) + " refused so far)"
                                          : "")
        << "\n";
  }
}

void RendezvousHost::take_join(std::size_t index, int round, std::ostream& log) {
  Pending& p = pending_[index];
  const auto newline = p.buffer.find('\n');
  const auto refuse = [&](const std::string& why) { this->refuse(log, why); };
  std::string why;
  const auto join = parse_join(std::string_view(p.buffer).substr(0, newline), why);
  if (!join) {
    refuse(why);
    p.fd.reset();
    return;
  }
  if (join->run_id != run_id_) {
    refuse("a join for run '" + printable_host(join->run_id.substr(0, 64)) + "', not this one");
    p.fd.reset();
    return;
  }
  const std::string who =
      "node " +
      (join->node_rank < 0 ? std::string("(any rank)") : std::to_string(join->node_rank)) + " (" +
      printable_host(join->host) + ")";
  // Only one side with a secret: both are told (the peer cannot believe this reply, but it
  // shows it as the other end's word).
  if (secret_.empty() != join->proof.empty()) {
    const std::string one_sided = secret_.empty()
                                      ? who + " proves a rendezvous secret, and node 0 has none"
                                      : who + " proves no rendezvous secret, and node 0 has one";
    refuse(one_sided);
    (void)write_all_fd(p.fd.get(), format_job_end({kExitLauncherError, "refused: " + one_sided}));
    p.fd.reset();
    return;
  }
  // A wrong proof: another secret, or bytes replayed from another connection (their nonce is
  // not this one's). Nothing is said to what may be a stranger.
  if (!secret_.empty() && !same_proof(join->proof, join_proof(secret_, p.nonce, *join))) {
    refuse(who + " gave no valid proof of the rendezvous secret (another DDPRUN_RDZV_TOKEN or " +
           "token file, or a replayed join)");
    p.fd.reset();
    return;
  }
  // A node of this run that proved itself: the host proves itself back before anything else,
  // then a refusal says why, to it and here.
  set_blocking(p.fd.get(), true);
  if (!write_all_fd(p.fd.get(), format_host_proof(
                                    secret_.empty() ? std::string()
                                                    : host_proof(secret_, join->nonce, p.nonce)))) {
    p.fd.reset();
    return;
  }
  std::string mismatch;
  if (join->nnodes != nodes_) {
    mismatch = who + " has " + std::to_string(join->nnodes) + " nodes (--nnodes), node 0 has " +
               std::to_string(nodes_);
  } else if (join->nproc != nproc_) {
    mismatch = who + " has " + std::to_string(join->nproc) +
               " workers (--nproc-per-node), node 0 has " + std::to_string(nproc_) +
               "; every node needs as many";
  } else if (join->node_rank != -1 && (join->node_rank < 1 || join->node_rank >= nodes_)) {
    mismatch = who + ": node rank " + std::to_string(join->node_rank) + " is not one of 1-" +
               std::to_string(nodes_ - 1);
  } else if (join->round != 0) {
    mismatch = who + " asked for round " + std::to_string(join->round) + " (a newer ddprun than" +
               " node 0's?)";
  }
  int place = join->node_rank;
  if (mismatch.empty() && place == -1) {  // by order of arrival: the lowest rank still free
    place = 1;
    while (place < nodes_ && joined_[static_cast<std::size_t>(place)]) ++place;
    if (place == nodes_) mismatch = who + " joined, but every node rank is taken";
  }
  if (!mismatch.empty()) {
    refuse(mismatch);
    (void)write_all_fd(p.fd.get(), format_job_end({kExitLauncherError, "refused: " + mismatch}));
    p.fd.reset();
    return;
  }
  auto& slot = joined_[static_cast<std::size_t>(place)];
  if (slot) {
    log << "ddprun: rendezvous: node " << place << " (" << printable_host(join->host)
        << ") joined again; its earlier connection is closed\n";
  } else if (round > 0) {
    log << "ddprun: rendezvous: node " << place << " (" << printable_host(join->host)
        << ") joined before round " << round << "\n";
  }
  JoinRequest placed = *join;
  placed.node_rank = place;
  slot.emplace();
  slot->join = placed;
  slot->socket = std::move(p.fd);
  slot->buffer = p.buffer.substr(newline + 1);
  slot->any_rank = join->node_rank == -1;
  slot->joined_at = RendezvousClock::now();
}

RendezvousHost::Gathered RendezvousHost::gather(int round, RendezvousClock::time_point deadline,
                                                int interrupt_fd, std::ostream& log,
                                                NodeEvent& ended, int control_fd) {
  const auto missing = [&] {
    return std::count_if(joined_.begin() + 1, joined_.end(),
                         [](const auto& peer) { return !peer; });
  };
  // Nodes whose last round node 0 gave up on: their exit report comes first (at once:
  // they were told to SIGKILL their workers).
  const auto finishing = [&] {
    return std::count_if(joined_.begin() + 1, joined_.end(),
                         [](const auto& peer) { return peer && peer->in_round; });
  };
  // Every node may connect at once (srun starts them together): all are let wait.
  const std::size_t max_pending = std::max(kMaxPending, 2 * static_cast<std::size_t>(nodes_));
  // The nodes kept from earlier rounds are read in full once, then those that poll says
  // sent something: one that left is dropped (it may join again); one stopped or noticed
  // meanwhile ends the job. (Never every node on every wake: 1,000 joins would cost a
  // million reads.)
  std::vector<std::size_t> to_read;
  for (std::size_t node = 1; node < joined_.size(); ++node) to_read.push_back(node);
  for (;;) {
    for (const std::size_t node : to_read) {
      auto& peer = joined_[node];
      if (!peer) continue;
      std::optional<NodeEvent> event;
      const bool still = read_connected(*peer, event);
      if (event &&
          (event->kind == NodeEvent::Kind::kStopped || event->kind == NodeEvent::Kind::kNotice)) {
        ended = *event;
        return Gathered::kNodeEnded;
      }
      if (!still) {
        log << "ddprun: node " << node << " (" << printable_host(peer->join.host)
            << ") left before round " << round << " started; waiting for it to join again\n";
        peer.reset();
      }
    }
    to_read.clear();
    if (missing() == 0 && finishing() == 0) {
      if (round == 0) order_by_host();
      return Gathered::kAllJoined;
    }
    const auto now = RendezvousClock::now();
    if (now >= deadline) {
      std::string absent;
      for (int node = 1; node < nodes_; ++node) {
        const auto& peer = joined_[static_cast<std::size_t>(node)];
        if (!peer || peer->in_round) absent += " " + std::to_string(node);
      }
      const std::string what = "only " + std::to_string(nodes_ - missing() - finishing()) + " of " +
                               std::to_string(nodes_) + " nodes joined round " +
                               std::to_string(round) + " of the rendezvous on port " +
                               std::to_string(port_) + " in time; missing node(s):" + absent +
                               (refused_ > 0 ? " (" + std::to_string(refused_) +
                                                   " refused connection(s): node 0's log says why)"
                                             : "");
      end_job({kExitLauncherError, what});  // the nodes that came learn why
      throw ConfigError(what,
                        "start ddprun on every node with the same options, or raise --rdzv-conf "
                        "join_timeout");
    }
    std::vector<pollfd> fds = {
        {listener_.get(), POLLIN, 0}, {interrupt_fd, POLLIN, 0}, {control_fd, POLLIN, 0}};
    auto wake = deadline;
    for (const Pending& p : pending_) {
      fds.push_back({p.fd.get(), POLLIN, 0});
      wake = std::min(wake, p.until);
    }
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
    for (std::size_t k = 0; ready > 0 && k < pending_.size(); ++k) {
      if (fds[k + 3].revents == 0) continue;
      Pending& p = pending_[k];
      char chunk[512];
      const ssize_t got = ::recv(p.fd.get(), chunk, sizeof chunk, 0);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (got <= 0) {
        p.fd.reset();
        continue;
      }
      p.buffer.append(chunk, static_cast<std::size_t>(got));
      if (p.buffer.find('\n') != std::string::npos) {
        take_join(k, round, log);
        p.fd.reset();  // closed, or moved into joined_
      } else if (p.buffer.size() > kMaxJoinBytes) {
        refuse(log, "a line longer than " + std::to_string(kMaxJoinBytes) + " bytes");
        p.fd.reset();
      }
    }
    // New connections (the listener is non-blocking: accept until none is left).
    if (ready > 0 && fds[0].revents != 0) {
      for (;;) {
        const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
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
          break;
        }
        if (pending_.size() >= max_pending) {
          const auto oldest = std::min_element(
              pending_.begin(), pending_.end(),
              [](const Pending& a, const Pending& b) { return a.until < b.until; });
          pending_.erase(oldest);
          refuse(log, "more than " + std::to_string(max_pending) +
                          " connections without a join: the oldest is closed");
        }
        // Each connection its own nonce, greeted at once (the socket's buffer is empty: a
        // short line fits; one that does not is no client).
        Pending p{UniqueFd(fd), random_nonce(), {}, RendezvousClock::now() + kJoinReadTimeout};
        if (write_all_fd(p.fd.get(), format_greeting(p.nonce))) pending_.push_back(std::move(p));
      }
    }
    const auto later = RendezvousClock::now();
    for (Pending& p : pending_) {
      if (p.fd.valid() && later >= p.until) {
        refuse(log,
               "no complete join within " + std::to_string(kJoinReadTimeout.count() / 1000) + " s");
        p.fd.reset();
      }
    }
    std::erase_if(pending_, [](const Pending& p) { return !p.fd.valid(); });
    if (interrupted) return Gathered::kInterrupted;
  }
}

namespace {

enum class HostLine { kLine, kStop, kClosed, kTimedOut };

// Reads the host's next line into `line`, never past its end (what follows it is the
// round's own), until `deadline` (none: for ever). Meanwhile `interrupt_fd` is served with
// `on_interrupt`: an event it asks to tell is kept in `held` when given, else sent at once.
HostLine read_host_line(int socket, std::optional<RendezvousClock::time_point> deadline,
                        int interrupt_fd, const OnInterrupt& on_interrupt,
                        std::optional<NodeEvent>* held, std::string& line) {
  line.clear();
  for (;;) {
    pollfd fds[2] = {{socket, POLLIN, 0}, {interrupt_fd, POLLIN, 0}};
    const int ready = ::poll(fds, 2, deadline ? ms_until(*deadline) : -1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return HostLine::kTimedOut;
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
    line.append(chunk, static_cast<std::size_t>(got));
    if (line.back() == '\n') {
      line.pop_back();
      return HostLine::kLine;
    }
    if (line.size() > kMaxJoinBytes) throw ConfigError("node 0's ddprun sent no round start");
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
                                      int interrupt_fd, const OnInterrupt& on_interrupt) {
  std::string line;
  for (;;) {
    switch (read_host_line(socket, deadline, interrupt_fd, on_interrupt, nullptr, line)) {
      case HostLine::kTimedOut:
        throw ConfigError("node 0's ddprun at " + where + " started no round in time",
                          "a node may be missing: raise --rdzv-conf join_timeout, or check "
                          "every node's ddprun");
      case HostLine::kStop:
      case HostLine::kClosed:
        return std::nullopt;  // told to stop, or the host is gone
      case HostLine::kLine:
        break;
    }
    HostWord word;
    word.start = parse_round_start(line);
    if (!word.start) word.end = parse_job_end(line);
    if (word.start || word.end) return word;
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

std::optional<int> peer_round_line(JoinedPeer& peer, std::string& line) {
  if (const auto event = parse_node_event_line(line)) {
    line = node_event_line(*event);  // as this side writes it: nothing else comes through
    line.pop_back();
    return std::nullopt;
  }
  if (parse_agent_answer(line)) return std::nullopt;  // its ranks, for --status or --stacks
  const auto code = parse_exit_report(line);
  if (code) peer.in_round = false;
  return code.value_or(255);
}

}  // namespace ddprun
