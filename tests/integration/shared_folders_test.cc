// Files in shared folders (docs/fault-tolerance.md#files-in-shared-folders): user nobody
// plants folders, links, FIFOs and files where ddprun, run by root, writes or reads back;
// ddprun must write through none of them, quote none of them, and wait on none of them.
// A --status whose socket path cannot exist says there is no running job.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "child_process.h"
#include "launcher_harness.h"

namespace ddprun::testing {
namespace {

using std::chrono::seconds;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

mode_t mode_of(const std::string& path) {
  struct stat info {};
  EXPECT_EQ(::lstat(path.c_str(), &info), 0) << path;
  return info.st_mode;
}

// Runs `argv` as nobody with `extra_env`; returns its exit code, its output in `output`.
int run_as_nobody(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                  const std::string& output_file, std::string* output = nullptr) {
  const int out = ::open(output_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  const pid_t pid = support::spawn_as_nobody(argv, support::environment_with(extra_env), out, out);
  ::close(out);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (output != nullptr) *output = slurp(output_file);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A shared folder as /tmp is (mode 1777) standing in for TMPDIR, and a file of root's that
// nobody would like ddprun to write to (a ~/.bashrc).
class SharedFolders : public ::testing::Test {
 protected:
  void SetUp() override {
    if (unavailable(::geteuid() != 0, "not root: cannot play another user")) GTEST_SKIP();
    if (unavailable(::access("/usr/bin/setpriv", X_OK) != 0, "setpriv is not installed"))
      GTEST_SKIP();
    ASSERT_EQ(::chmod(tmp_.c_str(), 01777), 0);
    std::ofstream(victim_) << "# root's shell start-up\n";
  }
  // `script` run by sh as nobody must succeed.
  void as_nobody(const std::string& script) {
    std::string said;
    ASSERT_EQ(run_as_nobody({"/bin/sh", "-ec", script}, {}, dir_.path() + "/nobody.txt", &said), 0)
        << script << "\n"
        << said;
  }

  TempDir dir_;
  std::string tmp_ = dir_.path();
  std::string victim_ = dir_.path() + "/bashrc";
};

constexpr const char* kForgedError =
    R"json({"message": {"message": "RuntimeError: CUDA out of memory (forged)", )json"
    R"json("extraInfo": {"timestamp": "1"}}})json";

// Finding 1: the default log folder for -r/--tee, made first by another user with a link
// to the victim's file and, once the worker runs, a forged error file in it.
TEST_F(SharedFolders, ALogFolderPlantedByAnotherUserIsLeftAloneAndNotQuoted) {
  const std::string planted = tmp_ + "/ddprun-logs-planted1/attempt_0";
  as_nobody("umask 0; mkdir -p " + planted + "; ln -s " + victim_ + " " + planted +
            "/rank_0.stdout.log; ln -s " + victim_ + " " + planted + "/rank_0.stderr.log");
  Launched job(with_child({"--nproc-per-node", "1", "--run-id", "planted1", "-r", "3"},
                          {"print:2", "stderr:secret", "ready", "wait-signal", "exit:3"}),
               {"TMPDIR=" + tmp_}, /*ready_pipe=*/true);
  job.wait_ready(1);
  // ddprun removed any error file before the start: this one comes while the rank runs.
  as_nobody("printf '%s' '" + std::string(kForgedError) + "' > " + planted +
            "/rank_0.error.json || true");
  ::kill(job.worker_pid(0), SIGTERM);  // the rank goes on to exit 3
  const Finished done = job.finish(seconds(30));
  EXPECT_EQ(done.exit_code, 3) << done.err;

  EXPECT_EQ(slurp(victim_), "# root's shell start-up\n");
  EXPECT_EQ(done.err.find("CUDA out of memory"), std::string::npos) << done.err;
  std::smatch match;
  const std::string err = done.err;
  ASSERT_TRUE(std::regex_search(err, match,
                                std::regex("ddprun: warning: " + tmp_ +
                                           "/ddprun-logs-planted1 belongs to user id 65534, not "
                                           "to you; the logs go to (\\S+)\n")))
      << err;
  const std::string fresh = match[1];
  EXPECT_NE(err.find("logs in " + fresh + "/attempt_0"), std::string::npos) << err;
  for (const std::string& folder : {fresh, fresh + "/attempt_0"}) {
    EXPECT_EQ(mode_of(folder) & 07777, 0700u) << folder;
  }
  const std::string log = fresh + "/attempt_0/rank_0.stdout.log";
  EXPECT_EQ(mode_of(log) & 0777, 0600u);
  EXPECT_NE(slurp(log).find("rank 0 line 1"), std::string::npos);
  EXPECT_NE(slurp(fresh + "/attempt_0/rank_0.stderr.log").find("secret"), std::string::npos);
}

// Finding 1 in a folder the user named: a shared --log-dir (mode 1777) where nobody made
// attempt_0 first, or a link named attempt_0 to a folder of nobody's.
TEST_F(SharedFolders, AnAttemptFolderOfAnotherUserInASharedLogDirIsRefused) {
  int shared = 0;
  for (const std::string& plant :
       {std::string("mkdir -p L/attempt_0; ln -s V L/attempt_0/rank_0.stdout.log"),
        std::string("mkdir -p L/theirs; ln -s V L/theirs/rank_0.stdout.log; ln -s theirs "
                    "L/attempt_0")}) {
    SCOPED_TRACE(plant);
    const std::string logs = tmp_ + "/shared" + std::to_string(++shared);
    ASSERT_TRUE(std::filesystem::create_directory(logs));
    ASSERT_EQ(::chmod(logs.c_str(), 01777), 0);
    as_nobody("umask 0; " +
              std::regex_replace(std::regex_replace(plant, std::regex("L/"), logs + "/"),
                                 std::regex(" V "), " " + victim_ + " "));
    const Finished done =
        run_ddprun(with_child({"--nproc-per-node", "1", "--log-dir", logs}, {"print:2"}));
    EXPECT_EQ(done.exit_code, 125) << done.err;
    EXPECT_NE(done.err.find("ddprun: error: " + logs + "/attempt_0 "), std::string::npos)
        << done.err;
    EXPECT_NE(done.err.find("name another --log-dir"), std::string::npos) << done.err;
    EXPECT_EQ(slurp(victim_), "# root's shell start-up\n");
  }
}

// Finding 2: with the control folder taken by another user, the console file after a
// SIGHUP went to a name anyone could guess and plant first: a FIFO there froze ddprun in
// open(), a file there received the console.
TEST_F(SharedFolders, TheDetachedConsoleNeverGoesToAPlantedFileOrFifo) {
  as_nobody("mkdir -m 700 " + tmp_ + "/ddprun");  // the control folder, nobody's
  for (const bool fifo : {true, false}) {
    SCOPED_TRACE(fifo ? "a FIFO" : "a file");
    const std::string run = fifo ? "console1" : "console2";
    Launched job(with_child({"--nproc-per-node", "1", "--run-id", run}, {"ready", "sleep"}),
                 {"TMPDIR=" + tmp_, "XDG_RUNTIME_DIR=" + tmp_}, /*ready_pipe=*/true);
    job.wait_ready(1);
    const std::string name = run + "-" + std::to_string(job.pid()) + ".console";
    const std::string guessed = tmp_ + "/" + name;
    as_nobody(fifo ? "mkfifo -m 666 " + guessed : "umask 0; : > " + guessed);
    job.signal(SIGHUP);  // read before the SIGTERM: the signalfd gives the lower number first
    job.signal(SIGTERM);
    const Finished done = job.finish(seconds(30));  // a ddprun stuck in open() fails here
    EXPECT_EQ(done.exit_code, 128 + SIGTERM) << done.err;
    EXPECT_NE(done.err.find("ddprun: warning: no control socket: " + tmp_ +
                            "/ddprun belongs to user id 65534, not to you (remove it, or set "
                            "XDG_RUNTIME_DIR to a folder of your own)"),
              std::string::npos)
        << done.err;
    if (fifo) {
      EXPECT_TRUE(S_ISFIFO(mode_of(guessed)));
    } else {
      EXPECT_EQ(slurp(guessed), "");
    }
    // The console went on in a fresh folder of root's.
    std::string console;
    for (const auto& entry : std::filesystem::directory_iterator(tmp_)) {
      const std::string file = entry.path().string() + "/" + name;
      if (entry.path().filename().string().rfind("ddprun-" + run + "-", 0) != 0 ||
          !std::filesystem::exists(file)) {
        continue;
      }
      EXPECT_EQ(mode_of(entry.path().string()) & 07777, 0700u);
      console = file;
    }
    ASSERT_FALSE(console.empty()) << done.err;
    EXPECT_EQ(mode_of(console) & 0777, 0600u);
    EXPECT_NE(slurp(console).find("SIGHUP: detached from the terminal"), std::string::npos);
  }
}

// Finding 6: the hint for a control folder of another user is true for the user who reads
// it: nobody cannot remove root's folder in a sticky /tmp.
TEST_F(SharedFolders, AFolderTheUserCannotRemoveGetsAHintTheyCanFollow) {
  const std::string bin = tmp_ + "/bin";
  std::filesystem::create_directory(bin);
  ::chmod(bin.c_str(), 0755);
  std::filesystem::copy_file(ddprun_bin(), bin + "/ddprun");
  ::chmod((bin + "/ddprun").c_str(), 0755);
  ASSERT_EQ(::mkdir((tmp_ + "/ddprun").c_str(), 0700), 0);  // root's control folder
  std::string said;
  EXPECT_EQ(run_as_nobody({bin + "/ddprun", "--nproc-per-node", "1", "--", "/bin/true"},
                          {"TMPDIR=" + tmp_, "XDG_RUNTIME_DIR=" + tmp_}, tmp_ + "/hint.txt", &said),
            0)
      << said;
  EXPECT_NE(
      said.find(tmp_ + "/ddprun belongs to user id 0, not to you (you cannot remove it: ask root "
                       "to, or set XDG_RUNTIME_DIR to a folder of your own)"),
      std::string::npos)
      << said;
}

// Finding 6: a folder too long for a socket path is no running job, not "File name too long".
TEST(ControlClient, ASocketPathTooLongForAnyJobMeansNoRunningJob) {
  TempDir dir;
  const std::string deep = dir.path() + "/" + std::string(200, 'd');  // missing
  const Finished missing = run_ddprun({"--status"}, {"XDG_RUNTIME_DIR=" + deep});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("ddprun: error: no running job of yours on this host"),
            std::string::npos)
      << missing.err;
  const std::string too_long = dir.path() + "/" + std::string(5000, 'l');
  const Finished beyond = run_ddprun({"--status", "some-run"}, {"XDG_RUNTIME_DIR=" + too_long});
  EXPECT_EQ(beyond.exit_code, 1);
  EXPECT_NE(beyond.err.find("ddprun: error: no run some-run of yours on this host"),
            std::string::npos)
      << beyond.err;
  EXPECT_NE(beyond.err.find("longer than"), std::string::npos) << beyond.err;
  EXPECT_EQ(beyond.err.find("File name too long"), std::string::npos) << beyond.err;
}

}  // namespace
}  // namespace ddprun::testing
