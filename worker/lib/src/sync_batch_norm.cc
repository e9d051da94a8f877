#include "ddprun/worker/sync_batch_norm.h"

#include <torch/torch.h>

#include <string>
#include <vector>

#include "ddprun/contract/errors.h"

namespace ddprun::worker {
namespace {

// Every statistic is computed and travels in double, whatever the input's dtype (bf16 or
// fp16 under autocast would round the sums, and gloo refuses bf16): the counts are exact,
// and the merge below adds only non-negative terms, so large means with small spreads keep
// their variance. The per-element work stays in float (or double for double inputs).
constexpr auto kStats = at::kDouble;

at::ScalarType compute_type(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// The dimensions a channel's statistics run over: all but dimension 1.
std::vector<std::int64_t> reduced_dims(const at::Tensor& x) {
  std::vector<std::int64_t> dims{0};
  for (std::int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// `t` (one value per channel) shaped to broadcast against `x`.
at::Tensor per_channel(const at::Tensor& t, const at::Tensor& x) {
  std::vector<std::int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
  shape[1] = t.size(0);
  return t.view(shape);
}

// A mean held as two values of the compute type, `hi` + `lo`: x - hi is exact where x is
// near the mean (within a factor 2), so x - mean keeps the precision of the deviation, not
// that of the mean. With a mean of 1000 and a spread of 0.05, a float mean alone is off by
// up to 3e-5, 6e-4 of a standard deviation.
struct SplitMean {
  at::Tensor hi, lo;
  SplitMean(const at::Tensor& mean, at::ScalarType type)
      : hi(mean.to(type)), lo((mean - hi.to(mean.scalar_type())).to(type)) {}
  SplitMean(at::Tensor h, at::Tensor l) : hi(std::move(h)), lo(std::move(l)) {}
  at::Tensor centre(const at::Tensor& x) const {
    return (x - per_channel(hi, x)) - per_channel(lo, x);
  }
};

// Per channel: this rank's row count, mean and sum of squared deviations (M2), as one row
// [count, mean x C, M2 x C] in double.
at::Tensor local_stats(const at::Tensor& xc, std::int64_t channels) {
  const auto dims = reduced_dims(xc);
  const std::int64_t rows = xc.numel() / channels;
  auto row = at::zeros({1 + 2 * channels}, xc.options().dtype(kStats));
  row.narrow(0, 0, 1).fill_(static_cast<double>(rows));
  if (rows == 0) return row;
  const auto mean = xc.sum(dims, false, kStats) / static_cast<double>(rows);
  const auto m2 = SplitMean(mean, xc.scalar_type()).centre(xc).square().sum(dims, false, kStats);
  row.narrow(0, 1, channels).copy_(mean);
  row.narrow(0, 1 + channels, channels).copy_(m2);
  return row;
}

struct Merged {
  double count = 0;
  at::Tensor mean, var;  // per channel, double; var biased (over `count`)
};

// The ranks' rows [count, mean, M2] merged (Chan et al.): the global mean weighs each
// rank's by its count; M2 adds each rank's M2 and count x (its mean - global mean)^2.
Merged merge(const at::Tensor& rows, std::int64_t channels) {
  const auto counts = rows.narrow(1, 0, 1);
  const auto means = rows.narrow(1, 1, channels);
  const auto m2s = rows.narrow(1, 1 + channels, channels);
  Merged m;
  m.count = counts.sum().item<double>();
  m.mean = (counts * means).sum(0) / m.count;
  m.var = (m2s + counts * (means - m.mean).square()).sum(0) / m.count;
  return m;
}

// Forward and backward as torch.nn.SyncBatchNorm's: each rank's statistics merged with
// their counts in forward; in backward one all-reduce of the sums of dy and dy x (x - mean)
// per channel, the input's gradient from those, and the weight's and bias's from this rank's
// rows only (DDP then averages them as any parameter's).
struct SyncBatchNormFunction : torch::autograd::Function<SyncBatchNormFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, const at::Tensor& bias,
                            std::int64_t plane_address, double eps, double momentum,
                            at::Tensor running_mean, at::Tensor running_var) {
    auto* plane = reinterpret_cast<Plane*>(plane_address);
    const std::int64_t channels = weight.size(0);
    const auto type = compute_type(x);
    const auto xc = x.to(type);
    at::Tensor rows = local_stats(xc, channels).view({1, -1});
    if (plane != nullptr && plane->world_size() > 1) {
      const std::int64_t width = rows.size(1), world = plane->world_size();
      auto all = plane->device_zeros(world * width, kStats);
      all.narrow(0, plane->rank() * width, width).copy_(rows.view(-1));
      plane->allgather_shares(all);
      rows = all.view({world, width});
    }
    const Merged m = merge(rows, channels);
    if (m.count < 2) {
      throw ddprun::UsageError(
          "SyncBatchNorm: " + std::to_string(static_cast<std::int64_t>(m.count)) +
              " value(s) per channel over all ranks; training needs at least 2",
          "give the batch more rows");
    }
    {
      torch::NoGradGuard no_grad;
      const double unbiased = m.count / (m.count - 1);
      running_mean.mul_(1 - momentum).add_(m.mean.to(running_mean.scalar_type()) * momentum);
      running_var.mul_(1 - momentum)
          .add_((m.var * unbiased).to(running_var.scalar_type()) * momentum);
    }
    const SplitMean mean(m.mean, type);
    const auto invstd = (m.var + eps).rsqrt().to(type);
    ctx->save_for_backward({x, weight, mean.hi, mean.lo, invstd});
    ctx->saved_data["plane"] = plane_address;
    ctx->saved_data["count"] = m.count;
    const auto scale = per_channel(invstd * weight.to(type), xc);
    return (mean.centre(xc) * scale + per_channel(bias.to(type), xc)).to(x.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &invstd = saved[4];
    auto* plane = reinterpret_cast<Plane*>(ctx->saved_data["plane"].toInt());
    const double count = ctx->saved_data["count"].toDouble();
    const std::int64_t channels = weight.size(0);
    const auto type = compute_type(x);
    const auto xc = x.to(type);
    const auto dy = grads[0].to(type);
    const auto xmu = SplitMean(saved[2], saved[3]).centre(xc);
    const auto dims = reduced_dims(xc);
    auto sums = at::cat({dy.sum(dims, false, kStats), (dy * xmu).sum(dims, false, kStats)});
    const auto local_sums = sums.clone();
    if (plane != nullptr && plane->world_size() > 1) {
      auto buffer = plane->device_zeros(sums.numel(), kStats);
      buffer.copy_(sums);
      plane->allreduce(buffer, ReduceOp::kSum);
      sums = buffer;
    }
    const auto mean_dy = sums.narrow(0, 0, channels) / count;
    const auto mean_dy_xmu = sums.narrow(0, channels, channels) / count;
    const auto w = weight.to(type);
    const auto dx = (dy - per_channel(mean_dy.to(type), xc) -
                     xmu * per_channel((invstd * invstd * mean_dy_xmu.to(type)), xc)) *
                    per_channel(invstd * w, xc);
    const auto dweight = (local_sums.narrow(0, channels, channels).to(type) * invstd);
    const auto dbias = local_sums.narrow(0, 0, channels);
    return {dx.to(x.scalar_type()),
            dweight.to(weight.scalar_type()),
            dbias.to(weight.scalar_type()),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
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
  if (!is_training()) {
    const auto type = compute_type(x);
    const auto xc = x.to(type);
    const auto scale = per_channel((running_var.to(type) + eps_).rsqrt() * weight.to(type), xc);
    return ((xc - per_channel(running_mean.to(type), xc)) * scale + per_channel(bias.to(type), xc))
        .to(x.scalar_type());
  }
  return SyncBatchNormFunction::apply(x, weight, bias, reinterpret_cast<std::int64_t>(plane_), eps_,
                                      momentum_, running_mean, running_var);
}

}  // namespace ddprun::worker
