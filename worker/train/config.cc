#include "config.h"

#include "ddprun/contract/errors.h"
#include "ddprun/worker/init_method.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace ddprun::worker {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& pointer,
                       const std::string& why) {
  throw ddprun::ConfigError(source + ": " + pointer + ": " + why,
                            "see docs/config.md for the keys and their ranges");
}

// Reads one JSON object whose keys must all be in a known set.
class ObjectReader {
 public:
  // Rejects unknown keys first: a misspelt key is a better message than the missing one.
  ObjectReader(const json& object, std::string pointer, const std::string& source,
               std::set<std::string> known)
      : object_(object), pointer_(std::move(pointer)), source_(source), known_(std::move(known)) {
    if (!object_.is_object()) fail(source_, pointer_.empty() ? "/" : pointer_, "must be an object");
    for (const auto& [key, value] : object_.items()) {
      if (known_.count(key) != 0) continue;
      std::string list;
      for (const auto& k : known_) list += (list.empty() ? "" : ", ") + k;
      fail(source_, pointer_ + "/" + key, "unknown key (known here: " + list + ")");
    }
  }

  std::string pointer(const char* key) const { return pointer_ + "/" + key; }

  const json* get(const char* key, bool required) {
    const auto it = object_.find(key);
    if (it == object_.end()) {
      if (required) fail(source_, pointer(key), "required key is missing");
      return nullptr;
    }
    return &*it;
  }

  void read(const char* key, std::string& out, bool required = false) {
    if (const json* v = get(key, required)) {
      if (!v->is_string()) fail(source_, pointer(key), "must be a string");
      out = v->get<std::string>();
    }
  }

  void read(const char* key, bool& out, bool required = false) {
    if (const json* v = get(key, required)) {
      if (!v->is_boolean()) fail(source_, pointer(key), "must be true or false");
      out = v->get<bool>();
    }
  }

  void read(const char* key, double& out, bool required = false) {
    if (const json* v = get(key, required)) {
      if (!v->is_number()) fail(source_, pointer(key), "must be a number");
      out = v->get<double>();
    }
  }

  void read(const char* key, std::int64_t& out, bool required = false) {
    if (const json* v = get(key, required)) {
      if (!v->is_number_integer()) fail(source_, pointer(key), "must be an integer");
      if (v->is_number_unsigned() &&
          v->get<std::uint64_t>() >
              static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        fail(source_, pointer(key), "is too large");
      }
      out = v->get<std::int64_t>();
    }
  }

  void read(const char* key, int& out, bool required = false) {
    std::int64_t wide = out;
    read(key, wide, required);
    if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max()) {
      fail(source_, pointer(key), "is out of range");
    }
    out = static_cast<int>(wide);
  }

  void read(const char* key, std::vector<std::string>& out, bool required = false) {
    if (const json* v = get(key, required)) {
      if (!v->is_array()) fail(source_, pointer(key), "must be a list of strings");
      std::vector<std::string> items;
      for (std::size_t i = 0; i < v->size(); ++i) {
        if (!(*v)[i].is_string()) {
          fail(source_, pointer(key) + "/" + std::to_string(i), "must be a string");
        }
        items.push_back((*v)[i].get<std::string>());
      }
      out = std::move(items);
    }
  }

  void read(const char* key, std::uint64_t& out, bool required = false) {
    if (const json* v = get(key, required)) {
      if (!v->is_number_unsigned()) fail(source_, pointer(key), "must be an integer >= 0");
      out = v->get<std::uint64_t>();
    }
  }

 private:
  const json& object_;
  std::string pointer_;
  const std::string& source_;
  std::set<std::string> known_;
};

void check(bool ok, const std::string& source, const std::string& pointer, const std::string& why) {
  if (!ok) fail(source, pointer, why);
}

void check_one_of(const std::string& value, std::initializer_list<const char*> allowed,
                  const std::string& source, const std::string& pointer) {
  std::string list;
  for (const char* a : allowed) {
    if (value == a) return;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  fail(source, pointer, "must be one of " + list + " (got '" + value + "')");
}

}  // namespace

int model_block_count(const std::string& name) {
  if (name == "mlp" || name == "cnn") return 3;
  return name == "toy" ? 2 : 0;
}

void validate_config(const Config& c, const std::string& src) {
  check_one_of(c.model.name, {"mlp", "cnn", "toy"}, src, "/model/name");
  const int blocks = model_block_count(c.model.name);
  check(c.model.stages >= 1 && c.model.stages <= blocks, src, "/model/stages",
        "model '" + c.model.name + "' splits into 1 to " + std::to_string(blocks) + " stages");
  check(c.model.split_size >= 0, src, "/model/split_size", "must be >= 0");
  check_one_of(c.model.batch_norm, {"none", "local", "sync"}, src, "/model/batch_norm");
  check(c.model.batch_norm == "none" || c.model.name != "mlp", src, "/model/batch_norm",
        "models cnn and toy have batch norms, mlp has none");

  check_one_of(c.data.name, {"fashion_mnist", "synthetic"}, src, "/data/name");
  const bool toy = c.model.name == "toy";
  check(toy == (c.data.name == "synthetic"), src, "/data/name",
        toy ? "model 'toy' needs 'synthetic' data"
            : "model '" + c.model.name + "' needs 'fashion_mnist' data");
  check(c.data.train_limit >= 0, src, "/data/train_limit", "must be >= 0");
  check(c.data.synthetic_train > 0, src, "/data/synthetic_train", "must be > 0");
  check(c.data.synthetic_test > 0, src, "/data/synthetic_test", "must be > 0");
  check(!c.data.path.empty(), src, "/data/path", "must not be empty");

  check_one_of(c.optimizer.name, {"sgd", "adam", "adamw"}, src, "/optimizer/name");
  check(c.optimizer.lr > 0, src, "/optimizer/lr", "must be > 0");
  check(c.optimizer.momentum >= 0 && c.optimizer.momentum < 1, src, "/optimizer/momentum",
        "must be in [0, 1)");
  check(c.optimizer.momentum == 0 || c.optimizer.name == "sgd", src, "/optimizer/momentum",
        "applies to sgd only");
  check(c.optimizer.weight_decay >= 0, src, "/optimizer/weight_decay", "must be >= 0");
  check(c.optimizer.clip_grad_norm >= 0, src, "/optimizer/clip_grad_norm",
        "must be >= 0 (0: no clipping)");
  check(c.optimizer.warmup_steps >= 0, src, "/optimizer/warmup_steps", "must be >= 0");
  check_one_of(c.optimizer.decay, {"none", "cosine", "step"}, src, "/optimizer/decay");
  check(c.optimizer.min_lr >= 0 && c.optimizer.min_lr < c.optimizer.lr, src, "/optimizer/min_lr",
        "must be >= 0 and below /optimizer/lr");
  check(c.optimizer.min_lr == 0 || c.optimizer.decay == "cosine", src, "/optimizer/min_lr",
        "applies to decay \"cosine\" only");
  check(c.optimizer.decay != "step" || c.optimizer.decay_every >= 1, src, "/optimizer/decay_every",
        "decay \"step\" needs it >= 1");
  check(c.optimizer.zero_stage == 0 || c.optimizer.zero_stage == 1, src, "/optimizer/zero_stage",
        "must be 0 or 1");
  check(c.optimizer.zero_stage == 0 || !c.runtime.find_unused_parameters, src,
        "/optimizer/zero_stage", "1 does not go with runtime.find_unused_parameters");
  check(c.optimizer.decay_gamma > 0 && c.optimizer.decay_gamma <= 1, src, "/optimizer/decay_gamma",
        "must be in (0, 1]");

  check(c.train.epochs >= 1, src, "/train/epochs", "must be >= 1");
  check(c.train.batch_size_per_rank >= 1, src, "/train/batch_size_per_rank", "must be >= 1");
  check(c.train.max_steps >= 0, src, "/train/max_steps", "must be >= 0 (0: no limit)");
  check(c.train.accumulate_steps >= 1, src, "/train/accumulate_steps", "must be >= 1");
  check_one_of(c.train.loss, {"cross_entropy", "mse"}, src, "/train/loss");

  check(c.checkpoint.interval_steps >= 0, src, "/checkpoint/interval_steps", "must be >= 0");
  check(c.checkpoint.interval_steps == 0 || !c.checkpoint.dir.empty(), src,
        "/checkpoint/interval_steps", "needs /checkpoint/dir");
  check(c.checkpoint.keep_last >= 1, src, "/checkpoint/keep_last", "must be >= 1");

  check(c.metrics.every_steps >= 0, src, "/metrics/every_steps",
        "must be >= 0 (0: per epoch only)");
  check(c.progress.log_every >= 0, src, "/progress/log_every", "must be >= 0 (0: no lines)");

  check(c.runtime.threads >= 0, src, "/runtime/threads", "must be >= 0 (0: from OMP_NUM_THREADS)");
  check_one_of(c.runtime.backend, {"gloo", "nccl", "gloo-as-nccl"}, src, "/runtime/backend");
  check_one_of(c.runtime.comm_hook, {"none", "bf16", "fp16"}, src, "/runtime/comm_hook");
  check_one_of(c.runtime.autocast, {"none", "bf16", "fp16"}, src, "/runtime/autocast");
  check(c.runtime.autocast != "fp16" || c.runtime.backend == "nccl", src, "/runtime/autocast",
        "fp16 runs on GPUs only (backend nccl); the CPU's autocast is bf16");
  check(c.runtime.timeout_s > 0, src, "/runtime/timeout_s", "must be > 0");
  try {
    parse_init_method(c.runtime.init_method);
  } catch (const ddprun::ConfigError& e) {
    fail(src, "/runtime/init_method", e.what());
  }
  check(!(c.diagnostics.no_gradient_sync && c.diagnostics.check_replicas), src,
        "/diagnostics/no_gradient_sync", "contradicts /diagnostics/check_replicas");
  check(c.runtime.bucket_cap_mb > 0 && c.runtime.bucket_cap_mb <= 4096, src,
        "/runtime/bucket_cap_mb", "must be in (0, 4096]");
  check(c.runtime.unresponsive_wait_s > 0, src, "/runtime/unresponsive_wait_s", "must be > 0");
  check_one_of(c.runtime.recovery, {"restart", "peer"}, src, "/runtime/recovery");
  check(c.runtime.recovery != "peer" || c.runtime.init_method.rfind("file://", 0) != 0, src,
        "/runtime/recovery",
        "\"peer\" needs env:// or tcp:// (runtime.init_method): a file:// store removes its "
        "file once as many processes as the world size have left, replacements included");
  check(c.runtime.recovery != "peer" || c.runtime.backend != "nccl", src, "/runtime/recovery",
        "\"peer\" needs a CPU backend (gloo): a NCCL communicator whose peer died cannot be "
        "ended and rejoined here");

  for (std::size_t i = 0; i < c.preemption.signals.size(); ++i) {
    check_one_of(c.preemption.signals[i], {"SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2"},
                 src, "/preemption/signals/" + std::to_string(i));
  }
  check(c.preemption.check_every_steps >= 0, src, "/preemption/check_every_steps",
        "must be >= 0 (0: auto)");
  check(c.diagnostics.hold_after_step >= 0, src, "/diagnostics/hold_after_step", "must be >= 0");
  check(c.diagnostics.delay_rank >= -1, src, "/diagnostics/delay_rank", "must be >= -1");
  check(c.diagnostics.delay_after_step >= 0, src, "/diagnostics/delay_after_step", "must be >= 0");
  check(c.diagnostics.delay_ms >= 0, src, "/diagnostics/delay_ms", "must be >= 0");
  check(c.diagnostics.kill_rank >= -1, src, "/diagnostics/kill_rank", "must be >= -1");
  check(c.diagnostics.kill_at_step >= 1, src, "/diagnostics/kill_at_step", "must be >= 1");
  check_one_of(c.diagnostics.kill_in, {"forward", "backward", "optimizer", "checkpoint"}, src,
               "/diagnostics/kill_in");
  check(c.diagnostics.kill_rank_in_recovery >= -1, src, "/diagnostics/kill_rank_in_recovery",
        "must be >= -1");
  check(c.diagnostics.hold_checkpoint_write_at_step >= 0, src,
        "/diagnostics/hold_checkpoint_write_at_step", "must be >= 0");
}

Config parse_config(const std::string& text, const std::string& source) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    // e.what() starts with "[json.exception.parse_error.101] ": keep only the reason.
    std::string what = e.what();
    if (const auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    throw ddprun::ConfigError(source + ": invalid JSON: " + what);
  }

  Config c;
  ObjectReader top(root, "", source,
                   {"model", "data", "optimizer", "train", "checkpoint", "runtime", "metrics",
                    "progress", "diagnostics", "preemption"});
  const auto section = [&](const char* key, bool required, std::set<std::string> keys,
                           auto&& fill) {
    if (const json* v = top.get(key, required)) {
      ObjectReader r(*v, top.pointer(key), source, std::move(keys));
      fill(r);
    }
  };
  section("model", true, {"name", "stages", "split_size", "batch_norm"}, [&](ObjectReader& r) {
    r.read("name", c.model.name, true);
    r.read("stages", c.model.stages);
    r.read("split_size", c.model.split_size);
    r.read("batch_norm", c.model.batch_norm);
  });
  section(
      "data", true,
      {"name", "path", "train_limit", "synthetic_train", "synthetic_test", "shuffle", "drop_last"},
      [&](ObjectReader& r) {
        r.read("name", c.data.name, true);
        r.read("path", c.data.path);
        r.read("train_limit", c.data.train_limit);
        r.read("synthetic_train", c.data.synthetic_train);
        r.read("synthetic_test", c.data.synthetic_test);
        r.read("shuffle", c.data.shuffle);
        r.read("drop_last", c.data.drop_last);
      });
  section("optimizer", true,
          {"name", "lr", "momentum", "weight_decay", "clip_grad_norm", "warmup_steps", "decay",
           "min_lr", "decay_every", "decay_gamma", "zero_stage"},
          [&](ObjectReader& r) {
            r.read("name", c.optimizer.name, true);
            r.read("lr", c.optimizer.lr, true);
            r.read("momentum", c.optimizer.momentum);
            r.read("weight_decay", c.optimizer.weight_decay);
            r.read("clip_grad_norm", c.optimizer.clip_grad_norm);
            r.read("warmup_steps", c.optimizer.warmup_steps);
            r.read("decay", c.optimizer.decay);
            r.read("min_lr", c.optimizer.min_lr);
            r.read("decay_every", c.optimizer.decay_every);
            r.read("decay_gamma", c.optimizer.decay_gamma);
            r.read("zero_stage", c.optimizer.zero_stage);
          });
  section("train", true,
          {"epochs", "batch_size_per_rank", "seed", "max_steps", "loss", "accumulate_steps"},
          [&](ObjectReader& r) {
            r.read("epochs", c.train.epochs, true);
            r.read("batch_size_per_rank", c.train.batch_size_per_rank, true);
            r.read("seed", c.train.seed, true);
            r.read("max_steps", c.train.max_steps);
            r.read("accumulate_steps", c.train.accumulate_steps);
            r.read("loss", c.train.loss);
          });
  section("checkpoint", false, {"dir", "interval_steps", "keep_last"}, [&](ObjectReader& r) {
    r.read("dir", c.checkpoint.dir);
    r.read("interval_steps", c.checkpoint.interval_steps);
    r.read("keep_last", c.checkpoint.keep_last);
  });
  section("runtime", false,
          {"threads", "backend", "timeout_s", "bucket_cap_mb", "unresponsive_wait_s", "overlap",
           "find_unused_parameters", "shared_memory", "init_method", "broadcast_buffers",
           "comm_hook", "autocast", "recovery"},
          [&](ObjectReader& r) {
            r.read("threads", c.runtime.threads);
            r.read("backend", c.runtime.backend);
            r.read("timeout_s", c.runtime.timeout_s);
            r.read("bucket_cap_mb", c.runtime.bucket_cap_mb);
            r.read("unresponsive_wait_s", c.runtime.unresponsive_wait_s);
            r.read("overlap", c.runtime.overlap);
            r.read("find_unused_parameters", c.runtime.find_unused_parameters);
            r.read("shared_memory", c.runtime.shared_memory);
            r.read("init_method", c.runtime.init_method);
            r.read("broadcast_buffers", c.runtime.broadcast_buffers);
            r.read("comm_hook", c.runtime.comm_hook);
            r.read("autocast", c.runtime.autocast);
            r.read("recovery", c.runtime.recovery);
          });
  section("metrics", false, {"file", "every_steps"}, [&](ObjectReader& r) {
    r.read("file", c.metrics.file);
    r.read("every_steps", c.metrics.every_steps);
  });
  section("progress", false, {"quiet", "log_every", "stragglers"}, [&](ObjectReader& r) {
    r.read("quiet", c.progress.quiet);
    r.read("stragglers", c.progress.stragglers);
    r.read("log_every", c.progress.log_every);
  });
  section(
      "diagnostics", false,
      {"check_replicas", "final_params_file", "hold_after_step", "hold_checkpoint_write_at_step",
       "no_gradient_sync", "delay_rank", "delay_after_step", "delay_ms", "kill_rank",
       "kill_at_step", "kill_in", "kill_node", "kill_rank_in_recovery"},
      [&](ObjectReader& r) {
        r.read("no_gradient_sync", c.diagnostics.no_gradient_sync);
        r.read("check_replicas", c.diagnostics.check_replicas);
        r.read("final_params_file", c.diagnostics.final_params_file);
        r.read("hold_after_step", c.diagnostics.hold_after_step);
        r.read("hold_checkpoint_write_at_step", c.diagnostics.hold_checkpoint_write_at_step);
        r.read("delay_rank", c.diagnostics.delay_rank);
        r.read("delay_after_step", c.diagnostics.delay_after_step);
        r.read("delay_ms", c.diagnostics.delay_ms);
        r.read("kill_rank", c.diagnostics.kill_rank);
        r.read("kill_at_step", c.diagnostics.kill_at_step);
        r.read("kill_in", c.diagnostics.kill_in);
        r.read("kill_node", c.diagnostics.kill_node);
        r.read("kill_rank_in_recovery", c.diagnostics.kill_rank_in_recovery);
      });
  section("preemption", false, {"signals", "check_every_steps"}, [&](ObjectReader& r) {
    r.read("signals", c.preemption.signals);
    r.read("check_every_steps", c.preemption.check_every_steps);
  });
  validate_config(c, source);
  return c;
}

Config load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ddprun::ConfigError(path + ": cannot open config file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ddprun::ConfigError(path + ": cannot read config file");
  return parse_config(text.str(), path);
}

}  // namespace ddprun::worker
