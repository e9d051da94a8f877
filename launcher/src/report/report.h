#pragma once
// What ddprun tells the user around a run: a short block at the start, a per-rank table
// at the end, and the report of a failure. Pure formatting; the job decides what to print
// (nothing with --quiet but errors).

#include <chrono>
#include <cstddef>
#include <string>

#include "ddprun/contract/environment.h"
#include "plan/plan.h"
#include "report/round_result.h"

namespace ddprun {

// "ddprun: run abc: 4 workers on 1 node (vm: ranks 0-3), master 127.0.0.1:29500" and,
// with a log folder, where the logs go. `restarts_spent`: of --max-restarts, counted as the
// verdict that asked for this round counts them (under --restart-scope rank the replacements
// too, which TORCHELASTIC_RESTART_COUNT leaves out).
std::string format_launch_summary(const LaunchPlan& plan, bool logs_to_files, int restarts_spent);

// One row per child of this node: exit status, run time, peak resident memory.
std::string format_rank_table(const RoundResult& result);

// Which rank failed and how, the message from its error file when `error_file_text` (the
// file's content, or empty) holds one, and the last lines of its stderr. With `colour`,
// "error:" is bold red.
// --exit-timeout ran out: who exited first, and who was still running `timeout` later.
// "ddprun: error: no rank advanced for 30 s (--stall-timeout): ranks 2-3 were behind, at step
// 11 (the furthest: step 12); stopped the round".
std::string format_stall_report(const RoundResult& result, std::chrono::milliseconds timeout,
                                bool colour);

std::string format_exit_timeout_report(const RoundResult& result, std::chrono::milliseconds timeout,
                                       bool colour);

std::string format_failure_report(const RankResult& failed, const std::string& error_file_text,
                                  bool colour = false);

// The console stopped taking lines (output_relay.h): the notice given once, when the first
// line is left out of it (`logged`: a log file has that line), and, after a round, how
// many `lines` it did not show, `logged_lines` of them in the log files in `log_folder`.
std::string format_console_notice(bool logged, const std::string& log_folder);
std::string format_console_dropped(std::size_t lines, std::size_t logged_lines,
                                   const std::string& log_folder);

}  // namespace ddprun
