#include "line_buffer.h"

namespace ddprun {

std::vector<std::string> LineSplitter::feed(std::string_view data) {
  std::vector<std::string> lines;
  while (!data.empty()) {
    const auto newline = data.find('\n');
    const auto take = newline == std::string_view::npos ? data.size() : newline;
    const auto room = kMaxLine - partial_.size();
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

}  // namespace ddprun
