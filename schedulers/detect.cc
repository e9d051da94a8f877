// The detection order (docs/schedulers.md, "Detection order") and the one function that
// picks a reader.

#include <algorithm>

#include "ddprun/contract/errors.h"
#include "hostfile.h"
#include "node_match.h"
#include "schedulers.h"
#include "variables.h"

namespace ddprun {

const std::vector<SchedulerReader>& scheduler_readers() {
  static const std::vector<SchedulerReader> readers = {
      {"slurm", slurm_detected, read_slurm}, {"lsf", lsf_detected, read_lsf},
      {"pbs", pbs_detected, read_pbs},       {"sge", sge_detected, read_sge},
      {"mpi", mpi_detected, read_mpi},       {"kubeflow", kubeflow_detected, read_kubeflow},
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
  if (hostfile_given) return mpi_detected(env) ? "mpi" : "hostfile";
  for (const SchedulerReader& reader : scheduler_readers()) {
    if (reader.name != "mpi" && reader.name != "kubeflow" && reader.detect(env)) {
      return std::string(reader.name);
    }
  }
  if (mpi_detected(env)) return "mpi";
  if (kubeflow_detected(env)) return "kubeflow";
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
    const std::optional<EnvEntry> size = mpi_world_size(env);
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
