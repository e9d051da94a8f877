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

namespace {

// torchrun's PET_NNODES may be "N" or "MIN:MAX"; a fixed set of nodes is N or N:N.
int node_count(const EnvEntry& nnodes) {
  const auto colon = nnodes.value.find(':');
  if (colon == std::string::npos) return env_int(nnodes);
  const int low = env_int({nnodes.name, nnodes.value.substr(0, colon)});
  const int high = env_int({nnodes.name, nnodes.value.substr(colon + 1)});
  if (low != high) {
    throw SchedulerEnvError(env_message(nnodes.name, nnodes.value,
                                        "elastic node ranges are not supported; ddprun runs a "
                                        "fixed set of nodes (N or N:N)"));
  }
  return low;
}

}  // namespace

Cluster read_kubeflow(const ReaderInput& input) {
  const Environment& env = input.env;
  Cluster cluster;
  cluster.scheduler = "kubeflow";
  const std::optional<EnvEntry> nnodes = first_set(env, {"PET_NNODES", ddprun::env::kWorldSize});
  if (!nnodes)
    throw SchedulerEnvError(env_missing_message("PET_NNODES", "expected it or WORLD_SIZE"));
  note(cluster, *nnodes);
  const int count = node_count(*nnodes);
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
