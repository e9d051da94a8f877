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

TEST(RingLink, ThreeNodesEachTimeTheirLinkToTheNext) {
  constexpr int kNodes = 3;
  constexpr std::int64_t kBytes = 8 << 20;
  std::vector<UniqueFd> listeners;
  for (int i = 0; i < kNodes; ++i) {
    listeners.push_back(listen_on(0));  // the kernel's choice: no port to race for
    ASSERT_TRUE(listeners.back().valid());
  }
  std::vector<LinkMeasurement> links(kNodes);
  std::vector<std::thread> nodes;
  for (int i = 0; i < kNodes; ++i) {
    nodes.emplace_back([&, i] {
      links[static_cast<std::size_t>(i)] =
          measure_ring_link(listeners[static_cast<std::size_t>(i)].get(), "127.0.0.1",
                            port_of(listeners[static_cast<std::size_t>((i + 1) % kNodes)]), kBytes,
                            std::chrono::seconds(20));
    });
  }
  for (auto& node : nodes) node.join();
  for (const auto& link : links) {
    EXPECT_EQ(link.error, "");
    EXPECT_EQ(link.bytes, kBytes);
    EXPECT_GT(link.seconds, 0);
    EXPECT_GT(link.mb_per_s(), 0);
  }
}

// The next node listens but never takes part: the deadline ends the wait, naming the link.
TEST(RingLink, ANextNodeThatNeverReadsEndsAtTheDeadlineNamingTheLink) {
  const UniqueFd mine = listen_on(0), silent = listen_on(0);
  ASSERT_TRUE(mine.valid() && silent.valid());
  const LinkMeasurement link = measure_ring_link(mine.get(), "127.0.0.1", port_of(silent), 64 << 20,
                                                 std::chrono::milliseconds(300));
  EXPECT_NE(link.error.find("the link to 127.0.0.1:" + std::to_string(port_of(silent)) +
                            " stalled after "),
            std::string::npos)
      << link.error;
  EXPECT_EQ(link.seconds, 0);
}

}  // namespace
}  // namespace ddprun
