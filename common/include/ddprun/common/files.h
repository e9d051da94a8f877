#pragma once
// Files and folders. Failures throw std::system_error naming the call and the path.

#include <cstddef>
#include <string>

namespace ddprun {

// Creates `dir` and its missing parents; what it creates gets exactly `mode`, whatever the
// umask. Throws when a component cannot be created or `dir` is not a folder.
void make_directories(const std::string& dir, unsigned mode = 0700);

// The whole content of the file at `path`. Throws std::system_error ("open PATH",
// "read PATH").
std::string read_file(const std::string& path);

// Writes `text` to a new file at `path` (0600; an existing file is an error, so nothing of
// someone else's is overwritten). Throws std::system_error ("open PATH", "write PATH").
void write_new_file(const std::string& path, const std::string& text);

// At most `max_bytes` from the start of the file at `path`; empty when it cannot be read.
// For small files whose absence is an answer: /proc entries, error files.
std::string read_file_head(const std::string& path, std::size_t max_bytes = 64 * 1024);

}  // namespace ddprun
