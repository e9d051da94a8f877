#pragma once
// Finding the rank that holds the job back. DDP's all-reduce makes every rank's wall time
// per step the same, so wall time cannot tell; the time each rank waits for gradient
// communication can: the slow rank waits least, its peers wait for it. Each rank's compute
// time per step (its step's wall time less that wait) is compared with the median of all
// ranks'. Pure: the trainer gathers the times (one small all-reduce per window).

#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::worker {

struct RankTimes {
  double compute_s = 0;  // summed over `steps`
  double wait_s = 0;
  std::int64_t steps = 0;
  double compute_per_step() const { return steps > 0 ? compute_s / static_cast<double>(steps) : 0; }
  double wait_per_step() const { return steps > 0 ? wait_s / static_cast<double>(steps) : 0; }
};

struct Straggler {
  int rank = 0;
  double compute_per_step = 0;  // seconds
  double median = 0;            // of every rank's compute per step
  double others_wait = 0;       // the median of the other ranks' wait per step
};

// Ranks whose compute per step is at least `ratio` times the median of all ranks' and at
// least `floor_s` above it (differences of microseconds are noise), slowest first.
std::vector<Straggler> find_stragglers(const std::vector<RankTimes>& ranks, double ratio = 1.1,
                                       double floor_s = 0.0005);

// "ddp-train: straggler: rank 2 on node1 computes 31.2 ms a step, 1.42x the median 22.0 ms;
// the others wait 9.1 ms a step (window ending at step 20)". No newline.
std::string straggler_line(const Straggler& straggler, const std::string& host, std::int64_t step);

// Steps in the next window: about `target_s` of the slowest rank's steps, 10 to 1000.
// The same on every rank when given the same gathered times.
std::int64_t next_window(const std::vector<RankTimes>& ranks, double target_s = 0.1);

// The end-of-run table, one line per rank: compute and wait per step in ms, a mark at
// the stragglers. Lines start with "ddp-train: " and end in '\n'.
std::string timing_table(const std::vector<RankTimes>& ranks,
                         const std::vector<std::string>& hosts);

}  // namespace ddprun::worker
