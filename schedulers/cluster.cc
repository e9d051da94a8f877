#include "cluster.h"

namespace ddprun {

std::optional<std::string> lookup(const Environment& env, std::string_view name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

Cluster local_cluster(const HostFacts& host) {
  Cluster cluster;
  cluster.scheduler = "local";
  cluster.nodes.push_back({host.hostname, host.cpu_count});
  cluster.this_node = 0;
  return cluster;
}

}  // namespace ddprun
