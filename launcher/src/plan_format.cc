#include "plan_format.h"

#include <nlohmann/json.hpp>

#include "rank_environment.h"
#include "shell_quote.h"

namespace ddprun {
namespace {

// "4 visible (CUDA_VISIBLE_DEVICES=0,1,2,3), 2 per rank, narrowed per rank".
std::string devices_text(const DevicePlan& devices) {
  const VisibleGpus& gpus = devices.visible;
  std::string text = std::to_string(gpus.devices.size()) + " visible";
  if (!gpus.source.empty()) {
    text += " (" + gpus.source + (gpus.source_value.empty() ? "" : "=" + gpus.source_value) + ")";
  }
  if (devices.per_rank == 0) return text + ", none assigned";
  text += ", " + std::to_string(devices.per_rank) + " per rank";
  text += devices.virtual_local_rank
              ? ", CUDA_VISIBLE_DEVICES narrowed per rank (--virtual-local-rank)"
              : ", every rank sees all";
  return text;
}

}  // namespace

std::string format_plan_text(const LaunchPlan& plan) {
  std::string out;
  const auto line = [&out](const std::string& key, const std::string& value) {
    out += "  " + key + std::string(13 - std::min<std::size_t>(12, key.size()), ' ') + value + "\n";
  };
  out += "ddprun launch plan\n";
  line("run id", plan.run_id);
  line("scheduler", plan.scheduler);
  line("master", plan.master_addr + ":" + std::to_string(plan.master_port));
  line("world size", std::to_string(plan.world_size) + " on " + std::to_string(plan.nodes.size()) +
                         (plan.nodes.size() == 1 ? " node" : " nodes"));
  line("restarts", std::to_string(plan.restart_count) + " of " + std::to_string(plan.max_restarts));
  line("program", quote_command(plan.program));
  line("files", plan.attempt_dir);
  line("gpus", devices_text(plan.devices));
  const SocketInterface& socket = plan.socket_interface;
  if (!socket.reason.empty()) {
    line("network", socket.name.empty()
                        ? socket.reason
                        : "NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME " + socket.name + " on node " +
                              std::to_string(plan.this_node) + " (" + socket.reason + ")");
  }
  for (const auto& node : plan.nodes) {
    std::string marker = node.node_rank == plan.this_node ? "  (this node)" : "";
    line("node " + std::to_string(node.node_rank),
         node.host + "  ranks " + std::to_string(node.first_rank) + ".." +
             std::to_string(node.first_rank + node.nproc - 1) + marker);
  }
  for (const auto& rank : plan.ranks) {
    std::string vars;
    for (const auto& [key, value] : rank_environment(plan, rank))
      vars += " " + key + "=" + quote_command({value});
    line("rank " + std::to_string(rank.rank), vars.substr(1));
  }
  return out;
}

std::string format_plan_json(const LaunchPlan& plan) {
  nlohmann::ordered_json doc;
  doc["run_id"] = plan.run_id;
  doc["scheduler"] = plan.scheduler;
  doc["master_addr"] = plan.master_addr;
  doc["master_port"] = plan.master_port;
  doc["world_size"] = plan.world_size;
  doc["this_node"] = plan.this_node;
  doc["restart_count"] = plan.restart_count;
  doc["max_restarts"] = plan.max_restarts;
  doc["program"] = plan.program;
  const VisibleGpus& gpus = plan.devices.visible;
  doc["gpus"] = {{"visible", gpus.devices},
                 {"source", gpus.source},
                 {"per_rank", plan.devices.per_rank},
                 {"virtual_local_rank", plan.devices.virtual_local_rank}};
  doc["socket_ifname"] = plan.socket_interface.name.empty()
                             ? nlohmann::ordered_json(nullptr)
                             : nlohmann::ordered_json(plan.socket_interface.name);
  doc["socket_ifname_reason"] = plan.socket_interface.reason;
  doc["nodes"] = nlohmann::ordered_json::array();
  for (const auto& node : plan.nodes) {
    doc["nodes"].push_back({{"host", node.host},
                            {"node_rank", node.node_rank},
                            {"nproc", node.nproc},
                            {"first_rank", node.first_rank}});
  }
  doc["ranks"] = nlohmann::ordered_json::array();
  for (const auto& rank : plan.ranks) {
    nlohmann::ordered_json env = nlohmann::ordered_json::object();
    for (const auto& [key, value] : rank_environment(plan, rank)) env[key] = value;
    nlohmann::ordered_json devices = nlohmann::ordered_json::array();
    for (const int position : rank_devices(plan, rank)) {
      devices.push_back(gpus.devices.at(static_cast<std::size_t>(position)));
    }
    doc["ranks"].push_back({{"rank", rank.rank},
                            {"local_rank", rank.local_rank},
                            {"node_rank", rank.node_rank},
                            {"host", rank.host},
                            {"devices", devices},
                            {"env", env}});
  }
  // Replace, not throw, on invalid UTF-8 in user-given strings.
  return doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace ddprun
