#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <iostream>
#include <optional>
#include <ostream>
#include <thread>
#include <utility>

#include "ddprun/common/signal_name.h"
#include "diagnostics.h"
#include "objective.h"
#include "schedule.h"
#include "threads.h"
#include "trainer_parts.h"

namespace ddprun::worker {
namespace training {

std::chrono::milliseconds to_milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(seconds * 1000)));
}

CommOptions to_comm_options(const RuntimeConfig& runtime, int group) {
  CommOptions options;
  options.group = group;
  options.backend = runtime.backend;
  options.timeout = to_milliseconds(runtime.timeout_s);
  // Recovering from peers, the membership file names the lost rank: no roll call in the
  // store, whose host may be the rank that was lost.
  options.unresponsive_wait = runtime.recovery == "peer"
                                  ? std::chrono::milliseconds(0)
                                  : to_milliseconds(runtime.unresponsive_wait_s);
  options.shared_memory = runtime.shared_memory;
  options.init_method = runtime.init_method;
  return options;
}

DdpOptions to_ddp_options(const RuntimeConfig& runtime) {
  DdpOptions options;
  options.bucket_cap_bytes = static_cast<std::size_t>(runtime.bucket_cap_mb * 1024 * 1024);
  options.first_bucket_cap_bytes =
      std::min(options.first_bucket_cap_bytes, options.bucket_cap_bytes);
  options.overlap = runtime.overlap;
  options.find_unused_parameters = runtime.find_unused_parameters;
  options.broadcast_buffers = runtime.broadcast_buffers;
  if (runtime.comm_hook == "bf16") options.comm_hook = bf16_compress_hook();
  if (runtime.comm_hook == "fp16") options.comm_hook = fp16_compress_hook();
  return options;
}

TrainingResult Trainer::run() {
  set_up();
  for (;;) {
    try {
      for (std::int64_t epoch = position_.epoch; epoch < config_.train.epochs && !done_; ++epoch) {
        run_epoch(epoch);
      }
      break;
    } catch (const CollectiveError& failure) {
      if (!peer_recovery_) throw;
      recover(failure);
    }
  }
  return finish();
}

void Trainer::set_up() {
  peer_recovery_ = config_.runtime.recovery == "peer";
  if (peer_recovery_) place_ = starting_group(env_, to_milliseconds(config_.runtime.timeout_s));
  // A replacement takes the notices only once it holds the state: a stop before (the round
  // ending, its recovery failed) ends it at once, not after a group that never forms.
  if (place_.group == 0) stop_signals_.emplace(stop_signal_numbers(config_.preemption));
  const int threads =
      choose_threads(config_.runtime.threads, env_.threads_per_rank, env_.omp_num_threads);
  if (threads > 0) {
    at::set_num_threads(threads);
    set_blas_threads(threads);
  }

  // NCCL: this rank's GPUs hold the model (one per stage) and the first of them the data
  // plane; everything else stays on the CPU and agrees over the control plane. The GPUs are
  // ddprun's choice (DDPRUN_DEVICES), else LOCAL_RANK's as under torchrun. On the CPU every
  // stage is on the CPU.
  std::vector<torch::Device> stage_devices(static_cast<std::size_t>(config_.model.stages),
                                           torch::kCPU);
  if (config_.runtime.backend == "nccl") {
    const auto gpus = rank_devices(env_, config_.model.stages);
    for (std::size_t s = 0; s < gpus.size(); ++s)
      stage_devices[s] = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(gpus[s]));
  }
  device_ = stage_devices.front();
  const auto& autocast = config_.runtime.autocast;
  precision_ = autocast == "bf16"   ? Precision::kBFloat16
               : autocast == "fp16" ? Precision::kFloat16
                                    : Precision::kFloat;
  if (precision_ == Precision::kFloat16) scaler_.emplace();
  // The data loads (~0.3 s for Fashion-MNIST's gzip files) while the ranks meet and agree on
  // where to start: nothing before the first step needs it. A replacement's recovery waits
  // for its start, and this is most of what it can save there. (Its own generator: no race
  // with the model's initialisation below.)
  std::future<DataSplits> loading;
  if (!preloaded_) {
    loading = std::async(std::launch::async,
                         [this] { return load_data(config_.data, config_.train.seed); });
  }
  comm_ = Communicator::connect(env_, to_comm_options(config_.runtime, place_.group), device_);
  rank_ = comm_->rank();
  world_ = comm_->world_size();

  torch::manual_seed(config_.train.seed);  // same initial weights everywhere, before broadcast
  model_ = make_model(config_.model.name, config_.model.batch_norm != "none");
  if (config_.model.batch_norm == "sync") model_->set_batch_norm_plane(&comm_->data());
  model_->place(stage_devices);
  model_->set_split_size(config_.model.split_size);
  optimizer_ = make_optimizer(config_.optimizer, model_->parameters());
  ddp_options_ = to_ddp_options(config_.runtime);
  ddp_options_.shard_gradients = config_.optimizer.zero_stage == 1;
  // "peer": each share lives on two ranks, so that a lost one's comes from its neighbour.
  ddp_options_.keep_next_share = ddp_options_.shard_gradients && config_.runtime.recovery == "peer";
  if (place_.group == 0) {
    make_checkpointer();
    if (const auto resumed = checkpoints_->resume()) position_ = *resumed;
    join_group_parts();
  } else {
    enter_new_group(/*holds_state=*/false, Clock::now());  // a replacement: from its peers
  }
  if (!preloaded_) data_ = loading.get();
  if (!stop_signals_) stop_signals_.emplace(stop_signal_numbers(config_.preemption));
  arm_kill_hooks();

  SamplerOptions so;
  so.dataset_size = data_.train.size();
  so.num_replicas = world_;
  so.rank = rank_;
  so.shuffle = config_.data.shuffle;
  so.seed = config_.train.seed;
  so.drop_last = config_.data.drop_last;
  sampler_.emplace(so);
  LoopSizes& z = sizes_;
  z.batch = config_.train.batch_size_per_rank;
  z.per_rank = sampler_->num_samples();
  z.batches = (z.per_rank + z.batch - 1) / z.batch;
  z.accumulate = config_.train.accumulate_steps;
  z.steps_per_epoch = (z.batches + z.accumulate - 1) / z.accumulate;
  z.max_steps = config_.train.max_steps;
  z.total_steps = z.max_steps > 0 ? std::min(z.max_steps, config_.train.epochs * z.steps_per_epoch)
                                  : config_.train.epochs * z.steps_per_epoch;
  if (rank_ == 0 && place_.group == 0) print_start_line(stage_devices);
  if (rank_ == 0 && peer_recovery_ && env_.membership_file.empty() && world_ > 1) {
    out_ << "ddp-train: runtime.recovery \"peer\" needs ddprun --restart-scope rank (no "
            "DDPRUN_MEMBERSHIP_FILE): a lost rank fails the job, as under \"restart\""
         << std::endl;
  }

  progress_.emplace(out_, rank_ == 0 && !config_.progress.quiet, env_.stdout_is_terminal,
                    config_.progress.log_every);
  progress_file_.emplace(env_.progress_file, std::cerr);
  step_metrics_ = rank_ == 0 && config_.metrics.every_steps > 0 && !config_.metrics.file.empty();
}

void Trainer::print_start_line(const std::vector<torch::Device>& stage_devices) const {
  const std::int64_t accumulate = sizes_.accumulate;
  out_ << "ddp-train: " << config_.model.name << " on " << config_.data.name << ", world " << world_
       << ", " << sizes_.batch << " samples per rank per "
       << (accumulate > 1 ? "micro-batch, " + std::to_string(accumulate) + " per step, "
                          : std::string("step, "))
       << sizes_.steps_per_epoch << " steps per epoch, " << at::get_num_threads()
       << " thread(s) per rank, " << comm_->transport() << ", " << ddp_->bucket_count()
       << " gradient bucket(s)"
       << (ddp_options_.comm_hook.start ? " sent as " + ddp_options_.comm_hook.name : "")
       << (ddp_options_.overlap ? "" : ", all-reduce after backward");
  if (model_->stage_count() > 1) {
    out_ << ", model in " << model_->stage_count() << " stages on";
    for (const auto& d : stage_devices) out_ << " " << d.str();
  }
  if (config_.model.split_size > 0) out_ << ", micro-batches of " << config_.model.split_size;
  if (config_.model.batch_norm != "none") {
    out_ << ", batch norm over "
         << (config_.model.batch_norm == "sync" ? "all ranks' rows" : "each rank's rows");
  }
  out_ << std::endl;
}

void Trainer::save_checkpoint() {
  const auto& d = config_.diagnostics;
  if (d.kill_in == "checkpoint" && d.kill_rank == rank_ && place_.group == 0 &&
      env_.restart_count == 0 && position_.step == d.kill_at_step) {
    lose_rank(d.kill_node);  // test hook: lost while the others are in the checkpoint's gathering
  }
  if (sharded_) sharded_->save_state_into(*optimizer_);
  checkpoints_->save(position_);
  if (sharded_) optimizer_->state().clear();
}

void Trainer::run_epoch(std::int64_t epoch) {
  sampler_->set_epoch(epoch);
  const auto indices = torch::tensor(sampler_->indices(), torch::kLong);
  std::int64_t b = epoch == position_.epoch ? position_.batch_in_epoch : 0;
  if (!std::exchange(epoch_goes_on_, false) || b == 0) {
    epoch_stats_ = {};
    epoch_start_ = Clock::now();
  }
  while (b < sizes_.batches) {
    if (sizes_.max_steps > 0 && position_.step >= sizes_.max_steps) {
      done_ = true;
      break;
    }
    b = train_step(epoch, indices, b);
    if (stop_check_->after_step()) {
      done_ = preempted_ = true;
      break;
    }
    if (position_.step == config_.diagnostics.hold_after_step) {
      hold_after_step(out_, rank_, position_.step);
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - epoch_start_).count();
  progress_->end_epoch();
  // A preempted epoch is reported when it is finished, after the resume.
  stragglers_->flush(position_.step);
  const std::vector<RankTimes> times = stragglers_->take_epoch();
  if (!preempted_ && (epoch_stats_.samples > 0 || !done_)) {
    report_epoch(epoch, epoch_stats_, seconds, times);
  }
  progress_file_->reached(position_.step);
}

bool Trainer::unscale_gradients() {
  std::vector<at::Tensor> gradients;
  if (sharded_) {  // each rank holds the average of its share only: the ranks agree
    for (std::size_t b = 0; b < ddp_->bucket_count(); ++b) {
      gradients.push_back(ddp_->bucket_share(b));
    }
    return scaler_->unscale(gradients, &comm_->control());
  }
  for (const auto& p : model_->parameters()) gradients.push_back(p.grad());
  return scaler_->unscale(gradients);
}

std::int64_t Trainer::train_step(std::int64_t epoch, const at::Tensor& indices, std::int64_t b) {
  EpochStats& stats = epoch_stats_;
  const auto& d = config_.diagnostics;
  const bool kill_here = d.kill_rank == rank_ && place_.group == 0 && env_.restart_count == 0 &&
                         position_.step + 1 == d.kill_at_step;
  if (kill_here && d.kill_in == "forward") lose_rank(d.kill_node);
  const std::int64_t batch = sizes_.batch, per_rank = sizes_.per_rank, batches = sizes_.batches;
  const auto step_start = Clock::now();
  // One optimizer step over `micro` batches: the gradients of all but the last add up on
  // this rank (no_sync), the last one's backward averages their sum across ranks.
  const std::int64_t micro = std::min(sizes_.accumulate, batches - b);
  // Gradients set to none, as PyTorch's zero_grad() does by default: backward then takes
  // its result as the gradient instead of adding it to zeros, and a parameter that no rank
  // used stays without one, so the optimizer leaves it alone (no momentum, no weight decay).
  for (auto& p : model_->parameters()) p.mutable_grad().reset();
  ddp_->prepare_for_forward();
  double step_loss = 0, step_rows = 0;
  for (std::int64_t m = 0; m < micro; ++m) {
    const auto batch_indices =
        indices.narrow(0, (b + m) * batch, std::min(batch, per_rank - (b + m) * batch));
    if (m == 0 && rank_ == config_.diagnostics.delay_rank &&
        position_.step >= config_.diagnostics.delay_after_step) {
      std::this_thread::sleep_for(std::chrono::milliseconds(config_.diagnostics.delay_ms));
    }
    const auto samples = gather(data_.train, batch_indices);
    // The step this rank works on, its data in hand: a rank stuck before this (data, the
    // delay hook) is behind the ranks that wait for it in the step's all-reduce.
    if (m == 0) progress_file_->reached(position_.step + 1);
    const auto x = samples.inputs.to(device_);
    const auto& y = samples.targets;
    std::optional<NoSyncGuard> local;
    if (m + 1 < micro) {
      local.emplace(*ddp_);
    } else {
      ddp_->prepare_for_backward();
    }
    at::Tensor logits, loss;
    {
      Autocast autocast(precision_, device_.is_cuda());
      logits = model_->forward(x);
      loss = compute_loss(config_.train.loss, logits.to(torch::kFloat), y.to(logits.device()));
    }
    // Each micro-batch's mean loss weighs 1/micro, as PyTorch's recipe divides it.
    const auto scaled = scaler_ ? scaler_->scale(loss) : loss;
    (micro > 1 ? scaled / static_cast<double>(micro) : scaled).backward();
    step_loss += loss.item<double>() * static_cast<double>(y.size(0));
    step_rows += static_cast<double>(y.size(0));
  }
  ddp_->finish_gradient_sync();
  if (kill_here && d.kill_in == "optimizer") lose_rank(d.kill_node);
  // Averaged, the gradients are the same bits on every rank, and so is their norm.
  const double lr = learning_rate(config_.optimizer, position_.step, sizes_.total_steps);
  // float16: a step whose gradients overflowed is skipped (every rank alike) and the scale
  // backs off, as PyTorch's GradScaler does.
  const bool finite = !scaler_ || unscale_gradients();
  if (finite && sharded_) {
    if (config_.optimizer.clip_grad_norm > 0) {
      sharded_->clip_grad_norm(config_.optimizer.clip_grad_norm);
    }
    sharded_->set_lr(lr);
    sharded_->step();
  } else if (finite) {
    if (config_.optimizer.clip_grad_norm > 0) {
      torch::nn::utils::clip_grad_norm_(model_->parameters(), config_.optimizer.clip_grad_norm);
    }
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
    optimizer_->step();
  }
  if (scaler_) scaler_->update(finite);
  b += micro;

  stats.loss_sum += step_loss;
  stats.samples += step_rows;
  position_ = {position_.step + 1, b == batches ? epoch + 1 : epoch, b == batches ? 0 : b};
  stragglers_->stepped(std::chrono::duration<double>(Clock::now() - step_start).count(),
                       ddp_->last_sync_stats().wait_seconds, position_.step);
  if (step_metrics_) {
    window_.loss_sum += step_loss;
    window_.samples += step_rows;
    window_.seconds += std::chrono::duration<double>(Clock::now() - step_start).count();
    if (position_.step % config_.metrics.every_steps == 0) {
      window_.step = position_.step;
      window_.epoch =
          static_cast<double>(epoch) + static_cast<double>(b) / static_cast<double>(batches);
      window_.world_size = world_;
      window_.lr = lr;
      append_line(config_.metrics.file, step_metrics_line(window_));
      window_ = {};
    }
  }
  if (config_.diagnostics.check_replicas) check_replicas(*model_, comm_->control(), position_.step);
  progress_->step(epoch, config_.train.epochs, b, batches,
                  stats.samples > 0 ? stats.loss_sum / stats.samples : 0, stats.samples,
                  std::chrono::duration<double>(Clock::now() - epoch_start_).count(), world_);
  const auto interval = config_.checkpoint.interval_steps;
  if (interval > 0 && position_.step % interval == 0) {
    save_checkpoint();
    progress_file_->reached(position_.step);
  }
  return b;
}

TrainingResult Trainer::finish() {
  if (rank_ == 0 && world_ > 1 && config_.progress.stragglers && !config_.progress.quiet) {
    out_ << stragglers_->table() << std::flush;
  }
  // The last step is always checkpointed (with checkpoint.dir), unless it already was.
  const bool save_last =
      !config_.checkpoint.dir.empty() && checkpoints_->last_step() != position_.step;
  if (preempted_) {
    // Stopping now: a stop signal from here on (the launcher stopping this node because
    // another node already exited 75) must not kill the checkpoint write or the exit.
    stop_signals_->keep_until_exit();
    const int sig = StopSignals::received();
    if (rank_ == 0) {
      out_ << "ddp-train: stopping after step " << position_.step << " (epoch "
           << position_.epoch + 1 << ", batch " << position_.batch_in_epoch
           << ") on a preemption notice ("
           << (sig != 0 ? signal_name(sig) : "received by another rank") << ")" << std::endl;
    }
    if (save_last) save_checkpoint();
    if (rank_ == 0) {
      out_ << "ddp-train: preempted after step " << position_.step
           << (config_.checkpoint.dir.empty() ? ", no checkpoint.dir: nothing saved"
                                              : ", checkpoint in " + config_.checkpoint.dir)
           << "; exit " << ddprun::kExitPreempted << std::endl;
    }
    return {true, position_.step};
  }

  if (save_last) save_checkpoint();
  if (!config_.diagnostics.final_params_file.empty() && rank_ == 0) {
    write_final_params(config_.diagnostics.final_params_file, *model_, position_.step, world_);
  }
  if (rank_ == 0) {
    auto state = optimizer_state_bytes(sharded_ ? sharded_->optimizer() : *optimizer_);
    const auto* next = sharded_ ? sharded_->next_optimizer() : nullptr;
    if (next != nullptr) state += optimizer_state_bytes(*next);
    out_ << "ddp-train: done after " << position_.step << " steps; optimizer state " << state
         << " bytes on rank 0"
         << (next != nullptr ? " (ZeRO-1: its share and rank 1's)"
             : sharded_      ? " (ZeRO-1: its share)"
                             : "")
         << std::endl;
  }
  return {false, position_.step};
}

void Trainer::report_epoch(std::int64_t epoch, const EpochStats& local, double seconds,
                           const std::vector<RankTimes>& times) {
  auto sums = torch::tensor({local.loss_sum, local.samples}, torch::kDouble);
  comm_->control().allreduce(sums, ReduceOp::kSum);
  const EvalResult eval =
      evaluate(*model_, data_.test, comm_->control(), config_.train.loss, device_);
  if (comm_->rank() != 0) return;

  EpochSummary summary;
  summary.epoch = epoch;
  summary.epochs = config_.train.epochs;
  summary.step = position_.step;
  summary.loss_sum = sums[0].item<double>();
  summary.samples = sums[1].item<double>();
  summary.seconds = seconds;
  summary.test_accuracy = eval.accuracy;
  summary.test_loss = eval.loss;
  summary.world_size = world_;
  for (const RankTimes& t : times) {
    if (t.steps == 0) continue;  // one rank, or not gathered
    summary.compute_per_step.push_back(t.compute_per_step());
    summary.wait_per_step.push_back(t.wait_per_step());
  }
  out_ << epoch_line(summary) << std::endl;
  if (!config_.metrics.file.empty()) append_metrics_line(config_.metrics.file, summary);
}

}  // namespace training

TrainingResult run_training(const Config& config, const WorkerEnv& env, std::ostream& out) {
  return training::Trainer(config, env, out).run();
}

std::optional<TrainingResult> run_training_as_spare(
    const Config& config, std::ostream& out,
    const std::function<std::optional<WorkerEnv>()>& become) {
  // What a replacement would wait for after its start, done before it is needed.
  DataSplits data = load_data(config.data, config.train.seed);
  const auto env = become();
  if (!env) return std::nullopt;
  training::Trainer trainer(config, *env, out);
  trainer.preload(std::move(data));
  return trainer.run();
}

}  // namespace ddprun::worker
