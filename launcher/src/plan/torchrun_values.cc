#include "plan/torchrun_values.h"

#include <signal.h>

#include <cmath>
#include <sstream>
#include <utility>

#include "ddprun/common/parse_int.h"
#include "ddprun/common/signal_name.h"
#include "ddprun/contract/errors.h"

namespace ddprun {
namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream stream(text);
  while (std::getline(stream, part, separator)) parts.push_back(part);
  if (!text.empty() && text.back() == separator) parts.emplace_back();
  return parts;
}

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

int stream_number(const std::string& option, const std::string& text, const std::string& whole) {
  const auto value = parse_int(trimmed(text));
  if (!value || *value < 0 || *value > 3) {
    throw UsageError(option + " " + whole + ": expected 0 (none), 1 (stdout), 2 (stderr) or 3 " +
                     "(both), or LOCAL_RANK:N,... (e.g. 0:3,1:2)");
  }
  return *value;
}

}  // namespace

int StreamChoice::for_local_rank(int local_rank) const {
  if (by_local_rank.empty()) return all;
  const auto found = by_local_rank.find(local_rank);
  return found == by_local_rank.end() ? 0 : found->second;
}

std::optional<double> parse_seconds(const std::string& text) {
  std::size_t used = 0;
  double seconds = 0;
  try {
    seconds = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used == 0 || used != text.size() || !std::isfinite(seconds)) return std::nullopt;
  return seconds;
}

int parse_nnodes(const std::string& text) {
  const auto colon = text.find(':');
  const auto number = [&](const std::string& part) {
    const auto value = parse_int(part);
    if (!value || *value < 1) {
      throw UsageError("--nnodes " + text + ": expected a positive number of nodes, or N:N");
    }
    return *value;
  };
  if (colon == std::string::npos) return number(text);
  const int low = number(text.substr(0, colon));
  const int high = number(text.substr(colon + 1));
  if (low > high) throw UsageError("--nnodes " + text + ": the minimum is above the maximum");
  if (low < high) {
    throw UsageError("--nnodes " + text +
                         ": elastic node ranges are not supported; ddprun runs a fixed set of "
                         "nodes",
                     "give one number, e.g. --nnodes " + std::to_string(high) +
                         ", and --max-restarts to restart the job when a node fails");
  }
  return low;
}

Endpoint parse_endpoint(const std::string& option, const std::string& text) {
  Endpoint endpoint;
  std::string rest;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos) throw UsageError(option + " " + text + ": no closing ']'");
    endpoint.host = text.substr(1, close - 1);
    rest = text.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') {
      throw UsageError(option + " " + text + ": expected ':PORT' after ']'");
    }
  } else {
    const auto colon = text.find(':');
    if (colon != std::string::npos && text.find(':', colon + 1) != std::string::npos) {
      throw UsageError(option + " " + text + ": put an IPv6 address in brackets, e.g. [::1]:29400");
    }
    endpoint.host = text.substr(0, colon);
    if (colon != std::string::npos) rest = text.substr(colon);
  }
  if (endpoint.host.empty()) throw UsageError(option + " " + text + ": no host");
  if (!rest.empty()) {
    const auto port = parse_int(rest.substr(1));
    if (!port || *port < 0 || *port > 65535) {
      throw UsageError(option + " " + text + ": the port must be 0 to 65535");
    }
    endpoint.port = *port;
  }
  return endpoint;
}

RendezvousConf parse_rendezvous_conf(const std::string& text) {
  RendezvousConf conf;
  if (trimmed(text).empty()) return conf;
  for (const std::string& item : split(text, ',')) {
    const auto equals = item.find('=');
    const std::string key = trimmed(item.substr(0, equals));
    if (equals == std::string::npos || key.empty()) {
      throw UsageError("--rdzv-conf " + text + ": '" + item + "' is not KEY=VALUE",
                       "e.g. --rdzv-conf join_timeout=900,read_timeout=60");
    }
    const std::string value = trimmed(item.substr(equals + 1));
    if ((key.size() > 8 && key.compare(key.size() - 8, 8, "_timeout") == 0) || key == "timeout") {
      const auto seconds = parse_seconds(value);
      if (!seconds || *seconds <= 0) {
        throw UsageError("--rdzv-conf " + key + "=" + value + ": expected a positive number of " +
                         "seconds");
      }
      if (key == "join_timeout" || key == "timeout") conf.join_timeout_s = *seconds;
    }
  }
  return conf;
}

StreamChoice parse_stream_choice(const std::string& option, const std::string& text) {
  StreamChoice choice;
  if (text.find(':') == std::string::npos) {
    choice.all = stream_number(option, text, text);
    return choice;
  }
  for (const std::string& item : split(text, ',')) {
    const auto colon = item.find(':');
    const auto rank = parse_int(trimmed(item.substr(0, colon)));
    if (colon == std::string::npos || !rank || *rank < 0) {
      throw UsageError(option + " " + text + ": '" + item + "' is not LOCAL_RANK:N");
    }
    choice.by_local_rank[*rank] = stream_number(option, item.substr(colon + 1), text);
  }
  return choice;
}

std::set<int> parse_local_ranks_filter(const std::string& text) {
  std::set<int> ranks;
  for (const std::string& item : split(text, ',')) {
    const auto rank = parse_int(trimmed(item));
    if (!rank || *rank < 0) {
      throw UsageError("--local-ranks-filter " + text +
                       ": expected local ranks separated by commas, e.g. 0,1,2");
    }
    ranks.insert(*rank);
  }
  if (ranks.empty()) throw UsageError("--local-ranks-filter: no local rank given");
  return ranks;
}

std::vector<int> parse_signal_list(const std::string& text) {
  static const std::pair<const char*, int> kCatchable[] = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"TERM", SIGTERM},
      {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"ALRM", SIGALRM}, {"XCPU", SIGXCPU},
      {"PWR", SIGPWR},   {"CONT", SIGCONT}, {"TSTP", SIGTSTP}, {"URG", SIGURG}};
  std::vector<int> signals;
  if (trimmed(text).empty()) throw UsageError("--signals-to-handle: no signal given");
  for (const std::string& item : split(text, ',')) {
    std::string name = trimmed(item);
    if (name.rfind("SIG", 0) == 0) name = name.substr(3);
    bool found = false;
    for (const auto& [known, number] : kCatchable) {
      if (name == known) {
        signals.push_back(number);
        found = true;
      }
    }
    if (!found) {
      throw UsageError("--signals-to-handle " + text + ": '" + trimmed(item) +
                       "' is not a signal ddprun can pass on (HUP INT QUIT TERM USR1 USR2 ALRM "
                       "XCPU PWR CONT TSTP URG)");
    }
  }
  return signals;
}

void check_rendezvous_backend(const std::string& backend) {
  if (backend == "static" || backend == "c10d") return;
  if (backend.rfind("etcd", 0) == 0) {
    throw UsageError("--rdzv-backend " + backend +
                         ": etcd rendezvous is not supported; ddprun's rendezvous is rank 0's "
                         "TCPStore",
                     "use --rdzv-backend c10d (or leave it out) with --rdzv-endpoint HOST:PORT");
  }
  throw UsageError("--rdzv-backend " + backend + ": unknown backend; expected c10d or static");
}

std::string format_stream_choice(const StreamChoice& choice) {
  if (choice.by_local_rank.empty()) return std::to_string(choice.all);
  std::string text;
  for (const auto& [rank, streams] : choice.by_local_rank) {
    if (!text.empty()) text += ',';
    text += std::to_string(rank) + ":" + std::to_string(streams);
  }
  return text;
}

std::string format_rank_set(const std::set<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ",") + std::to_string(rank);
  return text;
}

std::string format_signal_list(const std::vector<int>& signals) {
  std::string text;
  for (int sig : signals) text += (text.empty() ? "" : ",") + signal_name(sig);
  return text;
}

}  // namespace ddprun
