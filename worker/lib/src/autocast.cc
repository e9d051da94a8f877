// Mixed precision: autocast (autocast.h) and loss scaling for float16 (grad_scaler.h).
#include "ddprun/worker/autocast.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "ddprun/worker/communicator.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/grad_scaler.h"
#include "torch_compat.h"

namespace ddprun::worker {

Autocast::Autocast(Precision precision, bool on_gpu) : precision_(precision), on_gpu_(on_gpu) {
  if (precision_ == Precision::kFloat) return;
  if (precision_ == Precision::kFloat16 && !on_gpu_) {
    throw ddprun::UsageError("float16 autocast runs on GPUs only", "use bfloat16 on the CPU");
  }
  const auto type = precision_ == Precision::kFloat16 ? at::kHalf : at::kBFloat16;
  const auto was = compat::set_autocast(on_gpu_ ? at::kCUDA : at::kCPU, {true, type});
  was_enabled_ = was.enabled;
  was_type_ = static_cast<int>(was.type);
  compat::enter_autocast_region();
}

Autocast::~Autocast() {
  if (precision_ == Precision::kFloat) return;
  compat::leave_autocast_region();
  compat::set_autocast(on_gpu_ ? at::kCUDA : at::kCPU,
                       {was_enabled_, static_cast<at::ScalarType>(was_type_)});
}

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  if (!(options_.init_scale > 0) || !(options_.growth_factor > 1) ||
      !(options_.backoff_factor > 0 && options_.backoff_factor < 1) ||
      options_.growth_interval < 1) {
    throw ddprun::UsageError(
        "GradScaler: init_scale must be > 0, growth_factor > 1, backoff_factor in (0, 1) "
        "and growth_interval >= 1");
  }
}

at::Tensor GradScaler::scale(const at::Tensor& loss) const {
  return loss * scale_;
}

bool GradScaler::unscale(const std::vector<at::Tensor>& gradients, Plane* agree) {
  at::NoGradGuard no_grad;
  // On CUDA one fused kernel per device unscales and checks (every LibTorch version has it);
  // elsewhere one multiplication and one check per tensor.
  std::map<std::pair<int, int>, std::vector<at::Tensor>> on_gpu;
  bool finite = true;
  for (const auto& g : gradients) {
    if (!g.defined()) continue;
    if (g.is_cuda()) {
      on_gpu[{static_cast<int>(g.device().type()), g.device().index()}].push_back(g);
      continue;
    }
    g.mul_(1.0 / scale_);
    if (finite && !at::isfinite(g).all().item<bool>()) finite = false;
  }
  for (auto& [device, tensors] : on_gpu) {
    const auto options = tensors.front().options().dtype(at::kFloat);
    auto found = at::zeros({1}, options);
    const auto inverse = at::full({1}, 1.0 / scale_, options);
    at::_amp_foreach_non_finite_check_and_unscale_(tensors, found, inverse);
    if (found.item<float>() != 0) finite = false;
  }
  if (agree != nullptr) {
    auto bad = at::tensor({finite ? 0.0F : 1.0F});
    agree->allreduce(bad, ReduceOp::kSum);
    finite = bad.item<float>() == 0;
  }
  return finite;
}

at::Tensor GradScaler::state() const {
  return at::tensor({scale_, static_cast<double>(good_steps_)}, at::kDouble);
}

void GradScaler::load_state(const at::Tensor& state) {
  const bool shaped = state.defined() && state.dim() == 1 && state.numel() == 2 &&
                      state.scalar_type() == at::kDouble;
  const double scale = shaped ? state[0].item<double>() : 0;
  const double good = shaped ? state[1].item<double>() : -1;
  if (!(scale > 0) || !std::isfinite(scale) || !(good >= 0) ||
      good >= static_cast<double>(options_.growth_interval) || good != std::floor(good)) {
    throw ddprun::worker::CheckpointError(
        "the loss scale's state is not a scale and a count of good steps below " +
        std::to_string(options_.growth_interval));
  }
  scale_ = scale;
  good_steps_ = static_cast<std::int64_t>(good);
}

void GradScaler::update(bool finite) {
  if (!finite) {
    scale_ *= options_.backoff_factor;
    good_steps_ = 0;
  } else if (++good_steps_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
}

}  // namespace ddprun::worker
