#include "ddprun/worker/communicator.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <deque>
#include <exception>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "collective_trace.h"
#include "cpus.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/init_method.h"
#include "ddprun/worker/shm_allreduce.h"
#include "ddprun/worker/stop_signals.h"
#include "net.h"
#include "torch_compat.h"

namespace ddprun::worker {

// How long PendingWork::wait() yields before it blocks, and from what size (see there).
constexpr std::chrono::milliseconds kSpinBeforeBlocking{20};
constexpr std::size_t kSpinFromBytes = 64 << 10;

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
  c10::intrusive_ptr<c10d::Store> store;
  std::unique_ptr<Plane> control;
  std::unique_ptr<Plane> data;  // null: the control plane carries the data too

  [[noreturn]] void fail(const std::string& op, const std::exception& error);
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

PendingWork::PendingWork() = default;
PendingWork::~PendingWork() = default;
PendingWork::PendingWork(PendingWork&&) noexcept = default;
PendingWork& PendingWork::operator=(PendingWork&&) noexcept = default;

bool PendingWork::asynchronous() const {
  return impl_ && (impl_->work || impl_->step);
}

namespace {

// Yields the CPU until `work` completes, for at most kSpinBeforeBlocking (see wait()).
void yield_while_running(c10d::Work& work) {
  const auto until = std::chrono::steady_clock::now() + kSpinBeforeBlocking;
  while (!work.isCompleted() && std::chrono::steady_clock::now() < until) sched_yield();
}

}  // namespace

void PendingWork::wait() {
  if (!impl_) return;
  // Ended on a normal return only: a collective that failed or timed out stays open.
  trace::Entry* const traced = std::exchange(impl_->traced, nullptr);
  struct EndOnReturn {
    trace::Entry* entry;
    ~EndOnReturn() {
      if (std::uncaught_exceptions() == 0) TraceWriter::end(entry);
    }
  } end_on_return{traced};
  if (auto step = std::move(impl_->step)) {
    if (!step->done) impl_->plane->finish_through(step.get());
    return;
  }
  auto then = std::move(impl_->then);  // run once, whatever happens
  if (!impl_->work) {
    if (then) impl_->owner->guard("all-reduce", then);
    return;
  }
  auto work = std::move(impl_->work);  // waited for once, whatever happens
  // Gloo's all-reduce is a chain of hand-offs between its threads and the peer's (worker,
  // socket loop). Blocked here, this thread leaves its core idle: an idle (virtual) CPU
  // halts, and on a busy one a woken thread can wait out another's time slice. Over
  // loopback on 2 cores a 940 KB all-reduce then took 0.5 ms half the time and 2-8 ms
  // otherwise. Yielding instead keeps the core awake and hands it at once to whichever
  // gloo thread is ready; past kSpinBeforeBlocking (a straggler) it blocks as before.
  // Only from kSpinFromBytes: a tiny all-reduce (the toy's 220 bytes) is over before a
  // blocked thread would sleep, and spinning there made its steps bimodal (2 ranks on 2
  // cores: 20-77k samples/s against 45-62k blocking). The MLP's 940 KB and the CNN's 82 KB
  // gain. (NCCL's wait() only orders streams: never spin on a GPU's progress.)
  if (impl_->yield_first) yield_while_running(*work);
  impl_->owner->guard("all-reduce", [&] { work->wait(); });
  if (then) impl_->owner->guard("all-reduce", then);
}

PendingWork Plane::Impl::traced(PendingWork pending, trace::Entry* entry) {
  if (pending.impl_) {
    pending.impl_->traced = entry;
  } else {
    TraceWriter::end(entry);
  }
  return pending;
}

namespace {

std::uint64_t bytes_of(const at::Tensor& tensor) {
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

}  // namespace

void Plane::Impl::finish_through(const NodeStep* step) {
  owner->guard("all-reduce", [&] {
    while (!owed.empty()) {
      const auto next = owed.front();
      if (next->work) {
        if (next->yield_first) yield_while_running(*next->work);
        next->work->wait();  // on failure, fail() aborts the segment: the node's ranks
                             // wait for a result that will not come
      }
      if (next->then) next->then();
      if (shm) {
        // The other ranks wait while the leaders' all-reduce may still run, each of its
        // steps with its own timeout: allow two, so that a remote node's hang is reported
        // by the leader, who sees it, rather than blamed on the leader here.
        shm->broadcast(next->tensor.data_ptr(),
                       static_cast<std::size_t>(next->tensor.numel() * next->tensor.element_size()),
                       0, owner->timeout * 2);
      }
      next->done = true;
      next->work.reset();
      next->then = nullptr;
      next->tensor = at::Tensor();
      owed.pop_front();
      if (next.get() == step) break;
    }
  });
}

namespace {

constexpr const char* kResponsiveKey = "responsive/";

// Marks `rank` in the store and returns the ranks whose marks are missing after `wait`.
// Blocks for as long as the store does not answer: run it where it can be abandoned.
std::vector<int> find_unresponsive(c10d::Store& store, int rank, int size,
                                   std::chrono::milliseconds wait) {
  store.set(kResponsiveKey + std::to_string(rank), std::vector<std::uint8_t>{1});
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::vector<int> missing;
  for (;;) {
    missing.clear();
    for (int r = 0; r < size; ++r) {
      if (r != rank && !store.check({kResponsiveKey + std::to_string(r)})) missing.push_back(r);
    }
    if (missing.empty() || std::chrono::steady_clock::now() >= deadline) return missing;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string list_ranks(const std::vector<int>& ranks) {
  std::string text;
  for (const int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

std::optional<ShmOp> to_shm(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ShmOp::kSum;
    case ReduceOp::kMin:
      return ShmOp::kMin;
    case ReduceOp::kMax:
      return ShmOp::kMax;
  }
  return std::nullopt;
}

std::optional<ShmType> to_shm(const at::Tensor& tensor) {
  if (!tensor.device().is_cpu() || !tensor.is_contiguous()) return std::nullopt;
  switch (tensor.scalar_type()) {
    case at::kFloat:
      return ShmType::kFloat32;
    case at::kDouble:
      return ShmType::kFloat64;
    case at::kInt:
      return ShmType::kInt32;
    case at::kLong:
      return ShmType::kInt64;
    default:
      return std::nullopt;
  }
}

std::vector<std::uint8_t> as_bytes(const std::string& text) {
  return {text.begin(), text.end()};
}

// Shared memory among the `size` ranks of one machine, this rank being number `index` of
// them: number 0 creates the segment and publishes its name under `keys`; each says whether
// it could open it (with its job rank, for error messages); they use it only if all could
// (a rank in a container with its own PID namespace cannot). Number 0 closes the name once
// all have answered. The segment is anonymous memory, never a file in /dev/shm: nothing is
// left behind whoever dies when (SharedMemoryAllreduce::create). Its waiters spin first
// when `spin` (may_spin).
// LOCAL_WORLD_SIZE = WORLD_SIZE sends a rank into one segment for the whole job, else it
// first finds its machine's ranks; ranks on different paths would wait for each other until
// the store timed out (nodes may differ in size: only this choice must agree). Rank 0 says
// its value in the store before either path and every other rank compares: a rank that
// would go the other way fails at once naming both values (its launcher then stops the
// rest). No wait for all ranks: a rank's join never waits for a later rank's start.
void check_join_path_agrees(c10d::Store& store, const WorkerEnv& env) {
  if (env.rank == 0) {
    store.set("local_world_size/0", as_bytes(std::to_string(env.local_world_size)));
    return;
  }
  const auto bytes = store.get("local_world_size/0");
  const int first = std::stoi(std::string(bytes.begin(), bytes.end()));
  if ((first == env.world_size) == (env.local_world_size == env.world_size)) return;
  throw EnvError("rank " + std::to_string(env.rank) + " has LOCAL_WORLD_SIZE " +
                     std::to_string(env.local_world_size) + ", rank 0 has " +
                     std::to_string(first) + " (WORLD_SIZE " + std::to_string(env.world_size) +
                     "): they disagree on whether every rank runs on one node",
                 "every rank needs its node's rank count; a launcher sets it (ddprun, torchrun), "
                 "else set it by hand the same for all ranks of a node");
}

std::unique_ptr<SharedMemoryAllreduce> join_shared_memory(c10d::Store& store,
                                                          const std::string& keys, int index,
                                                          int size, int rank, bool spin) {
  std::unique_ptr<SharedMemoryAllreduce> shm;
  std::string why_not;
  if (index == 0) {
    try {
      shm = SharedMemoryAllreduce::create(size);
    } catch (const SharedMemoryError& e) {
      why_not = e.what();
    }
    store.set(keys + "name", as_bytes(shm ? shm->name() : ""));
  } else {
    const auto name = store.get(keys + "name");
    if (!name.empty()) {
      try {
        shm = SharedMemoryAllreduce::open(std::string(name.begin(), name.end()), index, size);
      } catch (const SharedMemoryError& e) {
        why_not = e.what();
      }
    }
  }
  store.set(keys + "ok/" + std::to_string(index), as_bytes(shm ? std::to_string(rank) : "-"));
  std::vector<int> job_ranks;
  for (int i = 0; i < size; ++i) {
    const auto answer = store.get(keys + "ok/" + std::to_string(i));
    if (answer != as_bytes("-")) {
      job_ranks.push_back(std::stoi(std::string(answer.begin(), answer.end())));
    }
  }
  if (index == 0 && shm) shm->unlink();
  if (!why_not.empty()) {
    std::fprintf(stderr, "ddprun worker: rank %d: all-reduce over gloo, not shared memory: %s\n",
                 rank, why_not.c_str());
  }
  if (!shm || static_cast<int>(job_ranks.size()) != size) return nullptr;
  shm->set_job_ranks(std::move(job_ranks));
  shm->set_spin(spin);
  return shm;
}

// What names this rank's machine: its node's name in ddprun's plan (DDPRUN_HOST), else the
// host name and the kernel's boot id.
std::string machine_name(const WorkerEnv& env) {
  if (!env.host.empty()) return env.host;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(boot, boot_id);
  return std::string(host) + "/" + boot_id;
}

// A nonzero 62-bit FNV-1a hash: every rank's fits in one int64 all-reduce slot.
std::int64_t name_hash(const std::string& name) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return static_cast<std::int64_t>((h & ((std::uint64_t{1} << 62) - 1)) | 1);
}

// Who shares a machine with whom, the same on every rank: one all-reduce of every rank's
// machine name hash. Independent of LOCAL_RANK and GROUP_RANK, which a hand-made
// environment can get wrong.
struct Machines {
  std::vector<int> here;  // the job ranks on this rank's machine, ascending
  int index = 0;          // this rank's place in `here`
  int machine = 0;        // this machine's number, in the order of its lowest rank
  int count = 0;          // machines in the job
  int most = 0;           // ranks on the fullest machine
};

Machines find_machines(compat::CollectiveBackend& gloo, int rank, int size,
                       const std::string& name) {
  auto table = at::zeros({size}, at::kLong);
  table.data_ptr<std::int64_t>()[rank] = name_hash(name);
  std::vector<at::Tensor> tensors{table};
  gloo.allreduce(tensors)->wait();
  const auto* ids = table.data_ptr<std::int64_t>();
  std::unordered_map<std::int64_t, int> number, ranks_on;
  Machines m;
  for (int r = 0; r < size; ++r) {
    number.try_emplace(ids[r], static_cast<int>(number.size()));
    m.most = std::max(m.most, ++ranks_on[ids[r]]);
    if (ids[r] == ids[rank]) {
      if (r == rank) m.index = static_cast<int>(m.here.size());
      m.here.push_back(r);
    }
  }
  m.machine = number.at(ids[rank]);
  m.count = static_cast<int>(number.size());
  return m;
}

bool told_to_stop_now() {
  const int sig = StopSignals::received();
  return sig == SIGTERM || sig == SIGINT || sig == SIGHUP;
}

}  // namespace

void CommunicatorImpl::fail(const std::string& op, const std::exception& error) {
  std::string what = error.what();
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error)) {
    what = c10_error->what_without_backtrace();
  }
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  const std::string head = op + " failed on rank " + std::to_string(rank) + ": ";
  const bool first = !failed;
  failed = true;
  // This node's other ranks may be waiting for this one in a segment: let them fail now.
  for (auto* segment : segments) segment->abort();
  if (!first || size == 1) throw CollectiveError(head + what);
  // Told to stop now (ddprun tearing the job down after another rank failed): a peer gone
  // is expected, and waiting to name it would only delay the teardown. SIGUSR1/SIGUSR2
  // notices leave time, so the names are still worth having then.
  if (told_to_stop_now()) throw CollectiveError(head + what + " (while stopping)");
  // The store may be hosted by a stopped rank 0, and a TCPStore client then blocks in recv
  // for as long as it likes: ask from a thread that can be abandoned.
  auto result = std::make_shared<std::promise<std::vector<int>>>();
  auto future = result->get_future();
  std::thread([result, store = store, r = rank, n = size, wait = unresponsive_wait] {
    try {
      result->set_value(find_unresponsive(*store, r, n, wait));
    } catch (...) {
      result->set_exception(std::current_exception());
    }
  }).detach();
  char wait_text[32];
  std::snprintf(wait_text, sizeof wait_text, "%.1f s",
                std::chrono::duration<double>(unresponsive_wait).count());
  std::string who;
  // A stop signal (ddprun tearing the job down) ends the wait: nobody needs the names then.
  const auto deadline =
      std::chrono::steady_clock::now() + unresponsive_wait + std::chrono::seconds(2);
  while (future.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready &&
         std::chrono::steady_clock::now() < deadline) {
    if (told_to_stop_now()) throw CollectiveError(head + what + " (while stopping)");
  }
  if (future.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    who = "rank 0 did not respond (its store did not answer within " + std::string(wait_text) + ")";
  } else {
    try {
      const auto missing = future.get();
      who = missing.empty()
                ? "every rank responded afterwards"
                : std::string(missing.size() == 1 ? "rank " : "ranks ") + list_ranks(missing) +
                      " did not respond within " + std::string(wait_text);
    } catch (const std::exception& e) {
      who = "rank 0 did not respond (its store: " + std::string(e.what()) + ")";
    }
  }
  throw CollectiveError(head + who + " (stopped, hung or dead?); " + what,
                        "look at the ranks named: their logs, whether they still run");
}

namespace {

const char* const kGlooAsNccl = "gloo-as-nccl";

std::unique_ptr<Plane::Impl> make_plane(CommunicatorImpl& owner, const std::string& name,
                                        c10::intrusive_ptr<compat::CollectiveBackend> backend,
                                        at::Device device) {
  auto plane = std::make_unique<Plane::Impl>();
  plane->owner = &owner;
  plane->name = name;
  plane->backend = std::move(backend);
  plane->device = device;
  plane->device_rules = name == kGlooAsNccl;
  plane->trace_plane = name == "gloo" ? 0 : 1;  // the control plane is gloo; a data plane not
  return plane;
}

}  // namespace

namespace {

// Several machines: the ranks of each share a segment, and the plane all-reduces
// hierarchically when some machine has several ranks and there are several machines (all
// on one after all: the plain shared-memory all-reduce). Every rank must take the same path,
// so after the joins one all-reduce counts the ranks that could not join theirs: if any,
// all use flat gloo.
void join_across_machines(Plane::Impl& plane, const c10::intrusive_ptr<c10d::Store>& store,
                          const WorkerEnv& env, const CommOptions& options) {
  const Machines m = find_machines(*plane.backend, env.rank, env.world_size, machine_name(env));
  if (m.most < 2) return;  // one rank per machine: nothing to share
  const int here = static_cast<int>(m.here.size());
  std::unique_ptr<SharedMemoryAllreduce> shm;
  if (here > 1) {
    // Bound by ddprun, the rank knows how many share its CPUs; otherwise all of this machine's.
    shm = join_shared_memory(*store, "shm/" + std::to_string(m.here[0]) + "/", m.index, here,
                             env.rank, may_spin(env.cpu_sharers.value_or(here)));
  }
  auto failed = at::tensor({std::int64_t{here > 1 && !shm}}, at::kLong);
  std::vector<at::Tensor> tensors{failed};
  plane.backend->allreduce(tensors)->wait();
  if (failed.item<std::int64_t>() != 0) return;
  plane.shm = std::move(shm);
  if (m.count == 1) return;
  plane.across_nodes = true;
  plane.nodes = m.count;
  if (m.index == 0) {
    plane.leaders =
        compat::make_gloo(compat::make_prefix_store("leaders", store), m.machine, m.count,
                          options.timeout, env.gloo_socket_ifname, env.master_addr);
  }
}

}  // namespace

std::unique_ptr<Communicator> Communicator::connect(const WorkerEnv& env,
                                                    const CommOptions& options, at::Device device) {
  auto impl = std::make_unique<CommunicatorImpl>();
  impl->trace = std::make_unique<TraceWriter>(env.trace_file, env.rank);
  impl->rank = env.rank;
  impl->size = env.world_size;
  impl->unresponsive_wait = options.unresponsive_wait;
  impl->timeout = options.timeout;
  // Under --numa-binding exclusive a rank's mask holds its own cores only: what matters is
  // how many ranks share them (DDPRUN_CPU_SHARERS), not the node's rank count.
  impl->yield_in_wait = may_spin(env.cpu_sharers.value_or(env.local_world_size));
  const std::string& backend = options.backend;
  if (backend != "gloo" && backend != "nccl" && backend != kGlooAsNccl) {
    throw ddprun::ConfigError("unknown backend '" + backend + "'",
                              "use \"gloo\", \"nccl\" or \"gloo-as-nccl\"");
  }
  if (backend == "nccl" && !compat::has_nccl()) {
    throw ddprun::ConfigError("backend 'nccl' is not available: this LibTorch has no CUDA",
                              "use \"backend\": \"gloo\"");
  }
  if (backend != "nccl" && !device.is_cpu()) {
    throw ddprun::UsageError("backend '" + backend + "' keeps its tensors on the CPU, not on " +
                             device.str());
  }
  const InitMethod method = parse_init_method(options.init_method);
  c10::intrusive_ptr<c10d::Store> store;
  if (method.kind == InitMethod::Kind::kFile) {
    store = compat::make_file_store(method.path, env.world_size, options.timeout);
  } else {
    const bool server = env.rank == 0;
    const bool from_env = method.kind == InitMethod::Kind::kEnv;
    const std::string host = from_env ? env.master_addr : method.host;
    const int port = from_env ? env.master_port : method.port;
    const std::string where = host + ":" + std::to_string(port);
    if (!server && !wait_for_listener(host, port, options.timeout)) {
      throw EnvError("rank " + std::to_string(env.rank) + ": no rendezvous store at " + where +
                         " after " + std::to_string(options.timeout.count() / 1000) + " s",
                     from_env ? "is rank 0 running? check MASTER_ADDR and MASTER_PORT"
                              : "is rank 0 running? check the init_method address");
    }
    store = compat::make_tcp_store(host, static_cast<std::uint16_t>(port), server, env.world_size,
                                   options.timeout);
  }
  // A worker of another run, or of an earlier restart round, uses other keys: it can
  // never complete this round's rendezvous.
  impl->store = compat::make_prefix_store(
      "ddprun/" + env.run_id + "/" + std::to_string(env.restart_count), store);

  // The control plane: gloo on the CPU, through shared memory within each node.
  // The shared memory first: its join needs only the store, so a rank that dies during it
  // is not also waited for by gloo's connections.
  const bool use_shm = options.shared_memory && env.world_size > 1;
  if (use_shm) check_join_path_agrees(*impl->store, env);
  const bool one_node = env.local_world_size == env.world_size;
  std::unique_ptr<SharedMemoryAllreduce> shm;
  if (use_shm && one_node) {
    shm = join_shared_memory(*impl->store, "shm/0/", env.rank, env.world_size, env.rank,
                             impl->yield_in_wait);
  }
  const auto control_store =
      backend == "gloo" ? impl->store : compat::make_prefix_store("control", impl->store);
  auto control =
      make_plane(*impl, "gloo",
                 compat::make_gloo(control_store, env.rank, env.world_size, options.timeout,
                                   env.gloo_socket_ifname, env.master_addr),
                 at::kCPU);
  if (use_shm && one_node) {
    control->shm = std::move(shm);
  } else if (use_shm) {
    join_across_machines(*control, control_store, env, options);
  }
  if (control->shm) impl->segments.push_back(control->shm.get());
  impl->control = std::unique_ptr<Plane>(new Plane(std::move(control)));
  // The data plane: its own group unless it is plain gloo.
  if (backend == "nccl") {
    impl->data = std::unique_ptr<Plane>(
        new Plane(make_plane(*impl, "nccl",
                             compat::make_nccl(compat::make_prefix_store("data", impl->store),
                                               env.rank, env.world_size, options.timeout),
                             device)));
  } else if (backend == kGlooAsNccl) {
    impl->data = std::unique_ptr<Plane>(new Plane(make_plane(
        *impl, kGlooAsNccl,
        compat::make_gloo(compat::make_prefix_store("data", impl->store), env.rank, env.world_size,
                          options.timeout, env.gloo_socket_ifname, env.master_addr),
        at::kCPU)));
  }
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

Communicator::Communicator(std::unique_ptr<CommunicatorImpl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

int Communicator::rank() const {
  return impl_->rank;
}
int Communicator::world_size() const {
  return impl_->size;
}
Plane& Communicator::control() {
  return *impl_->control;
}
Plane& Communicator::data() {
  return impl_->data ? *impl_->data : *impl_->control;
}

std::string Communicator::transport() const {
  if (!impl_->data) return impl_->control->transport();
  return impl_->data->transport() + ", control over " + impl_->control->transport();
}

Plane::Plane(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Plane::~Plane() = default;

int Plane::rank() const {
  return impl_->owner->rank;
}
int Plane::world_size() const {
  return impl_->owner->size;
}
at::Device Plane::device() const {
  return impl_->device;
}

std::string Plane::transport() const {
  if (impl_->across_nodes) {
    return impl_->name + " between " + std::to_string(impl_->nodes) +
           " nodes + shared memory within";
  }
  return impl_->shm ? impl_->name + " + shared memory" : impl_->name;
}

at::Tensor Plane::device_zeros(std::int64_t numel, at::ScalarType type) {
  auto tensor = at::zeros({numel}, at::TensorOptions().dtype(type).device(impl_->device));
  if (impl_->device_rules) {
    for (auto it = impl_->device_storages.begin(); it != impl_->device_storages.end();) {
      it = it->second.expired() ? impl_->device_storages.erase(it) : std::next(it);
    }
    impl_->device_storages.insert_or_assign(tensor.storage().data(),
                                            tensor.storage().getWeakStorageImpl());
  }
  return tensor;
}

void Plane::Impl::check_device_rules(const char* op, const at::Tensor& tensor) const {
  if (!device_rules) return;
  std::string broken;
  if (tensor.layout() != at::kStrided) {
    broken = "is not dense";
  } else if (!tensor.is_contiguous()) {
    broken = "is not contiguous";
  } else if (tensor.device() != device) {
    broken = "is on " + tensor.device().str() + ", not the plane's " + device.str();
  } else {
    const auto it = device_storages.find(tensor.storage().data());
    const auto storage =
        it == device_storages.end() ? c10::intrusive_ptr<c10::StorageImpl>() : it->second.lock();
    if (storage.get() != tensor.storage().unsafeGetStorageImpl()) {
      broken = "was not made by device_zeros() (under NCCL it would be a CPU tensor)";
    }
  }
  if (!broken.empty()) {
    throw ddprun::UsageError(std::string(op) + " on the data plane (" + kGlooAsNccl + "): a " +
                                 std::string(c10::toString(tensor.scalar_type())) + " tensor of " +
                                 std::to_string(tensor.numel()) + " element(s) " + broken,
                             "collectives on CPU tensors belong on Communicator::control()");
  }
}

namespace {

// `tensor`'s float values rounded to `wire` (bf16 or fp16), in place.
void round_to(at::Tensor& tensor, at::ScalarType wire) {
  tensor.copy_(tensor.to(wire));
}

// The compressed sum over `backend`: `tensor` (float) goes out rounded to `wire`, each rank
// sums its 1/N share of everyone's in float (an all-to-all, started here) and hands its
// share's sum, rounded to `wire`, to all (an all-gather, in `then`). Per rank that is
// (N-1)/N of the tensor in each direction twice, as a ring all-reduce moves, at half the
// width. Every element is summed by one rank in rank order, so all end bit-identical. The
// wire buffers travel as fp16 bits, which every gloo and NCCL version moves (no arithmetic).
void start_compressed_exchange(compat::CollectiveBackend& backend, const at::Tensor& tensor,
                               at::ScalarType wire, c10::intrusive_ptr<c10d::Work>& work,
                               std::function<void()>& then) {
  const std::int64_t n = backend.getSize(), numel = tensor.numel();
  const std::int64_t share = (numel + n - 1) / n;
  auto send = at::zeros({n * share}, tensor.options().dtype(wire));
  send.narrow(0, 0, numel).copy_(tensor.reshape(-1));
  auto send_bits = send.view(at::kHalf);
  auto received = at::empty_like(send);
  auto received_bits = received.view(at::kHalf);
  std::vector<std::int64_t> even;  // empty: equal shares
  work = backend.alltoall_base(received_bits, send_bits, even, even, c10d::AllToAllOptions());
  then = [&backend, tensor, wire, n, numel, share, received, send] {
    auto mine = received.view({n, share}).to(at::kFloat).sum(0).to(wire);
    auto gathered = at::empty({n * share}, tensor.options().dtype(wire));
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (std::int64_t r = 0; r < n; ++r) {
      outputs[0].push_back(gathered.narrow(0, r * share, share).view(at::kHalf));
    }
    std::vector<at::Tensor> inputs{mine.view(at::kHalf)};
    backend.allgather(outputs, inputs)->wait();
    auto flat = tensor.view(-1);
    flat.copy_(gathered.narrow(0, 0, numel));
  };
}

void check_compressible(const at::Tensor& tensor, at::ScalarType wire) {
  if (tensor.scalar_type() != at::kFloat || !tensor.is_contiguous()) {
    throw ddprun::UsageError("compressed all-reduce of a " +
                                 std::string(c10::toString(tensor.scalar_type())) +
                                 " tensor: only contiguous float tensors are compressed",
                             "all-reduce other tensors with allreduce_async");
  }
  if (wire != at::kBFloat16 && wire != at::kHalf) {
    throw ddprun::UsageError("compressed all-reduce to " + std::string(c10::toString(wire)) +
                                 ": the wire type is bfloat16 or half",
                             "");
  }
}

}  // namespace

namespace {

void check_shares(const at::Tensor& flat, int world) {
  if (!flat.is_contiguous() || flat.numel() % world != 0) {
    throw ddprun::UsageError("shares of a tensor of " + std::to_string(flat.numel()) +
                                 " element(s) over " + std::to_string(world) +
                                 " ranks: it must be contiguous and divide evenly",
                             "pad it to a multiple of the world size");
  }
}

}  // namespace

PendingWork Plane::reduce_scatter_async(at::Tensor& flat, at::ScalarType wire) {
  TraceScope scope(*impl_, trace::Op::kReduceScatter, bytes_of(flat));
  return Impl::traced(reduce_scatter_untraced(flat, wire), scope.take());
}

PendingWork Plane::reduce_scatter_untraced(at::Tensor& flat, at::ScalarType wire) {
  auto& owner = *impl_->owner;
  check_shares(flat, owner.size);
  impl_->check_device_rules("reduce-scatter", flat);
  if (flat.scalar_type() != at::kFloat) wire = at::kFloat;  // only float is compressed
  const bool compressed = wire != at::kFloat;
  if (owner.size == 1 || impl_->across_nodes || impl_->shm) {
    return compressed ? allreduce_compressed_async(flat, wire)
                      : allreduce_async(flat, ReduceOp::kSum);
  }
  const std::int64_t n = owner.size, share = flat.numel() / n;
  // Compressed, the wire buffers travel as fp16 bits (see start_compressed_exchange).
  auto input = compressed ? flat.view(-1).to(wire).view(at::kHalf) : flat.view(-1);
  auto received = at::empty_like(input);
  PendingWork pending;
  pending.impl_ = std::make_unique<PendingWork::Impl>();
  pending.impl_->owner = &owner;
  std::vector<std::int64_t> even;  // empty: equal shares
  owner.guard("reduce-scatter", [&] {
    pending.impl_->work =
        impl_->backend->alltoall_base(received, input, even, even, c10d::AllToAllOptions());
  });
  const std::int64_t rank = owner.rank;
  pending.impl_->then = [flat, received, n, share, rank, wire, compressed] {
    const auto shares = compressed ? received.view(wire).to(at::kFloat) : received;
    flat.view(-1).narrow(0, rank * share, share).copy_(shares.view({n, share}).sum(0));
  };
  return pending;
}

void Plane::allgather_shares(at::Tensor& flat) {
  TraceScope scope(*impl_, trace::Op::kAllgather, bytes_of(flat));
  auto& owner = *impl_->owner;
  check_shares(flat, owner.size);
  impl_->check_device_rules("all-gather", flat);
  if (owner.size == 1) return;
  const std::int64_t n = owner.size, share = flat.numel() / n;
  auto all = flat.view(-1);
  if (impl_->across_nodes || impl_->shm) {
    // No all-gather through shared memory: the others' shares zeroed, then a sum (x + 0 is x).
    if (owner.rank > 0) all.narrow(0, 0, owner.rank * share).zero_();
    all.narrow(0, (owner.rank + 1) * share, (n - owner.rank - 1) * share).zero_();
    allreduce(flat, ReduceOp::kSum);
    return;
  }
  owner.guard("all-gather", [&] {
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (std::int64_t r = 0; r < n; ++r) outputs[0].push_back(all.narrow(0, r * share, share));
    std::vector<at::Tensor> inputs{all.narrow(0, owner.rank * share, share).clone()};
    impl_->backend->allgather(outputs, inputs)->wait();
  });
}

PendingWork Plane::allreduce_compressed_async(at::Tensor& tensor, at::ScalarType wire) {
  TraceScope scope(*impl_, trace::Op::kCompressedAllreduce, bytes_of(tensor));
  return Impl::traced(allreduce_compressed_untraced(tensor, wire), scope.take());
}

PendingWork Plane::allreduce_compressed_untraced(at::Tensor& tensor, at::ScalarType wire) {
  check_compressible(tensor, wire);
  impl_->check_device_rules("all-reduce", tensor);
  auto& owner = *impl_->owner;
  if (owner.size == 1) {
    owner.guard("all-reduce", [&] { round_to(tensor, wire); });
    return PendingWork();
  }
  if (impl_->across_nodes) {
    return impl_->allreduce_across_nodes(tensor, ShmType::kFloat32, ReduceOp::kSum, wire);
  }
  if (impl_->shm) {
    // One machine: nothing on a wire; the same rounding of each rank's values and the sum.
    owner.guard("all-reduce", [&] {
      round_to(tensor, wire);
      impl_->shm->allreduce(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()),
                            ShmType::kFloat32, ShmOp::kSum, owner.timeout);
      round_to(tensor, wire);
    });
    return PendingWork();
  }
  PendingWork pending;
  pending.impl_ = std::make_unique<PendingWork::Impl>();
  pending.impl_->owner = &owner;
  owner.guard("all-reduce", [&] {
    start_compressed_exchange(*impl_->backend, tensor, wire, pending.impl_->work,
                              pending.impl_->then);
  });
  return pending;
}

PendingWork Plane::allreduce_async(at::Tensor& tensor, ReduceOp op) {
  TraceScope scope(*impl_, trace::Op::kAllreduce, bytes_of(tensor));
  return Impl::traced(allreduce_untraced(tensor, op), scope.take());
}

PendingWork Plane::allreduce_untraced(at::Tensor& tensor, ReduceOp op) {
  impl_->check_device_rules("all-reduce", tensor);
  auto& owner = *impl_->owner;
  if (impl_->across_nodes) {
    if (const auto type = to_shm(tensor)) return impl_->allreduce_across_nodes(tensor, *type, op);
  } else if (impl_->shm) {
    if (const auto type = to_shm(tensor)) {
      owner.guard("all-reduce", [&] {
        impl_->shm->allreduce(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()), *type,
                              *to_shm(op), owner.timeout);
      });
      return PendingWork();
    }
  }
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions opts;
  opts.reduceOp = to_c10d(op);
  PendingWork pending;
  pending.impl_ = std::make_unique<PendingWork::Impl>();
  pending.impl_->owner = &owner;
  pending.impl_->yield_first =
      owner.yield_in_wait && impl_->device.is_cpu() &&
      static_cast<std::size_t>(tensor.numel() * tensor.element_size()) >= kSpinFromBytes;
  owner.guard("all-reduce",
              [&] { pending.impl_->work = impl_->backend->allreduce(tensors, opts); });
  return pending;
}

PendingWork Plane::Impl::allreduce_across_nodes(at::Tensor& tensor, ShmType type, ReduceOp op,
                                                at::ScalarType wire) {
  const auto count = static_cast<std::size_t>(tensor.numel());
  const bool compressed = wire != at::kFloat;
  // The one before ends first, so that every rank of a node runs its segment's reduces and
  // broadcasts in one order (reduce 1, broadcast 1, reduce 2, ...) however its caller
  // interleaves launches and waits; else one rank's reduce of t2 met another's broadcast of
  // t1. Little overlap is lost: the leaders' all-reduces share one link and run one after
  // the other anyway, and backward still computes the next bucket while this one travels.
  if (!owed.empty()) finish_through(owed.back().get());
  if (compressed) owner->guard("all-reduce", [&] { round_to(tensor, wire); });
  if (shm) {
    owner->guard("all-reduce", [&] {
      shm->reduce(tensor.data_ptr(), count, type, *to_shm(op), 0, owner->timeout);
    });
  }
  auto step = std::make_shared<NodeStep>();
  step->tensor = tensor;
  if (leaders && compressed) {
    // The node's sum in float, then the leaders' compressed exchange of the node sums.
    owner->guard("all-reduce", [&] {
      start_compressed_exchange(*leaders, tensor, wire, step->work, step->then);
    });
  } else if (leaders) {
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions opts;
    opts.reduceOp = to_c10d(op);
    step->yield_first = owner->yield_in_wait &&
                        count * static_cast<std::size_t>(tensor.element_size()) >= kSpinFromBytes;
    owner->guard("all-reduce", [&] { step->work = leaders->allreduce(tensors, opts); });
  }
  owed.push_back(step);
  PendingWork pending;
  pending.impl_ = std::make_unique<PendingWork::Impl>();
  pending.impl_->owner = owner;
  pending.impl_->step = std::move(step);
  pending.impl_->plane = this;
  return pending;
}

void Plane::allreduce(at::Tensor& tensor, ReduceOp op) {
  allreduce_async(tensor, op).wait();
}

void Plane::broadcast(std::vector<at::Tensor>& tensors, int root) {
  std::uint64_t bytes = 0;
  for (const auto& t : tensors) bytes += bytes_of(t);
  TraceScope scope(*impl_, trace::Op::kBroadcast, bytes);
  for (const auto& t : tensors) impl_->check_device_rules("broadcast", t);
  // Gloo broadcasts several tensors in one call only if they have one shape: one call each.
  impl_->owner->guard("broadcast", [&] {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t};
      works.push_back(impl_->backend->broadcast(one, opts));
    }
    for (auto& w : works) w->wait();
  });
}

void Plane::barrier() {
  if (impl_->device_rules) {
    throw ddprun::UsageError(std::string("barrier on the data plane (") + kGlooAsNccl +
                                 "): only all-reduce and broadcast travel there",
                             "use Communicator::control().barrier()");
  }
  TraceScope scope(*impl_, trace::Op::kBarrier, 0);
  impl_->owner->guard("barrier", [&] { impl_->backend->barrier(c10d::BarrierOptions())->wait(); });
}

}  // namespace ddprun::worker
