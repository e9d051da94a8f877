#include "hostfile.h"

#include <map>
#include <optional>

#include "ddprun/common/parse_int.h"
#include "ddprun/contract/errors.h"

namespace ddprun {

namespace {

std::string quoted(std::string_view text) {
  return "'" + std::string(text) + "'";
}

}  // namespace

std::vector<NodeSlots> parse_hostfile(std::string_view text, std::string_view path,
                                      std::size_t max_hosts) {
  SlotTally tally;
  std::size_t named = 0;
  const std::vector<std::string_view> lines = split_lines(text);
  for (std::size_t n = 0; n < lines.size(); ++n) {
    const std::size_t line_number = n + 1;
    std::string_view line = lines[n];
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    const std::vector<Word> tokens = split_words(line);
    if (tokens.empty()) continue;
    auto fail = [&](std::size_t column, const std::string& message) {
      throw ConfigError(file_message(path, line_number, column, message));
    };

    // The host part, with an optional ":N".
    std::string_view host_text = tokens[0].text;
    std::optional<int> slots;
    std::size_t slots_column = 0;
    if (const std::size_t colon = host_text.find(':'); colon != std::string_view::npos) {
      slots_column = tokens[0].column + colon + 1;
      slots = parse_int(host_text.substr(colon + 1));
      if (!slots || *slots < 1) {
        fail(slots_column, "expected a positive slot count after ':', got " +
                               quoted(host_text.substr(colon + 1)));
      }
      host_text = host_text.substr(0, colon);
    }
    std::vector<std::string> hosts;
    try {
      hosts = parse_hostlist(host_text, max_hosts);
    } catch (const HostlistError& e) {
      fail(tokens[0].column + e.column() - 1, e.reason());
    }

    // KEY=VALUE fields after the host.
    std::optional<int> max_slots;
    std::size_t max_slots_column = 0;
    for (std::size_t t = 1; t < tokens.size(); ++t) {
      const Word& token = tokens[t];
      const std::size_t equals = token.text.find('=');
      if (equals == std::string_view::npos) {
        fail(token.column,
             "expected slots=N or max_slots=N after the host, got " + quoted(token.text));
      }
      const std::string_view key = token.text.substr(0, equals);
      const std::string_view value = token.text.substr(equals + 1);
      const std::size_t value_column = token.column + equals + 1;
      const std::optional<int> number = parse_int(value);
      if (key == "slots") {
        if (slots) fail(token.column, "slots given twice for this host");
        if (!number || *number < 1) {
          fail(value_column, "expected a positive slot count after 'slots=', got " + quoted(value));
        }
        slots = number;
        slots_column = value_column;
      } else if (key == "max_slots" || key == "max-slots") {
        if (max_slots) fail(token.column, "max_slots given twice for this host");
        if (!number || *number < 1) {
          fail(value_column, "expected a positive slot count after '" + std::string(key) +
                                 "=', got " + quoted(value));
        }
        max_slots = number;
        max_slots_column = value_column;
      } else {
        fail(token.column, "unknown key " + quoted(key) + ": expected slots=N or max_slots=N");
      }
    }
    if (max_slots && *max_slots < slots.value_or(1)) {
      fail(max_slots_column, "max_slots=" + std::to_string(*max_slots) +
                                 " is less than slots=" + std::to_string(slots.value_or(1)));
    }

    named += hosts.size();
    if (named > max_hosts) {
      fail(1, "the hostfile names more than " + std::to_string(max_hosts) + " hosts");
    }
    for (std::string& host : hosts) {
      const int add = slots.value_or(1);
      if (!tally.add(host, add)) {
        fail(slots_column == 0 ? 1 : slots_column, "too many slots for host " + quoted(host));
      }
    }
  }
  if (tally.empty()) {
    throw ConfigError(std::string(path) +
                      ": no hosts: expected at least one line naming a host (all lines are "
                      "blank or comments)");
  }
  return tally.take();
}

Cluster read_hostfile(const std::string& path, const ReadFile& read_file) {
  const std::string text = read_named_file(read_file, path, {});
  Cluster cluster;
  cluster.scheduler = "hostfile";
  cluster.nodes = parse_hostfile(text, path);
  cluster.sources["hostfile"] = path;
  return cluster;
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

}  // namespace ddprun
