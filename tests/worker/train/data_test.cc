// Fashion-MNIST's pixels as ddp-train normalises them: through a table, bit for bit what the
// tensor operations give, for every byte value.

#include "data.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <numeric>

namespace ddprun::worker {
namespace {

TEST(ImagesToTensor, EveryByteValueIsWhatTheTensorOperationsGive) {
  IdxArray images;
  images.dims = {2, 16, 16};  // 512 pixels: every byte value twice, in two orders
  images.data.resize(512);
  for (std::size_t i = 0; i < 256; ++i) {
    images.data[i] = static_cast<std::uint8_t>(i);
    images.data[511 - i] = static_cast<std::uint8_t>(i);
  }
  const auto got = images_to_tensor(images);
  const auto bytes = torch::from_blob(images.data.data(), {2, 1, 16, 16}, torch::kUInt8);
  const auto want = bytes.to(torch::kFloat).div_(255.0).sub_(kFashionMean).div_(kFashionStd);
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_EQ(got.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(got, want));
}

TEST(ImagesToTensor, OtherShapesAreRefused) {
  IdxArray flat;
  flat.dims = {4};
  flat.data.resize(4);
  EXPECT_ANY_THROW(images_to_tensor(flat));
}

}  // namespace
}  // namespace ddprun::worker
