// The MPI reader and the detection order (docs/schedulers.md, "Detection order").

#include <algorithm>

#include "ddprun/errors.h"
#include "env_values.h"
#include "hostfile.h"
#include "node_match.h"
#include "schedulers.h"

namespace ddprun {

namespace {

std::optional<EnvEntry> mpi_size(const Environment& env) {
  return first_set(env, {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
}

bool in_slurm(const Environment& env) {
  return first_set(env, {"SLURM_JOB_ID", "SLURM_JOBID"}).has_value();
}
bool in_lsf(const Environment& env) {
  return first_set(env, {"LSB_JOBID"}).has_value();
}
bool in_pbs(const Environment& env) {
  return first_set(env, {"PBS_JOBID", "PBS_NODEFILE"}).has_value();
}
bool in_sge(const Environment& env) {
  return first_set(env, {"PE_HOSTFILE", "SGE_JOB_HOSTLIST"}).has_value();
}
bool in_mpi(const Environment& env) {
  return mpi_size(env).has_value();
}

// Kubeflow's PyTorchJob (and other operators) set a node-level world: PET_NNODES and
// PET_NODE_RANK for torchrun, or WORLD_SIZE and RANK with MASTER_ADDR. LOCAL_RANK set too
// means a process-level world (ddprun inside another launcher's worker): not this.
bool in_kubeflow(const Environment& env) {
  if (first_set(env, {"PET_NNODES"})) return true;
  return first_set(env, {"MASTER_ADDR"}) && first_set(env, {"WORLD_SIZE"}) &&
         first_set(env, {"RANK"}) && !first_set(env, {"LOCAL_RANK"});
}

}  // namespace

Cluster read_kubeflow(const ReaderInput& input) {
  const Environment& env = input.env;
  Cluster cluster;
  cluster.scheduler = "kubeflow";
  const std::optional<EnvEntry> nnodes = first_set(env, {"PET_NNODES", "WORLD_SIZE"});
  if (!nnodes)
    throw SchedulerEnvError(env_missing_message("PET_NNODES", "expected it or WORLD_SIZE"));
  note(cluster, *nnodes);
  const int count = env_int(*nnodes);
  if (count < 1 || count > (1 << 20)) {
    throw SchedulerEnvError(env_message(nnodes->name, nnodes->value, "expected 1 or more nodes"));
  }
  const std::string rank_name = nnodes->name == "PET_NNODES" ? "PET_NODE_RANK" : "RANK";
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
  const std::optional<EnvEntry> size = mpi_size(env);
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

const std::vector<SchedulerReader>& scheduler_readers() {
  static const std::vector<SchedulerReader> readers = {
      {"slurm", in_slurm, read_slurm}, {"lsf", in_lsf, read_lsf},
      {"pbs", in_pbs, read_pbs},       {"sge", in_sge, read_sge},
      {"mpi", in_mpi, read_mpi},       {"kubeflow", in_kubeflow, read_kubeflow},
  };
  return readers;
}

const std::vector<std::string_view>& scheduler_names() {
  static const std::vector<std::string_view> names = {"slurm", "lsf",      "pbs",      "sge",
                                                      "mpi",   "kubeflow", "hostfile", "local"};
  return names;
}

std::string detect_scheduler(const Environment& env, const std::optional<std::string>& forced,
                             bool hostfile_given) {
  if (forced) {
    const auto& names = scheduler_names();
    if (std::find(names.begin(), names.end(), *forced) == names.end()) {
      std::string known;
      for (std::string_view name : names) known += (known.empty() ? "" : ", ") + std::string(name);
      throw UsageError("--scheduler: unknown scheduler '" + *forced + "': expected one of " +
                       known);
    }
    return *forced;
  }
  // An explicit --hostfile wins over what the environment says, like every explicit
  // option; MPI's variables then only say how ddprun was started.
  if (hostfile_given) return in_mpi(env) ? "mpi" : "hostfile";
  for (const SchedulerReader& reader : scheduler_readers()) {
    if (reader.name != "mpi" && reader.name != "kubeflow" && reader.detect(env)) {
      return std::string(reader.name);
    }
  }
  if (in_mpi(env)) return "mpi";
  if (in_kubeflow(env)) return "kubeflow";
  return "local";
}

Cluster detect_cluster(const Environment& env, const ReadFile& read_file, const HostFacts& host,
                       const std::optional<std::string>& forced_scheduler,
                       const std::optional<std::string>& hostfile) {
  const std::string name = detect_scheduler(env, forced_scheduler, hostfile.has_value());
  const ReaderInput input{env, read_file, host, hostfile};
  if (name == "local") return local_cluster(host);
  if (name == "hostfile") {
    if (!hostfile) throw UsageError("--scheduler hostfile needs --hostfile FILE");
    Cluster cluster = read_hostfile(*hostfile, read_file);
    set_this_node_from_host(cluster, host);
    return cluster;
  }
  if (name == "mpi" && !hostfile) {
    // Started by mpirun with no node list. One copy is a local job; more cannot agree
    // on the nodes.
    const std::optional<EnvEntry> size = mpi_size(env);
    if (!forced_scheduler && size) {
      if (env_int(*size) <= 1) return local_cluster(host);
      throw SchedulerEnvError(
          env_message(size->name, size->value,
                      "mpirun started " + size->value +
                          " copies of ddprun but no node list is known: expected --hostfile"),
          "pass the hostfile given to mpirun, and start one ddprun per node");
    }
  }
  for (const SchedulerReader& reader : scheduler_readers()) {
    if (reader.name == name) return reader.read(input);
  }
  throw UsageError("--scheduler: no reader for '" + name + "'");  // unreachable
}

}  // namespace ddprun
