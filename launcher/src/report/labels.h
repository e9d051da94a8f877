#pragma once
// The words ddprun's messages share (reports, the error digest, stacks, preflight): how a
// child ended, what to call it, sets of numbers, and the "error:" label. Pure, but for
// colour_wanted (isatty).

#include <string>
#include <string_view>
#include <vector>

#include "ddprun/contract/environment.h"
#include "report/round_result.h"

namespace ddprun {

// How a child ended, e.g. "exit code 3" or "signal SIGKILL".
std::string describe_wait_status(int wait_status);

// "rank 3", "node 2" (a remote agent) or "the agents' launcher" (srun or mpirun).
std::string child_label(const RankResult& child);

// "rank 3", "ranks 0-7, 12, 14-15" for `noun` "rank"; `numbers` need not be sorted or
// unique but must not be empty. Past 8 runs, the rest is counted: "ranks 0, 2, ..., 14
// and 5 more".
std::string format_number_set(std::string_view noun, std::vector<int> numbers);

// "ddprun: error: ", with "error:" in bold red when `colour`.
std::string error_label(bool colour);

// Whether ddprun may colour what it writes to the terminal `fd`: a terminal, TERM not
// "dumb", and NO_COLOR (no-color.org) unset or empty.
bool colour_wanted(int fd, const Environment& env);

}  // namespace ddprun
