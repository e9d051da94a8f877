// The collectives made of shares: the compressed all-reduce (bf16, fp16 on the wire), the
// reduce-scatter and the all-gather of shares (ZeRO-1).
#include <functional>
#include <vector>

#include "communicator_impl.h"
#include "ddprun/worker/errors.h"

namespace ddprun::worker {

// `tensor`'s float values rounded to `wire` (bf16 or fp16), in place.
void round_to(at::Tensor& tensor, at::ScalarType wire) {
  tensor.copy_(tensor.to(wire));
}

// fp16's largest value is 65504: two ranks' gradients of 40000 rounded and summed as they
// are would give inf. PyTorch's fp16_compress_hook divides by the world size before the
// sum, and so does this (in float, before rounding, so that a value over 65504 whose share
// is under it still passes); the rounded sum is multiplied back, which is exact in float
// (an fp16 value has 11 significant bits, N < 8192 at most 13), so the caller divides as
// after any sum and gets the fp16 average bit for bit. bf16 keeps float's exponent range:
// its rounded values and sums overflow only where float's would, so it goes as it is.
int compression_divisor(at::ScalarType wire, int world) {
  return wire == at::kHalf ? world : 1;
}

// The compressed sum over `backend`: `tensor` (float) goes out rounded to `wire`, each rank
// sums its 1/N share of everyone's in float (an all-to-all, started here) and hands its
// share's sum, rounded to `wire`, to all (an all-gather, in `then`). Per rank that is
// (N-1)/N of the tensor in each direction twice, as a ring all-reduce moves, at half the
// width. Every element is summed by one rank in rank order, so all end bit-identical. The
// wire buffers travel as fp16 bits, which every gloo and NCCL version moves (no arithmetic).
void start_compressed_exchange(compat::CollectiveBackend& backend, const at::Tensor& tensor,
                               at::ScalarType wire, c10::intrusive_ptr<c10d::Work>& work,
                               std::function<void()>& then) {
  const std::int64_t n = backend.getSize(), numel = tensor.numel();
  const std::int64_t share = (numel + n - 1) / n;
  auto send = at::zeros({n * share}, tensor.options().dtype(wire));
  send.narrow(0, 0, numel).copy_(tensor.reshape(-1));
  auto send_bits = send.view(at::kHalf);
  auto received = at::empty_like(send);
  auto received_bits = received.view(at::kHalf);
  std::vector<std::int64_t> even;  // empty: equal shares
  work = compat::start_collective([&] {
    return backend.alltoall_base(received_bits, send_bits, even, even, c10d::AllToAllOptions());
  });
  then = [&backend, tensor, wire, n, numel, share, received, send] {
    auto mine = received.view({n, share}).to(at::kFloat).sum(0).to(wire);
    auto gathered = at::empty({n * share}, tensor.options().dtype(wire));
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (std::int64_t r = 0; r < n; ++r) {
      outputs[0].push_back(gathered.narrow(0, r * share, share).view(at::kHalf));
    }
    std::vector<at::Tensor> inputs{mine.view(at::kHalf)};
    compat::start_collective([&] { return backend.allgather(outputs, inputs); })->wait();
    auto flat = tensor.view(-1);
    flat.copy_(gathered.narrow(0, 0, numel));
  };
}

namespace {

void check_compressible(const at::Tensor& tensor, at::ScalarType wire) {
  if (tensor.scalar_type() != at::kFloat || !tensor.is_contiguous()) {
    throw ddprun::UsageError("compressed all-reduce of a " +
                                 std::string(c10::toString(tensor.scalar_type())) +
                                 " tensor: only contiguous float tensors are compressed",
                             "all-reduce other tensors with allreduce_async");
  }
  if (wire != at::kBFloat16 && wire != at::kHalf) {
    throw ddprun::UsageError("compressed all-reduce to " + std::string(c10::toString(wire)) +
                                 ": the wire type is bfloat16 or half",
                             "");
  }
}

}  // namespace

namespace {

void check_shares(const at::Tensor& flat, int world) {
  if (!flat.is_contiguous() || flat.numel() % world != 0) {
    throw ddprun::UsageError("shares of a tensor of " + std::to_string(flat.numel()) +
                                 " element(s) over " + std::to_string(world) +
                                 " ranks: it must be contiguous and divide evenly",
                             "pad it to a multiple of the world size");
  }
}

}  // namespace

PendingWork Plane::reduce_scatter_async(at::Tensor& flat, at::ScalarType wire) {
  TraceScope scope(*impl_, trace::Op::kReduceScatter, bytes_of(flat));
  return Impl::traced(reduce_scatter_untraced(flat, wire), scope.take());
}

PendingWork Plane::reduce_scatter_untraced(at::Tensor& flat, at::ScalarType wire) {
  auto& owner = *impl_->owner;
  check_shares(flat, owner.size);
  impl_->check_carried("reduce-scatter", flat);
  impl_->check_device_rules("reduce-scatter", flat);
  if (flat.scalar_type() != at::kFloat) wire = at::kFloat;  // only float is compressed
  const bool compressed = wire != at::kFloat;
  if (owner.size == 1 || impl_->across_nodes || impl_->shm) {
    return compressed ? allreduce_compressed_async(flat, wire)
                      : allreduce_async(flat, ReduceOp::kSum);
  }
  const std::int64_t n = owner.size, share = flat.numel() / n;
  const int divisor = compressed ? compression_divisor(wire, owner.size) : 1;
  // Compressed, the wire buffers travel as fp16 bits (see start_compressed_exchange).
  auto input = compressed ? (flat.view(-1) / divisor).to(wire).view(at::kHalf) : flat.view(-1);
  auto received = at::empty_like(input);
  PendingWork pending;
  pending.impl_ = std::make_unique<PendingWork::Impl>();
  pending.impl_->owner = &owner;
  std::vector<std::int64_t> even;  // empty: equal shares
  owner.guard("reduce-scatter", [&] {
    pending.impl_->work = compat::start_collective([&] {
      return impl_->backend->alltoall_base(received, input, even, even, c10d::AllToAllOptions());
    });
  });
  const std::int64_t rank = owner.rank;
  pending.impl_->then = [flat, received, n, share, rank, wire, compressed, divisor] {
    const auto shares = compressed ? received.view(wire).to(at::kFloat) : received;
    auto mine = flat.view(-1).narrow(0, rank * share, share);
    mine.copy_(shares.view({n, share}).sum(0));
    if (divisor != 1) mine.mul_(divisor);
  };
  return pending;
}

void Plane::allgather_shares(at::Tensor& flat) {
  TraceScope scope(*impl_, trace::Op::kAllgather, bytes_of(flat));
  auto& owner = *impl_->owner;
  check_shares(flat, owner.size);
  impl_->check_carried("all-gather", flat);
  impl_->check_device_rules("all-gather", flat);
  if (owner.size == 1) return;
  const std::int64_t n = owner.size, share = flat.numel() / n;
  auto all = flat.view(-1);
  if (impl_->across_nodes || impl_->shm) {
    // No all-gather through shared memory: the others' shares zeroed, then a sum (x + 0 is x).
    if (owner.rank > 0) all.narrow(0, 0, owner.rank * share).zero_();
    all.narrow(0, (owner.rank + 1) * share, (n - owner.rank - 1) * share).zero_();
    allreduce(flat, ReduceOp::kSum);
    return;
  }
  owner.guard("all-gather", [&] {
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (std::int64_t r = 0; r < n; ++r) outputs[0].push_back(all.narrow(0, r * share, share));
    std::vector<at::Tensor> inputs{all.narrow(0, owner.rank * share, share).clone()};
    compat::start_collective([&] { return impl_->backend->allgather(outputs, inputs); })->wait();
  });
}

PendingWork Plane::allreduce_compressed_async(at::Tensor& tensor, at::ScalarType wire) {
  TraceScope scope(*impl_, trace::Op::kCompressedAllreduce, bytes_of(tensor));
  return Impl::traced(allreduce_compressed_untraced(tensor, wire), scope.take());
}

PendingWork Plane::allreduce_compressed_untraced(at::Tensor& tensor, at::ScalarType wire) {
  check_compressible(tensor, wire);
  impl_->check_device_rules("all-reduce", tensor);
  auto& owner = *impl_->owner;
  if (owner.size == 1) {
    owner.guard("all-reduce", [&] { round_to(tensor, wire); });
    return PendingWork();
  }
  if (impl_->across_nodes) {
    return impl_->allreduce_across_nodes(tensor, ShmType::kFloat32, ReduceOp::kSum, wire);
  }
  const int divisor = compression_divisor(wire, owner.size);
  if (impl_->shm) {
    // One machine: nothing on a wire; the same rounding of each rank's values and the sum.
    owner.guard("all-reduce", [&] {
      if (divisor != 1) tensor.div_(divisor);
      round_to(tensor, wire);
      impl_->shm->allreduce(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()),
                            ShmType::kFloat32, ShmOp::kSum, owner.timeout);
      round_to(tensor, wire);
      if (divisor != 1) tensor.mul_(divisor);
    });
    return PendingWork();
  }
  PendingWork pending;
  pending.impl_ = std::make_unique<PendingWork::Impl>();
  pending.impl_->owner = &owner;
  owner.guard("all-reduce", [&] {
    if (divisor != 1) tensor.div_(divisor);
    start_compressed_exchange(*impl_->backend, tensor, wire, pending.impl_->work,
                              pending.impl_->then);
  });
  if (divisor != 1) {
    pending.impl_->then = [exchange = std::move(pending.impl_->then), tensor, divisor] {
      exchange();
      tensor.mul_(divisor);
    };
  }
  return pending;
}

}  // namespace ddprun::worker
