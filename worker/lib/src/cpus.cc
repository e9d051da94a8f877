#include "cpus.h"

#include <sched.h>

#include <algorithm>

namespace ddprun::worker {

int cpus_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

bool may_spin(int ranks) {
  return ranks <= cpus_available();
}

}  // namespace ddprun::worker
