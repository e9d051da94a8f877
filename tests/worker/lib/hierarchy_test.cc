// The hierarchical all-reduce (shared memory within a node, gloo between node leaders,
// shared memory back), with ranks as threads of this process that the environment places
// on simulated nodes: every rank ends bit-identical, integers exactly, DDP trains as over
// flat gloo, waits in any order end right, the path is chosen by all ranks alike, and a
// leader whose part fails makes its node fail at once.

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <latch>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ddprun/worker/ddp.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/zero.h"
#include "ranks_as_threads.h"

namespace ddprun::worker {
namespace {

at::Tensor random_floats(int rank, int round, std::int64_t n) {
  auto gen = at::detail::createCPUGenerator(static_cast<std::uint64_t>(1000 * round + rank));
  return torch::randn({n}, gen);
}

class Hierarchy : public ::testing::TestWithParam<std::vector<int>> {};

INSTANTIATE_TEST_SUITE_P(Nodes, Hierarchy,
                         ::testing::Values(std::vector<int>{2, 2}, std::vector<int>{2, 1, 3}),
                         [](const ::testing::TestParamInfo<std::vector<int>>& p) {
                           std::string name;
                           for (const int n : p.param)
                             name += (name.empty() ? "" : "x") + std::to_string(n);
                           return "Ranks" + name;
                         });

// Several all-reduces in flight at once (as DDP's buckets are), of sizes within one chunk
// and across several: every rank ends with the same bits, close to the sum in double;
// integer sums, minima and maxima are exact.
TEST_P(Hierarchy, AllReducesEndBitIdenticalOnEveryRankAndExactOnIntegers) {
  const auto& sizes = GetParam();
  int world = 0;
  for (const int n : sizes) world += n;
  const std::vector<std::int64_t> lengths{1, 1000, 150'000};
  std::vector<std::vector<at::Tensor>> results(static_cast<std::size_t>(world));
  expect_no_errors(run_on_nodes({sizes}, [&](Communicator& comm) {
    EXPECT_EQ(comm.transport(),
              "gloo between " + std::to_string(sizes.size()) + " nodes + shared memory within");
    auto& mine = results[static_cast<std::size_t>(comm.rank())];
    for (int round = 0; round < 2; ++round) {
      std::vector<at::Tensor> tensors;
      std::vector<PendingWork> works;
      for (const auto n : lengths) tensors.push_back(random_floats(comm.rank(), round, n));
      for (auto& t : tensors) works.push_back(comm.control().allreduce_async(t));
      for (auto& w : works) w.wait();
      mine.insert(mine.end(), tensors.begin(), tensors.end());
    }
    auto ints = torch::arange(0, 5000, torch::kLong) * (comm.rank() + 1) - 7 * comm.rank();
    const auto sum = ints.clone(), low = ints.clone(), high = ints.clone();
    auto s = sum, lo = low, hi = high;
    comm.control().allreduce(s);
    comm.control().allreduce(lo, ReduceOp::kMin);
    comm.control().allreduce(hi, ReduceOp::kMax);
    const auto base = torch::arange(0, 5000, torch::kLong);
    at::Tensor want_sum = torch::zeros({5000}, torch::kLong);
    at::Tensor want_lo = base.clone(), want_hi = base.clone();
    for (int r = 0; r < comm.world_size(); ++r) {
      const auto x = base * (r + 1) - 7 * r;
      want_sum += x;
      want_lo = torch::minimum(want_lo, x);
      want_hi = torch::maximum(want_hi, x);
    }
    EXPECT_TRUE(torch::equal(s, want_sum));
    EXPECT_TRUE(torch::equal(lo, want_lo));
    EXPECT_TRUE(torch::equal(hi, want_hi));
  }));
  for (std::size_t i = 0; i < results[0].size(); ++i) {
    const auto round = static_cast<int>(i / lengths.size());
    auto expected = torch::zeros_like(results[0][i], torch::kDouble);
    for (int r = 0; r < world; ++r)
      expected += random_floats(r, round, results[0][i].numel()).to(torch::kDouble);
    EXPECT_TRUE(torch::allclose(results[0][i].to(torch::kDouble), expected, 1e-5, 1e-5));
    for (int r = 1; r < world; ++r) {
      const auto& other = results[static_cast<std::size_t>(r)][i];
      ASSERT_EQ(other.numel(), results[0][i].numel());
      EXPECT_EQ(std::memcmp(other.data_ptr(), results[0][i].data_ptr(),
                            static_cast<std::size_t>(other.nbytes())),
                0)
          << "rank " << r << " differs from rank 0 in all-reduce " << i;
    }
  }
}

struct TwoLayerNet : torch::nn::Module {
  TwoLayerNet() {
    a = register_module("a", torch::nn::Linear(16, 32));
    b = register_module("b", torch::nn::Linear(32, 4));
    auto gen = at::detail::createCPUGenerator(1);
    torch::NoGradGuard no_grad;
    for (auto& p : parameters()) p.copy_(torch::randn(p.sizes(), gen));
  }
  at::Tensor forward(const at::Tensor& x) { return b->forward(torch::tanh(a->forward(x))); }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

// Ten SGD steps of a small net with several buckets, on rank-dependent data; returns every
// rank's final parameters, flattened.
std::vector<at::Tensor> train(const Placement& placement, bool zero = false) {
  int world = 0;
  for (const int n : placement.node_sizes) world += n;
  std::vector<at::Tensor> finals(static_cast<std::size_t>(world));
  expect_no_errors(run_on_nodes(placement, [&](Communicator& comm) {
    auto net = std::make_shared<TwoLayerNet>();
    DdpOptions options;
    options.bucket_cap_bytes = options.first_bucket_cap_bytes = 1024;  // several buckets
    options.shard_gradients = zero;
    DistributedDataParallel ddp(net, comm, options);
    const auto make =
        [](std::vector<at::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
      return std::make_unique<torch::optim::SGD>(std::move(params),
                                                 torch::optim::SGDOptions(0.05).momentum(0.9));
    };
    auto sgd = make(net->parameters());
    std::unique_ptr<ShardedOptimizer> sharded;
    if (zero) sharded = std::make_unique<ShardedOptimizer>(ddp, comm, make);
    for (int step = 0; step < 10; ++step) {
      auto gen =
          at::detail::createCPUGenerator(static_cast<std::uint64_t>(100 * step + comm.rank()));
      const auto x = torch::randn({8, 16}, gen);
      sgd->zero_grad();
      ddp.prepare_for_forward();
      net->forward(x).pow(2).mean().backward();
      ddp.finish_gradient_sync();
      if (sharded) {
        sharded->step();
      } else {
        sgd->step();
      }
    }
    std::vector<at::Tensor> flat;
    for (const auto& p : net->parameters()) flat.push_back(p.detach().flatten());
    finals[static_cast<std::size_t>(comm.rank())] = torch::cat(flat);
  }));
  return finals;
}

TEST_P(Hierarchy, DdpTrainsAsOverFlatGlooAndEveryRankHoldsTheSameBits) {
  const auto hierarchical = train({GetParam()});
  Placement flat{GetParam()};
  flat.shared_memory = false;
  const auto reference = train(flat);
  ASSERT_TRUE(hierarchical[0].defined() && reference[0].defined());
  for (std::size_t r = 0; r < hierarchical.size(); ++r) {
    EXPECT_TRUE(torch::equal(hierarchical[r], hierarchical[0])) << "rank " << r;
    EXPECT_TRUE(torch::allclose(hierarchical[r], reference[r], 1e-5, 1e-6)) << "rank " << r;
  }
}

// ZeRO-1 across nodes: the reduce-scatter and the all-gather of the shares go the
// hierarchical way (the node's sum through shared memory, the leaders over gloo) and train as
// plain DDP does, every rank with the same bits.
TEST_P(Hierarchy, ShardedOptimizerTrainsAsPlainDdpAndEveryRankHoldsTheSameBits) {
  const auto sharded = train({GetParam()}, true);
  const auto plain = train({GetParam()});
  ASSERT_TRUE(sharded[0].defined() && plain[0].defined());
  for (std::size_t r = 0; r < sharded.size(); ++r) {
    EXPECT_TRUE(torch::equal(sharded[r], sharded[0])) << "rank " << r;
    EXPECT_TRUE(torch::allclose(sharded[r], plain[r], 1e-5, 1e-6)) << "rank " << r;
  }
}

// The path is the job's, not the rank's: without shared memory, or with one rank per node,
// every rank uses plain gloo.
TEST(HierarchyChoice, PlainGlooWithoutSharedMemoryOrWithOneRankPerNode) {
  for (const auto& placement : {Placement{{2, 2}, false}, Placement{{1, 1, 1}, true}}) {
    expect_no_errors(run_on_nodes(placement, [](Communicator& comm) {
      EXPECT_EQ(comm.transport(), "gloo");
      auto t = torch::full({3}, static_cast<float>(comm.rank()));
      comm.control().allreduce(t);
      const int n = comm.world_size();
      EXPECT_TRUE(torch::equal(t, torch::full({3}, static_cast<float>(n * (n - 1) / 2))));
    }));
  }
}

// DDP waits in launch order, but a caller may not: ranks that wait for their all-reduces in
// different orders, or drop one unwaited, still end with every result right and the same on
// every rank (a node's results are broadcast in launch order).
TEST(HierarchyOrder, WaitsInAnyOrderAndAWorkDroppedUnwaitedStillEndRightOnEveryRank) {
  const std::vector<std::int64_t> lengths{1000, 150'000, 7};
  std::vector<std::vector<at::Tensor>> results(4);
  expect_no_errors(run_on_nodes({{2, 2}}, [&](Communicator& comm) {
    std::vector<at::Tensor> tensors;
    std::vector<PendingWork> works;
    for (const auto n : lengths) tensors.push_back(random_floats(comm.rank(), 7, n));
    for (auto& t : tensors) works.push_back(comm.control().allreduce_async(t));
    if (comm.rank() == 0) {
      works[1] = PendingWork();  // dropped unwaited
      works[2].wait();
      works[0].wait();
    } else if (comm.rank() % 2 == 1) {
      for (int i = 2; i >= 0; --i) works[static_cast<std::size_t>(i)].wait();
    } else {
      for (auto& w : works) w.wait();
    }
    results[static_cast<std::size_t>(comm.rank())] = tensors;
  }));
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    auto expected = torch::zeros({lengths[i]}, torch::kDouble);
    for (int r = 0; r < 4; ++r) expected += random_floats(r, 7, lengths[i]).to(torch::kDouble);
    EXPECT_TRUE(torch::allclose(results[0][i].to(torch::kDouble), expected, 1e-5, 1e-5)) << i;
    for (std::size_t r = 1; r < 4; ++r) {
      EXPECT_TRUE(torch::equal(results[r][i], results[0][i])) << "rank " << r << ", work " << i;
    }
  }
}

// Launches and waits interleaved differently on each rank, all legal under gloo and NCCL:
// rank 0 (node 0's leader) launches all three and waits for the last first, as in
// `a1 = async(t1); a2 = async(t2); a2.wait()`; rank 1 waits for each before it launches the
// next; rank 2 (node 1's leader) launches two, waits for the second, launches the third and
// waits for the first; rank 3 drops the second unwaited. Every result must be the sum, the
// same bits on every rank. (A node's ranks once ran their shared-memory halves in different
// orders here, pairing one all-reduce's reduce with another's broadcast: wrong sums, no
// error.)
TEST(HierarchyOrder, LaunchesAndWaitsInterleavedDifferentlyOnEachRankEndRight) {
  const std::vector<std::int64_t> lengths{1000, 150'000, 7};
  std::vector<std::vector<at::Tensor>> results(4);
  expect_no_errors(run_on_nodes({{2, 2}}, [&](Communicator& comm) {
    std::vector<at::Tensor> tensors;
    for (const auto n : lengths) tensors.push_back(random_floats(comm.rank(), 11, n));
    auto launch = [&](std::size_t i) { return comm.control().allreduce_async(tensors[i]); };
    switch (comm.rank()) {
      case 0: {
        auto a1 = launch(0), a2 = launch(1), a3 = launch(2);
        a2.wait();
        a3.wait();
        a1.wait();
        break;
      }
      case 1:
        for (std::size_t i = 0; i < tensors.size(); ++i) launch(i).wait();
        break;
      case 2: {
        auto a1 = launch(0), a2 = launch(1);
        a2.wait();
        auto a3 = launch(2);
        a1.wait();
        a3.wait();
        break;
      }
      default: {
        auto a1 = launch(0);
        launch(1);  // dropped unwaited
        auto a3 = launch(2);
        a1.wait();
        a3.wait();
      }
    }
    results[static_cast<std::size_t>(comm.rank())] = tensors;
  }));
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    auto expected = torch::zeros({lengths[i]}, torch::kDouble);
    for (int r = 0; r < 4; ++r) expected += random_floats(r, 11, lengths[i]).to(torch::kDouble);
    for (std::size_t r = 0; r < 4; ++r) {
      EXPECT_TRUE(torch::allclose(results[r][i].to(torch::kDouble), expected, 1e-5, 1e-5))
          << "rank " << r << ", work " << i;
      EXPECT_TRUE(torch::equal(results[r][i], results[0][i])) << "rank " << r << ", work " << i;
    }
  }
}

// The compressed sum on every path: one node through shared memory, flat gloo (no shared
// memory, or one rank per node), and across nodes (2+2, 2+1+3): each rank's values rounded to
// the wire type (fp16 after dividing by the world size), summed in float, the sum rounded
// (and multiplied back). Every rank ends with the same bits, every value (over the world
// size for fp16) is one the wire type holds (the sum was rounded: a plain float all-reduce
// would fail this), and the result is within two wire roundings of the exact sum of the
// rounded values (one for the sum, one for a node's sum on the hierarchical path). 1001
// elements: shares that do not divide evenly.
TEST(CompressedAllreduce, EveryPathSumsTheRoundedValuesInFloatAndEndsBitIdentical) {
  const std::int64_t n = 1001;
  const std::vector<Placement> placements{{{3}}, {{3}, false}, {{1, 1, 1}}, {{2, 2}}, {{2, 1, 3}}};
  for (const auto wire : {at::kBFloat16, at::kHalf}) {
    const double unit = wire == at::kBFloat16 ? 1.0 / 256 : 1.0 / 2048;  // relative rounding
    for (const auto& placement : placements) {
      int world = 0;
      for (const int size : placement.node_sizes) world += size;
      std::vector<at::Tensor> results(static_cast<std::size_t>(world));
      expect_no_errors(run_on_nodes(placement, [&](Communicator& comm) {
        auto t = random_floats(comm.rank(), 21, n);
        comm.control().allreduce_compressed_async(t, wire).wait();
        results[static_cast<std::size_t>(comm.rank())] = t;
      }));
      const std::string where = std::string(c10::toString(wire)) + " on " +
                                std::to_string(placement.node_sizes.size()) + " node(s)" +
                                (placement.shared_memory ? "" : ", no shared memory");
      const int divisor = wire == at::kHalf ? world : 1;
      auto exact = torch::zeros({n}, torch::kDouble), magnitude = torch::zeros({n}, torch::kDouble);
      for (int r = 0; r < world; ++r) {
        const auto x = (random_floats(r, 21, n) / divisor).to(wire).to(torch::kDouble);
        exact += x;
        magnitude += x.abs();
      }
      const auto& mine = results[0];
      ASSERT_TRUE(mine.defined()) << where;
      const auto average = mine / divisor;
      EXPECT_TRUE(torch::equal(average, average.to(wire).to(torch::kFloat)))
          << where << ": not rounded";
      const auto error = (average.to(torch::kDouble) - exact).abs();
      EXPECT_TRUE((error <= magnitude * (2 * unit)).all().item<bool>())
          << where << ": off by up to " << error.max().item<double>();
      for (std::size_t r = 1; r < results.size(); ++r) {
        EXPECT_TRUE(torch::equal(results[r], mine)) << where << ", rank " << r;
      }
    }
  }
}

// A remote node gone: the leader's all-reduce between nodes fails, and the leader aborts its
// node's segment, so its node peer fails at once naming it instead of waiting for the
// timeout.
TEST(HierarchyFailure, ALeaderWhoseAllReduceBetweenNodesFailsMakesItsNodeFailNamingIt) {
  Placement placement{{2, 2}};
  placement.unresponsive_wait = std::chrono::milliseconds(100);
  // Node 1 leaves once every rank has joined: leaving earlier could close a connection the
  // leaders' group was still making, and rank 0 would fail in connect, not in the all-reduce.
  std::latch joined(4);
  const auto errors = run_on_nodes(placement, [&joined](Communicator& comm) {
    joined.arrive_and_wait();
    if (comm.rank() >= 2) return;  // node 1 leaves: its connections close
    auto t = torch::ones({64});
    comm.control().allreduce(t);
  });
  EXPECT_NE(errors[0].find("all-reduce failed on rank 0"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("rank 0 abandoned the shared-memory collective"), std::string::npos)
      << errors[1];
  EXPECT_EQ(errors[2], "");
  EXPECT_EQ(errors[3], "");
}

// Which ranks share a machine comes from the machines' names (DDPRUN_HOST, else the host
// name and boot id), not from LOCAL_RANK and GROUP_RANK: wrong ones change nothing, and
// ranks that the environment puts on two nodes but that share one machine (no DDPRUN_HOST:
// the same host name and boot id) use one segment.
// A rank whose LOCAL_WORLD_SIZE says "all on one node" when rank 0's does not (or the
// reverse) would take another join path (one segment for the whole job, or its machine's
// first) and the ranks would wait for each other until the store timed out. That rank fails
// at once naming both values (under a launcher the others are then stopped; here they time
// out after 3 s). Nodes of different sizes are fine: 2+1+3 in Hierarchy.*.
TEST(HierarchyChoice, ARankThatDisagreesWithRankZeroOnTheJoinPathFailsNamingBothValues) {
  for (const int last : {4, 1}) {
    // 2+2 where rank 3 says 4 (all on one node); 4 on one node where rank 3 says 1.
    Placement placement{last == 4 ? std::vector<int>{2, 2} : std::vector<int>{4}};
    placement.last_rank_local_world_size = last;
    placement.timeout = std::chrono::milliseconds(3'000);
    const auto errors = run_on_nodes(placement, [](Communicator&) {});
    EXPECT_EQ(errors[3], "rank 3 has LOCAL_WORLD_SIZE " + std::to_string(last) + ", rank 0 has " +
                             std::to_string(last == 4 ? 2 : 4) +
                             " (WORLD_SIZE 4): they disagree on whether every rank runs on one "
                             "node");
  }
}

TEST(HierarchyChoice, MachinesComeFromTheirNamesNotFromLocalAndGroupRanks) {
  Placement wrong{{2, 2}};
  wrong.wrong_local_ranks = true;
  Placement one{{2, 2}};
  one.no_host_names = true;
  for (const auto& [placement, transport] :
       {std::pair{wrong, "gloo between 2 nodes + shared memory within"},
        std::pair{one, "gloo + shared memory"}}) {
    expect_no_errors(
        run_on_nodes(placement, [transport = std::string(transport)](Communicator& comm) {
          EXPECT_EQ(comm.transport(), transport);
          auto t = torch::full({1000}, static_cast<float>(comm.rank() + 1));
          comm.control().allreduce(t);
          EXPECT_TRUE(torch::equal(t, torch::full({1000}, 10.0F)));
        }));
  }
}

}  // namespace
}  // namespace ddprun::worker
