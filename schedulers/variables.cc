#include "variables.h"

#include <map>

#include "ddprun/common/parse_int.h"
#include "ddprun/contract/errors.h"
#include "hostlist.h"

namespace ddprun {

std::optional<EnvEntry> first_set(const Environment& env,
                                  std::initializer_list<std::string_view> names) {
  for (std::string_view name : names) {
    if (std::optional<std::string> value = lookup(env, name)) {
      return EnvEntry{std::string(name), std::move(*value)};
    }
  }
  return std::nullopt;
}

EnvEntry require_env(const Environment& env, std::string_view name, std::string_view expected) {
  std::optional<std::string> value = lookup(env, name);
  if (!value) throw SchedulerEnvError(env_missing_message(name, expected));
  return {std::string(name), std::move(*value)};
}

int env_int(const EnvEntry& entry) {
  const std::optional<int> value = parse_int(entry.value);
  if (!value || *value < 0) {
    throw SchedulerEnvError(
        env_message(entry.name, entry.value, "expected a non-negative integer"));
  }
  return *value;
}

std::vector<std::string> env_hostlist(const EnvEntry& entry) {
  try {
    return parse_hostlist(entry.value);
  } catch (const HostlistError& e) {
    throw SchedulerEnvError(env_message_at(entry.name, entry.value, e.column(), e.reason()));
  }
}

std::vector<int> env_counts(const EnvEntry& entry) {
  try {
    return parse_counts(entry.value);
  } catch (const HostlistError& e) {
    throw SchedulerEnvError(env_message_at(entry.name, entry.value, e.column(), e.reason()));
  }
}

void require_distinct(const EnvEntry& entry, const std::vector<std::string>& hosts) {
  std::map<std::string_view, std::size_t> seen;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    auto [it, inserted] = seen.try_emplace(hosts[i], i);
    if (!inserted) {
      throw SchedulerEnvError(env_message(entry.name, entry.value,
                                          "names host '" + hosts[i] + "' twice (hosts " +
                                              std::to_string(it->second) + " and " +
                                              std::to_string(i) + ")"));
    }
  }
}

void note(Cluster& cluster, const EnvEntry& entry) {
  cluster.sources[entry.name] = entry.value;
}

}  // namespace ddprun
