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

constexpr std::size_t kMaxNumberDigits = 18;  // fits in uint64_t with room to add 1

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '-' || c == '.' ||
         c == '_';
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
  std::size_t width = 0;  // digits of the low bound as written
};

// One piece of an element: literal text, or a bracket group when `ranges` is not empty.
struct Segment {
  std::string text;
  std::vector<Range> ranges;
};

class HostlistParser {
 public:
  HostlistParser(std::string_view text, std::size_t max_hosts)
      : text_(text), max_hosts_(max_hosts) {}

  std::vector<std::string> parse() {
    if (text_.empty()) fail(0, "empty hostlist: expected at least one host name");
    std::vector<std::string> hosts;
    while (true) {
      const std::size_t start = pos_;
      std::vector<Segment> segments = parse_element();
      expand(segments, start, hosts);
      if (pos_ == text_.size()) break;
      ++pos_;  // the ','
      if (pos_ == text_.size()) fail(pos_, "empty host name: expected a host name after ','");
    }
    return hosts;
  }

 private:
  [[noreturn]] void fail(std::size_t pos, const std::string& reason) const {
    throw HostlistError(pos + 1, reason);
  }

  std::vector<Segment> parse_element() {
    std::vector<Segment> segments;
    if (pos_ < text_.size() && text_[pos_] == ',') {
      fail(pos_, "empty host name: expected a host name before ','");
    }
    while (pos_ < text_.size() && text_[pos_] != ',') {
      const char c = text_[pos_];
      if (is_name_char(c)) {
        if (segments.empty() || !segments.back().ranges.empty()) segments.emplace_back();
        segments.back().text += c;
        ++pos_;
      } else if (c == '[') {
        segments.push_back(Segment{{}, parse_group()});
      } else if (c == ']') {
        fail(pos_, "unexpected ']' without a matching '['");
      } else {
        fail(pos_, "unexpected " + describe_char(text_, pos_) +
                       ": host names may contain letters, digits, '-', '.' and '_'");
      }
    }
    return segments;
  }

  // At '['; returns the ranges and leaves pos_ after the ']'.
  std::vector<Range> parse_group() {
    const std::size_t open = pos_++;
    std::vector<Range> ranges;
    while (true) {
      if (pos_ == text_.size()) fail(open, "unclosed '[': expected ']'");
      const std::size_t lo_pos = pos_;
      Range range;
      std::string_view lo_text;
      range.lo = parse_number(open, "expected a number", lo_text);
      range.width = lo_text.size();
      range.hi = range.lo;
      std::string_view hi_text = lo_text;
      if (pos_ < text_.size() && text_[pos_] == '-') {
        ++pos_;
        range.hi = parse_number(open, "expected a number after '-'", hi_text);
      }
      if (range.lo > range.hi) {
        fail(lo_pos, "reversed range " + std::string(lo_text) + "-" + std::string(hi_text) +
                         ": the low bound must not exceed the high bound");
      }
      ranges.push_back(range);
      if (pos_ == text_.size()) fail(open, "unclosed '[': expected ']'");
      if (text_[pos_] == ']') {
        ++pos_;
        return ranges;
      }
      if (text_[pos_] != ',') {
        std::string reason = "expected ',' or ']' after a range, got " + describe_char(text_, pos_);
        if (text_[pos_] == ':') reason += " (range steps are not supported)";
        fail(pos_, reason);
      }
      ++pos_;
    }
  }

  std::uint64_t parse_number(std::size_t open, const char* expected, std::string_view& digits) {
    if (pos_ == text_.size()) fail(open, "unclosed '[': expected ']'");
    if (!is_digit(text_[pos_]))
      fail(pos_, std::string(expected) + ", got " + describe_char(text_, pos_));
    const std::size_t start = pos_;
    std::uint64_t value = 0;
    while (pos_ < text_.size() && is_digit(text_[pos_])) {
      if (pos_ - start == kMaxNumberDigits) {
        fail(start, "number longer than " + std::to_string(kMaxNumberDigits) + " digits");
      }
      value = value * 10 + static_cast<std::uint64_t>(text_[pos_] - '0');
      ++pos_;
    }
    digits = text_.substr(start, pos_ - start);
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
