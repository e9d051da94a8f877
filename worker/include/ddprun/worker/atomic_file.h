#pragma once
// Crash-safe file replacement. No LibTorch.

#include <string>
#include <string_view>

namespace ddprun::worker {

// Writes `bytes` to `dir/name` so that a reader sees the old file or the new one, never a
// partial one, even across a crash: a temporary file in `dir` (mode `mode`), fsync, rename
// over the target, fsync of `dir`. Throws std::system_error naming the call and the path.
void write_file_atomically(const std::string& dir, const std::string& name, std::string_view bytes,
                           unsigned mode = 0600);

// Reads a whole file. Throws std::system_error naming the path.
std::string read_file(const std::string& path);

// Creates `dir` (and its parents) if missing, with mode `mode` for what it creates.
// Throws std::system_error naming the path.
void make_directories(const std::string& dir, unsigned mode = 0700);

}  // namespace ddprun::worker
