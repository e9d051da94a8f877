#pragma once
// The worker's error types, and writing its error file. No LibTorch.
//
// Library code throws; ddp-train's main() catches once, writes the error file, prints one
// "ddp-train: error: ..." line and exits 1 (75 after a clean stop on a preemption notice:
// ddprun::kExitPreempted).

#include "ddprun/contract/error_file.h"
#include "ddprun/contract/errors.h"

#include <string>

namespace ddprun::worker {

// The environment contract (RANK, WORLD_SIZE, ...) is missing or inconsistent.
class EnvError : public ddprun::Error {
 public:
  using Error::Error;
};

// A data file is missing, truncated or not what its name says.
class DataError : public ddprun::Error {
 public:
  using Error::Error;
};

// A checkpoint cannot be written, read, or does not fit this job.
class CheckpointError : public ddprun::Error {
 public:
  using Error::Error;
};

// Ranks disagree where they must agree (replica check, collective results).
class ConsistencyError : public ddprun::Error {
 public:
  using Error::Error;
};

// A collective failed or timed out. The message names the ranks that did not respond,
// when the survivors could tell (docs/fault-tolerance.md).
class CollectiveError : public ddprun::Error {
 public:
  using Error::Error;
};

// Writes format_error_file(report, now) (ddprun/contract/error_file.h) to `path` (replacing it
// atomically). Never throws: a failure to write is reported on stderr, since it happens while
// handling another error.
void write_error_file(const std::string& path, const ErrorReport& report) noexcept;

// An exception that no catch can reach (thrown on a thread of a library's own: LibTorch
// 2.6's gloo checks getpeername on a connection whose peer has just died, in its loop
// thread) ends the program as main()'s catch would: "<program>: error: <what>", the error
// file at `error_file` (empty: none), exit 1; instead of an abort and a core dump for what
// is a lost peer. std::terminate without an exception (a real bug) still aborts.
void end_uncaught_exceptions_as_errors(std::string program, std::string error_file);

}  // namespace ddprun::worker
