#pragma once
// How many GPUs the scheduler or the site lets this node's workers see. Pure.

#include "cluster.h"

namespace ddprun {

// GPUs visible to workers: CUDA_VISIBLE_DEVICES when set (entries up to the first
// invalid one, as CUDA counts them), else Slurm's SLURM_STEP_GPUS, SLURM_JOB_GPUS or
// SLURM_GPUS_ON_NODE, else `device_files` (the /dev/nvidiaN files).
int count_visible_gpus(const Environment& env, int device_files);

}  // namespace ddprun
