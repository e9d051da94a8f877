#include "report/stacks.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "report/labels.h"

namespace ddprun {
namespace {

constexpr std::size_t kFramesShown = 2;
constexpr std::size_t kMaxGroups = 10;

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r')) text.remove_suffix(1);
  return text;
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const auto end = text.find('\n');
    lines.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

std::string_view basename_of(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string join_frames(const std::vector<std::string>& frames) {
  std::string text;
  for (const std::string& frame : frames) text += (text.empty() ? "in " : " <- ") + frame;
  return text;
}

// A native symbol as a reader wants it: no symbol version ("@GLIBC_2.2.5"), no argument
// list ("ns::f(int) const" -> "ns::f"; "(anonymous namespace)::f()" keeps its namespace),
// template arguments kept.
std::string clean_symbol(std::string_view name) {
  if (const auto at = name.find('@'); at != std::string_view::npos) name = name.substr(0, at);
  // GCC's clones: "f() [clone .constprop.0] [clone .isra.0]".
  while (name.ends_with(']')) {
    const auto clone = name.rfind(" [clone ");
    if (clone == std::string_view::npos) break;
    name = name.substr(0, clone);
  }
  for (bool trimmed = true; trimmed;) {
    trimmed = false;
    for (const std::string_view qualifier : {" const", " volatile", " &&", " &"}) {
      if (name.ends_with(qualifier)) {
        name.remove_suffix(qualifier.size());
        trimmed = true;
      }
    }
  }
  if (!name.ends_with(')')) return std::string(name);
  int depth = 0;
  for (std::size_t i = name.size(); i-- > 0;) {
    if (name[i] == ')') ++depth;
    if (name[i] == '(' && --depth == 0) return std::string(name.substr(0, i));
  }
  return std::string(name);
}

bool runtime_module(std::string_view module) {
  const std::string_view file = basename_of(module);
  for (const std::string_view prefix :
       {"libc.so", "libc-", "libpthread", "libstdc++", "libgcc_s", "ld-linux", "libm.so"}) {
    if (file.starts_with(prefix)) return true;
  }
  return false;
}

}  // namespace

std::string python_summary(std::string_view dump) {
  std::vector<std::string> frames;
  bool in_block = false;
  bool chosen = false;  // the block is "Current thread": the one that took the signal
  std::vector<std::string> first_block;
  for (const std::string_view raw : lines_of(dump)) {
    const std::string_view line = trim(raw);
    if (line.starts_with("Current thread") || line.starts_with("Thread ")) {
      if (chosen) break;
      chosen = line.starts_with("Current thread");
      in_block = true;
      if (chosen) frames.clear();
      continue;
    }
    if (!in_block || !line.starts_with("File \"")) continue;
    // File "/path/train.py", line 88 in train_step
    const auto quote = line.find('"', 6);
    const auto line_word = line.find(", line ", quote);
    const auto in_word = line.find(" in ", line_word);
    if (quote == std::string_view::npos || line_word == std::string_view::npos ||
        in_word == std::string_view::npos) {
      continue;
    }
    const std::string_view file = basename_of(line.substr(6, quote - 6));
    const std::string_view number = line.substr(line_word + 7, in_word - line_word - 7);
    const std::string_view function = line.substr(in_word + 4);
    std::string frame =
        std::string(function) + " (" + std::string(file) + ":" + std::string(number) + ")";
    auto& into = chosen ? frames : first_block;
    if (into.size() < kFramesShown) into.push_back(std::move(frame));
  }
  return join_frames(chosen ? frames : first_block);
}

std::string native_summary(std::string_view eu_stack_output) {
  std::vector<std::string> frames;
  std::string fallback;  // the first named frame, in the runtime or not
  bool threads_seen = false;
  for (const std::string_view raw : lines_of(eu_stack_output)) {
    const std::string_view line = trim(raw);
    if (line.starts_with("TID ")) {
      if (threads_seen) break;  // only the first thread: the main one
      threads_seen = true;
      continue;
    }
    if (!line.starts_with('#')) continue;
    // #3  0x000000000053acbc PyObject_Vectorcall - /usr/bin/python3.11
    const auto address = line.find(" 0x");
    if (address == std::string_view::npos) continue;
    std::string_view rest = line.substr(address + 3);
    rest = rest.substr(std::min(rest.find(' '), rest.size()));
    std::string_view module;
    if (const auto dash = rest.rfind(" - "); dash != std::string_view::npos) {
      module = trim(rest.substr(dash + 3));
      rest = rest.substr(0, dash);
    }
    const std::string_view name = trim(rest);
    if (name.empty()) continue;
    if (fallback.empty()) fallback = clean_symbol(name);
    if (runtime_module(module)) continue;
    if (frames.size() < kFramesShown) frames.push_back(clean_symbol(name));
  }
  if (frames.empty() && !fallback.empty()) frames.push_back(fallback);
  return join_frames(frames);
}

std::string stack_summary(const StackCapture& stacks) {
  if (std::string python = python_summary(stacks.python); !python.empty()) return python;
  if (std::string native = native_summary(stacks.native); !native.empty()) return native;
  return "no stack: " +
         (stacks.problem.empty() ? std::string("no frame was named") : stacks.problem);
}

std::string format_stack_digest(const RoundResult& result, std::string_view when,
                                std::string_view files) {
  struct Group {
    std::string line;
    std::vector<int> ranks;
  };
  std::vector<Group> groups;
  std::size_t captured = 0;
  for (const RankResult& rank : result.ranks) {
    if (!rank.stacks || rank.agent) continue;
    ++captured;
    std::string line = stack_summary(*rank.stacks);
    auto group =
        std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.line == line; });
    if (group == groups.end()) group = groups.insert(groups.end(), Group{std::move(line), {}});
    group->ranks.push_back(rank.rank);
  }
  if (captured == 0) return {};
  // The smallest groups first: the odd rank out is the likely culprit.
  std::stable_sort(groups.begin(), groups.end(),
                   [](const Group& a, const Group& b) { return a.ranks.size() < b.ranks.size(); });
  std::string text = "ddprun: where the " + std::to_string(captured) + " rank" +
                     (captured == 1 ? "" : "s") + " still running " +
                     (captured == 1 ? "was" : "were") + " (" + std::string(when) + "):\n";
  for (std::size_t i = 0; i < groups.size() && i < kMaxGroups; ++i) {
    text +=
        "ddprun:   " + format_number_set("rank", groups[i].ranks) + ": " + groups[i].line + "\n";
  }
  if (groups.size() > kMaxGroups) {
    text += "ddprun:   and " + std::to_string(groups.size() - kMaxGroups) + " more places\n";
  }
  text += format_collectives(result);
  if (!files.empty()) text += "ddprun:   every thread's stack: " + std::string(files) + "\n";
  return text;
}

std::string format_collectives(const RoundResult& result) {
  std::string text;
  for (int plane = 0; plane < trace::kPlanes; ++plane) {
    std::uint64_t latest = 0;
    for (const RankResult& rank : result.ranks) {
      if (rank.trace) latest = std::max(latest, rank.trace->file.planes[plane].started);
    }
    if (latest == 0) continue;
    std::vector<int> inside, outside;
    std::vector<std::uint64_t> their_last;
    const trace::Entry* entry = nullptr;
    std::int64_t longest_ns = 0;
    for (const RankResult& rank : result.ranks) {
      if (!rank.trace) continue;
      const trace::PlaneTrace& p = rank.trace->file.planes[plane];
      if (p.started < latest) {
        outside.push_back(rank.rank);
        if (std::find(their_last.begin(), their_last.end(), p.started) == their_last.end()) {
          their_last.push_back(p.started);
        }
        continue;
      }
      const trace::Entry& e = p.entries[(latest - 1) % trace::kEntries];
      if (e.seq != latest || e.end_ns != 0) continue;  // finished it
      inside.push_back(rank.rank);
      entry = &e;
      if (rank.trace->read_ns > e.start_ns) {
        longest_ns = std::max(longest_ns, rank.trace->read_ns - e.start_ns);
      }
    }
    if (inside.empty() && outside.empty()) continue;
    text += "ddprun:   " + std::string(plane == 0 ? "control" : "data") + " plane, collective #" +
            std::to_string(latest);
    if (entry != nullptr) {
      char size[32];
      std::snprintf(size, sizeof size, "%.1f kB", static_cast<double>(entry->bytes) / 1000.0);
      text += " (" + std::string(trace::op_name(entry->op)) + ", " + size + ")";
    }
    text += ":";
    if (!inside.empty()) {
      text += " " + format_number_set("rank", inside) + (inside.size() == 1 ? " is" : " are") +
              " in it";
      if (longest_ns > 0) {
        char seconds[32];
        std::snprintf(seconds, sizeof seconds, "%.1f", static_cast<double>(longest_ns) / 1e9);
        text += " (for " + std::string(seconds) + " s)";
      }
      if (!outside.empty()) text += ";";
    }
    if (!outside.empty()) {
      std::sort(their_last.begin(), their_last.end());
      std::string last;
      for (const std::uint64_t k : their_last)
        last += (last.empty() ? "#" : ", #") + std::to_string(k);
      text += " " + format_number_set("rank", outside) + (outside.size() == 1 ? " has" : " have") +
              " not entered it (last: " + last + ")";
    }
    text += "\n";
  }
  return text;
}

std::string format_stack_file(const StackCapture& stacks) {
  std::string text;
  if (!stacks.problem.empty()) text += "problem: " + stacks.problem + "\n\n";
  if (!stacks.python.empty()) text += "Python (faulthandler):\n" + stacks.python + "\n";
  if (!stacks.native.empty()) text += "native (eu-stack):\n" + stacks.native;
  return text;
}

}  // namespace ddprun
