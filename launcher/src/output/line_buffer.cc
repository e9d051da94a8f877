#include "output/line_buffer.h"

namespace ddprun {

std::vector<std::string> LineSplitter::feed(std::string_view data) {
  std::vector<std::string> lines;
  while (!data.empty()) {
    const auto newline = data.find('\n');
    const auto take = newline == std::string_view::npos ? data.size() : newline;
    const auto room = max_line_ - partial_.size();
    if (take >= room) {
      partial_.append(data.substr(0, room));
      lines.push_back(std::move(partial_));
      partial_.clear();
      data.remove_prefix(room);
      // A newline right at the cut belongs to the piece just emitted.
      if (take == room && newline != std::string_view::npos) data.remove_prefix(1);
      continue;
    }
    partial_.append(data.substr(0, take));
    if (newline == std::string_view::npos) break;
    lines.push_back(std::move(partial_));
    partial_.clear();
    data.remove_prefix(take + 1);
  }
  return lines;
}

std::vector<std::string> LineSplitter::finish() {
  std::vector<std::string> lines;
  if (!partial_.empty()) lines.push_back(std::move(partial_));
  partial_.clear();
  return lines;
}

std::optional<std::string> LineSplitter::take_redraw() {
  const auto cr = partial_.rfind('\r');
  if (cr == std::string::npos) return std::nullopt;
  std::string latest = partial_.substr(cr + 1);
  partial_.clear();
  return latest;
}

void TailLines::add(std::string_view line) {
  if (max_lines_ == 0) return;
  if (lines_.size() == max_lines_) lines_.pop_front();
  lines_.emplace_back(line.substr(0, kMaxKeptLine));
}

bool ConsoleQueue::push(std::string chunk, std::size_t lines, bool logged) {
  bool all_kept = true;
  // The oldest chunk that may go: not begun, not ddprun's own.
  std::size_t candidate = offset_ > 0 ? 1 : 0;
  while (bytes_ + chunk.size() > max_bytes_ && candidate < chunks_.size()) {
    const auto it = chunks_.begin() + static_cast<std::ptrdiff_t>(candidate);
    if (it->message) {
      ++candidate;
      continue;
    }
    drop(*it);
    bytes_ -= it->text.size();
    chunks_.erase(it);
    all_kept = false;
  }
  if (bytes_ + chunk.size() > max_bytes_) {
    drop({std::move(chunk), lines, logged, false});
    return false;
  }
  bytes_ += chunk.size();
  chunks_.push_back({std::move(chunk), lines, logged, false});
  return all_kept;
}

void ConsoleQueue::push_message(std::string text) {
  if (text.empty()) return;
  bytes_ += text.size();
  chunks_.push_back({std::move(text), 0, false, true});
}

std::string_view ConsoleQueue::front() const noexcept {
  if (chunks_.empty()) return {};
  return std::string_view(chunks_.front().text).substr(offset_);
}

void ConsoleQueue::consume(std::size_t count) noexcept {
  while (count > 0 && !chunks_.empty()) {
    const std::size_t rest = chunks_.front().text.size() - offset_;
    const std::size_t taken = count < rest ? count : rest;
    offset_ += taken;
    bytes_ -= taken;
    count -= taken;
    if (offset_ == chunks_.front().text.size()) {
      chunks_.pop_front();
      offset_ = 0;
    }
  }
}

void ConsoleQueue::drop_all() {
  const bool begun = offset_ > 0;
  for (const Chunk& chunk : chunks_) drop(chunk);
  chunks_.clear();
  offset_ = 0;
  bytes_ = 0;
  if (begun) push_message("\n");
}

std::string ConsoleQueue::take_unwritten() {
  std::string text;
  text.reserve(bytes_);
  for (const Chunk& chunk : chunks_) {
    text.append(chunk.text, &chunk == &chunks_.front() ? offset_ : 0);
  }
  chunks_.clear();
  offset_ = 0;
  bytes_ = 0;
  return text;
}

ConsoleQueue::Dropped ConsoleQueue::take_dropped() noexcept {
  const Dropped taken = dropped_;
  dropped_ = {};
  return taken;
}

void ConsoleQueue::drop(const Chunk& chunk) noexcept {
  if (chunk.message) return;
  dropped_.lines += chunk.lines;
  if (chunk.logged) dropped_.logged_lines += chunk.lines;
}

}  // namespace ddprun
