#pragma once
// The launchers' rendezvous (docs/multinode.md, "One ddprun per node, agreeing on every
// round"). With one ddprun per node (srun, mpirun, by hand) and --max-restarts, node 0's
// ddprun, the host, listens on the agreed master port; before each round every other
// node's ddprun, a peer, joins it with one JSON line and gets back the round's number and
// the workers' master port (fresh every round, so no worker of an earlier round can reach
// the new store). From then on the connection carries what an ssh agent's standard input
// carries, signals as {"signal": N}, and the peer's exit code ({"exit": N}) back at the
// round's end. The host makes each joined peer an agent child of its round, through a
// small relay process (run_peer_relay), so the round's policy (job.h) treats a node
// behind a connection exactly as one behind ssh: the first failure anywhere stops every
// node, and every node starts the next round together.
//
// It listens on the network. A join must fit in kMaxJoinBytes, arrive within
// kJoinReadTimeout of the connection, name this run (and carry DDPRUN_RDZV_TOKEN when the
// host has one), this round and a node rank the host waits for; anything else (random
// bytes, another job, a slow or half-open client) is closed without a reply and without
// disturbing the job. Nothing a peer sends is run or reaches a worker's command or
// environment.

#include <chrono>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/common/unique_fd.h"

namespace ddprun {

inline constexpr std::size_t kMaxJoinBytes = 4096;
inline constexpr std::chrono::milliseconds kJoinReadTimeout{5000};

struct JoinRequest {
  std::string run_id;
  std::string token;   // DDPRUN_RDZV_TOKEN, or empty
  int node_rank = -1;  // -1: any, by order of arrival (c10d by hand, no --node-rank)
  int round = 0;
  int nproc = 1;
  std::string host;
};
std::string format_join(const JoinRequest& join);
// The join in `line` (without its newline); nullopt, with `why`, for anything else.
std::optional<JoinRequest> parse_join(std::string_view line, std::string& why);

struct RoundStart {
  int round = 0;
  int master_port = 0;
  int node_rank = 0;  // the peer's, as the host placed it
};
std::string format_round_start(const RoundStart& start);
std::optional<RoundStart> parse_round_start(std::string_view line);

std::string format_exit_report(int code);
std::optional<int> parse_exit_report(std::string_view line);

using RendezvousClock = std::chrono::steady_clock;

// A peer that joined a round: its socket (blocking, close-on-exec) and what it said.
struct JoinedPeer {
  JoinRequest join;
  UniqueFd socket;
};

class RendezvousHost {
 public:
  // Listens on `port` on every interface. Throws UsageError when the port is taken.
  RendezvousHost(int port, std::string run_id, std::string token, int nodes);

  // Accepts joins for `round` until nodes 1..N-1 have all joined, and returns them in node
  // rank order; a join for any rank (-1) gets the lowest one still free. Throws ConfigError naming
  // who joined and who did not at `deadline`. Returns nullopt as soon as `interrupt_fd` (the
  // signalfd) is readable: the caller reads the signal, and a call for the same round goes
  // on with the joins already in (none is lost to a signal). Bad joins are logged to `log`
  // (one line each, at most a few) and closed.
  std::optional<std::vector<JoinedPeer>> gather(int round, RendezvousClock::time_point deadline,
                                                int interrupt_fd, std::ostream& log);
  int port() const noexcept { return port_; }

 private:
  UniqueFd listener_;
  int port_;
  std::string run_id_;
  std::string token_;
  int nodes_;
  int refused_ = 0;  // bad joins so far, for the log's bound
  // The round being gathered, kept across calls that a signal interrupted.
  struct Pending {
    UniqueFd fd;
    std::string buffer;
    RendezvousClock::time_point until;
  };
  int gathering_ = -1;
  std::vector<Pending> pending_;
  std::vector<std::optional<JoinedPeer>> joined_;
};

// Peer: connects to `host`:`port` (retrying while nobody listens yet, until `deadline`),
// sends `join`, and waits for the round's start. Returns the socket and the start, or
// nullopt when the host ended the job (it refused, or closed the connection, after the
// first round), or when `interrupt_fd` is readable and `on_interrupt` (when given) says
// not to wait on: it reads what came (a signal) and returns true to go on waiting on the
// same connection (a join is made once; making it again would be refused as a second).
// Throws ConfigError when round 0 finds no host by `deadline`.
struct PeerRound {
  UniqueFd socket;
  RoundStart start;
};
std::optional<PeerRound> join_round(const std::string& host, int port, const JoinRequest& join,
                                    RendezvousClock::time_point deadline, int interrupt_fd,
                                    const std::function<bool()>& on_interrupt = {});

// `ddprun --peer-relay`, started by the host for one peer with the peer's socket as
// descriptor 3: copies its standard input (the round's start, then signals) to the socket,
// and exits with the code the peer reports, or 255 when the connection ends without one
// (the node is lost).
int run_peer_relay();

}  // namespace ddprun
