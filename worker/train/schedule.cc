#include "schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace ddprun::worker {

double learning_rate(const OptimizerConfig& o, std::int64_t step, std::int64_t total_steps) {
  if (step < o.warmup_steps) {
    return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  }
  const std::int64_t after = step - o.warmup_steps;
  if (o.decay == "cosine") {
    const std::int64_t span = std::max<std::int64_t>(1, total_steps - 1 - o.warmup_steps);
    const double done = std::min(1.0, static_cast<double>(after) / static_cast<double>(span));
    return o.min_lr + (o.lr - o.min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * done));
  }
  if (o.decay == "step") {
    return o.lr * std::pow(o.decay_gamma, static_cast<double>(after / o.decay_every));
  }
  return o.lr;
}

}  // namespace ddprun::worker
