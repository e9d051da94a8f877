#pragma once
// Where readers get their input besides the environment (files), and the one-line error
// messages that name where a bad value came from. Thread-safe; no global state.

#include <cstddef>
#include <functional>
#include <map>
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

// A word of a line and its 1-based column.
struct Word {
  std::string_view text;
  std::size_t column = 0;
};

// The words of `line`, separated by spaces and tabs.
std::vector<Word> split_words(std::string_view line);

// Hosts in first-seen order with their slots summed: a host named again adds to its count
// (as Grid Engine's PE_HOSTFILE, LSF's host lists and hostfiles mean a repeat).
class SlotTally {
 public:
  static constexpr int kMaxSlots = 1 << 30;
  // Adds `slots` (>= 1) to `host`. Returns false, changing nothing, when the host's total
  // would pass kMaxSlots.
  bool add(std::string_view host, int slots);
  bool empty() const noexcept { return nodes_.empty(); }
  std::vector<NodeSlots> take() { return std::move(nodes_); }

 private:
  std::vector<NodeSlots> nodes_;
  std::map<std::string, std::size_t, std::less<>> index_of_;
};

}  // namespace ddprun
