// A handle on a running job, for real: `ddprun --status`, `--stacks` and `--stop` from
// another shell, SIGHUP detaching the job and `--attach` following it to its end, and a
// peer of another user refused whichever side it is on.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <regex>
#include <sstream>
#include <thread>

#include "child_process.h"
#include "launcher_harness.h"

namespace ddprun::testing {
namespace {

using std::chrono::seconds;

// A Python rank that writes its step to DDPRUN_PROGRESS_FILE and prints it, `steps` times,
// then sleeps `pause` seconds.
std::string stepping_script(const std::string& dir, int steps, double pause) {
  const std::string script = dir + "/job.py";
  // All of it inside `run`: a stack taken at any moment has `run` innermost.
  std::ofstream(script) << "import os, time\n"
                           "def run():\n"
                           "    progress = os.environ['DDPRUN_PROGRESS_FILE']\n"
                           "    for step in range("
                        << steps
                        << "):\n"
                           "        with open(progress, 'w') as f:\n"
                           "            f.write(str(step))\n"
                           "        print('rank %s step %d' % (os.environ['RANK'], step), "
                           "flush=True)\n"
                           "        time.sleep("
                        << pause
                        << ")\n"
                           "run()\n";
  return script;
}

Finished ask(const std::vector<std::string>& args, const std::string& runtime_dir) {
  return run_ddprun(args, {"XDG_RUNTIME_DIR=" + runtime_dir});
}

// Asks --status until `holds(answer)`, for at most 20 s.
Finished status_until(const std::string& run, const std::string& runtime_dir,
                      const std::function<bool(const std::string&)>& holds) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  Finished answer;
  do {
    answer = ask({"--status", run}, runtime_dir);
    if (answer.exit_code == 0 && holds(answer.out)) return answer;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a retry, not a sync
  } while (std::chrono::steady_clock::now() < deadline);
  ADD_FAILURE() << "status never showed what was expected; last:\n" << answer.out << answer.err;
  return answer;
}

// The step a status row of `rank` shows; -1 when none.
long long step_of(const std::string& status, int rank) {
  for (const std::string& line : split_lines(status)) {
    std::istringstream row(line);
    std::string first, host, pid, state, step;
    row >> first >> host >> pid >> state >> step;
    if (first == std::to_string(rank) && state == "running" && step != "-") return std::stoll(step);
  }
  return -1;
}

TEST(Control, StatusStacksAndStopReachARunningJobFromAnotherShell) {
  TempDir dir;
  const std::string script = stepping_script(dir.path(), 100000, 0.05);
  Launched job({"--nproc-per-node", "2", "--run-id", "handle1", "python3", script},
               {"XDG_RUNTIME_DIR=" + dir.path()});
  const Finished first = status_until("handle1", dir.path(), [](const std::string& out) {
    return step_of(out, 0) >= 2 && step_of(out, 1) >= 2;
  });
  EXPECT_NE(first.out.find("ddprun: run handle1 (ddprun pid " + std::to_string(job.pid())),
            std::string::npos)
      << first.out;
  EXPECT_NE(first.out.find("restarts 0 of 0"), std::string::npos) << first.out;
  for (const int rank : {0, 1}) {
    EXPECT_NE(first.out.find("rank " + std::to_string(rank) + " step "), std::string::npos)
        << "rank " << rank << "'s last output line:\n"
        << first.out;
  }

  // The latest run when none is named; nothing is stopped by looking.
  const Finished stacks = ask({"--stacks"}, dir.path());
  EXPECT_EQ(stacks.exit_code, 0) << stacks.err;
  // Both ranks in `run` (on one line or two, depending on where each was).
  for (const int rank : {0, 1}) {
    const std::regex named("rank[s]? [0-9, -]*\\b" + std::to_string(rank) +
                           "\\b[0-9, -]*: in run \\(job\\.py:[0-9]+\\) <- <module>");
    EXPECT_TRUE(std::regex_search(stacks.out, named)) << "rank " << rank << ":\n" << stacks.out;
  }
  EXPECT_NE(stacks.out.find("--- rank 1 ("), std::string::npos) << stacks.out;
  const long long before = step_of(first.out, 0);
  status_until("handle1", dir.path(),
               [&](const std::string& out) { return step_of(out, 0) > before + 2; });

  const Finished stop = ask({"--stop", "handle1"}, dir.path());
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
  const Finished done = job.finish(seconds(30));
  EXPECT_EQ(done.exit_code, 128 + SIGTERM) << done.err;
  EXPECT_NE(done.err.find("stopped by SIGTERM"), std::string::npos) << done.err;

  // Gone with its job: the socket and the link.
  const Finished after = ask({"--status"}, dir.path());
  EXPECT_EQ(after.exit_code, 1);
  EXPECT_NE(after.err.find("no running job of yours on this host"), std::string::npos) << after.err;
}

// Two runs in one folder: when the newer ends, the older (its `latest` link gone) is still
// found without a run id. And a run named by its id is found from a shell with another
// runtime folder and TMPDIR (a scheduler's per-job TMPDIR must not hide a job).
TEST(Control, AnOlderRunIsFoundAfterTheLatestEndsAndANamedRunFromAnyShell) {
  TempDir dir;
  TempDir elsewhere;
  const std::string script = stepping_script(dir.path(), 100000, 0.05);
  const std::string older = "older" + std::to_string(::getpid());
  Launched job({"--nproc-per-node", "1", "--run-id", older, "python3", script},
               {"XDG_RUNTIME_DIR=" + dir.path()});
  status_until(older, dir.path(), [](const std::string& out) { return step_of(out, 0) >= 1; });
  const Finished newer = run_ddprun({"--nproc-per-node", "1", "--run-id", older + "n", "true"},
                                    {"XDG_RUNTIME_DIR=" + dir.path()});
  EXPECT_EQ(newer.exit_code, 0) << newer.err;
  const Finished latest_gone = ask({"--status"}, dir.path());
  EXPECT_EQ(latest_gone.exit_code, 0) << latest_gone.err;
  EXPECT_NE(latest_gone.out.find("ddprun: run " + older + " "), std::string::npos)
      << latest_gone.out;
  EXPECT_EQ(ask({"--stop", older}, dir.path()).exit_code, 0);
  EXPECT_EQ(job.finish(seconds(30)).exit_code, 128 + SIGTERM);

  // Started with no runtime folder and a per-job TMPDIR; asked from another shell.
  const std::string named = "named" + std::to_string(::getpid());
  Launched other({"--nproc-per-node", "1", "--run-id", named, "python3", script},
                 {"XDG_RUNTIME_DIR=", "TMPDIR=" + dir.path()});
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  Finished found;
  do {
    found = run_ddprun({"--status", named},
                       {"XDG_RUNTIME_DIR=" + elsewhere.path(), "TMPDIR=" + elsewhere.path()});
    if (found.exit_code == 0 && step_of(found.out, 0) >= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a retry, not a sync
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_NE(found.out.find("ddprun: run " + named + " "), std::string::npos)
      << found.out << found.err;
  EXPECT_EQ(run_ddprun({"--stop", named}, {"XDG_RUNTIME_DIR=" + elsewhere.path()}).exit_code, 0);
  EXPECT_EQ(other.finish(seconds(30)).exit_code, 128 + SIGTERM);
}

// Each --stacks shows where the ranks are now, not where an earlier request found them
// (faulthandler appends every dump to the same file).
TEST(Control, EveryStacksRequestShowsWhereTheRanksAreNow) {
  if (unavailable(::access("/usr/bin/eu-stack", X_OK) != 0, "eu-stack is not installed"))
    GTEST_SKIP();
  TempDir dir;
  const std::string go = dir.path() + "/go";
  const std::string script = dir.path() + "/moving.py";
  // Each place says it is there from inside it: the line seen means the rank is in it.
  std::ofstream(script) << "import os, time\n"
                           "def first_place():\n"
                           "    print('started', flush=True)\n"
                           "    while not os.path.exists('"
                        << go
                        << "'):\n"
                           "        time.sleep(0.01)\n"
                           "def second_place():\n"
                           "    print('moved on', flush=True)\n"
                           "    while True:\n"
                           "        time.sleep(0.01)\n"
                           "first_place()\n"
                           "second_place()\n";
  Launched job({"--nproc-per-node", "2", "--run-id", "handle4", "python3", script},
               {"XDG_RUNTIME_DIR=" + dir.path()});
  // Both ranks' last lines, as --status shows them.
  const auto both_said = [](const std::string& line) {
    return [line](const std::string& out) {
      std::size_t count = 0;
      for (auto at = out.find(line); at != std::string::npos; at = out.find(line, at + 1)) {
        ++count;
      }
      return count == 2;
    };
  };
  status_until("handle4", dir.path(), both_said("started"));
  const Finished before = ask({"--stacks", "handle4"}, dir.path());
  EXPECT_NE(before.out.find("ranks 0-1: in first_place (moving.py:"), std::string::npos)
      << before.out;
  std::ofstream(go) << "";
  status_until("handle4", dir.path(), both_said("moved on"));
  const Finished after = ask({"--stacks", "handle4"}, dir.path());
  EXPECT_NE(after.out.find("ranks 0-1: in second_place (moving.py:"), std::string::npos)
      << after.out;
  EXPECT_EQ(after.out.find("first_place"), std::string::npos) << after.out;
  EXPECT_EQ(ask({"--stop", "handle4"}, dir.path()).exit_code, 0);
  EXPECT_EQ(job.finish(seconds(30)).exit_code, 128 + SIGTERM);
}

TEST(Control, SighupDetachesAndAttachFollowsTheJobToItsEnd) {
  TempDir dir;
  const std::string script = stepping_script(dir.path(), 60, 0.05);
  Launched job({"--nproc-per-node", "2", "--run-id", "handle2", "python3", script},
               {"XDG_RUNTIME_DIR=" + dir.path()});
  status_until("handle2", dir.path(), [](const std::string& out) { return step_of(out, 1) >= 1; });
  job.signal(SIGHUP);
  const Finished detached = status_until("handle2", dir.path(), [](const std::string& out) {
    return out.find("detached: console in ") != std::string::npos;
  });
  const Finished attached = ask({"--attach", "handle2"}, dir.path());
  EXPECT_EQ(attached.exit_code, 0) << attached.err;
  EXPECT_NE(attached.out.find("SIGHUP: detached from the terminal"), std::string::npos)
      << attached.out;
  for (const int rank : {0, 1}) {
    EXPECT_NE(attached.out.find("rank " + std::to_string(rank) + " step 59\n"), std::string::npos)
        << attached.out;
  }
  const Finished done = job.finish(seconds(30));
  EXPECT_EQ(done.exit_code, 0) << done.err;
  // What the job printed after the hangup is in the console file, not on the old terminal.
  EXPECT_EQ(done.out.find("step 59"), std::string::npos) << done.out;
  // The end-of-job table, which ddprun printed after the hangup, is followed too.
  EXPECT_NE(attached.out.find("ddprun:  rank  local  pid"), std::string::npos) << attached.out;
}

TEST(Control, SighupStopsTheJobWhenSignalsToHandleNamesIt) {
  TempDir dir;
  const std::string script = stepping_script(dir.path(), 100000, 0.05);
  Launched job({"--nproc-per-node", "1", "--run-id", "handle3", "--signals-to-handle", "SIGHUP",
                "python3", script},
               {"XDG_RUNTIME_DIR=" + dir.path()});
  status_until("handle3", dir.path(), [](const std::string& out) { return step_of(out, 0) >= 1; });
  job.signal(SIGHUP);
  EXPECT_EQ(job.finish(seconds(30)).exit_code, 128 + SIGHUP);
}

// Starts `argv` as user and group 65534 (nobody) through setpriv, in / (which nobody may
// enter), with its output in `out_file`; returns its pid.
pid_t start_as_nobody(const std::vector<std::string>& argv, const std::string& runtime_dir,
                      const std::string& out_file) {
  const int out = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  const pid_t pid = support::spawn_as_nobody(
      argv, support::environment_with({"XDG_RUNTIME_DIR=" + runtime_dir}), out, out);
  ::close(out);
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(Control, APeerOfAnotherUserIsRefusedOnEitherSide) {
  if (unavailable(::geteuid() != 0, "not root: cannot run a side as another user")) GTEST_SKIP();
  if (unavailable(::access("/usr/bin/setpriv", X_OK) != 0, "setpriv is not installed"))
    GTEST_SKIP();
  TempDir dir;
  // A copy of ddprun that user nobody may run, and a runtime folder of each user's.
  ::chmod(dir.path().c_str(), 0755);
  const std::string ddprun = dir.path() + "/ddprun";
  std::filesystem::copy_file(ddprun_bin(), ddprun);
  ::chmod(ddprun.c_str(), 0755);
  const std::string nobody_runtime = dir.path() + "/nobody";
  const std::string root_runtime = dir.path() + "/root";
  std::filesystem::create_directory(nobody_runtime);
  std::filesystem::create_directory(root_runtime);
  ASSERT_EQ(::chown(nobody_runtime.c_str(), 65534, 65534), 0);
  ::chmod(nobody_runtime.c_str(), 0700);
  ::chmod(root_runtime.c_str(), 0700);

  // Root's job; nobody asks (through the same folder): the private folder keeps it out.
  Launched job({"--nproc-per-node", "1", "--run-id", "mine", "--", "/usr/bin/sleep", "60"},
               {"XDG_RUNTIME_DIR=" + root_runtime});
  status_until("mine", root_runtime,
               [](const std::string& out) { return out.find(" running ") != std::string::npos; });
  const std::string asked = dir.path() + "/asked.txt";
  EXPECT_EQ(wait_exit(start_as_nobody({ddprun, "--stop", "mine"}, root_runtime, asked)), 1);
  std::ifstream asked_in(asked);
  const std::string refusal{std::istreambuf_iterator<char>(asked_in), {}};
  EXPECT_NE(refusal.find("Permission denied"), std::string::npos) << refusal;
  // Still running: nobody's --stop did nothing.
  EXPECT_EQ(ask({"--status", "mine"}, root_runtime).exit_code, 0);
  EXPECT_EQ(ask({"--stop", "mine"}, root_runtime).exit_code, 0);
  EXPECT_EQ(job.finish(seconds(30)).exit_code, 128 + SIGTERM);

  // Nobody's job; root, whom no folder keeps out, is refused by the peer check.
  const std::string theirs_out = dir.path() + "/theirs.txt";
  const pid_t theirs = start_as_nobody(
      {ddprun, "--nproc-per-node", "1", "--run-id", "theirs", "--", "/usr/bin/sleep", "60"},
      nobody_runtime, theirs_out);
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  Finished refused;
  do {
    refused = ask({"--stop", "theirs"}, nobody_runtime);
    if (refused.err.find("refused") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // until its socket is there
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("error: refused: this job belongs to user id 65534, not to user id 0"),
            std::string::npos)
      << refused.err;
  // Its own user stops it.
  const std::string stopped = dir.path() + "/stopped.txt";
  EXPECT_EQ(wait_exit(start_as_nobody({ddprun, "--stop", "theirs"}, nobody_runtime, stopped)), 0);
  EXPECT_EQ(wait_exit(theirs), 128 + SIGTERM);
}

}  // namespace
}  // namespace ddprun::testing
