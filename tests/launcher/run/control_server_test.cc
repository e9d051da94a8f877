// The control socket's server (run/control_socket.h) on a real Unix socket in a fresh
// folder, with clients of this test's own: a client that sends nothing or sends slowly
// never holds the job's loop, and is let go once its time is over.
#include "run/control_socket.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace ddprun {
namespace {

using std::chrono::milliseconds;

UniqueFd connect_client(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address), 0)
      << std::strerror(errno);
  return fd;
}

void send_all(const UniqueFd& fd, const std::string& text) {
  ASSERT_EQ(::send(fd.get(), text.data(), text.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(text.size()));
}

// Whether the server closed `client`'s connection (EOF) rather than leaving it waiting.
bool closed_by_server(const UniqueFd& client) {
  char byte = 0;
  return ::recv(client.get(), &byte, 1, MSG_DONTWAIT) == 0;
}

bool still_waiting(const UniqueFd& client) {
  char byte = 0;
  return ::recv(client.get(), &byte, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN;
}

// The first request the server's loop gets while its descriptor is readable, as the
// job's loop takes them (each call is one turn; none may block).
std::optional<ControlRequest> next_request(ControlServer& server) {
  for (int turn = 0; turn < 50; ++turn) {
    pollfd ready{server.fd(), POLLIN, 0};
    if (::poll(&ready, 1, 5000) != 1) return std::nullopt;
    if (auto request = server.accept()) return request;
  }
  return std::nullopt;
}

struct Served : ::testing::Test {
  support::TempDir dir;
  std::string folder = dir.path() + "/control";
};

TEST_F(Served, SilentClientsDoNotHoldBackARequestNorAreTheyDroppedEarly) {
  ControlServer server(folder, "run.sock", false, std::chrono::seconds(60));
  ASSERT_GE(server.fd(), 0) << server.problem();
  std::vector<UniqueFd> silent;
  for (int i = 0; i < 3; ++i) silent.push_back(connect_client(server.path()));
  const UniqueFd asking = connect_client(server.path());
  send_all(asking, "status\n");
  const auto request = next_request(server);
  ASSERT_TRUE(request.has_value());
  EXPECT_EQ(request->verb, ControlVerb::kStatus);
  for (const UniqueFd& client : silent) EXPECT_TRUE(still_waiting(client));
}

TEST_F(Served, ARequestSentInPiecesIsTakenWhenWhole) {
  ControlServer server(folder, "run.sock", false, std::chrono::seconds(60));
  ASSERT_GE(server.fd(), 0) << server.problem();
  const UniqueFd client = connect_client(server.path());
  send_all(client, "st");
  pollfd ready{server.fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&ready, 1, 5000), 1);
  EXPECT_FALSE(server.accept().has_value());  // half a line: nothing yet, and no wait
  send_all(client, "op\n");
  const auto request = next_request(server);
  ASSERT_TRUE(request.has_value());
  EXPECT_EQ(request->verb, ControlVerb::kStop);
}

TEST_F(Served, AClientWhoseTimeIsOverIsLetGoAtTheNextTurn) {
  ControlServer server(folder, "run.sock", false, milliseconds(0));
  ASSERT_GE(server.fd(), 0) << server.problem();
  const UniqueFd silent = connect_client(server.path());
  EXPECT_FALSE(server.accept().has_value());  // taken, its time already over
  EXPECT_TRUE(still_waiting(silent));
  EXPECT_FALSE(server.accept().has_value());
  EXPECT_TRUE(closed_by_server(silent));
}

// A line that came while ddprun served another request is served, even when its time is
// over by the next turn: what was sent is read before anything is let go.
TEST_F(Served, ALineSentInTimeIsServedEvenWhenItsTurnComesLate) {
  ControlServer server(folder, "run.sock", false, milliseconds(0));
  ASSERT_GE(server.fd(), 0) << server.problem();
  const UniqueFd first = connect_client(server.path()), second = connect_client(server.path());
  send_all(first, "status\n");
  send_all(second, "stop\n");
  const auto served = next_request(server);
  ASSERT_TRUE(served.has_value());
  EXPECT_EQ(served->verb, ControlVerb::kStatus);
  const auto next = next_request(server);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->verb, ControlVerb::kStop);
}

TEST_F(Served, AtMostSoManyWaitAtOnceTheOldestIsLetGo) {
  ControlServer server(folder, "run.sock", false, std::chrono::seconds(60));
  ASSERT_GE(server.fd(), 0) << server.problem();
  std::vector<UniqueFd> silent;
  for (std::size_t i = 0; i <= ControlServer::kMaxPending; ++i) {
    silent.push_back(connect_client(server.path()));
  }
  EXPECT_FALSE(server.accept().has_value());
  EXPECT_TRUE(closed_by_server(silent.front()));
  for (std::size_t i = 1; i < silent.size(); ++i) EXPECT_TRUE(still_waiting(silent[i])) << i;
}

TEST_F(Served, AnUnknownRequestIsAnsweredWithTheVerbsAndNotServed) {
  ControlServer server(folder, "run.sock", false);
  ASSERT_GE(server.fd(), 0) << server.problem();
  const UniqueFd client = connect_client(server.path());
  send_all(client, "reboot\n");
  pollfd ready{server.fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&ready, 1, 5000), 1);
  EXPECT_FALSE(server.accept().has_value());
  char answer[128] = {};
  ASSERT_GT(::recv(client.get(), answer, sizeof answer - 1, 0), 0);
  EXPECT_STREQ(answer, "error: unknown request 'reboot' (status, stacks, stop or attach)\n");
}

}  // namespace
}  // namespace ddprun
