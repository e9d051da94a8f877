#include "hostlist.h"

#include <algorithm>
#include <cstdint>
#include <optional>

namespace ddprun {

HostlistError::HostlistError(std::size_t column, const std::string& reason)
    : ConfigError("column " + std::to_string(column) + ": " + reason),
      column_(column),
      reason_(reason) {}

std::string describe_char(std::string_view text, std::size_t pos) {
  if (pos >= text.size()) return "end of input";
  const auto byte = static_cast<unsigned char>(text[pos]);
  if (byte >= 0x20 && byte < 0x7f) return std::string("'") + text[pos] + "'";
  static constexpr char kHex[] = "0123456789ABCDEF";
  return std::string("byte 0x") + kHex[byte >> 4] + kHex[byte & 0xf];
}

namespace {

// Slurm's own limits (src/common/hostlist.c): hosts in one range, and hosts in each
// bracket group that is followed by another group.
constexpr std::uint64_t kMaxRange = 65536;

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '-' || c == '.' ||
         c == '_';
}

// Slurm splits a list at commas, spaces and tabs outside brackets.
bool is_separator(char c) {
  return c == ',' || c == ' ' || c == '\t';
}

// What strtoul skips before a number, which Slurm allows inside brackets.
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

std::size_t decimal_digits(std::uint64_t value) {
  std::size_t digits = 1;
  while (value >= 10) {
    value /= 10;
    ++digits;
  }
  return digits;
}

struct Range {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  std::size_t width = 0;  // characters of the low bound as written, Slurm's zero padding
};

// One piece of an element: literal text, or a bracket group when `ranges` is not empty.
struct Segment {
  std::string text;
  std::vector<Range> ranges;
  std::size_t pos = 0;  // where it starts in the expression
};

class HostlistParser {
 public:
  HostlistParser(std::string_view text, std::size_t max_hosts)
      : text_(text), max_hosts_(max_hosts) {}

  std::vector<std::string> parse() {
    std::vector<std::string> hosts;
    while (true) {
      while (pos_ < text_.size() && is_separator(text_[pos_])) ++pos_;
      if (pos_ == text_.size()) break;
      const std::size_t start = pos_;
      std::vector<Segment> segments = parse_element();
      expand(segments, start, hosts);
    }
    if (hosts.empty()) fail(0, "empty hostlist: expected at least one host name");
    return hosts;
  }

 private:
  [[noreturn]] void fail(std::size_t pos, const std::string& reason) const {
    throw HostlistError(pos + 1, reason);
  }

  std::vector<Segment> parse_element() {
    std::vector<Segment> segments;
    while (pos_ < text_.size() && !is_separator(text_[pos_])) {
      const char c = text_[pos_];
      if (is_name_char(c)) {
        if (segments.empty() || !segments.back().ranges.empty()) {
          segments.push_back(Segment{{}, {}, pos_});
        }
        segments.back().text += c;
        ++pos_;
      } else if (c == '[') {
        const std::size_t open = pos_;
        segments.push_back(Segment{{}, parse_group(), open});
      } else if (c == ']') {
        fail(pos_, "unexpected ']' without a matching '['");
      } else {
        fail(pos_, "unexpected " + describe_char(text_, pos_) +
                       ": host names may contain letters, digits, '-', '.' and '_'");
      }
    }
    if (segments.size() == 1 && segments[0].ranges.empty()) {
      const Segment& name = segments[0];
      check_suffix(name.text, name.pos + name.text.find_last_not_of("0123456789") + 1);
    }
    return segments;
  }

  // Slurm reads a plain name's trailing digits as a number and prints it back, which
  // changes the name when the number does not fit in 64 bits. Checked on expanded names
  // too, so that every name ddprun returns reads back as itself.
  void check_suffix(std::string_view name, std::size_t pos) const {
    std::size_t begin = name.size();
    while (begin > 0 && is_digit(name[begin - 1])) --begin;
    std::uint64_t value = 0;
    for (std::size_t i = begin; i < name.size(); ++i) {
      if (!accumulate(value, name[i])) {
        fail(pos, "number at the end of the name is larger than 2^64-1");
      }
    }
  }

  static bool accumulate(std::uint64_t& value, char digit) {
    const auto d = static_cast<std::uint64_t>(digit - '0');
    if (value > (UINT64_MAX - d) / 10) return false;
    value = value * 10 + d;
    return true;
  }

  // At '['; returns the ranges and leaves pos_ after the ']'.
  std::vector<Range> parse_group() {
    const std::size_t open = pos_++;
    std::vector<Range> ranges;
    while (true) {
      ranges.push_back(parse_range(open));
      if (text_[pos_] == ']') {
        ++pos_;
        return ranges;
      }
      ++pos_;  // the ','
    }
  }

  // One "lo[-hi]" item of a group, read as Slurm reads it: strtoul's leading spaces and
  // '+' are allowed, the width is the length of the low bound's text, and text between
  // the low bound and '-' is ignored. Leaves pos_ at the ',' or ']' that ends it.
  Range parse_range(std::size_t open) {
    const std::size_t start = pos_;
    const std::size_t end = item_end(open);
    if (const std::size_t x = text_.find('x', start); x < end) {
      fail(x, "unexpected 'x' in a range (Slurm's dimension boxes are not supported)");
    }
    const std::size_t dash = text_.find('-', start);
    const bool has_dash = dash < end;
    Range range;
    range.lo = parse_number(start, "expected a number");
    if (!has_dash && pos_ != end) {
      fail(pos_, "expected ',' or ']' after a range, got " + describe_char(text_, pos_));
    }
    range.width = (has_dash ? dash : end) - start;
    range.hi = range.lo;
    pos_ = has_dash ? dash + 1 : end;
    if (has_dash && pos_ != end) {
      if (text_[pos_] == '-') fail(pos_, "expected a number after '-', got '-'");
      range.hi = parse_number(pos_, "expected a number after '-'");
      if (pos_ != end) {
        fail(pos_, "expected ',' or ']' after a range, got " + describe_char(text_, pos_));
      }
    }
    const std::string written(text_.substr(start, end - start));
    if (range.lo > range.hi) {
      fail(start, "reversed range " + written + ": the low bound must not exceed the high bound");
    }
    if (range.hi - range.lo >= kMaxRange) {
      fail(start, "range " + written + " has more than " + std::to_string(kMaxRange) +
                      " hosts (Slurm's limit)");
    }
    return range;
  }

  // Where the item starting at pos_ ends: the next ',' or ']'; nested or missing brackets
  // are errors.
  std::size_t item_end(std::size_t open) const {
    for (std::size_t i = pos_; i < text_.size(); ++i) {
      if (text_[i] == ',' || text_[i] == ']') return i;
      if (text_[i] == '[') fail(i, "unexpected '[' inside brackets");
    }
    fail(open, "unclosed '[': expected ']'");
  }

  // Spaces, an optional '+', then at least one digit; at most 2^64-1.
  std::uint64_t parse_number(std::size_t at, const char* expected) {
    pos_ = at;
    while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '+') ++pos_;
    if (pos_ == text_.size() || !is_digit(text_[pos_])) {
      fail(pos_, std::string(expected) + ", got " + describe_char(text_, pos_));
    }
    const std::size_t digits = pos_;
    std::uint64_t value = 0;
    while (pos_ < text_.size() && is_digit(text_[pos_])) {
      if (!accumulate(value, text_[pos_])) fail(digits, "number larger than 2^64-1");
      ++pos_;
    }
    return value;
  }

  void expand(const std::vector<Segment>& segments, std::size_t start,
              std::vector<std::string>& hosts) const {
    // Sizes and the longest name first, so that nothing is generated over the limits.
    std::vector<std::size_t> group_index;  // indices of the bracket groups in `segments`
    std::size_t product = 1;
    std::size_t max_length = 0;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      const Segment& segment = segments[i];
      if (segment.ranges.empty()) {
        max_length += segment.text.size();
        continue;
      }
      group_index.push_back(i);
      std::size_t count = 0;
      std::size_t width = 0;
      for (const Range& range : segment.ranges) {
        const std::uint64_t span = range.hi - range.lo;  // count - 1, no overflow
        if (span >= max_hosts_ || count + static_cast<std::size_t>(span) >= max_hosts_) {
          too_many(start);
        }
        count += static_cast<std::size_t>(span) + 1;
        width = std::max({width, range.width, decimal_digits(range.hi)});
      }
      // Text may follow the last group (Slurm 23.02.5 and later); another group may not
      // follow a group of more than kMaxRange hosts.
      const bool last_group =
          std::none_of(segments.begin() + static_cast<std::ptrdiff_t>(i) + 1, segments.end(),
                       [](const Segment& later) { return !later.ranges.empty(); });
      if (!last_group && count > kMaxRange) {
        fail(segment.pos, "bracket group has more than " + std::to_string(kMaxRange) +
                              " hosts before another group (Slurm's limit)");
      }
      if (count > max_hosts_ / product) too_many(start);
      product *= count;
      max_length += width;
    }
    if (product > max_hosts_ - hosts.size()) too_many(start);
    if (max_length > kMaxHostNameLength) {
      fail(start, "host name longer than " + std::to_string(kMaxHostNameLength) + " characters");
    }

    // Each group's values as text, in the order written.
    std::vector<std::vector<std::string>> values;
    for (std::size_t g : group_index) {
      std::vector<std::string>& formatted = values.emplace_back();
      for (const Range& range : segments[g].ranges) {
        for (std::uint64_t v = range.lo;; ++v) {
          std::string digits = std::to_string(v);
          if (digits.size() < range.width) digits.insert(0, range.width - digits.size(), '0');
          formatted.push_back(std::move(digits));
          if (v == range.hi) break;
        }
      }
    }

    // Slurm's order: the last group fastest, then the first, second, ... next-to-last.
    const std::size_t groups = group_index.size();
    std::vector<std::size_t> odometer_order;
    if (groups > 0) {
      odometer_order.push_back(groups - 1);
      for (std::size_t g = 0; g + 1 < groups; ++g) odometer_order.push_back(g);
    }
    std::vector<std::size_t> digit(groups, 0);
    while (true) {
      std::string host;
      host.reserve(max_length);
      std::size_t g = 0;
      for (const Segment& segment : segments) {
        if (segment.ranges.empty()) {
          host += segment.text;
        } else {
          host += values[g][digit[g]];
          ++g;
        }
      }
      check_suffix(host, start);
      hosts.push_back(std::move(host));
      std::size_t k = 0;
      for (; k < odometer_order.size(); ++k) {
        const std::size_t which = odometer_order[k];
        if (++digit[which] < values[which].size()) break;
        digit[which] = 0;
      }
      if (k == odometer_order.size()) break;
    }
  }

  [[noreturn]] void too_many(std::size_t start) const {
    fail(start, "hostlist expands to more than " + std::to_string(max_hosts_) + " hosts");
  }

  std::string_view text_;
  std::size_t max_hosts_;
  std::size_t pos_ = 0;
};

}  // namespace

std::vector<std::string> parse_hostlist(std::string_view expression, std::size_t max_hosts) {
  return HostlistParser(expression, max_hosts).parse();
}

namespace {

constexpr std::size_t kMaxCountDigits = 9;

// Reads 1..9 digits at `pos`; nullopt when there is no digit there.
std::optional<int> read_count(std::string_view text, std::size_t& pos) {
  const std::size_t start = pos;
  int value = 0;
  while (pos < text.size() && is_digit(text[pos])) {
    if (pos - start == kMaxCountDigits) {
      throw HostlistError(start + 1,
                          "number longer than " + std::to_string(kMaxCountDigits) + " digits");
    }
    value = value * 10 + (text[pos] - '0');
    ++pos;
  }
  if (pos == start) return std::nullopt;
  return value;
}

}  // namespace

std::vector<int> parse_counts(std::string_view text, std::size_t max_counts) {
  std::vector<int> counts;
  std::size_t pos = 0;
  while (true) {
    const std::size_t item = pos;
    const std::optional<int> count = read_count(text, pos);
    if (!count) {
      throw HostlistError(pos + 1, "expected a count, got " + describe_char(text, pos));
    }
    std::size_t repeat = 1;
    if (pos < text.size() && text[pos] == '(') {
      ++pos;
      if (pos >= text.size() || text[pos] != 'x') {
        throw HostlistError(pos + 1, "expected 'x' after '(', got " + describe_char(text, pos));
      }
      ++pos;
      const std::size_t repeat_pos = pos;
      const std::optional<int> parsed = read_count(text, pos);
      if (!parsed) {
        throw HostlistError(pos + 1, "expected a repeat count, got " + describe_char(text, pos));
      }
      if (*parsed < 1) throw HostlistError(repeat_pos + 1, "repeat count must be at least 1");
      repeat = static_cast<std::size_t>(*parsed);
      if (pos >= text.size() || text[pos] != ')') {
        throw HostlistError(pos + 1,
                            "expected ')' after the repeat count, got " + describe_char(text, pos));
      }
      ++pos;
      if (pos < text.size() && text[pos] != ',') {
        throw HostlistError(pos + 1, "expected ',' after ')', got " + describe_char(text, pos));
      }
    } else if (pos < text.size() && text[pos] != ',') {
      throw HostlistError(pos + 1,
                          "expected ',' or '(' after a count, got " + describe_char(text, pos));
    }
    if (repeat > max_counts - counts.size()) {
      throw HostlistError(item + 1,
                          "counts expand to more than " + std::to_string(max_counts) + " values");
    }
    counts.insert(counts.end(), repeat, *count);
    if (pos == text.size()) return counts;
    ++pos;  // the ','
  }
}

}  // namespace ddprun
