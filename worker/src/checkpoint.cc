#include "ddprun/worker/checkpoint.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <sstream>

#include "ddprun/worker/atomic_file.h"
#include "ddprun/worker/errors.h"

namespace ddprun::worker {
namespace {

constexpr std::int64_t kFormatVersion = 1;
const std::regex kCheckpointName(R"(ckpt-[0-9]{8,}\.pt)");

std::string checkpoint_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "ckpt-%08lld.pt", static_cast<long long>(step));
  return buf;
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

// Removes all but the newest `keep` checkpoints (names sort by step).
void prune(const std::string& dir, int keep) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (std::regex_match(name, kCheckpointName)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  const auto excess = static_cast<std::ptrdiff_t>(names.size()) - keep;
  for (std::ptrdiff_t i = 0; i < excess; ++i) {
    std::error_code ignored;  // a checkpoint that is already gone needs no removal
    std::filesystem::remove(dir + "/" + names[static_cast<std::size_t>(i)], ignored);
  }
}

}  // namespace

std::string save_checkpoint(const std::string& dir, const torch::nn::Module& model,
                            const torch::optim::Optimizer& optimizer, const CheckpointMeta& meta,
                            int keep_last) {
  torch::serialize::OutputArchive archive;
  write_int(archive, "format_version", kFormatVersion);
  write_int(archive, "step", meta.position.step);
  write_int(archive, "epoch", meta.position.epoch);
  write_int(archive, "batch_in_epoch", meta.position.batch_in_epoch);
  write_int(archive, "seed", static_cast<std::int64_t>(meta.seed));  // bits kept
  write_int(archive, "world_size", meta.world_size);
  torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  archive.write("model", model_archive);
  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);

  std::ostringstream bytes;
  archive.save_to(bytes);
  make_directories(dir, 0700);
  const std::string name = checkpoint_name(meta.position.step);
  write_file_atomically(dir, name, bytes.str(), 0600);
  write_file_atomically(dir, kLatestName, name + "\n", 0600);
  prune(dir, std::max(keep_last, 1));
  return name;
}

std::optional<std::string> find_latest_checkpoint(const std::string& dir) {
  const std::string latest = dir + "/" + kLatestName;
  if (!std::filesystem::exists(latest)) return std::nullopt;
  std::string name = read_file(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  if (!std::regex_match(name, kCheckpointName)) {
    throw CheckpointError(latest + ": does not name a checkpoint file",
                          "remove it to start from scratch");
  }
  const std::string path = dir + "/" + name;
  if (!std::filesystem::exists(path)) {
    throw CheckpointError(latest + ": names " + name + ", which does not exist",
                          "remove it to start from scratch");
  }
  return path;
}

CheckpointMeta load_checkpoint(const std::string& path, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer) {
  // Shapes before loading: InputArchive would silently resize a mismatched tensor.
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes;
  for (const auto& p : model.named_parameters(true)) {
    shapes.emplace_back(p.key(), p.value().sizes().vec());
  }
  CheckpointMeta meta;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
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
  std::size_t i = 0;
  for (const auto& p : model.named_parameters(true)) {
    if (p.value().sizes().vec() != shapes[i].second) {
      throw CheckpointError(path + ": parameter " + p.key() + " has another shape in the " +
                            "checkpoint: is it a checkpoint of another model?");
    }
    ++i;
  }
  return meta;
}

}  // namespace ddprun::worker
