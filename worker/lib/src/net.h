#pragma once
// Small socket helpers for the rendezvous. No LibTorch.

#include <chrono>
#include <string>

namespace ddprun::worker {

// Polls a TCP connect to host:port every few milliseconds until it is accepted or
// `timeout` passes. Returns whether it was accepted. LibTorch's TCPStore client retries
// in 1 s steps when the server is not listening yet; waiting here first avoids that.
bool wait_for_listener(const std::string& host, int port, std::chrono::milliseconds timeout);

}  // namespace ddprun::worker
