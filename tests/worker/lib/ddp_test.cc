// DistributedDataParallel with two ranks as two threads of this process, over gloo
// (loopback), over shared memory and over the gloo-as-nccl double (a data plane with NCCL's
// rules): overlapped all-reduce, launch order, unused parameters, no_sync, the ranks'
// agreement on the model, and the planes' rules.

#include "ddprun/worker/ddp.h"
#include "ddprun/worker/zero.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "ddprun/contract/collective_trace.h"
#include "ddprun/contract/errors.h"
#include "ddprun/worker/errors.h"
#include "free_port.h"
#include "ranks_as_threads.h"
#include "temp_dir.h"

namespace ddprun::worker {
namespace {

// Two square layers and an optional third, all 8x8: each layer (288 bytes) is one bucket
// with the test's caps. Reverse registration order: spare (if any), b, a.
struct Net : torch::nn::Module {
  explicit Net(bool with_spare) {
    a = register_module("a", torch::nn::Linear(8, 8));
    b = register_module("b", torch::nn::Linear(8, 8));
    if (with_spare) spare = register_module("spare", torch::nn::Linear(8, 8));
    // The same weights in every Net of a test (the global generator is shared by threads).
    auto gen = at::detail::createCPUGenerator(1);
    torch::NoGradGuard no_grad;
    for (auto& p : parameters()) p.copy_(torch::randn(p.sizes(), gen));
  }
  // b(a(x)) or a(b(x)), plus spare(x) when asked.
  at::Tensor forward(const at::Tensor& x, bool a_first = true, bool use_spare = false) {
    auto y =
        a_first ? b->forward(torch::tanh(a->forward(x))) : a->forward(torch::tanh(b->forward(x)));
    if (use_spare) y = y + spare->forward(x);
    return y.pow(2).sum();
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, spare{nullptr};
};

class DdpTest : public OverTransports {};

INSTANTIATE_TEST_SUITE_P(Transports, DdpTest, all_transports(), transport_name);

DdpOptions one_layer_buckets() {
  DdpOptions o;
  o.bucket_cap_bytes = o.first_bucket_cap_bytes = (8 * 8 + 8) * sizeof(float);
  return o;
}

// Own generator: the ranks are threads, and the global one is shared between them.
at::Tensor batch(int rank, int micro = 0) {
  auto gen = at::detail::createCPUGenerator(static_cast<std::uint64_t>(100 + 10 * rank + micro));
  return torch::randn({4, 8}, gen);
}

void clear_grads(torch::nn::Module& m) {
  for (auto& p : m.parameters()) p.mutable_grad() = at::Tensor();
}

std::vector<at::Tensor> grads(torch::nn::Module& m) {
  std::vector<at::Tensor> out;
  for (auto& p : m.parameters()) {
    out.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  }
  return out;
}

// The average over ranks of this rank's current gradients, by plain all-reduces.
std::vector<at::Tensor> averaged_by_hand(torch::nn::Module& m, Communicator& comm) {
  auto g = grads(m);
  for (auto& t : g) {
    comm.control().allreduce(t);
    t.div_(comm.world_size());
  }
  return g;
}

void expect_bit_identical(const std::vector<at::Tensor>& x, const std::vector<at::Tensor>& y,
                          const std::string& what) {
  ASSERT_EQ(x.size(), y.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    EXPECT_TRUE(torch::equal(x[i], y[i])) << what << " #" << i;
}

// init_method: a FileStore in a fresh folder, and a TCPStore at an address given in the
// URL rather than MASTER_ADDR/MASTER_PORT (which point nowhere here).
TEST(InitMethod, FileAndTcpStoresRendezvousAndAllReduce) {
  const support::TempDir temp;
  const std::string dir = temp.path();
  const auto sum_of_ranks = [](Communicator& comm) {
    auto t = torch::full({4}, static_cast<float>(comm.rank() + 1));
    comm.control().allreduce(t, ReduceOp::kSum);
    EXPECT_TRUE(torch::equal(t, torch::full({4}, 3.0f)));
  };
  run_ranks(2, sum_of_ranks, false, "file://" + dir + "/store");
  run_ranks(2, sum_of_ranks, false,
            "tcp://127.0.0.1:" + std::to_string(support::free_loopback_port()));
  std::filesystem::remove_all(dir);
}

TEST_P(DdpTest, OverlapLaunchesDuringBackwardAndAveragesLikeTheAfterBackwardPath) {
  run(2, [this](Communicator& comm) {
    std::vector<at::Tensor> result[2];
    for (const bool overlap : {true, false}) {
      auto net = std::make_shared<Net>(false);
      auto options = one_layer_buckets();
      options.overlap = overlap;
      DistributedDataParallel ddp(net, comm, options);
      ASSERT_EQ(ddp.bucket_count(), 2u);
      {
        NoSyncGuard local(ddp);
        net->forward(batch(comm.rank())).backward();
      }
      const auto expected = averaged_by_hand(*net, comm);
      clear_grads(*net);
      ddp.prepare_for_backward();
      net->forward(batch(comm.rank())).backward();
      ddp.finish_gradient_sync();
      result[overlap ? 0 : 1] = grads(*net);
      expect_bit_identical(result[overlap ? 0 : 1], expected, overlap ? "overlap" : "after");
      EXPECT_EQ(ddp.last_sync_stats().launch_order, (std::vector<std::size_t>{0, 1}));
      // Each bucket starts from its last gradient's hook, before backward has ended; over
      // gloo it then runs while backward goes on, through shared memory inside the hook.
      EXPECT_EQ(ddp.last_sync_stats().launched_during_backward, overlap ? 2u : 0u);
      EXPECT_EQ(ddp.last_sync_stats().overlapped_with_backward,
                overlap && GetParam() != Transport::kSharedMemory ? 2u : 0u);
    }
    expect_bit_identical(result[0], result[1], "overlap vs after backward");
  });
}

TEST_P(DdpTest, BucketsLaunchInIndexOrderOnEveryRankWhateverOrderTheyFill) {
  // Rank 1 computes a(b(x)): its bucket 1 (layer a) fills first. Launched first, it would
  // be summed with rank 0's bucket 0 (same size), and the averages would be wrong.
  run(2, [](Communicator& comm) {
    auto net = std::make_shared<Net>(false);
    DistributedDataParallel ddp(net, comm, one_layer_buckets());
    const bool a_first = comm.rank() == 0;
    {
      NoSyncGuard local(ddp);
      net->forward(batch(comm.rank()), a_first).backward();
    }
    const auto expected = averaged_by_hand(*net, comm);
    clear_grads(*net);
    net->forward(batch(comm.rank()), a_first).backward();
    ddp.finish_gradient_sync();
    expect_bit_identical(grads(*net), expected, "averaged");
    EXPECT_EQ(ddp.last_sync_stats().launch_order, (std::vector<std::size_t>{0, 1}));
  });
}

TEST_P(DdpTest, UnusedParametersFailNamingThemAndSuggestingTheOption) {
  run(2, [](Communicator& comm) {
    auto net = std::make_shared<Net>(true);
    DistributedDataParallel ddp(net, comm, one_layer_buckets());
    ddp.prepare_for_backward();
    net->forward(batch(comm.rank())).backward();
    try {
      ddp.finish_gradient_sync();
      ADD_FAILURE() << "no error for the unused layer";
    } catch (const ddprun::ConfigError& e) {
      EXPECT_EQ(std::string(e.what()),
                "2 trainable parameter(s) got no gradient in this backward pass: spare.weight, "
                "spare.bias");
      EXPECT_NE(e.hint().find("runtime.find_unused_parameters"), std::string::npos);
    }
    // The next step starts clean.
    ddp.prepare_for_backward();
    net->forward(batch(comm.rank()), true, true).backward();
    EXPECT_NO_THROW(ddp.finish_gradient_sync());
  });
}

TEST_P(DdpTest, WithFindUnusedParametersMissingGradientsCountAsZeroAndRanksStillAgree) {
  // Only rank 0 uses the spare layer (bucket 0): rank 1 must still take part in its
  // all-reduce, with zeros, or rank 0 would wait forever.
  run(2, [](Communicator& comm) {
    auto net = std::make_shared<Net>(true);
    auto options = one_layer_buckets();
    options.find_unused_parameters = true;
    DistributedDataParallel ddp(net, comm, options);
    const bool use_spare = comm.rank() == 0;
    {
      NoSyncGuard local(ddp);
      net->forward(batch(comm.rank()), true, use_spare).backward();
    }
    const auto expected = averaged_by_hand(*net, comm);
    clear_grads(*net);
    net->forward(batch(comm.rank()), true, use_spare).backward();
    ddp.finish_gradient_sync();
    expect_bit_identical(grads(*net), expected, "averaged");
    EXPECT_TRUE(net->spare->weight.grad().defined());
    const std::vector<std::string> unused =
        use_spare ? std::vector<std::string>{}
                  : std::vector<std::string>{"spare.weight", "spare.bias"};
    EXPECT_EQ(ddp.last_sync_stats().unused_parameters, unused);
    EXPECT_EQ(ddp.last_sync_stats().launch_order, (std::vector<std::size_t>{0, 1, 2}));
  });
}

// As PyTorch: a parameter that no rank used keeps the gradient it had, here none, so SGD
// with momentum and weight decay leaves it where it was; one that some rank used gets the
// average on every rank. Two steps: the second must not move the spare layer either, although
// the first gave every other parameter momentum.
TEST_P(DdpTest, AParameterThatNoRankUsedKeepsNoGradientAndTheOptimizerLeavesItAlone) {
  run(2, [](Communicator& comm) {
    auto net = std::make_shared<Net>(true);
    auto options = one_layer_buckets();
    options.find_unused_parameters = true;
    DistributedDataParallel ddp(net, comm, options);
    torch::optim::SGD sgd(net->parameters(),
                          torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
    const auto spare_before = net->spare->weight.clone();
    for (int step = 0; step < 2; ++step) {
      clear_grads(*net);
      ddp.prepare_for_backward();
      net->forward(batch(comm.rank(), step)).backward();
      ddp.finish_gradient_sync();
      EXPECT_FALSE(net->spare->weight.grad().defined()) << "step " << step;
      EXPECT_FALSE(net->spare->bias.grad().defined()) << "step " << step;
      EXPECT_TRUE(net->a->weight.grad().defined()) << "step " << step;
      EXPECT_EQ(ddp.last_sync_stats().unused_on_every_rank,
                (std::vector<std::string>{"spare.weight", "spare.bias"}));
      sgd.step();
    }
    EXPECT_TRUE(torch::equal(net->spare->weight, spare_before));
    // Used by rank 1 alone: every rank gets the average (rank 0's share is zero).
    clear_grads(*net);
    ddp.prepare_for_backward();
    net->forward(batch(comm.rank()), true, comm.rank() == 1).backward();
    ddp.finish_gradient_sync();
    EXPECT_TRUE(net->spare->weight.grad().defined());
    EXPECT_TRUE(ddp.last_sync_stats().unused_on_every_rank.empty());
    auto spare_grad = net->spare->weight.grad().clone();
    comm.control().allreduce(spare_grad, ReduceOp::kMax);
    EXPECT_TRUE(torch::equal(spare_grad, net->spare->weight.grad())) << "ranks differ";
  });
}

// The built-in compression hooks on every transport: the averaged gradients within the
// wire type's rounding of the plain average, the same bits on both ranks, and ranks that
// disagree on the hook refused when DDP is made (they would pair an all-to-all with an
// all-reduce).
TEST_P(DdpTest, CompressionHooksAverageWithinTheWireTypesRoundingAndRanksAgree) {
  for (const auto& make : {bf16_compress_hook, fp16_compress_hook}) {
    run(2, [&make](Communicator& comm) {
      auto net = std::make_shared<Net>(false);
      auto options = one_layer_buckets();
      options.comm_hook = make();
      DistributedDataParallel ddp(net, comm, options);
      {
        NoSyncGuard local(ddp);
        net->forward(batch(comm.rank())).backward();
      }
      const auto plain = averaged_by_hand(*net, comm);
      clear_grads(*net);
      net->forward(batch(comm.rank())).backward();
      ddp.finish_gradient_sync();
      const auto compressed = grads(*net);
      const double unit = options.comm_hook.name == "bf16" ? 1.0 / 128 : 1.0 / 1024;
      for (std::size_t i = 0; i < plain.size(); ++i) {
        const auto bound = plain[i].abs().max().item<double>() * unit + 1e-6;
        EXPECT_LE((compressed[i] - plain[i]).abs().max().item<double>(), bound)
            << options.comm_hook.name << ", gradient " << i;
        const auto wire = options.comm_hook.name == "bf16" ? at::kBFloat16 : at::kHalf;
        EXPECT_TRUE(torch::equal(compressed[i], compressed[i].to(wire).to(torch::kFloat)))
            << options.comm_hook.name << ": gradient " << i << " was not sent compressed";
        auto most = compressed[i].clone();
        comm.control().allreduce(most, ReduceOp::kMax);
        EXPECT_TRUE(torch::equal(most, compressed[i])) << "ranks differ, gradient " << i;
      }
    });
  }
  run(2, [](Communicator& comm) {
    auto options = one_layer_buckets();
    if (comm.rank() == 0) options.comm_hook = bf16_compress_hook();
    try {
      DistributedDataParallel ddp(std::make_shared<Net>(false), comm, options);
      ADD_FAILURE() << "ranks with different hooks were not refused";
    } catch (const ConsistencyError& e) {
      EXPECT_NE(e.hint().find("comm hook"), std::string::npos) << e.hint();
    }
  });
}

// One trainable vector whose gradient is what the test gives: loss = sum(p * g).
struct GivenGradient : torch::nn::Module {
  explicit GivenGradient(std::int64_t n) { p = register_parameter("p", torch::zeros({n})); }
  at::Tensor p;
};

// Each rank's gradients near and past fp16's largest value (65504), that overflow when each
// rank's value is rounded to fp16 and summed before dividing by the world size, for
// element i on rank r.
at::Tensor gradients_near_fp16s_limit(int rank) {
  const auto r = static_cast<float>(rank);
  return torch::tensor({40000.0f, 65000.0f, rank == 0 ? 100000.0f : 0.0f,
                        rank % 2 == 0 ? 60000.0f : -59000.0f, 1100.0f, -40000.0f + 7 * r,
                        0.001f * (r + 1), 30000.0f + 1000 * r});
}

// PyTorch's fp16_compress_hook's order, emulated here: each rank's gradient divided by the
// world size in float, rounded to fp16, the values summed, the sum rounded to fp16.
at::Tensor fp16_hook_emulated(int world) {
  auto sum = torch::zeros({8}, torch::kDouble);
  for (int r = 0; r < world; ++r) {
    sum += (gradients_near_fp16s_limit(r) / world).to(at::kHalf).to(torch::kDouble);
  }
  return sum.to(at::kHalf).to(torch::kFloat);
}

// fp16's spacing at each of `values` (one unit in the last place).
at::Tensor fp16_spacing(const at::Tensor& values) {
  const auto exponent = torch::floor(torch::log2(values.abs().clamp_min(6.103515625e-05)));
  return torch::pow(2.0, exponent - 10);
}

// The fp16 hook on 2, 3 and 8 ranks with gradients near fp16's limit: DDP's averaged
// gradients are finite and within one fp16 spacing of PyTorch's order emulated (divide,
// round, sum, round), where rounding and summing first overflows; the ZeRO-1 reduce-scatter
// with fp16 on the wire gives the same share.
TEST_P(DdpTest, Fp16CompressionDividesBeforeRoundingAsPyTorchsHookAndDoesNotOverflow) {
  for (const int world : {2, 3, 8}) {
    auto old_order = torch::zeros({8}, torch::kFloat);
    for (int r = 0; r < world; ++r) {
      old_order += gradients_near_fp16s_limit(r).to(at::kHalf).to(torch::kFloat);
    }
    EXPECT_TRUE(torch::isinf(old_order.to(at::kHalf)).any().item<bool>())
        << "the test's gradients do not overflow when summed first, world " << world;
    const auto expected = fp16_hook_emulated(world);
    run(world, [&](Communicator& comm) {
      auto net = std::make_shared<GivenGradient>(8);
      DdpOptions options;
      options.comm_hook = fp16_compress_hook();
      DistributedDataParallel ddp(net, comm, options);
      (net->p * gradients_near_fp16s_limit(comm.rank())).sum().backward();
      ddp.finish_gradient_sync();
      const auto got = net->p.grad();
      const std::string where = "world " + std::to_string(world) + ", rank " +
                                std::to_string(comm.rank()) + ": got " + c10::str(got) +
                                ", expected " + c10::str(expected);
      EXPECT_TRUE(torch::isfinite(got).all().item<bool>()) << where;
      EXPECT_TRUE(((got - expected).abs() <= fp16_spacing(expected)).all().item<bool>()) << where;
      if (comm.rank() == 0) {
        std::cout << "fp16 hook, world " << world << ": 40000 on every rank averages to "
                  << got[0].item<float>() << ", 1100 to " << got[4].item<float>() << "\n";
      }
      auto flat = comm.data().device_zeros(8 * world, torch::kFloat);
      for (int s = 0; s < world; ++s) {
        flat.narrow(0, 8 * s, 8).copy_(gradients_near_fp16s_limit(comm.rank()));
      }
      comm.data().reduce_scatter_async(flat, at::kHalf).wait();
      const auto share = flat.narrow(0, 8 * comm.rank(), 8) / world;
      EXPECT_TRUE(torch::isfinite(share).all().item<bool>()) << "reduce-scatter, " << where;
      EXPECT_TRUE(((share - expected).abs() <= fp16_spacing(expected)).all().item<bool>())
          << "reduce-scatter, " << where << ", share " << share;
    });
  }
}

// ZeRO-1: DDP with sharded gradients and a ShardedOptimizer steps as plain DDP with the whole
// optimizer does (SGD with momentum and weight decay, and Adam), each rank holding half the
// optimizer state; the state consolidated from the shares is the whole optimizer's.
TEST_P(DdpTest, ShardedOptimizerStepsAsTheWholeOptimizerWithAShareOfItsState) {
  using Make = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>;
  const std::vector<std::pair<std::string, Make>> optimizers{
      {"sgd",
       [](std::vector<at::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
         return std::make_unique<torch::optim::SGD>(
             std::move(p), torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
       }},
      {"adam", [](std::vector<at::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
         return std::make_unique<torch::optim::Adam>(std::move(p), torch::optim::AdamOptions(0.01));
       }}};
  for (const auto& [name, make] : optimizers) {
    run(2, [&, name = name, make = make](Communicator& comm) {
      auto plain_net = std::make_shared<Net>(false), zero_net = std::make_shared<Net>(false);
      DistributedDataParallel plain(plain_net, comm, one_layer_buckets());
      auto options = one_layer_buckets();
      options.shard_gradients = true;
      DistributedDataParallel zero(zero_net, comm, options);
      auto whole = make(plain_net->parameters());
      ShardedOptimizer sharded(zero, comm, make);
      for (int step = 0; step < 3; ++step) {
        for (auto& [net, ddp] : {std::pair{plain_net, &plain}, std::pair{zero_net, &zero}}) {
          clear_grads(*net);
          ddp->prepare_for_backward();
          net->forward(batch(comm.rank(), step)).backward();
          ddp->finish_gradient_sync();
        }
        whole->step();
        sharded.step();
        const auto a = plain_net->parameters(), b = zero_net->parameters();
        for (std::size_t i = 0; i < a.size(); ++i) {
          EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-6, 1e-7)) << name << ", step " << step;
        }
      }
      EXPECT_EQ(2 * optimizer_state_bytes(sharded.optimizer()), optimizer_state_bytes(*whole))
          << name;
      auto consolidated = make(zero_net->parameters());
      sharded.save_state_into(*consolidated);
      EXPECT_EQ(optimizer_state_bytes(*consolidated), optimizer_state_bytes(*whole)) << name;
      // The consolidated state steps on as the whole optimizer's does.
      for (auto& [net, opt] :
           {std::pair{plain_net, whole.get()}, std::pair{zero_net, consolidated.get()}}) {
        clear_grads(*net);
        net->forward(batch(comm.rank(), 9)).backward();
        opt->step();
      }
      const auto a = plain_net->parameters(), b = zero_net->parameters();
      for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-6, 1e-7)) << name << ", consolidated";
      }
    });
  }
}

// ZeRO-1 for live recovery (keep_next_share): each rank's copy of the next rank's share
// steps to the same bits as that rank's own, the parameters are the plain sharded run's to
// rounding, and a rank's share restored from its neighbours (as after its loss) is what it
// held, bit for bit.
TEST_P(DdpTest, AKeptNextShareIsItsOwnersBitForBitAndRestoresALostRanksShare) {
  run(3, [](Communicator& comm) {
    const auto make = [](std::vector<at::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
      return std::make_unique<torch::optim::Adam>(std::move(p), torch::optim::AdamOptions(0.01));
    };
    auto plain_net = std::make_shared<Net>(false), kept_net = std::make_shared<Net>(false);
    auto options = one_layer_buckets();
    options.shard_gradients = true;
    DistributedDataParallel plain(plain_net, comm, options);
    options.keep_next_share = true;
    DistributedDataParallel kept(kept_net, comm, options);
    ShardedOptimizer plain_zero(plain, comm, make), kept_zero(kept, comm, make);
    ASSERT_EQ(plain_zero.next_optimizer(), nullptr);
    ASSERT_NE(kept_zero.next_optimizer(), nullptr);
    for (int step = 0; step < 3; ++step) {
      for (auto& [net, ddp] : {std::pair{plain_net, &plain}, std::pair{kept_net, &kept}}) {
        clear_grads(*net);
        ddp->prepare_for_backward();
        net->forward(batch(comm.rank(), step)).backward();
        ddp->finish_gradient_sync();
      }
      plain_zero.step();
      kept_zero.step();
      const auto a = plain_net->parameters(), b = kept_net->parameters();
      for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-6, 1e-7)) << "step " << step;
      }
    }
    const HeldShares held = kept_zero.held();
    ASSERT_EQ(held.own.size(), kept.bucket_count());
    // Rank r's own share's moments, sent to rank r - 1, equal what it keeps of them.
    const int world = comm.world_size(), rank = comm.rank();
    for (std::size_t b = 0; b < held.own.size(); ++b) {
      for (std::size_t k = 0; k < 2; ++k) {
        for (int owner = 0; owner < world; ++owner) {
          auto theirs = rank == owner ? held.own[b].tensors[k].clone()
                                      : torch::empty_like(held.own[b].tensors[k]);
          std::vector<at::Tensor> list{theirs};
          comm.control().broadcast(list, owner);
          if ((rank + 1) % world == owner) {
            EXPECT_TRUE(torch::equal(theirs, held.next[b].tensors[k]))
                << "bucket " << b << ", part " << k << ", rank " << owner << "'s share";
          }
        }
      }
      EXPECT_EQ(held.next[b].step, held.own[b].step);
    }
    // Rank 1 is lost: a new optimizer on each rank, rank 1's with nothing held, is restored.
    ShardedOptimizer again(kept, comm, make);
    again.restore(comm.control(), rank == 1 ? HeldShares{} : held, {1});
    const HeldShares restored = again.held();
    for (std::size_t b = 0; b < held.own.size(); ++b) {
      for (std::size_t k = 0; k < 2; ++k) {
        EXPECT_TRUE(torch::equal(restored.own[b].tensors[k], held.own[b].tensors[k]))
            << "rank " << rank << ", bucket " << b;
        EXPECT_TRUE(torch::equal(restored.next[b].tensors[k], held.next[b].tensors[k]))
            << "rank " << rank << ", bucket " << b;
      }
      EXPECT_EQ(restored.own[b].step, held.own[b].step);
    }
    // Two neighbours lost: a share lived on them alone.
    ShardedOptimizer third(kept, comm, make);
    try {
      third.restore(comm.control(), rank == 0 ? held : HeldShares{}, {1, 2});
      ADD_FAILURE() << "restored what no survivor held";
    } catch (const CollectiveError& e) {
      EXPECT_NE(std::string(e.what()).find("ranks 1 and 2 were both lost"), std::string::npos)
          << e.what();
    }
  });
}

// A rank that shards its gradients (ZeRO-1) beside one that does not would pair an
// all-to-all with an all-reduce: refused when DDP is made.
TEST_P(DdpTest, RanksThatDisagreeOnShardingGradientsAreRefused) {
  run(2, [](Communicator& comm) {
    auto options = one_layer_buckets();
    options.shard_gradients = comm.rank() == 0;
    try {
      DistributedDataParallel ddp(std::make_shared<Net>(false), comm, options);
      ADD_FAILURE() << "ranks that disagree on sharding were not refused";
    } catch (const ConsistencyError& e) {
      EXPECT_NE(e.hint().find("shard_gradients"), std::string::npos) << e.hint();
    }
  });
}

// A consolidated state loads into any sharding: three ranks take their shares of a state
// (made up, the same on every rank) and consolidate it back unchanged.
TEST_P(DdpTest, AConsolidatedStateLoadsIntoThreeShardsAndConsolidatesBackUnchanged) {
  run(3, [](Communicator& comm) {
    auto net = std::make_shared<Net>(false);
    auto options = one_layer_buckets();
    options.shard_gradients = true;
    DistributedDataParallel ddp(net, comm, options);
    const auto make = [](std::vector<at::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
      return std::make_unique<torch::optim::Adam>(std::move(p), torch::optim::AdamOptions(0.01));
    };
    auto original = make(net->parameters());
    auto gen = at::detail::createCPUGenerator(3);
    for (const auto& p : net->parameters()) {
      auto state = std::make_unique<torch::optim::AdamParamState>();
      state->step(7);
      state->exp_avg(torch::randn(p.sizes(), gen));
      state->exp_avg_sq(torch::rand(p.sizes(), gen));
      set_param_state(*original, p, std::move(state));
    }
    ShardedOptimizer sharded(ddp, comm, make);
    sharded.load_state_from(*original);
    EXPECT_LT(optimizer_state_bytes(sharded.optimizer()), optimizer_state_bytes(*original) / 2);
    auto back = make(net->parameters());
    sharded.save_state_into(*back);
    for (const auto& p : net->parameters()) {
      const auto* a = dynamic_cast<const torch::optim::AdamParamState*>(param_state(*original, p));
      const auto* b = dynamic_cast<const torch::optim::AdamParamState*>(param_state(*back, p));
      ASSERT_TRUE(a != nullptr && b != nullptr);
      EXPECT_EQ(b->step(), 7);
      EXPECT_TRUE(torch::equal(a->exp_avg(), b->exp_avg()));
      EXPECT_TRUE(torch::equal(a->exp_avg_sq(), b->exp_avg_sq()));
    }
  });
}

TEST_P(DdpTest, NoSyncAccumulatesLocallyAndTheNextSyncedStepAveragesTheSum) {
  run(2, [](Communicator& comm) {
    auto net = std::make_shared<Net>(false);
    DistributedDataParallel ddp(net, comm, one_layer_buckets());
    {
      NoSyncGuard local(ddp);
      for (int micro = 0; micro < 3; ++micro) net->forward(batch(comm.rank(), micro)).backward();
    }
    const auto expected = averaged_by_hand(*net, comm);
    clear_grads(*net);

    {
      NoSyncGuard local(ddp);
      for (int micro = 0; micro < 2; ++micro) net->forward(batch(comm.rank(), micro)).backward();
    }
    // Not averaged yet: the two ranks' gradients still differ.
    auto local = net->a->weight.grad().clone();
    auto sum = local.clone();
    comm.control().allreduce(sum);
    EXPECT_FALSE(torch::equal(sum, local * 2));
    net->forward(batch(comm.rank(), 2)).backward();
    ddp.finish_gradient_sync();
    expect_bit_identical(grads(*net), expected, "sum of three micro-batches, averaged");
  });
}

// Running statistics and the like: PyTorch's DDP broadcasts rank 0's buffers before every
// forward (broadcast_buffers=True), and so does prepare_for_forward(), unless turned off or
// while gradient sync is off (no_sync).
struct NetWithBuffer : torch::nn::Module {
  NetWithBuffer() {
    fc = register_module("fc", torch::nn::Linear(4, 4));
    running = register_buffer("running", torch::zeros({3}));
  }
  torch::nn::Linear fc{nullptr};
  at::Tensor running;
};

TEST_P(DdpTest, BuffersFollowRankZeroBeforeEveryForwardUnlessTurnedOff) {
  run(2, [](Communicator& comm) {
    const auto mine = [&comm](int step) { return static_cast<float>(10 * step + comm.rank()); };
    auto net = std::make_shared<NetWithBuffer>();
    DistributedDataParallel ddp(net, comm);
    for (int step = 1; step <= 2; ++step) {
      net->running.fill_(mine(step));  // as a forward's running statistics would diverge
      ddp.prepare_for_forward();
      EXPECT_TRUE(torch::equal(net->running, torch::full({3}, static_cast<float>(10 * step))))
          << "rank " << comm.rank() << " step " << step;
    }
    {
      NoSyncGuard local(ddp);
      net->running.fill_(mine(3));
      ddp.prepare_for_forward();
      EXPECT_TRUE(torch::equal(net->running, torch::full({3}, mine(3))));
    }

    auto off_net = std::make_shared<NetWithBuffer>();
    DdpOptions off;
    off.broadcast_buffers = false;
    DistributedDataParallel off_ddp(off_net, comm, off);
    off_net->running.fill_(mine(4));
    off_ddp.prepare_for_forward();
    EXPECT_TRUE(torch::equal(off_net->running, torch::full({3}, mine(4))));
  });
}

TEST_P(DdpTest, TwoBackwardPassesInOneSyncedStepAreAnError) {
  run(1, [](Communicator& comm) {
    auto net = std::make_shared<Net>(false);
    DistributedDataParallel ddp(net, comm);
    net->forward(batch(0)).backward();
    net->forward(batch(0)).backward();
    EXPECT_THROW(ddp.finish_gradient_sync(), ddprun::UsageError);
    net->forward(batch(0)).backward();
    EXPECT_NO_THROW(ddp.finish_gradient_sync());
  });
}

// The double refuses on its data plane what NCCL refuses: CPU tensors (here: any tensor
// not made by device_zeros()), tensors that are not contiguous, and barriers. The control
// plane takes them all.
TEST(GlooAsNccl, DataPlaneRefusesWhatNcclRefusesAndTheControlPlaneTakesIt) {
  run_ranks(
      2,
      [](Communicator& comm) {
        auto on_device = comm.data().device_zeros(6, at::kFloat).fill_(comm.rank() + 1);
        comm.data().allreduce(on_device);
        EXPECT_TRUE(torch::equal(on_device, torch::full({6}, 3.0f)));
        auto cpu = torch::tensor({std::int64_t{1}, std::int64_t{2}}, torch::kLong);
        try {
          comm.data().allreduce(cpu, ReduceOp::kMax);
          ADD_FAILURE() << "a CPU control tensor went over the data plane";
        } catch (const ddprun::UsageError& e) {
          EXPECT_EQ(std::string(e.what()),
                    "all-reduce on the data plane (gloo-as-nccl): a Long tensor of 2 "
                    "element(s) was not made by device_zeros() (under NCCL it would be a CPU "
                    "tensor)");
          EXPECT_EQ(e.hint(), "collectives on CPU tensors belong on Communicator::control()");
        }
        auto strided = comm.data().device_zeros(6, at::kFloat).view({2, 3}).t();
        EXPECT_THROW(comm.data().allreduce(strided), ddprun::UsageError);
        std::vector<at::Tensor> both{on_device, cpu};
        EXPECT_THROW(comm.data().broadcast(both), ddprun::UsageError);
        EXPECT_THROW(comm.data().barrier(), ddprun::UsageError);
        // Nothing was sent by the refused calls: the ranks are still in step.
        comm.control().allreduce(cpu, ReduceOp::kMax);
        comm.control().barrier();
        EXPECT_TRUE(torch::equal(cpu, torch::tensor({std::int64_t{1}, std::int64_t{2}})));
      },
      true, "", "gloo-as-nccl");
}

// Ranks that built different models fail at construction, on every rank, naming the first
// difference, instead of summing unrelated numbers or hanging later.
TEST_P(DdpTest, RanksWithDifferentModelsFailAtConstructionNamingTheFirstDifference) {
  run(2, [](Communicator& comm) {
    auto net = std::make_shared<Net>(comm.rank() == 1);  // rank 1 has the spare layer
    try {
      DistributedDataParallel ddp(net, comm, one_layer_buckets());
      ADD_FAILURE() << "no error for different models";
    } catch (const ConsistencyError& e) {
      EXPECT_EQ(std::string(e.what()),
                comm.rank() == 0
                    ? "the ranks' models differ: parameter or buffer #5 differs between ranks "
                      "(rank 0 has nothing (4 parameters and buffers); the ranks hold 4 to 6 "
                      "parameters and buffers)"
                    : "the ranks' models differ: parameter or buffer #5 differs between ranks "
                      "(rank 1 has 'spare.weight', Float [8, 8]; the ranks hold 4 to 6 "
                      "parameters and buffers)");
    }
  });
  run(2, [](Communicator& comm) {
    auto net = std::make_shared<Net>(false);
    if (comm.rank() == 1) {
      net->b = net->replace_module("b", torch::nn::Linear(8, 7));
    }
    try {
      DistributedDataParallel ddp(net, comm, one_layer_buckets());
      ADD_FAILURE() << "no error for a different shape";
    } catch (const ConsistencyError& e) {
      EXPECT_NE(std::string(e.what()).find("parameter or buffer #3 differs"), std::string::npos)
          << e.what();
    }
  });
}

TEST_P(DdpTest, RanksWithDifferentBucketCapsFailAtConstruction) {
  run(2, [](Communicator& comm) {
    auto net = std::make_shared<Net>(false);
    auto options = comm.rank() == 0 ? one_layer_buckets() : DdpOptions{};
    try {
      DistributedDataParallel ddp(net, comm, options);
      ADD_FAILURE() << "no error for different bucket caps";
    } catch (const ConsistencyError& e) {
      EXPECT_EQ(std::string(e.what()), "the ranks' gradient buckets differ (rank " +
                                           std::to_string(comm.rank()) + " has " +
                                           (comm.rank() == 0 ? "2" : "1") + " bucket(s))");
    }
  });
}

// A dtype the transport cannot carry (gloo: bf16, int16, bool, complex) is one UsageError
// naming it, thrown before anything starts, on every collective of either plane, with one
// rank or two; never a failed collective with a roll call of the ranks (gloo's own "Invalid
// scalar type" came back as "every rank responded afterwards (stopped, hung or dead?)").
// The types gloo carries go through, and the communicator stays usable after a refusal.
TEST_P(DdpTest, ADtypeTheTransportCannotCarryIsOneErrorNamingIt) {
  const std::vector<at::ScalarType> carried{at::kFloat, at::kDouble, at::kHalf, at::kChar,
                                            at::kByte,  at::kInt,    at::kLong};
  const std::vector<at::ScalarType> refused{at::kBFloat16, at::kShort, at::kBool,
                                            at::kComplexFloat};
  for (const int world : {1, 2}) {
    run(world, [&](Communicator& comm) {
      for (Plane* plane : {&comm.control(), &comm.data()}) {
        const std::vector<std::pair<std::string, std::function<void(at::Tensor&)>>> ops{
            {"all-reduce", [plane](at::Tensor& t) { plane->allreduce(t); }},
            {"broadcast",
             [plane](at::Tensor& t) {
               std::vector<at::Tensor> one{t};
               plane->broadcast(one);
             }},
            {"all-gather", [plane](at::Tensor& t) { plane->allgather_shares(t); }},
            {"reduce-scatter", [plane](at::Tensor& t) { plane->reduce_scatter_async(t).wait(); }},
        };
        for (const auto& [op, call] : ops) {
          for (const auto type : carried) {
            auto t = plane->device_zeros(4, type);
            EXPECT_NO_THROW(call(t)) << op << " of " << c10::toString(type);
          }
          for (const auto type : refused) {
            auto t = plane->device_zeros(4, type);
            const std::string name = c10::toString(type);
            try {
              call(t);
              ADD_FAILURE() << op << " of " << name << " was not refused";
            } catch (const ddprun::UsageError& e) {
              const std::string what = e.what();
              EXPECT_EQ(what.rfind(op + " of a " + name + " tensor on rank ", 0), 0u) << what;
              EXPECT_NE(what.find("not " + name), std::string::npos) << what;
              EXPECT_EQ(what.find("responded"), std::string::npos) << what;
            }
          }
        }
      }
      auto after = comm.control().device_zeros(4, at::kFloat).fill_(1);
      comm.control().allreduce(after);
      EXPECT_TRUE(torch::equal(after, torch::full({4}, static_cast<float>(world))));
    });
  }
}

// After a failed collective every later one throws at once, on either plane: nothing can
// run on a group whose peers are out of step.
TEST(Communicator, IsUnusableAfterAFailedCollective) {
  Placement placement{{1, 1}};
  placement.wrong_local_ranks = true;  // each rank LOCAL_RANK 0 of LOCAL_WORLD_SIZE 1
  placement.no_host_names = true;
  placement.unresponsive_wait = std::chrono::milliseconds(200);
  std::string first, second;
  expect_no_errors(run_on_nodes(placement, [&](Communicator& comm) {
    comm.control().barrier();
    if (comm.rank() == 1) return;  // leaves: its connections close
    auto t = torch::ones({4});
    try {
      comm.control().allreduce(t);
    } catch (const CollectiveError& e) {
      first = e.what();
    }
    try {
      comm.data().allreduce(t);
    } catch (const CollectiveError& e) {
      second = e.what();
    }
  }));
  EXPECT_NE(first.find("all-reduce failed on rank 0"), std::string::npos) << first;
  EXPECT_EQ(second,
            "all-reduce on rank 0: the communicator is unusable after an earlier failed "
            "collective");
}

// The collective trace (DDPRUN_TRACE_FILE): every collective of a plane once, in order, with
// its start and end, though some are made of others (a reduce-scatter through shared memory
// is an all-reduce); the file is what ddprun reads.
TEST(Communicator, KeepsATraceOfEveryCollectiveOnceInOrder) {
  char pattern[] = "/tmp/ddprun-trace-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  Placement placement{{2}};
  placement.no_host_names = true;
  placement.adjust = [&](WorkerEnv& env) {
    env.trace_file = dir + "/rank_" + std::to_string(env.rank) + ".trace";
  };
  expect_no_errors(run_on_nodes(placement, [](Communicator& comm) {
    auto t = torch::ones({8});
    comm.control().allreduce(t);
    comm.control().reduce_scatter_async(t, at::kFloat).wait();
    comm.control().allgather_shares(t);
    comm.control().barrier();
  }));
  for (int r = 0; r < 2; ++r) {
    trace::TraceFile file;
    std::ifstream in(dir + "/rank_" + std::to_string(r) + ".trace", std::ios::binary);
    ASSERT_TRUE(in.read(reinterpret_cast<char*>(&file), sizeof file)) << "rank " << r;
    EXPECT_EQ(file.magic, trace::kMagic);
    EXPECT_EQ(file.rank, r);
    const trace::PlaneTrace& control = file.planes[0];
    ASSERT_EQ(control.started, 4u) << "rank " << r;
    const trace::Op expected[] = {trace::Op::kAllreduce, trace::Op::kReduceScatter,
                                  trace::Op::kAllgather, trace::Op::kBarrier};
    for (std::uint64_t k = 1; k <= 4; ++k) {
      const trace::Entry& e = control.entries[k - 1];
      EXPECT_EQ(e.seq, k);
      EXPECT_EQ(e.op, static_cast<std::uint8_t>(expected[k - 1])) << "#" << k;
      EXPECT_GT(e.start_ns, 0);
      EXPECT_GE(e.end_ns, e.start_ns) << "#" << k << " never ended";
    }
    EXPECT_EQ(control.entries[0].bytes, 32u);
    EXPECT_EQ(file.planes[1].started, 0u);  // gloo: one plane
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ddprun::worker
