#include "report/control.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "ddprun/common/printable.h"
#include "ddprun/common/signal_name.h"
#include "report/stacks.h"

namespace ddprun {
namespace {

constexpr std::size_t kMaxRunIdInName = 64;
constexpr std::size_t kLastLineWidth = 60;

static_assert(std::is_trivially_copyable_v<trace::TraceFile>);

bool from_hex(std::string_view text, void* data, std::size_t size) {
  if (text.size() != size * 2) return false;
  auto* bytes = static_cast<unsigned char*>(data);
  const auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < size; ++i) {
    const int high = digit(text[2 * i]);
    const int low = digit(text[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    bytes[i] = static_cast<unsigned char>(high * 16 + low);
  }
  return true;
}

std::string cut(std::string_view text, std::size_t width) {
  if (text.size() <= width) return std::string(text);
  return std::string(text.substr(0, width - 3)) + "...";
}

std::string pad(std::string text, std::size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text;
}

std::string duration_text(double seconds) {
  const long long total = static_cast<long long>(seconds);
  char text[32];
  std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", total / 3600, total / 60 % 60, total % 60);
  return text;
}

RoundResult as_round(const JobStatus& status) {
  RoundResult result;
  for (const RankStatus& rank : status.ranks) {
    RankResult& row = result.ranks.emplace_back();
    row.rank = rank.rank;
    row.node_rank = rank.node_rank;
    row.host = rank.host;
    row.pid = rank.pid;
    row.started = true;
    row.stacks = rank.stacks;
    row.trace = rank.trace;
  }
  return result;
}

}  // namespace

std::string_view control_verb_name(ControlVerb verb) {
  switch (verb) {
    case ControlVerb::kStatus:
      return "status";
    case ControlVerb::kStacks:
      return "stacks";
    case ControlVerb::kStop:
      return "stop";
    case ControlVerb::kAttach:
      return "attach";
  }
  return "status";
}

std::optional<ControlVerb> parse_control_verb(std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  for (const ControlVerb verb :
       {ControlVerb::kStatus, ControlVerb::kStacks, ControlVerb::kStop, ControlVerb::kAttach}) {
    if (line == control_verb_name(verb)) return verb;
  }
  return std::nullopt;
}

std::string control_folder(const Environment& env, uid_t uid) {
  if (const auto runtime = lookup(env, "XDG_RUNTIME_DIR"); runtime && !runtime->empty()) {
    return *runtime + "/ddprun";
  }
  // Not TMPDIR: a scheduler's per-job TMPDIR would hide the job from the user's other shells.
  return "/tmp/ddprun-" + std::to_string(uid);
}

std::vector<std::string> control_folders_to_search(const Environment& env, uid_t uid) {
  std::vector<std::string> folders = {control_folder(env, uid)};
  for (const std::string& other :
       {"/run/user/" + std::to_string(uid) + "/ddprun", "/tmp/ddprun-" + std::to_string(uid)}) {
    if (std::find(folders.begin(), folders.end(), other) == folders.end()) {
      folders.push_back(other);
    }
  }
  return folders;
}

std::string control_socket_name(std::string_view run_id, int node_rank) {
  std::string name;
  for (const char c : run_id.substr(0, kMaxRunIdInName)) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    name += plain ? c : '_';
  }
  if (name.empty() || name.front() == '.') name.insert(0, "_");
  if (node_rank > 0) name += ".node" + std::to_string(node_rank);
  return name + ".sock";
}

std::string rank_state(bool exited, int wait_status, char proc_state) {
  if (!exited) return proc_state == 'T' || proc_state == 't' ? "stopped" : "running";
  if (WIFSIGNALED(wait_status)) return "killed by " + signal_name(WTERMSIG(wait_status));
  return "exited " + std::to_string(WEXITSTATUS(wait_status));
}

std::string format_status(const JobStatus& status) {
  std::string text = "ddprun: run " + status.run_id + " (ddprun pid " + std::to_string(status.pid) +
                     ", up " + duration_text(status.up_seconds) + "), restarts " +
                     std::to_string(status.restarts) + " of " + std::to_string(status.max_restarts);
  if (!status.console_file.empty()) text += ", detached: console in " + status.console_file;
  text += "\n";
  std::size_t host_width = 4;
  for (const RankStatus& rank : status.ranks) host_width = std::max(host_width, rank.host.size());
  text += pad("rank", 6) + pad("host", host_width + 2) + pad("pid", 9) + pad("state", 20) +
          pad("step", 9) + "last output\n";
  for (const RankStatus& rank : status.ranks) {
    text += pad(std::to_string(rank.rank), 6) + pad(rank.host, host_width + 2) +
            pad(std::to_string(rank.pid), 9) + pad(rank.state, 20) +
            pad(rank.step ? std::to_string(*rank.step) : "-", 9) +
            cut(rank.last_line, kLastLineWidth) + "\n";
  }
  for (const std::string& note : status.notes) text += "ddprun: " + note + "\n";
  return text;
}

std::string format_stacks_answer(const JobStatus& status) {
  const RoundResult round = as_round(status);
  std::string text = format_stack_digest(round, "now, on request; nothing was stopped", "");
  if (text.empty()) {
    text = "ddprun: no rank of run " + status.run_id + " is running\n";
  } else {
    text +=
        "ddprun:   (each rank is read at its own instant: ranks that are moving show at "
        "different places and collectives; ranks that are stuck do not)\n";
  }
  for (const RankStatus& rank : status.ranks) {
    if (!rank.stacks) continue;
    text += "--- rank " + std::to_string(rank.rank) + " (" + rank.host + ", pid " +
            std::to_string(rank.pid) + ") ---\n" + format_stack_file(*rank.stacks);
    if (!text.empty() && text.back() != '\n') text += '\n';
  }
  for (const std::string& note : status.notes) text += "ddprun: " + note + "\n";
  return text;
}

std::string agent_control_message(ControlVerb verb, int id) {
  return "{\"control\":\"" + std::string(control_verb_name(verb)) +
         "\",\"id\":" + std::to_string(id) + "}\n";
}

std::string agent_answer_line(int id, const std::vector<RankStatus>& ranks) {
  nlohmann::json doc;
  doc["id"] = id;
  doc["ranks"] = nlohmann::json::array();
  for (const RankStatus& rank : ranks) {
    nlohmann::json row = {{"rank", rank.rank}, {"node", rank.node_rank}, {"host", rank.host},
                          {"pid", rank.pid},   {"state", rank.state},    {"last", rank.last_line}};
    if (rank.step) row["step"] = *rank.step;
    if (rank.stacks) {
      row["native"] = rank.stacks->native;
      row["python"] = rank.stacks->python;
      row["problem"] = rank.stacks->problem;
    }
    if (rank.trace) {
      row["trace"] = to_hex(&rank.trace->file, sizeof rank.trace->file);
      row["trace_read_ns"] = rank.trace->read_ns;
    }
    doc["ranks"].push_back(std::move(row));
  }
  // Invalid UTF-8 in a worker's line is replaced rather than thrown on.
  return std::string(kAgentAnswerMarker) +
         doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::optional<AgentAnswer> parse_agent_answer(std::string_view line) {
  const auto start = line.find(kAgentAnswerMarker);
  if (start == std::string_view::npos) return std::nullopt;
  const auto doc =
      nlohmann::json::parse(line.substr(start + kAgentAnswerMarker.size()), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return std::nullopt;
  try {
    AgentAnswer answer;
    answer.id = doc.at("id").get<int>();
    for (const auto& row : doc.at("ranks")) {
      RankStatus& rank = answer.ranks.emplace_back();
      rank.rank = row.at("rank").get<int>();
      rank.node_rank = row.at("node").get<int>();
      rank.host = row.at("host").get<std::string>();
      rank.pid = row.at("pid").get<pid_t>();
      rank.state = row.at("state").get<std::string>();
      rank.last_line = row.at("last").get<std::string>();
      if (row.contains("step")) rank.step = row["step"].get<long long>();
      if (row.contains("native")) {
        rank.stacks =
            StackCapture{row.at("native").get<std::string>(), row.at("python").get<std::string>(),
                         row.at("problem").get<std::string>()};
      }
      if (row.contains("trace")) {
        TraceSnapshot snapshot;
        if (from_hex(row["trace"].get<std::string>(), &snapshot.file, sizeof snapshot.file)) {
          snapshot.read_ns = row.at("trace_read_ns").get<std::int64_t>();
          rank.trace = snapshot;
        }
      }
    }
    return answer;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

namespace {

constexpr std::pair<NodeEvent::Kind, const char*> kEventNames[] = {
    {NodeEvent::Kind::kFailed, "failed"}, {NodeEvent::Kind::kStopped, "stopped"},
    {NodeEvent::Kind::kNotice, "notice"}, {NodeEvent::Kind::kSetupFailed, "setup_failed"},
    {NodeEvent::Kind::kLost, "lost"},
};
constexpr std::size_t kMaxEventText = 512;

}  // namespace

const char* node_event_name(NodeEvent::Kind kind) {
  for (const auto& [named, text] : kEventNames) {
    if (named == kind) return text;
  }
  return "failed";
}

std::string node_event_json(const NodeEvent& event) {
  return nlohmann::json{{"event", node_event_name(event.kind)},
                        {"node", event.node},
                        {"nodes", event.nodes},
                        {"code", event.code},
                        {"signal", event.signal},
                        {"what", event.what}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<NodeEvent> parse_node_event_json(std::string_view json) {
  const auto doc = nlohmann::json::parse(json, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("event")) return std::nullopt;
  const auto in_range = [&](const char* key, int low, int high) -> std::optional<int> {
    const auto it = doc.find(key);
    if (it == doc.end() || !it->is_number_integer()) return std::nullopt;
    const auto value = it->get<long long>();
    if (value < low || value > high) return std::nullopt;
    return static_cast<int>(value);
  };
  NodeEvent event;
  bool known = false;
  for (const auto& [kind, text] : kEventNames) {
    if (doc["event"].is_string() && doc["event"].get<std::string>() == text) {
      event.kind = kind;
      known = true;
    }
  }
  const auto node = in_range("node", 0, 1 << 20);
  // Optional (a ddprun before it wrote none): 1.
  const auto nodes = doc.contains("nodes") ? in_range("nodes", 1, 1 << 20) : std::optional<int>(1);
  const auto code = in_range("code", 0, 255);
  const auto sig = in_range("signal", 0, 64);
  const auto what = doc.find("what");
  if (!known || !node || !nodes || !code || !sig || what == doc.end() || !what->is_string()) {
    return std::nullopt;
  }
  event.node = *node;
  event.nodes = *nodes;
  event.code = *code;
  event.signal = *sig;
  event.what = printable(what->get<std::string>(), kMaxEventText);
  return event;
}

std::string node_event_line(const NodeEvent& event) {
  return std::string(kAgentAnswerMarker) + node_event_json(event) + "\n";
}

std::optional<NodeEvent> parse_node_event_line(std::string_view line) {
  const auto start = line.find(kAgentAnswerMarker);
  if (start == std::string_view::npos) return std::nullopt;
  return parse_node_event_json(line.substr(start + kAgentAnswerMarker.size()));
}

}  // namespace ddprun
