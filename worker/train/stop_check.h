#pragma once
// Stopping on a preemption notice at a step every rank agrees on (docs/fault-tolerance.md):
// which signals count, and when the ranks compare notes.

#include <chrono>
#include <cstdint>
#include <vector>

#include "config.h"

namespace ddprun::worker {

class Plane;

// The numbers of `config.signals`, in order (names validate_config accepted).
std::vector<int> stop_signal_numbers(const PreemptionConfig& config);

// Decides, identically on every rank, after which steps the ranks agree whether to stop:
// one all-reduce (MAX) of {StopSignals::received() != 0, -next interval}. With a fixed
// interval the second element is that interval everywhere; in auto mode each rank proposes
// the number of steps that takes it about kAutoCheckSeconds and the smallest proposal wins.
// Keeps a reference to `control`. Not thread-safe.
class StopCheck {
 public:
  static constexpr double kAutoCheckSeconds = 0.1;
  static constexpr std::int64_t kAutoMaxSteps = 1000;

  // `fixed_every` > 0: agree every that many steps; otherwise auto. `enabled` false (no
  // preemption signals, the same on every rank): never checks, never communicates.
  StopCheck(Plane& control, std::int64_t fixed_every, bool enabled);

  // Call after every step, on every rank. True once all ranks have agreed to stop after
  // this step. Collective on the steps where they compare notes.
  bool after_step();

 private:
  using Clock = std::chrono::steady_clock;

  Plane& control_;
  std::int64_t fixed_;
  std::int64_t every_;
  bool enabled_;
  std::int64_t since_ = 0;
  Clock::time_point last_ = Clock::now();
};

}  // namespace ddprun::worker
