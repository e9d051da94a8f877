// runtime.recovery "peer" under ddprun --restart-scope rank, for real: a rank SIGKILLs itself
// (diagnostics.kill_*) in a phase of a step; ddprun replaces it alone, the survivors join a
// new group with the replacement and send it their state, and the job ends with parameters
// bit-identical to an uninterrupted run's, the survivors' processes never restarted. The toy
// model, seconds per run.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "training_fixture.h"

namespace {

using nlohmann::json;

const std::string kToyConfig = std::string(DDPRUN_WORKER_TEST_DIR) + "/configs/toy_small.json";

struct Kill {
  int rank;
  const char* phase;  // diagnostics.kill_in
};

class PeerRecovery : public ddprun::support::TrainingFolder {
 protected:
  // Writes a config: the toy with several gradient buckets, `shared_memory` on or off,
  // recovery "peer", and `diagnostics` merged in.
  std::string config(const std::string& name, bool shared_memory, const json& diagnostics,
                     bool zero = false) {
    json c = read_json(kToyConfig);
    if (zero) c["optimizer"] = {{"name", "adam"}, {"lr", 0.01}, {"zero_stage", 1}};
    c["runtime"]["recovery"] = "peer";
    c["runtime"]["shared_memory"] = shared_memory;
    c["runtime"]["bucket_cap_mb"] = 0.0002;  // ~200 bytes: the toy's layers in 3 buckets
    c["diagnostics"] = diagnostics;
    c["diagnostics"]["final_params_file"] = path(name + ".params");
    const std::string file = path(name + ".json");
    std::ofstream(file) << c.dump();
    return file;
  }

  // Runs ddprun --restart-scope rank; returns the exit status and leaves the output in log_.
  int run(int nproc, const std::string& config_file, const std::string& name, int max_restarts = 2,
          const std::string& options = "") {
    log_ = path(name + ".log");
    const std::string cmd = std::string("'") + DDPRUN_BIN + "' --nproc-per-node " +
                            std::to_string(nproc) + " --restart-scope rank --max-restarts " +
                            std::to_string(max_restarts) + " " + options + " -- '" + DDP_TRAIN_BIN +
                            "' --config '" + config_file + "' >'" + log_ + "' 2>&1";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::string log() const { return read_text(log_); }

  static int count(const std::string& text, const std::string& what) {
    int n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }

  // Kills each of `kills` in its own job at step 12 (mid-epoch: the toy has 10 or 7 steps an
  // epoch) and checks the job against an uninterrupted one.
  void kill_each(int nproc, bool shared_memory, const std::vector<Kill>& kills, bool zero = false) {
    const std::string tag =
        std::to_string(nproc) + (shared_memory ? "shm" : "gloo") + (zero ? "zero" : "");
    ASSERT_EQ(run(nproc, config("base" + tag, shared_memory, json::object(), zero), "base" + tag),
              0)
        << log();
    const json base = read_json(path("base" + tag + ".params"));
    for (const Kill& kill : kills) {
      const std::string name = tag + "-rank" + std::to_string(kill.rank) + "-" + kill.phase;
      SCOPED_TRACE(name);
      const json diagnostics = {
          {"kill_rank", kill.rank}, {"kill_at_step", 12}, {"kill_in", kill.phase}};
      ASSERT_EQ(run(nproc, config(name, shared_memory, diagnostics, zero), name), 0) << log();
      const std::string out = log();
      // Killed in its forward or backward, the step is redone; in its optimizer step, the
      // survivors had finished step 12 and the next is 13, but under ZeRO-1 on more than 2
      // ranks step 12 waits for the lost rank's share (its all-gather) and is undone.
      const bool undone = zero && nproc > 2;
      const int step = std::string(kill.phase) == "optimizer" && !undone ? 13 : 12;
      EXPECT_TRUE(std::regex_search(
          out, std::regex("ddp-train: recovered rank " + std::to_string(kill.rank) + " at step " +
                          std::to_string(step) + " from rank [0-9]+ in [0-9.]+ s \\(0 steps lost")))
          << out;
      // One replacement; every other rank kept its first process: no full restart.
      EXPECT_EQ(count(out, "started its replacement"), 1) << out;
      EXPECT_EQ(count(out, "restarting all workers"), 0) << out;
      EXPECT_EQ(count(out, " replaced\n"), 1) << out;
      const json params = read_json(path(name + ".params"));
      EXPECT_EQ(params["step"], base["step"]);
      EXPECT_EQ(params["params"], base["params"]) << "not bit-identical to the uninterrupted run";
    }
  }

  std::string log_;
};

TEST_F(PeerRecovery, ARankLostInAnyPhaseOverSharedMemoryCostsNoStepAndNoBit) {
  kill_each(2, true, {{1, "forward"}, {0, "backward"}, {1, "optimizer"}});
  kill_each(3, true, {{0, "forward"}, {2, "backward"}});
}

TEST_F(PeerRecovery, ARankLostInAnyPhaseOverGlooCostsNoStepAndNoBit) {
  kill_each(2, false, {{0, "forward"}, {1, "backward"}, {0, "optimizer"}});
  kill_each(3, false, {{1, "optimizer"}});
}

// ZeRO-1 (Adam's moments in shares): each share lives on its rank and the one before it, so
// a lost rank's share comes from its neighbour; killed in its optimizer step (the shares'
// all-gather), the survivors' step is undone and done again by all.
TEST_F(PeerRecovery, WithZeroOneALostRanksShareComesFromItsNeighbourBitForBit) {
  kill_each(2, true, {{1, "forward"}, {0, "optimizer"}}, true);
  kill_each(3, false, {{0, "backward"}, {2, "optimizer"}, {1, "forward"}}, true);
}

// Rank 0 dies as the ranks gather for the checkpoint of step 12 (it writes them): the
// survivor recovers it, and the checkpoint of step 12 is on disk after all, with every other.
TEST_F(PeerRecovery, ARankLostInTheCheckpointsGatheringLeavesNoCheckpointMissing) {
  ASSERT_EQ(run(2, config("base", true, json::object()), "base"), 0) << log();
  const json diagnostics = {{"kill_rank", 0}, {"kill_at_step", 12}, {"kill_in", "checkpoint"}};
  const std::string file = config("ckpt", true, diagnostics);
  json c = read_json(file);
  c["checkpoint"] = {{"dir", path("checkpoints")}, {"interval_steps", 4}, {"keep_last", 100}};
  std::ofstream(file) << c.dump();
  ASSERT_EQ(run(2, file, "ckpt"), 0) << log();
  const std::string out = log();
  EXPECT_NE(out.find("ddp-train: recovered rank 0 at step 13 from rank 1"), std::string::npos)
      << out;
  for (const int step : {4, 8, 12, 16, 20, 24, 28, 30}) {
    char name[32];
    std::snprintf(name, sizeof name, "ckpt-%08d.pt", step);
    EXPECT_TRUE(std::filesystem::exists(path("checkpoints/") + name)) << name << "\n" << out;
  }
  EXPECT_EQ(read_json(path("ckpt.params"))["params"], read_json(path("base.params"))["params"]);
}

// The survivor dies too, in the recovery: nobody holds the state, the replacement gives up
// within its recovery window, and ddprun restarts the job whole, which still finishes as the
// uninterrupted run (from the start: no checkpoint).
TEST_F(PeerRecovery, ASecondLossDuringTheRecoveryEndsInAFullRestartThatStillFinishes) {
  ASSERT_EQ(run(2, config("base", true, json::object()), "base"), 0) << log();
  const json diagnostics = {
      {"kill_rank", 1}, {"kill_at_step", 12}, {"kill_in", "forward"}, {"kill_rank_in_recovery", 0}};
  ASSERT_EQ(run(2, config("twice", true, diagnostics), "twice", 3), 0) << log();
  const std::string out = log();
  EXPECT_NE(out.find("a full restart decides"), std::string::npos) << out;
  EXPECT_EQ(count(out, "restarting all workers"), 1) << out;
  EXPECT_EQ(count(out, "ddp-train: recovered"), 0) << out;
  EXPECT_EQ(read_json(path("twice.params"))["params"], read_json(path("base.params"))["params"]);
}

// ddprun --warm-spare: the replacement is a ddp-train started ahead (its data loaded), given
// the lost rank's environment; the run is the uninterrupted one's, bit for bit, and every
// process of the job is gone when it ends (the spare that was not needed too).
TEST_F(PeerRecovery, AWarmSpareBecomesTheLostRankAndTheRunStaysBitIdentical) {
  ASSERT_EQ(run(2, config("base", true, json::object()), "base"), 0) << log();
  const json diagnostics = {{"kill_rank", 1}, {"kill_at_step", 12}, {"kill_in", "backward"}};
  ASSERT_EQ(run(2, config("spare", true, diagnostics), "spare", 2, "--warm-spare"), 0) << log();
  const std::string out = log();
  EXPECT_TRUE(std::regex_search(out, std::regex("started its replacement, pid [0-9]+ \\(1 "
                                                "restart\\(s\\) left\\)\nddprun: rank 1's "
                                                "replacement is the warm spare, started")))
      << out;
  EXPECT_NE(out.find("ddp-train: recovered rank 1 at step 12 from rank 0"), std::string::npos)
      << out;
  EXPECT_EQ(read_json(path("spare.params"))["params"], read_json(path("base.params"))["params"]);
}

// Without ddprun's membership file there is no recovery from peers: rank 0 says so at the
// start, and a lost rank fails the job as under "restart" (here: no restarts).
TEST_F(PeerRecovery, WithoutRestartScopeRankALostRankFailsTheJobWithTheReason) {
  const json diagnostics = {{"kill_rank", 1}, {"kill_at_step", 3}, {"kill_in", "forward"}};
  log_ = path("plain.log");
  const std::string cmd = std::string("'") + DDPRUN_BIN + "' --nproc-per-node 2 -- '" +
                          DDP_TRAIN_BIN + "' --config '" + config("plain", true, diagnostics) +
                          "' >'" + log_ + "' 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(log().find("runtime.recovery \"peer\" needs ddprun --restart-scope rank"),
            std::string::npos)
      << log();
}

}  // namespace
