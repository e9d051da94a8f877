// The launchers' rendezvous (rendezvous.h): its messages from tables, and a host on
// loopback that real joins reach through hostile clients (random bytes, another job, a
// wrong secret, a flood of connections, one that never sends), a squatter on node 0's port
// that never learns the secret nor starts a round, replayed joins, nodes that leave, come
// back, disagree, or are stopped or noticed while the others gather, all in this process.
#include "nodes/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "ddprun/common/net.h"
#include "ddprun/contract/errors.h"
#include "job/rendezvous_job.h"
#include "nodes/ports.h"
#include "nodes/rendezvous_io.h"
#include "nodes/rendezvous_secret.h"
#include "report/control.h"
#include "run/process.h"

namespace ddprun {
namespace {

TEST(Rendezvous, JoinsRoundTripAndAnythingElseIsRefusedWithAReason) {
  const JoinRequest join{"run-7", 2, 3, 4, "node3", 5, "n0nce", "pr00f", "rank", 3};
  std::string why;
  std::string line = format_join(join);
  ASSERT_EQ(line.back(), '\n');
  line.pop_back();
  const auto back = parse_join(line, why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->run_id, "run-7");
  EXPECT_EQ(back->nonce, "n0nce");
  EXPECT_EQ(back->proof, "pr00f");
  EXPECT_EQ(back->node_rank, 2);
  EXPECT_EQ(back->round, 3);
  EXPECT_EQ(back->nproc, 4);
  EXPECT_EQ(back->host, "node3");
  EXPECT_EQ(back->nnodes, 5);
  EXPECT_EQ(back->restart_scope, "rank");
  EXPECT_EQ(back->max_restarts, 3);
  const std::vector<std::string> bad = {
      "",
      "\x01\x02\xff garbage",
      "[1,2,3]",
      R"({"ddprun_join": 2, "run": "r", "node": 1, "round": 0, "nproc": 1, "host": "h", "nnodes": 2})",
      R"({"ddprun_join": 1, "run": 7, "node": 1, "round": 0, "nproc": 1, "host": "h"})",
      R"({"ddprun_join": 1, "run": "r", "node": -2, "round": 0, "nproc": 1, "host": "h"})",
      R"({"ddprun_join": 1, "run": "r", "node": 1, "round": 0, "nproc": 0, "host": "h"})",
      R"({"ddprun_join": 1, "run": "r", "node": 1, "round": 0, "nproc": 1})",
      R"({"ddprun_join": 1, "run": "r", "node": 1.5, "round": 0, "nproc": 1, "host": "h"})",
      R"({"ddprun_join": 1, "run": "r", "node": 1, "round": 0, "nproc": 1, "host": "h", "nnodes": 2, "nonce": "n", "proof": 5})",
      R"({"ddprun_join": 1, "run": "r", "node": 1, "round": 0, "nproc": 1, "host": "h", "nnodes": 2})",
      R"({"ddprun_join": 1, "run": "r", "node": 1, "round": 0, "nproc": 1, "host": "h", "nnodes": 2, "nonce": ""})",
      R"({"ddprun_join": 1, "run": "r", "node": 1, "round": 0, "nproc": 1, "host": "h", "nnodes": 2, "nonce": "n", "scope": "node"})",
      R"({"ddprun_join": 1, "run": "r", "node": 1, "round": 0, "nproc": 1, "host": "h"})",
      std::string(kMaxJoinBytes + 1, '{'),
  };
  for (const auto& text : bad) {
    std::string reason;
    EXPECT_FALSE(parse_join(text, reason)) << text.substr(0, 80);
    EXPECT_FALSE(reason.empty());
  }
  EXPECT_EQ(parse_round_start(R"({"round": 2, "master_port": 41000, "node": 3})")->node_rank, 3);
  EXPECT_FALSE(parse_round_start(R"({"round": 2, "master_port": 70000, "node": 1})"));
  EXPECT_FALSE(parse_round_start(R"({"round": 2, "master_port": 41000, "node": 0})"));
  EXPECT_FALSE(parse_round_start(R"({"round": 2, "master_port": 41000, "node": 1})")->replaces);
  EXPECT_TRUE(
      parse_round_start(R"({"round": 2, "master_port": 41000, "node": 1, "replaces": true})")
          ->replaces);
  EXPECT_FALSE(
      parse_round_start(R"({"round": 2, "master_port": 41000, "node": 1, "replaces": 1})"));
  std::string replacing = format_round_start({3, 41000, 2, true});
  replacing.pop_back();
  EXPECT_TRUE(parse_round_start(replacing)->replaces);
  EXPECT_EQ(format_round_start({3, 41000, 2}).find("replaces"), std::string::npos);
  std::string spare = format_spare_wait(2);
  spare.pop_back();
  EXPECT_EQ(parse_spare_wait(spare), 2);
  EXPECT_FALSE(parse_spare_wait(R"({"spare": 0})"));
  EXPECT_FALSE(parse_spare_wait(R"({"spare": true})"));
  EXPECT_FALSE(parse_spare_wait(R"({"spare": 1, "round": 0})"));
  EXPECT_FALSE(parse_round_start(spare));  // a spare's wait is no round start
  EXPECT_EQ(parse_exit_report(R"({"exit": 75})"), 75);
  EXPECT_FALSE(parse_exit_report(R"({"exit": 300})"));
  EXPECT_FALSE(parse_exit_report("exit 3"));
  std::string greeting = format_greeting("abc");
  greeting.pop_back();
  EXPECT_EQ(parse_greeting(greeting), "abc");
  EXPECT_FALSE(parse_greeting(R"({"ddprun_rdzv": 1, "nonce": ""})"));
  EXPECT_FALSE(parse_greeting(R"({"round": 0, "master_port": 41000, "node": 1})"));
  std::string proof = format_host_proof("p");
  proof.pop_back();
  EXPECT_EQ(parse_host_proof(proof), "p");
  EXPECT_FALSE(parse_host_proof(R"({"end": 75, "why": "x"})"));
}

// The proofs: bound to both nonces and to every field of the join, and to the secret.
TEST(Rendezvous, ProofsChangeWithTheSecretEitherNonceAndEveryFieldOfTheJoin) {
  const JoinRequest join{"run-7", 2, 0, 4, "node3", 5, "peer-nonce", ""};
  const std::string proof = join_proof("secret", "host-nonce", join);
  EXPECT_EQ(proof.size(), 64u);
  EXPECT_EQ(proof, join_proof("secret", "host-nonce", join));
  EXPECT_NE(proof, join_proof("secreT", "host-nonce", join));
  EXPECT_NE(proof, join_proof("secret", "host-nonce2", join));
  std::vector<JoinRequest> changed(9, join);
  changed[0].run_id = "run-8";
  changed[1].node_rank = 1;
  changed[2].round = 1;
  changed[3].nproc = 8;
  changed[4].host = "node4";
  changed[5].nnodes = 6;
  changed[6].nonce = "peer-nonce2";
  changed[7].restart_scope = "rank";
  changed[8].max_restarts = 2;
  for (const auto& other : changed) EXPECT_NE(proof, join_proof("secret", "host-nonce", other));
  // The host's proof is not the peer's with the nonces swapped.
  EXPECT_NE(host_proof("secret", "a", "b"), host_proof("secret", "b", "a"));
  EXPECT_TRUE(same_proof(proof, join_proof("secret", "host-nonce", join)));
  EXPECT_FALSE(same_proof(proof, proof.substr(1)));
  EXPECT_NE(random_nonce(), random_nonce());
}

// Opens a connection to the host and does `what` with it.
void client(int port, const std::function<void(int fd)>& what) {
  UniqueFd fd = connect_tcp("127.0.0.1", port, 2000);
  if (fd.valid()) what(fd.get());
}

void send_text(int fd, const std::string& text) {
  (void)!::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
}

// A join and the secret its node holds.
struct TestJoin {
  JoinRequest join;
  std::string secret;
};
TestJoin join_of(const std::string& run, const std::string& secret, int node, int nnodes,
                 const std::string& host = "n", int nproc = 1) {
  return {JoinRequest{run, node, 0, nproc, host, nnodes, "", ""}, secret};
}

const OnInterrupt kNever = [] { return PeerInterrupt{}; };

// A peer: joins, then waits for the host's first word (nullopt: the host closed).
struct Peer {
  UniqueFd socket;
  std::optional<HostWord> word;
  std::string error;  // a ConfigError's text
};
void run_peer(int port, const TestJoin& join, Peer& peer, bool wait = true,
              std::chrono::milliseconds within = std::chrono::seconds(20)) {
  try {
    peer.socket = join_host(
        "127.0.0.1", port, join.join, [&join] { return join.secret; },
        RendezvousClock::now() + within, -1, kNever);
    if (wait) {
      peer.word = wait_for_host(peer.socket.get(), "host",
                                RendezvousClock::now() + std::chrono::seconds(20), -1, kNever);
    }
  } catch (const ConfigError& e) {
    peer.error = e.what();
  }
}

RendezvousHost::Gathered gather(RendezvousHost& host, int round, std::ostringstream& log,
                                NodeEvent& ended,
                                std::chrono::milliseconds within = std::chrono::seconds(20)) {
  return host.gather(round, RendezvousClock::now() + within, -1, log, ended);
}

// Gathers in turns until `done` holds (the other nodes are not coming yet): a pipe that is
// always readable interrupts each turn.
void gather_until(RendezvousHost& host, std::ostringstream& log,
                  const std::function<bool()>& done) {
  int always[2];
  ASSERT_EQ(::pipe(always), 0);
  ASSERT_EQ(::write(always[1], "x", 1), 1);
  NodeEvent ended;
  const auto until = RendezvousClock::now() + std::chrono::seconds(10);
  while (!done() && RendezvousClock::now() < until) {
    ASSERT_EQ(host.gather(0, until, always[0], log, ended), RendezvousHost::Gathered::kInterrupted);
  }
  ::close(always[0]);
  ::close(always[1]);
  ASSERT_TRUE(done()) << log.str();
}

// One turn of a gather (a pipe that is always readable interrupts it at once).
void gather_turn(RendezvousHost& host, std::ostringstream& log) {
  int always[2];
  ASSERT_EQ(::pipe(always), 0);
  ASSERT_EQ(::write(always[1], "x", 1), 1);
  NodeEvent ended;
  EXPECT_EQ(
      host.gather(0, RendezvousClock::now() + std::chrono::seconds(10), always[0], log, ended),
      RendezvousHost::Gathered::kInterrupted);
  ::close(always[0]);
  ::close(always[1]);
}

// Gathers until a first node has joined.
void wait_for_first_join(RendezvousHost& host, std::ostringstream& log) {
  gather_until(host, log, [&host] { return !host.peers().empty(); });
}

// Runs `joins`, each in a thread of its own, while the host gathers, until each is placed
// or refused; returns each one's Peer (its connection when it was taken in).
std::vector<Peer> join_all(RendezvousHost& host, int port, std::ostringstream& log,
                           const std::vector<TestJoin>& joins) {
  std::vector<Peer> peers(joins.size());
  std::atomic<std::size_t> done{0};
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < joins.size(); ++i) {
    threads.emplace_back([&, i] {
      run_peer(port, joins[i], peers[i], false);
      ++done;
    });
  }
  gather_until(host, log, [&] { return done == joins.size(); });
  for (auto& t : threads) t.join();
  return peers;
}

void start_round(const RendezvousHost& host, int round, int port) {
  for (const JoinedPeer* peer : host.peers()) {
    send_text(peer->socket.get(), format_round_start({round, port, peer->join.node_rank}));
  }
}

TEST(Rendezvous, RealNodesJoinThroughHostileClientsAndGetTheRoundsStart) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "s3cret", 3, 2);
  std::vector<std::thread> threads;
  // Hostile first: they are all there before the real nodes come.
  threads.emplace_back([port] {
    std::mt19937 random(7);
    std::string noise(10000, '\0');
    for (char& c : noise) c = static_cast<char>(random());
    client(port, [&](int fd) { send_text(fd, noise); });
  });
  threads.emplace_back([port] {
    for (int i = 0; i < 100; ++i) client(port, [](int) {});  // a flood, closed at once
  });
  UniqueFd silent = connect_tcp("127.0.0.1", port, 2000);  // sends nothing, stays open
  ASSERT_TRUE(silent.valid());
  for (auto& t : threads) t.join();
  threads.clear();
  std::ostringstream log;
  const std::vector<Peer> strangers = join_all(
      host, port, log, {join_of("run-b", "s3cret", 1, 3), join_of("run-a", "guess", 1, 3)});
  gather_until(host, log, [&] { return host.refused() == 3; });  // the noise too
  // The real nodes, each waiting for the round's start.
  std::vector<Peer> peers(3);
  for (int node = 1; node < 3; ++node) {
    threads.emplace_back([port, node, &peers] {
      run_peer(port, join_of("run-a", "s3cret", node, 3, "node" + std::to_string(node + 1), 2),
               peers[static_cast<std::size_t>(node)]);
    });
  }
  NodeEvent ended;
  ASSERT_EQ(gather(host, 0, log, ended), RendezvousHost::Gathered::kAllJoined) << log.str();
  ASSERT_EQ(host.peers().size(), 2u) << log.str();
  EXPECT_EQ(host.peers()[0]->join.node_rank, 1);
  EXPECT_EQ(host.peers()[1]->join.node_rank, 2);
  EXPECT_EQ(host.peers()[1]->join.host, "node3");
  start_round(host, 0, 41234);
  for (auto& t : threads) t.join();
  for (int node = 1; node < 3; ++node) {
    const Peer& peer = peers[static_cast<std::size_t>(node)];
    ASSERT_TRUE(peer.word && peer.word->start) << node << " " << peer.error;
    EXPECT_EQ(peer.word->start->master_port, 41234);
  }
  const std::string said = log.str();
  EXPECT_NE(said.find("a join for run 'run-b', not this one"), std::string::npos) << said;
  EXPECT_NE(said.find("gave no valid proof of the rendezvous secret"), std::string::npos) << said;
  for (const Peer& stranger : strangers) {
    EXPECT_FALSE(stranger.socket.valid());
    EXPECT_NE(stranger.error.find("closed the connection at this node's join"), std::string::npos)
        << stranger.error;
  }
  // The noise, run-b and the wrong secret; the flood closed before it sent anything, and
  // the silent one is still within its time.
  EXPECT_EQ(host.refused(), 3) << said;
  EXPECT_NE(host.describe().find("refused connections: 3"), std::string::npos) << host.describe();
  // The job's end reaches every node on the connection it joined with.
  host.end_job({3, ""});
  for (int node = 1; node < 3; ++node) {
    auto word = wait_for_host(peers[static_cast<std::size_t>(node)].socket.get(), "host",
                              std::nullopt, -1, kNever);
    ASSERT_TRUE(word && word->end);
    EXPECT_EQ(word->end->code, 3);
  }
}

// c10d by hand: joins for any rank get the lowest ranks still free, in order of arrival.
// c10d by hand: whatever order the nodes arrive in, once all have come they are ranked by
// the natural order of their host names (node7 before node66; torchrun sorts node66 first).
TEST(Rendezvous, JoinsForAnyRankAreRankedByTheNaturalOrderOfTheirHostNames) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "", 4, 1);
  const std::vector<std::string> hosts = {"node66", "node7", "node10"};  // as they arrive
  std::ostringstream log;
  std::vector<Peer> peers(hosts.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    // One after the other: each is in before the next starts.
    threads.emplace_back(
        [&, i] { run_peer(port, join_of("run-a", "", -1, 4, hosts[i]), peers[i]); });
    gather_until(host, log, [&] { return host.peers().size() == i + 1; });
  }
  EXPECT_EQ(host.peers()[0]->join.host, "node66");  // by arrival until all have come
  NodeEvent ended;
  ASSERT_EQ(gather(host, 0, log, ended), RendezvousHost::Gathered::kAllJoined) << log.str();
  ASSERT_EQ(host.peers().size(), 3u) << log.str();
  start_round(host, 0, 41000);
  for (auto& t : threads) t.join();
  std::map<std::string, int> placed;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    ASSERT_TRUE(peers[i].word && peers[i].word->start) << peers[i].error;
    placed[hosts[i]] = peers[i].word->start->node_rank;
  }
  EXPECT_EQ(placed, (std::map<std::string, int>{{"node7", 1}, {"node10", 2}, {"node66", 3}}));
}

TEST(Rendezvous, HostNamesCompareWithTheirNumbersAsNumbers) {
  EXPECT_TRUE(natural_less("node7", "node66"));
  EXPECT_FALSE(natural_less("node66", "node7"));
  EXPECT_TRUE(natural_less("node9", "node10"));
  EXPECT_TRUE(natural_less("a1b2", "a1b10"));
  EXPECT_TRUE(natural_less("gpu-r1-n9", "gpu-r2-n1"));  // rack first, then node
  EXPECT_TRUE(natural_less("node007", "node8"));        // leading zeros count for nothing
  EXPECT_TRUE(natural_less("node", "node1"));
  EXPECT_TRUE(natural_less("alpha", "beta"));
  EXPECT_FALSE(natural_less("node5", "node5"));
  std::vector<std::string> names = {"n100", "n2", "m3", "n10", "n1"};
  std::sort(names.begin(), names.end(),
            [](const std::string& a, const std::string& b) { return natural_less(a, b); });
  EXPECT_EQ(names, (std::vector<std::string>{"m3", "n1", "n2", "n10", "n100"}));
}

// Node 0 waiting for the others: a stop signal ends the job on every node that joined,
// with 128 + the signal, and no round starts.
TEST(Rendezvous, AStopSignalWhileNode0WaitsEndsTheJobOnEveryNode) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "", 3, 1);
  SignalChannel signals;
  Peer node1;
  std::thread joiner([&] { run_peer(port, join_of("run-a", "", 1, 3), node1); });
  // Node 1 is in (node 2 never comes); then the stop.
  std::ostringstream log;
  wait_for_first_join(host, log);
  ASSERT_FALSE(host.peers().empty());
  ASSERT_EQ(::raise(SIGTERM), 0);
  const auto end = gather_nodes(host, 0, RendezvousClock::now() + std::chrono::seconds(10), signals,
                                {}, false, log);
  joiner.join();
  ASSERT_TRUE(end);
  EXPECT_EQ(end->code, 128 + SIGTERM);
  EXPECT_NE(end->message.find("stopped by SIGTERM while the nodes gathered"), std::string::npos)
      << end->message;
  ASSERT_TRUE(node1.word && node1.word->end) << node1.error;
  EXPECT_EQ(node1.word->end->code, 128 + SIGTERM);
}

// A notice (SIGUSR1, as Slurm's --signal sends it once) while node 0 waits for a late node:
// no round starts, and every node ends 75.
TEST(Rendezvous, ANoticeWhileNode0WaitsEndsTheJobDrainedOnEveryNode) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "", 3, 1);
  SignalChannel signals;
  Peer node1;
  std::thread joiner([&] { run_peer(port, join_of("run-a", "", 1, 3), node1); });
  std::ostringstream log;
  wait_for_first_join(host, log);
  ASSERT_FALSE(host.peers().empty());
  ASSERT_EQ(::raise(SIGUSR1), 0);
  const auto end = gather_nodes(host, 0, RendezvousClock::now() + std::chrono::seconds(10), signals,
                                {}, false, log);
  joiner.join();
  ASSERT_TRUE(end);
  EXPECT_EQ(end->code, kExitPreempted);
  ASSERT_TRUE(node1.word && node1.word->end) << node1.error;
  EXPECT_EQ(node1.word->end->code, kExitPreempted);
}

// A joined node stopped (or noticed) while node 0 still waits for another: the job ends
// at once on every node, with the stop's code (or 75), and node 0 names the node.
TEST(Rendezvous, ANodeStoppedOrNoticedWhileTheOthersGatherEndsTheJob) {
  for (const auto kind : {NodeEvent::Kind::kStopped, NodeEvent::Kind::kNotice}) {
    const int port = pick_free_port();
    RendezvousHost host(port, "run-a", "", 4, 1);
    Peer node1;
    Peer node2;
    std::thread first([&] { run_peer(port, join_of("run-a", "", 1, 4), node1); });
    std::ostringstream log;
    wait_for_first_join(host, log);  // node 1 is in before node 2 comes
    std::thread second([&] {
      run_peer(port, join_of("run-a", "", 2, 4), node2, false);
      NodeEvent event;
      event.kind = kind;
      event.node = 2;
      event.signal = kind == NodeEvent::Kind::kStopped ? SIGTERM : SIGUSR1;
      event.code = kind == NodeEvent::Kind::kStopped ? 128 + SIGTERM : kExitPreempted;
      event.what = kind == NodeEvent::Kind::kStopped ? "stopped by SIGTERM" : "a notice";
      send_text(node2.socket.get(), node_event_line(event));
    });
    SignalChannel signals;
    const auto end = gather_nodes(host, 0, RendezvousClock::now() + std::chrono::seconds(10),
                                  signals, {}, false, log);
    first.join();
    second.join();
    ASSERT_TRUE(end) << log.str();
    const int code = kind == NodeEvent::Kind::kStopped ? 128 + SIGTERM : kExitPreempted;
    EXPECT_EQ(end->code, code);
    EXPECT_NE(end->message.find("node 2"), std::string::npos) << end->message;
    ASSERT_TRUE(node1.word && node1.word->end) << node1.error;
    EXPECT_EQ(node1.word->end->code, code);
  }
}

// A joined node whose ddprun dies before the round starts is dropped; its ddprun started
// again joins, and the round starts with it (no "joined twice", no wrong round).
TEST(Rendezvous, ANodeThatLeavesBeforeTheRoundIsDroppedAndMayJoinAgain) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "", 3, 1);
  std::ostringstream log;
  NodeEvent ended;
  {
    const auto gone = join_all(host, port, log, {join_of("run-a", "", 1, 3, "old")});
    ASSERT_TRUE(gone[0].socket.valid()) << gone[0].error;
    // Taken in, but node 2 is missing: the short gather gives up (and tells node 1).
    EXPECT_THROW(gather(host, 0, log, ended, std::chrono::milliseconds(300)), ConfigError);
  }
  const int port2 = pick_free_port();
  RendezvousHost again(port2, "run-a", "", 3, 1);
  auto dies = join_all(again, port2, log, {join_of("run-a", "", 1, 3, "first")});
  Peer node2;
  std::thread second([&] { run_peer(port2, join_of("run-a", "", 2, 3, "two"), node2); });
  // Node 1 joined and died before node 2 came; it comes back as a new ddprun.
  dies[0].socket.reset();
  Peer back;
  std::thread restarted([&] { run_peer(port2, join_of("run-a", "", 1, 3, "second"), back); });
  ASSERT_EQ(gather(again, 0, log, ended), RendezvousHost::Gathered::kAllJoined) << log.str();
  ASSERT_EQ(again.peers().size(), 2u);
  EXPECT_EQ(again.peers()[0]->join.host, "second");
  start_round(again, 0, 41000);
  restarted.join();
  second.join();
  ASSERT_TRUE(back.word && back.word->start) << back.error << log.str();
  ASSERT_TRUE(node2.word && node2.word->start) << node2.error;
}

// Serves the joins of a running round (as node 0's runner does, RejoinsDuringRound) until
// `done` holds; returns the nodes that joined it.
std::vector<int> serve_round_until(RendezvousHost& host, std::ostringstream& log,
                                   const std::function<bool()>& done,
                                   std::chrono::milliseconds within = std::chrono::seconds(10)) {
  std::vector<int> joined;
  const auto until = RendezvousClock::now() + within;
  while (!done() && RendezvousClock::now() < until) {
    std::vector<int> fds;
    host.round_join_fds(fds);
    std::vector<pollfd> polled;
    for (const int fd : fds) polled.push_back({fd, POLLIN, 0});
    if (::poll(polled.data(), polled.size(), 50) <= 0) {
      for (const int node : host.serve_round_joins(-1, log)) joined.push_back(node);
      continue;
    }
    for (const pollfd& p : polled) {
      if (p.revents == 0) continue;
      for (const int node : host.serve_round_joins(p.fd, log)) joined.push_back(node);
    }
  }
  return joined;
}

// --restart-scope rank: node 2 is lost during round 0 and its ddprun, started again, joins the
// running round in its place; a join without the secret for it is refused; a join for node 1
// (which runs) waits unanswered for the next gather, which drops it when its ddprun gave up
// meanwhile. In round 1 a join for node 1 that came before node 1's loss was seen (a node
// found silent only later) is taken as soon as node 1 is awaited.
TEST(Rendezvous, ALostNodesDdprunJoinsTheRunningRoundInItsPlaceAndNoOtherDoes) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "s3cret", 3, 1);
  std::ostringstream log;
  std::vector<Peer> first(2);
  std::thread one(
      [&] { run_peer(port, join_of("run-a", "s3cret", 1, 3, "one"), first[0], false); });
  std::thread two(
      [&] { run_peer(port, join_of("run-a", "s3cret", 2, 3, "two"), first[1], false); });
  NodeEvent ended;
  ASSERT_EQ(gather(host, 0, log, ended), RendezvousHost::Gathered::kAllJoined) << log.str();
  one.join();
  two.join();
  start_round(host, 0, 41000);
  std::vector<int> fds;
  host.round_join_fds(fds);
  EXPECT_TRUE(fds.empty());  // nothing awaited: the round takes no join
  first[1].socket.reset();   // node 2's ddprun dies
  host.await_in_round(2, 0);
  const int refused = host.refused();
  Peer forger;
  std::thread forged([&] { run_peer(port, join_of("run-a", "wrong", 2, 3, "forger"), forger); });
  EXPECT_TRUE(serve_round_until(host, log, [&] { return host.refused() > refused; }).empty());
  forged.join();
  EXPECT_FALSE(forger.socket.valid());
  // A second ddprun for node 1, which runs: no answer in the round; it gives up after 1 s.
  Peer quitter;
  std::atomic<bool> quit{false};
  std::thread quitting([&] {
    run_peer(port, join_of("run-a", "s3cret", 1, 3, "quitter"), quitter, true,
             std::chrono::milliseconds(1000));
    quit = true;
  });
  EXPECT_TRUE(serve_round_until(host, log, [&] { return quit.load(); }).empty());
  quitting.join();
  EXPECT_EQ(host.parked(), 1u);
  EXPECT_FALSE(quitter.socket.valid()) << "a join for a running node was answered in the round";
  Peer back;
  std::thread rejoin([&] { run_peer(port, join_of("run-a", "s3cret", 2, 3, "back"), back); });
  const auto rejoined =
      serve_round_until(host, log, [&] { return host.peers()[1]->join.host == "back"; });
  EXPECT_EQ(rejoined, std::vector<int>{2}) << log.str();
  EXPECT_EQ(host.peers()[0]->join.host, "one");  // node 1 runs on, its connection untouched
  EXPECT_EQ(host.peers()[1]->join.node_rank, 2);
  send_text(host.peers()[1]->socket.get(), format_round_start({0, 41000, 2, true}));
  rejoin.join();
  ASSERT_TRUE(back.word && back.word->start) << back.error << log.str();
  EXPECT_TRUE(back.word->start->replaces);
  host.forget_in_round(2);
  fds.clear();
  host.round_join_fds(fds);
  EXPECT_EQ(fds.size(), 1u);  // the listener: joins are served (and parked) all the round
  // The next gather: the join that gave up is not taken, node 1 stays as it was.
  ASSERT_EQ(gather(host, 1, log, ended), RendezvousHost::Gathered::kAllJoined) << log.str();
  EXPECT_EQ(host.parked(), 0u);
  EXPECT_EQ(host.peers()[0]->join.host, "one");
  EXPECT_EQ(host.peers()[1]->join.host, "back");
  start_round(host, 1, 41001);
  // Round 1: node 2 is awaited again; node 1's ddprun, started again before its loss was
  // seen, waits; then node 1 is found lost, and its join is taken at once.
  host.await_in_round(2, 1);
  Peer early;
  std::thread early_join([&] { run_peer(port, join_of("run-a", "s3cret", 1, 3, "early"), early); });
  EXPECT_TRUE(serve_round_until(host, log, [&] { return host.parked() == 1; }).empty());
  EXPECT_EQ(host.parked(), 1u);
  EXPECT_EQ(host.peers()[0]->join.host, "one");
  host.await_in_round(1, 1);
  EXPECT_EQ(serve_round_until(host, log, [&] { return host.peers()[0]->join.host == "early"; }),
            std::vector<int>{1});
  send_text(host.peers()[0]->socket.get(), format_round_start({1, 41001, 1, true}));
  early_join.join();
  ASSERT_TRUE(early.word && early.word->start) << early.error << log.str();
  EXPECT_EQ(early.word->start->round, 1);
  EXPECT_TRUE(early.word->start->replaces);
}

// --restart-scope rank with restarts: a ddprun that asks for any rank when every place is
// taken waits as a spare, in line, its heartbeat kept both ways through the round; the first
// spare takes a lost node's place in the round at once (a round start that replaces), one
// that leaves is forgotten, one takes the place of a node that left between rounds, and the
// job's end reaches the one still waiting.
TEST(Rendezvous, ADdprunForAnyRankWaitsAsASpareAndTakesALostNodesPlace) {
  constexpr Heartbeat beat{std::chrono::milliseconds(50), std::chrono::milliseconds(500)};
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "s3cret", 2, 1);
  host.set_restart_scope("rank");
  host.set_max_restarts(2);
  host.set_heartbeat(beat);
  const auto rank_scope = [](TestJoin join) {
    join.join.restart_scope = "rank";
    join.join.max_restarts = 2;
    return join;
  };
  std::ostringstream log;
  Peer one;
  std::thread first(
      [&] { run_peer(port, rank_scope(join_of("run-a", "s3cret", 1, 2, "one")), one, false); });
  NodeEvent ended;
  ASSERT_EQ(gather(host, 0, log, ended), RendezvousHost::Gathered::kAllJoined) << log.str();
  first.join();
  start_round(host, 0, 41000);
  host.begin_round_joins(0);
  // A spare's life as its ddprun sees it: each word of the host's, as they come.
  struct Spare {
    std::vector<HostWord> words;
    std::string error;
    UniqueFd socket;
    std::atomic<int> fd{-1};  // the socket's, once joined: for this thread to shut
    std::thread thread;
  };
  const auto start_spare = [&](Spare& spare, const std::string& name, std::size_t words) {
    spare.thread = std::thread([&, name, words] {
      try {
        const TestJoin join = rank_scope(join_of("run-a", "s3cret", -1, 2, name));
        spare.socket = join_host(
            "127.0.0.1", port, join.join, [] { return std::string("s3cret"); },
            RendezvousClock::now() + std::chrono::seconds(10), -1, kNever);
        spare.fd = spare.socket.get();
        while (spare.words.size() < words) {
          auto word =
              wait_for_host(spare.socket.get(), "host",
                            RendezvousClock::now() + std::chrono::seconds(20), -1, kNever, beat);
          if (!word) break;
          spare.words.push_back(*word);
        }
      } catch (const ConfigError& e) {
        spare.error = e.what();
      }
    });
  };
  Spare sp1, sp2, sp3;
  start_spare(sp1, "sp1", 2);
  EXPECT_TRUE(serve_round_until(host, log, [&] { return host.spares() == 1; }).empty());
  start_spare(sp2, "sp2", 2);  // it waits on until its ddprun ends (below)
  EXPECT_TRUE(serve_round_until(host, log, [&] { return host.spares() == 2; }).empty());
  // Longer than the heartbeat's silence bound: both sides hear each other.
  const auto later = RendezvousClock::now() + 4 * beat.silent_after;
  EXPECT_TRUE(
      serve_round_until(host, log, [&] { return RendezvousClock::now() >= later; }).empty());
  EXPECT_EQ(host.spares(), 2u) << log.str();
  EXPECT_NE(host.describe().find("; spares: sp1, sp2"), std::string::npos) << host.describe();
  // Node 1 is lost: the first spare takes its place in the round.
  one.socket.reset();
  host.await_in_round(1, 0);
  EXPECT_EQ(serve_round_until(host, log, [&] { return host.peers()[0]->join.host == "sp1"; }),
            std::vector<int>{1})
      << log.str();
  EXPECT_NE(log.str().find("the spare node sp1 takes node 1's place (1 spare(s) left)"),
            std::string::npos)
      << log.str();
  EXPECT_EQ(host.peers()[0]->join.node_rank, 1);
  send_text(host.peers()[0]->socket.get(), format_round_start({0, 41000, 1, true}));
  sp1.thread.join();
  ASSERT_EQ(sp1.words.size(), 2u) << sp1.error;
  EXPECT_EQ(sp1.words[0].spare, 1);
  ASSERT_TRUE(sp1.words[1].start);
  EXPECT_TRUE(sp1.words[1].start->replaces);
  EXPECT_EQ(sp1.words[1].start->node_rank, 1);
  host.forget_in_round(1);
  // The second spare's ddprun ends: forgotten, and said.
  ::shutdown(sp2.fd.load(), SHUT_RDWR);
  EXPECT_TRUE(serve_round_until(host, log, [&] { return host.spares() == 0; }).empty());
  sp2.thread.join();
  ASSERT_EQ(sp2.words.size(), 1u) << sp2.error;
  EXPECT_EQ(sp2.words[0].spare, 2);
  EXPECT_NE(log.str().find("the spare node sp2 left (0 spare(s) left)"), std::string::npos)
      << log.str();
  // Two more wait, sp4 first. Between rounds, when nothing reads the spares, sp4 is stopped
  // (it says so and goes) and node 1 (sp1) leaves: the gather takes sp4's word as its
  // leaving, not as a node's stop, and the next spare takes node 1's place.
  Spare sp4;
  start_spare(sp4, "sp4", 2);
  EXPECT_TRUE(serve_round_until(host, log, [&] { return host.spares() == 1; }).empty());
  start_spare(sp3, "sp3", 2);
  EXPECT_TRUE(serve_round_until(host, log, [&] { return host.spares() == 2; }).empty());
  NodeEvent stopped;
  stopped.kind = NodeEvent::Kind::kStopped;
  stopped.signal = SIGTERM;
  stopped.code = 143;
  stopped.what = "stopped by SIGTERM";
  send_text(sp4.fd.load(), node_event_line(stopped));
  ::shutdown(sp4.fd.load(), SHUT_RDWR);
  sp4.thread.join();
  sp1.socket.reset();
  ASSERT_EQ(gather(host, 1, log, ended), RendezvousHost::Gathered::kAllJoined) << log.str();
  EXPECT_EQ(host.peers()[0]->join.host, "sp3");
  EXPECT_EQ(host.spares(), 0u);
  EXPECT_NE(log.str().find("the spare node sp4 left"), std::string::npos) << log.str();
  start_round(host, 1, 41001);
  host.end_job({0, ""});
  std::vector<int> fds;
  host.round_join_fds(fds);
  EXPECT_TRUE(fds.empty()) << "a job that ended takes no join";
  sp3.thread.join();
  ASSERT_EQ(sp3.words.size(), 2u) << sp3.error;
  ASSERT_TRUE(sp3.words[1].start);
  EXPECT_FALSE(sp3.words[1].start->replaces);
  EXPECT_EQ(sp3.words[1].start->round, 1);
}

// Another user floods node 0's port with more silent connections than it keeps waiting
// (512), from 127.0.0.2 (loopback addresses all count as this one host): the ones closed are
// silent ones of the busiest address, so a real node that connected before the flood (the
// oldest), its join under way, still joins once the rest of its line comes.
TEST(Rendezvous, AFloodPushesOutSilentConnectionsNotAJoinUnderWay) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "", 2, 1);
  std::ostringstream log;
  UniqueFd real = connect_tcp("127.0.0.1", port, 2000);
  ASSERT_TRUE(real.valid());
  set_blocking(real.get(), true);
  std::string greeting;
  char c = 0;
  for (int turn = 0; turn < 1000 && ::recv(real.get(), &c, 1, MSG_DONTWAIT) != 1; ++turn) {
    gather_turn(host, log);  // accepted and greeted in one of them
  }
  greeting += c;
  while (::recv(real.get(), &c, 1, 0) == 1 && c != '\n') greeting += c;
  ASSERT_TRUE(parse_greeting(greeting)) << greeting;
  JoinRequest join = join_of("run-a", "", 1, 2, "real").join;
  join.nonce = "real-nonce";
  const std::string line = format_join(join);
  send_text(real.get(), line.substr(0, 10));  // under way
  gather_turn(host, log);                     // read
  constexpr int kFlood = 600;
  std::vector<UniqueFd> flood;
  std::atomic<bool> flooded{false};
  std::thread flooding([&] {
    for (int i = 0; i < kFlood; ++i) {
      UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      sockaddr_in from{};
      from.sin_family = AF_INET;
      from.sin_addr.s_addr = htonl(0x7f000002);  // 127.0.0.2: another address on loopback
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons(static_cast<std::uint16_t>(port));
      to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
          ::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
        break;
      }
      flood.push_back(std::move(fd));
    }
    flooded = true;
  });
  const int evicted = kFlood + 1 - 512;
  gather_until(host, log, [&] { return flooded && host.refused() >= evicted; });
  flooding.join();
  ASSERT_EQ(flood.size(), static_cast<std::size_t>(kFlood));
  EXPECT_EQ(host.refused(), evicted) << log.str();
  send_text(real.get(), line.substr(10));  // the rest of its join
  NodeEvent ended;
  ASSERT_EQ(gather(host, 0, log, ended), RendezvousHost::Gathered::kAllJoined) << log.str();
  ASSERT_EQ(host.peers().size(), 1u);
  EXPECT_EQ(host.peers()[0]->join.host, "real");
}

// Out of descriptors during a round (a flood of connections, a low limit): node 0 takes no
// connection for a second, says so, and the round goes on; then it takes them again. (In a
// gather the same ends the job, saying so: no round could start.)
TEST(Rendezvous, OutOfDescriptorsDuringARoundRestsTheListenerAndTheRoundGoesOn) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "", 2, 1);
  host.set_restart_scope("rank");
  host.set_max_restarts(1);
  std::ostringstream log;
  TestJoin node1 = join_of("run-a", "", 1, 2, "one");
  node1.join.restart_scope = "rank";
  node1.join.max_restarts = 1;
  Peer one;
  std::thread joining([&] { run_peer(port, node1, one, false); });
  NodeEvent ended;
  ASSERT_EQ(gather(host, 0, log, ended), RendezvousHost::Gathered::kAllJoined) << log.str();
  joining.join();
  ASSERT_TRUE(one.socket.valid()) << one.error;
  start_round(host, 0, 41000);
  host.begin_round_joins(0);
  std::vector<int> fds;
  host.round_join_fds(fds);
  ASSERT_EQ(fds.size(), 1u);
  const int listener = fds[0];
  const UniqueFd waiting = connect_tcp("127.0.0.1", port, 2000);  // in the kernel's queue
  ASSERT_TRUE(waiting.valid());
  // The next descriptor would be over the limit.
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  const int lowest_free = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(lowest_free);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> joined;
  bool threw = false;
  try {
    joined = host.serve_round_joins(listener, log);
  } catch (const std::exception&) {
    threw = true;
  }
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_FALSE(threw) << "the round ended for want of a descriptor";
  EXPECT_TRUE(joined.empty());
  fds.clear();
  host.round_join_fds(fds);
  EXPECT_EQ(std::count(fds.begin(), fds.end(), listener), 0) << "the listener rests";
  const auto due = host.round_join_due();
  ASSERT_TRUE(due);
  EXPECT_LE(*due, RendezvousClock::now() + std::chrono::seconds(1));
  // Rested, it takes the connection that waited: greeted.
  const auto greeted = [&] {
    pollfd p{waiting.get(), POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  };
  serve_round_until(host, log, greeted);
  EXPECT_TRUE(greeted()) << log.str();
  // Said once the pause was over.
  EXPECT_NE(log.str().find("ddprun: rendezvous: out of file descriptors (the limit is "),
            std::string::npos)
      << log.str();
  EXPECT_NE(log.str().find("took no connection for 1 s; round 0 went on"), std::string::npos)
      << log.str();
}

// Nodes started with other node or worker counts are refused, each told why with both
// values, and the job waits on for the right node.
TEST(Rendezvous, JoinsThatDisagreeAreRefusedNamingBothValues) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "", 2, 4);
  std::ostringstream log;
  host.set_max_restarts(2);
  TestJoin rank_scope = join_of("run-a", "", 1, 2, "w", 4);
  rank_scope.join.restart_scope = "rank";
  TestJoin fewer_restarts = join_of("run-a", "", 1, 2, "v", 4);
  fewer_restarts.join.max_restarts = 0;
  auto refused = join_all(host, port, log,
                          {join_of("run-a", "", 1, 3, "x", 4), join_of("run-a", "", 1, 2, "y", 2),
                           rank_scope, fewer_restarts});
  Peer& three_nodes = refused[0];
  Peer& two_workers = refused[1];
  Peer right;
  std::thread good([&] { run_peer(port, join_of("run-a", "", 1, 2, "z", 4), right); });
  NodeEvent ended;
  ASSERT_EQ(gather(host, 0, log, ended), RendezvousHost::Gathered::kAllJoined) << log.str();
  start_round(host, 0, 41000);
  good.join();
  ASSERT_TRUE(right.word && right.word->start) << right.error;
  const auto told = [](Peer& peer) {
    auto word = wait_for_host(peer.socket.get(), "host", std::nullopt, -1, kNever);
    return word && word->end ? word->end->why : std::string("(nothing)");
  };
  const std::string nodes_why = told(three_nodes);
  EXPECT_NE(nodes_why.find("has 3 nodes (--nnodes), node 0 has 2"), std::string::npos) << nodes_why;
  const std::string workers_why = told(two_workers);
  EXPECT_NE(workers_why.find("has 2 workers (--nproc-per-node), node 0 has 4"), std::string::npos)
      << workers_why;
  const std::string scope_why = told(refused[2]);
  EXPECT_NE(scope_why.find("has --restart-scope rank, node 0 has job"), std::string::npos)
      << scope_why;
  const std::string restarts_why = told(refused[3]);
  EXPECT_NE(restarts_why.find("has --max-restarts 0, node 0 has 2; every node must allow as many"),
            std::string::npos)
      << restarts_why;
  EXPECT_NE(log.str().find("node 0 has 2"), std::string::npos) << log.str();
}

// What a peer sends is printed as data: terminal escapes and newlines in its host name and
// run id never reach node 0's output as control bytes.
TEST(Rendezvous, StringsFromPeersArePrintedWithoutControlBytes) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "", 2, 1);
  const std::string evil = "x\x1b[2J\nddprun: error: forged\r";
  std::ostringstream log;
  join_all(host, port, log,
           {join_of("run-" + evil, "", 1, 2, evil), join_of("run-a", "", 1, 5, evil)});
  Peer real;
  std::thread good([&] { run_peer(port, join_of("run-a", "", 1, 2, evil), real); });
  NodeEvent ended;
  ASSERT_EQ(gather(host, 0, log, ended), RendezvousHost::Gathered::kAllJoined);
  start_round(host, 0, 41000);
  good.join();
  const std::string said = log.str() + host.describe();
  EXPECT_NE(said.find("refused"), std::string::npos) << said;
  for (const char c : said) {
    const auto byte = static_cast<unsigned char>(c);
    EXPECT_TRUE(c == '\n' || (byte >= 0x20 && byte != 0x7f)) << "control byte " << int(byte);
  }
  EXPECT_EQ(said.find("\nddprun: error: forged"), std::string::npos) << said;
}

TEST(Rendezvous, ANodeThatNeverComesIsOneErrorNamingIt) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "", 3, 1);
  Peer node1;
  std::thread joiner([&] { run_peer(port, join_of("run-a", "", 1, 3), node1); });
  std::ostringstream log;
  NodeEvent ended;
  try {
    gather(host, 0, log, ended, std::chrono::milliseconds(1500));
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("only 2 of 3 nodes joined round 0"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("missing node(s): 2"), std::string::npos) << e.what();
  }
  joiner.join();
  // The node that came hears why, and ends with ddprun's error code.
  ASSERT_TRUE(node1.word && node1.word->end) << node1.error;
  EXPECT_NE(node1.word->end->why.find("only 2 of 3 nodes joined round 0"), std::string::npos);
  EXPECT_EQ(node1.word->end->code, kExitLauncherError);
}

// A process that listens on node 0's port before node 0's ddprun: it greets as a host
// would, records what the joining node sends, and says what a host says next.
struct Squatter {
  int port = pick_free_port();
  UniqueFd listener = listen_on(port);
  std::string heard;  // every byte the joining node sent
  // Accepts one connection, sends `greeting` (none when empty), reads the join line, then
  // sends `after` and keeps reading until the node closes.
  void serve(const std::string& greeting, const std::string& after) {
    const UniqueFd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) return;
    if (!greeting.empty()) send_text(fd.get(), greeting);
    bool answered = false;
    char chunk[512];
    for (;;) {
      const ssize_t got = ::recv(fd.get(), chunk, sizeof chunk, 0);
      if (got <= 0) return;
      heard.append(chunk, static_cast<std::size_t>(got));
      if (!answered && heard.find('\n') != std::string::npos) {
        send_text(fd.get(), after);
        answered = true;
      }
    }
  }
};

// Issue 40, finding 3: the joining node's secret never leaves it, and a squatter that
// cannot prove it holds the secret neither starts a round nor gives an exit code.
TEST(Rendezvous, ASquatterOnNode0sPortLearnsNothingOfTheSecretAndStartsNothing) {
  const std::string secret = "the-secret-0123456789";
  const std::string round = format_round_start({0, 31337, 1});
  const std::vector<std::pair<std::string, std::string>> answers = {
      {"a made-up proof, then a round", format_host_proof(std::string(64, '0')) + round},
      {"an empty proof, then a round", format_host_proof("") + round},
      {"a forged notice instead of a proof",
       format_job_end({kExitPreempted, "node 2 got a preemption notice"})},
      {"a round at once", round},
  };
  for (const auto& [what, after] : answers) {
    Squatter squatter;
    std::thread fake(
        [&, after = after] { squatter.serve(format_greeting(random_nonce()), after); });
    Peer node1;
    run_peer(squatter.port, join_of("run-a", secret, 1, 2), node1, true);
    node1.socket.reset();
    fake.join();
    EXPECT_FALSE(node1.word) << what;  // no round start, no end with a code
    EXPECT_NE(node1.error.find("the ddprun at 127.0.0.1:" + std::to_string(squatter.port)),
              std::string::npos)
        << what << ": " << node1.error;
    EXPECT_NE(squatter.heard.find("ddprun_join"), std::string::npos) << what;
    EXPECT_EQ(squatter.heard.find(secret), std::string::npos) << what << ": " << squatter.heard;
    EXPECT_EQ(squatter.heard.find("the-secret"), std::string::npos) << what;
  }
  // One that does not greet (a TCPStore, a listener of today's protocol) hears nothing.
  Squatter silent;
  std::thread fake([&] { silent.serve("", ""); });
  Peer node1;
  run_peer(silent.port, join_of("run-a", secret, 1, 2), node1, true,
           std::chrono::milliseconds(500));
  silent.listener.reset();
  fake.join();
  EXPECT_FALSE(node1.word);
  EXPECT_NE(node1.error.find("did not answer"), std::string::npos) << node1.error;
  EXPECT_EQ(silent.heard, "");
}

// Issue 40, finding 4: without the secret (none, or another) a process that knows the run
// id places no node; the real node still joins, and the refusals are counted.
TEST(Rendezvous, AJoinerWithoutTheSecretPlacesNoNode) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "s3cret", 2, 1);
  std::ostringstream log;
  const auto refused =
      join_all(host, port, log, {join_of("run-a", "", 1, 2), join_of("run-a", "s3cre7", 1, 2)});
  const Peer& none = refused[0];
  const Peer& other = refused[1];
  EXPECT_TRUE(host.peers().empty()) << log.str();
  EXPECT_FALSE(none.socket.valid());
  EXPECT_NE(none.error.find("refused this node's join before proving itself: refused: node 1 (n) "
                            "proves no rendezvous secret, and node 0 has one"),
            std::string::npos)
      << none.error;
  EXPECT_FALSE(other.socket.valid());
  EXPECT_NE(other.error.find("closed the connection at this node's join"), std::string::npos)
      << other.error;
  EXPECT_EQ(host.refused(), 2);
  Peer real;
  std::thread good([&] { run_peer(port, join_of("run-a", "s3cret", 1, 2), real); });
  NodeEvent ended;
  ASSERT_EQ(gather(host, 0, log, ended), RendezvousHost::Gathered::kAllJoined) << log.str();
  start_round(host, 0, 41000);
  good.join();
  ASSERT_TRUE(real.word && real.word->start) << real.error;
  // A host with no secret refuses a node that has one, and that node believes nothing.
  const int port2 = pick_free_port();
  RendezvousHost open_host(port2, "run-a", "", 2, 1);
  const auto secretive = join_all(open_host, port2, log, {join_of("run-a", "s3cret", 1, 2)});
  EXPECT_TRUE(open_host.peers().empty());
  EXPECT_NE(secretive[0].error.find("proves a rendezvous secret, and node 0 has none"),
            std::string::npos)
      << secretive[0].error;
}

// The bytes of a join captured on one connection (here by a squatter) prove nothing on
// another: the host's nonce differs.
TEST(Rendezvous, AReplayedJoinIsRefused) {
  Squatter squatter;
  std::thread fake([&] {
    squatter.serve(format_greeting(random_nonce()), format_host_proof(std::string(64, '0')));
  });
  Peer captured;
  run_peer(squatter.port, join_of("run-a", "s3cret", 1, 2), captured, false);
  fake.join();
  const std::string join = squatter.heard.substr(0, squatter.heard.find('\n') + 1);
  ASSERT_NE(join.find("\"proof\""), std::string::npos) << squatter.heard;
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "s3cret", 2, 1);
  std::string heard;
  std::atomic<bool> done{false};
  std::thread replay([&] {
    client(port, [&](int fd) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      char chunk[512];
      ssize_t got = ::recv(fd, chunk, sizeof chunk, 0);  // the greeting
      if (got > 0) heard.append(chunk, static_cast<std::size_t>(got));
      send_text(fd, join);
      while ((got = ::recv(fd, chunk, sizeof chunk, 0)) > 0) {
        heard.append(chunk, static_cast<std::size_t>(got));
      }
    });
    done = true;
  });
  std::ostringstream log;
  gather_until(host, log, [&] { return done.load(); });
  replay.join();
  EXPECT_TRUE(host.peers().empty());
  EXPECT_EQ(host.refused(), 1);
  EXPECT_NE(log.str().find("or a replayed join"), std::string::npos) << log.str();
  EXPECT_NE(heard.find("ddprun_rdzv"), std::string::npos) << heard;
  EXPECT_EQ(heard.find("ddprun_host"), std::string::npos) << heard;  // no proof, no reply
}

// A stop or a control request that node 0 sent for a round this node had already ended
// (its exit report crossed them): the node waits on for the next round, as before.
TEST(Rendezvous, APeerWaitingForTheNextRoundSkipsMessagesOfTheRoundItEnded) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  const std::string late =
      "{\"signal\":15}\n{\"control\":\"status\",\"id\":3}\n" + format_round_start({1, 29600, 1});
  ASSERT_EQ(::write(fds[1], late.data(), late.size()), static_cast<ssize_t>(late.size()));
  const auto word = wait_for_host(fds[0], "host", std::nullopt, -1, kNever);
  ASSERT_TRUE(word && word->start);
  EXPECT_EQ(word->start->round, 1);
  const std::string odd = "{\"hello\":1}\n";
  ASSERT_EQ(::write(fds[1], odd.data(), odd.size()), static_cast<ssize_t>(odd.size()));
  EXPECT_THROW(wait_for_host(fds[0], "host", std::nullopt, -1, kNever), ConfigError);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(Rendezvous, APeerWithNoHostFailsAtTheDeadlineAndAGoneHostEndsTheWait) {
  const int port = pick_free_port();  // nobody listens
  EXPECT_THROW(join_host("127.0.0.1", port, join_of("run-a", "", 1, 2).join, {},
                         RendezvousClock::now() + std::chrono::milliseconds(500), -1, kNever),
               ConfigError);
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  ::close(fds[1]);  // the host is gone
  EXPECT_FALSE(wait_for_host(fds[0], "host", std::nullopt, -1, kNever));
  ::close(fds[0]);
}

// The heartbeat (net.h), shortened: every 50 ms, lost after 500 ms of silence.
constexpr Heartbeat kQuickHeartbeat{std::chrono::milliseconds(50), std::chrono::milliseconds(500)};

// Between rounds a node waits for node 0's next word: node 0's heartbeats (empty lines)
// are not words, this node sends its own, and a node 0 that sends nothing at all (its
// ddprun stopped: the kernel still answers) ends the wait with an error saying so.
TEST(Rendezvous, APeerSkipsNode0sHeartbeatsSendsItsOwnAndLeavesANode0ThatSendsNothing) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  std::thread host([&] {
    for (int i = 0; i < 15; ++i) {  // 1.5 s of heartbeats, longer than the silence bound
      send_text(fds[1], "\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    send_text(fds[1], format_round_start({1, 29600, 1}));
  });
  const auto word = wait_for_host(fds[0], "host", std::nullopt, -1, kNever, kQuickHeartbeat);
  host.join();
  ASSERT_TRUE(word && word->start);
  EXPECT_EQ(word->start->round, 1);
  const auto started = RendezvousClock::now();
  try {
    (void)wait_for_host(fds[0], "host", std::nullopt, -1, kNever, kQuickHeartbeat);
    ADD_FAILURE() << "a silent node 0 was waited for";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("sent nothing in 0.5 s"), std::string::npos) << e.what();
  }
  EXPECT_GE(RendezvousClock::now() - started, kQuickHeartbeat.silent_after);
  char heard[4096];
  const ssize_t got = ::recv(fds[1], heard, sizeof heard, MSG_DONTWAIT);
  ASSERT_GT(got, 0);
  EXPECT_EQ(std::string(heard, static_cast<std::size_t>(got)),
            std::string(static_cast<std::size_t>(got), '\n'));  // heartbeats only
  EXPECT_GE(got, 20);
  ::close(fds[0]);
  ::close(fds[1]);
}

// While node 0 waits for a late node, a joined node whose ddprun sends nothing (stopped)
// is dropped as one that left, and the error at the deadline names it as missing; node 0
// sends the joined nodes its heartbeats meanwhile.
TEST(Rendezvous, AJoinedNodeThatSendsNothingWhileTheOthersGatherIsDropped) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "", 3, 1);
  host.set_heartbeat(kQuickHeartbeat);
  std::ostringstream log;
  const auto joined = join_all(host, port, log, {join_of("run-a", "", 1, 3, "frozen")});
  ASSERT_TRUE(joined[0].socket.valid()) << joined[0].error;
  NodeEvent ended;
  EXPECT_THROW(gather(host, 0, log, ended, std::chrono::milliseconds(1500)), ConfigError);
  EXPECT_NE(log.str().find("node 1 (frozen) sent nothing in 0.5 s before round 0 started"),
            std::string::npos)
      << log.str();
  EXPECT_TRUE(host.peers().empty());
  char heard[4096];
  const ssize_t got = ::recv(joined[0].socket.get(), heard, sizeof heard, MSG_DONTWAIT);
  ASSERT_GT(got, 0);
  EXPECT_GE(std::count(heard, heard + got, '\n'), 3)
      << std::string(heard, static_cast<std::size_t>(got));
}

}  // namespace
}  // namespace ddprun
