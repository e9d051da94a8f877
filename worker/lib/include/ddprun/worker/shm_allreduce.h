#pragma once
// All-reduce through one shared-memory segment, for jobs whose ranks all run on one node.
// Gloo over loopback TCP costs about half a millisecond per small all-reduce on these
// machines (thread hand-offs on both sides); here it is two barriers on shared counters and
// a few memcpys. No LibTorch: Communicator chooses it (docs/worker-library.md).
//
// Algorithm, per chunk of at most chunk_bytes(): every rank copies its chunk into its own
// slot and arrives; each rank then reduces its 1/size share over all slots in rank order
// into a shared result and arrives again; every rank copies the result back. Every element
// is reduced by one rank in one order, so all ranks end bit-identical. Chunks alternate
// between two sets of slots, which makes two barriers per chunk enough.
//
// reduce() and broadcast() are the two halves of a hierarchical all-reduce (Communicator):
// the node's sum to one rank, and that rank's result to the node.
//
// A peer that died (its lock on the segment is gone), that abort()ed, or that did not
// arrive within the timeout makes a collective throw SharedMemoryError naming it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddprun::worker {

enum class ShmType { kFloat32, kFloat64, kInt32, kInt64 };
enum class ShmOp { kSum, kMin, kMax };

class SharedMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class SharedMemoryAllreduce {
 public:
  // Rank 0: creates a new segment (anonymous memory, never a file in /dev/shm, freed when
  // the last rank holding it exits) sized for `size` ranks with all its memory reserved, so
  // that a lack of memory fails here and not later. Throws SharedMemoryError on any failure.
  // name() is what the others open: its path in /proc, usable by this user's processes in
  // this PID namespace.
  static std::unique_ptr<SharedMemoryAllreduce> create(int size);
  // The other ranks: opens the segment rank 0 created. Throws SharedMemoryError when it is
  // missing, of another size or layout.
  static std::unique_ptr<SharedMemoryAllreduce> open(const std::string& name, int rank, int size);

  ~SharedMemoryAllreduce();
  SharedMemoryAllreduce(const SharedMemoryAllreduce&) = delete;
  SharedMemoryAllreduce& operator=(const SharedMemoryAllreduce&) = delete;

  const std::string& name() const { return name_; }
  std::size_t chunk_bytes() const { return chunk_bytes_; }
  // The job's rank of each of the segment's ranks, for error messages (default: the same).
  void set_job_ranks(std::vector<int> ranks);
  // Whether a waiter spins briefly before it sleeps (default: when the segment's ranks fit
  // this process's CPUs, may_spin); the communicator knows better under CPU binding.
  void set_spin(bool spin) { spin_ = spin; }
  // Rank 0, once every rank has opened it: nobody can open it any more (name() is then
  // empty); the memory stays mapped.
  void unlink();

  // In-place all-reduce of `count` elements at `data`; every rank must call it with the same
  // count, type and op, in the same order. Blocks until all ranks have contributed.
  void allreduce(void* data, std::size_t count, ShmType type, ShmOp op,
                 std::chrono::milliseconds timeout);
  // The same reduction, but only `root` gets the result; the others' data stay as they were.
  void reduce(void* data, std::size_t count, ShmType type, ShmOp op, int root,
              std::chrono::milliseconds timeout);
  // Overwrites `bytes` bytes at `data` on every rank with root's.
  void broadcast(void* data, std::size_t bytes, int root, std::chrono::milliseconds timeout);
  // Makes every rank waiting in a collective now or later throw SharedMemoryError naming this
  // rank: for a rank that cannot finish its part (its all-reduce between nodes failed), so
  // that its peers here fail at once instead of at the timeout. The segment stays unusable.
  void abort();

 private:
  struct Layout;
  SharedMemoryAllreduce(std::string name, int fd, int rank, int size, std::size_t chunk_bytes,
                        void* base, std::size_t mapped_bytes);
  void reduce_chunks(void* data, std::size_t count, ShmType type, ShmOp op, int root,
                     std::chrono::milliseconds timeout);
  std::byte* slot_set() const;  // the slot set of the current chunk
  int job_rank(int rank) const;
  void arrive();
  void wait_for_all(std::chrono::steady_clock::time_point deadline);
  void check_peers_alive() const;
  void throw_if_aborted() const;

  std::string name_;
  int fd_ = -1;
  int rank_ = 0;
  int size_ = 1;
  std::size_t chunk_bytes_ = 0;
  void* base_ = nullptr;
  std::size_t mapped_bytes_ = 0;
  std::uint64_t phase_ = 0;        // phases this rank has completed (two per chunk)
  std::uint64_t chunks_done_ = 0;  // picks the slot set: chunks alternate between two
  bool spin_ = true;               // false when ranks outnumber CPUs: sleep instead
  std::vector<int> job_ranks_;     // empty: the segment's ranks are the job's
};

}  // namespace ddprun::worker
