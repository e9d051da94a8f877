// PBS Professional / Torque reader. PBS is not packaged for Debian 12: its contract is
// checked from its documentation (docs/schedulers.md) and, in the multi-node tests, an
// emulation of its environment.

#include <map>

#include "ddprun/contract/errors.h"
#include "hostfile.h"
#include "node_match.h"
#include "schedulers.h"
#include "variables.h"

namespace ddprun {

bool pbs_detected(const Environment& env) {
  return first_set(env, {"PBS_JOBID", "PBS_NODEFILE"}).has_value();
}

Cluster read_pbs(const ReaderInput& input) {
  const Environment& env = input.env;
  Cluster cluster;
  cluster.scheduler = "pbs";
  const EnvEntry nodefile = require_env(
      env, "PBS_NODEFILE", "expected the job's node file (run ddprun inside a qsub job)");
  note(cluster, nodefile);
  cluster.nodes = read_slot_file(input.read_file, nodefile.value, nodefile.name);
  if (const std::optional<EnvEntry> id = first_set(env, {"PBS_JOBID"})) {
    note(cluster, *id);
    cluster.job_id = id->value;
  }
  if (const std::optional<EnvEntry> num = first_set(env, {"PBS_NUM_NODES"})) {
    note(cluster, *num);
    if (static_cast<std::size_t>(env_int(*num)) != cluster.nodes.size()) {
      throw SchedulerEnvError(env_message(num->name, num->value,
                                          "expected " + std::to_string(cluster.nodes.size()) +
                                              ", the number of distinct hosts in PBS_NODEFILE"));
    }
  }
  if (const std::optional<EnvEntry> np = first_set(env, {"PBS_NP"})) {
    note(cluster, *np);
    long total = 0;
    for (const NodeSlots& node : cluster.nodes) total += node.slots;
    if (env_int(*np) != total) {
      throw SchedulerEnvError(env_message(
          np->name, np->value,
          "expected " + std::to_string(total) + ", the number of lines in PBS_NODEFILE"));
    }
  }
  if (const std::optional<EnvEntry> node_num = first_set(env, {"PBS_NODENUM"})) {
    note(cluster, *node_num);
    const int index = env_int(*node_num);
    if (static_cast<std::size_t>(index) >= cluster.nodes.size()) {
      throw SchedulerEnvError(env_message(node_num->name, node_num->value,
                                          "expected a node index below " +
                                              std::to_string(cluster.nodes.size()) +
                                              ", the number of distinct hosts in PBS_NODEFILE"));
    }
    cluster.this_node = index;
  } else {
    set_this_node_from_host(cluster, input.host);
  }
  return cluster;
}

}  // namespace ddprun
