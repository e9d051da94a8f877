#include "ddprun/worker/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace ddprun::worker {
namespace {

std::vector<std::vector<std::int64_t>> shards(std::int64_t n, int world, std::uint64_t seed,
                                              std::int64_t epoch, bool drop_last = false,
                                              bool shuffle = true) {
  std::vector<std::vector<std::int64_t>> out;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s({n, world, r, shuffle, seed, drop_last});
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

using Shards = std::vector<std::vector<std::int64_t>>;

TEST(SamplerTest, MatchesPythonDistributedSampler) {
  // torch.utils.data.distributed.DistributedSampler(range(10), num_replicas=3, seed=5),
  // torch 1.13.1.
  EXPECT_EQ(shards(10, 3, 5, 0), (Shards{{1, 6, 0, 7}, {4, 3, 2, 1}, {9, 5, 8, 4}}));
  EXPECT_EQ(shards(10, 3, 5, 1), (Shards{{0, 1, 9, 6}, {7, 8, 2, 0}, {5, 3, 4, 7}}));
  EXPECT_EQ(shards(10, 3, 5, 0, true), (Shards{{1, 6, 0}, {4, 3, 2}, {9, 5, 8}}));
  EXPECT_EQ(shards(10, 3, 5, 1, true), (Shards{{0, 1, 9}, {7, 8, 2}, {5, 3, 4}}));
}

TEST(SamplerTest, ShardsAreDisjointEqualAndCoverTheDataset) {
  const auto s = shards(1000, 4, 42, 3);
  std::set<std::int64_t> seen;
  for (const auto& shard : s) {
    EXPECT_EQ(shard.size(), 250u);
    seen.insert(shard.begin(), shard.end());
  }
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 999);
}

TEST(SamplerTest, PadsByWrappingWhenNotDivisible) {
  const auto s = shards(10, 4, 1, 0);
  std::multiset<std::int64_t> all;
  for (const auto& shard : s) {
    EXPECT_EQ(shard.size(), 3u);
    all.insert(shard.begin(), shard.end());
  }
  EXPECT_EQ(all.size(), 12u);
  EXPECT_EQ(std::set<std::int64_t>(all.begin(), all.end()).size(), 10u);
}

TEST(SamplerTest, PadsMoreThanOnceForTinyDatasets) {
  const auto s = shards(2, 5, 1, 0, false, false);
  EXPECT_EQ(s, (Shards{{0}, {1}, {0}, {1}, {0}}));
}

TEST(SamplerTest, DropLastCutsTheTail) {
  for (const auto& shard : shards(10, 4, 1, 0, true)) EXPECT_EQ(shard.size(), 2u);
}

TEST(SamplerTest, SetEpochReshufflesAndSeedIsDeterministic) {
  EXPECT_NE(shards(100, 2, 7, 0), shards(100, 2, 7, 1));
  EXPECT_EQ(shards(100, 2, 7, 1), shards(100, 2, 7, 1));
  EXPECT_NE(shards(100, 2, 7, 0), shards(100, 2, 8, 0));

  DistributedSampler s({100, 1, 0, true, 7, false});
  const auto first = s.indices();
  s.set_epoch(1);
  EXPECT_NE(s.indices(), first);
  s.set_epoch(0);
  EXPECT_EQ(s.indices(), first);
}

TEST(SamplerTest, WithoutShuffleRankRGetsEveryWorldthIndex) {
  EXPECT_EQ(shards(6, 2, 0, 0, false, false), (Shards{{0, 2, 4}, {1, 3, 5}}));
}

TEST(SamplerTest, RejectsBadOptions) {
  EXPECT_THROW(DistributedSampler({0, 1, 0, true, 0, false}), std::invalid_argument);
  EXPECT_THROW(DistributedSampler({10, 2, 2, true, 0, false}), std::invalid_argument);
  EXPECT_THROW(DistributedSampler({3, 4, 0, true, 0, true}), std::invalid_argument);
}

}  // namespace
}  // namespace ddprun::worker
