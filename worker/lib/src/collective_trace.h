#pragma once
// The writer of a rank's collective trace (ddprun/contract/collective_trace.h): the file
// mapped shared, each collective's start and end stored into it directly, so that ddprun
// can read it at any time, even while this rank is stopped or stuck. No LibTorch.

#include <cstdint>
#include <string>

#include "ddprun/contract/collective_trace.h"

namespace ddprun::worker {

class TraceWriter {
 public:
  // Maps `path` (created or truncated to the trace's size). Empty `path`, or a file that
  // cannot be made: off, every call does nothing.
  TraceWriter(const std::string& path, int rank);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Records the start of the next collective on `plane` (0 or 1); returns its entry, to
  // end() when it completes; null when off.
  trace::Entry* begin(int plane, trace::Op op, std::uint64_t bytes);
  static void end(trace::Entry* entry);

 private:
  trace::TraceFile* file_ = nullptr;
};

}  // namespace ddprun::worker
