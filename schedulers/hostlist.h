#pragma once
// Slurm's compressed forms: node lists ("gpu[01-04],login1") and per-node counts
// ("4(x3),2"). The grammar, its limits and its error texts are in docs/hostlist.md.
// Pure functions: no I/O, no global state; safe to call from any thread.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/contract/errors.h"

namespace ddprun {

// Most host names (or counts) one expression may expand to.
inline constexpr std::size_t kMaxHostlistSize = std::size_t{1} << 20;
// Longest host name an expansion may produce.
inline constexpr std::size_t kMaxHostNameLength = 255;

// A syntax or limit error in an expression. `column()` is 1-based (in bytes) into the
// expression that was parsed; `reason()` says what was expected; what() is
// "column C: reason". Callers that know where the expression came from (a variable, a
// line of a file) catch it and rethrow with that context.
class HostlistError : public ConfigError {
 public:
  HostlistError(std::size_t column, const std::string& reason);
  std::size_t column() const noexcept { return column_; }
  const std::string& reason() const noexcept { return reason_; }

 private:
  std::size_t column_;
  std::string reason_;
};

// Expands a hostlist expression into host names, in Slurm's order, duplicates kept.
// `max_hosts` caps the expansion (tests and fuzzers pass smaller caps).
// Throws HostlistError for anything outside the grammar or over the limits; returns
// either the complete expansion or nothing.
std::vector<std::string> parse_hostlist(std::string_view expression,
                                        std::size_t max_hosts = kMaxHostlistSize);

// Expands a counts expression ("2(x3),1" -> {2, 2, 2, 1}). Counts may be 0; repeats are
// at least 1. Throws HostlistError like parse_hostlist.
std::vector<int> parse_counts(std::string_view expression,
                              std::size_t max_counts = kMaxHostlistSize);

// How an error message shows the character at `pos` of `text`: "'c'" for printable
// ASCII, "byte 0xNN" otherwise, "end of input" past the end. Shared by the parsers.
std::string describe_char(std::string_view text, std::size_t pos);

}  // namespace ddprun
