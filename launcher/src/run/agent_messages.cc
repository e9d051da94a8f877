#include "run/agent_messages.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "ddprun/contract/errors.h"

namespace ddprun {

bool valid_variable_name(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name.front())) != 0) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  });
}

std::string agent_hello(const Environment& forwarded) {
  nlohmann::json hello = {{"env", nlohmann::json::object()}};
  for (const auto& [name, value] : forwarded) hello["env"][name] = value;
  // Replacing invalid UTF-8 keeps the message one valid line whatever the values hold.
  return hello.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string agent_signal_message(int signal_number, const NodeEvent* cause) {
  if (cause == nullptr) return "{\"signal\":" + std::to_string(signal_number) + "}\n";
  return "{\"signal\":" + std::to_string(signal_number) + ",\"cause\":" + node_event_json(*cause) +
         "}\n";
}

namespace {

// format_membership's text on one line (its line breaks are between JSON values).
std::string membership_on_one_line(const Membership& membership) {
  std::string text = format_membership(membership);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

}  // namespace

std::string agent_membership_message(const Membership& membership) {
  // Only the ranks that do not run their first process: at the start that is none, and a
  // change costs its own ranks, not the job's (8,000 ranks would be 440 KB to every node).
  Membership changed = membership;
  std::erase_if(changed.ranks,
                [](const Membership::Member& m) { return m.state == Membership::State::kRunning; });
  std::string text = membership_on_one_line(changed);
  text.insert(1, "\"world\": " + std::to_string(membership.ranks.size()) + ", ");
  return "{\"membership\":" + text + "}\n";
}

namespace {

std::optional<Membership> parse_agent_membership(const nlohmann::json& doc) {
  const auto world = doc.find("world");
  if (!doc.is_object() || world == doc.end() || !world->is_number_unsigned() ||
      world->get<std::uint64_t>() < 1 || world->get<std::uint64_t>() > (1U << 24)) {
    return std::nullopt;
  }
  auto changed = parse_membership_part(doc.dump());
  const auto size = static_cast<int>(world->get<std::uint64_t>());
  if (!changed || (!changed->ranks.empty() && changed->ranks.back().rank >= size)) {
    return std::nullopt;
  }
  Membership whole = *changed;
  whole.ranks.clear();
  auto next = changed->ranks.begin();
  for (int rank = 0; rank < size; ++rank) {
    if (next != changed->ranks.end() && next->rank == rank) {
      whole.ranks.push_back(*next++);
    } else {
      whole.ranks.push_back({rank, Membership::State::kRunning, -1});
    }
  }
  return whole;
}

}  // namespace

std::string membership_report_line(const MembershipReport& report) {
  return std::string(kAgentAnswerMarker) + "{\"node\":" + std::to_string(report.node) +
         ",\"membership\":" + membership_on_one_line(report.part) + "}\n";
}

std::optional<MembershipReport> parse_membership_report_line(std::string_view line) {
  const auto start = line.find(kAgentAnswerMarker);
  if (start == std::string_view::npos) return std::nullopt;
  const auto doc =
      nlohmann::json::parse(line.substr(start + kAgentAnswerMarker.size()), nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("membership") ||
      !doc.contains("node") || !doc["node"].is_number_unsigned() ||
      doc["node"].get<std::uint64_t>() > (1U << 20)) {
    return std::nullopt;
  }
  auto part = parse_membership_part(doc["membership"].dump());
  if (!part) return std::nullopt;
  return MembershipReport{static_cast<int>(doc["node"].get<std::uint64_t>()), std::move(*part)};
}

AgentMessage parse_agent_message(std::string_view line) {
  const auto doc = nlohmann::json::parse(line, nullptr, false);
  const auto bad = [&] {
    return UsageError(
        "unexpected message from the head ddprun: '" + std::string(line.substr(0, 80)) + "'",
        "agents are started by a head ddprun, not by hand");
  };
  if (doc.is_discarded() || !doc.is_object()) throw bad();
  AgentMessage message;
  if (doc.contains("signal")) {
    const auto& value = doc["signal"];
    if (!value.is_number_integer() || value.get<int>() < 1 || value.get<int>() > 64) throw bad();
    message.signal_number = value.get<int>();
    if (doc.contains("cause")) {
      message.cause = parse_node_event_json(doc["cause"].dump());
      if (!message.cause) throw bad();
    }
    return message;
  }
  if (doc.contains("membership")) {
    message.membership = parse_agent_membership(doc["membership"]);
    if (!message.membership) throw bad();
    return message;
  }
  if (doc.contains("control")) {
    const auto& verb = doc["control"];
    const auto& id = doc.contains("id") ? doc["id"] : nlohmann::json();
    if (!verb.is_string() || !id.is_number_integer()) throw bad();
    message.control = parse_control_verb(verb.get<std::string>());
    if (!message.control) throw bad();
    message.control_id = id.get<int>();
    return message;
  }
  if (!doc.contains("env") || !doc["env"].is_object()) throw bad();
  for (const auto& [name, value] : doc["env"].items()) {
    if (!valid_variable_name(name) || !value.is_string()) throw bad();
    message.env[name] = value.get<std::string>();
  }
  return message;
}

void read_agent_hello(int fd, Environment& env) {
  std::string line;
  char c = 0;
  for (;;) {
    const ssize_t got = ::read(fd, &c, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw UsageError("the head ddprun closed the connection before starting");
    if (c == '\n') break;
    line += c;
    if (line.size() > (1 << 24)) throw UsageError("the head's first message is too long");
  }
  for (auto& [name, value] : parse_agent_message(line).env) env[name] = std::move(value);
}

}  // namespace ddprun
