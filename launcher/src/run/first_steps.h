#pragma once
// When each worker reports its first step (DDPRUN_PROGRESS_FILE), without polling: an
// inotify descriptor on the folders of the round's progress files, read by the event loop
// only until every worker has written one (then it is closed), so that the start-up's last
// phase, from spawn to the first step, can be shown once with its slowest rank. It is made
// kFirstStepWatchAfter into the round (a job over by then pays nothing; closing an inotify
// descriptor waits for the kernel's grace period): a step already written then counts as
// seen then. Workers that never write a progress file cost one descriptor for the round.

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/common/unique_fd.h"

namespace ddprun {

inline constexpr std::chrono::milliseconds kFirstStepWatchAfter{1000};

class FirstSteps {
 public:
  using Clock = std::chrono::steady_clock;
  // Watches `progress_files` (index: the child; empty: a child with none), started at
  // `started`; a file that already holds a step at `now` counts as that child's first step
  // at `now`. No descriptor when none has a file or inotify is not available.
  FirstSteps(const std::vector<std::string>& progress_files, Clock::time_point started,
             Clock::time_point now);
  // Every child with a file has reported a step (the descriptor is closed).
  bool done() const noexcept { return waiting_ == 0 && seen_any_; }

  int fd() const noexcept { return inotify_.get(); }
  // Reads what inotify reported; a file now holding a step marks its child's first step.
  // Returns true when every child with a file has reported one (the descriptor is then
  // closed).
  bool on_readable(Clock::time_point now);
  // Seconds from `started` to each child's first step (nullopt: none yet, or no file).
  const std::vector<std::optional<double>>& seconds() const noexcept { return seconds_; }

 private:
  void check(std::size_t child, Clock::time_point now);

  UniqueFd inotify_;
  std::vector<std::string> files_;
  std::vector<int> watch_of_;  // each child's watch descriptor (-1: none)
  std::vector<std::optional<double>> seconds_;
  Clock::time_point started_;
  std::size_t waiting_ = 0;  // children with a file and no step yet
  bool seen_any_ = false;
};

// "ddprun: first step on 8 ranks within 2.31 s of their start (the last: rank 5 (host);
// the first: rank 0 (host) at 1.02 s)" for the console, from FirstSteps::seconds() and each child's
// rank and host (children without a step are left out); empty when no child has a step.
std::string format_first_steps(const std::vector<std::optional<double>>& seconds,
                               const std::vector<int>& ranks,
                               const std::vector<std::string>& hosts);

}  // namespace ddprun
