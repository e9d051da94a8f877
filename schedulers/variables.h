#pragma once
// Typed reads of scheduler variables for the readers. Every failure throws
// SchedulerEnvError with one line naming the variable, its value, the column where it
// applies and what was expected (source.h formats). Pure; thread-safe.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cluster.h"
#include "source.h"

namespace ddprun {

// The first of `names` that is set, with its name; nullopt when none is.
struct EnvEntry {
  std::string name;
  std::string value;
};
std::optional<EnvEntry> first_set(const Environment& env,
                                  std::initializer_list<std::string_view> names);

// The value of `name`; throws "NAME is not set: <expected>" when unset.
EnvEntry require_env(const Environment& env, std::string_view name, std::string_view expected);

// A non-negative integer; throws "NAME="x": expected a non-negative integer".
int env_int(const EnvEntry& entry);

// parse_hostlist / parse_counts with errors naming the variable and the column.
std::vector<std::string> env_hostlist(const EnvEntry& entry);
std::vector<int> env_counts(const EnvEntry& entry);

// Throws when `hosts` names one host twice: "NAME="...": names host 'x' twice (...)".
void require_distinct(const EnvEntry& entry, const std::vector<std::string>& hosts);

// Records where a value came from in cluster.sources.
void note(Cluster& cluster, const EnvEntry& entry);

}  // namespace ddprun
