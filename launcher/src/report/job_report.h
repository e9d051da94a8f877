#pragma once
// The job's report (--report FILE; its schema in docs/report.md and docs/report.schema.json):
// one JSON document for job scripts and pipelines: the job and its nodes, every round with
// each child's end, peak memory, time and last step, the root cause with its error file,
// and why each round was or was not followed by another. Pure formatting: the caller reads
// the error and progress files, and job/report_file.h writes the document. Never throws
// but std::bad_alloc; thread-compatible, not signal-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "report/round_result.h"

namespace ddprun {

// The report's "schema": raised when a field changes meaning or goes; new fields keep it.
inline constexpr int kJobReportSchema = 1;

// What run_job decided after a round, or instead of one when the job ended before the
// round started (a stop while the nodes gathered, an error of ddprun's own).
struct RoundDecision {
  int round = 0;
  // Making the round: its plan, folders and, between nodes, the launchers' rendezvous.
  double prepare_seconds = 0;
  // From the first child's start until the last ended and its output was read.
  double run_seconds = 0;
  int round_code = 0;    // the exit code this round alone gives (exit_code_for)
  bool restart = false;  // another round follows
  // Why another round follows or not, in a few words: "restart 1 of 2", "no restart left
  // (--max-restarts 1)", "the workers stopped on a preemption notice".
  std::string why;
  std::optional<int> exit_code;  // ddprun's, when the job ends after this round
};

// One round as the report keeps it.
struct ReportRound {
  RoundDecision decision;
  // How the round ended; nullopt when it never started. Stacks and traces may be left out.
  std::optional<RoundResult> result;
  std::vector<std::string> hosts;  // the round's nodes in node order (a spare in its place)
  // The content of result->ranks[i].error_file and the step in its progress file, read
  // after the round; a shorter vector counts the missing entries as empty or none.
  std::vector<std::string> error_file_texts;
  std::vector<std::optional<long long>> steps;
};

struct ReportNode {
  std::string host;
  int slots = 1;
};

struct JobReport {
  std::string version;  // ddprun's
  std::string run_id;
  std::string job_id;             // the scheduler's; empty: none
  std::string scheduler;          // "local", "slurm", ...
  std::vector<ReportNode> nodes;  // the job's, in node order
  int this_node = 0;
  int max_restarts = 0;
  std::int64_t started_unix = 0;
  std::optional<std::int64_t> ended_unix;  // set when the job has ended
  // From ddprun's start until round 0 was prepared: the scheduler, nodes, the job's end.
  double inputs_seconds = 0;
  std::vector<ReportRound> rounds;
  std::optional<int> exit_code;  // ddprun's, once the job has ended
};

// The document for `report`, indented by two spaces and ending in '\n'. Text that is not
// UTF-8 (a worker's error file, stderr) has the bad bytes replaced.
std::string format_job_report(const JobReport& report);

}  // namespace ddprun
