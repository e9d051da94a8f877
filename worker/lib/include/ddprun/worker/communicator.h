#pragma once
// The process group of a job: rendezvous through a TCPStore and collectives over gloo
// (NCCL where LibTorch has CUDA). c10d types stay behind this class (see torch_compat.h).

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ddprun/worker/env.h"

namespace ddprun::worker {

enum class ReduceOp { kSum, kMin, kMax };

struct CommOptions {
  std::string backend = "gloo";  // "gloo" or "nccl"
  std::chrono::milliseconds timeout{300'000};
  // After a collective fails: how long to wait for the other ranks' marks in the store.
  std::chrono::milliseconds unresponsive_wait{5'000};
  // Gloo only: when every rank runs on this node (LOCAL_WORLD_SIZE == WORLD_SIZE), all-reduce
  // CPU tensors through shared memory (shm_allreduce.h) instead of loopback TCP. Every rank
  // must join it, or all use gloo.
  bool shared_memory = true;
  // How the ranks meet (init_method.h): env:// (the default), tcp://HOST:PORT, file:///PATH.
  std::string init_method = "env://";
};

// A collective in flight. wait() blocks until it is done and throws CollectiveError (see
// Communicator) if it failed or timed out. Destroying it without wait() is allowed.
class PendingWork {
 public:
  PendingWork();
  ~PendingWork();
  PendingWork(PendingWork&&) noexcept;
  PendingWork& operator=(PendingWork&&) noexcept;
  void wait();

 private:
  friend class Communicator;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One rank's membership in a job. Not thread-safe: call from one thread.
//
// When a collective fails (gloo throws: a peer timed out, closed its connection, ...),
// this rank sets the key "responsive/<rank>" in the job's store, waits up to
// `unresponsive_wait` for the other ranks' keys (they do the same when their collective
// fails) and throws CollectiveError naming the ranks whose key never appeared, or rank 0
// when the store it hosts does not answer within that time. Only the first failure does
// this; the communicator is not usable afterwards.
class Communicator {
 public:
  // Joins the job described by `env`: rank 0 hosts the TCPStore on MASTER_PORT (standalone:
  // a free port), the others wait for it to accept, then connect. Keys live under a prefix
  // of the run id and restart count, so workers of another run or round never meet. Blocks
  // until every rank has joined or `options.timeout` passes (then throws). Throws
  // ConfigError for an unknown or unavailable backend.
  static std::unique_ptr<Communicator> connect(const WorkerEnv& env, const CommOptions& options);

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int world_size() const;
  // "gloo", "gloo + shared memory" or "nccl": what all-reduces travel over.
  std::string transport() const;

  // Starts an in-place all-reduce of `tensor` (contiguous) over all ranks. Through shared
  // memory (float, double, int32, int64 on the CPU) it is done when this returns.
  PendingWork allreduce_async(at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  // All-reduce in place and wait.
  void allreduce(at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  // Overwrites `tensors` (contiguous) on every rank with root's, and waits.
  void broadcast(std::vector<at::Tensor>& tensors, int root = 0);
  // Returns when every rank has called it.
  void barrier();

 private:
  friend class PendingWork;
  struct Impl;
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::worker
