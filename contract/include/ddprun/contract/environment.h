#pragma once
// The process environment as a value: each program's main() takes one snapshot, and
// nothing below it calls getenv. Launcher and worker read and build it the same way.

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun {

// NAME -> value. Heterogeneous lookup, so a string_view or a literal finds without a copy.
using Environment = std::map<std::string, std::string, std::less<>>;

// The value of `name` in `env`, or nullopt when unset.
std::optional<std::string> lookup(const Environment& env, std::string_view name);

// Copies `environ`-style "NAME=value" entries (a null-terminated array; null is empty) into
// an Environment. Entries without '=' are skipped; the first of a repeated name wins, as
// getenv's does.
Environment snapshot_environment(const char* const* envp);

}  // namespace ddprun
