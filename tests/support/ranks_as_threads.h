#pragma once
// The worker library's tests with ranks as threads of one process: run_on_nodes (ranks on
// simulated nodes), run_ranks (ranks on one machine), and a test fixture whose every test runs over
// loopback gloo, over shared memory and over the gloo-as-nccl double (a data plane with NCCL's
// rules).

#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ddprun/worker/communicator.h"
#include "ddprun/worker/env.h"
#include "temp_dir.h"

namespace ddprun::worker {

// Where the ranks of a test stand: on simulated nodes of this one machine, told apart by
// their environment (DDPRUN_HOST, GROUP_RANK) as ddprun would place them.
struct Placement {
  std::vector<int> node_sizes;  // ranks per node, in rank order
  bool shared_memory = true;
  std::chrono::milliseconds unresponsive_wait{5'000};
  std::chrono::milliseconds timeout{30'000};
  // A hand-made environment that gets LOCAL_RANK and GROUP_RANK wrong (all 0): machines
  // come from their names, not from these.
  bool wrong_local_ranks = false;
  // No DDPRUN_HOST: machines are told apart by host name and boot id, and these threads
  // share both.
  bool no_host_names = false;
  // The last rank's LOCAL_WORLD_SIZE, when not 0: a hand-made environment that disagrees.
  int last_rank_local_world_size = 0;
  // How the ranks meet; empty: a FileStore of their own (no port to pick and lose to
  // another test under ctest -j).
  std::string init_method{};
  std::string backend = "gloo";
  // Changes a rank's environment as the test needs (a trace file of its own); none: as above.
  std::function<void(WorkerEnv&)> adjust{};
};

// Runs `body(comm)` on every rank of `placement`, one thread each. Returns each rank's
// error ("" when none escaped). A rank that waits for a collective its peer never starts
// fails after the placement's timeout.
inline std::vector<std::string> run_on_nodes(const Placement& placement,
                                             const std::function<void(Communicator&)>& body) {
  // In a fresh private folder: a path named after the pid could be made first by another
  // user of the machine.
  const support::TempDir folder;
  const std::string store = folder.path() + "/store";
  int world = 0;
  for (const int n : placement.node_sizes) world += n;
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  int rank = 0;
  for (std::size_t node = 0; node < placement.node_sizes.size(); ++node) {
    for (int local = 0; local < placement.node_sizes[node]; ++local, ++rank) {
      threads.emplace_back([&, rank, local, node] {
        try {
          WorkerEnv env;
          env.rank = rank;
          env.local_rank = placement.wrong_local_ranks ? 0 : local;
          env.world_size = world;
          env.local_world_size = placement.node_sizes[node];
          if (placement.last_rank_local_world_size != 0 && rank + 1 == world) {
            env.local_world_size = placement.last_rank_local_world_size;
          }
          env.group_rank = placement.wrong_local_ranks ? 0 : static_cast<int>(node);
          env.host = placement.no_host_names ? "" : "node" + std::to_string(node);
          env.master_port = 1;  // MASTER_PORT, unused by file:// and tcp://
          env.run_id = "ranks-as-threads";
          if (placement.adjust) placement.adjust(env);
          CommOptions options;
          options.timeout = placement.timeout;
          options.unresponsive_wait = placement.unresponsive_wait;
          options.init_method =
              placement.init_method.empty() ? "file://" + store : placement.init_method;
          options.backend = placement.backend;
          options.shared_memory = placement.shared_memory;
          auto comm = Communicator::connect(env, options);
          body(*comm);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(rank)] = e.what();
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  return errors;
}

inline void expect_no_errors(const std::vector<std::string>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Runs `body` on ranks 0..world-1 of one machine, an exception escaping a rank failing the
// test. `same_node`: LOCAL_WORLD_SIZE = WORLD_SIZE and runtime.shared_memory on, so
// all-reduces go through shared memory; otherwise every rank is LOCAL_RANK 0 of a node of
// its own with shared memory off (gloo alone).
inline void run_ranks(int world, const std::function<void(Communicator&)>& body, bool same_node,
                      std::string init_method = "", const std::string& backend = "gloo") {
  Placement placement;
  placement.node_sizes =
      same_node ? std::vector<int>{world} : std::vector<int>(static_cast<std::size_t>(world), 1);
  placement.shared_memory = same_node;
  placement.wrong_local_ranks = !same_node;
  placement.no_host_names = true;
  placement.init_method = std::move(init_method);
  placement.backend = backend;
  expect_no_errors(run_on_nodes(placement, [&](Communicator& comm) {
    const std::string control = same_node && world > 1 ? "gloo + shared memory" : "gloo";
    EXPECT_EQ(comm.transport(),
              backend == "gloo" ? control : backend + ", control over " + control);
    body(comm);
  }));
}

// Every test runs over gloo, over shared memory, and with the data plane on gloo-as-nccl
// (the control plane then over shared memory).
enum class Transport { kGloo, kSharedMemory, kGlooAsNccl };

class OverTransports : public ::testing::TestWithParam<Transport> {
 protected:
  // `body` on ranks 0..world-1 over this test's transport.
  void run(int world, const std::function<void(Communicator&)>& body) {
    const auto t = GetParam();
    run_ranks(world, body, t != Transport::kGloo, "",
              t == Transport::kGlooAsNccl ? "gloo-as-nccl" : "gloo");
  }
};

inline auto all_transports() {
  return ::testing::Values(Transport::kGloo, Transport::kSharedMemory, Transport::kGlooAsNccl);
}

inline std::string transport_name(const ::testing::TestParamInfo<Transport>& p) {
  switch (p.param) {
    case Transport::kGloo:
      return "Gloo";
    case Transport::kSharedMemory:
      return "SharedMemory";
    case Transport::kGlooAsNccl:
      return "GlooAsNccl";
  }
  return "";
}

}  // namespace ddprun::worker
