#pragma once
// The worker library's tests with ranks as threads of one process: run_ranks, and a test
// fixture whose every test runs over loopback gloo, over shared memory and over the
// gloo-as-nccl double (a data plane with NCCL's rules).

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "ddprun/worker/communicator.h"
#include "ddprun/worker/env.h"

namespace ddprun::worker {

// Runs `body` on ranks 0..world-1, one thread each; an exception escaping a rank fails the
// test. A rank that waits for a collective its peer never starts fails after the timeout.
// `same_node`: LOCAL_WORLD_SIZE = WORLD_SIZE and runtime.shared_memory on, so all-reduces go
// through shared memory; otherwise shared memory is off (gloo alone).
// By default the ranks meet in a FileStore of their own: no port to pick and lose to
// another test under ctest -j.
inline void run_ranks(int world, const std::function<void(Communicator&)>& body, bool same_node,
                      std::string init_method = "", const std::string& backend = "gloo") {
  static int runs = 0;
  const std::string store =
      (std::filesystem::temp_directory_path() /
       ("ddprun-ddp-test-" + std::to_string(::getpid()) + "-" + std::to_string(++runs)))
          .string();
  if (init_method.empty()) init_method = "file://" + store;
  const int port = 1;  // MASTER_PORT, unused by file:// and tcp://
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        WorkerEnv env;
        env.rank = r;
        env.world_size = world;
        env.master_port = port;
        env.run_id = "ddp-test";
        if (same_node) {
          env.local_rank = r;
          env.local_world_size = world;
        }
        CommOptions options;
        options.timeout = std::chrono::seconds(30);
        options.init_method = init_method;
        options.backend = backend;
        options.shared_memory = same_node;  // else: gloo alone, though all share this machine
        auto comm = Communicator::connect(env, options);
        const std::string control = same_node && world > 1 ? "gloo + shared memory" : "gloo";
        EXPECT_EQ(comm->transport(),
                  backend == "gloo" ? control : backend + ", control over " + control);
        body(*comm);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::filesystem::remove(store);
  for (int r = 0; r < world; ++r)
    EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
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
