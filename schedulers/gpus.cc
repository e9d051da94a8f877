#include "gpus.h"

#include <algorithm>
#include <exception>
#include <string>

#include "ddprun/common/parse_int.h"
#include "ddprun/contract/env_names.h"

namespace ddprun {
namespace {

std::string_view trimmed(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

bool usable_entry(std::string_view entry) {
  if (entry.empty()) return false;
  if (std::all_of(entry.begin(), entry.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return true;
  }
  // CUDA also takes a unique prefix of a UUID, so anything after the prefix is kept as is.
  return (entry.size() > 4 && (entry.substr(0, 4) == "GPU-" || entry.substr(0, 4) == "MIG-"));
}

std::vector<std::string> ordinals(std::size_t count) {
  std::vector<std::string> result;
  result.reserve(count);
  for (std::size_t i = 0; i < count; ++i) result.push_back(std::to_string(i));
  return result;
}

// Ids separated by any of `separators`, empty pieces skipped.
std::size_t count_ids(std::string_view value, std::string_view separators) {
  std::size_t count = 0;
  std::size_t start = 0;
  while (start < value.size()) {
    const auto end = value.find_first_of(separators, start);
    const auto piece = value.substr(start, end == std::string_view::npos ? end : end - start);
    if (!trimmed(piece).empty()) ++count;
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return count;
}

}  // namespace

std::vector<std::string> cuda_visible_entries(std::string_view value) {
  std::vector<std::string> entries;
  std::string_view rest = value;
  for (;;) {
    const auto comma = rest.find(',');
    const auto entry = trimmed(rest.substr(0, comma));
    if (!usable_entry(entry)) break;
    entries.emplace_back(entry);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return entries;
}

std::size_t count_pbs_gpu_lines(std::string_view text, std::string_view hostname) {
  const auto short_name = [](std::string_view name) { return name.substr(0, name.find('.')); };
  std::size_t count = 0;
  while (!text.empty()) {
    const auto newline = text.find('\n');
    const auto line = trimmed(text.substr(0, newline));
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    const auto gpu = line.rfind("-gpu");
    if (gpu == std::string_view::npos || gpu == 0 || gpu + 4 == line.size() ||
        line.find_first_not_of("0123456789", gpu + 4) != std::string_view::npos) {
      continue;
    }
    if (short_name(line.substr(0, gpu)) == short_name(hostname)) ++count;
  }
  return count;
}

VisibleGpus visible_gpus(const Environment& env, int device_files, std::string_view pbs_gpu_file,
                         std::string_view hostname) {
  VisibleGpus gpus;
  if (const auto value = lookup(env, env::kCudaVisibleDevices)) {
    gpus.source = env::kCudaVisibleDevices;
    gpus.source_value = *value;
    gpus.from_cuda_visible_devices = true;
    gpus.devices = cuda_visible_entries(*value);
    return gpus;
  }
  // Slurm sets CUDA_VISIBLE_DEVICES for its tasks and batch scripts; where it did not (or
  // it was unset), these give the count. Their ids are the node's, not CUDA's numbering
  // inside the job's cgroup, so the GPUs are named by ordinal.
  for (const char* name : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"}) {
    if (const auto value = lookup(env, name)) {
      gpus.source = name;
      gpus.source_value = *value;
      gpus.devices = ordinals(cuda_visible_entries(*value).size());
      return gpus;
    }
  }
  if (const auto value = lookup(env, "SLURM_GPUS_ON_NODE")) {
    const auto number = parse_int(*value);
    if (number && *number >= 0) {
      gpus.source = "SLURM_GPUS_ON_NODE";
      gpus.source_value = *value;
      gpus.devices = ordinals(static_cast<std::size_t>(*number));
      return gpus;
    }
  }
  // Grid Engine's resource map (RSMAP) of a complex named "gpu": the ids granted, space
  // separated; sites that use it set CUDA_VISIBLE_DEVICES from it in a prolog or not at all.
  if (const auto value = lookup(env, "SGE_HGR_gpu")) {
    gpus.source = "SGE_HGR_gpu";
    gpus.source_value = *value;
    gpus.devices = ordinals(count_ids(*value, " \t,"));
    return gpus;
  }
  // Torque's file of the job's GPUs, all nodes': this node's lines count.
  if (const auto value = lookup(env, "PBS_GPUFILE"); value && !pbs_gpu_file.empty()) {
    gpus.source = "PBS_GPUFILE";
    gpus.source_value = *value;
    gpus.devices = ordinals(count_pbs_gpu_lines(pbs_gpu_file, hostname));
    return gpus;
  }
  if (device_files > 0) {
    gpus.source = "/dev/nvidiaN";
    gpus.devices = ordinals(static_cast<std::size_t>(device_files));
  }
  return gpus;
}

VisibleGpus node_gpus(const Environment& env, const HostFacts& host, const ReadFile& read_file) {
  std::string gpu_file;
  if (const auto path = lookup(env, "PBS_GPUFILE"); path && !path->empty()) {
    try {
      gpu_file = read_file(*path);
    } catch (const std::exception&) {
      // Unreadable: the device files count instead, as without the variable.
    }
  }
  return visible_gpus(env, host.gpu_device_files, gpu_file, host.hostname);
}

int count_visible_gpus(const Environment& env, int device_files) {
  return static_cast<int>(visible_gpus(env, device_files).devices.size());
}

}  // namespace ddprun
