#pragma once
// What communicator.cc and hierarchy.cc share, private to the library: the communicator's,
// planes' and pending works' state, and the helpers both call.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collective_trace.h"
#include "ddprun/worker/communicator.h"
#include "ddprun/worker/env.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/shm_allreduce.h"
#include "torch_compat.h"

namespace ddprun::worker {

// The data plane of the test double that refuses what NCCL would (see Plane).
inline constexpr const char* kGlooAsNccl = "gloo-as-nccl";

// How long PendingWork::wait() yields before it blocks, and from what size (see there).
inline constexpr std::chrono::milliseconds kSpinBeforeBlocking{20};
inline constexpr std::size_t kSpinFromBytes = 64 << 10;

struct CommunicatorImpl {
  int rank = 0;
  int size = 1;
  // Declared before the planes: it outlives them (their works end its entries).
  std::unique_ptr<TraceWriter> trace;
  std::chrono::milliseconds unresponsive_wait{5'000};
  std::chrono::milliseconds timeout{300'000};
  // Whether PendingWork::wait() may yield in a loop: not when this node's ranks outnumber
  // its CPUs, where a yielding rank takes turns from the others' compute and gloo threads.
  bool yield_in_wait = true;
  bool failed = false;
  // The shared-memory segments of the planes: aborted by the first failure, so that this
  // node's other ranks fail at once instead of waiting for this one until the timeout.
  std::vector<SharedMemoryAllreduce*> segments;
  // The store as made (TCPStore, FileStore; on rank 0 it also runs the server), and the
  // group's view of it under the run's, round's and group's prefix.
  c10::intrusive_ptr<c10d::Store> base_store;
  c10::intrusive_ptr<c10d::Store> store;
  std::unique_ptr<Plane> control;
  std::unique_ptr<Plane> data;  // null: the control plane carries the data too

  [[noreturn]] void fail(const std::string& op, const std::exception& error);
  // A failed group's gloo backends end on a thread of their own: a collective of theirs may
  // wait on a survivor that left it, which gloo 1.13 does not end (its unbound-buffer wait
  // sees no closed connection) before its timeout, and ~ProcessGroupGloo waits for it. The
  // rank goes on at once; that thread ends with the wait.
  void end_backends_apart();
  static std::unique_ptr<Plane> plane(std::unique_ptr<Plane::Impl> impl) {
    return std::unique_ptr<Plane>(new Plane(std::move(impl)));
  }
  // Runs `body`; a failure becomes fail(op, ...). After a failure nothing runs any more.
  template <typename F>
  void guard(const char* op, F&& body) {
    if (failed) {
      throw CollectiveError(std::string(op) + " on rank " + std::to_string(rank) +
                            ": the communicator is unusable after an earlier failed collective");
    }
    try {
      body();
    } catch (const CollectiveError&) {
      throw;
    } catch (const c10::Error& e) {
      fail(op, e);
    } catch (const std::runtime_error& e) {
      fail(op, e);
    }
  }
};

// A hierarchical all-reduce between its launch and its end: the leaders' gloo all-reduce (on
// a leader) and the broadcast of its result through the node's segment, still owed.
struct NodeStep {
  c10::intrusive_ptr<c10d::Work> work;  // null on the node's other ranks
  std::function<void()> then;           // the leader's rest of a compressed exchange
  at::Tensor tensor;
  int divisor = 1;           // a compressed fp16 sum: multiplied back by it at the end
  bool yield_first = false;  // see PendingWork::wait()
  bool done = false;
};

struct Plane::Impl {
  CommunicatorImpl* owner = nullptr;  // outlives its planes
  c10::intrusive_ptr<compat::CollectiveBackend> backend;
  std::string name;  // what transport() says, without shared memory
  at::Device device{at::kCPU};
  // All-reduces of CPU tensors among this machine's ranks (null: every all-reduce goes to
  // `backend`, or, across machines, this rank is alone on its machine).
  std::unique_ptr<SharedMemoryAllreduce> shm;
  // Hierarchical all-reduce, when the job spans machines and some run several ranks: the
  // machine's sum to its leader (its lowest rank) through `shm`, an all-reduce among the
  // leaders over gloo (`leaders`, on leaders only), the result back through `shm`.
  bool across_nodes = false;
  int nodes = 1;
  c10::intrusive_ptr<compat::CollectiveBackend> leaders;
  // Launched and not yet ended, in launch order: at most one, since a launch first ends the
  // one before (allreduce_across_nodes); one dropped unwaited ends with the next launch or
  // wait.
  std::deque<std::shared_ptr<NodeStep>> owed;
  // gloo-as-nccl: refuse what NCCL would refuse. The storages device_zeros() made stand for
  // GPU memory; weak, so a freed one is not mistaken for a new tensor at the same address.
  bool device_rules = false;
  std::unordered_map<const void*, c10::weak_intrusive_ptr<c10::StorageImpl>> device_storages;

  // The collective trace (collective_trace.h): which of the rank's planes this is, and how
  // deep in the plane's own calls (a collective made of others is recorded once).
  int trace_plane = 0;
  int trace_depth = 0;

  void check_device_rules(const char* op, const at::Tensor& tensor) const;
  // Throws UsageError naming `tensor`'s dtype when this plane's backend cannot carry it,
  // before anything starts (not a failed collective: no roll call of the ranks).
  void check_carried(const char* op, const at::Tensor& tensor) const;
  // `pending` completes the traced collective `entry`: its wait() ends it; one with nothing
  // left to wait for (done when started) ends it now.
  static PendingWork traced(PendingWork pending, trace::Entry* entry);
  PendingWork allreduce_across_nodes(at::Tensor& tensor, ShmType type, ReduceOp op,
                                     at::ScalarType wire = at::kFloat);
  void finish_through(const NodeStep* step);
};

struct PendingWork::Impl {
  c10::intrusive_ptr<c10d::Work> work;
  std::function<void()> then;         // after `work`: the rest of a collective made of several
  CommunicatorImpl* owner = nullptr;  // outlives the work (documented in the header)
  bool yield_first = false;           // a CPU collective: see wait()
  // A hierarchical all-reduce: its step, and the plane that owes it (outlives the work).
  std::shared_ptr<NodeStep> step;
  Plane::Impl* plane = nullptr;
  trace::Entry* traced = nullptr;  // ended when the work completes
};

// Yields the CPU until `work` completes, for at most kSpinBeforeBlocking (see
// PendingWork::wait()).
void yield_while_running(c10d::Work& work);

c10d::ReduceOp to_c10d(ReduceOp op);
std::optional<ShmOp> to_shm(ReduceOp op);
// How a segment sums `tensor`, when it can (a contiguous CPU tensor of a summable type).
std::optional<ShmType> to_shm(const at::Tensor& tensor);

// `tensor`'s float values rounded to `wire` (bf16 or fp16), in place.
void round_to(at::Tensor& tensor, at::ScalarType wire);
// What a compressed all-reduce over `world` ranks divides each rank's values by before
// rounding them to `wire`, and multiplies the rounded sum by: the world size for fp16, 1
// for bf16 (communicator.cc says why).
int compression_divisor(at::ScalarType wire, int world);
// Starts the compressed sum of `tensor` over `backend` (communicator.cc says how): `work`
// to wait for, then `then`.
void start_compressed_exchange(compat::CollectiveBackend& backend, const at::Tensor& tensor,
                               at::ScalarType wire, c10::intrusive_ptr<c10d::Work>& work,
                               std::function<void()>& then);

// hierarchy.cc: which ranks share a machine, their segment, the leaders' group.
// Fails at once when this rank and rank 0 would join shared memory on different paths.
void check_join_path_agrees(c10d::Store& store, const WorkerEnv& env);
// The segment of one machine's `size` ranks (this one number `index`), or null when any of
// them could not open it.
std::unique_ptr<SharedMemoryAllreduce> join_shared_memory(c10d::Store& store,
                                                          const std::string& keys, int index,
                                                          int size, int rank, bool spin);
// Several machines: gives `plane` its machine's segment and, where it pays, the hierarchy.
void join_across_machines(Plane::Impl& plane, const c10::intrusive_ptr<c10d::Store>& store,
                          const WorkerEnv& env, const CommOptions& options);

inline std::uint64_t bytes_of(const at::Tensor& tensor) {
  return static_cast<std::uint64_t>(tensor.numel()) *
         static_cast<std::uint64_t>(tensor.element_size());
}

// One collective in the rank's trace, begun by the outermost call on its plane. A
// synchronous one ends with the scope; an asynchronous one is handed to its PendingWork
// (take() then Plane::Impl::traced).
class TraceScope {
 public:
  TraceScope(Plane::Impl& plane, trace::Op op, std::uint64_t bytes) : plane_(plane) {
    if (plane_.trace_depth++ == 0 && plane_.owner->trace) {
      entry_ = plane_.owner->trace->begin(plane_.trace_plane, op, bytes);
    }
  }
  ~TraceScope() {
    --plane_.trace_depth;
    if (std::uncaught_exceptions() == 0) TraceWriter::end(entry_);
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;
  trace::Entry* take() { return std::exchange(entry_, nullptr); }

 private:
  Plane::Impl& plane_;
  trace::Entry* entry_ = nullptr;
};

}  // namespace ddprun::worker
