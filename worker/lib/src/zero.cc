#include "ddprun/worker/zero.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "ddprun/contract/errors.h"
#include "ddprun/worker/errors.h"
#include "torch_compat.h"

namespace ddprun::worker {
namespace {

// An optimizer's per-parameter state as tensors in a fixed order, and back (ShareState).
using StateParts = ShareState;

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
    if (ddp_.keeps_next_share() && comm_.world_size() > 1) {
      next_shares_.push_back(slice_of(b, next_rank()).clone().requires_grad_(true));
    }
  }
  optimizer_ = make(shares_);
  kind_of(*optimizer_);  // refuses another optimizer now rather than at the first checkpoint
  if (!next_shares_.empty()) next_optimizer_ = make(next_shares_);
}

at::Tensor ShardedOptimizer::slice_of(std::size_t b, int r) {
  auto& flat = ddp_.bucket_buffer(b);
  const std::int64_t size = flat.numel() / comm_.world_size();
  return flat.narrow(0, r * size, size);
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
    for (std::size_t b = 0; b < shares_.size(); ++b) {
      ddp_.bucket_share(b).mul_(scale);
      if (keeps_next()) slice_of(b, next_rank()).mul_(scale);
    }
  }
  return norm;
}

void ShardedOptimizer::set_lr(double lr) {
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
  if (keeps_next()) {
    for (auto& group : next_optimizer_->param_groups()) group.options().set_lr(lr);
  }
}

void ShardedOptimizer::step() {
  // Every share is here on 2 ranks that keep the next one's: nothing to gather.
  const bool gather = !keeps_next() || comm_.world_size() > 2;
  // With keep_next_share (live recovery) a step that a lost peer interrupts leaves nothing
  // changed: the shares' state as it was, the parameters untouched (they are written only
  // once every bucket's all-gather is through), so that every survivor redoes it.
  std::optional<HeldShares> before;
  if (keeps_next() && gather) before = held_copy();
  for (std::size_t b = 0; b < shares_.size(); ++b) {
    shares_[b].mutable_grad() = ddp_.bucket_share(b);
    if (keeps_next()) next_shares_[b].mutable_grad() = slice_of(b, next_rank());
  }
  optimizer_->step();
  if (keeps_next()) next_optimizer_->step();  // before the all-gather overwrites its gradient
  torch::NoGradGuard no_grad;
  try {
    for (std::size_t b = 0; b < shares_.size(); ++b) {
      ddp_.bucket_share(b).copy_(shares_[b]);
      if (!gather) {
        slice_of(b, next_rank()).copy_(next_shares_[b]);
      } else {
        comm_.data().allgather_shares(ddp_.bucket_buffer(b));
      }
    }
  } catch (const CollectiveError&) {
    if (before) put_back(*before);
    throw;
  }
  for (std::size_t b = 0; b < shares_.size(); ++b) {
    const auto& flat = ddp_.bucket_buffer(b);
    for (const auto& [p, offset] : ddp_.bucket_parameters(b)) {
      p.view(-1).copy_(flat.narrow(0, offset, p.numel()));
    }
    shares_[b].mutable_grad() = at::Tensor();
    if (keeps_next()) {
      // The next rank's own update is what every parameter now holds.
      if (gather) next_shares_[b].copy_(slice_of(b, next_rank()));
      next_shares_[b].mutable_grad() = at::Tensor();
    }
  }
}

HeldShares ShardedOptimizer::held_copy() const {
  HeldShares copy = held();
  for (auto* list : {&copy.own, &copy.next}) {
    for (auto& state : *list) {
      for (auto& t : state.tensors) {
        if (t.defined()) t = t.clone();
      }
    }
  }
  return copy;
}

void ShardedOptimizer::put_back(const HeldShares& copy) {
  const Kind kind = kind_of(*optimizer_);
  for (std::size_t b = 0; b < shares_.size(); ++b) {
    const auto set = [&](torch::optim::Optimizer& optimizer, const at::Tensor& share,
                         const StateParts& state) {
      compat::set_optimizer_param_state(optimizer, share,
                                        state.tensors.empty() ? nullptr : state_of(kind, state));
    };
    set(*optimizer_, shares_[b], copy.own[b]);
    set(*next_optimizer_, next_shares_[b], copy.next[b]);
    // The shares' values as they were: the parameters, untouched by the step.
    auto& flat = ddp_.bucket_buffer(b);
    flat.zero_();
    for (const auto& [p, offset] : ddp_.bucket_parameters(b)) {
      flat.narrow(0, offset, p.numel()).copy_(p.reshape(-1));
    }
    shares_[b].detach().copy_(ddp_.bucket_share(b));
    next_shares_[b].detach().copy_(slice_of(b, next_rank()));
    shares_[b].mutable_grad() = at::Tensor();
    next_shares_[b].mutable_grad() = at::Tensor();
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
    const auto share_of = [&](int r) {
      StateParts share{std::vector<at::Tensor>(whole.size()), step};
      for (std::size_t k = 0; k < whole.size(); ++k) {
        if (whole[k].defined()) share.tensors[k] = whole[k].narrow(0, r * size, size).clone();
      }
      return share;
    };
    compat::set_optimizer_param_state(*optimizer_, shares_[b],
                                      state_of(kind, share_of(comm_.rank())));
    if (keeps_next()) {
      compat::set_optimizer_param_state(*next_optimizer_, next_shares_[b],
                                        state_of(kind, share_of(next_rank())));
    }
  }
}

HeldShares ShardedOptimizer::held() const {
  HeldShares held;
  if (!keeps_next()) return held;
  const Kind kind = kind_of(*optimizer_);
  const auto state = [&](const torch::optim::Optimizer& optimizer, const at::Tensor& share) {
    const auto* s = compat::optimizer_param_state(optimizer, share);
    return s == nullptr ? StateParts{} : parts_of(kind, *s);
  };
  for (std::size_t b = 0; b < shares_.size(); ++b) {
    held.own.push_back(state(*optimizer_, shares_[b]));
    held.next.push_back(state(*next_optimizer_, next_shares_[b]));
  }
  return held;
}

void ShardedOptimizer::restore(Plane& control, const HeldShares& held,
                               const std::vector<int>& lost) {
  if (!keeps_next()) return;
  const int world = comm_.world_size(), rank = comm_.rank();
  const auto was_lost = [&](int r) { return std::find(lost.begin(), lost.end(), r) != lost.end(); };
  // Share s lives on rank s and on the rank before it.
  std::vector<int> holder(static_cast<std::size_t>(world));
  for (int s = 0; s < world; ++s) {
    const int before = (s + world - 1) % world;
    holder[static_cast<std::size_t>(s)] = !was_lost(s) ? s : !was_lost(before) ? before : -1;
    if (holder[static_cast<std::size_t>(s)] < 0) {
      throw CollectiveError("ranks " + std::to_string(before) + " and " + std::to_string(s) +
                                " were both lost: rank " + std::to_string(s) +
                                "'s optimizer share (ZeRO-1) lived on them alone",
                            "ddprun restarts the job whole, from its last checkpoint");
    }
  }
  const Kind kind = kind_of(*optimizer_);
  torch::NoGradGuard no_grad;
  for (std::size_t b = 0; b < shares_.size(); ++b) {
    const std::int64_t size = shares_[b].numel();
    // Which parts exist, and the step, as rank holder[0] has them (every holder alike).
    const auto parts = static_cast<std::int64_t>(part_count(kind));
    auto header = torch::zeros({2 + parts}, torch::kLong);
    if (rank == holder[0]) {
      const StateParts& mine = held.own.at(b);
      header[0] = mine.tensors.empty() ? 0 : 1;
      header[1] = mine.step;
      for (std::int64_t k = 0; k < parts && !mine.tensors.empty(); ++k) {
        header[2 + k] = mine.tensors[static_cast<std::size_t>(k)].defined() ? 1 : 0;
      }
    }
    std::vector<at::Tensor> header_list{header};
    control.broadcast(header_list, holder[0]);
    if (header[0].item<std::int64_t>() == 0) continue;  // before the first step: no state
    StateParts own{std::vector<at::Tensor>(static_cast<std::size_t>(parts)),
                   header[1].item<std::int64_t>()};
    StateParts next = own;
    for (std::int64_t k = 0; k < parts; ++k) {
      if (header[2 + k].item<std::int64_t>() == 0) continue;
      for (int s = 0; s < world; ++s) {
        const int from = holder[static_cast<std::size_t>(s)];
        at::Tensor slice;
        if (rank == from) {
          const StateParts& have = s == rank ? held.own.at(b) : held.next.at(b);
          slice = have.tensors.at(static_cast<std::size_t>(k)).clone();
        } else {
          slice = at::empty({size}, shares_[b].options().requires_grad(false));
        }
        std::vector<at::Tensor> list{slice};
        control.broadcast(list, from);
        if (s == rank) own.tensors[static_cast<std::size_t>(k)] = slice;
        if (s == next_rank()) next.tensors[static_cast<std::size_t>(k)] = slice;
      }
    }
    compat::set_optimizer_param_state(*optimizer_, shares_[b], state_of(kind, own));
    compat::set_optimizer_param_state(*next_optimizer_, next_shares_[b], state_of(kind, next));
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
