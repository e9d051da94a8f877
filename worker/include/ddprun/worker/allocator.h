#pragma once
// How the worker asks glibc's malloc to keep freed tensor memory. No LibTorch.
//
// LibTorch's CPU tensors come from malloc. By default glibc hands large freed blocks back
// to the kernel (munmap, or trimming the heap's top), so the next step's activations of the
// same size fault in fresh zeroed pages. On the 2-core VMs this project measures on, a page
// fault costs about 10 us: the Fashion-MNIST CNN took 850,000 faults in one epoch run, and
// 2 to 6x longer epochs in runs where faults got slower (docs/benchmarks.md).

#include <cstddef>
#include <string>

#include "ddprun/worker/env.h"

namespace ddprun::worker {

struct MallocSettings {
  // Blocks at least this large are mmapped (and unmapped on free). 32 MiB is the most
  // mallopt accepts on 64-bit glibc; larger blocks are rare in CPU training steps.
  std::size_t mmap_threshold = std::size_t{32} << 20;
  // Free memory at the heap's top is kept up to this much.
  std::size_t trim_threshold = std::size_t{1} << 30;
};

// Empty when the worker should apply `MallocSettings`; otherwise why not: the user tuned
// malloc already (GLIBC_TUNABLES naming glibc.malloc.*, or a MALLOC_*_ variable), and
// their settings win.
std::string reason_to_leave_malloc_alone(const EnvMap& env);

// Applies `settings` with mallopt unless `reason_to_leave_malloc_alone` gives a reason.
// Returns what it did, for the start line of rank 0.
std::string tune_malloc(const EnvMap& env, const MallocSettings& settings = {});

}  // namespace ddprun::worker
