#include "nodes/rendezvous.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <nlohmann/json.hpp>

#include "ddprun/common/net.h"
#include "ddprun/contract/errors.h"
#include "nodes/ports.h"

namespace ddprun {
namespace {

// Connections that have not sent a whole join yet; past this, the oldest is closed (a
// flood): a real node sends its join as soon as it connects.
constexpr std::size_t kMaxPending = 512;
constexpr int kMaxLoggedRefusals = 5;
// A joiner waits this much beyond the host's own join window for its verdict to arrive.
constexpr std::chrono::seconds kVerdictMargin{2};

// Equal strings, in a time that does not depend on where they differ.
bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
    const auto y = static_cast<unsigned char>(i < b.size() ? b[i] : 0);
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

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
  nlohmann::json doc = {{"ddprun_join", 1},    {"run", join.run_id},  {"node", join.node_rank},
                        {"round", join.round}, {"nproc", join.nproc}, {"host", join.host}};
  if (!join.token.empty()) doc["token"] = join.token;
  return doc.dump() + "\n";
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
  const auto token = doc->contains("token") ? string_field(*doc, "token", 1024)
                                            : std::optional<std::string>(std::string());
  if (!run || !node || !round || !nproc || !host || !token) {
    why = "a join with a missing or malformed field";
    return std::nullopt;
  }
  join.run_id = *run;
  join.node_rank = *node;
  join.round = *round;
  join.nproc = *nproc;
  join.host = *host;
  join.token = *token;
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

RendezvousHost::RendezvousHost(int port, std::string run_id, std::string token, int nodes)
    : listener_(listen_on(port)),
      port_(port),
      run_id_(std::move(run_id)),
      token_(std::move(token)),
      nodes_(nodes) {
  if (!listener_.valid()) {
    const std::string holder = describe_port_user(port);
    throw UsageError("cannot listen on master port " + std::to_string(port) +
                         " for the other nodes' ddprun" + (holder.empty() ? "" : ": " + holder),
                     "free the port, or give another --master-port (the same on every node)");
  }
  set_blocking(listener_.get(), false);
}

std::optional<std::vector<JoinedPeer>> RendezvousHost::gather(int round,
                                                              RendezvousClock::time_point deadline,
                                                              int interrupt_fd, std::ostream& log) {
  if (gathering_ != round) {
    gathering_ = round;
    pending_.clear();
    joined_.clear();
    joined_.resize(static_cast<std::size_t>(nodes_));
  }
  std::vector<Pending>& pending = pending_;
  std::vector<std::optional<JoinedPeer>>& joined = joined_;
  int missing = static_cast<int>(
      std::count_if(joined.begin() + 1, joined.end(), [](const auto& peer) { return !peer; }));
  const auto refuse = [&](const std::string& why) {
    if (refused_++ < kMaxLoggedRefusals)
      log << "ddprun: rendezvous: refused a connection: " << why << "\n";
  };
  while (missing > 0) {
    const auto now = RendezvousClock::now();
    if (now >= deadline) {
      std::string absent;
      for (int node = 1; node < nodes_; ++node) {
        if (!joined[static_cast<std::size_t>(node)]) absent += " " + std::to_string(node);
      }
      const std::string what = "only " + std::to_string(nodes_ - missing) + " of " +
                               std::to_string(nodes_) + " nodes joined round " +
                               std::to_string(round) + " of the rendezvous on port " +
                               std::to_string(port_) + " in time; missing node(s):" + absent;
      // The nodes that came learn why they will not start.
      const std::string reason = nlohmann::json{{"error", what}}.dump() + "\n";
      for (const auto& peer : joined) {
        if (peer) write_all_fd(peer->socket.get(), reason);
      }
      throw ConfigError(what,
                        "start ddprun on every node with the same options, or raise --rdzv-conf "
                        "join_timeout");
    }
    std::vector<pollfd> fds = {{listener_.get(), POLLIN, 0}, {interrupt_fd, POLLIN, 0}};
    auto wake = deadline;
    for (const Pending& p : pending) {
      fds.push_back({p.fd.get(), POLLIN, 0});
      wake = std::min(wake, p.until);
    }
    const int ready = ::poll(fds.data(), fds.size(), ms_until(wake));
    if (ready < 0 && errno != EINTR)
      throw std::system_error(errno, std::generic_category(), "poll");
    if (ready <= 0) {
      // Timeouts only: drop the joins that took too long (a slow or half-open client).
    } else if (fds[1].revents != 0) {
      return std::nullopt;
    }
    // Read what came, in the order of the descriptors polled.
    for (std::size_t k = 2; ready > 0 && k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Pending& p = pending[k - 2];
      char chunk[512];
      const ssize_t got = ::recv(p.fd.get(), chunk, sizeof chunk, 0);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (got <= 0) {
        p.fd.reset();
        continue;
      }
      p.buffer.append(chunk, static_cast<std::size_t>(got));
      const auto newline = p.buffer.find('\n');
      if (newline == std::string::npos) {
        if (p.buffer.size() > kMaxJoinBytes) {
          refuse("a line longer than " + std::to_string(kMaxJoinBytes) + " bytes");
          p.fd.reset();
        }
        continue;
      }
      std::string why;
      const auto join = parse_join(std::string_view(p.buffer).substr(0, newline), why);
      if (!join) {
        refuse(why);
      } else if (join->run_id != run_id_) {
        refuse("a join for run '" + join->run_id.substr(0, 64) + "', not this one");
      } else if (!token_.empty() && !same_secret(join->token, token_)) {
        refuse("node " + std::to_string(join->node_rank) + " gave the wrong DDPRUN_RDZV_TOKEN");
      } else if (join->round != round) {
        refuse("node " + std::to_string(join->node_rank) + " asked for round " +
               std::to_string(join->round) + ", not " + std::to_string(round));
      } else if (join->node_rank == -1 && missing == 0) {
        refuse("a join for any rank, and none is left");
      } else if (join->node_rank != -1 && (join->node_rank < 1 || join->node_rank >= nodes_)) {
        refuse("node rank " + std::to_string(join->node_rank) + " is not one of 1-" +
               std::to_string(nodes_ - 1));
      } else if (join->node_rank != -1 && joined[static_cast<std::size_t>(join->node_rank)]) {
        refuse("node " + std::to_string(join->node_rank) + " joined twice");
      } else {
        JoinRequest placed = *join;
        if (placed.node_rank == -1) {  // by order of arrival: the lowest rank still free
          placed.node_rank = 1;
          while (joined[static_cast<std::size_t>(placed.node_rank)]) ++placed.node_rank;
        }
        set_blocking(p.fd.get(), true);
        joined[static_cast<std::size_t>(placed.node_rank)] = JoinedPeer{placed, std::move(p.fd)};
        --missing;
      }
      p.fd.reset();  // closed, or moved into `joined`
    }
    // New connections (the listener is non-blocking: accept until none is left).
    if (ready > 0 && fds[0].revents != 0) {
      for (;;) {
        const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        if (pending.size() >= kMaxPending) {
          const auto oldest = std::min_element(
              pending.begin(), pending.end(),
              [](const Pending& a, const Pending& b) { return a.until < b.until; });
          pending.erase(oldest);
        }
        pending.push_back({UniqueFd(fd), {}, RendezvousClock::now() + kJoinReadTimeout});
      }
    }
    const auto later = RendezvousClock::now();
    for (Pending& p : pending) {
      if (p.fd.valid() && later >= p.until) {
        refuse("no complete join within " + std::to_string(kJoinReadTimeout.count() / 1000) + " s");
        p.fd.reset();
      }
    }
    std::erase_if(pending, [](const Pending& p) { return !p.fd.valid(); });
  }
  std::vector<JoinedPeer> peers;
  for (auto& peer : joined) {
    if (peer) peers.push_back(std::move(*peer));
  }
  gathering_ = -1;
  pending_.clear();
  joined_.clear();
  return peers;
}

std::optional<PeerRound> join_round(const std::string& host, int port, const JoinRequest& join,
                                    RendezvousClock::time_point deadline, int interrupt_fd,
                                    const std::function<bool()>& on_interrupt) {
  // Whether to stop waiting: something came on `interrupt_fd` that on_interrupt does not
  // let pass.
  const auto stop_for = [&] { return !on_interrupt || !on_interrupt(); };
  const auto interrupted = [&](int timeout_ms) {
    pollfd wait{interrupt_fd, POLLIN, 0};
    return ::poll(&wait, 1, timeout_ms) > 0 && stop_for();
  };
  const std::string where = host + ":" + std::to_string(port);
  // The host gives up on missing nodes join_timeout after it starts listening, which may be
  // after this node started waiting: once connected, wait for its verdict that long from
  // now, so that every node reports the host's reason (the missing nodes), not a timeout.
  const auto window = deadline - RendezvousClock::now();
  for (;;) {
    if (interrupted(0)) return std::nullopt;
    UniqueFd sock = connect_tcp(host, port, 1000);
    if (!sock.valid()) {
      // After round 0 the host listens for the whole job: nobody there means it is over.
      if (join.round > 0) return std::nullopt;
      if (RendezvousClock::now() >= deadline) {
        throw ConfigError("node 0's ddprun did not answer at " + where + " in time",
                          "start ddprun on node 0 too, with the same --master-addr and "
                          "--master-port, or raise --rdzv-conf join_timeout");
      }
      if (interrupted(200)) return std::nullopt;  // nobody listens yet: try again soon
      continue;
    }
    set_blocking(sock.get(), true);
    if (!write_all_fd(sock.get(), format_join(join))) {
      if (join.round > 0) return std::nullopt;
      continue;
    }
    // The round's start, read a byte at a time: what follows it is the round's own.
    const auto answer_by = std::max(deadline, RendezvousClock::now() + window) + kVerdictMargin;
    std::string line;
    for (;;) {
      pollfd fds[2] = {{sock.get(), POLLIN, 0}, {interrupt_fd, POLLIN, 0}};
      const int ready = ::poll(fds, 2, ms_until(answer_by));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        throw ConfigError("node 0's ddprun at " + where + " did not start round " +
                              std::to_string(join.round) + " in time",
                          "a node may be missing: raise --rdzv-conf join_timeout, or check "
                          "every node's ddprun");
      }
      if (fds[1].revents != 0) {
        if (stop_for()) return std::nullopt;
        continue;  // the same connection: the join stands
      }
      char c = 0;
      const ssize_t got = ::recv(sock.get(), &c, 1, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        if (join.round > 0) return std::nullopt;  // the host ended the job
        throw ConfigError("node 0's ddprun at " + where + " refused this node's join",
                          "every node needs the same --run-id (or job), node count and "
                          "DDPRUN_RDZV_TOKEN; node 0's output says why");
      }
      if (c == '\n') break;
      line += c;
      if (line.size() > kMaxJoinBytes) throw ConfigError("node 0's ddprun sent no round start");
    }
    const auto start = parse_round_start(line);
    if (const auto doc = json_object(line); !start && doc && doc->contains("error")) {
      const auto why = string_field(*doc, "error", 1024);
      throw ConfigError("node 0's ddprun at " + where + " gave up: " + why.value_or("?"));
    }
    if (!start || start->round != join.round) {
      throw ConfigError("node 0's ddprun at " + where + " sent something else than round " +
                        std::to_string(join.round) + "'s start");
    }
    return PeerRound{std::move(sock), *start};
  }
}

int run_peer_relay() {
  constexpr int kSocket = 3;
  std::string from_peer;
  char buffer[4096];
  for (;;) {
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {kSocket, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return 255;
    }
    if (fds[0].revents != 0) {
      const ssize_t got = ::read(STDIN_FILENO, buffer, sizeof buffer);
      if (got < 0 && errno == EINTR) continue;
      // The host's end closed: the peer's node must stop, as after a lost head.
      if (got <= 0 ||
          !write_all_fd(kSocket, std::string_view(buffer, static_cast<std::size_t>(got)))) {
        return 255;
      }
    }
    if (fds[1].revents != 0) {
      const ssize_t got = ::recv(kSocket, buffer, sizeof buffer, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        const char lost[] = "ddprun: lost the connection to a node's ddprun\n";
        (void)!::write(STDERR_FILENO, lost, sizeof lost - 1);
        return 255;
      }
      from_peer.append(buffer, static_cast<std::size_t>(got));
      const auto newline = from_peer.find('\n');
      if (newline != std::string::npos) {
        const auto code = parse_exit_report(std::string_view(from_peer).substr(0, newline));
        return code ? *code : 255;
      }
      if (from_peer.size() > 256) return 255;
    }
  }
}

}  // namespace ddprun
