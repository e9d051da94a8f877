#include "run/output_relay.h"

#include <cerrno>
#include <cstring>

#include <algorithm>

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

void OutputRelay::add(RelayTarget target) {
  Source& source = sources_.emplace_back();
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
    return;
  }
  if (stream.log.valid()) write_log(stream, data);
  emit(child, is_stderr, stream.splitter.feed(data));
  if (config_.console_is_tty && stream.to_console) {
    if (auto redraw = stream.splitter.take_redraw()) {
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
  if (!stream.to_console) return;
  // One chunk per batch of whole lines: lines of different ranks never mix.
  std::string buffer;
  for (const auto& line : lines) {
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
  console_.write(is_stderr, std::move(buffer), lines.size(), stream.log.valid());
}

}  // namespace ddprun
