#include "gpus.h"

#include <gtest/gtest.h>

namespace ddprun {
namespace {

TEST(CountVisibleGpus, FollowsCudaVisibleDevicesLikeCuda) {
  EXPECT_EQ(count_visible_gpus({}, 4), 4);
  EXPECT_EQ(count_visible_gpus({{"CUDA_VISIBLE_DEVICES", "0,1"}}, 8), 2);
  EXPECT_EQ(count_visible_gpus({{"CUDA_VISIBLE_DEVICES", ""}}, 8), 0);
  EXPECT_EQ(count_visible_gpus({{"CUDA_VISIBLE_DEVICES", "-1"}}, 8), 0);
  EXPECT_EQ(count_visible_gpus({{"CUDA_VISIBLE_DEVICES", "2,-1,3"}}, 8), 1);
  EXPECT_EQ(count_visible_gpus({{"CUDA_VISIBLE_DEVICES", "GPU-8f3a,GPU-11aa"}}, 0), 2);
  EXPECT_EQ(count_visible_gpus({{"CUDA_VISIBLE_DEVICES", "NoDevFiles"}}, 8), 0);
  EXPECT_EQ(count_visible_gpus({{"SLURM_STEP_GPUS", "4,5,6"}}, 8), 3);
  EXPECT_EQ(count_visible_gpus({{"SLURM_GPUS_ON_NODE", "2"}}, 8), 2);
  EXPECT_EQ(count_visible_gpus({{"CUDA_VISIBLE_DEVICES", "0"}, {"SLURM_GPUS_ON_NODE", "4"}}, 8), 1);
}

struct GpuCase {
  const char* name;
  Environment env;
  int device_files;
  std::vector<std::string> devices;
  std::string source;
  bool from_cuda_visible_devices;
};

TEST(VisibleGpus, ListsEachGpuAsCudaVisibleDevicesWouldNameIt) {
  const std::vector<GpuCase> cases = {
      {"nothing, no device files", {}, 0, {}, "", false},
      {"device files only", {}, 3, {"0", "1", "2"}, "/dev/nvidiaN", false},
      {"indices kept as given",
       {{"CUDA_VISIBLE_DEVICES", "3,1"}},
       8,
       {"3", "1"},
       "CUDA_VISIBLE_DEVICES",
       true},
      {"blanks around entries dropped",
       {{"CUDA_VISIBLE_DEVICES", " 2 , 5"}},
       8,
       {"2", "5"},
       "CUDA_VISIBLE_DEVICES",
       true},
      {"GPU UUIDs",
       {{"CUDA_VISIBLE_DEVICES", "GPU-uuid-a,GPU-uuid-b"}},
       0,
       {"GPU-uuid-a", "GPU-uuid-b"},
       "CUDA_VISIBLE_DEVICES",
       true},
      {"MIG instances",
       {{"CUDA_VISIBLE_DEVICES", "MIG-4f1e2b7c-aaaa-bbbb-cccc-0123456789ab,MIG-GPU-11/1/0"}},
       1,
       {"MIG-4f1e2b7c-aaaa-bbbb-cccc-0123456789ab", "MIG-GPU-11/1/0"},
       "CUDA_VISIBLE_DEVICES",
       true},
      {"stops at the first invalid entry",
       {{"CUDA_VISIBLE_DEVICES", "0,1,x,2"}},
       8,
       {"0", "1"},
       "CUDA_VISIBLE_DEVICES",
       true},
      {"stops at an empty entry",
       {{"CUDA_VISIBLE_DEVICES", "0,,2"}},
       8,
       {"0"},
       "CUDA_VISIBLE_DEVICES",
       true},
      {"a bare prefix is no UUID",
       {{"CUDA_VISIBLE_DEVICES", "GPU-"}},
       8,
       {},
       "CUDA_VISIBLE_DEVICES",
       true},
      {"empty: no GPU, whatever else says",
       {{"CUDA_VISIBLE_DEVICES", ""}, {"SLURM_JOB_GPUS", "0,1"}},
       8,
       {},
       "CUDA_VISIBLE_DEVICES",
       true},
      {"Slurm step ids become ordinals",
       {{"SLURM_STEP_GPUS", "4,5"}},
       8,
       {"0", "1"},
       "SLURM_STEP_GPUS",
       false},
      {"the step before the job",
       {{"SLURM_STEP_GPUS", "6"}, {"SLURM_JOB_GPUS", "4,5,6"}},
       8,
       {"0"},
       "SLURM_STEP_GPUS",
       false},
      {"Slurm job ids", {{"SLURM_JOB_GPUS", "2,3,6"}}, 8, {"0", "1", "2"}, "SLURM_JOB_GPUS", false},
      {"Slurm count", {{"SLURM_GPUS_ON_NODE", "2"}}, 8, {"0", "1"}, "SLURM_GPUS_ON_NODE", false},
      {"Slurm count not a number: device files",
       {{"SLURM_GPUS_ON_NODE", "two"}},
       2,
       {"0", "1"},
       "/dev/nvidiaN",
       false},
      {"Grid Engine resource map, spaces",
       {{"SGE_HGR_gpu", "1 3"}},
       4,
       {"0", "1"},
       "SGE_HGR_gpu",
       false},
      {"Grid Engine resource map, named ids",
       {{"SGE_HGR_gpu", "gpu2,gpu3 gpu4"}},
       0,
       {"0", "1", "2"},
       "SGE_HGR_gpu",
       false},
      {"Slurm before Grid Engine",
       {{"SLURM_JOB_GPUS", "0"}, {"SGE_HGR_gpu", "0 1"}},
       4,
       {"0"},
       "SLURM_JOB_GPUS",
       false},
  };
  for (const auto& c : cases) {
    const VisibleGpus gpus = visible_gpus(c.env, c.device_files);
    EXPECT_EQ(gpus.devices, c.devices) << c.name;
    EXPECT_EQ(gpus.source, c.source) << c.name;
    EXPECT_EQ(gpus.from_cuda_visible_devices, c.from_cuda_visible_devices) << c.name;
  }
}

TEST(VisibleGpus, KeepsTheVariablesValueForMessages) {
  const auto gpus = visible_gpus({{"SLURM_JOB_GPUS", "4,5"}}, 0);
  EXPECT_EQ(gpus.source_value, "4,5");
  EXPECT_EQ(visible_gpus({}, 2).source_value, "");
}

// Torque's PBS_GPUFILE lists the job's GPUs on every node, one "HOST-gpuN" line each; this
// node's lines count (short names compared), after the variables that say more.
TEST(VisibleGpus, PbsGpuFileCountsThisNodesLines) {
  const std::string file =
      "n1-gpu0\nn1-gpu1\nn2.cluster.example-gpu0\nn2-gpu1\n n2-gpu2 \n"
      "n2-gpux\n-gpu3\nn2-gpu\n\n";
  EXPECT_EQ(count_pbs_gpu_lines(file, "n1"), 2u);
  EXPECT_EQ(count_pbs_gpu_lines(file, "n2.cluster.example"), 3u);
  EXPECT_EQ(count_pbs_gpu_lines(file, "n3"), 0u);
  const Environment env = {{"PBS_GPUFILE", "/var/spool/torque/aux/42.gpu"}};
  const VisibleGpus gpus = visible_gpus(env, 8, file, "n2");
  EXPECT_EQ(gpus.devices, (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(gpus.source, "PBS_GPUFILE");
  EXPECT_EQ(gpus.source_value, "/var/spool/torque/aux/42.gpu");
  // An unreadable file (no contents) says nothing: the device files count.
  EXPECT_EQ(visible_gpus(env, 8, "", "n2").source, "/dev/nvidiaN");
  // CUDA_VISIBLE_DEVICES, when set, comes first.
  Environment both = env;
  both["CUDA_VISIBLE_DEVICES"] = "0";
  EXPECT_EQ(visible_gpus(both, 8, file, "n2").devices.size(), 1u);
}

}  // namespace
}  // namespace ddprun
