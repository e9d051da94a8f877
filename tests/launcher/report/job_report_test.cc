// The job's report (report/job_report.h) from plain structs: no process, no file.
#include "report/job_report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fake_runner.h"

namespace ddprun {
namespace {

using nlohmann::json;
using testing::exited;
using testing::killed;

RankResult worker(int rank, int wait_status, double seconds, long rss_kb) {
  RankResult child;
  child.rank = rank;
  child.local_rank = rank;
  child.host = "gpu1";
  child.pid = 1000 + rank;
  child.started = true;
  child.exited = true;
  child.wait_status = wait_status;
  child.run_seconds = seconds;
  child.max_rss_kb = rss_kb;
  child.error_file = "/logs/rank_" + std::to_string(rank) + ".error.json";
  return child;
}

const std::string kErrorFile =
    R"({"message": {"message": "RuntimeError: CUDA out of memory", )"
    R"("extraInfo": {"py_callstack": "Traceback: line 3", "timestamp": "1"}}})";

// Round 0: rank 1 fails first (exit 3, its error file), rank 0 is stopped by ddprun's
// SIGTERM; restarted. Round 1: both exit 0.
JobReport two_rounds() {
  JobReport report;
  report.version = "0.9.0";
  report.run_id = "abc";
  report.scheduler = "local";
  report.nodes = {{"gpu1", 2}};
  report.max_restarts = 1;
  report.started_unix = 1700000000;
  report.inputs_seconds = 0.25;

  ReportRound& failed = report.rounds.emplace_back();
  failed.decision.round = 0;
  failed.decision.prepare_seconds = 0.5;
  failed.decision.run_seconds = 12.0;
  failed.decision.round_code = 3;
  failed.decision.restart = true;
  failed.decision.why = "restart 1 of 1";
  failed.hosts = {"gpu1"};
  RoundResult& result = failed.result.emplace();
  result.outcome = Outcome::kWorkerFailed;
  result.first_failure = 1;
  result.spawn_seconds = 0.125;
  result.ranks = {worker(0, killed(SIGTERM), 11.5, 2048), worker(1, exited(3), 11.0, 4096)};
  result.ranks[1].stderr_tail = {"Traceback (most recent call last):", "RuntimeError: CUDA"};
  failed.error_file_texts = {"", kErrorFile};
  failed.steps = {120, 118};

  ReportRound& passed = report.rounds.emplace_back();
  passed.decision.round = 1;
  passed.decision.round_code = 0;
  passed.decision.why = "every worker exited 0";
  passed.decision.exit_code = 0;
  passed.hosts = {"gpu1"};
  passed.result.emplace().ranks = {worker(0, exited(0), 30, 2048), worker(1, exited(0), 30, 4096)};
  passed.steps = {200};  // rank 1's progress file was missing
  report.exit_code = 0;
  report.ended_unix = 1700000050;
  return report;
}

json parsed(const JobReport& report) {
  const std::string text = format_job_report(report);
  EXPECT_EQ(text.back(), '\n');
  return json::parse(text);
}

TEST(JobReport, NamesTheJobItsNodesAndEveryRoundWithWhyItWasRestarted) {
  const json doc = parsed(two_rounds());
  EXPECT_EQ(doc["schema"], kJobReportSchema);
  EXPECT_EQ(doc["run_id"], "abc");
  EXPECT_TRUE(doc["job_id"].is_null());
  EXPECT_EQ(doc["nodes"], json::parse(R"([{"node": 0, "host": "gpu1", "slots": 2}])"));
  EXPECT_EQ(doc["state"], "ended");
  EXPECT_EQ(doc["exit_code"], 0);
  EXPECT_EQ(doc["restarts"], 1);
  EXPECT_EQ(doc["end"], "every worker exited 0");
  EXPECT_TRUE(doc["root_cause"].is_null());  // the job succeeded
  ASSERT_EQ(doc["rounds"].size(), 2u);
  const json& first = doc["rounds"][0];
  EXPECT_EQ(first["outcome"], "failed");
  EXPECT_EQ(first["exit_code"], 3);
  EXPECT_EQ(first["restarted"], true);
  EXPECT_EQ(first["decision"], "restart 1 of 1");
  EXPECT_EQ(first["spawn_seconds"], 0.125);
  EXPECT_EQ(doc["rounds"][1]["outcome"], "succeeded");
  EXPECT_EQ(doc["rounds"][1]["restarted"], false);
  EXPECT_EQ(doc["startup"], json::parse(R"([{"phase": "inputs", "seconds": 0.25},
      {"phase": "prepare", "seconds": 0.5}, {"phase": "spawn", "seconds": 0.125}])"));
}

// The start-up's last phase ends at round 0's last first step, naming that rank; a later
// round's steps are not the start-up's.
TEST(JobReport, TheFirstStepPhaseNamesTheLastRankToReachItInRoundZero) {
  JobReport report = two_rounds();
  report.rounds[0].result->ranks[0].first_step_seconds = 1.5;
  report.rounds[0].result->ranks[1].first_step_seconds = 3.25;
  report.rounds[0].result->ranks[1].host = "gpu2";
  report.rounds[1].result->ranks[0].first_step_seconds = 9.0;
  const json doc = parsed(report);
  ASSERT_EQ(doc["startup"].size(), 4u);
  EXPECT_EQ(doc["startup"][3],
            json::parse(R"({"phase": "first_step", "seconds": 3.25, "rank": 1, "host": "gpu2"})"));
  EXPECT_EQ(doc["rounds"][0]["ranks"][0]["first_step_seconds"], 1.5);
  EXPECT_EQ(doc["rounds"][1]["ranks"][0]["first_step_seconds"], 9.0);
  EXPECT_TRUE(doc["rounds"][1]["ranks"][1]["first_step_seconds"].is_null());
}

TEST(JobReport, EachRankHasItsHostPidEndPeakMemoryTimeAndLastStep) {
  const json doc = parsed(two_rounds());
  const json& ranks = doc["rounds"][0]["ranks"];
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0]["host"], "gpu1");
  EXPECT_EQ(ranks[0]["pid"], 1000);
  EXPECT_TRUE(ranks[0]["exit_code"].is_null());
  EXPECT_EQ(ranks[0]["signal"], "SIGTERM");
  EXPECT_EQ(ranks[0]["end"], "signal SIGTERM");
  EXPECT_EQ(ranks[0]["max_rss_kb"], 2048);
  EXPECT_EQ(ranks[0]["run_seconds"], 11.5);
  EXPECT_EQ(ranks[0]["last_step"], 120);
  EXPECT_EQ(ranks[1]["exit_code"], 3);
  EXPECT_TRUE(ranks[1]["signal"].is_null());
  EXPECT_EQ(ranks[1]["error_message"], "RuntimeError: CUDA out of memory");
  EXPECT_TRUE(doc["rounds"][1]["ranks"][1]["last_step"].is_null());
}

TEST(JobReport, TheRootCauseIsTheFirstFailureWithItsErrorFile) {
  const json cause = parsed(two_rounds())["rounds"][0]["root_cause"];
  EXPECT_EQ(cause["kind"], "failure");
  EXPECT_EQ(cause["rank"], 1);
  EXPECT_EQ(cause["host"], "gpu1");
  EXPECT_EQ(cause["exit_code"], 3);
  EXPECT_EQ(cause["code"], 3);
  EXPECT_EQ(cause["what"], "rank 1 (gpu1) exit code 3 (failed first)");
  EXPECT_EQ(cause["error_file"], "/logs/rank_1.error.json");
  EXPECT_EQ(cause["error_file_text"], kErrorFile);
  EXPECT_EQ(cause["message"], "RuntimeError: CUDA out of memory");
  EXPECT_EQ(cause["callstack"], "Traceback: line 3");
  EXPECT_EQ(cause["stderr_tail"].size(), 2u);
}

TEST(JobReport, AJobThatFailedCarriesItsLastRoundsRootCause) {
  JobReport report = two_rounds();
  report.rounds.pop_back();
  report.rounds[0].decision.restart = false;
  report.rounds[0].decision.why = "not restarting: no restart left (--max-restarts 0)";
  report.rounds[0].decision.exit_code = 3;
  report.exit_code = 3;
  const json doc = parsed(report);
  EXPECT_EQ(doc["exit_code"], 3);
  EXPECT_EQ(doc["restarts"], 0);
  EXPECT_EQ(doc["end"], "not restarting: no restart left (--max-restarts 0)");
  EXPECT_EQ(doc["root_cause"]["rank"], 1);
  EXPECT_EQ(doc["root_cause"]["round"], 0);
}

TEST(JobReport, ARunningJobHasNoExitCodeYetAndAStopNamesItsSignal) {
  JobReport report = two_rounds();
  report.rounds.pop_back();
  report.exit_code.reset();
  report.ended_unix.reset();
  json doc = parsed(report);
  EXPECT_EQ(doc["state"], "running");
  EXPECT_TRUE(doc["exit_code"].is_null());
  EXPECT_TRUE(doc["end"].is_null());

  RoundResult& result = *report.rounds[0].result;
  result.outcome = Outcome::kStopped;
  result.stop_signal = SIGTERM;
  result.notice = SIGUSR1;
  result.first_failure.reset();
  report.rounds[0].decision.round_code = 128 + SIGTERM;
  report.exit_code = 128 + SIGTERM;
  doc = parsed(report);
  const json& round = doc["rounds"][0];
  EXPECT_EQ(round["outcome"], "stopped");
  EXPECT_EQ(round["stop_signal"], "SIGTERM");
  EXPECT_EQ(round["notice"], "SIGUSR1");
  EXPECT_EQ(doc["root_cause"]["kind"], "signal");
  EXPECT_EQ(doc["root_cause"]["signal"], "SIGTERM");
  EXPECT_EQ(doc["root_cause"]["code"], 128 + SIGTERM);
}

TEST(JobReport, ARoundThatNeverStartedIsTheRootCauseWithItsDecision) {
  JobReport report;
  report.run_id = "abc";
  ReportRound& round = report.rounds.emplace_back();
  round.decision.why = "stopped by SIGTERM while the nodes gathered";
  round.decision.round_code = 143;
  round.decision.exit_code = 143;
  report.exit_code = 143;
  const json doc = parsed(report);
  EXPECT_EQ(doc["rounds"][0]["outcome"], "not_started");
  EXPECT_EQ(doc["rounds"][0]["ranks"], json::array());
  EXPECT_EQ(doc["root_cause"]["kind"], "before_round");
  EXPECT_EQ(doc["root_cause"]["what"], "stopped by SIGTERM while the nodes gathered");

  EXPECT_EQ(doc["end"], "stopped by SIGTERM while the nodes gathered");
}

TEST(JobReport, TextThatIsNotUtf8IsReplacedNotThrown) {
  JobReport report = two_rounds();
  report.rounds[0].error_file_texts[1] = "bad \xff\xfe bytes";
  report.rounds[0].result->ranks[1].stderr_tail = {"\xc3"};
  const json doc = parsed(report);
  EXPECT_EQ(doc["rounds"][0]["root_cause"]["error_file_text"],
            "bad \xef\xbf\xbd\xef\xbf\xbd bytes");
}

}  // namespace
}  // namespace ddprun
