#pragma once
// Live recovery from the survivors' memory (runtime.recovery "peer", docs/fault-tolerance.md):
// which group a process joins, which rank sends the state, and sending it. The trainer
// decides when; these are the steps.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "ddprun/worker/communicator.h"
#include "ddprun/worker/env.h"
#include "ddprun/worker/membership.h"

namespace ddprun::worker {

// Where this process stands among the round's groups.
struct GroupPlace {
  int group = 0;  // 0: the round's first group; n: the group formed by the n-th recovery
  // Rank 0's process when this one joined (-1: unknown, rank 0's first process): a survivor
  // whose next membership shows another must connect to its replacement's store.
  pid_t rank0_pid = -1;
};

// The group this process joins when it starts. Without a membership file (yet), or as a
// rank's first process, group 0; as a replacement, the recovery that started it, once the
// file says so (waited for, up to `timeout`).
GroupPlace starting_group(const WorkerEnv& env, std::chrono::milliseconds timeout);

// After `place.group` failed: waits until every lost rank's replacement runs, and returns the
// group to join next, and whether rank 0 (the store's host) was among the lost. Throws
// CollectiveError when a stop signal arrives meanwhile (the launcher ends the round: no
// replacement), and EnvError after `timeout`.
struct NextGroup {
  GroupPlace place;
  bool store_host_lost = false;
};
NextGroup next_group(const WorkerEnv& env, const GroupPlace& place,
                     std::chrono::milliseconds timeout);

// Who sends the state to a new group: each rank says how many steps it has done (-1: none,
// a replacement). Collective over `control`.
struct StateSource {
  int rank = -1;                  // the lowest rank with the most steps done; -1: no rank has any
  std::int64_t steps = -1;        // its steps done
  std::vector<int> replacements;  // the ranks that hold nothing
  bool holders_agree = true;      // every rank that holds state has done the same steps
};
StateSource find_state_source(Plane& control, std::int64_t steps_done);

// `bytes` of rank `source` to every rank of `control` (replaced on the others).
void broadcast_bytes(Plane& control, int source, std::string& bytes);

// "1" or "0, 2".
std::string rank_list(const std::vector<int>& ranks);

}  // namespace ddprun::worker
