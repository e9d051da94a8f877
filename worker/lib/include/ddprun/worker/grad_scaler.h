#pragma once
// Loss scaling for float16 autocast, as PyTorch's GradScaler does it: the loss is multiplied
// by a scale (65536 at first) before backward, so that small gradients do not vanish in
// float16, and the float gradients are divided by it again before clipping and the step. A
// step whose gradients hold an inf or a NaN (the scaled values overflowed float16) is
// skipped and the scale halved; after `growth_interval` good steps in a row it is doubled.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace ddprun::worker {

class Plane;

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // The loss times the scale: call backward on this one.
  at::Tensor scale(const at::Tensor& loss) const;
  // Divides `gradients` by the scale, in place, and returns whether every element is finite.
  // `agree`: ranks that hold different gradients (ZeRO-1's shares) agree on the answer over
  // this plane (collective); null where every rank holds the same (DDP's averaged ones).
  bool unscale(const std::vector<at::Tensor>& gradients, Plane* agree = nullptr);
  // After the step, which is skipped when unscale() returned false: backs the scale off
  // after an overflow, grows it after growth_interval good steps in a row.
  void update(bool finite);
  double current_scale() const { return scale_; }
  // The scale and the count of good steps, for checkpoints (double, 2 elements), and taking
  // them back: a resumed run skips and grows as the uninterrupted one would. load_state
  // throws ddprun::CheckpointError for a state that is not one.
  at::Tensor state() const;
  void load_state(const at::Tensor& state);

 private:
  GradScalerOptions options_;
  double scale_;
  std::int64_t good_steps_ = 0;
};

}  // namespace ddprun::worker
