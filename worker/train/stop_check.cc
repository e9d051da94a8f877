#include "stop_check.h"

#include <torch/torch.h>

#include <algorithm>

#include "ddprun/worker/communicator.h"
#include "ddprun/worker/stop_signals.h"

namespace ddprun::worker {

std::vector<int> stop_signal_numbers(const PreemptionConfig& config) {
  std::vector<int> numbers;
  for (const auto& name : config.signals) {
    if (const auto sig = stop_signal_number(name)) numbers.push_back(*sig);
  }
  return numbers;
}

StopCheck::StopCheck(Plane& control, std::int64_t fixed_every, bool enabled)
    : control_(control),
      fixed_(fixed_every),
      every_(fixed_every > 0 ? fixed_every : 1),
      enabled_(enabled) {}

bool StopCheck::after_step() {
  if (!enabled_ || ++since_ < every_) return false;
  const auto now = Clock::now();
  std::int64_t proposal = fixed_;
  if (fixed_ <= 0) {
    const double per_step =
        std::chrono::duration<double>(now - last_).count() / static_cast<double>(since_);
    proposal = per_step > 0 ? static_cast<std::int64_t>(kAutoCheckSeconds / per_step) : 1;
    proposal = std::clamp<std::int64_t>(proposal, 1, kAutoMaxSteps);
  }
  auto t = torch::tensor(
      {StopSignals::received() != 0 ? std::int64_t{1} : std::int64_t{0}, -proposal}, torch::kLong);
  control_.allreduce(t, ReduceOp::kMax);
  since_ = 0;
  last_ = now;
  every_ = -t[1].item<std::int64_t>();
  return t[0].item<std::int64_t>() != 0;
}

}  // namespace ddprun::worker
