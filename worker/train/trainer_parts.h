#pragma once
// The training loop's class, shared by its units: trainer.cc (start, epochs, steps, end)
// and trainer_recovery.cc (groups and live recovery). Private to ddp-train.

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <ostream>
#include <vector>

#include "checkpointing.h"
#include "config.h"
#include "data.h"
#include "ddprun/worker/autocast.h"
#include "ddprun/worker/communicator.h"
#include "ddprun/worker/ddp.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/grad_scaler.h"
#include "ddprun/worker/sampler.h"
#include "ddprun/worker/stop_signals.h"
#include "ddprun/worker/zero.h"
#include "models.h"
#include "progress.h"
#include "recovery.h"
#include "stop_check.h"
#include "straggler_watch.h"
#include "trainer.h"

namespace ddprun::worker::training {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds to_milliseconds(double seconds);
// The communicator's options for group `group` of the round (recovery.h).
CommOptions to_comm_options(const RuntimeConfig& runtime, int group);

// This rank's training loss and samples in the epoch so far.
struct EpochStats {
  double loss_sum = 0;
  double samples = 0;
};

// The loop's sizes, fixed for the whole run.
struct LoopSizes {
  std::int64_t batch = 0;       // rows per rank per micro-batch
  std::int64_t per_rank = 0;    // rows per rank per epoch
  std::int64_t batches = 0;     // micro-batches per rank per epoch
  std::int64_t accumulate = 1;  // micro-batches per optimizer step
  std::int64_t steps_per_epoch = 0;
  std::int64_t max_steps = 0;  // 0: no limit
  std::int64_t total_steps = 0;
};

// One training run: set_up() (communicator, data, model, resume, DDP, the start line), then
// run_epoch() per epoch, each a train_step() per optimizer step, then finish() (the last
// checkpoint, the preemption exit, the final lines).
class Trainer {
 public:
  Trainer(const Config& config, const WorkerEnv& env, std::ostream& out)
      : config_(config), env_(env), out_(out) {}
  // Left by an error, the notices stay recorded until the process exits: the launcher's
  // SIGTERM (it stops the others once one rank failed) must not kill this rank between
  // here and its error line and error file.
  ~Trainer() {
    if (stop_signals_ && std::uncaught_exceptions() > 0) stop_signals_->keep_until_exit();
  }

  TrainingResult run();
  // The data, loaded ahead (a warm spare): set_up loads none.
  void preload(DataSplits data) {
    data_ = std::move(data);
    preloaded_ = true;
  }

 private:
  void set_up();
  // What holds on to the group (its communicator's planes): made at the start and again
  // after every recovery, on every rank of the group at once (some make collectives).
  // The checkpointer over this rank's model, optimizer and loss scaler (resumed from first
  // in group 0, made on joining a group elsewhere).
  void make_checkpointer();
  void join_group_parts();
  void leave_group_parts();
  // runtime.recovery "peer": after a collective failed because a rank was lost, joins the
  // next group with its replacement and brings every rank to the newest state a survivor
  // holds. Throws (the job then fails, and ddprun restarts it whole) when that cannot be.
  void recover(const CollectiveError& failure);
  // What every rank of a new group does once it is in, survivors (from recover()) and
  // replacements (from set_up()) alike, so that their collectives match one for one: the
  // state, the group's parts, the checkpoint again.
  void enter_new_group(bool holds_state, Clock::time_point since);
  // The group's newest state, from the survivor that holds it to every other rank.
  void share_state(bool holds_state, Clock::time_point since);
  void arm_kill_hooks();
  // After a recovery, on every rank of the new group: the loss may have come in this step's
  // checkpoint, so at a checkpoint's step it is written again (the same bytes when it was
  // already on disk) and none is missing.
  void save_checkpoint_again();
  void print_start_line(const std::vector<torch::Device>& stage_devices) const;
  void run_epoch(std::int64_t epoch);
  // One optimizer step from micro-batch `b` of the epoch; returns the next micro-batch.
  std::int64_t train_step(std::int64_t epoch, const at::Tensor& indices, std::int64_t b);
  // float16: divides the step's gradients by the loss scale; false when one overflowed.
  bool unscale_gradients();
  void save_checkpoint();
  TrainingResult finish();
  void report_epoch(std::int64_t epoch, const EpochStats& local, double seconds,
                    const std::vector<RankTimes>& times);

  const Config& config_;
  const WorkerEnv& env_;
  std::ostream& out_;
  GroupPlace place_;  // which of the round's groups this rank is in
  bool peer_recovery_ = false;
  torch::Device device_{torch::kCPU};
  Precision precision_ = Precision::kFloat;  // runtime.autocast
  std::optional<GradScaler> scaler_;         // float16 only
  std::unique_ptr<Communicator> comm_;
  int rank_ = 0;
  int world_ = 1;
  DataSplits data_;
  bool preloaded_ = false;
  std::shared_ptr<Model> model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  TrainingPosition position_;
  // Installed first in set_up(): a notice during start-up stops the job after its first
  // step (a replacement's, once it holds the state). Removed with the pieces below, before the
  // communicator and the model go.
  std::optional<StopSignals> stop_signals_;
  // Each of these holds on to the communicator, the model or the optimizer above.
  std::unique_ptr<Checkpointer> checkpoints_;
  DdpOptions ddp_options_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  // ZeRO-1: the optimizer steps this rank's shares; optimizer_ (over the whole model) holds
  // state only while a checkpoint is saved or resumed, consolidated.
  std::unique_ptr<ShardedOptimizer> sharded_;
  // ZeRO-1 with "peer": what this rank held of the shares when its group failed, and the
  // ranks of the next group that hold nothing; both for the next group's restore.
  HeldShares held_shares_;
  std::vector<int> lost_ranks_;
  std::optional<DistributedSampler> sampler_;
  LoopSizes sizes_;
  std::optional<ProgressReporter> progress_;
  std::optional<ProgressFile> progress_file_;
  std::optional<StragglerWatch> stragglers_;
  std::optional<StopCheck> stop_check_;
  bool step_metrics_ = false;  // metrics.every_steps: rank 0's loss and rate over N steps
  StepWindow window_;          // its seconds count the steps only, not evaluations
  bool done_ = false;
  bool preempted_ = false;
  // This rank's part of the epoch so far; a survivor keeps it through a recovery.
  EpochStats epoch_stats_;
  Clock::time_point epoch_start_;
  bool epoch_goes_on_ = false;  // set by a recovery: the next run_epoch() continues the epoch
};

}  // namespace ddprun::worker::training
