#include "torch_compat.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <sstream>
#include <type_traits>

namespace ddprun::worker::compat {

c10::intrusive_ptr<c10d::Store> make_tcp_store(const std::string& host, std::uint16_t port,
                                               bool is_server, int world_size,
                                               std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = port;
  options.isServer = is_server;
  options.numWorkers = static_cast<std::size_t>(world_size);
  // Gloo's own rendezvous waits for every rank; the store need not block as well.
  options.waitWorkers = false;
  options.timeout = timeout;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  // 2.4+ asks for the libuv back end by default, and a LibTorch built without libuv
  // (Debian's 2.6) refuses the store ("use_libuv was requested but PyTorch was build
  // without libuv support") before it binds anything: then the classic back end.
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, options);
  } catch (const c10::Error& e) {
    if (!options.useLibUV ||
        std::string(e.what_without_backtrace()).find("libuv") == std::string::npos) {
      throw;
    }
    options.useLibUV = false;
  }
#endif
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

namespace {

// A template, so that only the branch for this LibTorch's key type is compiled.
template <typename States>
const torch::optim::OptimizerParamState* find_state(const States& states, void* impl) {
  using Key = typename States::key_type;
  auto found = states.end();
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;  // how 1.13 writes it (c10::guts::to_string)
    key << impl;
    found = states.find(key.str());
  } else {
    found = states.find(impl);
  }
  return found == states.end() ? nullptr : found->second.get();
}

// The state map's key for `impl` in this LibTorch.
template <typename States>
typename States::key_type state_key(void* impl) {
  if constexpr (std::is_same_v<typename States::key_type, std::string>) {
    std::ostringstream key;
    key << impl;
    return key.str();
  } else {
    return impl;
  }
}

}  // namespace

void set_optimizer_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                               std::unique_ptr<torch::optim::OptimizerParamState> state) {
  auto& states = optimizer.state();
  const auto key = state_key<std::decay_t<decltype(states)>>(param.unsafeGetTensorImpl());
  if (state == nullptr) {
    states.erase(key);  // an entry without a state would be read as one by the next step
  } else {
    states[key] = std::move(state);
  }
}

const torch::optim::OptimizerParamState* optimizer_param_state(
    const torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  return find_state(optimizer.state(), param.unsafeGetTensorImpl());
}

AutocastState set_autocast(at::DeviceType device, AutocastState state) {
  AutocastState was;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  was = {at::autocast::is_autocast_enabled(device), at::autocast::get_autocast_dtype(device)};
  at::autocast::set_autocast_dtype(device, state.type);
  at::autocast::set_autocast_enabled(device, state.enabled);
#else
  if (device == at::kCUDA) {
    was = {at::autocast::is_enabled(), at::autocast::get_autocast_gpu_dtype()};
    at::autocast::set_autocast_gpu_dtype(state.type);
    at::autocast::set_enabled(state.enabled);
  } else {
    was = {at::autocast::is_cpu_enabled(), at::autocast::get_autocast_cpu_dtype()};
    at::autocast::set_autocast_cpu_dtype(state.type);
    at::autocast::set_cpu_enabled(state.enabled);
  }
#endif
  return was;
}

int enter_autocast_region() {
  return at::autocast::increment_nesting();
}

void leave_autocast_region() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
}

c10::intrusive_ptr<c10d::Store> make_file_store(const std::string& path, int world_size,
                                                std::chrono::milliseconds timeout) {
  auto store = c10::make_intrusive<c10d::FileStore>(path, world_size);
  store->setTimeout(timeout);
  return store;
}

c10::intrusive_ptr<c10d::Store> make_prefix_store(const std::string& prefix,
                                                  c10::intrusive_ptr<c10d::Store> store) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, std::move(store));
}

c10::intrusive_ptr<CollectiveBackend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store,
                                                int rank, int size,
                                                std::chrono::milliseconds timeout,
                                                const std::string& interface,
                                                const std::string& master_addr) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (!interface.empty()) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(interface));
  } else if (master_addr == "127.0.0.1" || master_addr == "localhost" || master_addr == "::1") {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(master_addr));
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  // One rank per core is the norm here: more gloo threads only compete with compute.
  options->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

std::mutex& collective_start_mutex() {
  static std::mutex mutex;
  return mutex;
}

bool has_nccl() {
#ifdef USE_C10D_NCCL
  return true;
#else
  return false;
#endif
}

c10::intrusive_ptr<CollectiveBackend> make_nccl(
    [[maybe_unused]] const c10::intrusive_ptr<c10d::Store>& store, [[maybe_unused]] int rank,
    [[maybe_unused]] int size, [[maybe_unused]] std::chrono::milliseconds timeout) {
#ifdef USE_C10D_NCCL
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
#else
  return {};
#endif
}

namespace {

struct GradHook {
  std::shared_ptr<torch::autograd::Node> accumulator;
  std::uintptr_t key = 0;
  ~GradHook() { accumulator->del_post_hook(key); }
};

}  // namespace

std::shared_ptr<void> add_gradient_ready_hook(const at::Tensor& param,
                                              std::function<void()> on_ready) {
  auto hook = std::make_shared<GradHook>();
  hook->accumulator = torch::autograd::impl::grad_accumulator(param);
  TORCH_CHECK(hook->accumulator, "add_gradient_ready_hook: not a leaf that requires grad");
  hook->key =
      hook->accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [fn = std::move(on_ready)](const torch::autograd::variable_list& outputs,
                                     const torch::autograd::variable_list& /*inputs*/) {
            fn();
            return outputs;
          }));
  return hook;
}

void queue_end_of_backward(std::function<void()> callback) {
  torch::autograd::Engine::get_default_engine().queue_callback(std::move(callback));
}

}  // namespace ddprun::worker::compat
