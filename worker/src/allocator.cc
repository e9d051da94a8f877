#include "ddprun/worker/allocator.h"

#include <malloc.h>

#include <array>

namespace ddprun::worker {

std::string reason_to_leave_malloc_alone(const EnvMap& env) {
  const auto tunables = env.find("GLIBC_TUNABLES");
  if (tunables != env.end() && tunables->second.find("glibc.malloc.") != std::string::npos)
    return "GLIBC_TUNABLES sets malloc";
  // glibc's older environment spellings; any one of them means the user chose.
  constexpr std::array kMallocVariables = {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                                           "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
                                           "MALLOC_ARENA_MAX"};
  for (const char* name : kMallocVariables)
    if (env.count(name) != 0) return std::string(name) + " is set";
  return "";
}

std::string tune_malloc(const EnvMap& env, const MallocSettings& settings) {
  if (auto reason = reason_to_leave_malloc_alone(env); !reason.empty())
    return "malloc left as set (" + reason + ")";
  // mallopt takes an int; both values fit. A refusal leaves glibc's default, not an error.
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(settings.mmap_threshold)) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, static_cast<int>(settings.trim_threshold)) == 1;
  if (!mmap_ok || !trim_ok) return "malloc defaults (mallopt refused)";
  return "freed memory kept for reuse";
}

}  // namespace ddprun::worker
