#pragma once
// When the scheduler will end this job (its walltime), so that ddprun can drain the
// workers before it (docs/fault-tolerance.md). Pure: commands run through `run`.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/contract/environment.h"

namespace ddprun {

struct JobEndTime {
  std::int64_t unix_seconds = 0;  // when the scheduler will kill the job
  std::string source;             // where it came from, for the start line and --doctor
};

// Runs argv (looked up in PATH) and returns its stdout, or nullopt when it could not be
// run, failed or took too long.
using RunCommand = std::function<std::optional<std::string>(const std::vector<std::string>&)>;

// The end time of job `job_id` of `scheduler` ("slurm", "sge", "pbs", "lsf"; others:
// nullopt): from the environment where the scheduler puts it, else by asking the
// scheduler's tools. nullopt when the job has no limit or it cannot be learnt; never an
// end later than the scheduler's (a start time that cannot be read gives nullopt, not
// now + limit). `now_unix` is the current time (LSF gives only the time left).
//   slurm: SLURM_JOB_END_TIME, else `env SLURM_TIME_FORMAT=%s squeue -h -j ID -o %e`,
//          else `... scontrol show job ID` (EndTime=).
//   sge:   `qstat -j ID` (the shorter of h_rt and s_rt) + `qstat -xml -j ID` (the start
//          of task SGE_TASK_ID).
//   pbs:   `qstat -f ID`: PBS_WALLTIME or Resource_List.walltime, + stime / start_time.
//   lsf:   `bjobs -noheader -o time_left ID` ("H:MM L").
// Times printed in local time are read with mktime, so in this process's TZ (the tools
// run with the same environment). Calls `run` at most twice; throws only what `run`
// throws. Not thread-safe while another thread changes TZ.
std::optional<JobEndTime> job_end_time(const std::string& scheduler, const std::string& job_id,
                                       const Environment& env, const RunCommand& run,
                                       std::int64_t now_unix);

}  // namespace ddprun
