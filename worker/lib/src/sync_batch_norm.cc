#include "ddprun/worker/sync_batch_norm.h"

#include <torch/torch.h>

#include <vector>

namespace ddprun::worker {
namespace {

// Sums `v` over all ranks; its gradient is the sum of all ranks' gradients, which is what
// each rank's input contributed to every rank's output.
struct AllReduceSum : torch::autograd::Function<AllReduceSum> {
  static at::Tensor sum(Plane& plane, const at::Tensor& v) {
    auto buffer = plane.device_zeros(v.numel(), v.scalar_type());  // what the plane accepts
    buffer.copy_(v.reshape(-1));
    plane.allreduce(buffer, ReduceOp::kSum);
    return buffer.view(v.sizes());
  }
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& v,
                            std::int64_t plane) {
    ctx->saved_data["plane"] = plane;
    return sum(*reinterpret_cast<Plane*>(plane), v);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* plane = reinterpret_cast<Plane*>(ctx->saved_data["plane"].toInt());
    return {sum(*plane, grads[0].contiguous()), at::Tensor()};
  }
};

}  // namespace

SyncBatchNorm::SyncBatchNorm(std::int64_t channels, double eps, double momentum)
    : eps_(eps), momentum_(momentum) {
  weight = register_parameter("weight", torch::ones({channels}));
  bias = register_parameter("bias", torch::zeros({channels}));
  running_mean = register_buffer("running_mean", torch::zeros({channels}));
  running_var = register_buffer("running_var", torch::ones({channels}));
}

at::Tensor SyncBatchNorm::forward(const at::Tensor& x) {
  const std::int64_t channels = weight.size(0);
  std::vector<std::int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
  shape[1] = channels;
  const auto per_channel = [&](const at::Tensor& t) { return t.view(shape); };
  if (!is_training()) {
    return (x - per_channel(running_mean)) * per_channel(torch::rsqrt(running_var + eps_)) *
               per_channel(weight) +
           per_channel(bias);
  }
  std::vector<std::int64_t> dims{0};
  for (std::int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  const double rows = static_cast<double>(x.numel() / channels);
  auto stats = torch::cat({x.sum(dims), (x * x).sum(dims), torch::full({1}, rows, x.options())});
  if (plane_ != nullptr) stats = AllReduceSum::apply(stats, reinterpret_cast<std::int64_t>(plane_));
  const auto count = stats.narrow(0, 2 * channels, 1);
  const auto mean = stats.narrow(0, 0, channels) / count;
  const auto var = stats.narrow(0, channels, channels) / count - mean * mean;
  {
    torch::NoGradGuard no_grad;
    const double n = count.item<double>();
    running_mean.mul_(1 - momentum_).add_(mean.detach() * momentum_);
    running_var.mul_(1 - momentum_).add_(var.detach() * (n / std::max(n - 1, 1.0)) * momentum_);
  }
  return (x - per_channel(mean)) * per_channel(torch::rsqrt(var + eps_)) * per_channel(weight) +
         per_channel(bias);
}

}  // namespace ddprun::worker
