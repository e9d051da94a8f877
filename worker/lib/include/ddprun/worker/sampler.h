#pragma once
// Python's torch.utils.data.DistributedSampler, in C++. No LibTorch in this header.

#include <cstdint>
#include <vector>

namespace ddprun::worker {

struct SamplerOptions {
  std::int64_t dataset_size = 0;
  int num_replicas = 1;
  int rank = 0;
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;
};

// Every rank gets a disjoint shard of num_samples() indices. With shuffle, the order is
// randperm(dataset_size) from a CPU generator seeded with seed + epoch (the same as
// Python's); without drop_last the list is padded by wrapping to a multiple of
// num_replicas, with drop_last its tail is cut. Rank r gets indices[r::num_replicas].
// For the same options and epoch the result equals Python's DistributedSampler.
class DistributedSampler {
 public:
  // Throws std::invalid_argument for an empty dataset, num_replicas < 1 or a bad rank.
  explicit DistributedSampler(SamplerOptions options);

  // Takes effect at the next indices() call.
  void set_epoch(std::int64_t epoch) { epoch_ = epoch; }
  std::int64_t epoch() const { return epoch_; }

  std::int64_t num_samples() const { return num_samples_; }  // per rank
  std::int64_t total_size() const { return num_samples_ * options_.num_replicas; }

  // This rank's indices for the current epoch.
  std::vector<std::int64_t> indices() const;

 private:
  SamplerOptions options_;
  std::int64_t epoch_ = 0;
  std::int64_t num_samples_ = 0;
};

}  // namespace ddprun::worker
