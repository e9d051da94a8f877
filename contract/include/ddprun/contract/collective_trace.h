#pragma once
// Each rank's last collectives, in a small file the worker maps and updates in place
// (DDPRUN_TRACE_FILE), so that ddprun can read where every rank is without its help: on a
// stall, or when it takes the stacks of ranks it is about to kill. A read while the worker
// writes may catch one entry half-written: these are diagnostics, never bookkeeping.
//
// Per plane (control, data) the collectives are numbered from 1 in the order this rank
// started them; every rank starts a plane's collectives in one order, so #k is the same
// collective on every rank. The entry of #k is entries[(k - 1) % kEntries].

#include <cstdint>
#include <string_view>

namespace ddprun::trace {

inline constexpr std::uint32_t kMagic = 0x31525444;  // "DTR1"
inline constexpr std::uint32_t kEntries = 64;
inline constexpr int kPlanes = 2;  // 0: control, 1: data (when it has its own group)

enum class Op : std::uint8_t {
  kNone = 0,
  kAllreduce,
  kCompressedAllreduce,
  kReduceScatter,
  kAllgather,
  kBroadcast,
  kBarrier,
};

inline std::string_view op_name(std::uint8_t op) {
  switch (static_cast<Op>(op)) {
    case Op::kAllreduce:
      return "all-reduce";
    case Op::kCompressedAllreduce:
      return "compressed all-reduce";
    case Op::kReduceScatter:
      return "reduce-scatter";
    case Op::kAllgather:
      return "all-gather";
    case Op::kBroadcast:
      return "broadcast";
    case Op::kBarrier:
      return "barrier";
    case Op::kNone:
      break;
  }
  return "collective";
}

struct Entry {
  std::uint64_t seq = 0;      // 0: empty
  std::uint64_t bytes = 0;    // of this rank's tensors
  std::int64_t start_ns = 0;  // CLOCK_REALTIME
  std::int64_t end_ns = 0;    // 0 while this rank is in it
  std::uint8_t op = 0;
  std::uint8_t padding[7] = {};
};

struct PlaneTrace {
  std::uint64_t started = 0;  // the number of the last collective started (0: none)
  std::uint64_t padding = 0;
  Entry entries[kEntries];
};

struct TraceFile {
  std::uint32_t magic = kMagic;
  std::int32_t rank = -1;
  PlaneTrace planes[kPlanes];
};

}  // namespace ddprun::trace
