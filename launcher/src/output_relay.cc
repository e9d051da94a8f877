#include "output_relay.h"

namespace ddprun {
namespace {

constexpr std::string_view kEraseLine = "\033[K";

}  // namespace

void OutputRelay::add(RelayTarget target) {
  Source& source = sources_.emplace_back();
  source.prefix = std::move(target.prefix);
  source.out.log = std::move(target.stdout_log);
  source.err.log = std::move(target.stderr_log);
  source.out.to_console = target.stdout_to_console;
  source.err.to_console = target.stderr_to_console;
  source.tail = TailLines(config_.tail_lines);
}

const std::deque<std::string>& OutputRelay::stderr_tail(std::size_t child) const {
  return sources_.at(child).tail.lines();
}

void OutputRelay::feed(std::size_t child, bool is_stderr, std::string_view data) {
  Source& source = sources_.at(child);
  Stream& stream = is_stderr ? source.err : source.out;
  if (data.empty()) {
    emit(source, is_stderr, stream.splitter.finish());
    return;
  }
  if (stream.log.valid()) write_all(stream.log.get(), data);
  emit(source, is_stderr, stream.splitter.feed(data));
  if (config_.console_is_tty && stream.to_console) {
    if (auto redraw = stream.splitter.take_redraw()) {
      // An empty redraw (only "erase line") clears the line for what comes next.
      const bool clear_only = redraw->empty() || *redraw == kEraseLine;
      buffer_ = "\r" + (clear_only ? std::string() : source.prefix) + *redraw;
      write_all(is_stderr ? config_.console_stderr : config_.console_stdout, buffer_);
    }
  }
}

void OutputRelay::emit(Source& source, bool is_stderr, const std::vector<std::string>& lines) {
  if (lines.empty()) return;
  const Stream& stream = is_stderr ? source.err : source.out;
  if (is_stderr) {
    for (const auto& line : lines) source.tail.add(line);
  }
  if (!stream.to_console) return;
  // One write per batch of whole lines: lines of different ranks never mix.
  buffer_.clear();
  for (const auto& line : lines) {
    const auto cr = config_.console_is_tty ? line.rfind('\r') : std::string::npos;
    if (cr == std::string::npos) {
      buffer_ += source.prefix;
      buffer_ += line;
    } else {
      // The end of a line redrawn in place: back to its start, prefix, last version. An
      // "erase line" right after the '\r' goes before the prefix, so the result does not
      // depend on whether the erase and the line arrived in one read or two.
      std::string_view rest = std::string_view(line).substr(cr + 1);
      buffer_ += '\r';
      if (rest.starts_with(kEraseLine)) {
        buffer_ += kEraseLine;
        rest.remove_prefix(kEraseLine.size());
      }
      buffer_ += source.prefix;
      buffer_ += rest;
    }
    buffer_ += '\n';
  }
  write_all(is_stderr ? config_.console_stderr : config_.console_stdout, buffer_);
}

}  // namespace ddprun
