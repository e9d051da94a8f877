#include "cluster.h"

namespace ddprun {

Cluster local_cluster(const HostFacts& host) {
  Cluster cluster;
  cluster.scheduler = "local";
  cluster.nodes.push_back({host.hostname, host.cpu_count});
  cluster.this_node = 0;
  return cluster;
}

}  // namespace ddprun
