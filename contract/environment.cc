#include "ddprun/contract/environment.h"

namespace ddprun {

std::optional<std::string> lookup(const Environment& env, std::string_view name) {
  const auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

Environment snapshot_environment(const char* const* envp) {
  Environment env;
  for (const char* const* entry = envp; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const auto eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return env;
}

}  // namespace ddprun
