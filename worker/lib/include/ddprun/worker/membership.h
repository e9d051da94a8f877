#pragma once
// Reading DDPRUN_MEMBERSHIP_FILE under ddprun --restart-scope rank (docs/environment.md,
// "The membership file"): which rank was lost, and when its replacement runs. No LibTorch.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "ddprun/contract/membership.h"

namespace ddprun::worker {

// The file at `path` as it is now; nullopt while there is none (ddprun writes it once every
// rank has started, and always whole). Throws EnvError for a file that is not a membership.
std::optional<Membership> read_membership(const std::string& path);

// Waits until the file at `path` exists and `ready` says yes, watching its folder with
// inotify (no polling of the file), and returns it. Every `slice` it also asks `give_up`,
// and throws what that throws (a stop signal, say). Throws EnvError after `timeout`.
Membership wait_for_membership(const std::string& path,
                               const std::function<bool(const Membership&)>& ready,
                               std::chrono::milliseconds timeout,
                               const std::function<void()>& give_up = {},
                               std::chrono::milliseconds slice = std::chrono::milliseconds(200));

// Which group a process of `rank` with pid `self` joins when it starts: 0 for the rank's
// first process ("running" with its pid), the count of recoveries for a replacement
// ("replaced" with its pid) once no rank is lost (the group every process joins then,
// survivors included); nullopt while the file does not say yet (a replacement starts
// before ddprun writes its pid; another rank lost is not yet replaced).
std::optional<int> group_generation(const Membership& membership, int rank, pid_t self);

// Whether the survivors of group `generation` may join the next one: a replacement was
// started since (`recoveries` went up) and no rank is still lost. The group to join is
// then `recoveries`.
bool replacements_running(const Membership& membership, int generation);

}  // namespace ddprun::worker
