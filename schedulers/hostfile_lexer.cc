#include "hostfile_lexer.h"

#include <algorithm>
#include <utility>

namespace ddprun::hostfile {
namespace {

struct Keyword {
  std::string_view text;
  Tok kind;
};

constexpr Keyword kKeywords[] = {
    {"cpu", Tok::kSlots},
    {"count", Tok::kSlots},
    {"slots", Tok::kSlots},
    {"slots-max", Tok::kMaxSlots},
    {"slots_max", Tok::kMaxSlots},
    {"max-slots", Tok::kMaxSlots},
    {"max_slots", Tok::kMaxSlots},
    {"cpu-max", Tok::kMaxSlots},
    {"cpu_max", Tok::kMaxSlots},
    {"max-cpu", Tok::kMaxSlots},
    {"max_cpu", Tok::kMaxSlots},
    {"count-max", Tok::kMaxSlots},
    {"count_max", Tok::kMaxSlots},
    {"max-count", Tok::kMaxSlots},
    {"max_count", Tok::kMaxSlots},
    {"rank", Tok::kRank},
    {"slot", Tok::kKeyword},
    {"username", Tok::kUser},
    {"user-name", Tok::kUser},
    {"user_name", Tok::kUser},
    {"port", Tok::kPort},
    {"boards", Tok::kKeyword},
    {"sockets", Tok::kKeyword},
    {"sockets_per_board", Tok::kKeyword},
    {"sockets-per-board", Tok::kKeyword},
    {"cores", Tok::kKeyword},
    {"cores_per_socket", Tok::kKeyword},
    {"cores-per-socket", Tok::kKeyword},
};

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_alnum(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
bool is_string_char(char c) {
  return is_alnum(c) || c == '_' || c == '-' || c == ',' || c == ':' || c == '*' || c == '@';
}

std::size_t run_length(std::string_view s, std::size_t from, bool (*accept)(char)) {
  std::size_t i = from;
  while (i < s.size() && accept(s[i])) ++i;
  return i - from;
}

std::size_t relative_length(std::string_view s) {
  if (s.size() < 2 || s[0] != '+') return 0;
  if (s[1] == 'n') {
    const std::size_t digits = run_length(s, 2, is_digit);
    return digits == 0 ? 0 : 2 + digits;
  }
  if (s[1] != 'e' && s[1] != 'E') return 0;
  if (s.size() > 2 && s[2] == ':') {
    const std::size_t digits = run_length(s, 3, is_digit);
    if (digits > 0) return 3 + digits;
  }
  return 2;
}

std::size_t ipv4_length(std::string_view s, std::size_t from) {
  std::size_t i = from;
  for (int group = 0; group < 4; ++group) {
    const std::size_t digits = run_length(s, i, is_digit);
    if (digits == 0 ||
        (group < 3 && (digits > 3 || i + digits >= s.size() || s[i + digits] != '.'))) {
      return 0;
    }
    i += std::min<std::size_t>(digits, 3) + (group < 3 ? 1 : 0);
  }
  return i - from;
}

std::size_t name_length(std::string_view s, std::size_t from) {
  if (from >= s.size() || !is_alnum(s[from])) return 0;
  return 1 + run_length(s, from + 1,
                        [](char c) { return is_alnum(c) || c == '_' || c == '-' || c == '.'; });
}

// The longest of `body` alone and `body` after "user@" ("^user@" when `caret`).
std::size_t with_user(std::string_view s, bool caret,
                      std::size_t (*body)(std::string_view, std::size_t)) {
  std::size_t best = body(s, 0);
  const std::size_t start = caret && !s.empty() && s[0] == '^' ? 1 : 0;
  if (start < s.size() && is_alnum(s[start])) {
    const std::size_t at = start + 1 + run_length(s, start + 1, [](char c) {
                             return is_alnum(c) || c == '_' || c == '-';
                           });
    if (at < s.size() && s[at] == '@') {
      const std::size_t length = body(s, at + 1);
      if (length > 0) best = std::max(best, at + 1 + length);
    }
  }
  return best;
}

// Like flex: the longest match wins, ties go to the rule listed first.
std::pair<Tok, std::size_t> longest_match(std::string_view s) {
  std::pair<Tok, std::size_t> best{Tok::kError, 0};
  auto consider = [&](Tok kind, std::size_t length) {
    if (length > best.second) best = {kind, length};
  };
  for (const Keyword& keyword : kKeywords) {
    if (s.substr(0, keyword.text.size()) == keyword.text)
      consider(keyword.kind, keyword.text.size());
  }
  consider(Tok::kRelative, relative_length(s));
  consider(Tok::kInt, run_length(s, 0, is_digit));
  consider(Tok::kString, run_length(s, 0, is_string_char));
  consider(Tok::kIpv4, with_user(s, false, ipv4_length));
  consider(Tok::kHostname, with_user(s, true, name_length));
  if (best.second == 0) best = {Tok::kError, 1};
  return best;
}

}  // namespace

bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\f' || c == '\v';
}

bool is_ipv6(std::string_view text) {
  std::size_t colons = 0;
  std::size_t run = 0;
  for (char c : text) {
    if (c == ':') {
      ++colons;
      run = 0;
    } else if (!is_hex(c) || ++run > 4) {
      return false;
    }
  }
  return colons >= 2 && run >= 1;
}

Token Lexer::next() {
  while (pos_ < text_.size() && is_blank(text_[pos_])) ++pos_;
  Token token{Tok::kEnd, pos_, pos_, line_, pos_ - line_start_ + 1};
  if (pos_ == text_.size()) return token;
  const std::string_view rest = text_.substr(pos_);
  if (rest[0] == '\n' || rest.substr(0, 2) == "\r\n") {
    token.kind = Tok::kNewline;
    new_line(pos_ + (rest[0] == '\n' ? 1 : 2));
  } else if (rest[0] == '#' || rest.substr(0, 2) == "//") {
    // Open MPI needs the newline after a comment; a last line without one is accepted.
    const std::size_t newline = text_.find('\n', pos_);
    token.kind = newline == std::string_view::npos ? Tok::kEnd : Tok::kNewline;
    if (newline == std::string_view::npos) {
      pos_ = text_.size();
    } else {
      new_line(newline + 1);
    }
  } else if (rest.substr(0, 2) == "/*") {
    token.kind = Tok::kNewline;  // a block comment ends the line it starts on
    const std::size_t close = text_.find("*/", pos_ + 2);
    skip_to(close == std::string_view::npos ? text_.size() : close + 2);
  } else if (rest[0] == '"' && rest.find('"', 1) != std::string_view::npos) {
    token.kind = Tok::kQuoted;
    skip_to(pos_ + rest.find('"', 1) + 1);
  } else if (rest[0] == '=') {
    token.kind = Tok::kEqual;
    ++pos_;
  } else {
    const auto [kind, length] = longest_match(rest);
    token.kind = kind;
    pos_ += length;
  }
  token.end = pos_;
  return token;
}

}  // namespace ddprun::hostfile
