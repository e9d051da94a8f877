// The launchers' rendezvous (rendezvous.h): its messages from tables, and a host on
// loopback that real joins reach through hostile clients (random bytes, another job, a
// wrong token, a flood of connections, one that never sends), nodes that leave, come
// back, disagree, or are stopped or noticed while the others gather, all in this process.
#include "nodes/rendezvous.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <sstream>
#include <thread>

#include "ddprun/common/net.h"
#include "ddprun/contract/errors.h"
#include "job/rendezvous_job.h"
#include "nodes/ports.h"
#include "run/process.h"

namespace ddprun {
namespace {

TEST(Rendezvous, JoinsRoundTripAndAnythingElseIsRefusedWithAReason) {
  const JoinRequest join{"run-7", "tok", 2, 3, 4, "node3", 5};
  std::string why;
  std::string line = format_join(join);
  ASSERT_EQ(line.back(), '\n');
  line.pop_back();
  const auto back = parse_join(line, why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->run_id, "run-7");
  EXPECT_EQ(back->token, "tok");
  EXPECT_EQ(back->node_rank, 2);
  EXPECT_EQ(back->round, 3);
  EXPECT_EQ(back->nproc, 4);
  EXPECT_EQ(back->host, "node3");
  EXPECT_EQ(back->nnodes, 5);
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
      R"({"ddprun_join": 1, "run": "r", "node": 1, "round": 0, "nproc": 1, "host": "h", "token": 5})",
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
  EXPECT_EQ(parse_exit_report(R"({"exit": 75})"), 75);
  EXPECT_FALSE(parse_exit_report(R"({"exit": 300})"));
  EXPECT_FALSE(parse_exit_report("exit 3"));
}

// Opens a connection to the host and does `what` with it.
void client(int port, const std::function<void(int fd)>& what) {
  UniqueFd fd = connect_tcp("127.0.0.1", port, 2000);
  if (fd.valid()) what(fd.get());
}

void send_text(int fd, const std::string& text) {
  (void)!::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
}

JoinRequest join_of(const std::string& run, const std::string& token, int node, int nnodes,
                    const std::string& host = "n", int nproc = 1) {
  return JoinRequest{run, token, node, 0, nproc, host, nnodes};
}

const OnInterrupt kNever = [] { return PeerInterrupt{}; };

// A peer: joins, then waits for the host's first word (nullopt: the host closed).
struct Peer {
  UniqueFd socket;
  std::optional<HostWord> word;
  std::string error;  // a ConfigError's text
};
void run_peer(int port, const JoinRequest& join, Peer& peer, bool wait = true) {
  try {
    peer.socket = join_host("127.0.0.1", port, join,
                            RendezvousClock::now() + std::chrono::seconds(20), -1, kNever);
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

// Gathers in turns until a first node has joined (the others are not coming yet): a pipe
// that is always readable interrupts each turn.
void wait_for_first_join(RendezvousHost& host, std::ostringstream& log) {
  int always[2];
  ASSERT_EQ(::pipe(always), 0);
  ASSERT_EQ(::write(always[1], "x", 1), 1);
  NodeEvent ended;
  const auto until = RendezvousClock::now() + std::chrono::seconds(10);
  while (host.peers().empty() && RendezvousClock::now() < until) {
    ASSERT_EQ(host.gather(0, until, always[0], log, ended), RendezvousHost::Gathered::kInterrupted);
  }
  ::close(always[0]);
  ::close(always[1]);
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
    client(port, [](int fd) { send_text(fd, format_join(join_of("run-b", "s3cret", 1, 3))); });
  });
  threads.emplace_back([port] {
    client(port, [](int fd) { send_text(fd, format_join(join_of("run-a", "guess", 1, 3))); });
  });
  threads.emplace_back([port] {
    for (int i = 0; i < 100; ++i) client(port, [](int) {});  // a flood, closed at once
  });
  UniqueFd silent = connect_tcp("127.0.0.1", port, 2000);  // sends nothing, stays open
  ASSERT_TRUE(silent.valid());
  for (auto& t : threads) t.join();
  threads.clear();
  // The real nodes, each waiting for the round's start.
  std::vector<Peer> peers(3);
  for (int node = 1; node < 3; ++node) {
    threads.emplace_back([port, node, &peers] {
      run_peer(port, join_of("run-a", "s3cret", node, 3, "node" + std::to_string(node + 1), 2),
               peers[static_cast<std::size_t>(node)]);
    });
  }
  std::ostringstream log;
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
  EXPECT_NE(said.find("wrong DDPRUN_RDZV_TOKEN"), std::string::npos) << said;
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
TEST(Rendezvous, JoinsForAnyRankArePlacedInOrderOfArrival) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "", 4, 1);
  std::vector<Peer> peers(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      run_peer(port, join_of("run-a", "", -1, 4, "n" + std::to_string(i)),
               peers[static_cast<std::size_t>(i)]);
    });
  }
  std::ostringstream log;
  NodeEvent ended;
  ASSERT_EQ(gather(host, 0, log, ended), RendezvousHost::Gathered::kAllJoined) << log.str();
  ASSERT_EQ(host.peers().size(), 3u) << log.str();
  start_round(host, 0, 41000);
  for (auto& t : threads) t.join();
  std::vector<int> placed;
  for (const auto& peer : peers) {
    ASSERT_TRUE(peer.word && peer.word->start) << peer.error;
    placed.push_back(peer.word->start->node_rank);
  }
  std::sort(placed.begin(), placed.end());
  EXPECT_EQ(placed, (std::vector<int>{1, 2, 3}));
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
    Peer gone;
    run_peer(port, join_of("run-a", "", 1, 3, "old"), gone, false);
    ASSERT_TRUE(gone.socket.valid());
    // Taken in, but node 2 is missing: the short gather gives up (and tells node 1).
    EXPECT_THROW(gather(host, 0, log, ended, std::chrono::milliseconds(300)), ConfigError);
  }
  const int port2 = pick_free_port();
  RendezvousHost again(port2, "run-a", "", 3, 1);
  Peer dies;
  run_peer(port2, join_of("run-a", "", 1, 3, "first"), dies, false);
  Peer node2;
  std::thread second([&] { run_peer(port2, join_of("run-a", "", 2, 3, "two"), node2); });
  // Node 1 joined and died before node 2 came; it comes back as a new ddprun.
  wait_for_first_join(again, log);
  dies.socket.reset();
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

// Nodes started with other node or worker counts are refused, each told why with both
// values, and the job waits on for the right node.
TEST(Rendezvous, JoinsThatDisagreeAreRefusedNamingBothValues) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "", 2, 4);
  Peer three_nodes;
  Peer two_workers;
  run_peer(port, join_of("run-a", "", 1, 3, "x", 4), three_nodes, false);
  run_peer(port, join_of("run-a", "", 1, 2, "y", 2), two_workers, false);
  Peer right;
  std::thread good([&] { run_peer(port, join_of("run-a", "", 1, 2, "z", 4), right); });
  std::ostringstream log;
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
  EXPECT_NE(log.str().find("node 0 has 2"), std::string::npos) << log.str();
}

// What a peer sends is printed as data: terminal escapes and newlines in its host name and
// run id never reach node 0's output as control bytes.
TEST(Rendezvous, StringsFromPeersArePrintedWithoutControlBytes) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "", 2, 1);
  const std::string evil = "x\x1b[2J\nddprun: error: forged\r";
  Peer stranger;
  run_peer(port, join_of("run-" + evil, "", 1, 2, evil), stranger, false);
  Peer wrong_count;
  run_peer(port, join_of("run-a", "", 1, 5, evil), wrong_count, false);
  Peer real;
  std::thread good([&] { run_peer(port, join_of("run-a", "", 1, 2, evil), real); });
  std::ostringstream log;
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

TEST(Rendezvous, APeerWithNoHostFailsAtTheDeadlineAndAGoneHostEndsTheWait) {
  const int port = pick_free_port();  // nobody listens
  EXPECT_THROW(join_host("127.0.0.1", port, join_of("run-a", "", 1, 2),
                         RendezvousClock::now() + std::chrono::milliseconds(500), -1, kNever),
               ConfigError);
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  ::close(fds[1]);  // the host is gone
  EXPECT_FALSE(wait_for_host(fds[0], "host", std::nullopt, -1, kNever));
  ::close(fds[0]);
}

}  // namespace
}  // namespace ddprun
