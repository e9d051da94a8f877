#pragma once
// The worker's error types and its torchelastic error report. No LibTorch.
//
// Library code throws; ddp-train's main() catches once, writes the error file, prints one
// "ddp-train: error: ..." line and exits 1 (75 after a clean stop on a preemption notice:
// ddprun::kExitPreempted).

#include <ddprun/errors.h>

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

// What went wrong, as the error file and stderr report it.
struct ErrorReport {
  std::string message;    // one line, no backtrace
  std::string callstack;  // free text: a C++ backtrace when LibTorch gave one, else empty
};

// Torchelastic's error-file JSON for `report` with `unix_seconds` as its timestamp:
// {"message": {"message": ..., "extraInfo": {"py_callstack": ..., "timestamp": "..."}}}.
std::string format_error_file(const ErrorReport& report, long long unix_seconds);

// Writes format_error_file(report, now) to `path` (replacing it atomically). Never throws:
// a failure to write is reported on stderr, since it happens while handling another error.
void write_error_file(const std::string& path, const ErrorReport& report) noexcept;

}  // namespace ddprun::worker
