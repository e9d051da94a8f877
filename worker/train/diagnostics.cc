#include "diagnostics.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <ostream>

#include "ddprun/worker/atomic_file.h"
#include "ddprun/worker/communicator.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/stop_signals.h"

namespace ddprun::worker {
namespace {

// FNV-1a over the bytes of every parameter and buffer: equal on all ranks iff they are
// bit-identical (up to hash collisions).
std::int64_t state_checksum(torch::nn::Module& model) {
  std::uint64_t h = 1469598103934665603ull;
  auto state = model.parameters(true);
  for (const auto& b : model.buffers(true)) state.push_back(b);
  for (const auto& p : state) {
    const auto t = p.detach().to(torch::kCPU).contiguous();
    const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
    const auto n = static_cast<std::size_t>(t.numel() * t.element_size());
    for (std::size_t i = 0; i < n; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return static_cast<std::int64_t>(h);
}

}  // namespace

void check_replicas(torch::nn::Module& model, Plane& control, std::int64_t step) {
  const auto sum = state_checksum(model);
  auto lo = torch::tensor({sum}, torch::kLong);
  auto hi = lo.clone();
  control.allreduce(lo, ReduceOp::kMin);
  control.allreduce(hi, ReduceOp::kMax);
  if (lo.item<std::int64_t>() != hi.item<std::int64_t>()) {
    throw ConsistencyError("after step " + std::to_string(step) +
                               " the ranks hold different parameters or buffers (rank " +
                               std::to_string(control.rank()) + " checksum " + std::to_string(sum) +
                               ")",
                           "gradients were not averaged identically: a bug in the DDP wrapper");
  }
}

void write_final_params(const std::string& path, torch::nn::Module& model, std::int64_t step,
                        int world) {
  nlohmann::json j;
  j["step"] = step;
  j["world_size"] = world;
  auto& params = j["params"];
  for (const auto& p : model.named_parameters(true)) {
    const auto t = p.value().detach().to(torch::kCPU, torch::kDouble).contiguous();
    const auto* v = t.data_ptr<double>();
    params[p.key()] = {{"shape", t.sizes().vec()},
                       {"values", std::vector<double>(v, v + t.numel())}};
  }
  const std::filesystem::path fp(path);
  write_file_atomically(fp.has_parent_path() ? fp.parent_path().string() : ".",
                        fp.filename().string(), j.dump() + "\n", 0644);
}

void hold_after_step(std::ostream& out, int rank, std::int64_t step) {
  out << "ddp-train: rank " << rank << " (pid " << ::getpid() << ") holding after step " << step
      << " until a preemption signal" << std::endl;
  // Short polls: a blocking wait could miss the signal that arrives between the check and
  // the wait.
  while (StopSignals::received() == 0) ::poll(nullptr, 0, 10);
}

void lose_rank(bool with_its_node) {
  if (with_its_node) ::kill(::getppid(), SIGKILL);
  for (;;) std::raise(SIGKILL);
}

void hold_checkpoint_write(std::ostream& out, const std::string& dir, const std::string& tmp_name) {
  out << "ddp-train: rank 0 (pid " << ::getpid() << ") holding checkpoint write " << dir << "/"
      << tmp_name << " before its rename" << std::endl;
  for (;;) ::pause();  // until SIGKILL
}

}  // namespace ddprun::worker
