#include "ddprun/common/parse_int.h"

#include <charconv>

namespace ddprun {

std::optional<int> parse_int(std::string_view text) {
  // from_chars takes a leading '-' but not '+' or spaces: exactly the grammar above.
  int value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end) return std::nullopt;
  return value;
}

}  // namespace ddprun
