// SyncBatchNorm with ranks as threads over every transport: half batches normalise as the
// whole batch, and on adversarial data (large means with small spreads, bf16 inputs,
// unequal batches, a rank with one row) its outputs, gradients and running statistics
// match torch's batch norm over the ranks' batches joined, computed in float64 by Python at
// test time (sync_batch_norm_reference.py says why not torch's SyncBatchNorm itself).

#include "ddprun/worker/sync_batch_norm.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "ranks_as_threads.h"
#include "temp_dir.h"
#include "unavailable.h"

namespace ddprun::worker {
namespace {

using nlohmann::json;

class SyncBatchNormTest : public OverTransports {};

INSTANTIATE_TEST_SUITE_P(Transports, SyncBatchNormTest, all_transports(), transport_name);

// SyncBatchNorm: two ranks with half a batch each normalise as one process with the whole
// batch: the same outputs, the same input gradients, weight and bias gradients that add up
// to the whole batch's, and the same running statistics; with local statistics they differ.
TEST_P(SyncBatchNormTest, SyncBatchNormOverHalfBatchesNormalisesAsTheWholeBatch) {
  auto gen = at::detail::createCPUGenerator(5);
  const auto whole = torch::randn({8, 3, 2, 2}, gen) * 3 + 1;
  const auto upstream = torch::randn({8, 3, 2, 2}, gen);
  const auto forward_backward = [&](SyncBatchNorm& bn, const at::Tensor& x, const at::Tensor& g) {
    auto input = x.clone().requires_grad_(true);
    auto y = bn.forward(input);
    (y * g).sum().backward();
    return std::vector<at::Tensor>{y.detach(),
                                   input.grad(),
                                   bn.weight.grad(),
                                   bn.bias.grad(),
                                   bn.running_mean.clone(),
                                   bn.running_var.clone()};
  };
  SyncBatchNorm reference(3);
  const auto expected = forward_backward(reference, whole, upstream);
  for (const bool sync : {true, false}) {
    run(2, [&](Communicator& comm) {
      SyncBatchNorm bn(3);
      if (sync) bn.set_plane(&comm.data());
      const auto rows = whole.narrow(0, 4 * comm.rank(), 4);
      const auto got = forward_backward(bn, rows, upstream.narrow(0, 4 * comm.rank(), 4));
      const auto expected_rows = [&](std::size_t i) {
        return expected[i].narrow(0, 4 * comm.rank(), 4);
      };
      const bool same_output = torch::allclose(got[0], expected_rows(0), 1e-5, 1e-5);
      EXPECT_EQ(same_output, sync) << "outputs, sync " << sync;
      // Unsynced, no collective ran: a rank leaving now could close its connections while
      // its peer still makes its own (seen with LibTorch 2.6: "connectFullMesh failed ...
      // Connection closed by peer").
      comm.control().barrier();
      if (!sync) return;
      EXPECT_TRUE(torch::allclose(got[1], expected_rows(1), 1e-5, 1e-5)) << "input gradients";
      for (std::size_t i = 2; i < 4; ++i) {
        auto summed = got[i].clone();
        comm.control().allreduce(summed);
        EXPECT_TRUE(torch::allclose(summed, expected[i], 1e-5, 1e-5)) << "parameter gradient";
      }
      EXPECT_TRUE(torch::allclose(got[4], expected[4], 1e-5, 1e-5)) << "running mean";
      EXPECT_TRUE(torch::allclose(got[5], expected[5], 1e-5, 1e-5)) << "running variance";
    });
  }
}

// One adversarial batch: each rank's rows of a (rows, channels, inner...) input drawn with
// this mean and spread, in `type`.
struct Case {
  std::string name;
  at::ScalarType type;
  std::vector<std::int64_t> rows;   // per rank: the world is its size
  std::vector<std::int64_t> shape;  // after the rows: channels, then any inner dimensions
  double mean, sd;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all{
      {"fp32, mean 1000, sd 0.05, 7 rows and 1", at::kFloat, {7, 1}, {3, 4}, 1000, 0.05},
      {"fp32, mean 100, sd 0.01, 3 rows and 5", at::kFloat, {3, 5}, {4}, 100, 0.01},
      {"fp32, mean -3, sd 2, 1 row, 4 and 2", at::kFloat, {1, 4, 2}, {5}, -3, 2},
      {"bf16, mean 1, sd 0.1, 6 rows and 2", at::kBFloat16, {6, 2}, {3, 2, 2}, 1, 0.1},
      {"bf16, mean 1, sd 0.1, 4000 rows and 2273", at::kBFloat16, {4000, 2273}, {2}, 1, 0.1},
  };
  return all;
}

// The joined batch of a case (every rank's rows, rank after rank) and its parameters.
struct Batch {
  at::Tensor input, upstream;  // the case's type
  at::Tensor weight, bias;     // float
};

Batch make_batch(const Case& c, std::uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<std::int64_t> shape{std::accumulate(c.rows.begin(), c.rows.end(), std::int64_t{0})};
  shape.insert(shape.end(), c.shape.begin(), c.shape.end());
  const std::int64_t channels = c.shape[0];
  Batch b;
  b.input = (torch::randn(shape, gen, torch::kDouble) * c.sd + c.mean).to(c.type);
  b.upstream = torch::randn(shape, gen).to(c.type);
  b.weight = 1 + 0.5 * torch::randn({channels}, gen);
  b.bias = torch::randn({channels}, gen);
  return b;
}

std::vector<double> values(const at::Tensor& t) {
  const auto d = t.to(torch::kDouble).contiguous();
  return {d.data_ptr<double>(), d.data_ptr<double>() + d.numel()};
}

// The largest difference from `expected`, relative to `scale` (0: `expected`'s largest
// magnitude).
double relative_error(const at::Tensor& got, const at::Tensor& expected, double scale = 0) {
  const auto e = expected.to(torch::kDouble);
  if (scale == 0) scale = e.abs().max().item<double>();
  return (got.to(torch::kDouble) - e).abs().max().item<double>() / scale;
}

// torch's float64 batch norm of every case's joined batch, by the Python script; empty with
// `skipped` when Python or torch is missing.
std::vector<json> reference_values(const std::vector<Batch>& batches, bool& skipped) {
  const support::TempDir temp;
  json input = json::array();
  for (const auto& b : batches) {
    input.push_back({{"input", values(b.input)},
                     {"upstream", values(b.upstream)},
                     {"shape", b.input.sizes().vec()},
                     {"weight", values(b.weight)},
                     {"bias", values(b.bias)},
                     {"eps", 1e-5},
                     {"momentum", 0.1}});
  }
  std::ofstream(temp.path() + "/cases.json") << input.dump();
  const std::string command = "/usr/bin/python3 '" DDPRUN_SYNC_BATCH_NORM_REFERENCE "' '" +
                              temp.path() + "/cases.json' '" + temp.path() + "/out.json' 2>'" +
                              temp.path() + "/err.txt'";
  const int status = std::system(command.c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  skipped = support::unavailable(code == 77 || code == 127,
                                 "/usr/bin/python3 with torch (the reference) is not installed");
  if (skipped) return {};
  std::ifstream err(temp.path() + "/err.txt");
  const std::string stderr_text((std::istreambuf_iterator<char>(err)), {});
  EXPECT_EQ(code, 0) << stderr_text;
  if (code != 0) return {};
  std::ifstream out(temp.path() + "/out.json");
  return json::parse(out).get<std::vector<json>>();
}

at::Tensor from_json(const json& j, const at::Tensor& like) {
  return torch::tensor(j.get<std::vector<double>>(), torch::kDouble).reshape(like.sizes());
}

// Every case over its ranks: each rank's outputs and input gradients are the reference's
// rows of it, the weight and bias gradients summed over ranks the reference's, the running
// statistics the reference's, within 1e-4 of the largest value for fp32 and float results,
// 2^-8 (one bf16 rounding and a little) for bf16 outputs and input gradients. The figures
// go to stdout.
TEST_P(SyncBatchNormTest, MatchesTorchsBatchNormOfTheJoinedBatchOnAdversarialData) {
  std::vector<Batch> batches;
  for (std::size_t i = 0; i < cases().size(); ++i)
    batches.push_back(make_batch(cases()[i], 40 + i));
  bool skipped = false;
  const auto expected = reference_values(batches, skipped);
  if (skipped) GTEST_SKIP();
  ASSERT_EQ(expected.size(), cases().size());
  for (std::size_t i = 0; i < cases().size(); ++i) {
    const Case& c = cases()[i];
    const Batch& b = batches[i];
    const json& ref = expected[i];
    const auto ref_output = from_json(ref["output"], b.input);
    const auto ref_input_grad = from_json(ref["input_grad"], b.input);
    const double low = c.type == at::kBFloat16 ? 1.0 / 256 : 1e-4;
    std::mutex mutex;
    std::vector<double> worst(6, 0.0);
    run(static_cast<int>(c.rows.size()), [&](Communicator& comm) {
      SyncBatchNorm bn(c.shape[0]);
      {
        torch::NoGradGuard no_grad;
        bn.weight.copy_(b.weight);
        bn.bias.copy_(b.bias);
      }
      bn.set_plane(&comm.data());
      const auto r = static_cast<std::size_t>(comm.rank());
      const std::int64_t first =
          std::accumulate(c.rows.begin(), c.rows.begin() + comm.rank(), std::int64_t{0});
      auto x = b.input.narrow(0, first, c.rows[r]).clone().requires_grad_(true);
      const auto y = bn.forward(x);
      (y * b.upstream.narrow(0, first, c.rows[r])).sum().backward();
      EXPECT_EQ(y.scalar_type(), c.type) << c.name;
      EXPECT_EQ(x.grad().scalar_type(), c.type) << c.name;
      auto weight_grad = bn.weight.grad().clone(), bias_grad = bn.bias.grad().clone();
      comm.control().allreduce(weight_grad);
      comm.control().allreduce(bias_grad);
      // A rank's rows against the whole batch's largest value (one row can be all small).
      const double errors[] = {
          relative_error(y, ref_output.narrow(0, first, c.rows[r]),
                         ref_output.abs().max().item<double>()),
          relative_error(x.grad(), ref_input_grad.narrow(0, first, c.rows[r]),
                         ref_input_grad.abs().max().item<double>()),
          relative_error(weight_grad, from_json(ref["weight_grad"], weight_grad)),
          relative_error(bias_grad, from_json(ref["bias_grad"], bias_grad)),
          relative_error(bn.running_mean, from_json(ref["running_mean"], bn.running_mean)),
          relative_error(bn.running_var, from_json(ref["running_var"], bn.running_var))};
      const std::lock_guard lock(mutex);
      // A NaN anywhere stays NaN (std::max would drop it) and fails the bound below.
      for (std::size_t k = 0; k < 6; ++k) {
        if (std::isnan(errors[k]) || errors[k] > worst[k]) worst[k] = errors[k];
      }
    });
    const char* names[] = {"output",        "input gradient", "weight gradient",
                           "bias gradient", "running mean",   "running variance"};
    std::cout << c.name << ": largest error relative to the largest value:";
    for (std::size_t k = 0; k < 6; ++k) {
      std::cout << " " << names[k] << " " << worst[k] << (k < 5 ? "," : "\n");
      EXPECT_LE(worst[k], k < 2 ? low : 1e-4) << c.name << ", " << names[k];
    }
  }
}

}  // namespace
}  // namespace ddprun::worker
