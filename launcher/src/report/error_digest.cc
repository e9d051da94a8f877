#include "report/error_digest.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <map>
#include <optional>

#include "ddprun/common/printable.h"
#include "ddprun/contract/error_file.h"
#include "ddprun/contract/errors.h"
#include "report/labels.h"

namespace ddprun {
namespace {

constexpr std::size_t kMaxGroups = 10;
constexpr std::size_t kMaxMessageBytes = 300;
constexpr int kMaxTags = 3;
constexpr std::size_t kMaxTagLength = 64;
constexpr std::string_view kOwnPrefix = "ddprun:";
constexpr std::string_view kOwnError = "ddprun: error: ";

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool is_word(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Drops terminal escape sequences (colours, cursor moves: ESC '[' ... final byte; titles:
// ESC ']' ... BEL or ESC '\') and other control characters; a tab becomes a space.
std::string strip_escapes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == 0x1b) {
      if (i + 1 < text.size() && text[i + 1] == '[') {
        i += 2;
        while (i < text.size() && !(text[i] >= 0x40 && text[i] <= 0x7e)) ++i;
      } else if (i + 1 < text.size() && text[i + 1] == ']') {
        i += 2;
        while (i < text.size() && text[i] != '\a' &&
               !(text[i] == 0x1b && i + 1 < text.size() && text[i + 1] == '\\'))
          ++i;
        if (i < text.size() && text[i] == 0x1b) ++i;
      } else {
        ++i;  // a two-byte sequence
      }
    } else if (c == '\t') {
      out += ' ';
    } else if (c >= 0x20 && c != 0x7f) {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// One leading tag that names where a line came from: "[gpu1:3] " (ddprun's --tag-output),
// "[rank3]:" or "[default0]:" (torchrun's), "[2024-05-01T10:00:00]". To leave message text
// alone ("[ERROR] ...", "[W ProcessGroupNCCL.cpp:123] ..."), a tag holds a digit and no space.
std::optional<std::string_view> without_tag(std::string_view text) {
  if (text.empty() || text.front() != '[') return std::nullopt;
  const std::size_t close = text.find(']');
  if (close == std::string_view::npos || close < 2 || close > kMaxTagLength + 1)
    return std::nullopt;
  const std::string_view inside = text.substr(1, close - 1);
  if (std::any_of(inside.begin(), inside.end(), [](char c) { return is_space(c) || c == '['; }) ||
      std::none_of(inside.begin(), inside.end(), is_digit))
    return std::nullopt;
  text.remove_prefix(close + 1);
  if (!text.empty() && text.front() == ':') text.remove_prefix(1);
  return trim(text);
}

// "rank 3", "Rank=3", "[rank3]" become "rank N" etc. when 3 is the child's own rank, so
// that "[Rank 3] Watchdog caught collective operation timeout" groups with rank 4's.
// Other numbers stay: they may be what tells two errors apart.
std::string hide_own_rank(const std::string& text, int own_rank) {
  const std::string own = std::to_string(own_rank);
  const std::string folded = lower(text);
  std::string out;
  std::size_t copied = 0;
  for (std::size_t at = folded.find("rank"); at != std::string::npos;
       at = folded.find("rank", at + 4)) {
    if (at > 0 && is_word(folded[at - 1])) continue;  // "local_rank 3", "cranky"
    std::size_t digits = at + 4;
    for (int separators = 0; separators < 2 && digits < folded.size() &&
                             (folded[digits] == ' ' || folded[digits] == '=' ||
                              folded[digits] == ':' || folded[digits] == '#');
         ++separators)
      ++digits;
    if (folded.compare(digits, own.size(), own) != 0) continue;
    const std::size_t end = digits + own.size();
    if (end < folded.size() && is_digit(folded[end])) continue;  // rank 31, not rank 3
    out.append(text, copied, digits - copied);
    out += 'N';
    copied = end;
  }
  out.append(text, copied);
  return out;
}

// What makes the same error on two children print the same line:
// - only the last version of a line redrawn with '\r';
// - no terminal escapes or control characters; no leading or trailing whitespace;
// - for an agent, no "| " before the lines its node's failure report quotes;
// - no leading tags naming host or rank (without_tag);
// - for a worker, its own rank number after "rank" (hide_own_rank).
std::string normalise(std::string_view line, const RankResult& child) {
  if (const std::size_t cr = line.rfind('\r'); cr != std::string_view::npos)
    line.remove_prefix(cr + 1);
  const std::string clean = strip_escapes(line);
  std::string_view text = trim(clean);
  if (child.agent && text.starts_with("| ")) text = trim(text.substr(2));
  for (int i = 0; i < kMaxTags; ++i) {
    const auto rest = without_tag(text);
    if (!rest) break;
    text = *rest;
  }
  return child.agent ? std::string(text) : hide_own_rank(std::string(text), child.rank);
}

bool looks_like_error(const std::string& line) {
  const std::string folded = lower(line);
  for (std::string_view word :
       {"error", "exception", "fatal", "terminate called", "assertion", "abort"}) {
    if (folded.find(word) != std::string::npos) return true;
  }
  return false;
}

bool exited_with(int status, int code) {
  return WIFEXITED(status) && WEXITSTATUS(status) == code;
}

bool failed(const RankResult& child) {
  return child.exited && !exited_with(child.wait_status, 0) &&
         !exited_with(child.wait_status, kExitPreempted);
}

// How ddprun's teardown ends a child: SIGTERM, then SIGKILL after the grace. An agent (or
// a shell between ddprun and the worker) passes that on as exit code 128 + signal.
bool ended_like_teardown(int status) {
  if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGKILL;
  return exited_with(status, 128 + SIGTERM) || exited_with(status, 128 + SIGKILL);
}

std::string cut(std::string text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t end = max_bytes;
  // Back to the start of a UTF-8 character.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) --end;
  text.resize(end);
  return text + "...";
}

// "ranks 0-3, nodes 1-2 and the agents' launcher" for the children at `indices`.
std::string label_of(const RoundResult& result, const std::vector<std::size_t>& indices) {
  std::vector<int> ranks;
  std::vector<int> nodes;
  bool launcher = false;
  for (std::size_t i : indices) {
    const RankResult& child = result.ranks[i];
    if (!child.agent) {
      ranks.push_back(child.rank);
    } else if (child.node_rank < 0) {
      launcher = true;
    } else {
      nodes.push_back(child.node_rank);
    }
  }
  std::vector<std::string> parts;
  if (!ranks.empty()) parts.push_back(format_number_set("rank", ranks));
  if (!nodes.empty()) parts.push_back(format_number_set("node", nodes));
  if (launcher) {
    RankResult agents_launcher;
    agents_launcher.agent = true;
    agents_launcher.node_rank = -1;
    parts.push_back(child_label(agents_launcher));
  }
  std::string label;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) label += i + 1 == parts.size() ? " and " : ", ";
    label += parts[i];
  }
  return label;
}

struct Group {
  std::string line;
  std::vector<std::size_t> members;  // indices into result.ranks, ascending
  bool root = false;
};

}  // namespace

std::string error_digest_line(const RankResult& child, std::string_view error_file_text) {
  if (const auto error = parse_error_file(error_file_text)) {
    const std::string_view message = error->message;
    std::string line =
        printable(normalise(message.substr(0, message.find('\n')), child), kMaxMessageBytes);
    if (!line.empty()) return line;
  }
  std::vector<std::string> lines;
  lines.reserve(child.stderr_tail.size());
  for (const auto& raw : child.stderr_tail) lines.push_back(normalise(raw, child));
  // A ddprun's own lines (in an agent's stderr: its node's failure report, table, digest)
  // rank below its workers': the quoted worker lines say what went wrong.
  const auto own = [](const std::string& line) { return line.starts_with(kOwnPrefix); };
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    if (!own(*it) && looks_like_error(*it)) return *it;
  }
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    if (it->starts_with(kOwnError)) return *it;
  }
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    if (!own(*it) && !it->empty()) return *it;
  }
  return describe_wait_status(child.wait_status);
}

std::string format_error_digest(const RoundResult& result,
                                const std::vector<std::string>& error_file_texts) {
  if (!result.first_failure || *result.first_failure >= result.ranks.size()) return {};
  const std::size_t first = *result.first_failure;

  std::vector<Group> groups;
  std::map<std::string, std::size_t> group_of_line;
  std::vector<std::size_t> stopped;
  std::size_t failures = 0;
  bool all_workers = true;
  bool all_agents = true;
  for (std::size_t i = 0; i < result.ranks.size(); ++i) {
    const RankResult& child = result.ranks[i];
    if (child.agent) {
      all_workers = false;
    } else {
      all_agents = false;
    }
    if (!failed(child) && i != first) continue;
    if (i != first && ended_like_teardown(child.wait_status)) {
      stopped.push_back(i);
      continue;
    }
    ++failures;
    const std::string text = i < error_file_texts.size() ? error_file_texts[i] : std::string();
    std::string line = error_digest_line(child, text);
    auto [at, added] = group_of_line.try_emplace(line, groups.size());
    if (added) groups.push_back(Group{std::move(line), {}, false});
    groups[at->second].members.push_back(i);
    groups[at->second].root = groups[at->second].root || i == first;
  }
  if (failures < 2) return {};

  // Root cause, then the most common errors, then in rank order (members are ascending).
  std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    if (a.root != b.root) return a.root;
    if (a.members.size() != b.members.size()) return a.members.size() > b.members.size();
    return a.members.front() < b.members.front();
  });

  const char* noun = all_workers ? "ranks" : all_agents ? "nodes" : "ranks and nodes";
  std::string digest = "ddprun: error digest (" + std::to_string(failures) + " of " +
                       std::to_string(result.ranks.size()) + " " + noun +
                       " failed; root cause first):\n";
  const std::size_t shown = std::min(groups.size(), kMaxGroups);
  for (std::size_t g = 0; g < shown; ++g) {
    const Group& group = groups[g];
    digest +=
        "ddprun:   " + label_of(result, group.members) + ": " + cut(group.line, kMaxMessageBytes);
    if (group.root)
      digest += " (root cause: " + child_label(result.ranks[first]) + " failed first)";
    digest += "\n";
  }
  if (groups.size() > shown) {
    std::vector<std::size_t> rest;
    for (std::size_t g = shown; g < groups.size(); ++g)
      rest.insert(rest.end(), groups[g].members.begin(), groups[g].members.end());
    digest += "ddprun:   ... and " + std::to_string(groups.size() - shown) +
              " more distinct errors (" + label_of(result, rest) + ")\n";
  }
  if (!stopped.empty())
    digest += "ddprun:   " + label_of(result, stopped) + ": stopped by ddprun after the failure\n";
  return digest;
}

}  // namespace ddprun
