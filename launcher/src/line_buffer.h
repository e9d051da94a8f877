#pragma once
// Turns a byte stream from a worker's pipe into whole lines, so that lines of different
// ranks are never interleaved into one, and keeps the last lines of a stream for failure
// reports. Pure: no I/O.

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

class LineSplitter {
 public:
  // A line longer than this is emitted in pieces of this size (a worker that never writes
  // a newline must not grow ddprun's memory without bound).
  static constexpr std::size_t kMaxLine = 64 * 1024;

  // Appends `data`; returns the complete lines it finishes, without their '\n'
  // (a trailing '\r' is kept: it is the worker's output).
  std::vector<std::string> feed(std::string_view data);
  // At end of stream: returns the unterminated remainder as a line, if any.
  std::vector<std::string> finish();
  // For a terminal: when the unterminated remainder holds a '\r' (a progress line redrawn
  // in place), returns what follows the last '\r' and drops the remainder.
  std::optional<std::string> take_redraw();

 private:
  std::string partial_;
};

// The last `max_lines` lines seen (each cut to kMaxKeptLine bytes).
class TailLines {
 public:
  static constexpr std::size_t kMaxKeptLine = 1024;
  explicit TailLines(std::size_t max_lines) : max_lines_(max_lines) {}
  void add(std::string_view line);
  const std::deque<std::string>& lines() const noexcept { return lines_; }

 private:
  std::size_t max_lines_;
  std::deque<std::string> lines_;
};

}  // namespace ddprun
