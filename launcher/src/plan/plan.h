#pragma once
// The launch plan: one entry per rank of the whole job (host, ranks, log and error file
// paths), built by a pure function of the cluster description and the options. Each
// rank's environment is computed from it when needed (rank_environment.h). A round starts
// only the part of it that belongs to this node (round_setup.h); --dry-run prints it.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cluster.h"
#include "ddprun/contract/environment.h"
#include "gpus.h"
#include "plan/placement.h"
#include "plan/topology.h"
#include "plan/torchrun_values.h"

namespace ddprun {

struct NodePlan {
  std::string host;
  int node_rank = 0;
  int nproc = 0;
  int first_rank = 0;  // ranks are contiguous per node, in node order
};

// One rank. Its files' paths are computed when needed (rank_file), not stored, so that a
// plan of 100,000 ranks stays small.
struct RankPlan {
  int rank = 0;
  int local_rank = 0;
  int node_rank = 0;
  std::string host;
  int console_streams = 3;  // which streams reach the console: 1 stdout, 2 stderr, 3 both
};

// How this node's GPUs are handed to its ranks (docs/environment.md, "Devices").
struct DevicePlan {
  VisibleGpus visible;  // this node's GPUs; each node plans from its own
  // GPUs each rank owns: local rank r owns visible.devices[K*r .. K*r+K-1]. 0: no rank
  // owns any (no GPU visible, or more workers than GPUs without --gpus-per-proc or
  // --virtual-local-rank), and DDPRUN_DEVICES is not set.
  int per_rank = 0;
  bool virtual_local_rank = false;  // CUDA_VISIBLE_DEVICES narrowed per rank, LOCAL_RANK 0
  // --virtual-local-rank with no GPU visible and no CUDA_VISIBLE_DEVICES: as torchrun, each
  // worker gets CUDA_VISIBLE_DEVICES=<its local rank> and LOCAL_RANK 0 (per_rank stays 0).
  bool ordinals_only = false;
};

// The interface NCCL and gloo should use on this node (job_inputs.h decides).
struct SocketInterface {
  std::string name;    // set as NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME; empty: set nothing
  std::string reason;  // one line for --doctor and the plan: why this, or why nothing
};

// Thread defaults for the workers (rank_environment.h).
struct ThreadDefaults {
  int cpu_count = 1;     // CPUs of a node, shared among its workers
  bool set_omp = false;  // OMP_NUM_THREADS was not set by the user
};

// Where this node's ranks run (--numa-binding, --cpu-bind; placement.h). Each node places
// its own ranks, on its own topology.
struct Placement {
  BindMode mode = BindMode::kNone;
  std::vector<RankPlacement> local;  // by local rank; empty: nothing bound
  bool set_device_order = false;     // CUDA_DEVICE_ORDER=PCI_BUS_ID (the user set none)
};

// The whole job. Each rank's contract variables (docs/environment.md) are computed from
// it by rank_environment (rank_environment.h); a worker's environment is ddprun's own with
// them laid over it.
struct LaunchPlan {
  std::string run_id;
  std::string scheduler;
  std::string master_addr;
  int master_port = 0;
  int world_size = 0;
  int restart_count = 0;
  int max_restarts = 0;
  int this_node = 0;        // index into nodes
  std::string attempt_dir;  // folder of this round's log and error files
  std::vector<NodePlan> nodes;
  // Slurm's --segment: nodes [k*S, (k+1)*S) are segment k (Cluster::segment_size); 0: none.
  int segment_size = 0;
  std::vector<RankPlan> ranks;       // the whole job, in rank order
  std::vector<std::string> program;  // argv of every worker
  std::string role = "default";      // ROLE_NAME
  // TORCH_NCCL_ASYNC_ERROR_HANDLING: the user's, else 1 unless the user set its name before
  // PyTorch 2.2 (NCCL_ASYNC_ERROR_HANDLING, which ddprun never sets: 2.2 and later warn on
  // every rank that finds it); empty: not set.
  std::string nccl_async_error_handling = "1";
  ThreadDefaults threads;
  bool stdout_is_tty = false;                // ddprun's stdout, for DDPRUN_STDOUT_TTY
  bool logs_to_dir = false;                  // --log-dir given: DDPRUN_LOG_DIR is set
  std::optional<std::int64_t> job_end_unix;  // DDPRUN_JOB_END_TIME
  DevicePlan devices;
  SocketInterface socket_interface;  // for this node's ranks only: each node finds its own
  Placement placement;
};

// This node's placement of `rank`; nullptr when it is another node's or nothing is bound.
const RankPlacement* rank_placement(const LaunchPlan& plan, const RankPlan& rank);

// The positions in plan.devices.visible.devices that `rank` owns; empty when none.
std::vector<int> rank_devices(const LaunchPlan& plan, const RankPlan& rank);

// A rank's files in plan.attempt_dir.
enum class RankFile {
  kErrorFile,     // TORCHELASTIC_ERROR_FILE: "<attempt_dir>/rank_<N>.error.json"
  kProgressFile,  // DDPRUN_PROGRESS_FILE: "<attempt_dir>/rank_<N>.progress"
  kStdoutLog,     // "<attempt_dir>/rank_<N>.stdout.log" with --log-dir (plan.logs_to_dir)
  kStderrLog,     // "<attempt_dir>/rank_<N>.stderr.log" with --log-dir
  kPythonStacks,  // DDPRUN_PYTHON_STACK_FILE: "<attempt_dir>/rank_<N>.pystack"
  kStacksLog,     // "<attempt_dir>/rank_<N>.stacks" with --log-dir: stacks ddprun took
  kTraceFile,     // DDPRUN_TRACE_FILE: "<attempt_dir>/rank_<N>.trace"
};

// The path of `rank`'s `file`; empty for a log file without --log-dir (no log file).
std::string rank_file(const LaunchPlan& plan, int rank, RankFile file);

// The same, appended to `out`: for printing many ranks without a string for each.
void append_rank_file(std::string& out, const LaunchPlan& plan, int rank, RankFile file);

// This node's copy of the lines that match torchrun's --duplicate-stdout-filters (or
// stderr's), every rank of the node in one file: "<attempt_dir>/filtered_stdout.log" (or
// filtered_stderr.log) as torchrun names it when the job has one node; with several,
// "filtered_stdout.node_<K>.log", so that nodes sharing a --log-dir never write one file.
std::string filtered_log(const LaunchPlan& plan, bool is_stderr);

// How this ddprun reaches the job's other nodes: kLocal runs this node's workers only
// (one node, or one ddprun per node started by someone else); the others make it the
// head that starts an agent on every node (docs/multinode.md).
enum class LauncherKind { kLocal, kSsh, kMpirun, kSrun };
// "ssh", "mpirun", "srun" or "local".
std::string_view launcher_name(LauncherKind kind);

// Everything build_plan needs beyond the options; resolved beforehand (job_inputs.h, with
// the system calls passed in) so that build_plan stays pure.
struct PlanInputs {
  Cluster cluster;
  HostFacts host;
  int visible_gpus = 0;  // gpus.devices.size()
  VisibleGpus gpus;
  SocketInterface socket_interface;
  std::string run_id;
  std::string master_addr;
  int master_port = 0;
  bool fixed_port = true;  // false: picked free on this node, so a restart may pick anew
  int restart_count = 0;
  std::string scratch_dir;  // error files go here when there is no --log-dir
  bool stdout_is_tty = false;
  LauncherKind launcher = LauncherKind::kLocal;
  std::optional<std::int64_t> job_end_unix;  // the job's walltime end, when known
  // Nodes beyond --nnodes (head mode): each may take the place of a node that failed.
  std::vector<NodeSlots> spare_nodes;
  // By hand with c10d and no --node-rank: the launchers' rendezvous gives this node its
  // rank (rendezvous.h); until then it stands in node 1's place.
  bool rank_by_arrival = false;
  // With --numa-binding or --cpu-bind: this node's topology, the CPUs ddprun may use, and
  // what maps CUDA's GPU names to the topology's GPUs (placement.h).
  std::shared_ptr<const NodeTopology> topology;
  CpuList inherited_cpus;
  std::vector<int> renumbered_gpus;
  std::map<std::string, std::string> mig_parents;
};

// How many workers `spec` ("auto", "cpu", "gpu" or a number) means on a node with these
// facts; with `gpus_per_proc` K (0: not given), "gpu" and "auto" mean visible GPUs / K.
// Throws UsageError for "gpu" when no GPU is visible, and for GPUs that K does not divide.
int resolve_nproc(const std::string& spec, int visible_gpus, const NodeSlots& node,
                  const Cluster& cluster, const HostFacts& host, int gpus_per_proc = 0);

// What build_plan reads of the command line, and nothing else: the fields of Options
// (options.h) of the same names, which plan_options() (job_inputs.h) copies.
struct PlanOptions {
  std::string nproc_per_node = "1";  // "auto", "cpu", "gpu" or a positive integer
  std::optional<int> gpus_per_proc;
  bool virtual_local_rank = false;
  BindMode bind = BindMode::kNone;
  std::optional<std::string> log_dir;
  StreamChoice redirects;
  StreamChoice tee;
  std::optional<std::set<int>> local_ranks_filter;
  std::string role = "default";
  int max_restarts = 0;
  bool agent = false;  // an agent runs exactly what the head planned for its node
  std::vector<std::string> program;
};

// Builds the plan for one round. `env` is ddprun's own environment: thread variables the
// user already set are left alone. Throws UsageError for options that do not fit.
LaunchPlan build_plan(const PlanOptions& options, const PlanInputs& inputs, const Environment& env);

}  // namespace ddprun
