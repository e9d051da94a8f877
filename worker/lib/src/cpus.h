#pragma once
// How many CPUs this process may run on, for choosing between spinning and sleeping while
// waiting for peers. No LibTorch.

namespace ddprun::worker {

// The CPUs in this process's affinity mask (at least 1).
int cpus_available();

// Whether a waiting thread may spin: `ranks` processes (this one included) may run on this
// process's CPUs, and they fit them. Past that, a spinner takes a peer's CPU: sleep.
bool may_spin(int ranks);

}  // namespace ddprun::worker
