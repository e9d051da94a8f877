#include "trainer.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "data.h"
#include "ddprun/common/signal_name.h"
#include "ddprun/worker/atomic_file.h"
#include "ddprun/worker/checkpoint.h"
#include "ddprun/worker/communicator.h"
#include "ddprun/worker/ddp.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/sampler.h"
#include "ddprun/worker/stop_signals.h"
#include "models.h"

namespace ddprun::worker {
namespace {

using Clock = std::chrono::steady_clock;
// Test samples per forward pass: the CNN's activations then stay under the 32 MiB above
// which malloc maps (and unmaps) every block, so they are reused, not faulted in (allocator.h).
constexpr std::int64_t kEvalChunk = 256;

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& c,
                                                        std::vector<at::Tensor> params) {
  if (c.name == "adam") {
    return std::make_unique<torch::optim::Adam>(
        std::move(params), torch::optim::AdamOptions(c.lr).weight_decay(c.weight_decay));
  }
  return std::make_unique<torch::optim::SGD>(
      std::move(params),
      torch::optim::SGDOptions(c.lr).momentum(c.momentum).weight_decay(c.weight_decay));
}

at::Tensor compute_loss(const std::string& kind, const at::Tensor& logits,
                        const at::Tensor& targets) {
  if (kind == "mse") {
    const auto one_hot = torch::one_hot(targets, logits.size(1)).to(logits.scalar_type());
    return torch::mse_loss(logits, one_hot);
  }
  return torch::cross_entropy_loss(logits, targets);
}

// FNV-1a over the bytes of every parameter: equal on all ranks iff they are bit-identical
// (up to hash collisions).
std::int64_t parameter_checksum(torch::nn::Module& model) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& p : model.parameters(true)) {
    const auto t = p.detach().to(torch::kCPU).contiguous();
    const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
    const auto n = static_cast<std::size_t>(t.numel() * t.element_size());
    for (std::size_t i = 0; i < n; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return static_cast<std::int64_t>(h);
}

void check_replicas(torch::nn::Module& model, Communicator& comm, std::int64_t step) {
  const auto sum = parameter_checksum(model);
  auto lo = torch::tensor({sum}, torch::kLong);
  auto hi = lo.clone();
  comm.allreduce(lo, ReduceOp::kMin);
  comm.allreduce(hi, ReduceOp::kMax);
  if (lo.item<std::int64_t>() != hi.item<std::int64_t>()) {
    throw ConsistencyError(
        "after step " + std::to_string(step) + " the ranks hold different parameters (rank " +
            std::to_string(comm.rank()) + " checksum " + std::to_string(sum) + ")",
        "gradients were not averaged identically: a bug in the DDP wrapper");
  }
}

void write_final_params(const std::string& path, torch::nn::Module& model, std::int64_t step,
                        int world) {
  nlohmann::json j;
  j["step"] = step;
  j["world_size"] = world;
  auto& params = j["params"];
  for (const auto& p : model.named_parameters(true)) {
    const auto t = p.value().detach().to(torch::kCPU, torch::kDouble).contiguous();
    const auto* v = t.data_ptr<double>();
    params[p.key()] = {{"shape", t.sizes().vec()},
                       {"values", std::vector<double>(v, v + t.numel())}};
  }
  const std::filesystem::path fp(path);
  write_file_atomically(fp.has_parent_path() ? fp.parent_path().string() : ".",
                        fp.filename().string(), j.dump() + "\n", 0644);
}

struct EvalResult {
  double accuracy = 0;
  double loss = 0;
};

// This rank evaluates test samples rank, rank + world, ... (no padding, so every sample
// counts once); sums and counts are all-reduced.
EvalResult evaluate(Model& model, const Dataset& test, Communicator& comm, const Config& config,
                    const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model.eval();
  const auto mine = torch::arange(comm.rank(), test.size(), comm.world_size(), torch::kLong);
  double correct = 0, loss = 0;
  for (std::int64_t start = 0; start < mine.size(0); start += kEvalChunk) {
    const auto batch =
        gather(test, mine.narrow(0, start, std::min(kEvalChunk, mine.size(0) - start)));
    const auto x = batch.inputs.to(device), y = batch.targets.to(device);
    const auto logits = model.forward(x);
    correct += logits.argmax(1).eq(y).sum().item<double>();
    loss +=
        compute_loss(config.train.loss, logits, y).item<double>() * static_cast<double>(y.size(0));
  }
  model.train();
  auto sums = torch::tensor({correct, loss, static_cast<double>(mine.size(0))}, torch::kDouble);
  comm.allreduce(sums, ReduceOp::kSum);
  const auto* s = sums.data_ptr<double>();
  return {s[0] / std::max(s[2], 1.0), s[1] / std::max(s[2], 1.0)};
}

// Everything the per-epoch report needs, summed over ranks.
// Rank 0's view of an epoch in progress. On a terminal: one line redrawn in place, at most
// five times a second; otherwise a plain line every `log_every` steps, no control
// characters. Loss and throughput are rank 0's own (no collective per step).
class ProgressReporter {
 public:
  ProgressReporter(std::ostream& out, bool enabled, bool terminal, std::int64_t log_every)
      : out_(out), enabled_(enabled), terminal_(terminal), log_every_(log_every) {}

  void step(std::int64_t epoch, std::int64_t epochs, std::int64_t batch, std::int64_t batches,
            double loss, double samples, double seconds, int world) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (terminal_) {
      if (now - last_draw_ < std::chrono::milliseconds(200) && batch != batches) return;
    } else if (log_every_ <= 0 || batch % log_every_ != 0) {
      return;
    }
    last_draw_ = now;
    const double rate = seconds > 0 ? samples * world / seconds : 0;
    const double eta =
        batch > 0 ? seconds / static_cast<double>(batch) * static_cast<double>(batches - batch) : 0;
    std::ostringstream text;
    text << std::fixed << "epoch " << epoch + 1 << "/" << epochs << "  step " << batch << "/"
         << batches << "  loss " << std::setprecision(4) << loss << "  samples/s "
         << std::setprecision(0) << rate << "  ETA " << std::setprecision(0) << eta << " s";
    if (terminal_) {
      out_ << '\r' << text.str() << "\033[K" << std::flush;
      drawn_ = true;
    } else {
      out_ << text.str() << std::endl;
    }
  }

  // Clears a redrawn line so the epoch summary takes its place.
  void end_epoch() {
    if (drawn_) out_ << "\r\033[K" << std::flush;
    drawn_ = false;
  }

 private:
  std::ostream& out_;
  bool enabled_;
  bool terminal_;
  std::int64_t log_every_;
  bool drawn_ = false;
  Clock::time_point last_draw_{};
};

// Decides, identically on every rank, after which steps the ranks agree whether to stop:
// one all-reduce (MAX) of {stop flag, -next interval}. With a fixed interval the second
// element is that interval everywhere; in auto mode each rank proposes the number of steps
// that takes it about kAutoCheckSeconds and the smallest proposal wins.
class StopCheck {
 public:
  static constexpr double kAutoCheckSeconds = 0.1;
  static constexpr std::int64_t kAutoMaxSteps = 1000;

  // `enabled` false (no preemption signals, the same on every rank): never checks.
  StopCheck(Communicator& comm, std::int64_t fixed_every, bool enabled)
      : comm_(comm),
        fixed_(fixed_every),
        every_(fixed_every > 0 ? fixed_every : 1),
        enabled_(enabled) {}

  // Call after every step. True once all ranks have agreed to stop after this step.
  bool after_step() {
    if (!enabled_ || ++since_ < every_) return false;
    const auto now = Clock::now();
    std::int64_t proposal = fixed_;
    if (fixed_ <= 0) {
      const double per_step =
          std::chrono::duration<double>(now - last_).count() / static_cast<double>(since_);
      proposal = per_step > 0 ? static_cast<std::int64_t>(kAutoCheckSeconds / per_step) : 1;
      proposal = std::clamp<std::int64_t>(proposal, 1, kAutoMaxSteps);
    }
    auto t =
        torch::tensor({StopSignals::received() != 0 ? std::int64_t{1} : std::int64_t{0}, -proposal},
                      torch::kLong);
    comm_.allreduce(t, ReduceOp::kMax);
    since_ = 0;
    last_ = now;
    every_ = -t[1].item<std::int64_t>();
    return t[0].item<std::int64_t>() != 0;
  }

 private:
  Communicator& comm_;
  std::int64_t fixed_;
  std::int64_t every_;
  bool enabled_;
  std::int64_t since_ = 0;
  Clock::time_point last_ = Clock::now();
};

// Generator state of `device`'s default generator (uint8, 1-D).
at::Tensor rng_state(const torch::Device& device) {
  auto gen = device.is_cpu() ? at::detail::getDefaultCPUGenerator()
                             : at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(const torch::Device& device, const at::Tensor& state) {
  auto gen = device.is_cpu() ? at::detail::getDefaultCPUGenerator()
                             : at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state.contiguous());
}

// Every rank's `mine` (uint8, 1-D, same length everywhere) as rows of a world x N tensor
// on every rank: an all-reduce of a zero matrix that holds this rank's row.
at::Tensor gather_rows(Communicator& comm, const at::Tensor& mine) {
  auto all = torch::zeros({comm.world_size(), mine.numel()}, torch::kLong);
  all[comm.rank()].copy_(mine.to(torch::kLong));
  comm.allreduce(all, ReduceOp::kSum);
  return all.to(torch::kByte);
}

// Waits with short polls: a test hook, where a blocking wait could miss the signal that
// arrives between the check and the wait.
void hold_until_stop_signal() {
  while (StopSignals::received() == 0) ::poll(nullptr, 0, 10);
}

std::vector<int> stop_signal_numbers(const PreemptionConfig& config) {
  std::vector<int> numbers;
  for (const auto& name : config.signals) {
    if (const auto sig = stop_signal_number(name)) numbers.push_back(*sig);
  }
  return numbers;
}

struct EpochStats {
  double loss_sum = 0;
  double samples = 0;
};

class Trainer {
 public:
  Trainer(const Config& config, const WorkerEnv& env, std::ostream& out)
      : config_(config), env_(env), out_(out) {}

  TrainingResult run();

 private:
  void maybe_resume();
  std::string checkpoint(const TrainingPosition& position);
  void report_epoch(std::int64_t epoch, const EpochStats& local, double seconds);

  const Config& config_;
  const WorkerEnv& env_;
  std::ostream& out_;
  torch::Device device_{torch::kCPU};
  std::unique_ptr<Communicator> comm_;
  DataSplits data_;
  std::shared_ptr<Model> model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  TrainingPosition position_;
  std::int64_t last_checkpoint_step_ = -1;
};

TrainingResult Trainer::run() {
  // Installed first: a notice during start-up stops the job after its first step.
  const StopSignals stop_signals(stop_signal_numbers(config_.preemption));
  const int threads =
      config_.runtime.threads > 0 ? config_.runtime.threads : env_.omp_num_threads.value_or(0);
  if (threads > 0) at::set_num_threads(threads);

  CommOptions comm_options;
  comm_options.backend = config_.runtime.backend;
  comm_options.timeout = std::chrono::milliseconds(
      static_cast<std::int64_t>(std::llround(config_.runtime.timeout_s * 1000)));
  comm_options.unresponsive_wait = std::chrono::milliseconds(
      static_cast<std::int64_t>(std::llround(config_.runtime.unresponsive_wait_s * 1000)));
  comm_options.shared_memory = config_.runtime.shared_memory;
  comm_ = Communicator::connect(env_, comm_options);
  const int rank = comm_->rank();
  const int world = comm_->world_size();
  if (config_.runtime.backend == "nccl")
    device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env_.local_rank));

  data_ = load_data(config_.data, config_.train.seed);
  torch::manual_seed(config_.train.seed);  // same initial weights everywhere, before broadcast
  model_ = make_model(config_.model.name);
  model_->to(device_);
  optimizer_ = make_optimizer(config_.optimizer, model_->parameters());
  maybe_resume();

  DdpOptions ddp_options;
  ddp_options.bucket_cap_bytes =
      static_cast<std::size_t>(config_.runtime.bucket_cap_mb * 1024 * 1024);
  ddp_options.first_bucket_cap_bytes =
      std::min(ddp_options.first_bucket_cap_bytes, ddp_options.bucket_cap_bytes);
  ddp_options.overlap = config_.runtime.overlap;
  ddp_options.find_unused_parameters = config_.runtime.find_unused_parameters;
  DistributedDataParallel ddp(model_, *comm_, ddp_options);
  ddp.set_gradient_sync(!config_.diagnostics.no_gradient_sync);

  SamplerOptions so;
  so.dataset_size = data_.train.size();
  so.num_replicas = world;
  so.rank = rank;
  so.shuffle = config_.data.shuffle;
  so.seed = config_.train.seed;
  so.drop_last = config_.data.drop_last;
  DistributedSampler sampler(so);
  const std::int64_t batch = config_.train.batch_size_per_rank;
  const std::int64_t per_rank = sampler.num_samples();
  const std::int64_t batches = (per_rank + batch - 1) / batch;
  const std::int64_t max_steps = config_.train.max_steps;
  if (rank == 0) {
    out_ << "ddp-train: " << config_.model.name << " on " << config_.data.name << ", world "
         << world << ", " << batch << " samples per rank per step, " << batches
         << " steps per epoch, " << at::get_num_threads() << " thread(s) per rank, "
         << comm_->transport() << ", " << ddp.bucket_count() << " gradient bucket(s)"
         << (ddp_options.overlap ? "" : ", all-reduce after backward") << std::endl;
  }

  ProgressReporter progress(out_, rank == 0 && !config_.progress.quiet, env_.stdout_is_terminal,
                            config_.progress.log_every);
  StopCheck stop_check(*comm_, config_.preemption.check_every_steps,
                       !config_.preemption.signals.empty());
  bool done = false;
  bool preempted = false;
  for (std::int64_t epoch = position_.epoch; epoch < config_.train.epochs && !done; ++epoch) {
    sampler.set_epoch(epoch);
    const auto idx = sampler.indices();
    const auto indices = torch::tensor(idx, torch::kLong);
    const std::int64_t first = epoch == position_.epoch ? position_.batch_in_epoch : 0;
    EpochStats stats;
    const auto start = Clock::now();
    for (std::int64_t b = first; b < batches; ++b) {
      if (max_steps > 0 && position_.step >= max_steps) {
        done = true;
        break;
      }
      const auto batch_indices =
          indices.narrow(0, b * batch, std::min(batch, per_rank - b * batch));
      const auto samples = gather(data_.train, batch_indices);
      const auto x = samples.inputs.to(device_), y = samples.targets.to(device_);
      // Zeroing by hand: a later gradient_as_bucket_view reducer must keep the grad tensors.
      for (auto& p : model_->parameters()) {
        if (p.grad().defined()) p.mutable_grad().zero_();
      }
      ddp.prepare_for_backward();
      const auto loss = compute_loss(config_.train.loss, model_->forward(x), y);
      loss.backward();
      ddp.finish_gradient_sync();
      optimizer_->step();

      stats.loss_sum += loss.item<double>() * static_cast<double>(y.size(0));
      stats.samples += static_cast<double>(y.size(0));
      position_ = {position_.step + 1, b + 1 == batches ? epoch + 1 : epoch,
                   b + 1 == batches ? 0 : b + 1};
      if (config_.diagnostics.check_replicas) check_replicas(*model_, *comm_, position_.step);
      progress.step(epoch, config_.train.epochs, b + 1, batches,
                    stats.samples > 0 ? stats.loss_sum / stats.samples : 0, stats.samples,
                    std::chrono::duration<double>(Clock::now() - start).count(), world);
      const auto interval = config_.checkpoint.interval_steps;
      if (interval > 0 && position_.step % interval == 0) checkpoint(position_);
      if (stop_check.after_step()) {
        done = preempted = true;
        break;
      }
      if (position_.step == config_.diagnostics.hold_after_step) {
        out_ << "ddp-train: rank " << rank << " (pid " << ::getpid() << ") holding after step "
             << position_.step << " until a preemption signal" << std::endl;
        hold_until_stop_signal();
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    progress.end_epoch();
    // A preempted epoch is reported when it is finished, after the resume.
    if (!preempted && (stats.samples > 0 || !done)) report_epoch(epoch, stats, seconds);
  }

  if (preempted) {
    const int sig = StopSignals::received();
    if (rank == 0) {
      out_ << "ddp-train: stopping after step " << position_.step << " (epoch "
           << position_.epoch + 1 << ", batch " << position_.batch_in_epoch
           << ") on a preemption notice ("
           << (sig != 0 ? signal_name(sig) : "received by another rank") << ")" << std::endl;
    }
    if (!config_.checkpoint.dir.empty() && last_checkpoint_step_ != position_.step) {
      checkpoint(position_);
    }
    if (rank == 0) {
      out_ << "ddp-train: preempted after step " << position_.step
           << (config_.checkpoint.dir.empty() ? ", no checkpoint.dir: nothing saved"
                                              : ", checkpoint in " + config_.checkpoint.dir)
           << "; exit " << ddprun::kExitPreempted << std::endl;
    }
    return {true, position_.step};
  }

  if (!config_.checkpoint.dir.empty() && last_checkpoint_step_ != position_.step) {
    checkpoint(position_);
  }
  if (!config_.diagnostics.final_params_file.empty() && rank == 0) {
    write_final_params(config_.diagnostics.final_params_file, *model_, position_.step, world);
  }
  if (rank == 0) out_ << "ddp-train: done after " << position_.step << " steps" << std::endl;
  return {false, position_.step};
}

void Trainer::maybe_resume() {
  if (config_.checkpoint.dir.empty()) return;
  const int rank = comm_->rank(), world = comm_->world_size();
  // Every rank reads the checkpoint itself; a failure on any rank is agreed on below, so
  // that no rank goes on into a collective the others never join.
  std::optional<CheckpointRecord> latest;
  CheckpointMeta meta;
  std::string error, hint;
  try {
    latest = find_latest_checkpoint(config_.checkpoint.dir);
    if (latest) {
      meta = load_checkpoint(*latest, *model_, *optimizer_);
      const std::string path = latest->path();
      if (meta.world_size != world) {
        throw CheckpointError(path + " was written by a job of " + std::to_string(meta.world_size) +
                                  " ranks; this one has " + std::to_string(world),
                              "resume with the same number of ranks, or use a new checkpoint dir");
      }
      if (meta.seed != config_.train.seed ||
          meta.batch_size_per_rank != config_.train.batch_size_per_rank) {
        throw CheckpointError(
            path + " was written with seed " + std::to_string(meta.seed) + " and " +
                std::to_string(meta.batch_size_per_rank) + " samples per rank; the config says " +
                std::to_string(config_.train.seed) + " and " +
                std::to_string(config_.train.batch_size_per_rank),
            "the data order depends on both: use the same config, or a new checkpoint dir");
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
  comm_->allreduce(failed, ReduceOp::kSum);
  const std::int64_t step = latest && error.empty() ? latest->step : -1;
  auto steps = torch::tensor({step, -step}, torch::kLong);
  comm_->allreduce(steps, ReduceOp::kMax);
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
  if (!latest) return;
  if (meta.rng_cpu.defined() && meta.rng_cpu.dim() == 2 && meta.rng_cpu.size(0) == world) {
    set_rng_state(torch::kCPU, meta.rng_cpu[rank]);
  }
  if (!device_.is_cpu() && meta.rng_device.defined() && meta.rng_device.dim() == 2 &&
      meta.rng_device.size(0) == world) {
    set_rng_state(device_, meta.rng_device[rank]);
  }
  position_ = meta.position;
  last_checkpoint_step_ = meta.position.step;
  if (rank == 0) {
    out_ << "ddp-train: resuming from " << latest->path() << " at step " << position_.step
         << " (epoch " << position_.epoch + 1 << ", batch " << position_.batch_in_epoch << ")"
         << std::endl;
  }
}

std::string Trainer::checkpoint(const TrainingPosition& position) {
  // Gathering the generator states is also the barrier: every rank has finished the step
  // before rank 0 reads the (identical) state.
  CheckpointMeta meta{
      position, config_.train.seed, comm_->world_size(), config_.train.batch_size_per_rank, {}, {}};
  meta.rng_cpu = gather_rows(*comm_, rng_state(torch::kCPU));
  if (!device_.is_cpu()) meta.rng_device = gather_rows(*comm_, rng_state(device_));
  std::string name, error;
  if (comm_->rank() == 0) {
    std::function<void(const std::string&)> hold;
    if (position.step == config_.diagnostics.hold_checkpoint_write_at_step) {
      hold = [this](const std::string& tmp) {
        out_ << "ddp-train: rank 0 (pid " << ::getpid() << ") holding checkpoint write "
             << config_.checkpoint.dir << "/" << tmp << " before its rename" << std::endl;
        for (;;) ::pause();  // until SIGKILL
      };
    }
    try {
      name = save_checkpoint(config_.checkpoint.dir, *model_, *optimizer_, meta,
                             config_.checkpoint.keep_last, hold);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Once any rank goes on, the checkpoint is on disk, or every rank fails together.
  auto failed = torch::tensor({error.empty() ? std::int64_t{0} : std::int64_t{1}}, torch::kLong);
  comm_->allreduce(failed, ReduceOp::kMax);
  if (failed.item<std::int64_t>() != 0) {
    throw CheckpointError(
        error.empty() ? "rank 0 could not write the checkpoint of step " +
                            std::to_string(position.step) + " (its error says why)"
                      : error,
        "check " + config_.checkpoint.dir + ": space, permissions, no symbolic links");
  }
  last_checkpoint_step_ = position.step;
  return name;
}

void Trainer::report_epoch(std::int64_t epoch, const EpochStats& local, double seconds) {
  auto sums = torch::tensor({local.loss_sum, local.samples}, torch::kDouble);
  comm_->allreduce(sums, ReduceOp::kSum);
  const double loss_sum = sums[0].item<double>(), samples = sums[1].item<double>();
  const EvalResult eval = evaluate(*model_, data_.test, *comm_, config_, device_);
  if (comm_->rank() != 0) return;

  const double train_loss = samples > 0 ? loss_sum / samples : 0;
  const double rate = seconds > 0 ? samples / seconds : 0;
  std::ostringstream line;
  line << std::fixed << "epoch " << epoch + 1 << "/" << config_.train.epochs << "  step "
       << position_.step << "  train_loss " << std::setprecision(4) << train_loss
       << "  test_accuracy " << std::setprecision(4) << eval.accuracy << "  samples/s "
       << std::setprecision(0) << rate;
  out_ << line.str() << std::endl;

  if (!config_.metrics.file.empty()) {
    nlohmann::json j = {{"epoch", epoch + 1},       {"step", position_.step},
                        {"train_loss", train_loss}, {"test_accuracy", eval.accuracy},
                        {"test_loss", eval.loss},   {"samples_per_s", rate},
                        {"epoch_seconds", seconds}, {"world_size", comm_->world_size()}};
    std::ofstream metrics(config_.metrics.file, std::ios::app);
    metrics << j.dump() << "\n";
    if (!metrics.flush()) {
      throw std::system_error(errno, std::generic_category(), "write " + config_.metrics.file);
    }
  }
}

}  // namespace

TrainingResult run_training(const Config& config, const WorkerEnv& env, std::ostream& out) {
  return Trainer(config, env, out).run();
}

}  // namespace ddprun::worker
