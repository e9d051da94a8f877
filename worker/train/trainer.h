#pragma once
// The training loop of ddp-train. No LibTorch in this header.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>

#include "config.h"
#include "ddprun/worker/env.h"

namespace ddprun::worker {

struct TrainingResult {
  // Stopped early on a preemption notice (config.preemption.signals) at a step every rank
  // agreed on, after a checkpoint when checkpoint.dir is set: exit with kExitPreempted.
  bool preempted = false;
  std::int64_t step = 0;  // optimizer steps done in total
};

// Joins the job, resumes from the latest checkpoint if any, trains as configured, and
// returns when done or preempted. Rank 0 writes one line per epoch to `out` (and the
// metrics file). While it runs, the preemption signals only set a flag (the previous
// dispositions come back when it returns). Collective: every rank of the job must call it.
// Throws on any error (ddprun::Error, c10::Error, std::system_error); a failure to save or
// load a checkpoint on any rank is thrown on every rank.
TrainingResult run_training(const Config& config, const WorkerEnv& env, std::ostream& out);

// A warm spare (is_spare, ddprun --warm-spare): loads the data as run_training would, then
// waits for `become` to give it a rank (become_rank on its stdin, read as a WorkerEnv) and
// trains as that rank's replacement. nullopt when `become` gave none: not needed (exit 0).
std::optional<TrainingResult> run_training_as_spare(
    const Config& config, std::ostream& out,
    const std::function<std::optional<WorkerEnv>()>& become);

}  // namespace ddprun::worker
