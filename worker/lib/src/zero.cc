#include "ddprun/worker/zero.h"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "ddprun/contract/errors.h"
#include "torch_compat.h"

namespace ddprun::worker {
namespace {

// An optimizer's per-parameter state as tensors in a fixed order, and back: SGD keeps its
// momentum buffer; Adam and AdamW their two moments, the AMSGrad maximum (undefined without
// amsgrad) and a step count.
struct StateParts {
  std::vector<at::Tensor> tensors;
  std::int64_t step = 0;
};

enum class Kind { kSgd, kAdam, kAdamW };

Kind kind_of(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) return Kind::kSgd;
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) return Kind::kAdam;
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) return Kind::kAdamW;
  throw ddprun::UsageError("ShardedOptimizer: only SGD, Adam and AdamW are sharded",
                           "use one of them, or no ZeRO");
}

std::size_t part_count(Kind kind) {
  return kind == Kind::kSgd ? 1 : 3;
}

StateParts parts_of(Kind kind, const torch::optim::OptimizerParamState& state) {
  switch (kind) {
    case Kind::kSgd:
      return {{static_cast<const torch::optim::SGDParamState&>(state).momentum_buffer()}, 0};
    case Kind::kAdam: {
      const auto& s = static_cast<const torch::optim::AdamParamState&>(state);
      return {{s.exp_avg(), s.exp_avg_sq(), s.max_exp_avg_sq()}, s.step()};
    }
    case Kind::kAdamW: {
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(state);
      return {{s.exp_avg(), s.exp_avg_sq(), s.max_exp_avg_sq()}, s.step()};
    }
  }
  return {};
}

std::unique_ptr<torch::optim::OptimizerParamState> state_of(Kind kind, const StateParts& parts) {
  switch (kind) {
    case Kind::kSgd: {
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(parts.tensors[0]);
      return s;
    }
    case Kind::kAdam: {
      auto s = std::make_unique<torch::optim::AdamParamState>();
      s->step(parts.step);
      s->exp_avg(parts.tensors[0]);
      s->exp_avg_sq(parts.tensors[1]);
      s->max_exp_avg_sq(parts.tensors[2]);
      return s;
    }
    case Kind::kAdamW: {
      auto s = std::make_unique<torch::optim::AdamWParamState>();
      s->step(parts.step);
      s->exp_avg(parts.tensors[0]);
      s->exp_avg_sq(parts.tensors[1]);
      s->max_exp_avg_sq(parts.tensors[2]);
      return s;
    }
  }
  return nullptr;
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(DistributedDataParallel& ddp, Communicator& comm,
                                   const MakeOptimizer& make)
    : ddp_(ddp), comm_(comm) {
  torch::NoGradGuard no_grad;
  for (std::size_t b = 0; b < ddp_.bucket_count(); ++b) {
    auto& flat = ddp_.bucket_buffer(b);
    flat.zero_();
    for (const auto& [p, offset] : ddp_.bucket_parameters(b)) {
      flat.narrow(0, offset, p.numel()).copy_(p.reshape(-1));
    }
    shares_.push_back(ddp_.bucket_share(b).clone().requires_grad_(true));
  }
  optimizer_ = make(shares_);
  kind_of(*optimizer_);  // refuses another optimizer now rather than at the first checkpoint
}

double ShardedOptimizer::clip_grad_norm(double max_norm) {
  torch::NoGradGuard no_grad;
  double squares = 0;
  for (std::size_t b = 0; b < shares_.size(); ++b) {
    squares += ddp_.bucket_share(b).to(at::kDouble).pow(2).sum().item<double>();
  }
  auto total = torch::tensor({squares}, torch::kDouble);
  comm_.control().allreduce(total, ReduceOp::kSum);
  const double norm = std::sqrt(total.item<double>());
  const double scale = max_norm / (norm + 1e-6);  // as torch::nn::utils::clip_grad_norm_
  if (scale < 1) {
    for (std::size_t b = 0; b < shares_.size(); ++b) ddp_.bucket_share(b).mul_(scale);
  }
  return norm;
}

void ShardedOptimizer::set_lr(double lr) {
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
}

void ShardedOptimizer::step() {
  for (std::size_t b = 0; b < shares_.size(); ++b) {
    shares_[b].mutable_grad() = ddp_.bucket_share(b);
  }
  optimizer_->step();
  torch::NoGradGuard no_grad;
  for (std::size_t b = 0; b < shares_.size(); ++b) {
    auto& flat = ddp_.bucket_buffer(b);
    ddp_.bucket_share(b).copy_(shares_[b]);
    comm_.data().allgather_shares(flat);
    for (const auto& [p, offset] : ddp_.bucket_parameters(b)) {
      p.view(-1).copy_(flat.narrow(0, offset, p.numel()));
    }
    shares_[b].mutable_grad() = at::Tensor();
  }
}

void ShardedOptimizer::save_state_into(torch::optim::Optimizer& full) {
  const Kind kind = kind_of(*optimizer_);
  torch::NoGradGuard no_grad;
  for (std::size_t b = 0; b < shares_.size(); ++b) {
    // Every rank stepped alike: either all have this share's state or none has.
    const auto* mine = compat::optimizer_param_state(*optimizer_, shares_[b]);
    if (mine == nullptr) continue;
    const StateParts share = parts_of(kind, *mine);
    const auto& flat = ddp_.bucket_buffer(b);
    std::vector<at::Tensor> whole(part_count(kind));
    for (std::size_t k = 0; k < whole.size(); ++k) {
      if (!share.tensors[k].defined()) continue;
      whole[k] = comm_.data().device_zeros(flat.numel(), share.tensors[k].scalar_type());
      const std::int64_t size = whole[k].numel() / comm_.world_size();
      whole[k].narrow(0, comm_.rank() * size, size).copy_(share.tensors[k]);
      comm_.data().allgather_shares(whole[k]);
    }
    for (const auto& [p, offset] : ddp_.bucket_parameters(b)) {
      StateParts parts{std::vector<at::Tensor>(whole.size()), share.step};
      for (std::size_t k = 0; k < whole.size(); ++k) {
        if (whole[k].defined())
          parts.tensors[k] = whole[k].narrow(0, offset, p.numel()).view_as(p).clone();
      }
      compat::set_optimizer_param_state(full, p, state_of(kind, parts));
    }
  }
}

void ShardedOptimizer::load_state_from(const torch::optim::Optimizer& full) {
  const Kind kind = kind_of(*optimizer_);
  if (kind_of(full) != kind) {
    throw ddprun::UsageError("ShardedOptimizer: the state to load is another optimizer's", "");
  }
  torch::NoGradGuard no_grad;
  for (std::size_t b = 0; b < shares_.size(); ++b) {
    const auto& flat = ddp_.bucket_buffer(b);
    const std::int64_t size = flat.numel() / comm_.world_size();
    std::vector<at::Tensor> whole(part_count(kind));
    std::int64_t step = 0;
    bool any = false;
    for (const auto& [p, offset] : ddp_.bucket_parameters(b)) {
      const auto* state = compat::optimizer_param_state(full, p);
      if (state == nullptr) continue;
      any = true;
      const StateParts parts = parts_of(kind, *state);
      step = parts.step;
      for (std::size_t k = 0; k < whole.size(); ++k) {
        if (!parts.tensors[k].defined()) continue;
        if (!whole[k].defined()) whole[k] = at::zeros({flat.numel()}, flat.options());
        whole[k].narrow(0, offset, p.numel()).copy_(parts.tensors[k].reshape(-1));
      }
    }
    if (!any) continue;
    StateParts share{std::vector<at::Tensor>(whole.size()), step};
    for (std::size_t k = 0; k < whole.size(); ++k) {
      if (whole[k].defined())
        share.tensors[k] = whole[k].narrow(0, comm_.rank() * size, size).clone();
    }
    compat::set_optimizer_param_state(*optimizer_, shares_[b], state_of(kind, share));
  }
}

std::int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  Kind kind = Kind::kSgd;
  try {
    kind = kind_of(optimizer);
  } catch (const ddprun::UsageError&) {
    return -1;  // another optimizer: its state is not known here
  }
  std::int64_t bytes = 0;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      const auto* state = compat::optimizer_param_state(optimizer, p);
      if (state == nullptr) continue;
      for (const auto& t : parts_of(kind, *state).tensors) {
        if (t.defined()) bytes += t.numel() * static_cast<std::int64_t>(t.element_size());
      }
    }
  }
  return bytes;
}

const torch::optim::OptimizerParamState* param_state(const torch::optim::Optimizer& optimizer,
                                                     const at::Tensor& param) {
  return compat::optimizer_param_state(optimizer, param);
}

void set_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                     std::unique_ptr<torch::optim::OptimizerParamState> state) {
  compat::set_optimizer_param_state(optimizer, param, std::move(state));
}

}  // namespace ddprun::worker
