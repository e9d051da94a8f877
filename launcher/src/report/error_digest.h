#pragma once
// The error digest printed after a failed round: every failing child's last error line,
// identical lines across children shown once with who they came from, the root cause
// first, and the children ddprun stopped itself in one closing line:
//   ddprun: error digest (3 of 8 ranks failed; root cause first):
//   ddprun:   ranks 1, 4: RuntimeError: CUDA out of memory (root cause: rank 1 failed first)
//   ddprun:   rank 6: exit code 3
//   ddprun:   ranks 0, 2-3, 5, 7: stopped by ddprun after the failure
// Pure formatting: the caller reads the error files. Never throws but std::bad_alloc;
// thread-compatible, not signal-safe.

#include <string>
#include <string_view>
#include <vector>

#include "report/round_result.h"

namespace ddprun {

// The digest of `result`'s failures, each line starting "ddprun: " and ending in '\n'; or
// empty when `result` has no first_failure or fewer than two children failed (the failure
// report of the first one then says it all).
// `error_file_texts[i]` is the content of `result.ranks[i].error_file` (read_file_head),
// or empty when there is none; a shorter vector (or an empty one) counts the missing
// entries as empty.
// A child failed when it exited with a status other than 0 or kExitPreempted. A failed
// child other than the first failure that was killed by SIGTERM or SIGKILL (or exited
// 128 + either, as agents and shell wrappers do) counts as stopped by ddprun's teardown,
// not as an error. Agents are labelled by node ("node 2", "nodes 1-3").
// At most 10 groups are listed and each message is cut at 300 bytes.
std::string format_error_digest(const RoundResult& result,
                                const std::vector<std::string>& error_file_texts);

// The line that stands for how `child` failed, normalised so that the same error on
// different ranks gives the same line: the first line of the message in
// `error_file_text` when it parses; else the last line of its stderr that looks like an
// error (a ddprun's own lines only when no other line does); else its last non-empty
// stderr line; else its wait status ("exit code 3", "signal SIGSEGV").
std::string error_digest_line(const RankResult& child, std::string_view error_file_text);

}  // namespace ddprun
