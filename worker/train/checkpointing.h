#pragma once
// ddp-train's checkpoints across ranks (docs/checkpoints.md): resuming only from a
// checkpoint every rank loaded and agrees on, and saving so that either every rank goes on
// with the checkpoint on disk or every rank fails together.

#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

#include "config.h"
#include "ddprun/worker/checkpoint.h"

namespace ddprun::worker {

class GradScaler;
class Plane;

// The state of `device`'s default random generator (uint8, 1-D), and setting it.
at::Tensor rng_state(const torch::Device& device);
void set_rng_state(const torch::Device& device, const at::Tensor& state);

// One per training run, over config.checkpoint.dir. Keeps references to all its arguments;
// `device` is where the model trains (its generator is saved too unless it is the CPU).
// Rank 0 writes its messages to `out`. Not thread-safe.
class Checkpointer {
 public:
  Checkpointer(const Config& config, Plane& control, torch::nn::Module& model,
               torch::optim::Optimizer& optimizer, c10::Device device, std::ostream& out);

  // Collective. With checkpoint.dir set and a checkpoint in it, every rank loads it (model,
  // optimizer, then its own generator states), rank 0 prints "ddp-train: resuming from
  // ...", and the checkpoint's position comes back; nullopt (nothing changed) without a
  // dir or a checkpoint. Throws CheckpointError on every rank when any rank failed to load,
  // the ranks see different checkpoints, or it was written by another world size, seed or
  // batch size per rank.
  std::optional<TrainingPosition> resume();

  // Collective; needs checkpoint.dir. Gathers every rank's generator states (also the
  // barrier: every rank has finished the step), then rank 0 saves model, optimizer and
  // `position`, keeping checkpoint.keep_last. Returns the file name on rank 0, "" elsewhere.
  // Throws CheckpointError on every rank when rank 0 could not save it.
  std::string save(const TrainingPosition& position);

  // The step of the last checkpoint saved or resumed from; -1: none.
  std::int64_t last_step() const { return last_step_; }
  // float16: the loss scaler saved with the checkpoints and resumed from them (null: none).
  void set_loss_scaler(GradScaler* scaler) { scaler_ = scaler; }

 private:
  const Config& config_;
  Plane& control_;
  torch::nn::Module& model_;
  torch::optim::Optimizer& optimizer_;
  c10::Device device_;
  std::ostream& out_;
  std::int64_t last_step_ = -1;
  GradScaler* scaler_ = nullptr;
};

}  // namespace ddprun::worker
