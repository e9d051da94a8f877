#pragma once
// The launchers' rendezvous (docs/multinode.md, "One ddprun per node, agreeing on every
// round"). With one ddprun per node (srun, mpirun, by hand) and --max-restarts, node 0's
// ddprun, the host, listens on the launchers' rendezvous port; every other node's ddprun,
// a peer, joins it once with one JSON line and keeps that connection for the whole job.
// Before each round the host waits until every node is connected, then starts the round
// on each connection (its number and the workers' master port, fresh every round, so no
// worker of an earlier round can reach the new store). During a round the connection
// carries what an ssh agent's standard input carries, signals as {"signal": N} (with the
// cause when the job is stopped for another node's failure), and back the node's events
// the moment they happen (its failure, a stop, a notice: NodeEvent) and its exit code
// ({"exit": N}) at the round's end. All along, during rounds and between them, both sides
// send the launchers' heartbeat (an empty line, net.h) and take a side silent past its
// bound as gone: a ddprun stopped or hung, which the kernel's keepalive cannot see. The host makes
// each connection an agent child of its round with no process behind it (ChildSet::connect: one
// descriptor per node, read in the one event loop), so the round's policy (supervision.h) treats a
// node behind a connection exactly as one behind ssh. Between rounds the host still reads every
// connection: a node that leaves is dropped and may join again (its ddprun restarted), a node
// stopped or noticed there ends the job on every node. At the job's end every node is told the
// job's exit code ({"end": N, "why": ...}).
//
// It listens on the network, so each side proves it holds the launchers' shared secret
// (rendezvous_secret.h) without ever sending it. The host greets every connection with a
// fresh nonce ({"ddprun_rdzv": 1, "nonce": ...}); the peer answers with its join, its own
// nonce and HMAC(secret, "join", host nonce, peer nonce, the join's fields); the host checks
// it, then proves itself ({"ddprun_host": 1, "proof": HMAC(secret, "host", peer nonce, host
// nonce)}) before anything else, and the peer checks that before it believes anything the
// host says (a round start, the job's end). So a process that holds the port before node 0
// learns nothing of the secret and cannot start a round or give an exit code; one without
// the secret cannot place a node; bytes replayed from another connection prove nothing
// (fresh nonces). Without a secret on either side the proofs are empty and any process
// that knows the run id may join, as the warning printed then says.
//
// A join must fit in kMaxJoinBytes, arrive within kJoinReadTimeout of the connection, name
// this run and prove the secret; anything else (random bytes, another job, a slow or
// half-open client) is closed without a reply and without disturbing the job, and counted
// (refused()). A join of this run whose node count, worker count or node rank does not fit
// is refused, after the host's proof, with a reply naming both values. Nothing a peer sends
// is run or reaches a worker's command or environment. The messages after the greeting are
// not signed one by one: someone on the path between two nodes can still cut in (docs).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/common/net.h"
#include "ddprun/common/unique_fd.h"
#include "policy/gathering.h"
#include "report/round_result.h"

namespace ddprun {

inline constexpr std::size_t kMaxJoinBytes = 4096;
inline constexpr std::chrono::milliseconds kJoinReadTimeout{5000};

struct JoinRequest {
  std::string run_id;
  int node_rank = -1;  // -1: any (c10d by hand, no --node-rank): node 0 places it
  int round = 0;       // 0: a ddprun that has run no round (a node's ddprun restarted too)
  int nproc = 1;       // its workers; every node must have as many (its WORLD_SIZE)
  std::string host;
  int nnodes = 0;     // the node count it was started with
  std::string nonce;  // the peer's, fresh for each connection (join_host sets it)
  std::string proof;  // join_proof(); empty without a secret
  // Its --restart-scope, "job" or "rank": every node must replace lost ranks alike (a node
  // that replaces its own while node 0 merges nothing would wait for a membership in vain).
  std::string restart_scope = "job";
  // Its --max-restarts: node 0 decides on restarts, and a node that allows fewer would leave
  // before a round node 0 waits for it in. -1: not said (a join without it): not checked.
  int max_restarts = -1;
};
std::string format_join(const JoinRequest& join);
// The join in `line` (without its newline); nullopt, with `why`, for anything else.
std::optional<JoinRequest> parse_join(std::string_view line, std::string& why);
// HMAC(secret, "join", host nonce, the join's nonce, its fields).
std::string join_proof(std::string_view secret, std::string_view host_nonce,
                       const JoinRequest& join);

// Host -> each new connection: its nonce. Host -> a peer whose join proved the secret:
// the host's own proof (empty without a secret), before anything else.
std::string format_greeting(std::string_view nonce);
std::optional<std::string> parse_greeting(std::string_view line);
std::string host_proof(std::string_view secret, std::string_view peer_nonce,
                       std::string_view host_nonce);
std::string format_host_proof(std::string_view proof);
std::optional<std::string> parse_host_proof(std::string_view line);

struct RoundStart {
  int round = 0;
  int master_port = 0;
  int node_rank = 0;  // the peer's, as the host placed it
  // The peer joined during the round in a lost node's place (--restart-scope rank): its
  // first workers are replacements, which wait for the membership that names them.
  bool replaces = false;
};
std::string format_round_start(const RoundStart& start);
std::optional<RoundStart> parse_round_start(std::string_view line);

// Host -> a peer that asked for any rank when every place was taken, under --restart-scope
// rank with restarts: it waits as a spare (the `position`th in line) for a lost node's place;
// the round start that places it comes when one is lost (docs/fault-tolerance.md).
std::string format_spare_wait(int position);
std::optional<int> parse_spare_wait(std::string_view line);

std::string format_exit_report(int code);
std::optional<int> parse_exit_report(std::string_view line);

// Host -> peer: the job is over (or never starts), with this exit code and why.
struct JobEnd {
  int code = 0;
  std::string why;  // empty: the job's own end, which every node printed itself
};
std::string format_job_end(const JobEnd& end);
std::optional<JobEnd> parse_job_end(std::string_view line);

using RendezvousClock = std::chrono::steady_clock;

// A peer that joined: its socket (blocking, close-on-exec) and what it said.
struct JoinedPeer {
  JoinRequest join;
  UniqueFd socket;
  std::string buffer;     // what it sent between rounds that is not a whole line yet
  bool any_rank = false;  // it asked for any rank (c10d by hand): placed by host name
  std::chrono::steady_clock::time_point joined_at;  // its latest join
  PeerBeat beat;  // the heartbeat between rounds (heard_at: its last bytes)
};

// Host names in natural order: runs of digits compare as numbers, so node7 comes before
// node66 (torchrun's c10d sorts them as text, node66 first, which scatters rings).
bool natural_less(std::string_view a, std::string_view b);

class RendezvousHost {
 public:
  // Listens on `port` of `address` (an IPv4 address of this host; empty: every
  // interface). Throws UsageError when the port is taken. Every node must have `nodes`
  // nodes and `nproc` workers and prove `secret` (empty: none is asked for).
  RendezvousHost(int port, std::string run_id, std::string secret, int nodes, int nproc,
                 const std::string& address = "");
  // Every node must also have this --restart-scope ("job" unless set).
  void set_restart_scope(std::string scope) { restart_scope_ = std::move(scope); }
  // ... and this --max-restarts (not checked unless set).
  void set_max_restarts(int max_restarts) { max_restarts_ = max_restarts; }

  enum class Gathered {
    kAllJoined,    // nodes 1..N-1 are connected: peers() has them
    kInterrupted,  // `interrupt_fd` or `control_fd` is readable: serve it, then call again
    kNodeEnded,    // a connected node was stopped or got a notice: `ended` says which
  };
  // Before `round`: reads the connections kept from earlier rounds (a node whose
  // connection ended is dropped and may join again) and accepts joins until nodes
  // 1..N-1 are all connected and none owes the exit report of a round node 0 gave up on
  // (gathering() decides: so that no line of the old round is taken for the new one's); a join for
  // any rank (-1) gets the lowest one still free, and a node that joins again replaces its earlier
  // connection. Once all have come for round 0, the nodes that asked for any rank are ranked by the
  // natural order of their host names (natural_less; two on one host in order of arrival), for
  // every round. Throws ConfigError naming who joined and who did not at `deadline`, after telling
  // the joined nodes. Joins are never lost to an interruption. Bad joins are logged to `log` (one
  // line each, at most a few, then every hundredth with the count), counted and closed. After
  // kNodeEnded, gathering().verdict() is the job's end.
  Gathered gather(int round, RendezvousClock::time_point deadline, int interrupt_fd,
                  std::ostream& log, NodeEvent& ended, int control_fd = -1);
  // Who is in, who is awaited, and what ends the wait (gathering.h), for every round: the
  // round tells it whom it started on and who reported its end (add_peer_nodes).
  Gathering& gathering() noexcept { return gathering_; }
  // The connected nodes, in node rank order (after kAllJoined: all of them).
  std::vector<const JoinedPeer*> peers() const;
  std::vector<JoinedPeer*> peers();
  // Tells every connected node the job's end and closes the connections.
  void end_job(const JobEnd& end);
  // The heartbeat with the joined nodes while they gather (kLaunchersHeartbeat unless set:
  // tests shorten it): each is sent one when due, and one silent for its `silent_after`
  // (its ddprun stopped or hung) is dropped as one that left.
  void set_heartbeat(Heartbeat heartbeat) {
    watch_ = HeartbeatWatch(heartbeat);
    spare_watch_ = HeartbeatWatch(heartbeat);
  }
  // Who joined and who is awaited, for a status answer: "joined: 1 (n2); awaited: 2",
  // with "; spares: n4" and "; refused connections: N" once there are any.
  std::string describe() const;
  // Round `round` runs (--restart-scope rank with restarts): until the next gather, joins are
  // served from the round's loop (round_join_fds), spares kept (heartbeat both ways).
  void begin_round_joins(int round) { running_round_ = round; }
  // During round `round` under --restart-scope rank: node `node` was lost, and its ddprun,
  // started again (by hand, by a supervisor, on its host or another), may join the round in
  // its place until forget_in_round. Such a join is checked as any other, its earlier
  // connection is shut (and closed at the next gather), and serve_round_joins returns it. A
  // join of this run that proves the secret for a node the round does not await waits,
  // unanswered, for that node's loss or the next gather (one a node, the newest); any other
  // is refused at once. The first spare, when one waits, takes the place at once instead.
  void await_in_round(int node, int round);
  void forget_in_round(int node);
  // During a round: the descriptors to watch (the listener, joins under way, the spares), and
  // when something is due (a join under way running out of time, a spare's heartbeat, a
  // spare seated); nothing otherwise.
  void round_join_fds(std::vector<int>& fds) const;
  std::optional<RendezvousClock::time_point> round_join_due() const;
  // `fd` (one of round_join_fds', or -1 when round_join_due passed) is ready: reads it and
  // returns the nodes that joined the round since (peers() has their connections). Bad joins
  // are refused and logged as in a gather. Out of descriptors, it takes no connection for a
  // second and the round goes on (a gather instead ends the job saying so).
  std::vector<int> serve_round_joins(int fd, std::ostream& log);
  // The ddprun waiting as spares (any rank asked for, every place taken), in line.
  std::size_t spares() const noexcept { return spares_.size(); }
  // The host name of the spare `in_line` places from the front, printable (empty: none).
  std::string spare_host(std::size_t in_line) const;
  // The lost nodes awaited in this round that nothing joined for yet.
  std::size_t awaited_count() const noexcept { return awaited_.size(); }
  // How many joins wait for the next gather (at most one a node rank).
  std::size_t parked() const {
    return static_cast<std::size_t>(
        std::count_if(pending_.begin(), pending_.end(), [](const Pending& p) { return p.parked; }));
  }
  int port() const noexcept { return port_; }
  // When node 0 began to listen: the start of the launchers' rendezvous.
  RendezvousClock::time_point listening_since() const noexcept { return listening_since_; }
  // Connections refused in the job's life (bad joins, floods, silent or slow clients).
  int refused() const noexcept { return refused_; }

 private:
  // Reads what a connected node sent between rounds; false when it left.
  bool read_connected(JoinedPeer& peer, std::optional<NodeEvent>& event);
  // The heartbeat at `now`: sent to every joined node when due, and the nodes silent too
  // long dropped (logged).
  void keep_heartbeats(int round, RendezvousClock::time_point now, std::ostream& log);
  struct Pending;
  void take_join(Pending& pending, int round, std::ostream& log);
  // A pending connection's bytes; its join taken when whole (take_whole).
  void read_pending(Pending& pending, int round, std::ostream& log);
  // A whole join: taken, or during a round parked for the next gather (parked_node).
  void take_whole(Pending& pending, int round, std::ostream& log);
  // During a round: the node rank a join waits for the next gather under (a join of this run
  // that proved the secret, for a node the round does not await); nullopt: take it now.
  std::optional<int> parked_node(const Pending& pending) const;
  void accept_connections(std::ostream& log);  // new connections, greeted
  void expire_pending(std::ostream& log);      // joins that did not come in time: refused
  void end_round_joins();                      // the round is over: nothing awaited
  void drop(std::size_t node);                 // it left (it may join again)
  // Seats a node's connection at `place` (in a round: in a lost node's place, whose socket
  // is retired).
  void seat(int place, const JoinRequest& join, UniqueFd socket, std::string buffer, bool any_rank,
            int round, std::ostream& log);
  bool spares_allowed() const { return restart_scope_ == "rank" && max_restarts_ > 0; }
  // A join for any rank with every place taken: it waits in line as a spare (`who` says it).
  void add_spare(const JoinRequest& join, UniqueFd socket, std::string buffer,
                 const std::string& who, std::ostream& log);
  // The spares: what they sent read (false: the spare at `index` left or stopped), their
  // heartbeat kept, and the first live ones seated in the places free (a gather) or awaited
  // (a round).
  bool read_spare(std::size_t index);
  void forget_spare(std::size_t index, std::ostream& log);  // it left: said, and erased
  void keep_spares(RendezvousClock::time_point now, std::ostream& log);
  void seat_spares(std::ostream& log);
  void refuse(std::ostream& log, const std::string& why);
  void order_by_host();

  UniqueFd listener_;
  int port_;
  std::string run_id_;
  std::string secret_;
  int nodes_;
  int nproc_;
  std::string restart_scope_ = "job";
  int max_restarts_ = -1;
  int refused_ = 0;                    // refused connections so far
  HeartbeatWatch watch_;               // the heartbeat with the joined nodes
  std::optional<int> gathered_round_;  // the round the latest gather was for
  RendezvousClock::time_point listening_since_ = RendezvousClock::now();
  struct Pending {
    UniqueFd fd;
    std::string nonce;  // the greeting's
    std::string buffer;
    RendezvousClock::time_point until;
    bool parked = false;   // a whole join that came during a round, for the next gather
    int parked_node = -1;  // the node rank it asked for (-1: any)
    std::uint32_t source =
        0;  // its IPv4 address (host order; loopback as one): floods are per address
  };
  // The round during which lost nodes are awaited (await_in_round), those nodes, the ones
  // that joined since serve_round_joins last said, and the sockets of the connections they
  // replaced (kept open, shut, until the next gather).
  std::optional<int> running_round_;
  std::set<int> awaited_;
  std::vector<int> rejoined_;
  std::vector<UniqueFd> retired_;
  std::optional<RendezvousClock::time_point> accept_paused_until_;  // out of descriptors
  int accept_pauses_ = 0;                                           // in this round
  std::string pause_note_;  // what the last pause says once it is over
  bool round_accept_paused() const {
    return accept_paused_until_ && RendezvousClock::now() < *accept_paused_until_;
  }
  std::vector<JoinedPeer> spares_;  // in line; join.node_rank -1
  HeartbeatWatch spare_watch_;      // the heartbeat with them, in rounds and between
  std::vector<Pending> pending_;
  std::vector<std::optional<JoinedPeer>> joined_;  // by node rank; 0 is this node
  Gathering gathering_;                            // the decisions on joined_
};

// What a peer does when `interrupt_fd` becomes readable while it waits for the host: the
// callback reads what came (a signal) and says whether to stop waiting, and what to tell
// the host first (its stop or its notice).
struct PeerInterrupt {
  bool stop = false;
  std::optional<NodeEvent> tell;
};
using OnInterrupt = std::function<PeerInterrupt()>;

// What the host said next: a round to run, or the job's end.
struct HostWord {
  std::optional<RoundStart> start;
  std::optional<JobEnd> end;
  std::optional<int> spare;  // it waits as a spare, this far in line (format_spare_wait)
};

// The launchers' secret, asked for once a host has greeted (a peer reads the token file
// then: node 0 makes it before it listens); empty: none.
using SecretSource = std::function<std::string()>;

// Peer: connects to `host`:`port` (retrying while nobody listens yet, until `deadline`),
// waits for the greeting, sends `join` with its nonce and proof, and checks the host's
// proof. Returns the connection, or an invalid one when `on_interrupt` said to stop first
// (an event it asks to tell goes to the host after the host's proof). Throws ConfigError
// when no host answers by `deadline`, when what answers does not greet as a host, refuses
// the join or closes before its proof, or does not prove the secret: this node then runs
// nothing it said.
UniqueFd join_host(const std::string& host, int port, JoinRequest join, const SecretSource& secret,
                   RendezvousClock::time_point deadline, int interrupt_fd,
                   const OnInterrupt& on_interrupt);
// Peer: waits on `socket` for the host's next word, until `deadline` (none: for ever). Its
// events go to the host as on_interrupt says, and the heartbeat both ways as `beat` says.
// Returns nullopt when on_interrupt said to stop, or when the host closed the connection
// (it is gone: the job is over). Throws ConfigError when the host refused the join, said
// nothing in time, or was silent past the heartbeat's bound (stopped or hung).
std::optional<HostWord> wait_for_host(int socket, const std::string& where,
                                      std::optional<RendezvousClock::time_point> deadline,
                                      int interrupt_fd, const OnInterrupt& on_interrupt,
                                      const Heartbeat& beat = kLaunchersHeartbeat);

// Host: what a line from a node during its round is. Its events (its failure, a stop, a
// notice; `line` rewritten as this side writes them) and its answers to control requests
// are passed to the round (nullopt); any other line ends the node's round with the code it
// reports ({"exit": N}), or 255 when it is nothing a node sends. Node 0 reads each
// connection during a round a line at a time, never past the exit report: what follows is
// the host's to read between rounds (ChildSet::connect). The exit report goes to `gathering`.
std::optional<int> peer_round_line(const JoinedPeer& peer, std::string& line, Gathering& gathering);

// The longest line a node sends in a round: an answer with every rank's stacks.
inline constexpr std::size_t kMaxPeerLine = std::size_t{64} << 20;

}  // namespace ddprun
