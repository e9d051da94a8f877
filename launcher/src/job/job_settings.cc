#include "job/job_settings.h"

#include <algorithm>

namespace ddprun {
namespace {

std::chrono::milliseconds from_seconds(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0));
}

}  // namespace

JobSettings job_settings(const Options& options, const std::optional<JobEndTime>& job_end,
                         std::int64_t now_unix, RunnerClock::time_point now, bool colour) {
  JobSettings settings;
  RoundPolicy& round = settings.round;
  round.shutdown_grace = from_seconds(options.shutdown_timeout_s);
  if (options.exit_timeout_s) round.exit_timeout = from_seconds(*options.exit_timeout_s);
  round.extra_stop_signals = options.signals_to_handle;
  if (options.stall_timeout_s) {
    round.stall_timeout = from_seconds(*options.stall_timeout_s);
    // Found within the timeout and a tenth of it (at most 1 s more).
    round.stall_check_every = std::clamp(*round.stall_timeout / 10, std::chrono::milliseconds(10),
                                         std::chrono::milliseconds(1000));
  }
  round.capture_stacks = options.stacks;
  round.restart_scope = options.restart_scope;
  round.starts_replacements = options.agent && options.agent_replaces;
  // An agent inside the ssh tree: a lost node below it is the head's to move.
  round.hands_up_lost_nodes = options.agent && options.agent_subtree_last.has_value();
  if (job_end && options.drain_before_s > 0 && !options.agent) {
    // The head alone keeps the clock; its agents pass the notice on.
    round.drain_signal = options.drain_signal;
    round.drain_at =
        now + std::chrono::seconds(
                  drain_time(job_end->unix_seconds, options.drain_before_s, now_unix) - now_unix);
  }
  settings.max_restarts = options.max_restarts;
  settings.restart = options.restart_on;
  settings.agent = options.agent;
  // Agents print their node's table (the head relays it) but no start line of their own.
  settings.summaries = !options.quiet && !options.agent;
  settings.tables = !options.quiet;
  settings.colour = colour;
  return settings;
}

}  // namespace ddprun
