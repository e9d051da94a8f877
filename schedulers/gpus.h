#pragma once
// Which GPUs the scheduler or the site lets this node's workers see. Pure: the environment
// and the count of /dev/nvidiaN files are passed in.

#include <string>
#include <string_view>
#include <vector>

#include "cluster.h"
#include "source.h"

namespace ddprun {

struct VisibleGpus {
  // One entry per visible GPU, in CUDA's order: what a CUDA_VISIBLE_DEVICES entry would
  // hold to select it. With an outer CUDA_VISIBLE_DEVICES these are its own entries
  // (indices, GPU-... or MIG-... UUIDs, as given); otherwise the CUDA ordinals "0".."n-1",
  // whatever ids the scheduler's variables name (under a scheduler that confines the job
  // to its GPUs, as Slurm's ConstrainDevices does, CUDA numbers them from 0).
  std::vector<std::string> devices;
  // Where the list came from: "CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS",
  // "SLURM_GPUS_ON_NODE", "SGE_HGR_gpu", "PBS_GPUFILE", "/dev/nvidiaN", or empty when
  // nothing says.
  std::string source;
  std::string source_value;  // that variable's value as given; empty for device files
  // CUDA_VISIBLE_DEVICES was set (even to nothing): `devices` are its usable entries.
  bool from_cuda_visible_devices = false;
};

// This node's GPUs, from the first of: CUDA_VISIBLE_DEVICES (entries up to the first one
// CUDA cannot use), Slurm's SLURM_STEP_GPUS, SLURM_JOB_GPUS or SLURM_GPUS_ON_NODE, Grid
// Engine's resource map SGE_HGR_gpu (space- or comma-separated ids), Torque's PBS_GPUFILE
// (`pbs_gpu_file`: its contents, one "HOST-gpuN" line per GPU of the job; the lines of
// `hostname`, compared by short name, count), then `device_files` (the /dev/nvidiaN
// files). PBS Pro's cgroup hook and Slurm's tasks set CUDA_VISIBLE_DEVICES themselves.
VisibleGpus visible_gpus(const Environment& env, int device_files,
                         std::string_view pbs_gpu_file = {}, std::string_view hostname = {});

// visible_gpus for this host: its device files, and the PBS_GPUFILE that `env` names read
// with `read_file` (a file that cannot be read says nothing).
VisibleGpus node_gpus(const Environment& env, const HostFacts& host, const ReadFile& read_file);

// visible_gpus(env, device_files).devices.size().
int count_visible_gpus(const Environment& env, int device_files);

// How many "HOST-gpuN" lines of a PBS_GPUFILE name `hostname` (short names compared).
std::size_t count_pbs_gpu_lines(std::string_view text, std::string_view hostname);

// The entries of a CUDA_VISIBLE_DEVICES value that CUDA uses: split at commas, blanks
// around an entry dropped, up to the first entry that is neither a decimal index nor a
// GPU-/MIG- UUID ("-1", "NoDevFiles", an empty entry).
std::vector<std::string> cuda_visible_entries(std::string_view value);

}  // namespace ddprun
