#pragma once
// The learning rate at each optimizer step (docs/config.md, optimizer.warmup_steps and
// optimizer.decay): a pure function of the step, so a resumed run follows it exactly. No
// LibTorch.

#include <cstdint>

#include "config.h"

namespace ddprun::worker {

// The rate for optimizer step `step` (0 = the first) of a run of `total_steps`: linear
// warm-up from lr/warmup_steps to lr over the first warmup_steps steps, then constant
// ("none"), a half cosine from lr down to min_lr at the last step ("cosine"), or lr times
// decay_gamma every decay_every steps ("step").
double learning_rate(const OptimizerConfig& optimizer, std::int64_t step, std::int64_t total_steps);

}  // namespace ddprun::worker
