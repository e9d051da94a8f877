// The trainer's groups: what holds on to one, and live recovery from the survivors' memory
// (runtime.recovery "peer", docs/fault-tolerance.md).
#include <torch/torch.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <utility>

#include "diagnostics.h"
#include "objective.h"
#include "trainer_parts.h"

namespace ddprun::worker::training {

void Trainer::make_checkpointer() {
  checkpoints_ = std::make_unique<Checkpointer>(config_, comm_->control(), *model_, *optimizer_,
                                                device_, out_);
  if (scaler_) checkpoints_->set_loss_scaler(&*scaler_);
}

void Trainer::join_group_parts() {
  if (!checkpoints_) make_checkpointer();
  if (config_.model.batch_norm == "sync") model_->set_batch_norm_plane(&comm_->data());
  ddp_ = std::make_unique<DistributedDataParallel>(model_, *comm_, ddp_options_);
  if (ddp_options_.shard_gradients) {
    sharded_ =
        std::make_unique<ShardedOptimizer>(*ddp_, *comm_, [this](std::vector<at::Tensor> shares) {
          return make_optimizer(config_.optimizer, std::move(shares));
        });
    sharded_->load_state_from(*optimizer_);
    optimizer_->state().clear();
  }
  ddp_->set_gradient_sync(!config_.diagnostics.no_gradient_sync);
  stragglers_.emplace(comm_->control(), rank_, world_, env_.host.empty() ? "?" : env_.host, out_,
                      config_.progress.stragglers);
  stop_check_.emplace(comm_->control(), config_.preemption.check_every_steps,
                      !config_.preemption.signals.empty());
}

void Trainer::leave_group_parts() {
  stop_check_.reset();
  stragglers_.reset();
  sharded_.reset();
  ddp_.reset();
  checkpoints_.reset();
  if (config_.model.batch_norm == "sync") model_->set_batch_norm_plane(nullptr);
}

void Trainer::recover(const CollectiveError& failure) {
  const auto since = Clock::now();
  std::cerr << "ddp-train: rank " << rank_ << " of group " << place_.group
            << " lost a peer: " << failure.what() << std::endl;
  if (sharded_) held_shares_ = sharded_->held();
  leave_group_parts();
  const auto timeout = to_milliseconds(config_.runtime.timeout_s);
  const NextGroup next = next_group(env_, place_, timeout);
  place_ = next.place;
  comm_ = Communicator::rejoin(
      std::move(comm_), env_, to_comm_options(config_.runtime, place_.group), next.store_host_lost);
  if (rank_ == config_.diagnostics.kill_rank_in_recovery && env_.restart_count == 0 &&
      place_.group == 1) {
    std::raise(SIGKILL);  // test hook: a second failure, during the recovery
  }
  enter_new_group(/*holds_state=*/true, since);
  epoch_goes_on_ = true;
}

void Trainer::enter_new_group(bool holds_state, Clock::time_point since) {
  share_state(holds_state, since);
  join_group_parts();
  if (sharded_) sharded_->restore(comm_->control(), held_shares_, lost_ranks_);
  held_shares_ = {};
  save_checkpoint_again();
}

void Trainer::save_checkpoint_again() {
  const auto interval = config_.checkpoint.interval_steps;
  if (interval > 0 && position_.step > 0 && position_.step % interval == 0) save_checkpoint();
}

void Trainer::share_state(bool holds_state, Clock::time_point since) {
  Plane& control = comm_->control();
  const StateSource source = find_state_source(control, holds_state ? position_.step : -1);
  if (source.rank < 0) {
    throw CollectiveError("group " + std::to_string(place_.group) +
                              ": no rank holds the training state (every rank is a replacement)",
                          "ddprun restarts the job whole, from its last checkpoint");
  }
  lost_ranks_ = source.replacements;
  if (ddp_options_.keep_next_share && !source.holders_agree) {
    // Each share comes from its own holder: they must all stand at the same step.
    throw CollectiveError("group " + std::to_string(place_.group) +
                              ": the survivors' optimizer shares (ZeRO-1) stand at different "
                              "steps (a step ended on some ranks only)",
                          "ddprun restarts the job whole, from its last checkpoint");
  }
  std::string bytes;
  if (rank_ == source.rank) {
    CheckpointMeta meta{position_,
                        config_.train.seed,
                        world_,
                        config_.train.batch_size_per_rank,
                        rng_state(torch::kCPU).unsqueeze(0),
                        {},
                        scaler_ ? scaler_->state() : at::Tensor()};
    bytes = checkpoint_bytes(*model_, *optimizer_, meta);
  }
  broadcast_bytes(control, source.rank, bytes);
  if (rank_ != source.rank) {
    const CheckpointMeta meta = load_checkpoint_bytes(
        bytes, "rank " + std::to_string(source.rank) + "'s state", *model_, *optimizer_);
    position_ = meta.position;
    if (meta.rng_cpu.defined()) set_rng_state(torch::kCPU, meta.rng_cpu[0]);
    if (scaler_ && meta.loss_scale.defined()) scaler_->load_state(meta.loss_scale);
  }
  if (rank_ == source.rank) {
    // Every survivor redoes the step it was in: nothing done is lost, since the source is
    // the survivor furthest on.
    // Formatted apart: a precision set on out_ would stay for every line after this one.
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.2f",
                  std::chrono::duration<double>(Clock::now() - since).count());
    out_ << "ddp-train: recovered rank" << (source.replacements.size() == 1 ? " " : "s ")
         << rank_list(source.replacements) << " at step " << position_.step + 1 << " from rank "
         << source.rank << " in " << seconds << " s (0 steps lost, " << bytes.size()
         << " bytes of state)" << std::endl;
  }
}

// Test hooks (diagnostics.kill_*): in a rank's first process only, so that the replacement
// and the ranks of a full restart run on.
void Trainer::arm_kill_hooks() {
  const auto& d = config_.diagnostics;
  if (d.kill_rank != rank_ || place_.group != 0 || env_.restart_count != 0) return;
  if (d.kill_in == "backward") {
    // The first layer's gradient is among the last: the later layers' buckets went out.
    auto first = model_->parameters().front();
    first.register_hook([this, step = d.kill_at_step, node = d.kill_node](const at::Tensor& grad) {
      if (position_.step + 1 == step) lose_rank(node);
      return grad;
    });
  }
}

}  // namespace ddprun::worker::training
