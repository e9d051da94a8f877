#include "output/output_fold.h"

#include <algorithm>

namespace ddprun {

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

std::string OutputFold::key(bool is_stderr, const std::string& text) {
  std::string k(1, is_stderr ? '2' : '1');
  k += text;
  return k;
}

void OutputFold::add(Clock::time_point now, std::size_t source_index, bool is_stderr,
                     std::string text, std::string alone, bool logged, bool foldable) {
  Source& source = sources_.at(source_index);
  if (foldable) {
    const auto found = open_.find(key(is_stderr, text));
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
  held_bytes_ += text.size() + alone.size();
  group.text = std::move(text);
  group.alone = std::move(alone);
  if (foldable) open_[key(is_stderr, group.text)].push_back(group.seq);
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
    const auto found = open_.find(key(group.is_stderr, group.text));
    // The oldest group is the oldest of its text too.
    found->second.pop_front();
    if (found->second.empty()) open_.erase(found);
  }
  held_bytes_ -= group.text.size() + group.alone.size();
  Out out;
  out.is_stderr = group.is_stderr;
  out.lines = 1;
  out.logged = group.logged;
  if (group.ranks.size() == 1) {
    out.text = std::move(group.alone);
  } else {
    out.text = "[" + format_rank_ranges(std::move(group.ranks)) + "] " + group.text + "\n";
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
