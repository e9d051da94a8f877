// The launchers' rendezvous (rendezvous.h): its messages from tables, and a host on
// loopback that real joins reach through hostile clients (random bytes, another job, a
// wrong token, a flood of connections, one that never sends), all in this process.
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
  const JoinRequest join{"run-7", "tok", 2, 3, 4, "node3"};
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
  const std::vector<std::string> bad = {
      "",
      "\x01\x02\xff garbage",
      "[1,2,3]",
      R"({"ddprun_join": 2, "run": "r", "node": 1, "round": 0, "nproc": 1, "host": "h"})",
      R"({"ddprun_join": 1, "run": 7, "node": 1, "round": 0, "nproc": 1, "host": "h"})",
      R"({"ddprun_join": 1, "run": "r", "node": -2, "round": 0, "nproc": 1, "host": "h"})",
      R"({"ddprun_join": 1, "run": "r", "node": 1, "round": 0, "nproc": 0, "host": "h"})",
      R"({"ddprun_join": 1, "run": "r", "node": 1, "round": 0, "nproc": 1})",
      R"({"ddprun_join": 1, "run": "r", "node": 1.5, "round": 0, "nproc": 1, "host": "h"})",
      R"({"ddprun_join": 1, "run": "r", "node": 1, "round": 0, "nproc": 1, "host": "h", "token": 5})",
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

TEST(Rendezvous, RealNodesJoinThroughHostileClientsAndGetTheRoundsStart) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "s3cret", 3);
  std::vector<std::thread> threads;
  // Hostile first: they are all there before the real nodes come.
  threads.emplace_back([port] {
    std::mt19937 random(7);
    std::string noise(10000, '\0');
    for (char& c : noise) c = static_cast<char>(random());
    client(port, [&](int fd) { send_text(fd, noise); });
  });
  threads.emplace_back([port] {
    client(port, [](int fd) { send_text(fd, format_join({"run-b", "s3cret", 1, 0, 1, "x"})); });
  });
  threads.emplace_back([port] {
    client(port, [](int fd) { send_text(fd, format_join({"run-a", "guess", 1, 0, 1, "x"})); });
  });
  threads.emplace_back([port] {
    for (int i = 0; i < 100; ++i) client(port, [](int) {});  // a flood, closed at once
  });
  UniqueFd silent = connect_tcp("127.0.0.1", port, 2000);  // sends nothing, stays open
  ASSERT_TRUE(silent.valid());
  for (auto& t : threads) t.join();
  threads.clear();
  // The real nodes, each waiting for the round's start.
  std::vector<std::optional<PeerRound>> rounds(3);
  for (int node = 1; node < 3; ++node) {
    threads.emplace_back([port, node, &rounds] {
      const JoinRequest join{"run-a", "s3cret", node, 0, 2, "node" + std::to_string(node + 1)};
      rounds[static_cast<std::size_t>(node)] = join_round(
          "127.0.0.1", port, join, RendezvousClock::now() + std::chrono::seconds(20), -1);
    });
  }
  std::ostringstream log;
  auto peers = host.gather(0, RendezvousClock::now() + std::chrono::seconds(20), -1, log);
  ASSERT_TRUE(peers);
  ASSERT_EQ(peers->size(), 2u) << log.str();
  EXPECT_EQ((*peers)[0].join.node_rank, 1);
  EXPECT_EQ((*peers)[1].join.node_rank, 2);
  EXPECT_EQ((*peers)[1].join.host, "node3");
  for (const auto& peer : *peers) {
    send_text(peer.socket.get(), format_round_start({0, 41234, peer.join.node_rank}));
  }
  for (auto& t : threads) t.join();
  for (int node = 1; node < 3; ++node) {
    ASSERT_TRUE(rounds[static_cast<std::size_t>(node)]) << node;
    EXPECT_EQ(rounds[static_cast<std::size_t>(node)]->start.master_port, 41234);
  }
  const std::string said = log.str();
  EXPECT_NE(said.find("a join for run 'run-b', not this one"), std::string::npos) << said;
  EXPECT_NE(said.find("wrong DDPRUN_RDZV_TOKEN"), std::string::npos) << said;
}

// c10d by hand: joins for any rank get the lowest ranks still free, in order of arrival.
TEST(Rendezvous, JoinsForAnyRankArePlacedInOrderOfArrival) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "", 4);
  std::vector<std::optional<PeerRound>> rounds(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      const JoinRequest join{"run-a", "", -1, 0, 1, "n" + std::to_string(i)};
      rounds[static_cast<std::size_t>(i)] = join_round(
          "127.0.0.1", port, join, RendezvousClock::now() + std::chrono::seconds(20), -1);
    });
  }
  std::ostringstream log;
  auto peers = host.gather(0, RendezvousClock::now() + std::chrono::seconds(20), -1, log);
  ASSERT_TRUE(peers);
  ASSERT_EQ(peers->size(), 3u) << log.str();
  for (const auto& peer : *peers) {
    send_text(peer.socket.get(), format_round_start({0, 41000, peer.join.node_rank}));
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(rounds[0] && rounds[1] && rounds[2]) << log.str();
  std::vector<int> placed;
  for (const auto& round : rounds) placed.push_back(round->start.node_rank);
  std::sort(placed.begin(), placed.end());
  EXPECT_EQ(placed, (std::vector<int>{1, 2, 3}));
}

// Node 0 waiting for the others: a child's end or a notice does not end the wait; a stop
// signal does, and stays pending for the round.
TEST(Rendezvous, OnlyAStopSignalEndsNode0sWait) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "", 2);
  SignalChannel signals;
  ASSERT_EQ(::raise(SIGUSR2), 0);  // pending before the wait begins
  std::thread node1([port] {
    (void)join_round("127.0.0.1", port, {"run-a", "", 1, 0, 1, "n2"},
                     RendezvousClock::now() + std::chrono::seconds(10), -1);
  });
  std::ostringstream log;
  auto peers = gather_peers(host, 0, RendezvousClock::now() + std::chrono::seconds(10), signals, {},
                            false, log);
  ASSERT_EQ(peers.size(), 1u);
  send_text(peers[0].socket.get(), format_round_start({0, 41000, 1}));
  node1.join();
  ASSERT_EQ(::raise(SIGTERM), 0);
  EXPECT_TRUE(gather_peers(host, 1, RendezvousClock::now() + std::chrono::seconds(10), signals, {},
                           false, log)
                  .empty());
  EXPECT_EQ(signals.read_signal(), SIGTERM);  // raised again, for the round to see
  EXPECT_EQ(signals.read_signal(), 0);
}

// A closed terminal while node 0 waits (SIGHUP detaches, docs/launching.md): the wait goes
// on until every node is in, and the SIGHUP is pending again for the round's runner.
TEST(Rendezvous, AHangupThatDetachesDoesNotEndNode0sWait) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-h", "", 2);
  SignalChannel signals;
  ASSERT_EQ(::raise(SIGHUP), 0);  // pending before the wait begins
  std::thread node1([port] {
    (void)join_round("127.0.0.1", port, {"run-h", "", 1, 0, 1, "n2"},
                     RendezvousClock::now() + std::chrono::seconds(10), -1);
  });
  std::ostringstream log;
  auto peers = gather_peers(host, 0, RendezvousClock::now() + std::chrono::seconds(10), signals, {},
                            true, log);
  ASSERT_EQ(peers.size(), 1u);
  send_text(peers[0].socket.get(), format_round_start({0, 41000, 1}));
  node1.join();
  EXPECT_EQ(signals.read_signal(), SIGHUP);  // for the round, which detaches
  EXPECT_EQ(signals.read_signal(), 0);
}

TEST(Rendezvous, ANodeThatNeverComesIsOneErrorNamingIt) {
  const int port = pick_free_port();
  RendezvousHost host(port, "run-a", "", 3);
  std::string node1_told;
  std::thread node1([port, &node1_told] {
    try {
      (void)join_round("127.0.0.1", port, {"run-a", "", 1, 0, 1, "n2"},
                       RendezvousClock::now() + std::chrono::seconds(10), -1);
    } catch (const ConfigError& e) {
      node1_told = e.what();  // the host gave up: the node that came hears why
    }
  });
  std::ostringstream log;
  try {
    host.gather(0, RendezvousClock::now() + std::chrono::milliseconds(1500), -1, log);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("only 2 of 3 nodes joined round 0"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("missing node(s): 2"), std::string::npos) << e.what();
  }
  node1.join();
  EXPECT_NE(node1_told.find("gave up: only 2 of 3 nodes joined round 0"), std::string::npos)
      << node1_told;
}

TEST(Rendezvous, APeerWithNoHostForRoundZeroFailsAtTheDeadlineAndLaterRoundsEnd) {
  const int port = pick_free_port();  // nobody listens
  EXPECT_THROW(join_round("127.0.0.1", port, {"run-a", "", 1, 0, 1, "n2"},
                          RendezvousClock::now() + std::chrono::milliseconds(500), -1),
               ConfigError);
  EXPECT_FALSE(join_round("127.0.0.1", port, {"run-a", "", 1, 1, 1, "n2"},
                          RendezvousClock::now() + std::chrono::seconds(5), -1));
}

}  // namespace
}  // namespace ddprun
