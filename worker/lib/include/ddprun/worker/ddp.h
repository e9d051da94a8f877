#pragma once
// Data-parallel training over a Communicator: identical start, averaged gradients, with
// the all-reduces overlapped with backward (docs/worker-library.md).

#include <torch/nn/module.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ddprun/worker/communicator.h"

namespace ddprun::worker {

// How a gradient bucket is summed across ranks, as PyTorch's register_comm_hook: `start`
// begins the sum of `bucket` (the bucket's flat gradients, on the data plane's device) over
// `plane` and returns its work; once waited, `bucket` must hold the sum, the same bits on
// every rank (DDP then divides by the world size). `name` must be the same on every rank
// (checked when DDP is made). Empty `start`: a plain all-reduce.
struct CommHook {
  std::string name = "none";
  std::function<PendingWork(Plane& plane, at::Tensor& bucket)> start;
  // The built-in compression hooks' wire type (float otherwise): with sharded gradients
  // (ZeRO-1) the reduce-scatter sends it instead of calling `start`.
  at::ScalarType wire = at::kFloat;
};
// Built in: half the bytes on the wire, each rank's gradients rounded to bf16 (fp16, after
// dividing by the world size as PyTorch's fp16_compress_hook does), summed in float, the sum
// rounded and cast back (Plane::allreduce_compressed_async). Buckets of other than float go
// uncompressed.
CommHook bf16_compress_hook();
CommHook fp16_compress_hook();

struct DdpOptions {
  std::size_t bucket_cap_bytes = 25u << 20;       // like PyTorch's bucket_cap_mb = 25
  std::size_t first_bucket_cap_bytes = 1u << 20;  // PyTorch's small first bucket: starts early
  // true: a bucket's all-reduce starts during backward as soon as all its gradients are
  // ready; false: all start after backward (for comparison; same numbers).
  bool overlap = true;
  // A trainable parameter that got no gradient in a synced backward is an error (false) or
  // counts as ready with its current gradient, zero if it has none (true). With true, as in
  // PyTorch, a parameter that no rank used keeps the gradient it had (undefined when the
  // caller set gradients to none, so the optimizer leaves it alone): one more small
  // all-reduce per step, of which parameters each rank used.
  bool find_unused_parameters = false;
  // true (PyTorch's default): prepare_for_forward() broadcasts rank 0's buffers (running
  // statistics and the like) so every rank's forward sees the same ones.
  bool broadcast_buffers = true;
  CommHook comm_hook;  // the default: a plain all-reduce
  // ZeRO-1 (ShardedOptimizer, zero.h): each bucket is reduce-scattered instead of
  // all-reduced, and finish_gradient_sync() leaves this rank's share of every bucket holding
  // its average (bucket_share()) instead of writing the parameters' gradients (it sets them
  // to none). With the built-in compression hooks the reduce-scatter sends bf16 or fp16;
  // not with find_unused_parameters or a hook of one's own.
  bool shard_gradients = false;
  // With shard_gradients, for live recovery (ShardedOptimizer keeps the next rank's share
  // too): each bucket is all-reduced whole instead, and finish_gradient_sync() leaves every
  // share holding its average (the next rank's among them). Costs the all-gather half of an
  // all-reduce more each step; the optimizer state kept is 2/N of the whole instead of 1/N.
  bool keep_next_share = false;
};

// What the last synced step did (for tests and benchmarks).
struct SyncStats {
  std::vector<std::size_t> launch_order;     // bucket indices in the order launched
  std::size_t launched_during_backward = 0;  // launched before backward ended
  // Of those, the ones handed to the backend's threads while backward went on computing.
  // Through shared memory an all-reduce is done inside the hook: launched during backward,
  // but not overlapped with it.
  std::size_t overlapped_with_backward = 0;
  std::vector<std::string> unused_parameters;     // treated as ready with find_unused_parameters
  std::vector<std::string> unused_on_every_rank;  // of those, the ones no rank used: untouched
  // Seconds this rank spent in gradient communication on its own thread: launching buckets
  // (a shared-memory all-reduce is done there) and waiting for them. A rank that computes
  // slower than its peers waits least: the others wait for it.
  double wait_seconds = 0;
};

// Wraps a module replicated on every rank. Construction checks on the control plane that
// every rank holds the same parameters, buffers and bucket layout (else ConsistencyError
// naming the first difference, on every rank), broadcasts rank 0's parameters and buffers
// on the data plane (collective: every rank must construct it) and hooks every trainable
// parameter's gradient accumulator. Each step:
//   ddp.prepare_for_forward(); loss = f(module(x)); loss.backward();
//   ddp.finish_gradient_sync(); opt.step();
// While gradient sync is on, each gradient is copied into its bucket as autograd produces
// it; a full bucket is all-reduced asynchronously, buckets always launched in index order
// on every rank (a bucket that fills early waits for its predecessors). At the end of
// backward, parameters without a gradient are handled per find_unused_parameters.
// finish_gradient_sync() waits, divides by the world size and writes the averages into
// the parameters' gradients. Call finish_gradient_sync() after every synced backward: a
// second backward before it is an error. Not thread-safe (autograd's hooks are serialised
// internally). Keeps references to `module` and `comm`, which must outlive it.
class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, Communicator& comm,
                          DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Before each training forward, as PyTorch's DDP does in forward(): broadcasts rank 0's
  // buffers when broadcast_buffers is on, gradient sync is on, the module has buffers and
  // there is more than one rank (collective then: every rank must call it); else nothing.
  void prepare_for_forward();

  // Forgets a step left unfinished (e.g. by an exception). Optional otherwise: every
  // finish_gradient_sync() leaves the next step ready.
  void prepare_for_backward();

  // Replaces every trainable parameter's gradient with the average over all ranks
  // (collective). Throws ddprun::ConfigError naming the parameters that got no gradient
  // (find_unused_parameters false), or ddprun::UsageError when backward ran twice in one
  // step. Does nothing while gradient sync is off (no_sync): gradients accumulate locally
  // and the next synced step averages the sum. With one rank, only checks for unused
  // parameters.
  void finish_gradient_sync();

  // Off: hooks do nothing and finish_gradient_sync() returns at once (PyTorch's
  // no_sync()). Switch only between steps.
  void set_gradient_sync(bool enabled);
  bool gradient_sync() const { return sync_enabled_; }

  // Broadcasts rank 0's parameters and buffers again (collective).
  void broadcast_state();

  std::size_t bucket_count() const { return buckets_.size(); }
  // A bucket's flat buffer (with shard_gradients padded to a multiple of the world size, so
  // that it cuts into equal shares in rank order), this rank's share of it, and the
  // parameters it holds with their offsets in it.
  at::Tensor& bucket_buffer(std::size_t b) { return buckets_[b].flat; }
  at::Tensor bucket_share(std::size_t b);
  bool keeps_next_share() const { return options_.shard_gradients && options_.keep_next_share; }
  std::vector<std::pair<at::Tensor, std::int64_t>> bucket_parameters(std::size_t b) const;
  const SyncStats& last_sync_stats() const { return last_stats_; }
  torch::nn::Module& module() { return *module_; }

 private:
  struct Param {
    at::Tensor tensor;
    std::string name;
    std::size_t bucket = 0;
    std::int64_t offset = 0;  // in the bucket's flat buffer
    bool ready = false;
    bool used = false;  // ready from its own gradient this step, not as unused
  };
  struct Bucket {
    std::vector<std::size_t> params;  // indices into params_
    at::Tensor flat;                  // one contiguous buffer, reused every step
    std::size_t pending = 0;          // gradients not ready yet this step
    PendingWork work;
  };

  void check_bucket_layout_agrees();
  void on_gradient_ready(std::size_t param);  // autograd hook
  void on_backward_end();                     // end-of-backward callback
  void wait_counted(PendingWork& work);       // work.wait(), its time in wait_seconds
  void mark_ready_locked(Param& p);
  void launch_ready_buckets_locked();
  void reset_step_locked();

  std::shared_ptr<torch::nn::Module> module_;
  Communicator& comm_;
  DdpOptions options_;
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  std::vector<std::shared_ptr<void>> hooks_;  // removed when destroyed
  bool sync_enabled_ = true;
  at::Tensor used_counts_;  // with find_unused_parameters: per parameter, ranks that used it

  // Per-step state, shared with autograd's hooks.
  std::mutex mutex_;
  std::size_t ready_count_ = 0;
  std::size_t next_bucket_ = 0;
  bool callback_queued_ = false;
  bool backward_ended_ = false;
  std::string error_;  // set by a hook or the callback, thrown by finish
  bool error_is_unused_ = false;
  SyncStats stats_;  // of the step in progress
  SyncStats last_stats_;
};

// RAII no_sync(): gradient sync off for the guard's lifetime, then back to what it was.
class NoSyncGuard {
 public:
  explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), was_(ddp.gradient_sync()) {
    ddp_.set_gradient_sync(false);
  }
  ~NoSyncGuard() { ddp_.set_gradient_sync(was_); }
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;

 private:
  DistributedDataParallel& ddp_;
  bool was_;
};

}  // namespace ddprun::worker
