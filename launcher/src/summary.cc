#include "summary.h"

#include <cstdio>

namespace ddprun {

std::string format_launch_summary(const LaunchPlan& plan, bool logs_to_files) {
  const NodePlan& node = plan.nodes.at(static_cast<std::size_t>(plan.this_node));
  std::string text =
      "ddprun: run " + plan.run_id + ": " + std::to_string(plan.world_size) +
      (plan.world_size == 1 ? " worker" : " workers") + " on " + std::to_string(plan.nodes.size()) +
      (plan.nodes.size() == 1 ? " node" : " nodes") + " (" + node.host + ": ranks " +
      std::to_string(node.first_rank) + "-" + std::to_string(node.first_rank + node.nproc - 1) +
      "), master " + plan.master_addr + ":" + std::to_string(plan.master_port);
  if (plan.restart_count > 0) {
    text += ", restart " + std::to_string(plan.restart_count) + " of " +
            std::to_string(plan.max_restarts);
  }
  text += "\n";
  if (logs_to_files) text += "ddprun: logs in " + plan.attempt_dir + "\n";
  return text;
}

std::string format_rank_table(const RoundResult& result) {
  std::string text = "ddprun:  rank  local  pid      status                time      peak RSS\n";
  for (const auto& rank : result.ranks) {
    const std::string status =
        rank.exited ? describe_wait_status(rank.wait_status) : std::string("not started");
    char row[256];
    if (rank.agent) {
      // A remote node's own table is printed there; here only how its agent ended.
      std::snprintf(row, sizeof row, "ddprun: %-12s  %-7d  %-20s  %7.2f s  (%s)\n",
                    child_label(rank).c_str(), static_cast<int>(rank.pid), status.c_str(),
                    rank.run_seconds, rank.host.c_str());
    } else {
      std::snprintf(row, sizeof row, "ddprun: %5d  %5d  %-7d  %-20s  %7.2f s  %6.1f MB\n",
                    rank.rank, rank.local_rank, static_cast<int>(rank.pid), status.c_str(),
                    rank.run_seconds, static_cast<double>(rank.max_rss_kb) / 1024.0);
    }
    text += row;
  }
  return text;
}

}  // namespace ddprun
