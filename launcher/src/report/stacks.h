#pragma once
// Where the ranks were: pure reading of the stacks captured before ddprun killed them
// (stack_capture.h takes them) into one line per rank, and those lines grouped like the
// error digest:
//   ddprun: where the 8 ranks still running were (before SIGKILL, after the 15 s grace):
//   ddprun:   ranks 0-6: in all_reduce <- train_step (train.py:88)
//   ddprun:   rank 7: in load_batch (data.py:41)
// Never throws but std::bad_alloc.

#include <string>
#include <string_view>

#include "report/round_result.h"

namespace ddprun {

// "in wait_forever (stuck.py:7) <- train_step (stuck.py:9)": the two innermost frames of
// the thread that took faulthandler's signal (the main thread when none blocks it), from
// faulthandler's dump; empty when it holds no frame.
std::string python_summary(std::string_view dump);

// "in stuck_in_collective <- main": the two innermost named frames of the first thread in
// eu-stack's output (`eu-stack -m -p PID`: the main thread), skipping the C and C++
// runtime's frames (libc, libstdc++, libgcc_s, the loader) and frames with no name; C++
// names without their argument lists. Empty when no frame has a name.
std::string native_summary(std::string_view eu_stack_output);

// The line that stands for `stacks`: Python frames when there are, else native ones, else
// "no stack: " and the problem.
std::string stack_summary(const StackCapture& stacks);

// The digest of every rank in `result` with stacks, after a header line "ddprun: where
// the N ranks still running were (`when`):"; `files` (may be empty) is named where the
// whole stacks are. Empty when no rank has stacks. At most 10 groups.
std::string format_stack_digest(const RoundResult& result, std::string_view when,
                                std::string_view files);

// Where the ranks with a collective trace are, per plane, in the latest collective any of
// them started (#K): who is in it and for how long, and who has not entered it, e.g.
//   ddprun:   data plane, collective #57 (all-reduce, 4.0 kB): ranks 0-1, 3 are in it (for
//   3.2 s); rank 2 has not entered it (its last: #56)
// Nothing for a plane where every rank has finished #K. Lines start "ddprun:   ".
std::string format_collectives(const RoundResult& result);

// The whole capture as a rank's stacks file holds it.
std::string format_stack_file(const StackCapture& stacks);

}  // namespace ddprun
