#pragma once
// Turns a byte stream from a worker's pipe into whole lines, so that lines of different
// ranks are never interleaved into one, keeps the last lines of a stream for failure
// reports, and holds what waits for a console that is not reading. Pure: no I/O.

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

  // `max_line`: for an agent's stream, whose lines include its answers to the head's
  // control requests (every rank's stacks in one line), which must arrive whole.
  explicit LineSplitter(std::size_t max_line = kMaxLine) : max_line_(max_line) {}

  // Appends `data`; returns the complete lines it finishes, without their '\n'
  // (a trailing '\r' is kept: it is the worker's output).
  std::vector<std::string> feed(std::string_view data);
  // At end of stream: returns the unterminated remainder as a line, if any.
  std::vector<std::string> finish();
  // For a terminal: when the unterminated remainder holds a '\r' (a progress line redrawn
  // in place), returns what follows the last '\r' and drops the remainder.
  std::optional<std::string> take_redraw();

 private:
  std::size_t max_line_;
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

// What waits to be written to one console stream: chunks of whole lines, in order, at most
// `max_bytes` of them. A chunk that does not fit makes room by dropping the oldest chunks
// not yet begun (the newest lines, such as a failing worker's traceback, matter most; a
// begun chunk is never cut, so no line is broken); ddprun's own messages are never dropped
// to make room. Lines dropped are counted. Pure: no I/O.
class ConsoleQueue {
 public:
  struct Dropped {
    std::size_t lines = 0;
    std::size_t logged_lines = 0;  // of `lines`, those a log file also holds
  };

  explicit ConsoleQueue(std::size_t max_bytes) : max_bytes_(max_bytes) {}

  // Queues `chunk`, which holds `lines` whole lines (0 for a redraw); `logged`: a log file
  // has them too. Returns false when something was dropped to make room (or `chunk`
  // itself, when it is larger than the bound).
  bool push(std::string chunk, std::size_t lines, bool logged);
  // Queues ddprun's own text: never dropped to make room, and always queued.
  void push_message(std::string text);
  bool empty() const noexcept { return chunks_.empty(); }
  std::size_t bytes() const noexcept { return bytes_; }
  // The unwritten rest of the oldest chunk (empty when none).
  std::string_view front() const noexcept;
  // `count` bytes of front() were written (at most front().size()).
  void consume(std::size_t count) noexcept;
  // Drops everything queued. When a chunk had begun, a newline stays queued, so that what
  // comes next starts a line of its own.
  void drop_all();
  // Takes everything queued and not yet written (the rest of a begun chunk first), in
  // order, leaving the queue empty; nothing is counted as dropped.
  std::string take_unwritten();
  const Dropped& dropped() const noexcept { return dropped_; }
  // The counts so far; they start again from zero.
  Dropped take_dropped() noexcept;

 private:
  struct Chunk {
    std::string text;
    std::size_t lines = 0;
    bool logged = false;
    bool message = false;
  };
  void drop(const Chunk& chunk) noexcept;

  std::size_t max_bytes_;
  std::deque<Chunk> chunks_;
  std::size_t offset_ = 0;  // bytes of chunks_.front() already written
  std::size_t bytes_ = 0;   // unwritten bytes queued
  Dropped dropped_;
};

}  // namespace ddprun
