// One ddprun per node under mpirun (Open MPI, MPICH, Intel MPI), and the variables by which
// any launcher that starts one copy per node shows itself.

#include "ddprun/contract/errors.h"
#include "hostfile.h"
#include "node_match.h"
#include "schedulers.h"
#include "variables.h"

namespace ddprun {

std::optional<EnvEntry> mpi_world_size(const Environment& env) {
  return first_set(env, {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
}

bool mpi_detected(const Environment& env) {
  return mpi_world_size(env).has_value();
}

bool started_once_per_node(const Cluster& cluster, const Environment& env) {
  if (cluster.scheduler == "mpi" || cluster.scheduler == "kubeflow") return true;
  // Inside an srun step (the batch script itself has no step id), or under any MPI
  // launcher: someone already started one copy per node.
  for (const char* name : {"SLURM_STEP_ID", "SLURM_STEPID", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                           "PMIX_RANK", "LSF_PM_TASKID"}) {
    if (lookup(env, name)) return true;
  }
  return false;
}

Cluster read_mpi(const ReaderInput& input) {
  const Environment& env = input.env;
  if (!input.hostfile) {
    throw UsageError(
        "the mpi reader needs --hostfile: MPI gives ranks, not a node list",
        "pass the hostfile given to mpirun, and start one ddprun per node (mpirun -npernode 1)");
  }
  Cluster cluster = read_hostfile(*input.hostfile, input.read_file);
  cluster.scheduler = "mpi";
  const std::string nodes = std::to_string(cluster.nodes.size());
  const std::string one_per_node =
      "start one ddprun per node (Open MPI: mpirun --map-by ppr:1:node; MPICH: mpiexec -ppn 1)";
  const std::optional<EnvEntry> size = mpi_world_size(env);
  if (!size) {
    throw SchedulerEnvError(env_missing_message(
        "OMPI_COMM_WORLD_SIZE", "expected it (or PMI_SIZE) from mpirun with --scheduler mpi"));
  }
  note(cluster, *size);
  const int world = env_int(*size);
  if (static_cast<std::size_t>(world) != cluster.nodes.size()) {
    throw SchedulerEnvError(
        env_message(size->name, size->value,
                    "expected " + nodes + ", one ddprun per node of --hostfile " + *input.hostfile +
                        " (" + nodes + " nodes)"),
        one_per_node);
  }
  const bool ompi = size->name == "OMPI_COMM_WORLD_SIZE";
  if (const std::optional<EnvEntry> rank =
          first_set(env, {ompi ? "OMPI_COMM_WORLD_RANK" : "PMI_RANK"})) {
    note(cluster, *rank);
    if (env_int(*rank) >= world) {
      throw SchedulerEnvError(env_message(
          rank->name, rank->value, "expected a rank below " + size->name + "=" + size->value));
    }
  }
  if (const std::optional<EnvEntry> local =
          first_set(env, {ompi ? "OMPI_COMM_WORLD_LOCAL_SIZE" : "MPI_LOCALNRANKS"})) {
    note(cluster, *local);
    if (env_int(*local) != 1) {
      throw SchedulerEnvError(
          env_message(local->name, local->value, "expected 1: one ddprun per node"), one_per_node);
    }
  }
  // The rank is not a node index (mpirun may order nodes differently from the file):
  // the host name is.
  set_this_node_from_host(cluster, input.host);
  return cluster;
}

}  // namespace ddprun
