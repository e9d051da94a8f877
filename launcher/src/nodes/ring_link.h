#pragma once
// --check --bandwidth: the nodes stream to one another in a ring (node i to node i+1, the
// last to the first), all at the same time, as a ring all-reduce loads the links; each node
// times its outgoing link.

#include <chrono>
#include <cstdint>
#include <string>

namespace ddprun {

struct LinkMeasurement {
  std::int64_t bytes = 0;  // one round's bytes
  double seconds = 0;      // the fastest round: its first byte sent to its acknowledgement
  int rounds = 0;          // rounds acknowledged
  std::string error;       // empty: measured
  double mb_per_s() const { return seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0; }
};

// How a link is timed: rounds of `round_bytes`, each acknowledged by the next node with one
// byte. The fastest round counts: the first also times the next node's start-up (it reads
// nothing until its own outgoing link connects), and one round can lose its CPU to a
// neighbour. At least `min_rounds`; more while under `budget` since the first byte.
struct RingRounds {
  std::int64_t round_bytes = 32 << 20;
  int min_rounds = 2;
  int max_rounds = 8;
  std::chrono::milliseconds budget{1000};
};

// This node's part of the ring: `listener` (already listening: the previous node's
// connection is then taken by the kernel while this node still connects, so no start-up
// order can deadlock) accepts the previous node; this node connects to
// `next_host`:`next_port` (retrying until the deadline: the next node may not listen yet),
// sends its rounds to it while receiving the previous node's (acknowledging each, until that
// node closes its side), then closes its own side. Returns when both directions are done, or
// at the deadline with `error` saying what was missing. Event-driven (poll), one thread.
LinkMeasurement measure_ring_link(int listener, const std::string& next_host, int next_port,
                                  const RingRounds& rounds, std::chrono::milliseconds timeout);

}  // namespace ddprun
