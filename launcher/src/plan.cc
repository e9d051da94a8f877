#include "plan.h"

#include <algorithm>

#include "ddprun/contract/env_names.h"
#include "ddprun/contract/errors.h"

namespace ddprun {

int resolve_nproc(const std::string& spec, int visible_gpus, const NodeSlots& node,
                  const Cluster& cluster, const HostFacts& host) {
  if (spec == "cpu") return std::max(1, host.cpu_count);
  if (spec == "gpu") {
    if (visible_gpus == 0) {
      throw UsageError("--nproc-per-node gpu: no GPU is visible on " + host.hostname,
                       "check CUDA_VISIBLE_DEVICES, or give a number of workers");
    }
    return visible_gpus;
  }
  if (spec == "auto") {
    if (visible_gpus > 0) return visible_gpus;
    // A local machine's CPU count is no grant; a scheduler's slots are.
    if (cluster.scheduler != "local") return std::max(1, node.slots);
    return std::max(1, host.cpu_count);  // torchrun's "auto" without a GPU
  }
  return std::stoi(spec);  // validated by the command line parser
}

LaunchPlan build_plan(const Options& options, const PlanInputs& inputs, const Environment& env) {
  const Cluster& cluster = inputs.cluster;
  if (cluster.nodes.empty()) throw SchedulerEnvError("the cluster description has no nodes");
  LaunchPlan plan;
  plan.run_id = inputs.run_id;
  plan.scheduler = cluster.scheduler;
  plan.master_addr = inputs.master_addr;
  plan.master_port = inputs.master_port;
  plan.restart_count = inputs.restart_count;
  plan.max_restarts = options.max_restarts;
  plan.this_node = cluster.this_node.value_or(0);
  plan.program = options.program;
  plan.stdout_is_tty = inputs.stdout_is_tty;
  plan.logs_to_dir = options.log_dir.has_value();
  plan.threads.cpu_count = inputs.host.cpu_count;
  plan.threads.set_omp = !lookup(env, env::kOmpNumThreads);
  plan.role = options.role;
  plan.job_end_unix = inputs.job_end_unix;
  plan.nccl_async_error_handling =
      lookup(env, env::kTorchNcclAsyncErrorHandling).value_or(plan.nccl_async_error_handling);
  const std::string base = options.log_dir ? *options.log_dir : inputs.scratch_dir;
  plan.attempt_dir = base + "/attempt_" + std::to_string(inputs.restart_count);

  int next_rank = 0;
  for (std::size_t i = 0; i < cluster.nodes.size(); ++i) {
    const NodeSlots& node = cluster.nodes[i];
    NodePlan node_plan;
    node_plan.host = node.host;
    node_plan.node_rank = static_cast<int>(i);
    // An agent runs exactly what the head planned for its node.
    node_plan.nproc = options.agent ? node.slots
                                    : resolve_nproc(options.nproc_per_node, inputs.visible_gpus,
                                                    node, cluster, inputs.host);
    node_plan.first_rank = next_rank;
    next_rank += node_plan.nproc;
    plan.nodes.push_back(std::move(node_plan));
  }
  plan.world_size = next_rank;

  for (const NodePlan& node : plan.nodes) {
    for (int local = 0; local < node.nproc; ++local) {
      RankPlan rank;
      rank.rank = node.first_rank + local;
      rank.local_rank = local;
      rank.node_rank = node.node_rank;
      rank.host = node.host;
      const std::string stem = plan.attempt_dir + "/rank_" + std::to_string(rank.rank);
      if (options.log_dir) {
        rank.stdout_log = stem + ".stdout.log";
        rank.stderr_log = stem + ".stderr.log";
      }
      rank.error_file = stem + ".error.json";
      rank.progress_file = stem + ".progress";
      // torchrun's rule: a stream redirected to its file and not teed stays off the console.
      rank.console_streams =
          3 & ~(options.redirects.for_local_rank(local) & ~options.tee.for_local_rank(local));
      if (options.local_ranks_filter && options.local_ranks_filter->count(local) == 0) {
        rank.console_streams = 0;
      }
      plan.ranks.push_back(std::move(rank));
    }
  }
  return plan;
}

}  // namespace ddprun
