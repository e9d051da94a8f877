// job_end_time from tables: each row gives the environment, what each command prints (or
// that it fails) and the expected end. Slurm and Grid Engine outputs were recorded on the
// simulated cluster (Slurm 22.05, Grid Engine 8.1.9, Debian 12, TZ=UTC, 2026-11-23):
// the walltime_*.txt files and the one-line squeue outputs below. PBS and LSF outputs
// follow their documentation (neither is packaged in Debian).

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

#include "walltime.h"

namespace ddprun {
namespace {

std::string recorded(const std::string& name) {
  const std::string path = std::string(DDPRUN_SCHEDULER_TESTS_DIR) + "/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Command line (words joined by blanks) -> its stdout; a command not listed fails.
using Outputs = std::map<std::string, std::string>;

struct Row {
  std::string name;
  std::string scheduler;
  Environment env;
  Outputs outputs;
  std::optional<JobEndTime> expected;
};

constexpr std::int64_t kNow = 1795456700;  // 2026-11-23T17:58:20Z

// The end of the recorded Slurm job (--time=2, started 17:58:11 UTC): 18:00:11 UTC.
constexpr std::int64_t kSlurmEnd = 1795456811;
// The recorded Grid Engine jobs started at 18:00:09 UTC.
constexpr std::int64_t kSgeStart = 1795456809;
// The PBS example job started at 17:00:00 UTC.
constexpr std::int64_t kPbsStart = 1795453200;

const std::string kSqueue = "env SLURM_TIME_FORMAT=%s squeue -h -j 77 -o %e";
const std::string kScontrol = "env SLURM_TIME_FORMAT=%s scontrol show job 77";
const std::string kQstatJ = "qstat -j 77";
const std::string kQstatXml = "qstat -xml -j 77";
const std::string kQstatF = "qstat -f 77";
const std::string kBjobs = "bjobs -noheader -o time_left 77";

std::optional<JobEndTime> end(std::int64_t seconds, const std::string& source) {
  return JobEndTime{seconds, source};
}

// TZ for one test, restored afterwards (mktime reads it).
class ScopedTz {
 public:
  explicit ScopedTz(const char* tz) {
    if (const char* old = std::getenv("TZ")) old_ = old;
    ::setenv("TZ", tz, 1);
    ::tzset();
  }
  ~ScopedTz() {
    if (old_) {
      ::setenv("TZ", old_->c_str(), 1);
    } else {
      ::unsetenv("TZ");
    }
    ::tzset();
  }
  ScopedTz(const ScopedTz&) = delete;
  ScopedTz& operator=(const ScopedTz&) = delete;

 private:
  std::optional<std::string> old_;
};

void expect_rows(const std::vector<Row>& rows) {
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    const RunCommand run =
        [&row](const std::vector<std::string>& argv) -> std::optional<std::string> {
      std::string line;
      for (const std::string& word : argv) line += (line.empty() ? "" : " ") + word;
      const auto it = row.outputs.find(line);
      if (it == row.outputs.end()) return std::nullopt;
      return it->second;
    };
    const auto got = job_end_time(row.scheduler, "77", row.env, run, kNow);
    ASSERT_EQ(got.has_value(), row.expected.has_value())
        << (got ? got->source + " " + std::to_string(got->unix_seconds) : "nullopt");
    if (!got) continue;
    EXPECT_EQ(got->unix_seconds, row.expected->unix_seconds);
    EXPECT_EQ(got->source, row.expected->source);
  }
}

TEST(Walltime, SlurmReadsTheEnvironmentThenSqueueThenScontrol) {
  ScopedTz tz("UTC0");
  const std::string scontrol_running = recorded("walltime_slurm_scontrol_running.txt");
  const std::string scontrol_unlimited = recorded("walltime_slurm_scontrol_unlimited.txt");
  expect_rows({
      {"SLURM_JOB_END_TIME",
       "slurm",
       {{"SLURM_JOB_END_TIME", "1795456811"}},
       {},
       end(kSlurmEnd, "SLURM_JOB_END_TIME")},
      {"a bad SLURM_JOB_END_TIME is skipped",
       "slurm",
       {{"SLURM_JOB_END_TIME", "soon"}},
       {{kSqueue, "1795456811\n"}},
       end(kSlurmEnd, "squeue")},
      {"SLURM_JOB_END_TIME=0 is skipped",
       "slurm",
       {{"SLURM_JOB_END_TIME", "0"}},
       {{kSqueue, "1795456811\n"}},
       end(kSlurmEnd, "squeue")},
      {"squeue, recorded with SLURM_TIME_FORMAT=%s",
       "slurm",
       {},
       {{kSqueue, "1795456811\n"}},
       end(kSlurmEnd, "squeue")},
      {"squeue, recorded standard format in UTC",
       "slurm",
       {},
       {{kSqueue, "2026-11-23T18:00:11\n"}},
       end(kSlurmEnd, "squeue")},
      {"squeue, a heterogeneous job: the earliest",
       "slurm",
       {},
       {{kSqueue, "1795456900\n1795456811\n"}},
       end(kSlurmEnd, "squeue")},
      {"squeue NONE (recorded, --time=UNLIMITED): no limit, scontrol not asked",
       "slurm",
       {},
       {{kSqueue, "NONE\n"}, {kScontrol, scontrol_running}},
       std::nullopt},
      {"squeue N/A (recorded, pending)", "slurm", {}, {{kSqueue, "N/A\n"}}, std::nullopt},
      {"squeue fails: scontrol (recorded)",
       "slurm",
       {},
       {{kScontrol, scontrol_running}},
       end(kSlurmEnd, "scontrol show job")},
      {"squeue unreadable: scontrol",
       "slurm",
       {},
       {{kSqueue, "Tomorr 18:00\n"}, {kScontrol, scontrol_running}},
       end(kSlurmEnd, "scontrol show job")},
      {"scontrol EndTime=Unknown (recorded, unlimited)",
       "slurm",
       {},
       {{kScontrol, scontrol_unlimited}},
       std::nullopt},
      {"both fail", "slurm", {}, {}, std::nullopt},
      {"squeue prints nothing (job gone), scontrol fails",
       "slurm",
       {},
       {{kSqueue, ""}},
       std::nullopt},
  });
}

TEST(Walltime, SlurmRejectsMalformedTimes) {
  ScopedTz tz("UTC0");
  std::vector<Row> rows;
  for (const char* text : {"0", "-1795456811", "1795456811x", "2026-02-30T10:00:00",
                           "2026-11-23 18:00:11", "2026-11-23T25:00:00", "2026-11-23T18:00",
                           "2026-11-23T18:0:11", "99999999999999999999", "1795456811\nNONEX"}) {
    rows.push_back({std::string("squeue ") + text, "slurm", {}, {{kSqueue, text}}, std::nullopt});
  }
  expect_rows(rows);
}

TEST(Walltime, SlurmLocalTimesFollowTz) {
  // squeue printed 2026-11-23T19:00:11 for the same job under TZ=Europe/Berlin (recorded).
  // POSIX TZ strings, so that no tzdata is needed.
  {
    ScopedTz tz("CET-1CEST,M3.5.0,M10.5.0/3");
    expect_rows({{"Berlin, winter",
                  "slurm",
                  {},
                  {{kSqueue, "2026-11-23T19:00:11"}},
                  end(kSlurmEnd, "squeue")},
                 {"Berlin, summer",
                  "slurm",
                  {},
                  {{kSqueue, "2026-07-01T14:00:00"}},
                  end(1782907200, "squeue")}});
  }
  {
    ScopedTz tz("EST5EDT,M3.2.0,M11.1.0");
    expect_rows({{"New York, winter",
                  "slurm",
                  {},
                  {{kSqueue, "2026-11-23T13:00:11"}},
                  end(kSlurmEnd, "squeue")}});
  }
}

TEST(Walltime, GridEngineAddsTheShorterLimitToTheTasksStart) {
  const std::string running = recorded("walltime_sge_qstat_j_running.txt");
  const std::string running_xml = recorded("walltime_sge_qstat_xml_j_running.txt");
  const std::string array = recorded("walltime_sge_qstat_j_array.txt");
  const std::string array_xml = recorded("walltime_sge_qstat_xml_j_array.txt");
  const auto with_limits = [&running](const std::string& limits) {
    std::string text = running;
    const std::string old = "h_rt=120";
    text.replace(text.find(old), old.size(), limits);
    return text;
  };
  expect_rows({
      {"h_rt=0:2:0 (recorded)",
       "sge",
       {{"SGE_TASK_ID", "undefined"}},
       {{kQstatJ, running}, {kQstatXml, running_xml}},
       end(kSgeStart + 120, "qstat -j h_rt + JAT_start_time")},
      {"h_rt=600,s_rt=0:9:0, task 1 (recorded)",
       "sge",
       {{"SGE_TASK_ID", "1"}},
       {{kQstatJ, array}, {kQstatXml, array_xml}},
       end(kSgeStart + 540, "qstat -j s_rt + JAT_start_time")},
      {"task 2 has not started",
       "sge",
       {{"SGE_TASK_ID", "2"}},
       {{kQstatJ, array}, {kQstatXml, array_xml}},
       std::nullopt},
      {"pending (recorded): no start",
       "sge",
       {},
       {{kQstatJ, recorded("walltime_sge_qstat_j_pending.txt")},
        {kQstatXml, recorded("walltime_sge_qstat_xml_j_pending.txt")}},
       std::nullopt},
      {"no limit (recorded)",
       "sge",
       {},
       {{kQstatJ, recorded("walltime_sge_qstat_j_unlimited.txt")},
        {kQstatXml, recorded("walltime_sge_qstat_xml_j_unlimited.txt")}},
       std::nullopt},
      {"h_rt as H:M:S with other resources",
       "sge",
       {},
       {{kQstatJ, with_limits("h_vmem=2G,h_rt=1:00:00")}, {kQstatXml, running_xml}},
       end(kSgeStart + 3600, "qstat -j h_rt + JAT_start_time")},
      {"h_rt=INFINITY",
       "sge",
       {},
       {{kQstatJ, with_limits("h_rt=INFINITY")}, {kQstatXml, running_xml}},
       std::nullopt},
      {"h_rt unreadable",
       "sge",
       {},
       {{kQstatJ, with_limits("h_rt=2h")}, {kQstatXml, running_xml}},
       std::nullopt},
      {"h_rt=0:75:0",
       "sge",
       {},
       {{kQstatJ, with_limits("h_rt=0:75:0")}, {kQstatXml, running_xml}},
       std::nullopt},
      {"not qstat -j output",
       "sge",
       {},
       {{kQstatJ, "Following jobs do not exist:\n77\n"}, {kQstatXml, running_xml}},
       std::nullopt},
      {"qstat -j fails", "sge", {}, {{kQstatXml, running_xml}}, std::nullopt},
      {"qstat -xml -j fails: no start, so no answer",
       "sge",
       {},
       {{kQstatJ, running}},
       std::nullopt},
      {"start time malformed",
       "sge",
       {},
       {{kQstatJ, running},
        {kQstatXml, "<JAT_task_number>1</JAT_task_number><JAT_start_time>x</JAT_start_time>"}},
       std::nullopt},
  });
}

// Layout from OpenPBS's qstat(1B) (-f: "attribute = value", times as ctime); not recorded.
const std::string kPbsRunning =
    "Job Id: 77.pbs01\n"
    "    Job_Name = train\n"
    "    job_state = R\n"
    "    Resource_List.walltime = 01:00:00\n"
    "    resources_used.walltime = 00:58:20\n"
    "    stime = Mon Nov 23 17:00:00 2026\n";

std::string pbs_with(const std::string& line, const std::string& replacement) {
  std::string text = kPbsRunning;
  const std::size_t at = text.find(line);
  text.replace(at, text.find('\n', at) + 1 - at, replacement);
  return text;
}

TEST(Walltime, PbsAddsTheWalltimeToStime) {
  ScopedTz tz("UTC0");
  expect_rows({
      {"PBS Pro / OpenPBS",
       "pbs",
       {},
       {{kQstatF, kPbsRunning}},
       end(kPbsStart + 3600, "qstat -f walltime + stime")},
      {"Torque's PBS_WALLTIME wins",
       "pbs",
       {{"PBS_WALLTIME", "7200"}},
       {{kQstatF, kPbsRunning}},
       end(kPbsStart + 7200, "PBS_WALLTIME + stime")},
      {"Torque's start_time",
       "pbs",
       {},
       {{kQstatF, pbs_with("    stime", "    start_time = Mon Nov 23 17:00:00 2026\n")}},
       end(kPbsStart + 3600, "qstat -f walltime + stime")},
      {"a day padded with a blank",
       "pbs",
       {},
       {{kQstatF, pbs_with("    stime", "    stime = Mon Nov  2 17:00:00 2026\n")}},
       end(kPbsStart - 21 * 86400 + 3600, "qstat -f walltime + stime")},
      {"queued: no stime", "pbs", {}, {{kQstatF, pbs_with("    stime", "")}}, std::nullopt},
      {"no walltime",
       "pbs",
       {},
       {{kQstatF, pbs_with("    Resource_List.walltime", "")}},
       std::nullopt},
      {"walltime malformed",
       "pbs",
       {},
       {{kQstatF, pbs_with("    Resource_List.walltime", "    Resource_List.walltime = 1h\n")}},
       std::nullopt},
      {"stime malformed",
       "pbs",
       {},
       {{kQstatF, pbs_with("    stime", "    stime = Mon Nov 31 17:00:00 2026\n")}},
       std::nullopt},
      {"qstat fails", "pbs", {{"PBS_WALLTIME", "7200"}}, {}, std::nullopt},
  });
}

TEST(Walltime, LsfAddsTheTimeLeftToNow) {
  // "hours:minutes status" as IBM documents bjobs -WL and the time_left field.
  expect_rows({
      {"0:30 L", "lsf", {}, {{kBjobs, "0:30 L\n"}}, end(kNow + 1800, "bjobs time_left")},
      {"12:05 L", "lsf", {}, {{kBjobs, "12:05 L"}}, end(kNow + 43500, "bjobs time_left")},
      {"an estimate is not a limit", "lsf", {}, {{kBjobs, "0:30 E\n"}}, std::nullopt},
      {"estimate exceeded", "lsf", {}, {{kBjobs, "0:00 X\n"}}, std::nullopt},
      {"no limit", "lsf", {}, {{kBjobs, "-\n"}}, std::nullopt},
      {"minutes out of range", "lsf", {}, {{kBjobs, "0:61 L\n"}}, std::nullopt},
      {"bjobs fails", "lsf", {}, {}, std::nullopt},
  });
}

TEST(Walltime, OtherSchedulersAndNoJobIdHaveNoEnd) {
  const RunCommand never = [](const std::vector<std::string>& argv) {
    ADD_FAILURE() << "ran " << argv.front();
    return std::optional<std::string>();
  };
  for (const char* scheduler : {"local", "hostfile", "mpi", "kubeflow", "unknown"}) {
    EXPECT_FALSE(job_end_time(scheduler, "77", {{"SLURM_JOB_END_TIME", "1795456811"}}, never, kNow))
        << scheduler;
  }
  EXPECT_FALSE(job_end_time("slurm", "", {}, never, kNow));
}

}  // namespace
}  // namespace ddprun
