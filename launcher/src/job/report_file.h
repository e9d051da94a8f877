#pragma once
// The job's report file (--report FILE): the document of report/job_report.h, kept whole on
// the disk as the job goes: written once before round 0 (so that a path that cannot be
// written stops the job before it starts), again after every round's decision (a job
// killed later still leaves the rounds so far), and at the job's end. Every write replaces
// the whole file at once (replace_file), so a reader never sees a part. Not thread-safe.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "cli/options.h"
#include "plan/plan.h"
#include "report/job_report.h"
#include "report/round_result.h"

namespace ddprun {

// Whether this ddprun writes the job's report: --report was given, and it is node 0's (or
// the only) ddprun, not an agent; another node's ddprun leaves the file to node 0's.
bool writes_report(const Options& options, const PlanInputs& inputs);

// The report's start: the job, its nodes and its start (`started_unix`), and
// `inputs_seconds` from ddprun's start until now, before round 0 is made.
JobReport report_start(const Options& options, const PlanInputs& inputs, std::int64_t started_unix,
                       double inputs_seconds);

class ReportFile {
 public:
  // Writes `report` (no rounds yet) to `path`. Throws UsageError naming the path and why
  // when it cannot be written. Later failures to write are warned of on `warnings`, once.
  ReportFile(std::string path, JobReport report, std::ostream& warnings);

  // Adds the round run_job decided on (`result` null: the job ended before it started),
  // run on `hosts`: reads its workers' error and progress files (their stacks and traces
  // are left out) and rewrites the file; with the decision's exit code, the job has ended.
  void add_round(const RoundResult* result, const RoundDecision& decision,
                 std::vector<std::string> hosts);

 private:
  void ended(int code);
  void write();

  std::string path_;
  JobReport report_;
  std::ostream& warnings_;
  bool warned_ = false;
};

}  // namespace ddprun
