#include "node_match.h"

#include <string>

#include "ddprun/contract/errors.h"

namespace ddprun {

namespace {

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

bool looks_like_ipv4(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!(c == '.' || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

std::string list_of(const std::vector<NodeSlots>& nodes, const std::vector<int>& indices) {
  std::string text;
  for (int i : indices) {
    if (!text.empty()) text += ", ";
    text += "'" + nodes[static_cast<std::size_t>(i)].host + "' (node " + std::to_string(i) + ")";
  }
  return text;
}

std::string source_of(const Cluster& cluster) {
  std::string text;
  for (const auto& [name, value] : cluster.sources) {
    if (!text.empty()) text += ", ";
    text += name;
  }
  return text.empty() ? cluster.scheduler : cluster.scheduler + " (" + text + ")";
}

}  // namespace

bool host_names_match(std::string_view a, std::string_view b) {
  if (equal_ignoring_case(a, b)) return true;
  if (a.empty() || b.empty() || looks_like_ipv4(a) || looks_like_ipv4(b)) return false;
  if (a.size() > b.size()) std::swap(a, b);
  return b[a.size()] == '.' && equal_ignoring_case(a, b.substr(0, a.size()));
}

std::optional<int> NodeMatch::unique() const {
  if (exact.size() == 1) return exact.front();
  if (exact.empty() && related.size() == 1) return related.front();
  return std::nullopt;
}

NodeMatch match_host(const std::vector<NodeSlots>& nodes, std::string_view hostname) {
  NodeMatch match;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (equal_ignoring_case(nodes[i].host, hostname)) {
      match.exact.push_back(static_cast<int>(i));
    } else if (host_names_match(nodes[i].host, hostname)) {
      match.related.push_back(static_cast<int>(i));
    }
  }
  return match;
}

int this_node_or_throw(const Cluster& cluster, const HostFacts& host) {
  if (cluster.this_node) return *cluster.this_node;
  const NodeMatch match = match_host(cluster.nodes, host.hostname);
  if (const std::optional<int> index = match.unique()) return *index;
  const std::string hint =
      "give this node's index with --node-rank, or list the nodes under names this host "
      "reports (hostname)";
  const std::vector<int>& several = match.exact.size() > 1 ? match.exact : match.related;
  if (!several.empty()) {
    throw SchedulerEnvError("this host's name '" + host.hostname + "' matches several nodes from " +
                                source_of(cluster) + ": " + list_of(cluster.nodes, several),
                            hint);
  }
  std::string first = cluster.nodes.empty() ? std::string() : cluster.nodes.front().host;
  throw SchedulerEnvError("this host's name '" + host.hostname + "' is not one of the " +
                              std::to_string(cluster.nodes.size()) + " nodes from " +
                              source_of(cluster) + " (the first is '" + first + "')",
                          hint);
}

void set_this_node_from_host(Cluster& cluster, const HostFacts& host) {
  if (std::optional<int> index = match_host(cluster.nodes, host.hostname).unique()) {
    cluster.this_node = index;
  }
}

}  // namespace ddprun
