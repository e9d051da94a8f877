#pragma once
// Datasets held as tensors in memory; batches are gathered with index_select.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "config.h"
#include "idx.h"

namespace ddprun::worker {

struct Dataset {
  at::Tensor inputs;   // float32, N x ...
  at::Tensor targets;  // int64 class labels, N
  std::int64_t size() const { return targets.defined() ? targets.size(0) : 0; }
};

struct DataSplits {
  Dataset train;
  Dataset test;
  std::int64_t num_classes = 0;
};

// Fashion-MNIST's training-set pixel mean and standard deviation (after scaling to [0, 1]).
constexpr double kFashionMean = 0.2860;
constexpr double kFashionStd = 0.3530;

// Images as float32 N x 1 x H x W, scaled to [0, 1] then normalized with Fashion-MNIST's
// mean and standard deviation. Throws DataError unless `images` is N x H x W.
at::Tensor images_to_tensor(const IdxArray& images);

// Reads train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
// t10k-labels-idx1-ubyte from `dir`, each plain or with ".gz". Throws DataError naming
// the file when one is missing or malformed, or images and labels disagree in count.
DataSplits load_fashion_mnist(const std::string& dir);

// Deterministic from `seed`: inputs ~ N(0, 1) with 10 features, labels in 0..4 from a
// fixed random linear teacher.
DataSplits make_synthetic(std::int64_t train_size, std::int64_t test_size, std::uint64_t seed);

// The dataset the config names (fashion_mnist or synthetic), with train_limit applied.
DataSplits load_data(const DataConfig& config, std::uint64_t seed);

// Rows `indices` of `data` (index_select on both tensors).
Dataset gather(const Dataset& data, const at::Tensor& indices);

}  // namespace ddprun::worker
