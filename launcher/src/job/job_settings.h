#pragma once
// The one place where the command line becomes the job's policy (job.h): the grace, the
// exit and stall timeouts, stacks, the drain before the walltime, restarts, and what is
// printed. Pure.

#include <cstdint>
#include <optional>

#include "cli/options.h"
#include "plan/deadline.h"
#include "policy/supervision.h"

namespace ddprun {

// `job_end`: the job's end when known (deadline.h); `now_unix` and `now` are the same
// instant on the two clocks; `colour`: "error:" in bold red.
JobSettings job_settings(const Options& options, const std::optional<JobEndTime>& job_end,
                         std::int64_t now_unix, RunnerClock::time_point now, bool colour);

}  // namespace ddprun
