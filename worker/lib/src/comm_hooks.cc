// The built-in comm hooks of DistributedDataParallel (ddp.h): float buckets sent as bf16 or
// fp16 through the plane's compressed all-reduce, other buckets as they are.
#include "ddprun/worker/ddp.h"

namespace ddprun::worker {
namespace {

CommHook compress_hook(const char* name, at::ScalarType wire) {
  return {name,
          [wire](Plane& plane, at::Tensor& bucket) {
            return bucket.scalar_type() == at::kFloat
                       ? plane.allreduce_compressed_async(bucket, wire)
                       : plane.allreduce_async(bucket, ReduceOp::kSum);
          },
          wire};
}

}  // namespace

CommHook bf16_compress_hook() {
  return compress_hook("bf16", at::kBFloat16);
}

CommHook fp16_compress_hook() {
  return compress_hook("fp16", at::kHalf);
}

}  // namespace ddprun::worker
