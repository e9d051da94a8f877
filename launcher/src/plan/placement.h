#pragma once
// Where each of this node's ranks runs: its CPUs, NUMA node(s), GPU(s) and nearest network
// card, from the node's topology (topology.h), for --numa-binding (torchrun's modes) and
// --cpu-bind. Pure: the topology, the GPU names and the inherited CPU mask are passed in.
// docs/placement.md says what each mode does.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plan/topology.h"

namespace ddprun {

enum class BindMode {
  kNone,
  // --numa-binding (torchrun's meaning, with "the rank's GPU" found by PCI bus id):
  kNode,         // every CPU of the NUMA node(s) near the rank's GPU
  kSocket,       // every CPU of the package(s) holding those NUMA nodes
  kExclusive,    // those NUMA nodes' cores, split evenly among the ranks near them (their
                 // hardware threads when there are fewer cores than ranks)
  kCoreComplex,  // one L3 cache's cores there, a different one for each rank
  // --cpu-bind, for CPU-only jobs:
  kCores,  // all the node's cores split evenly among its ranks, in topology order
  kNuma,   // ranks spread over the NUMA nodes in blocks; each gets all of its node
};

// "node", "socket", "exclusive", "core-complex", "none" (--numa-binding); nullopt otherwise.
std::optional<BindMode> parse_numa_binding(std::string_view text);
// "cores", "numa", "none" (--cpu-bind); nullopt otherwise.
std::optional<BindMode> parse_cpu_bind(std::string_view text);
// "--numa-binding exclusive", "--cpu-bind cores", "none": for messages.
std::string bind_mode_text(BindMode mode);

struct RankPlacement {
  CpuList cpus;                   // its affinity mask
  int cores = 0;                  // cores it has CPUs on (its OMP_NUM_THREADS)
  int sharers = 1;                // local ranks whose CPUs overlap its own, itself included
  std::vector<int> numa_nodes;    // OS indices of the NUMA nodes its CPUs are on
  std::vector<std::string> gpus;  // PCI bus ids of its GPUs
  std::string nic;                // nearest network card ("mlx5_0", "eth0"); empty: none
};

struct PlacementRequest {
  BindMode mode = BindMode::kNone;
  int nproc = 0;  // this node's ranks
  // Each local rank's GPUs as CUDA_VISIBLE_DEVICES names them (indices, GPU-/MIG- UUIDs);
  // empty (or an empty list per rank): the ranks own no GPU.
  std::vector<std::vector<std::string>> rank_gpus;
  CpuList inherited;  // the affinity mask ddprun was started with; empty: not known
  // Not empty: CUDA's index k names the node's GPU renumbered[k] (cuda_renumbering).
  std::vector<int> renumbered;
  std::map<std::string, std::string> mig_parents;  // MIG UUID -> its GPU's UUID
};

// Inside a device cgroup (Slurm's ConstrainDevices, PBS's cgroup hook) CUDA numbers the
// job's GPUs 0..n-1 while the scheduler's variable (SLURM_STEP_GPUS, SLURM_JOB_GPUS,
// SGE_HGR_gpu) names the node's: when the visible entries are 0..n-1 and the scheduler's
// numeric ids are not, CUDA's k is the scheduler's k-th id (sorted). Empty otherwise.
std::vector<int> cuda_renumbering(const std::vector<std::string>& visible,
                                  const std::vector<int>& scheduler_ids);

// The GPU of `topology` (index into topology.gpus, PCI bus order = nvidia-smi's index)
// that a CUDA_VISIBLE_DEVICES entry names. Throws UsageError when none does.
int physical_gpu(const NodeTopology& topology, const std::string& entry,
                 const PlacementRequest& request);

// One placement per local rank. Never leaves the topology's allowed CPUs nor
// request.inherited. Throws UsageError (one line and a hint) when the binding cannot be
// done: no CPUs allowed near a GPU, more ranks than cores or core complexes to split.
std::vector<RankPlacement> place_ranks(const NodeTopology& topology,
                                       const PlacementRequest& request);

// MIG UUID -> GPU UUID from `nvidia-smi -L` output.
std::map<std::string, std::string> parse_mig_parents(std::string_view nvidia_smi_list);

// "2 packages, 4 NUMA nodes, 64 cores, 128 CPUs (96 allowed), 8 GPUs, 4 NICs": what
// --check compares between nodes.
std::string topology_summary(const NodeTopology& topology);

// "CPUs 0-7 (8 cores), NUMA 0, GPU 0000:17:00.0, NIC mlx5_0".
std::string placement_text(const RankPlacement& placement);

}  // namespace ddprun
