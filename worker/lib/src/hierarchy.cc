// The hierarchical path: which ranks share a machine (by name, not by LOCAL_RANK), their
// shared-memory segment, the leaders' gloo group, and the all-reduce through both.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <unordered_map>

#include "communicator_impl.h"
#include "cpus.h"
#include "torch_compat.h"

namespace ddprun::worker {
namespace {

std::vector<std::uint8_t> as_bytes(const std::string& text) {
  return {text.begin(), text.end()};
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
  compat::start_collective([&] { return gloo.allreduce(tensors); })->wait();
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

}  // namespace

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
  compat::start_collective([&] { return plane.backend->allreduce(tensors); })->wait();
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
  const int divisor = compressed ? compression_divisor(wire, owner->size) : 1;
  if (compressed) {
    owner->guard("all-reduce", [&] {
      if (divisor != 1) tensor.div_(divisor);
      round_to(tensor, wire);
    });
  }
  if (shm) {
    owner->guard("all-reduce", [&] {
      shm->reduce(tensor.data_ptr(), count, type, *to_shm(op), 0, owner->timeout);
    });
  }
  auto step = std::make_shared<NodeStep>();
  step->tensor = tensor;
  step->divisor = divisor;
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
    owner->guard("all-reduce", [&] {
      step->work = compat::start_collective([&] { return leaders->allreduce(tensors, opts); });
    });
  }
  owed.push_back(step);
  PendingWork pending;
  pending.impl_ = std::make_unique<PendingWork::Impl>();
  pending.impl_->owner = owner;
  pending.impl_->step = std::move(step);
  pending.impl_->plane = this;
  return pending;
}

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
      if (next->divisor != 1) next->tensor.mul_(next->divisor);
      next->done = true;
      next->work.reset();
      next->then = nullptr;
      next->tensor = at::Tensor();
      owed.pop_front();
      if (next.get() == step) break;
    }
  });
}

}  // namespace ddprun::worker
