// Slurm reader. Variable meanings follow the sbatch/srun manuals ("OUTPUT ENVIRONMENT
// VARIABLES"); the hostlist and counts forms are checked against scontrol in the tests.

#include <map>

#include "ddprun/contract/errors.h"
#include "node_match.h"
#include "schedulers.h"
#include "variables.h"

namespace ddprun {

namespace {

// Checks that a counts variable has one entry per host of `list`.
std::vector<int> counts_for(const EnvEntry& counts, const EnvEntry& list, std::size_t hosts) {
  std::vector<int> values = env_counts(counts);
  if (values.size() != hosts) {
    throw SchedulerEnvError(env_message(counts.name, counts.value,
                                        "expected " + std::to_string(hosts) +
                                            " counts, one per host in " + list.name + " (got " +
                                            std::to_string(values.size()) + ")"));
  }
  return values;
}

void check_num_nodes(const std::optional<EnvEntry>& num, const EnvEntry& list, std::size_t hosts,
                     Cluster& cluster) {
  if (!num) return;
  note(cluster, *num);
  if (static_cast<std::size_t>(env_int(*num)) != hosts) {
    throw SchedulerEnvError(
        env_message(num->name, num->value,
                    "expected " + std::to_string(hosts) + ", the number of hosts in " + list.name));
  }
}

// SLURM_JOB_SEGMENT_SIZE (srun and salloc with --segment, Slurm 25.11): the allocation's
// groups of nodes on one block. Slurm requires a node count above the segment size to be a
// multiple of it; a step on part of the job, or a value that breaks that rule, still runs,
// with a warning, since the groups' boundaries in the node list are then unknown.
void read_segment_size(const Environment& env, const EnvEntry& list, std::size_t job_nodes,
                       Cluster& cluster) {
  const std::optional<EnvEntry> segment = first_set(env, {"SLURM_JOB_SEGMENT_SIZE"});
  if (!segment) return;
  note(cluster, *segment);
  const int size = env_int(*segment);
  if (size < 1) {
    throw SchedulerEnvError(
        env_message(segment->name, segment->value, "expected a segment size of at least 1"));
  }
  cluster.segment_size = size;
  const std::size_t nodes = cluster.nodes.size();
  const auto every = static_cast<std::size_t>(size);
  if (nodes != job_nodes) {
    cluster.warnings.push_back(segment->name + "=" + segment->value + " groups the job's " +
                               std::to_string(job_nodes) + " nodes, but " + list.name + " has " +
                               std::to_string(nodes) +
                               ": the segments' boundaries among this step's nodes are unknown");
  } else if (nodes > every && nodes % every != 0) {
    cluster.warnings.push_back(segment->name + "=" + segment->value + " does not divide the " +
                               std::to_string(nodes) + " nodes of " + list.name +
                               ": the last segment is short, and ranks follow the node order");
  }
}

}  // namespace

bool slurm_detected(const Environment& env) {
  return first_set(env, {"SLURM_JOB_ID", "SLURM_JOBID"}).has_value();
}

Cluster read_slurm(const ReaderInput& input) {
  const Environment& env = input.env;
  Cluster cluster;
  cluster.scheduler = "slurm";

  // The job's allocation.
  const std::optional<EnvEntry> job_list = first_set(env, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (!job_list) {
    throw SchedulerEnvError(
        env_missing_message("SLURM_JOB_NODELIST",
                            "expected the job's node list (run ddprun inside an sbatch script, "
                            "salloc or srun)"));
  }
  note(cluster, *job_list);
  const std::vector<std::string> job_hosts = env_hostlist(*job_list);
  require_distinct(*job_list, job_hosts);
  check_num_nodes(first_set(env, {"SLURM_JOB_NUM_NODES", "SLURM_NNODES"}), *job_list,
                  job_hosts.size(), cluster);
  std::vector<int> job_slots(job_hosts.size(), 1);
  if (const std::optional<EnvEntry> tasks = first_set(env, {"SLURM_TASKS_PER_NODE"})) {
    note(cluster, *tasks);
    job_slots = counts_for(*tasks, *job_list, job_hosts.size());
    for (int slots : job_slots) {
      if (slots < 1) {
        throw SchedulerEnvError(
            env_message(tasks->name, tasks->value, "expected at least 1 task on every node"));
      }
    }
  }
  if (const std::optional<EnvEntry> cpus = first_set(env, {"SLURM_JOB_CPUS_PER_NODE"})) {
    note(cluster, *cpus);
    counts_for(*cpus, *job_list, job_hosts.size());
  }
  if (const std::optional<EnvEntry> id = first_set(env, {"SLURM_JOB_ID", "SLURM_JOBID"})) {
    note(cluster, *id);
    cluster.job_id = id->value;
  }

  // Inside a step (srun) the step's nodes are the job's, one ddprun per node.
  const std::optional<EnvEntry> step_list = first_set(env, {"SLURM_STEP_NODELIST"});
  const EnvEntry& list = step_list ? *step_list : *job_list;
  if (step_list) {
    note(cluster, *step_list);
    const std::vector<std::string> step_hosts = env_hostlist(*step_list);
    require_distinct(*step_list, step_hosts);
    check_num_nodes(first_set(env, {"SLURM_STEP_NUM_NODES"}), *step_list, step_hosts.size(),
                    cluster);
    if (const std::optional<EnvEntry> tasks = first_set(env, {"SLURM_STEP_TASKS_PER_NODE"})) {
      note(cluster, *tasks);
      for (int count : counts_for(*tasks, *step_list, step_hosts.size())) {
        if (count != 1) {
          throw SchedulerEnvError(
              env_message(tasks->name, tasks->value,
                          "expected 1 task per node: ddprun is one agent per node and starts "
                          "the workers itself"),
              "start it with srun --ntasks-per-node=1 (or srun -N N -n N)");
        }
      }
    }
    std::map<std::string_view, std::size_t> job_index;
    for (std::size_t i = 0; i < job_hosts.size(); ++i) job_index.emplace(job_hosts[i], i);
    for (const std::string& host : step_hosts) {
      auto it = job_index.find(host);
      if (it == job_index.end()) {
        throw SchedulerEnvError(env_message(step_list->name, step_list->value,
                                            "names host '" + host + "', which is not in " +
                                                job_list->name + "=\"" + job_list->value + "\""));
      }
      cluster.nodes.push_back({host, job_slots[it->second]});
    }
  } else {
    for (std::size_t i = 0; i < job_hosts.size(); ++i) {
      cluster.nodes.push_back({job_hosts[i], job_slots[i]});
    }
  }

  read_segment_size(env, list, job_hosts.size(), cluster);

  // This node: SLURM_NODEID (relative to the step inside one), checked against the name.
  if (const std::optional<EnvEntry> node_id = first_set(env, {"SLURM_NODEID"})) {
    note(cluster, *node_id);
    const int index = env_int(*node_id);
    if (static_cast<std::size_t>(index) >= cluster.nodes.size()) {
      throw SchedulerEnvError(env_message(node_id->name, node_id->value,
                                          "expected a node index below " +
                                              std::to_string(cluster.nodes.size()) +
                                              ", the number of hosts in " + list.name));
    }
    const std::optional<int> by_name = match_host(cluster.nodes, input.host.hostname).unique();
    if (by_name && *by_name != index) {
      throw SchedulerEnvError(env_message(
          node_id->name, node_id->value,
          "expected " + std::to_string(*by_name) + ": this host '" + input.host.hostname +
              "' is node " + std::to_string(*by_name) + " ('" +
              cluster.nodes[static_cast<std::size_t>(*by_name)].host + "') of " + list.name));
    }
    cluster.this_node = index;
  } else {
    set_this_node_from_host(cluster, input.host);
  }
  return cluster;
}

}  // namespace ddprun
