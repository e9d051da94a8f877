#pragma once
// --check --bandwidth: the nodes stream to one another in a ring (node i to node i+1, the
// last to the first), all at the same time, as a ring all-reduce loads the links; each node
// times its outgoing link.

#include <chrono>
#include <cstdint>
#include <string>

namespace ddprun {

struct LinkMeasurement {
  std::int64_t bytes = 0;  // sent to the next node
  double seconds = 0;      // from the first byte sent to the next node's acknowledgement
  std::string error;       // empty: measured
  double mb_per_s() const { return seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0; }
};

// This node's part of the ring: `listener` (already listening: the previous node's
// connection is then taken by the kernel while this node still connects, so no start-up
// order can deadlock) accepts the previous node; this node connects to
// `next_host`:`next_port` (retrying until the deadline: the next node may not listen yet),
// sends `bytes` to it while receiving the previous node's bytes, and acknowledges those
// with one byte. Returns when both directions are done, or at the deadline with `error`
// saying what was missing. Event-driven (poll), one thread.
LinkMeasurement measure_ring_link(int listener, const std::string& next_host, int next_port,
                                  std::int64_t bytes, std::chrono::milliseconds timeout);

}  // namespace ddprun
