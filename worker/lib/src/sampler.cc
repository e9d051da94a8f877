#include "ddprun/worker/sampler.h"

#include <torch/torch.h>

#include <stdexcept>
#include <string>

namespace ddprun::worker {

DistributedSampler::DistributedSampler(SamplerOptions options) : options_(options) {
  const auto n = options_.dataset_size;
  const auto r = static_cast<std::int64_t>(options_.num_replicas);
  if (n <= 0) throw std::invalid_argument("DistributedSampler: the dataset is empty");
  if (r < 1) throw std::invalid_argument("DistributedSampler: num_replicas must be >= 1");
  if (options_.rank < 0 || options_.rank >= options_.num_replicas) {
    throw std::invalid_argument("DistributedSampler: rank " + std::to_string(options_.rank) +
                                " is not in [0, " + std::to_string(r) + ")");
  }
  // Python: ceil((n - r) / r) with drop_last and a remainder, else ceil(n / r).
  num_samples_ = (options_.drop_last && n % r != 0) ? (n - r + r - 1) / r : (n + r - 1) / r;
  if (num_samples_ <= 0) {
    throw std::invalid_argument("DistributedSampler: " + std::to_string(n) +
                                " samples are fewer than " + std::to_string(r) +
                                " ranks with drop_last");
  }
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  const auto n = options_.dataset_size;
  std::vector<std::int64_t> all;
  all.reserve(static_cast<std::size_t>(std::max(n, total_size())));
  if (options_.shuffle) {
    auto gen = at::detail::createCPUGenerator(options_.seed + static_cast<std::uint64_t>(epoch_));
    const auto perm = torch::randperm(n, gen, torch::kLong);
    const auto* p = perm.data_ptr<std::int64_t>();
    all.assign(p, p + n);
  } else {
    for (std::int64_t i = 0; i < n; ++i) all.push_back(i);
  }
  const auto total = total_size();
  if (total > n) {
    // Pad by wrapping around, as often as needed (Python repeats the list).
    for (std::int64_t i = 0; static_cast<std::int64_t>(all.size()) < total; ++i) {
      all.push_back(all[static_cast<std::size_t>(i % n)]);
    }
  } else {
    all.resize(static_cast<std::size_t>(total));
  }
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<std::size_t>(num_samples_));
  for (std::int64_t i = options_.rank; i < total; i += options_.num_replicas) {
    mine.push_back(all[static_cast<std::size_t>(i)]);
  }
  return mine;
}

}  // namespace ddprun::worker
