#include "net.h"

#include <thread>

#include "ddprun/common/net.h"

namespace ddprun::worker {
namespace {

// A listener that accepts does so at once; a refused connection fails at once too.
constexpr int kConnectTimeoutMs = 1000;

}  // namespace

bool wait_for_listener(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(2);
  while (true) {
    if (can_connect(host, port, kConnectTimeoutMs)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace ddprun::worker
