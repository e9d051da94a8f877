#pragma once
// Training checkpoints (docs/checkpoints.md): written atomically by rank 0, read by all.

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <optional>
#include <string>

namespace ddprun::worker {

// Where training stands: `step` optimizer steps done in total; the next batch is batch
// `batch_in_epoch` of epoch `epoch` (sampler position).
struct TrainingPosition {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t batch_in_epoch = 0;
};

struct CheckpointMeta {
  TrainingPosition position;
  std::uint64_t seed = 0;
  int world_size = 1;
};

inline constexpr const char* kLatestName = "latest";

// Writes "ckpt-<step>.pt" into `dir` (created 0700 if missing; file 0600) atomically, then
// points "latest" at it the same way, then removes all but the newest `keep_last`
// checkpoints. Holds the module's parameters and buffers, the optimizer state and `meta`.
// Call on one rank only. Returns the file name. Throws CheckpointError or std::system_error.
std::string save_checkpoint(const std::string& dir, const torch::nn::Module& model,
                            const torch::optim::Optimizer& optimizer, const CheckpointMeta& meta,
                            int keep_last);

// The path "latest" in `dir` points to, or nullopt when there is none yet. Throws
// CheckpointError when "latest" exists but is malformed or names a missing file.
std::optional<std::string> find_latest_checkpoint(const std::string& dir);

// Loads tensors only (parameters, buffers, optimizer state) into `model` and `optimizer`
// and returns the metadata. Throws CheckpointError naming the file when it is unreadable or
// does not match the model (missing tensor, wrong shape).
CheckpointMeta load_checkpoint(const std::string& path, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer);

}  // namespace ddprun::worker
