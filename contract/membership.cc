#include "ddprun/contract/membership.h"

#include <nlohmann/json.hpp>

namespace ddprun {

const char* membership_state_name(Membership::State state) {
  switch (state) {
    case Membership::State::kRunning:
      return "running";
    case Membership::State::kLost:
      return "lost";
    case Membership::State::kReplaced:
      return "replaced";
    case Membership::State::kDone:
      return "done";
  }
  return "lost";
}

std::string format_membership(const Membership& membership) {
  std::string text = "{\"version\": " + std::to_string(membership.version) +
                     ", \"recoveries\": " + std::to_string(membership.recoveries) +
                     ", \"ranks\": [\n";
  for (std::size_t i = 0; i < membership.ranks.size(); ++i) {
    const Membership::Member& member = membership.ranks[i];
    text += " {\"rank\": " + std::to_string(member.rank) + ", \"state\": \"" +
            membership_state_name(member.state) + "\", \"pid\": " + std::to_string(member.pid) +
            "}" + (i + 1 < membership.ranks.size() ? ",\n" : "\n");
  }
  return text + "]}\n";
}

namespace {

std::optional<Membership::State> state_named(const std::string& name) {
  for (const auto state : {Membership::State::kRunning, Membership::State::kLost,
                           Membership::State::kReplaced, Membership::State::kDone}) {
    if (name == membership_state_name(state)) return state;
  }
  return std::nullopt;
}

bool is_integer(const nlohmann::json& value) {
  return value.is_number_integer() || value.is_number_unsigned();
}

}  // namespace

std::optional<Membership> parse_membership_part(std::string_view text) {
  const auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return std::nullopt;
  const auto version = doc.find("version");
  const auto recoveries = doc.find("recoveries");
  const auto ranks = doc.find("ranks");
  if (version == doc.end() || !is_integer(*version) || recoveries == doc.end() ||
      !is_integer(*recoveries) || ranks == doc.end() || !ranks->is_array()) {
    return std::nullopt;
  }
  Membership membership;
  membership.version = version->get<long>();
  membership.recoveries = recoveries->get<int>();
  if (membership.version < 1 || membership.recoveries < 0) return std::nullopt;
  for (const auto& entry : *ranks) {
    if (!entry.is_object()) return std::nullopt;
    const auto rank = entry.find("rank");
    const auto state = entry.find("state");
    const auto pid = entry.find("pid");
    if (rank == entry.end() || !is_integer(*rank) || state == entry.end() || !state->is_string() ||
        pid == entry.end() || !is_integer(*pid)) {
      return std::nullopt;
    }
    const auto known = state_named(state->get<std::string>());
    const long previous = membership.ranks.empty() ? -1 : membership.ranks.back().rank;
    if (!known || rank->get<long>() <= previous || rank->get<long>() > (1L << 24)) {
      return std::nullopt;
    }
    membership.ranks.push_back({rank->get<int>(), *known, pid->get<pid_t>()});
  }
  return membership;
}

std::optional<Membership> parse_membership(std::string_view text) {
  auto membership = parse_membership_part(text);
  if (!membership) return std::nullopt;
  for (std::size_t i = 0; i < membership->ranks.size(); ++i) {
    if (membership->ranks[i].rank != static_cast<int>(i)) return std::nullopt;
  }
  return membership;
}

}  // namespace ddprun
