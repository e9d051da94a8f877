// Joining a group: the store, the control and data planes (Communicator::connect), and the
// next group after a lost rank (Communicator::rejoin).
#include <csignal>
#include <memory>
#include <system_error>
#include <thread>
#include <utility>

#include "communicator_impl.h"
#include "cpus.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/init_method.h"
#include "ddprun/worker/shm_allreduce.h"
#include "net.h"
#include "torch_compat.h"

namespace ddprun::worker {

namespace {

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

// A peer that dies must fail the collective with an error, not end this process: writing to
// its closed socket raises SIGPIPE, whose default ends a C++ program (Python ignores it for
// every torch script). A disposition the program chose is left alone.
void ignore_broken_pipes() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) != 0 || current.sa_handler != SIG_DFL ||
      (current.sa_flags & SA_SIGINFO) != 0) {
    return;
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, nullptr);
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
  ignore_broken_pipes();
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
  if (parse_init_method(options.init_method).kind == InitMethod::Kind::kFile) {
    // A FileStore counts its users in the file and removes it when as many as the world
    // size are gone: with replacements and rejoining survivors that count is wrong.
    throw ::ddprun::ConfigError("a group that met through file:// cannot be rejoined",
                                "use env:// or tcp://HOST:PORT");
  }
  if (options.backend == "nccl") {
    throw ddprun::ConfigError("a group over NCCL cannot be rejoined after a lost rank",
                              "use \"backend\": \"gloo\", or a full restart");
  }
  c10::intrusive_ptr<c10d::Store> base_store;
  if (!store_host_lost) base_store = old->impl_->base_store;
  // The old planes end first: their shared-memory segment goes before the new group's is
  // made; their gloo backends end apart (end_backends_apart), which may take until gloo's
  // timeout, while this rank goes on.
  old->impl_->end_backends_apart();
  old.reset();
  if (!base_store) base_store = make_store(env, options);
  return std::unique_ptr<Communicator>(
      new Communicator(join_group(std::move(base_store), env, options, at::kCPU)));
}

void CommunicatorImpl::end_backends_apart() {
  std::vector<c10::intrusive_ptr<compat::CollectiveBackend>> backends;
  for (Plane* plane : {control.get(), data.get()}) {
    if (plane == nullptr) continue;
    if (plane->impl_->backend) backends.push_back(std::move(plane->impl_->backend));
    if (plane->impl_->leaders) backends.push_back(std::move(plane->impl_->leaders));
  }
  if (backends.empty()) return;  // ended apart already (rejoin, then the destructor)
  try {
    std::thread([ended = std::move(backends)]() mutable { ended.clear(); }).detach();
  } catch (const std::system_error&) {
    backends.clear();  // no thread to be had: here, then, waiting as before
  }
}

Communicator::Communicator(std::unique_ptr<CommunicatorImpl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() {
  // A group that failed ends without waiting for its collectives' peers (a rank stopped
  // while it waits for a lost rank's replacement).
  if (impl_ && impl_->failed) impl_->end_backends_apart();
}

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

}  // namespace ddprun::worker
