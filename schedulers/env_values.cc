#include "env_values.h"

#include <map>

#include "ddprun/errors.h"
#include "hostlist.h"
#include "node_match.h"

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
  if (!value) {
    throw SchedulerEnvError(
        env_message(entry.name, entry.value, "expected a non-negative integer"));
  }
  return *value;
}

std::optional<int> optional_env_int(const Environment& env, std::string_view name) {
  std::optional<std::string> value = lookup(env, name);
  if (!value) return std::nullopt;
  return env_int({std::string(name), *value});
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

std::vector<NodeSlots> read_slot_file(const ReadFile& read_file, const std::string& path,
                                      std::string_view via) {
  const std::string text = read_named_file(read_file, path, via);
  SlotTally tally;
  const std::vector<std::string_view> lines = split_lines(text);
  for (std::size_t n = 0; n < lines.size(); ++n) {
    std::string_view line = lines[n];
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    const std::size_t begin = line.find_first_not_of(" \t");
    if (begin == std::string_view::npos) continue;
    const std::size_t end = line.find_last_not_of(" \t") + 1;
    const std::string_view host = line.substr(begin, end - begin);
    if (const std::size_t space = host.find_first_of(" \t"); space != std::string_view::npos) {
      const std::size_t column = begin + host.find_first_not_of(" \t", space) + 1;
      throw SchedulerEnvError(file_message(
          path, n + 1, column, "expected one host name per line, got a second word", via));
    }
    if (!tally.add(host, 1)) {
      throw SchedulerEnvError(
          file_message(path, n + 1, begin + 1, "too many slots for this host", via));
    }
  }
  if (tally.empty()) {
    throw SchedulerEnvError(env_message(via, path, "the file names no host"));
  }
  return tally.take();
}

void note(Cluster& cluster, const EnvEntry& entry) {
  cluster.sources[entry.name] = entry.value;
}

void set_this_node_from_host(Cluster& cluster, const HostFacts& host) {
  if (std::optional<int> index = match_host(cluster.nodes, host.hostname).unique()) {
    cluster.this_node = index;
  }
}

}  // namespace ddprun
