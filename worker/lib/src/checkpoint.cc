#include "ddprun/worker/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <sstream>
#include <system_error>

#include "ddprun/worker/atomic_file.h"
#include "ddprun/worker/errors.h"
#include "torch_compat.h"

namespace ddprun::worker {
namespace {

constexpr std::int64_t kFormatVersion = 2;
const std::regex kCheckpointName(R"(ckpt-([0-9]{8,})\.pt)");
// What crashed writers leave: ".ckpt-<step>.pt.tmp.<pid>.<random>" and ".latest.tmp...".
const std::regex kTemporaryName(R"(\.(ckpt-[0-9]{8,}\.pt|latest)\.tmp\.[0-9]+\.[0-9]+)");
// "latest": "<name> <bytes> <crc32, 8 hex digits>\n".
const std::regex kRecord(R"((ckpt-[0-9]{8,}\.pt) ([0-9]+) ([0-9a-f]{8})\n?)");

std::string checkpoint_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "ckpt-%08lld.pt", static_cast<long long>(step));
  return buf;
}

std::uint32_t crc32_of(std::string_view bytes) {
  return static_cast<std::uint32_t>(
      ::crc32_z(0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

void write_int(torch::serialize::OutputArchive& a, const std::string& key, std::int64_t v) {
  a.write(key, torch::tensor(v, torch::kLong));
}

std::int64_t read_int(torch::serialize::InputArchive& a, const std::string& key,
                      const std::string& path) {
  torch::Tensor t;
  if (!a.try_read(key, t) || t.numel() != 1) {
    throw CheckpointError(path + ": not a ddp-train checkpoint (no '" + key + "')");
  }
  return t.item<std::int64_t>();
}

// A symbolic link or another system error while touching the folder, as a CheckpointError.
[[noreturn]] void rethrow_system(const std::system_error& e) {
  if (e.code() == std::errc::too_many_symbolic_link_levels) {
    throw CheckpointError(e.what(),
                          "checkpoints never go through symbolic links: give checkpoint.dir as "
                          "the real folder");
  }
  throw CheckpointError(std::string("checkpoint: ") + e.what());
}

// After a save at `saved_step` (which "latest" now names): removes the checkpoints of later
// steps (a run that crashed before "latest" named them wrote a history that was not
// resumed), all but the newest `keep` of the others by step (as numbers: names grow a digit
// at step 100,000,000), and leftovers of writers that died mid-write (only one job writes
// a folder at a time).
void prune(const SecureDir& dir, int keep, std::int64_t saved_step) {
  std::vector<std::pair<std::int64_t, std::string>> older;
  for (const auto& name : dir.list()) {
    std::smatch match;
    if (std::regex_match(name, match, kCheckpointName) && match[1].length() <= 18) {
      const std::int64_t step = std::stoll(match[1].str());
      if (step > saved_step) {
        dir.remove(name);
      } else {
        older.emplace_back(step, name);
      }
    }
    if (std::regex_match(name, kTemporaryName)) dir.remove(name);
  }
  std::sort(older.begin(), older.end());
  const auto excess = static_cast<std::ptrdiff_t>(older.size()) - keep;
  for (std::ptrdiff_t i = 0; i < excess; ++i) dir.remove(older[static_cast<std::size_t>(i)].second);
}

using Shapes = std::vector<std::pair<std::string, std::vector<std::int64_t>>>;

// The model's parameters and buffers with their shapes: InputArchive resizes a mismatched
// tensor silently, so they are compared before and after loading.
Shapes model_shapes(const torch::nn::Module& model) {
  Shapes shapes;
  for (const auto& p : model.named_parameters(true)) {
    shapes.emplace_back("parameter " + p.key(), p.value().sizes().vec());
  }
  for (const auto& b : model.named_buffers(true)) {
    shapes.emplace_back("buffer " + b.key(), b.value().sizes().vec());
  }
  return shapes;
}

// Optimizer state must have its parameter's shape (SGD's momentum, Adam's moments).
void check_optimizer_state(const std::string& path, const torch::optim::Optimizer& optimizer) {
  std::size_t index = 0;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      std::vector<at::Tensor> tensors;
      if (const auto* state = compat::optimizer_param_state(optimizer, p)) {
        if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state)) {
          tensors = {sgd->momentum_buffer()};
        } else if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state)) {
          tensors = {adam->exp_avg(), adam->exp_avg_sq()};
        } else if (const auto* w = dynamic_cast<const torch::optim::AdamWParamState*>(state)) {
          tensors = {w->exp_avg(), w->exp_avg_sq()};
        }
      }
      for (const auto& t : tensors) {
        if (t.defined() && t.sizes() != p.sizes()) {
          throw CheckpointError(
              path + ": the optimizer state of parameter #" + std::to_string(index) +
              " has another shape in the checkpoint: " + "is it a checkpoint of another model?");
        }
      }
      ++index;
    }
  }
}

}  // namespace

std::string checkpoint_bytes(const torch::nn::Module& model,
                             const torch::optim::Optimizer& optimizer, const CheckpointMeta& meta) {
  torch::serialize::OutputArchive archive;
  write_int(archive, "format_version", kFormatVersion);
  write_int(archive, "step", meta.position.step);
  write_int(archive, "epoch", meta.position.epoch);
  write_int(archive, "batch_in_epoch", meta.position.batch_in_epoch);
  write_int(archive, "seed", static_cast<std::int64_t>(meta.seed));  // bits kept
  write_int(archive, "world_size", meta.world_size);
  write_int(archive, "batch_size_per_rank", meta.batch_size_per_rank);
  if (meta.rng_cpu.defined()) archive.write("rng_cpu", meta.rng_cpu);
  if (meta.rng_device.defined()) archive.write("rng_device", meta.rng_device);
  if (meta.loss_scale.defined()) archive.write("loss_scale", meta.loss_scale);
  torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  archive.write("model", model_archive);
  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

std::string save_checkpoint(const std::string& dir, const torch::nn::Module& model,
                            const torch::optim::Optimizer& optimizer, const CheckpointMeta& meta,
                            int keep_last,
                            const std::function<void(const std::string&)>& before_commit) {
  const std::string bytes = checkpoint_bytes(model, optimizer, meta);
  const std::string name = checkpoint_name(meta.position.step);
  try {
    const SecureDir folder = SecureDir::open(dir, /*create=*/true);
    folder.write_atomically(name, bytes, 0600, before_commit);
    char record[96];
    std::snprintf(record, sizeof record, "%s %zu %08" PRIx32 "\n", name.c_str(), bytes.size(),
                  crc32_of(bytes));
    // Only now, with the checkpoint durable, does "latest" name it.
    folder.write_atomically(kLatestName, record, 0600);
    prune(folder, std::max(keep_last, 1), meta.position.step);
  } catch (const std::system_error& e) {
    rethrow_system(e);
  }
  return name;
}

std::optional<CheckpointRecord> find_latest_checkpoint(const std::string& dir) {
  std::optional<std::string> text;
  try {
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::symlink_status(dir, ec))) return std::nullopt;
    const SecureDir folder = SecureDir::open(dir, /*create=*/false);
    text = folder.read(kLatestName);
    if (!text) return std::nullopt;
    std::smatch m;
    if (!std::regex_match(*text, m, kRecord)) {
      throw CheckpointError(dir + "/" + kLatestName + ": not a checkpoint record",
                            "remove it to start from scratch");
    }
    CheckpointRecord record;
    record.dir = dir;
    record.name = m[1];
    record.step = std::stoll(record.name.substr(5, record.name.size() - 8));
    record.bytes = std::stoull(m[2]);
    record.crc32 = static_cast<std::uint32_t>(std::stoul(m[3], nullptr, 16));
    struct stat st {};
    if (::fstatat(AT_FDCWD, record.path().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      throw CheckpointError(
          dir + "/" + kLatestName + ": names " + record.name + ", which does not exist",
          "remove it to start from scratch");
    }
    return record;
  } catch (const std::system_error& e) {
    rethrow_system(e);
  }
}

CheckpointMeta load_checkpoint(const CheckpointRecord& record, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer) {
  const std::string path = record.path();
  std::optional<std::string> bytes;
  try {
    bytes = SecureDir::open(record.dir, /*create=*/false).read(record.name);
  } catch (const std::system_error& e) {
    rethrow_system(e);
  }
  if (!bytes) throw CheckpointError(path + ": does not exist");
  if (bytes->size() != record.bytes || crc32_of(*bytes) != record.crc32) {
    throw CheckpointError(path + ": incomplete or damaged (" + std::to_string(bytes->size()) +
                              " bytes; " + kLatestName + " records " +
                              std::to_string(record.bytes) + " and another CRC-32)",
                          "remove " + record.dir + "/" + kLatestName + " to start from scratch");
  }
  return load_checkpoint_bytes(*bytes, path, model, optimizer);
}

CheckpointMeta load_checkpoint_bytes(const std::string& bytes, const std::string& path,
                                     torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  // Shapes before loading: InputArchive would silently resize a mismatched tensor.
  const Shapes shapes = model_shapes(model);
  CheckpointMeta meta;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size());
    const auto version = read_int(archive, "format_version", path);
    if (version != kFormatVersion) {
      throw CheckpointError(path + ": format version " + std::to_string(version) +
                            ", this ddp-train reads " + std::to_string(kFormatVersion));
    }
    meta.position.step = read_int(archive, "step", path);
    meta.position.epoch = read_int(archive, "epoch", path);
    meta.position.batch_in_epoch = read_int(archive, "batch_in_epoch", path);
    meta.seed = static_cast<std::uint64_t>(read_int(archive, "seed", path));
    meta.world_size = static_cast<int>(read_int(archive, "world_size", path));
    meta.batch_size_per_rank = read_int(archive, "batch_size_per_rank", path);
    archive.try_read("rng_cpu", meta.rng_cpu);
    archive.try_read("rng_device", meta.rng_device);
    archive.try_read("loss_scale", meta.loss_scale);
    torch::serialize::InputArchive model_archive;
    if (!archive.try_read("model", model_archive)) {
      throw CheckpointError(path + ": has no model state");
    }
    model.load(model_archive);
    torch::serialize::InputArchive optimizer_archive;
    if (!archive.try_read("optimizer", optimizer_archive)) {
      throw CheckpointError(path + ": has no optimizer state");
    }
    optimizer.load(optimizer_archive);
  } catch (const c10::Error& e) {
    throw CheckpointError(path + ": cannot load: " + e.what_without_backtrace(),
                          "is it a checkpoint of this model? remove it to start from scratch");
  }
  const Shapes loaded = model_shapes(model);
  for (std::size_t i = 0; i < loaded.size() && i < shapes.size(); ++i) {
    if (loaded[i] != shapes[i]) {
      throw CheckpointError(path + ": " + shapes[i].first + " has another shape in the " +
                            "checkpoint: is it a checkpoint of another model?");
    }
  }
  check_optimizer_state(path, optimizer);
  return meta;
}

}  // namespace ddprun::worker
