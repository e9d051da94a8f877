#include "ddprun/worker/autocast.h"

#include "torch_compat.h"

namespace ddprun::worker {

CpuAutocast::CpuAutocast(bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  was_enabled_ = compat::set_cpu_autocast(true, at::kBFloat16);
  compat::enter_autocast_region();
}

CpuAutocast::~CpuAutocast() {
  if (!enabled_) return;
  compat::leave_autocast_region();
  compat::set_cpu_autocast(was_enabled_, at::kBFloat16);
}

}  // namespace ddprun::worker
