#include "job/job_inputs.h"

#include <algorithm>
#include <cstdint>

#include "ddprun/common/parse_int.h"
#include "ddprun/contract/env_names.h"
#include "ddprun/contract/errors.h"
#include "gpus.h"
#include "node_match.h"
#include "nodes/agents.h"
#include "schedulers.h"

namespace ddprun {
namespace {

std::uint32_t fnv1a(std::string_view text) {
  std::uint32_t hash = 2166136261u;
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 16777619u;
  }
  return hash;
}

bool is_loopback(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1";
}

std::string source_of(const Cluster& cluster) {
  if (cluster.scheduler == "local") return "this machine";
  if (cluster.scheduler == "static") return "the command line's --nnodes";
  return "the " + cluster.scheduler + " allocation";
}

int resolve_this_node(const Options& options, const Cluster& cluster, const HostFacts& host) {
  const int nodes = static_cast<int>(cluster.nodes.size());
  if (cluster.scheduler == "static") return *cluster.this_node;  // placed by hand
  if (options.node_rank) {
    if (*options.node_rank >= nodes) {
      throw UsageError("--node-rank " + std::to_string(*options.node_rank) + " is out of range: " +
                           source_of(cluster) + " has " + std::to_string(nodes) + " node(s)",
                       "give a node rank from 0 to " + std::to_string(nodes - 1));
    }
    // The head's word wins for its agents: it addressed this node by that name.
    if (!options.agent && cluster.this_node && *cluster.this_node != *options.node_rank) {
      throw UsageError("--node-rank " + std::to_string(*options.node_rank) + " contradicts " +
                           source_of(cluster) + ", which says this is node " +
                           std::to_string(*cluster.this_node),
                       "drop --node-rank, or --scheduler local to ignore the scheduler");
    }
    return *options.node_rank;
  }
  if (nodes == 1) return 0;
  return this_node_or_throw(cluster, host);
}

// Whether `address` names this machine: its host name, or an address of one of its
// interfaces.
bool names_this_host(const std::string& address, const HostFacts& host,
                     const SystemServices& services) {
  if (address == host.hostname) return true;
  if (!services.resolve_host || !services.network_interfaces) return false;
  const auto addresses = services.resolve_host(address);
  for (const auto& interface : services.network_interfaces()) {
    if (interface.loopback) continue;
    if (std::find(addresses.begin(), addresses.end(), interface.address) != addresses.end()) {
      return true;
    }
  }
  return false;
}

// torchrun's by-hand multi-node forms, one command per node with no scheduler or hostfile:
// --nnodes N with node 0 at --master-addr (or --rdzv-endpoint), and this node's
// --node-rank, or, with --rdzv-backend c10d and no node rank, a rank by host name from
// the launchers' rendezvous (rendezvous.h; node 0 is the one the endpoint names). Returns
// this node's rank, or nullopt when the rendezvous will give it.
std::optional<int> by_hand_node_rank(const Options& options, const HostFacts& host,
                                     const SystemServices& services) {
  const int nnodes = *options.nnodes;
  const std::string how =
      "give every node the same --nnodes " + std::to_string(nnodes) +
      " and --master-addr (node 0's address) with --master-port, and each its own --node-rank "
      "0-" +
      std::to_string(nnodes - 1) +
      " (or, with --rdzv-backend c10d, none); or give every node with --hostfile to one "
      "ddprun, which starts them all";
  if (!options.node_rank && options.rdzv_backend != "c10d") {
    throw UsageError("--nnodes " + std::to_string(nnodes) +
                         " without a scheduler or a hostfile needs this node's --node-rank",
                     how);
  }
  if (!options.master_addr) {
    throw UsageError("--nnodes " + std::to_string(nnodes) +
                         " without a scheduler or a hostfile needs node 0's address",
                     how);
  }
  if (options.node_rank && *options.node_rank >= nnodes) {
    throw UsageError("--node-rank " + std::to_string(*options.node_rank) +
                         " is out of range: --nnodes " + std::to_string(nnodes) +
                         " has node ranks 0-" + std::to_string(nnodes - 1),
                     how);
  }
  if (options.node_rank) return *options.node_rank;
  if (names_this_host(*options.master_addr, host, services)) return 0;
  return std::nullopt;
}

}  // namespace

void place_by_hand_node(Cluster& cluster, const std::string& master_addr,
                        const std::string& this_host, int node_rank) {
  for (std::size_t node = 0; node < cluster.nodes.size(); ++node) {
    cluster.nodes[node].host = static_cast<int>(node) == node_rank ? this_host
                               : node == 0                         ? master_addr
                                           : "node-rank-" + std::to_string(node);
  }
  cluster.this_node = node_rank;
}

SocketInterface choose_socket_interface(
    const Environment& env, const std::string& master_addr,
    const std::vector<std::string>& master_addresses,
    const std::vector<NetworkInterface>& interfaces,
    const std::function<std::string(const std::string& address)>& source_address) {
  std::string set_by_user;
  for (const char* name : {env::kNcclSocketIfname, env::kGlooSocketIfname}) {
    if (const auto value = lookup(env, name)) {
      set_by_user += std::string(set_by_user.empty() ? "" : ", ") + name + "=" + *value;
    }
  }
  if (!set_by_user.empty()) return {"", "the user's " + set_by_user + " (kept)"};
  std::vector<std::string> names;
  for (const auto& interface : interfaces) {
    if (!interface.loopback &&
        std::find(names.begin(), names.end(), interface.name) == names.end()) {
      names.push_back(interface.name);
    }
  }
  if (names.size() < 2) {
    return {"", names.empty() ? "not set: no network interface besides loopback"
                              : "not set: one network interface (" + names.front() + ")"};
  }
  if (master_addresses.empty()) {
    return {"", "not set: the master address '" + master_addr + "' does not resolve here"};
  }
  bool all_loopback = true;
  for (const auto& address : master_addresses) all_loopback = all_loopback && is_loopback(address);
  if (all_loopback) {
    return {"", "not set: the master (" + master_addr + ") is on loopback, one node"};
  }
  for (const auto& address : master_addresses) {
    if (is_loopback(address)) continue;
    const std::string source = source_address ? source_address(address) : std::string();
    if (source.empty()) continue;
    for (const auto& interface : interfaces) {
      if (interface.address != source) continue;
      if (interface.loopback) break;
      return {interface.name, "routes to the master " + address +
                                  (address == master_addr ? "" : " (" + master_addr + ")")};
    }
  }
  return {"", "not set: no route to the master (" + master_addr + ") found here"};
}

int port_for_job(const std::string& job_id) {
  return kDerivedPortBase + static_cast<int>(fnv1a(job_id) % kDerivedPortSpan);
}

std::vector<int> scheduler_gpu_ids(const Environment& env) {
  for (const char* name : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SGE_HGR_gpu"}) {
    const auto value = lookup(env, name);
    if (!value || value->empty()) continue;
    std::vector<int> ids;
    std::size_t start = 0;
    while (start <= value->size()) {
      const auto end = value->find_first_of(", ", start);
      const std::string item = value->substr(start, end == std::string::npos ? end : end - start);
      if (!item.empty()) {
        const auto id = parse_int(item);
        if (!id || *id < 0) return {};
        ids.push_back(static_cast<int>(*id));
      }
      if (end == std::string::npos) break;
      start = end + 1;
    }
    return ids;
  }
  return {};
}

PlanInputs resolve_plan_inputs(const Options& options, const Environment& env,
                               const ReadFile& read_file, const HostFacts& host,
                               const SystemServices& services, bool check_port) {
  PlanInputs inputs;
  inputs.host = host;
  if (options.agent_nodes) {
    // An agent plans from the head's node list, whatever this node's scheduler says.
    std::string text = *options.agent_nodes;
    std::replace(text.begin(), text.end(), ',', '\n');
    const ReadFile from_option = [&text](const std::string&) { return text; };
    inputs.cluster = detect_cluster(env, from_option, host, "hostfile", "--agent-nodes");
  } else {
    inputs.cluster = detect_cluster(env, read_file, host, options.scheduler, options.hostfile);
  }
  Cluster& cluster = inputs.cluster;
  if (cluster.scheduler == "local" && options.nnodes && *options.nnodes > 1 && !options.agent) {
    // By hand: this node goes by its host name, the others by their rank alone (node 0 by
    // the master address, node i as "node-rank-i"), each with as many workers as this one,
    // as under torchrun's static rendezvous. Without a rank yet, this node stands in the
    // place of node 1 until the rendezvous places it.
    const auto rank = by_hand_node_rank(options, host, services);
    inputs.rank_by_arrival = !rank;
    const std::string this_host = cluster.nodes.front().host;
    cluster.scheduler = "static";
    cluster.sources = {{"--nnodes", std::to_string(*options.nnodes)},
                       {"--master-addr", *options.master_addr}};
    if (rank) cluster.sources["--node-rank"] = std::to_string(*rank);
    cluster.nodes.assign(static_cast<std::size_t>(*options.nnodes), cluster.nodes.front());
    place_by_hand_node(cluster, *options.master_addr, this_host, rank.value_or(1));
  }
  const int nodes = static_cast<int>(cluster.nodes.size());
  cluster.this_node = resolve_this_node(options, cluster, host);
  const bool mpirun_found = services.program_on_path && services.program_on_path("mpirun");
  inputs.launcher = choose_launcher(options, cluster, env, mpirun_found);
  // An agent inside the ssh tree starts the agents below it, over ssh as the head does.
  if (options.agent && options.agent_subtree_last &&
      *options.agent_subtree_last > cluster.this_node) {
    inputs.launcher = LauncherKind::kSsh;
  }
  // Fewer nodes than given: a head that starts the others keeps the rest as spares, each
  // to take the place of a node that fails a round (prepare_round).
  const bool spares = options.nnodes && *options.nnodes < nodes &&
                      inputs.launcher != LauncherKind::kLocal && !options.agent &&
                      cluster.this_node < *options.nnodes;
  if (spares) {
    const auto first_spare = cluster.nodes.begin() + *options.nnodes;
    inputs.spare_nodes.assign(first_spare, cluster.nodes.end());
    cluster.nodes.erase(first_spare, cluster.nodes.end());
  } else if (options.nnodes && *options.nnodes != nodes) {
    throw UsageError("--nnodes " + std::to_string(*options.nnodes) + " does not match " +
                         source_of(cluster) + ", which has " + std::to_string(nodes) + " node(s)",
                     nodes == 1 && cluster.scheduler == "local"
                         ? "give the nodes with --hostfile, or run inside a scheduler's job"
                     : *options.nnodes < nodes
                         ? "drop --nnodes, or fix the allocation (spare nodes need one ddprun "
                           "on the first node that starts the others)"
                         : "drop --nnodes, or fix the allocation");
  }
  // A head on node 0 tells every agent the port, so it may pick any free one.
  const bool head_on_rank0 = inputs.launcher != LauncherKind::kLocal && cluster.this_node == 0;
  inputs.gpus = node_gpus(env, host, read_file);
  inputs.visible_gpus = static_cast<int>(inputs.gpus.devices.size());
  if (options.bind != BindMode::kNone) {
    if (!services.read_topology) throw ConfigError("this node's topology cannot be read here");
    inputs.topology = std::make_shared<const NodeTopology>(services.read_topology());
    // Another machine's topology (HWLOC_XMLFILE) has nothing to do with this mask.
    if (services.inherited_cpus && inputs.topology->this_system) {
      inputs.inherited_cpus = services.inherited_cpus();
    }
    inputs.renumbered_gpus = cuda_renumbering(inputs.gpus.devices, scheduler_gpu_ids(env));
  }

  // Master address: the option, then MASTER_ADDR from the environment (set by a job
  // script or a Kubeflow-style operator), then the first node; on one node, loopback.
  // PET_* are what operators set for torchrun's own options.
  auto env_addr = lookup(env, env::kMasterAddr);
  if (!env_addr) env_addr = lookup(env, env::kPetMasterAddr);
  if (options.master_addr) {
    inputs.master_addr = *options.master_addr;
  } else if (options.local_addr && cluster.this_node.value_or(0) == 0) {
    inputs.master_addr = *options.local_addr;  // torchrun: rank 0's node names itself
  } else if (env_addr && !env_addr->empty()) {
    inputs.master_addr = *env_addr;
  } else if (nodes > 1) {
    inputs.master_addr = cluster.nodes.front().host;
  } else {
    inputs.master_addr = "127.0.0.1";
  }
  if (nodes > 1) {
    const auto addresses = services.resolve_host(inputs.master_addr);
    if (addresses.empty()) {
      throw SchedulerEnvError("master address '" + inputs.master_addr + "' does not resolve",
                              "check /etc/hosts or DNS, or give --master-addr");
    }
    bool all_loopback = true;
    for (const auto& address : addresses) all_loopback = all_loopback && is_loopback(address);
    if (all_loopback) {
      throw SchedulerEnvError("master address '" + inputs.master_addr + "' resolves only to " +
                                  addresses.front() + " (loopback) in a job of " +
                                  std::to_string(nodes) + " nodes: other nodes cannot reach it",
                              "map the host name to its network address in /etc/hosts, or give "
                              "--master-addr");
    }
  }

  // Master port: the option, then MASTER_PORT, then derived from the job id, then (one
  // node only) a free port.
  auto env_port = lookup(env, env::kMasterPort);
  if (!env_port) env_port = lookup(env, env::kPetMasterPort);
  bool fixed_port = true;
  if (options.free_master_port) {
    // An endpoint with port 0, or --standalone: any free port on rank 0's node.
    if (nodes > 1 && !head_on_rank0) {
      throw UsageError("a free master port (port 0) needs one node, or this node to start them all",
                       "give --master-port or --rdzv-endpoint HOST:PORT (the same on every node)");
    }
    inputs.master_port = services.pick_free_port();
    fixed_port = false;
  } else if (options.master_port) {
    inputs.master_port = *options.master_port;
  } else if (env_port && !env_port->empty()) {
    const auto port = parse_int(*env_port);
    if (!port || *port < 1 || *port > 65535) {
      throw SchedulerEnvError(env_message(env::kMasterPort, *env_port, "expected a port 1-65535"),
                              "unset it, or give --master-port");
    }
    inputs.master_port = *port;
  } else if (!cluster.job_id.empty()) {
    inputs.master_port = port_for_job(cluster.job_id);
  } else if (nodes == 1 || head_on_rank0) {
    inputs.master_port = services.pick_free_port();
    fixed_port = false;
  } else {
    throw UsageError(
        "no master port for a job of " + std::to_string(nodes) + " nodes without a job id",
        "give --master-port (the same on every node)");
  }
  inputs.fixed_port = fixed_port;
  if (services.network_interfaces && services.source_address && services.resolve_host) {
    inputs.socket_interface =
        choose_socket_interface(env, inputs.master_addr, services.resolve_host(inputs.master_addr),
                                services.network_interfaces(), services.source_address);
  }
  const bool hosts_rank0 = cluster.this_node == 0;
  if (check_port && fixed_port && hosts_rank0 && !services.port_is_free(inputs.master_port)) {
    const std::string user =
        services.describe_port_user ? services.describe_port_user(inputs.master_port) : "";
    throw UsageError("master port " + std::to_string(inputs.master_port) +
                         " is already in use on this host" +
                         (user.empty() ? std::string() : " by " + user),
                     "another job may be using it: pick another port with --master-port, or "
                     "omit it on a single node to get a free one");
  }

  // Run id: every node must agree on it, so random only where there is one node.
  if (options.run_id) {
    inputs.run_id = *options.run_id;
  } else if (!cluster.job_id.empty()) {
    inputs.run_id = cluster.job_id;
  } else if (nodes == 1 || head_on_rank0) {
    inputs.run_id = services.random_run_id();
  } else {
    std::string seed = inputs.master_addr + ":" + std::to_string(inputs.master_port);
    // By hand, each node knows only its own name: the node count stands for the list.
    if (cluster.scheduler == "static") {
      seed += "," + std::to_string(nodes);
    } else {
      for (const auto& node : cluster.nodes) seed += "," + node.host;
    }
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x", fnv1a(seed));
    inputs.run_id = hex;
  }
  return inputs;
}

bool started_per_node(const Options& options, const Cluster& cluster, const Environment& env) {
  // By hand (torchrun's static and c10d forms), every node runs its own command.
  return options.agent || options.node_rank || cluster.scheduler == "static" ||
         started_once_per_node(cluster, env);
}

LauncherKind choose_launcher(const Options& options, const Cluster& cluster, const Environment& env,
                             bool mpirun_found) {
  if (options.launcher == "local" || cluster.nodes.size() < 2 ||
      started_per_node(options, cluster, env)) {
    return LauncherKind::kLocal;
  }
  if (options.launcher == "ssh") return LauncherKind::kSsh;
  if (options.launcher == "mpirun") return LauncherKind::kMpirun;
  if (options.launcher == "srun") return LauncherKind::kSrun;
  if (cluster.scheduler == "slurm") return LauncherKind::kSrun;
  const bool mpi_allocation =
      cluster.scheduler == "sge" || cluster.scheduler == "pbs" || cluster.scheduler == "lsf";
  if (mpi_allocation && mpirun_found) return LauncherKind::kMpirun;
  return LauncherKind::kSsh;
}

PlanOptions plan_options(const Options& options) {
  PlanOptions plan;
  plan.nproc_per_node = options.nproc_per_node;
  plan.gpus_per_proc = options.gpus_per_proc;
  plan.virtual_local_rank = options.virtual_local_rank;
  plan.bind = options.bind;
  plan.log_dir = options.log_dir;
  plan.redirects = options.redirects;
  plan.tee = options.tee;
  plan.local_ranks_filter = options.local_ranks_filter;
  plan.role = options.role;
  plan.max_restarts = options.max_restarts;
  plan.agent = options.agent;
  plan.program = options.program;
  return plan;
}

}  // namespace ddprun
