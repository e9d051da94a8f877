#pragma once
// The job's end (its walltime) and when to drain before it (docs/fault-tolerance.md):
// --deadline, --time-limit, or what the scheduler says (schedulers/walltime.h). Parsing
// is pure; the scheduler's tools run through the RunCommand passed in.

#include <cstdint>
#include <optional>
#include <string>

#include "ddprun/contract/environment.h"
#include "walltime.h"

namespace ddprun {

// --deadline: unix seconds ("1795000000") or local time "YYYY-MM-DDTHH:MM[:SS]" (a space
// may stand for the T). Throws UsageError.
std::int64_t parse_deadline(const std::string& text);

// --time-limit and --drain-before: seconds ("600", "90.5" rounds down), or [[D-]HH:]MM:SS
// as Slurm writes limits ("1:30:00", "2-00:00:00"). Throws UsageError naming `option`.
std::int64_t parse_duration(const std::string& option, const std::string& text);

// The job's end: --deadline (unix seconds), else --time-limit (seconds) from `now_unix`,
// else the scheduler's.
std::optional<JobEndTime> resolve_job_end(std::optional<std::int64_t> deadline_unix,
                                          std::optional<std::int64_t> time_limit_s,
                                          const std::string& scheduler, const std::string& job_id,
                                          const Environment& env, const RunCommand& run,
                                          std::int64_t now_unix);

// When the notice goes out: `drain_before_s` before the end, but never before half of
// what is left at `now_unix` has passed (a short job, or a restart late in it, still
// trains before it is told to stop).
std::int64_t drain_time(std::int64_t end_unix, std::int64_t drain_before_s, std::int64_t now_unix);

// "ddprun: the job ends at 2026-11-23 19:00:00 (squeue); workers get SIGUSR1 at 18:55:00,
// 300 s before" (and a warning when less than twice that is left), with a newline.
std::string format_drain_line(const JobEndTime& end, std::int64_t drain_before_s, int drain_signal,
                              std::int64_t now_unix);

}  // namespace ddprun
