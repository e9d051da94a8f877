#pragma once
// The process groups of a job: rendezvous through a store, a control plane over gloo and a
// data plane over the device backend (NCCL where LibTorch has CUDA). c10d types stay behind
// these classes (see torch_compat.h).

#include <ATen/core/Tensor.h>

#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddprun/worker/env.h"

namespace ddprun::worker {

enum class ReduceOp { kSum, kMin, kMax };

struct CommOptions {
  // What the data plane travels over: "gloo", "nccl", or "gloo-as-nccl" (a test aid for
  // machines without a GPU: gloo that refuses what NCCL would refuse, see Plane).
  std::string backend = "gloo";
  std::chrono::milliseconds timeout{300'000};
  // After a collective fails: how long to wait for the other ranks' marks in the store.
  std::chrono::milliseconds unresponsive_wait{5'000};
  // Gloo all-reduces of CPU tensors go through shared memory (shm_allreduce.h) among the
  // ranks of a machine: on one machine (LOCAL_WORLD_SIZE == WORLD_SIZE) the whole
  // all-reduce; across machines with several ranks on some, hierarchically (each machine's
  // sum to its lowest rank, gloo among those, the result back). Every rank must join its
  // machine's segment, or all use flat gloo.
  bool shared_memory = true;
  // How the ranks meet (init_method.h): env:// (the default), tcp://HOST:PORT, file:///PATH.
  std::string init_method = "env://";
  // Which group of the round this is: 0 at the start, a recovery's number once lost ranks
  // were replaced (Communicator::rejoin, membership.h). Each group's keys live apart: no
  // rank of an earlier group can complete a later one's rendezvous.
  int group = 0;
};

// A collective in flight. wait() returns when it is done and throws CollectiveError (see
// Communicator) if it failed or timed out. On a CPU plane (gloo), for 64 KiB and more, it
// yields the CPU in a loop for up to 20 ms before it blocks, so that gloo's threads get a
// core at once; not when this node's ranks (LOCAL_WORLD_SIZE) outnumber the CPUs it may
// run on, where the loop would take turns from the other ranks.
// Destroying it without wait() is allowed. Waits may come in any order, and launches and
// waits may interleave differently on each rank. Across nodes (hierarchical, see Plane) one
// all-reduce is in flight per plane: launching the next first ends the one before, and one
// dropped unwaited is ended by the next launch or wait on its plane (until then its node's
// other ranks may be waiting for it).
class PendingWork {
 public:
  PendingWork();
  ~PendingWork();
  PendingWork(PendingWork&&) noexcept;
  PendingWork& operator=(PendingWork&&) noexcept;
  void wait();
  // Whether the collective runs on the backend's threads (gloo, NCCL) rather than having
  // been done when it was started (shared memory), until wait().
  bool asynchronous() const;

 private:
  friend class Plane;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct CommunicatorImpl;

// One process group of the job: every rank, one backend. Not thread-safe.
//
// The data plane's rules are the device backend's: with NCCL every tensor must be dense,
// contiguous and on this rank's GPU, and only all-reduce and broadcast are used. On the
// "gloo-as-nccl" test double the data plane enforces the same on the CPU, where "on the
// device" means "allocated by device_zeros() of this plane" (a control tensor made with
// torch::tensor() would be on the CPU, not the GPU, under NCCL): any other tensor, or a
// barrier, throws UsageError naming the rule.
class Plane {
 public:
  ~Plane();
  Plane(const Plane&) = delete;
  Plane& operator=(const Plane&) = delete;

  int rank() const;
  int world_size() const;
  // "gloo", "gloo + shared memory", "nccl" or "gloo-as-nccl".
  std::string transport() const;
  // Where this plane's tensors live: the CPU, or this rank's GPU under NCCL.
  at::Device device() const;
  // A zero tensor of `numel` elements on device() that this plane accepts.
  at::Tensor device_zeros(std::int64_t numel, at::ScalarType type);

  // Starts an in-place all-reduce of `tensor` (contiguous) over all ranks. Through shared
  // memory (float, double, int32, int64 on the CPU) it is done when this returns.
  PendingWork allreduce_async(at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  // Starts an in-place sum of a contiguous float `tensor` that sends `wire` (at::kBFloat16
  // or at::kHalf) instead of float: half the bytes. Each rank's values are rounded to
  // `wire`, summed in float, and the sum rounded to `wire`; every rank ends with the same
  // bits. fp16 (largest value 65504) is rounded after dividing by the world size N, as
  // PyTorch's fp16_compress_hook orders it, and the rounded sum multiplied back by N
  // (exact in float for N < 8192), so that N values under 65504 never overflow; bf16 has
  // float's range and is rounded as it is. Over gloo or NCCL an all-to-all (each rank sums one 1/N
  // share, started here) and an all-gather of the shares' sums (in wait()); through shared memory
  // the same rounding with nothing on a wire; across nodes the node's float sum, then the leaders'
  // exchange.
  PendingWork allreduce_compressed_async(at::Tensor& tensor, at::ScalarType wire);
  // Starts a sum over all ranks of which each rank needs only its share: `flat` (contiguous,
  // numel a multiple of world_size()) is cut into world_size() equal shares in rank order,
  // and after wait() this rank's share holds the sum of every rank's share (the rest of
  // `flat` is left undefined). Over gloo or NCCL an all-to-all, then this rank sums its
  // share in rank order: half the bytes of an all-reduce. Through shared memory (one node,
  // or across nodes) an all-reduce. `wire` bf16 or fp16 (a float `flat` only): each rank's
  // values rounded to it go out (fp16 divided by N first and the sum multiplied back, as
  // above), half the bytes again, and are summed in float (through shared memory as
  // allreduce_compressed_async).
  PendingWork reduce_scatter_async(at::Tensor& flat, at::ScalarType wire = at::kFloat);
  // Every rank's share of `flat` (cut as above) to every rank, and waits.
  void allgather_shares(at::Tensor& flat);
  // All-reduce in place and wait.
  void allreduce(at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  // Overwrites `tensors` (contiguous) on every rank with root's, and waits.
  void broadcast(std::vector<at::Tensor>& tensors, int root = 0);
  // Returns when every rank has called it.
  void barrier();

  struct Impl;  // defined and made in communicator.cc only

 private:
  friend class Communicator;
  friend struct CommunicatorImpl;
  friend class PendingWork;
  explicit Plane(std::unique_ptr<Impl> impl);
  // The collectives themselves; the public calls record them in the rank's trace first.
  PendingWork allreduce_untraced(at::Tensor& tensor, ReduceOp op);
  PendingWork allreduce_compressed_untraced(at::Tensor& tensor, at::ScalarType wire);
  PendingWork reduce_scatter_untraced(at::Tensor& flat, at::ScalarType wire);
  std::unique_ptr<Impl> impl_;
};

// One rank's membership in a job, with two planes, as PyTorch keeps a gloo group beside
// NCCL for CPU and object collectives:
//   control(): always gloo on CPU tensors (through shared memory on one node). For the job's
//     agreements: stop checks, replica checksums, evaluation sums, checkpoint and resume
//     agreement, metrics, DDP's construction check.
//   data(): the device backend, for the model's tensors only: the initial and buffer
//     broadcasts and the gradient buckets (DistributedDataParallel uses it).
// With backend "gloo" both are the same group. Not thread-safe: call from one thread.
//
// When a collective fails (gloo throws: a peer timed out, closed its connection, ...),
// this rank sets the key "responsive/<rank>" in the job's store, waits up to
// `unresponsive_wait` for the other ranks' keys (they do the same when their collective
// fails) and throws CollectiveError naming the ranks whose key never appeared, or rank 0
// when the store it hosts does not answer within that time. Only the first failure does
// this; the communicator is not usable afterwards: every later collective on either plane
// throws CollectiveError at once.
class Communicator {
 public:
  // Joins the job described by `env`: rank 0 hosts the TCPStore on MASTER_PORT (standalone:
  // a free port), the others wait for it to accept, then connect. Keys live under a prefix
  // of the run id and restart count, so workers of another run or round never meet. Blocks
  // until every rank has joined or `options.timeout` passes (then throws). Throws
  // ConfigError for an unknown or unavailable backend. `device` is the data plane's device
  // (this rank's GPU for NCCL; the CPU otherwise).
  static std::unique_ptr<Communicator> connect(const WorkerEnv& env, const CommOptions& options,
                                               at::Device device = at::kCPU);

  // A survivor's way into the next group (`options.group`) after a lost rank was replaced:
  // ends `old` (its planes and their threads), and joins the new group with the replacements,
  // as connect() does. The store stays where it was, on rank 0, unless rank 0 was lost
  // (`store_host_lost`): then rank 0's replacement hosts a new one on the same address and
  // port, and this rank connects to that. CPU planes only (gloo): NCCL has no way here to
  // end a communicator whose peer died. A TCP store only (env://, tcp://): a FileStore
  // removes its file once as many users as the world size have left. Throws ConfigError
  // otherwise.
  static std::unique_ptr<Communicator> rejoin(std::unique_ptr<Communicator> old,
                                              const WorkerEnv& env, const CommOptions& options,
                                              bool store_host_lost);

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int world_size() const;
  // What the data plane travels over, and the control plane when it is another group:
  // "gloo + shared memory", "nccl, control over gloo + shared memory".
  std::string transport() const;

  Plane& control();
  Plane& data();

 private:
  explicit Communicator(std::unique_ptr<CommunicatorImpl> impl);
  std::unique_ptr<CommunicatorImpl> impl_;
};

}  // namespace ddprun::worker
