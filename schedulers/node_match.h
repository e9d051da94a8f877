#pragma once
// Which node of a list this machine is, from its host name. Used when the scheduler does
// not say (SGE, LSF, PBS without PBS_NODENUM, hostfiles, one ddprun per node under
// mpirun). Pure; thread-safe.

#include <optional>
#include <string_view>
#include <vector>

#include "cluster.h"

namespace ddprun {

// Names match when they are equal ignoring ASCII case, or when one is the other plus
// domain labels ("n1" and "n1.cluster.org"; "n1.cluster" and "n1.cluster.org"). Names
// that look like IPv4 addresses match only exactly.
bool host_names_match(std::string_view a, std::string_view b);

struct NodeMatch {
  std::vector<int> exact;    // indices whose name equals the host name (ignoring case)
  std::vector<int> related;  // indices that match only by adding or removing domain labels
  // The one index the host name designates: the single exact match, else the single
  // related match; nullopt when there is none or more than one.
  std::optional<int> unique() const;
};

// Compares `hostname` with every node.
NodeMatch match_host(const std::vector<NodeSlots>& nodes, std::string_view hostname);

// cluster.this_node when set; else the node matching host.hostname. Throws
// SchedulerEnvError when the host is not in the list ("host 'x' is not one of the N nodes
// from <source>: ...") or matches several nodes; both messages suggest --node-rank.
int this_node_or_throw(const Cluster& cluster, const HostFacts& host);

// Sets cluster.this_node from the host name when it designates exactly one node.
void set_this_node_from_host(Cluster& cluster, const HostFacts& host);

}  // namespace ddprun
