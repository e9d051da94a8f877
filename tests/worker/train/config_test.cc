#include "config.h"

#include <gtest/gtest.h>
#include "ddprun/contract/errors.h"

#include <string>
#include <vector>

namespace ddprun::worker {
namespace {

constexpr const char* kMinimal = R"({
  "model": {"name": "mlp"},
  "data": {"name": "fashion_mnist"},
  "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
  "train": {"epochs": 2, "batch_size_per_rank": 32, "seed": 1}
})";

std::string error_of(const std::string& text) {
  try {
    parse_config(text, "x.json");
  } catch (const ddprun::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

// `kMinimal` with `from` replaced by `to` (once).
std::string edit(const std::string& from, const std::string& to) {
  std::string text = kMinimal;
  const auto pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return text.replace(pos, from.size(), to);
}

TEST(ConfigTest, MinimalConfigGetsDefaults) {
  const Config c = parse_config(kMinimal, "x.json");
  EXPECT_EQ(c.model.name, "mlp");
  EXPECT_EQ(c.data.path, "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(c.optimizer.name, "sgd");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.1);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.9);
  EXPECT_EQ(c.train.epochs, 2);
  EXPECT_EQ(c.train.batch_size_per_rank, 32);
  EXPECT_EQ(c.train.seed, 1u);
  EXPECT_EQ(c.train.max_steps, 0);
  EXPECT_EQ(c.train.loss, "cross_entropy");
  EXPECT_EQ(c.runtime.backend, "gloo");
  EXPECT_TRUE(c.checkpoint.dir.empty());
  EXPECT_FALSE(c.diagnostics.check_replicas);
  EXPECT_EQ(c.preemption.signals, (std::vector<std::string>{"SIGTERM", "SIGUSR1", "SIGUSR2"}));
  EXPECT_EQ(c.preemption.check_every_steps, 0);
  EXPECT_DOUBLE_EQ(c.runtime.unresponsive_wait_s, 5);
  EXPECT_TRUE(c.runtime.overlap);
  EXPECT_FALSE(c.runtime.find_unused_parameters);
  EXPECT_TRUE(c.runtime.shared_memory);
  EXPECT_FALSE(c.diagnostics.no_gradient_sync);
  EXPECT_TRUE(c.runtime.broadcast_buffers);
  EXPECT_EQ(c.model.stages, 1);
  EXPECT_EQ(c.model.split_size, 0);
}

TEST(ConfigTest, EveryOptionalSectionIsRead) {
  const Config c = parse_config(R"({
    "model": {"name": "toy", "stages": 2, "split_size": 4},
    "data": {"name": "synthetic", "synthetic_train": 64, "synthetic_test": 16, "shuffle": false,
             "drop_last": true, "train_limit": 32},
    "optimizer": {"name": "adam", "lr": 0.001, "weight_decay": 0.01},
    "train": {"epochs": 1, "batch_size_per_rank": 8, "seed": 3, "max_steps": 5, "loss": "mse"},
    "checkpoint": {"dir": "/tmp/c", "interval_steps": 2, "keep_last": 3},
    "runtime": {"threads": 1, "backend": "nccl", "timeout_s": 30, "bucket_cap_mb": 1,
                "overlap": false, "find_unused_parameters": true,
                "shared_memory": false, "broadcast_buffers": false},
    "metrics": {"file": "m.jsonl", "every_steps": 25},
    "diagnostics": {"check_replicas": true, "final_params_file": "p.json",
                    "hold_after_step": 4, "hold_checkpoint_write_at_step": 6},
    "preemption": {"signals": ["SIGUSR1"], "check_every_steps": 3}
  })",
                                "y.json");
  EXPECT_EQ(c.data.synthetic_train, 64);
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_TRUE(c.data.drop_last);
  EXPECT_EQ(c.train.max_steps, 5);
  EXPECT_EQ(c.checkpoint.dir, "/tmp/c");
  EXPECT_EQ(c.checkpoint.keep_last, 3);
  EXPECT_EQ(c.runtime.backend, "nccl");
  EXPECT_DOUBLE_EQ(c.runtime.bucket_cap_mb, 1);
  EXPECT_FALSE(c.runtime.overlap);
  EXPECT_TRUE(c.runtime.find_unused_parameters);
  EXPECT_FALSE(c.runtime.shared_memory);
  EXPECT_FALSE(c.runtime.broadcast_buffers);
  EXPECT_EQ(c.model.stages, 2);
  EXPECT_EQ(c.model.split_size, 4);
  EXPECT_EQ(c.metrics.file, "m.jsonl");
  EXPECT_EQ(c.metrics.every_steps, 25);
  EXPECT_TRUE(c.diagnostics.check_replicas);
  EXPECT_EQ(c.diagnostics.final_params_file, "p.json");
  EXPECT_EQ(c.diagnostics.hold_after_step, 4);
  EXPECT_EQ(c.diagnostics.hold_checkpoint_write_at_step, 6);
  EXPECT_EQ(c.preemption.signals, std::vector<std::string>{"SIGUSR1"});
  EXPECT_EQ(c.preemption.check_every_steps, 3);
}

struct BadCase {
  std::string from, to, error;
};

TEST(ConfigTest, BadConfigsNameFileAndPointer) {
  const std::vector<BadCase> cases = {
      {"\"lr\": 0.1", "\"lr\": 0", "x.json: /optimizer/lr: must be > 0"},
      {"\"lr\": 0.1", "\"lr\": \"fast\"", "x.json: /optimizer/lr: must be a number"},
      {"\"lr\": 0.1, ", "", "x.json: /optimizer/lr: required key is missing"},
      {"\"lr\": 0.1", "\"lrate\": 0.1",
       "x.json: /optimizer/lrate: unknown key (known here: clip_grad_norm, decay, decay_every, "
       "decay_gamma, lr, min_lr, momentum, name, warmup_steps, weight_decay, zero_stage)"},
      {"\"lr\": 0.1", "\"lr\": 0.1, \"zero_stage\": 2",
       "x.json: /optimizer/zero_stage: must be 0 or 1"},
      {"\"momentum\": 0.9}",
       "\"momentum\": 0.9, \"zero_stage\": 1}, \"runtime\": {\"find_unused_parameters\": true}",
       "x.json: /optimizer/zero_stage: 1 does not go with runtime.find_unused_parameters"},
      {"\"epochs\": 2", "\"epochs\": 0", "x.json: /train/epochs: must be >= 1"},
      {"\"seed\": 1}", "\"seed\": 1}, \"metrics\": {\"every_steps\": -1}",
       "x.json: /metrics/every_steps: must be >= 0 (0: per epoch only)"},
      {"\"epochs\": 2", "\"epochs\": 2.5", "x.json: /train/epochs: must be an integer"},
      {"\"seed\": 1", "\"seed\": -1", "x.json: /train/seed: must be an integer >= 0"},
      {"\"momentum\": 0.9", "\"momentum\": 1", "x.json: /optimizer/momentum: must be in [0, 1)"},
      {"\"name\": \"mlp\"", "\"name\": \"resnet\"",
       "x.json: /model/name: must be one of mlp, cnn, toy (got 'resnet')"},
      {"\"name\": \"mlp\"", "\"name\": \"toy\"",
       "x.json: /data/name: model 'toy' needs 'synthetic' data"},
      {"\"model\": {\"name\": \"mlp\"},", "", "x.json: /model: required key is missing"},
      {"\"name\": \"mlp\"", "\"name\": \"mlp\", \"stages\": 4",
       "x.json: /model/stages: model 'mlp' splits into 1 to 3 stages"},
      {"\"name\": \"mlp\"", "\"name\": \"mlp\", \"stages\": 0",
       "x.json: /model/stages: model 'mlp' splits into 1 to 3 stages"},
      {"\"name\": \"mlp\"", "\"name\": \"mlp\", \"split_size\": -1",
       "x.json: /model/split_size: must be >= 0"},
      {"\"name\": \"mlp\"", "\"name\": \"mlp\", \"batch_norm\": \"sync\"",
       "x.json: /model/batch_norm: models cnn and toy have batch norms, mlp has none"},
      {"\"model\": {\"name\": \"mlp\"}", "\"model\": \"mlp\"", "x.json: /model: must be an object"},
      {"\"model\": {", "\"extra\": 1, \"model\": {",
       "x.json: /extra: unknown key (known here: checkpoint, data, diagnostics, metrics, model, "
       "optimizer, preemption, progress, runtime, train)"},
      {"\"seed\": 1", "\"seed\": 1, \"max_steps\": -2",
       "x.json: /train/max_steps: must be >= 0 (0: no limit)"},
      {"\"seed\": 1", "\"seed\": 1, \"accumulate_steps\": 0",
       "x.json: /train/accumulate_steps: must be >= 1"},
      {"\"seed\": 1}", "\"seed\": 1}, \"checkpoint\": {\"interval_steps\": 5}",
       "x.json: /checkpoint/interval_steps: needs /checkpoint/dir"},
      {"\"seed\": 1}", "\"seed\": 1}, \"runtime\": {\"backend\": \"mpi\"}",
       "x.json: /runtime/backend: must be one of gloo, nccl, gloo-as-nccl (got 'mpi')"},
      {"\"lr\": 0.1", "\"lr\": 0.1, \"decay\": \"linear\"",
       "x.json: /optimizer/decay: must be one of none, cosine, step (got 'linear')"},
      {"\"lr\": 0.1", "\"lr\": 0.1, \"decay\": \"cosine\", \"min_lr\": 0.1",
       "x.json: /optimizer/min_lr: must be >= 0 and below /optimizer/lr"},
      {"\"lr\": 0.1", "\"lr\": 0.1, \"decay\": \"step\"",
       "x.json: /optimizer/decay_every: decay \"step\" needs it >= 1"},
      {"\"lr\": 0.1", "\"lr\": 0.1, \"clip_grad_norm\": -1",
       "x.json: /optimizer/clip_grad_norm: must be >= 0 (0: no clipping)"},
      {"\"seed\": 1}", "\"seed\": 1}, \"runtime\": {\"autocast\": \"fp16\"}",
       "x.json: /runtime/autocast: fp16 runs on GPUs only (backend nccl); the CPU's autocast is "
       "bf16"},
      {"\"seed\": 1}", "\"seed\": 1}, \"runtime\": {\"autocast\": \"fp32\"}",
       "x.json: /runtime/autocast: must be one of none, bf16, fp16 (got 'fp32')"},
      {"\"seed\": 1}", "\"seed\": 1}, \"runtime\": {\"comm_hook\": \"int8\"}",
       "x.json: /runtime/comm_hook: must be one of none, bf16, fp16 (got 'int8')"},
      {"\"seed\": 1}", "\"seed\": 1}, \"preemption\": {\"signals\": [\"SIGTERM\", \"SIGKILL\"]}",
       "x.json: /preemption/signals/1: must be one of SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2 "
       "(got 'SIGKILL')"},
      {"\"seed\": 1}", "\"seed\": 1}, \"preemption\": {\"signals\": \"SIGTERM\"}",
       "x.json: /preemption/signals: must be a list of strings"},
      {"\"seed\": 1}", "\"seed\": 1}, \"preemption\": {\"check_every_steps\": -1}",
       "x.json: /preemption/check_every_steps: must be >= 0 (0: auto)"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(error_of(edit(c.from, c.to)), c.error) << c.from << " -> " << c.to;
  }
}

TEST(ConfigTest, InvalidJsonNamesTheFile) {
  const std::string error = error_of("{\"model\": ");
  EXPECT_EQ(error.rfind("x.json: invalid JSON: ", 0), 0u) << error;
}

TEST(ConfigTest, MissingFileIsAConfigError) {
  EXPECT_THROW(load_config(std::string("/nonexistent/ddprun.json")), ddprun::ConfigError);
}

TEST(ConfigTest, ShippedConfigsParse) {
  for (const char* name : {"fashion_mlp", "fashion_cnn", "toy"}) {
    EXPECT_NO_THROW(load_config(std::string(DDPRUN_CONFIG_DIR) + "/" + name + ".json")) << name;
  }
}

}  // namespace
}  // namespace ddprun::worker
