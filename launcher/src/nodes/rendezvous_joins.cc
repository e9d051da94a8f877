// How node 0 takes one connection's join (rendezvous.h): checked against this run and the
// secret, answered with the host's proof, placed at its node rank (or, for a node that
// asked for any, in the natural order of host names), or refused with a reason.
#include <algorithm>
#include <cctype>

#include <sys/socket.h>

#include "ddprun/contract/errors.h"
#include "nodes/rendezvous.h"
#include "nodes/rendezvous_io.h"
#include "nodes/rendezvous_secret.h"

namespace ddprun {
namespace {

constexpr int kMaxLoggedRefusals = 5;

}  // namespace

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

void RendezvousHost::take_join(Pending& p, int round, std::ostream& log) {
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
  } else if (join->restart_scope != restart_scope_) {
    mismatch = who + " has --restart-scope " + join->restart_scope + ", node 0 has " +
               restart_scope_ + "; every node must replace a lost rank alike";
  } else if (join->max_restarts >= 0 && max_restarts_ >= 0 && join->max_restarts != max_restarts_) {
    mismatch = who + " has --max-restarts " + std::to_string(join->max_restarts) + ", node 0 has " +
               std::to_string(max_restarts_) +
               "; every node must allow as many (node 0 decides, and a node that allows fewer "
               "would leave before a round it is awaited in)";
  } else if (join->node_rank != -1 && (join->node_rank < 1 || join->node_rank >= nodes_)) {
    mismatch = who + ": node rank " + std::to_string(join->node_rank) + " is not one of 1-" +
               std::to_string(nodes_ - 1);
  } else if (join->round != 0) {
    mismatch = who + " asked for round " + std::to_string(join->round) + " (a newer ddprun than" +
               " node 0's?)";
  }
  int place = join->node_rank;
  if (mismatch.empty() && place == -1) {
    if (running_round_) {
      // During a round: the lowest lost node's place, when one is awaited and no spare
      // waits before it (it goes to the back of their line then).
      if (!awaited_.empty() && spares_.empty()) place = *awaited_.begin();
    } else {  // by order of arrival: the lowest rank still free
      place = 1;
      while (place < nodes_ && joined_[static_cast<std::size_t>(place)]) ++place;
      if (place == nodes_) place = -1;
    }
    // Spares in line, at most one a node (8 at least): a descriptor and a heartbeat each.
    const std::size_t max_spares = static_cast<std::size_t>(std::max(8, nodes_));
    if (place == -1 && spares_allowed() && spares_.size() >= max_spares) {
      mismatch = who + " joined, but every node rank is taken and " +
                 std::to_string(spares_.size()) + " spares wait already";
    } else if (place == -1 && spares_allowed()) {
      add_spare(*join, std::move(p.fd), p.buffer.substr(newline + 1), who, log);
      return;
    }
    if (place == -1 && mismatch.empty()) mismatch = who + " joined, but every node rank is taken";
  }
  if (!mismatch.empty()) {
    refuse(mismatch);
    (void)write_all_fd(p.fd.get(), format_job_end({kExitLauncherError, "refused: " + mismatch}));
    p.fd.reset();
    return;
  }
  seat(place, *join, std::move(p.fd), p.buffer.substr(newline + 1), join->node_rank == -1, round,
       log);
}

void RendezvousHost::add_spare(const JoinRequest& join, UniqueFd socket, std::string buffer,
                               const std::string& who, std::ostream& log) {
  // Told first, then kept with its heartbeat until a place is lost, it leaves, or the job ends.
  if (!write_all_fd(socket.get(), format_spare_wait(static_cast<int>(spares_.size()) + 1))) return;
  JoinedPeer spare;
  spare.join = join;
  spare.socket = std::move(socket);
  spare.buffer = std::move(buffer);
  spare.any_rank = true;
  spare.joined_at = RendezvousClock::now();
  spare.beat = spare_watch_.start(spare.joined_at);
  spares_.push_back(std::move(spare));
  log << "ddprun: rendezvous: " << who << " waits as a spare: every node's place is taken ("
      << spares_.size() << " spare(s))\n";
}

void RendezvousHost::seat(int place, const JoinRequest& join, UniqueFd socket, std::string buffer,
                          bool any_rank, int round, std::ostream& log) {
  auto& slot = joined_[static_cast<std::size_t>(place)];
  if (running_round_) {
    // A lost node's ddprun again (or a spare), in the running round: the lost connection's
    // socket stays open (shut) until the next gather, so that its number is no one else's
    // while the round's children know it.
    if (slot) {
      ::shutdown(slot->socket.get(), SHUT_RDWR);
      retired_.push_back(std::move(slot->socket));
    }
    awaited_.erase(place);
    rejoined_.push_back(place);
  } else if (slot) {
    log << "ddprun: rendezvous: node " << place << " (" << printable_host(join.host)
        << ") joined again; its earlier connection is closed\n";
  } else if (round > 0) {
    log << "ddprun: rendezvous: node " << place << " (" << printable_host(join.host)
        << ") joined before round " << round << "\n";
  }
  JoinRequest placed = join;
  placed.node_rank = place;
  slot.emplace();
  slot->join = placed;
  slot->socket = std::move(socket);
  slot->buffer = std::move(buffer);
  slot->any_rank = any_rank;
  slot->joined_at = RendezvousClock::now();
  slot->beat = watch_.start(slot->joined_at);
  gathering_.on(GatherEvent::of(GatherEvent::Kind::kJoined, place));
}

}  // namespace ddprun
