#pragma once
#include <optional>
#include <string_view>

namespace ddprun {

// A decimal int: an optional '-', then digits only (no '+', no spaces), within int's
// range; nullopt otherwise. Callers check the range they need.
std::optional<int> parse_int(std::string_view text);

}  // namespace ddprun
