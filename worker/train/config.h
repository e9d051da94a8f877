#pragma once
// ddp-train's typed configuration (docs/config.md). No LibTorch.
//
// Each JSON section maps to one struct. Required keys are required, unknown keys are
// rejected, and every error is a ddprun::ConfigError whose message names the file and the
// JSON pointer, e.g. "configs/x.json: /optimizer/lr: must be > 0".

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::worker {

struct ModelConfig {
  std::string name;  // "mlp", "cnn" or "toy"
  // > 1: the model is split into this many consecutive stages, one per device of the rank
  // (ddprun --gpus-per-proc; on the CPU every stage is on the CPU). At most its block count.
  int stages = 1;
  std::int64_t split_size = 0;  // > 0: batches flow through the stages in micro-batches
  // cnn and toy: "local" (batch norm over each rank's rows) or "sync" (over all ranks' rows).
  std::string batch_norm = "none";
};

// How many blocks each model has (the most stages it splits into); 0 for an unknown name.
int model_block_count(const std::string& name);

struct DataConfig {
  std::string name;  // "fashion_mnist" or "synthetic"
  std::string path = "/usr/share/datasets/fashion-mnist";
  std::int64_t train_limit = 0;         // > 0: use only the first N training samples
  std::int64_t synthetic_train = 4096;  // synthetic: training samples
  std::int64_t synthetic_test = 1024;   // synthetic: test samples
  bool shuffle = true;
  bool drop_last = false;
};

struct OptimizerConfig {
  std::string name;  // "sgd", "adam" or "adamw"
  double lr = 0;
  double momentum = 0;  // sgd only
  double weight_decay = 0;
  // > 0: gradients scaled so that their global norm is at most this, after averaging.
  double clip_grad_norm = 0;
  // The learning rate per step (schedule.h): a linear warm-up over warmup_steps, then "none"
  // (constant), "cosine" (down to min_lr at the last step) or "step" (times decay_gamma
  // every decay_every steps).
  std::int64_t warmup_steps = 0;
  std::string decay = "none";
  double min_lr = 0;
  std::int64_t decay_every = 0;
  double decay_gamma = 0.1;
  // 1: ZeRO-1, each rank keeps the state of only its share of the parameters (zero.h).
  int zero_stage = 0;
};

struct TrainConfig {
  int epochs = 0;
  std::int64_t batch_size_per_rank = 0;
  std::uint64_t seed = 0;
  std::int64_t max_steps = 0;  // > 0: stop after this many optimizer steps in total
  // > 1: each optimizer step accumulates this many batches of batch_size_per_rank (no_sync).
  std::int64_t accumulate_steps = 1;
  std::string loss = "cross_entropy";  // or "mse" (one-hot targets for classification data)
};

struct CheckpointConfig {
  std::string dir;                  // empty: no checkpoints, no resume
  std::int64_t interval_steps = 0;  // > 0: also every N steps; always at the end of training
  int keep_last = 2;                // older checkpoints are removed
};

struct RuntimeConfig {
  int threads = 0;               // > 0: intra-op threads; 0: OMP_NUM_THREADS, else LibTorch's
  std::string backend = "gloo";  // "gloo", "nccl" or "gloo-as-nccl" (CommOptions)
  double timeout_s = 300;        // store and collective timeout
  double bucket_cap_mb = 25;     // gradient bucket size cap
  // After a collective fails: how long survivors wait for each other's mark in the store
  // before naming the ranks that did not respond (docs/fault-tolerance.md).
  double unresponsive_wait_s = 5;
  bool overlap = true;                  // all-reduce buckets during backward (false: after it)
  bool find_unused_parameters = false;  // parameters without a gradient count as zero
  bool shared_memory = true;            // gloo on one node: all-reduce through shared memory
  bool broadcast_buffers = true;        // rank 0's buffers broadcast before every forward
  std::string comm_hook = "none";       // "bf16", "fp16": gradients sent compressed
  std::string autocast = "none";        // "bf16": forward passes in bfloat16 on the CPU
  std::string init_method = "env://";   // env://, tcp://HOST:PORT, file:///PATH (init_method.h)
  // A lost rank: "restart" (the launcher restarts every rank, which resume from the last
  // checkpoint) or "peer" (under ddprun --restart-scope rank the survivors keep running and
  // the replacement gets the state from them; docs/fault-tolerance.md).
  std::string recovery = "restart";
};

// Preemption notices: signals that stop training cleanly at a step all ranks agree on,
// after a checkpoint, with exit code 75 (docs/fault-tolerance.md).
struct PreemptionConfig {
  // Names from SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2; empty: default dispositions.
  std::vector<std::string> signals = {"SIGTERM", "SIGUSR1", "SIGUSR2"};
  // > 0: ranks agree every N steps; 0: every ~0.1 s of training, measured (auto).
  std::int64_t check_every_steps = 0;
};

struct MetricsConfig {
  std::string file;  // empty: none; else rank 0 appends one JSON line per epoch
  // > 0: also a line every N steps (rank 0's loss and rate over them, the learning rate);
  // needs `file`.
  std::int64_t every_steps = 0;
};

struct ProgressConfig {
  bool quiet = false;            // no progress reports; the per-epoch line stays
  std::int64_t log_every = 100;  // steps between plain progress lines when not on a terminal
  bool stragglers = true;        // gather each rank's compute and wait time; name slow ranks
};

struct DiagnosticsConfig {
  bool check_replicas =
      false;  // after every step, fail unless all ranks' parameters and buffers agree
  std::string final_params_file;  // rank 0 writes the final parameters here as JSON
  // Test hooks (0: off). After step N, every rank prints "holding after step N" and
  // waits for a preemption signal before going on.
  std::int64_t hold_after_step = 0;
  // Rank 0 prints "holding checkpoint write" once checkpoint N is durable under its
  // temporary name, and waits there for SIGKILL (never renames it).
  std::int64_t hold_checkpoint_write_at_step = 0;
  bool no_gradient_sync = false;  // benchmarks only: never average gradients (ranks diverge)
  // Test hook for stalls and stragglers: from step `delay_after_step` on, rank `delay_rank`
  // sleeps `delay_ms` before each step's backward (-1: off).
  int delay_rank = -1;
  std::int64_t delay_after_step = 0;
  std::int64_t delay_ms = 0;
  // Test hooks for lost ranks (-1: off), in a job's first process of a rank only: rank
  // `kill_rank` SIGKILLs itself in step `kill_at_step` (counted from 1), in its "forward",
  // its "backward" (once the last layers' gradients were sent, before the first layer's), its
  // "optimizer" step, or its "checkpoint" (the checkpoint of step `kill_at_step`, as the
  // ranks gather for it); rank `kill_rank_in_recovery` SIGKILLs itself in the job's first
  // recovery, in the new group before the state is sent. With `kill_node`, `kill_rank` first
  // SIGKILLs its launcher (its parent, ddprun): its node is lost, every worker on it with it.
  int kill_rank = -1;
  std::int64_t kill_at_step = 1;
  std::string kill_in = "forward";
  bool kill_node = false;
  int kill_rank_in_recovery = -1;
};

struct Config {
  ModelConfig model;
  DataConfig data;
  OptimizerConfig optimizer;
  TrainConfig train;
  CheckpointConfig checkpoint;
  RuntimeConfig runtime;
  MetricsConfig metrics;
  ProgressConfig progress;
  DiagnosticsConfig diagnostics;
  PreemptionConfig preemption;
};

// Parses `text` (the contents of `source`, which only names it in errors). Throws
// ddprun::ConfigError with "SOURCE: /pointer: reason" on any problem; returns a config
// that passed validate_config.
Config parse_config(const std::string& text, const std::string& source);

// Reads and parses a file. Throws ddprun::ConfigError (also when it cannot be read).
Config load_config(const std::string& path);

// Checks cross-field rules and ranges (also after command-line overrides). Throws
// ddprun::ConfigError naming `source` and the pointer of the offending key.
void validate_config(const Config& config, const std::string& source);

}  // namespace ddprun::worker
