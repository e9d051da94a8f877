#include "run/membership.h"

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

}  // namespace ddprun
