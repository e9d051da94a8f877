#pragma once
// Where readers get their input besides the environment (files), and the one-line error
// messages that name where a bad value came from. Thread-safe; no global state.

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cluster.h"

namespace ddprun {

// Returns the whole content of the file at `path`, or throws (std::system_error naming
// the path, or any std::exception). Tests pass in-memory files; main() passes
// read_file_from_disk.
using ReadFile = std::function<std::string(const std::string& path)>;

// Reads a file from disk. Throws std::system_error("open PATH" / "read PATH", errno).
std::string read_file_from_disk(const std::string& path);

// Error message builders. Each returns one line; none has a trailing newline.
// A variable's value is shown quoted when it is short and printable.
//   NAME="value": message
std::string env_message(std::string_view name, std::string_view value, std::string_view message);
//   NAME="value", column C: message
std::string env_message_at(std::string_view name, std::string_view value, std::size_t column,
                           std::string_view message);
//   NAME is not set: message
std::string env_missing_message(std::string_view name, std::string_view message);
//   path:line:column: message            (via empty)
//   path:line:column (VAR): message      (a file named by the variable VAR)
std::string file_message(std::string_view path, std::size_t line, std::size_t column,
                         std::string_view message, std::string_view via = {});

// Calls read_file(path); on failure throws SchedulerEnvError naming `via` (the variable
// that named the file), or ConfigError when `via` is empty.
std::string read_named_file(const ReadFile& read_file, const std::string& path,
                            std::string_view via);

// A file's lines, without '\n' and without a trailing '\r'.
std::vector<std::string_view> split_lines(std::string_view text);

// Parses a non-negative decimal int (at most 9 digits, no sign, no spaces); nullopt
// otherwise.
std::optional<int> parse_int(std::string_view text);

}  // namespace ddprun
