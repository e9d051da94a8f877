#pragma once
// How many CPUs this process may run on, for choosing between spinning and sleeping while
// waiting for peers. No LibTorch.

namespace ddprun::worker {

// The CPUs in this process's affinity mask (at least 1).
int cpus_available();

}  // namespace ddprun::worker
