#pragma once
// Every c10d API difference between LibTorch 1.13 (what CI builds against) and 2.x lives
// here and in torch_compat.cc; nothing else names a version.
//
// 1.13: ProcessGroupGloo/NCCL derive from c10d::ProcessGroup.
// 2.0+: they derive from c10d::Backend, and ProcessGroup became a dispatching wrapper;
//       the backend itself keeps the same allreduce/broadcast/barrier signatures, so we
//       use it directly.
// 2.4+: TCPStoreOptions::useLibUV defaults to true (we keep the default, falling back to
//       the classic back end where LibTorch was built without libuv, as Debian's 2.6 is).
// Autograd hooks (grad accumulator post hooks, the engine's end-of-backward callback) have
// the same shape in 1.13 and 2.x; they live here because they are internal API.

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <torch/optim/optimizer.h>

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace ddprun::worker::compat {

#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

// A TCPStore: the server when `is_server` (port 0: any free port), else a client.
c10::intrusive_ptr<c10d::Store> make_tcp_store(const std::string& host, std::uint16_t port,
                                               bool is_server, int world_size,
                                               std::chrono::milliseconds timeout);

// The optimizer's state for parameter `param`, or null before its first step. Its map is
// keyed by the parameter's TensorImpl address as a string in 1.13 and as a void* in later
// versions.
const torch::optim::OptimizerParamState* optimizer_param_state(
    const torch::optim::Optimizer& optimizer, const at::Tensor& param);

// Sets (replaces) the optimizer's state for parameter `param`; null removes it.
void set_optimizer_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                               std::unique_ptr<torch::optim::OptimizerParamState> state);

// A FileStore at `path` shared by `world_size` ranks (init_method file://).
c10::intrusive_ptr<c10d::Store> make_file_store(const std::string& path, int world_size,
                                                std::chrono::milliseconds timeout);

// `prefix`/key for every key of `store`.
c10::intrusive_ptr<c10d::Store> make_prefix_store(const std::string& prefix,
                                                  c10::intrusive_ptr<c10d::Store> store);

// Gloo over TCP. `interface` (GLOO_SOCKET_IFNAME) wins; else a loopback master address
// binds loopback; else the address this host's name resolves to.
c10::intrusive_ptr<CollectiveBackend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store,
                                                int rank, int size,
                                                std::chrono::milliseconds timeout,
                                                const std::string& interface,
                                                const std::string& master_addr);

// Starts one collective: `start` calls the backend (allreduce, broadcast, ...) and returns
// its work, which the caller waits for afterwards. LibTorch 2.x records every collective in
// a flight recorder shared by the whole process, and writes its map of groups outside the
// recorder's own lock (FlightRecorder::recordWithResetEnabled): two threads starting
// collectives at once, one of them a group's first, can corrupt the map (SIGSEGV with pip's
// 2.11 when ranks run as threads of one process). So a process starts its collectives one
// at a time; the waits are not serialised.
std::mutex& collective_start_mutex();
template <typename Start>
c10::intrusive_ptr<c10d::Work> start_collective(Start&& start) {
  const std::lock_guard<std::mutex> one_at_a_time(collective_start_mutex());
  return std::forward<Start>(start)();
}

// Whether this LibTorch was built with NCCL (USE_C10D_NCCL).
bool has_nccl();

// NCCL; only when LibTorch was built with it (USE_C10D_NCCL). Returns null otherwise.
c10::intrusive_ptr<CollectiveBackend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store,
                                                int rank, int size,
                                                std::chrono::milliseconds timeout);

// Calls `on_ready` each time backward has accumulated `param`'s gradient into
// `param.grad()` (a post hook on its gradient accumulator, as c10d::Reducer does), on the
// thread running backward. `param` must be a leaf that requires grad. The handle keeps the
// accumulator alive (else autograd makes a new one per forward); destroying it removes the
// hook.
std::shared_ptr<void> add_gradient_ready_hook(const at::Tensor& param,
                                              std::function<void()> on_ready);

// Turns autocast on `device` (the CPU or CUDA) on (to `type`) or off, returning whether it
// was on and its type before. 1.13 has set_cpu_enabled and set_enabled (CUDA) with a dtype
// setter each; 2.4 deprecated them for set_autocast_enabled(device type, ...).
struct AutocastState {
  bool enabled = false;
  at::ScalarType type = at::kBFloat16;
};
AutocastState set_autocast(at::DeviceType device, AutocastState state);
// Autocast's cast cache, kept while autocast regions nest; cleared by the outermost exit.
int enter_autocast_region();
void leave_autocast_region();

// Runs `callback` once the backward pass now running ends. Call only from inside an
// autograd hook; throws c10::Error otherwise.
void queue_end_of_backward(std::function<void()> callback);

}  // namespace ddprun::worker::compat
