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

}  // namespace
}  // namespace ddprun
