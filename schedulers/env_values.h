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
std::optional<int> optional_env_int(const Environment& env, std::string_view name);

// parse_hostlist / parse_counts with errors naming the variable and the column.
std::vector<std::string> env_hostlist(const EnvEntry& entry);
std::vector<int> env_counts(const EnvEntry& entry);

// Throws when `hosts` names one host twice: "NAME="...": names host 'x' twice (...)".
void require_distinct(const EnvEntry& entry, const std::vector<std::string>& hosts);

// Reads a file with one host per line (blank lines and '#' comments skipped, surrounding
// spaces and CR removed) where a host repeated means one more slot: hosts in first-seen
// order with their line counts. `via` names the variable that named the file. Throws
// SchedulerEnvError naming "path:line:column (VAR)" for a line with several words, and
// when the file names no host.
std::vector<NodeSlots> read_slot_file(const ReadFile& read_file, const std::string& path,
                                      std::string_view via);

// Records where a value came from in cluster.sources.
void note(Cluster& cluster, const EnvEntry& entry);

// Sets cluster.this_node from the host name when it designates exactly one node.
void set_this_node_from_host(Cluster& cluster, const HostFacts& host);

}  // namespace ddprun
