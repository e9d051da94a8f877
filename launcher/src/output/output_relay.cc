#include "output/output_relay.h"

#include <cerrno>
#include <cstring>

#include <algorithm>

#include "ddprun/common/files.h"
#include "report/control.h"
#include "report/report.h"

namespace ddprun {
namespace {

constexpr std::string_view kEraseLine = "\033[K";

}  // namespace

Console::Console(int stdout_fd, int stderr_fd, std::size_t max_queued) {
  sinks_.push_back(std::make_unique<Sink>(stdout_fd, max_queued));
  out_ = sinks_.back().get();
  if (NonBlockingOutput::same_target(stdout_fd, stderr_fd)) {
    err_ = out_;
  } else {
    sinks_.push_back(std::make_unique<Sink>(stderr_fd, max_queued));
    err_ = sinks_.back().get();
  }
}

void Console::retarget() {
  for (auto& sink : sinks_) {
    // A pipe or terminal was reopened through /proc: that copy still leads to the old one.
    sink->output = NonBlockingOutput(sink->fd);
    sink->stalled = false;
    flush(*sink);
  }
}

void Console::write(bool is_stderr, std::string chunk, std::size_t lines, bool logged) {
  Sink& sink = is_stderr ? *err_ : *out_;
  const bool was_empty = sink.queue.empty();
  const bool kept = sink.queue.push(std::move(chunk), lines, logged);
  // With output already waiting, the loop writes when poll says there is room; trying now
  // would only cost a write that takes nothing.
  if (was_empty) flush(sink);
  if (!kept) notice_if_dropped();
}

void Console::message(std::string text) {
  if (before_message_ && !in_message_) {
    in_message_ = true;
    before_message_();
    in_message_ = false;
  }
  const bool was_empty = err_->queue.empty();
  err_->queue.push_message(std::move(text));
  if (was_empty) flush(*err_);
}

void Console::add_write_interest(std::vector<int>& fds) const {
  for (const auto& sink : sinks_) {
    if (!sink->queue.empty()) fds.push_back(sink->output.poll_fd());
  }
}

void Console::on_writable(int fd) {
  for (const auto& sink : sinks_) {
    if (sink->output.poll_fd() == fd) flush(*sink);
  }
}

bool Console::waiting() const {
  return std::any_of(sinks_.begin(), sinks_.end(),
                     [](const auto& sink) { return !sink->queue.empty() && !sink->stalled; });
}

void Console::give_up() {
  for (const auto& sink : sinks_) {
    if (sink->queue.empty()) continue;
    sink->stalled = true;
    sink->queue.drop_all();
  }
}

ConsoleQueue::Dropped Console::take_dropped() {
  ConsoleQueue::Dropped total;
  for (const auto& sink : sinks_) {
    const auto dropped = sink->queue.take_dropped();
    total.lines += dropped.lines;
    total.logged_lines += dropped.logged_lines;
  }
  return total;
}

std::string Console::take_unwritten() {
  std::string text;
  for (const auto& sink : sinks_) text += sink->queue.take_unwritten();
  return text;
}

void Console::flush(Sink& sink) {
  for (;;) {
    const std::string_view data = sink.queue.front();
    if (data.empty()) return;
    const ssize_t written = sink.output.write_some(data);
    if (written == 0) return;  // no room: the loop waits for POLLOUT
    if (written < 0) {
      // The reader is gone (EPIPE) or the stream failed: nothing queued can go out.
      sink.queue.drop_all();
      notice_if_dropped();
      continue;  // drop_all may leave a newline; its write fails and drops it too
    }
    sink.queue.consume(static_cast<std::size_t>(written));
    written_ += static_cast<std::uint64_t>(written);
    sink.stalled = false;
  }
}

void Console::notice_if_dropped() {
  if (noticed_) return;
  for (const auto& sink : sinks_) {
    const auto& dropped = sink->queue.dropped();
    if (dropped.lines == 0) continue;
    noticed_ = true;
    message(format_console_notice(dropped.logged_lines == dropped.lines, log_folder_));
    return;
  }
}

ConsoleMessages::int_type ConsoleMessages::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  pending_ += traits_type::to_char_type(c);
  if (traits_type::to_char_type(c) == '\n') pass_lines();
  return c;
}

std::streamsize ConsoleMessages::xsputn(const char* text, std::streamsize count) {
  pending_.append(text, static_cast<std::size_t>(count));
  pass_lines();
  return count;
}

int ConsoleMessages::sync() {
  if (!pending_.empty()) console_.message(std::move(pending_));
  pending_.clear();
  return 0;
}

void ConsoleMessages::pass_lines() {
  const auto newline = pending_.rfind('\n');
  if (newline == std::string::npos) return;
  console_.message(pending_.substr(0, newline + 1));
  pending_.erase(0, newline + 1);
}

OutputRelay::OutputRelay(RelayConfig config, Console& console)
    : config_(std::move(config)), console_(console) {
  if (config_.fold) fold_.emplace(config_.fold_window);
}

void OutputRelay::add(RelayTarget target) {
  Source& source = sources_.emplace_back();
  if (fold_ && target.worker) {
    source.fold_source = fold_count_++;
    fold_->add_source(target.rank, target.stdout_to_console, target.stderr_to_console);
  }
  source.label = std::move(target.label);
  source.prefix = std::move(target.prefix);
  source.out.log = std::move(target.stdout_log);
  source.err.log = std::move(target.stderr_log);
  source.out.log_path = std::move(target.stdout_log_path);
  source.err.log_path = std::move(target.stderr_log_path);
  source.out.to_console = target.stdout_to_console;
  source.err.to_console = target.stderr_to_console;
  source.tail = TailLines(config_.tail_lines);
  source.answers = target.answers;
  source.worker = target.worker;
  if (!target.worker) {  // an agent: its answers (one line each) arrive whole
    source.out.splitter = LineSplitter(kMaxAgentLine);
    source.err.splitter = LineSplitter(kMaxAgentLine);
  }
}

const std::deque<std::string>& OutputRelay::stderr_tail(std::size_t child) const {
  return sources_.at(child).tail.lines();
}

void OutputRelay::feed(std::size_t child, bool is_stderr, std::string_view data) {
  Source& source = sources_.at(child);
  Stream& stream = is_stderr ? source.err : source.out;
  if (data.empty()) {
    emit(child, is_stderr, stream.splitter.finish());
    if (source.fold_source) {
      fold_->close(std::chrono::steady_clock::now(), *source.fold_source, is_stderr);
      write_folded();
    }
    return;
  }
  if (stream.log.valid()) write_log(stream, data);
  emit(child, is_stderr, stream.splitter.feed(data));
  if (config_.console_is_tty && stream.to_console) {
    if (auto redraw = stream.splitter.take_redraw()) {
      // A line redrawn in place goes out now: what the fold holds goes first, in order.
      release_all_folded();
      // An empty redraw (only "erase line") clears the line for what comes next.
      const bool clear_only = redraw->empty() || *redraw == kEraseLine;
      console_.write(is_stderr, "\r" + (clear_only ? std::string() : source.prefix) + *redraw, 0,
                     stream.log.valid());
    }
  }
}

// A log that cannot be written (a full disk, an I/O error) is said once and closed: the
// lines from there on still reach the console when they go there, and none is half-logged.
void OutputRelay::write_log(Stream& stream, std::string_view data) {
  if (write_all(stream.log.get(), data)) return;
  const int error = errno;
  stream.log.reset();
  console_.message("ddprun: warning: cannot write " + stream.log_path + ": " +
                   std::strerror(error) + "; the rest of this output is " +
                   (stream.to_console ? "on the console only" : "lost") + "\n");
}

void OutputRelay::emit(std::size_t child, bool is_stderr, const std::vector<std::string>& given) {
  if (given.empty()) return;
  Source& source = sources_.at(child);
  std::vector<std::string> kept;
  const std::vector<std::string>* batch = &given;
  if (source.worker) {
    const bool forged = std::any_of(given.begin(), given.end(), [](const std::string& line) {
      return line.find(kAgentAnswerMarker) != std::string::npos;
    });
    if (forged) {
      for (std::string line : given) {
        for (auto at = line.find(kAgentAnswerMarker); at != std::string::npos;
             at = line.find(kAgentAnswerMarker, at)) {
          line.replace(at, 1, "\\x1e");
        }
        kept.push_back(std::move(line));
      }
      batch = &kept;
    }
  } else if (source.answers) {
    for (const auto& line : given) {
      if (line.find(kAgentAnswerMarker) == std::string::npos) {
        kept.push_back(line);
      } else if (answer_handler_) {
        answer_handler_(child, line);
      }
    }
    batch = &kept;
  }
  const std::vector<std::string>& lines = *batch;
  if (lines.empty()) return;
  for (auto line = lines.rbegin(); line != lines.rend(); ++line) {
    if (!line->empty()) {
      const auto cr = line->rfind('\r');  // a line redrawn in place: its last version
      source.last = cr == std::string::npos ? *line : line->substr(cr + 1);
      break;
    }
  }
  const Stream& stream = is_stderr ? source.err : source.out;
  if (is_stderr) {
    for (const auto& line : lines) source.tail.add(line);
  }
  if (source.worker) copy_filtered(source, is_stderr, lines);
  if (!stream.to_console) return;
  if (source.fold_source) {
    const auto now = std::chrono::steady_clock::now();
    for (const auto& line : lines) {
      std::string alone;
      append_console_line(alone, source, line);
      // A line redrawn in place on a terminal is shown as it is, never folded.
      const bool redrawn = config_.console_is_tty && line.find('\r') != std::string::npos;
      fold_->add(now, *source.fold_source, is_stderr, line, std::move(alone), stream.log.valid(),
                 !redrawn);
    }
    write_folded();
    return;
  }
  // One chunk per batch of whole lines: lines of different ranks never mix.
  std::string buffer;
  for (const auto& line : lines) append_console_line(buffer, source, line);
  console_.write(is_stderr, std::move(buffer), lines.size(), stream.log.valid());
}

void OutputRelay::append_console_line(std::string& buffer, const Source& source,
                                      const std::string& line) const {
  const auto cr = config_.console_is_tty ? line.rfind('\r') : std::string::npos;
  if (cr == std::string::npos) {
    buffer += source.prefix;
    buffer += line;
  } else {
    // The end of a line redrawn in place: back to its start, prefix, last version. An
    // "erase line" right after the '\r' goes before the prefix, so the result does not
    // depend on whether the erase and the line arrived in one read or two.
    std::string_view rest = std::string_view(line).substr(cr + 1);
    buffer += '\r';
    if (rest.starts_with(kEraseLine)) {
      buffer += kEraseLine;
      rest.remove_prefix(kEraseLine.size());
    }
    buffer += source.prefix;
    buffer += rest;
  }
  buffer += '\n';
}

void OutputRelay::open_filtered(bool is_stderr, const std::string& path) {
  Filtered& filtered = filtered_[is_stderr ? 1 : 0];
  if (filtered.log.valid() || !filtered.path.empty()) return;  // open, or failed and said so
  filtered.log = open_own_file_for_append(path);
  filtered.path = path;
}

// Each matching line is written whole, with its rank's label, in one write: the ranks of
// a node share the file and their lines never mix.
void OutputRelay::copy_filtered(const Source& source, bool is_stderr,
                                const std::vector<std::string>& lines) {
  Filtered& filtered = filtered_[is_stderr ? 1 : 0];
  if (!filtered.log.valid()) return;
  const auto& filters = is_stderr ? config_.stderr_filters : config_.stdout_filters;
  std::string copy;
  for (const auto& line : lines) {
    const bool match = std::any_of(filters.begin(), filters.end(), [&](const std::string& f) {
      return line.find(f) != std::string::npos;
    });
    if (!match) continue;
    copy += source.label;
    copy += line;
    copy += '\n';
  }
  if (copy.empty() || write_all(filtered.log.get(), copy)) return;
  const int error = errno;
  filtered.log.reset();
  console_.message("ddprun: warning: cannot write " + filtered.path + ": " + std::strerror(error) +
                   "; lines that match the filters are no longer copied\n");
}

std::optional<std::chrono::steady_clock::time_point> OutputRelay::fold_deadline() const {
  return fold_ ? fold_->next_deadline() : std::nullopt;
}

void OutputRelay::release_folded(std::chrono::steady_clock::time_point now) {
  if (!fold_) return;
  fold_->release_due(now);
  write_folded();
}

void OutputRelay::release_all_folded() {
  if (!fold_ || !fold_->holding()) return;
  fold_->release_all();
  write_folded();
}

void OutputRelay::write_folded() {
  for (OutputFold::Out& out : fold_->take()) {
    console_.write(out.is_stderr, std::move(out.text), out.lines, out.logged);
  }
}

}  // namespace ddprun
