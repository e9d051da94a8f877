#pragma once
// The training loop of ddp-train. No LibTorch in this header.

#include <iosfwd>

#include "ddprun/worker/config.h"
#include "ddprun/worker/env.h"

namespace ddprun::worker {

// Joins the job, resumes from the latest checkpoint if any, trains as configured, and
// returns when done. Rank 0 writes one line per epoch to `out` (and the metrics file).
// Collective: every rank of the job must call it. Throws on any error (ddprun::Error,
// c10::Error, std::system_error).
void run_training(const Config& config, const WorkerEnv& env, std::ostream& out);

}  // namespace ddprun::worker
