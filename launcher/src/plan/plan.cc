#include "plan/plan.h"

#include <algorithm>
#include <charconv>
#include <iterator>

#include "ddprun/common/parse_int.h"
#include "ddprun/contract/env_names.h"
#include "ddprun/contract/errors.h"

namespace ddprun {

namespace {

std::string gpus_per_proc_flag(int k) {
  return "--gpus-per-proc " + std::to_string(k);
}

// " (CUDA_VISIBLE_DEVICES=0,1)": where this node's GPU list came from, for messages.
std::string source_text(const VisibleGpus& gpus) {
  if (gpus.source.empty()) return "";
  if (gpus.source_value.empty() && !gpus.from_cuda_visible_devices) return " (" + gpus.source + ")";
  return " (" + gpus.source + "=" + gpus.source_value + ")";
}

// The devices each of this node's `nproc` ranks owns (DevicePlan::per_rank). Throws
// UsageError when --gpus-per-proc or --virtual-local-rank asks for more than there is.
int devices_per_rank(const PlanOptions& options, const VisibleGpus& gpus, int nproc,
                     const std::string& host) {
  const int visible = static_cast<int>(gpus.devices.size());
  const int k = options.gpus_per_proc.value_or(1);
  const bool asked = options.gpus_per_proc || options.virtual_local_rank;
  if (asked) {
    const std::string flag =
        options.gpus_per_proc ? gpus_per_proc_flag(k) : std::string("--virtual-local-rank");
    // torchrun on a machine without GPUs: no outer list, so each worker is narrowed to its
    // local rank's ordinal (DevicePlan::ordinals_only).
    if (visible == 0 && !options.gpus_per_proc && !gpus.from_cuda_visible_devices) return 0;
    if (visible == 0) {
      throw UsageError(
          flag + ": no GPU is visible on " + host + source_text(gpus),
          "check CUDA_VISIBLE_DEVICES and the job's GPU request, or drop " +
              std::string(options.gpus_per_proc ? "--gpus-per-proc" : "--virtual-local-rank"));
    }
    if (static_cast<long>(nproc) * k > visible) {
      throw UsageError(flag + ": " + std::to_string(nproc) + " workers" +
                           (k > 1 ? " of " + std::to_string(k) + " GPUs" : std::string()) +
                           " need " + std::to_string(nproc * k) + " GPUs, " + host + " has " +
                           std::to_string(visible) + " visible" + source_text(gpus),
                       "give fewer workers with --nproc-per-node");
    }
  }
  return visible > 0 && static_cast<long>(nproc) * k <= visible ? k : 0;
}

// This node's ranks placed on its topology, each with the GPUs it owns (DevicePlan).
Placement place_this_node(const PlanOptions& options, const PlanInputs& inputs,
                          const LaunchPlan& plan) {
  Placement placement;
  placement.mode = options.bind;
  if (options.bind == BindMode::kNone) return placement;
  if (!inputs.topology) {
    throw UsageError(bind_mode_text(options.bind) + ": this node's topology is unknown");
  }
  PlacementRequest request;
  request.mode = options.bind;
  request.nproc = plan.nodes.at(static_cast<std::size_t>(plan.this_node)).nproc;
  request.inherited = inputs.inherited_cpus;
  request.renumbered = inputs.renumbered_gpus;
  request.mig_parents = inputs.mig_parents;
  const int k = plan.devices.per_rank;
  for (int local = 0; local < request.nproc; ++local) {
    auto& gpus = request.rank_gpus.emplace_back();
    for (int i = 0; i < k; ++i) {
      gpus.push_back(plan.devices.visible.devices.at(static_cast<std::size_t>(k * local + i)));
    }
  }
  placement.local = place_ranks(*inputs.topology, request);
  return placement;
}

}  // namespace

void append_rank_file(std::string& out, const LaunchPlan& plan, int rank, RankFile file) {
  const bool log =
      file == RankFile::kStdoutLog || file == RankFile::kStderrLog || file == RankFile::kStacksLog;
  if (log && !plan.logs_to_dir) return;
  char digits[16];
  const auto end = std::to_chars(std::begin(digits), std::end(digits), rank).ptr;
  out += plan.attempt_dir;
  out += "/rank_";
  out.append(digits, end);
  switch (file) {
    case RankFile::kErrorFile:
      out += ".error.json";
      break;
    case RankFile::kProgressFile:
      out += ".progress";
      break;
    case RankFile::kStdoutLog:
      out += ".stdout.log";
      break;
    case RankFile::kStderrLog:
      out += ".stderr.log";
      break;
    case RankFile::kPythonStacks:
      out += ".pystack";
      break;
    case RankFile::kStacksLog:
      out += ".stacks";
      break;
    case RankFile::kTraceFile:
      out += ".trace";
      break;
  }
}

std::string rank_file(const LaunchPlan& plan, int rank, RankFile file) {
  std::string path;
  append_rank_file(path, plan, rank, file);
  return path;
}

std::string filtered_log(const LaunchPlan& plan, bool is_stderr) {
  std::string path = plan.attempt_dir + (is_stderr ? "/filtered_stderr" : "/filtered_stdout");
  if (plan.nodes.size() > 1) path += ".node_" + std::to_string(plan.this_node);
  return path + ".log";
}

std::vector<int> rank_devices(const LaunchPlan& plan, const RankPlan& rank) {
  std::vector<int> positions;
  const int k = plan.devices.per_rank;
  for (int i = 0; i < k; ++i) positions.push_back(k * rank.local_rank + i);
  return positions;
}

const RankPlacement* rank_placement(const LaunchPlan& plan, const RankPlan& rank) {
  if (rank.node_rank != plan.this_node) return nullptr;
  const auto local = static_cast<std::size_t>(rank.local_rank);
  return local < plan.placement.local.size() ? &plan.placement.local[local] : nullptr;
}

int resolve_nproc(const std::string& spec, int visible_gpus, const NodeSlots& node,
                  const Cluster& cluster, const HostFacts& host, int gpus_per_proc) {
  if (gpus_per_proc > 0 && (spec == "gpu" || spec == "auto")) {
    if (visible_gpus == 0) {
      throw UsageError(
          gpus_per_proc_flag(gpus_per_proc) + ": no GPU is visible on " + host.hostname,
          "check CUDA_VISIBLE_DEVICES and the job's GPU request, or drop "
          "--gpus-per-proc");
    }
    if (visible_gpus % gpus_per_proc != 0) {
      throw UsageError(gpus_per_proc_flag(gpus_per_proc) + ": " + host.hostname + " has " +
                           std::to_string(visible_gpus) + " visible GPUs, not a multiple of " +
                           std::to_string(gpus_per_proc),
                       "give a K that divides every node's GPUs, or a number of workers "
                       "with --nproc-per-node");
    }
    return visible_gpus / gpus_per_proc;
  }
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
  return parse_int(spec).value();  // validated by the command line parser
}

LaunchPlan build_plan(const PlanOptions& options, const PlanInputs& inputs,
                      const Environment& env) {
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
  plan.segment_size = cluster.segment_size;
  plan.program = options.program;
  plan.stdout_is_tty = inputs.stdout_is_tty;
  plan.logs_to_dir = options.log_dir.has_value();
  plan.threads.cpu_count = inputs.host.cpu_count;
  plan.threads.set_omp = !lookup(env, env::kOmpNumThreads);
  plan.role = options.role;
  plan.job_end_unix = inputs.job_end_unix;
  plan.nccl_async_error_handling =
      lookup(env, env::kTorchNcclAsyncErrorHandling)
          .value_or(lookup(env, env::kNcclAsyncErrorHandling) ? ""
                                                              : plan.nccl_async_error_handling);
  const std::string base = options.log_dir ? *options.log_dir : inputs.scratch_dir;
  plan.attempt_dir = base + "/attempt_" + std::to_string(inputs.restart_count);

  int next_rank = 0;
  plan.nodes.reserve(cluster.nodes.size());
  for (std::size_t i = 0; i < cluster.nodes.size(); ++i) {
    const NodeSlots& node = cluster.nodes[i];
    NodePlan node_plan;
    node_plan.host = node.host;
    node_plan.node_rank = static_cast<int>(i);
    // An agent runs exactly what the head planned for its node.
    node_plan.nproc = options.agent
                          ? node.slots
                          : resolve_nproc(options.nproc_per_node, inputs.visible_gpus, node,
                                          cluster, inputs.host, options.gpus_per_proc.value_or(0));
    node_plan.first_rank = next_rank;
    next_rank += node_plan.nproc;
    plan.nodes.push_back(std::move(node_plan));
  }
  plan.world_size = next_rank;
  // Every node is planned as this one sees its GPUs (as its worker count); each node hands
  // out its own when it starts its workers.
  plan.devices.visible = inputs.gpus;
  plan.devices.virtual_local_rank = options.virtual_local_rank;
  plan.devices.ordinals_only = options.virtual_local_rank && inputs.gpus.devices.empty() &&
                               !inputs.gpus.from_cuda_visible_devices;
  plan.devices.per_rank = devices_per_rank(
      options, inputs.gpus, plan.nodes.at(static_cast<std::size_t>(plan.this_node)).nproc,
      inputs.host.hostname);
  plan.socket_interface = inputs.socket_interface;
  plan.placement = place_this_node(options, inputs, plan);
  plan.placement.set_device_order = plan.devices.per_rank > 0 && !plan.placement.local.empty() &&
                                    !lookup(env, env::kCudaDeviceOrder);

  plan.ranks.reserve(static_cast<std::size_t>(plan.world_size));
  for (const NodePlan& node : plan.nodes) {
    for (int local = 0; local < node.nproc; ++local) {
      RankPlan rank;
      rank.rank = node.first_rank + local;
      rank.local_rank = local;
      rank.node_rank = node.node_rank;
      rank.host = node.host;
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

std::string_view launcher_name(LauncherKind kind) {
  switch (kind) {
    case LauncherKind::kSsh:
      return "ssh";
    case LauncherKind::kMpirun:
      return "mpirun";
    case LauncherKind::kSrun:
      return "srun";
    case LauncherKind::kLocal:
      break;
  }
  return "local";
}

}  // namespace ddprun
