#pragma once
// How the worker asks glibc's malloc to keep freed tensor memory. No LibTorch.
//
// LibTorch's CPU tensors come from malloc. By default glibc hands large freed blocks back
// to the kernel (munmap, or trimming the heap's top), so the next step's activations of the
// same size fault in fresh zeroed pages. On the 2-core VMs this project measures on, a page
// fault costs about 10 us: the Fashion-MNIST CNN took 850,000 faults in one epoch run, and
// some runs were 5x slower (docs/worker-library.md#memory).

#include <string>

#include "ddprun/worker/env.h"

namespace ddprun::worker {

// Empty when the worker should tune malloc; otherwise why not: the user tuned malloc
// already (GLIBC_TUNABLES naming glibc.malloc.*, or a MALLOC_*_ variable), and their
// settings win.
std::string reason_to_leave_malloc_alone(const Environment& env);

// Unless `reason_to_leave_malloc_alone` gives a reason, keeps blocks under 32 MiB in the
// heap and up to 1 GiB of free heap (mallopt). Returns what it did, in words.
std::string tune_malloc(const Environment& env);

}  // namespace ddprun::worker
