#include "report/report.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "ddprun/common/printable.h"
#include "ddprun/common/signal_name.h"
#include "ddprun/contract/error_file.h"
#include "report/labels.h"

namespace ddprun {
namespace {

constexpr std::size_t kMaxErrorLineBytes = 1000;

}  // namespace

std::string format_launch_summary(const LaunchPlan& plan, bool logs_to_files, int restarts_spent) {
  const NodePlan& node = plan.nodes.at(static_cast<std::size_t>(plan.this_node));
  std::string text =
      "ddprun: run " + plan.run_id + ": " + std::to_string(plan.world_size) +
      (plan.world_size == 1 ? " worker" : " workers") + " on " + std::to_string(plan.nodes.size()) +
      (plan.nodes.size() == 1 ? " node" : " nodes") + " (" + node.host + ": ranks " +
      std::to_string(node.first_rank) + "-" + std::to_string(node.first_rank + node.nproc - 1) +
      "), master " + plan.master_addr + ":" + std::to_string(plan.master_port);
  if (restarts_spent > 0) {
    text +=
        ", restart " + std::to_string(restarts_spent) + " of " + std::to_string(plan.max_restarts);
  }
  text += "\n";
  // Which GPUs each of this node's ranks got, as CUDA_VISIBLE_DEVICES would name them.
  if (plan.devices.per_rank > 0) {
    std::string gpus;
    for (const RankPlan& rank : plan.ranks) {
      if (rank.node_rank != node.node_rank) continue;
      gpus += (gpus.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank.rank) + ": ";
      std::string list;
      for (const int position : rank_devices(plan, rank)) {
        list += (list.empty() ? "" : ",") +
                plan.devices.visible.devices.at(static_cast<std::size_t>(position));
      }
      gpus += list;
    }
    text += "ddprun: GPUs on " + node.host + ": " + gpus + "\n";
  }
  // Where each rank runs, one line each (--numa-binding, --cpu-bind).
  if (!plan.placement.local.empty()) {
    text += "ddprun: " + bind_mode_text(plan.placement.mode) + " on " + node.host + ":\n";
    for (std::size_t local = 0; local < plan.placement.local.size(); ++local) {
      text += "ddprun:   rank " + std::to_string(node.first_rank + static_cast<int>(local)) + ": " +
              placement_text(plan.placement.local[local]) + "\n";
    }
  }
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
    // --restart-scope rank: the replacement's row follows the others'.
    if (rank.replaced_by) text.insert(text.size() - 1, "  replaced");
  }
  return text;
}

std::string format_console_notice(bool logged, const std::string& log_folder) {
  std::string text = "ddprun: console not reading: lines it cannot take are left out of it";
  if (logged && !log_folder.empty()) {
    text += "; the log files in " + log_folder + " keep every line";
  } else {
    text += " and kept nowhere (--log-dir keeps every line)";
  }
  return text + "\n";
}

std::string format_console_dropped(std::size_t lines, std::size_t logged_lines,
                                   const std::string& log_folder) {
  std::string text = "ddprun: console not reading: " + std::to_string(lines) +
                     (lines == 1 ? " line" : " lines") + " not shown (";
  if (logged_lines == 0 || log_folder.empty()) {
    text += "kept nowhere: --log-dir keeps every line";
  } else if (logged_lines == lines) {
    text += (lines == 1 ? "it is in " : "all are in ") + log_folder;
  } else {
    text += std::to_string(logged_lines) + " of them are in " + log_folder;
  }
  return text + ")\n";
}

std::string format_exit_timeout_report(const RoundResult& result, std::chrono::milliseconds timeout,
                                       bool colour) {
  const RankResult& first = result.ranks.at(result.first_exit.value_or(0));
  std::vector<int> ranks, nodes;
  for (const std::size_t child : result.still_running) {
    const RankResult& rank = result.ranks.at(child);
    (rank.agent ? nodes : ranks).push_back(rank.agent ? rank.node_rank : rank.rank);
  }
  std::string running = ranks.empty() ? "" : format_number_set("rank", ranks);
  if (!nodes.empty()) {
    running += (running.empty() ? "" : " and ") + format_number_set("node", nodes);
  }
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", static_cast<double>(timeout.count()) / 1000.0);
  return error_label(colour) + child_label(first) + " on " + first.host + " exited (" +
         describe_wait_status(first.wait_status) + ") and " + running +
         (result.still_running.size() == 1 ? " was" : " were") + " still running " + seconds +
         " s later (--exit-timeout); stopped " +
         (result.still_running.size() == 1 ? "it" : "them") + "\n";
}

std::string format_stall_report(const RoundResult& result, std::chrono::milliseconds timeout,
                                bool colour) {
  std::vector<int> ranks;
  std::string hosts;
  for (const std::size_t child : result.behind) {
    const RankResult& rank = result.ranks.at(child);
    ranks.push_back(rank.rank);
    if (hosts.find(rank.host) == std::string::npos)
      hosts += (hosts.empty() ? "" : ", ") + rank.host;
  }
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", static_cast<double>(timeout.count()) / 1000.0);
  const std::string head = error_label(colour) + "no rank advanced for " + seconds +
                           " s (--stall-timeout, DDPRUN_PROGRESS_FILE): ";
  if (result.ahead_step == result.behind_step) {
    return head + "every rank was at step " + std::to_string(result.behind_step) +
           "; stopped the round\n";
  }
  const std::string where = result.behind_step < 0
                                ? "with no step written"
                                : "at step " + std::to_string(result.behind_step);
  return head + format_number_set("rank", ranks) + " on " + hosts +
         (ranks.size() == 1 ? " was" : " were") + " behind, " + where + " (the furthest: step " +
         std::to_string(result.ahead_step) + "); stopped the round\n";
}

std::string format_failure_report(const RankResult& failed, const std::string& error_file_text,
                                  bool colour) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.2f", failed.run_seconds);
  const std::string who = child_label(failed);
  std::string report =
      error_label(colour) + who + " (" +
      (failed.agent ? std::string() : "local rank " + std::to_string(failed.local_rank) + " on ") +
      failed.host + ", pid " + std::to_string(failed.pid) +
      ") failed first: " + describe_wait_status(failed.wait_status) + " after " + seconds + " s\n";
  if (const auto error = parse_error_file(error_file_text)) {
    // The file is the worker's text: each line is printed with its controls escaped.
    std::string_view rest = error->message;
    std::string lead = "ddprun: its error file says: ";
    while (!rest.empty()) {
      const auto end = std::min(rest.find('\n'), rest.size());
      report += lead + printable(rest.substr(0, end), kMaxErrorLineBytes) + "\n";
      rest.remove_prefix(std::min(end + 1, rest.size()));
      lead = "ddprun:   ";
    }
  }
  if (!failed.stderr_tail.empty()) {
    report += "ddprun: last " + std::to_string(failed.stderr_tail.size()) + " lines of " + who +
              "'s stderr:\n";
    for (const auto& line : failed.stderr_tail) report += "  | " + line + "\n";
  }
  return report;
}

}  // namespace ddprun
