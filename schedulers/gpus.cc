#include "gpus.h"

#include "ddprun/common/parse_int.h"
#include "ddprun/contract/env_names.h"

namespace ddprun {

int count_visible_gpus(const Environment& env, int device_files) {
  auto visible = lookup(env, env::kCudaVisibleDevices);
  // Slurm sets CUDA_VISIBLE_DEVICES for tasks; in the batch script only these may be set.
  if (!visible) visible = lookup(env, "SLURM_STEP_GPUS");
  if (!visible) visible = lookup(env, "SLURM_JOB_GPUS");
  if (!visible) {
    const auto count = lookup(env, "SLURM_GPUS_ON_NODE");
    const auto number = count ? parse_int(*count) : std::nullopt;
    return number && *number >= 0 ? *number : device_files;
  }
  int count = 0;
  std::string_view rest = *visible;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const auto entry = rest.substr(0, comma);
    // CUDA stops at the first entry it cannot use ("-1", "NoDevFiles", empty).
    if (entry.empty() || entry.front() == '-' || entry == "NoDevFiles") break;
    ++count;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return count;
}

}  // namespace ddprun
