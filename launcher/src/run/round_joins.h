#pragma once
// Node 0 of per-node launchers under --restart-scope rank: a lost node's ddprun, started
// again, joins the running round in the node's place (docs/fault-tolerance.md, "A lost node
// joins again"). The rendezvous takes the join (nodes/rendezvous.h); the runner watches its
// descriptors in its one loop and attaches what joined to the child that awaits it
// (ChildSpec::join_by).

#include <optional>
#include <vector>

#include "run/runner.h"

namespace ddprun {

class RoundJoins {
 public:
  virtual ~RoundJoins() = default;
  // Node `node` is awaited from now on (a child awaits it), or no longer (that child ended).
  virtual void await(int node) = 0;
  virtual void forget(int node) = 0;
  // During the round: the descriptors to watch (joins under way, ddprun waiting as spares),
  // and the next moment something is due without one (a join running out of time, a spare's
  // heartbeat, a spare to seat); nothing when none.
  virtual void watch(std::vector<int>& fds) const = 0;
  virtual std::optional<RunnerClock::time_point> due() const = 0;
  // `fd` (one of watch's; -1 when due() passed) is ready: the nodes that joined since, each
  // as the connection child that runs its part of the round (ChildSpec::connection set).
  virtual std::vector<ChildSpec> take(int fd) = 0;
};

}  // namespace ddprun
