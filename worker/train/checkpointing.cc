#include "checkpointing.h"

#include <torch/torch.h>

#include <functional>
#include <mutex>
#include <ostream>

#include "ddprun/worker/communicator.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/grad_scaler.h"
#include "diagnostics.h"

namespace ddprun::worker {
namespace {

// Every rank's `mine` (uint8, 1-D, same length everywhere) as rows of a world x N tensor
// on every rank: an all-reduce of a zero matrix that holds this rank's row.
at::Tensor gather_rows(Plane& control, const at::Tensor& mine) {
  auto all = torch::zeros({control.world_size(), mine.numel()}, torch::kLong);
  all[control.rank()].copy_(mine.to(torch::kLong));
  control.allreduce(all, ReduceOp::kSum);
  return all.to(torch::kByte);
}

}  // namespace

at::Tensor rng_state(const torch::Device& device) {
  auto gen = device.is_cpu() ? at::detail::getDefaultCPUGenerator()
                             : at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

// `state` is a row of the checkpoint's world x N matrix. LibTorch 2.11's CPU generator reads
// it through data_ptr_impl<State>(), which adds the storage offset in units of the whole
// state: a row other than the first pointed far past the matrix and rank 1 crashed on
// every resume. A clone has storage of its own at offset 0.
void set_rng_state(const torch::Device& device, const at::Tensor& state) {
  auto gen = device.is_cpu() ? at::detail::getDefaultCPUGenerator()
                             : at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state.clone());
}

Checkpointer::Checkpointer(const Config& config, Plane& control, torch::nn::Module& model,
                           torch::optim::Optimizer& optimizer, c10::Device device,
                           std::ostream& out)
    : config_(config),
      control_(control),
      model_(model),
      optimizer_(optimizer),
      device_(device),
      out_(out) {}

std::optional<TrainingPosition> Checkpointer::resume() {
  if (config_.checkpoint.dir.empty()) return std::nullopt;
  const int rank = control_.rank(), world = control_.world_size();
  // Every rank reads the checkpoint itself; a failure on any rank is agreed on below, so
  // that no rank goes on into a collective the others never join.
  std::optional<CheckpointRecord> latest;
  CheckpointMeta meta;
  std::string error, hint;
  try {
    latest = find_latest_checkpoint(config_.checkpoint.dir);
    if (latest) {
      meta = load_checkpoint(*latest, model_, optimizer_);
      const std::string path = latest->path();
      // Another world size resumes where this one stopped if the global batch is the same:
      // the sampler's permutation depends on the seed and the epoch only, and global step k
      // takes its positions k*G .. (k+1)*G-1 whatever the split of G into ranks.
      const std::int64_t written = meta.world_size * meta.batch_size_per_rank;
      const std::int64_t ours = world * config_.train.batch_size_per_rank;
      if (written != ours) {
        throw CheckpointError(
            path + " was written by a job of " + std::to_string(meta.world_size) + " ranks x " +
                std::to_string(meta.batch_size_per_rank) + " samples (a global batch of " +
                std::to_string(written) + "); this one has " + std::to_string(world) + " x " +
                std::to_string(config_.train.batch_size_per_rank) + " (" + std::to_string(ours) +
                ")",
            "the data order follows the global batch: keep it (ranks x batch_size_per_rank), or "
            "use a new checkpoint dir");
      }
      if (meta.seed != config_.train.seed) {
        throw CheckpointError(path + " was written with seed " + std::to_string(meta.seed) +
                                  "; the config says " + std::to_string(config_.train.seed),
                              "the data order depends on it: use the same seed, or a new "
                              "checkpoint dir");
      }
      // A checkpoint of a float run resumed in float16 starts the scale afresh.
      if (scaler_ != nullptr && meta.loss_scale.defined()) {
        scaler_->load_state(meta.loss_scale);
      }
    }
  } catch (const ddprun::Error& e) {
    error = e.what();
    hint = e.hint();
  } catch (const std::exception& e) {
    error = config_.checkpoint.dir + ": " + e.what();
  }
  auto failed = torch::zeros({world}, torch::kLong);
  failed[rank] = error.empty() ? 0 : 1;
  control_.allreduce(failed, ReduceOp::kSum);
  const std::int64_t step = latest && error.empty() ? latest->step : -1;
  auto steps = torch::tensor({step, -step}, torch::kLong);
  control_.allreduce(steps, ReduceOp::kMax);
  if (!error.empty()) throw CheckpointError(error, hint);
  std::string failed_ranks;
  for (int r = 0; r < world; ++r) {
    if (failed[r].item<std::int64_t>() != 0) {
      failed_ranks += (failed_ranks.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  if (!failed_ranks.empty()) {
    throw CheckpointError("cannot resume: loading the checkpoint failed on rank(s) " +
                              failed_ranks + " (their errors say why)",
                          "fix or remove " + config_.checkpoint.dir + " and start again");
  }
  const std::int64_t newest = steps[0].item<std::int64_t>(),
                     oldest = -steps[1].item<std::int64_t>();
  if (newest != oldest) {
    throw CheckpointError("cannot resume: the ranks see different checkpoints in " +
                              config_.checkpoint.dir + " (steps " + std::to_string(oldest) +
                              " to " + std::to_string(newest) + ", -1: none)",
                          "checkpoint.dir must be one folder shared by every node");
  }
  if (!latest) return std::nullopt;
  if (meta.rng_cpu.defined() && meta.rng_cpu.dim() == 2 && meta.rng_cpu.size(0) == world) {
    set_rng_state(torch::kCPU, meta.rng_cpu[rank]);
  }
  if (!device_.is_cpu() && meta.rng_device.defined() && meta.rng_device.dim() == 2 &&
      meta.rng_device.size(0) == world) {
    set_rng_state(device_, meta.rng_device[rank]);
  }
  const TrainingPosition position = meta.position;
  last_step_ = position.step;
  if (rank == 0) {
    out_ << "ddp-train: resuming from " << latest->path() << " at step " << position.step
         << " (epoch " << position.epoch + 1 << ", batch " << position.batch_in_epoch << ")"
         << std::endl;
  }
  return position;
}

std::string Checkpointer::save(const TrainingPosition& position) {
  // Gathering the generator states is also the barrier: every rank has finished the step
  // before rank 0 reads the (identical) state.
  CheckpointMeta meta{position,
                      config_.train.seed,
                      control_.world_size(),
                      config_.train.batch_size_per_rank,
                      {},
                      {},
                      scaler_ != nullptr ? scaler_->state() : at::Tensor()};
  meta.rng_cpu = gather_rows(control_, rng_state(torch::kCPU));
  if (!device_.is_cpu()) meta.rng_device = gather_rows(control_, rng_state(device_));
  std::string name, error;
  if (control_.rank() == 0) {
    std::function<void(const std::string&)> hold;
    if (config_.diagnostics.hold_checkpoint_write_at_step > 0 &&
        position.step == config_.diagnostics.hold_checkpoint_write_at_step) {  // 0: off
      hold = [this](const std::string& tmp) {
        hold_checkpoint_write(out_, config_.checkpoint.dir, tmp);
      };
    }
    try {
      name = save_checkpoint(config_.checkpoint.dir, model_, optimizer_, meta,
                             config_.checkpoint.keep_last, hold);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Once any rank goes on, the checkpoint is on disk, or every rank fails together.
  auto failed = torch::tensor({error.empty() ? std::int64_t{0} : std::int64_t{1}}, torch::kLong);
  control_.allreduce(failed, ReduceOp::kMax);
  if (failed.item<std::int64_t>() != 0) {
    throw CheckpointError(
        error.empty() ? "rank 0 could not write the checkpoint of step " +
                            std::to_string(position.step) + " (its error says why)"
                      : error,
        "check " + config_.checkpoint.dir + ": space, permissions, no symbolic links");
  }
  last_step_ = position.step;
  return name;
}

}  // namespace ddprun::worker
