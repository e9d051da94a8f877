#pragma once
// Mixed precision on the CPU: inside a CpuAutocast, LibTorch runs the operations its autocast
// lists for the CPU (linear, matmul, convolutions) in bfloat16 and the rest in float;
// parameters, gradients and the optimizer stay float. The LibTorch version's API is in
// torch_compat.

namespace ddprun::worker {

class CpuAutocast {
 public:
  explicit CpuAutocast(bool enabled);  // false: a guard that does nothing
  ~CpuAutocast();
  CpuAutocast(const CpuAutocast&) = delete;
  CpuAutocast& operator=(const CpuAutocast&) = delete;

 private:
  bool enabled_;
  bool was_enabled_ = false;
};

}  // namespace ddprun::worker
