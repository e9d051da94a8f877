#pragma once
// Relays children's output to ddprun's console and per-rank log files: whole lines only
// (lines of different ranks never mix), an optional "[host:rank] " prefix, lines a
// worker redraws with '\r' passed on as they come when the console is a terminal, and the
// last stderr lines of each child kept for failure reports. With --fold-output, the same
// line from several workers becomes one console line (output_fold.h); lines that match
// torchrun's --duplicate-stdout-filters/--duplicate-stderr-filters are also copied to one
// file per stream.
//
// The console never holds up the event loop: writes to it never wait, what it cannot take
// yet waits in a bounded queue, and what does not fit there is left out of the console
// (the log files still get every line) and counted (Console below).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/common/nonblocking_output.h"
#include "ddprun/common/unique_fd.h"
#include "output/line_buffer.h"
#include "output/output_fold.h"

namespace ddprun {

struct RelayConfig {
  // The console is a terminal: lines a worker redraws with '\r' are passed on as they
  // come, each redraw written as "\r" + prefix + its text.
  bool console_is_tty = false;
  std::size_t tail_lines = 20;  // stderr lines kept per child for failure reports
  int console_stdout = 1;       // where relayed output goes (Console)
  int console_stderr = 2;
  // --fold-output: workers' console lines go through an OutputFold with this window.
  bool fold = false;
  std::chrono::milliseconds fold_window = OutputFold::kDefaultWindow;
  // torchrun's --duplicate-stdout-filters and --duplicate-stderr-filters: a worker's line
  // that holds any of these strings is also copied, tagged "[host:rank] ", to the round's
  // filtered file of its stream (open_filtered); whatever the console shows.
  std::vector<std::string> stdout_filters;
  std::vector<std::string> stderr_filters;
};

// ddprun's stdout and stderr as the event loop writes them: a write never waits (the
// descriptors are written as NonBlockingOutput says, their shared flags untouched). What a
// stream cannot take now waits in a ConsoleQueue of at most `max_queued` bytes and goes out
// when the loop sees room (add_write_interest, on_writable); the oldest lines not yet begun
// make room for new ones. When stdout and stderr are the same terminal, pipe or file, one
// queue serves both, so their lines stay whole and in order. The first line left out adds
// a notice to stderr. Not thread-safe; SIGPIPE must be ignored or blocked.
class Console {
 public:
  static constexpr std::size_t kMaxQueuedBytes = std::size_t{4} << 20;  // per stream

  // `stdout_fd` and `stderr_fd` are not owned and must outlive the console.
  Console(int stdout_fd, int stderr_fd, std::size_t max_queued = kMaxQueuedBytes);
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  // A worker's output: `chunk` holds `lines` whole lines (0: a redraw); `logged`: a log
  // file has them too.
  void write(bool is_stderr, std::string chunk, std::size_t lines, bool logged);
  // ddprun's own text, for stderr: never dropped to make room. `before_message`, when
  // set, is called first (the workers' lines the fold holds go out before it).
  void message(std::string text);
  void set_before_message(std::function<void()> hook) { before_message_ = std::move(hook); }
  // Where the log files are, named by the notices (empty: there are none).
  void set_log_folder(std::string folder) { log_folder_ = std::move(folder); }
  const std::string& log_folder() const noexcept { return log_folder_; }

  // The console's descriptors now lead elsewhere (dup2 onto them, as SIGHUP's detach does):
  // writes go there from now on, what waits included.
  void retarget();

  // Appends the descriptors that have output waiting: poll them for POLLOUT.
  void add_write_interest(std::vector<int>& fds) const;
  // `fd`, one of those, has room (or has failed): writes what it can now.
  void on_writable(int fd);

  // Whether output waits on a stream that the last give_up did not find stalled (or that
  // has taken a byte since).
  bool waiting() const;
  // Bytes written so far: how a drain sees progress.
  std::uint64_t bytes_written() const noexcept { return written_; }
  // Drops what still waits (counted as not shown, reported by the caller) and marks the
  // streams that held some as stalled, so that the next drain does not wait for them again
  // until they take a byte.
  void give_up();
  // Lines left out of the console since the last call, over both streams.
  ConsoleQueue::Dropped take_dropped();
  // Takes what still waits for the console, stdout's before stderr's (ConsoleQueue's
  // take_unwritten): for a file, when the console will never take it.
  std::string take_unwritten();

 private:
  struct Sink {
    Sink(int target, std::size_t max_queued) : fd(target), output(target), queue(max_queued) {}
    int fd;
    NonBlockingOutput output;
    ConsoleQueue queue;
    bool stalled = false;
  };
  void flush(Sink& sink);
  void notice_if_dropped();

  std::vector<std::unique_ptr<Sink>> sinks_;  // one, or stdout's and stderr's
  Sink* out_ = nullptr;
  Sink* err_ = nullptr;
  std::string log_folder_;
  std::uint64_t written_ = 0;
  bool noticed_ = false;
  std::function<void()> before_message_;
  bool in_message_ = false;
};

// A streambuf that hands ddprun's own messages to a Console, a whole line at a time (and
// what is left on flush), so that they keep their place among the workers' stderr lines
// and never wait for the console either.
class ConsoleMessages : public std::streambuf {
 public:
  explicit ConsoleMessages(Console& console) : console_(console) {}

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* text, std::streamsize count) override;
  int sync() override;

 private:
  void pass_lines();
  Console& console_;
  std::string pending_;
};

// Where one child's output goes.
struct RelayTarget {
  std::string prefix;  // put before every console line
  bool stdout_to_console = true;
  bool stderr_to_console = true;
  UniqueFd stdout_log;  // invalid: no log file
  UniqueFd stderr_log;
  std::string stdout_log_path;  // for the warning when a log write fails
  std::string stderr_log_path;
  // An agent: its lines that are answers to the head's control requests (control.h) go
  // to the relay's answer handler instead of the console.
  bool answers = false;
  // A worker: a line of its that holds the marker of ddprun's own messages (control.h) is
  // shown with the marker's first byte escaped, so that no worker can forge an answer or a
  // node's event on its way to the head.
  bool worker = false;
  int rank = -1;      // a worker's: the rank a folded line names
  std::string label;  // a worker's "[host:rank] ", for the filtered files
};

// The longest line an agent may send in one piece: an answer with every rank's stacks.
inline constexpr std::size_t kMaxAgentLine = std::size_t{64} << 20;

class OutputRelay {
 public:
  // `console` must outlive the relay.
  OutputRelay(RelayConfig config, Console& console);

  // Adds a child's target; children are numbered in the order they are added.
  void add(RelayTarget target);
  // Opens `path` (appending, never through a link) as the filtered file of the stream,
  // unless one is open already. Throws std::system_error when it cannot.
  void open_filtered(bool is_stderr, const std::string& path);
  // --fold-output: when release_folded has something to let out next; none while nothing
  // is held.
  std::optional<std::chrono::steady_clock::time_point> fold_deadline() const;
  // Writes to the console the folded lines whose time has come by `now`.
  void release_folded(std::chrono::steady_clock::time_point now);
  // Writes every line the fold holds, in order (a round's end, ddprun's own messages).
  void release_all_folded();
  // Bytes from child `child`'s stream; an empty `data` is the end of the stream, which
  // flushes an unterminated last line.
  void feed(std::size_t child, bool is_stderr, std::string_view data);
  // The last stderr lines of `child`.
  const std::deque<std::string>& stderr_tail(std::size_t child) const;
  // The last line `child` wrote to either stream that was not empty ("" when none).
  const std::string& last_line(std::size_t child) const { return sources_.at(child).last; }
  // Where agents' answer lines go (RelayTarget::answers), with the child that wrote them;
  // unset: they are dropped.
  void set_answer_handler(std::function<void(std::size_t child, std::string_view line)> handler) {
    answer_handler_ = std::move(handler);
  }

 private:
  struct Stream {
    LineSplitter splitter;
    UniqueFd log;
    std::string log_path;
    bool to_console = true;
  };
  struct Source {
    std::string prefix;
    Stream out;
    Stream err;
    TailLines tail{20};
    std::string last;
    bool answers = false;
    bool worker = false;
    std::string label;
    std::optional<std::size_t> fold_source;  // its number in fold_
  };
  struct Filtered {
    UniqueFd log;
    std::string path;
  };
  void emit(std::size_t child, bool is_stderr, const std::vector<std::string>& lines);
  // The console's form of `line`: the prefix, a redrawn line's last version, '\n'.
  void append_console_line(std::string& buffer, const Source& source,
                           const std::string& line) const;
  void copy_filtered(const Source& source, bool is_stderr, const std::vector<std::string>& lines);
  void write_folded();
  void write_log(Stream& stream, std::string_view data);

  RelayConfig config_;
  Console& console_;
  std::vector<Source> sources_;
  std::optional<OutputFold> fold_;
  std::size_t fold_count_ = 0;  // workers added to fold_
  Filtered filtered_[2];        // stdout's, stderr's
  std::function<void(std::size_t child, std::string_view line)> answer_handler_;
};

}  // namespace ddprun
