// The shared-memory all-reduce with ranks as forked processes: exact results for every
// type and op across chunk boundaries, bit-identical ranks, a peer that exits, a peer that
// hangs, and segments that must not be opened.

#include "ddprun/worker/shm_allreduce.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace ddprun::worker {
namespace {

using std::chrono::milliseconds;

// Starts ranks 0..size-1 as child processes over one new segment; `body(rank, shm)` returns
// an empty string on success or what went wrong, which the child writes to its pipe. Rank 0
// inherits the creator; the parent lets go of the segment once every child has opened it
// (they open it through the parent's /proc entry), so a rank's lock is held by that rank
// alone. As in Communicator::connect, every rank has
// opened the segment before any starts. Returns each rank's message ("" = passed).
std::vector<std::string> run_ranks(
    int size, const std::function<std::string(int, SharedMemoryAllreduce&)>& body) {
  auto created = SharedMemoryAllreduce::create(size);
  const std::string name = created->name();
  int ready[2], go[2];
  EXPECT_EQ(pipe(ready), 0);
  EXPECT_EQ(pipe(go), 0);
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r = 0; r < size; ++r) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      std::string message;
      try {
        std::unique_ptr<SharedMemoryAllreduce> mine;
        if (r == 0) {
          mine = std::move(created);
        } else {
          created.reset();
          mine = SharedMemoryAllreduce::open(name, r, size);
        }
        char c = 'r';
        if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(3);
        message = body(r, *mine);
      } catch (const std::exception& e) {
        message = std::string("exception: ") + e.what();
      }
      if (write(fds[1], message.data(), message.size()) < 0) _exit(2);
      _exit(0);
    }
    close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  for (int r = 0; r < size; ++r) {
    char c;
    EXPECT_EQ(read(ready[0], &c, 1), 1);
  }
  created.reset();
  const std::string go_all(static_cast<std::size_t>(size), 'g');
  EXPECT_EQ(write(go[1], go_all.data(), go_all.size()), static_cast<ssize_t>(size));
  for (const int fd : {ready[0], ready[1], go[0], go[1]}) close(fd);
  std::vector<std::string> messages;
  for (int r = 0; r < size; ++r) {
    std::string message;
    char buf[512];
    for (ssize_t n; (n = read(pipes[static_cast<std::size_t>(r)], buf, sizeof buf)) > 0;)
      message.append(buf, static_cast<std::size_t>(n));
    close(pipes[static_cast<std::size_t>(r)]);
    int status = 0;
    waitpid(pids[static_cast<std::size_t>(r)], &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r;
    messages.push_back(message);
  }
  return messages;
}

void expect_all_passed(const std::vector<std::string>& messages) {
  for (std::size_t r = 0; r < messages.size(); ++r) EXPECT_EQ(messages[r], "") << "rank " << r;
}

// Rank r's input: small integers, so sums are exact in every type.
template <typename T>
std::vector<T> integers(int rank, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] =
        static_cast<T>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 13) % 31) - 15);
  return v;
}

template <typename T>
std::string check_integers(int rank, int size, SharedMemoryAllreduce& shm, ShmType type,
                           std::size_t n) {
  std::vector<std::vector<T>> inputs;
  for (int q = 0; q < size; ++q) inputs.push_back(integers<T>(q, n));
  for (const ShmOp op : {ShmOp::kSum, ShmOp::kMin, ShmOp::kMax}) {
    auto data = inputs[static_cast<std::size_t>(rank)];
    shm.allreduce(data.data(), n, type, op, milliseconds(30'000));
    for (std::size_t i = 0; i < n; ++i) {
      T expected = inputs[0][i];
      for (std::size_t q = 1; q < inputs.size(); ++q) {
        const T x = inputs[q][i];
        expected = op == ShmOp::kSum   ? expected + x
                   : op == ShmOp::kMin ? std::min(expected, x)
                                       : std::max(expected, x);
      }
      if (data[i] != expected) {
        return "op " + std::to_string(static_cast<int>(op)) + ", n " + std::to_string(n) +
               ", element " + std::to_string(i) + ": " + std::to_string(data[i]) +
               " != " + std::to_string(expected);
      }
    }
  }
  return "";
}

TEST(SharedMemoryAllreduceTest, ExactForEveryTypeAndOpAcrossChunkBoundaries) {
  expect_all_passed(run_ranks(3, [](int rank, SharedMemoryAllreduce& shm) -> std::string {
    const std::size_t chunk = shm.chunk_bytes();
    // Empty, tiny, odd, one element over a chunk, several chunks plus a tail.
    for (const std::size_t n :
         {std::size_t{0}, std::size_t{1}, std::size_t{7}, chunk / 4 + 1, 3 * (chunk / 4) + 5}) {
      std::string failed;
      failed += check_integers<float>(rank, 3, shm, ShmType::kFloat32, n);
      failed += check_integers<double>(rank, 3, shm, ShmType::kFloat64, n / 2 + 1);
      failed += check_integers<std::int32_t>(rank, 3, shm, ShmType::kInt32, n);
      failed += check_integers<std::int64_t>(rank, 3, shm, ShmType::kInt64, n / 2 + 1);
      if (!failed.empty()) return failed;
    }
    return "";
  }));
}

TEST(SharedMemoryAllreduceTest, RandomFloatsSumInRankOrderAndEveryRankEndsBitIdentical) {
  // More ranks than this machine's cores: the sleeping path, not only the spinning one.
  constexpr int kSize = 5;
  expect_all_passed(run_ranks(kSize, [](int rank, SharedMemoryAllreduce& shm) -> std::string {
    const std::size_t n = shm.chunk_bytes() / sizeof(float) * 2 + 333;
    const auto input = [n](int r, int round) {
      std::mt19937 gen(static_cast<unsigned>(1000 * round + r));
      std::normal_distribution<float> normal;
      std::vector<float> v(n);
      for (auto& x : v) x = normal(gen);
      return v;
    };
    for (int round = 0; round < 5; ++round) {
      auto data = input(rank, round);
      shm.allreduce(data.data(), n, ShmType::kFloat32, ShmOp::kSum, milliseconds(30'000));
      auto expected = input(0, round);
      for (int q = 1; q < kSize; ++q) {
        const auto x = input(q, round);
        for (std::size_t i = 0; i < n; ++i) expected[i] += x[i];
      }
      if (std::memcmp(data.data(), expected.data(), n * sizeof(float)) != 0)
        return "round " + std::to_string(round) + ": not the rank-order sum";
    }
    return "";
  }));
}

// Rank r's random input for one round.
std::vector<float> random_floats(int rank, int round, std::size_t n) {
  std::mt19937 gen(static_cast<unsigned>(1000 * round + rank));
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (auto& x : v) x = normal(gen);
  return v;
}

TEST(SharedMemoryAllreduceTest, ReduceGivesTheRootTheAllreduceBitsBroadcastGivesEveryoneTheRoots) {
  // The halves of a hierarchical all-reduce, interleaved with whole all-reduces so that
  // chunks of every kind follow each other in both slot sets.
  constexpr int kSize = 3;
  expect_all_passed(run_ranks(kSize, [](int rank, SharedMemoryAllreduce& shm) -> std::string {
    const std::size_t n = shm.chunk_bytes() / sizeof(float) * 2 + 77;
    for (int round = 0; round < 6; ++round) {
      const int root = round % kSize;
      const auto input = random_floats(rank, round, n);
      auto whole = input;
      shm.allreduce(whole.data(), n, ShmType::kFloat32, ShmOp::kSum, milliseconds(30'000));
      auto reduced = input;
      shm.reduce(reduced.data(), n, ShmType::kFloat32, ShmOp::kSum, root, milliseconds(30'000));
      const auto& expected = rank == root ? whole : input;
      if (std::memcmp(reduced.data(), expected.data(), n * sizeof(float)) != 0)
        return "round " + std::to_string(round) + ": reduce to " + std::to_string(root) +
               (rank == root ? " is not the all-reduce's result" : " changed a non-root's data");
      // A byte count that is no multiple of the chunk or of an element.
      const std::size_t bytes = shm.chunk_bytes() * 2 + 13;
      std::vector<unsigned char> data(bytes, static_cast<unsigned char>(rank));
      if (rank == root)
        for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>(i * 31 + 7);
      shm.broadcast(data.data(), bytes, root, milliseconds(30'000));
      for (std::size_t i = 0; i < bytes; ++i) {
        if (data[i] != static_cast<unsigned char>(i * 31 + 7))
          return "round " + std::to_string(round) + ": broadcast byte " + std::to_string(i);
      }
    }
    return "";
  }));
}

TEST(SharedMemoryAllreduceTest, AnAbortMakesEveryWaitingPeerFailNamingTheRankThatAborted) {
  const auto messages = run_ranks(3, [](int rank, SharedMemoryAllreduce& shm) -> std::string {
    std::vector<float> data(16, 1.0F);
    shm.reduce(data.data(), data.size(), ShmType::kFloat32, ShmOp::kSum, 1, milliseconds(60'000));
    // Rank 1 cannot deliver what the others wait for (its link to another node failed).
    if (rank == 1) {
      shm.abort();
      return "";
    }
    std::string first = "no error";
    try {
      shm.broadcast(data.data(), data.size() * sizeof(float), 1, milliseconds(60'000));
    } catch (const SharedMemoryError& e) {
      first = e.what();
    }
    // An aborted segment stays unusable, also for a collective begun afterwards.
    try {
      shm.allreduce(data.data(), data.size(), ShmType::kFloat32, ShmOp::kSum, milliseconds(60'000));
    } catch (const SharedMemoryError& e) {
      return first == e.what() ? first : first + " / then: " + e.what();
    }
    return first + " / then: no error";
  });
  EXPECT_EQ(messages[0], "rank 1 abandoned the shared-memory collective");
  EXPECT_EQ(messages[1], "");
  EXPECT_EQ(messages[2], "rank 1 abandoned the shared-memory collective");
}

TEST(SharedMemoryAllreduceTest, APeerThatExitsIsNamedWithoutWaitingForTheTimeout) {
  const auto messages = run_ranks(3, [](int rank, SharedMemoryAllreduce& shm) -> std::string {
    std::vector<float> data(16, 1.0F);
    shm.allreduce(data.data(), data.size(), ShmType::kFloat32, ShmOp::kSum, milliseconds(60'000));
    if (rank == 2) _exit(0);  // gone before the second all-reduce
    try {
      shm.allreduce(data.data(), data.size(), ShmType::kFloat32, ShmOp::kSum, milliseconds(60'000));
    } catch (const SharedMemoryError& e) {
      return e.what();
    }
    return "no error";
  });
  EXPECT_EQ(messages[0], "rank 2 exited during a shared-memory all-reduce");
  EXPECT_EQ(messages[1], "rank 2 exited during a shared-memory all-reduce");
}

TEST(SharedMemoryAllreduceTest, APeerThatNeverArrivesTimesOutNamingIt) {
  int hold[2];
  ASSERT_EQ(pipe(hold), 0);
  const auto messages = run_ranks(2, [&](int rank, SharedMemoryAllreduce& shm) -> std::string {
    if (rank == 1) {
      char c;
      // Alive and holding its lock, but never arriving, until rank 0 is done.
      return read(hold[0], &c, 1) == 1 ? "" : "no word from rank 0";
    }
    std::vector<float> data(4, 1.0F);
    std::string what = "no error";
    try {
      shm.allreduce(data.data(), data.size(), ShmType::kFloat32, ShmOp::kSum, milliseconds(300));
    } catch (const SharedMemoryError& e) {
      what = e.what();
    }
    if (write(hold[1], "x", 1) != 1) return "could not release rank 1";
    return what;
  });
  close(hold[0]);
  close(hold[1]);
  EXPECT_EQ(messages[0], "shared-memory collective timed out waiting for rank(s) 1");
  EXPECT_EQ(messages[1], "");
}

TEST(SharedMemoryAllreduceTest, OpeningAMissingWrongOrTakenSegmentFails) {
  EXPECT_THROW(SharedMemoryAllreduce::open("/proc/self/fd/999999", 1, 2), SharedMemoryError);
  auto created = SharedMemoryAllreduce::create(2);
  EXPECT_THROW(SharedMemoryAllreduce::open(created->name(), 1, 3), SharedMemoryError);
  EXPECT_THROW(SharedMemoryAllreduce::open(created->name(), 2, 2), SharedMemoryError);
  auto first = SharedMemoryAllreduce::open(created->name(), 1, 2);
  EXPECT_THROW(SharedMemoryAllreduce::open(created->name(), 1, 2), SharedMemoryError)
      << "rank 1 is held by another open";
  const std::string name = created->name();
  created->unlink();
  EXPECT_EQ(created->name(), "");
  EXPECT_THROW(SharedMemoryAllreduce::open(name, 1, 2), SharedMemoryError)
      << "the name is gone after unlink";
}

}  // namespace
}  // namespace ddprun::worker
