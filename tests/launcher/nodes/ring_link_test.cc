// --check --bandwidth's ring on loopback: three "nodes" as threads, each with its own
// listener, stream to the next all at once; and a ring whose next node never answers.
#include "nodes/ring_link.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <thread>
#include <vector>

#include "nodes/ports.h"

namespace ddprun {
namespace {

int port_of(const UniqueFd& listener) {
  sockaddr_in address{};
  socklen_t len = sizeof address;
  ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &len);
  return ntohs(address.sin_port);
}

// Three "nodes" as threads, each with a listener on a port of the kernel's choice (no port
// to race for), node `late` starting its part a second after the others.
std::vector<LinkMeasurement> run_ring(const RingRounds& rounds, int late = -1) {
  constexpr int kNodes = 3;
  std::vector<UniqueFd> listeners;
  for (int i = 0; i < kNodes; ++i) listeners.push_back(listen_on(0));
  for (const auto& listener : listeners) EXPECT_TRUE(listener.valid());
  std::vector<LinkMeasurement> links(kNodes);
  std::vector<std::thread> nodes;
  for (int i = 0; i < kNodes; ++i) {
    nodes.emplace_back([&, i] {
      if (i == late) std::this_thread::sleep_for(std::chrono::seconds(1));  // the late start
      links[static_cast<std::size_t>(i)] =
          measure_ring_link(listeners[static_cast<std::size_t>(i)].get(), "127.0.0.1",
                            port_of(listeners[static_cast<std::size_t>((i + 1) % kNodes)]), rounds,
                            std::chrono::seconds(20));
    });
  }
  for (auto& node : nodes) node.join();
  return links;
}

TEST(RingLink, ThreeNodesEachTimeTheirLinkToTheNext) {
  RingRounds rounds;
  rounds.round_bytes = 4 << 20;
  rounds.min_rounds = 3;  // and no more: the budget is spent at once
  rounds.budget = std::chrono::milliseconds(0);
  for (const auto& link : run_ring(rounds)) {
    EXPECT_EQ(link.error, "");
    EXPECT_EQ(link.bytes, rounds.round_bytes);
    EXPECT_EQ(link.rounds, 3);
    EXPECT_GT(link.seconds, 0);
    EXPECT_GT(link.mb_per_s(), 0);
  }
}

// Node 1 starts its part a second late: node 0's first round waits that second in node 1's
// listener backlog, yet the link is the fastest round's; a generous budget stops at
// max_rounds.
TEST(RingLink, ALateNextNodeIsNotCountedInItsPreviousNodesLink) {
  RingRounds rounds;
  rounds.round_bytes = 4 << 20;
  rounds.min_rounds = 2;
  rounds.max_rounds = 3;
  rounds.budget = std::chrono::seconds(60);
  const auto links = run_ring(rounds, /*late=*/1);
  for (const auto& link : links) {
    EXPECT_EQ(link.error, "");
    EXPECT_EQ(link.rounds, 3);
  }
  EXPECT_LT(links[0].seconds, 0.9) << "node 0's link counted node 1's late start";
}

// A stray client that connects to this node's ring port and closes at once is not the
// previous node: an error, not a link measured with nothing received.
TEST(RingLink, AConnectionThatClosesBeforeItsRoundsIsAnError) {
  const UniqueFd mine = listen_on(0), next = listen_on(0);
  ASSERT_TRUE(mine.valid() && next.valid());
  {
    const UniqueFd stray(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port_of(mine)));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(stray.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  }
  const LinkMeasurement link = measure_ring_link(mine.get(), "127.0.0.1", port_of(next),
                                                 RingRounds{}, std::chrono::seconds(20));
  EXPECT_EQ(link.error, "the previous node's connection closed early");
}

// The next node listens but never takes part: the deadline ends the wait, naming the link.
TEST(RingLink, ANextNodeThatNeverReadsEndsAtTheDeadlineNamingTheLink) {
  const UniqueFd mine = listen_on(0), silent = listen_on(0);
  ASSERT_TRUE(mine.valid() && silent.valid());
  const LinkMeasurement link = measure_ring_link(mine.get(), "127.0.0.1", port_of(silent),
                                                 RingRounds{}, std::chrono::milliseconds(300));
  EXPECT_NE(link.error.find("the link to 127.0.0.1:" + std::to_string(port_of(silent)) +
                            " stalled after "),
            std::string::npos)
      << link.error;
  EXPECT_EQ(link.seconds, 0);
}

}  // namespace
}  // namespace ddprun
