#include "allocator.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace ddprun::worker {
namespace {

TEST(Allocator, TunesWhenTheUserDidNot) {
  EXPECT_EQ(reason_to_leave_malloc_alone({}), "");
  EXPECT_EQ(reason_to_leave_malloc_alone({{"GLIBC_TUNABLES", "glibc.rtld.nns=2"}}), "");
  EXPECT_EQ(reason_to_leave_malloc_alone({{"PATH", "/usr/bin"}}), "");
}

TEST(Allocator, LeavesTheUsersChoiceAlone) {
  EXPECT_EQ(reason_to_leave_malloc_alone(
                {{"GLIBC_TUNABLES", "glibc.rtld.nns=2:glibc.malloc.trim_threshold=0"}}),
            "GLIBC_TUNABLES sets malloc");
  EXPECT_EQ(reason_to_leave_malloc_alone({{"MALLOC_ARENA_MAX", "2"}}), "MALLOC_ARENA_MAX is set");
  EXPECT_EQ(reason_to_leave_malloc_alone({{"MALLOC_MMAP_THRESHOLD_", "0"}}),
            "MALLOC_MMAP_THRESHOLD_ is set");
  EXPECT_EQ(tune_malloc({{"MALLOC_TRIM_THRESHOLD_", "0"}}),
            "malloc left as set (MALLOC_TRIM_THRESHOLD_ is set)");
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DDPRUN_SANITIZED_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DDPRUN_SANITIZED_MALLOC 1
#endif
#endif

// After tuning, a freed 16 MiB block stays in the heap: allocating it again maps nothing.
TEST(Allocator, KeepsLargeFreedBlocksInTheProcess) {
#ifdef DDPRUN_SANITIZED_MALLOC
  GTEST_SKIP() << "the sanitizer's allocator replaces glibc's malloc";
#else
  ASSERT_EQ(tune_malloc({}), "freed memory kept for reuse");
  constexpr std::size_t kBlock = std::size_t{16} << 20;
  const auto mapped_before = mallinfo2().hblkhd;
  for (int i = 0; i < 3; ++i) {
    void* block = std::malloc(kBlock);
    ASSERT_NE(block, nullptr);
    std::memset(block, 1, kBlock);
    EXPECT_EQ(mallinfo2().hblkhd, mapped_before) << "the block was mmapped";
    std::free(block);
  }
  // Not trimmed on free: the heap's free space still holds the block.
  EXPECT_GE(mallinfo2().fordblks, kBlock);
#endif
}

}  // namespace
}  // namespace ddprun::worker
