#include "output/output_fold.h"

#include <algorithm>
#include <cctype>

namespace ddprun {

namespace {

bool digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

// Takes the digits at the front of `s`: true when there are `least` to `most` of them.
bool take_digits(std::string_view& s, std::size_t least = 1, std::size_t most = 64) {
  std::size_t count = 0;
  while (count < s.size() && digit(s[count])) ++count;
  if (count < least || count > most) return false;
  s.remove_prefix(count);
  return true;
}

bool take(std::string_view& s, char c) {
  if (s.empty() || s.front() != c) return false;
  s.remove_prefix(1);
  return true;
}

}  // namespace

std::string_view without_rank_tag(std::string_view line) {
  std::string_view s = line;
  if (s.substr(0, 5) != "[rank") return line;
  s.remove_prefix(5);
  if (!take_digits(s) || s.substr(0, 2) != "]:") return line;
  s.remove_prefix(2);
  take(s, ' ');  // "[rank0]: Traceback": the group's "[0-3] " brings its own space
  return s;
}

std::string fold_match_text(std::string_view line) {
  const std::string_view untagged = without_rank_tag(line);
  // Marked apart from every plain line (none a rank prints starts with \x01 or \x02).
  const std::string as_is =
      untagged.size() == line.size() ? std::string(line) : "\x02" + std::string(untagged);
  std::string_view s = untagged;
  const bool bracketed = take(s, '[');
  if (s.empty() || std::string_view("IWEF").find(s.front()) == std::string_view::npos) {
    return as_is;
  }
  const char level = s.front();
  s.remove_prefix(1);
  // MMDD (c10 leaves out a month's leading 0) HH:MM:SS.fraction, then glog's thread id,
  // then FILE:LINE]
  if (!take_digits(s, 3, 4) || !take(s, ' ') || !take_digits(s, 2, 2) || !take(s, ':') ||
      !take_digits(s, 2, 2) || !take(s, ':') || !take_digits(s, 2, 2) || !take(s, '.') ||
      !take_digits(s) || !take(s, ' ')) {
    return as_is;
  }
  if (!bracketed && (!take_digits(s) || !take(s, ' '))) return as_is;
  const auto end = s.find(']');
  if (end == std::string_view::npos || end == 0) return as_is;
  const std::string_view place = s.substr(0, end);
  const auto colon = place.rfind(':');
  std::string_view number = colon == std::string_view::npos ? "" : place.substr(colon + 1);
  if (!take_digits(number) || !number.empty()) return as_is;
  s.remove_prefix(end + 1);
  return std::string("\x01") + level + std::string(place) + "]" + std::string(s);
}

std::string format_rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string text;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t last = i;
    while (last + 1 < ranks.size() && ranks[last + 1] == ranks[last] + 1) ++last;
    if (!text.empty()) text += ',';
    if (last - i >= 2) {
      text += std::to_string(ranks[i]) + "-" + std::to_string(ranks[last]);
      i = last + 1;
    } else {
      text += std::to_string(ranks[i]);
      i += 1;
    }
  }
  return text;
}

void OutputFold::add_source(int rank, bool stdout_open, bool stderr_open) {
  Source& source = sources_.emplace_back();
  source.rank = rank;
  source.open[0] = stdout_open;
  source.open[1] = stderr_open;
}

std::string OutputFold::key(bool is_stderr, std::string_view match) {
  std::string k(1, is_stderr ? '2' : '1');
  k += match;
  return k;
}

void OutputFold::add(Clock::time_point now, std::size_t source_index, bool is_stderr,
                     std::string text, std::string alone, bool logged, bool foldable) {
  Source& source = sources_.at(source_index);
  std::string match = foldable ? fold_match_text(text) : std::string();
  if (foldable) {
    const auto found = open_.find(key(is_stderr, match));
    if (found != open_.end()) {
      for (const std::uint64_t seq : found->second) {
        if (seq <= source.last_seq) continue;
        Group& group = groups_[static_cast<std::size_t>(seq - groups_.front().seq)];
        group.ranks.push_back(source.rank);
        group.logged = group.logged && logged;
        source.last_seq = seq;
        release_ready(now);
        return;
      }
    }
  }
  Group& group = groups_.emplace_back();
  group.seq = next_seq_++;
  group.is_stderr = is_stderr;
  group.foldable = foldable;
  group.logged = logged;
  group.ranks.push_back(source.rank);
  group.deadline = now + window_;
  held_bytes_ += text.size() + match.size() + alone.size();
  group.text = std::move(text);
  group.match = std::move(match);
  group.alone = std::move(alone);
  if (foldable) open_[key(is_stderr, group.match)].push_back(group.seq);
  source.last_seq = group.seq;
  while (held_bytes_ > max_held_bytes_ && !groups_.empty()) release_front();
  release_ready(now);
}

void OutputFold::close(Clock::time_point now, std::size_t source, bool is_stderr) {
  sources_.at(source).open[is_stderr ? 1 : 0] = false;
  release_ready(now);
}

void OutputFold::release_due(Clock::time_point now) {
  release_ready(now);
}

void OutputFold::release_all() {
  while (!groups_.empty()) release_front();
}

std::vector<OutputFold::Out> OutputFold::take() {
  std::vector<Out> out;
  out.swap(out_);
  return out;
}

std::optional<OutputFold::Clock::time_point> OutputFold::next_deadline() const {
  if (groups_.empty()) return std::nullopt;
  return groups_.front().deadline;  // groups open in time order: the oldest is due first
}

bool OutputFold::could_join(const Source& source, const Group& group) const {
  return group.foldable && source.open[group.is_stderr ? 1 : 0] && source.last_seq < group.seq;
}

bool OutputFold::closed(const Group& group) const {
  return std::none_of(sources_.begin(), sources_.end(),
                      [&](const Source& source) { return could_join(source, group); });
}

void OutputFold::release_ready(std::optional<Clock::time_point> now) {
  while (!groups_.empty() &&
         ((now && groups_.front().deadline <= *now) || closed(groups_.front()))) {
    release_front();
  }
}

void OutputFold::release_front() {
  Group& group = groups_.front();
  if (group.foldable) {
    const auto found = open_.find(key(group.is_stderr, group.match));
    // The oldest group is the oldest of its text too.
    found->second.pop_front();
    if (found->second.empty()) open_.erase(found);
  }
  held_bytes_ -= group.text.size() + group.match.size() + group.alone.size();
  Out out;
  out.is_stderr = group.is_stderr;
  out.lines = 1;
  out.logged = group.logged;
  if (group.ranks.size() == 1) {
    out.text = std::move(group.alone);
  } else {
    out.text = "[" + format_rank_ranges(std::move(group.ranks)) + "] " +
               std::string(without_rank_tag(group.text)) + "\n";
  }
  // Consecutive writes to one stream go out as one: fewer writes, same order.
  if (!out_.empty() && out_.back().is_stderr == out.is_stderr) {
    out_.back().text += out.text;
    out_.back().lines += 1;
    out_.back().logged = out_.back().logged && out.logged;
  } else {
    out_.push_back(std::move(out));
  }
  groups_.pop_front();
}

}  // namespace ddprun
