#include "plan/plan_format.h"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "plan/rank_environment.h"
#include "plan/shell_quote.h"

namespace ddprun {
namespace {

using Json = nlohmann::ordered_json;
using Vars = std::vector<std::pair<std::string, std::string>>;

// The output, gathered in a buffer and handed to the stream in pieces of about this size.
constexpr std::size_t kPieceSize = 64 * 1024;

class Pieces {
 public:
  explicit Pieces(std::ostream& out) : out_(out) { text_.reserve(2 * kPieceSize); }
  std::string& text() { return text_; }
  void write_if_full() {
    if (text_.size() >= kPieceSize) write();
  }
  void write() {
    out_.write(text_.data(), static_cast<std::streamsize>(text_.size()));
    text_.clear();
  }

 private:
  std::ostream& out_;
  std::string text_;
};

void append_int(std::string& out, long long value) {
  char digits[24];
  out.append(digits, std::to_chars(std::begin(digits), std::end(digits), value).ptr);
}

// "4 visible (CUDA_VISIBLE_DEVICES=0,1,2,3), 2 per rank, narrowed per rank".
std::string devices_text(const DevicePlan& devices) {
  const VisibleGpus& gpus = devices.visible;
  std::string text = std::to_string(gpus.devices.size()) + " visible";
  if (!gpus.source.empty()) {
    text += " (" + gpus.source + (gpus.source_value.empty() ? "" : "=" + gpus.source_value) + ")";
  }
  if (devices.ordinals_only) {
    return text +
           ", CUDA_VISIBLE_DEVICES set to each local rank (--virtual-local-rank, as torchrun)";
  }
  if (devices.per_rank == 0) return text + ", none assigned";
  text += ", " + std::to_string(devices.per_rank) + " per rank";
  text += devices.virtual_local_rank
              ? ", CUDA_VISIBLE_DEVICES narrowed per rank (--virtual-local-rank)"
              : ", every rank sees all";
  return text;
}

// "  key          ": the start of a text line, its value in column 16 (keys up to 12
// characters; a longer key gets one space).
void append_key(std::string& out, std::string_view key) {
  out += "  ";
  out += key;
  out.append(13 - std::min<std::size_t>(12, key.size()), ' ');
}

// `text` as a JSON string, exactly as nlohmann's dump writes it (UTF-8 kept, invalid bytes
// replaced): printable ASCII without quotes or backslashes is copied, the rest goes
// through the library.
void append_json_string(std::string& out, std::string_view text) {
  const bool plain = std::all_of(text.begin(), text.end(), [](char c) {
    return c >= ' ' && c <= '~' && c != '"' && c != '\\';
  });
  if (plain) {
    out += '"';
    out += text;
    out += '"';
  } else {
    out += Json(std::string(text)).dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

// `"key": ` at `indent` spaces, after the previous member's ",\n" or the opening "{\n".
void append_member(std::string& out, std::size_t indent, std::string_view key) {
  out.append(indent, ' ');
  out += '"';
  out += key;
  out += "\": ";
}

// `"key": value` at `indent`, then `after` (the separator or the line end).
void append_int_field(std::string& out, std::size_t indent, std::string_view key, long long value,
                      std::string_view after) {
  append_member(out, indent, key);
  append_int(out, value);
  out += after;
}
void append_string_field(std::string& out, std::size_t indent, std::string_view key,
                         std::string_view value, std::string_view after) {
  append_member(out, indent, key);
  append_json_string(out, value);
  out += after;
}

// An array as dump(2) writes it with its elements at `indent`: "[]" when empty.
template <typename AppendElement>
void append_array(std::string& out, std::size_t indent, std::size_t size, AppendElement element) {
  if (size == 0) {
    out += "[]";
    return;
  }
  out += "[\n";
  for (std::size_t i = 0; i < size; ++i) {
    out.append(i == 0 ? "" : ",\n");
    out.append(indent, ' ');
    element(i);
  }
  out += "\n";
  out.append(indent - 2, ' ');
  out += "]";
}

// One element of "ranks", as nlohmann's dump(2) writes it at depth 2.
void append_json_rank(std::string& out, const LaunchPlan& plan, const RankPlan& rank,
                      const Vars& vars) {
  out += "    {\n";
  append_int_field(out, 6, "rank", rank.rank, ",\n");
  append_int_field(out, 6, "local_rank", rank.local_rank, ",\n");
  append_int_field(out, 6, "node_rank", rank.node_rank, ",\n");
  append_string_field(out, 6, "host", rank.host, ",\n");
  append_member(out, 6, "devices");
  const std::vector<int> devices = rank_devices(plan, rank);
  if (devices.empty()) {
    out += "[]";
  } else {
    out += "[\n";
    for (std::size_t i = 0; i < devices.size(); ++i) {
      out.append(i == 0 ? "" : ",\n");
      out.append(8, ' ');
      append_json_string(out,
                         plan.devices.visible.devices.at(static_cast<std::size_t>(devices[i])));
    }
    out += "\n      ]";
  }
  out += ",\n";
  if (const RankPlacement* placement = rank_placement(plan, rank)) {
    // Only this node's ranks: every node places its own.
    append_member(out, 6, "placement");
    out += "{\n";
    append_string_field(out, 8, "cpus", cpulist_text(placement->cpus), ",\n");
    append_int_field(out, 8, "cores", placement->cores, ",\n");
    append_member(out, 8, "numa_nodes");
    append_array(out, 10, placement->numa_nodes.size(),
                 [&](std::size_t n) { append_int(out, placement->numa_nodes[n]); });
    out += ",\n";
    append_member(out, 8, "gpus");
    append_array(out, 10, placement->gpus.size(),
                 [&](std::size_t g) { append_json_string(out, placement->gpus[g]); });
    out += ",\n";
    append_string_field(out, 8, "nic", placement->nic, "\n      },\n");
  }
  append_member(out, 6, "env");
  if (vars.empty()) {
    out += "{}";
  } else {
    out += "{\n";
    for (std::size_t i = 0; i < vars.size(); ++i) {
      out.append(i == 0 ? "" : ",\n");
      out.append(8, ' ');
      append_json_string(out, vars[i].first);
      out += ": ";
      append_json_string(out, vars[i].second);
    }
    out += "\n      }";
  }
  out += "\n    }";
}

template <typename Write>
std::string as_string(Write write, const LaunchPlan& plan) {
  std::ostringstream out;
  write(plan, out);
  return std::move(out).str();
}

// "4 nodes each (Slurm's --segment): 2 segments, ranks in node order within each".
std::string segments_text(int segment_size, std::size_t nodes) {
  const auto size = static_cast<std::size_t>(segment_size);
  const std::size_t count = (nodes + size - 1) / size;
  return std::to_string(segment_size) + (segment_size == 1 ? " node" : " nodes") +
         " each (Slurm's --segment): " + std::to_string(count) +
         (count == 1 ? " segment" : " segments") + ", ranks in node order within each" +
         (nodes % size != 0 && nodes > size ? "; the last one is short" : "");
}

}  // namespace

void write_plan_text(const LaunchPlan& plan, std::ostream& stream) {
  Pieces pieces(stream);
  std::string& out = pieces.text();
  const auto line = [&out](std::string_view key, std::string_view value) {
    append_key(out, key);
    out += value;
    out += '\n';
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
  if (plan.placement.mode != BindMode::kNone) {
    line("binding", bind_mode_text(plan.placement.mode) + " (each node places its own ranks)");
  }
  if (plan.segment_size > 0) {
    line("segments", segments_text(plan.segment_size, plan.nodes.size()));
  }
  for (const auto& node : plan.nodes) {
    std::string marker = node.node_rank == plan.this_node ? "  (this node)" : "";
    if (plan.segment_size > 0) {
      marker = "  segment " + std::to_string(node.node_rank / plan.segment_size) + marker;
    }
    line("node " + std::to_string(node.node_rank),
         node.host + "  ranks " + std::to_string(node.first_rank) + ".." +
             std::to_string(node.first_rank + node.nproc - 1) + marker);
    pieces.write_if_full();
  }
  Vars vars;
  std::string key;
  for (const auto& rank : plan.ranks) {
    rank_environment(plan, rank, vars);
    key = "rank ";
    append_int(key, rank.rank);
    append_key(out, key);
    for (std::size_t i = 0; i < vars.size(); ++i) {
      if (i > 0) out += ' ';
      out += vars[i].first;
      out += '=';
      append_command_word(out, vars[i].second);
    }
    out += '\n';
    if (const RankPlacement* placement = rank_placement(plan, rank)) {
      append_key(out, "");
      out += placement_text(*placement);
      out += '\n';
    }
    pieces.write_if_full();
  }
  pieces.write();
}

void write_plan_json(const LaunchPlan& plan, std::ostream& stream) {
  // Everything but "nodes" and "ranks" through the library; those two, by far the largest,
  // are written here in the same layout, one element at a time.
  Json doc;
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
  doc["segment_size"] = plan.segment_size > 0 ? Json(plan.segment_size) : Json(nullptr);
  doc["socket_ifname"] =
      plan.socket_interface.name.empty() ? Json(nullptr) : Json(plan.socket_interface.name);
  doc["socket_ifname_reason"] = plan.socket_interface.reason;
  doc["binding"] = plan.placement.mode == BindMode::kNone ? std::string("none")
                                                          : bind_mode_text(plan.placement.mode);
  Pieces pieces(stream);
  std::string& out = pieces.text();
  // Replace, not throw, on invalid UTF-8 in user-given strings.
  out = doc.dump(2, ' ', false, Json::error_handler_t::replace);
  out.resize(out.size() - 2);  // the closing "\n}": more members follow

  out += ",\n  \"nodes\": [";
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
    const NodePlan& node = plan.nodes[i];
    out += i == 0 ? "\n    {\n" : ",\n    {\n";
    append_string_field(out, 6, "host", node.host, ",\n");
    append_int_field(out, 6, "node_rank", node.node_rank, ",\n");
    append_int_field(out, 6, "nproc", node.nproc, ",\n");
    append_int_field(out, 6, "first_rank", node.first_rank, "\n    }");
    pieces.write_if_full();
  }
  out += plan.nodes.empty() ? "]" : "\n  ]";

  out += ",\n  \"ranks\": [";
  Vars vars;
  for (std::size_t i = 0; i < plan.ranks.size(); ++i) {
    rank_environment(plan, plan.ranks[i], vars);
    out += i == 0 ? "\n" : ",\n";
    append_json_rank(out, plan, plan.ranks[i], vars);
    pieces.write_if_full();
  }
  out += plan.ranks.empty() ? "]" : "\n  ]";
  out += "\n}\n";
  pieces.write();
}

std::string format_plan_text(const LaunchPlan& plan) {
  return as_string(write_plan_text, plan);
}

std::string format_plan_json(const LaunchPlan& plan) {
  return as_string(write_plan_json, plan);
}

}  // namespace ddprun
