#include "ddprun/worker/communicator.h"

#include <csignal>
#include <cstdio>
#include <future>
#include <memory>
#include <optional>
#include <thread>

#include "ddprun/worker/errors.h"
#include "ddprun/worker/init_method.h"
#include "ddprun/worker/shm_allreduce.h"
#include "ddprun/worker/stop_signals.h"
#include "net.h"
#include "torch_compat.h"

namespace ddprun::worker {

struct Communicator::Impl {
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds unresponsive_wait{5'000};
  bool failed = false;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<compat::CollectiveBackend> backend;
  std::string backend_name;
  std::chrono::milliseconds timeout{300'000};
  std::unique_ptr<SharedMemoryAllreduce> shm;  // null: every all-reduce goes to `backend`

  [[noreturn]] void fail(const std::string& op, const std::exception& error);
  // Runs `body`; a failure becomes fail(op, ...).
  template <typename F>
  void guard(const char* op, F&& body) {
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

struct PendingWork::Impl {
  c10::intrusive_ptr<c10d::Work> work;
  Communicator::Impl* owner = nullptr;  // outlives the work (documented in the header)
};

PendingWork::PendingWork() = default;
PendingWork::~PendingWork() = default;
PendingWork::PendingWork(PendingWork&&) noexcept = default;
PendingWork& PendingWork::operator=(PendingWork&&) noexcept = default;

void PendingWork::wait() {
  if (!impl_ || !impl_->work) return;
  impl_->owner->guard("all-reduce", [&] { impl_->work->wait(); });
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

// Rank 0 creates the segment and publishes its name; every rank says whether it could
// open it; all use it only if all could (a rank on another node, or in a container with
// its own /dev/shm, cannot). Rank 0 removes the name once every rank has answered, so
// nothing is left in /dev/shm however the job ends.
std::unique_ptr<SharedMemoryAllreduce> join_shared_memory(c10d::Store& store, int rank, int size) {
  std::unique_ptr<SharedMemoryAllreduce> shm;
  std::string why_not;
  if (rank == 0) {
    try {
      shm = SharedMemoryAllreduce::create(size);
    } catch (const SharedMemoryError& e) {
      why_not = e.what();
    }
    store.set("shm/name", as_bytes(shm ? shm->name() : ""));
  } else {
    const auto name = store.get("shm/name");
    if (!name.empty()) {
      try {
        shm = SharedMemoryAllreduce::open(std::string(name.begin(), name.end()), rank, size);
      } catch (const SharedMemoryError& e) {
        why_not = e.what();
      }
    }
  }
  store.set("shm/ok/" + std::to_string(rank), as_bytes(shm ? "1" : "0"));
  bool everyone = true;
  for (int r = 0; r < size; ++r)
    everyone = store.get("shm/ok/" + std::to_string(r)) == as_bytes("1") && everyone;
  if (rank == 0 && shm) shm->unlink();
  if (!why_not.empty()) {
    std::fprintf(stderr, "ddprun worker: rank %d: all-reduce over gloo, not shared memory: %s\n",
                 rank, why_not.c_str());
  }
  return everyone ? std::move(shm) : nullptr;
}

bool told_to_stop_now() {
  const int sig = StopSignals::received();
  return sig == SIGTERM || sig == SIGINT || sig == SIGHUP;
}

}  // namespace

void Communicator::Impl::fail(const std::string& op, const std::exception& error) {
  std::string what = error.what();
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error)) {
    what = c10_error->what_without_backtrace();
  }
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  const std::string head = op + " failed on rank " + std::to_string(rank) + ": ";
  if (failed || size == 1) throw CollectiveError(head + what);
  // Told to stop now (ddprun tearing the job down after another rank failed): a peer gone
  // is expected, and waiting to name it would only delay the teardown. SIGUSR1/SIGUSR2
  // notices leave time, so the names are still worth having then.
  if (told_to_stop_now()) throw CollectiveError(head + what + " (while stopping)");
  failed = true;
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

std::unique_ptr<Communicator> Communicator::connect(const WorkerEnv& env,
                                                    const CommOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->rank = env.rank;
  impl->size = env.world_size;
  impl->unresponsive_wait = options.unresponsive_wait;
  impl->timeout = options.timeout;
  impl->backend_name = options.backend;
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

  if (options.backend == "gloo") {
    impl->backend = compat::make_gloo(impl->store, env.rank, env.world_size, options.timeout,
                                      env.gloo_socket_ifname, env.master_addr);
  } else if (options.backend == "nccl") {
    impl->backend = compat::make_nccl(impl->store, env.rank, env.world_size, options.timeout);
    if (!impl->backend) {
      throw ddprun::ConfigError("backend 'nccl' is not available: this LibTorch has no CUDA",
                                "use \"backend\": \"gloo\"");
    }
  } else {
    throw ddprun::ConfigError("unknown backend '" + options.backend + "'");
  }
  if (options.backend == "gloo" && options.shared_memory && env.world_size > 1 &&
      env.local_world_size == env.world_size) {
    impl->shm = join_shared_memory(*impl->store, env.rank, env.world_size);
  }
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

int Communicator::rank() const {
  return impl_->rank;
}
int Communicator::world_size() const {
  return impl_->size;
}

std::string Communicator::transport() const {
  return impl_->shm ? impl_->backend_name + " + shared memory" : impl_->backend_name;
}

PendingWork Communicator::allreduce_async(at::Tensor& tensor, ReduceOp op) {
  if (impl_->shm) {
    if (const auto type = to_shm(tensor)) {
      impl_->guard("all-reduce", [&] {
        impl_->shm->allreduce(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()), *type,
                              *to_shm(op), impl_->timeout);
      });
      return PendingWork();
    }
  }
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions opts;
  opts.reduceOp = to_c10d(op);
  PendingWork pending;
  pending.impl_ = std::make_unique<PendingWork::Impl>();
  pending.impl_->owner = impl_.get();
  impl_->guard("all-reduce",
               [&] { pending.impl_->work = impl_->backend->allreduce(tensors, opts); });
  return pending;
}

void Communicator::allreduce(at::Tensor& tensor, ReduceOp op) {
  allreduce_async(tensor, op).wait();
}

void Communicator::broadcast(std::vector<at::Tensor>& tensors, int root) {
  // Gloo broadcasts several tensors in one call only if they have one shape: one call each.
  impl_->guard("broadcast", [&] {
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

void Communicator::barrier() {
  impl_->guard("barrier", [&] { impl_->backend->barrier(c10d::BarrierOptions())->wait(); });
}

}  // namespace ddprun::worker
