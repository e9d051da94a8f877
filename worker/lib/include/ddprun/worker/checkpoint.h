#pragma once
// Training checkpoints (docs/checkpoints.md): written atomically by rank 0, read by all.

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
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
  std::int64_t batch_size_per_rank = 0;
  // Every rank's random generator states, one row per rank (uint8, world_size x N): the
  // CPU generator, and the accelerator's when a rank trains on one. Undefined: none saved.
  at::Tensor rng_cpu;
  at::Tensor rng_device;
  // float16's loss scaler (GradScaler::state()); undefined: none.
  at::Tensor loss_scale;
};

inline constexpr const char* kLatestName = "latest";

// What "latest" says: the completion record of one checkpoint.
struct CheckpointRecord {
  std::string dir;
  std::string name;  // "ckpt-<step, 8 digits>.pt"
  std::int64_t step = 0;
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
  std::string path() const { return dir + "/" + name; }
};

// Writes "ckpt-<step>.pt" into `dir` (created 0700 if missing; file 0600) atomically, then
// records it in "latest" (name, size, CRC-32) the same way, then removes all but the newest
// `keep_last` checkpoints and temporary files that crashed writers left. Calls
// `before_commit(temporary name)` once the checkpoint is durable under its temporary name
// (a test hook). Holds the module's parameters and buffers, the optimizer state and `meta`.
// Call on one rank only. Returns the file name. Throws CheckpointError (also for a `dir`
// or file that is a symbolic link) or std::system_error.
std::string save_checkpoint(const std::string& dir, const torch::nn::Module& model,
                            const torch::optim::Optimizer& optimizer, const CheckpointMeta& meta,
                            int keep_last,
                            const std::function<void(const std::string&)>& before_commit = {});

// What save_checkpoint writes, as bytes in memory (the state a survivor sends a replacement).
std::string checkpoint_bytes(const torch::nn::Module& model,
                             const torch::optim::Optimizer& optimizer, const CheckpointMeta& meta);

// Loads checkpoint_bytes() as load_checkpoint does a file; `path` names them in errors.
CheckpointMeta load_checkpoint_bytes(const std::string& bytes, const std::string& path,
                                     torch::nn::Module& model, torch::optim::Optimizer& optimizer);

// The checkpoint "latest" in `dir` records, or nullopt when there is none (no folder or no
// "latest": a checkpoint without its record is never used). Throws CheckpointError when
// "latest" is malformed, names a missing file, or either is a symbolic link.
std::optional<CheckpointRecord> find_latest_checkpoint(const std::string& dir);

// Checks the file against its record (size, CRC-32), then loads tensors only (parameters,
// buffers, optimizer state) into `model` and `optimizer` and returns the metadata. Throws
// CheckpointError naming the file when it is incomplete, damaged, unreadable, a symbolic
// link, or does not match the model (missing tensor, wrong shape).
CheckpointMeta load_checkpoint(const CheckpointRecord& record, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer);

}  // namespace ddprun::worker
