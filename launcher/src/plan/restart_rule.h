#pragma once
// Which failures --restart-on lets a restart fix, as the command line gives them: parsed
// once by the command line (cli/finish_options.cc) with parse_restart_on, beside its type
// (restart_rule.cc); used by the restart policy (run/restart_policy.h). Pure.

#include <set>
#include <string>

namespace ddprun {

struct RestartRule {
  bool any = true;             // every failure ("any", the default)
  bool signals = false;        // a worker killed by a signal, or a node lost
  bool stalls = false;         // a round stopped by --stall-timeout
  std::set<int> exit_codes;    // workers exiting with one of these
  bool allow_repeats = false;  // --restart-repeated: restart even the same failure again
};

// --restart-scope: what a worker's failure restarts. kJob: every rank (a new round, today's
// default); kRank: only the lost rank, started again in the same round while the others
// go on (docs/fault-tolerance.md, "Restarting only the lost rank"); one node only.
enum class RestartScope { kJob, kRank };

// "any", or a comma list of "signals", "stall" and exit codes 1-255. Throws UsageError.
RestartRule parse_restart_on(const std::string& text);

}  // namespace ddprun
