#pragma once
// What a scheduler (or the local machine, or a hostfile) says about the job: the nodes in
// the scheduler's order, their slots, and which node this process runs on. Readers fill
// it from an environment snapshot; the launch plan is a pure function of it and the
// options. Nothing here calls getenv or spawns anything.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/contract/environment.h"

namespace ddprun {

// Facts about the machine this process runs on, gathered once in main() so that readers
// stay pure and testable.
struct HostFacts {
  std::string hostname;      // gethostname(), possibly fully qualified
  int cpu_count = 1;         // CPUs this process may run on (sched_getaffinity)
  int gpu_device_files = 0;  // /dev/nvidiaN files present
};

struct NodeSlots {
  std::string host;
  int slots = 1;  // processes the scheduler granted on this node
};

struct Cluster {
  std::string scheduler;         // "local", "slurm", "sge", "pbs", "lsf", "mpi", "hostfile"
  std::string job_id;            // empty when there is none
  std::vector<NodeSlots> nodes;  // in the scheduler's order; never empty
  std::optional<int> this_node;  // index into nodes, when known
  // The variables and files the reader used, for --dry-run and diagnostics.
  std::map<std::string, std::string> sources;
  // Slurm's --segment (SLURM_JOB_SEGMENT_SIZE, Slurm 25.11 and later): the allocation was
  // made of groups of this many nodes, each on one block of the fabric; 0: none given.
  // The nodes keep the scheduler's order, in which nodes [k*S, (k+1)*S) are taken as
  // segment k (docs/schedulers.md, "Slurm 25.11 and 26.05", says what is assumed).
  int segment_size = 0;
  // What the reader found odd but usable, one sentence each; node 0 shows them once.
  std::vector<std::string> warnings{};
};

// A cluster of one node: this machine, with its CPUs as slots.
Cluster local_cluster(const HostFacts& host);

}  // namespace ddprun
