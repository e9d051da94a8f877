#include "allocator.h"

#include <malloc.h>

#include <array>

namespace ddprun::worker {
namespace {

// Blocks at least this large are mmapped (and unmapped on free). 32 MiB is the most
// mallopt accepts on 64-bit glibc; larger blocks are rare in CPU training steps.
constexpr int kMmapThreshold = 32 << 20;
// Free memory at the heap's top is kept up to this much.
constexpr int kTrimThreshold = 1 << 30;

}  // namespace

std::string reason_to_leave_malloc_alone(const Environment& env) {
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

std::string tune_malloc(const Environment& env) {
  if (auto reason = reason_to_leave_malloc_alone(env); !reason.empty())
    return "malloc left as set (" + reason + ")";
  // A refusal (a sanitizer's allocator, say) leaves glibc's defaults, not an error.
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
  if (!mmap_ok || !trim_ok) return "malloc defaults (mallopt refused)";
  return "freed memory kept for reuse";
}

}  // namespace ddprun::worker
