// Communicator::rejoin with ranks as threads: after a rank leaves, the survivors' collective
// fails at once (no roll call with unresponsive_wait 0), they join the next group with the
// lost rank's replacement, and the new group works, over the store rank 0 still hosts.
// Gloo alone: shared memory tells a dead peer by its process, and these ranks share one.
// Over TCP, as rejoin needs: the port is one the kernel just gave out and took back
// (another test could take it in between, which no run here has seen).

#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>

#include <string>
#include <thread>
#include <vector>

#include "ddprun/worker/communicator.h"
#include "ddprun/worker/errors.h"
#include "free_port.h"
#include "temp_dir.h"

namespace ddprun::worker {
namespace {

class Rejoin : public ::testing::TestWithParam<int> {};

TEST_P(Rejoin, SurvivorsAndAReplacementFormTheNextGroup) {
  const int lost = GetParam();
  constexpr int kWorld = 3;
  const std::string store = "tcp://127.0.0.1:" + std::to_string(support::free_loopback_port());
  std::vector<std::string> errors(kWorld);
  std::vector<double> sums(kWorld, 0);
  std::vector<std::string> failures(kWorld);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      try {
        WorkerEnv env;
        env.rank = r;
        env.world_size = kWorld;
        env.master_port = 1;
        env.run_id = "rejoin-test";
        CommOptions options;
        options.timeout = std::chrono::seconds(30);
        options.unresponsive_wait = std::chrono::milliseconds(0);
        options.init_method = store;
        options.shared_memory = false;
        auto comm = Communicator::connect(env, options);
        auto ones = torch::ones({4});
        comm->control().allreduce(ones);
        options.group = 1;
        if (r == lost) {
          comm.reset();  // lost: its connections close; its replacement joins group 1
          comm = Communicator::connect(env, options);
        } else {
          try {
            auto t = torch::ones({4});
            comm->control().allreduce(t);
            failures[static_cast<std::size_t>(r)] = "no failure";
          } catch (const CollectiveError& e) {
            failures[static_cast<std::size_t>(r)] = e.what();
          }
          comm = Communicator::rejoin(std::move(comm), env, options, /*store_host_lost=*/lost == 0);
        }
        EXPECT_EQ(comm->rank(), r);
        auto t = torch::full({4}, static_cast<double>(r + 1), torch::kDouble);
        comm->control().allreduce(t);
        sums[static_cast<std::size_t>(r)] = t[0].item<double>();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(errors[static_cast<std::size_t>(r)], "");
    EXPECT_EQ(sums[static_cast<std::size_t>(r)], 1 + 2 + 3);  // every rank, in the new group
    if (r != lost) {
      // The failure names the operation and says nothing of a roll call.
      EXPECT_NE(failures[static_cast<std::size_t>(r)].find("all-reduce failed on rank"),
                std::string::npos)
          << failures[static_cast<std::size_t>(r)];
      EXPECT_EQ(failures[static_cast<std::size_t>(r)].find("did not respond"), std::string::npos);
    }
  }
}

// Not rank 0 here: its store's server and the others' clients would share this process, and
// LibTorch 1.13's store threads then throw "Connection reset by peer" where nothing catches
// (about one run in three). Rank 0 lost, with a replacement hosting the next store, is
// tested with real processes (tests/worker/train/peer_recovery_test.cc).
INSTANTIATE_TEST_SUITE_P(LostRank, Rejoin, ::testing::Values(1, 2));

TEST(Rejoin, AGroupThatMetThroughAFileCannotBeRejoined) {
  const support::TempDir temp;
  WorkerEnv env;
  CommOptions options;
  options.init_method = "file://" + temp.path() + "/store";
  auto comm = Communicator::connect(env, options);
  options.group = 1;
  EXPECT_THROW(Communicator::rejoin(std::move(comm), env, options, false), ::ddprun::ConfigError);
}

// A survivor writes to the lost rank's closed sockets: that must be an error it can rejoin
// after, not SIGPIPE's default end of the process (found under LibTorch 2.6's gloo). A
// program's own SIGPIPE handler is left alone.
void count_pipes(int) {}

sighandler_t sigpipe_after_connect(sighandler_t before) {
  const sighandler_t saved = ::signal(SIGPIPE, before);
  support::TempDir dir;
  WorkerEnv env;
  env.run_id = "sigpipe-test";
  CommOptions options;
  options.init_method = "file://" + dir.path() + "/store";
  options.shared_memory = false;
  Communicator::connect(env, options);
  return ::signal(SIGPIPE, saved);
}

TEST(BrokenPipes, AreIgnoredOnceConnectedUnlessTheProgramHandlesThem) {
  EXPECT_EQ(sigpipe_after_connect(SIG_DFL), SIG_IGN);
  EXPECT_EQ(sigpipe_after_connect(count_pipes), count_pipes);
}

}  // namespace
}  // namespace ddprun::worker
