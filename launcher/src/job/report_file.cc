#include "job/report_file.h"

#include <ctime>
#include <system_error>
#include <utility>

#include "ddprun/common/files.h"
#include "ddprun/contract/errors.h"
#include "ddprun/contract/version.h"

namespace ddprun {

bool writes_report(const Options& options, const PlanInputs& inputs) {
  return options.report && !options.agent && inputs.cluster.this_node.value_or(0) == 0;
}

JobReport report_start(const Options& options, const PlanInputs& inputs, std::int64_t started_unix,
                       double inputs_seconds) {
  JobReport report;
  report.version = kVersion;
  report.run_id = inputs.run_id;
  report.job_id = inputs.cluster.job_id;
  report.scheduler = inputs.cluster.scheduler;
  for (const NodeSlots& node : inputs.cluster.nodes)
    report.nodes.push_back({node.host, node.slots});
  report.this_node = inputs.cluster.this_node.value_or(0);
  report.max_restarts = options.max_restarts;
  report.started_unix = started_unix;
  report.inputs_seconds = inputs_seconds;
  return report;
}

ReportFile::ReportFile(std::string path, JobReport report, std::ostream& warnings)
    : path_(std::move(path)), report_(std::move(report)), warnings_(warnings) {
  try {
    replace_file(path_, format_job_report(report_));
  } catch (const std::system_error& e) {
    throw UsageError("--report " + path_ + ": cannot write the job's report: " + e.what(),
                     "name a file in a folder you can write");
  }
}

void ReportFile::add_round(const RoundResult* result, const RoundDecision& decision,
                           std::vector<std::string> hosts) {
  ReportRound& round = report_.rounds.emplace_back();
  round.decision = decision;
  round.hosts = std::move(hosts);
  if (result != nullptr) {
    RoundResult& kept = round.result.emplace(*result);
    for (RankResult& rank : kept.ranks) {
      rank.stacks.reset();  // in the stacks logs and on the console; too long for a report
      rank.trace.reset();
      // Read as the round ended; kept once, here, not in the rank as well.
      round.error_file_texts.push_back(std::move(rank.error_text));
      round.steps.push_back(rank.agent ? std::nullopt : rank.last_step);
    }
  }
  if (decision.exit_code) {
    ended(*decision.exit_code);
  } else {
    write();
  }
}

void ReportFile::ended(int code) {
  report_.exit_code = code;
  report_.ended_unix = static_cast<std::int64_t>(std::time(nullptr));
  write();
}

void ReportFile::write() {
  try {
    replace_file(path_, format_job_report(report_));
  } catch (const std::system_error& e) {
    if (!warned_) {
      warnings_ << "ddprun: warning: --report " << path_
                << ": cannot write the job's report: " << e.what() << "\n";
    }
    warned_ = true;
  }
}

}  // namespace ddprun
