#pragma once
// Turns the options, the environment and the scheduler's word into everything the plan
// needs (cluster, this node, master address and port, run id), identically on every node
// of a job and without talking to the other nodes. The system calls it needs are passed
// in, so tests can plan a 3-node job from three host names on one machine.

#include <functional>
#include <string>
#include <vector>

#include "cli/options.h"
#include "plan/plan.h"
#include "source.h"

namespace ddprun {

// Whether ddprun was started once per node by someone else (srun step, mpirun, an
// operator, an explicit --node-rank, by hand with --nnodes, or the head as an agent): then
// it never fans out.
bool started_per_node(const Options& options, const Cluster& cluster, const Environment& env);

// The launcher --launcher names; for "auto": srun inside a Slurm job, else mpirun when an
// MPI-capable allocation (SGE, PBS, LSF) is there and `mpirun_found`, else ssh. Returns
// kLocal when this ddprun should not fan out at all (one node, or started per node).
LauncherKind choose_launcher(const Options& options, const Cluster& cluster, const Environment& env,
                             bool mpirun_found);

// The options build_plan reads (plan.h), copied from the command line's.
PlanOptions plan_options(const Options& options);

// A network interface of this host with one of its addresses.
struct NetworkInterface {
  std::string name;     // "eth0"
  std::string address;  // "10.1.2.3", "fe80::1"
  bool loopback = false;
};

struct SystemServices {
  std::function<int()> pick_free_port;
  std::function<bool(int port)> port_is_free;
  std::function<std::string()> random_run_id;
  // The addresses `host` resolves to, as text ("10.1.2.3", "::1"); empty when it does not.
  std::function<std::vector<std::string>(const std::string& host)> resolve_host;
  // Who holds a busy port, for the error message (unset or empty: unknown).
  std::function<std::string(int port)> describe_port_user;
  // Whether `name` is an executable on PATH (unset: nothing is).
  std::function<bool(const std::string& name)> program_on_path;
  // The interfaces that are up and have an address, one entry per address (unset: unknown).
  std::function<std::vector<NetworkInterface>()> network_interfaces;
  // The local address the kernel would send from to reach `address` (a numeric address);
  // empty when there is no route (unset: unknown).
  std::function<std::string(const std::string& address)> source_address;
  // This node's topology (hwloc; throws ConfigError) and the CPUs this process may run
  // on; asked only for --numa-binding and --cpu-bind (unset: unknown).
  std::function<NodeTopology()> read_topology;
  std::function<CpuList()> inherited_cpus;
};

// The real ones (system_services.cc); PATH is looked up in `env`.
SystemServices system_services(const Environment& env);

// Ports derived from a job id fall in [kDerivedPortBase, kDerivedPortBase + kDerivedPortSpan).
inline constexpr int kDerivedPortBase = 20000;
inline constexpr int kDerivedPortSpan = 10000;

// The port every node of job `job_id` derives by itself (FNV-1a of the id, into the
// range above), so two jobs on one host rarely collide.
int port_for_job(const std::string& job_id);

// The interface NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME should name for this node's
// workers, given the master's addresses: none when the user set either variable, when
// this host has at most one interface besides loopback, or when the master is on
// loopback; otherwise the interface whose address the kernel sends from to reach the
// master. Pure: the routing lookup is passed in.
SocketInterface choose_socket_interface(
    const Environment& env, const std::string& master_addr,
    const std::vector<std::string>& master_addresses,
    const std::vector<NetworkInterface>& interfaces,
    const std::function<std::string(const std::string& address)>& source_address);

// Names the nodes of a by-hand cluster (--nnodes without a scheduler) with this node,
// `this_host`, at `node_rank`: node 0 by the master address, the others "node-rank-i".
void place_by_hand_node(Cluster& cluster, const std::string& master_addr,
                        const std::string& this_host, int node_rank);

// The numeric GPU ids the scheduler gave this job on this node (SLURM_STEP_GPUS, then
// SLURM_JOB_GPUS, then SGE_HGR_gpu); empty when none is set or one is not numeric.
std::vector<int> scheduler_gpu_ids(const Environment& env);

// Resolves the inputs for round 0 (see docs/schedulers.md, "Master address and port").
// With `check_port`, and when this node hosts rank 0, the master port must be free.
// Throws UsageError, SchedulerEnvError or ConfigError with one line saying what to do.
PlanInputs resolve_plan_inputs(const Options& options, const Environment& env,
                               const ReadFile& read_file, const HostFacts& host,
                               const SystemServices& services, bool check_port);

}  // namespace ddprun
