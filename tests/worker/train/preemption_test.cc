// Preemption, crash consistency and hung peers with real ddp-train processes: two ranks on
// this node (all-reduces through shared memory, the default; the stop-and-resume and hung
// peer tests also over gloo alone and over the gloo-as-nccl double), started directly (so that the
// test knows every pid and every exit status), on the toy model. Every wait is for a line a worker
// prints or for a process to end; nothing sleeps to synchronise, and no timing is asserted.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "child_process.h"
#include "ddprun/contract/errors.h"
#include "training_fixture.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A bound on every wait, so that a broken worker fails the test instead of hanging it.
constexpr auto kPatience = std::chrono::seconds(90);

// N ddp-train ranks with one shared output pipe. The destructor SIGKILLs (and SIGCONTs)
// whatever still runs, so a failing test leaves no process behind.
class Job {
 public:
  // Starts every rank, or only those in `ranks` (start() starts the others later).
  // `per_node` ranks per simulated node (0: all on one): LOCAL_RANK, LOCAL_WORLD_SIZE,
  // GROUP_RANK and DDPRUN_HOST say so, as ddprun would on several nodes.
  Job(int world, const std::vector<std::string>& args, const fs::path& dir,
      const std::vector<int>& ranks = {}, int per_node = 0)
      : world_(world), per_node_(per_node > 0 ? per_node : world), args_(args), dir_(dir) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    read_fd_ = fds[0];
    write_fd_ = fds[1];
    // A FileStore of its own per job: no port to pick and lose to another test under
    // ctest -j, and no keys left by an earlier job's killed ranks.
    static int jobs = 0;
    store_ = (dir / ("store-" + std::to_string(++jobs))).string();
    pids_.assign(static_cast<std::size_t>(world), -1);
    status_.assign(static_cast<std::size_t>(world), -1);
    for (int rank = 0; rank < world; ++rank) {
      if (ranks.empty() || std::find(ranks.begin(), ranks.end(), rank) != ranks.end()) {
        start(rank);
      }
    }
  }

  void start(int rank) {
    std::vector<std::string> env = {
        "RANK=" + std::to_string(rank),
        "LOCAL_RANK=" + std::to_string(rank % per_node_),
        "WORLD_SIZE=" + std::to_string(world_),
        "LOCAL_WORLD_SIZE=" + std::to_string(per_node_),
        "GROUP_RANK=" + std::to_string(rank / per_node_),
        "DDPRUN_HOST=node" + std::to_string(rank / per_node_),  // names the simulated node
        "MASTER_ADDR=127.0.0.1",
        "MASTER_PORT=1",  // read with the other variables; the FileStore needs no port
        "OMP_NUM_THREADS=1",
        "TORCHELASTIC_ERROR_FILE=" +
            (dir_ / ("rank" + std::to_string(rank) + ".error.json")).string(),
        "PATH=/usr/bin:/bin"};
    std::vector<std::string> argv = {DDP_TRAIN_BIN, "--init-method", "file://" + store_};
    argv.insert(argv.end(), args_.begin(), args_.end());
    const pid_t pid = ddprun::support::spawn_child(argv, env, write_fd_, write_fd_);
    pids_[static_cast<std::size_t>(rank)] = pid;
    // Every rank started: only they hold the pipe now, so their exit ends the output.
    if (std::find(pids_.begin(), pids_.end(), -1) == pids_.end()) {
      ::close(write_fd_);
      write_fd_ = -1;
    }
  }

  // Waits (reading output meanwhile) until the job's store holds a key ending in `key`;
  // false after kPatience.
  bool wait_for_key(const std::string& key) {
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(store_, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      if (bytes.find("/" + key) != std::string::npos) return true;
      read_some(20);
    }
    return false;
  }

  ~Job() {
    for (std::size_t i = 0; i < pids_.size(); ++i) {
      if (status_[i] != -1 || pids_[i] == -1) continue;
      ::kill(pids_[i], SIGKILL);
      ::kill(pids_[i], SIGCONT);
      ::waitpid(pids_[i], nullptr, 0);
    }
    ::close(read_fd_);
    if (write_fd_ != -1) ::close(write_fd_);
  }

  pid_t pid(int rank) const { return pids_[static_cast<std::size_t>(rank)]; }
  const std::string& output() const { return output_; }

  // Reads output until it contains `pattern` (regex) `count` times; false at EOF or after
  // kPatience.
  bool wait_for(const std::string& pattern, int count = 1) {
    const std::regex re(pattern);
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    for (;;) {
      const auto begin = std::sregex_iterator(output_.begin(), output_.end(), re);
      if (std::distance(begin, std::sregex_iterator()) >= count) return true;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(static_cast<int>(left.count()))) return false;
    }
  }

  // Waits for rank `rank` to end: its exit code, or 128 + signal.
  int wait(int rank) {
    const auto i = static_cast<std::size_t>(rank);
    if (status_[i] == -1) {
      int status = 0;
      // Output is drained meanwhile: a full pipe must not block the worker.
      while (::waitpid(pids_[i], &status, WNOHANG) == 0) read_some(100);
      status_[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return status_[i];
  }

  void drain() {
    while (read_some(2000)) {
    }
  }

 private:
  bool read_some(int timeout_ms) {
    pollfd p{read_fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    char buffer[4096];
    const ssize_t n = ::read(read_fd_, buffer, sizeof buffer);
    if (n <= 0) return false;
    output_.append(buffer, static_cast<std::size_t>(n));
    return true;
  }

  int world_;
  int per_node_;
  std::vector<std::string> args_;
  fs::path dir_;
  std::string store_;
  int read_fd_ = -1;
  int write_fd_ = -1;  // until every rank has started
  std::vector<pid_t> pids_;
  std::vector<int> status_;
  std::string output_;
};

class PreemptionTest : public ddprun::support::TrainingFolder {
 protected:
  // The toy config (3 epochs of 10 steps on 2 ranks) with `extra` merged in, as a file.
  std::string config(const std::string& name, const json& extra) const {
    json c = json::parse(R"({
      "model": {"name": "toy"},
      "data": {"name": "synthetic", "synthetic_train": 160, "synthetic_test": 64},
      "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
      "train": {"epochs": 3, "batch_size_per_rank": 8, "seed": 11, "loss": "mse"},
      "runtime": {"threads": 1, "backend": "gloo", "timeout_s": 60},
      "diagnostics": {"check_replicas": true},
      "progress": {"quiet": true}
    })");
    c.merge_patch(transport_);
    c.merge_patch(extra);
    const std::string file = path(name);
    std::ofstream(file) << c.dump(2);
    return file;
  }

  // Runs to the end (expecting exit 0 from both ranks) and returns the final parameters.
  json run_to_end(const std::string& config_file, const std::string& tag) {
    const std::string params = path(tag + ".params.json");
    Job job(2, {"--config", config_file, "--final-params", params}, dir_);
    EXPECT_EQ(job.wait(0), 0) << job.output();
    EXPECT_EQ(job.wait(1), 0) << job.output();
    return fs::exists(params) ? read_json(params)["params"] : json();
  }

  json transport_ = json::object();  // merged into every config
};

// Over shared memory (the default on one node), gloo alone, and the gloo-as-nccl double:
// its data plane refuses every tensor DDP did not allocate there, as NCCL refuses CPU
// tensors, so a run through stop checks, replica checks, evaluation, checkpoints and resume
// proves that no control collective reaches the device backend.
class PreemptionOverTransports : public PreemptionTest,
                                 public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    PreemptionTest::SetUp();
    if (GetParam() == "Gloo") transport_ = {{"runtime", {{"shared_memory", false}}}};
    if (GetParam() == "GlooAsNccl") transport_ = {{"runtime", {{"backend", "gloo-as-nccl"}}}};
  }
};

INSTANTIATE_TEST_SUITE_P(Transports, PreemptionOverTransports,
                         ::testing::Values("SharedMemory", "Gloo", "GlooAsNccl"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST_P(PreemptionOverTransports, SigtermAtSeededRandomStepsStopsWith75AndResumesBitIdentical) {
  const json straight = run_to_end(config("straight.json", json::object()), "straight");
  ASSERT_FALSE(straight.is_null());
  std::mt19937 rng(20261122);
  // A seeded random step, one that ends mid-epoch, one whose stop ends an epoch (10).
  const std::int64_t random_step = std::uniform_int_distribution<std::int64_t>(1, 27)(rng);
  for (const std::int64_t hold : {random_step, std::int64_t{13}, std::int64_t{9}}) {
    SCOPED_TRACE("SIGTERM while held after step " + std::to_string(hold));
    const std::string ckpt = path("ckpt-" + std::to_string(hold));
    const std::string cfg = config("held.json", {{"checkpoint", {{"dir", ckpt}}},
                                                 {"diagnostics", {{"hold_after_step", hold}}},
                                                 {"preemption", {{"check_every_steps", 1}}}});
    {
      Job job(2, {"--config", cfg}, dir_);
      ASSERT_TRUE(job.wait_for("holding after step " + std::to_string(hold), 2)) << job.output();
      // What ddprun does on SIGTERM: each worker gets it.
      ::kill(job.pid(0), SIGTERM);
      ::kill(job.pid(1), SIGTERM);
      EXPECT_EQ(job.wait(0), ddprun::kExitPreempted) << job.output();
      EXPECT_EQ(job.wait(1), ddprun::kExitPreempted) << job.output();
      job.drain();
      // The held step's check had passed: the ranks agree on the next one.
      const std::int64_t stop = hold + 1;
      EXPECT_NE(job.output().find("stopping after step " + std::to_string(stop) + " (epoch " +
                                  std::to_string(stop / 10 + 1) + ", batch " +
                                  std::to_string(stop % 10) + ") on a preemption notice (SIGTERM)"),
                std::string::npos)
          << job.output();
      char name[32];
      std::snprintf(name, sizeof name, "ckpt-%08lld.pt", static_cast<long long>(stop));
      EXPECT_EQ(read_text(ckpt + "/latest").substr(0, 16), name);
    }
    const json resumed = run_to_end(config("resume.json", {{"checkpoint", {{"dir", ckpt}}}}),
                                    "resumed-" + std::to_string(hold));
    EXPECT_EQ(resumed, straight) << "final parameters differ after a stop at step " << hold + 1;
  }
}

TEST_F(PreemptionTest, ANoticeToOneRankStopsEveryRankAtTheSameStep) {
  // Default preemption settings (auto interval); SIGUSR1 reaches rank 1 only, once epoch 1
  // of 200 is reported (the run is far from its end then).
  const std::string ckpt = path("ckpt");
  const std::string cfg =
      config("long.json", {{"checkpoint", {{"dir", ckpt}}}, {"train", {{"epochs", 200}}}});
  Job job(2, {"--config", cfg}, dir_);
  ASSERT_TRUE(job.wait_for("epoch 1/200")) << job.output();
  ::kill(job.pid(1), SIGUSR1);
  EXPECT_EQ(job.wait(0), ddprun::kExitPreempted) << job.output();
  EXPECT_EQ(job.wait(1), ddprun::kExitPreempted) << job.output();
  job.drain();
  std::smatch m;
  const std::string out = job.output();
  ASSERT_TRUE(std::regex_search(
      out, m,
      std::regex(
          R"(stopping after step ([0-9]+) .* on a preemption notice \(received by another rank\))")))
      << out;
  EXPECT_LT(std::stoll(m[1]), 2000);  // not the end of training
  EXPECT_EQ(read_text(ckpt + "/latest").substr(0, 16),
            "ckpt-" + std::string(8 - m[1].str().size(), '0') + m[1].str() + ".pt");
}

TEST_F(PreemptionTest, KillNineInsideACheckpointWriteResumesFromThePreviousOne) {
  const json straight = run_to_end(config("straight.json", json::object()), "straight");
  const std::string ckpt = path("ckpt");
  const std::string cfg =
      config("held.json", {{"checkpoint", {{"dir", ckpt}, {"interval_steps", 5}}},
                           {"diagnostics", {{"hold_checkpoint_write_at_step", 15}}}});
  {
    Job job(2, {"--config", cfg}, dir_);
    ASSERT_TRUE(job.wait_for(R"(holding checkpoint write \S+ before its rename)")) << job.output();
    std::smatch m;
    const std::string out = job.output();
    ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(holding checkpoint write (\S+) before)")));
    EXPECT_TRUE(fs::exists(m[1].str())) << "the temporary file is written before the hold";
    ::kill(job.pid(0), SIGKILL);
    EXPECT_EQ(job.wait(0), 128 + SIGKILL);
    EXPECT_NE(job.wait(1), 0) << job.output();  // its collective fails; it does not hang
    EXPECT_EQ(read_text(ckpt + "/latest").substr(0, 16), "ckpt-00000010.pt");
    EXPECT_FALSE(fs::exists(ckpt + "/ckpt-00000015.pt"));
  }
  const json resumed = run_to_end(
      config("resume.json", {{"checkpoint", {{"dir", ckpt}, {"interval_steps", 5}}}}), "resumed");
  EXPECT_EQ(resumed, straight);
  for (const auto& e : fs::directory_iterator(ckpt)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos)
        << "leftover " << e.path();
  }
}

TEST_P(PreemptionOverTransports, AStoppedRankIsNamedWhenACollectiveTimesOut) {
  const std::string cfg =
      config("stuck.json", {{"runtime", {{"timeout_s", 3}, {"unresponsive_wait_s", 1}}},
                            {"diagnostics", {{"hold_after_step", 5}}},
                            {"preemption", {{"check_every_steps", 1}}}});
  Job job(2, {"--config", cfg}, dir_);
  ASSERT_TRUE(job.wait_for("holding after step 5", 2)) << job.output();
  ::kill(job.pid(1), SIGSTOP);
  ::kill(job.pid(0), SIGUSR1);  // releases rank 0 into step 6, which needs rank 1
  EXPECT_EQ(job.wait(0), 1) << job.output();
  ::kill(job.pid(1), SIGKILL);
  ::kill(job.pid(1), SIGCONT);
  job.wait(1);
  job.drain();
  EXPECT_NE(job.output().find("failed on rank 0: rank 1 did not respond within 1.0 s"),
            std::string::npos)
      << job.output();
  const json report = read_json(path("rank0.error.json"));
  EXPECT_NE(report["message"]["message"].get<std::string>().find("rank 1 did not respond"),
            std::string::npos)
      << report.dump();
}

// The names in /dev/shm that a ddprun worker could have made.
std::set<std::string> ddprun_shm_names() {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("ddprun", 0) == 0) names.insert(name);
  }
  return names;
}

// The shared-memory segment outlives no rank, whoever is killed at which step of the join
// (docs/worker-library.md): nothing new in /dev/shm afterwards, and the survivor fails
// instead of hanging.
TEST_F(PreemptionTest, KillingARankAtAnyStepOfTheSharedMemoryJoinLeavesNothingBehind) {
  const auto before = ddprun_shm_names();
  const std::string cfg = config("join.json", {{"runtime", {{"timeout_s", 5}}}});
  {
    SCOPED_TRACE("rank 0 killed after publishing and answering, rank 1 never came");
    Job job(2, {"--config", cfg}, dir_, {0});
    ASSERT_TRUE(job.wait_for_key("shm/0/ok/0")) << job.output();
    ::kill(job.pid(0), SIGKILL);
    EXPECT_EQ(job.wait(0), 128 + SIGKILL);
  }
  for (const int victim : {0, 1}) {
    SCOPED_TRACE("rank " + std::to_string(victim) + " killed once both answered");
    Job job(2, {"--config", cfg}, dir_, {0});
    ASSERT_TRUE(job.wait_for_key("shm/0/ok/0")) << job.output();
    job.start(1);
    ASSERT_TRUE(job.wait_for_key("shm/0/ok/1")) << job.output();
    ::kill(job.pid(victim), SIGKILL);
    EXPECT_EQ(job.wait(victim), 128 + SIGKILL);
    EXPECT_EQ(job.wait(1 - victim), 1) << job.output();
  }
  EXPECT_EQ(ddprun_shm_names(), before);
}

// Another world size with another global batch (1 x 8 written, 2 x 8 resuming) would change
// the data order: refused on every rank. (The same global batch resumes: TrainTest.Zero*.)
TEST_F(PreemptionTest, ResumingWithAnotherGlobalBatchIsRefusedOnEveryRank) {
  const std::string ckpt = path("ckpt");
  const std::string cfg =
      config("short.json", {{"checkpoint", {{"dir", ckpt}}}, {"train", {{"max_steps", 4}}}});
  {
    Job one(1, {"--config", cfg}, dir_);
    ASSERT_EQ(one.wait(0), 0) << one.output();
  }
  Job two(2, {"--config", cfg}, dir_);
  EXPECT_EQ(two.wait(0), 1);
  EXPECT_EQ(two.wait(1), 1);
  two.drain();
  EXPECT_NE(two.output().find("was written by a job of 1 ranks x 8 samples (a global batch of "
                              "8); this one has 2 x 8 (16)"),
            std::string::npos)
      << two.output();
}

// Four ranks on two simulated nodes of two: all-reduces are hierarchical (shared memory
// within each node, gloo between the node leaders). The run trains as over flat gloo, with
// every rank's parameters bit-identical at every replica check (check_replicas).
TEST_F(PreemptionTest, FourRanksOnTwoNodesTrainHierarchicallyAsOverFlatGloo) {
  json params[2];
  for (const bool shared_memory : {true, false}) {
    const std::string tag = shared_memory ? "hierarchical" : "flat";
    const std::string file = path(tag + ".params.json");
    const std::string cfg = config(tag + ".json", {{"runtime", {{"shared_memory", shared_memory}}},
                                                   {"progress", {{"quiet", false}}}});
    Job job(4, {"--config", cfg, "--final-params", file}, dir_, {}, 2);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(job.wait(r), 0) << job.output();
    job.drain();
    EXPECT_NE(job.output().find(shared_memory ? "gloo between 2 nodes + shared memory within"
                                              : "world 4, 8 samples per rank per step, 5 steps "
                                                "per epoch, 1 thread(s) per rank, gloo,"),
              std::string::npos)
        << job.output();
    ASSERT_TRUE(fs::exists(file));
    params[shared_memory ? 0 : 1] = read_json(file)["params"];
  }
  for (const auto& [name, p] : params[0].items()) {
    const auto& a = p["values"];
    const auto& b = params[1][name]["values"];
    ASSERT_EQ(a.size(), b.size()) << name;
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(a[i].get<double>(), b[i].get<double>(), 1e-5) << name << "[" << i << "]";
  }
}

// A rank killed on either node, leader or not, ends every other rank with an error well
// before the collective timeout (120 s, beyond the test's patience): the node's peers see
// a dead rank in the segment or an abandoned collective, the other leader a closed gloo
// connection.
TEST_F(PreemptionTest, ARankKilledOnEitherNodeOfAHierarchicalJobEndsEveryRankWithoutTimingOut) {
  const std::string cfg = config("held.json", {{"runtime", {{"timeout_s", 120}}},
                                               {"diagnostics", {{"hold_after_step", 5}}},
                                               {"preemption", {{"check_every_steps", 1}}}});
  for (const int victim : {3, 2, 1}) {
    SCOPED_TRACE("rank " + std::to_string(victim) + " killed");
    Job job(4, {"--config", cfg}, dir_, {}, 2);
    ASSERT_TRUE(job.wait_for("holding after step 5", 4)) << job.output();
    ::kill(job.pid(victim), SIGKILL);
    EXPECT_EQ(job.wait(victim), 128 + SIGKILL);
    for (int r = 0; r < 4; ++r) {
      if (r != victim) ::kill(job.pid(r), SIGUSR1);  // released into step 6's collectives
    }
    for (int r = 0; r < 4; ++r) {
      if (r != victim) {
        EXPECT_EQ(job.wait(r), 1) << "rank " << r << "\n" << job.output();
      }
    }
    job.drain();
    if (victim == 3) {
      EXPECT_NE(job.output().find("rank 3 exited during a shared-memory all-reduce"),
                std::string::npos)
          << job.output();
    }
  }
}

}  // namespace
