// Node-level worlds set by an operator such as Kubeflow's PyTorchJob.

#include "ddprun/contract/env_names.h"
#include "ddprun/contract/errors.h"
#include "schedulers.h"
#include "variables.h"

namespace ddprun {

// PET_NNODES and PET_NODE_RANK for torchrun, or WORLD_SIZE and RANK with MASTER_ADDR.
// LOCAL_RANK set too means a process-level world (ddprun inside another launcher's
// worker): not this.
bool kubeflow_detected(const Environment& env) {
  if (first_set(env, {"PET_NNODES"})) return true;
  return first_set(env, {ddprun::env::kMasterAddr}) && first_set(env, {ddprun::env::kWorldSize}) &&
         first_set(env, {ddprun::env::kRank}) && !first_set(env, {ddprun::env::kLocalRank});
}

Cluster read_kubeflow(const ReaderInput& input) {
  const Environment& env = input.env;
  Cluster cluster;
  cluster.scheduler = "kubeflow";
  const std::optional<EnvEntry> nnodes = first_set(env, {"PET_NNODES", ddprun::env::kWorldSize});
  if (!nnodes)
    throw SchedulerEnvError(env_missing_message("PET_NNODES", "expected it or WORLD_SIZE"));
  note(cluster, *nnodes);
  const int count = env_int(*nnodes);
  if (count < 1 || count > (1 << 20)) {
    throw SchedulerEnvError(env_message(nnodes->name, nnodes->value, "expected 1 or more nodes"));
  }
  const std::string rank_name = nnodes->name == "PET_NNODES" ? "PET_NODE_RANK" : ddprun::env::kRank;
  const std::optional<EnvEntry> rank = first_set(env, {rank_name});
  if (!rank) throw SchedulerEnvError(env_missing_message(rank_name, "expected this node's index"));
  note(cluster, *rank);
  const int index = env_int(*rank);
  if (index >= count) {
    throw SchedulerEnvError(
        env_message(rank->name, rank->value,
                    "expected a node index below " + nnodes->name + "=" + nnodes->value));
  }
  // The other pods' names are not given; every node names them alike, so plans agree.
  for (int i = 0; i < count; ++i) cluster.nodes.push_back({"node-" + std::to_string(i), 1});
  cluster.this_node = index;
  return cluster;
}

}  // namespace ddprun
