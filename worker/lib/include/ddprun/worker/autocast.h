#pragma once
// Mixed precision: inside an Autocast, LibTorch runs the operations its autocast lists for
// the device (linear, matmul, convolutions) in a half-width type and the rest in float;
// parameters, gradients and the optimizer stay float. bfloat16 has float's range, so nothing
// overflows; float16 (GPUs only) keeps more digits but overflows past 65504, so its
// gradients need a GradScaler (grad_scaler.h). The LibTorch version's API is in torch_compat.

namespace ddprun::worker {

enum class Precision { kFloat, kBFloat16, kFloat16 };

class Autocast {
 public:
  // kFloat: a guard that does nothing. `on_gpu`: CUDA's autocast, else the CPU's (bfloat16
  // only: throws ddprun::UsageError for kFloat16).
  Autocast(Precision precision, bool on_gpu);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  Precision precision_;
  bool on_gpu_;
  bool was_enabled_ = false;
  int was_type_ = 0;  // the device's autocast type before (an at::ScalarType)
};

// bfloat16 on the CPU, as earlier versions of this library offered it.
class CpuAutocast : public Autocast {
 public:
  explicit CpuAutocast(bool enabled)
      : Autocast(enabled ? Precision::kBFloat16 : Precision::kFloat, false) {}
};

}  // namespace ddprun::worker
