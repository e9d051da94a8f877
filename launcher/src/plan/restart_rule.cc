#include "plan/restart_rule.h"

#include <sstream>

#include "ddprun/common/parse_int.h"
#include "ddprun/contract/errors.h"

namespace ddprun {

RestartRule parse_restart_on(const std::string& text) {
  RestartRule rule;
  if (text == "any") return rule;
  rule.any = false;
  std::stringstream items(text);
  std::string item;
  bool some = false;
  while (std::getline(items, item, ',')) {
    some = true;
    if (item == "signals") {
      rule.signals = true;
      continue;
    }
    if (item == "stall") {
      rule.stalls = true;
      continue;
    }
    const auto code = parse_int(item);
    if (!code || *code < 1 || *code > 255) {
      throw UsageError("--restart-on " + text + ": '" + item +
                           "' is neither 'signals', 'stall' nor an exit code 1-255",
                       "e.g. --restart-on any, --restart-on signals, --restart-on signals,stall,3");
    }
    rule.exit_codes.insert(*code);
  }
  if (!some || text.back() == ',') throw UsageError("--restart-on " + text + ": an empty item");
  return rule;
}

}  // namespace ddprun
