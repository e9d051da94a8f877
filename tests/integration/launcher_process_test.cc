// ddprun run for real against test_child: exit codes, signals, teardown, output.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "launcher_harness.h"

namespace ddprun::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

TEST(EnvContract, EveryRankSeesTorchrunVariablesWithConsistentValues) {
  const auto done = run_ddprun(
      with_child({"--nproc-per-node", "3", "--tag-output", "--run-id", "job-7"}, {"env"}));
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const auto ranks = env_by_rank(done.out);
  ASSERT_EQ(ranks.size(), 3u) << done.out;
  const std::string port = ranks.at(0).at("MASTER_PORT");
  for (const auto& [rank, vars] : ranks) {
    EXPECT_EQ(vars.at("RANK"), std::to_string(rank));
    EXPECT_EQ(vars.at("LOCAL_RANK"), std::to_string(rank));
    EXPECT_EQ(vars.at("ROLE_RANK"), std::to_string(rank));
    EXPECT_EQ(vars.at("WORLD_SIZE"), "3");
    EXPECT_EQ(vars.at("LOCAL_WORLD_SIZE"), "3");
    EXPECT_EQ(vars.at("ROLE_WORLD_SIZE"), "3");
    EXPECT_EQ(vars.at("GROUP_RANK"), "0");
    EXPECT_EQ(vars.at("GROUP_WORLD_SIZE"), "1");
    EXPECT_EQ(vars.at("ROLE_NAME"), "default");
    EXPECT_EQ(vars.at("MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(vars.at("MASTER_PORT"), port);
    EXPECT_EQ(vars.at("TORCHELASTIC_RUN_ID"), "job-7");
    EXPECT_EQ(vars.at("TORCHELASTIC_RESTART_COUNT"), "0");
    EXPECT_EQ(vars.at("TORCHELASTIC_MAX_RESTARTS"), "0");
    EXPECT_NE(vars.at("TORCHELASTIC_ERROR_FILE").find("rank_" + std::to_string(rank)),
              std::string::npos);
    EXPECT_NE(vars.at("OMP_NUM_THREADS"), "<unset>");
    EXPECT_EQ(vars.at("DDPRUN_HOST"), hostname());
  }
  EXPECT_GT(std::stoi(port), 0);
}

// The launchers' secret is ddprun's own: a worker's whole environment has no trace of it.
TEST(EnvContract, TheRendezvousSecretNeverReachesAWorker) {
  const auto done = run_ddprun({"--nproc-per-node", "2", "--tag-output", "--", "/usr/bin/env"},
                               {"DDPRUN_RDZV_TOKEN=rdzv-secret-4f1d"});
  ASSERT_EQ(done.exit_code, 0) << done.err;
  EXPECT_NE(done.out.find("] RANK=1"), std::string::npos) << done.out;
  EXPECT_EQ(done.out.find("rdzv-secret-4f1d"), std::string::npos) << done.out;
  EXPECT_EQ(done.out.find("DDPRUN_RDZV_TOKEN"), std::string::npos) << done.out;
}

TEST(EnvContract, UserThreadSettingsAreLeftAlone) {
  const auto done = run_ddprun(with_child({"--nproc-per-node", "2", "--tag-output"}, {"env"}),
                               {"OMP_NUM_THREADS=7"});
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const auto ranks = env_by_rank(done.out);
  EXPECT_EQ(ranks.at(1).at("OMP_NUM_THREADS"), "7");
  EXPECT_EQ(ranks.at(1).at("OPENBLAS_NUM_THREADS"), "<unset>");  // OpenBLAS reads OMP's
}

TEST(ExitCodes, FailingWorkersCodeIsReturnedWithItsStderr) {
  const auto done =
      run_ddprun(with_child({"--nproc-per-node", "3"}, {"stderr:disk full@1", "exit:7@1"}));
  EXPECT_EQ(done.exit_code, 7);
  EXPECT_NE(done.err.find("rank 1 (local rank 1"), std::string::npos) << done.err;
  EXPECT_NE(done.err.find("exit code 7"), std::string::npos) << done.err;
  EXPECT_NE(done.err.find("  | disk full"), std::string::npos) << done.err;
}

TEST(ExitCodes, KilledWorkerGives128PlusSignalAndNamesIt) {
  const auto done = run_ddprun(with_child({"--nproc-per-node", "2"}, {"raise:6@0"}));
  EXPECT_EQ(done.exit_code, 128 + SIGABRT);
  EXPECT_NE(done.err.find("signal SIGABRT"), std::string::npos) << done.err;
}

TEST(ExitCodes, ErrorFileMessageIsReported) {
  const auto done =
      run_ddprun(with_child({"--nproc-per-node", "2"}, {"error-file:loss is NaN@1", "exit:1@1"}));
  EXPECT_EQ(done.exit_code, 1);
  EXPECT_NE(done.err.find("its error file says: loss is NaN"), std::string::npos) << done.err;
}

TEST(Teardown, FailureStopsOtherWorkersAndTheirGrandchildren) {
  Launched job(with_child({"--nproc-per-node", "3"},
                          {"grandchild", "ready", "wait-signal@0", "exit:5@0", "sleep"}),
               {}, true);
  const auto pids = job.wait_ready(3);
  ASSERT_EQ(pids.size(), 6u);
  ::kill(job.worker_pid(0), SIGUSR1);
  const auto done = job.finish();
  EXPECT_EQ(done.exit_code, 5) << done.err;
  EXPECT_TRUE(wait_all_gone(pids, milliseconds(5000)).empty());
}

TEST(Teardown, WorkerIgnoringSigtermIsKilledAfterShutdownTimeout) {
  Launched job(with_child({"--nproc-per-node", "2", "--shutdown-timeout", "0.2"},
                          {"ignore:15", "ready", "wait-signal@0", "exit:3@0", "sleep"}),
               {}, true);
  const auto pids = job.wait_ready(2);
  ::kill(job.worker_pid(0), SIGUSR1);  // rank 0 exits 3; rank 1 ignores the SIGTERM
  const auto done = job.finish();
  EXPECT_EQ(done.exit_code, 3) << done.err;
  EXPECT_TRUE(wait_all_gone(pids, milliseconds(5000)).empty());
}

// A stop signal goes to a worker's main process, not its whole group: a Python script
// whose SIGTERM handler saves with the help of its child processes (a DataLoader's
// workers) finds them alive. Its children still end with it; and when the main process
// ignores SIGTERM, the grace's SIGKILL takes its whole group.
TEST(Teardown, AStopReachesTheMainProcessFirstAndItsChildrenStillEnd) {
  TempDir dir;
  const std::string script = dir.path() + "/saver.py";
  std::ofstream(script) << R"(import os, signal, subprocess, sys, time
child = subprocess.Popen(['sleep', '600'])
def on_term(sig, frame):
    print('handler: child ' + ('alive' if child.poll() is None else 'dead'), flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN if os.environ['IGNORE_TERM'] == '1' else on_term)
line = '%s %d %d\n' % (os.environ['RANK'], os.getpid(), child.pid)
os.write(int(os.environ['TEST_READY_FD']), line.encode())
while True:
    time.sleep(1)
)";
  for (const bool ignores : {false, true}) {
    SCOPED_TRACE(ignores ? "ignores SIGTERM" : "handles SIGTERM");
    Launched job({"--nproc-per-node", "1", "--shutdown-timeout", "0.5", "/usr/bin/python3", script},
                 {std::string("IGNORE_TERM=") + (ignores ? "1" : "0")}, true);
    const auto pids = job.wait_ready(1);
    ASSERT_EQ(pids.size(), 2u);
    job.signal(SIGTERM);
    const auto done = job.finish();
    EXPECT_EQ(done.exit_code, 128 + SIGTERM) << done.err;
    if (!ignores) {
      EXPECT_NE(done.out.find("handler: child alive"), std::string::npos) << done.out;
    }
    EXPECT_TRUE(wait_all_gone(pids, milliseconds(5000)).empty());
  }
}

TEST(Teardown, SigkilledLauncherLeavesNoWorkerGrandchildOrTempFiles) {
  TempDir tmp;
  Launched job(with_child({"--nproc-per-node", "3"}, {"grandchild", "ready", "sleep"}),
               {"TMPDIR=" + tmp.path()}, true);
  const auto pids = job.wait_ready(3);
  ASSERT_EQ(pids.size(), 6u);
  ASSERT_FALSE(std::filesystem::is_empty(tmp.path()));  // the error-file folder
  job.signal(SIGKILL);
  const auto done = job.finish();  // returns once the guardian, holding nothing, is done too
  EXPECT_EQ(done.exit_code, 128 + SIGKILL);
  EXPECT_TRUE(wait_all_gone(pids, milliseconds(5000)).empty());
  EXPECT_TRUE(std::filesystem::is_empty(tmp.path()));
}

TEST(Signals, SigtermIsForwardedAndExitIs143) {
  Launched job(with_child({"--nproc-per-node", "3"}, {"ready", "wait-signal", "exit:0"}), {}, true);
  job.wait_ready(3);
  job.signal(SIGTERM);
  const auto done = job.finish();
  EXPECT_EQ(done.exit_code, 128 + SIGTERM);
  std::size_t got = 0;
  for (const auto& line : split_lines(done.out)) got += line == "got SIGTERM";
  EXPECT_EQ(got, 3u) << done.out;
}

TEST(Signals, WorkersPreemptedBySigtermMakeDdprunExit75) {
  Launched job(with_child({"--nproc-per-node", "2"}, {"ready", "wait-signal", "exit:75"}), {},
               true);
  job.wait_ready(2);
  job.signal(SIGTERM);
  const auto done = job.finish();
  EXPECT_EQ(done.exit_code, 75) << done.err;
  EXPECT_NE(done.err.find("preemption notice (SIGTERM)"), std::string::npos) << done.err;
  EXPECT_EQ(done.err.find("ddprun: error"), std::string::npos) << done.err;
}

// An exit 75 with no notice and no stop is no drain (torchrun calls it a failure too): the
// others are stopped and the round is restarted like any failure.
TEST(Signals, AnExit75WithNoNoticeIsAFailureAndIsRestarted) {
  const auto done = run_ddprun(with_child({"--nproc-per-node", "2", "--max-restarts", "1"},
                                          {"exit:75@0", "print:2@1", "exit:75"}));
  EXPECT_EQ(done.exit_code, 75) << done.err;
  EXPECT_NE(done.err.find("restarting all workers (restart 1 of 1)"), std::string::npos)
      << done.err;
  EXPECT_NE(done.err.find("failed first: exit code 75"), std::string::npos) << done.err;
}

TEST(Signals, Sigusr1IsForwardedAndTheJobGoesOn) {
  Launched job(with_child({"--nproc-per-node", "2"}, {"ready", "wait-signal", "print:1"}), {},
               true);
  job.wait_ready(2);
  job.signal(SIGUSR1);
  const auto done = job.finish();
  EXPECT_EQ(done.exit_code, 0) << done.err;
  EXPECT_NE(done.out.find("got SIGUSR1"), std::string::npos);
  EXPECT_NE(done.out.find("rank 1 line 0"), std::string::npos);
}

std::size_t count_lines(const std::string& out, const std::string& line) {
  std::size_t got = 0;
  for (const auto& l : split_lines(out)) got += l == line;
  return got;
}

// A stop signal during a failed round's grace: no restart, and the failure stays the root
// cause with its exit code (as when Slurm 26.05 sends SIGTERM to every task once one
// failed). Rank 0 fails at once; rank 1 gets the SIGTERM of the teardown, then Ctrl-C
// arrives and reaches it too.
TEST(Signals, CtrlCDuringAFailedRoundsGraceStopsTheJobWithoutARestartAndKeepsTheFailure) {
  // Rank 0 fails once rank 1 is running (its signals blocked from its start), never before:
  // a SIGTERM to a rank not yet started would kill it by default.
  const TempDir dir;
  const std::string up = dir.path() + "/rank1_up";
  Launched job(
      with_child({"--nproc-per-node", "2", "--max-restarts", "2", "--shutdown-timeout", "30"},
                 {"ready", "touch:" + up + "@1", "wait-file:" + up + "@0", "exit:1@0",
                  "wait-signal@1", "wait-signal@1", "exit:0@1"}),
      {}, true);
  job.wait_ready(2);
  job.wait_stdout([](const std::string& out) { return count_lines(out, "got SIGTERM") == 1; });
  job.signal(SIGINT);
  const auto done = job.finish(seconds(25));
  EXPECT_EQ(done.exit_code, 1) << done.err;
  EXPECT_EQ(count_lines(done.out, "got SIGINT"), 1u) << done.out;
  EXPECT_EQ(done.err.find("restarting all workers"), std::string::npos) << done.err;
  EXPECT_NE(done.err.find("rank 0 (local rank 0"), std::string::npos) << done.err;
  EXPECT_NE(done.err.find("ddprun: not restarting: ddprun was stopped by SIGINT after the round "
                          "failed; exit 1, the failure's"),
            std::string::npos)
      << done.err;
}

// After a preemption notice, a stop signal still reaches the workers.
TEST(Signals, SigtermAfterANoticeStillReachesEveryWorker) {
  Launched job(with_child({"--nproc-per-node", "2", "--shutdown-timeout", "20"},
                          {"ready", "wait-signal", "wait-signal", "exit:0"}),
               {}, true);
  job.wait_ready(2);
  job.signal(SIGUSR1);
  job.wait_stdout([](const std::string& out) { return count_lines(out, "got SIGUSR1") == 2; });
  job.signal(SIGTERM);
  const auto done = job.finish(seconds(15));  // less than the grace: no SIGKILL needed
  EXPECT_EQ(done.exit_code, 128 + SIGTERM) << done.err;
  EXPECT_EQ(count_lines(done.out, "got SIGTERM"), 2u) << done.out;
}

// nohup (or `trap '' HUP; exec ddprun ...`): a SIGHUP, a closed terminal's, does nothing;
// the job goes on and ends as it would have.
TEST(Signals, AnInheritedIgnoredSighupStaysIgnoredAsUnderNohup) {
  ::signal(SIGHUP, SIG_IGN);  // ddprun inherits it through the harness's fork and exec
  Launched job(with_child({"--nproc-per-node", "2"}, {"ready", "wait-signal", "print:1"}), {},
               true);
  ::signal(SIGHUP, SIG_DFL);
  job.wait_ready(2);
  job.signal(SIGHUP);   // discarded: ddprun ignores it, and so do its workers
  job.signal(SIGUSR1);  // then the workers go on to the end
  const auto done = job.finish();
  EXPECT_EQ(done.exit_code, 0) << done.err;
  EXPECT_EQ(done.err.find("stopped by SIGHUP"), std::string::npos) << done.err;
  EXPECT_NE(done.out.find("got SIGUSR1"), std::string::npos) << done.out;
  EXPECT_NE(done.out.find("rank 1 line 0"), std::string::npos) << done.out;
}

TEST(Signals, SecondSigintEscalatesToSigkill) {
  Launched job(with_child({"--nproc-per-node", "2", "--shutdown-timeout", "600"},
                          {"ready", "wait-signal", "ignore:2", "ignore:15", "sleep"}),
               {}, true);
  const auto pids = job.wait_ready(2);
  job.signal(SIGINT);
  job.wait_stdout([](const std::string& out) {
    std::size_t got = 0;
    for (const auto& line : split_lines(out)) got += line == "got SIGINT";
    return got == 2;
  });
  job.signal(SIGINT);
  const auto done = job.finish(seconds(30));  // far less than the 600 s grace
  EXPECT_EQ(done.exit_code, 128 + SIGINT);
  EXPECT_TRUE(wait_all_gone(pids, milliseconds(5000)).empty());
}

TEST(Output, TaggedLinesAreWholeAndInOrderPerRank) {
  constexpr int kLines = 3000;
  const auto done = run_ddprun(with_child({"--nproc-per-node", "4", "--tag-output"},
                                          {"print:" + std::to_string(kLines), "partial"}));
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const std::regex line_pattern(R"(^\[[^:\]]+:(\d)\] rank (\d) line (\d+)$)");
  const std::regex partial_pattern(R"(^\[[^:\]]+:(\d)\] first piece, second piece, end$)");
  std::map<int, int> next_line;
  std::map<int, int> partials;
  for (const auto& line : split_lines(done.out)) {
    std::smatch match;
    if (std::regex_match(line, match, partial_pattern)) {
      ++partials[std::stoi(match[1])];
      continue;
    }
    ASSERT_TRUE(std::regex_match(line, match, line_pattern)) << "mangled line: " << line;
    const int rank = std::stoi(match[1]);
    ASSERT_EQ(rank, std::stoi(match[2])) << line;
    ASSERT_EQ(std::stoi(match[3]), next_line[rank]) << line;
    ++next_line[rank];
  }
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(next_line[rank], kLines);
    EXPECT_EQ(partials[rank], 1);
  }
}

TEST(Output, LogDirHoldsEachRanksStreamsAndRedirectsAndTeeControlTheConsole) {
  // torchrun's rules: --log-dir alone leaves the console as it is; -r keeps streams off
  // it; -t puts them back. The files hold every stream either way.
  TempDir dir;
  const auto plain = run_ddprun(
      with_child({"--nproc-per-node", "2", "--log-dir", dir.path()}, {"print:2", "stderr:oops"}));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(split_lines(plain.out).size(), 4u);
  EXPECT_NE(plain.err.find("oops"), std::string::npos);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string stem = dir.path() + "/attempt_0/rank_" + std::to_string(rank);
    std::ifstream out(stem + ".stdout.log"), err(stem + ".stderr.log");
    const std::string out_text((std::istreambuf_iterator<char>(out)), {});
    const std::string err_text((std::istreambuf_iterator<char>(err)), {});
    const std::string r = std::to_string(rank);
    EXPECT_EQ(out_text, "rank " + r + " line 0\nrank " + r + " line 1\n");
    EXPECT_EQ(err_text, "oops\n");
  }
  TempDir dir2;
  const auto quiet = run_ddprun(with_child(
      {"--nproc-per-node", "2", "--log-dir", dir2.path(), "-r", "3"}, {"print:2", "stderr:oops"}));
  EXPECT_EQ(quiet.out, "");
  EXPECT_EQ(quiet.err.find("oops"), std::string::npos);
  TempDir dir3;
  const auto teed =
      run_ddprun(with_child({"--nproc-per-node", "2", "--log-dir", dir3.path(), "--redirects", "3",
                             "--tee", "1", "--local-ranks-filter", "1"},
                            {"print:2", "stderr:oops"}));
  EXPECT_EQ(split_lines(teed.out), (std::vector<std::string>{"rank 1 line 0", "rank 1 line 1"}));
  EXPECT_EQ(teed.err.find("oops"), std::string::npos);
  std::ifstream filtered_out(dir3.path() + "/attempt_0/rank_0.stdout.log");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(filtered_out)), {}),
            "rank 0 line 0\nrank 0 line 1\n");  // the filter is for the console only
}

// Four ranks that print the same three lines and one line of their own. A barrier in files
// makes each rank print only once all four have started, so that their lines arrive
// together however loaded the machine; the long window is for the same reason and costs
// nothing, as a group goes out as soon as every rank has its line.
std::vector<std::string> four_ranks_print(const std::string& barrier,
                                          std::vector<std::string> options) {
  const std::string script =
      "touch " + barrier + "/ready.$RANK; until [ $(ls " + barrier +
      " | grep -c ready) -eq 4 ]; do sleep 0.01; done; "
      "echo 'loading the model'; echo 'torch 2.9.0'; echo 'warning: TF32 is off'; "
      "echo \"rank $RANK is ready\"";
  options.insert(options.begin(), {"--nproc-per-node", "4"});
  options.insert(options.end(), {"--", "/bin/sh", "-c", script});
  return options;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

TEST(Output, FoldOutputShowsTheSameLinesOnceWithTheirRanksAndTheFilesKeepEveryLine) {
  TempDir barrier, logs;
  const auto done = run_ddprun(four_ranks_print(
      barrier.path(), {"--fold-output", "--fold-window", "3000", "--tag-output", "--log-dir",
                       logs.path(), "--duplicate-stdout-filters", "warning:,torch"}));
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const auto lines = split_lines(done.out);
  std::vector<std::string> folded;
  std::map<int, int> own;
  const std::regex own_pattern(R"(^\[[^:\]]+:(\d)\] rank (\d) is ready$)");
  for (const auto& line : lines) {
    std::smatch match;
    if (std::regex_match(line, match, own_pattern)) {
      EXPECT_EQ(match[1], match[2]) << line;
      ++own[std::stoi(match[1])];
    } else {
      folded.push_back(line);
    }
  }
  EXPECT_EQ(folded, (std::vector<std::string>{"[0-3] loading the model", "[0-3] torch 2.9.0",
                                              "[0-3] warning: TF32 is off"}))
      << done.out;
  EXPECT_EQ(own, (std::map<int, int>{{0, 1}, {1, 1}, {2, 1}, {3, 1}})) << done.out;
  // Nothing is dropped: each rank's file has its four lines; the filtered copy has the two
  // lines of every rank that match, each with its rank.
  std::map<int, int> copied;
  const std::regex copy_pattern(R"(^\[[^:\]]+:(\d)\] (torch 2\.9\.0|warning: TF32 is off)$)");
  for (const auto& line : split_lines(read_text(logs.path() + "/attempt_0/filtered_stdout.log"))) {
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, copy_pattern)) << line;
    ++copied[std::stoi(match[1])];
  }
  EXPECT_EQ(copied, (std::map<int, int>{{0, 2}, {1, 2}, {2, 2}, {3, 2}}));
  for (int rank = 0; rank < 4; ++rank) {
    const std::string r = std::to_string(rank);
    EXPECT_EQ(read_text(logs.path() + "/attempt_0/rank_" + r + ".stdout.log"),
              "loading the model\ntorch 2.9.0\nwarning: TF32 is off\nrank " + r + " is ready\n");
  }
}

TEST(Output, AFoldedLineGoesOutWhenItsWindowEndsWhileTheRanksRunOn) {
  // Rank 1 prints nothing and keeps its output open: rank 0's line is let out by the loop's
  // deadline, not by the end of the job (the test stops the job only once it has seen it).
  Launched job({"--nproc-per-node", "2", "--fold-output", "--fold-window", "200", "--", "/bin/sh",
                "-c", "[ $RANK = 0 ] && echo 'only rank 0'; exec sleep 60"});
  job.wait_stdout([](const std::string& out) { return out == "only rank 0\n"; });
  job.signal(SIGTERM);
  const auto done = job.finish();
  EXPECT_EQ(done.exit_code, 128 + SIGTERM) << done.err;
}

TEST(Output, InAPipeEveryRanksLineIsShownUnlessFoldOutputIsAsked) {
  // The default folds only on a terminal: a pipe's reader gets one line per rank and line.
  TempDir barrier;
  const auto done = run_ddprun(four_ranks_print(barrier.path(), {}));
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const auto lines = split_lines(done.out);
  EXPECT_EQ(lines.size(), 16u) << done.out;
  EXPECT_EQ(std::count(lines.begin(), lines.end(), "loading the model"), 4) << done.out;
}

TEST(Restarts, FailedRoundIsRestartedWithNextRestartCountAndNewPort) {
  const auto done =
      run_ddprun(with_child({"--nproc-per-node", "2", "--max-restarts", "2", "--tag-output"},
                            {"env", "fail-round:0:4@1"}));
  EXPECT_EQ(done.exit_code, 0) << done.err;
  EXPECT_NE(done.err.find("restarting all workers (restart 1 of 2)"), std::string::npos)
      << done.err;
  std::vector<std::string> ports, rounds;
  // Rank 1 prints its environment before it fails; rank 0 may be stopped before it does.
  const std::regex pattern(R"(^\[[^\]]+:1\] (MASTER_PORT|TORCHELASTIC_RESTART_COUNT)=(.*)$)");
  for (const auto& line : split_lines(done.out)) {
    std::smatch match;
    if (!std::regex_match(line, match, pattern)) continue;
    (match[1] == "MASTER_PORT" ? ports : rounds).push_back(match[2]);
  }
  ASSERT_EQ(rounds, (std::vector<std::string>{"0", "1"}));
  ASSERT_EQ(ports.size(), 2u);
  EXPECT_NE(ports[0], ports[1]);
}

TEST(Restarts, GivesUpAfterMaxRestarts) {
  const auto done =
      run_ddprun(with_child({"--nproc-per-node", "2", "--max-restarts", "1"}, {"exit:4@0"}));
  EXPECT_EQ(done.exit_code, 4);
  std::size_t reports = 0;
  for (const auto& line : split_lines(done.err))
    reports += line.find("failed first") != std::string::npos;
  EXPECT_EQ(reports, 2u) << done.err;
}

std::size_t rounds_started(const std::string& err) {
  std::size_t rounds = 0;
  for (const auto& line : split_lines(err)) rounds += line.rfind("ddprun: run ", 0) == 0;
  return rounds;
}

TEST(Restarts, AFailureThatRepeatsWithoutProgressEndsTheRestarts) {
  const auto done =
      run_ddprun(with_child({"--nproc-per-node", "2", "--max-restarts", "5"},
                            {"stderr:ValueError: bad config@1", "exit:3@1", "sleep@0"}));
  EXPECT_EQ(done.exit_code, 3);
  EXPECT_EQ(rounds_started(done.err), 2u) << done.err;
  EXPECT_NE(done.err.find("ddprun: not restarting: round 1 failed as the one before it did (rank "
                          "1: exit code 3: ValueError: bad config)"),
            std::string::npos)
      << done.err;
}

TEST(Restarts, AFailureAfterProgressIsRestartedEveryTime) {
  // Each round reports a newer step before failing the same way: every restart is used.
  const auto done = run_ddprun(with_child({"--nproc-per-node", "2", "--max-restarts", "2"},
                                          {"progress", "exit:3@1", "sleep@0"}));
  EXPECT_EQ(done.exit_code, 3);
  EXPECT_EQ(rounds_started(done.err), 3u) << done.err;
  EXPECT_EQ(done.err.find("not restarting"), std::string::npos) << done.err;
}

TEST(Restarts, RestartOnSignalsLeavesAnExitCodeAlone) {
  const auto done = run_ddprun(
      with_child({"--nproc-per-node", "2", "--max-restarts", "2", "--restart-on", "signals"},
                 {"exit:3@1", "sleep@0"}));
  EXPECT_EQ(done.exit_code, 3);
  EXPECT_EQ(rounds_started(done.err), 1u) << done.err;
  EXPECT_NE(done.err.find("which --restart-on does not list"), std::string::npos) << done.err;
  const auto crash = run_ddprun(
      with_child({"--nproc-per-node", "2", "--max-restarts", "1", "--restart-on", "signals"},
                 {"fail-round:1:0", "raise:11@1", "sleep@0"}));
  EXPECT_EQ(crash.exit_code, 0) << crash.err;  // round 0 crashes, round 1 exits 0
  EXPECT_EQ(rounds_started(crash.err), 2u) << crash.err;
}

TEST(ExitTimeout, AnEarlyCleanExitNoLongerLeavesTheOthersHanging) {
  const auto done = run_ddprun(
      with_child({"--nproc-per-node", "3", "--exit-timeout", "0.5"}, {"exit:0@0", "sleep"}));
  EXPECT_EQ(done.exit_code, 124);
  EXPECT_NE(done.err.find("rank 0 on "), std::string::npos) << done.err;
  EXPECT_NE(done.err.find("exited (exit code 0) and ranks 1-2 were still running 0.5 s later "
                          "(--exit-timeout)"),
            std::string::npos)
      << done.err;
}

// Without SLURM_JOB_END_TIME the job's end comes from squeue, which waits out its timeout
// when no controller answers: a dry run never asks it; a real run does (which shows the
// stand-in squeue below is the one ddprun would run).
TEST(DryRun, NeverAsksTheSchedulersTools) {
  TempDir tmp;
  const std::string mark = tmp.path() + "/asked";
  for (const char* tool : {"squeue", "scontrol"}) {
    const std::string path = tmp.path() + "/" + tool;
    std::ofstream(path) << "#!/bin/sh\necho \"$0\" >> " << mark << "\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const char* path = std::getenv("PATH");
  const std::vector<std::string> slurm = {
      "PATH=" + tmp.path() + ":" + (path ? path : "/usr/bin:/bin"), "SLURM_JOB_ID=7",
      "SLURM_JOB_NODELIST=" + std::string(host), "SLURM_JOB_NUM_NODES=1", "SLURM_TASKS_PER_NODE=1"};
  for (const char* mode : {"--dry-run", "--check"}) {
    SCOPED_TRACE(mode);
    const auto dry = run_ddprun({mode, "--drain-before", "60", "--", "/bin/true"}, slurm);
    EXPECT_EQ(dry.exit_code, 0) << dry.err;
    EXPECT_FALSE(std::filesystem::exists(mark));
  }
  const auto real = run_ddprun({"--drain-before", "60", "--", "/bin/true"}, slurm);
  EXPECT_EQ(real.exit_code, 0) << real.err;
  EXPECT_TRUE(std::filesystem::exists(mark));
}

// torchrun's by-hand form plans without a scheduler (a dry run meets no other node).
TEST(DryRun, ByHandNodesPlanFromTheCommandLine) {
  const auto done = run_ddprun({"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.1.1.1",
                                "--master-port", "29500", "--nproc-per-node", "2", "--max-restarts",
                                "3", "--dry-run", "--format", "json", "--", "/bin/true"});
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const auto plan = nlohmann::json::parse(done.out);
  EXPECT_EQ(plan["scheduler"], "static");
  EXPECT_EQ(plan["world_size"], 4);
  EXPECT_EQ(plan["this_node"], 1);
  EXPECT_EQ(plan["max_restarts"], 3);
}

TEST(DryRun, PrintsTheJsonPlanAndStartsNothing) {
  Launched job(
      with_child({"--nproc-per-node", "3", "--dry-run", "--format", "json", "--run-id", "abc"},
                 {"ready"}),
      {}, true);
  const auto done = job.finish();
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const auto plan = nlohmann::json::parse(done.out);
  EXPECT_EQ(plan["run_id"], "abc");
  EXPECT_EQ(plan["scheduler"], "local");
  EXPECT_EQ(plan["world_size"], 3);
  EXPECT_EQ(plan["nodes"].size(), 1u);
  EXPECT_EQ(plan["nodes"][0]["nproc"], 3);
  EXPECT_EQ(plan["nodes"][0]["first_rank"], 0);
  ASSERT_EQ(plan["ranks"].size(), 3u);
  EXPECT_EQ(plan["ranks"][2]["env"]["RANK"], "2");
  EXPECT_EQ(plan["ranks"][2]["local_rank"], 2);
  EXPECT_TRUE(plan["master_port"].is_number());
}

TEST(Doctor, ReportsTheDetectedSchedulerNodesAndTheWorkersLibraries) {
  const auto done =
      run_ddprun({"--doctor", "--master-addr", "127.0.0.1", child_bin()},
                 {"SLURM_JOB_ID=31", "SLURM_JOB_NODELIST=" + hostname() + ",peer[1-2]",
                  "SLURM_JOB_NUM_NODES=3", "SLURM_TASKS_PER_NODE=2(x3)"});
  ASSERT_EQ(done.exit_code, 0) << done.err;
  EXPECT_NE(done.out.find("slurm (detected), job 31"), std::string::npos) << done.out;
  EXPECT_NE(done.out.find("3: " + hostname() + " (2 slots), peer1 (2 slots), peer2 (2 slots)"),
            std::string::npos)
      << done.out;
  EXPECT_NE(done.out.find("SLURM_JOB_NODELIST="), std::string::npos) << done.out;
  // A loopback master (numeric: nothing is looked up) in a job of 3 nodes: the very
  // mistake the doctor is for.
  EXPECT_NE(done.out.find("resolves only to 127.0.0.1 (loopback)"), std::string::npos) << done.out;
  EXPECT_NE(done.out.find(child_bin()), std::string::npos) << done.out;
  EXPECT_NE(done.out.find("ulimit"), std::string::npos) << done.out;
}

}  // namespace
}  // namespace ddprun::testing
