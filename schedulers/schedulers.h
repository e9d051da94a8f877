#pragma once
// The scheduler readers and the one function that picks among them. Each reader is a
// pure function of its input (environment snapshot, file reader, host facts): it returns
// a complete Cluster or throws SchedulerEnvError (ConfigError for --hostfile) with one
// line naming the variable or file, the column or line where it applies, and what was
// expected. Which variables each reader uses, and the detection order, are documented in
// docs/schedulers.md. Thread-safe as long as `read_file` is.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cluster.h"
#include "source.h"
#include "variables.h"

namespace ddprun {

struct ReaderInput {
  const Environment& env;
  const ReadFile& read_file;
  const HostFacts& host;
  std::optional<std::string> hostfile;  // --hostfile, when given
};

// Each scheduler's reader and the test that says it runs this job (its variables are set).

// Slurm: SLURM_JOB_NODELIST (SLURM_NODELIST), SLURM_JOB_NUM_NODES (SLURM_NNODES),
// SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE, SLURM_JOB_ID (SLURM_JOBID),
// SLURM_NODEID; inside a step SLURM_STEP_NODELIST, SLURM_STEP_NUM_NODES,
// SLURM_STEP_TASKS_PER_NODE. this_node from SLURM_NODEID.
Cluster read_slurm(const ReaderInput& input);
bool slurm_detected(const Environment& env);  // SLURM_JOB_ID or SLURM_JOBID

// Grid Engine (SGE, UGE, ABCI 2): PE_HOSTFILE, else SGE_JOB_HOSTLIST; NHOSTS, NSLOTS,
// JOB_ID. this_node from the host name.
Cluster read_sge(const ReaderInput& input);
bool sge_detected(const Environment& env);  // PE_HOSTFILE or SGE_JOB_HOSTLIST

// PBS Professional and Torque: PBS_NODEFILE, PBS_JOBID, PBS_NODENUM (this_node when set,
// else the host name), PBS_NUM_NODES and PBS_NP (checked when set).
Cluster read_pbs(const ReaderInput& input);
bool pbs_detected(const Environment& env);  // PBS_JOBID or PBS_NODEFILE

// LSF: LSB_MCPU_HOSTS, else LSB_DJOB_HOSTFILE (checked against each other when both are
// set), LSB_JOBID. this_node from the host name.
Cluster read_lsf(const ReaderInput& input);
bool lsf_detected(const Environment& env);  // LSB_JOBID

// One ddprun per node under mpirun (Open MPI or MPICH/Intel MPI): the nodes come from
// input.hostfile (required: UsageError without it); OMPI_COMM_WORLD_SIZE / PMI_SIZE must
// equal the number of nodes and the local size (OMPI_COMM_WORLD_LOCAL_SIZE /
// MPI_LOCALNRANKS) 1. this_node from the host name, never from the MPI rank.
Cluster read_mpi(const ReaderInput& input);
bool mpi_detected(const Environment& env);  // OMPI_COMM_WORLD_SIZE or PMI_SIZE
// OMPI_COMM_WORLD_SIZE or PMI_SIZE, whichever is set first.
std::optional<EnvEntry> mpi_world_size(const Environment& env);

// A node-level world from an operator such as Kubeflow's PyTorchJob: PET_NNODES and
// PET_NODE_RANK, else WORLD_SIZE and RANK (with MASTER_ADDR set and LOCAL_RANK unset).
// The other nodes' names are not known: nodes are named node-0 .. node-(N-1).
Cluster read_kubeflow(const ReaderInput& input);
bool kubeflow_detected(const Environment& env);

// Whether a scheduler or MPI launcher started one ddprun per node (an srun step, mpirun,
// mpiexec, an operator's pods): then no ddprun of the job starts the others.
bool started_once_per_node(const Cluster& cluster, const Environment& env);

// A reader with the test that says its scheduler is running this job.
struct SchedulerReader {
  std::string_view name;
  bool (*detect)(const Environment& env);
  Cluster (*read)(const ReaderInput& input);
};

// slurm, lsf, pbs, sge, mpi, kubeflow: the automatic detection order (hostfile and local are
// handled by detect_cluster itself).
const std::vector<SchedulerReader>& scheduler_readers();

// Names accepted by --scheduler: slurm, lsf, pbs, sge, mpi, kubeflow, hostfile, local.
const std::vector<std::string_view>& scheduler_names();

// Which reader detect_cluster would use (see docs/schedulers.md, "Detection order").
// Throws UsageError for an unknown forced name.
std::string detect_scheduler(const Environment& env, const std::optional<std::string>& forced,
                             bool hostfile_given);

// Reads the cluster with the reader detect_scheduler picks. Throws UsageError for an
// unknown forced name or a forced reader that needs --hostfile without one;
// SchedulerEnvError / ConfigError from the reader. this_node is set when the scheduler
// says it or the host name designates exactly one node; otherwise it is left unset and
// this_node_or_throw (node_match.h) explains why.
Cluster detect_cluster(const Environment& env, const ReadFile& read_file, const HostFacts& host,
                       const std::optional<std::string>& forced_scheduler,
                       const std::optional<std::string>& hostfile);

}  // namespace ddprun
