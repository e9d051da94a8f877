#pragma once
// Relays children's output to ddprun's console and per-rank log files: whole lines only
// (lines of different ranks never mix), an optional "[host:rank] " prefix, lines a
// worker redraws with '\r' passed on as they come when the console is a terminal, and the
// last stderr lines of each child kept for failure reports.

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/common/unique_fd.h"
#include "line_buffer.h"

namespace ddprun {

struct RelayConfig {
  // The console is a terminal: lines a worker redraws with '\r' are passed on as they
  // come, each redraw written as "\r" + prefix + its text.
  bool console_is_tty = false;
  std::size_t tail_lines = 20;  // stderr lines kept per child for failure reports
  int console_stdout = 1;       // where relayed output goes
  int console_stderr = 2;
};

// Where one child's output goes.
struct RelayTarget {
  std::string prefix;  // put before every console line
  bool stdout_to_console = true;
  bool stderr_to_console = true;
  UniqueFd stdout_log;  // invalid: no log file
  UniqueFd stderr_log;
};

class OutputRelay {
 public:
  explicit OutputRelay(RelayConfig config) : config_(config) {}

  // Adds a child's target; children are numbered in the order they are added.
  void add(RelayTarget target);
  // Bytes from child `child`'s stream; an empty `data` is the end of the stream, which
  // flushes an unterminated last line.
  void feed(std::size_t child, bool is_stderr, std::string_view data);
  // The last stderr lines of `child`.
  const std::deque<std::string>& stderr_tail(std::size_t child) const;

 private:
  struct Stream {
    LineSplitter splitter;
    UniqueFd log;
    bool to_console = true;
  };
  struct Source {
    std::string prefix;
    Stream out;
    Stream err;
    TailLines tail{20};
  };
  void emit(Source& source, bool is_stderr, const std::vector<std::string>& lines);

  RelayConfig config_;
  std::vector<Source> sources_;
  std::string buffer_;
};

}  // namespace ddprun
