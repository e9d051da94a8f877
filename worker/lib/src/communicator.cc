#include "ddprun/worker/communicator.h"

#include <sched.h>

#include <chrono>
#include <csignal>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "collective_trace.h"
#include "communicator_impl.h"
#include "cpus.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/init_method.h"
#include "ddprun/worker/shm_allreduce.h"
#include "ddprun/worker/stop_signals.h"
#include "net.h"
#include "torch_compat.h"

namespace ddprun::worker {

PendingWork::PendingWork() = default;
PendingWork::~PendingWork() = default;
PendingWork::PendingWork(PendingWork&&) noexcept = default;
PendingWork& PendingWork::operator=(PendingWork&&) noexcept = default;

bool PendingWork::asynchronous() const {
  return impl_ && (impl_->work || impl_->step);
}

void yield_while_running(c10d::Work& work) {
  const auto until = std::chrono::steady_clock::now() + kSpinBeforeBlocking;
  while (!work.isCompleted() && std::chrono::steady_clock::now() < until) sched_yield();
}

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
  if (!first || size == 1 || unresponsive_wait.count() == 0) {
    throw CollectiveError(head + what);
  }
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

// The store every rank of the job meets at, as `method` says: rank 0 hosts a TCPStore
// (standalone: on a free port), the others wait for it to accept, then connect.
c10::intrusive_ptr<c10d::Store> make_store(const WorkerEnv& env, const CommOptions& options) {
  const InitMethod method = parse_init_method(options.init_method);
  if (method.kind == InitMethod::Kind::kFile) {
    return compat::make_file_store(method.path, env.world_size, options.timeout);
  }
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
  return compat::make_tcp_store(host, static_cast<std::uint16_t>(port), server, env.world_size,
                                options.timeout);
}

// Joins the group over `base_store`: its planes, as Communicator::connect says.
std::unique_ptr<CommunicatorImpl> join_group(c10::intrusive_ptr<c10d::Store> base_store,
                                             const WorkerEnv& env, const CommOptions& options,
                                             at::Device device) {
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
  impl->base_store = std::move(base_store);
  // A worker of another run, of an earlier restart round or of an earlier group uses other
  // keys: it can never complete this group's rendezvous.
  impl->store = compat::make_prefix_store(
      "ddprun/" + env.run_id + "/" + std::to_string(env.restart_count) +
          (options.group > 0 ? "/group/" + std::to_string(options.group) : std::string()),
      impl->base_store);
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
  impl->control = CommunicatorImpl::plane(std::move(control));
  // The data plane: its own group unless it is plain gloo.
  if (backend == "nccl") {
    impl->data = CommunicatorImpl::plane(
        make_plane(*impl, "nccl",
                   compat::make_nccl(compat::make_prefix_store("data", impl->store), env.rank,
                                     env.world_size, options.timeout),
                   device));
  } else if (backend == kGlooAsNccl) {
    impl->data = CommunicatorImpl::plane(make_plane(
        *impl, kGlooAsNccl,
        compat::make_gloo(compat::make_prefix_store("data", impl->store), env.rank, env.world_size,
                          options.timeout, env.gloo_socket_ifname, env.master_addr),
        at::kCPU));
  }
  return impl;
}

void check_backend(const std::string& backend, at::Device device) {
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
}

}  // namespace

std::unique_ptr<Communicator> Communicator::connect(const WorkerEnv& env,
                                                    const CommOptions& options, at::Device device) {
  check_backend(options.backend, device);
  return std::unique_ptr<Communicator>(
      new Communicator(join_group(make_store(env, options), env, options, device)));
}

std::unique_ptr<Communicator> Communicator::rejoin(std::unique_ptr<Communicator> old,
                                                   const WorkerEnv& env, const CommOptions& options,
                                                   bool store_host_lost) {
  check_backend(options.backend, at::kCPU);
  if (options.backend == "nccl") {
    throw ddprun::ConfigError("a group over NCCL cannot be rejoined after a lost rank",
                              "use \"backend\": \"gloo\", or a full restart");
  }
  c10::intrusive_ptr<c10d::Store> base_store;
  if (!store_host_lost) base_store = old->impl_->base_store;
  // The old planes end first: their gloo threads and shared-memory segment go before the
  // new group's are made.
  old.reset();
  if (!base_store) base_store = make_store(env, options);
  return std::unique_ptr<Communicator>(
      new Communicator(join_group(std::move(base_store), env, options, at::kCPU)));
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

// Gloo's collectives (ProcessGroupGloo in LibTorch 1.13 and 2.6) carry these types only;
// any other failed inside gloo's thread with "Invalid scalar type", which came back as a
// failed collective and a roll call that blamed the ranks' liveness. Later LibTorch may
// add bf16 to gloo: it is refused on every version, so that a job behaves alike wherever
// it runs. NCCL carries bf16 and bool too.
void Plane::Impl::check_carried(const char* op, const at::Tensor& tensor) const {
  const auto type = tensor.scalar_type();
  const bool nccl = name == "nccl";
  switch (type) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kChar:
    case at::kByte:
    case at::kInt:
    case at::kLong:
      return;
    case at::kBFloat16:
    case at::kBool:
      if (nccl) return;
      break;
    default:
      break;
  }
  throw ddprun::UsageError(
      std::string(op) + " of a " + c10::toString(type) + " tensor on rank " +
          std::to_string(owner->rank) + ": " + name +
          " carries Float, Double, Half, Char, Byte, Int and Long" +
          (nccl ? ", BFloat16 and Bool" : "") + ", not " + c10::toString(type),
      "convert it first, e.g. to float (tensor.to(at::kFloat)), and back after the collective");
}

// `tensor`'s float values rounded to `wire` (bf16 or fp16), in place.
void round_to(at::Tensor& tensor, at::ScalarType wire) {
  tensor.copy_(tensor.to(wire));
}

// fp16's largest value is 65504: two ranks' gradients of 40000 rounded and summed as they
// are would give inf. PyTorch's fp16_compress_hook divides by the world size before the
// sum, and so does this (in float, before rounding, so that a value over 65504 whose share
// is under it still passes); the rounded sum is multiplied back, which is exact in float
// (an fp16 value has 11 significant bits, N < 8192 at most 13), so the caller divides as
// after any sum and gets the fp16 average bit for bit. bf16 keeps float's exponent range:
// its rounded values and sums overflow only where float's would, so it goes as it is.
int compression_divisor(at::ScalarType wire, int world) {
  return wire == at::kHalf ? world : 1;
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

namespace {

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
  impl_->check_carried("reduce-scatter", flat);
  impl_->check_device_rules("reduce-scatter", flat);
  if (flat.scalar_type() != at::kFloat) wire = at::kFloat;  // only float is compressed
  const bool compressed = wire != at::kFloat;
  if (owner.size == 1 || impl_->across_nodes || impl_->shm) {
    return compressed ? allreduce_compressed_async(flat, wire)
                      : allreduce_async(flat, ReduceOp::kSum);
  }
  const std::int64_t n = owner.size, share = flat.numel() / n;
  const int divisor = compressed ? compression_divisor(wire, owner.size) : 1;
  // Compressed, the wire buffers travel as fp16 bits (see start_compressed_exchange).
  auto input = compressed ? (flat.view(-1) / divisor).to(wire).view(at::kHalf) : flat.view(-1);
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
  pending.impl_->then = [flat, received, n, share, rank, wire, compressed, divisor] {
    const auto shares = compressed ? received.view(wire).to(at::kFloat) : received;
    auto mine = flat.view(-1).narrow(0, rank * share, share);
    mine.copy_(shares.view({n, share}).sum(0));
    if (divisor != 1) mine.mul_(divisor);
  };
  return pending;
}

void Plane::allgather_shares(at::Tensor& flat) {
  TraceScope scope(*impl_, trace::Op::kAllgather, bytes_of(flat));
  auto& owner = *impl_->owner;
  check_shares(flat, owner.size);
  impl_->check_carried("all-gather", flat);
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
  const int divisor = compression_divisor(wire, owner.size);
  if (impl_->shm) {
    // One machine: nothing on a wire; the same rounding of each rank's values and the sum.
    owner.guard("all-reduce", [&] {
      if (divisor != 1) tensor.div_(divisor);
      round_to(tensor, wire);
      impl_->shm->allreduce(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()),
                            ShmType::kFloat32, ShmOp::kSum, owner.timeout);
      round_to(tensor, wire);
      if (divisor != 1) tensor.mul_(divisor);
    });
    return PendingWork();
  }
  PendingWork pending;
  pending.impl_ = std::make_unique<PendingWork::Impl>();
  pending.impl_->owner = &owner;
  owner.guard("all-reduce", [&] {
    if (divisor != 1) tensor.div_(divisor);
    start_compressed_exchange(*impl_->backend, tensor, wire, pending.impl_->work,
                              pending.impl_->then);
  });
  if (divisor != 1) {
    pending.impl_->then = [exchange = std::move(pending.impl_->then), tensor, divisor] {
      exchange();
      tensor.mul_(divisor);
    };
  }
  return pending;
}

PendingWork Plane::allreduce_async(at::Tensor& tensor, ReduceOp op) {
  TraceScope scope(*impl_, trace::Op::kAllreduce, bytes_of(tensor));
  return Impl::traced(allreduce_untraced(tensor, op), scope.take());
}

PendingWork Plane::allreduce_untraced(at::Tensor& tensor, ReduceOp op) {
  impl_->check_carried("all-reduce", tensor);
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

void Plane::allreduce(at::Tensor& tensor, ReduceOp op) {
  allreduce_async(tensor, op).wait();
}

void Plane::broadcast(std::vector<at::Tensor>& tensors, int root) {
  std::uint64_t bytes = 0;
  for (const auto& t : tensors) bytes += bytes_of(t);
  TraceScope scope(*impl_, trace::Op::kBroadcast, bytes);
  for (const auto& t : tensors) {
    impl_->check_carried("broadcast", t);
    impl_->check_device_rules("broadcast", t);
  }
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
